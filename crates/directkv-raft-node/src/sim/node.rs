//! A simulated node's life: its storage opened on its own directory with
//! the database work inline (on the simulation's one thread), its Raft
//! over the simulated network, and a crash (its Raft stopped, its storage
//! dropped) then a restart on the same directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use directkv_raft::{Exec, NodeId, Raft};
use openraft::{Config, SnapshotPolicy};

use super::net::{Net, SimNetwork, Up};

/// The leader's heartbeat, in milliseconds.
pub(crate) const HEARTBEAT_MS: u64 = 50;

/// Election timeouts are drawn in this range, in milliseconds, one per
/// node and start.
pub(crate) const ELECTION_MS: (u64, u64) = (150, 300);

/// A snapshot every this many entries applied (then the log before it is
/// purged): a node that was down long catches up by a snapshot.
const SNAPSHOT_EVERY: u64 = 20;

/// Times a restart tries to open a directory whose last life still holds
/// it, [`OPEN_RETRY`] apart: a stopped Raft's tasks let go of its storage
/// as they end, the last when an RPC it sent times out (at most
/// `install_snapshot_timeout`).
const OPEN_ATTEMPTS: u32 = 6000;

/// The wait between two such attempts.
const OPEN_RETRY: Duration = Duration::from_millis(10);

/// The database options of a simulated node: small, buffered I/O (any
/// filesystem), `fdatasync` without measuring, nothing published.
fn db_options() -> directkv::Options {
    directkv::Options {
        cache_bytes: 8 << 20,
        direct_io: directkv::DirectIo::Off,
        wal_sync: Some(directkv::SyncVariant {
            method: directkv::SyncMethod::Fdatasync,
            direct: false,
        }),
        wal_segment_bytes: 1 << 20,
        wal_seal_delay: None,
        data_extend_bytes: 0,
        readahead_pages: 0,
        publish_stats: false,
        ..directkv::Options::default()
    }
}

/// openraft's configuration with this election timeout: openraft draws a
/// timeout in `min..max` from its own thread-local generator, so the
/// range holds one value, drawn from the seed by the caller.
fn config(election_ms: u64) -> anyhow::Result<Config> {
    assert!(
        election_ms > HEARTBEAT_MS,
        "a follower waits past a heartbeat"
    );
    let config = Config {
        cluster_name: "sim".into(),
        heartbeat_interval: HEARTBEAT_MS,
        election_timeout_min: election_ms,
        election_timeout_max: election_ms + 1,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY),
        max_in_snapshot_log_to_keep: SNAPSHOT_EVERY / 4,
        snapshot_max_chunk_size: 4096,
        max_payload_entries: 16,
        install_snapshot_timeout: 1000,
        ..Config::default()
    };
    Ok(config.validate()?)
}

/// The directory of node `id` under `root`.
pub(crate) fn dir_of(root: &Path, id: NodeId) -> PathBuf {
    root.join(format!("node-{id}"))
}

/// Opens node `id`'s storage under `root`, starts its Raft and marks it
/// up on `net`. A directory still held by the node's last life is tried
/// again a little later, in simulated time.
pub(crate) async fn start(net: &Arc<Net>, root: &Path, id: NodeId) -> anyhow::Result<()> {
    let election_ms = net.draw(|r| r.range(ELECTION_MS.0, ELECTION_MS.1));
    let dir = dir_of(root, id);
    let mut attempt = 0;
    let (log, sm) = loop {
        assert!(attempt < OPEN_ATTEMPTS, "the attempts are bounded");
        match directkv_raft::open_with(&dir, db_options(), Exec::Inline) {
            Ok(halves) => break halves,
            Err(directkv_raft::Error::Database(directkv::Error::DatabaseLocked { .. }))
                if attempt + 1 < OPEN_ATTEMPTS =>
            {
                attempt += 1;
                tokio::time::sleep(OPEN_RETRY).await;
            }
            Err(e) => return Err(e).with_context(|| format!("opening {}", dir.display())),
        }
    };
    let reader = sm.reader();
    let network = SimNetwork {
        net: net.clone(),
        from: id,
    };
    let raft = Raft::new(id, Arc::new(config(election_ms)?), network, log, sm).await?;
    net.set_up(id, Up { raft, reader });
    Ok(())
}

/// Crashes node `id`: it leaves the network and its Raft stops; what its
/// database committed survives (its log on disk), the rest of its memory
/// is gone. Returns whether it was up.
pub(crate) async fn crash(net: &Net, id: NodeId) -> anyhow::Result<bool> {
    let Some(up) = net.set_down(id) else {
        return Ok(false);
    };
    up.raft.shutdown().await.context("stopping a node's Raft")?;
    drop(up);
    Ok(true)
}
