//! Peer engines under the same workloads, with the same durability: RocksDB
//! (pessimistic transactions, `sync` writes; optionally its direct-I/O
//! options, or sized to fit a memory budget), LMDB (durable commits) and
//! SQLite (WAL mode, synchronous=FULL). Each gets the run's cache size for
//! its own cache: RocksDB's block cache (7/12 of it when sized to fit),
//! SQLite's page cache (split over the connections); LMDB has none but the
//! OS page cache.
//!
//! Each engine is built by its own feature (`peer-rocksdb`, `peer-lmdb`,
//! `peer-sqlite`; `peers` is all three) and registers itself with the store
//! module ([`register`]), which opens it by configuration name.

#[cfg(feature = "peer-lmdb")]
use std::ops::Bound;
use std::path::Path;
#[cfg(feature = "peer-sqlite")]
use std::sync::Mutex;

use anyhow::{Context, Result};

use super::store::{register_peer, visit_entries, Peer, Store, TxnOps};

/// Registers every peer engine this build includes.
pub fn register() {
    #[cfg(feature = "peer-rocksdb")]
    register_peer(Peer {
        configs: &["rocksdb", "rocksdb-direct", "rocksdb-tuned"],
        open: open_rocksdb,
    });
    #[cfg(feature = "peer-lmdb")]
    register_peer(Peer {
        configs: &["lmdb"],
        open: open_lmdb,
    });
    #[cfg(feature = "peer-sqlite")]
    register_peer(Peer {
        configs: &["sqlite"],
        open: open_sqlite,
    });
}

/// How a RocksDB configuration sets RocksDB up.
#[cfg(feature = "peer-rocksdb")]
#[derive(Clone, Copy, PartialEq, Eq)]
enum RocksFlavour {
    /// Its defaults, the run's cache as the block cache.
    Defaults,
    /// Its direct-I/O options (reads, flushes and compactions).
    Direct,
    /// Sized to fit a memory budget: two memtables of 16 MiB (against 64),
    /// index blocks charged to the block cache
    /// (`cache_index_and_filter_blocks`; no filters are configured), and a
    /// block cache of 7/12 of the run's cache (112 MiB of the 192 MiB the
    /// default 256 MiB budget gives): the rest of the budget holds the
    /// memtables, compaction buffers and the OS page cache its buffered
    /// reads go through.
    Tuned,
}

/// Opens `rocksdb`, `rocksdb-direct` or `rocksdb-tuned` in `dir`.
#[cfg(feature = "peer-rocksdb")]
fn open_rocksdb(config: &str, dir: &Path, cache_bytes: u64, load: bool) -> Result<Box<dyn Store>> {
    let flavour = match config {
        "rocksdb" => RocksFlavour::Defaults,
        "rocksdb-direct" => RocksFlavour::Direct,
        "rocksdb-tuned" => RocksFlavour::Tuned,
        other => anyhow::bail!("{other} is not a RocksDB configuration"),
    };
    Ok(Box::new(Rocks::open(dir, cache_bytes, flavour, load)?))
}

/// Opens LMDB in `dir`; it caches through the OS, so takes no cache size.
#[cfg(feature = "peer-lmdb")]
fn open_lmdb(_config: &str, dir: &Path, _cache_bytes: u64, load: bool) -> Result<Box<dyn Store>> {
    Ok(Box::new(Lmdb::open(dir, load)?))
}

/// Opens SQLite in `dir`.
#[cfg(feature = "peer-sqlite")]
fn open_sqlite(_config: &str, dir: &Path, cache_bytes: u64, load: bool) -> Result<Box<dyn Store>> {
    Ok(Box::new(Sqlite::open(dir, cache_bytes, load)?))
}

#[cfg(feature = "peer-rocksdb")]
struct Rocks {
    db: rocksdb::TransactionDB<rocksdb::MultiThreaded>,
    write: rocksdb::WriteOptions,
}

#[cfg(feature = "peer-rocksdb")]
impl Rocks {
    fn open(dir: &Path, cache_bytes: u64, flavour: RocksFlavour, load: bool) -> Result<Rocks> {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        let mut table = rocksdb::BlockBasedOptions::default();
        let block_cache = match flavour {
            RocksFlavour::Tuned => cache_bytes / 12 * 7,
            RocksFlavour::Defaults | RocksFlavour::Direct => cache_bytes,
        };
        table.set_block_cache(&rocksdb::Cache::new_lru_cache(block_cache as usize));
        if flavour == RocksFlavour::Tuned {
            table.set_cache_index_and_filter_blocks(true);
            opts.set_write_buffer_size(16 << 20);
            opts.set_max_write_buffer_number(2);
        }
        opts.set_block_based_table_factory(&table);
        if flavour == RocksFlavour::Direct {
            opts.set_use_direct_reads(true);
            opts.set_use_direct_io_for_flush_and_compaction(true);
        }
        let txn_opts = rocksdb::TransactionDBOptions::default();
        let db = rocksdb::TransactionDB::<rocksdb::MultiThreaded>::open(&opts, &txn_opts, dir)
            .context("open RocksDB")?;
        let mut write = rocksdb::WriteOptions::default();
        write.set_sync(!load);
        Ok(Rocks { db, write })
    }
}

