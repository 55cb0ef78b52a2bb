//! The `CONTROL` file: the database's small, durable root of trust.
//!
//! Two slots, each in its own 4096-byte block (offsets 0 and 4096), so a torn
//! write of one can never touch the other. Each write goes to the slot of the
//! next generation's parity and is followed by `fsync`; reading takes the valid
//! slot with the highest generation. A crash during a write therefore leaves the
//! previous control intact (RELIABILITY.md F17).
//!
//! Slot layout (little-endian):
//!
//! | offset | size | field |
//! |--------|------|-------|
//! | 0  | 8  | magic `DKVCTRL1` |
//! | 8  | 4  | format version |
//! | 12 | 4  | page size |
//! | 16 | 8  | generation |
//! | 24 | 16 | database identity |
//! | 40 | 8  | checkpoint LSN (where the checkpoint record ends) |
//! | 48 | 8  | redo LSN (replay starts here) |
//! | 56 | 8  | root page |
//! | 64 | 8  | pages in the data file |
//! | 72 | 8  | free-list head page (0: none) |
//! | 80 | 8  | flags |
//! | 88 | 4  | CRC32C of bytes 0..88 |

use std::path::Path;

use crate::error::{Error, Result};
use crate::io::{AlignedBuf, DirectIo, FileOptions, Fill, Storage, StorageFile, SyncMethod};
use crate::lsn::Lsn;
use crate::wal::DbId;

/// Control file magic.
pub const CONTROL_MAGIC: [u8; 8] = *b"DKVCTRL1";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes per slot block.
pub const SLOT_BYTES: usize = 4096;

/// The contents of one control slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Control {
    /// Page size of the data file.
    pub page_bytes: u32,
    /// Incremented by every write.
    pub generation: u64,
    /// The database identity.
    pub db_id: DbId,
    /// The end of the last checkpoint's record.
    pub checkpoint_lsn: Lsn,
    /// Where recovery starts replaying the WAL.
    pub redo_lsn: Lsn,
    /// The B+tree root page.
    pub root_page: u64,
    /// Pages in the data file.
    pub page_count: u64,
    /// Head of the free-page list (0: empty).
    pub freelist_head: u64,
    /// Feature flags.
    pub flags: u64,
}

impl Control {
    fn encode(&self, out: &mut [u8]) {
        out[..SLOT_BYTES].fill(0);
        out[0..8].copy_from_slice(&CONTROL_MAGIC);
        out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&self.page_bytes.to_le_bytes());
        out[16..24].copy_from_slice(&self.generation.to_le_bytes());
        out[24..40].copy_from_slice(&self.db_id);
        for (i, v) in [
            self.checkpoint_lsn.0,
            self.redo_lsn.0,
            self.root_page,
            self.page_count,
            self.freelist_head,
            self.flags,
        ]
        .into_iter()
        .enumerate()
        {
            out[40 + 8 * i..48 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out[..88]);
        out[88..92].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decodes one slot; `Ok(None)` for a slot that is empty or damaged.
    fn decode(b: &[u8], path: &Path) -> Result<Option<Control>> {
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        if b[0..8] != CONTROL_MAGIC || u32_at(88) != crc32c::crc32c(&b[..88]) {
            return Ok(None);
        }
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(Error::FormatVersion {
                path: path.to_path_buf(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let mut db_id = [0u8; 16];
        db_id.copy_from_slice(&b[24..40]);
        Ok(Some(Control {
            page_bytes: u32_at(12),
            generation: u64_at(16),
            db_id,
            checkpoint_lsn: Lsn(u64_at(40)),
            redo_lsn: Lsn(u64_at(48)),
            root_page: u64_at(56),
            page_count: u64_at(64),
            freelist_head: u64_at(72),
            flags: u64_at(80),
        }))
    }
}

/// The open control file.
pub struct ControlFile<S: Storage> {
    file: S::File,
    buf: AlignedBuf,
    current: Control,
}

fn options(create: bool) -> FileOptions {
    FileOptions {
        create,
        direct_io: DirectIo::Auto,
        sync: SyncMethod::Fsync,
        ..FileOptions::default()
    }
}

impl<S: Storage> ControlFile<S> {
    /// Creates a control file holding `control` (generation 1, both slots).
    ///
    /// # Errors
    /// I/O errors; [`Error::InvalidArgument`] if the file exists already.
    pub fn create(storage: &S, path: &Path, control: Control) -> Result<ControlFile<S>> {
        if storage.exists(path) {
            return Err(Error::InvalidArgument(format!("{} exists", path.display())));
        }
        let file = storage.open(path, &options(true))?;
        file.allocate(2 * SLOT_BYTES as u64, Fill::Zero)?;
        let unit = file.alignment().io_unit_bytes();
        let mut cf = ControlFile {
            file,
            buf: AlignedBuf::new(SLOT_BYTES, unit)?,
            current: Control {
                generation: 0,
                ..control
            },
        };
        // Both slots, so a damaged one later still leaves a valid one.
        cf.write(control)?;
        cf.write(control)?;
        Ok(cf)
    }

    /// Opens a control file and returns it with the newest valid control.
    ///
    /// # Errors
    /// [`Error::NotADatabase`] when neither slot is a control slot;
    /// [`Error::FormatVersion`] for another format version; I/O errors.
    pub fn open(storage: &S, path: &Path) -> Result<ControlFile<S>> {
        let file = storage.open(path, &options(false))?;
        let unit = file.alignment().io_unit_bytes();
        let mut buf = AlignedBuf::new(SLOT_BYTES, unit)?;
        let mut best: Option<Control> = None;
        for slot in 0..2u64 {
            let got = file.read_at(buf.io_all_mut(), slot * SLOT_BYTES as u64)?;
            if got < 92 {
                continue;
            }
            if let Some(c) = Control::decode(buf.as_slice(), path)? {
                if best.is_none_or(|b| c.generation > b.generation) {
                    best = Some(c);
                }
            }
        }
        let current = best.ok_or_else(|| Error::NotADatabase {
            path: path.to_path_buf(),
            detail: "no valid control slot".into(),
        })?;
        Ok(ControlFile { file, buf, current })
    }

    /// The newest control.
    pub fn current(&self) -> Control {
        self.current
    }

    /// Durably replaces the control (the generation is set here).
    ///
    /// # Errors
    /// I/O errors of the write or `fsync`.
    pub fn write(&mut self, control: Control) -> Result<()> {
        let next = Control {
            generation: self.current.generation + 1,
            ..control
        };
        next.encode(self.buf.as_mut_slice());
        let slot = next.generation % 2;
        self.file
            .write_all_at(self.buf.io_all(), slot * SLOT_BYTES as u64)?;
        self.file.sync_all()?;
        self.current = next;
        Ok(())
    }
}
