#!/usr/bin/env python3
"""List long Rust functions and long files in production code.

Scans `crates/**/src/**/*.rs` (not `tests/`, `benches/`, `examples/`, and
not `#[cfg(test)] mod` blocks inside the files) and prints:
- every function longer than N lines (default 100), and
- every file longer than F lines (default 600).

Usage: scripts/long_functions.py [-n N] [-f F] [ROOT]
Exit status is 0 even when something is listed (it is a report, not a gate),
unless --strict is given.
"""
import argparse
import os
import re
import sys

FN_RE = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?"
    r"(?:extern\s+\"[^\"]*\"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)"
)
TEST_MOD_RE = re.compile(r"^\s*#\[cfg\(test\)\]\s*$")


def strip_line(line, in_block_comment):
    """Remove comments and string/char literal contents, for brace counting."""
    out = []
    i = 0
    n = len(line)
    while i < n:
        if in_block_comment:
            j = line.find("*/", i)
            if j < 0:
                return "".join(out), True
            i = j + 2
            in_block_comment = False
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            in_block_comment = True
            i += 2
            continue
        if c == '"':
            i += 1
            while i < n and line[i] != '"':
                i += 2 if line[i] == "\\" else 1
            i += 1
            continue
        if c == "'":
            # char literal ('a', '\n', '{') vs lifetime ('a)
            m = re.match(r"'(\\.|[^\\'])'", line[i:])
            if m:
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return "".join(out), in_block_comment


def scan(path):
    """Yield (name, start_line, length) for each function in a file, skipping test modules."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    in_bc = False
    stack = []  # (name, start, depth_at_open) for fns; None for test-mod skip
    depth = 0
    pending = None  # fn whose body brace has not been seen yet
    skip_test_from = None  # depth at which a #[cfg(test)] mod opened
    cfg_test = False
    nest = 0  # ( and [ depth, so `[u64; 4]` in a signature is not a `;`
    results = []
    for idx, raw in enumerate(lines, 1):
        code, in_bc = strip_line(raw, in_bc)
        if skip_test_from is None:
            if TEST_MOD_RE.match(raw):
                cfg_test = True
            elif cfg_test and re.match(r"^\s*(pub\s+)?mod\s+\w+\s*\{", code):
                skip_test_from = depth
                cfg_test = False
            elif code.strip():
                cfg_test = False if not code.strip().startswith("#") else cfg_test
            m = FN_RE.match(code)
            if m:
                pending = (m.group(1), idx)
        for ch in code:
            if ch == "{":
                if pending is not None and skip_test_from is None:
                    stack.append((pending[0], pending[1], depth))
                    pending = None
                depth += 1
            elif ch == "}":
                depth -= 1
                if skip_test_from is not None and depth == skip_test_from:
                    skip_test_from = None
                    continue
                if stack and stack[-1][2] == depth:
                    name, start, _ = stack.pop()
                    results.append((name, start, idx - start + 1))
            elif ch in "([":
                nest += 1
            elif ch in ")]":
                nest -= 1
            elif ch == ";" and pending is not None and nest == 0:
                pending = None  # declaration without body (trait item)
    return results, len(lines) - (1 if lines and lines[-1] == "" else 0)


def production_files(root):
    crates = os.path.join(root, "crates")
    for dirpath, dirnames, filenames in os.walk(crates):
        dirnames[:] = [
            d for d in dirnames if d not in ("target", "tests", "benches", "examples", ".git")
        ]
        parts = dirpath.split(os.sep)
        if "src" not in parts:
            continue
        for fn in sorted(filenames):
            if fn.endswith(".rs"):
                yield os.path.join(dirpath, fn)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--max-fn", type=int, default=100, help="function line limit")
    ap.add_argument("-f", "--max-file", type=int, default=600, help="file line limit")
    ap.add_argument("--strict", action="store_true", help="exit 1 when anything is listed")
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    a = ap.parse_args()
    root = os.path.normpath(a.root)
    long_fns, long_files = [], []
    for path in sorted(production_files(root)):
        fns, nlines = scan(path)
        rel = os.path.relpath(path, root)
        if nlines > a.max_file:
            long_files.append((nlines, rel))
        for name, start, length in fns:
            if length > a.max_fn:
                long_fns.append((length, rel, start, name))
    print(f"functions over {a.max_fn} lines: {len(long_fns)}")
    for length, rel, start, name in sorted(long_fns, reverse=True):
        print(f"  {length:5d}  {rel}:{start}  {name}")
    print(f"files over {a.max_file} lines: {len(long_files)}")
    for nlines, rel in sorted(long_files, reverse=True):
        print(f"  {nlines:5d}  {rel}")
    if a.strict and (long_fns or long_files):
        sys.exit(1)


if __name__ == "__main__":
    main()
