//! This engine behind [`Store`]: its transactions, scans, backups through
//! the run and held snapshots, in the default keyspace or (`-table`) in one
//! named table among [`BENCH_TABLES`].

use super::*;
use directkv::Table;

/// Named tables a `-table` configuration's database holds; the workload
/// runs in the one in the middle, the others stay empty.
pub const BENCH_TABLES: u32 = 10_000;

/// The table a `-table` configuration's workload runs in.
const BENCH_TABLE: &str = "bench05000";

/// Opens the `-table` configuration's table in `db`, creating the
/// [`BENCH_TABLES`] tables first if they are not there.
fn bench_table(db: &Database) -> Result<Table> {
    if let Ok(t) = db.begin_read()?.open_table(BENCH_TABLE) {
        return Ok(t);
    }
    for chunk in 0..BENCH_TABLES / 1000 {
        let mut w = db.begin_write()?;
        for i in chunk * 1000..(chunk + 1) * 1000 {
            w.create_table(&format!("bench{i:05}"))?;
        }
        w.commit()?;
    }
    Ok(db.begin_read()?.open_table(BENCH_TABLE)?)
}

/// This engine.
pub struct DirectkvStore {
    db: Database,
    /// The named table the workload runs in (`-table`), or the default
    /// keyspace.
    table: Option<Table>,
    /// Take backups through the run ([`Store::backups`]).
    backup: bool,
    /// The database directory (backups go beside it).
    dir: PathBuf,
}

impl DirectkvStore {
    /// The store over `db`, in the default keyspace or (`table`) in the
    /// bench's named table; `backup` takes backups through the run into
    /// directories beside `dir`.
    pub fn new(db: Database, table: bool, backup: bool, dir: &Path) -> Result<Self> {
        let table = if table { Some(bench_table(&db)?) } else { None };
        Ok(DirectkvStore {
            db,
            table,
            backup,
            dir: dir.to_path_buf(),
        })
    }
}

struct DirectkvTxn<'t, 'db> {
    w: &'t mut directkv::WriteTxn<'db>,
    table: Option<&'t Table>,
}

impl TxnOps for DirectkvTxn<'_, '_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(match self.table {
            Some(t) => self.w.table(t).get(key)?,
            None => self.w.get(key)?,
        })
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        match self.table {
            Some(t) => self.w.table(t).put(key, value)?,
            None => self.w.put(key, value)?,
        }
        Ok(())
    }
    fn get_for_update(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(match self.table {
            Some(t) => self.w.table(t).get_for_update(key)?,
            None => self.w.get_for_update(key)?,
        })
    }
}

