#!/usr/bin/env python3
"""The module graph of crates/directkv/src, and the two rules it must keep.

It reads every path a file names: `use crate::..`, `use super::..`,
`use self::..` (brace groups expanded) and `crate::x::..` / `super::..` paths
in code; resolves each to the file of the module it names (following one
`use` re-export in a folder's own module, so `super::Inner` in db/write.rs
names db/engine.rs when db/mod.rs re-exports it from there), and fails on:

(a) a circle among the files of one folder, for the folders in CIRCLE_FOLDERS
    (db/ and backup/). A file and its own child files (`write.rs` and
    `write/*.rs`) count as one node, and the folder's own module (`mod.rs`),
    which only declares and re-exports, is no node of it. The report names
    the set of files that reach each other and one circle through them.
(b) an import from a lower layer to a higher one, by the layer of each end
    (its longest module prefix LAYERS names), with LAYERS lowest first. `crate::Name` with no module names
    the crate root (lib.rs), the top layer: the library's own files name a
    type through the module that owns it, never through the root. The root's
    re-exports may name anything.

Test code (a file's code from its first top-level `#[cfg(test)]`, and files
declared only under `#[cfg(test)]`) is held to rule (b) too, with two
exceptions: it may use the simulator (`sim`) and the public API at the crate
root, which drive a layer from above to set up what its test needs. A test of
a layer otherwise uses that layer and what is below it, so the tests read in
layer order as the code does. Rule (a) is about the build order of the
library and ignores test code.

Violations that predate the check, all in db/ and backup/ files still being
restructured, are in ALLOW below. The list only shrinks: an entry that no
longer occurs is an error too, so the list always tells the truth.

Usage: imports.py [--graph]   (--graph also prints the folder-level graph)
"""
import os
import re
import sys

SRC = "crates/directkv/src"
LAYERS = [
    ["lsn"], ["constants"], ["error"], ["format"], ["io"], ["sched"], ["stall"],
    ["health"], ["wal"], ["buffer"], ["btree"],
    # Taking backups and archiving the log reach the database through the
    # `Engine` trait it implements (backup/engine.rs), so they sit below it;
    # restoring and verifying work on a backup with no database open and
    # open a copy as one, so they sit above it.
    ["backup"], ["db"], ["backup/restore"],
    ["sim"], [""],  # "" is the crate root, lib.rs
]
RANK = {m: i for i, ms in enumerate(LAYERS) for m in ms}
CIRCLE_FOLDERS = ["db", "backup"]
TEST_MAY_USE = {"sim", ""}

# Violations that predate the check. This list only shrinks; the
# restructuring of db/ and backup/ empties it.
# Layer entries: "FILE -> MODULE" (MODULE: the top-level module named, or
# "crate root"); circle entries: "circle FOLDER: FILE, FILE, ..." (sorted),
# naming the whole set of files that reach each other, so a circle that
# shrinks is a new entry in place of the old one.
ALLOW: set = set()

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def module_of(rel):
    """db/write.rs -> ('db', 'write'); db/mod.rs -> ('db',); lib.rs -> ()."""
    parts = rel[:-3].split("/")
    if parts[-1] == "mod" or rel == "lib.rs":
        parts = parts[:-1]
    return tuple(p for p in parts if p)


