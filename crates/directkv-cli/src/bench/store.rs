//! The engines a workload runs on, behind one small interface: this engine
//! in each of its configurations and, with the `peers` feature (or one of
//! `peer-rocksdb`, `peer-lmdb`, `peer-sqlite`), RocksDB, LMDB and SQLite.
//!
//! - Peer engines register themselves ([`register_peer`]) before any is
//!   opened; this module knows only their configuration names, so that a
//!   build without them can say which feature would add them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Result};
use directkv::{AioBackend, DirectIo, SyncVariant};
use directkv::{Database, Durability, Options, WriteOptions};
use serde::{Deserialize, Serialize};

/// One transaction's reads and writes.
pub trait TxnOps {
    /// The value of `key` as this transaction sees it.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Sets `key` to `value`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// The latest value of `key`, locked until the transaction ends (an
    /// UPDATE's row lock); engines without row locks read as `get`.
    fn get_for_update(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get(key)
    }
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
    /// Makes everything loaded so far durable and compact (a checkpoint).
    fn finish_load(&self) -> Result<()>;
    /// The engine's own counters, as JSON.
    fn stats(&self) -> serde_json::Value;
    /// Holds one read transaction from now until `done` is set, watching
    /// what keeping its snapshot costs; `None` for engines that do not
    /// report it.
    fn hold_snapshot(&self, _done: &AtomicBool) -> Result<Option<SnapshotHold>> {
        Ok(None)
    }
    /// Takes full online backups one after another until `done` is set,
    /// each removed once measured; `None` for engines or configurations
    /// that take none.
    fn backups(&self, _done: &AtomicBool) -> Result<Option<BackupLoad>> {
        Ok(None)
    }
}

/// What the backups taken through a run did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BackupLoad {
    /// Backups completed.
    pub completed: u64,
    /// Seconds they took, in all.
    pub seconds: f64,
    /// Bytes they copied (data file and log), in all.
    pub bytes: u64,
    /// The data file's size.
    pub data_bytes: u64,
    /// The most OS page cache one backup's files held right after it
    /// finished (what the backup added to the page cache).
    pub cached_bytes_max: u64,
    /// Pages read again, or taken as covered by the log, in all.
    pub pages_reread: u64,
    /// Incremental backups completed (each of the full backup before it).
    #[serde(default)]
    pub increments: u64,
    /// The last increment's data bytes (`data.incr`), against
    /// `data_bytes`.
    #[serde(default)]
    pub increment_data_bytes: u64,
    /// The last increment's pages changed since its parent's start.
    #[serde(default)]
    pub increment_pages: u64,
    /// Of those, the pages it stored as deltas.
    #[serde(default)]
    pub increment_deltas: u64,
    /// Seconds of load between the last increment's parent's start and its
    /// own.
    #[serde(default)]
    pub increment_after_seconds: f64,
}

/// What holding one read transaction through a run cost and how it ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SnapshotHold {
    /// Seconds it was held.
    pub held_seconds: f64,
    /// `kept`: its last read returned what its first did; `too_old`: the
    /// engine gave it up (`Error::SnapshotTooOld`).
    pub outcome: String,
    /// The most the version store held while it was open (sampled every
    /// 100 ms).
    pub version_store_peak_bytes: u64,
    /// The version store's cap.
    pub version_store_cap_bytes: u64,
    /// Snapshots the engine gave up during the run.
    pub snapshots_too_old: u64,
}

/// How often a held snapshot samples the version store.
const HOLD_SAMPLE: std::time::Duration = std::time::Duration::from_millis(100);

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
        /// One write transaction at a time (`Options::serial_writers`), the
        /// engine before concurrent transactions.
        serial: bool,
        /// Online backups back to back through the run, a full one then an
        /// increment of it in turn (`-backup`).
        backup: bool,
        /// The log's idle seal (`Options::wal_seal_delay` at its default),
        /// or seals only on close (`-no-seal`): the cost of the sealer
        /// thread, measured in one binary.
        seal: bool,
        /// The workload in one named table among
        /// [`own::BENCH_TABLES`] (`-table`), or in the default keyspace.
        table: bool,
    },
    /// A peer engine, by its configuration name (see [`PEER_CONFIGS`]).
    Peer {
        /// The configuration name: `rocksdb`, `rocksdb-direct`,
        /// `rocksdb-tuned`, `lmdb`, `sqlite`.
        config: &'static str,
        /// The engine: `rocksdb`, `lmdb`, `sqlite`.
        family: &'static str,
    },
}

/// The peer engines' configuration names: (configuration, engine, the
/// feature that builds it).
pub const PEER_CONFIGS: [(&str, &str, &str); 5] = [
    ("rocksdb", "rocksdb", "peer-rocksdb"),
    ("rocksdb-direct", "rocksdb", "peer-rocksdb"),
    ("rocksdb-tuned", "rocksdb", "peer-rocksdb"),
    ("lmdb", "lmdb", "peer-lmdb"),
    ("sqlite", "sqlite", "peer-sqlite"),
];

