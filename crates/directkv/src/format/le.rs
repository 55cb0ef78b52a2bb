//! Little-endian integers at byte offsets: the one codec of every on-disk
//! structure (STYLE.md 8). Formats use `u16`/`u32`/`u64`, never `usize`.
//!
//! Invariants:
//! - `*_at` and `put_*` take a range the caller has already bounded (a fixed
//!   size slot, a page, a header of known length); a short slice there is a
//!   bug and panics.
//! - `get_*` are for lengths not yet checked (bytes from disk whose size is
//!   itself data): a short slice is `None`, never a panic.

/// The `u16` at `at`.
pub fn u16_at(b: &[u8], at: usize) -> u16 {
    assert!(at + 2 <= b.len(), "u16 at {at} of {} bytes", b.len());
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The `u32` at `at`.
pub fn u32_at(b: &[u8], at: usize) -> u32 {
    assert!(at + 4 <= b.len(), "u32 at {at} of {} bytes", b.len());
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The `u64` at `at`.
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    assert!(at + 8 <= b.len(), "u64 at {at} of {} bytes", b.len());
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// The `u16` at `at`, or `None` when `b` is too short.
pub fn get_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// The `u32` at `at`, or `None` when `b` is too short.
pub fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The `u64` at `at`, or `None` when `b` is too short.
pub fn get_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Writes `v` at `at`.
pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
    assert!(at + 2 <= b.len(), "u16 at {at} of {} bytes", b.len());
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` at `at`.
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    assert!(at + 4 <= b.len(), "u32 at {at} of {} bytes", b.len());
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` at `at`.
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    assert!(at + 8 <= b.len(), "u64 at {at} of {} bytes", b.len());
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_values_read_back_little_endian() {
        let mut b = [0u8; 16];
        put_u16(&mut b, 0, 0x0102);
        put_u32(&mut b, 2, 0x0304_0506);
        put_u64(&mut b, 6, 0x0708_090a_0b0c_0d0e);
        assert_eq!(b[0..2], [0x02, 0x01], "least significant byte first");
        assert_eq!(u16_at(&b, 0), 0x0102);
        assert_eq!(u32_at(&b, 2), 0x0304_0506);
        assert_eq!(u64_at(&b, 6), 0x0708_090a_0b0c_0d0e);
        assert_eq!(get_u16(&b, 0), Some(0x0102));
        assert_eq!(get_u64(&b, 6), Some(0x0708_090a_0b0c_0d0e));
    }

    #[test]
    fn short_or_overflowing_reads_are_none() {
        let b = [0u8; 9];
        assert_eq!(get_u64(&b, 2), None);
        assert_eq!(get_u16(&b, 8), None);
        assert_eq!(get_u64(&b, usize::MAX - 3), None);
    }
}
