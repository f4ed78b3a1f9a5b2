"""The simulation modes beyond the SSD cache (``mode`` ssd, ssc, ssc-v, tier,
tica, ucache, srac), run by the ``tiercache`` command itself so that the
result is exactly what ``tiercache sim --mode MODE --json`` prints.

The command is found as ``$TIERCACHE_BIN``, else ``tiercache`` on ``PATH``,
else ``target/release/tiercache`` of the source tree this package was
installed from or is run in.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ._native import OptionError

#: Every ``--mode`` of ``tiercache sim``.
MODES = ("cache", "ssd", "ssc", "ssc-v", "tier", "tica", "ucache", "srac")


def check_mode(mode: Any) -> str:
    if not isinstance(mode, str):
        raise TypeError(f"option mode: expected a string, got {type(mode).__name__} (allowed: {', '.join(MODES)})")
    if mode not in MODES:
        raise OptionError(f"option mode: unknown mode '{mode}' (allowed: {', '.join(MODES)})")
    return mode


def _binary() -> str:
    env = os.environ.get("TIERCACHE_BIN")
    if env:
        return env
    found = shutil.which("tiercache")
    if found:
        return found
    for root in (Path.cwd(), *Path.cwd().parents, Path(__file__).resolve().parents[2]):
        cand = root / "target" / "release" / "tiercache"
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    raise FileNotFoundError(
        "mode other than 'cache' runs the tiercache command, which was not found: "
        "build it (cargo build --release --bin tiercache) and put it on PATH or set TIERCACHE_BIN"
    )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-").replace("twolbs-", "2lbs-")


def simulate_json(trace: str, options: dict[str, Any]) -> str:
    """JSON text of ``tiercache sim --trace TRACE --json`` with ``options``."""
    args = [_binary(), "sim", "--trace", trace, "--json"]
    for k, v in options.items():
        if v is None or v is False:
            continue
        if v is True:
            args.append(_flag(k))
        else:
            args += [_flag(k), str(v)]
    if not os.path.exists(trace):
        raise FileNotFoundError(f"trace {trace} does not exist")
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        msg = p.stderr.strip().removeprefix("tiercache: error: ")
        if "unexpected argument" in msg or "invalid value" in msg:
            raise OptionError(msg.splitlines()[0] if msg else "invalid option")
        raise ValueError(msg)
    return p.stdout
