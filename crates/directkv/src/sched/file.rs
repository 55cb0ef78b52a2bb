//! A file whose every request passes the scheduler.
//!
//! [`ScheduledFile`] is how the buffer pool, the WAL and `CONTROL` hold
//! their files: no request reaches the file without a permit. A request
//! takes a permit of its class ([`ScheduledFile::admit`]) and runs through
//! the [`Admitted`] guard that holds it; the file's own read and write
//! methods take the class and do both for one request. So no request can
//! skip the scheduler, and its counters ([`SchedStats`](super::SchedStats))
//! count every one. Several requests that form one step (a flush's writes
//! and the sync after them) may run under one permit.
//!
//! Invariants:
//! - a permit is held for the whole time a request is in flight: it is taken
//!   before the call and dropped only with the guard;
//! - a permit's bytes bound what the guard's requests move (0 for requests
//!   that move none of the device's bandwidth: syncs, space reservation):
//!   the guard asserts its requests stay within them.
//!
//! A thread that holds a permit of a class uses its guard for that class's
//! requests, never the one-request methods: a second Background or Backup
//! permit could wait for the first.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{IoClass, Permit, Scheduler};
use crate::error::Result;
use crate::io::{Aio, Alignment, BatchOp, Fill, IoMut, IoPath, IoRef, StorageFile};

/// One open file and the scheduler its requests ask.
pub struct ScheduledFile<F> {
    file: F,
    sched: Arc<Scheduler>,
}

impl<F: StorageFile> ScheduledFile<F> {
    /// `file`, whose requests will ask `sched`.
    pub fn new(file: F, sched: Arc<Scheduler>) -> Self {
        ScheduledFile { file, sched }
    }

    /// Waits for a permit of `class` for requests moving `bytes` in all,
    /// and returns the guard through which they run.
    pub fn admit(&self, class: IoClass, bytes: u64) -> Admitted<'_, F> {
        Admitted {
            file: &self.file,
            permit: self.sched.admit(class, bytes),
            budget: bytes,
            moved: AtomicU64::new(0),
        }
    }

    /// Reads exactly `buf.len()` bytes at `offset` under one permit.
    ///
    /// # Errors
    /// As [`StorageFile::read_exact_at`].
    pub fn read_exact_at(&self, class: IoClass, buf: IoMut<'_>, offset: u64) -> Result<()> {
        self.admit(class, buf.len() as u64)
            .read_exact_at(buf, offset)
    }

    /// Reads until `buf` is full or the file ends, under one permit.
    ///
    /// # Errors
    /// As [`StorageFile::read_at`].
    pub fn read_at(&self, class: IoClass, buf: IoMut<'_>, offset: u64) -> Result<usize> {
        self.admit(class, buf.len() as u64).read_at(buf, offset)
    }

    /// Writes all of `data` at `offset` under one permit.
    ///
    /// # Errors
    /// As [`StorageFile::write_all_at`].
    pub fn write_all_at(&self, class: IoClass, data: IoRef<'_>, offset: u64) -> Result<()> {
        self.admit(class, data.len() as u64)
            .write_all_at(data, offset)
    }

    /// Runs `ops` as one batch under one permit for all their bytes.
    pub fn run_batch(&self, class: IoClass, ops: Vec<BatchOp<'_>>) -> Vec<Result<()>> {
        let bytes = ops.iter().map(|op| op.len() as u64).sum();
        self.admit(class, bytes).run_batch(ops)
    }

    /// The scheduler this file's requests ask.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.sched
    }

    /// The path the file was opened with.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The file's direct-I/O alignment.
    pub fn alignment(&self) -> Alignment {
        self.file.alignment()
    }

    /// How the file's bytes travel.
    pub fn io_path(&self) -> IoPath {
        self.file.io_path()
    }

    /// The file's size in bytes (`fstat`: no disk request).
    ///
    /// # Errors
    /// As [`StorageFile::len`].
    pub fn len(&self) -> Result<u64> {
        self.file.len()
    }

    /// Lets batches put many requests in flight at once through `aio`.
    ///
    /// # Errors
    /// As [`StorageFile::attach_aio`].
    pub fn attach_aio(&self, aio: &Arc<Aio>) -> Result<()> {
        self.file.attach_aio(aio)
    }
}

impl<F> std::fmt::Debug for ScheduledFile<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduledFile").finish_non_exhaustive()
    }
}

/// Requests that run under one permit; dropping it lets the next one in.
#[must_use = "the permit is held only while the guard lives"]
pub struct Admitted<'a, F> {
    file: &'a F,
    permit: Permit<'a>,
    /// The bytes the permit was taken for.
    budget: u64,
    /// The bytes moved under it so far.
    moved: AtomicU64,
}

