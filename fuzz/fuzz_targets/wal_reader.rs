//! Arbitrary bytes after a valid segment header: the WAL reader returns
//! records or an error, never panics; each record it returns, and the input
//! itself taken as a payload of each engine kind, decodes to in-range
//! fields or an error, and a page record applies to a page or errs.
#![no_main]
use std::path::Path;

use directkv::internals::pages::{PAGE_COUNT_MAX, PAGE_COUNT_MIN, TXN_ID_MAX};
use directkv::internals::wal::records;
use directkv::internals::io::{AlignedBuf, FileOptions, Storage, StorageFile};
use directkv::{SyncMethod};
use directkv::internals::sim::SimStorage;
use directkv::internals::wal::SegmentHeader;
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
            Ok(Some(rec)) => decode_as(rec.kind, &rec.payload),
            _ => break,
        }
    }
    for kind in records::KINDS {
        decode_as(kind, body);
    }
});

/// The tree state a commit or checkpoint carries is in range.
fn meta_ok(root: u64, page_count: u64, freelist: u64) {
    assert!((PAGE_COUNT_MIN..=PAGE_COUNT_MAX).contains(&page_count));
    assert!(root >= 1 && root < page_count);
    assert!(freelist < page_count && freelist != root);
}

/// Decodes `payload` as a record of `kind`; what decodes is in range.
fn decode_as(kind: u8, payload: &[u8]) {
    let at = Lsn::new(1 << 40);
    match records::decode(kind, payload, at) {
        Some(Ok(records::Decoded::Page(r))) => {
            assert!(r.page.get() >= 1 && r.page.get() < PAGE_COUNT_MAX);
            assert!(r.txn.get() <= TXN_ID_MAX);
            let _ = r.apply(&mut [0u8; 4096]);
        }
        Some(Ok(records::Decoded::Commit { txn, meta })) => {
            assert!(txn.get() <= TXN_ID_MAX);
            meta_ok(meta.root.get(), meta.page_count, meta.freelist.get());
        }
        Some(Ok(records::Decoded::Checkpoint { redo, meta })) => {
            assert!(redo <= at);
            meta_ok(meta.root.get(), meta.page_count, meta.freelist.get());
        }
        Some(Ok(records::Decoded::Abort { txn })) => assert!(txn.get() <= TXN_ID_MAX),
        Some(Err(_)) | None => {}
    }
}
