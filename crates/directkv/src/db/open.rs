//! Open: create a database or recover one, and start its threads.
//!
//! Files in the database directory (DESIGN.md, "On disk"): `LOCK`,
//! `CONTROL`, `data`, and `wal/` (or `Options::wal_dir`); `ARCHIVE` where
//! the log is archived ([`super::archive_setting`]).
//!
//! The steps, in order: check the options; look at the directory (refusing
//! one others may write: [`super::access`]); take `LOCK`; remove scratch
//! files a killed probe left; read `CONTROL` (or create the database if the
//! directory is empty); open `data` with the
//! direct-I/O policy and the buffer pool over it; open the WAL from
//! `CONTROL`'s redo point, replaying every committed transaction
//! ([`recovery`]); then accept transactions and start the
//! background threads ([`super::checkpoint::background`]). A first open, and an open
//! that replayed transactions, checkpoint before they return.
//!
//! Invariants:
//! - A creation writes `CONTROL` last (through `CONTROL.tmp` and a rename,
//!   then a directory sync), so a directory without `CONTROL` holds at most
//!   an interrupted creation.
//! - The page size is the database's, from `CONTROL`, not the caller's.
//! - No transaction runs before replay has finished.
//! - Every file and directory it creates has the mode of
//!   `Options::permissions`, and every file it expects to be new (`data` and
//!   `CONTROL.tmp` at creation) is created exclusively, so nothing planted
//!   at the name is written through.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::access::{self, Audit};
use super::checkpoint::background::stop_signal;
use super::checkpoint::control::ControlFile;
use super::checkpoint::state::CheckpointState;
use super::checkpoint::summary::Summaries;
use super::engine::Inner;
use super::engine_log::{EngineLog, Pool};
use super::env::Env;
use super::lock_rank::{Rank, RankedMutex};
use super::stats::Counters;
use super::txn::commit::PoolPages;
use super::txn::core::TxnCore;
use super::txn::tables;
use super::vitals::Vitals;
use super::Options;
use crate::btree::node;
use crate::buffer::BufferPool;
use crate::constants::LOG_BYTES_PER_PAGE_MIN;
use crate::error::{Error, Result};
use crate::format::control::Control;
use crate::format::data_head;
use crate::format::page;
use crate::format::{DbId, PageId};
use crate::health::Health;
use crate::io::{Aio, AioBackend, DirectIo, FileOptions, Storage, SyncMethod, SyncVariant};
use crate::lsn::Lsn;
use crate::sched::{IoClass, ScheduledFile, Scheduler};
use crate::wal::WalOptions;
use recovery::Recovered;

mod claim;
mod recovery;

use claim::claim;

const CONTROL_NAME: &str = "CONTROL";
const DATA_NAME: &str = "data";
const LOCK_NAME: &str = "LOCK";
const CONTROL_TMP_NAME: &str = "CONTROL.tmp";

