//! The log writer: appends into an in-memory buffer, group commit, and the
//! poisoned state after a failed write or sync.
//!
//! States of the writer (under `state`):
//! - **Open**: appends copy records into the fill buffer; `flush(lsn)` either
//!   finds `durable ≥ lsn`, waits for the flush under way, or leads one.
//! - **Flushing** (one leader at a time): the leader pads the fill buffer to the
//!   I/O unit, swaps it with the spare buffer (which becomes the new fill,
//!   starting with a flush header), releases the lock, writes the old buffer and
//!   syncs, then publishes the new durable LSN and wakes the flush's waiters
//!   and one waiter to lead the next flush (see [`wake`]).
//! - **Failed**: a write or sync failed. Waiters whose records were in the
//!   failed flush get [`Error::CommitOutcomeUnknown`]; every later append or
//!   flush gets [`Error::Poisoned`]. There is no way back but reopening.
//!
//! Invariants:
//! - A write starts only after the previous write's sync completed (one leader
//!   at a time). The reader's torn-tail rule depends on it.
//! - Every flush starts with a flush header and ends at an I/O-unit boundary, so
//!   no sector that holds synced records is ever written again: a torn write can
//!   only damage the flush it belongs to.
//! - `durable` only grows, and only after a sync (or an `O_SYNC`/`O_DSYNC`/
//!   `RWF_DSYNC` write) of every byte up to it returned success.
//! - A flush that held records is *unsealed* until another flush begins
//!   after it: that later flush's valid header is what proves to a reader
//!   that the one before it completed (see [`sealer`] and
//!   `docs/wal_format.md`, "End of log").

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::coverage::{self, DiscardedTail};
use super::format::{
    kind, next_record_start, DbId, Layout, FLUSH_BYTES_MAX, RECORD_HEADER_BYTES,
    RECORD_PAYLOAD_MAX, SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN, SEGMENT_HEADER_BYTES,
};

use super::segments::Segments;
use super::{preparer, sealer};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Storage, SyncVariant};
use crate::lsn::Lsn;
use crate::sched::{IoClass, ScheduledFile};

mod flush;
mod state;
mod wake;

use state::{Buffer, FlushError, Phase};
pub(super) use state::{Failure, State};
use wake::FlushEnds;

/// The default segment size: 64 MiB. Large enough that moving to a new segment
/// (one more file, one header) is rare even at 100 MB/s of log, small enough
/// that a checkpoint frees space in useful steps and preparing a spare (a 64 MiB
/// zero fill, about 0.1–0.3 s here) stays a background job.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;
/// Flushes [`Wal::seal`] leads at most before it leaves the sealing to the
/// appenders that keep the log busy.
const SEAL_ROUNDS_MAX: usize = 8;
/// The default size of each of the two log buffers.
pub const BUFFER_BYTES_DEFAULT: usize = 4 << 20;
/// Segments kept prepared ahead of the writer.
pub const SPARE_SEGMENTS_DEFAULT: usize = 2;
/// Segments kept for reuse by default (1 GiB at the default segment size).
pub const RECYCLE_SEGMENTS_MAX_DEFAULT: usize = 16;
/// How long the log stays idle after a flush that held records ended
/// before a seal proves that flush complete, by default. Commits less than
/// this apart (one committer or many) write no seal; each commit followed
/// by a longer pause costs one more 512-byte write and sync (at most 100 a
/// second), which a commit arriving while it runs waits for, as for any
/// flush under way.
pub const SEAL_DELAY_DEFAULT: Duration = Duration::from_millis(10);
/// The longest seal delay the log takes: past it, a user who wants no
/// background seals says `None`.
pub const SEAL_DELAY_MAX: Duration = Duration::from_secs(3600);
/// The bytes of a flush header record: what a flush holds when it holds no
/// caller record (before its padding).
const FLUSH_HEADER_RECORD_BYTES: usize = RECORD_HEADER_BYTES as usize + 8;