impl<F: StorageFile> Admitted<'_, F> {
    /// Counts `calls` requests of the permit's class.
    fn count(&self, calls: usize) {
        let c = self.permit.class as usize;
        self.permit.sched.requests[c].fetch_add(calls as u64, Ordering::Relaxed);
    }

    /// Counts one request moving `bytes` against the permit.
    fn spend(&self, bytes: usize) {
        self.count(1);
        self.charge(bytes);
    }

    /// Charges `bytes` to the permit: moving more than it was taken for
    /// would hide load from the scheduler's caps.
    fn charge(&self, bytes: usize) {
        let moved = self.moved.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
        assert!(
            moved <= self.budget,
            "{:?} requests moved {moved} bytes under a permit for {}",
            self.permit.class,
            self.budget
        );
    }

    /// As [`StorageFile::read_at`].
    ///
    /// # Errors
    /// As [`StorageFile::read_at`].
    pub fn read_at(&self, buf: IoMut<'_>, offset: u64) -> Result<usize> {
        let len = buf.len();
        self.spend(len);
        let n = self.file.read_at(buf, offset)?;
        assert!(n <= len, "a read of {len} bytes returned {n}");
        Ok(n)
    }

    /// As [`StorageFile::read_exact_at`].
    ///
    /// # Errors
    /// As [`StorageFile::read_exact_at`].
    pub fn read_exact_at(&self, buf: IoMut<'_>, offset: u64) -> Result<()> {
        self.spend(buf.len());
        self.file.read_exact_at(buf, offset)
    }

    /// As [`StorageFile::write_all_at`].
    ///
    /// # Errors
    /// As [`StorageFile::write_all_at`].
    pub fn write_all_at(&self, data: IoRef<'_>, offset: u64) -> Result<()> {
        self.spend(data.len());
        self.file.write_all_at(data, offset)
    }

    /// As [`StorageFile::run_batch`].
    pub fn run_batch(&self, ops: Vec<BatchOp<'_>>) -> Vec<Result<()>> {
        let n = ops.len();
        self.count(n);
        self.charge(ops.iter().map(BatchOp::len).sum());
        let results = self.file.run_batch(ops);
        assert_eq!(results.len(), n, "a batch answers once per request");
        results
    }

    /// As [`StorageFile::sync`] (moves no bytes of the permit's).
    ///
    /// # Errors
    /// As [`StorageFile::sync`].
    pub fn sync(&self) -> Result<()> {
        self.count(1);
        self.file.sync()
    }

    /// As [`StorageFile::sync_all`].
    ///
    /// # Errors
    /// As [`StorageFile::sync_all`].
    pub fn sync_all(&self) -> Result<()> {
        self.count(1);
        self.file.sync_all()
    }

    /// As [`StorageFile::set_len`] (moves no bytes of the permit's).
    ///
    /// # Errors
    /// As [`StorageFile::set_len`].
    pub fn set_len(&self, len: u64) -> Result<()> {
        self.count(1);
        self.file.set_len(len)
    }

    /// As [`StorageFile::allocate`]: with [`Fill::Zero`] the zeros count
    /// against the permit, a reservation moves nothing.
    ///
    /// # Errors
    /// As [`StorageFile::allocate`].
    pub fn allocate(&self, len: u64, fill: Fill) -> Result<()> {
        match fill {
            Fill::Zero => self.spend(len as usize),
            Fill::Reserve => self.count(1),
        }
        self.file.allocate(len, fill)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{AlignedBuf, FileOptions, OsStorage, Storage};

    fn file(dir: &Path) -> ScheduledFile<crate::io::DirectFile> {
        let f = OsStorage::default()
            .open(
                &dir.join("f"),
                &FileOptions {
                    create: true,
                    ..FileOptions::default()
                },
            )
            .expect("opens");
        ScheduledFile::new(f, Arc::new(Scheduler::default()))
    }

    #[test]
    fn every_request_is_counted_by_its_class() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = file(dir.path());
        let mut buf = AlignedBuf::new(4096, 4096).expect("buf");
        f.write_all_at(IoClass::Wal, buf.io_all(), 0)
            .expect("writes");
        f.admit(IoClass::Wal, 0).sync().expect("syncs");
        f.read_exact_at(IoClass::Read, buf.io_all_mut(), 0)
            .expect("reads");
        let st = f.scheduler().stats();
        assert_eq!(st.admitted[IoClass::Wal as usize], 2);
        assert_eq!(st.admitted[IoClass::Read as usize], 1);
        assert_eq!(st.bytes[IoClass::Wal as usize], 4096);
        assert_eq!(st.bytes[IoClass::Read as usize], 4096);
        assert_eq!(st.requests[IoClass::Wal as usize], 2, "a write and a sync");
        assert_eq!(st.requests[IoClass::Read as usize], 1);
    }

    #[test]
    #[should_panic(expected = "under a permit for")]
    fn a_request_past_its_permit_is_a_bug() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = file(dir.path());
        let buf = AlignedBuf::new(4096, 4096).expect("buf");
        let _ = f.admit(IoClass::Urgent, 0).write_all_at(buf.io_all(), 0);
    }
}