/// Opens a peer's configuration `config` in `dir` with `cache_bytes` of
/// cache; `load` opens for bulk loading (see [`open`]).
pub type PeerOpen =
    fn(config: &str, dir: &Path, cache_bytes: u64, load: bool) -> Result<Box<dyn Store>>;

/// A peer engine this build includes, as its module registers it.
#[derive(Clone, Copy)]
pub struct Peer {
    /// The configuration names it opens.
    pub configs: &'static [&'static str],
    /// How to open one.
    pub open: PeerOpen,
}

/// Every registered peer.
static PEERS: Mutex<Vec<Peer>> = Mutex::new(Vec::new());

/// Makes `peer`'s configurations available to `open`.
#[cfg_attr(
    not(any(
        feature = "peer-rocksdb",
        feature = "peer-lmdb",
        feature = "peer-sqlite"
    )),
    allow(dead_code)
)]
pub fn register_peer(peer: Peer) {
    assert!(
        peer.configs
            .iter()
            .all(|c| PEER_CONFIGS.iter().any(|(name, _, _)| name == c)),
        "a peer registers only the configuration names listed in PEER_CONFIGS"
    );
    let mut peers = PEERS.lock().unwrap_or_else(|p| p.into_inner());
    if !peers.iter().any(|p| p.configs == peer.configs) {
        peers.push(peer);
    }
}

/// The registered peer that opens `config`.
fn registered_peer(config: &str) -> Option<Peer> {
    let peers = PEERS.lock().unwrap_or_else(|p| p.into_inner());
    peers.iter().copied().find(|p| p.configs.contains(&config))
}

/// `base` without `suffix`, and whether it had it.
fn suffix<'a>(base: &'a str, suffix: &str) -> (&'a str, bool) {
    match base.strip_suffix(suffix) {
        Some(b) => (b, true),
        None => (base, false),
    }
}

impl Engine {
    /// Parses a configuration name: `direct`, `buffered`, `direct/<sync>`,
    /// `buffered/<sync>`, `rocksdb`, `rocksdb-direct`, `rocksdb-tuned`,
    /// `lmdb`, `sqlite`; this engine's names take the suffixes
    /// `-no-readahead`, `-fifo`, one of
    /// `-uring`, `-threads`, `-no-aio`, `-whole-images`, `-serial`,
    /// `-backup`, `-no-seal` and `-table` (in that order when several).
    pub fn parse(name: &str) -> Result<Engine> {
        let (base, sync) = match name.split_once('/') {
            Some((b, s)) => (
                b,
                Some(s.parse::<SyncVariant>().map_err(anyhow::Error::msg)?),
            ),
            None => (name, None),
        };
        let (base, table) = suffix(base, "-table");
        let (base, without) = suffix(base, "-no-seal");
        let seal = !without;
        let (base, backup) = suffix(base, "-backup");
        let (base, serial) = suffix(base, "-serial");
        let (base, without) = suffix(base, "-whole-images");
        let compress = !without;
        let (base, aio) = if let Some(b) = base.strip_suffix("-no-aio") {
            (b, Some(AioBackend::Off))
        } else if let Some(b) = base.strip_suffix("-threads") {
            (b, Some(AioBackend::Threads))
        } else if let Some(b) = base.strip_suffix("-uring") {
            (b, Some(AioBackend::Uring))
        } else {
            (base, None)
        };
        let (base, without) = suffix(base, "-fifo");
        let scheduled = !without;
        let (base, without) = suffix(base, "-no-readahead");
        let readahead = !without;
        let plain = readahead
            && scheduled
            && aio.is_none()
            && compress
            && !serial
            && !backup
            && seal
            && !table;
        Ok(match base {
            "direct" => Engine::Directkv {
                direct: true,
                sync,
                readahead,
                scheduled,
                aio,
                compress,
                serial,
                backup,
                seal,
                table,
            },
            "buffered" => Engine::Directkv {
                direct: false,
                sync,
                readahead,
                scheduled,
                aio,
                compress,
                serial,
                backup,
                seal,
                table,
            },
            peer if sync.is_none() && plain => match PEER_CONFIGS.iter().find(|p| p.0 == peer) {
                Some(&(config, family, _)) => Engine::Peer { config, family },
                None => bail!("unknown configuration {name:?}: {}", CONFIG_NAMES),
            },
            _ => bail!("unknown configuration {name:?}: {}", CONFIG_NAMES),
        })
    }

