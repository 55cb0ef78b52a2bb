//! What the log must prove at open before its end is trusted: that it holds
//! every segment from the redo point on, each whole, that it reaches as far
//! as the last checkpoint says it did, and that nothing written after its
//! apparent end survives in a later segment. And, where it ends in a torn
//! flush, what that flush held.
//!
//! The end of a log read after a crash is where its records stop being
//! valid. That is the torn tail of the last flush ([`super::reader`]'s rule)
//! only if the log really stopped there; these checks refuse, with
//! [`Error::Corruption`] naming the file and the LSN range, every case where
//! something durable says it went on:
//! - a segment between the redo point's and the newest one present is
//!   missing (segments are made and recycled in order, so the numbers of a
//!   log's segments have no holes);
//! - a segment file is not the full segment size (segments are allocated
//!   whole under a temporary name before they get theirs, so a short one can
//!   only be damage);
//! - the log ends before the end of the last checkpoint's record, which
//!   `CONTROL` names (after a clean close that is the end of the log);
//! - a segment wholly past the reach of a torn flush holds a record valid at
//!   its position (a record's CRC covers its LSN, so a recycled segment's
//!   old records never count).
//!
//! Before it reads, open syncs every segment from the redo point's on, so
//! that replay builds on no log bytes a dead process wrote but never
//! synced (see `sync_segments`).
//!
//! What no check can see: after a crash, damage confined to the log's last
//! flushes with nothing durable after it (a newest segment replaced by an
//! older copy of itself) reads as a crash before those flushes. Pages the
//! data file holds from them fail their first read (the pool refuses a page
//! newer than the log); the rest is the documented limit of a log without a
//! second copy (docs/fault_coverage.md).

use std::path::Path;
use std::sync::Arc;

use super::format::{kind, segment_file_name, Layout, FLUSH_BYTES_MAX};
use super::reader::{list_segments, Tail, WalReader};
use crate::error::{Error, Result};
use crate::io::{Storage, StorageFile};
use crate::lsn::Lsn;
use crate::sched::{IoClass, ScheduledFile, Scheduler};

/// Records found past the end of the log, in the flush that was being
/// written when the log stopped: they were never acknowledged (their sync
/// did not complete) and recovery discards them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscardedTail {
    /// The end of the valid log, where the discarded bytes start.
    pub from: Lsn,
    /// Bytes from `from` to the end of the last record found.
    pub bytes: u64,
    /// Records with a header valid at their position (the first may have a
    /// damaged payload).
    pub records: u64,
}

/// What [`read_to_end`] found.
pub(super) struct LogEnd {
    /// The segment numbers present, ascending.
    pub(super) existing: Vec<u64>,
    /// The log's layout (an existing log keeps its segment size).
    pub(super) layout: Layout,
    /// Where and how the log ended.
    pub(super) tail: Tail,
    /// What the torn flush at the end held, if anything.
    pub(super) discarded: Option<DiscardedTail>,
}

/// Reads the log in `opts.dir` from `from` to its end, passing each caller
/// record to `replay`, with every check of the module docs; makes the
/// directory only when `opts.create_if_missing` allows. Sets
/// `opts.segment_bytes` to the size of an existing log's segments.
///
/// # Errors
/// [`Error::Corruption`] as the module docs say, and the reader's and
/// `replay`'s errors.
pub(super) fn read_to_end<S: Storage>(
    storage: &S,
    opts: &mut super::WalOptions,
    from: Lsn,
    replay: &mut impl FnMut(super::Record) -> Result<()>,
) -> Result<LogEnd> {
    if !storage.exists(&opts.dir) {
        if !opts.create_if_missing {
            return Err(missing_dir(&opts.dir, from));
        }
        crate::io::create_dir_synced(storage, &opts.dir, opts.permissions)?;
    }
    let existing = list_segments(storage, &opts.dir)?;
    // An existing log keeps the segment size it was made with; the option
    // applies to new logs.
    // Recovery's reads are reads a caller (open) waits for.
    let read = IoClass::Read;
    if let Some(reader) =
        WalReader::open_oldest_scheduled(storage.clone(), &opts.dir, Arc::clone(&opts.sched), read)?
    {
        opts.segment_bytes = reader.segment_bytes();
    }
    let layout = Layout {
        segment_bytes: opts.segment_bytes,
    };
    let need_first = !opts.create_if_missing;
    check_segments(storage, &opts.dir, layout, from, &existing, need_first)?;
    sync_segments(storage, &opts.sched, &opts.dir, layout, from, &existing)?;
    let mut reader = WalReader::new(
        storage.clone(),
        &opts.dir,
        opts.segment_bytes,
        Some(opts.db_id),
        from,
    )
    .scheduled(Arc::clone(&opts.sched), read);
    while let Some(rec) = reader.next_record()? {
        if rec.kind >= kind::USER_MIN {
            replay(rec)?;
        }
    }
    let tail = reader.tail().expect("reader ended with a tail");
    assert!(
        tail.end >= from,
        "the log ends at or past where it was read from"
    );
    check_end(
        &mut reader,
        &opts.dir,
        layout,
        tail.end,
        opts.must_reach,
        &existing,
    )?;
    let discarded = reader.discarded_tail()?;
    Ok(LogEnd {
        existing,
        layout,
        tail,
        discarded,
    })
}

