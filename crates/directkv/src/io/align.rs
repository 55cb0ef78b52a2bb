//! Direct-I/O alignment and untorn-write capability of a file.
//!
//! Alignment is found, in order of trust:
//! 1. `statx(STATX_DIOALIGN)` (Linux 6.1+ on filesystems that implement it), with
//!    the separate read alignment of `STATX_DIO_READ_ALIGN` where reported;
//! 2. probing: an `O_DIRECT` write of 512 bytes at offset 512 of a scratch file,
//!    then of 4096 bytes at offset 4096; the first that succeeds is the alignment;
//! 3. the default of 4096, which every Linux block device accepts.
//!
//! Probe results are cached per device for the life of the process, so opening
//! many files costs one probe.
//!
//! Worked example: on this project's virtio disk `statx` reports memory alignment
//! 512 and offset alignment 512, matching `/sys/block/vda/queue/logical_block_size`.
//! An engine page of 8 KiB at page 3 sits at offset 24576 = 48 × 512, so it is
//! aligned; a WAL tail block written at offset 1536 is aligned too (3 × 512).

use super::dir::At;
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::statx::{
    statx_fd, STATX_ATTR_WRITE_ATOMIC, STATX_DIOALIGN, STATX_DIO_READ_ALIGN, STATX_WRITE_ATOMIC,
};
use crate::constants::{DIRECT_IO_ALIGN_DEFAULT, DIRECT_IO_ALIGN_MAX, DIRECT_IO_PROBE_ALIGNS};

/// Where an [`Alignment`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlignmentSource {
    /// The kernel reported it through `statx(STATX_DIOALIGN)`.
    Statx,
    /// An `O_DIRECT` write probe on the same filesystem found it.
    Probe,
    /// Neither worked; the safe default of 4096 is assumed.
    Default,
    /// The file is not opened for direct I/O; alignment is only what the engine
    /// keeps for uniformity (buffered I/O needs none).
    Buffered,
}

/// The alignment direct I/O needs for one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alignment {
    /// Required alignment of the memory address of a buffer, in bytes.
    pub memory_bytes: u32,
    /// Required alignment of file offsets and lengths of writes, in bytes.
    pub offset_bytes: u32,
    /// Required alignment of file offsets and lengths of reads, in bytes (some
    /// filesystems accept finer reads than writes; never more than `offset_bytes`).
    pub read_offset_bytes: u32,
    /// How this was determined.
    pub source: AlignmentSource,
}

impl Alignment {
    /// The default assumed when nothing better is known: 4096 for everything.
    pub const DEFAULT: Alignment = Alignment {
        memory_bytes: DIRECT_IO_ALIGN_DEFAULT,
        offset_bytes: DIRECT_IO_ALIGN_DEFAULT,
        read_offset_bytes: DIRECT_IO_ALIGN_DEFAULT,
        source: AlignmentSource::Default,
    };

    fn uniform(bytes: u32, source: AlignmentSource) -> Alignment {
        Alignment {
            memory_bytes: bytes,
            offset_bytes: bytes,
            read_offset_bytes: bytes,
            source,
        }
    }

    /// The unit every transfer of this file is a multiple of: the larger of the
    /// memory and offset alignment. Buffers for the file are carved in this unit.
    pub fn io_unit_bytes(&self) -> u32 {
        self.memory_bytes.max(self.offset_bytes)
    }
}

/// The device's promise of untorn writes (`RWF_ATOMIC`), from `statx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AtomicWriteUnit {
    /// The smallest untorn write, in bytes.
    pub unit_min_bytes: u32,
    /// The largest untorn write, in bytes.
    pub unit_max_bytes: u32,
    /// The largest untorn write that is also fast (0 when not reported).
    pub unit_max_opt_bytes: u32,
    /// The most iovec segments an untorn write may have.
    pub segments_max: u32,
}

/// What `statx` said about direct I/O on one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatxDirectIo {
    /// `None` when the kernel or filesystem does not report `STATX_DIOALIGN`;
    /// `Some(None)` when it reports that direct I/O is unsupported for the file.
    pub alignment: Option<Option<Alignment>>,
    /// `Some` when the file supports untorn writes.
    pub atomic_write: Option<AtomicWriteUnit>,
    /// The device and the filesystem's preferred I/O size.
    pub dev: (u32, u32),
    /// `stx_blksize`.
    pub block_size_bytes: u32,
}

/// Asks the kernel about direct I/O on an open file.
pub fn statx_direct_io(file: &impl AsFd) -> std::io::Result<StatxDirectIo> {
    let raw = statx_fd(
        file.as_fd(),
        STATX_DIOALIGN | STATX_DIO_READ_ALIGN | STATX_WRITE_ATOMIC,
    )?;
    let alignment = if raw.mask & STATX_DIOALIGN == 0 {
        None
    } else if raw.dio_offset_align == 0 || raw.dio_mem_align == 0 {
        Some(None)
    } else {
        let read = if raw.mask & STATX_DIO_READ_ALIGN != 0 && raw.dio_read_offset_align != 0 {
            raw.dio_read_offset_align.min(raw.dio_offset_align)
        } else {
            raw.dio_offset_align
        };
        assert!(read != 0 && read <= raw.dio_offset_align);
        Some(Some(Alignment {
            memory_bytes: raw.dio_mem_align,
            offset_bytes: raw.dio_offset_align,
            read_offset_bytes: read,
            source: AlignmentSource::Statx,
        }))
    };
    let atomic_write = (raw.mask & STATX_WRITE_ATOMIC != 0
        && raw.attributes & STATX_ATTR_WRITE_ATOMIC != 0
        && raw.atomic_write_unit_max != 0)
        .then_some(AtomicWriteUnit {
            unit_min_bytes: raw.atomic_write_unit_min,
            unit_max_bytes: raw.atomic_write_unit_max,
            unit_max_opt_bytes: raw.atomic_write_unit_max_opt,
            segments_max: raw.atomic_write_segments_max,
        });
    Ok(StatxDirectIo {
        alignment,
        atomic_write,
        dev: (raw.dev_major, raw.dev_minor),
        block_size_bytes: raw.blksize,
    })
}

