//! The WAL's on-disk format (docs/wal_format.md has the full picture).
//!
//! Record header, 16 bytes, little-endian, at an 8-byte-aligned LSN:
//!
//! | offset | field        | meaning                                                   |
//! |--------|--------------|-----------------------------------------------------------|
//! | 0      | header_crc   | CRC32C of the record's LSN (8 bytes LE) then bytes 4..16   |
//! | 4      | payload_len  | bytes of payload that follow the header                    |
//! | 8      | payload_crc  | CRC32C of the payload                                      |
//! | 12     | kind         | 1 flush header, 2 pad, 16..=255 the caller's               |
//! | 13     | reserved     | three zero bytes                                           |
//!
//! Mixing the LSN into the header CRC makes a record valid only at the position it
//! was written at: a stale record in a recycled segment, or a misdirected copy,
//! fails the check.
//!
//! A header never starts in the last 8 bytes of a 512-byte block (it would not
//! fit); the record then starts at the next block. Worked example: a record
//! ending at LSN 1000 puts the next header at 1000 (8-aligned, 24 bytes left in
//! block 512..1024); one ending at 1016 leaves 8 bytes, so the next starts at 1024.

use crate::constants::SECTOR_BYTES;
use crate::format::le;
use crate::lsn::Lsn;

/// Bytes of a record header.
pub const RECORD_HEADER_BYTES: u64 = 16;
/// Records start at multiples of this.
pub const RECORD_ALIGN_BYTES: u64 = 8;
/// The block a record header may not straddle.
pub const FORMAT_BLOCK_BYTES: u64 = SECTOR_BYTES as u64;
/// The largest payload of one record.
pub const RECORD_PAYLOAD_MAX: usize = 1 << 20;
/// The largest flush (one write then one sync). The writer's buffer is at most
/// this, and the reader looks this far past a bad record (twice) for proof that
/// the log went on after it.
pub const FLUSH_BYTES_MAX: u64 = 8 << 20;
/// Bytes of the segment header at the start of every segment file.
pub const SEGMENT_HEADER_BYTES: u64 = 4096;
/// The smallest segment.
pub const SEGMENT_BYTES_MIN: u64 = 64 * 1024;
/// The largest segment.
pub const SEGMENT_BYTES_MAX: u64 = 1 << 32;
/// The WAL format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Segment header magic.
pub const SEGMENT_MAGIC: [u8; 8] = *b"DKVWALSG";

const _: () = assert!(RECORD_HEADER_BYTES % RECORD_ALIGN_BYTES == 0);
const _: () = assert!(FORMAT_BLOCK_BYTES % RECORD_ALIGN_BYTES == 0);
const _: () = assert!(SEGMENT_HEADER_BYTES % FORMAT_BLOCK_BYTES == 0);
const _: () = assert!(SEGMENT_BYTES_MIN % SEGMENT_HEADER_BYTES == 0);
const _: () = assert!((RECORD_PAYLOAD_MAX as u64) * 4 <= FLUSH_BYTES_MAX);

/// Record kinds the WAL itself writes.
pub mod kind {
    /// First record of every flush; payload: `resume_from` LSN (u64 LE).
    pub const FLUSH_HEADER: u8 = 1;
    /// Filler up to the end of a flush's last I/O unit.
    pub const PAD: u8 = 2;
    /// The smallest kind a caller may use.
    pub const USER_MIN: u8 = 16;
}

/// A decoded record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Payload bytes.
    pub payload_len: u32,
    /// CRC32C of the payload.
    pub payload_crc: u32,
    /// The kind.
    pub kind: u8,
}

fn header_crc(lsn: Lsn, rest: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&lsn.get().to_le_bytes()), rest)
}

