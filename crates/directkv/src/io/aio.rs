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
//!   it, or when it is disabled ([`AioBackend::Threads`] or the
//!   [`IO_BACKEND_ENV`] environment variable).
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

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use io_uring::{opcode, types, IoUring};
use serde::{Deserialize, Serialize};

use super::buf::{AlignedArena, IoMut, IoRef};
use crate::constants::SHORT_IO_RETRIES_MAX;
use crate::error::{Error, Result};

/// The environment variable that overrides the configured backend:
/// `uring`, `threads`, `off` or `auto`. For running one test suite on each.
pub const IO_BACKEND_ENV: &str = "DIRECTKV_IO_BACKEND";

/// Rings of the io_uring backend: batches of different threads (the cleaner,
/// the checkpointer, readahead) run side by side, one per ring.
const RINGS: usize = 4;
/// Fixed-file slots per ring.
const FILE_SLOTS: u32 = 64;
/// The largest buffer the kernel registers in one piece.
const FIXED_BUFFER_MAX: usize = 1 << 30;

/// See [`crate::health`]: a poisoned lock here means the database has
/// failed already.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    crate::health::lock_even_poisoned(m)
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

/// A request as the backends see it: raw buffers, progress and outcome.
pub(crate) struct Request {
    write: bool,
    iovs: Vec<libc::iovec>,
    offset: u64,
    len: usize,
    rw_flags: i32,
    /// Bytes moved so far.
    pub(crate) done: usize,
    /// The iovecs still to move; rebuilt only while the request is not in
    /// flight, so the kernel's view of it never changes under it.
    cur: Vec<libc::iovec>,
    retries: u32,
    /// `None` until the request completes.
    pub(crate) result: Option<std::io::Result<()>>,
}

impl Request {
    /// A request over `op`'s buffers. The pointers are valid while `op`'s
    /// borrow is; the caller keeps `op` alive until the batch returns.
    pub(crate) fn new(op: &mut BatchOp<'_>, rw_flags: i32) -> Request {
        let (write, iovs, offset) = match op {
            BatchOp::Read { bufs, offset } => (
                false,
                bufs.iter_mut()
                    .map(|b| {
                        let bytes = b.bytes_mut();
                        libc::iovec {
                            iov_base: bytes.as_mut_ptr().cast(),
                            iov_len: bytes.len(),
                        }
                    })
                    .collect::<Vec<_>>(),
                *offset,
            ),
            BatchOp::Write { bufs, offset } => (
                true,
                bufs.iter()
                    .map(|b| libc::iovec {
                        iov_base: b.bytes().as_ptr() as *mut libc::c_void,
                        iov_len: b.len(),
                    })
                    .collect(),
                *offset,
            ),
        };
        let len = iovs.iter().map(|v| v.iov_len).sum();
        Request {
            write,
            iovs,
            offset,
            len,
            rw_flags: if write { rw_flags } else { 0 },
            done: 0,
            cur: Vec::new(),
            retries: 0,
            result: None,
        }
    }

    /// Rebuilds `cur` to cover what is left after `done` bytes.
    fn prepare(&mut self) {
        self.cur.clear();
        let mut skip = self.done;
        for v in &self.iovs {
            if skip >= v.iov_len {
                skip -= v.iov_len;
                continue;
            }
            self.cur.push(libc::iovec {
                // SAFETY: `skip < iov_len`, so the result stays inside the
                // buffer `v` describes.
                iov_base: unsafe { v.iov_base.cast::<u8>().add(skip) }.cast(),
                iov_len: v.iov_len - skip,
            });
            skip = 0;
        }
    }

    fn at(&self) -> u64 {
        self.offset + self.done as u64
    }