/// How a log is configured.
#[derive(Debug, Clone)]
pub struct WalOptions {
    /// The directory of the segment files.
    pub dir: PathBuf,
    /// Bytes per segment file (header included), a multiple of 4096.
    pub segment_bytes: u64,
    /// How writes become durable.
    pub sync: SyncVariant,
    /// Bytes of each of the two log buffers (a flush writes at most one).
    pub buffer_bytes: usize,
    /// A leader waits this long before flushing, so more commits join the group
    /// (PostgreSQL's `commit_delay`). Zero: off.
    pub commit_delay: Duration,
    /// Segments kept prepared ahead of the writer.
    pub spare_segments: usize,
    /// Old segments a checkpoint renames for reuse rather than removes, at most
    /// (counting the spares): in steady state the log then creates no new files.
    pub recycle_segments_max: usize,
    /// Prepare spare segments on a background thread (the default). Off, the
    /// writer prepares each segment when it first needs it: slower at segment
    /// boundaries, but every I/O happens on the caller's thread in program
    /// order, which deterministic simulation needs.
    pub background_prepare: bool,
    /// The database's identity, stamped on every segment.
    pub db_id: DbId,
    /// The I/O scheduler every request of the log asks: its writes, syncs
    /// and zero fills as [`IoClass::Wal`], recovery's reads as
    /// [`IoClass::Read`]. By default a FIFO scheduler of the log's own
    /// (`Scheduler::fifo`).
    ///
    /// [`IoClass::Wal`]: crate::sched::IoClass::Wal
    /// [`IoClass::Read`]: crate::sched::IoClass::Read
    pub sched: Arc<crate::sched::Scheduler>,
    /// After a flush that held records, how long the log must stay idle
    /// before a background thread writes a *seal* (a flush of no record)
    /// that proves it complete. `None`: no such thread; seals are written
    /// only by [`Wal::seal`] (on close and drop). Runs only with
    /// `background_prepare`.
    pub seal_delay: Option<Duration>,
    /// Whether open may make the log: its directory and first segment. Off
    /// for a database whose log exists already, so a missing directory or
    /// redo segment is damage, never a new empty log.
    pub create_if_missing: bool,
    /// The log must reach at least this far (the end of the last
    /// checkpoint's record, or where the data file's head says the log was
    /// durable); a log that ends before it is damaged.
    pub must_reach: Lsn,
    /// The mode of the directory and segments the log creates.
    pub permissions: crate::io::Permissions,
}

impl WalOptions {
    /// Defaults for a log in `dir` of database `db_id`.
    pub fn new(dir: impl Into<PathBuf>, db_id: DbId) -> Self {
        WalOptions {
            dir: dir.into(),
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            sync: SyncVariant::SAFE_DEFAULT,
            buffer_bytes: BUFFER_BYTES_DEFAULT,
            commit_delay: Duration::ZERO,
            spare_segments: SPARE_SEGMENTS_DEFAULT,
            recycle_segments_max: RECYCLE_SEGMENTS_MAX_DEFAULT,
            background_prepare: true,
            seal_delay: Some(SEAL_DELAY_DEFAULT),
            db_id,
            sched: crate::sched::Scheduler::fifo(),
            create_if_missing: true,
            must_reach: Lsn::ZERO,
            permissions: crate::io::Permissions::Private,
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&self.segment_bytes)
            || self.segment_bytes % SEGMENT_HEADER_BYTES != 0
        {
            return bad(format!(
                "WAL segment size {} must be a multiple of {SEGMENT_HEADER_BYTES} in \
                 {SEGMENT_BYTES_MIN}..={SEGMENT_BYTES_MAX}",
                self.segment_bytes
            ));
        }
        if self
            .seal_delay
            .is_some_and(|d| d.is_zero() || d > SEAL_DELAY_MAX)
        {
            return bad(format!(
                "WAL seal delay {:?} must be more than zero and at most {SEAL_DELAY_MAX:?} \
                 (None: no background seals)",
                self.seal_delay
            ));
        }
        let min = 2 * (RECORD_PAYLOAD_MAX + 4096);
        if self.buffer_bytes < min
            || self.buffer_bytes as u64 > FLUSH_BYTES_MAX
            || self.buffer_bytes % 4096 != 0
        {
            return bad(format!(
                "WAL buffer size {} must be a multiple of 4096 in {min}..={FLUSH_BYTES_MAX}",
                self.buffer_bytes
            ));
        }
        Ok(())
    }
}

