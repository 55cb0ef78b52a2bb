//! The `CONTROL` file: two slots, each in its own 4096-byte block (offsets 0
//! and 4096), so a torn write of one can never touch the other. Each write
//! goes to the slot of the next generation's parity and is followed by
//! `fsync`; reading takes the valid slot with the highest generation. A crash
//! during a write therefore leaves the previous control intact (RELIABILITY.md
//! F17). Written at creation and by each checkpoint; the slot's encoding is
//! `format::control`.
//!
//! Invariants:
//! - The generation grows by one with every write, and the slot written is
//!   the generation's parity, so the other slot always holds the previous
//!   control.
//! - `current()` is the control most recently made durable.
//!
//! Its reads are [`IoClass::Read`] and its writes [`IoClass::Urgent`]
//! requests of the database's scheduler: a checkpoint is not done, and the
//! log behind it not free, until its control is durable.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::control::{Control, SLOT_BYTES, SLOT_USED_BYTES};
use std::sync::Arc;

use crate::io::{AlignedBuf, DirectIo, FileOptions, Fill, Permissions, Storage, SyncMethod};
use crate::sched::{IoClass, ScheduledFile, Scheduler};

/// The open control file.
pub struct ControlFile<S: Storage> {
    file: ScheduledFile<S::File>,
    buf: AlignedBuf,
    current: Control,
}

fn options(create: bool, permissions: Permissions) -> FileOptions {
    FileOptions {
        create,
        exclusive: create,
        permissions,
        direct_io: DirectIo::Auto,
        sync: SyncMethod::Fsync,
        ..FileOptions::default()
    }
}

impl<S: Storage> ControlFile<S> {
    /// Creates a private control file holding `control` (generation 1, both
    /// slots).
    ///
    /// # Errors
    /// I/O errors; [`Error::InvalidArgument`] if the file exists already.
    pub fn create(storage: &S, path: &Path, control: Control) -> Result<ControlFile<S>> {
        Self::create_with(
            storage,
            path,
            Permissions::Private,
            control,
            Scheduler::fifo(),
        )
    }

    /// As [`create`](Self::create), the file created (exclusively) with
    /// `permissions`' mode, its requests asking `sched`.
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn create_with(
        storage: &S,
        path: &Path,
        permissions: Permissions,
        control: Control,
        sched: Arc<Scheduler>,
    ) -> Result<ControlFile<S>> {
        if storage.exists(path) {
            return Err(Error::InvalidArgument(format!("{} exists", path.display())));
        }
        let file = ScheduledFile::new(storage.open(path, &options(true, permissions))?, sched);
        file.admit(IoClass::Urgent, 2 * SLOT_BYTES as u64)
            .allocate(2 * SLOT_BYTES as u64, Fill::Zero)?;
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
    /// [`Error::FormatVersion`] for another format version;
    /// [`Error::Corruption`] for a valid slot with a field out of range
    /// (naming the field and its offset in the file); I/O errors.
    pub fn open(storage: &S, path: &Path) -> Result<ControlFile<S>> {
        Self::open_scheduled(storage, path, Scheduler::fifo())
    }

    /// As [`open`](Self::open), its requests asking `sched`.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_scheduled(
        storage: &S,
        path: &Path,
        sched: Arc<Scheduler>,
    ) -> Result<ControlFile<S>> {
        Self::open_as(storage, path, sched, &options(false, Permissions::Private))
    }

    /// The newest valid control of the file at `path`, opened read-only: a
    /// look that needs no write access (a backup kept read-only, on a
    /// read-only mount).
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn read(storage: &S, path: &Path) -> Result<Control> {
        let read_only = FileOptions {
            read_only: true,
            ..options(false, Permissions::Private)
        };
        Ok(Self::open_as(storage, path, Scheduler::fifo(), &read_only)?.current)
    }

    fn open_as(
        storage: &S,
        path: &Path,
        sched: Arc<Scheduler>,
        file_options: &FileOptions,
    ) -> Result<ControlFile<S>> {
        let file = ScheduledFile::new(storage.open(path, file_options)?, sched);
        let unit = file.alignment().io_unit_bytes();
        let mut buf = AlignedBuf::new(SLOT_BYTES, unit)?;
        let mut best: Option<Control> = None;
        for slot in 0..2u64 {
            let got = file.read_at(IoClass::Read, buf.io_all_mut(), slot * SLOT_BYTES as u64)?;
            if got < SLOT_USED_BYTES {
                continue;
            }
            // A field out of range is named at its offset in the file.
            let decoded = Control::decode(buf.as_slice(), path).map_err(|e| match e {
                Error::Corruption {
                    path,
                    offset,
                    page,
                    detail,
                } => Error::Corruption {
                    path,
                    offset: slot * SLOT_BYTES as u64 + offset,
                    page,
                    detail: format!("{detail} (slot {slot})"),
                },
                e => e,
            })?;
            if let Some(c) = decoded {
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
    /// I/O errors of the write or `fsync`; [`Error::Unsupported`] past the
    /// last generation.
    pub fn write(&mut self, control: Control) -> Result<()> {
        // The generation a slot may carry ends here (the reader refuses
        // one past it); 2^62 checkpoints are not reached by running.
        let most = crate::constants::CONTROL_GENERATION_MAX;
        if self.current.generation >= most {
            return Err(Error::Unsupported {
                what: "a CONTROL generation past the largest",
                detail: format!("CONTROL is at generation {most}, the last one"),
            });
        }
        let next = Control {
            generation: self.current.generation + 1,
            ..control
        };
        assert!(
            next.generation > self.current.generation,
            "generations only grow"
        );
        next.encode(self.buf.as_mut_slice());
        let slot = next.generation % 2;
        let io = self.file.admit(IoClass::Urgent, SLOT_BYTES as u64);
        io.write_all_at(self.buf.io_all(), slot * SLOT_BYTES as u64)?;
        io.sync_all()?;
        self.current = next;
        assert_eq!(
            self.current.generation % 2,
            slot,
            "the slot is the generation's parity"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests;
