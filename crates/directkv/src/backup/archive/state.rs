//! The log archiver's state and counters, which the engine holds
//! ([`Engine::archive`](crate::backup::engine::Engine::archive)): the first
//! segment not archived, the end of the log the archive holds, the lag
//! clock, and what `stats().archive` reports.
//!
//! Which guard each field has:
//! - constant after open: `dir`, `permissions`, `timeout`;
//! - moved only under `round` (one round at a time): `next`, `last_copy`,
//!   and the counters a round adds to; read from any thread (atomics);
//! - `samples`: its own mutex, taken last (never while asking for `round`).
//!
//! Invariants: those of the module ([`super`]).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::setting::ArchiveSetting;
use crate::error::{Error, Result};
use crate::health;
use crate::io::{Permissions, Storage};
use crate::lsn::Lsn;
use crate::sched::{IoClass, ScheduledFile, Scheduler};
use crate::wal::format::{segment_file_name, Layout};
use crate::wal::{list_segments, read_segment_header};

/// The class of the archiver's reads that check a segment (its records, a
/// copy found in the archive): admitted at once, as recovery's reads of the
/// log are (see the module docs).
pub(super) const CHECK_CLASS: IoClass = IoClass::Read;

/// The most samples of the log's durable end the lag clock keeps (one per
/// archiver round, or per call of `stats`, that saw the log grow). When
/// they are all in use the newest is moved forward and keeps its older
/// time, so the clock may run early (reports more lag), never late.
const LAG_SAMPLES_MAX: usize = 64;

/// What log archiving has done (all zero when it is off).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ArchiveStats {
    /// Whether an archive directory is set.
    pub enabled: bool,
    /// Segments copied into the archive since open (or found there, the
    /// same bytes).
    pub segments: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Rounds that failed (each is retried); see `last_failure`.
    pub failures: u64,
    /// Why the last failed round failed, if one did since the last success.
    pub last_failure: Option<String>,
    /// The first segment not yet archived.
    pub next_segment: u64,
    /// The archive's directory (recorded with the database).
    pub dir: Option<PathBuf>,
    /// `archive_timeout` in ms (0: only whole segments are archived).
    pub timeout_ms: u64,
    /// The end of the log the archive holds, as far as this open knows:
    /// every byte of the log before it is archived (at open, the start of
    /// the oldest segment the log holds).
    pub archived_lsn: u64,
    /// How far the archive lags: log bytes past `archived_lsn` up to the
    /// end of the last durable record (a seal, a flush of no record, is not
    /// lag).
    pub lag_bytes: u64,
    /// For how long (ms) the archive has lacked its oldest missing byte of
    /// a durable record: since the archiver's round (or the call of `stats`)
    /// that first saw that byte durable; 0 when the archive holds every
    /// durable record.
    pub lag_ms: u64,
    /// Partial copies of the segment being written (`archive_timeout`).
    pub partial_copies: u64,
}

/// The archiver's state, held by the engine (see the module docs for what
/// guards each field).
pub(crate) struct Archive {
    /// The archive's root (see [`crate::backup::archive_dir_of`]).
    dir: PathBuf,
    /// The modes of the directories it makes.
    permissions: Permissions,
    /// The first segment not yet archived.
    next: AtomicU64,
    /// One round at a time: held while a round copies.
    pub(super) round: Mutex<()>,
    segments: AtomicU64,
    bytes: AtomicU64,
    failures: AtomicU64,
    last_failure: Mutex<Option<String>>,
    /// `archive_timeout`.
    pub(super) timeout: Option<Duration>,
    /// The end of the log the archive holds (see the module's invariants).
    archived_lsn: AtomicU64,
    /// The lag clock: `(lsn, when)` pairs, oldest first, each saying the
    /// durable records reached `lsn` by `when` (first seen then); only
    /// those past `archived_lsn` are kept, at most [`LAG_SAMPLES_MAX`].
    samples: Mutex<VecDeque<(Lsn, Instant)>>,
    /// How far the archiver's clock runs ahead of the real one (ms): moved
    /// only by [`round_for_test`](super::round_for_test).
    clock_ahead_ms: AtomicU64,
    /// Under `round`: the segment and file offset of the last copy this
    /// open made (the archive's copy then holds exactly those bytes).
    pub(super) last_copy: Mutex<Option<(u64, u64)>>,
    partial_copies: AtomicU64,
}