/// Counters of the log, for `stats()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WalStats {
    /// Records appended by callers.
    pub records: u64,
    /// Payload bytes appended by callers.
    pub payload_bytes: u64,
    /// Flushes (one write plus one sync each).
    pub flushes: u64,
    /// Microseconds the flushes spent writing and syncing (failed ones
    /// too; a segment's preparation, when a flush must wait for it, is
    /// not counted). Flushes run one at a time, so `flush_us` over the
    /// microseconds that passed is the share of that time the log was
    /// flushing: near one, the device's syncs bound the commit rate, and
    /// only more commits per flush raise it.
    pub flush_us: u64,
    /// Bytes written, padding and flush headers included.
    pub bytes_written: u64,
    /// `flush` calls that found their LSN already durable or waited for another
    /// thread's flush: the commits group commit saved a sync for.
    pub flushes_joined: u64,
    /// Seals: flushes of no record, written after the log went idle (or
    /// at close) so that recovery can prove the flush before them complete.
    pub seals: u64,
    /// The last flush that held records is proven complete: a flush began
    /// after it (true, too, before any flush).
    pub sealed: bool,
    /// Segments created.
    pub segments_created: u64,
    /// Segments recycled.
    pub segments_recycled: u64,
    /// Times the writer had to prepare a segment itself.
    pub segment_waits: u64,
    /// The durable LSN.
    pub durable_lsn: u64,
    /// The end of the log (next append position).
    pub end_lsn: u64,
}

pub(super) struct Shared<S: Storage> {
    dir: PathBuf,
    layout: Layout,
    unit: usize,
    commit_delay: Duration,
    pub(super) segments: Segments<S>,
    pub(super) state: Mutex<State>,
    /// Where waiters sleep while a flush is under way.
    pub(super) ends: FlushEnds,
    /// Where the sealer sleeps, with `state`'s lock (see [`sealer`]).
    pub(super) sealer: Condvar,
    pub(super) seal_delay: Option<Duration>,
    durable: AtomicU64,
    /// The end of the last caller record appended.
    appended: AtomicU64,
    pub(super) shutdown: AtomicBool,
    /// A background thread of the log (preparer or sealer) panicked: the
    /// log is stopped.
    pub(super) background_panicked: AtomicBool,
    pub(super) counters: Counters,
}

/// The log's counters behind [`WalStats`].
#[derive(Default)]
pub(super) struct Counters {
    records: AtomicU64,
    payload_bytes: AtomicU64,
    flushes: AtomicU64,
    flush_ns: AtomicU64,
    bytes_written: AtomicU64,
    flushes_joined: AtomicU64,
    pub(super) seals: AtomicU64,
}

/// A write-ahead log: append records, wait for them to be durable.
///
/// # Examples
/// ```no_run
/// use directkv::internals::io::OsStorage;
/// use directkv::internals::wal::{Wal, WalOptions};
/// let opts = WalOptions::new("db/wal", [7; 16]);
/// let (wal, _end) = Wal::open(OsStorage::default(), opts, directkv::Lsn::ZERO, |_record| Ok(()))?;
/// let lsn = wal.append(16, b"hello")?;
/// wal.flush(lsn)?; // durable now
/// # Ok::<(), directkv::Error>(())
/// ```
pub struct Wal<S: Storage> {
    shared: Arc<Shared<S>>,
    preparer: Option<JoinHandle<()>>,
    sealer: Option<JoinHandle<()>>,
    /// What open found and discarded past the end of the log.
    discarded: Option<DiscardedTail>,
}

/// Starts the log's background threads as `opts` asks: the segment
/// preparer and the sealer (either may be refused by the OS; the log then
/// does without, see their modules).
fn spawn_threads<S: Storage>(
    opts: &WalOptions,
    shared: &Arc<Shared<S>>,
) -> (Option<JoinHandle<()>>, Option<JoinHandle<()>>) {
    if !opts.background_prepare {
        return (None, None);
    }
    let preparer = preparer::spawn(Arc::clone(shared));
    // Without durable syncs a later flush proves nothing about an earlier
    // one (the page cache may write them in any order): no background
    // seals there.
    let sealer = opts
        .seal_delay
        .filter(|_| opts.sync.method.is_durable())
        .and_then(|_| sealer::spawn(Arc::clone(shared)));
    (preparer, sealer)
}

