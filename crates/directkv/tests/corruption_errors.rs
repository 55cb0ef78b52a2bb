//! A corruption error found in the data file names where the damage is, in
//! its fields and its text alike: the data file by its absolute path (even
//! when the database was opened by a relative one), the damaged page's byte
//! offset (page number times page size) and the page number. Each case
//! damages one page of a closed database, either resealed so that only a
//! structural check can see it or left with a wrong checksum, reads it back
//! and checks the error's `path`, `offset`, `page` and `Display` text. A
//! malformed record in the log, refused by recovery, names its segment file
//! and the record's byte offset in it the same way.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};

use directkv::internals::pages::page::{self, PageType};
use directkv::internals::pages::PageId;
use directkv::{Database, Error, Options};

const PAGE: usize = 8192;
const KEYS: u32 = 2000;
/// The key whose value is long enough for an overflow chain.
const LONG: u32 = 7;

fn opts() -> Options {
    common::unsynced(4 << 20)
}

fn key(i: u32) -> Vec<u8> {
    common::page_key(i)
}

/// A closed database of `KEYS` keys, the value of `LONG` in an overflow
/// chain.
fn build(dir: &Path) {
    common::build_with_overflow(dir, opts(), KEYS, LONG, PAGE);
}

fn write_page(dir: &Path, no: u64, p: &[u8]) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("data"))
        .expect("data");
    file.write_all_at(p, no * PAGE as u64).expect("write");
    file.sync_all().expect("sync");
}

/// `dir` as a path relative to the working directory (up to the root and
/// down again), so that opening by it gives the engine a relative path.
fn relative(dir: &Path) -> PathBuf {
    let cwd = std::env::current_dir().expect("cwd");
    let ups = cwd
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    let mut rel: PathBuf = std::iter::repeat_n("..", ups).collect();
    rel.push(
        dir.strip_prefix("/")
            .expect("an absolute temporary directory"),
    );
    assert!(rel.is_relative());
    rel
}

/// `e` is a corruption of page `no` of the data file in `dir`, in its
/// fields and in its text.
fn names_the_page(e: &Error, dir: &Path, no: u64) {
    let Error::Corruption {
        path, offset, page, ..
    } = e
    else {
        panic!("expected Corruption, got {e}");
    };
    assert!(path.is_absolute(), "{e}");
    let data = dir.join("data");
    assert_eq!(
        std::fs::canonicalize(path).expect("the named file exists"),
        std::fs::canonicalize(&data).expect("data"),
        "{e}"
    );
    assert_eq!(*offset, no * PAGE as u64, "{e}");
    assert_eq!(*page, Some(no), "{e}");
    let text = e.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    let at = format!("at byte offset {} (page {no})", no * PAGE as u64);
    assert!(text.contains(&at), "{text}");
}

#[test]
fn an_overflow_page_of_another_type_names_the_data_file_and_its_byte_offset() {
    let dir = common::scratch();
    build(dir.path());
    let (no, mut p, id) = common::first_page_of_type(dir.path(), PAGE, PageType::Overflow);
    // A free page passes the page check; only the chain's walk sees that
    // it is not the overflow page the leaf points to.
    p[8..10].copy_from_slice(&(PageType::Free as u16).to_le_bytes());
    page::seal_in_place(&mut p, PageId::new(no), &id);
    write_page(dir.path(), no, &p);

    let db = Database::open(relative(dir.path()), opts()).expect("reopen");
    let rtx = db.begin_read().expect("read txn");
    let e = rtx.get(&key(LONG)).expect_err("the chain is broken");
    names_the_page(&e, dir.path(), no);
    assert!(e.to_string().contains("expected an overflow page"), "{e}");
    // The other keys are unharmed.
    assert_eq!(rtx.get(&key(LONG + 1)).expect("get"), Some(vec![1u8; 40]));
    drop(rtx);
    // The integrity check names the same page the same way.
    let e = db.check().expect_err("the check sees the broken chain");
    names_the_page(&e, dir.path(), no);
}

