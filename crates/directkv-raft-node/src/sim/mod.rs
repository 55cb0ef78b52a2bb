//! A deterministic simulation of a whole cluster in one process: N nodes
//! (openraft over [`directkv_raft`], each on its own directory), a
//! simulated network between them, clients recording a [`History`] and a
//! nemesis injecting faults, all on one thread in tokio's paused time and
//! all drawn from one seed, so that a seed reproduces a run exactly. The
//! history is judged by [`crate::lincheck`].
//!
//! What makes a run a function of its seed:
//!
//! - one current-thread runtime, time paused (it jumps to the next timer
//!   when every task waits), its own random choices (`tokio::select!`
//!   branches, watch channel wake-ups) seeded from the seed
//!   (`Builder::rng_seed`, which needs `--cfg tokio_unstable`: see
//!   [`deterministic`]);
//! - the storage's database work run inline ([`directkv_raft::Exec::Inline`]),
//!   not on threads whose completion would race with the simulation; the
//!   engine's own threads (WAL writer, checkpointer) change no result a
//!   commit or a read returns;
//! - each node's election timeout drawn from the seed, and given to
//!   openraft as a range of one value (openraft draws from its own
//!   thread-local generator);
//! - every other draw (delays, losses, the clients' operations, the
//!   nemesis) from [`Rng`], and ordered maps throughout.
//!
//! `docs/raft.md` says what the simulation models and what it does not.

mod client;
mod nemesis;
mod net;
mod node;
mod rng;
mod script;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use directkv_raft::NodeId;
use openraft::BasicNode;

pub use net::Faults;
pub use rng::Rng;
pub use script::{block_on, Script};

use crate::history::{History, Record};
use crate::lincheck::{self, Budget, Report};

/// Whether this build can run a seed deterministically: the runtime's
/// own random choices are seeded only when tokio is built with
/// `--cfg tokio_unstable` (the workspace's `.cargo/config.toml`).
pub fn deterministic() -> bool {
    cfg!(tokio_unstable)
}

/// How long, in simulated time, a healed cluster has to agree on one
/// state at the end of a run.
const SETTLE: Duration = Duration::from_secs(30);

/// What one run simulates.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// The seed: every choice of the run comes from it.
    pub seed: u64,
    /// Nodes, all voters (3 or 5).
    pub nodes: u64,
    /// Clients, each running one operation at a time.
    pub clients: u32,
    /// Operations per client.
    pub ops_per_client: u32,
    /// Keys the clients touch.
    pub keys: u32,
    /// Random faults: partitions, crashes and restarts, lost and
    /// duplicated messages. Off, the network only delays.
    pub faults: bool,
}

impl SimOptions {
    /// Three nodes, three clients of 25 operations on three keys, faults.
    pub fn new(seed: u64) -> Self {
        SimOptions {
            seed,
            nodes: 3,
            clients: 3,
            ops_per_client: 25,
            keys: 3,
            faults: true,
        }
    }
}

/// What a node holds at the end of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalState {
    /// The last log index it applied.
    pub applied: Option<u64>,
    /// Keys in its state machine.
    pub keys: u64,
    /// A CRC32C of every key and value, in order.
    pub digest: u32,
}

/// One run: what the clients saw, what the nemesis did, where the nodes
/// ended, and the checker's verdict.
#[derive(Debug, Clone)]
pub struct SimRun {
    /// Every client operation, stamped in simulated nanoseconds.
    pub history: Vec<Record>,
    /// The faults injected, in order, each with its simulated time.
    pub events: Vec<String>,
    /// Each node's state once the cluster was healed and had settled.
    pub finals: BTreeMap<NodeId, FinalState>,
    /// Whether every node reached the same state within the settling time.
    pub converged: bool,
    /// The linearizability checker's report on the history.
    pub report: Report,
    /// Simulated milliseconds the run took.
    pub simulated_ms: u64,
}

/// A log of what happened, stamped in simulated milliseconds.
pub(crate) struct Events {
    start: tokio::time::Instant,
    lines: Mutex<Vec<String>>,
}

