//! An open file of the simulated disk: reads and writes against its live
//! image, syncs that settle its pending writes into the durable image, and
//! the checks a direct-I/O disk makes of every request.
//!
//! Invariants:
//! - every request is aligned to [`SIM_ALIGNMENT`] (a real direct-I/O disk
//!   answers `EINVAL`; the simulator panics, as it is the engine's bug);
//! - once a write or sync of the file failed, every later call answers
//!   [`Error::Poisoned`] with the first failure's cause.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::{eio, lock, State};
use crate::error::{Error, IoOp, Result};
use crate::io::{Alignment, AlignmentSource, Fill, IoMut, IoPath, IoRef, StorageFile};

/// An open file of a [`SimStorage`](super::SimStorage).
#[derive(Debug)]
pub struct SimFile {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) id: u64,
    pub(super) path: PathBuf,
    pub(super) each_write_durable: bool,
    pub(super) failure: OnceLock<String>,
}

impl SimFile {
    fn fail(&self, e: Error) -> Error {
        let _ = self.failure.set(e.to_string());
        e
    }

    fn check(&self) -> Result<()> {
        match self.failure.get() {
            Some(cause) => Err(Error::Poisoned {
                path: self.path.clone(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// The engine sends a direct-I/O disk only aligned requests; the simulated
/// disk, which claims direct I/O, holds it to that (a real one answers
/// `EINVAL`).
fn assert_aligned(offset: usize, len: usize, what: &str) {
    let unit = SIM_ALIGNMENT.offset_bytes as usize;
    assert!(
        offset % unit == 0,
        "a {what} at offset {offset} is not {unit}-byte aligned"
    );
    assert!(
        len % unit == 0,
        "a {what} of {len} bytes is not a multiple of {unit}"
    );
}

const SIM_ALIGNMENT: Alignment = Alignment {
    memory_bytes: 512,
    offset_bytes: 512,
    read_offset_bytes: 512,
    source: AlignmentSource::Default,
};

impl StorageFile for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }
    fn alignment(&self) -> Alignment {
        SIM_ALIGNMENT
    }
    fn io_path(&self) -> IoPath {
        IoPath::Direct
    }
    fn read_at(&self, mut buf: IoMut<'_>, offset: u64) -> Result<usize> {
        let mut s = lock(&self.state);
        if s.random_fault(false) {
            return Err(eio(IoOp::Read, &self.path));
        }
        let f = s
            .files
            .get(&self.id)
            .ok_or_else(|| eio(IoOp::Read, &self.path))?;
        let off = offset as usize;
        let bytes = buf.bytes_mut();
        assert_aligned(off, bytes.len(), "read");
        if off >= f.live.len() {
            return Ok(0);
        }
        let n = bytes.len().min(f.live.len() - off);
        bytes[..n].copy_from_slice(&f.live[off..off + n]);
        assert!(
            n == bytes.len() || off + n == f.live.len(),
            "a short read ends at the end of the file"
        );
        Ok(n)
    }
    fn write_all_at(&self, data: IoRef<'_>, offset: u64) -> Result<()> {
        self.check()?;
        let mut s = lock(&self.state);
        if !s.step() {
            return Err(self.fail(eio(IoOp::Write, &self.path)));
        }
        if s.random_fault(true) {
            return Err(self.fail(eio(IoOp::Write, &self.path)));
        }
        let each = self.each_write_durable;
        let off = offset as usize;
        let bytes = data.bytes();
        assert_aligned(off, bytes.len(), "write");
        if s.over_capacity(self.id, off + bytes.len()) {
            let e = std::io::Error::from_raw_os_error(libc::ENOSPC);
            return Err(self.fail(Error::from_io(IoOp::Write, &self.path, Some(offset), e)));
        }
        let f = s
            .files
            .get_mut(&self.id)
            .ok_or_else(|| eio(IoOp::Write, &self.path))?;
        if f.live.len() < off + bytes.len() {
            f.live.resize(off + bytes.len(), 0);
        }
        f.live[off..off + bytes.len()].copy_from_slice(bytes);
        assert!(
            f.live.len() >= off + bytes.len(),
            "a write lands inside the file"
        );
        if each {
            if f.durable.len() < f.live.len() {
                f.durable.resize(f.live.len(), 0);
            }
            f.durable[off..off + bytes.len()].copy_from_slice(bytes);
        } else {
            f.pending.push((off, bytes.len()));
        }
        Ok(())
    }
    fn sync(&self) -> Result<()> {
        self.sync_all()
    }
    fn sync_all(&self) -> Result<()> {
        self.check()?;
        let mut s = lock(&self.state);
        if !s.step() {
            return Err(self.fail(eio(IoOp::Sync, &self.path)));
        }
        if let Some(n) = s.sync_fail_in {
            if n <= 1 {
                s.sync_fail_in = None;
                if let Some(f) = s.files.get_mut(&self.id) {
                    // The kernel marks the pages clean: they will never reach
                    // the media, and a later sync has nothing to report.
                    f.pending.clear();
                }
                return Err(self.fail(eio(IoOp::Sync, &self.path)));
            }
            s.sync_fail_in = Some(n - 1);
        }
        s.sync_file(self.id);
        Ok(())
    }
    fn len(&self) -> Result<u64> {
        let s = lock(&self.state);
        Ok(s.files.get(&self.id).map_or(0, |f| f.live.len() as u64))
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.check()?;
        let mut s = lock(&self.state);
        // A failed cut changes nothing: it fails the call, not the file
        // (as a real file's `ftruncate` does).
        if !s.step() {
            return Err(eio(IoOp::Allocate, &self.path));
        }
        let grows = s
            .files
            .get(&self.id)
            .is_some_and(|f| f.live.len() < len as usize);
        if grows && s.over_capacity(self.id, len as usize) {
            let e = std::io::Error::from_raw_os_error(libc::ENOSPC);
            return Err(Error::from_io(IoOp::Allocate, &self.path, Some(len), e));
        }
        let each = self.each_write_durable;
        let f = s
            .files
            .get_mut(&self.id)
            .ok_or_else(|| eio(IoOp::Allocate, &self.path))?;
        let len = len as usize;
        f.set_len(len);
        if each {
            f.settle_size();
        }
        Ok(())
    }
    fn allocate(&self, len: u64, _fill: Fill) -> Result<()> {
        self.check()?;
        let mut s = lock(&self.state);
        if !s.step() {
            return Err(self.fail(eio(IoOp::Allocate, &self.path)));
        }
        if s.over_capacity(self.id, len as usize) {
            let e = std::io::Error::from_raw_os_error(libc::ENOSPC);
            return Err(self.fail(Error::from_io(IoOp::Allocate, &self.path, Some(len), e)));
        }
        let f = s
            .files
            .get_mut(&self.id)
            .ok_or_else(|| eio(IoOp::Allocate, &self.path))?;
        if (f.live.len() as u64) < len {
            f.live.resize(len as usize, 0);
        }
        // The allocation is durable (its size and zeros), not the writes
        // pending before it.
        if (f.durable.len() as u64) < len {
            f.durable.resize(len as usize, 0);
        }
        Ok(())
    }
}