    /// Takes one completion; true when the request must go again.
    fn complete(&mut self, res: std::io::Result<usize>, counters: Option<&Counters>) -> bool {
        match res {
            Ok(0) => {
                let kind = if self.write {
                    std::io::ErrorKind::WriteZero
                } else {
                    std::io::ErrorKind::UnexpectedEof
                };
                self.result = Some(Err(std::io::Error::new(kind, "transfer of 0 bytes")));
                false
            }
            Ok(n) => {
                self.done += n;
                self.retries = 0;
                if self.done >= self.len {
                    self.result = Some(Ok(()));
                    false
                } else {
                    if let Some(c) = counters {
                        c.continued.fetch_add(1, Ordering::Relaxed);
                    }
                    true
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                ) =>
            {
                self.retries += 1;
                if self.retries > SHORT_IO_RETRIES_MAX {
                    self.result = Some(Err(e));
                    false
                } else {
                    if let Some(c) = counters {
                        c.continued.fetch_add(1, Ordering::Relaxed);
                    }
                    true
                }
            }
            Err(e) => {
                self.result = Some(Err(e));
                false
            }
        }
    }

    /// Runs the request to completion with blocking calls on this thread.
    pub(crate) fn run_blocking(&mut self, fd: RawFd, counters: Option<&Counters>) {
        loop {
            self.prepare();
            let n = self.cur.len().min(libc::UIO_MAXIOV as usize) as libc::c_int;
            // SAFETY: `cur` describes live buffers the caller lent for this
            // batch (readable for writes, writable and unaliased for reads);
            // the call does not keep them.
            let r = unsafe {
                if self.write {
                    libc::pwritev2(fd, self.cur.as_ptr(), n, self.at() as i64, self.rw_flags)
                } else {
                    libc::preadv2(fd, self.cur.as_ptr(), n, self.at() as i64, 0)
                }
            };
            let res = if r < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(r as usize)
            };
            if !self.complete(res, counters) {
                return;
            }
        }
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
        Ok(Arc::new(Aio {
            imp,
            note: Mutex::new(note),
            counters: Counters::default(),
        }))
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
        match &self.imp {
            Imp::Uring(u) => u.register_file(fd),
            Imp::Threads(_) => None,
        }
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
        let in_flight = match &self.imp {
            Imp::Uring(u) => u.run(target, reqs, c),
            Imp::Threads(t) => t.run(target.fd, reqs, c),
        };
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

// ---------------------------------------------------------------- io_uring --

struct Ring {
    ring: IoUring,
}

/// Registered memory: address ranges by fixed-buffer index, and the arena
/// that owns them (kept alive here).
struct Fixed {
    regions: Vec<(usize, usize)>,
    _arena: AlignedArena,
}

impl Fixed {
    /// The fixed-buffer index holding `[ptr, ptr + len)` whole.
    fn index_of(&self, ptr: usize, len: usize) -> Option<u16> {
        self.regions
            .iter()
            .position(|&(base, size)| ptr >= base && ptr + len <= base + size)
            .map(|i| i as u16)
    }
}

struct Uring {
    // Declared first: dropped (unregistering everything) before `fixed`
    // releases the memory.
    rings: Box<[Mutex<Ring>]>,
    depth: usize,
    fixed: OnceLock<Fixed>,
    /// Fixed-file slots: the descriptor in each, if any.
    files: Mutex<Vec<Option<RawFd>>>,
    fixed_files: bool,
    next: AtomicU64,
}

impl Uring {
    fn new(depth: u32) -> std::io::Result<Uring> {
        let mut rings = Vec::with_capacity(RINGS);
        for _ in 0..RINGS {
            rings.push(IoUring::new(depth)?);
        }
        // Sparse file tables (Linux 5.19+); without them, plain descriptors.
        let fixed_files = rings
            .iter()
            .all(|r| r.submitter().register_files_sparse(FILE_SLOTS).is_ok());
        Ok(Uring {
            rings: rings
                .into_iter()
                .map(|ring| Mutex::new(Ring { ring }))
                .collect(),
            depth: depth as usize,
            fixed: OnceLock::new(),
            files: Mutex::new(vec![None; FILE_SLOTS as usize]),
            fixed_files,
            next: AtomicU64::new(0),
        })
    }

    fn register_arena(&self, arena: &AlignedArena) -> std::io::Result<bool> {
        if self.fixed.get().is_some() {
            return Ok(false);
        }
        let (base, size) = arena.region();
        // Pieces of at most 1 GiB, each a whole number of slots, so no slot
        // straddles two.
        let piece = (FIXED_BUFFER_MAX / arena.slot_bytes()).max(1) * arena.slot_bytes();
        let mut regions = Vec::new();
        let mut at = 0;
        while at < size {
            let len = piece.min(size - at);
            regions.push((base as usize + at, len));
            at += len;
        }
        if regions.len() > usize::from(u16::MAX) {
            return Ok(false);
        }
        let iovecs: Vec<libc::iovec> = regions
            .iter()
            .map(|&(b, l)| libc::iovec {
                iov_base: b as *mut libc::c_void,
                iov_len: l,
            })
            .collect();
        for (registered, r) in self.rings.iter().enumerate() {
            let ring = lock(r);
            // SAFETY: the iovecs describe the arena's allocation, which stays
            // valid until the rings are dropped: `self.fixed` below keeps a
            // handle on the arena and is dropped after `self.rings`.
            let res = unsafe { ring.ring.submitter().register_buffers(&iovecs) };
            if let Err(e) = res {
                for r in self.rings.iter().take(registered) {
                    let _ = lock(r).ring.submitter().unregister_buffers();
                }
                return Err(e);
            }
        }
        let _ = self.fixed.set(Fixed {
            regions,
            _arena: arena.clone(),
        });
        Ok(true)
    }

    fn register_file(&self, fd: RawFd) -> Option<u32> {
        if !self.fixed_files {
            return None;
        }
        let mut files = lock(&self.files);
        let slot = files.iter().position(Option::is_none)? as u32;
        for (i, r) in self.rings.iter().enumerate() {
            if lock(r)
                .ring
                .submitter()
                .register_files_update(slot, &[fd])
                .is_err()
            {
                for r in self.rings.iter().take(i) {
                    let _ = lock(r).ring.submitter().register_files_update(slot, &[-1]);
                }
                return None;
            }
        }
        files[slot as usize] = Some(fd);
        Some(slot)
    }

    fn unregister_file(&self, slot: u32) {
        let mut files = lock(&self.files);
        for r in self.rings.iter() {
            let _ = lock(r).ring.submitter().register_files_update(slot, &[-1]);
        }
        if let Some(s) = files.get_mut(slot as usize) {
            *s = None;
        }
    }

    /// A ring for this batch: a free one if there is one, else the next in
    /// turn.
    fn pick(&self) -> MutexGuard<'_, Ring> {
        for r in self.rings.iter() {
            if let Ok(g) = r.try_lock() {
                return g;
            }
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) as usize % self.rings.len();
        lock(&self.rings[i])
    }

    fn entry(
        &self,
        r: &Request,
        target: Target,
        i: usize,
        c: &Counters,
    ) -> io_uring::squeue::Entry {
        let fixed_buf = match (self.fixed.get(), r.cur.as_slice()) {
            (Some(f), [one]) => f
                .index_of(one.iov_base as usize, one.iov_len)
                .map(|idx| (one.iov_base.cast::<u8>(), one.iov_len as u32, idx)),
            _ => None,
        };
        if fixed_buf.is_some() {
            c.fixed_buffer.fetch_add(1, Ordering::Relaxed);
        }
        if target.slot.is_some() {
            c.fixed_file.fetch_add(1, Ordering::Relaxed);
        }
        let iovs = r.cur.len().min(libc::UIO_MAXIOV as usize) as u32;
        macro_rules! build {
            ($t:expr) => {
                match (r.write, fixed_buf) {
                    (true, Some((p, len, idx))) => opcode::WriteFixed::new($t, p, len, idx)
                        .offset(r.at())
                        .rw_flags(r.rw_flags)
                        .build(),
                    (false, Some((p, len, idx))) => opcode::ReadFixed::new($t, p, len, idx)
                        .offset(r.at())
                        .build(),
                    (true, None) => opcode::Writev::new($t, r.cur.as_ptr(), iovs)
                        .offset(r.at())
                        .rw_flags(r.rw_flags)
                        .build(),
                    (false, None) => opcode::Readv::new($t, r.cur.as_ptr(), iovs)
                        .offset(r.at())
                        .build(),
                }
            };
        }
        let e = match target.slot {
            Some(slot) => build!(types::Fixed(slot)),
            None => build!(types::Fd(target.fd)),
        };
        e.user_data(i as u64)
    }

    /// Returns the most requests it had in flight at once.
    fn run(&self, target: Target, reqs: &mut [Request], c: &Counters) -> usize {
        let mut guard = self.pick();
        let ring = &mut guard.ring;
        let mut todo: VecDeque<usize> = (0..reqs.len()).collect();
        let mut in_flight = 0usize;
        let mut most = 0usize;
        while !todo.is_empty() || in_flight > 0 {
            {
                let mut sq = ring.submission();
                while in_flight < self.depth {
                    let Some(&i) = todo.front() else { break };
                    reqs[i].prepare();
                    let e = self.entry(&reqs[i], target, i, c);
                    // SAFETY: the entry points at `reqs[i].cur` and the
                    // buffers it describes. `cur` is not touched again until
                    // this request's completion is reaped, and this function
                    // does not return before every request it pushed has
                    // completed, so both outlive the kernel's use of them.
                    if unsafe { sq.push(&e) }.is_err() {
                        break;
                    }
                    todo.pop_front();
                    in_flight += 1;
                }
            }
            most = most.max(in_flight);
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                    ) =>
                {
                    std::thread::yield_now();
                }
                Err(e) => {
                    eprintln!(
                        "directkv: io_uring submission failed with {in_flight} requests in \
                         flight ({e}); their buffers cannot be proven free, aborting"
                    );
                    std::process::abort();
                }
            }
            for cqe in ring.completion() {
                let i = cqe.user_data() as usize;
                in_flight -= 1;
                let res = cqe.result();
                let res = if res < 0 {
                    Err(std::io::Error::from_raw_os_error(-res))
                } else {
                    Ok(res as usize)
                };
                if reqs[i].complete(res, Some(c)) {
                    todo.push_back(i);
                }
            }
        }
        most
    }
}

