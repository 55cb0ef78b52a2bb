//! Replicated durable writes against the same writes without replication.
//!
//! Each row runs `clients` concurrent writers for a fixed time; each puts
//! fresh keys with values of `value_bytes` and waits for each write's
//! acknowledgement before the next. The setups:
//! - `raft-3`: three node processes on loopback; a write is acknowledged
//!   once a majority logged it durably and the leader applied it;
//! - `raft-1`: one node process, the same path without a follower;
//! - `directkv`: one database in this process, a durable commit per write.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use directkv_raft::Request;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::cluster::{Cluster, NodeArgs};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Client counts, one row each per setup.
    pub clients: Vec<usize>,
    /// Seconds per row.
    pub seconds: u64,
    /// Bytes per value.
    pub value_bytes: usize,
    /// Where the databases go.
    pub dir: PathBuf,
    /// The node program.
    pub exe: PathBuf,
    /// How nodes run.
    pub node: NodeArgs,
}

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `raft-3`, `raft-1` or `directkv`.
    pub setup: String,
    /// Concurrent writers.
    pub clients: usize,
    /// Writes acknowledged.
    pub writes: u64,
    /// Writes acknowledged per second.
    pub per_sec: f64,
    /// Latency percentiles and maximum, in microseconds.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Maximum.
    pub max_us: u64,
}

fn row(setup: &str, clients: usize, h: &Histogram<u64>, elapsed: Duration) -> Row {
    Row {
        setup: setup.into(),
        clients,
        writes: h.len(),
        per_sec: h.len() as f64 / elapsed.as_secs_f64(),
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Runs every setup at every client count.
///
/// # Errors
/// A node does not start, a write fails, a database does not open.
pub async fn run(opts: &BenchOptions) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for nodes in [3u64, 1] {
        let dir = opts.dir.join(format!("raft-{nodes}"));
        std::fs::create_dir_all(&dir)?;
        let mut cluster = Cluster::new(&opts.exe, &dir, nodes, opts.node.clone())?;
        for id in 1..=nodes {
            cluster.start(id).await?;
        }
        cluster.client().init(cluster.addrs().clone()).await?;
        cluster.leader(Duration::from_secs(30)).await?;
        for &c in &opts.clients {
            let r = raft_row(&cluster, &format!("raft-{nodes}"), c, opts).await?;
            eprintln!("{r:?}");
            rows.push(r);
        }
    }
    for &c in &opts.clients {
        let r = single_row(opts, c)?;
        eprintln!("{r:?}");
        rows.push(r);
    }
    Ok(rows)
}

async fn raft_row(
    cluster: &Cluster,
    setup: &str,
    clients: usize,
    opts: &BenchOptions,
) -> anyhow::Result<Row> {
    let end = Instant::now() + Duration::from_secs(opts.seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let mut client = cluster.client();
        let value = vec![b'v'; opts.value_bytes];
        let tag = format!("{setup}-{clients}-{c}");
        tasks.push(tokio::spawn(async move {
            let mut h = histogram();
            let mut seq = 0u64;
            while Instant::now() < end {
                let req = Request::Put {
                    key: format!("{tag}-{seq}").into_bytes(),
                    value: value.clone(),
                };
                let t = Instant::now();
                client.write(&req).await?;
                h.saturating_record(t.elapsed().as_micros() as u64);
                seq += 1;
            }
            anyhow::Ok(h)
        }));
    }
    let mut all = histogram();
    for t in tasks {
        all.add(t.await??).context("merging histograms")?;
    }
    Ok(row(setup, clients, &all, start.elapsed()))
}

fn single_row(opts: &BenchOptions, clients: usize) -> anyhow::Result<Row> {
    let dir = opts.dir.join(format!("directkv-{clients}"));
    let db_opts = directkv::Options {
        cache_bytes: opts.node.cache_mib << 20,
        ..directkv::Options::default()
    };
    let db = Arc::new(directkv::Database::open(&dir, db_opts)?);
    let end = Instant::now() + Duration::from_secs(opts.seconds);
    let start = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let db = db.clone();
            let value = vec![b'v'; opts.value_bytes];
            std::thread::spawn(move || -> anyhow::Result<Histogram<u64>> {
                let mut h = histogram();
                let mut seq = 0u64;
                while Instant::now() < end {
                    let t = Instant::now();
                    let mut w = db.begin_write()?;
                    w.put(format!("directkv-{c}-{seq}").as_bytes(), &value)?;
                    w.commit()?;
                    h.saturating_record(t.elapsed().as_micros() as u64);
                    seq += 1;
                }
                Ok(h)
            })
        })
        .collect();
    let mut all = histogram();
    for t in threads {
        let h = t
            .join()
            .map_err(|_| anyhow::anyhow!("a writer panicked"))??;
        all.add(h).context("merging histograms")?;
    }
    Ok(row("directkv", clients, &all, start.elapsed()))
}
