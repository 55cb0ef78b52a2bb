//! A scratch file prepared for sync measurements, and the measurements
//! made on it: what open's quick probe, `directkv test-fsync` and
//! `directkv bench wal` time.

use super::{fill_pattern, measure_sync, open_for, prepare, Clock, Outcome, SCRATCH_MAGIC};
use crate::constants::SECTOR_BYTES;
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Alignment, At, SyncMethod, SyncVariant};

/// A scratch file made for sync measurements: created exclusively and
/// private, its header stamped, written through once and synced (see the
/// module invariants of `io::profile`); removed when dropped.
#[derive(Debug)]
pub struct Scratch<'a> {
    at: At<'a>,
    alignment: Option<Alignment>,
    direct_io_unavailable: Option<String>,
}

impl<'a> Scratch<'a> {
    /// The first bytes of every scratch file's header, by which open
    /// recognises one a killed process left behind.
    pub const MAGIC: [u8; 8] = SCRATCH_MAGIC;

    /// Creates and prepares the scratch file at `at`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `at` exists; I/O errors of the
    /// creation, the header, the fill or the sync (the file is removed
    /// then).
    pub fn create(at: At<'a>) -> Result<Scratch<'a>> {
        if at.exists() {
            return Err(Error::InvalidArgument(format!(
                "{} exists",
                at.path().display()
            )));
        }
        match prepare(&at) {
            Ok((alignment, direct_io_unavailable)) => {
                assert!(
                    alignment.is_some() != direct_io_unavailable.is_some(),
                    "direct I/O is either there, or there is a reason it is not"
                );
                Ok(Scratch {
                    at,
                    alignment,
                    direct_io_unavailable,
                })
            }
            Err(e) => {
                let _ = at.unlink();
                Err(e)
            }
        }
    }

    /// The file's direct-I/O alignment, or `None` where direct I/O is
    /// unavailable.
    pub fn alignment(&self) -> Option<Alignment> {
        self.alignment
    }

    /// Why direct I/O is unavailable on the file's filesystem, if it is.
    pub fn direct_io_unavailable(&self) -> Option<&str> {
        self.direct_io_unavailable.as_deref()
    }

    /// Measures `writes` writes of `write_bytes` each at consecutive
    /// offsets past the header, then `variant`'s sync, repeated for
    /// `seconds`.
    ///
    /// # Errors
    /// I/O errors of a write or sync (a failed sync is an error, never a
    /// figure).
    pub fn measure_sync(
        &self,
        variant: SyncVariant,
        writes: usize,
        write_bytes: usize,
        seconds: f64,
    ) -> Result<Outcome> {
        measure_sync(&self.at, variant, writes, write_bytes, seconds)
    }

    /// Measures `pg_test_fsync`'s file-descriptor test: open, one buffered
    /// write of `block_bytes` at offset 0, `fsync`, close; or, with
    /// `close_before_sync`, open, write, close, then open again, `fsync`,
    /// close. Repeated for `seconds`.
    ///
    /// # Errors
    /// I/O errors of an open, write or sync.
    pub fn measure_reopened_sync(
        &self,
        block_bytes: usize,
        seconds: f64,
        close_before_sync: bool,
    ) -> Result<Outcome> {
        assert!(block_bytes > 0, "an op writes something");
        let variant = SyncVariant {
            method: SyncMethod::Fsync,
            direct: false,
        };
        let mut buf = AlignedBuf::new(block_bytes, SECTOR_BYTES)?;
        fill_pattern(buf.as_mut_slice());
        let clock = Clock::new(seconds);
        let mut ops = 0u64;
        loop {
            let file = open_for(&self.at, variant)?;
            file.write_all_at(buf.io_all(), 0)?;
            if close_before_sync {
                drop(file);
                open_for(&self.at, variant)?.sync_all()?;
            } else {
                file.sync_all()?;
            }
            ops += 1;
            if clock.expired() {
                return Ok(clock.outcome(ops));
            }
        }
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        // A file left behind is one open removes (it carries the magic).
        let _ = self.at.unlink();
    }
}
