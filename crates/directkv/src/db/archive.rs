//! Log archiving ([`Options::wal_archive`](super::Options::wal_archive),
//! recorded with the database: [`super::archive_setting`]): every log
//! segment is copied into an archive directory once it is complete, and no
//! segment is recycled before its copy is there. With a backup, the archive
//! restores the database to any commit after the backup's end
//! (`restore_backup_chain_to`, docs/backup.md).
//!
//! Archiving one segment `n`:
//! 1. Only once the durable log has passed into segment `n + 1`: nothing
//!    is ever written to `n` again.
//! 2. Its records are read and checked (each record's CRC, the segment's
//!    header, the flush rules of the log reader) up to where segment
//!    `n + 1` begins; damage fails the archiving, and is never copied.
//! 3. It is copied in 1 MiB direct reads in the scheduler's `Backup` class
//!    to `NAME.tmp` (created exclusively, private), synced, renamed to
//!    `NAME`, and the directory synced.
//! 4. A file `NAME` already in the archive with the same bytes counts as
//!    archived (a copy made before a crash). One that is a partial copy of
//!    it (below: the same bytes up to a point, zeros after) is replaced by
//!    the rename of step 3. With any other bytes it is a failure: the
//!    archive is never overwritten with less, or with another log.
//!
//! With `archive_timeout`, the segment being written is archived before it
//! is complete once the durable log has held commits the archive lacks for
//! that long: a partial copy, under the segment's own name, whose bytes are
//! the segment's up to the durable end D and zeros after. It is checked
//! (records up to D) and written as in steps 2 and 3. To the log reader it
//! is the segment with a log that ends cleanly at D (zeros are an end, not
//! damage), so a restore reads every commit through D and stops there
//! without refusing; each later copy, partial or whole, holds the earlier
//! one's bytes and more, and replaces it by a rename, so the archive always
//! holds one whole file per name, the longest copy made. A partial copy is
//! never taken for the whole segment: the archiver counts a segment
//! archived only when the archive's copy equals the complete segment, and
//! only the segment after the last complete one is ever copied partially,
//! so no archived segment follows a partial copy.
//!
//! The checks of steps 2 and 4 read as `CHECK_CLASS` requests, admitted at
//! once: a checkpoint archives what is pending while it holds the
//! checkpoint lock, and only the copy, the bulk of the work, is paced.
//!
//! A failure is counted ([`ArchiveStats`]), remembered, and retried on the
//! next round; meanwhile the segment and every later one stay, and commits
//! go on until the log's own space limits apply.
//!
//! Invariants:
//! - `next` (the first segment not archived) only grows, and every segment
//!   this open archived before it is in the archive, synced under its
//!   final name. At open it starts at the oldest segment the log holds,
//!   which is the first not archived or one before it (found archived,
//!   the same bytes, in the first round).
//! - Checkpoints recycle no segment from `next` on (the archiver's pin).
//! - `archived_lsn` only grows, and the archive holds (synced) every byte
//!   of the log before it; it is at least `next`'s first LSN.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::archive_setting::ArchiveSetting;

use super::engine::Inner;
use crate::backup::files::{self, Sink, ALIGN_BYTES, CHUNK_BYTES};
use crate::error::{Error, Result};
use crate::health;
use crate::io::{AlignedBuf, DirectIo, Permissions, Storage};
use crate::lsn::Lsn;
use crate::sched::{IoClass, ScheduledFile, Scheduler};
use crate::wal::format::{
    segment_file_name, Layout, FORMAT_BLOCK_BYTES, RECORD_HEADER_BYTES, RECORD_PAYLOAD_MAX,
    SEGMENT_HEADER_BYTES,
};
use crate::wal::{list_segments, read_segment_header, WalReader};

/// The suffix of a segment's copy before it is complete.
const TMP_SUFFIX: &str = ".tmp";

/// The class of the archiver's reads that check a segment (its records, a
/// copy found in the archive): admitted at once, as recovery's reads of the
/// log are (see the module docs).
const CHECK_CLASS: IoClass = IoClass::Read;

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

