//! Log archiving ([`Options::wal_archive`](super::Options::wal_archive)):
//! every log segment is copied into an archive directory once it is
//! complete, and no segment is recycled before its copy is there. With a
//! backup, the archive restores the database to any commit after the
//! backup's end (`restore_backup_chain_to`, docs/backup.md).
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
//!    archived (a copy made before a crash); with other bytes it is a
//!    failure: the archive is never overwritten.
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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
}

impl Archive {
    /// The archiver of the log in `wal_dir`, into `dir` (created if
    /// missing): it starts at the oldest segment the log holds.
    ///
    /// # Errors
    /// I/O errors of creating or listing the directories.
    pub(super) fn open<S: Storage>(
        storage: &S,
        dir: &Path,
        wal_dir: &Path,
        permissions: Permissions,
        current: u64,
        sched: &Arc<Scheduler>,
    ) -> Result<Archive> {
        crate::io::create_dir_synced(storage, dir, permissions)?;
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

    /// Its counters.
    pub(super) fn stats(&self) -> ArchiveStats {
        ArchiveStats {
            enabled: true,
            segments: self.segments.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            last_failure: health::lock_even_poisoned(&self.last_failure).clone(),
            next_segment: self.next_segment(),
        }
    }
}

impl<S: Storage> Inner<S> {
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
        let layout = Layout {
            segment_bytes: self.wal().segment_bytes(),
        };
        // Segments wholly before the durable end's are complete.
        let complete_before = layout.segment_of(self.wal().durable_lsn());
        let mut done = 0;
        while archive.next_segment() < complete_before && limit.is_none_or(|l| done < l) {
            let n = archive.next_segment();
            match self.archive_segment(archive, layout, n) {
                Ok(bytes) => {
                    archive.bytes.fetch_add(bytes, Ordering::Relaxed);
                    archive.segments.fetch_add(1, Ordering::Relaxed);
                    *health::lock_even_poisoned(&archive.last_failure) = None;
                    let was = archive.next.fetch_add(1, Ordering::AcqRel);
                    assert_eq!(was, n, "one round at a time moves `next`");
                    done += 1;
                }
                Err(e) => {
                    archive.failures.fetch_add(1, Ordering::Relaxed);
                    *health::lock_even_poisoned(&archive.last_failure) =
                        Some(format!("segment {}: {e}", segment_file_name(n)));
                    return Err(e);
                }
            }
        }
        Ok(done)
    }

    /// Checks and copies segment `n` into the archive; returns the bytes
    /// copied (0 when an identical copy was there).
    fn archive_segment(&self, archive: &Archive, layout: Layout, n: u64) -> Result<u64> {
        let name = segment_file_name(n);
        let src_path = self.wal().dir().join(&name);
        self.check_segment_records(layout, n)?;
        let mut buf = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
        let dir = self.line_dir(archive)?;
        let dest = dir.join(&name);
        if self.storage.exists(&dest) {
            let theirs = self.segment_identity(&dest, &mut buf)?;
            let ours = self.segment_identity(&src_path, &mut buf)?;
            if theirs == ours {
                // A copy made before a crash, perhaps renamed but not yet
                // synced: made durable before it counts.
                self.open_for_archive(&dest)?
                    .admit(IoClass::Backup, 0)
                    .sync_all()?;
                self.storage.sync_dir(&dir)?;
                return Ok(0);
            }
            return Err(Error::Corruption {
                path: dest,
                offset: 0,
                page: None,
                detail: format!(
                    "the archive holds another {name} than the log's (header, length and \
                     CRC32C {theirs:?}, the log's {ours:?}); an archive is never overwritten: \
                     give each database its own"
                ),
            });
        }
        let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
        if self.storage.exists(&tmp) {
            // A copy interrupted by a crash.
            self.storage.remove_file(&tmp)?;
        }
        let src = self.open_for_archive(&src_path)?;
        let mut sink = Sink::create(&self.storage, &tmp)?;
        let total = src.len()?;
        if total % u64::from(ALIGN_BYTES) != 0 {
            return Err(files::not_whole_blocks(&src_path, total));
        }
        files::copy_into((&src, IoClass::Backup), total, &mut sink, &mut buf, |n| {
            self.sched.admit(IoClass::Backup, n)
        })?;
        let (written, sink_crc) = sink.finish()?;
        if written != total || total != layout.segment_bytes {
            return Err(Error::Corruption {
                path: src_path,
                offset: 0,
                page: None,
                detail: format!(
                    "{total} bytes, {written} archived: not a whole segment of {} bytes",
                    layout.segment_bytes
                ),
            });
        }
        debug_assert_eq!(
            files::crc_of(&self.storage, &tmp, &mut buf).ok(),
            Some((written, sink_crc)),
            "the copy reads back as written"
        );
        self.storage.rename(&tmp, &dest)?;
        self.storage.sync_dir(&dir)?;
        Ok(written)
    }

