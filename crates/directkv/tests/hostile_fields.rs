//! Fields read from disk are range-checked where they are decoded: a file
//! whose checksums hold but whose field no build writes (a bug's, or a
//! crafted one) gets `Error::Corruption` naming the file and the field at
//! open, never a panic, a hang, unbounded disk use, or a change applied
//! where it cannot belong.
//!
//! Each case takes a copy of a database built on real files (closed
//! cleanly, or dropped after its last acknowledged commit so that open
//! replays the log), rewrites one field with its checksums recomputed (a
//! `CONTROL` slot's CRC; a WAL record's payload and header CRCs), and
//! opens it: the open is refused naming the file and the field, and
//! changes no byte. A value at the edge of its range that the file can
//! hold opens and reads every acknowledged value back.
//!
//! 56 cases: the four found from outside, in five (page count 2^60, page
//! count `u64::MAX`, page size 0 and 2^30, a page record moved to the head
//! page 0); then 26 refused values of `CONTROL`'s fields, page size (7),
//! generation (4), redo LSN (2), page count (7), root page (3) and
//! free-list head (3), and one accepted at the edges (the largest page
//! count the data file explains, the largest generation); then 22 refused
//! values of the records' fields: a page record's page (3), transaction
//! (1), flag (1), range count (1) and image size (3); a commit record's
//! transaction (2), page count (5), root (2) and free-list head (2); a
//! checkpoint record's redo LSN (1) and page count (1); and a free page's
//! link (2: `u64::MAX` and the page count), met at allocation. The values in
//! range at 0, 1 and the largest, and an abort record's transaction (which
//! no clean run of the engine logs), are pinned by `db::records`' unit
//! tests (24 more); `directkv check` meets the five found cases in
//! crates/directkv-cli/tests/check_hostile.rs.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use directkv::internals::pages::{PAGE_COUNT_MAX, TXN_ID_MAX};
use directkv::internals::wal::Layout;
use directkv::{Database, Error, Lsn, Options};

const SEGMENT_BYTES: u64 = 1 << 20;
const KEYS: u32 = 400;
/// The engine's record kinds (`docs/wal_format.md`).
const PAGE: u8 = 20;
const COMMIT: u8 = 21;
const CHECKPOINT: u8 = 22;

fn opts() -> Options {
    common::quiet(1 << 20, SEGMENT_BYTES)
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u32) -> Vec<u8> {
    common::numbered_key(i, KEYS)
}

/// Commits transaction `t` (ten keys) and records it in `model`.
fn commit(db: &Database, model: &mut Model, t: u32) {
    common::commit_ten(db, model, t, KEYS);
}

/// A database of 120 transactions, a checkpoint, 120 more that update the
/// same keys, one aborted transaction, and a last commit; closed or
/// dropped. Returns its acknowledged state.
fn build(dir: &Path, close: bool) -> Model {
    let create = Options {
        create_if_missing: true,
        ..opts()
    };
    let db = Database::open(dir, create).expect("create");
    let mut model = Model::new();
    for t in 0..120 {
        commit(&db, &mut model, t);
    }
    db.checkpoint().expect("checkpoint");
    for t in 120..240 {
        commit(&db, &mut model, t);
    }
    let mut w = db.begin_write().expect("begin_write");
    w.put(b"aborted", b"never").expect("put");
    drop(w);
    commit(&db, &mut model, 240);
    if close {
        db.close().expect("close");
    } else {
        drop(db);
    }
    model
}

/// A built database, copied afresh for each case.
struct Template {
    dir: tempfile::TempDir,
    model: Model,
}

fn template(close: bool) -> Template {
    let dir = common::scratch();
    let model = build(dir.path(), close);
    Template { dir, model }
}

impl Template {
    fn copy(&self) -> tempfile::TempDir {
        let to = common::scratch();
        for (p, bytes) in common::files_snapshot(self.dir.path()) {
            let rel = p.strip_prefix(self.dir.path()).expect("inside");
            if bytes.is_empty() && p.is_dir() {
                std::fs::create_dir_all(to.path().join(rel)).expect("mkdir");
            } else {
                std::fs::write(to.path().join(rel), bytes).expect("copy");
            }
        }
        to
    }
}

