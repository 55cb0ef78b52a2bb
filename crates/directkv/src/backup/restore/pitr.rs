//! Restoring to a chosen commit: a restored backup chain whose log is
//! carried forward from a log archive ([`Options::wal_archive`](crate::Options::wal_archive))
//! and cut just after the last commit the target takes in, as PostgreSQL's
//! `recovery_target_lsn` and `recovery_target_time` do.
//!
//! The steps, on the scratch directory a chain was built in:
//! 1. The backup's last segment (the one holding its end E) and every later
//!    one are taken from the archive in order, up to the first it lacks.
//!    The archive's copy of E's segment must hold the backup's bytes up to
//!    E: an archive of another database, or of another history of this
//!    one, is refused there. A partial copy (`archive_timeout`) that ends
//!    before E, the backup's bytes up to a point and zeros after, is of
//!    this history but shorter: the backup's own segment is kept instead.
//! 2. The log is read from the backup's start, every record checked. The
//!    cut is the end of the last commit the target takes in, or E when
//!    that is later (every commit before E is part of the backup's state).
//! 3. Everything after the cut is zeroed and later segments removed: the
//!    log ends cleanly there, so open replays exactly those commits.
//! 4. The restore's record (`backup::RESTORED_NAME`) is written again,
//!    listing the files the directory now holds.
//!
//! Invariants:
//! - The cut is a record's end, at or after E, and no commit record
//!   before it lies past the target.
//! - A target the archive cannot be shown to reach is refused, never
//!   restored short: for an LSN, the log must reach it; for a time, a
//!   commit after it must be in the log.

use std::path::{Path, PathBuf};

use crate::backup::dir;
use crate::backup::layout::{archive_dir_of, RESTORED_NAME, WAL_DIR_NAME};
use crate::backup::manifest::{Manifest, COMPLETE_NAME};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, DirectIo, FileOptions, Storage, StorageFile};
use crate::lsn::Lsn;
use crate::sched::crc_files::{self as files, Sink, ALIGN_BYTES, CHUNK_BYTES};
use crate::sched::{IoClass, ScheduledFile, Scheduler};
use crate::wal::format::{segment_file_name, Layout, SEGMENT_HEADER_BYTES};
use crate::wal::{list_segments, WalReader};

/// The point a restore with a log archive stops at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreTarget {
    /// The last commit whose record ends at or before this LSN (a commit's
    /// LSN, as [`WriteTxn::commit_lsn`](crate::WriteTxn::commit_lsn)
    /// returns it, restores exactly through that commit).
    Lsn(Lsn),
    /// The last commit whose time (µs since the epoch, as its commit
    /// record carries it) is at or before this.
    TimeUs(u64),
    /// Every commit in the archive.
    End,
}

/// Where a roll-forward stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RolledForward {
    /// Where the restored log ends: open replays through here.
    pub log_end: Lsn,
    /// The last commit taken in past the backup's end (its record's end),
    /// if any.
    pub last_commit_lsn: Option<Lsn>,
    /// That commit's time (µs since the epoch), where its record has one.
    pub last_commit_time_us: Option<u64>,
    /// Commits taken in past the backup's end.
    pub commits: u64,
    /// Segments taken from the archive.
    pub archived_segments: u64,
}

/// A commit found in the log.
#[derive(Debug, Clone, Copy)]
struct Commit {
    end: Lsn,
    time_us: Option<u64>,
}

