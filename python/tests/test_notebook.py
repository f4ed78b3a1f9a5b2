"""The examples/ notebook runs from top to bottom on a shared trace."""

from __future__ import annotations

import os

import pytest

from conftest import ROOT, SHARED, shared_trace


def test_example_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    shared_trace("arc/OLTP.lis.zst")
    monkeypatch.setenv("TIERCACHE_TRACES", str(SHARED))
    monkeypatch.setenv("TIERCACHE_CACHE_DIR", str(tmp_path / "runs"))
    nb = nbformat.read(ROOT / "examples" / "sweep.ipynb", as_version=4)
    # run in a scratch copy of the folder so the figure is not written into the checkout
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert (tmp_path / "oltp-hit-ratio.svg").exists()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert os.environ["TIERCACHE_CACHE_DIR"] == str(tmp_path / "runs")