/// Makes every segment from `from`'s on durable before a record of them
/// is replayed. A process that died without the machine leaves its last
/// flushes readable (in the page cache, or the device's volatile cache)
/// but perhaps never synced: replay must not write a data page, nor a
/// checkpoint cover it, from log bytes that a power failure during
/// recovery would take back, leaving the data file ahead of its log.
///
/// # Errors
/// I/O errors of opening or syncing a segment.
fn sync_segments<S: Storage>(
    storage: &S,
    sched: &Arc<Scheduler>,
    dir: &Path,
    layout: Layout,
    from: Lsn,
    present: &[u64],
) -> Result<()> {
    assert!(
        present.windows(2).all(|w| w[0] < w[1]),
        "segments are listed ascending"
    );
    let first = layout.segment_of(from);
    for &n in present.iter().filter(|&&n| n >= first) {
        let file = storage.open(&dir.join(segment_file_name(n)), &sync_options())?;
        // A log request like any other: the scheduler admits it.
        ScheduledFile::new(file, Arc::clone(sched))
            .admit(IoClass::Wal, 0)
            .sync_all()?;
    }
    Ok(())
}

/// How [`sync_segments`] opens a segment: for writing (a sync of a
/// read-only handle is refused on some systems), never creating it, through
/// the page cache (it only syncs).
fn sync_options() -> crate::io::FileOptions {
    crate::io::FileOptions {
        direct_io: crate::io::DirectIo::Off,
        sync: crate::io::SyncMethod::Fsync,
        ..crate::io::FileOptions::default()
    }
}

/// The error for a log directory that is not there when the database says
/// a log exists.
pub(crate) fn missing_dir(dir: &Path, from: Lsn) -> Error {
    Error::Corruption {
        path: dir.to_path_buf(),
        offset: 0,
        page: None,
        detail: format!(
            "the WAL directory is missing, but recovery needs the log from LSN {from}; \
             refusing to open rather than serve the data file's older pages"
        ),
    }
}

/// Checks the segment files of a log about to be read from `from`: no
/// holes from `from`'s segment to the newest present, each file the full
/// segment size. With `need_first`, `from`'s segment must exist.
fn check_segments<S: Storage>(
    storage: &S,
    dir: &Path,
    layout: Layout,
    from: Lsn,
    present: &[u64],
    need_first: bool,
) -> Result<()> {
    assert!(
        present.windows(2).all(|w| w[0] < w[1]),
        "segments are listed ascending"
    );
    let first = layout.segment_of(from);
    let newest = present.last().copied();
    let missing = |n: u64| Error::Corruption {
        path: dir.join(segment_file_name(n)),
        offset: 0,
        page: None,
        detail: format!(
            "WAL segment {n} is missing (it holds LSN {} to {}), but the log from LSN {from} \
             goes on {}; refusing to open without it",
            layout.segment_start(n),
            layout.segment_start(n + 1),
            match newest {
                Some(k) if k > n => format!("to segment {k}"),
                _ => "from it".to_string(),
            }
        ),
    };
    let wanted: &[u64] = match present.iter().position(|&n| n >= first) {
        Some(i) => &present[i..],
        None if need_first => return Err(missing(first)),
        None => &[],
    };
    if need_first && wanted.first() != Some(&first) {
        return Err(missing(first));
    }
    for (i, w) in wanted.windows(2).enumerate() {
        if w[1] != w[0] + 1 {
            assert!(w[1] > w[0] + 1 && i + 1 < wanted.len());
            return Err(missing(w[0] + 1));
        }
    }
    for &n in wanted {
        let path = dir.join(segment_file_name(n));
        let len = storage.open(&path, &super::reader::read_options())?.len()?;
        if len != layout.segment_bytes {
            return Err(Error::Corruption {
                path,
                offset: len.min(layout.segment_bytes),
                page: None,
                detail: format!(
                    "WAL segment {n} is {len} bytes, not the {} every segment is allocated \
                     with: it was cut short or extended, and the log it holds (LSN {} to {}) \
                     cannot be trusted",
                    layout.segment_bytes,
                    layout.segment_start(n),
                    layout.segment_start(n + 1),
                ),
            });
        }
    }
    Ok(())
}

/// Checks, once `reader` has found the log's end at `end`, that the log
/// reaches `must_reach` and that no segment of `present` beyond what the
/// torn flush could have touched holds a record.
fn check_end<S: Storage>(
    reader: &mut WalReader<S>,
    dir: &Path,
    layout: Layout,
    end: Lsn,
    must_reach: Lsn,
    present: &[u64],
) -> Result<()> {
    let at_end = || dir.join(segment_file_name(layout.segment_of(end)));
    if end < must_reach {
        return Err(Error::Corruption {
            path: at_end(),
            offset: layout.file_offset(end),
            page: None,
            detail: format!(
                "the log ends at LSN {end}, but it reached LSN {must_reach} (the last \
                 checkpoint's record ends there, or the data file's head says so): the log \
                 between is damaged, missing or an older copy; refusing to open without it"
            ),
        });
    }
    // A torn flush starts at most one flush before where the log stopped
    // and is at most one flush long.
    let reach = end.get() + 2 * FLUSH_BYTES_MAX;
    for &n in present {
        let start = layout.segment_start(n);
        if start.get() <= reach {
            continue;
        }
        if let Some(lsn) = reader.first_record_in_segment(n)? {
            assert!(lsn > end, "a record found past the end lies past it");
            return Err(Error::Corruption {
                path: dir.join(segment_file_name(n)),
                offset: layout.file_offset(lsn),
                page: None,
                detail: format!(
                    "the log stops being valid at LSN {end} (in {}), but segment {n} holds a \
                     record written at LSN {lsn}, later: the log between is damaged or \
                     missing; refusing to open without it",
                    at_end().display()
                ),
            });
        }
    }
    Ok(())
}