/// Opens (creating or recovering) the database in `path` on `storage`.
/// The engine is ready; [`Database`](super::Database) starts its threads.
pub(super) fn open<S: Storage>(storage: S, path: &Path, opts: Options) -> Result<Arc<Inner<S>>> {
    check_page_size(opts.page_bytes)?;
    check_checkpoint_distance(&opts)?;
    // Every request of the database's files asks this scheduler, the ones
    // that judge and create the directory included.
    let sched = Arc::new(Scheduler::new(opts.io_scheduler));
    let (storage, lock, audit) = claim(&storage, path, &opts, &sched)?;
    let control_path = path.join(CONTROL_NAME);
    assert!(
        storage.exists(&control_path),
        "an open database has CONTROL"
    );
    let (control, backup_end) = read_control(&storage, path, &control_path, &sched)?;
    let c = control.current();
    let log = Arc::new(EngineLog::replaying(c.redo_lsn));
    let (pool, aio) = open_pool(&storage, path, &opts, &c, &log, &sched)?;
    // A backup's log must reach its end, whatever its page 0 says.
    let reached = check_data_head(&pool, &c)?.max(backup_end);
    check_page_count(&pool, &c, &control_path)?;
    let (storage, wal_opts) = wal_options(&storage, path, &opts, &c, reached, &sched)?;
    let wal_sync = wal_opts.sync;
    let Recovered {
        wal,
        meta,
        next_txn,
        last_commit_us,
        changed,
        stats,
    } = recovery::recover(&storage, &pool, &log, wal_opts, &c)?;
    let archive = open_archive(&storage, (path, c.db_id), &opts, &wal, &sched)?;
    let summaries = Summaries::open(&storage, path, c.redo_lsn, changed, Arc::clone(&sched))?;
    log.open(wal);
    let version_cap = opts.version_store_cap();
    let tables = tables::load(&PoolPages { pool: &pool }, meta.catalog)?;
    let mut inner = Inner {
        env: Env {
            dir: path.to_path_buf(),
            opts,
            wal_sync,
            storage: storage.clone(),
            readable_by_others: audit.readable_by_others,
            sched: Arc::clone(&sched),
            aio,
            _lock: lock,
        },
        log,
        pool,
        txns: TxnCore::new(meta, version_cap, tables),
        ckpt: CheckpointState::new(control, c.redo_lsn, stop_signal(), summaries),
        vitals: Vitals {
            counters: Counters::starting_at(next_txn, last_commit_us),
            recovery: stats,
            health: Health::new(path),
        },
        readahead: RankedMutex::new(Rank::Readahead, None),
        log_pins: Mutex::new(Vec::new()),
        compactor: Mutex::new(None),
        archive,
    };
    checkpoint_if_due(&mut inner, &c)?;
    Ok(Arc::new(inner))
}

/// Refuses a checkpoint distance below [`super::options::CHECKPOINT_WAL_BYTES_MIN`]:
/// the log a checkpoint itself writes would keep every committer waiting
/// for log space that no checkpoint can free.
fn check_checkpoint_distance(opts: &Options) -> Result<()> {
    let min = super::options::CHECKPOINT_WAL_BYTES_MIN;
    if opts.checkpoint_wal_bytes < min {
        return Err(Error::InvalidArgument(format!(
            "checkpoint_wal_bytes {} is below the smallest, {min}",
            opts.checkpoint_wal_bytes
        )));
    }
    Ok(())
}

/// Refuses a page size the engine does not make.
fn check_page_size(page_bytes: u32) -> Result<()> {
    if !page::PAGE_SIZES.contains(&page_bytes) {
        return Err(Error::InvalidArgument(format!(
            "page size {page_bytes} is not one of 4096, 8192, 16384"
        )));
    }
    Ok(())
}

/// Opens `CONTROL`; refuses a backup's copy that was never completed (its
/// marker is written last; its first checkpoint makes it a database) or an
/// incremental one alone. Returns it with, for a backup or a restore's
/// directory not yet opened, the end its log must reach (zero otherwise).
fn read_control<S: Storage>(
    storage: &S,
    path: &Path,
    control_path: &Path,
    sched: &Arc<Scheduler>,
) -> Result<(ControlFile<S>, Lsn)> {
    let control = ControlFile::open_scheduled(storage, control_path, Arc::clone(sched))?;
    let c = control.current();
    assert!(
        page::PAGE_SIZES.contains(&c.page_bytes),
        "CONTROL's page size is checked"
    );
    if !c.is_backup() {
        return Ok((control, Lsn::ZERO));
    }
    // A restore's directory holds its record, a backup its manifest: either
    // names the end the log must reach.
    let m = match super::backup_access::restored_record(storage, path)? {
        Some(m) => m,
        None => super::backup_access::complete_manifest(storage, path)?,
    };
    if let Some(parent) = &m.parent_id {
        return Err(Error::BackupChain {
            path: path.to_path_buf(),
            detail: format!(
                "it is an incremental backup (of backup {parent}) and holds only the pages \
                 changed since; restore it with its chain (restore_backup_chain) and open \
                 the result"
            ),
        });
    }
    Ok((control, m.end()))
}

