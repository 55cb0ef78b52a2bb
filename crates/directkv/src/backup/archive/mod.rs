//! Log archiving ([`Options::wal_archive`](crate::Options::wal_archive),
//! recorded with the database: [`setting`]): every log
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
//!    `NAME`, and the directory synced. The rename refuses a name taken
//!    while the copy ran (`RENAME_NOREPLACE`): that file is compared by
//!    the next round, as in step 4, never replaced unread.
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
//! The archiver reaches the open database only through
//! [`Engine`](crate::backup::engine::Engine): its log, storage, scheduler,
//! `CONTROL` and the archiver's state it holds ([`Archive`]). The database
//! calls [`complete_segments`] from its checkpoints and its archiver
//! thread, [`partial_if_due`] from that thread, and [`keep`] before it
//! recycles a segment.
//!
//! Files, lowest first (each imports only those above it in this list):
//! [`setting`] (the recorded setting), [`state`] (the archiver's state and
//! counters), [`copy`] (checking and copying one segment), [`round`] (a
//! round of archiving: which segments, whole or partial).
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

pub(crate) mod copy;
pub(crate) mod round;
pub(crate) mod setting;
pub(crate) mod state;

pub(crate) use round::{complete_segments, durable_records_end, keep, partial_if_due};
pub(crate) use round::{round_for_test, through};
pub use setting::ArchiveChange;
pub(crate) use state::Archive;
pub use state::ArchiveStats;