/// Carries the restored backup in `dir` (recorded with `last`'s manifest)
/// forward from `archive` to `target`, then records it again.
///
/// # Errors
/// [`Error::InvalidArgument`] for a target before the backup's end, or one
/// the archive does not reach; [`Error::Corruption`] naming the archived
/// segment that is damaged or belongs to another log; I/O errors.
pub(super) fn roll_forward<S: Storage>(
    storage: &S,
    dir: &Path,
    last: &Manifest,
    archive: &Path,
    target: RestoreTarget,
) -> Result<RolledForward> {
    let layout = Layout {
        segment_bytes: last.wal_segment_bytes,
    };
    let (start, end) = (last.start(), last.end());
    if let RestoreTarget::Lsn(l) = target {
        if l < end {
            return Err(Error::InvalidArgument(format!(
                "target LSN {l} is before the backup's end {end}: restore an earlier backup"
            )));
        }
    }
    let wal = dir.join(WAL_DIR_NAME);
    // The segments of the line of history the backup was taken on.
    let line = archive_dir_of(archive, last.history_id.as_deref());
    if storage.exists(archive) && !storage.exists(&line) {
        return Err(Error::InvalidArgument(format!(
            "log archive {} holds no segment of history {}, the line the backup was taken on",
            archive.display(),
            last.history()
        )));
    }
    let archive = &line;
    let taken = take_archived(storage, &wal, archive, layout, end)?;
    let sources = |p: &Path| source_of(p, &wal, archive, &taken.segments);
    let (cut, found) =
        find_cut(storage, &wal, last, layout, target).map_err(|e| rename_path(e, &sources))?;
    if target == RestoreTarget::End {
        check_whole(&taken, archive, &found)?;
    }
    assert!(cut >= end && cut >= start, "the cut keeps the backup's log");
    cut_log(storage, &wal, layout, cut)?;
    reseal(storage, dir, last)?;
    Ok(RolledForward {
        log_end: cut,
        last_commit_lsn: found.last.map(|c| c.end),
        last_commit_time_us: found.last.and_then(|c| c.time_us),
        commits: found.commits,
        archived_segments: taken.segments.len() as u64,
    })
}

/// Copies the archive's segments from `end`'s on into `wal`, in order up
/// to the first it lacks.
fn take_archived<S: Storage>(
    storage: &S,
    wal: &Path,
    archive: &Path,
    layout: Layout,
    end: Lsn,
) -> Result<Taken> {
    if !storage.exists(archive) {
        return Err(Error::InvalidArgument(format!(
            "log archive {} does not exist",
            archive.display()
        )));
    }
    let first = layout.segment_of(end);
    let mut buf = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
    let shorter = same_history(storage, wal, archive, layout, end, &mut buf)?;
    let archived = list_segments(storage, archive)?;
    let mut taken = Vec::new();
    // The next segment the log needs from the archive.
    let mut expected = first;
    for n in archived.iter().copied().filter(|&n| n >= first) {
        let name = segment_file_name(n);
        if n == first && shorter {
            // The backup's segment holds more of this one's log.
            expected = first + 1;
            continue;
        }
        if n != expected {
            // The log stops at the hole; what lies after it is named.
            return Ok(Taken {
                segments: taken,
                hole: Some((expected, n)),
            });
        }
        let (from, to) = (archive.join(&name), wal.join(&name));
        if storage.exists(&to) {
            storage.remove_file(&to)?;
        }
        copy_whole(storage, &from, &to, layout, &mut buf)?;
        taken.push(n);
        expected = n + 1;
    }
    storage.sync_dir(wal)?;
    assert!(
        taken.windows(2).all(|w| w[1] == w[0] + 1),
        "segments are taken in order, without a hole"
    );
    Ok(Taken {
        segments: taken,
        hole: None,
    })
}

/// What [`take_archived`] took.
struct Taken {
    /// The segments taken, in order.
    segments: Vec<u64>,
    /// The first segment missing, and the next one the archive holds.
    hole: Option<(u64, u64)>,
}