/// Where the first flush after open starts: the first I/O-unit boundary
/// at or past the end of the log found (end 5000, unit 4096: 8192), so no
/// sector that holds durable records is written again.
fn resume_point(end: Lsn, unit: usize) -> Lsn {
    let resume_at = Lsn::new(end.get().next_multiple_of(unit as u64));
    assert!(
        resume_at >= end && resume_at.get() - end.get() < unit as u64,
        "the next flush starts at the first unit boundary at or past the end"
    );
    resume_at
}

/// See [`crate::health`]: a poisoned lock here means the database has
/// failed already.
pub(super) fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    crate::health::lock_even_poisoned(m)
}

impl<S: Storage> Wal<S> {
    /// Opens the log in `opts.dir` (creating it if empty), replays every caller
    /// record from `from` through `replay`, and returns the log ready to append
    /// at its end, with that end.
    ///
    /// After a crash the end is where the valid log stops; the writer resumes at
    /// the next I/O-unit boundary and first overwrites with zeros whatever the
    /// interrupted flush may have left beyond it, so no stale record can ever be
    /// read as part of the new log.
    ///
    /// # Errors
    /// [`Error::Corruption`] when the log is corrupt before its end (see
    /// [`WalReader`]); [`Error::InvalidArgument`] for bad options; I/O errors.
    pub fn open(
        storage: S,
        mut opts: WalOptions,
        from: Lsn,
        mut replay: impl FnMut(super::Record) -> Result<()>,
    ) -> Result<(Wal<S>, Lsn)> {
        opts.validate()?;
        let coverage::LogEnd {
            existing,
            layout,
            tail,
            discarded,
        } = coverage::read_to_end(&storage, &mut opts, from, &mut replay)?;
        assert_eq!(layout.segment_bytes, opts.segment_bytes);
        let current = layout.segment_of(tail.end);
        let segments = Segments::new(storage, &opts, current);
        let probe = segments.writer_file(current)?;
        let unit = probe.alignment().io_unit_bytes() as usize;
        if unit > SEGMENT_HEADER_BYTES as usize {
            return Err(Error::Unsupported {
                what: "WAL on this device",
                detail: format!("direct-I/O alignment {unit} exceeds {SEGMENT_HEADER_BYTES}"),
            });
        }
        drop(probe);
        let resume_at = resume_point(tail.end, unit);
        let shared = Arc::new(Shared {
            dir: opts.dir.clone(),
            layout,
            unit,
            commit_delay: opts.commit_delay,
            segments,
            state: Mutex::new(State::new(
                AlignedBuf::new(opts.buffer_bytes, unit as u32)?,
                AlignedBuf::new(opts.buffer_bytes, unit as u32)?,
                resume_at,
                tail.end,
            )),
            ends: FlushEnds::new(),
            sealer: Condvar::new(),
            seal_delay: opts.seal_delay,
            durable: AtomicU64::new(tail.end.get()),
            appended: AtomicU64::new(tail.end.get()),
            shutdown: AtomicBool::new(false),
            background_panicked: AtomicBool::new(false),
            counters: Counters::default(),
        });
        if !existing.is_empty() {
            // The interrupted flush began at or before the end and was at
            // most one flush long.
            let stale_end = tail.end.get() + FLUSH_BYTES_MAX;
            shared.zero_range(resume_at, Lsn::new(stale_end.max(resume_at.get())))?;
        }
        {
            let mut st = lock(&shared.state);
            st.fill
                .put(resume_at, kind::FLUSH_HEADER, &tail.end.get().to_le_bytes());
        }
        let (preparer, sealer) = spawn_threads(&opts, &shared);
        Ok((
            Wal {
                shared,
                preparer,
                sealer,
                discarded,
            },
            tail.end,
        ))
    }

    /// The records open found past the end of the log, in the flush that was
    /// under way when the log stopped, and discarded (they were never
    /// acknowledged: their sync did not complete). `None`: the log ended
    /// cleanly.
    pub fn discarded_tail(&self) -> Option<DiscardedTail> {
        self.discarded
    }

