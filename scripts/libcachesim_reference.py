#!/usr/bin/env python3
"""Reference hit ratios from libCacheSim for tiercache's exactness tests.

Converts the shared real traces into libCacheSim's oracleGeneral binary format
(24-byte records: u32 timestamp, u64 object id, u32 size, i64 next access) in a
temporary directory, runs LRU, FIFO, ARC and S3FIFO with the libcachesim PyPI
package's defaults (object sizes ignored, cache size counted in objects) at
several cache sizes per trace, and writes `tests/reference/libcachesim.json`.

Trace expansion (the same as tiercache's readers):
- ARC `.lis` (zstd text, `start nblocks ignore reqno` per line): each line is
  `nblocks` single-page requests for pages start .. start+nblocks-1;
- CloudPhysics `w106.trace.xz`: big-endian u32 block ids, one per request.

Every record gets timestamp 0, so libCacheSim's default TTL (300 days from the
insertion time) can never expire an object.

Regenerate (needs `pip install libcachesim numpy` and the `zstd` binary):

    python3 scripts/libcachesim_reference.py [--traces /work/shared/traces] \
        [--out tests/reference/libcachesim.json]
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import libcachesim as lcs

POLICIES = {
    "lru": lambda n: lcs.LRU(n),
    "fifo": lambda n: lcs.FIFO(n),
    "arc": lambda n: lcs.ARC(n),
    "s3fifo": lambda n: lcs.S3FIFO(n),
}

ORACLE_GENERAL = np.dtype(
    [("ts", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")]
)
assert ORACLE_GENERAL.itemsize == 24


def arc_lis_pages(path: Path) -> np.ndarray:
    """Expand an ARC `.lis.zst` trace into one page id per request."""
    raw = subprocess.run(
        ["zstd", "-dc", str(path)], check=True, capture_output=True
    ).stdout
    fields = np.array(raw.split(), dtype=np.int64).reshape(-1, 4)
    start, count = fields[:, 0], fields[:, 1]
    if (count <= 0).any():
        raise ValueError(f"{path}: a line has nblocks <= 0")
    # start repeated count times, plus 0..count-1 within each line.
    base = np.repeat(start, count)
    first = np.repeat(np.cumsum(count) - count, count)
    return base + (np.arange(len(base)) - first)


def cloudphysics_ids(path: Path) -> np.ndarray:
    """Decode a CloudPhysics trace: big-endian u32 block ids."""
    raw = lzma.decompress(path.read_bytes())
    if len(raw) % 4:
        raise ValueError(f"{path}: length {len(raw)} is not a multiple of 4")
    return np.frombuffer(raw, dtype=">u4").astype(np.int64)


def write_oracle_general(ids: np.ndarray, out: Path) -> None:
    rec = np.zeros(len(ids), dtype=ORACLE_GENERAL)
    rec["id"] = ids
    rec["size"] = 1
    rec["next"] = -1
    rec.tofile(out)


def main() -> int:
    repo = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default="/work/shared/traces", type=Path)
    ap.add_argument(
        "--out", default=repo / "tests/reference/libcachesim.json", type=Path
    )
    args = ap.parse_args()

    # (name, relative path, decoder, sizes: absolute or fractions of unique ids)
    traces = [
        ("OLTP", "arc/OLTP.lis.zst", arc_lis_pages, [1000, 2000, 5000, 10000, 15000]),
        ("P2", "arc/P2.lis.zst", arc_lis_pages, [0.01, 0.05, 0.10, 0.20]),
        ("w106", "cloudphysics/w106.trace.xz", cloudphysics_ids, [0.01, 0.05, 0.10, 0.20]),
    ]

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, rel, decode, sizes in traces:
            path = args.traces / rel
            ids = decode(path)
            unique = int(len(np.unique(ids)))
            og = Path(tmp) / f"{name}.oracleGeneral"
            write_oracle_general(ids, og)
            print(f"{name}: {len(ids)} requests, {unique} unique", file=sys.stderr)
            for size in sizes:
                n = size if isinstance(size, int) else int(unique * size)
                for policy, make in POLICIES.items():
                    reader = lcs.TraceReader(
                        str(og),
                        lcs.TraceType.ORACLE_GENERAL_TRACE,
                        lcs.ReaderInitParam(ignore_obj_size=True),
                    )
                    t = time.time()
                    miss, _ = make(n).process_trace(reader)
                    print(
                        f"  {policy:7} {n:7}: hit {1 - miss:.6f} ({time.time() - t:.1f} s)",
                        file=sys.stderr,
                    )
                    results.append(
                        {
                            "trace": name,
                            "trace_path": rel,
                            "requests": int(len(ids)),
                            "unique": unique,
                            "policy": policy,
                            "cache_size_objects": n,
                            "hit_ratio": round(1.0 - miss, 8),
                        }
                    )

    doc = {
        "generator": "scripts/libcachesim_reference.py",
        "libcachesim_version": lcs.__version__
        if hasattr(lcs, "__version__")
        else "unknown",
        "notes": "Fully associative, insert on every miss, object sizes ignored "
        "(cache size in objects), libcachesim default parameters.",
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(results)} results to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
