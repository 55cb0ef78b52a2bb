//! The memory a snapshot install costs: a leader node with a small cache
//! holds a state many times the cache, its log is purged behind
//! snapshots, and a fresh node added as a learner must install a snapshot
//! to catch up. Prints the state's size, the cache, each process's peak
//! resident set (`VmHWM` in /proc/PID/status; the leader's is reset
//! before the learner is added, so it is the transfer's), the transfer's
//! time, and whether the learner's peak is within `--bound` times the
//! cache. Exits non-zero when it is not, or when the replicas differ.
//!
//! ```text
//! cargo build --release -p directkv-raft-node --examples
//! target/release/examples/snapshot_memory --exe target/release/directkv-raft-node \
//!     --dir /tmp/snapmem --cache-mib 32 --state-mib 256
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use directkv_raft::Request;
use directkv_raft_node::api::NodeState;
use directkv_raft_node::client::Client;
use directkv_raft_node::cluster::{Cluster, NodeArgs};

#[derive(Parser)]
struct Args {
    /// The node program.
    #[arg(long)]
    exe: PathBuf,
    /// Where the two nodes' databases and logs go (must not exist).
    #[arg(long)]
    dir: PathBuf,
    /// Each node's database cache, in MiB.
    #[arg(long, default_value_t = 32)]
    cache_mib: usize,
    /// Bytes of values the leader holds, in MiB.
    #[arg(long, default_value_t = 256)]
    state_mib: usize,
    /// Bytes per value, in KiB.
    #[arg(long, default_value_t = 256)]
    value_kib: usize,
    /// Entries applied between snapshots (the log is purged behind each).
    #[arg(long, default_value_t = 256)]
    snapshot_every: u64,
    /// The learner's peak resident set may be this many caches.
    #[arg(long, default_value_t = 1.3)]
    bound: f64,
}

/// Concurrent writers loading the state.
const WRITERS: usize = 8;

/// A line of /proc/PID/status, in KiB.
fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .with_context(|| format!("no {field} for {pid}"))?;
    let kib = line
        .split_whitespace()
        .nth(1)
        .with_context(|| format!("a bare {field}"))?;
    Ok(kib.parse()?)
}

/// Resets the peak resident set of `pid` to its current one.
fn reset_peak(pid: u32) -> anyhow::Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
    Ok(())
}

/// The state of the node at `addr`, asked again while its long read is
/// given up (snapshot builds and their cleanups write meanwhile).
async fn state(client: &Client, addr: &str) -> anyhow::Result<NodeState> {
    let mut tries = 0;
    loop {
        match client.state(addr).await {
            Ok(s) => return Ok(s),
            Err(e) if tries < 30 => {
                tries += 1;
                eprintln!("state of {addr}, again: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Puts `values` values of `value_bytes` through `WRITERS` clients.
async fn load(cluster: &Cluster, values: usize, value_bytes: usize) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let mut client = cluster.client();
        client.patience = Duration::from_secs(60);
        tasks.push(tokio::spawn(async move {
            for i in (w..values).step_by(WRITERS) {
                let req = Request::Put {
                    key: format!("key{i:08}").into_bytes(),
                    value: vec![(i % 251) as u8; value_bytes],
                };
                client
                    .write(&req)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.dir.exists() {
        bail!("{} exists", a.dir.display());
    }
    std::fs::create_dir_all(&a.dir)?;
    let value_bytes = a.value_kib << 10;
    let values = (a.state_mib << 20) / value_bytes;
    let args = NodeArgs {
        cache_mib: a.cache_mib,
        snapshot_every: a.snapshot_every,
        ..NodeArgs::default()
    };
    let mut cluster = Cluster::new(&a.exe, &a.dir, 2, args)?;
    cluster.start(1).await?;
    let mut client = cluster.client();
    client.patience = Duration::from_secs(120);
    let addr1 = cluster.addr(1).to_string();
    client
        .init([(1, addr1.clone())].into())
        .await
        .context("init")?;
    let started = Instant::now();
    load(&cluster, values, value_bytes).await?;
    // Small entries past the next snapshot: the log kept behind it, which
    // the learner gets after the snapshot, holds no large value.
    for i in 0..a.snapshot_every + 8 {
        let req = Request::Put {
            key: format!("tail{i:04}").into_bytes(),
            value: b"small".to_vec(),
        };
        client
            .write(&req)
            .await
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    let leader = state(&client, &addr1).await?;
    println!(
        "loaded {} values of {} KiB ({} MiB) in {:.1} s",
        leader.keys,
        a.value_kib,
        a.state_mib,
        started.elapsed().as_secs_f64()
    );
    let pid1 = cluster.pid(1).context("the leader runs")?;
    let leader_load_kib = status_kib(pid1, "VmHWM")?;
    reset_peak(pid1)?;
    cluster.start(2).await?;
    let addr2 = cluster.addr(2).to_string();
    let started = Instant::now();
    // Waits for the learner to catch up (again, if an answer times out).
    while client.add_learner(2, &addr2).await.is_err() {}
    let mut learner = state(&client, &addr2).await?;
    while learner.applied < leader.applied {
        tokio::time::sleep(Duration::from_millis(200)).await;
        learner = state(&client, &addr2).await?;
    }
    let took = started.elapsed();
    let pid2 = cluster.pid(2).context("the learner runs")?;
    let learner_kib = status_kib(pid2, "VmHWM")?;
    let leader_kib = status_kib(pid1, "VmHWM")?;
    let cache_kib = (a.cache_mib << 10) as u64;
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "cache {} MiB; state {} MiB ({:.1} caches)",
        a.cache_mib,
        a.state_mib,
        a.state_mib as f64 / a.cache_mib as f64
    );
    println!(
        "learner peak RSS {:.1} MiB ({:.2} caches)",
        mib(learner_kib),
        learner_kib as f64 / cache_kib as f64
    );
    println!(
        "leader peak RSS during the transfer {:.1} MiB ({:.2} caches); during the load {:.1} MiB",
        mib(leader_kib),
        leader_kib as f64 / cache_kib as f64,
        mib(leader_load_kib)
    );
    println!("learner caught up in {:.1} s", took.as_secs_f64());
    let leader_now = state(&client, &addr1).await?;
    if (learner.keys, learner.digest) != (leader_now.keys, leader_now.digest) {
        bail!("the replicas differ: {learner:?} and {leader_now:?}");
    }
    let limit = a.bound * cache_kib as f64;
    if learner_kib as f64 > limit {
        bail!(
            "the learner's peak RSS {:.1} MiB is over {:.1} MiB",
            mib(learner_kib),
            limit / 1024.0
        );
    }
    Ok(())
}