/// Checkpoints before open returns, when it is the first open of a new
/// database (`CONTROL` then names the new log before any transaction can
/// need it: see [`wal_options`]) or replay changed pages (the
/// end-of-recovery checkpoint writes them, so a disk still too full fails
/// the open with `DiskFull` rather than a later read that must evict a
/// dirty page, and the next crash replays nothing of this one).
/// Its time goes in the recovery stats.
fn checkpoint_if_due<S: Storage>(inner: &mut Inner<S>, c: &Control) -> Result<()> {
    // A copy of a backup, or a database whose line of history was lost,
    // starts a line of its own at this checkpoint.
    let new_line = c.is_backup() || c.history_lost;
    if c.checkpoint_lsn != Lsn::ZERO && inner.vitals.recovery.transactions == 0 && !new_line {
        return Ok(());
    }
    let t = std::time::Instant::now();
    inner.checkpoint_as(crate::buffer::WriteCause::Recovery)?;
    inner.vitals.recovery.checkpoint_micros = t.elapsed().as_micros() as u64;
    assert!(
        inner.ckpt.control.lock()?.current().checkpoint_lsn > Lsn::ZERO,
        "a checkpoint names its record"
    );
    Ok(())
}

/// The WAL's options: its directory, sync method, segment size, scheduler,
/// and what the log must prove at open (reach CONTROL's checkpoint record
/// and `head_reached`, what the data file's head says it reached).
///
/// The log is made by the first open of a new database, which checkpoints
/// before it accepts a transaction: so a `CONTROL` that names a checkpoint
/// names a log that exists, and its directory or redo segment missing is damage,
/// refused before anything is written.
/// Returns the storage holding the WAL directory too.
fn wal_options<S: Storage>(
    storage: &S,
    path: &Path,
    opts: &Options,
    c: &Control,
    head_reached: Lsn,
    sched: &Arc<Scheduler>,
) -> Result<(S, WalOptions)> {
    let wal_dir = access::wal_dir(path, opts);
    let creating = c.checkpoint_lsn == Lsn::ZERO;
    if creating {
        crate::io::create_dir_synced(storage, &wal_dir, opts.permissions)?;
    } else if !storage.exists(&wal_dir) {
        return Err(crate::wal::missing_dir(&wal_dir, c.redo_lsn));
    }
    let storage = storage.anchor(&wal_dir)?;
    let mut wal_opts = WalOptions::new(&wal_dir, c.db_id);
    wal_opts.create_if_missing = creating;
    wal_opts.must_reach = c.checkpoint_lsn.max(head_reached);
    wal_opts.sync = choose_sync(opts, &storage.os_at(&wal_dir));
    wal_opts.segment_bytes = opts.wal_segment_bytes;
    wal_opts.background_prepare = opts.background_threads;
    wal_opts.seal_delay = opts.wal_seal_delay;
    wal_opts.sched = Arc::clone(sched);
    wal_opts.permissions = opts.permissions;
    Ok((storage, wal_opts))
}

/// Opens the data file, the buffer pool over it and, where the storage has
/// one, the asynchronous I/O engine that carries the pool's batches.
fn open_pool<S: Storage>(
    storage: &S,
    path: &Path,
    opts: &Options,
    c: &Control,
    log: &Arc<EngineLog<S>>,
    sched: &Arc<Scheduler>,
) -> Result<(Pool<S>, Option<Arc<Aio>>)> {
    let data = ScheduledFile::new(
        storage.open(
            &path.join(DATA_NAME),
            &FileOptions {
                direct_io: opts.direct_io,
                sync: SyncMethod::Fsync,
                ..FileOptions::default()
            },
        )?,
        Arc::clone(sched),
    );
    let pool = BufferPool::new(
        data,
        c.page_bytes,
        opts.pool_bytes(),
        c.db_id,
        Arc::clone(log),
    )?
    .with_page_check(crate::btree::node::validate);
    pool.set_extension(opts.data_extend_bytes / u64::from(c.page_bytes));
    let aio_opts = opts.async_io;
    let aio = if storage.supports_aio() && aio_opts.backend != AioBackend::Off {
        let aio = Aio::new(&aio_opts)?;
        pool.attach_aio(&aio)?;
        Some(aio)
    } else {
        None
    };
    assert_eq!(
        pool.page_bytes(),
        c.page_bytes as usize,
        "the pool takes CONTROL's page size"
    );
    Ok((pool, aio))
}