    /// Appends a record of `kind` (≥ [`kind::USER_MIN`]) and returns its end LSN,
    /// which [`flush`](Self::flush) makes durable. Not durable by itself.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a reserved kind or a payload over
    /// [`RECORD_PAYLOAD_MAX`]; [`Error::Poisoned`] after a failure.
    pub fn append(&self, kind: u8, payload: &[u8]) -> Result<Lsn> {
        if kind < super::format::kind::USER_MIN {
            return Err(Error::InvalidArgument(format!(
                "WAL record kind {kind} is reserved"
            )));
        }
        if payload.len() > RECORD_PAYLOAD_MAX {
            return Err(Error::InvalidArgument(format!(
                "WAL record of {} bytes exceeds the {RECORD_PAYLOAD_MAX}-byte limit",
                payload.len()
            )));
        }
        let sh = &self.shared;
        let mut st = lock(&sh.state);
        loop {
            sh.check_failed(&st, None)?;
            let at = next_record_start(st.fill.end());
            let end = at.get() + RECORD_HEADER_BYTES + payload.len() as u64;
            if end <= st.fill.start.get() + st.fill.buf.len() as u64 {
                let put_end = st.fill.put(at, kind, payload);
                assert_eq!(put_end.get(), end, "the record fills the room made for it");
                let end = put_end;
                let before = sh.appended.fetch_max(end.get(), Ordering::AcqRel);
                assert!(before < end.get(), "records are appended in LSN order");
                sh.counters.records.fetch_add(1, Ordering::Relaxed);
                sh.counters
                    .payload_bytes
                    .fetch_add(payload.len() as u64, Ordering::Relaxed);
                return Ok(end);
            }
            // The buffer is full: flush it (or wait for the flush under way).
            st = if st.is_flushing() {
                let ticket = sh.ends.ticket(st.generation);
                drop(st);
                sh.ends.sleep(ticket);
                lock(&sh.state)
            } else {
                sh.lead_flush(st)
            };
        }
    }

