//! The segment files of a log: creating them ahead of need (zero-filled, so a
//! sync never updates allocation metadata), opening them for the writer, and
//! recycling the ones a checkpoint no longer needs into future segments.
//!
//! Invariants:
//! - A segment file exists under its final name only after it is fully
//!   allocated, zero-filled, has its header, and is synced; the rename that gives
//!   it that name is followed by a directory sync. A crash mid-preparation leaves
//!   a `*.tmp` file, which the next preparation removes.
//! - A recycled segment gets its new header (write + sync) and then its new name
//!   (rename + directory sync) before the writer can use it. Its old records
//!   stay but are valid only at their old LSNs, so they read as garbage at the
//!   new ones. (The other order failed the simulated crash campaign: a crash
//!   between the steps left a file whose name and header disagreed.)
//! - At most one thread prepares or recycles at a time (`busy`), so the writer
//!   and the background preparer never build the same segment twice.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::format::{segment_file_name, DbId, Layout, SegmentHeader, SEGMENT_HEADER_BYTES};
use super::reader::{list_segments, read_segment_header};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, FileOptions, Fill, Storage, SyncVariant};
use crate::sched::{IoClass, ScheduledFile, Scheduler};

/// Counters of segment work.
#[derive(Debug, Default)]
pub(crate) struct SegmentCounters {
    pub created: AtomicU64,
    pub recycled: AtomicU64,
    pub removed: AtomicU64,
    pub writer_waits: AtomicU64,
}

struct Inner<S: Storage> {
    open: BTreeMap<u64, Arc<ScheduledFile<S::File>>>,
    /// The segment the writer is in (or will start in).
    current: u64,
    /// The segment the last [`Segments::writer_file`] call made sure of (the
    /// one after its segment). Segments after the current one are only ever
    /// added, so it stays there; the next call for the same segment need not
    /// look again.
    next_ready: Option<u64>,
    /// A preparation or recycling is under way.
    busy: bool,
    shutdown: bool,
}

/// The segment files of one log.
pub(crate) struct Segments<S: Storage> {
    storage: S,
    dir: PathBuf,
    layout: Layout,
    db_id: DbId,
    sync: SyncVariant,
    spare: usize,
    recycle_max: usize,
    /// The mode new segment files get.
    permissions: crate::io::Permissions,
    inner: Mutex<Inner<S>>,
    changed: Condvar,
    pub counters: SegmentCounters,
    /// The I/O scheduler every segment file's requests ask. They are all
    /// log I/O (`Wal`: admitted at once, counted), a zero fill included,
    /// since a writer may be waiting for the segment.
    sched: Arc<Scheduler>,
}

/// See [`crate::health`]: a poisoned lock here means the database has
/// failed already.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    crate::health::lock_even_poisoned(m)
}

impl<S: Storage> Segments<S> {
    pub fn new(storage: S, opts: &super::WalOptions, current: u64) -> Self {
        let segments = Segments {
            storage,
            dir: opts.dir.clone(),
            layout: Layout {
                segment_bytes: opts.segment_bytes,
            },
            db_id: opts.db_id,
            sync: opts.sync,
            sched: Arc::clone(&opts.sched),
            spare: opts.spare_segments,
            recycle_max: opts.recycle_segments_max.max(opts.spare_segments),
            permissions: opts.permissions,
            inner: Mutex::new(Inner {
                open: BTreeMap::new(),
                current,
                next_ready: None,
                busy: false,
                shutdown: false,
            }),
            changed: Condvar::new(),
            counters: SegmentCounters::default(),
        };
        assert!(
            segments.recycle_max >= segments.spare,
            "recycling keeps the spares"
        );
        assert!(segments.layout.payload_bytes() > 0);
        segments
    }

    /// Whether segment `n`'s file exists.
    pub fn exists(&self, n: u64) -> bool {
        self.storage.exists(&self.path(n))
    }

    fn path(&self, n: u64) -> PathBuf {
        self.dir.join(segment_file_name(n))
    }

    fn writer_options(&self) -> FileOptions {
        FileOptions {
            direct_io: if self.sync.direct {
                crate::io::DirectIo::On
            } else {
                crate::io::DirectIo::Off
            },
            sync: self.sync.method,
            ..FileOptions::default()
        }
    }

    /// The writer's handle on segment `n`, preparing it now if it is not ready
    /// (a counted wait: the background preparer should have made it already).
    ///
    /// Segment `n + 1` exists too before the handle is given out, so a log
    /// with records in a segment always has the next one: a deleted segment
    /// that held the log's end leaves a hole open sees.
    pub fn writer_file(&self, n: u64) -> Result<Arc<ScheduledFile<S::File>>> {
        let file = self.writer_file_only(n)?;
        if lock(&self.inner).next_ready != Some(n + 1) {
            self.ensure_prepared(n + 1)?;
            assert!(self.exists(n + 1), "the next segment is ready");
            lock(&self.inner).next_ready = Some(n + 1);
        }
        Ok(file)
    }

