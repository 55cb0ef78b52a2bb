#!/usr/bin/env python3
"""Function length check (STYLE.md 12: keep functions short enough to see whole).

Every function in the library and the CLI (tests excluded) must be at most
LIMIT lines, counted from its `fn` line to its closing brace. Functions that
were longer when the check came in are listed in .ci/fn_length_allow.txt with
their length then; a listed function may not grow, and the list only shrinks:
an entry for a function that is now within the limit, or gone, is an error
too, so the list always tells the truth.

Usage: fn_length.py [--write-allow-list]
"""
import os
import re
import sys

LIMIT = 70
ROOTS = ["crates/directkv/src", "crates/directkv-cli/src", "crates/directkv-raft/src", "crates/directkv-raft-node/src"]
ALLOW = os.path.join(os.path.dirname(__file__), "fn_length_allow.txt")
FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\"C\"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)")


def strip(line):
    """The line without string and char literals and comments (rough, enough for braces)."""
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(?:\\.|[^'\\])'", "''", line)
    return line.split("//", 1)[0]


def functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    cut = next((i for i, l in enumerate(lines) if l.strip() == "#[cfg(test)]"), len(lines))
    i = 0
    while i < cut:
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        depth, opened, j = 0, False, i
        while j < len(lines):
            s = strip(lines[j])
            if not opened and ";" in s and "{" not in s:
                break  # a declaration without a body
            depth += s.count("{") - s.count("}")
            opened = opened or "{" in s
            if opened and depth <= 0:
                yield m.group(1), i + 1, j - i + 1
                break
            j += 1
        i += 1


def measure():
    found = {}
    for root in ROOTS:
        for d, _, files in os.walk(root):
            for f in sorted(files):
                if f.endswith(".rs"):
                    p = os.path.join(d, f)
                    for name, line, n in functions(p):
                        key = f"{p}::{name}"
                        found[key] = max(n, found.get(key, 0))
    return found


def main():
    found = measure()
    long = {k: n for k, n in found.items() if n > LIMIT}
    if "--write-allow-list" in sys.argv:
        with open(ALLOW, "w") as out:
            out.write(f"# Functions over {LIMIT} lines, with their length. This list only shrinks.\n")
            for k in sorted(long):
                out.write(f"{k} {long[k]}\n")
        print(f"wrote {len(long)} entries")
        return 0
    allow = {}
    for l in open(ALLOW, encoding="utf-8"):
        l = l.strip()
        if l and not l.startswith("#"):
            k, n = l.rsplit(" ", 1)
            allow[k] = int(n)
    errors = []
    for k, n in sorted(long.items()):
        if k not in allow:
            errors.append(f"{k}: {n} lines, over the {LIMIT}-line limit")
        elif n > allow[k]:
            errors.append(f"{k}: grew to {n} lines from {allow[k]}; shorten it")
    for k, n in sorted(allow.items()):
        if found.get(k, 0) <= LIMIT:
            errors.append(f"{k}: now within the limit (or gone); remove it from {ALLOW}")
        elif found[k] < n:
            errors.append(f"{k}: shrank to {found[k]} lines; lower its entry in {ALLOW}")
    for e in errors:
        print(e)
    print(f"{len(found)} functions, {len(long)} over {LIMIT} lines ({len(allow)} allowed): "
          f"{'ok' if not errors else str(len(errors)) + ' problems'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
