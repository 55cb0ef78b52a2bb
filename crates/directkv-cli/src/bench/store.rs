//! The engines a workload runs on, behind one small interface: this engine
//! in each of its configurations and, with the `peers` feature, RocksDB, LMDB
//! and SQLite.

use std::path::Path;

use anyhow::{bail, Result};
use directkv::internals::io::{AioBackend, DirectIo, SyncVariant};
use directkv::{Database, Durability, Options};

/// One transaction's reads and writes.
pub trait TxnOps {
    /// The value of `key` as this transaction sees it.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Sets `key` to `value`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
}

/// A transactional ordered key-value store under benchmark.
pub trait Store: Send + Sync {
    /// The value of `key` (a read outside any write transaction).
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Visits up to `limit` entries with keys in `[from, to)` in key order.
    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize>;
    /// Runs `body` as one transaction and commits it (durably, unless the
    /// store was opened for loading). `body` may run again after a conflict.
    fn transact(&self, body: &mut dyn FnMut(&mut dyn TxnOps) -> Result<()>) -> Result<()>;
    /// Warms the cache with the pages of `keys` before a transaction that
    /// reads them (see `Database::prefetch`); engines whose writers run
    /// concurrently need nothing.
    fn prefetch(&self, _keys: &[&[u8]]) -> Result<()> {
        Ok(())
    }
    /// Makes everything loaded so far durable and compact (a checkpoint).
    fn finish_load(&self) -> Result<()>;
    /// The engine's own counters, as JSON.
    fn stats(&self) -> serde_json::Value;
}

/// Visits up to `limit` entries of `entries`; returns how many. Shared by the
/// engines' `scan`.
pub fn visit_entries<K, V, E>(
    entries: impl Iterator<Item = std::result::Result<(K, V), E>>,
    limit: usize,
    visit: &mut dyn FnMut(&[u8], &[u8]),
) -> Result<usize>
where
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
    anyhow::Error: From<E>,
{
    let mut n = 0;
    for kv in entries.take(limit) {
        let (k, v) = kv?;
        visit(k.as_ref(), v.as_ref());
        n += 1;
    }
    Ok(n)
}

/// What to open: the engine and its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Engine {
    /// This engine.
    Directkv {
        /// Direct I/O for data and WAL, or the page cache.
        direct: bool,
        /// WAL sync method; `None` is the engine's own choice.
        sync: Option<SyncVariant>,
        /// The engine's readahead for sequential scans.
        readahead: bool,
        /// The I/O scheduler's classes and pacing, or plain FIFO.
        scheduled: bool,
        /// The asynchronous I/O backend; `None` is the engine's default.
        aio: Option<AioBackend>,
        /// Full-page images in the WAL LZ4-compressed (the default) or whole.
        compress: bool,
    },
    /// RocksDB with sync writes.
    Rocksdb {
        /// `use_direct_reads` and `use_direct_io_for_flush_and_compaction`.
        direct: bool,
    },
    /// LMDB with durable commits.
    Lmdb,
    /// SQLite in WAL mode with synchronous=FULL.
    Sqlite,
}

impl Engine {
    /// Parses a configuration name: `direct`, `buffered`, `direct/<sync>`,
    /// `buffered/<sync>`, `rocksdb`, `rocksdb-direct`, `lmdb`, `sqlite`; this
    /// engine's names take the suffixes `-no-readahead`, `-fifo`, one of
    /// `-uring`, `-threads`, `-no-aio`, and `-whole-images` (in that order
    /// when several).
    pub fn parse(name: &str) -> Result<Engine> {
        let (base, sync) = match name.split_once('/') {
            Some((b, s)) => (
                b,
                Some(s.parse::<SyncVariant>().map_err(anyhow::Error::msg)?),
            ),
            None => (name, None),
        };
        let (base, compress) = match base.strip_suffix("-whole-images") {
            Some(b) => (b, false),
            None => (base, true),
        };
        let (base, aio) = if let Some(b) = base.strip_suffix("-no-aio") {
            (b, Some(AioBackend::Off))
        } else if let Some(b) = base.strip_suffix("-threads") {
            (b, Some(AioBackend::Threads))
        } else if let Some(b) = base.strip_suffix("-uring") {
            (b, Some(AioBackend::Uring))
        } else {
            (base, None)
        };
        let (base, scheduled) = match base.strip_suffix("-fifo") {
            Some(b) => (b, false),
            None => (base, true),
        };
        let (base, readahead) = match base.strip_suffix("-no-readahead") {
            Some(b) => (b, false),
            None => (base, true),
        };
        let plain = readahead && scheduled && aio.is_none() && compress;
        Ok(match base {
            "direct" => Engine::Directkv {
                direct: true,
                sync,
                readahead,
                scheduled,
                aio,
                compress,
            },
            "buffered" => Engine::Directkv {
                direct: false,
                sync,
                readahead,
                scheduled,
                aio,
                compress,
            },
            "rocksdb" if sync.is_none() && plain => Engine::Rocksdb { direct: false },
            "rocksdb-direct" if sync.is_none() && plain => Engine::Rocksdb { direct: true },
            "lmdb" if sync.is_none() && plain => Engine::Lmdb,
            "sqlite" if sync.is_none() && plain => Engine::Sqlite,
            _ => bail!(
                "unknown configuration {name:?}: use direct, buffered, direct/METHOD (a WAL sync method), \
                 direct-no-readahead, direct-fifo, direct-uring, direct-threads, direct-no-aio, \
                 direct-whole-images, \
                 rocksdb, \
                 rocksdb-direct, lmdb or sqlite"
            ),
        })
    }

