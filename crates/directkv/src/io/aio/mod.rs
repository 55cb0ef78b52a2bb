//! Asynchronous I/O: many positional reads and writes of a file in flight at
//! once, issued by one thread.
//!
//! One interface, [`Aio`], over two backends:
//! - **io_uring** (the default where the kernel allows it): a few rings, each
//!   used by one batch at a time. The buffer pool's arena is registered once as
//!   fixed buffers and open files once as fixed files, so a request neither
//!   pins its pages nor looks up its descriptor in the kernel.
//! - **threads**: a pool of workers making blocking positional calls
//!   (`preadv2`/`pwritev2`), for kernels without io_uring, sandboxes that forbid
//!   it, or when it is chosen ([`AioBackend::Threads`]; the `directkv`
//!   command and the tests also take it from [`IO_BACKEND_ENV`] through
//!   [`AioOptions::with_env_override`]).
//!
//! The request state machine is `request.rs`, the backends `uring.rs` and
//! `threads.rs`.
//!
//! A request ([`BatchOp`]) reads into or writes from several buffers at one
//! offset, so adjacent pages that live in separate frames travel as one I/O.
//!
//! Invariants:
//! - [`Aio`]'s batch call returns only after every request of the batch has
//!   completed: no kernel operation or worker touches a buffer after it. Buffers
//!   are lent for the call, never handed over.
//! - Short transfers and `EINTR`/`EAGAIN` are continued where they stopped. A
//!   read that meets the end of the file fails that request alone.
//! - Registered memory outlives its registration: the engine keeps a handle on
//!   the arena it registered and drops its rings first.
//! - A ring whose submission fails for a reason other than a transient one,
//!   with requests in flight, cannot prove their buffers free again; the
//!   process aborts rather than return them to their owners (a working kernel
//!   never gets there).

use std::os::fd::RawFd;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use super::buf::{AlignedArena, IoMut, IoRef};

mod request;
mod threads;
mod uring;

use crate::error::{Error, Result};
pub(crate) use request::{Outcomes, Request};
use threads::Threads;
use uring::Uring;

/// The environment variable the `directkv` command and the tests read to
/// override the configured backend (`uring`, `threads`, `off` or `auto`),
/// through [`AioOptions::with_env_override`]; the engine itself reads no
/// environment.
pub const IO_BACKEND_ENV: &str = "DIRECTKV_IO_BACKEND";

/// Rings of the io_uring backend: batches of different threads (the cleaner,
/// the checkpointer, readahead) run side by side, one per ring.
const RINGS: usize = 4;
/// Fixed-file slots per ring.
const FILE_SLOTS: u32 = 64;
/// The largest buffer the kernel registers in one piece.
const FIXED_BUFFER_MAX: usize = 1 << 30;

/// See [`crate::error::lock_even_poisoned`]: a poisoned lock here means the database has
/// failed already.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    crate::error::lock_even_poisoned(m)
}

/// Which backend carries asynchronous I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AioBackend {
    /// io_uring where the kernel allows it, else threads.
    #[default]
    Auto,
    /// io_uring or an error.
    Uring,
    /// A pool of threads making blocking positional calls.
    Threads,
    /// None: a batch runs one request after another on the caller's thread
    /// (for comparison and diagnosis).
    Off,
}

impl std::fmt::Display for AioBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AioBackend::Auto => "auto",
            AioBackend::Uring => "uring",
            AioBackend::Threads => "threads",
            AioBackend::Off => "off",
        })
    }
}

impl FromStr for AioBackend {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(AioBackend::Auto),
            "uring" | "io_uring" | "io-uring" => Ok(AioBackend::Uring),
            "threads" | "thread" | "pool" => Ok(AioBackend::Threads),
            "off" | "none" | "sync" => Ok(AioBackend::Off),
            other => Err(Error::InvalidArgument(format!(
                "unknown I/O backend {other:?}: expected auto, uring, threads or off"
            ))),
        }
    }
}

/// How to build an [`Aio`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AioOptions {
    /// The backend.
    pub backend: AioBackend,
    /// Requests in flight per ring (io_uring), 1..=4096.
    pub queue_depth: u32,
    /// Worker threads of the thread-pool backend, 1..=256.
    pub threads: usize,
}

impl Default for AioOptions {
    fn default() -> Self {
        AioOptions {
            backend: AioBackend::Auto,
            queue_depth: 64,
            threads: 16,
        }
    }
}

