//! Arbitrary WAL segment headers: decoding returns a header or a typed
//! error, never panics; with the magic and checksum made right, so the
//! fields themselves are what is judged, a header it accepts is one the
//! engine can use and encodes back to itself.
#![no_main]
use directkv::internals::wal::SegmentHeader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = SegmentHeader::decode(data);
    let mut b = [0u8; 64];
    let n = data.len().min(64);
    b[..n].copy_from_slice(&data[..n]);
    b[0..8].copy_from_slice(&SegmentHeader::MAGIC);
    let crc = crc32c::crc32c(&b[..56]);
    b[56..60].copy_from_slice(&crc.to_le_bytes());
    if let Ok(h) = SegmentHeader::decode(&b) {
        let _ = h.first_lsn();
        let mut again = [0u8; 64];
        h.encode(&mut again);
        assert_eq!(SegmentHeader::decode(&again), Ok(h));
    }
});
