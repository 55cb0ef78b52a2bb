#!/usr/bin/env python3
"""Counts the items of the directkv crate reachable from outside it beyond
the root API, the way rustdoc's `all.html` lists them: one entry per path
at which a struct, enum, union, trait, function, constant, static, type
alias or macro can be named, modules and members (methods, fields,
variants) not counted. Hidden items (`internals`) are counted, with the
`sim` feature on, as the command-line tool, the tests and the fuzz targets
build the crate.

The paths come from rustdoc's JSON output (nightly only), walked from the
crate root through modules and re-exports, globs expanded.

    python3 .ci/surface_count.py           # prints the number
    python3 .ci/surface_count.py --list    # every path below the root, then the number
    python3 .ci/surface_count.py --max 60  # fails (with the list) when over 60

The toolchain is `nightly`, or the one DIRECTKV_NIGHTLY names.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COUNTED = {"struct", "enum", "union", "trait", "trait_alias", "function", "constant",
           "static", "type_alias", "macro", "proc_macro"}


def build(target: str) -> dict:
    env = dict(os.environ, CARGO_TARGET_DIR=target)
    subprocess.run(
        ["cargo", "+" + os.environ.get("DIRECTKV_NIGHTLY", "nightly"), "rustdoc", "-q", "-p", "directkv", "--features", "sim", "--",
         "-Z", "unstable-options", "--output-format", "json", "--document-hidden-items",
         "--cap-lints", "allow"],
        cwd=ROOT, env=env, check=True,
    )
    with open(os.path.join(target, "doc", "directkv.json"), encoding="utf-8") as f:
        return json.load(f)


def walk(index: dict, root_id) -> set:
    """Every (path, kind) nameable from outside the crate."""
    found = set()
    seen = set()
    stack = [(root_id, ())]
    while stack:
        module_id, path = stack.pop()
        assert len(path) < 16, f"module nesting too deep at {'::'.join(path)}"
        if (module_id, path) in seen:
            continue
        seen.add((module_id, path))
        module = index[str(module_id)]["inner"]["module"]
        for item_id in module["items"]:
            item = index[str(item_id)]
            if item["visibility"] != "public":
                continue
            kind, inner = next(iter(item["inner"].items()))
            if kind == "use":
                target = index.get(str(inner["id"])) if inner["id"] is not None else None
                if inner["is_glob"]:
                    assert target is not None, f"glob of an unknown module: {inner['source']}"
                    stack.append((inner["id"], path))
                    continue
                if target is None:  # from another crate: counted by its name
                    found.add(("::".join(path + (inner["name"],)), "extern"))
                    continue
                kind = next(iter(target["inner"]))
                if kind == "module":
                    stack.append((inner["id"], path + (inner["name"],)))
                elif kind in COUNTED:
                    found.add(("::".join(path + (inner["name"],)), kind))
            elif kind == "module":
                stack.append((item_id, path + (item["name"],)))
            elif kind in COUNTED:
                found.add(("::".join(path + (item["name"],)), kind))
    return found


def main() -> int:
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    doc = build(target)
    found = walk(doc["index"], doc["root"])
    assert found, "no items found: has rustdoc's JSON format changed?"
    below_root = sorted(p for p, _ in found if "::" in p)
    args = sys.argv[1:]
    limit = int(args[args.index("--max") + 1]) if "--max" in args else None
    over = limit is not None and len(below_root) > limit
    if "--list" in args or over:
        for p in below_root:
            print(p)
        print(f"root API: {sum(1 for p, _ in found if '::' not in p)} items", file=sys.stderr)
    print(len(below_root))
    if over:
        print(f"FAIL {len(below_root)} items beyond the root API, over {limit}: a new use "
              "outside the crate is a decision, made in internals.rs")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