#[test]
fn a_checksum_mismatch_names_the_data_file_and_its_byte_offset() {
    let dir = common::scratch();
    build(dir.path());
    let (no, mut p, _) = common::first_page_of_type(dir.path(), PAGE, PageType::Leaf);
    p[PAGE - 100] ^= 0x55;
    write_page(dir.path(), no, &p);

    let db = Database::open(dir.path(), opts()).expect("reopen");
    let rtx = db.begin_read().expect("read txn");
    let errors: Vec<Error> = (0..KEYS).filter_map(|i| rtx.get(&key(i)).err()).collect();
    assert!(!errors.is_empty(), "some read met page {no}");
    for e in &errors {
        names_the_page(e, dir.path(), no);
        let Error::Corruption { path, .. } = e else {
            unreachable!("checked above")
        };
        assert_eq!(path, &dir.path().join("data"), "{e}");
    }
}

/// A page record with right checksums but an unknown flag (a bug that
/// logged it, a crafted log) is refused by recovery naming the segment
/// file that holds it and the record's byte offset there, not the log as a
/// whole at offset 0.
#[test]
fn a_malformed_log_record_names_its_segment_and_byte_offset() {
    use directkv::internals::sim::SimStorage;

    let path = Path::new("/sim/db");
    let disk = SimStorage::new();
    // No background threads: the handle is leaked at the crash, and a
    // segment its preparer renamed while the log is read would vanish
    // between the listing and the read.
    let quiet = Options {
        background_threads: false,
        ..opts()
    };
    let db = Database::open_with(disk.clone(), path, quiet).expect("open");
    let mut tx = db.begin_write().expect("begin");
    tx.put(&key(1), &[1u8; 40]).expect("put");
    tx.commit().expect("commit");
    std::mem::forget(db);
    disk.crash(0);

    let (file, offset_want) = break_first_page_record(&disk, &path.join("wal"));

    let e = match Database::open_with(disk.clone(), path, opts()) {
        Err(e) => e,
        Ok(_) => panic!("a log with a malformed record opened"),
    };
    let Error::Corruption {
        path: got,
        offset,
        page,
        detail,
    } = &e
    else {
        panic!("expected Corruption, got {e}");
    };
    assert_eq!(got, &file, "{e}");
    assert_eq!(*offset, offset_want, "{e}");
    assert!(
        *offset >= directkv::internals::wal::SegmentHeader::BYTES,
        "{e}"
    );
    assert_eq!(*page, None, "{e}");
    assert!(detail.contains("unknown record flag"), "{e}");
    let text = e.to_string();
    let at = format!("{} at byte offset {offset_want}:", file.display());
    assert!(text.contains(&at), "{text}");
}

/// Gives the first page record (its payload: txn, page, flag, ...) of the
/// log under `wal` an unknown flag, its checksum made right again; returns
/// its segment file and its byte offset there.
fn break_first_page_record(
    disk: &directkv::internals::sim::SimStorage,
    wal: &Path,
) -> (PathBuf, u64) {
    use directkv::internals::io::Storage;
    use directkv::internals::wal::{RecordHeader, SegmentHeader};
    use directkv::Lsn;

    let mut found = None;
    for name in disk.list_dir(wal).expect("list") {
        let file = wal.join(&name);
        let mut bytes = disk.file_bytes(&file).expect("segment");
        let Ok(seg) = SegmentHeader::decode(&bytes) else {
            continue;
        };
        let header = directkv::internals::wal::SegmentHeader::BYTES as usize;
        let mut off = header;
        while found.is_none() && off + 16 <= bytes.len() {
            let lsn = Lsn::new(seg.first_lsn().get() + (off - header) as u64);
            let Some(h) = RecordHeader::decode(&bytes[off..], lsn) else {
                off += 8;
                continue;
            };
            let body = off + 16..off + 16 + h.payload_len as usize;
            // 20: the engine's page record kind.
            if h.kind == 20 && body.len() > 17 {
                bytes[body.start + 16] = 9;
                let fixed = RecordHeader {
                    payload_crc: crc32c::crc32c(&bytes[body.clone()]),
                    ..h
                };
                bytes[off..body.start].copy_from_slice(&fixed.encode(lsn));
                found = Some((file.clone(), off as u64));
            }
            off = body.end.next_multiple_of(8);
        }
        disk.set_file_bytes(&file, bytes);
    }
    found.expect("the log holds a page record")
}