    /// The name of the engine's data directory: configurations of one engine
    /// share one loaded data set.
    pub fn family(&self) -> &'static str {
        match self {
            Engine::Directkv { .. } => "directkv",
            Engine::Peer { family, .. } => family,
        }
    }

    /// The name of the configuration's loaded data set: its engine's,
    /// apart for a workload in a named table (`-table`), whose database
    /// holds the tables too.
    pub fn data_name(&self) -> String {
        match self {
            Engine::Directkv { table: true, .. } => format!("{}-tables", self.family()),
            _ => self.family().to_string(),
        }
    }

    /// Whether this build can run the engine.
    pub fn available(&self) -> Result<()> {
        match self {
            Engine::Directkv { .. } => Ok(()),
            Engine::Peer { config, .. } if registered_peer(config).is_some() => Ok(()),
            Engine::Peer { config, family } => {
                let feature = PEER_CONFIGS
                    .iter()
                    .find(|p| p.0 == *config)
                    .map_or("peers", |p| p.2);
                bail!(
                    "{family} is a peer engine this build lacks: build with \
                     `cargo build --release --features peers` (all peers; RocksDB's bundled \
                     build takes ~30 minutes and needs libclang) or `--features {feature}`"
                )
            }
        }
    }
}

/// What `--compare` accepts, for the error that names a wrong one.
const CONFIG_NAMES: &str = "use direct, buffered, direct/METHOD (a WAL sync method), \
     direct-no-readahead, direct-fifo, direct-uring, direct-threads, direct-no-aio, \
     direct-whole-images, direct-serial (one writer at a time), direct-backup (backups back to \
     back through the run, a full one then an increment of it), direct-no-seal (the log \
     sealed only on close), direct-table (the workload in one of 10,000 named tables), rocksdb, rocksdb-direct, \
     rocksdb-tuned (sized to fit a memory budget), lmdb, sqlite, or for tpcb postgres \
     (also called pgbench)";

/// Settings of this engine a run may override.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Tuning {
    /// Page size at creation.
    pub page_bytes: Option<u32>,
    /// Checkpoint distance in WAL bytes.
    pub checkpoint_wal_bytes: Option<u64>,
}

/// This engine's options for the configuration `engine`.
fn directkv_options(
    engine: &Engine,
    cache_bytes: u64,
    tuning: &Tuning,
    load: bool,
) -> Result<Options> {
    let Engine::Directkv {
        direct,
        sync,
        readahead,
        scheduled,
        aio,
        compress,
        serial,
        seal,
        ..
    } = engine
    else {
        unreachable!("only this engine's configurations have its options")
    };
    let defaults = Options::default();
    let opts = Options {
        compress_page_images: *compress,
        serial_writers: *serial,
        wal_seal_delay: if *seal { defaults.wal_seal_delay } else { None },
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
        io_scheduler: directkv::SchedOptions {
            mode: if *scheduled {
                directkv::SchedMode::Classes
            } else {
                directkv::SchedMode::Fifo
            },
            ..defaults.io_scheduler
        },
        // DIRECTKV_IO_BACKEND, where set, wins over the configuration.
        async_io: directkv::AioOptions {
            backend: aio.unwrap_or(defaults.async_io.backend),
            ..defaults.async_io
        }
        .with_env_override()?,
        wal_sync: *sync,
        durability: if load {
            Durability::NoSyncNotDurable
        } else {
            Durability::Sync
        },
        ..defaults
    };
    Ok(opts)
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
        Engine::Directkv { backup, table, .. } => {
            let opts = directkv_options(engine, cache_bytes, tuning, load)?;
            let db = Database::open(dir, opts)?;
            Ok(Box::new(DirectkvStore::new(
                db,
                *table,
                *backup && !load,
                dir,
            )?))
        }
        Engine::Peer { config, .. } => match registered_peer(config) {
            Some(peer) => (peer.open)(config, dir, cache_bytes, load),
            None => engine
                .available()
                .and_then(|()| bail!("{config}: not registered")),
        },
    }
}

mod own;
pub use own::DirectkvStore;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_names_take_their_suffixes_in_the_documented_order() {
        let e = Engine::parse("direct-no-readahead-fifo-threads-whole-images-serial/fdatasync")
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
                    serial: true,
                    backup: false,
                    seal: true,
                    table: false,
                }
            ),
            "{e:?}"
        );
        assert!(matches!(
            Engine::parse("buffered"),
            Ok(Engine::Directkv {
                direct: false,
                seal: true,
                ..
            })
        ));
        assert!(matches!(
            Engine::parse("direct-no-seal-table"),
            Ok(Engine::Directkv {
                seal: false,
                table: true,
                ..
            })
        ));
        assert!(matches!(
            Engine::parse("direct-serial-no-seal"),
            Ok(Engine::Directkv {
                serial: true,
                seal: false,
                ..
            })
        ));
        // Out of order, a suffix is not recognised.
        assert!(Engine::parse("direct-fifo-no-readahead").is_err());
        assert!(Engine::parse("rocksdb-fifo").is_err());
        for peer in ["rocksdb-direct", "rocksdb-tuned"] {
            assert_eq!(
                Engine::parse(peer).expect("a peer's name").family(),
                "rocksdb"
            );
        }
        assert!(Engine::parse("direct/no-such-method").is_err());
    }
}