    /// A handle on segment `n` for writing over stale bytes at open, if the
    /// file exists; neither makes a segment nor moves the writer's.
    pub fn existing_file(&self, n: u64) -> Result<Option<ScheduledFile<S::File>>> {
        if !self.exists(n) {
            return Ok(None);
        }
        Ok(Some(self.open_file(&self.path(n), &self.writer_options())?))
    }

    /// Opens `path` for requests that ask the log's scheduler.
    fn open_file(&self, path: &Path, opts: &FileOptions) -> Result<ScheduledFile<S::File>> {
        Ok(ScheduledFile::new(
            self.storage.open(path, opts)?,
            Arc::clone(&self.sched),
        ))
    }

    /// Makes segment `n` if it does not exist (waiting for a preparation
    /// under way first).
    fn ensure_prepared(&self, n: u64) -> Result<()> {
        let mut inner = lock(&self.inner);
        loop {
            if inner.busy {
                inner = self.changed.wait(inner).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            if self.storage.exists(&self.path(n)) {
                return Ok(());
            }
            self.counters.writer_waits.fetch_add(1, Ordering::Relaxed);
            inner.busy = true;
            drop(inner);
            let made = self.prepare(n);
            inner = lock(&self.inner);
            assert!(inner.busy, "only the holder of `busy` clears it");
            inner.busy = false;
            self.changed.notify_all();
            return made;
        }
    }

    fn writer_file_only(&self, n: u64) -> Result<Arc<ScheduledFile<S::File>>> {
        let mut inner = lock(&self.inner);
        loop {
            if let Some(f) = inner.open.get(&n) {
                return Ok(Arc::clone(f));
            }
            if inner.busy {
                inner = self.changed.wait(inner).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            if !self.storage.exists(&self.path(n)) {
                drop(inner);
                self.ensure_prepared(n)?;
                inner = lock(&self.inner);
                continue;
            }
            let file = self.open_file(&self.path(n), &self.writer_options())?;
            let header = read_segment_header(&file, IoClass::Wal)?;
            if header.segment_no != n || header.db_id != self.db_id {
                return Err(Error::Corruption {
                    path: self.path(n),
                    offset: 0,
                    page: None,
                    detail: "segment header does not belong here".into(),
                });
            }
            let file = Arc::new(file);
            inner.open.insert(n, Arc::clone(&file));
            if n > inner.current {
                inner.current = n;
            }
            // Keep the current and the previous segment open; older ones are done.
            let keep_from = inner.current.saturating_sub(1);
            inner.open.retain(|&k, _| k >= keep_from);
            // Open are at most the current segment and the one before it.
            assert!(inner.open.len() <= 2);
            assert!(inner.open.keys().all(|&k| k <= inner.current));
            self.changed.notify_all();
            return Ok(file);
        }
    }

    /// Creates segment `n`: a temp file, allocated and zero-filled, its header
    /// written and synced, renamed into place, the directory synced.
    fn prepare(&self, n: u64) -> Result<()> {
        let tmp = self.dir.join(format!("{}.tmp", segment_file_name(n)));
        if self.storage.exists(&tmp) {
            self.storage.remove_file(&tmp)?;
        }
        // The zero fill goes around the page cache whatever the log's own sync
        // variant: 64 MiB of dirty pages written back later would compete with
        // the commits' syncs on the device (measured: 30 ms commit stalls).
        // Exclusive: the leftover was removed above, so anything at the name
        // now (a symlink planted meanwhile) is refused, not written through.
        let opts = FileOptions {
            create: true,
            truncate: false,
            direct_io: crate::io::DirectIo::Auto,
            sync: crate::io::SyncMethod::Fsync,
            read_only: false,
            exclusive: true,
            permissions: self.permissions,
        };
        let made = (|| {
            let file = self.open_file(&tmp, &opts)?;
            file.admit(IoClass::Wal, self.layout.segment_bytes)
                .allocate(self.layout.segment_bytes, Fill::Zero)?;
            self.write_header(&file, n)?;
            self.storage.rename(&tmp, &self.path(n))?;
            self.storage.sync_dir(&self.dir)
        })();
        if made.is_err() {
            let _ = self.storage.remove_file(&tmp);
        }
        made?;
        self.counters.created.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn write_header(&self, file: &ScheduledFile<S::File>, n: u64) -> Result<()> {
        let unit = file.alignment().io_unit_bytes();
        let mut buf = AlignedBuf::new(SEGMENT_HEADER_BYTES as usize, unit)?;
        assert_eq!(buf.len() as u64, SEGMENT_HEADER_BYTES);
        SegmentHeader {
            segment_no: n,
            segment_bytes: self.layout.segment_bytes,
            db_id: self.db_id,
        }
        .encode(buf.as_mut_slice());
        let io = file.admit(IoClass::Wal, buf.len() as u64);
        io.write_all_at(buf.io_all(), 0)?;
        io.sync_all()
    }

    /// Makes sure segments `current+1 ..= current+spare` exist. Run by the
    /// background preparer; returns whether it did any work.
    pub fn prepare_ahead(&self) -> Result<bool> {
        let target = {
            let mut inner = lock(&self.inner);
            if inner.busy || inner.shutdown {
                return Ok(false);
            }
            let from = inner.current + 1;
            let to = inner.current + self.spare as u64;
            let missing = (from..=to).find(|&k| !self.storage.exists(&self.path(k)));
            let Some(k) = missing else { return Ok(false) };
            assert!(k > inner.current, "spares lie ahead of the current segment");
            inner.busy = true;
            k
        };
        let made = self.prepare(target);
        let mut inner = lock(&self.inner);
        assert!(inner.busy, "only the holder of `busy` clears it");
        inner.busy = false;
        self.changed.notify_all();
        // A failure (say, no space) is retried later; if the writer reaches the
        // segment first, it prepares it itself and reports the error to commits.
        made.map(|()| true)
    }

    /// Prepares every missing spare now, waiting for a preparation under way.
    pub fn prepare_spares_now(&self) -> Result<()> {
        loop {
            if self.prepare_ahead()? {
                continue;
            }
            let inner = lock(&self.inner);
            let next = inner.current + 1;
            let missing =
                (next..next + self.spare as u64).any(|k| !self.storage.exists(&self.path(k)));
            if !missing || inner.shutdown {
                return Ok(());
            }
            if inner.busy {
                drop(self.changed.wait(inner).unwrap_or_else(|p| p.into_inner()));
            }
        }
    }

    /// Blocks the preparer until there may be work, or shutdown (returns false).
    pub fn wait_for_work(&self, timeout: std::time::Duration) -> bool {
        let inner = lock(&self.inner);
        if inner.shutdown {
            return false;
        }
        let (inner, _) = self
            .changed
            .wait_timeout(inner, timeout)
            .unwrap_or_else(|p| p.into_inner());
        !inner.shutdown
    }

    /// Stops the preparer.
    pub fn shutdown(&self) {
        lock(&self.inner).shutdown = true;
        self.changed.notify_all();
    }

    /// Renames segments wholly before segment `keep_from` to future spare numbers
    /// (or removes them when enough spares exist). Returns how many were recycled.
    pub fn recycle_before(&self, keep_from: u64) -> Result<usize> {
        let mut inner = lock(&self.inner);
        while inner.busy {
            inner = self.changed.wait(inner).unwrap_or_else(|p| p.into_inner());
        }
        inner.busy = true;
        let current = inner.current;
        drop(inner);
        let result = self.recycle_locked(keep_from.min(current), current);
        let mut inner = lock(&self.inner);
        assert!(inner.busy, "only the holder of `busy` clears it");
        assert!(
            inner.current >= current,
            "the current segment only moves forward"
        );
        inner.busy = false;
        inner.open.retain(|&k, _| k >= keep_from.min(current));
        self.changed.notify_all();
        result
    }

    fn recycle_locked(&self, keep_from: u64, current: u64) -> Result<usize> {
        let present = list_segments(&self.storage, &self.dir)?;
        assert!(
            keep_from <= current,
            "the current segment is never recycled"
        );
        debug_assert!(present.windows(2).all(|w| w[0] < w[1]), "listed ascending");
        let mut future: Vec<u64> = present.iter().copied().filter(|&k| k > current).collect();
        let mut recycled = 0;
        for old in present.into_iter().filter(|&k| k < keep_from) {
            let spares = future.len();
            let next = future.last().copied().unwrap_or(current) + 1;
            assert!(
                old < keep_from && next > current,
                "{old} recycled as {next}"
            );
            if spares < self.recycle_max {
                // New header first (synced), then the new name: a crash in
                // between leaves an old segment nobody reads (it lies before
                // the redo point) that the next recycling picks up again, never
                // a file whose name and header disagree where the log is read.
                let file = self.open_file(&self.path(old), &self.writer_options())?;
                self.write_header(&file, next)?;
                drop(file);
                self.storage.rename(&self.path(old), &self.path(next))?;
                self.storage.sync_dir(&self.dir)?;
                future.push(next);
                assert!(future.len() <= self.recycle_max);
                recycled += 1;
                self.counters.recycled.fetch_add(1, Ordering::Relaxed);
            } else {
                self.storage.remove_file(&self.path(old))?;
                self.storage.sync_dir(&self.dir)?;
                self.counters.removed.fetch_add(1, Ordering::Relaxed);
            }
        }
        assert!(recycled <= self.recycle_max);
        Ok(recycled)
    }
}
