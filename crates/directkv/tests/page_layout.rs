//! A data page whose checksum is right but whose layout is not (a bug
//! that sealed it, a crafted file) is refused where it is read: the read
//! returns `Error::Corruption` naming the page, never a panic, never data.
//! Each case damages one page of a closed database, seals it again so that
//! its checksum, number and identity are right, and reads every key.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use directkv::internals::pages::page::{self, PageType, PAGE_HEADER_BYTES};
use directkv::internals::pages::PageId;
use directkv::{Database, Error, Options};

const PAGE: usize = 8192;
const KEYS: u32 = 3000;

fn opts() -> Options {
    common::unsynced(4 << 20)
}

fn key(i: u32) -> Vec<u8> {
    common::page_key(i)
}

/// A closed database of `KEYS` keys (several leaves under a branch root),
/// one of them with a value long enough for an overflow chain.
fn build(dir: &Path) {
    common::build_with_overflow(dir, opts(), KEYS, 7, PAGE);
}

/// Seals `p` as page `no` and writes it in place.
fn put_back(dir: &Path, no: u64, mut p: Vec<u8>, id: &[u8; 16]) {
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
            Err(Error::Corruption {
                detail,
                offset,
                page,
                ..
            }) => {
                assert_eq!(offset, no * PAGE as u64, "{detail}");
                assert_eq!(page, Some(no), "{detail}");
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
    let dir = common::scratch();
    build(dir.path());
    let (no, mut p, id) = common::first_page_of_type(dir.path(), PAGE, PageType::Leaf);
    p[SLOTS..SLOTS + 2].copy_from_slice(&0xFFF0u16.to_le_bytes());
    put_back(dir.path(), no, p, &id);
    reads_refuse(dir.path(), no);
}

#[test]
fn a_slot_count_past_the_cells_is_corruption() {
    let dir = common::scratch();
    build(dir.path());
    let (no, mut p, id) = common::first_page_of_type(dir.path(), PAGE, PageType::Leaf);
    p[PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + 2].copy_from_slice(&0xFFFFu16.to_le_bytes());
    put_back(dir.path(), no, p, &id);
    reads_refuse(dir.path(), no);
}

#[test]
fn a_garbage_count_that_does_not_add_up_is_corruption() {
    let dir = common::scratch();
    build(dir.path());
    let (no, mut p, id) = common::first_page_of_type(dir.path(), PAGE, PageType::Leaf);
    // The garbage count: free space, compaction and removal rely on it.
    let garbage = PAGE_HEADER_BYTES + 4;
    p[garbage..garbage + 2].copy_from_slice(&0xFFF0u16.to_le_bytes());
    put_back(dir.path(), no, p, &id);
    reads_refuse(dir.path(), no);
    // A write into the page is refused too, not a panic that stops the
    // database, and the check reports the page.
    let db = Database::open(dir.path(), opts()).expect("reopen");
    let mut w = db.begin_write().expect("begin");
    let put = w.put(&key(0), &[2u8; 40]).and_then(|()| w.commit());
    assert!(matches!(put, Err(Error::Corruption { .. })), "{put:?}");
    assert!(db.check().is_err(), "the check refuses page {no}");
    db.begin_read()
        .expect("still running")
        .get(&key(KEYS - 1))
        .expect("another page reads");
}

#[test]
fn a_branch_child_that_is_no_page_is_corruption() {
    let dir = common::scratch();
    build(dir.path());
    let (no, mut p, id) = common::first_page_of_type(dir.path(), PAGE, PageType::Branch);
    // The leftmost child: every descent into the first keys follows it.
    let at = PAGE_HEADER_BYTES + 8;
    p[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    put_back(dir.path(), no, p, &id);
    reads_refuse(dir.path(), no);
}

#[test]
fn an_overflow_value_over_the_limit_is_corruption() {
    let dir = common::scratch();
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
                let id: [u8; 16] = p[32..48].try_into().expect("16 bytes");
                p[c + 3..c + 7].copy_from_slice(&u32::MAX.to_le_bytes());
                put_back(dir.path(), no, p, &id);
                reads_refuse(dir.path(), no);
                return;
            }
        }
    }
    panic!("no overflow cell");
}

