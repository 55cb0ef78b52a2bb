//! Arbitrary CONTROL files: opening one returns a control or a typed error.
#![no_main]
use std::path::Path;

use directkv::internals::db::ControlFile;
use directkv::internals::io::{AlignedBuf, FileOptions, Storage, StorageFile, SyncMethod};
use directkv::internals::sim::SimStorage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let disk = SimStorage::new();
    let _ = disk.create_dir_all(Path::new("/c"));
    let opts = FileOptions { create: true, sync: SyncMethod::Fsync, ..FileOptions::default() };
    let Ok(f) = disk.open(Path::new("/c/CONTROL"), &opts) else { return };
    let n = data.len().min(8192);
    let Ok(mut buf) = AlignedBuf::new(8192, 512) else { return };
    buf.as_mut_slice()[..n].copy_from_slice(&data[..n]);
    let _ = f.write_all_at(buf.io_all(), 0);
    let _ = ControlFile::open(&disk, Path::new("/c/CONTROL"));
});