    /// The directory of the archive that takes the segments of the line of
    /// history the database is on, made (and its entry synced) if missing.
    fn line_dir(&self, archive: &Archive) -> Result<PathBuf> {
        // Read each time: a copy opened from a backup starts a history of
        // its own at its first checkpoint, and archives apart from then on.
        let history = health::lock(&self.control)?.current().history;
        let history = crate::backup::manifest::hex(&history);
        let dir = crate::backup::archive_dir_of(&archive.dir, Some(&history));
        crate::io::create_dir_synced(&self.storage, &dir, archive.permissions)?;
        if dir != archive.dir {
            // The line's directory may have been made just before a crash
            // that lost the root's sync: its entry is durable before a
            // segment in it lets the log recycle one.
            self.storage.sync_dir(&archive.dir)?;
        }
        Ok(dir)
    }

    /// Reads segment `n`'s records up to where segment `n + 1` begins,
    /// each checked as recovery checks it.
    ///
    /// # Errors
    /// [`Error::Corruption`] naming the segment and offset of damage, or a
    /// log that ends inside segment `n` (which is complete).
    fn check_segment_records(&self, layout: Layout, n: u64) -> Result<()> {
        let to = layout.segment_start(n + 1);
        let db_id = Some(self.db_id_for_archive()?);
        let reader_at = |lsn| {
            WalReader::new(
                self.storage.clone(),
                self.wal().dir(),
                layout.segment_bytes,
                db_id,
                lsn,
            )
            .scheduled(Arc::clone(&self.sched), CHECK_CLASS)
        };
        // A record may run on from the segment before: reading starts at
        // the first record that starts in this one (that record's bytes
        // here were checked with the segment it started in).
        let Some(from) = reader_at(layout.segment_start(n)).first_record_in_segment(n)? else {
            // Only a record longer than the segment's body can leave no
            // record starting in it; past that size a complete segment
            // without one (zeroed, overwritten) is damage.
            let longest = RECORD_HEADER_BYTES + RECORD_PAYLOAD_MAX as u64;
            if layout.segment_bytes - SEGMENT_HEADER_BYTES <= longest {
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
                "the log ends at {end} after {records} records, inside a segment the durable \
                 log has passed"
            ),
        })
    }

    /// The database's identity, as its log segments carry it.
    fn db_id_for_archive(&self) -> Result<crate::format::DbId> {
        Ok(health::lock(&self.control)?.current().db_id)
    }
}

/// A segment's (number, size) from its header if it decodes, then the
/// length and CRC32C of the bytes after the header block.
type SegmentIdentity = (Option<(u64, u64)>, u64, u32);

impl<S: Storage> Inner<S> {
    /// Opens `path` (a segment of the log or of the archive) for the
    /// archiver's reads and syncs, which ask the database's scheduler.
    fn open_for_archive(&self, path: &Path) -> Result<ScheduledFile<S::File>> {
        Ok(ScheduledFile::new(
            self.storage
                .open(path, &files::read_options(DirectIo::Auto))?,
            Arc::clone(&self.sched),
        ))
    }

    /// What makes two copies of a segment the same: its decoded header, and
    /// the length and CRC32C of everything after the header block. The rest
    /// of the header block is not compared: a recycling that rewrote it
    /// (torn by a crash before the rename) leaves padding that differs.
    fn segment_identity(&self, path: &Path, buf: &mut AlignedBuf) -> Result<SegmentIdentity> {
        let file = self.open_for_archive(path)?;
        let header = read_segment_header(&file, CHECK_CLASS)
            .ok()
            .map(|h| (h.segment_no, h.segment_bytes));
        let len = file.len()?;
        if len % u64::from(ALIGN_BYTES) != 0 {
            return Err(files::not_whole_blocks(path, len));
        }
        let mut crc = 0u32;
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(buf.len() as u64) as usize;
            file.read_exact_at(CHECK_CLASS, buf.io_mut(0..n)?, at)?;
            let skip = SEGMENT_HEADER_BYTES.saturating_sub(at).min(n as u64) as usize;
            crc = crc32c::crc32c_append(crc, &buf.as_slice()[skip..n]);
            at += n as u64;
        }
        Ok((header, len, crc))
    }
}

/// The first LSN checkpoints must keep for the archiver, if archiving.
pub(super) fn archive_keep<S: Storage>(inner: &Inner<S>) -> Option<Lsn> {
    let archive = inner.archive.as_ref()?;
    let layout = Layout {
        segment_bytes: inner.wal().segment_bytes(),
    };
    Some(layout.segment_start(archive.next_segment()))
}