/// Refuses a `CONTROL` whose page count the data file cannot explain:
/// every page below a checkpoint's page count was written and synced
/// before `CONTROL` named it, except those its checkpoint's own window of
/// log (redo point to checkpoint end) allocated, each of which has at least
/// [`LOG_BYTES_PER_PAGE_MIN`] bytes of log. A count past that would have
/// the pool grow the file to it (zero-filling terabytes, or without end)
/// and read pages that never existed. Called after the head's check,
/// which names an older (shorter) data file as such.
///
/// Worked example: a 1 MiB file of 8 KiB pages holds 128 pages; a window of
/// 4000 bytes of log explains 100 more: 228 is the largest count allowed.
fn check_page_count<S: Storage>(pool: &Pool<S>, c: &Control, control_path: &Path) -> Result<()> {
    let page_bytes = u64::from(c.page_bytes);
    let file_pages = pool.file().len()?.div_ceil(page_bytes);
    assert!(c.checkpoint_lsn >= c.redo_lsn, "CONTROL's LSNs are checked");
    let window = c.checkpoint_lsn.get() - c.redo_lsn.get();
    let allowed = file_pages.saturating_add(window / LOG_BYTES_PER_PAGE_MIN);
    if c.page_count > allowed {
        return Err(Error::Corruption {
            path: control_path.to_path_buf(),
            offset: 64,
            page: None,
            detail: format!(
                "CONTROL's page count {} is past the {file_pages} pages of the data file \
                 and the {} its checkpoint's {window} bytes of log can add: the data file \
                 is shorter than CONTROL says (truncated?), or CONTROL is damaged",
                c.page_count,
                window / LOG_BYTES_PER_PAGE_MIN
            ),
        });
    }
    assert!(c.page_count <= crate::constants::PAGE_COUNT_MAX);
    Ok(())
}

/// Refuses a data file older than the checkpoint `CONTROL` names (see
/// [`crate::format::data_head`]).
/// Returns how far the head says the log reached (zero without a head).
fn check_data_head<S: Storage>(pool: &Pool<S>, c: &Control) -> Result<Lsn> {
    let head = match pool.read(data_head::DATA_HEAD_PAGE, crate::buffer::Access::Normal) {
        Ok(head) => head,
        // A torn head (the log holds no image of it) makes no claim; the
        // next checkpoint writes it whole.
        Err(Error::Corruption { .. }) => return Ok(Lsn::ZERO),
        Err(e) => return Err(e),
    };
    match data_head::decode(head.data()) {
        Some(h) if h.flushed_through < c.redo_lsn => Err(pool.page_corruption(
            data_head::DATA_HEAD_PAGE,
            format!(
                "the data file holds the changes logged before LSN {}, but CONTROL's \
                 checkpoint needs every change before LSN {}: the data file is older than \
                 CONTROL (replaced by an older copy?); refusing to open rather than serve \
                 its stale pages",
                h.flushed_through, c.redo_lsn
            ),
        )),
        Some(h) => Ok(h.log_reached),
        None => Ok(Lsn::ZERO),
    }
}