/// Open refuses with `Corruption` naming `path` and `words`, and nothing
/// on disk changed. An open that succeeds is leaked rather than closed: on
/// a database whose page count is 2^60, closing would grow the data file
/// without end.
fn refused(dir: &Path, path: &Path, words: &str) -> String {
    let before = common::files_snapshot(dir);
    let detail = match Database::open(dir, opts()) {
        Err(Error::Corruption {
            path: named,
            detail,
            ..
        }) => {
            assert_eq!(named, path, "the error names the file: {detail}");
            detail
        }
        Err(e) => panic!("expected Corruption naming {words}, got {e}"),
        Ok(db) => {
            std::mem::forget(db);
            panic!("expected Corruption naming {words}, the open succeeded")
        }
    };
    assert!(detail.contains(words), "{words}: {detail}");
    assert!(
        common::files_snapshot(dir) == before,
        "a refused open changes no byte"
    );
    detail
}

/// Opens and reads back every acknowledged value; dropped, not closed.
fn reads_back(dir: &Path, model: &Model) {
    let db = Database::open(dir, opts()).expect("open");
    let r = db.begin_read().expect("begin_read");
    for (k, v) in model {
        let got = r.get(k).expect("get");
        assert_eq!(got.as_ref(), Some(v), "{}", String::from_utf8_lossy(k));
    }
}

// ---- CONTROL ----

fn control_path(dir: &Path) -> PathBuf {
    dir.join("CONTROL")
}

/// The byte offset of the newest valid slot (its generation the highest).
fn newest_slot(dir: &Path) -> usize {
    let b = std::fs::read(control_path(dir)).expect("CONTROL");
    let valid = |at: usize| {
        let s = &b[at..at + 92];
        let crc = u32::from_le_bytes(s[88..92].try_into().expect("4"));
        (&s[0..8] == b"DKVCTRL1" && crc == crc32c::crc32c(&s[..88]))
            .then(|| u64::from_le_bytes(s[16..24].try_into().expect("8")))
    };
    let (a, b) = (valid(0), valid(4096));
    assert!(a.is_some() || b.is_some(), "a valid slot");
    if b > a {
        4096
    } else {
        0
    }
}

fn control_u64(dir: &Path, field: usize) -> u64 {
    let b = std::fs::read(control_path(dir)).expect("CONTROL");
    let at = newest_slot(dir) + field;
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8"))
}

/// Writes `value` at `field` of the newest `CONTROL` slot and reseals the
/// slot's CRC (bytes 0..88, at 88: `docs/file_format.md`).
fn rewrite_control(dir: &Path, field: usize, value: &[u8]) {
    assert!(field + value.len() <= 88, "a CRC-covered field");
    let path = control_path(dir);
    let mut b = std::fs::read(&path).expect("CONTROL");
    let slot = newest_slot(dir);
    b[slot + field..slot + field + value.len()].copy_from_slice(value);
    let crc = crc32c::crc32c(&b[slot..slot + 88]);
    b[slot + 88..slot + 92].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, b).expect("write CONTROL");
}

const PAGE_SIZE_AT: usize = 12;
const GENERATION_AT: usize = 16;
const CHECKPOINT_LSN_AT: usize = 40;
const REDO_AT: usize = 48;
const ROOT_AT: usize = 56;
const PAGE_COUNT_AT: usize = 64;
const FREELIST_AT: usize = 72;

/// The most pages open accepts for this copy: the data file's pages and
/// those its checkpoint's log window can explain (40 bytes a page).
fn page_count_allowed(dir: &Path) -> u64 {
    let len = std::fs::metadata(dir.join("data")).expect("data").len();
    let window = control_u64(dir, CHECKPOINT_LSN_AT) - control_u64(dir, REDO_AT);
    len.div_ceil(4096) + window / 40
}

#[test]
fn a_page_count_of_2_pow_60_is_refused_at_open_not_grown_to_at_close() {
    let tpl = template(true);
    let d = tpl.copy();
    rewrite_control(d.path(), PAGE_COUNT_AT, &(1u64 << 60).to_le_bytes());
    let detail = refused(d.path(), &control_path(d.path()), "page count");
    assert!(detail.contains(&(1u64 << 60).to_string()), "{detail}");
}