/// The archiver's state, in the engine.
pub(super) struct Archive {
    /// The archive's root (see [`crate::backup::archive_dir_of`]).
    dir: PathBuf,
    /// The modes of the directories it makes.
    permissions: Permissions,
    /// The first segment not yet archived.
    next: AtomicU64,
    /// One round at a time.
    round: Mutex<()>,
    segments: AtomicU64,
    bytes: AtomicU64,
    failures: AtomicU64,
    last_failure: Mutex<Option<String>>,
    /// `archive_timeout`.
    timeout: Option<Duration>,
    /// The end of the log the archive holds (see the module's invariants).
    archived_lsn: AtomicU64,
    /// The lag clock: `(lsn, when)` pairs, oldest first, each saying the
    /// durable records reached `lsn` by `when` (first seen then); only
    /// those past `archived_lsn` are kept, at most [`LAG_SAMPLES_MAX`].
    samples: Mutex<VecDeque<(Lsn, Instant)>>,
    /// How far the archiver's clock runs ahead of the real one (ms): moved
    /// only by [`Inner::archive_round_for_test`].
    clock_ahead_ms: AtomicU64,
    /// Under `round`: the segment and file offset of the last copy this
    /// open made (the archive's copy then holds exactly those bytes).
    last_copy: Mutex<Option<(u64, u64)>>,
    partial_copies: AtomicU64,
}