/// The log archiver's state, with the archive setting recorded with the
/// database or given in the options ([`super::backup_access::archive_setting`]): the
/// setting this open takes is recorded (durably) before anything is
/// archived or recycled, so every later open archives as configured.
fn open_archive<S: Storage>(
    storage: &S,
    (path, db_id): (&Path, DbId),
    opts: &Options,
    wal: &crate::wal::Wal<S>,
    sched: &Arc<Scheduler>,
) -> Result<Option<super::backup_access::Archive>> {
    use super::backup_access::archive_setting as setting;
    if let Some(given) = &opts.wal_archive {
        check_archive_dir(given, path, wal.dir())?;
    }
    let recorded = setting::read(storage, path, sched)?;
    let Some(taken) = setting::resolve(
        recorded.as_ref().map(|r| &r.setting),
        setting::Requested {
            dir: opts.wal_archive.as_deref(),
            change: opts.wal_archive_change,
            timeout: opts.archive_timeout,
        },
    )?
    else {
        if recorded.is_some() {
            setting::remove(storage, path)?;
        }
        return Ok(None);
    };
    check_archive_dir(&taken.dir, path, wal.dir())?;
    let here = setting::dir_id(storage, path)?;
    let keep = opts.wal_archive_change == super::ArchiveChange::Keep;
    if let Some(r) = recorded.as_ref().filter(|r| keep && r.bound_to != here) {
        return Err(Error::ArchiveForeign {
            dir: r.setting.dir.clone(),
            database: path.to_path_buf(),
            detail: format!(
                "the setting was recorded in another directory (device {}, inode {}; this one \
                 is device {}, inode {}): this is a copy of that database",
                r.bound_to.dev, r.bound_to.ino, here.dev, here.ino
            ),
        });
    }
    // The recorded identity, where the same directory is kept.
    let expected = recorded
        .as_ref()
        .filter(|r| keep && r.setting.dir == taken.dir)
        .map(|r| r.instance);
    let named = opts.wal_archive.is_some();
    let db_id = (db_id, named, expected);
    let instance = setting::claim(storage, (&taken.dir, path), db_id, opts.permissions, sched)?;
    let record = setting::Recorded {
        setting: taken.clone(),
        instance,
        bound_to: here,
    };
    if recorded.as_ref() != Some(&record) {
        setting::write(storage, path, &record, opts.permissions, sched)?;
    }
    let layout = crate::wal::format::Layout {
        segment_bytes: wal.segment_bytes(),
    };
    let current = layout.segment_of(wal.end_lsn());
    let log = (wal.dir(), current, layout);
    super::backup_access::Archive::open(storage, &taken, log, opts.permissions, sched).map(Some)
}

/// Refuses a log archive `dir` inside the database directory `db` or its
/// log `wal` (or holding them).
fn check_archive_dir(dir: &Path, db: &Path, wal: &Path) -> Result<()> {
    let abs = super::backup_access::archive_setting::absolute;
    let (archive, db) = (abs(dir)?, abs(db)?);
    if archive.starts_with(&db) || db.starts_with(&archive) || archive == abs(wal)? {
        return Err(Error::InvalidArgument(format!(
            "the log archive {} is inside the database's directory or its log's (or holds \
             them): give it a directory of its own",
            dir.display()
        )));
    }
    Ok(())
}

/// The WAL's sync method when none is given: the fastest durable one the
/// device profile of `wal_dir` recorded (measured now and saved if there is
/// none), among the direct variants when the database uses direct I/O and
/// among the buffered ones otherwise. A buffered log under a direct-I/O
/// database would fill the page cache with log the engine never reads again
/// and evict what others need (one cache, invariant 6).
fn choose_sync(opts: &Options, wal_dir: &crate::io::At<'_>) -> SyncVariant {
    if let Some(v) = opts.wal_sync {
        return v;
    }
    let direct_ok = crate::io::profile::direct_io_works(wal_dir);
    let want_direct = opts.direct_io != DirectIo::Off && direct_ok;
    let fastest = |measured: &[(SyncVariant, f64)]| {
        measured
            .iter()
            .filter(|(v, _)| v.direct == want_direct)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|&(v, _)| v)
    };
    if let Some(p) = crate::io::profile::DeviceProfile::load_for_dir(wal_dir) {
        if let Some(v) = fastest(&p.measured) {
            return v;
        }
    }
    let candidates: Vec<SyncVariant> = [
        (SyncMethod::Fdatasync, false),
        (SyncMethod::Fdatasync, true),
        (SyncMethod::OpenDatasync, true),
        (SyncMethod::PwriteDsync, true),
    ]
    .into_iter()
    .filter(|&(_, direct)| !direct || direct_ok)
    .map(|(method, direct)| SyncVariant { method, direct })
    .collect();
    let fallback = SyncVariant {
        method: SyncMethod::Fdatasync,
        direct: want_direct,
    };
    crate::io::profile::measure_and_save(wal_dir, &candidates)
        .and_then(|_| crate::io::profile::DeviceProfile::load_for_dir(wal_dir))
        .and_then(|p| fastest(&p.measured))
        .unwrap_or(fallback)
}