def strip_comments_and_strings(text):
    """The code without comments and with every string and char literal
    emptied (so a path inside one is no import), lines kept in place."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 260]) and not re.match(r"\w", text[i - 1:i] or " "):
            hashes = len(re.match(r'r(#*)"', text[i:]).group(1))
            end = text.find('"' + "#" * hashes, i + 2 + hashes)
            end = n if end < 0 else end + 1 + hashes
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:i + 16])
            if m:
                out.append("''")
                i += m.end()
            else:
                out.append(c)  # a lifetime
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_named(tree):
    """Expands a use tree (`a::{b, c::{d, e as f}}`) into (segments, name
    it is known by here) pairs."""
    tree = re.sub(r"\s+", " ", tree).strip()
    tree = re.sub(r"\s*(::|\{|\}|,)\s*", r"\1", tree)
    out = []

    def walk(prefix, t):
        brace = t.find("{")
        if brace < 0:
            path, _, alias = t.partition(" as ")
            segs = prefix + [x for x in path.split("::") if x]
            if segs:
                out.append((segs, alias.strip() or segs[-1]))
            return
        head = [x for x in t[:brace].split("::") if x]
        body = t[brace + 1:t.rfind("}")]
        depth, start, items = 0, 0, []
        for k, ch in enumerate(body):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(body[start:k])
                start = k + 1
        items.append(body[start:])
        for it in items:
            if it.strip():
                walk(prefix + head, it.strip())

    walk([], tree)
    return out


def expand(tree):
    return [segs for segs, _ in expand_named(tree)]


def load():
    files = {}
    for d, _, names in os.walk(SRC):
        for f in sorted(names):
            if f.endswith(".rs"):
                rel = os.path.relpath(os.path.join(d, f), SRC)
                files[module_of(rel)] = rel
    return files


def test_only_children(files):
    """Modules declared only under #[cfg(test)] (`#[cfg(test)] mod tests;`)."""
    out = set()
    for mod, rel in files.items():
        lines = open(os.path.join(SRC, rel), encoding="utf-8").read().split("\n")
        for i, line in enumerate(lines[1:], 1):
            m = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", line)
            if not m:
                continue
            j = i - 1  # the attributes stacked above the declaration
            while j >= 0 and lines[j].strip().startswith("#["):
                if re.match(r"\s*#\[cfg\((?:all\()?test", lines[j]):
                    out.add(mod + (m.group(1),))
                    break
                j -= 1
    return out


def split_test(text):
    """(library code, test code) of a file: tests from its first top-level `#[cfg(test)]` module."""
    m = re.search(r"(?m)^#\[cfg\((?:all\()?test\b[^\n]*\n(?:[ \t]*(?:(?:#\[|//)[^\n]*)?\n)*(?:pub(?:\([^)]*\))?\s+)?mod\s", text)
    return (text, "") if not m else (text[:m.start()], text[m.start():])


def raw_paths(code):
    """Every crate-relative path a piece of code names, as segment lists."""
    code = re.sub(r"pub\s*\(\s*in\s+[^)]*\)", "", code)
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        paths.extend(expand(m.group(1)))
    code = re.sub(r"\buse\s+[^;]+;", "", code)
    for m in re.finditer(r"\b((?:crate|super|self)(?:::(?:super|" + IDENT + r"))+)", code):
        paths.append(m.group(1).split("::"))
    return [p for p in paths if p and p[0] in ("crate", "super", "self")]


def absolute(mod, path):
    """The path from the crate root; `mod` is where it is written."""
    here = list(mod)
    rest = list(path)
    if rest[0] == "crate":
        return rest[1:]
    if rest[0] == "self":
        return here + rest[1:]
    # `super` of db/write.rs (db::write) and of db/mod.rs (db) alike is
    # the module above.
    while rest and rest[0] == "super":
        here = here[:-1]
        rest = rest[1:]
    return here + rest


def reexports(files):
    """For each module, the names its `use` items bring in: name -> absolute path."""
    out = {}
    for mod, rel in files.items():
        text, _ = split_test(strip_comments_and_strings(
            open(os.path.join(SRC, rel), encoding="utf-8").read()))
        names = {}
        for m in re.finditer(r"\buse\s+([^;]+);", text):
            for p, name in expand_named(m.group(1)):
                if p[-1] in ("*", "self") or name == "_":
                    continue
                if p[0] in ("crate", "super", "self"):
                    names[name] = absolute(mod, p)
                elif len(p) > 1 and (mod + (p[0],)) in files:
                    names[name] = list(mod) + p
        out[mod] = names
    return out


def resolve(files, uses, segs):
    """The module file an absolute path names: the longest module prefix,
    then through one `use` there when the next segment is a name it imports
    (not for the crate root: naming through the root counts as the root)."""
    for _ in range(4):
        i = len(segs)
        while i > 0 and tuple(segs[:i]) not in files:
            i -= 1
        mod = tuple(segs[:i])
        if mod == () or i == len(segs):
            return mod
        nxt = segs[i]
        target = uses.get(mod, {}).get(nxt)
        if target is None or target[:1] == [] or tuple(target[:i]) == mod and len(target) <= i:
            return mod
        segs = target + segs[i + 1:]
    return mod


