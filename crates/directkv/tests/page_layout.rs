//! A data page whose checksum is right but whose layout is not (a bug
//! that sealed it, a crafted file) is refused where it is read: the read
//! returns `Error::Corruption` naming the page, never a panic, never data.
//! Each case damages one page of a closed database, seals it again so that
//! its checksum, number and identity are right, and reads every key.

use std::os::unix::fs::FileExt;
use std::path::Path;

use directkv::internals::format::page::{self, PageType, PAGE_HEADER_BYTES};
use directkv::internals::format::{DbId, PageId};
use directkv::{Database, Error, Options, SyncMethod, SyncVariant};

const PAGE: usize = 8192;
const KEYS: u32 = 3000;

fn opts() -> Options {
    Options {
        cache_bytes: 4 << 20,
        wal_sync: Some(SyncVariant {
            method: SyncMethod::None,
            direct: false,
        }),
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

/// A closed database of `KEYS` keys (several leaves under a branch root),
/// one of them with a value long enough for an overflow chain.
fn build(dir: &Path) {
    let db = Database::open(dir, opts()).expect("open");
    let mut tx = db.begin_write().expect("begin");
    for i in 0..KEYS {
        let v = if i == 7 {
            vec![7u8; 3 * PAGE]
        } else {
            vec![1u8; 40]
        };
        tx.put(&key(i), &v).expect("put");
    }
    tx.commit().expect("commit");
    db.close().expect("close");
}

/// The first page of type `t` in the data file, its bytes, and the
/// database's identity (from its header).
fn find(dir: &Path, t: PageType) -> (u64, Vec<u8>, DbId) {
    let file = std::fs::File::open(dir.join("data")).expect("data");
    let pages = file.metadata().expect("meta").len() / PAGE as u64;
    for no in 1..pages {
        let mut p = vec![0u8; PAGE];
        file.read_exact_at(&mut p, no * PAGE as u64).expect("read");
        if u16::from_le_bytes([p[8], p[9]]) == t as u16 {
            let id: DbId = p[32..48].try_into().expect("16 bytes");
            page::verify(&p, PageId::new(no), &id).expect("an intact page");
            return (no, p, id);
        }
    }
    panic!("no {t:?} page");
}

/// Seals `p` as page `no` and writes it in place.
fn put_back(dir: &Path, no: u64, mut p: Vec<u8>, id: &DbId) {
    page::seal_in_place(&mut p, PageId::new(no), id);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("data"))
        .expect("data");
    file.write_all_at(&p, no * PAGE as u64).expect("write");
    file.sync_all().expect("sync");
}

/// Reads every key; the damaged page must come back as `Corruption`
/// naming it, and nothing may panic.
fn reads_refuse(dir: &Path, no: u64) {
    let db = Database::open(dir, opts()).expect("reopen");
    let rtx = db.begin_read().expect("read txn");
    let mut refused = 0;
    for i in 0..KEYS {
        match rtx.get(&key(i)) {
            Ok(_) => {}
            Err(Error::Corruption { detail, offset, .. }) => {
                assert_eq!(offset, no * PAGE as u64, "{detail}");
                assert!(detail.contains(&format!("page {no}")), "{detail}");
                refused += 1;
            }
            Err(e) => panic!("key {i}: {e}"),
        }
    }
    assert!(refused > 0, "some read met page {no}");
}

const SLOTS: usize = PAGE_HEADER_BYTES + 16;

#[test]
fn a_slot_past_the_page_end_is_corruption() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    build(dir.path());
    let (no, mut p, id) = find(dir.path(), PageType::Leaf);
    p[SLOTS..SLOTS + 2].copy_from_slice(&0xFFF0u16.to_le_bytes());
    put_back(dir.path(), no, p, &id);
    reads_refuse(dir.path(), no);
}

#[test]
fn a_slot_count_past_the_cells_is_corruption() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    build(dir.path());
    let (no, mut p, id) = find(dir.path(), PageType::Leaf);
    p[PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + 2].copy_from_slice(&0xFFFFu16.to_le_bytes());
    put_back(dir.path(), no, p, &id);
    reads_refuse(dir.path(), no);
}

#[test]
fn a_branch_child_that_is_no_page_is_corruption() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    build(dir.path());
    let (no, mut p, id) = find(dir.path(), PageType::Branch);
    // The leftmost child: every descent into the first keys follows it.
    let at = PAGE_HEADER_BYTES + 8;
    p[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    put_back(dir.path(), no, p, &id);
    reads_refuse(dir.path(), no);
}

#[test]
fn an_overflow_value_over_the_limit_is_corruption() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    build(dir.path());
    let file = std::fs::File::open(dir.path().join("data")).expect("data");
    let pages = file.metadata().expect("meta").len() / PAGE as u64;
    // The leaf holding key 7's overflow cell (flags bit 0).
    for no in 1..pages {
        let mut p = vec![0u8; PAGE];
        file.read_exact_at(&mut p, no * PAGE as u64).expect("read");
        if u16::from_le_bytes([p[8], p[9]]) != PageType::Leaf as u16 {
            continue;
        }
        let n = usize::from(u16::from_le_bytes([
            p[PAGE_HEADER_BYTES],
            p[PAGE_HEADER_BYTES + 1],
        ]));
        for i in 0..n {
            let c = usize::from(u16::from_le_bytes([p[SLOTS + 2 * i], p[SLOTS + 2 * i + 1]]));
            if p[c + 2] & 1 == 1 {
                let id: DbId = p[32..48].try_into().expect("16 bytes");
                p[c + 3..c + 7].copy_from_slice(&u32::MAX.to_le_bytes());
                put_back(dir.path(), no, p, &id);
                reads_refuse(dir.path(), no);
                return;
            }
        }
    }
    panic!("no overflow cell");
}