impl RecordHeader {
    /// Encodes the header of a record at `lsn`.
    pub fn encode(&self, lsn: Lsn) -> [u8; RECORD_HEADER_BYTES as usize] {
        assert!(self.payload_len as usize <= RECORD_PAYLOAD_MAX);
        assert!(
            self.kind == kind::FLUSH_HEADER
                || self.kind == kind::PAD
                || self.kind >= kind::USER_MIN
        );
        let mut out = [0u8; RECORD_HEADER_BYTES as usize];
        out[4..8].copy_from_slice(&self.payload_len.to_le_bytes());
        out[8..12].copy_from_slice(&self.payload_crc.to_le_bytes());
        out[12] = self.kind;
        let crc = header_crc(lsn, &out[4..]);
        out[0..4].copy_from_slice(&crc.to_le_bytes());
        // The pair across the disk boundary: what is written decodes as itself,
        // at this position only.
        assert_eq!(
            RecordHeader::decode(&out, lsn),
            Some(*self),
            "kind {}",
            self.kind
        );
        out
    }

    /// Decodes and checks a header read at `lsn`; `None` when it is not a valid
    /// header written at that position (zeros, garbage, stale, torn).
    pub fn decode(bytes: &[u8], lsn: Lsn) -> Option<RecordHeader> {
        let bytes = bytes.get(..RECORD_HEADER_BYTES as usize)?;
        if le::u32_at(bytes, 0) != header_crc(lsn, &bytes[4..]) || bytes[13..16] != [0, 0, 0] {
            return None;
        }
        let h = RecordHeader {
            payload_len: le::u32_at(bytes, 4),
            payload_crc: le::u32_at(bytes, 8),
            kind: bytes[12],
        };
        let known = h.kind == kind::FLUSH_HEADER || h.kind == kind::PAD || h.kind >= kind::USER_MIN;
        (known && h.payload_len as usize <= RECORD_PAYLOAD_MAX).then_some(h)
    }

    /// The LSN just past this record's payload.
    pub fn end(&self, lsn: Lsn) -> Lsn {
        let end = Lsn::new(lsn.get() + RECORD_HEADER_BYTES + u64::from(self.payload_len));
        assert!(end.get() - lsn.get() <= RECORD_HEADER_BYTES + RECORD_PAYLOAD_MAX as u64);
        end
    }
}

/// Where the next record header goes after a record ending at `end`: the next
/// 8-byte boundary, moved to the next block when the header would straddle one.
pub fn next_record_start(end: Lsn) -> Lsn {
    let p = end.get().next_multiple_of(RECORD_ALIGN_BYTES);
    let left = FORMAT_BLOCK_BYTES - p % FORMAT_BLOCK_BYTES;
    let start = if left < RECORD_HEADER_BYTES {
        Lsn::new(p + left)
    } else {
        Lsn::new(p)
    };
    assert!(
        start >= end && start.get() - end.get() < RECORD_HEADER_BYTES,
        "the skip is short"
    );
    assert_eq!(start.get() % RECORD_ALIGN_BYTES, 0);
    assert!(FORMAT_BLOCK_BYTES - start.get() % FORMAT_BLOCK_BYTES >= RECORD_HEADER_BYTES);
    start
}

pub use crate::format::DbId;

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The segment's number.
    pub segment_no: u64,
    /// The segment's size including this header.
    pub segment_bytes: u64,
    /// The database it belongs to.
    pub db_id: DbId,
}

/// Why a segment header was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentHeaderError {
    /// Not a directkv WAL segment at all (or its header is damaged).
    NotASegment,
    /// A segment of a format version this build does not read.
    Version(u32),
}

impl SegmentHeader {
    /// Bytes of the header at the start of every segment file; records
    /// start after it.
    pub const BYTES: u64 = SEGMENT_HEADER_BYTES;
    /// The magic a segment file starts with.
    pub const MAGIC: [u8; 8] = SEGMENT_MAGIC;

    /// The LSN of the segment's first payload byte.
    pub fn first_lsn(&self) -> Lsn {
        assert!(
            self.segment_bytes > SEGMENT_HEADER_BYTES,
            "a segment holds records"
        );
        Lsn::new(self.segment_no * (self.segment_bytes - SEGMENT_HEADER_BYTES))
    }

