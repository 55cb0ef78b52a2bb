//! `directkv-raft-node`: run a node, a local cluster, client calls, or the
//! replication bench.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use directkv_raft::Request;
use directkv_raft_node::bench::{self, BenchOptions};
use directkv_raft_node::client::Client;
use directkv_raft_node::cluster::{Cluster, NodeArgs};
use directkv_raft_node::server::{self, NodeOptions};

#[derive(Parser)]
#[command(about = "A replicated key-value server on directkv and openraft")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct NodeFlags {
    /// Each node's database cache, in MiB.
    #[arg(long, default_value_t = 64)]
    cache_mib: usize,
    /// The leader's heartbeat, in milliseconds.
    #[arg(long, default_value_t = 100)]
    heartbeat_ms: u64,
    /// The election timeout's low end, in milliseconds (the high end is
    /// twice it).
    #[arg(long, default_value_t = 400)]
    election_ms: u64,
    /// Entries applied between snapshots (the log before one is purged).
    #[arg(long, default_value_t = 1000)]
    snapshot_every: u64,
}

impl NodeFlags {
    fn args(&self) -> NodeArgs {
        NodeArgs {
            cache_mib: self.cache_mib,
            heartbeat_ms: self.heartbeat_ms,
            election_ms: self.election_ms,
            snapshot_every: self.snapshot_every,
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs one node until interrupted.
    Serve {
        /// The node's id.
        #[arg(long)]
        id: u64,
        /// host:port to listen on (also the node's address in the cluster).
        #[arg(long)]
        addr: String,
        /// The node's database directory.
        #[arg(long)]
        dir: PathBuf,
        /// `ID=HOST:PORT`: send node ID's RPCs there instead of to its
        /// address in the cluster (a fault test's forwarder); repeatable.
        #[arg(long = "route", value_parser = parse_node)]
        routes: Vec<(u64, String)>,
        #[command(flatten)]
        node: NodeFlags,
    },
    /// Starts NODES node processes on loopback under DIR, makes them a
    /// cluster, prints their addresses, and runs until interrupted. DIR
    /// must hold no earlier cluster: the ports are new each run.
    Cluster {
        /// Where the nodes' databases and logs go.
        #[arg(long)]
        dir: PathBuf,
        /// How many nodes.
        #[arg(long, default_value_t = 3)]
        nodes: u64,
        #[command(flatten)]
        node: NodeFlags,
    },
    /// Makes a new cluster: `--node 1=127.0.0.1:21001 --node 2=…`, sent to
    /// the first.
    Init {
        /// id=host:port, once per member.
        #[arg(long = "node", required = true)]
        nodes: Vec<String>,
    },
    /// Sets KEY to VALUE through the leader.
    Put {
        /// Node addresses to try.
        #[arg(long = "at", required = true)]
        at: Vec<String>,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Reads KEY linearizably.
    Get {
        /// Node addresses to try.
        #[arg(long = "at", required = true)]
        at: Vec<String>,
        /// The key.
        key: String,
    },
    /// Sets KEY to NEW if it is EXPECTED ("-" for absent).
    Cas {
        /// Node addresses to try.
        #[arg(long = "at", required = true)]
        at: Vec<String>,
        /// The key.
        key: String,
        /// The value it must have, or "-" for none.
        expected: String,
        /// Its new value, or "-" to delete it.
        new: String,
    },
    /// Adds node ID at ADDR as a learner (it catches up before this returns).
    AddLearner {
        /// Node addresses to try.
        #[arg(long = "at", required = true)]
        at: Vec<String>,
        /// The new node's id.
        id: u64,
        /// Its address.
        addr: String,
    },
    /// Makes these node ids the voters (promoting learners).
    ChangeMembership {
        /// Node addresses to try.
        #[arg(long = "at", required = true)]
        at: Vec<String>,
        /// The voters.
        #[arg(required = true)]
        ids: Vec<u64>,
    },
    /// Replicated durable writes/s and latency with 1, 8 and 64 clients on
    /// three local nodes, one node, and one database without replication.
    Bench {
        /// Where the databases go (emptied first).
        #[arg(long, default_value = "directkv-raft-bench")]
        dir: PathBuf,
        /// Client counts.
        #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
        clients: Vec<usize>,
        /// Seconds per row.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Bytes per value.
        #[arg(long, default_value_t = 100)]
        value_bytes: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        node: NodeFlags,
    },
}

fn optional(s: &str) -> Option<Vec<u8>> {
    (s != "-").then(|| s.as_bytes().to_vec())
}

fn parse_node(n: &str) -> anyhow::Result<(u64, String)> {
    let (id, addr) = n.split_once('=').context("expected id=host:port")?;
    Ok((
        id.parse().context("a node id is a number")?,
        addr.to_string(),
    ))
}

fn parse_nodes(nodes: &[String]) -> anyhow::Result<BTreeMap<u64, String>> {
    nodes.iter().map(|n| parse_node(n)).collect()
}

/// Makes the allocator hand every buffer of 128 KiB or more back to the
/// system when it is freed. glibc otherwise raises that threshold to the
/// largest buffer freed so far (up to 32 MiB) and keeps freed buffers in
/// its per-thread arenas: a node passing 1 MiB snapshot chunks and 4 MiB
/// appends between its threads would hold tens of MiB it no longer uses,
/// on top of the cache.
fn release_freed_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt sets one allocator parameter under the
        // allocator's own locks; it touches no memory of ours.
        let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10) };
        assert_eq!(ok, 1, "glibc accepts a 128 KiB mmap threshold");
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Serve {
            id,
            addr,
            dir,
            routes,
            node,
        } => {
            release_freed_buffers();
            server::serve(NodeOptions {
                id,
                addr,
                dir,
                cache_bytes: node.cache_mib << 20,
                heartbeat: Duration::from_millis(node.heartbeat_ms),
                election_timeout: Duration::from_millis(node.election_ms),
                snapshot_every: node.snapshot_every,
                routes: routes.into_iter().collect(),
            })
            .await
        }
        Cmd::Cluster { dir, nodes, node } => run_cluster(dir, nodes, node.args()).await,
        Cmd::Bench {
            dir,
            clients,
            seconds,
            value_bytes,
            json,
            node,
        } => {
            let opts = BenchOptions {
                clients,
                seconds,
                value_bytes,
                dir,
                exe: std::env::current_exe()?,
                node: node.args(),
            };
            run_bench(opts, json).await
        }
        cmd => run_client(cmd).await,
    }
}

