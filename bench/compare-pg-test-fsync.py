#!/usr/bin/env python3
"""Run PostgreSQL's pg_test_fsync and `directkv test-fsync` on the same
filesystem, alternating, and print both figures and their ratio for every test
both tools run (median of --runs runs each).

Installs Debian's postgresql package when pg_test_fsync is missing (as root).

    bench/compare-pg-test-fsync.py [--dir DIR] [--seconds 2] [--runs 3] [--json]
"""
import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

# pg_test_fsync section header fragment -> directkv group
SECTIONS = [
    ("using one", "one_write"),
    ("using two", "two_writes"),
    ("different write sizes", "open_sync_sizes"),
    ("non-write file descriptor", "fd_sync"),
    ("Non-sync", "non_sync"),
]
# pg_test_fsync opens open_datasync and open_sync with O_DIRECT, fsync and
# fdatasync without it.
METHOD_IDS = {
    "open_datasync": "open_datasync+direct",
    "fdatasync": "fdatasync",
    "fsync": "fsync",
    "open_sync": "open_sync+direct",
}
LINE = re.compile(r"^\s+(?P<label>.+?)\s+(?P<ops>[0-9.]+) ops/sec")
SIZE_LABEL = re.compile(r"(\d+)\s*\*\s*(\d+)kB open_sync write")


def find_pg_test_fsync():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_test_fsync"))
    if found:
        return found[-1]
    if shutil.which("pg_test_fsync"):
        return shutil.which("pg_test_fsync")
    if os.geteuid() != 0:
        sys.exit("pg_test_fsync not found; install Debian's postgresql package")
    print("installing postgresql for pg_test_fsync ...", file=sys.stderr)
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "postgresql"], check=True)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_test_fsync"))
    if not found:
        sys.exit("postgresql installed but pg_test_fsync is missing")
    return found[-1]


def pg_id(group, label):
    label = label.strip()
    if group in ("one_write", "two_writes"):
        method = METHOD_IDS.get(label)
        return f"{group}/{method}" if method else None
    if group == "open_sync_sizes":
        m = SIZE_LABEL.search(label)
        if not m:
            return None
        writes, kb = int(m.group(1)), int(m.group(2))
        return f"open_sync_sizes/{writes}x{kb * 1024}"
    if group == "fd_sync":
        return {
            "write, fsync, close": "fd_sync/write_fsync_close",
            "write, close, fsync": "fd_sync/write_close_fsync",
        }.get(label)
    if group == "non_sync" and label == "write":
        return "non_sync/none"
    return None


def run_pg(binary, path, seconds):
    out = subprocess.run(
        [binary, "-s", str(seconds), "-f", path],
        check=True, capture_output=True, text=True,
    ).stdout
    group, figures = None, {}
    for line in out.splitlines():
        for fragment, g in SECTIONS:
            if fragment in line:
                group = g
        m = LINE.match(line)
        if m and group:
            test_id = pg_id(group, m.group("label"))
            if test_id:
                figures[test_id] = float(m.group("ops"))
    return figures


def run_directkv(binary, path, seconds):
    out = subprocess.run(
        [binary, "test-fsync", "--json", "--seconds", str(seconds), "--file", path],
        check=True, capture_output=True, text=True,
    ).stdout
    report = json.loads(out)
    return {
        r["id"]: r["outcome"]["ops_per_sec"]
        for r in report["results"]
        if r["outcome"]["status"] == "measured"
    }, report


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=".", help="directory on the filesystem to test")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds per test")
    ap.add_argument("--runs", type=int, default=3, help="runs of each tool")
    ap.add_argument("--directkv", default=None, help="path of the directkv binary")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--tolerance", type=float, default=0.15,
                    help="relative difference counted as agreement")
    args = ap.parse_args()

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = args.directkv or os.path.join(root, "target", "release", "directkv")
    if args.directkv is None:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "directkv-cli"],
                       check=True, cwd=root)
    pg = find_pg_test_fsync()
    # pg_test_fsync needs its whole seconds as an integer.
    pg_seconds = max(1, round(args.seconds))

    work = tempfile.mkdtemp(prefix="dkv-vs-pg-", dir=args.dir)
    ours, theirs, report = {}, {}, None
    try:
        for run in range(args.runs):
            order = ["pg", "dkv"] if run % 2 == 0 else ["dkv", "pg"]
            for tool in order:
                print(f"run {run + 1}/{args.runs}: {tool}", file=sys.stderr)
                if tool == "pg":
                    figs = run_pg(pg, os.path.join(work, "pg.tmp"), pg_seconds)
                    for k, v in figs.items():
                        theirs.setdefault(k, []).append(v)
                else:
                    figs, report = run_directkv(
                        binary, os.path.join(work, "dkv.tmp"), pg_seconds)
                    for k, v in figs.items():
                        ours.setdefault(k, []).append(v)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = []
    for test_id in sorted(set(ours) & set(theirs), key=list(theirs).index):
        a, b = statistics.median(ours[test_id]), statistics.median(theirs[test_id])
        ratio = a / b if b else float("nan")
        rows.append({
            "id": test_id, "directkv_ops_per_sec": a, "pg_test_fsync_ops_per_sec": b,
            "ratio": ratio, "within_tolerance": abs(ratio - 1) <= args.tolerance,
        })
    summary = {
        "filesystem": report["filesystem"]["fs_type"] if report else None,
        "seconds_per_test": pg_seconds, "runs": args.runs, "pg_test_fsync": pg,
        "tolerance": args.tolerance, "rows": rows,
        "all_within_tolerance": all(r["within_tolerance"] for r in rows),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"filesystem {summary['filesystem']}, {pg_seconds}s per test, "
          f"median of {args.runs} runs each, alternating")
    print(f"{'test':40} {'directkv':>12} {'pg_test_fsync':>14} {'ratio':>7}")
    for r in rows:
        flag = "" if r["within_tolerance"] else "  <- outside ±%d%%" % (args.tolerance * 100)
        print(f"{r['id']:40} {r['directkv_ops_per_sec']:12.1f} "
              f"{r['pg_test_fsync_ops_per_sec']:14.1f} {r['ratio']:7.3f}{flag}")
    print("all within ±%d%%: %s" % (args.tolerance * 100,
                                   "yes" if summary["all_within_tolerance"] else "NO"))


if __name__ == "__main__":
    main()
