#!/usr/bin/env python3
"""Record what `tiercache sim --json` prints for every mode on the shared
sample traces, as the reference that refactoring must not change.

    python3 scripts/sim_reference.py [--bin target/release/tiercache]

writes tests/reference/sim_modes.json: the commit it was built from, and
for each configuration its arguments and its JSON. The test
`crates/apps/cli/tests/system/sim_reference.rs` runs the same arguments through the
current binary and requires the same JSON, key by key. Regenerate only when
a result is meant to change, and say why in the commit message.
"""
import argparse, json, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"
MSR = "samples/msr-cambridge1-sample.csv"
SYSTOR = "samples/systor17-traces-sample.csv.gz"

# (name, trace relative to ../shared/traces, arguments after --trace)
CONFIGS = [
    ("cache-lru-timed", MSR, ["--cache-size", "5%"]),
    ("cache-arc-write-through", MSR, ["--cache-size", "10%", "--eviction", "arc", "--write-policy", "write-through"]),
    ("cache-8way-nhit", MSR, ["--cache-size", "1MiB", "--assoc", "8-way", "--admission", "nhit", "--no-timing"]),
    ("cache-s3fifo-64k-lines", MSR, ["--cache-size", "64lines", "--line-size", "64KiB", "--eviction", "s3fifo"]),
    ("cache-2lbs-closed", MSR, ["--cache-size", "2%", "--admission", "2lbs", "--replay", "closed", "--queue-depth", "4"]),
    ("cache-systor", SYSTOR, ["--cache-size", "5%", "--eviction", "arc"]),
    ("ssd-hybrid", MSR, ["--mode", "ssd", "--cache-size", "64MiB"]),
    ("ssc-page", MSR, ["--mode", "ssc", "--cache-size", "64MiB", "--ftl", "page"]),
    ("ssc-v-page-log", MSR, ["--mode", "ssc-v", "--cache-size", "64MiB", "--ftl", "page-log"]),
    ("flashtier-log", MSR, ["--design", "flashtier", "--cache-size", "16MiB", "--segment-size", "256KiB"]),
    ("flashtier-log-lz4", MSR, ["--mode", "ssc", "--ftl", "log", "--cache-size", "16MiB", "--compress", "lz4"]),
    ("tier-oodt", MSR, ["--mode", "tier", "--fast-tier-size", "8%"]),
    ("tier-policies-requests", MSR, ["--mode", "tier", "--fast-tier-size", "8%", "--tier-policy", "frequency", "--no-timing"]),
    ("tica-adaptive", MSR, ["--mode", "tica", "--cache-size", "10%", "--dram-size", "1%"]),
    ("tica-wed-no-timing", MSR, ["--mode", "tica", "--tica-policy", "wed", "--cache-size", "10%", "--dram-size", "1%", "--no-timing"]),
    ("ucache", MSR, ["--mode", "ucache", "--cache-size", "10%", "--dram-size", "1%"]),
    ("srac", MSR, ["--mode", "srac", "--cache-size", "10%", "--dram-size", "1%"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "tiercache"))
    ap.add_argument("--out", default=str(ROOT / "tests" / "reference" / "sim_modes.json"))
    a = ap.parse_args()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    runs = []
    for name, trace, args in CONFIGS:
        path = TRACES / trace
        if not path.exists():
            sys.exit(f"sim_reference: {path} is missing (the shared traces are needed)")
        cmd = [a.bin, "sim", "--trace", str(path), *args, "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"sim_reference: {name}: {out.stderr.strip()}")
        v = json.loads(out.stdout)
        v.pop("trace", None)  # the path as given on this machine
        runs.append({"name": name, "trace": trace, "args": args, "json": v})
        print(f"{name}: ok", file=sys.stderr)
    doc = {"generator": "scripts/sim_reference.py", "commit": commit, "runs": runs}
    Path(a.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.out} ({len(runs)} runs, commit {commit})", file=sys.stderr)


if __name__ == "__main__":
    main()
