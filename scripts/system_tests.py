#!/usr/bin/env python3
"""The system tier: the test targets that run real programs (the tiercache
binary, fio, qemu, nbd tools, mkfs, loop devices and mounts, python3) or
replay the whole shared traces (minutes of CPU).

A crate marks such a target `test = false` in its Cargo.toml (`[[test]]`), so
the default `cargo test` (the fast tier) skips it; this script finds them with
`cargo metadata`.

    scripts/system_tests.py args            the cargo arguments that select them all
                                            (`--workspace --test NAME ...`)
    scripts/system_tests.py run [--jobs N] [--save-reference] [-- TEST-ARGS]
                                            build them, then run N test groups at a
                                            time (default: the CPU count), each in its
                                            crate's directory as `cargo test` would;
                                            prints each group's result and wall time,
                                            and the output of those that failed.

A group is one test binary, or one module of a target made of modules
(`tests/NAME/main.rs`, such as the CLI's `system`): such a target is built
and linked once and each of its modules runs as a process of its own,
labelled `crate/module`, as if it were a target.

The times of the last run (target/system-tier-times.json) order the next one,
longest first; without them (a fresh clone) the times of a reference run,
scripts/system_tier_times.json, do, so that the long targets start first
and do not end the run alone. `run --save-reference` writes that file from
the run's times.
"""

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_TIMES = ROOT / "scripts" / "system_tier_times.json"


def metadata():
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)


def system_targets(meta):
    """[(package name, [target names])] of the targets marked `test = false`."""
    found = []
    for p in meta["packages"]:
        names = sorted(
            t["name"] for t in p["targets"]
            if "test" in t["kind"] and not t.get("test", True)
        )
        if names:
            found.append((p["name"], names))
    return found


def selection(meta):
    """The cargo arguments that select every system target. With `--workspace`
    the features are unified as for the fast tier's `cargo test --workspace`,
    so both tiers share one build of the dependencies (a `-p CRATE` selection
    resolves features for that crate alone and rebuilds what differs). A name
    may select a fast target of another crate too: `build` leaves it out."""
    names = sorted({n for _, targets in system_targets(meta) for n in targets})
    return ["--workspace"] + [a for n in names for a in ("--test", n)]


def build(meta):
    """Build every system target; [(label, executable, crate directory, test
    selection arguments)]."""
    dirs = {p["id"]: str(Path(p["manifest_path"]).parent) for p in meta["packages"]}
    names = {p["id"]: p["name"] for p in meta["packages"]}
    wanted = {(p, n) for p, targets in system_targets(meta) for n in targets}
    cmd = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics"]
    proc = subprocess.run(cmd + selection(meta), cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit("system tier: the build failed")
    binaries = []
    for line in proc.stdout.splitlines():
        m = json.loads(line)
        if m.get("reason") != "compiler-artifact" or not m.get("executable"):
            continue
        pid, target = m["package_id"], m["target"]["name"]
        if "test" in m["target"]["kind"] and (names[pid], target) in wanted:
            exe = m["executable"]
            if Path(m["target"]["src_path"]).name == "main.rs":
                # A target made of modules (tests/NAME/main.rs) runs as one
                # process per module, labelled by the module.
                for module, tests in modules(exe, dirs[pid]).items():
                    binaries.append((f"{names[pid]}/{module}", exe, dirs[pid],
                                     ["--exact"] + tests))
            else:
                binaries.append((f"{names[pid]}/{target}", exe, dirs[pid], []))
    return binaries


def modules(exe, cwd):
    """{module: [full test names]} of a test binary, by first path segment
    (tests at the top level form the module "main")."""
    out = subprocess.run([exe, "--list", "--format", "terse"], cwd=cwd, check=True,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        if not line.endswith(": test"):
            continue
        name = line[: -len(": test")]
        module = name.split("::", 1)[0] if "::" in name else "main"
        found.setdefault(module, []).append(name)
    return found


def run(jobs, test_args, save_reference=False):
    meta = metadata()
    t0 = time.monotonic()
    binaries = build(meta)
    built = time.monotonic() - t0
    print(f"== system tier: {len(binaries)} test groups built in {built:.0f} s", flush=True)
    times_file = Path(meta["target_directory"]) / "system-tier-times.json"
    last = {}
    for f in (REFERENCE_TIMES, times_file):
        try:
            last.update(json.loads(f.read_text()))
        except (OSError, ValueError):
            pass
    binaries.sort(key=lambda b: -last.get(b[0], 0.0))
    logs = Path(meta["target_directory"]) / "system-tier-logs"
    logs.mkdir(exist_ok=True)

    def one(b):
        label, exe, cwd, select = b
        log = logs / (label.replace("/", "--") + ".log")
        start = time.monotonic()
        with open(log, "w") as f:
            proc = subprocess.Popen([exe] + test_args + select, cwd=cwd,
                                    stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
            # wait4: the CPU time of the test and of the programs it waited
            # for (servers, fio, ...), to see how busy a group keeps the cores.
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        cpu = usage.ru_utime + usage.ru_stime
        return label, proc.returncode, time.monotonic() - start, cpu, log

    failed, times, cpu_total = [], {}, 0.0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for fut in as_completed([pool.submit(one, b) for b in binaries]):
            label, rc, secs, cpu, log = fut.result()
            cpu_total += cpu
            times[label] = secs
            print(f"{'ok' if rc == 0 else 'FAILED':6} {secs:7.1f} s  {cpu:7.1f} s CPU  {label}",
                  flush=True)
            if rc != 0:
                failed.append((label, log))
    times_file.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    if save_reference and not failed:
        REFERENCE_TIMES.write_text(
            json.dumps({k: round(v) for k, v in times.items()}, indent=1, sort_keys=True) + "\n")
    for label, log in failed:
        print(f"\n==== {label} failed; its output ({log}):\n{log.read_text()}", flush=True)
    total = time.monotonic() - t0
    print(f"== system tier: {len(binaries) - len(failed)} of {len(binaries)} groups passed "
          f"in {total:.0f} s ({jobs} at a time; the tests took {cpu_total:.0f} s of CPU, "
          f"{cpu_total / max(total - built, 1):.2f} cores on average)", flush=True)
    return 1 if failed else 0


def main():
    argv = sys.argv[1:]
    test_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, test_args = argv[:i], argv[i + 1:]
    if argv[:1] == ["args"] and len(argv) == 1:
        print(" ".join(selection(metadata())))
        return 0
    if argv[:1] == ["run"]:
        jobs = os.cpu_count() or 2
        rest = argv[1:]
        save = "--save-reference" in rest
        rest = [a for a in rest if a != "--save-reference"]
        if rest[:1] == ["--jobs"] and len(rest) == 2 and rest[1].isdigit():
            jobs, rest = int(rest[1]), []
        if not rest and jobs > 0:
            return run(jobs, test_args, save)
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