    /// Encodes the header into the first 64 bytes of `out`.
    pub fn encode(&self, out: &mut [u8]) {
        assert!(out.len() >= 64, "a segment header takes 64 bytes");
        assert!((SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&self.segment_bytes));
        assert_eq!(self.segment_bytes % SEGMENT_HEADER_BYTES, 0);
        out[..64].fill(0);
        out[0..8].copy_from_slice(&SEGMENT_MAGIC);
        out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&(SEGMENT_HEADER_BYTES as u32).to_le_bytes());
        out[16..24].copy_from_slice(&self.segment_no.to_le_bytes());
        out[24..32].copy_from_slice(&self.segment_bytes.to_le_bytes());
        out[32..40].copy_from_slice(&self.first_lsn().get().to_le_bytes());
        out[40..56].copy_from_slice(&self.db_id);
        let crc = crc32c::crc32c(&out[..56]);
        out[56..60].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            SegmentHeader::decode(out),
            Ok(*self),
            "encode and decode pair"
        );
    }

    /// Decodes and checks a segment header.
    ///
    /// # Errors
    /// [`SegmentHeaderError`] when the bytes are not a valid header of a version
    /// this build reads.
    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, SegmentHeaderError> {
        let b = bytes.get(..64).ok_or(SegmentHeaderError::NotASegment)?;
        if b[0..8] != SEGMENT_MAGIC || le::u32_at(b, 56) != crc32c::crc32c(&b[..56]) {
            return Err(SegmentHeaderError::NotASegment);
        }
        let version = le::u32_at(b, 8);
        if version != FORMAT_VERSION {
            return Err(SegmentHeaderError::Version(version));
        }
        let mut db_id = [0u8; 16];
        db_id.copy_from_slice(&b[40..56]);
        let h = SegmentHeader {
            segment_no: le::u64_at(b, 16),
            segment_bytes: le::u64_at(b, 24),
            db_id,
        };
        let sane = le::u32_at(b, 12) as u64 == SEGMENT_HEADER_BYTES
            && (SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&h.segment_bytes)
            && h.segment_bytes % SEGMENT_HEADER_BYTES == 0
            // The product of two numbers from disk: checked, so a damaged
            // header with a valid checksum is refused, never overflowed.
            && h.segment_no.checked_mul(h.segment_bytes - SEGMENT_HEADER_BYTES)
                == Some(le::u64_at(b, 32));
        if !sane {
            return Err(SegmentHeaderError::NotASegment);
        }
        Ok(h)
    }
}

/// Maps LSNs to segments for one segment size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of a segment file, header included.
    pub segment_bytes: u64,
}

impl Layout {
    /// Record-stream bytes one segment holds.
    pub fn payload_bytes(&self) -> u64 {
        // Layouts are made only from validated options or decoded headers.
        assert!(self.segment_bytes >= SEGMENT_BYTES_MIN && self.segment_bytes <= SEGMENT_BYTES_MAX);
        assert_eq!(self.segment_bytes % SEGMENT_HEADER_BYTES, 0);
        self.segment_bytes - SEGMENT_HEADER_BYTES
    }

    /// The segment holding `lsn`.
    pub fn segment_of(&self, lsn: Lsn) -> u64 {
        let payload = self.payload_bytes();
        let n = lsn.get() / payload;
        // Worked example: 1 MiB segments hold 1,044,480 bytes of records, so
        // LSN 1,044,480 is the first byte of segment 1, at file offset 4096.
        assert!(n * payload <= lsn.get() && lsn.get() - n * payload < payload);
        n
    }

    /// The file offset of `lsn` inside its segment.
    pub fn file_offset(&self, lsn: Lsn) -> u64 {
        let offset = SEGMENT_HEADER_BYTES + lsn.get() % self.payload_bytes();
        assert!(offset >= SEGMENT_HEADER_BYTES && offset < self.segment_bytes);
        // The mapping back: segment start plus the offset past the header.
        let start = self.segment_of(lsn) * self.payload_bytes();
        assert_eq!(
            start + (offset - SEGMENT_HEADER_BYTES),
            lsn.get(),
            "offset maps back to {lsn}"
        );
        offset
    }