/// The client commands.
async fn run_client(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Init { nodes } => {
            let nodes = parse_nodes(&nodes)?;
            Client::new(nodes.values().cloned().collect())
                .init(nodes)
                .await
        }
        Cmd::Put { at, key, value } => {
            let req = Request::Put {
                key: key.into_bytes(),
                value: value.into_bytes(),
            };
            let w = Client::new(at).write(&req).await?;
            println!("{}", serde_json::to_string(&w)?);
            Ok(())
        }
        Cmd::Get { at, key } => {
            let v = Client::new(at).read(key.as_bytes()).await?;
            match v {
                Some(v) => println!("{}", String::from_utf8_lossy(&v)),
                None => println!("(absent)"),
            }
            Ok(())
        }
        Cmd::Cas {
            at,
            key,
            expected,
            new,
        } => {
            let req = Request::CompareAndSet {
                key: key.into_bytes(),
                expected: optional(&expected),
                new: optional(&new),
            };
            let w = Client::new(at).write(&req).await?;
            println!("{}", serde_json::to_string(&w)?);
            Ok(())
        }
        Cmd::AddLearner { at, id, addr } => {
            let index = Client::new(at).add_learner(id, &addr).await?;
            println!("learner {id} added at log index {index}");
            Ok(())
        }
        Cmd::ChangeMembership { at, ids } => {
            let ids: BTreeSet<u64> = ids.into_iter().collect();
            let index = Client::new(at).change_membership(ids.clone()).await?;
            println!("voters {ids:?} from log index {index}");
            Ok(())
        }
        Cmd::Serve { .. } | Cmd::Cluster { .. } | Cmd::Bench { .. } => {
            unreachable!("main runs the node, cluster and bench commands")
        }
    }
}

async fn run_bench(opts: BenchOptions, json: bool) -> anyhow::Result<()> {
    // Only a directory an earlier bench made (it holds the marker) is
    // emptied; any other must be new or empty.
    let dir = &opts.dir;
    let marker = dir.join(".directkv-raft-bench");
    if marker.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("emptying {}", dir.display()))?;
    } else if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        anyhow::bail!("{} is not empty and not a bench directory", dir.display());
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(&marker, b"")?;
    let rows = bench::run(&opts).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_rows(&rows);
    }
    Ok(())
}

fn print_rows(rows: &[bench::Row]) {
    println!(
        "{:<9} {:>7} {:>9} {:>10} {:>9} {:>9} {:>9} {:>10}",
        "setup", "clients", "writes", "writes/s", "p50 ms", "p99 ms", "max ms", "÷directkv"
    );
    for r in rows {
        let base = rows
            .iter()
            .find(|b| b.setup == "directkv" && b.clients == r.clients)
            .map_or(f64::NAN, |b| r.per_sec / b.per_sec);
        println!(
            "{:<9} {:>7} {:>9} {:>10.0} {:>9.2} {:>9.2} {:>9.2} {:>9.2}x",
            r.setup,
            r.clients,
            r.writes,
            r.per_sec,
            r.p50_us as f64 / 1e3,
            r.p99_us as f64 / 1e3,
            r.max_us as f64 / 1e3,
            base
        );
    }
}

async fn run_cluster(dir: PathBuf, nodes: u64, args: NodeArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&dir)?;
    let mut cluster = Cluster::new(&std::env::current_exe()?, &dir, nodes, args)?;
    for id in 1..=nodes {
        cluster.start(id).await?;
    }
    let mut client = cluster.client();
    // The nodes get new ports each run, so DIR must hold no earlier
    // cluster (its members' stored addresses would be stale).
    client.init(cluster.addrs().clone()).await?;
    let leader = cluster.leader(Duration::from_secs(30)).await?;
    let at: Vec<String> = cluster
        .addrs()
        .values()
        .map(|a| format!("--at {a}"))
        .collect();
    println!("{nodes} nodes; leader {leader}; logs in {}", dir.display());
    for (id, addr) in cluster.addrs() {
        println!("  node {id}: {addr}");
    }
    println!("try: directkv-raft-node put {} KEY VALUE", at.join(" "));
    tokio::signal::ctrl_c().await?;
    Ok(())
}