impl AioOptions {
    /// These options with the backend taken from [`IO_BACKEND_ENV`] when it
    /// is set.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a value that names no backend.
    pub fn with_env_override(mut self) -> Result<Self> {
        if let Ok(v) = std::env::var(IO_BACKEND_ENV) {
            if !v.trim().is_empty() {
                self.backend = v.parse()?;
            }
        }
        Ok(self)
    }
}

/// What an [`Aio`] has done.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AioStats {
    /// The backend in use (`uring` or `threads`).
    pub backend: String,
    /// Why io_uring is not in use or runs without fixed buffers, if so.
    pub note: Option<String>,
    /// Batches run.
    pub batches: u64,
    /// Requests run.
    pub requests: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// The most requests one batch had in flight at once.
    pub max_in_flight: u64,
    /// Requests that used a registered (fixed) buffer.
    pub fixed_buffer_requests: u64,
    /// Requests that used a registered (fixed) file.
    pub fixed_file_requests: u64,
    /// Continuations after short transfers or interruptions.
    pub continued: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    batches: AtomicU64,
    requests: AtomicU64,
    bytes: AtomicU64,
    max_in_flight: AtomicU64,
    fixed_buffer: AtomicU64,
    fixed_file: AtomicU64,
    continued: AtomicU64,
}

/// One request of a batch: read into, or write from, consecutive buffers at
/// one file offset.
#[derive(Debug)]
pub enum BatchOp<'a> {
    /// Fill `bufs`, in order, from `offset`.
    Read {
        /// Where the bytes go.
        bufs: Vec<IoMut<'a>>,
        /// The file offset.
        offset: u64,
    },
    /// Write `bufs`, in order, at `offset`.
    Write {
        /// The bytes.
        bufs: Vec<IoRef<'a>>,
        /// The file offset.
        offset: u64,
    },
}

impl BatchOp<'_> {
    /// The bytes the request moves.
    pub fn len(&self) -> usize {
        match self {
            BatchOp::Read { bufs, .. } => bufs.iter().map(IoMut::len).sum(),
            BatchOp::Write { bufs, .. } => bufs.iter().map(IoRef::len).sum(),
        }
    }

    /// Whether it moves nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file offset.
    pub fn offset(&self) -> u64 {
        match self {
            BatchOp::Read { offset, .. } | BatchOp::Write { offset, .. } => *offset,
        }
    }

    /// Whether it writes.
    pub fn is_write(&self) -> bool {
        matches!(self, BatchOp::Write { .. })
    }

    /// The smallest alignment unit among its buffers.
    pub fn unit_bytes(&self) -> u32 {
        let units: Vec<u32> = match self {
            BatchOp::Read { bufs, .. } => bufs.iter().map(IoMut::unit_bytes).collect(),
            BatchOp::Write { bufs, .. } => bufs.iter().map(IoRef::unit_bytes).collect(),
        };
        units.into_iter().min().unwrap_or(0)
    }
}

/// Where a request's file is: a plain descriptor and, if registered, its
/// fixed-file slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    pub(crate) fd: RawFd,
    pub(crate) slot: Option<u32>,
}

/// The asynchronous I/O engine of one database.
pub struct Aio {
    imp: Imp,
    note: Mutex<Option<String>>,
    counters: Counters,
}

impl std::fmt::Debug for Aio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aio")
            .field("backend", &self.backend())
            .finish()
    }
}

enum Imp {
    Uring(Uring),
    Threads(Threads),
}

