//! The control file over real files: a damaged newest slot falls back to
//! the older one, two damaged slots are not a database, and a newer format
//! version is refused.

use super::ControlFile;
use crate::format::control::{Control, FLAG_HISTORY};
use crate::format::PageId;
use crate::{Error, Lsn};

const DB: [u8; 16] = *b"control-db-test!";

fn base() -> Control {
    Control {
        page_bytes: 8192,
        generation: 0,
        db_id: DB,
        checkpoint_lsn: Lsn::new(10),
        redo_lsn: Lsn::new(5),
        root_page: PageId::new(1),
        catalog: PageId::ZERO,
        page_count: 2,
        freelist_head: PageId::ZERO,
        free_pages: Some(0),
        compaction: None,
        flags: FLAG_HISTORY,
        history: [7; 16],
        history_lost: false,
    }
}

#[test]
fn control_file_falls_back_to_the_older_slot() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("CONTROL");
    let base = base();
    let mut cf =
        ControlFile::create(&crate::io::OsStorage::default(), &path, base).expect("create");
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
        ControlFile::open(&crate::io::OsStorage::default(), &path)
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
    let older = ControlFile::open(&crate::io::OsStorage::default(), &path)
        .expect("open")
        .current();
    assert_eq!(older.generation, newest.generation - 1);
    assert_eq!(older.redo_lsn, Lsn::new(5));
    // Both damaged: not a database, said clearly.
    raw.write_all_at(&[0xFF; 16], (1 - slot) * 4096 + 40)
        .expect("write");
    assert!(matches!(
        ControlFile::open(&crate::io::OsStorage::default(), &path),
        Err(Error::NotADatabase { .. })
    ));
}

/// A newer format version is refused, not guessed at.
#[test]
fn a_newer_format_version_is_refused() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let path2 = dir.path().join("CONTROL2");
    ControlFile::create(&crate::io::OsStorage::default(), &path2, base()).expect("create");
    let raw2 = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path2)
        .expect("raw");
    for slot in 0..2u64 {
        let mut b = vec![0u8; 92];
        raw2.read_exact_at(&mut b, slot * 4096).expect("read");
        b[8..12].copy_from_slice(&3u32.to_le_bytes());
        let crc = crc32c_of(&b[..88]);
        b[88..92].copy_from_slice(&crc.to_le_bytes());
        raw2.write_all_at(&b, slot * 4096).expect("write");
    }
    assert!(matches!(
        ControlFile::open(&crate::io::OsStorage::default(), &path2),
        Err(Error::FormatVersion {
            found: 3,
            supported: 2,
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
