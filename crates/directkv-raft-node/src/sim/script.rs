//! Scripted schedules: a simulated cluster that a test drives step by
//! step (partitions and muted links on cue, elections started by hand,
//! client operations at chosen nodes), for sequences random faults reach
//! too rarely. Everything runs as in a random run: one thread, paused
//! time, one seed.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use directkv_raft::{NodeId, Raft, Request};
use openraft::BasicNode;

use super::net::{Faults, Net};
use super::{client, node, Rng};
use crate::history::{History, Op, Outcome, Record};

/// Runs `f` as the simulation runs a seed: on one thread, in paused
/// time, the runtime's own random choices drawn from `seed`.
///
/// # Errors
/// The runtime cannot be built.
pub fn block_on<F: Future>(seed: u64, f: F) -> anyhow::Result<F::Output> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    #[cfg(not(tokio_unstable))]
    let _ = seed;
    let runtime = builder
        .build()
        .context("building the simulation's runtime")?;
    let out = runtime.block_on(f);
    // Tasks still waiting (a stale message's delivery) end with the runtime.
    drop(runtime);
    Ok(out)
}

/// A simulated cluster driven by hand. Its network only delays (by 5 ms
/// a leg); no node starts an election by itself.
#[derive(Clone)]
pub struct Script {
    net: Arc<Net>,
    root: PathBuf,
    ids: Vec<NodeId>,
    history: Arc<History>,
}

/// Tries of [`Script::elect`] before it gives up.
const ELECT_TRIES: u32 = 10;

impl Script {
    /// Starts nodes `1..=nodes` on directories under `root` and elects
    /// node 1. Call inside [`block_on`].
    ///
    /// # Errors
    /// A node's storage fails to open or start; node 1 is not elected.
    pub async fn start(seed: u64, nodes: u64, root: &Path) -> anyhow::Result<Script> {
        assert!(nodes >= 1, "a cluster has a node");
        let faults = Faults {
            delay_ms: (5, 5),
            ..Faults::none()
        };
        let net = Net::new(Rng::new(seed), faults);
        let ids: Vec<NodeId> = (1..=nodes).collect();
        for &id in &ids {
            node::start(&net, root, id).await?;
            net.up(id)
                .context("a node just started")?
                .raft
                .runtime_config()
                .elect(false);
        }
        let members: BTreeMap<NodeId, BasicNode> = (ids.iter())
            .map(|&id| (id, BasicNode::new(format!("sim-{id}"))))
            .collect();
        let script = Script {
            net,
            root: root.to_path_buf(),
            ids,
            history: Arc::new(History::with_runtime_clock()),
        };
        script.raft(1).initialize(members).await?;
        script.elect(1).await?;
        Ok(script)
    }

    /// Node `id`'s Raft.
    ///
    /// # Panics
    /// When the node is down.
    pub fn raft(&self, id: NodeId) -> Raft {
        self.net.up(id).expect("a scripted node is up").raft
    }

    /// The leader node `id` knows.
    pub fn leader_at(&self, id: NodeId) -> Option<NodeId> {
        self.raft(id).metrics().borrow().current_leader
    }

    /// The index of the last entry in node `id`'s log.
    pub fn last_log_at(&self, id: NodeId) -> Option<u64> {
        self.raft(id).metrics().borrow().last_log_index
    }

    /// Starts elections at node `id` until it leads (a voter may refuse
    /// while it still hears from a leader, or the first term it tries).
    ///
    /// # Errors
    /// It does not lead after 10 tries, 500 ms apart.
    pub async fn elect(&self, id: NodeId) -> anyhow::Result<()> {
        for _ in 0..ELECT_TRIES {
            if self.leader_at(id) == Some(id) {
                return Ok(());
            }
            self.raft(id).trigger().elect().await?;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        anyhow::ensure!(self.leader_at(id) == Some(id), "node {id} is not elected");
        Ok(())
    }

    /// Cuts every link between `a` and `b`, both ways.
    pub fn cut(&self, a: &[NodeId], b: &[NodeId]) {
        self.net.cut(a, b);
    }

    /// Loses the appends and snapshots `from` sends `to`; votes pass.
    pub fn mute_appends(&self, from: NodeId, to: NodeId) {
        self.net.mute_appends(from, to);
    }

    /// Mends every link.
    pub fn heal(&self) {
        self.net.heal();
    }

    /// Client `client`'s write of `req`, sent to node `at` and followed as
    /// a client follows the leader (sent again only after `NotLeader` or
    /// a node down), recorded; unknown after `patience`.
    pub async fn write(
        &self,
        client: u32,
        at: NodeId,
        req: Request,
        patience: Duration,
    ) -> Outcome {
        self.run(client, at, Op::Write(req), patience).await
    }

    /// Client `client`'s linearizable read of `key`, as [`Script::write`].
    pub async fn read(&self, client: u32, at: NodeId, key: &[u8], patience: Duration) -> Outcome {
        let op = Op::Read { key: key.to_vec() };
        self.run(client, at, op, patience).await
    }

    async fn run(&self, client: u32, at: NodeId, op: Op, patience: Duration) -> Outcome {
        assert!(self.ids.contains(&at), "a client sends to a member");
        let mut target = at;
        client::recorded(
            &self.net,
            &self.history,
            client,
            &self.ids,
            &mut target,
            op,
            patience,
        )
        .await
    }

    /// Every operation recorded so far.
    pub fn history(&self) -> Vec<Record> {
        self.history.records()
    }

    /// Stops every node.
    ///
    /// # Errors
    /// A Raft fails to stop.
    pub async fn stop(&self) -> anyhow::Result<()> {
        for &id in &self.ids {
            node::crash(&self.net, id).await?;
        }
        assert!(self.root.exists(), "the nodes' directories outlive them");
        Ok(())
    }
}
