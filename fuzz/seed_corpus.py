#!/usr/bin/env python3
"""Seeds the fuzz targets' corpora from real databases.

    python3 fuzz/seed_corpus.py DB_DIR [DB_DIR ...]

For each database directory (closed or copied; nothing is written to it):
- page_decoder: distinct 4 KiB pages of `data` (page 0, the head, included);
- control_decoder: `CONTROL` whole;
- wal_reader: the body of segment 0 after its 4 KiB header, in the 60 KiB
  windows the target reads (records there sit at the LSN the target reads at);
- profile_decoder: the device profile saved beside the log;
- segment_header: the first 64 bytes of every segment.

The corpus goes to fuzz/corpus/<target>/, one file per input, named by its
SHA-1 as libFuzzer names its own.
"""
import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PAGES_PER_DB = 100
WAL_WINDOWS = 8
WAL_WINDOW = 60 * 1024
SEGMENT_HEADER = 4096


def put(target, data):
    if not data or not any(data):
        return False
    out = os.path.join(HERE, "corpus", target)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, hashlib.sha1(data).hexdigest())
    if os.path.exists(path):
        return False
    with open(path, "wb") as f:
        f.write(data)
    return True


def seed(db):
    counts = dict.fromkeys(
        ["page_decoder", "control_decoder", "wal_reader", "profile_decoder", "segment_header"], 0
    )
    data = os.path.join(db, "data")
    if os.path.exists(data):
        pages = os.path.getsize(data) // 4096
        step = max(1, pages // PAGES_PER_DB)
        with open(data, "rb") as f:
            for no in range(0, pages, step):
                f.seek(no * 4096)
                counts["page_decoder"] += put("page_decoder", f.read(4096))
    control = os.path.join(db, "CONTROL")
    if os.path.exists(control):
        with open(control, "rb") as f:
            counts["control_decoder"] += put("control_decoder", f.read())
    wal = os.path.join(db, "wal")
    seg0 = os.path.join(wal, "0000000000000000.seg")
    if os.path.exists(seg0):
        with open(seg0, "rb") as f:
            f.seek(SEGMENT_HEADER)
            for _ in range(WAL_WINDOWS):
                counts["wal_reader"] += put("wal_reader", f.read(WAL_WINDOW))
    if os.path.isdir(wal):
        for name in sorted(os.listdir(wal)):
            if name.endswith(".seg"):
                with open(os.path.join(wal, name), "rb") as f:
                    counts["segment_header"] += put("segment_header", f.read(64))
    profile = os.path.join(wal, ".directkv-device-profile.json")
    if os.path.exists(profile):
        with open(profile, "rb") as f:
            counts["profile_decoder"] += put("profile_decoder", f.read())
    print(db, counts)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for db in sys.argv[1:]:
        seed(db)


if __name__ == "__main__":
    main()
