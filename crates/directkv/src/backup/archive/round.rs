//! A round of log archiving: which segments are copied, whole or partial,
//! and when (see the module docs, [`super`]). The database calls these
//! entry points with itself as the [`Engine`]; each is a no-op when it
//! does not archive.
//!
//! Invariants:
//! - A round holds the archive's `round` lock while it copies: `next` and
//!   the last copy move only under it.
//! - Only the segment after the last complete one archived is ever copied
//!   partially, and only once every complete segment before it is
//!   archived.

use std::time::Duration;

use super::copy::Archiver;
use crate::backup::engine::Engine;
use crate::error::Result;
use crate::health;
use crate::io::Storage;
use crate::lsn::Lsn;
use crate::wal::format::segment_file_name;
use crate::wal::Wal;

/// The end of the last durable record a caller wrote to `wal`: what the
/// archive must hold to lack no commit. A seal (a flush of no record)
/// moves the durable end past it and is not lag: the archive may lack it.
pub(crate) fn durable_records_end<S: Storage>(wal: &Wal<S>) -> Lsn {
    let durable = wal.durable_lsn();
    let end = wal.appended_lsn().min(durable);
    assert!(end <= durable, "records end in the durable log");
    end
}

/// Archives every complete segment not yet archived (a no-op without an
/// archive); with `limit`, at most that many, and none if a round is under
/// way (the archiver thread has the backlog). A failure is counted and
/// returned; the segment stays for the next round. Returns how many it
/// archived.
///
/// # Errors
/// The failure of the first segment that could not be archived.
pub(crate) fn complete_segments<E: Engine>(e: &E, limit: Option<u64>) -> Result<u64> {
    let Some(a) = Archiver::of(e) else {
        return Ok(0);
    };
    let _one = match limit {
        None => health::lock(&a.archive.round)?,
        Some(_) => match a.archive.round.try_lock() {
            Ok(one) => one,
            Err(_) => return Ok(0),
        },
    };
    let done = a.archive_whole(limit)?;
    assert!(
        limit.is_none_or(|l| done <= l),
        "a round keeps to its limit"
    );
    Ok(done)
}

/// With `archive_timeout`: archives the segment being written as it is (a
/// partial copy, up to the durable end) once the durable log has held
/// bytes the archive lacks for that long. Returns whether it made a copy.
/// Complete segments go first ([`complete_segments`]): nothing is copied
/// partially while one is pending, or while another round runs.
///
/// # Errors
/// The copy's failure, counted as a failed round.
pub(crate) fn partial_if_due<E: Engine>(e: &E) -> Result<bool> {
    let Some(a) = Archiver::of(e) else {
        return Ok(false);
    };
    // Every round samples the lag clock, with a timeout or without.
    let records_end = durable_records_end(e.wal());
    let lag = a.archive.lag(records_end);
    let Some(timeout) = a.archive.timeout else {
        return Ok(false);
    };
    let Ok(_one) = a.archive.round.try_lock() else {
        return Ok(false);
    };
    let durable = e.wal().durable_lsn();
    let n = a.archive.next_segment();
    let lacking = records_end > a.archive.archived_lsn();
    if !lacking || lag < timeout || a.layout.segment_of(durable) != n {
        return Ok(false);
    }
    a.archive_partial(durable).map(|()| true)
}

/// A test's archiver round: moves the archiver's clock `ahead`, then
/// archives complete segments and, when due, the segment being written.
/// Returns whether it made a partial copy.
///
/// # Errors
/// As the archiver's round.
pub(crate) fn round_for_test<E: Engine>(e: &E, ahead: Duration) -> Result<bool> {
    if let Some(archive) = e.archive() {
        archive.move_clock(ahead);
    }
    complete_segments(e, None)?;
    partial_if_due(e)
}

/// Before a backup ending at `end` is sealed: where the archive holds a
/// partial copy of `end`'s segment, a fuller one reaching `end` (and every
/// complete segment before) replaces it, so a restore of the backup never
/// meets an archived copy of its own last segment that is shorter than the
/// backup's log. Without a partial copy nothing is copied here: whole
/// segments go as ever.
///
/// # Errors
/// The failure of a copy, counted as a failed round.
pub(crate) fn through<E: Engine>(e: &E, end: Lsn) -> Result<()> {
    let Some(a) = Archiver::of(e) else {
        return Ok(());
    };
    let archive = a.archive;
    let _one = health::lock(&archive.round)?;
    let last = a.layout.segment_of(end);
    if archive.archived_lsn() >= end || archive.next_segment() > last {
        return Ok(());
    }
    let line = a.line_dir().inspect_err(|err| archive.failed(last, err))?;
    // A copy of `end`'s segment not counted whole: a partial one.
    if !e.storage().exists(&line.join(segment_file_name(last))) {
        return Ok(());
    }
    a.archive_whole(None)?;
    let (n, durable) = (archive.next_segment(), e.wal().durable_lsn());
    assert!(end <= durable, "a backup ends in the durable log");
    if archive.archived_lsn() >= end || a.layout.segment_of(durable) != n {
        // Reached: `end`'s segment is complete and archived.
        return Ok(());
    }
    a.archive_partial(durable)
}

/// The first LSN checkpoints must keep for the archiver, if archiving.
pub(crate) fn keep<E: Engine>(e: &E) -> Option<Lsn> {
    let a = Archiver::of(e)?;
    let keep = a.layout.segment_start(a.archive.next_segment());
    assert!(
        keep <= a.archive.archived_lsn(),
        "the archive holds all before `next`"
    );
    Some(keep)
}

impl<E: Engine> Archiver<'_, E> {
    /// [`complete_segments`], in a round under way.
    fn archive_whole(&self, limit: Option<u64>) -> Result<u64> {
        // Segments wholly before the durable end's are complete.
        let complete_before = self.layout.segment_of(self.e.wal().durable_lsn());
        let mut done = 0;
        while self.archive.next_segment() < complete_before && limit.is_none_or(|l| done < l) {
            let n = self.archive.next_segment();
            let end = self.layout.segment_start(n + 1);
            match self.archive_segment(n, end) {
                Ok(bytes) => {
                    self.archive.archived_whole(n, bytes, end, self.layout);
                    done += 1;
                }
                Err(e) => {
                    self.archive.failed(n, &e);
                    return Err(e);
                }
            }
        }
        Ok(done)
    }

    /// Archives the segment being written up to `durable`, in a round
    /// under way; a failure is counted.
    fn archive_partial(&self, durable: Lsn) -> Result<()> {
        let (archive, layout) = (self.archive, self.layout);
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
        match self.archive_segment(n, durable) {
            Ok(bytes) => {
                archive.archived_partial(bytes, durable, layout);
                let records_end = durable_records_end(self.e.wal()).min(durable);
                assert_eq!(archive.lag(records_end), Duration::ZERO);
                Ok(())
            }
            Err(e) => {
                archive.failed(n, &e);
                Err(e)
            }
        }
    }
}