impl Events {
    fn new() -> Self {
        Events {
            start: tokio::time::Instant::now(),
            lines: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn log(&self, what: String) {
        let ms = self.start.elapsed().as_millis();
        let mut lines = match self.lines.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        lines.push(format!("{ms} ms: {what}"));
    }

    fn lines(&self) -> Vec<String> {
        match self.lines.lock() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

/// Runs one simulation with its nodes' directories under `root` (empty,
/// or left by nothing else), and judges its history.
///
/// # Errors
/// A node's storage fails to open or start; the runtime cannot be built.
pub fn run(opts: &SimOptions, root: &Path) -> anyhow::Result<SimRun> {
    assert!(
        opts.nodes >= 1 && opts.nodes <= 9,
        "a cluster of 1 to 9 nodes"
    );
    let run = block_on(opts.seed, simulate(opts.clone(), root.to_path_buf()))??;
    Ok(run)
}

async fn simulate(opts: SimOptions, root: std::path::PathBuf) -> anyhow::Result<SimRun> {
    let start = tokio::time::Instant::now();
    let mut rng = Rng::new(opts.seed);
    let faults = if opts.faults {
        random_faults(&mut rng)
    } else {
        Faults::none()
    };
    let net = net::Net::new(rng.fork(), faults);
    let ids: Vec<NodeId> = (1..=opts.nodes).collect();
    for &id in &ids {
        node::start(&net, &root, id).await?;
    }
    let members: BTreeMap<NodeId, BasicNode> = (ids.iter())
        .map(|&id| (id, BasicNode::new(format!("sim-{id}"))))
        .collect();
    let first = net.up(ids[0]).expect("every node started");
    first.raft.initialize(members).await?;
    drop(first);
    let history = Arc::new(History::with_runtime_clock());
    let events = Arc::new(Events::new());
    let stop = Arc::new(AtomicBool::new(false));
    let nemesis = opts.faults.then(|| {
        let n = nemesis::Nemesis {
            net: net.clone(),
            root: root.clone(),
            ids: ids.clone(),
            rng: rng.fork(),
            events: events.clone(),
            stop: stop.clone(),
        };
        tokio::spawn(n.run())
    });
    run_clients(&opts, &net, &history, &ids, &mut rng).await?;
    stop.store(true, Ordering::Relaxed);
    if let Some(n) = nemesis {
        n.await.context("the nemesis task")??;
    }
    net.set_faults(Faults::none());
    let (finals, converged) = settle(&net, &ids).await?;
    for &id in &ids {
        node::crash(&net, id).await?;
    }
    let records = history.records();
    let report = lincheck::check(&records, Budget::default());
    Ok(SimRun {
        history: records,
        events: events.lines(),
        finals,
        converged,
        report,
        simulated_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// Runs the clients to the end of their operations.
async fn run_clients(
    opts: &SimOptions,
    net: &Arc<net::Net>,
    history: &Arc<History>,
    ids: &[NodeId],
    rng: &mut Rng,
) -> anyhow::Result<()> {
    let work = client::Workload {
        ops: opts.ops_per_client,
        keys: opts.keys,
    };
    let clients: Vec<_> = (0..opts.clients)
        .map(|c| {
            let task = client::run(
                net.clone(),
                history.clone(),
                c,
                ids.to_vec(),
                work,
                rng.fork(),
            );
            tokio::spawn(task)
        })
        .collect();
    for c in clients {
        c.await.context("a client task")?;
    }
    Ok(())
}

/// Fault settings drawn from the seed: delays up to 2 to 30 ms, up to
/// 5% of legs lost and 5% of appends and votes duplicated.
fn random_faults(rng: &mut Rng) -> Faults {
    let hi = rng.range(2, 30);
    let faults = Faults {
        delay_ms: (1, hi),
        drop_per_mille: rng.range(0, 50) as u32,
        dup_per_mille: rng.range(0, 50) as u32,
    };
    assert!(faults.delay_ms.0 <= faults.delay_ms.1, "delays are a range");
    faults
}

/// Waits, in simulated time, until every node has applied the same
/// entries and holds the same state (or [`SETTLE`] passes); returns each
/// node's state and whether they agree.
async fn settle(
    net: &net::Net,
    ids: &[NodeId],
) -> anyhow::Result<(BTreeMap<NodeId, FinalState>, bool)> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut finals = BTreeMap::new();
        for &id in ids {
            let up = net.up(id).context("a node is up at the end")?;
            let (applied, keys, digest) = up.reader.digest()?;
            let state = FinalState {
                applied: applied.map(|l| l.index),
                keys,
                digest,
            };
            finals.insert(id, state);
        }
        assert_eq!(finals.len(), ids.len(), "one state per node");
        let first = finals.values().next().cloned();
        let agree = finals.values().all(|f| Some(f) == first.as_ref());
        if agree || tokio::time::Instant::now() >= deadline {
            return Ok((finals, agree));
        }
    }
}
