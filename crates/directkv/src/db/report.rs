//! Assembling [`Stats`] from the parts of one open database, and
//! publishing it to [`STATS_FILE`] for `directkv stats` in another process.
//! The types and counters it reads are in [`super::stats`]; this file is
//! the one place that reads every part at once.
//!
//! Invariants:
//! - A snapshot only loads counters (`Relaxed`): it never blocks a commit,
//!   and two snapshots' difference is what happened between them.

use std::sync::atomic::Ordering;

use super::engine::Inner;
use super::stats::{
    BackupProgress, SpaceStats, StallHistograms, Stalls, Stats, TablePages, TableStats, TxnStats,
    STATS_FILE, TABLES_LISTED,
};
use crate::io::{AioBackend, AioStats, Storage};

impl<S: Storage> Inner<S> {
    /// Writes `stats()` to [`STATS_FILE`] (write then rename, so a reader
    /// never sees half a file). Diagnostic only: failures are ignored.
    pub(super) fn publish_stats(&self) {
        let doc = serde_json::json!({
            "pid": std::process::id(),
            "unix_ms": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            "stats": self.stats(),
        });
        let tmp = self
            .env
            .storage
            .os_at(&self.env.dir)
            .join(format!("{STATS_FILE}.tmp"));
        let bytes = doc.to_string().into_bytes();
        if crate::io::write_new_file(&tmp, &bytes, self.env.opts.permissions).is_ok() {
            let _ = tmp.rename_to(&self.env.storage.os_at(&self.env.dir.join(STATS_FILE)));
        }
    }

    /// The foreground waits by cause.
    fn stalls(&self) -> Stalls {
        let c = &self.vitals.counters;
        let h = StallHistograms {
            wal_sync_wait: c.wal_sync_wait.snapshot(),
            writer_lock_wait: c.writer_lock_wait.snapshot(),
            commit_wait: c.commit_wait.snapshot(),
            row_lock_wait: c.row_lock_wait.snapshot(),
            tree_lock_wait: c.tree_lock_wait.snapshot(),
            read_miss: self.pool.read_miss_stalls(),
            free_frame_wait: self.pool.free_frame_stalls(),
            log_space_wait: c.log_space_wait.snapshot(),
        };
        Stalls {
            wal_sync_wait: h.wal_sync_wait.count,
            writer_lock_wait: h.writer_lock_wait.count,
            commit_wait: h.commit_wait.count,
            row_lock_wait: h.row_lock_wait.count,
            tree_lock_wait: h.tree_lock_wait.count,
            read_miss: h.read_miss.count,
            free_frame_wait: h.free_frame_wait.count,
            log_space_wait: h.log_space_wait.count,
            histograms: h,
        }
    }

    /// The write transactions' counters.
    fn txn_stats(&self) -> TxnStats {
        let c = &self.vitals.counters;
        let l = &self.txns.locks.counters;
        TxnStats {
            begun: c.writers_begun.load(Ordering::Relaxed),
            conflicts: c.conflicts.load(Ordering::Relaxed),
            deadlocks: l.deadlocks.load(Ordering::Relaxed),
            lock_timeouts: l.timeouts.load(Ordering::Relaxed),
            lock_waits: l.waits.load(Ordering::Relaxed),
            lock_wait_us: l.waited_us.load(Ordering::Relaxed),
            locked_keys: self.txns.locks.locked_keys() as u64,
            waiting_for_locks: self.txns.locks.waiting() as u64,
            retries: c.retries.load(Ordering::Relaxed),
            commit_misses: c.commit_misses.load(Ordering::Relaxed),
            shape_retries: c.shape_retries.load(Ordering::Relaxed),
            commit_section_us: c.commit_section_ns.load(Ordering::Relaxed) / 1000,
        }
    }

    /// The data file's pages, as the last commit applied left them.
    fn space_stats(&self) -> SpaceStats {
        // Figures only: a poisoned tree lock (the database failed) gives none.
        let Ok(meta) = self.txns.tree.read().map(|m| *m) else {
            return SpaceStats::default();
        };
        SpaceStats {
            page_bytes: self.pool.page_bytes() as u64,
            pages: meta.page_count,
            free_pages: meta.free_pages,
            compactable_pages: meta.free_pages.map(|free| {
                let boundary = super::compact::plan(meta.page_count, free);
                meta.page_count - boundary.unwrap_or(meta.page_count)
            }),
            compacting_to: meta.compaction.map(|c| c.boundary),
        }
    }