#[cfg(feature = "peer-rocksdb")]
struct RocksTxn<'a> {
    t: rocksdb::Transaction<'a, rocksdb::TransactionDB<rocksdb::MultiThreaded>>,
}

#[cfg(feature = "peer-rocksdb")]
impl TxnOps for RocksTxn<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.t.get_for_update(key, true)?)
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.t.put(key, value)?)
    }
}

#[cfg(feature = "peer-rocksdb")]
fn retryable(e: &anyhow::Error) -> bool {
    e.downcast_ref::<rocksdb::Error>().is_some_and(|e| {
        matches!(
            e.kind(),
            rocksdb::ErrorKind::Busy | rocksdb::ErrorKind::TimedOut | rocksdb::ErrorKind::TryAgain
        )
    })
}

#[cfg(feature = "peer-rocksdb")]
impl Store for Rocks {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(key)?)
    }

    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let mode = rocksdb::IteratorMode::From(from, rocksdb::Direction::Forward);
        let entries = self
            .db
            .iterator(mode)
            .take_while(|kv| kv.as_ref().map_or(true, |(k, _)| &**k < to));
        visit_entries(entries, limit, visit)
    }

    fn transact(&self, body: &mut dyn FnMut(&mut dyn TxnOps) -> Result<()>) -> Result<()> {
        loop {
            let mut t = RocksTxn {
                t: self
                    .db
                    .transaction_opt(&self.write, &rocksdb::TransactionOptions::default()),
            };
            let r = body(&mut t).and_then(|()| Ok(t.t.commit()?));
            match r {
                Err(e) if retryable(&e) => continue,
                r => return r,
            }
        }
    }

    fn finish_load(&self) -> Result<()> {
        let mut sync = rocksdb::WriteOptions::default();
        sync.set_sync(true);
        let mut batch = rocksdb::WriteBatchWithTransaction::<true>::default();
        batch.put(b"\x00load-complete", b"1");
        Ok(self.db.write_opt(batch, &sync)?)
    }

    fn stats(&self) -> serde_json::Value {
        let int = |name: &str| self.db.property_int_value(name).ok().flatten();
        serde_json::json!({
            "block_cache_usage": int("rocksdb.block-cache-usage"),
            "memtables_bytes": int("rocksdb.cur-size-all-mem-tables"),
            "table_readers_bytes": int("rocksdb.estimate-table-readers-mem"),
            "live_sst_bytes": int("rocksdb.live-sst-files-size"),
        })
    }
}

#[cfg(feature = "peer-lmdb")]
type Bytes = heed::types::Bytes;

#[cfg(feature = "peer-lmdb")]
struct Lmdb {
    env: heed::Env,
    db: heed::Database<Bytes, Bytes>,
}

#[cfg(feature = "peer-lmdb")]
impl Lmdb {
    fn open(dir: &Path, load: bool) -> Result<Lmdb> {
        let mut o = heed::EnvOpenOptions::new();
        // Address space, not memory: the map grows the file as data arrives.
        o.map_size(256 << 30).max_dbs(1).max_readers(512);
        if load {
            // SAFETY: NO_SYNC only defers durability; the load ends with
            // force_sync before the data is used.
            unsafe { o.flags(heed::EnvFlags::NO_SYNC) };
        }
        // SAFETY: the directory is this benchmark's own, opened by one process
        // at a time, and the environment is opened once per process.
        let env = unsafe { o.open(dir) }.context("open LMDB")?;
        let mut w = env.write_txn()?;
        let db = env.create_database(&mut w, None)?;
        w.commit()?;
        Ok(Lmdb { env, db })
    }
}

#[cfg(feature = "peer-lmdb")]
struct LmdbTxn<'a> {
    w: heed::RwTxn<'a>,
    db: heed::Database<Bytes, Bytes>,
}

#[cfg(feature = "peer-lmdb")]
impl TxnOps for LmdbTxn<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(&self.w, key)?.map(<[u8]>::to_vec))
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put(&mut self.w, key, value)?)
    }
}

