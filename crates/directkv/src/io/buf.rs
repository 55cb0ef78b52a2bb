//! Aligned memory for direct I/O: one arena per use, carved into equal slots.
//!
//! Direct I/O needs buffers whose address, length and file offset are multiples
//! of the device's alignment. Allocating each buffer with padding wastes up to an
//! alignment unit per buffer (the Berkeley DB lesson in LESSONS.md §2), so the
//! engine allocates one aligned region and hands out slots of it.
//!
//! Invariants:
//! - The arena's base address is aligned to `max(unit, ARENA_ALIGN_MIN)`; slot
//!   sizes are multiples of `unit`; so every slot starts aligned to `unit`.
//! - The only way to pass memory to a file's read or write is an [`IoRef`] or
//!   [`IoMut`], and those can only be made at `unit`-aligned starts and lengths
//!   within a buffer. Unaligned I/O is therefore a constructor error here, not an
//!   `EINVAL` from the kernel later.
//! - A slot is leased to at most one [`AlignedBuf`] at a time; dropping the buffer
//!   returns the slot.

use std::alloc::Layout;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::constants::{ARENA_ALIGN_MIN, ARENA_SLOTS_MAX};
use crate::error::{Error, Result};

struct ArenaMemory {
    base: NonNull<u8>,
    layout: Layout,
    slot_bytes: usize,
    slot_count: usize,
    unit_bytes: u32,
    free: Mutex<Vec<u32>>,
}

// SAFETY: the arena's memory is plain bytes owned by this struct; slots are
// handed out to at most one `AlignedBuf` at a time (free list under a mutex), so
// no two owners alias a slot, and the free list itself is behind a mutex.
unsafe impl Send for ArenaMemory {}
// SAFETY: see `Send`; shared access only reads immutable fields or locks `free`.
unsafe impl Sync for ArenaMemory {}

impl Drop for ArenaMemory {
    fn drop(&mut self) {
        // SAFETY: `base` was returned by `alloc_zeroed(self.layout)` and is freed
        // exactly once, here; every `AlignedBuf` holds an `Arc` to this memory, so
        // none can outlive it.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) };
    }
}

/// One aligned allocation carved into `slot_count` slots of `slot_bytes` each:
/// `acquire` hands out a free slot as an [`AlignedBuf`], which returns it
/// when dropped.
#[derive(Clone)]
pub struct AlignedArena {
    memory: Arc<ArenaMemory>,
}

impl std::fmt::Debug for AlignedArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedArena")
            .field("slot_bytes", &self.memory.slot_bytes)
            .field("slot_count", &self.memory.slot_count)
            .field("unit_bytes", &self.memory.unit_bytes)
            .finish()
    }
}

impl AlignedArena {
    /// Allocates an arena of `slot_count` zeroed slots of `slot_bytes`, every
    /// slot aligned to `unit_bytes` (a power of two).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `unit_bytes` is not a power of two, when
    /// `slot_bytes` is zero or not a multiple of it, when there are no slots or
    /// more than the limit, or when the memory cannot be allocated.
    pub fn new(slot_bytes: usize, slot_count: usize, unit_bytes: u32) -> Result<AlignedArena> {
        if !unit_bytes.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "alignment unit {unit_bytes} is not a power of two"
            )));
        }
        if slot_bytes == 0 || slot_bytes % unit_bytes as usize != 0 {
            return Err(Error::InvalidArgument(format!(
                "slot size {slot_bytes} is not a positive multiple of {unit_bytes}"
            )));
        }
        if slot_count == 0 || slot_count > ARENA_SLOTS_MAX {
            return Err(Error::InvalidArgument(format!(
                "slot count {slot_count} is outside 1..={ARENA_SLOTS_MAX}"
            )));
        }
        let total = slot_bytes
            .checked_mul(slot_count)
            .ok_or_else(|| Error::InvalidArgument("arena size overflows".into()))?;
        let align = unit_bytes.max(ARENA_ALIGN_MIN) as usize;
        let layout = Layout::from_size_align(total, align)
            .map_err(|e| Error::InvalidArgument(format!("arena layout: {e}")))?;
        // SAFETY: `layout` has a non-zero size (slot_bytes > 0, slot_count > 0).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = NonNull::new(raw).ok_or_else(|| {
            Error::InvalidArgument(format!("cannot allocate an arena of {total} bytes"))
        })?;
        assert_eq!(base.as_ptr() as usize % align, 0);
        assert_eq!(
            align % unit_bytes as usize,
            0,
            "arena alignment covers the unit"
        );
        assert_eq!(
            layout.size(),
            slot_bytes * slot_count,
            "no padding beyond the slots"
        );
        let free: Vec<u32> = (0..slot_count as u32).rev().collect();
        assert_eq!(free.len(), slot_count);
        Ok(AlignedArena {
            memory: Arc::new(ArenaMemory {
                base,
                layout,
                slot_bytes,
                slot_count,
                unit_bytes,
                free: Mutex::new(free),
            }),
        })
    }

    /// Leases a free slot, or `None` when all are in use.
    pub fn acquire(&self) -> Option<AlignedBuf> {
        let slot = self
            .memory
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()?;
        assert!((slot as usize) < self.memory.slot_count);
        let buf = AlignedBuf {
            memory: Arc::clone(&self.memory),
            slot,
        };
        assert_eq!(buf.ptr() as usize % self.memory.unit_bytes as usize, 0);
        Some(buf)
    }

    /// The size of each slot in bytes.
    pub fn slot_bytes(&self) -> usize {
        self.memory.slot_bytes
    }

    /// The number of slots.
    pub fn slot_count(&self) -> usize {
        self.memory.slot_count
    }

    /// The alignment unit every slot and every I/O view honours.
    pub fn unit_bytes(&self) -> u32 {
        self.memory.unit_bytes
    }

    /// The number of slots not leased.
    pub fn free_slots(&self) -> usize {
        self.memory
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// The whole arena as one address range, for registering it with the kernel
    /// (io_uring fixed buffers). The pointer is valid while any clone of this
    /// arena or any of its buffers lives.
    pub fn region(&self) -> (*mut u8, usize) {
        let size = self.memory.layout.size();
        assert_eq!(size, self.memory.slot_bytes * self.memory.slot_count);
        (self.memory.base.as_ptr(), size)
    }
}

