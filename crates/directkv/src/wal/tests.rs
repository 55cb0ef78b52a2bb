//! Property tests of the WAL codecs: a record header encodes and decodes to
//! itself at its LSN and at no other; any single-bit flip in a header or a
//! segment header is detected; record starts never straddle a block.

use proptest::prelude::*;

use super::format::{
    next_record_start, RecordHeader, SegmentHeader, FORMAT_BLOCK_BYTES, RECORD_HEADER_BYTES,
};
use crate::lsn::Lsn;

fn header() -> impl Strategy<Value = RecordHeader> {
    (
        0u32..=1 << 20,
        any::<u32>(),
        prop_oneof![Just(1u8), Just(2u8), 16u8..=255],
    )
        .prop_map(|(payload_len, payload_crc, kind)| RecordHeader {
            payload_len,
            payload_crc,
            kind,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn header_round_trips_only_at_its_lsn(h in header(), lsn in 0u64..1 << 48, other in 0u64..1 << 48) {
        let bytes = h.encode(Lsn::new(lsn));
        prop_assert_eq!(RecordHeader::decode(&bytes, Lsn::new(lsn)), Some(h));
        if other != lsn {
            prop_assert_eq!(RecordHeader::decode(&bytes, Lsn::new(other)), None);
        }
    }

    #[test]
    fn any_bit_flip_in_a_header_is_detected(h in header(), lsn in 0u64..1 << 48, bit in 0usize..128) {
        let mut bytes = h.encode(Lsn::new(lsn));
        bytes[bit / 8] ^= 1 << (bit % 8);
        prop_assert_eq!(RecordHeader::decode(&bytes, Lsn::new(lsn)), None);
    }

    #[test]
    fn any_bit_flip_in_a_segment_header_is_detected(
        no in 0u64..1 << 40, id in any::<[u8; 16]>(), bit in 0usize..480
    ) {
        let h = SegmentHeader { segment_no: no, segment_bytes: 1 << 20, db_id: id };
        let mut bytes = [0u8; 64];
        h.encode(&mut bytes);
        prop_assert_eq!(SegmentHeader::decode(&bytes), Ok(h));
        bytes[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(SegmentHeader::decode(&bytes).is_err());
    }

    #[test]
    fn record_starts_are_aligned_and_fit_their_block(end in 0u64..1 << 40) {
        let s = next_record_start(Lsn::new(end)).get();
        prop_assert!(s >= end && s - end < FORMAT_BLOCK_BYTES);
        prop_assert_eq!(s % 8, 0);
        prop_assert!(FORMAT_BLOCK_BYTES - s % FORMAT_BLOCK_BYTES >= RECORD_HEADER_BYTES);
    }
}