fn plausible(a: &Alignment) -> bool {
    let ok = |v: u32| v.is_power_of_two() && v <= DIRECT_IO_ALIGN_MAX;
    ok(a.memory_bytes) && ok(a.offset_bytes) && ok(a.read_offset_bytes)
}

/// Asserts what every alignment the engine hands out keeps: powers of two no
/// larger than the limit, reads no coarser than writes.
pub(crate) fn assert_sane(a: &Alignment) {
    assert!(
        plausible(a),
        "alignment {a:?} is not a power of two within the limit"
    );
    assert!(
        a.read_offset_bytes <= a.offset_bytes,
        "alignment {a:?} reads coarser than writes"
    );
}

/// Probe results per device (major, minor): `None` when no probe write worked.
type ProbeCache = HashMap<(u32, u32), Option<u32>>;

static PROBE_CACHE: Mutex<Option<ProbeCache>> = Mutex::new(None);

/// Determines the alignment for direct I/O on `file` (already opened with
/// `O_DIRECT`), which lives in directory `dir` on device `dev`.
///
/// Returns `Ok(None)` when the kernel says direct I/O is not supported for it.
pub(crate) fn detect(
    file: &impl AsFd,
    dir: &At<'_>,
) -> std::io::Result<(Option<Alignment>, Option<AtomicWriteUnit>)> {
    let info = statx_direct_io(file)?;
    match info.alignment {
        Some(Some(a)) if plausible(&a) => {
            assert_sane(&a);
            return Ok((Some(a), info.atomic_write));
        }
        Some(None) => return Ok((None, None)),
        _ => {}
    }
    let found = {
        let mut cache = PROBE_CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let cache = cache.get_or_insert_with(HashMap::new);
        match cache.get(&info.dev) {
            Some(found) => *found,
            None => {
                let found = probe(dir);
                cache.insert(info.dev, found);
                found
            }
        }
    };
    let a = match found {
        Some(bytes) => Alignment::uniform(bytes, AlignmentSource::Probe),
        None => Alignment::DEFAULT,
    };
    assert!(
        a.source != AlignmentSource::Statx,
        "statx answers never reach the probe"
    );
    assert_sane(&a);
    Ok((Some(a), info.atomic_write))
}

/// Probes `dir`'s filesystem with `O_DIRECT` writes to a scratch file, smallest
/// alignment first. Returns `None` when no probe write succeeds (including when
/// the scratch file cannot be created), which leaves the caller at the default.
pub fn probe(dir: &At<'_>) -> Option<u32> {
    let at = dir.join(format!(
        "{}{}",
        super::profile::ALIGN_PROBE_PREFIX,
        std::process::id()
    ));
    let result = probe_file(&at);
    let _ = at.unlink();
    result
}

fn probe_file(at: &At<'_>) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    // Created as every engine file is: private, exclusive, never through a
    // symlink (O_EXCL alone already refuses one; O_NOFOLLOW says so).
    let mode = super::Permissions::Private.file_mode();
    let flags = libc::O_RDWR
        | libc::O_CREAT
        | libc::O_EXCL
        | libc::O_DIRECT
        | super::perms::OPEN_FLAGS_ALWAYS;
    let file = at.open_raw(flags, mode).ok()?;
    let file = super::perms::ensure_regular(file, at.path()).ok()?;
    let mut buf = super::buf::AlignedBuf::new(
        2 * DIRECT_IO_ALIGN_DEFAULT as usize,
        crate::constants::SECTOR_BYTES,
    )
    .ok()?;
    for align in DIRECT_IO_PROBE_ALIGNS {
        let a = align as usize;
        assert!(align.is_power_of_two() && 2 * a <= buf.len());
        // The buffer's base is 4096-aligned; starting the write at `a` within it
        // gives an address aligned to `a` and, for a = 512, to nothing coarser.
        let bytes = &mut buf.as_mut_slice()[a..2 * a];
        bytes.fill(0xA5);
        if file.write_all_at(bytes, u64::from(align)).is_ok() {
            return Some(align);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_uniform_4096() {
        assert_eq!(Alignment::DEFAULT.io_unit_bytes(), 4096);
        assert!(plausible(&Alignment::DEFAULT));
        assert!(!plausible(&Alignment::uniform(
            3000,
            AlignmentSource::Statx
        )));
        assert!(!plausible(&Alignment::uniform(
            1 << 20,
            AlignmentSource::Statx
        )));
    }
}
