//! Arbitrary CONTROL files: opening one returns a control or a typed error,
//! and a control it returns has every field in range. Inputs whose first
//! byte is even get slot 0's magic, version and CRC resealed, so their
//! fields reach the range checks rather than stopping at the checksum.
#![no_main]
use std::path::Path;

use directkv::internals::pages::{PAGE_COUNT_MAX, PAGE_COUNT_MIN};
use directkv::internals::pages::ControlFile;
use directkv::internals::pages::page;
use directkv::internals::io::{AlignedBuf, FileOptions, Storage, StorageFile};
use directkv::{SyncMethod};
use directkv::internals::sim::SimStorage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let disk = SimStorage::new();
    let _ = disk.create_dir_all(Path::new("/c"));
    let opts = FileOptions { create: true, sync: SyncMethod::Fsync, ..FileOptions::default() };
    let Ok(f) = disk.open(Path::new("/c/CONTROL"), &opts) else { return };
    let n = data.len().min(8192);
    let Ok(mut buf) = AlignedBuf::new(8192, 512) else { return };
    let b = buf.as_mut_slice();
    b[..n].copy_from_slice(&data[..n]);
    if data.first().is_some_and(|x| x & 1 == 0) {
        b[0..8].copy_from_slice(b"DKVCTRL1");
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..88]);
        b[88..92].copy_from_slice(&crc.to_le_bytes());
    }
    let _ = f.write_all_at(buf.io_all(), 0);
    if let Ok(cf) = ControlFile::open(&disk, Path::new("/c/CONTROL")) {
        let c = cf.current();
        assert!(page::PAGE_SIZES.contains(&c.page_bytes));
        assert!((PAGE_COUNT_MIN..=PAGE_COUNT_MAX).contains(&c.page_count));
        assert!(c.root_page.get() >= 1 && c.root_page.get() < c.page_count);
        assert!(c.freelist_head.get() < c.page_count && c.freelist_head != c.root_page);
        assert!(c.redo_lsn <= c.checkpoint_lsn);
    }
});