    /// Named tables' figures.
    fn table_stats(&self) -> TableStats {
        let (all, dropped) = self.txns.tables.counts();
        assert!(dropped <= all, "dropped tables are registered ones");
        // Figures only: a poisoned registry (the database failed) lists none.
        let (pages, largest) = self.txns.tables.largest(TABLES_LISTED).unwrap_or_default();
        let largest: Vec<TablePages> = largest
            .iter()
            .map(|t| TablePages {
                id: t.id,
                name: if t.is_live() { t.name() } else { String::new() },
                dropped: !t.is_live(),
                pages: t.pages(),
            })
            .collect();
        TableStats {
            tables: (all - dropped) as u64,
            dropped: dropped as u64,
            dropped_pages_freed: (self.vitals.counters.dropped_pages_freed).load(Ordering::Relaxed),
            pages,
            largest,
        }
    }

    pub(super) fn stats(&self) -> Stats {
        let cache = self.pool.stats();
        assert!(
            cache.dirty_pages <= self.pool.frames() as u64,
            "dirty pages are cached pages"
        );
        let w = cache.writes_by_cause;
        assert_eq!(w.total(), cache.pages_written, "every write has one cause");
        let wal = self.wal().stats();
        let c = &self.vitals.counters;
        Stats {
            cache,
            cache_hits: cache.hits,
            cache_misses: cache.misses,
            dirty_pages: cache.dirty_pages,
            pages_read: cache.pages_read,
            pages_written: cache.pages_written,
            wal,
            wal_bytes: wal.bytes_written,
            commits: c.commits.load(Ordering::Relaxed),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            backups: c.backups.load(Ordering::Relaxed),
            backup: BackupProgress {
                running: c.backup_running.load(Ordering::Relaxed),
                pages_total: c.backup_pages_total.load(Ordering::Relaxed),
                pages_done: c.backup_pages_done.load(Ordering::Relaxed),
                bytes_copied: c.backup_bytes.load(Ordering::Relaxed),
            },
            archive: self
                .archive
                .as_ref()
                .map(|a| a.stats(self.durable_records_end()))
                .unwrap_or_default(),
            summary_write_failures: c.summary_failures.load(Ordering::Relaxed),
            checkpoint_running: self.ckpt.checkpointing.try_lock().is_none(),
            wal_since_redo_bytes: self.wal_since_checkpoint(),
            full_page_images: c.full_images.load(Ordering::Relaxed),
            page_deltas: c.deltas.load(Ordering::Relaxed),
            full_page_image_bytes: c.full_image_bytes.load(Ordering::Relaxed),
            page_record_bytes: c.page_record_bytes.load(Ordering::Relaxed),
            cleaner_writes: c.cleaner_writes.load(Ordering::Relaxed),
            tables: self.table_stats(),
            space: self.space_stats(),
            writes_by_cause: cache.writes_by_cause,
            readahead_reads: c.readahead_reads.load(Ordering::Relaxed),
            io_scheduler: self.env.sched.stats(),
            async_io: self
                .env
                .aio
                .as_ref()
                .map(|a| a.stats())
                .unwrap_or_else(|| AioStats {
                    backend: AioBackend::Off.to_string(),
                    ..AioStats::default()
                }),
            write_requests: cache.write_requests,
            data_extensions: cache.extensions,
            data_allocated_bytes: cache.allocated_pages * self.pool.page_bytes() as u64,
            eviction_writes: cache.eviction_writes,
            stalls: self.stalls(),
            data_io: self.pool.file().io_path(),
            wal_sync: self.env.wal_sync,
            torn_page_protection: "full_page_images_after_checkpoint",
            recovery: self.vitals.recovery,
            snapshots: self.txns.versions.stats(),
            transactions: self.txn_stats(),
            readable_by_others: self.env.readable_by_others.clone(),
        }
    }
}