// ----------------------------------------------------------------- threads --

/// A request handed to a worker.
struct Job {
    req: *mut Request,
    fd: RawFd,
    batch: Arc<BatchLatch>,
}

// SAFETY: a job's request is touched by exactly one worker until the worker
// counts it down on the batch latch; the submitting thread waits for the latch
// to reach zero before it touches the requests again or returns, so the
// request (and the buffers it points to) outlive the worker's use.
unsafe impl Send for Job {}

struct BatchLatch {
    left: Mutex<usize>,
    done: Condvar,
}

struct Queue {
    jobs: VecDeque<Job>,
    stop: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    counters: Counters,
}

struct Threads {
    shared: Arc<Shared>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl Threads {
    fn new(n: usize) -> Result<Threads> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                stop: false,
            }),
            ready: Condvar::new(),
            counters: Counters::default(),
        });
        let mut workers = Vec::with_capacity(n);
        for i in 0..n {
            let shared = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name(format!("directkv-aio-{i}"))
                .stack_size(128 << 10)
                .spawn(move || worker(&shared))
                .map_err(|e| Error::InvalidArgument(format!("cannot start I/O threads: {e}")))?;
            workers.push(handle);
        }
        Ok(Threads { shared, workers })
    }

    fn run(&self, fd: RawFd, reqs: &mut [Request], c: &Counters) -> usize {
        if let [one] = reqs {
            // One request: no hand-off.
            one.run_blocking(fd, Some(c));
            return 1;
        }
        let batch = Arc::new(BatchLatch {
            left: Mutex::new(reqs.len()),
            done: Condvar::new(),
        });
        {
            let mut q = lock(&self.shared.queue);
            for r in reqs.iter_mut() {
                q.jobs.push_back(Job {
                    req: r,
                    fd,
                    batch: Arc::clone(&batch),
                });
            }
        }
        self.shared.ready.notify_all();
        let mut left = lock(&batch.left);
        while *left > 0 {
            left = batch.done.wait(left).unwrap_or_else(|p| p.into_inner());
        }
        drop(left);
        let c2 = &self.shared.counters;
        c.continued
            .fetch_add(c2.continued.swap(0, Ordering::Relaxed), Ordering::Relaxed);
        reqs.len().min(self.workers.len())
    }
}

fn worker(shared: &Shared) {
    loop {
        let job = {
            let mut q = lock(&shared.queue);
            loop {
                if let Some(j) = q.jobs.pop_front() {
                    break j;
                }
                if q.stop {
                    return;
                }
                q = shared.ready.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        // SAFETY: see `Job`: this worker is the request's only user until it
        // counts the latch down below.
        let req = unsafe { &mut *job.req };
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            req.run_blocking(job.fd, Some(&shared.counters));
        }));
        if ran.is_err() && req.result.is_none() {
            req.result = Some(Err(std::io::Error::other("I/O worker panicked")));
        }
        let mut left = lock(&job.batch.left);
        *left -= 1;
        if *left == 0 {
            job.batch.done.notify_all();
        }
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        lock(&self.shared.queue).stop = true;
        self.shared.ready.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
