//! Every decoder of bytes from disk, fed arbitrary bytes: none panics, and none
//! accepts what it did not write (RELIABILITY.md I7, STYLE "no panics on data
//! read from disk"). The cargo-fuzz targets in `fuzz/` drive the same entry
//! points with coverage guidance; this runs everywhere, in CI.

use std::path::Path;

use directkv::internals::io::{AlignedBuf, FileOptions, Storage, StorageFile};
use directkv::internals::pages::node;
use directkv::internals::pages::ControlFile;
use directkv::internals::pages::{page, PageId};
use directkv::internals::sim::SimStorage;
use directkv::internals::wal::WalReader;
use directkv::internals::wal::{RecordHeader, SegmentHeader};
use directkv::Lsn;
use directkv::SyncMethod;
use proptest::prelude::*;

fn write_file(disk: &SimStorage, path: &Path, bytes: &[u8]) {
    let f = disk
        .open(
            path,
            &FileOptions {
                create: true,
                sync: SyncMethod::Fsync,
                ..FileOptions::default()
            },
        )
        .expect("create");
    let len = bytes.len().next_multiple_of(512).max(512);
    let mut buf = AlignedBuf::new(len, 512).expect("buf");
    buf.as_mut_slice()[..bytes.len()].copy_from_slice(bytes);
    f.write_all_at(buf.io_all(), 0).expect("write");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn data_file_head(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        use directkv::internals::pages::data_head;
        if let Some(h) = data_head::decode(&bytes) {
            // A head it accepts carries the magic, and reads back as itself.
            prop_assert_eq!(&bytes[56..64], &data_head::DATA_HEAD_MAGIC[..]);
            let mut again = bytes.clone();
            data_head::encode(&mut again, h);
            prop_assert_eq!(again, bytes);
        }
    }

    #[test]
    fn record_and_segment_headers(bytes in prop::collection::vec(any::<u8>(), 0..128), lsn in any::<u64>()) {
        let _ = RecordHeader::decode(&bytes, Lsn::new(lsn));
        if SegmentHeader::decode(&bytes).is_ok() {
            // Accepting random bytes as a header would need a CRC collision.
            prop_assert!(bytes.len() >= 64);
        }
    }

    #[test]
    fn pages_and_nodes(mut bytes in prop::collection::vec(any::<u8>(), 4096..=4096), no in 0u64..100) {
        prop_assert!(page::verify(&bytes, PageId::new(no), &[0; 16]).is_err());
        // Structural validation on arbitrary content (as if its checksum held).
        let _ = node::validate(&bytes);
        bytes[8] = 1; bytes[9] = 0; // leaf type
        let _ = node::validate(&bytes);
        bytes[8] = 2; // branch type
        let _ = node::validate(&bytes);
    }

    #[test]
    fn control_files(bytes in prop::collection::vec(any::<u8>(), 0..8192)) {
        let disk = SimStorage::new();
        disk.create_dir_all(Path::new("/x")).expect("mkdir");
        write_file(&disk, Path::new("/x/CONTROL"), &bytes);
        prop_assert!(ControlFile::open(&disk, Path::new("/x/CONTROL")).is_err());
    }

    #[test]
    fn wal_segments(body in prop::collection::vec(any::<u8>(), 0..16384)) {
        let disk = SimStorage::new();
        let dir = Path::new("/w");
        disk.create_dir_all(dir).expect("mkdir");
        // A valid header, then arbitrary records.
        let mut bytes = vec![0u8; 4096];
        SegmentHeader { segment_no: 0, segment_bytes: 64 * 1024, db_id: [1; 16] }.encode(&mut bytes);
        bytes.extend_from_slice(&body);
        write_file(&disk, &dir.join("0000000000000000.seg"), &bytes);
        let mut r = WalReader::new(disk.clone(), dir, 64 * 1024, Some([1; 16]), Lsn::ZERO);
        for _ in 0..10_000 {
            match r.next_record() {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
}