impl Archive {
    /// The archiver of the log in `wal_dir` (whose segment `current` is
    /// being written), as `setting` says (its directory exists): it starts
    /// at the oldest segment the log holds.
    ///
    /// # Errors
    /// I/O errors of creating or listing the directories.
    pub(crate) fn open<S: Storage>(
        storage: &S,
        setting: &ArchiveSetting,
        (wal_dir, current, layout): (&Path, u64, Layout),
        permissions: Permissions,
        sched: &Arc<Scheduler>,
    ) -> Result<Archive> {
        let dir = setting.dir.as_path();
        // Made (and checked) by `setting::claim`.
        assert!(storage.exists(dir), "the archive's root exists");
        // The oldest segment at or before the current one (later numbers
        // are spares) whose header has its number: a file re-headed for
        // recycling but not yet renamed when the process stopped was
        // archived before (or lies before the log's start) and is recycled
        // again by the next checkpoint. Segments already archived are found
        // so in the first round.
        let mut oldest = current;
        for n in list_segments(storage, wal_dir)? {
            if n >= current {
                break;
            }
            let file = ScheduledFile::new(
                storage.open(
                    &wal_dir.join(segment_file_name(n)),
                    &crate::wal::reader_options(),
                )?,
                Arc::clone(sched),
            );
            match read_segment_header(&file, CHECK_CLASS) {
                Ok(h) if h.segment_no == n => {
                    oldest = n;
                    break;
                }
                // Another number (re-headed for recycling) or no header.
                Ok(_) | Err(Error::Corruption { .. } | Error::FormatVersion { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        assert!(oldest <= current, "the archive starts within the log");
        Ok(Archive {
            dir: dir.to_path_buf(),
            permissions,
            next: AtomicU64::new(oldest),
            round: Mutex::new(()),
            segments: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            last_failure: Mutex::new(None),
            timeout: setting.timeout,
            archived_lsn: AtomicU64::new(layout.segment_start(oldest).get()),
            samples: Mutex::new(VecDeque::with_capacity(LAG_SAMPLES_MAX)),
            clock_ahead_ms: AtomicU64::new(0),
            last_copy: Mutex::new(None),
            partial_copies: AtomicU64::new(0),
        })
    }

    /// The archive's root directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The first segment not yet archived: checkpoints keep it and every
    /// later one.
    pub(crate) fn next_segment(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// The end of the log the archive holds.
    pub(crate) fn archived_lsn(&self) -> Lsn {
        Lsn::new(self.archived_lsn.load(Ordering::Acquire))
    }

    /// Notes that the archive holds the log up to `lsn`.
    pub(super) fn archived_to(&self, lsn: Lsn, layout: Layout) {
        assert!(
            lsn >= layout.segment_start(self.next_segment()),
            "the archive holds every segment before `next`"
        );
        self.archived_lsn.fetch_max(lsn.get(), Ordering::AcqRel);
        assert!(self.archived_lsn() >= lsn, "archived_lsn only grows");
    }

    /// The archiver's clock: the real one, ahead by what a test moved it.
    fn now(&self) -> Instant {
        Instant::now() + Duration::from_millis(self.clock_ahead_ms.load(Ordering::Acquire))
    }

    /// For how long the archive has lacked its oldest missing byte of the
    /// durable records, which end at `records_end`: since the first sample
    /// that saw the records pass `archived_lsn` (so a whole segment
    /// archived restarts the clock at when the next one's bytes came).
    /// Takes a sample of `records_end` when it grew.
    ///
    /// Worked example: samples (100, t0), (700, t1), (900, t2); the archive
    /// copies through 700: (100, t0) and (700, t1) are dropped, and the lag
    /// counts from t2, when the byte at 700 was first seen durable.
    pub(super) fn lag(&self, records_end: Lsn) -> Duration {
        let (now, archived) = (self.now(), self.archived_lsn());
        let mut samples = health::lock_even_poisoned(&self.samples);
        while samples.front().is_some_and(|&(lsn, _)| lsn <= archived) {
            samples.pop_front();
        }
        if records_end <= archived {
            // (A caller's older `records_end` may find later samples kept.)
            return Duration::ZERO;
        }
        let full = samples.len() == LAG_SAMPLES_MAX;
        match samples.back_mut() {
            Some((lsn, _)) if *lsn >= records_end => {}
            Some((lsn, _)) if full => *lsn = records_end,
            _ => samples.push_back((records_end, now)),
        }
        assert!(samples.len() <= LAG_SAMPLES_MAX);
        let (first, since) = samples[0];
        assert!(first > archived, "the clock is of a byte not archived");
        now.saturating_duration_since(since)
    }

    /// Its counters, and its lag behind the durable records ending at
    /// `records_end`.
    pub(crate) fn stats(&self, records_end: Lsn) -> ArchiveStats {
        let lag = self.lag(records_end);
        let archived = self.archived_lsn();
        ArchiveStats {
            enabled: true,
            segments: self.segments.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            last_failure: health::lock_even_poisoned(&self.last_failure).clone(),
            next_segment: self.next_segment(),
            dir: Some(self.dir.clone()),
            timeout_ms: self.timeout.map_or(0, |t| t.as_millis() as u64),
            archived_lsn: archived.get(),
            lag_bytes: records_end.get().saturating_sub(archived.get()),
            lag_ms: lag.as_millis() as u64,
            partial_copies: self.partial_copies.load(Ordering::Relaxed),
        }
    }

    /// Counts a failed round of segment `n`.
    pub(super) fn failed(&self, n: u64, e: &Error) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        *health::lock_even_poisoned(&self.last_failure) =
            Some(format!("segment {}: {e}", segment_file_name(n)));
    }

    /// Counts segment `n` archived whole (`bytes` copied, 0 when an equal
    /// copy was there) and moves `next` past it; the archive then holds
    /// the log up to `end`, where segment `n + 1` begins. Under `round`.
    pub(super) fn archived_whole(&self, n: u64, bytes: u64, end: Lsn, layout: Layout) {
        assert_eq!(
            end,
            layout.segment_start(n + 1),
            "a whole segment ends at the next"
        );
        assert!(
            bytes == 0 || bytes == layout.segment_bytes,
            "a whole copy or none"
        );
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.segments.fetch_add(1, Ordering::Relaxed);
        *health::lock_even_poisoned(&self.last_failure) = None;
        // `archived_lsn` first: it is never below `next`'s start, even to
        // a reader between the two.
        self.archived_to(end, layout);
        let was = self.next.fetch_add(1, Ordering::AcqRel);
        assert_eq!(was, n, "one round at a time moves `next`");
    }

    /// Counts a partial copy of the segment being written, `bytes` copied,
    /// holding the log up to `end`. Under `round`.
    pub(super) fn archived_partial(&self, bytes: u64, end: Lsn, layout: Layout) {
        assert_eq!(
            layout.segment_of(end),
            self.next_segment(),
            "only the segment after the last whole one is copied partially"
        );
        assert!(
            bytes <= layout.segment_bytes,
            "a copy is one segment's length"
        );
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.partial_copies.fetch_add(1, Ordering::Relaxed);
        *health::lock_even_poisoned(&self.last_failure) = None;
        self.archived_to(end, layout);
    }

    /// Moves the archiver's clock `ahead` of the real one (a test's).
    pub(super) fn move_clock(&self, ahead: Duration) {
        let ms = u64::try_from(ahead.as_millis()).unwrap_or(u64::MAX);
        let was = self.clock_ahead_ms.fetch_add(ms, Ordering::AcqRel);
        assert!(was.checked_add(ms).is_some(), "the clock moves forward");
    }

    /// The permissions of the directories it makes.
    pub(super) fn permissions(&self) -> Permissions {
        self.permissions
    }
}