/// A leased, aligned slot of an `AlignedArena` (one aligned allocation
/// carved into equal slots).
pub struct AlignedBuf {
    memory: Arc<ArenaMemory>,
    slot: u32,
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("slot", &self.slot)
            .field("len", &self.len())
            .field("unit_bytes", &self.unit_bytes())
            .finish()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let mut free = self.memory.free.lock().unwrap_or_else(|p| p.into_inner());
        assert!((self.slot as usize) < self.memory.slot_count);
        debug_assert!(!free.contains(&self.slot), "slot returned twice");
        free.push(self.slot);
        assert!(
            free.len() <= self.memory.slot_count,
            "more slots free than exist"
        );
    }
}

impl AlignedBuf {
    /// A stand-alone buffer of `len_bytes` aligned to `unit_bytes`: an arena of
    /// one slot, so nothing is allocated beyond `len_bytes`.
    ///
    /// # Errors
    /// As [`AlignedArena::new`].
    pub fn new(len_bytes: usize, unit_bytes: u32) -> Result<AlignedBuf> {
        let arena = AlignedArena::new(len_bytes, 1, unit_bytes)?;
        let buf = arena.acquire();
        // A fresh one-slot arena has its slot free.
        let buf = buf.expect("fresh arena has a free slot");
        assert_eq!(buf.len(), len_bytes);
        assert_eq!(buf.unit_bytes(), unit_bytes);
        Ok(buf)
    }

    fn ptr(&self) -> *mut u8 {
        assert!((self.slot as usize) < self.memory.slot_count);
        let offset = self.slot as usize * self.memory.slot_bytes;
        assert!(offset + self.memory.slot_bytes <= self.memory.layout.size());
        // SAFETY: slot < slot_count, so offset + slot_bytes <= the allocation's
        // size; the result stays inside the allocation.
        unsafe { self.memory.base.as_ptr().add(offset) }
    }

    /// The length in bytes (the arena's slot size).
    pub fn len(&self) -> usize {
        self.memory.slot_bytes
    }

    /// Always false: a slot has a positive size.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The alignment unit of this buffer's address and of every I/O view of it.
    pub fn unit_bytes(&self) -> u32 {
        self.memory.unit_bytes
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the slot is leased to `self` alone (see `AlignedArena`), the
        // range is inside the allocation, and the bytes were initialised by
        // `alloc_zeroed`.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len()) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` guarantees no other borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), self.len()) }
    }

    fn check(&self, range: &Range<usize>) -> Result<()> {
        let unit = self.memory.unit_bytes as usize;
        if range.start > range.end
            || range.end > self.len()
            || range.start % unit != 0
            || range.end % unit != 0
            || range.is_empty()
        {
            return Err(Error::InvalidArgument(format!(
                "I/O view {range:?} of a {}-byte buffer is empty, out of bounds, or not \
                 aligned to {unit} bytes",
                self.len()
            )));
        }
        Ok(())
    }