/// Fails unless the archive's log is the backup's up to its end E: the
/// archive's copy of E's segment holds the backup's bytes before E (or,
/// when E is a segment's first byte, its copy of the segment before is the
/// backup's whole), or is a partial copy of them (the same bytes up to a
/// point, zeros after). Checked where both copies exist. Returns whether
/// the archive's copy of E's segment is such a shorter partial copy.
fn same_history<S: Storage>(
    storage: &S,
    wal: &Path,
    archive: &Path,
    layout: Layout,
    end: Lsn,
    buf: &mut AlignedBuf,
) -> Result<bool> {
    let at_start = layout.file_offset(end) == SEGMENT_HEADER_BYTES;
    let (n, len) = match (at_start, layout.segment_of(end)) {
        (true, s) if s > 0 => (s - 1, layout.segment_bytes),
        (_, s) => (s, layout.file_offset(end)),
    };
    let name = segment_file_name(n);
    let (ours, theirs) = (wal.join(&name), archive.join(&name));
    if storage.exists(&ours) && storage.exists(&theirs) {
        let shorter = same_prefix(storage, &ours, &theirs, len, buf)?;
        return Ok(shorter && n == layout.segment_of(end));
    }
    Ok(false)
}

/// Fails unless the first `len` bytes of `theirs` (the archive's segment)
/// are those of `ours` (the backup's), or those up to a point past the
/// segment's header and zeros after (a partial copy: returns true).
fn same_prefix<S: Storage>(
    storage: &S,
    ours: &Path,
    theirs: &Path,
    len: u64,
    buf: &mut AlignedBuf,
) -> Result<bool> {
    let opts = files::read_options(DirectIo::Auto);
    let (a, b) = (storage.open(ours, &opts)?, storage.open(theirs, &opts)?);
    let mut mine = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
    // Where the archive's copy first differs (it is zeros from there on).
    let mut short_at = None;
    let mut at = 0u64;
    while at < len {
        let k = (len - at).min(CHUNK_BYTES as u64) as usize;
        let whole = k.next_multiple_of(ALIGN_BYTES as usize);
        a.read_exact_at(mine.io_mut(0..whole)?, at)?;
        b.read_exact_at(buf.io_mut(0..whole)?, at)?;
        let (o, t) = (&mine.as_slice()[..k], &buf.as_slice()[..k]);
        let from = match short_at {
            Some(_) => 0,
            None => o.iter().zip(t).position(|(x, y)| x != y).unwrap_or(k),
        };
        if from < k {
            let first = *short_at.get_or_insert(at + from as u64);
            let nonzero = t[from..].iter().position(|&x| x != 0);
            if first < SEGMENT_HEADER_BYTES || nonzero.is_some() {
                let offset = nonzero.map_or(first, |i| at + (from + i) as u64);
                return Err(another_history(theirs, offset));
            }
        }
        at += k as u64;
    }
    assert!(short_at.is_none_or(|s| s >= SEGMENT_HEADER_BYTES && s < len));
    Ok(short_at.is_some())
}

/// The failure of an archived segment `theirs` that is not the backup's log
/// (nor a partial copy of it) before the backup's end.
fn another_history(theirs: &Path, offset: u64) -> Error {
    Error::Corruption {
        path: theirs.to_path_buf(),
        offset,
        page: None,
        detail: "the archived segment differs from the backup's log before the backup's end \
                 (and is not a partial copy of it): the archive is of another database or \
                 another history of this one"
            .into(),
    }
}

/// Copies the segment file `from` to the new file `to`.
fn copy_whole<S: Storage>(
    storage: &S,
    from: &Path,
    to: &Path,
    layout: Layout,
    buf: &mut AlignedBuf,
) -> Result<()> {
    let src = storage.open(from, &files::read_options(DirectIo::Auto))?;
    let len = files::whole_blocks_len(&src)?;
    if len != layout.segment_bytes {
        return Err(Error::Corruption {
            path: from.to_path_buf(),
            offset: len,
            page: None,
            detail: format!(
                "{len} bytes: not a whole segment of {}",
                layout.segment_bytes
            ),
        });
    }
    let mut sink = Sink::create(storage, to)?;
    let src = ScheduledFile::new(src, Scheduler::fifo());
    files::copy_into((&src, IoClass::Backup), len, &mut sink, buf, |_| ())?;
    sink.finish().map(drop)
}

