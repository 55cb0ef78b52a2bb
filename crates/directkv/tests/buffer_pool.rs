//! The buffer pool over a real data file with direct I/O: pages round-trip
//! through eviction and reopening; no page is written before the log is durable
//! up to its LSN (the WAL rule); a flush visits only dirty pages, however many
//! are cached (invariant 7); a scan leaves the hot set cached; a damaged or
//! misdirected page is an error naming file and offset while others stay
//! readable; concurrent latched updates lose nothing; the control file falls back
//! to its older slot when the newer one is damaged.
//!
//! The pool's own cases drive one layer and are unit tests of `buffer`
//! (`buffer/tests.rs`); the control file's, which sits above it, is here.

mod common;

use directkv::internals::io::OsStorage;
use directkv::internals::pages::PageId;
use directkv::internals::pages::{Control, ControlFile, FLAG_HISTORY};
use directkv::{Error, Lsn};

const DB: [u8; 16] = *b"buffer-pool-test";

#[test]
fn control_file_falls_back_to_the_older_slot() {
    use std::os::unix::fs::FileExt;
    let dir = common::scratch();
    let path = dir.path().join("CONTROL");
    let base = Control {
        page_bytes: 8192,
        generation: 0,
        db_id: DB,
        checkpoint_lsn: Lsn::new(10),
        redo_lsn: Lsn::new(5),
        root_page: PageId::new(1),
        page_count: 2,
        freelist_head: PageId::ZERO,
        flags: FLAG_HISTORY,
        history: [7; 16],
        history_lost: false,
    };
    let mut cf = ControlFile::create(&OsStorage::default(), &path, base).expect("create");
    cf.write(Control {
        redo_lsn: Lsn::new(99),
        checkpoint_lsn: Lsn::new(120),
        ..base
    })
    .expect("write");
    let newest = cf.current();
    assert_eq!(newest.redo_lsn, Lsn::new(99));
    drop(cf);
    assert_eq!(
        ControlFile::open(&OsStorage::default(), &path)
            .expect("open")
            .current(),
        newest
    );
    // Damage the newest slot (a torn control write): the previous one wins.
    let raw = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("raw");
    let slot = newest.generation % 2;
    raw.write_all_at(&[0xFF; 16], slot * 4096 + 40)
        .expect("write");
    let older = ControlFile::open(&OsStorage::default(), &path)
        .expect("open")
        .current();
    assert_eq!(older.generation, newest.generation - 1);
    assert_eq!(older.redo_lsn, Lsn::new(5));
    // Both damaged: not a database, said clearly.
    raw.write_all_at(&[0xFF; 16], (1 - slot) * 4096 + 40)
        .expect("write");
    assert!(matches!(
        ControlFile::open(&OsStorage::default(), &path),
        Err(Error::NotADatabase { .. })
    ));
    // A newer format version is refused, not guessed at.
    let path2 = dir.path().join("CONTROL2");
    ControlFile::create(&OsStorage::default(), &path2, base).expect("create");
    let raw2 = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path2)
        .expect("raw");
    for slot in 0..2u64 {
        let mut b = vec![0u8; 92];
        raw2.read_exact_at(&mut b, slot * 4096).expect("read");
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c_of(&b[..88]);
        b[88..92].copy_from_slice(&crc.to_le_bytes());
        raw2.write_all_at(&b, slot * 4096).expect("write");
    }
    assert!(matches!(
        ControlFile::open(&OsStorage::default(), &path2),
        Err(Error::FormatVersion {
            found: 2,
            supported: 1,
            ..
        })
    ));
}

fn crc32c_of(b: &[u8]) -> u32 {
    // CRC32C (Castagnoli), bitwise: the test's own implementation, independent
    // of the engine's.
    let mut crc = !0u32;
    for &byte in b {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