impl Aio {
    /// Builds the engine. [`AioBackend::Auto`] falls back to threads where
    /// io_uring cannot be set up, and says why in [`AioStats::note`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a queue depth or thread count out of
    /// range, or for [`AioBackend::Off`] (which builds no engine);
    /// [`Error::Unsupported`] when [`AioBackend::Uring`] is asked for and the
    /// kernel refuses it; a failure to start worker threads.
    pub fn new(opts: &AioOptions) -> Result<Arc<Aio>> {
        if !(1..=4096).contains(&opts.queue_depth) {
            return Err(Error::InvalidArgument(format!(
                "I/O queue depth {} is outside 1..=4096",
                opts.queue_depth
            )));
        }
        if !(1..=256).contains(&opts.threads) {
            return Err(Error::InvalidArgument(format!(
                "I/O threads {} is outside 1..=256",
                opts.threads
            )));
        }
        let (imp, note) = match opts.backend {
            AioBackend::Off => {
                return Err(Error::InvalidArgument(
                    "the backend `off` builds no asynchronous engine".into(),
                ))
            }
            AioBackend::Threads => (Imp::Threads(Threads::new(opts.threads)?), None),
            AioBackend::Uring => match Uring::new(opts.queue_depth) {
                Ok(u) => (Imp::Uring(u), None),
                Err(e) => {
                    return Err(Error::Unsupported {
                        what: "io_uring",
                        detail: e.to_string(),
                    })
                }
            },
            AioBackend::Auto => match Uring::new(opts.queue_depth) {
                Ok(u) => (Imp::Uring(u), None),
                Err(e) => (
                    Imp::Threads(Threads::new(opts.threads)?),
                    Some(format!("io_uring unavailable ({e}); using threads")),
                ),
            },
        };
        let aio = Arc::new(Aio {
            imp,
            note: Mutex::new(note),
            counters: Counters::default(),
        });
        assert!(
            opts.backend == AioBackend::Auto || aio.backend() == opts.backend,
            "the backend asked for is the one built"
        );
        Ok(aio)
    }

    /// The backend in use: [`AioBackend::Uring`] or [`AioBackend::Threads`].
    pub fn backend(&self) -> AioBackend {
        match self.imp {
            Imp::Uring(_) => AioBackend::Uring,
            Imp::Threads(_) => AioBackend::Threads,
        }
    }

    /// Registers `arena` as fixed buffers (io_uring): requests whose memory
    /// lies in it skip the per-request page pinning. The engine keeps the
    /// arena alive as long as the registration. One arena per engine; returns
    /// whether this one is registered (false for the thread backend, a second
    /// arena, or a kernel refusal such as the locked-memory limit, noted in
    /// the stats).
    pub fn register_arena(&self, arena: &AlignedArena) -> bool {
        let Imp::Uring(u) = &self.imp else {
            return false;
        };
        match u.register_arena(arena) {
            Ok(done) => done,
            Err(e) => {
                *lock(&self.note) = Some(format!("fixed buffers not registered: {e}"));
                false
            }
        }
    }

    /// Registers a descriptor as a fixed file; `None` when there is no room
    /// or the backend has no fixed files (the plain descriptor is used then).
    pub(crate) fn register_file(&self, fd: RawFd) -> Option<u32> {
        let slot = match &self.imp {
            Imp::Uring(u) => u.register_file(fd),
            Imp::Threads(_) => None,
        };
        assert!(
            slot.is_none_or(|s| s < FILE_SLOTS),
            "a fixed file takes a slot of the table"
        );
        slot
    }

    /// Frees a fixed-file slot before its descriptor is closed.
    pub(crate) fn unregister_file(&self, slot: u32) {
        if let Imp::Uring(u) = &self.imp {
            u.unregister_file(slot);
        }
    }

    /// Runs every request of `reqs` against `target` and returns when all
    /// have completed; each request's outcome is in its `result`.
    pub(crate) fn run(&self, target: Target, reqs: &mut [Request]) {
        if reqs.is_empty() {
            return;
        }
        let c = &self.counters;
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.requests.fetch_add(reqs.len() as u64, Ordering::Relaxed);
        c.bytes
            .fetch_add(reqs.iter().map(|r| r.len as u64).sum(), Ordering::Relaxed);
        assert!(target.fd >= 0, "a batch runs on an open file");
        let in_flight = match &self.imp {
            Imp::Uring(u) => u.run(target, reqs, c),
            Imp::Threads(t) => t.run(target.fd, reqs, c),
        };
        assert!(
            (1..=reqs.len()).contains(&in_flight),
            "a batch has 1 to all of its requests in flight at once"
        );
        assert!(
            reqs.iter().all(|r| r.result.is_some()),
            "a batch returns with every request answered"
        );
        c.max_in_flight
            .fetch_max(in_flight as u64, Ordering::Relaxed);
    }

    /// What the engine has done.
    pub fn stats(&self) -> AioStats {
        let c = &self.counters;
        AioStats {
            backend: self.backend().to_string(),
            note: lock(&self.note).clone(),
            batches: c.batches.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            max_in_flight: c.max_in_flight.load(Ordering::Relaxed),
            fixed_buffer_requests: c.fixed_buffer.load(Ordering::Relaxed),
            fixed_file_requests: c.fixed_file.load(Ordering::Relaxed),
            continued: c.continued.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests;