#[test]
fn a_page_count_of_u64_max_is_refused_before_any_write() {
    let tpl = template(true);
    let d = tpl.copy();
    rewrite_control(d.path(), PAGE_COUNT_AT, &u64::MAX.to_le_bytes());
    refused(d.path(), &control_path(d.path()), "page count");
}

#[test]
fn a_page_size_of_0_or_2_pow_30_is_refused_not_a_panic() {
    let tpl = template(true);
    for size in [0u32, 1 << 30] {
        let d = tpl.copy();
        rewrite_control(d.path(), PAGE_SIZE_AT, &size.to_le_bytes());
        let detail = refused(d.path(), &control_path(d.path()), "page size");
        assert!(detail.contains(&size.to_string()), "{detail}");
    }
}

/// Every `CONTROL` field at the edges of its range: refused past them,
/// read back at the largest page count the data file explains.
#[test]
fn control_fields_out_of_range_are_refused_by_name() {
    let tpl = template(true);
    let probe = tpl.copy();
    let count = control_u64(probe.path(), PAGE_COUNT_AT);
    let allowed = page_count_allowed(probe.path());
    let root = control_u64(probe.path(), ROOT_AT);
    let checkpoint = control_u64(probe.path(), CHECKPOINT_LSN_AT);
    assert!(
        count > root && root >= 2 && allowed >= count,
        "{count} {root} {allowed}"
    );
    let mut cases: Vec<(usize, Vec<u8>, &str)> = Vec::new();
    for size in [0u32, 1, 4095, 4097, 16385, 32768, u32::MAX] {
        cases.push((PAGE_SIZE_AT, size.to_le_bytes().to_vec(), "page size"));
    }
    for generation in [0u64, (1 << 62) + 1, u64::MAX - 1, u64::MAX] {
        cases.push((
            GENERATION_AT,
            generation.to_le_bytes().to_vec(),
            "generation",
        ));
    }
    for redo in [checkpoint + 1, u64::MAX] {
        cases.push((REDO_AT, redo.to_le_bytes().to_vec(), "redo LSN"));
    }
    for pages in [
        0,
        1,
        allowed + 1,
        PAGE_COUNT_MAX,
        PAGE_COUNT_MAX + 1,
        1 << 60,
    ] {
        cases.push((
            PAGE_COUNT_AT,
            u64::to_le_bytes(pages).to_vec(),
            "page count",
        ));
    }
    cases.push((PAGE_COUNT_AT, root.to_le_bytes().to_vec(), "root page"));
    for bad_root in [0, count, u64::MAX] {
        cases.push((ROOT_AT, u64::to_le_bytes(bad_root).to_vec(), "root page"));
    }
    for head in [root, count, u64::MAX] {
        cases.push((FREELIST_AT, head.to_le_bytes().to_vec(), "free-list head"));
    }
    assert_eq!(
        cases.len(),
        7 + 4 + 2 + 7 + 3 + 3,
        "the cases the header counts"
    );
    for (field, value, words) in cases {
        let d = tpl.copy();
        rewrite_control(d.path(), field, &value);
        let detail = refused(d.path(), &control_path(d.path()), words);
        assert!(detail.contains("CONTROL"), "{detail}");
    }
    // The largest page count the file explains, and the largest
    // generation, open and read back.
    let d = tpl.copy();
    rewrite_control(d.path(), PAGE_COUNT_AT, &allowed.to_le_bytes());
    rewrite_control(d.path(), GENERATION_AT, &(1u64 << 62).to_le_bytes());
    reads_back(d.path(), &tpl.model);
}

// ---- WAL records ----

fn layout() -> Layout {
    Layout {
        segment_bytes: SEGMENT_BYTES,
    }
}

fn segment_path(dir: &Path, lsn: Lsn) -> PathBuf {
    dir.join(common::segment_rel_path(SEGMENT_BYTES, lsn))
}