    /// A view for writing `range` of this buffer to a file.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `range` is empty, out of bounds, or its
    /// start or end is not a multiple of [`unit_bytes`](Self::unit_bytes).
    pub fn io(&self, range: Range<usize>) -> Result<IoRef<'_>> {
        self.check(&range)?;
        Ok(IoRef::new(&self.as_slice()[range], self.memory.unit_bytes))
    }

    /// A view for reading from a file into `range` of this buffer.
    ///
    /// # Errors
    /// As [`io`](Self::io).
    pub fn io_mut(&mut self, range: Range<usize>) -> Result<IoMut<'_>> {
        self.check(&range)?;
        let unit_bytes = self.memory.unit_bytes;
        Ok(IoMut::new(&mut self.as_mut_slice()[range], unit_bytes))
    }

    /// The whole buffer as a write view.
    pub fn io_all(&self) -> IoRef<'_> {
        IoRef::new(self.as_slice(), self.memory.unit_bytes)
    }

    /// The whole buffer as a read view.
    pub fn io_all_mut(&mut self) -> IoMut<'_> {
        let unit_bytes = self.memory.unit_bytes;
        IoMut::new(self.as_mut_slice(), unit_bytes)
    }
}

/// Bytes to be written, aligned to `unit_bytes` in address and length.
#[derive(Debug, Clone, Copy)]
pub struct IoRef<'a> {
    bytes: &'a [u8],
    unit_bytes: u32,
}

/// Asserts that `bytes` is a valid direct-I/O view: non-empty, with address and
/// length multiples of the power-of-two `unit_bytes`. Views are made only from
/// checked ranges of aligned slots, so a failure here is a bug in this module.
fn assert_view(bytes: &[u8], unit_bytes: u32) {
    assert!(unit_bytes.is_power_of_two());
    assert!(!bytes.is_empty(), "I/O views are never empty");
    assert_eq!(
        bytes.as_ptr() as usize % unit_bytes as usize,
        0,
        "view address unaligned"
    );
    assert_eq!(
        bytes.len() % unit_bytes as usize,
        0,
        "view length unaligned"
    );
}

impl<'a> IoRef<'a> {
    fn new(bytes: &'a [u8], unit_bytes: u32) -> IoRef<'a> {
        assert_view(bytes, unit_bytes);
        IoRef { bytes, unit_bytes }
    }

    /// The bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: views are never empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The alignment unit of address and length.
    pub fn unit_bytes(&self) -> u32 {
        self.unit_bytes
    }
}

/// Bytes to be read into, aligned to `unit_bytes` in address and length.
#[derive(Debug)]
pub struct IoMut<'a> {
    bytes: &'a mut [u8],
    unit_bytes: u32,
}

impl<'a> IoMut<'a> {
    fn new(bytes: &'a mut [u8], unit_bytes: u32) -> IoMut<'a> {
        assert_view(bytes, unit_bytes);
        IoMut { bytes, unit_bytes }
    }

    /// The bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: views are never empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The alignment unit of address and length.
    pub fn unit_bytes(&self) -> u32 {
        self.unit_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_aligned_and_not_padded() {
        let arena = AlignedArena::new(8192, 3, 512).expect("arena");
        let (_, size) = arena.region();
        assert_eq!(size, 3 * 8192, "no per-slot padding");
        let bufs: Vec<_> = (0..3).map(|_| arena.acquire().expect("slot")).collect();
        assert!(arena.acquire().is_none());
        for b in &bufs {
            assert_eq!(b.as_slice().as_ptr() as usize % 4096, 0);
        }
        drop(bufs);
        assert_eq!(arena.free_slots(), 3);
    }

    #[test]
    fn unaligned_views_are_refused() {
        let mut buf = AlignedBuf::new(4096, 512).expect("buf");
        assert!(buf.io(0..512).is_ok());
        assert!(buf.io(512..4096).is_ok());
        assert!(buf.io(1..513).is_err());
        assert!(buf.io(0..100).is_err());
        assert!(buf.io(0..0).is_err());
        assert!(buf.io(0..8192).is_err());
        assert!(buf.io_mut(256..768).is_err());
        let view = buf.io_mut(1024..2048).expect("aligned view");
        assert_eq!(view.len(), 1024);
        assert_eq!(view.unit_bytes(), 512);
    }

    #[test]
    fn bad_arena_shapes_are_refused() {
        assert!(AlignedArena::new(4096, 1, 3000).is_err());
        assert!(AlignedArena::new(1000, 1, 512).is_err());
        assert!(AlignedArena::new(0, 1, 512).is_err());
        assert!(AlignedArena::new(4096, 0, 512).is_err());
    }
}
