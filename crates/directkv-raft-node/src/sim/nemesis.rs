//! The nemesis: random faults on cue, drawn from the seed. Every few
//! hundred simulated milliseconds it cuts the cluster in two, mends every
//! link, crashes a node or restarts one; when told to stop, it mends
//! everything and restarts every node it crashed.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use directkv_raft::NodeId;

use super::net::Net;
use super::{node, Events, Rng};

/// Everything the nemesis acts on.
pub(crate) struct Nemesis {
    pub(crate) net: Arc<Net>,
    pub(crate) root: PathBuf,
    pub(crate) ids: Vec<NodeId>,
    pub(crate) rng: Rng,
    pub(crate) events: Arc<Events>,
    /// Set when the clients are done.
    pub(crate) stop: Arc<AtomicBool>,
}

impl Nemesis {
    /// Acts until told to stop, then heals the cluster.
    pub(crate) async fn run(mut self) -> anyhow::Result<()> {
        let mut down = BTreeSet::new();
        while !self.stop.load(Ordering::Relaxed) {
            let pause = self.rng.range(100, 600);
            tokio::time::sleep(Duration::from_millis(pause)).await;
            match self.rng.range(0, 9) {
                0..=2 => self.partition(),
                3..=4 => {
                    self.net.heal();
                    self.events.log("heal every link".into());
                }
                5..=6 => self.crash_one(&mut down).await?,
                _ => self.restart_one(&mut down).await?,
            }
        }
        self.net.heal();
        for id in std::mem::take(&mut down) {
            node::start(&self.net, &self.root, id).await?;
            self.events.log(format!("restart node {id}"));
        }
        self.events.log("heal every link".into());
        assert!(
            self.ids.iter().all(|&id| self.net.up(id).is_some()),
            "every node is up at the end"
        );
        Ok(())
    }

    /// Cuts a random side off from the rest.
    fn partition(&mut self) {
        let n = self.ids.len() as u64;
        assert!(n >= 2, "a partition needs two nodes");
        // A non-empty proper subset, as a bit mask over the nodes.
        let mask = self.rng.range(1, (1 << n) - 2);
        let side: Vec<NodeId> = (self.ids.iter().enumerate())
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, &id)| id)
            .collect();
        let rest: Vec<NodeId> = (self.ids.iter().copied())
            .filter(|id| !side.contains(id))
            .collect();
        assert!(
            !side.is_empty() && !rest.is_empty(),
            "both sides have nodes"
        );
        self.net.heal();
        self.net.cut(&side, &rest);
        self.events.log(format!("partition {side:?} | {rest:?}"));
    }

    /// Crashes a random node that is up.
    async fn crash_one(&mut self, down: &mut BTreeSet<NodeId>) -> anyhow::Result<()> {
        let up: Vec<NodeId> = self
            .ids
            .iter()
            .copied()
            .filter(|i| !down.contains(i))
            .collect();
        if up.is_empty() {
            return Ok(());
        }
        let id = up[self.rng.range(0, up.len() as u64 - 1) as usize];
        let was_up = node::crash(&self.net, id).await?;
        assert!(was_up, "a node not marked down is up");
        down.insert(id);
        self.events.log(format!("crash node {id}"));
        Ok(())
    }

    /// Restarts a random node that is down.
    async fn restart_one(&mut self, down: &mut BTreeSet<NodeId>) -> anyhow::Result<()> {
        if down.is_empty() {
            return Ok(());
        }
        let at = self.rng.range(0, down.len() as u64 - 1) as usize;
        let id = down
            .iter()
            .copied()
            .nth(at)
            .expect("a node down at a drawn place");
        node::start(&self.net, &self.root, id).await?;
        down.remove(&id);
        self.events.log(format!("restart node {id}"));
        Ok(())
    }
}