impl Store for DirectkvStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let r = self.db.begin_read()?;
        Ok(match &self.table {
            Some(t) => r.table(t).get(key)?,
            None => r.get(key)?,
        })
    }

    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let r = self.db.begin_read()?;
        match &self.table {
            Some(t) => visit_entries(r.table(t).range(from..to), limit, visit),
            None => visit_entries(r.range(from..to), limit, visit),
        }
    }

    fn transact(&self, body: &mut dyn FnMut(&mut dyn TxnOps) -> Result<()>) -> Result<()> {
        // The engine runs the body again on a conflict or a deadlock; an
        // error of the bench's own (not the engine's) ends it, kept here.
        let mut own: Option<anyhow::Error> = None;
        let r = self.db.transaction(&WriteOptions::default(), |w| {
            let table = self.table.as_ref();
            match body(&mut DirectkvTxn { w, table }) {
                Ok(()) => Ok(()),
                Err(e) => match e.downcast::<directkv::Error>() {
                    Ok(engine) => Err(engine),
                    Err(e) => {
                        own = Some(e);
                        Err(directkv::Error::InvalidArgument(
                            "the bench's body failed".into(),
                        ))
                    }
                },
            }
        });
        match (r, own) {
            (_, Some(e)) => Err(e),
            (r, None) => Ok(r?),
        }
    }

    fn finish_load(&self) -> Result<()> {
        Ok(self.db.checkpoint()?)
    }

    fn stats(&self) -> serde_json::Value {
        let s = self.db.stats();
        let mut v = serde_json::to_value(&s).unwrap_or_default();
        let hits = s.cache_hits as f64;
        let total = (s.cache_hits + s.cache_misses).max(1) as f64;
        if let Some(o) = v.as_object_mut() {
            o.insert("cache_hit_ratio".into(), (hits / total).into());
        }
        v
    }

    fn backups(&self, done: &AtomicBool) -> Result<Option<BackupLoad>> {
        if !self.backup {
            return Ok(None);
        }
        let mut load = BackupLoad::default();
        // A full backup, then an increment of it, in turn; side by side, so
        // the increment finds its parent's chain.
        let full = self.dir.with_extension("backup");
        let increment = self.dir.with_extension("backup-incr");
        let mut parent_began = None;
        // Until the run ends; then an increment of the last full backup if
        // none was taken (the foreground has stopped, so only its size is
        // measured).
        while !done.load(Ordering::Acquire) || (parent_began.is_some() && load.increments == 0) {
            let began = std::time::Instant::now();
            let (dest, opts) = match parent_began {
                Some(_) => (
                    &increment,
                    directkv::BackupOptions {
                        incremental_from: Some(full.clone()),
                        ..directkv::BackupOptions::default()
                    },
                ),
                None => (&full, directkv::BackupOptions::default()),
            };
            if parent_began.is_none() {
                remove_dir_if_there(&increment)?;
            }
            remove_dir_if_there(dest)?;
            let r = self.db.backup(dest, &opts)?;
            let (_, cached) = super::super::sys::dir_size_and_cached(dest);
            load.completed += 1;
            load.seconds += r.micros as f64 / 1e6;
            load.bytes += r.data_bytes + r.wal_bytes;
            load.cached_bytes_max = load.cached_bytes_max.max(cached);
            load.pages_reread += r.pages_reread + r.pages_covered_by_log;
            parent_began = match parent_began {
                Some(p) => {
                    load.increments += 1;
                    load.increment_data_bytes = r.data_bytes;
                    load.increment_pages = r.pages_copied;
                    load.increment_deltas = r.pages_as_deltas;
                    load.increment_after_seconds = began.duration_since(p).as_secs_f64();
                    None
                }
                None => {
                    load.data_bytes = r.data_bytes;
                    Some(began)
                }
            };
        }
        remove_dir_if_there(&full)?;
        remove_dir_if_there(&increment)?;
        Ok(Some(load))
    }

    fn hold_snapshot(&self, done: &AtomicBool) -> Result<Option<SnapshotHold>> {
        let started = std::time::Instant::now();
        let before = self.db.stats().snapshots.snapshots_too_old;
        let r = self.db.begin_read()?;
        let first = r.range::<std::ops::RangeFull>(..).next().transpose()?;
        let mut peak = 0;
        while !done.load(Ordering::Acquire) {
            peak = peak.max(self.db.stats().snapshots.version_store_bytes);
            std::thread::sleep(HOLD_SAMPLE);
        }
        let last = r.range::<std::ops::RangeFull>(..).next().transpose();
        let outcome = match last {
            Ok(last) if last == first => "kept",
            Err(directkv::Error::SnapshotTooOld { .. }) => "too_old",
            Ok(_) => bail!("a held snapshot read a different first entry"),
            Err(e) => return Err(e.into()),
        };
        let s = self.db.stats().snapshots;
        Ok(Some(SnapshotHold {
            held_seconds: started.elapsed().as_secs_f64(),
            outcome: outcome.into(),
            version_store_peak_bytes: peak,
            version_store_cap_bytes: s.version_store_cap_bytes,
            snapshots_too_old: s.snapshots_too_old - before,
        }))
    }
}

fn remove_dir_if_there(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(anyhow::Error::new(e).context(format!("remove {}", dir.display())))
        }
        _ => Ok(()),
    }
}