impl Archive {
    /// The archiver of the log in `wal_dir` (whose segment `current` is
    /// being written), as `setting` says (its directory exists): it starts
    /// at the oldest segment the log holds.
    ///
    /// # Errors
    /// I/O errors of creating or listing the directories.
    pub(super) fn open<S: Storage>(
        storage: &S,
        setting: &ArchiveSetting,
        (wal_dir, current, layout): (&Path, u64, Layout),
        permissions: Permissions,
        sched: &Arc<Scheduler>,
    ) -> Result<Archive> {
        let dir = setting.dir.as_path();
        // Made (and checked) by `archive_setting::claim`.
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
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The first segment not yet archived: checkpoints keep it and every
    /// later one.
    pub(super) fn next_segment(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// The end of the log the archive holds.
    pub(super) fn archived_lsn(&self) -> Lsn {
        Lsn::new(self.archived_lsn.load(Ordering::Acquire))
    }

    /// Notes that the archive holds the log up to `lsn`.
    fn archived_to(&self, lsn: Lsn, layout: Layout) {
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
    fn lag(&self, records_end: Lsn) -> Duration {
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
    pub(super) fn stats(&self, records_end: Lsn) -> ArchiveStats {
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
    fn failed(&self, n: u64, e: &Error) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        *health::lock_even_poisoned(&self.last_failure) =
            Some(format!("segment {}: {e}", segment_file_name(n)));
    }
}

impl<S: Storage> Inner<S> {
    /// The end of the last durable record a caller wrote: what the archive
    /// must hold to lack no commit. A seal (a flush of no record) moves the
    /// durable end past it and is not lag: the archive may lack it.
    pub(super) fn durable_records_end(&self) -> Lsn {
        let durable = self.wal().durable_lsn();
        self.wal().appended_lsn().min(durable)
    }

    /// Archives every complete segment not yet archived (a no-op without
    /// an archive); with `limit`, at most that many, and none if a round
    /// is under way (the archiver thread has the backlog). A failure is
    /// counted and returned; the segment stays for the next round.
    ///
    /// # Errors
    /// The failure of the first segment that could not be archived.
    pub(super) fn archive_complete_segments(&self, limit: Option<u64>) -> Result<u64> {
        let Some(archive) = &self.archive else {
            return Ok(0);
        };
        let _one = match limit {
            None => health::lock(&archive.round)?,
            Some(_) => match archive.round.try_lock() {
                Ok(one) => one,
                Err(_) => return Ok(0),
            },
        };
        self.archive_whole(archive, limit)
    }

    /// [`archive_complete_segments`](Self::archive_complete_segments), in
    /// a round under way.
    fn archive_whole(&self, archive: &Archive, limit: Option<u64>) -> Result<u64> {
        let layout = Layout {
            segment_bytes: self.wal().segment_bytes(),
        };
        // Segments wholly before the durable end's are complete.
        let complete_before = layout.segment_of(self.wal().durable_lsn());
        let mut done = 0;
        while archive.next_segment() < complete_before && limit.is_none_or(|l| done < l) {
            let n = archive.next_segment();
            let end = layout.segment_start(n + 1);
            match self.archive_segment(archive, layout, n, end) {
                Ok(bytes) => {
                    archive.bytes.fetch_add(bytes, Ordering::Relaxed);
                    archive.segments.fetch_add(1, Ordering::Relaxed);
                    *health::lock_even_poisoned(&archive.last_failure) = None;
                    let was = archive.next.fetch_add(1, Ordering::AcqRel);
                    assert_eq!(was, n, "one round at a time moves `next`");
                    archive.archived_to(end, layout);
                    done += 1;
                }
                Err(e) => {
                    archive.failed(n, &e);
                    return Err(e);
                }
            }
        }
        Ok(done)
    }

    /// With `archive_timeout`: archives the segment being written as it is
    /// (a partial copy, up to the durable end) once the durable log has
    /// held bytes the archive lacks for that long. Returns whether it made
    /// a copy. Complete segments go first ([`archive_complete_segments`]):
    /// nothing is copied partially while one is pending, or while another
    /// round runs.
    ///
    /// # Errors
    /// The copy's failure, counted as a failed round.
    ///
    /// [`archive_complete_segments`]: Self::archive_complete_segments
    pub(super) fn archive_partial_if_due(&self) -> Result<bool> {
        let Some(archive) = &self.archive else {
            return Ok(false);
        };
        // Every round samples the lag clock, with a timeout or without.
        let records_end = self.durable_records_end();
        let lag = archive.lag(records_end);
        let Some(timeout) = archive.timeout else {
            return Ok(false);
        };
        let Ok(_one) = archive.round.try_lock() else {
            return Ok(false);
        };
        let layout = Layout {
            segment_bytes: self.wal().segment_bytes(),
        };
        let durable = self.wal().durable_lsn();
        let n = archive.next_segment();
        let lacking = records_end > archive.archived_lsn();
        if !lacking || lag < timeout || layout.segment_of(durable) != n {
            return Ok(false);
        }
        self.archive_partial(archive, layout, durable)
            .map(|()| true)
    }

    /// A test's archiver round: moves the archiver's clock `ahead`, then
    /// archives complete segments and, when due, the segment being
    /// written. Returns whether it made a partial copy.
    ///
    /// # Errors
    /// As the archiver's round.
    pub(super) fn archive_round_for_test(&self, ahead: Duration) -> Result<bool> {
        if let Some(archive) = &self.archive {
            let ms = u64::try_from(ahead.as_millis()).unwrap_or(u64::MAX);
            archive.clock_ahead_ms.fetch_add(ms, Ordering::AcqRel);
        }
        self.archive_complete_segments(None)?;
        self.archive_partial_if_due()
    }

    /// Before a backup ending at `end` is sealed: where the archive holds a
    /// partial copy of `end`'s segment, a fuller one reaching `end` (and
    /// every complete segment before) replaces it, so a restore of the
    /// backup never meets an archived copy of its own last segment that is
    /// shorter than the backup's log. Without a partial copy nothing is
    /// copied here: whole segments go as ever.
    ///
    /// # Errors
    /// The failure of a copy, counted as a failed round.
    pub(super) fn archive_through(&self, end: Lsn) -> Result<()> {
        let Some(archive) = &self.archive else {
            return Ok(());
        };
        let _one = health::lock(&archive.round)?;
        let layout = Layout {
            segment_bytes: self.wal().segment_bytes(),
        };
        let last = layout.segment_of(end);
        if archive.archived_lsn() >= end || archive.next_segment() > last {
            return Ok(());
        }
        let line = self
            .line_dir(archive)
            .inspect_err(|e| archive.failed(last, e))?;
        // A copy of `end`'s segment not counted whole: a partial one.
        if !self.env.storage.exists(&line.join(segment_file_name(last))) {
            return Ok(());
        }
        self.archive_whole(archive, None)?;
        let (n, durable) = (archive.next_segment(), self.wal().durable_lsn());
        assert!(end <= durable, "a backup ends in the durable log");
        if archive.archived_lsn() >= end || layout.segment_of(durable) != n {
            // Reached: `end`'s segment is complete and archived.
            return Ok(());
        }
        self.archive_partial(archive, layout, durable)
    }

    /// Archives the segment being written up to `durable`, in a round under
    /// way; a failure is counted.
    fn archive_partial(&self, archive: &Archive, layout: Layout, durable: Lsn) -> Result<()> {
        let n = archive.next_segment();
        assert_eq!(
            layout.segment_of(durable),
            n,
            "only the segment being written"
        );
        assert!(
            durable > archive.archived_lsn(),
            "the copy holds log not archived"
        );
        assert!(
            durable > layout.segment_start(n),
            "the partial segment holds log"
        );
        match self.archive_segment(archive, layout, n, durable) {
            Ok(bytes) => {
                archive.bytes.fetch_add(bytes, Ordering::Relaxed);
                archive.partial_copies.fetch_add(1, Ordering::Relaxed);
                *health::lock_even_poisoned(&archive.last_failure) = None;
                archive.archived_to(durable, layout);
                assert_eq!(
                    archive.lag(self.durable_records_end().min(durable)),
                    Duration::ZERO
                );
                Ok(())
            }
            Err(e) => {
                archive.failed(n, &e);
                Err(e)
            }
        }
    }

    /// Checks and copies segment `n` into the archive up to `end` (the
    /// next segment's start for a whole copy, or the durable end inside
    /// `n` for a partial one, zeros after it); returns the bytes copied (0
    /// when an equal copy was there).
    fn archive_segment(&self, archive: &Archive, layout: Layout, n: u64, end: Lsn) -> Result<u64> {
        assert!(end > layout.segment_start(n) && end <= layout.segment_start(n + 1));
        let name = segment_file_name(n);
        let src_path = self.wal().dir().join(&name);
        self.check_segment_records(layout, n, end)?;
        let mut buf = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
        let dir = self.line_dir(archive)?;
        let dest = dir.join(&name);
        // The file offset of `end`: the whole file for a whole copy.
        let upto = SEGMENT_HEADER_BYTES + (end.get() - layout.segment_start(n).get());
        assert!(upto <= layout.segment_bytes);
        if self.env.storage.exists(&dest) {
            // The copy this open made last needs no reading: its bytes are
            // the log's up to where it ended.
            let known = *health::lock(&archive.last_copy)?;
            let found = match known {
                Some((m, was)) if m == n && was == upto => Archived::Same,
                Some((m, was)) if m == n && was < upto => Archived::Shorter,
                _ => self.compare_archived(&dest, &src_path, upto, &mut buf)?,
            };
            match found {
                Archived::Same => {
                    // A copy made before a crash, perhaps renamed but not
                    // yet synced: made durable before it counts.
                    self.open_for_archive(&dest)?
                        .admit(IoClass::Backup, 0)
                        .sync_all()?;
                    self.env.storage.sync_dir(&dir)?;
                    *health::lock(&archive.last_copy)? = Some((n, upto));
                    return Ok(0);
                }
                // An earlier partial copy: this one holds it and more.
                Archived::Shorter => {}
                Archived::Differs(offset) => return Err(another_copy(dest, offset, &name)),
            }
        }
        let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
        if self.env.storage.exists(&tmp) {
            // A copy interrupted by a crash.
            self.env.storage.remove_file(&tmp)?;
        }
        let written = self.copy_segment(&src_path, &tmp, (layout, upto), &mut buf)?;
        self.env.storage.rename(&tmp, &dest)?;
        self.env.storage.sync_dir(&dir)?;
        *health::lock(&archive.last_copy)? = Some((n, upto));
        Ok(written)
    }

    /// Copies the segment file `src` to the new file `tmp`: its first
    /// `upto` bytes, zeros after them, synced.
    fn copy_segment(
        &self,
        src_path: &Path,
        tmp: &Path,
        (layout, upto): (Layout, u64),
        buf: &mut AlignedBuf,
    ) -> Result<u64> {
        let src = self.open_for_archive(src_path)?;
        let total = src.len()?;
        if total != layout.segment_bytes {
            return Err(Error::Corruption {
                path: src_path.to_path_buf(),
                offset: 0,
                page: None,
                detail: format!(
                    "{total} bytes: not a whole segment of {}",
                    layout.segment_bytes
                ),
            });
        }
        assert!(upto <= total && total % u64::from(ALIGN_BYTES) == 0);
        let mut sink = Sink::create(&self.env.storage, tmp)?;
        let mut at = 0u64;
        while at < total {
            let k = (total - at).min(buf.len() as u64) as usize;
            let log = upto.saturating_sub(at).min(k as u64) as usize;
            if log > 0 {
                src.read_exact_at(IoClass::Backup, buf.io_mut(0..k)?, at)?;
            }
            buf.as_mut_slice()[log..k].fill(0);
            let _write = self.env.sched.admit(IoClass::Backup, k as u64);
            sink.append(buf, k)?;
            at += k as u64;
        }
        let (written, sink_crc) = sink.finish()?;
        assert_eq!(written, total, "the copy is a whole segment's length");
        debug_assert_eq!(
            files::crc_of(&self.env.storage, tmp, buf).ok(),
            Some((written, sink_crc)),
            "the copy reads back as written"
        );
        Ok(written)
    }

    /// The directory of the archive that takes the segments of the line of
    /// history the database is on, made (and its entry synced) if missing.
    fn line_dir(&self, archive: &Archive) -> Result<PathBuf> {
        // Read each time: a copy opened from a backup starts a history of
        // its own at its first checkpoint, and archives apart from then on.
        let history = self.ckpt.control.lock()?.current().history;
        let history = crate::backup::manifest::hex(&history);
        let dir = crate::backup::archive_dir_of(&archive.dir, Some(&history));
        crate::io::create_dir_synced(&self.env.storage, &dir, archive.permissions)?;
        if dir != archive.dir {
            // The line's directory may have been made just before a crash
            // that lost the root's sync: its entry is durable before a
            // segment in it lets the log recycle one.
            self.env.storage.sync_dir(&archive.dir)?;
        }
        Ok(dir)
    }

    /// Reads segment `n`'s records up to `to` (where segment `n + 1`
    /// begins, or the durable end inside `n`), each checked as recovery
    /// checks it.
    ///
    /// # Errors
    /// [`Error::Corruption`] naming the segment and offset of damage, or a
    /// log that ends before `to` (which is durable).
    fn check_segment_records(&self, layout: Layout, n: u64, to: Lsn) -> Result<()> {
        assert!(to > layout.segment_start(n) && to <= layout.segment_start(n + 1));
        let db_id = Some(self.db_id_for_archive()?);
        let reader_at = |lsn| {
            WalReader::new(
                self.env.storage.clone(),
                self.wal().dir(),
                layout.segment_bytes,
                db_id,
                lsn,
            )
            .scheduled(Arc::clone(&self.env.sched), CHECK_CLASS)
        };
        // A record may run on from the segment before: reading starts at
        // the first record that starts in this one (that record's bytes
        // here were checked with the segment it started in).
        let Some(from) = reader_at(layout.segment_start(n)).first_record_in_segment(n)? else {
            // Only a record longer than the segment's body can leave no
            // record starting in it; past that size a complete segment
            // without one (zeroed, overwritten) is damage.
            // So can a partial copy's end (`to`) inside the bytes where
            // one must start.
            let longest = RECORD_HEADER_BYTES + RECORD_PAYLOAD_MAX as u64;
            let held = to.get() - layout.segment_start(n).get();
            if layout.segment_bytes - SEGMENT_HEADER_BYTES <= longest
                || held <= RECORD_PAYLOAD_MAX as u64 + FORMAT_BLOCK_BYTES
            {
                return Ok(());
            }
            return Err(Error::Corruption {
                path: self.wal().dir().join(segment_file_name(n)),
                offset: SEGMENT_HEADER_BYTES,
                page: None,
                detail: format!(
                    "no valid record starts in the segment's first {} bytes, where one must: the \
                     segment is damaged",
                    RECORD_PAYLOAD_MAX as u64 + FORMAT_BLOCK_BYTES
                ),
            });
        };
        if from >= to {
            return Ok(());
        }
        let mut reader = reader_at(from);
        let mut records = 0u64;
        while let Some(rec) = reader.next_record()? {
            if rec.lsn >= to {
                return Ok(());
            }
            records += 1;
        }
        let end = reader.tail().map_or(reader.position(), |t| t.end);
        if end >= to {
            return Ok(());
        }
        Err(Error::Corruption {
            path: self.wal().dir().join(segment_file_name(n)),
            offset: layout.file_offset(end.max(from)),
            page: None,
            detail: format!(
                "the log ends at {end} after {records} records, before {to}, which is durable"
            ),
        })
    }

    /// The database's identity, as its log segments carry it.
    fn db_id_for_archive(&self) -> Result<crate::format::DbId> {
        Ok(self.ckpt.control.lock()?.current().db_id)
    }
}

/// How the archive's copy of a segment compares with the log's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Archived {
    /// The same: the segment is archived.
    Same,
    /// A partial copy of it: the same bytes up to a point, zeros after.
    Shorter,
    /// Another file, first differing at this offset.
    Differs(u64),
}

/// The failure of finding another segment `name` at `dest`.
fn another_copy(dest: PathBuf, offset: u64, name: &str) -> Error {
    Error::Corruption {
        path: dest,
        offset,
        page: None,
        detail: format!(
            "the archive holds another {name} than the log's (it differs at this offset, and \
             is not a partial copy of it); an archive is never overwritten: give each \
             database its own"
        ),
    }
}

impl<S: Storage> Inner<S> {
    /// Opens `path` (a segment of the log or of the archive) for the
    /// archiver's reads and syncs, which ask the database's scheduler.
    fn open_for_archive(&self, path: &Path) -> Result<ScheduledFile<S::File>> {
        Ok(ScheduledFile::new(
            self.env
                .storage
                .open(path, &files::read_options(DirectIo::Auto))?,
            Arc::clone(&self.env.sched),
        ))
    }

    /// Compares the archive's copy `theirs` with the log's segment `ours`
    /// read as a copy would be made of it now: its first `upto` bytes,
    /// zeros after. Their decoded headers must match; the rest of the
    /// header block is not compared (a recycling that rewrote it, torn by a
    /// crash before the rename, leaves padding that differs).
    fn compare_archived(
        &self,
        theirs: &Path,
        ours: &Path,
        upto: u64,
        buf: &mut AlignedBuf,
    ) -> Result<Archived> {
        let (a, b) = (self.open_for_archive(theirs)?, self.open_for_archive(ours)?);
        let header = |f: &ScheduledFile<S::File>| {
            read_segment_header(f, CHECK_CLASS)
                .ok()
                .map(|h| (h.segment_no, h.segment_bytes))
        };
        let len = b.len()?;
        if len % u64::from(ALIGN_BYTES) != 0 {
            return Err(files::not_whole_blocks(ours, len));
        }
        if a.len()? != len || header(&a) != header(&b) {
            return Ok(Archived::Differs(0));
        }
        assert!(upto <= len, "a copy is of the segment's bytes");
        let mut mine = AlignedBuf::new(buf.len(), ALIGN_BYTES)?;
        let mut shorter = false;
        let mut at = SEGMENT_HEADER_BYTES.min(len);
        while at < len {
            let k = (len - at).min(buf.len() as u64) as usize;
            a.read_exact_at(CHECK_CLASS, buf.io_mut(0..k)?, at)?;
            let log = upto.saturating_sub(at).min(k as u64) as usize;
            // Past the archive's copy's end only its zeros are checked.
            if log > 0 && !shorter {
                b.read_exact_at(CHECK_CLASS, mine.io_mut(0..k)?, at)?;
            }
            mine.as_mut_slice()[log..k].fill(0);
            let (t, o) = (&buf.as_slice()[..k], &mine.as_slice()[..k]);
            if shorter || t != o {
                // Past the first difference the archive's copy is zeros.
                let from = if shorter { 0 } else { first_difference(t, o) };
                if let Some(i) = t[from..].iter().position(|&x| x != 0) {
                    return Ok(Archived::Differs(at + (from + i) as u64));
                }
                shorter = true;
            }
            at += k as u64;
        }
        Ok(if shorter {
            Archived::Shorter
        } else {
            Archived::Same
        })
    }
}

/// The index of the first byte where `a` and `b` differ (they do).
fn first_difference(a: &[u8], b: &[u8]) -> usize {
    assert_eq!(a.len(), b.len());
    let i = a.iter().zip(b).position(|(x, y)| x != y);
    i.expect("the slices differ")
}

/// The first LSN checkpoints must keep for the archiver, if archiving.
pub(super) fn archive_keep<S: Storage>(inner: &Inner<S>) -> Option<Lsn> {
    let archive = inner.archive.as_ref()?;
    let layout = Layout {
        segment_bytes: inner.wal().segment_bytes(),
    };
    Some(layout.segment_start(archive.next_segment()))
}