/// The log's engine records from the redo point: (LSN, kind, payload).
fn records(dir: &Path) -> Vec<(Lsn, u8, Vec<u8>)> {
    let mut reader = common::log_reader(dir, SEGMENT_BYTES);
    let mut out = Vec::new();
    while let Some(rec) = reader.next_user_record().expect("read the log") {
        out.push((rec.lsn, rec.kind, rec.payload));
    }
    out
}

/// Replaces the payload of the record at `lsn` (same length) and reseals
/// both its CRCs: the payload's at 8, and the header's at 0, over the LSN
/// then header bytes 4..16 (`docs/wal_format.md`).
fn reseal(dir: &Path, lsn: Lsn, payload: &[u8]) {
    use std::os::unix::fs::FileExt;
    let at = layout().file_offset(lsn);
    assert!(
        at + 16 + payload.len() as u64 <= SEGMENT_BYTES,
        "the record lies in one segment"
    );
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(dir, lsn))
        .expect("segment");
    let mut h = [0u8; 16];
    f.read_exact_at(&mut h, at).expect("header");
    assert_eq!(
        u32::from_le_bytes(h[4..8].try_into().expect("4")) as usize,
        payload.len(),
        "a payload of the same length"
    );
    h[8..12].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let mut covered = lsn.get().to_le_bytes().to_vec();
    covered.extend_from_slice(&h[4..16]);
    h[0..4].copy_from_slice(&crc32c::crc32c(&covered).to_le_bytes());
    f.write_all_at(&h, at).expect("header");
    f.write_all_at(payload, at + 16).expect("payload");
}

/// Rewrites the last record of `kind` whose payload `pick` accepts with
/// `change` applied to its payload, and returns the segment holding it.
fn rewrite_record(
    dir: &Path,
    kind: u8,
    pick: impl Fn(&[u8]) -> bool,
    change: impl FnOnce(&mut Vec<u8>),
) -> PathBuf {
    let (lsn, _, mut payload) = records(dir)
        .into_iter()
        .filter(|(lsn, k, p)| {
            *k == kind
                && pick(p)
                && layout().file_offset(*lsn) + 16 + p.len() as u64 <= SEGMENT_BYTES
        })
        .last()
        .expect("a record of the kind");
    change(&mut payload);
    reseal(dir, lsn, &payload);
    segment_path(dir, lsn)
}