/// Commits seen past the backup's end, and how the log read ended.
#[derive(Debug, Default)]
struct Found {
    last: Option<Commit>,
    commits: u64,
    /// The log read ended in invalid bytes (not zeros or a missing file).
    torn: bool,
}

/// For a restore to the archive's end: fails unless every archived
/// segment was taken and read to its end. Segments are archived complete,
/// so a hole or a log that ends in invalid bytes is damage, never an end.
fn check_whole(taken: &Taken, archive: &Path, found: &Found) -> Result<()> {
    if let Some((missing, next)) = taken.hole {
        return Err(Error::Corruption {
            path: archive.join(segment_file_name(missing)),
            offset: 0,
            page: None,
            detail: format!(
                "missing from the archive, which holds {} after it: the archive's end cannot be \
                 reached",
                segment_file_name(next)
            ),
        });
    }
    if found.torn {
        let last = taken.segments.last().copied().unwrap_or(0);
        return Err(Error::Corruption {
            path: archive.join(segment_file_name(last)),
            offset: 0,
            page: None,
            detail: "the archived log ends in invalid bytes, but every archived segment was \
                     complete: it is damaged"
                .into(),
        });
    }
    Ok(())
}

/// Reads the log in `wal` from the backup's start and returns where to
/// cut it for `target`.
fn find_cut<S: Storage>(
    storage: &S,
    wal: &Path,
    last: &Manifest,
    layout: Layout,
    target: RestoreTarget,
) -> Result<(Lsn, Found)> {
    let end = last.end();
    let mut reader = WalReader::new(
        storage.clone(),
        wal,
        layout.segment_bytes,
        last.db_id_bytes(),
        last.start(),
    );
    let mut found = Found::default();
    let mut passed = false;
    // The time of the backup's state: of its last commit.
    let mut state_time = last.start_commit_time_us.unwrap_or(0);
    while let Some(rec) = reader.next_record()? {
        if rec.kind != crate::db::COMMIT_RECORD {
            continue;
        }
        let c = Commit {
            end: rec.end(),
            time_us: crate::db::commit_record_time(&rec.payload),
        };
        let after = past(target, c);
        if c.end <= end {
            state_time = state_time.max(c.time_us.unwrap_or(0));
            if after {
                return Err(Error::InvalidArgument(format!(
                    "target {} is before the backup's end {end} (a commit ending at {} \
                     is past it): restore an earlier backup",
                    describe(target),
                    c.end
                )));
            }
            continue;
        }
        if after {
            passed = true;
            break;
        }
        found.last = Some(c);
        found.commits += 1;
    }
    let log_end = reader.tail().map_or(reader.position(), |t| t.end);
    found.torn = reader.tail().is_some_and(|t| t.torn);
    check_reached(target, passed, log_end, &found, layout, state_time)?;
    let cut = match (target, found.last) {
        (RestoreTarget::End, _) => log_end.max(end),
        (_, Some(c)) => c.end.max(end),
        (_, None) => end,
    };
    Ok((cut, found))
}

/// Whether commit `c` lies past `target`.
fn past(target: RestoreTarget, c: Commit) -> bool {
    match target {
        RestoreTarget::Lsn(l) => c.end > l,
        RestoreTarget::TimeUs(t) => c.time_us.is_some_and(|ct| ct > t),
        RestoreTarget::End => false,
    }
}

/// Fails unless the log, read to `log_end` (or `passed` the target), can
/// be shown to reach `target`, and a time target is not before the
/// backup's state (its last commit, at `state_time`).
fn check_reached(
    target: RestoreTarget,
    passed: bool,
    log_end: Lsn,
    found: &Found,
    layout: Layout,
    state_time: u64,
) -> Result<()> {
    if let RestoreTarget::TimeUs(t) = target {
        if t < state_time {
            return Err(Error::InvalidArgument(format!(
                "target time {t} µs is before the backup's state (its last commit is at \
                 {state_time} µs since the epoch): restore an earlier backup"
            )));
        }
    }
    assert!(
        found.last.is_none_or(|c| !past(target, c)),
        "no commit taken in lies past the target"
    );
    let reached = match target {
        RestoreTarget::Lsn(l) => passed || log_end >= l,
        RestoreTarget::TimeUs(_) => passed,
        RestoreTarget::End => true,
    };
    if !reached {
        return Err(Error::InvalidArgument(format!(
            "the archived log ends at {log_end} (in segment {}){}: it does not reach target \
             {}; a later segment is missing from the archive or damaged",
            segment_file_name(layout.segment_of(log_end)),
            found
                .last
                .and_then(|c| c.time_us)
                .map_or(String::new(), |t| format!(
                    ", its last commit at {t} µs since the epoch"
                )),
            describe(target),
        )));
    }
    Ok(())
}