    /// The first LSN of segment `n`.
    pub fn segment_start(&self, n: u64) -> Lsn {
        Lsn::new(n * self.payload_bytes())
    }
}

/// The file name of segment `n`.
pub fn segment_file_name(n: u64) -> String {
    let name = format!("{n:016X}.seg");
    assert_eq!(name.len(), 20, "sixteen hex digits and the suffix");
    debug_assert_eq!(parse_segment_file_name(&name), Some(n));
    name
}

/// The segment number in a file name, if it is one.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".seg")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

#[cfg(test)]
mod tests {

    /// A header whose checksum is valid but whose segment number would
    /// overflow its first LSN is not a segment (it never panics).
    #[test]
    fn a_segment_number_that_overflows_its_lsn_is_refused() {
        let h = SegmentHeader {
            segment_no: 3,
            segment_bytes: SEGMENT_BYTES_MIN,
            db_id: [9; 16],
        };
        let mut bytes = vec![0u8; 64];
        h.encode(&mut bytes);
        assert_eq!(SegmentHeader::decode(&bytes), Ok(h));
        le::put_u64(&mut bytes, 16, u64::MAX);
        let crc = crc32c::crc32c(&bytes[..56]);
        le::put_u32(&mut bytes, 56, crc);
        assert_eq!(
            SegmentHeader::decode(&bytes),
            Err(SegmentHeaderError::NotASegment)
        );
    }
    use super::*;

    #[test]
    fn header_is_valid_only_at_its_lsn() {
        let h = RecordHeader {
            payload_len: 10,
            payload_crc: 7,
            kind: 20,
        };
        let bytes = h.encode(Lsn::new(4096));
        assert_eq!(RecordHeader::decode(&bytes, Lsn::new(4096)), Some(h));
        assert_eq!(RecordHeader::decode(&bytes, Lsn::new(4104)), None);
        assert_eq!(RecordHeader::decode(&[0u8; 16], Lsn::new(0)), None);
        for bit in 0..128 {
            let mut flipped = bytes;
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                RecordHeader::decode(&flipped, Lsn::new(4096)),
                None,
                "bit {bit}"
            );
        }
    }

    #[test]
    fn record_starts_skip_block_tails() {
        assert_eq!(next_record_start(Lsn::new(1000)), Lsn::new(1000));
        assert_eq!(next_record_start(Lsn::new(1001)), Lsn::new(1008));
        assert_eq!(next_record_start(Lsn::new(1016)), Lsn::new(1024));
        assert_eq!(next_record_start(Lsn::new(1008)), Lsn::new(1008));
    }

    #[test]
    fn segment_header_round_trip_and_rejects() {
        let h = SegmentHeader {
            segment_no: 3,
            segment_bytes: 1 << 20,
            db_id: [9; 16],
        };
        let mut buf = [0u8; 64];
        h.encode(&mut buf);
        assert_eq!(SegmentHeader::decode(&buf), Ok(h));
        let mut bad = buf;
        bad[20] ^= 1;
        assert_eq!(
            SegmentHeader::decode(&bad),
            Err(SegmentHeaderError::NotASegment)
        );
        assert_eq!(parse_segment_file_name(&segment_file_name(42)), Some(42));
        assert_eq!(parse_segment_file_name("x.seg"), None);
    }

    #[test]
    fn layout_maps_lsns() {
        let l = Layout {
            segment_bytes: 1 << 20,
        };
        let p = (1 << 20) - SEGMENT_HEADER_BYTES;
        assert_eq!(l.segment_of(Lsn::new(p - 1)), 0);
        assert_eq!(l.segment_of(Lsn::new(p)), 1);
        assert_eq!(l.file_offset(Lsn::new(p)), SEGMENT_HEADER_BYTES);
        assert_eq!(l.segment_start(2), Lsn::new(2 * p));
    }
}
