//! Arbitrary bytes after a valid segment header: the WAL reader returns
//! records or an error, never panics.
#![no_main]
use std::path::Path;

use directkv::internals::io::{AlignedBuf, FileOptions, Storage, StorageFile, SyncMethod};
use directkv::internals::sim::SimStorage;
use directkv::internals::wal::format::SegmentHeader;
use directkv::internals::wal::WalReader;
use directkv::Lsn;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let disk = SimStorage::new();
    let dir = Path::new("/w");
    let _ = disk.create_dir_all(dir);
    let mut bytes = vec![0u8; 4096];
    SegmentHeader { segment_no: 0, segment_bytes: 64 * 1024, db_id: [1; 16] }.encode(&mut bytes);
    bytes.extend_from_slice(&body[..body.len().min(60 * 1024)]);
    let opts = FileOptions { create: true, sync: SyncMethod::Fsync, ..FileOptions::default() };
    let Ok(f) = disk.open(&dir.join("0000000000000000.seg"), &opts) else { return };
    let len = bytes.len().next_multiple_of(512);
    let Ok(mut buf) = AlignedBuf::new(len, 512) else { return };
    buf.as_mut_slice()[..bytes.len()].copy_from_slice(&bytes);
    let _ = f.write_all_at(buf.io_all(), 0);
    let mut r = WalReader::new(disk.clone(), dir, 64 * 1024, Some([1; 16]), Lsn::ZERO);
    for _ in 0..100_000 {
        match r.next_record() {
            Ok(Some(_)) => {}
            _ => break,
        }
    }
});