/// A page image in the log with right checksums but a wrong layout (a bug
/// that logged it, a crafted log) is refused when recovery replays it:
/// open fails with `Corruption` naming the page, and no read ever meets
/// the page. Replay installs an image without reading the data file, so
/// the read's check never sees it.
#[test]
fn a_replayed_page_image_with_a_wrong_layout_is_corruption() {
    use directkv::internals::sim::SimStorage;

    let path = Path::new("/sim/db");
    let disk = SimStorage::new();
    let opts = || Options {
        compress_page_images: false,
        ..opts()
    };
    let db = Database::open_with(disk.clone(), path, opts()).expect("open");
    let mut tx = db.begin_write().expect("begin");
    for i in 0..KEYS {
        tx.put(&key(i), &[1u8; 40]).expect("put");
    }
    tx.commit().expect("commit");
    db.close().expect("close");
    // After the checkpoint of close, one value changed in place: its leaf's
    // first change since, logged as one full image and nothing else.
    let db = Database::open_with(disk.clone(), path, opts()).expect("reopen");
    let mut tx = db.begin_write().expect("begin");
    tx.put(&key(KEYS / 2), &[2u8; 40]).expect("put");
    tx.commit().expect("commit");
    std::mem::forget(db);
    disk.crash(0);

    let damaged = damage_logged_leaf_images(&disk, &path.join("wal"));
    match Database::open_with(disk.clone(), path, opts()) {
        Err(Error::Corruption { detail, page, .. }) => assert!(
            damaged.iter().any(|&no| page == Some(no)),
            "{page:?}: {detail}"
        ),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a database whose log holds a malformed page opened"),
    }
}

/// Gives every full image of a leaf in the log under `wal` a slot count
/// past every cell, with its record's checksums made right again; returns
/// the pages' numbers.
fn damage_logged_leaf_images(disk: &directkv::internals::sim::SimStorage, wal: &Path) -> Vec<u64> {
    use directkv::internals::io::Storage;
    use directkv::internals::wal::{RecordHeader, SegmentHeader};
    use directkv::Lsn;

    let mut damaged = Vec::new();
    for name in disk.list_dir(wal).expect("list") {
        let file = wal.join(&name);
        let mut bytes = disk.file_bytes(&file).expect("segment");
        let Ok(seg) = SegmentHeader::decode(&bytes) else {
            continue;
        };
        let header = directkv::internals::wal::SegmentHeader::BYTES as usize;
        let mut off = header;
        while off + 16 <= bytes.len() {
            let lsn = Lsn::new(seg.first_lsn().get() + (off - header) as u64);
            let Some(h) = RecordHeader::decode(&bytes[off..], lsn) else {
                off += 8;
                continue;
            };
            let body = off + 16..off + 16 + h.payload_len as usize;
            off = body.end.next_multiple_of(8);
            // A full image's payload ends with the page.
            let image = body.end.saturating_sub(PAGE);
            let leaf = body.len() > PAGE
                && body.end <= bytes.len()
                && u16::from_le_bytes([bytes[image + 8], bytes[image + 9]])
                    == PageType::Leaf as u16;
            if !leaf {
                continue;
            }
            let count = image + PAGE_HEADER_BYTES;
            bytes[count..count + 2].copy_from_slice(&0xFFFFu16.to_le_bytes());
            let fixed = RecordHeader {
                payload_crc: crc32c::crc32c(&bytes[body.clone()]),
                ..h
            };
            bytes[body.start - 16..body.start].copy_from_slice(&fixed.encode(lsn));
            // The record names its page after the transaction's id.
            let no = &bytes[body.start + 8..body.start + 16];
            damaged.push(u64::from_le_bytes(no.try_into().expect("8 bytes")));
        }
        disk.set_file_bytes(&file, bytes);
    }
    assert!(!damaged.is_empty(), "the log holds full images of leaves");
    damaged
}