def edges(files):
    """(from module, to module, in test code) for every path named."""
    uses = reexports(files)
    tests = test_only_children(files)
    out = set()
    for mod, rel in files.items():
        text = strip_comments_and_strings(open(os.path.join(SRC, rel), encoding="utf-8").read())
        lib, test = split_test(text)
        if any(mod[:len(t)] == t for t in tests):
            lib, test = "", text
        for code, in_test in ((lib, False), (test, True)):
            for p in raw_paths(code):
                # The test section is an inline module (`mod tests {`):
                # its `super` is the file's module.
                here = mod + ("<tests>",) if in_test and not lib == "" else mod
                segs = absolute(here, p)
                if not segs and p[0] == "crate":
                    continue
                to = resolve(files, uses, segs)
                if to != mod:
                    out.add((mod, to, in_test))
    return out


def layer_violations(files, es):
    found = {}
    for a, b, in_test in sorted(es):
        if mod_rank(a) is None or mod_rank(b) is None:
            continue
        if a == ():
            continue  # the root's re-exports may name anything
        top_b = layer_name(b)
        if in_test and top_b in TEST_MAY_USE:
            continue
        if mod_rank(b) > mod_rank(a):
            key = f"{files[a]} -> {top_b or 'crate root'}"
            found.setdefault(key, set()).add("/".join(b) or "lib.rs")
    return found


def layer_name(mod):
    """The layer a module is in: its longest prefix LAYERS names."""
    for i in range(len(mod), 0, -1):
        name = "/".join(mod[:i])
        if name in RANK:
            return name
    return ""


def mod_rank(mod):
    return RANK.get(layer_name(mod))


def circles(files, es, folder):
    """Strongly connected sets of the folder's files (library code only):
    each file under the folder, at any depth, is one node."""
    def node(m):
        if len(m) >= 2 and m[0] == folder:
            return "/".join(m[1:])
        return None
    graph = {}
    for a, b, in_test in es:
        if in_test:
            continue
        na, nb = node(a), node(b)
        if na and nb and na != nb:
            graph.setdefault(na, set()).add(nb)
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    out = []
    for scc in sccs:
        out.append((scc, one_cycle(graph, scc)))
    return out, graph


def one_cycle(graph, scc):
    """A circle through the SCC's first node, by breadth-first search back to it."""
    start = scc[0]
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, ())):
            if w not in scc:
                continue
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return scc


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    files = load()
    es = edges(files)
    problems = []
    seen = set()
    layer = layer_violations(files, es)
    print("layer violations (lower layer naming a higher one):")
    for key in sorted(layer):
        seen.add(key)
        tag = "allowed" if key in ALLOW else "FAIL"
        print(f"  {tag} {key} ({', '.join(sorted(layer[key]))})")
        if key not in ALLOW:
            problems.append(key)
    print("circles inside a folder:")
    for folder in CIRCLE_FOLDERS:
        found, _ = circles(files, es, folder)
        for scc, cycle in found:
            key = f"circle {folder}: " + ", ".join(scc)
            seen.add(key)
            tag = "allowed" if key in ALLOW else "FAIL"
            print(f"  {tag} {key}\n      e.g. {' -> '.join(cycle)}")
            if key not in ALLOW:
                problems.append(key)
    for key in sorted(ALLOW - seen):
        print(f"  FAIL stale allow-list entry (fixed, remove it from ALLOW): {key}")
        problems.append(key)
    if "--graph" in sys.argv:
        tops = {}
        for a, b, in_test in es:
            if not in_test and a and (b[:1] != a[:1]):
                tops.setdefault(a[0], set()).add(b[0] if b else "crate root")
        print("folder-level graph (library code):")
        for t in sorted(tops, key=lambda m: (RANK.get(m, 99), m)):
            print(f"  {t} -> {', '.join(sorted(tops[t], key=lambda m: (RANK.get(m, 99), m)))}")
    print(f"{len(files)} files, {len(es)} edges: "
          f"{'ok' if not problems else str(len(problems)) + ' problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