    /// Returns once every record ending at or before `lsn` is durable.
    /// Concurrent callers share one write and one sync (group commit).
    ///
    /// # Errors
    /// [`Error::CommitOutcomeUnknown`] when the flush covering `lsn` failed (the
    /// records may or may not be on disk); [`Error::Poisoned`] when the log failed
    /// earlier.
    pub fn flush(&self, lsn: Lsn) -> Result<()> {
        let sh = &self.shared;
        if sh.durable.load(Ordering::Acquire) >= lsn.get() {
            sh.counters.flushes_joined.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let mut st = lock(&sh.state);
        let mut led = false;
        loop {
            if st.durable >= lsn {
                assert!(
                    sh.durable.load(Ordering::Acquire) >= lsn.get(),
                    "published durability"
                );
                if !led {
                    sh.counters.flushes_joined.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(());
            }
            sh.check_failed(&st, Some(lsn))?;
            if st.is_flushing() {
                let ticket = sh.ends.ticket(st.flush_needed(lsn));
                drop(st);
                sh.ends.sleep(ticket);
                // A woken waiter whose record is durable returns without
                // the lock (the flush published its end before the wake).
                if sh.durable.load(Ordering::Acquire) >= lsn.get() {
                    if !led {
                        sh.counters.flushes_joined.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(());
                }
                st = lock(&sh.state);
                continue;
            }
            if !sh.commit_delay.is_zero() {
                drop(st);
                std::thread::sleep(sh.commit_delay);
                st = lock(&sh.state);
                if st.is_flushing() || st.durable >= lsn {
                    continue;
                }
            }
            led = true;
            st = sh.lead_flush(st);
        }
    }

    /// Appends and waits for durability: `flush(append(kind, payload))`.
    ///
    /// # Errors
    /// As [`append`](Self::append) and [`flush`](Self::flush).
    pub fn append_durable(&self, kind: u8, payload: &[u8]) -> Result<Lsn> {
        let lsn = self.append(kind, payload)?;
        self.flush(lsn)?;
        Ok(lsn)
    }

    /// Makes everything appended durable, then proves the last flush
    /// complete with a seal if nothing durable does yet: a later valid
    /// flush header is how recovery tells an acknowledged flush damaged
    /// since from one torn by a crash. Waits for a flush under way.
    ///
    /// # Errors
    /// As [`flush`](Self::flush).
    pub fn seal(&self) -> Result<()> {
        let sh = &self.shared;
        let mut st = lock(&sh.state);
        // Each round either returns, waits for a flush to end, or leads
        // one; appends racing with it can only make it lead more.
        for _ in 0..SEAL_ROUNDS_MAX {
            sh.check_failed(&st, None)?;
            if st.is_flushing() {
                let ticket = sh.ends.ticket(st.generation);
                drop(st);
                sh.ends.sleep(ticket);
                st = lock(&sh.state);
                continue;
            }
            let pending = st.fill.used > FLUSH_HEADER_RECORD_BYTES;
            if !st.unsealed && !pending {
                return Ok(());
            }
            st = sh.lead_flush(st);
            if !pending && st.failure().is_none() {
                sh.counters.seals.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Appenders kept the log busy throughout: their flushes seal it.
        Ok(())
    }

    /// The LSN up to which the log is durable.
    pub fn durable_lsn(&self) -> Lsn {
        Lsn::new(self.shared.durable.load(Ordering::Acquire))
    }

    /// The shared state, for the tests of the log's threads.
    #[cfg(test)]
    pub(super) fn shared_for_test(&self) -> Arc<Shared<S>> {
        Arc::clone(&self.shared)
    }

    /// The end of the last caller record appended (the end of the log
    /// found at open, before any): flushing to it makes every record
    /// durable without writing a flush that holds none.
    pub fn appended_lsn(&self) -> Lsn {
        Lsn::new(self.shared.appended.load(Ordering::Acquire))
    }

    /// The end of the log: where the next record goes.
    pub fn end_lsn(&self) -> Lsn {
        lock(&self.shared.state).fill.end()
    }

    /// The directory of the segments.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The segment size.
    pub fn segment_bytes(&self) -> u64 {
        self.shared.layout.segment_bytes
    }

    /// The I/O unit every flush is padded to.
    pub fn io_unit_bytes(&self) -> usize {
        self.shared.unit
    }

    /// Recycles the segments that hold only log before `lsn` (the redo point of
    /// a completed checkpoint). Returns how many were renamed for reuse.
    ///
    /// # Errors
    /// I/O errors of renaming, syncing or removing segments.
    pub fn recycle_before(&self, lsn: Lsn) -> Result<usize> {
        assert!(
            lsn <= self.durable_lsn(),
            "only segments of durable log are recycled"
        );
        let keep_from = self.shared.layout.segment_of(lsn);
        self.shared.segments.recycle_before(keep_from)
    }

    /// Prepares the spare segments now instead of in the background: for
    /// benchmarks that must not measure the zero fill, and for tests.
    ///
    /// # Errors
    /// I/O errors of creating a segment.
    pub fn prepare_spares(&self) -> Result<()> {
        self.shared.segments.prepare_spares_now()
    }

    /// The log's counters.
    pub fn stats(&self) -> WalStats {
        let sh = &self.shared;
        let c = &sh.segments.counters;
        let (sealed, end_lsn) = {
            let st = lock(&sh.state);
            (!st.unsealed, st.fill.end())
        };
        WalStats {
            records: sh.counters.records.load(Ordering::Relaxed),
            payload_bytes: sh.counters.payload_bytes.load(Ordering::Relaxed),
            flushes: sh.counters.flushes.load(Ordering::Relaxed),
            flush_us: sh.counters.flush_ns.load(Ordering::Relaxed) / 1000,
            bytes_written: sh.counters.bytes_written.load(Ordering::Relaxed),
            flushes_joined: sh.counters.flushes_joined.load(Ordering::Relaxed),
            seals: sh.counters.seals.load(Ordering::Relaxed),
            sealed,
            segments_created: c.created.load(Ordering::Relaxed),
            segments_recycled: c.recycled.load(Ordering::Relaxed),
            segment_waits: c.writer_waits.load(Ordering::Relaxed),
            durable_lsn: sh.durable.load(Ordering::Relaxed),
            end_lsn: end_lsn.get(),
        }
    }

    /// Makes everything appended durable, seals it (see
    /// [`seal`](Self::seal)) and stops the background threads.
    ///
    /// # Errors
    /// As [`flush`](Self::flush).
    pub fn close(mut self) -> Result<()> {
        let result = self.seal();
        self.stop();
        result
    }

    fn stop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.segments.shutdown();
        {
            // Under the lock, so the sealer is either waiting (and woken)
            // or will see `shutdown` before it waits.
            let _st = lock(&self.shared.state);
            self.shared.sealer.notify_all();
        }
        for h in [self.preparer.take(), self.sealer.take()]
            .into_iter()
            .flatten()
        {
            let _ = h.join();
        }
    }
}

impl<S: Storage> Drop for Wal<S> {
    fn drop(&mut self) {
        self.stop();
    }
}