fn put_u64(p: &mut [u8], at: usize, v: u64) {
    p[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn u64_at(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().expect("8"))
}

/// The found case: a page record of the last commit moved to page 0, the
/// data file's head. Replay applied it there, so the commit's key read its
/// old value and `check` passed.
#[test]
fn a_page_record_naming_the_head_page_is_refused() {
    let tpl = template(false);
    let d = tpl.copy();
    let seg = rewrite_record(d.path(), PAGE, |_| true, |p| put_u64(p, 8, 0));
    let detail = refused(d.path(), &seg, "page 0");
    assert!(detail.contains("page record"), "{detail}");
    // Untouched, the same copy reads every acknowledged value back.
    reads_back(tpl.copy().path(), &tpl.model);
}

/// Every field of each record kind at the edges of its range, in a log
/// that replay reads at open.
#[test]
fn record_fields_out_of_range_are_refused_by_name() {
    let tpl = template(false);
    type Change = Box<dyn Fn(&mut Vec<u8>)>;
    type Pick<'a> = &'a dyn Fn(&[u8]) -> bool;
    let set = |at: usize, v: u64| -> Change { Box::new(move |p: &mut Vec<u8>| put_u64(p, at, v)) };
    let any = |_: &[u8]| true;
    let image = |p: &[u8]| p[16] == 2;
    let ranges = |p: &[u8]| p[16] == 0 && u16::from_le_bytes([p[17], p[18]]) > 0;
    let probe = tpl.copy();
    let (_, _, last_commit) = records(probe.path())
        .into_iter()
        .rfind(|r| r.1 == COMMIT)
        .expect("a commit");
    let (count, root) = (u64_at(&last_commit, 16), u64_at(&last_commit, 8));
    let mut cases: Vec<(u8, Pick, Change, &str)> = vec![
        (PAGE, &any, set(8, u64::MAX), "page"),
        (PAGE, &any, set(8, PAGE_COUNT_MAX), "page"),
        (PAGE, &any, set(8, count), "past the"),
        (PAGE, &any, Box::new(|p| p[16] = 3), "flag"),
        (
            PAGE,
            &ranges,
            Box::new(|p| p[17..19].copy_from_slice(&u16::MAX.to_le_bytes())),
            "range count",
        ),
        (PAGE, &any, set(0, TXN_ID_MAX + 1), "transaction id"),
        (COMMIT, &any, set(0, TXN_ID_MAX + 1), "transaction id"),
        (COMMIT, &any, set(0, u64::MAX), "transaction id"),
        (COMMIT, &any, set(16, 0), "page count"),
        (COMMIT, &any, set(16, 1), "page count"),
        (COMMIT, &any, set(16, PAGE_COUNT_MAX + 1), "page count"),
        (COMMIT, &any, set(16, u64::MAX), "page count"),
        (COMMIT, &any, set(16, count + 1000), "pages before it"),
        (COMMIT, &any, set(8, 0), "root page"),
        (COMMIT, &any, set(8, u64::MAX), "root page"),
        (COMMIT, &any, set(24, root), "free-list head"),
        (COMMIT, &any, set(24, u64::MAX), "free-list head"),
        (CHECKPOINT, &any, set(0, u64::MAX), "redo LSN"),
        (CHECKPOINT, &any, set(16, 1), "page count"),
    ];
    for len in [0u16, 1, 4097] {
        let change: Change = Box::new(move |p| p[17..19].copy_from_slice(&len.to_le_bytes()));
        cases.push((PAGE, &image, change, "image size"));
    }
    assert_eq!(
        cases.len(),
        22,
        "the cases the header counts, less the found one"
    );
    for (kind, pick, change, words) in cases {
        let d = tpl.copy();
        let seg = rewrite_record(d.path(), kind, pick, change);
        let detail = refused(d.path(), &seg, words);
        assert!(detail.contains("record"), "{detail}");
    }
}

// ---- pages ----

/// A free page's link rewritten (page CRC resealed: CRC32C of bytes
/// 4..page size, at 0) to `u64::MAX` or to the page count: the allocation
/// that follows it is refused by name, where before it reached the buffer
/// pool's empty-frame marker (a panic) or a page past the file.
#[test]
fn a_free_page_linking_past_the_file_is_refused_at_allocation() {
    let dir = common::scratch();
    let create = Options {
        create_if_missing: true,
        ..opts()
    };
    let db = Database::open(dir.path(), create).expect("create");
    let mut model = Model::new();
    for t in 0..60 {
        commit(&db, &mut model, t);
    }
    let mut w = db.begin_write().expect("begin_write");
    for k in model.keys() {
        w.delete(k).expect("delete");
    }
    w.commit().expect("commit");
    db.close().expect("close");
    let head = control_u64(dir.path(), FREELIST_AT);
    let count = control_u64(dir.path(), PAGE_COUNT_AT);
    assert!(head != 0, "the deletes freed pages");
    for link in [u64::MAX, count] {
        let d = common::scratch();
        for name in ["CONTROL", "data"] {
            std::fs::copy(dir.path().join(name), d.path().join(name)).expect("copy");
        }
        common::copy_tree(&dir.path().join("wal"), &d.path().join("wal"));
        let data = d.path().join("data");
        let mut bytes = std::fs::read(&data).expect("data");
        let at = (head * 4096) as usize;
        let page = &mut bytes[at..at + 4096];
        page[48..56].copy_from_slice(&link.to_le_bytes());
        let crc = crc32c::crc32c(&page[4..]);
        page[0..4].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&data, bytes).expect("write data");
        let db = Database::open(d.path(), opts()).expect("open");
        let mut w = db.begin_write().expect("begin_write");
        let got = (0..200).try_for_each(|i| w.put(&key(i), &[7; 300]));
        let err = match got {
            Err(e) => e,
            Ok(()) => w.commit().expect_err("the allocation meets the link"),
        };
        match err {
            Error::Corruption { path, detail, .. } => {
                assert_eq!(path.file_name(), Some("data".as_ref()), "{detail}");
                assert!(detail.contains(&format!("page {link}")), "{detail}");
            }
            e => panic!("expected Corruption naming the data file, got {e}"),
        }
    }
}