    /// The name of the engine's data directory: configurations of one engine
    /// share one loaded data set.
    pub fn family(&self) -> &'static str {
        match self {
            Engine::Directkv { .. } => "directkv",
            Engine::Rocksdb { .. } => "rocksdb",
            Engine::Lmdb => "lmdb",
            Engine::Sqlite => "sqlite",
        }
    }

    /// Whether this build can run the engine.
    pub fn available(&self) -> Result<()> {
        match self {
            Engine::Directkv { .. } => Ok(()),
            _ if cfg!(feature = "peers") => Ok(()),
            _ => bail!(
                "{} is a peer engine: build with `cargo build --release --features peers` \
                 (RocksDB's bundled build takes ~30 minutes and needs libclang)",
                self.family()
            ),
        }
    }
}

/// Settings of this engine a run may override.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Tuning {
    /// Page size at creation.
    pub page_bytes: Option<u32>,
    /// Checkpoint distance in WAL bytes.
    pub checkpoint_wal_bytes: Option<u64>,
}

/// Opens `engine` in `dir`. `load` opens for bulk loading: commits need not
/// be durable until [`Store::finish_load`].
pub fn open(
    engine: &Engine,
    dir: &Path,
    cache_bytes: u64,
    tuning: &Tuning,
    load: bool,
) -> Result<Box<dyn Store>> {
    match engine {
        Engine::Directkv {
            direct,
            sync,
            readahead,
            scheduled,
            aio,
            compress,
        } => {
            let defaults = Options::default();
            let opts = Options {
                compress_page_images: *compress,
                page_bytes: tuning.page_bytes.unwrap_or(defaults.page_bytes),
                checkpoint_wal_bytes: tuning
                    .checkpoint_wal_bytes
                    .unwrap_or(defaults.checkpoint_wal_bytes),
                cache_bytes: cache_bytes as usize,
                readahead_pages: if *readahead {
                    defaults.readahead_pages
                } else {
                    0
                },
                direct_io: if *direct { DirectIo::On } else { DirectIo::Off },
                io_scheduler: directkv::internals::sched::SchedOptions {
                    mode: if *scheduled {
                        directkv::internals::sched::SchedMode::Classes
                    } else {
                        directkv::internals::sched::SchedMode::Fifo
                    },
                    ..defaults.io_scheduler
                },
                async_io: directkv::internals::io::AioOptions {
                    backend: aio.unwrap_or(defaults.async_io.backend),
                    ..defaults.async_io
                },
                wal_sync: *sync,
                durability: if load {
                    Durability::NoSyncNotDurable
                } else {
                    Durability::Sync
                },
                ..defaults
            };
            Ok(Box::new(DirectkvStore {
                db: Database::open(dir, opts)?,
            }))
        }
        #[cfg(feature = "peers")]
        other => super::peers::open(other, dir, cache_bytes, load),
        #[cfg(not(feature = "peers"))]
        other => {
            other.available()?;
            unreachable!("peer engines are available only with the peers feature")
        }
    }
}

/// This engine.
pub struct DirectkvStore {
    db: Database,
}

struct DirectkvTxn<'a> {
    w: directkv::WriteTxn<'a>,
}

impl TxnOps for DirectkvTxn<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.w.get(key)?)
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.w.put(key, value)?)
    }
}

impl Store for DirectkvStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.begin_read()?.get(key)?)
    }

    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let r = self.db.begin_read()?;
        visit_entries(r.range(from..to), limit, visit)
    }

    fn transact(&self, body: &mut dyn FnMut(&mut dyn TxnOps) -> Result<()>) -> Result<()> {
        let mut t = DirectkvTxn {
            w: self.db.begin_write()?,
        };
        body(&mut t)?;
        t.w.commit()?;
        Ok(())
    }

    fn prefetch(&self, keys: &[&[u8]]) -> Result<()> {
        Ok(self.db.prefetch(keys)?)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_names_take_their_suffixes_in_the_documented_order() {
        let e = Engine::parse("direct-no-readahead-fifo-threads-whole-images/fdatasync")
            .expect("every suffix, then a sync method");
        assert!(
            matches!(
                e,
                Engine::Directkv {
                    direct: true,
                    sync: Some(_),
                    readahead: false,
                    scheduled: false,
                    aio: Some(AioBackend::Threads),
                    compress: false,
                }
            ),
            "{e:?}"
        );
        assert!(matches!(
            Engine::parse("buffered"),
            Ok(Engine::Directkv { direct: false, .. })
        ));
        // Out of order, a suffix is not recognised.
        assert!(Engine::parse("direct-fifo-no-readahead").is_err());
        assert!(Engine::parse("rocksdb-fifo").is_err());
        assert!(Engine::parse("direct/no-such-method").is_err());
    }
}
