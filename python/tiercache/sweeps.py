"""Sweeps: many (trace, configuration) runs, on local threads or Ray.

:func:`sweep` takes the cross product of traces and a grid of options and
returns one DataFrame row per run: ``trace``, the configuration columns
(named and valued as given), then every field of ``tiercache sim --json``
(``baseline`` flattened to ``baseline_mean_response_us`` ...), with the names
of docs/results.md. An option whose name is also a result field
(``line_size``, ``eviction`` ...) holds the result (``line_size`` in bytes,
as in ``sim --json`` and the sweep CSV); the value as given is kept as
``NAME_given``.

Every finished run is written at once to ``CACHE_DIR/KEY.parquet``, KEY being
a hash of (trace content, configuration, tiercache build). A sweep that is
interrupted resumes where it stopped, and repeating one costs nothing.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import _native
from . import _plain

__all__ = ["sweep", "configurations", "run_key", "default_cache_dir", "build_id"]


def default_cache_dir() -> Path:
    """``$TIERCACHE_CACHE_DIR``, else ``~/.cache/tiercache/runs``."""
    env = os.environ.get("TIERCACHE_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tiercache" / "runs"


_hash_memo: dict[tuple, str] = {}


def _file_sha256(path: str | os.PathLike) -> str:
    p = os.path.realpath(path)
    st = os.stat(p)
    memo = (p, st.st_size, st.st_mtime_ns)
    if memo not in _hash_memo:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _hash_memo[memo] = h.hexdigest()
    return _hash_memo[memo]


def build_id() -> str:
    """tiercache version plus a hash of the compiled simulator: a rebuilt
    simulator never reuses results of another build."""
    return f"{_native.__version__}+{_file_sha256(_native.__file__)[:16]}"


def _canonical(config: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in config.items():
        if v is None:
            continue
        out[_native.canonical_option(k)] = _plain(v)
    return dict(sorted(out.items()))


def run_key(trace: str | os.PathLike, config: Mapping[str, Any]) -> str:
    """Cache key of one run: sha256 of (trace content, configuration, build)."""
    doc = {"trace_sha256": _file_sha256(trace), "config": _canonical(config), "build": build_id()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def configurations(grid: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The configurations of a grid: the cross product of a dict of lists (a
    scalar is one value), in the order of the keys; a list of dicts is taken
    as explicit configurations."""
    shape = "a dict of option -> list of values, or a list of configuration dicts"
    if isinstance(grid, (str, bytes, os.PathLike)) or not hasattr(grid, "__iter__"):
        raise TypeError(f"grid: expected {shape}, got {type(grid).__name__} {grid!r}")
    if isinstance(grid, Mapping):
        keys = list(grid)
        values = [
            list(v) if hasattr(v, "__iter__") and not isinstance(v, (str, bytes, os.PathLike, Mapping)) else [v]
            for v in grid.values()
        ]
        for k, v in zip(keys, values):
            if len(v) == 0:
                raise ValueError(f"grid option {k}: empty list of values")
        return [dict(zip(keys, combo)) for combo in itertools.product(*values)]
    configs = list(grid)
    for c in configs:
        if not isinstance(c, Mapping):
            raise TypeError(f"grid: expected {shape}, got a list holding {type(c).__name__} {c!r}")
    return [dict(c) for c in configs]


def _run_one(trace: str, config: dict[str, Any]) -> str:
    """One run, as the JSON text of ``tiercache sim --json`` (executed in workers)."""
    from . import _simulate_json

    return _simulate_json(trace, {k: _plain(v) for k, v in config.items()})


#: Fields of the ``baseline`` object of ``--mode cache`` (flattened as ``baseline_FIELD``).
BASELINE_FIELDS = ("mean_response_us", "p50_response_us", "p99_response_us", "hdd_utilization")


def _flatten(result: dict[str, Any]) -> dict[str, Any]:
    """``baseline`` flattened as the sweep CSV does (docs/results.md)."""
    out = {}
    for k, v in result.items():
        if k == "baseline":
            for bk in BASELINE_FIELDS if v is None else v:
                out[f"baseline_{bk}"] = None if v is None else v.get(bk)
        else:
            out[k] = v
    return out


def _write_cache(path: Path, key: str, trace: str, config: dict, result_json: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "key": [key],
            "build": [build_id()],
            "trace": [trace],
            "trace_sha256": [_file_sha256(trace)],
            "config_json": [json.dumps(_canonical(config), sort_keys=True)],
            "result_json": [result_json],
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".parquet")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)  # atomic: a killed sweep never leaves half a file
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _read_cache(path: Path) -> str | None:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path, columns=["result_json"]).column("result_json")[0].as_py()
    except Exception:  # unreadable cache entry: run again
        return None


