#!/usr/bin/env python3
"""File size and assertion density of the library crates (STYLE.md 1 and 13).

Fails when, in the library sources of directkv, directkv-raft and
directkv-raft-node (binaries' `main.rs` excluded):
  * a file is over MAX_LINES lines (all of it, tests included), or
  * a file over DENSE_FROM lines has fewer than FILE_MIN runtime assertions per
    1,000 lines of its code (code before `#[cfg(test)]`, blank and comment
    lines excluded; `const _: () = assert!` is compile-time and not counted), or
  * directkv's overall figure is under OVERALL_MIN;
and when a file of the command-line tool's sources (LINES_ONLY: a binary,
held to the length limit only) is over MAX_LINES lines.

Files still over a limit when the check came in are in ALLOW below. The list
only shrinks: an entry for a file that now meets the limits is an error too,
so the list always tells the truth.

Usage: structure.py [--quiet]
"""
import os
import re
import sys

MAX_LINES = 700
DENSE_FROM = 200
FILE_MIN = 10.0
OVERALL_MIN = 30.0
MAIN = "crates/directkv/src"
ROOTS = [MAIN, "crates/directkv-raft/src", "crates/directkv-raft-node/src"]
BINARIES = {"crates/directkv-raft-node/src/main.rs"}
LINES_ONLY = ["crates/directkv-cli/src"]
ASSERT = re.compile(r"\b(?:debug_)?assert(?:_eq|_ne)?!\s*\(")

# Files over a limit when the check came in, with the limits they break.
# This list only shrinks; the restructuring of db/, backup/, restore/ and
# lib.rs empties it.
ALLOW: dict = {}


def measure(path):
    """(all lines, code lines, runtime assertions) of one file."""
    text = open(path, encoding="utf-8").read()
    total = len(text.splitlines())
    # The unit tests: from `#[cfg(test)]` on a `mod` to the end (a test-only
    # item elsewhere in the file is code like any other).
    tests = re.search(r"^[ \t]*#\[cfg\(test\)\]\s*(?:(?:#\[[^\]]*\]|//[^\n]*)\s*)*mod\s", text, re.M)
    if tests:
        text = text[: tests.start()]
    code = asserts = 0
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("//"):
            continue
        code += 1
        if s.startswith("const _: () = assert!"):
            continue
        asserts += len(ASSERT.findall(s))
    return total, code, asserts


def files():
    for root in ROOTS + LINES_ONLY:
        for d, _, names in os.walk(root):
            for f in sorted(names):
                p = os.path.join(d, f)
                # A `tests.rs` is a unit-test module split out of its parent.
                if f.endswith(".rs") and f != "tests.rs" and p not in BINARIES:
                    yield root, p


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    quiet = "--quiet" in sys.argv
    broken = {}
    code_all = asserts_all = 0
    rows = []
    for root, p in files():
        total, code, asserts = measure(p)
        if root == MAIN:
            code_all += code
            asserts_all += asserts
        density = 1000 * asserts / max(code, 1)
        rows.append((p, total, code, asserts, density))
        why = set()
        if total > MAX_LINES:
            why.add("lines")
        if total > DENSE_FROM and density < FILE_MIN and root not in LINES_ONLY:
            why.add("density")
        if why:
            broken[p] = why
    errors = []
    for p, total, code, asserts, density in rows:
        why = broken.get(p, set())
        extra = why - ALLOW.get(p, set())
        if "lines" in extra:
            errors.append(f"{p}: {total} lines, over {MAX_LINES}; split it by responsibility")
        if "density" in extra:
            errors.append(f"{p}: {asserts} asserts in {code} code lines = {density:.1f}"
                          f" per 1,000, under {FILE_MIN:g}")
    for p, allowed in sorted(ALLOW.items()):
        for limit in sorted(allowed - broken.get(p, set())):
            errors.append(f"{p}: meets the {limit} limit now (or is gone);"
                          f" remove it from ALLOW in {__file__}")
    overall = 1000 * asserts_all / max(code_all, 1)
    if overall < OVERALL_MIN:
        errors.append(f"{MAIN}: {overall:.1f} asserts per 1,000 code lines overall,"
                      f" under {OVERALL_MIN:g}")
    if not quiet:
        for p, total, code, asserts, density in sorted(rows, key=lambda r: -r[1]):
            if total > DENSE_FROM:
                flag = " (allowed: " + ",".join(sorted(ALLOW[p])) + ")" if p in ALLOW else ""
                print(f"  {p}: {total} lines, {asserts}/{code} = {density:.1f}{flag}")
    for e in errors:
        print("FAIL", e)
    print(f"{MAIN}: {asserts_all} runtime assertions in {code_all} code lines ="
          f" {overall:.1f} per 1,000; {len(rows)} files, {len(broken)} over a limit"
          f" ({len(ALLOW)} allowed): {'ok' if not errors else str(len(errors)) + ' problems'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