/// The target in words.
fn describe(target: RestoreTarget) -> String {
    match target {
        RestoreTarget::Lsn(l) => format!("LSN {l}"),
        RestoreTarget::TimeUs(t) => format!("time {t} µs since the epoch"),
        RestoreTarget::End => "the archive's end".into(),
    }
}

/// Zeroes the log in `wal` from `cut` on and removes the segments after
/// its segment.
fn cut_log<S: Storage>(storage: &S, wal: &Path, layout: Layout, cut: Lsn) -> Result<()> {
    let seg = layout.segment_of(cut);
    for n in list_segments(storage, wal)? {
        if n > seg {
            storage.remove_file(&wal.join(segment_file_name(n)))?;
        }
    }
    let path = wal.join(segment_file_name(seg));
    if !storage.exists(&path) {
        // The log ends exactly where this segment would begin.
        assert_eq!(cut, layout.segment_start(seg), "only a segment's start");
        return storage.sync_dir(wal);
    }
    let file = storage.open(
        &path,
        &FileOptions {
            direct_io: DirectIo::Off,
            ..FileOptions::default()
        },
    )?;
    let from = layout.file_offset(cut);
    // The block holding the cut keeps its bytes before it.
    let block = from - from % u64::from(ALIGN_BYTES);
    let mut buf = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
    let head = (from - block) as usize;
    buf.as_mut_slice().fill(0);
    file.read_exact_at(buf.io_mut(0..ALIGN_BYTES as usize)?, block)?;
    buf.as_mut_slice()[head..ALIGN_BYTES as usize].fill(0);
    let mut at = block;
    while at < layout.segment_bytes {
        let k = (layout.segment_bytes - at).min(buf.len() as u64) as usize;
        file.write_all_at(buf.io(0..k)?, at)?;
        if at == block {
            buf.as_mut_slice()[..head].fill(0);
        }
        at += k as u64;
    }
    file.sync_all()?;
    storage.sync_dir(wal)
}

/// Replaces the record of the restore in `dir` with one listing the files
/// it holds now.
fn reseal<S: Storage>(storage: &S, dir: &Path, last: &Manifest) -> Result<()> {
    let record = dir.join(RESTORED_NAME);
    assert!(
        !storage.exists(&dir.join(COMPLETE_NAME)),
        "a restore's directory holds no backup marker"
    );
    if storage.exists(&record) {
        storage.remove_file(&record)?;
    }
    storage.sync_dir(dir)?;
    let mut buf = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
    let m = dir::combined_manifest(storage, dir, last, &mut buf)?;
    dir::write_restored(storage, dir, &m)
}

/// Where the segment at `path` in the scratch log came from: its archive
/// path when it was taken from the archive.
fn source_of(path: &Path, wal: &Path, archive: &Path, taken: &[u64]) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let n = crate::wal::format::parse_segment_file_name(name)?;
    (path.parent() == Some(wal) && taken.contains(&n)).then(|| archive.join(name))
}

/// An error naming a scratch segment, made to name its archived source.
fn rename_path(e: Error, source: &impl Fn(&Path) -> Option<PathBuf>) -> Error {
    match e {
        e @ Error::Corruption { .. } => e.with_path(|path| source(&path).unwrap_or(path)),
        e => e,
    }
}