def _ray_active(ray_address: str | None):
    if ray_address is not None:
        try:
            import ray
        except ImportError as e:
            raise ImportError("ray_address was given but Ray is not installed: pip install 'tiercache[ray]'") from e
        if not ray.is_initialized():
            ray.init(address=ray_address)
        return ray
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return ray
    return None


def sweep(
    traces: str | os.PathLike | Iterable[str | os.PathLike],
    grid: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    ray_address: str | None = None,
    workers: int | None = None,
    cache_dir: str | os.PathLike | None | bool = None,
    out: str | os.PathLike | None = None,
    progress: bool = True,
    on_result: Callable[[dict[str, Any]], None] | None = None,
):
    """Run every (trace, configuration) of ``traces`` x ``grid``.

    ``grid``: options of :func:`tiercache.simulate` mapped to lists of values,
    e.g. ``{"cache_size": ["1%", "5%", "10%"], "eviction": ["lru", "arc"]}``
    (a scalar is a fixed option), or a list of explicit configuration dicts.

    Runs go to Ray tasks when ``ray_address`` is given (``"auto"``, or
    ``"ray://host:10001"``; Ray is initialised with it if needed) or when
    ``ray.init()`` has already been called; otherwise to ``workers`` local
    threads (default: the number of CPUs; each run releases the GIL). On Ray, the trace paths must be
    readable by the workers.

    ``cache_dir`` (default :func:`default_cache_dir`; ``False`` disables
    caching) holds one Parquet file per finished run; ``out`` also writes
    the returned DataFrame as Parquet (the input of ``tiercache plot``).

    Returns a pandas DataFrame in the order traces x grid, with
    ``df.attrs["runs_executed"]`` and ``df.attrs["runs_cached"]``.

    ``on_result(row)`` is called with each run's trace, configuration and
    result after the run is stored (an exception there stops the sweep;
    a KeyboardInterrupt is an interruption the next call resumes from).
    """
    import pandas as pd

    if isinstance(traces, (str, os.PathLike)):
        traces = [traces]
    traces = [os.fspath(t) for t in traces]
    configs = configurations(grid)
    from . import _check_types

    for c in configs:
        _check_types({k: _plain(v) for k, v in c.items()})
    for t in traces:
        if not os.path.exists(t):
            raise FileNotFoundError(f"trace {t} does not exist")
    cache: Path | None
    if cache_dir is False:
        cache = None
    elif cache_dir is None or cache_dir is True:
        cache = default_cache_dir()
    else:
        cache = Path(cache_dir)

    jobs = [(t, c) for t in traces for c in configs]
    keys = [run_key(t, c) for t, c in jobs]
    results: list[str | None] = [None] * len(jobs)
    if cache is not None:
        for i, k in enumerate(keys):
            p = cache / f"{k}.parquet"
            if p.exists():
                results[i] = _read_cache(p)
    todo = [i for i, r in enumerate(results) if r is None]
    n_cached = len(jobs) - len(todo)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(jobs), initial=n_cached, desc="tiercache sweep", unit="run")

    def finished(i: int, res: str) -> None:
        results[i] = res
        if cache is not None:
            _write_cache(cache / f"{keys[i]}.parquet", keys[i], jobs[i][0], jobs[i][1], res)
        if bar is not None:
            bar.update(1)
        if on_result is not None:
            on_result({"trace": jobs[i][0], **jobs[i][1], "result": json.loads(res)})

    try:
        if todo:
            ray = _ray_active(ray_address)
            if ray is not None:
                remote = ray.remote(num_cpus=1)(_run_one)
                pending = {remote.remote(*jobs[i]): i for i in todo}
                while pending:
                    done, _ = ray.wait(list(pending), num_returns=1)
                    for ref in done:
                        finished(pending.pop(ref), ray.get(ref))
            else:
                # Threads, not processes: the native run releases the GIL,
                # and threads need no pickling and never import the
                # caller's script again (a process pool started with
                # ``spawn`` does, which breaks a script without an
                # ``if __name__ == "__main__"`` guard).
                n = workers or os.cpu_count() or 1
                with cf.ThreadPoolExecutor(max_workers=min(n, len(todo)), thread_name_prefix="tiercache-sweep") as ex:
                    futs = {ex.submit(_run_one, *jobs[i]): i for i in todo}
                    try:
                        for f in cf.as_completed(futs):
                            finished(futs[f], f.result())
                    except BaseException:
                        for f in futs:
                            f.cancel()
                        raise
    finally:
        if bar is not None:
            bar.close()

    rows = []
    for (t, c), k, res in zip(jobs, keys, results):
        row: dict[str, Any] = {"trace": t}
        result = _flatten(json.loads(res))
        for ck, cv in c.items():
            row[f"{ck}_given" if ck in result else ck] = cv
        for rk, rv in result.items():
            if rk == "trace":
                continue
            row[rk] = rv
        row["run_key"] = k
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs["runs_executed"] = len(todo)
    df.attrs["runs_cached"] = n_cached
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        df.to_parquet(out, index=False)
    return df