#[cfg(feature = "peer-lmdb")]
impl Store for Lmdb {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let r = self.env.read_txn()?;
        Ok(self.db.get(&r, key)?.map(<[u8]>::to_vec))
    }

    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let r = self.env.read_txn()?;
        let range = (Bound::Included(from), Bound::Excluded(to));
        let n = visit_entries(self.db.range(&r, &range)?, limit, visit)?;
        Ok(n)
    }

    fn transact(&self, body: &mut dyn FnMut(&mut dyn TxnOps) -> Result<()>) -> Result<()> {
        let mut t = LmdbTxn {
            w: self.env.write_txn()?,
            db: self.db,
        };
        body(&mut t)?;
        Ok(t.w.commit()?)
    }

    fn finish_load(&self) -> Result<()> {
        Ok(self.env.force_sync()?)
    }

    fn stats(&self) -> serde_json::Value {
        let info = self.env.info();
        serde_json::json!({ "map_size": info.map_size, "last_page_number": info.last_page_number })
    }
}

#[cfg(feature = "peer-sqlite")]
struct Sqlite {
    conns: Mutex<Vec<rusqlite::Connection>>,
    path: std::path::PathBuf,
    cache_kib: u64,
    load: bool,
}

/// SQLite connections share nothing, so the cache is split over this many.
#[cfg(feature = "peer-sqlite")]
const SQLITE_CONNECTIONS: u64 = 8;

#[cfg(feature = "peer-sqlite")]
impl Sqlite {
    fn open(dir: &Path, cache_bytes: u64, load: bool) -> Result<Sqlite> {
        let s = Sqlite {
            conns: Mutex::new(Vec::new()),
            path: dir.join("bench.sqlite"),
            cache_kib: (cache_bytes / SQLITE_CONNECTIONS / 1024).max(64),
            load,
        };
        let c = s.connect()?;
        c.execute_batch(
            "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID",
        )?;
        s.give_back(c);
        Ok(s)
    }

    fn connect(&self) -> Result<rusqlite::Connection> {
        let c = rusqlite::Connection::open(&self.path).context("open SQLite")?;
        c.busy_timeout(std::time::Duration::from_secs(60))?;
        c.execute_batch(&format!(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous={}; PRAGMA cache_size=-{};",
            if self.load { "OFF" } else { "FULL" },
            self.cache_kib
        ))?;
        Ok(c)
    }

    fn take(&self) -> Result<rusqlite::Connection> {
        let pooled = self.conns.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match pooled {
            Some(c) => Ok(c),
            None => self.connect(),
        }
    }

    fn give_back(&self, c: rusqlite::Connection) {
        self.conns.lock().unwrap_or_else(|p| p.into_inner()).push(c);
    }
}

#[cfg(feature = "peer-sqlite")]
struct SqliteTxn<'a> {
    c: &'a rusqlite::Connection,
}

#[cfg(feature = "peer-sqlite")]
fn sqlite_get(c: &rusqlite::Connection, key: &[u8]) -> Result<Option<Vec<u8>>> {
    use rusqlite::OptionalExtension;
    let mut st = c.prepare_cached("SELECT v FROM kv WHERE k = ?1")?;
    Ok(st.query_row([key], |r| r.get(0)).optional()?)
}

#[cfg(feature = "peer-sqlite")]
impl TxnOps for SqliteTxn<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        sqlite_get(self.c, key)
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut st = self
            .c
            .prepare_cached("INSERT OR REPLACE INTO kv (k, v) VALUES (?1, ?2)")?;
        st.execute(rusqlite::params![key, value])?;
        Ok(())
    }
}

#[cfg(feature = "peer-sqlite")]
impl Store for Sqlite {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let c = self.take()?;
        let r = sqlite_get(&c, key);
        self.give_back(c);
        r
    }

    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let c = self.take()?;
        let r = (|| -> Result<usize> {
            let mut st = c.prepare_cached(
                "SELECT k, v FROM kv WHERE k >= ?1 AND k < ?2 ORDER BY k LIMIT ?3",
            )?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let mut rows = st.query(rusqlite::params![from, to, limit])?;
            let mut n = 0;
            while let Some(row) = rows.next()? {
                let k: Vec<u8> = row.get(0)?;
                let v: Vec<u8> = row.get(1)?;
                visit(&k, &v);
                n += 1;
            }
            Ok(n)
        })();
        self.give_back(c);
        r
    }

    fn transact(&self, body: &mut dyn FnMut(&mut dyn TxnOps) -> Result<()>) -> Result<()> {
        let c = self.take()?;
        let r = (|| -> Result<()> {
            c.execute_batch("BEGIN IMMEDIATE")?;
            let mut t = SqliteTxn { c: &c };
            match body(&mut t) {
                Ok(()) => Ok(c.execute_batch("COMMIT")?),
                Err(e) => {
                    let _ = c.execute_batch("ROLLBACK");
                    Err(e)
                }
            }
        })();
        self.give_back(c);
        r
    }

    fn finish_load(&self) -> Result<()> {
        let c = self.take()?;
        let r = c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
        self.give_back(c);
        Ok(r?)
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({ "cache_kib_per_connection": self.cache_kib })
    }
}
