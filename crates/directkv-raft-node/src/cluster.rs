//! Node processes on this machine, on loopback: started, killed with
//! SIGKILL and restarted by the fault test, the bench and
//! `directkv-raft-node cluster`.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use directkv_raft::NodeId;

use crate::client::Client;

/// How each node process is started.
#[derive(Debug, Clone)]
pub struct NodeArgs {
    /// The database cache of each node, in MiB.
    pub cache_mib: usize,
    /// The leader's heartbeat, in milliseconds.
    pub heartbeat_ms: u64,
    /// The election timeout's low end, in milliseconds.
    pub election_ms: u64,
    /// Entries applied between snapshots.
    pub snapshot_every: u64,
}

impl Default for NodeArgs {
    fn default() -> Self {
        NodeArgs {
            cache_mib: 64,
            heartbeat_ms: 100,
            election_ms: 400,
            snapshot_every: 1000,
        }
    }
}

/// Node processes, killed when dropped.
pub struct Cluster {
    exe: PathBuf,
    dir: PathBuf,
    args: NodeArgs,
    addrs: BTreeMap<NodeId, String>,
    running: BTreeMap<NodeId, Child>,
}

/// A port free on loopback now.
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Cluster {
    /// Nodes `1..=n` of the program `exe`, each with its database and log
    /// file under `dir`; none started yet.
    ///
    /// # Errors
    /// No free port.
    pub fn new(exe: &Path, dir: &Path, n: u64, args: NodeArgs) -> anyhow::Result<Self> {
        let mut addrs = BTreeMap::new();
        for id in 1..=n {
            addrs.insert(id, format!("127.0.0.1:{}", free_port()?));
        }
        Ok(Cluster {
            exe: exe.to_path_buf(),
            dir: dir.to_path_buf(),
            args,
            addrs,
            running: BTreeMap::new(),
        })
    }

    /// Every node's id and address.
    pub fn addrs(&self) -> &BTreeMap<NodeId, String> {
        &self.addrs
    }

    /// The address of node `id`.
    ///
    /// # Panics
    /// For a node not in the cluster.
    pub fn addr(&self, id: NodeId) -> &str {
        &self.addrs[&id]
    }

    /// A client of every node.
    pub fn client(&self) -> Client {
        Client::new(self.addrs.values().cloned().collect())
    }

    /// Starts node `id` (again) and waits until it answers.
    ///
    /// # Errors
    /// It cannot be started or does not answer within 30 s.
    pub async fn start(&mut self, id: NodeId) -> anyhow::Result<()> {
        assert!(
            !self.running.contains_key(&id),
            "node {id} is already running"
        );
        let addr = self.addrs[&id].clone();
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("node{id}.log")))?;
        let a = &self.args;
        let child = Command::new(&self.exe)
            .arg("serve")
            .args(["--id", &id.to_string(), "--addr", &addr])
            .arg("--dir")
            .arg(self.dir.join(format!("node{id}")))
            .args(["--cache-mib", &a.cache_mib.to_string()])
            .args(["--heartbeat-ms", &a.heartbeat_ms.to_string()])
            .args(["--election-ms", &a.election_ms.to_string()])
            .args(["--snapshot-every", &a.snapshot_every.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting node {id}"))?;
        self.running.insert(id, child);
        let client = self.client();
        let deadline = Instant::now() + Duration::from_secs(30);
        while client.state(&addr).await.is_err() {
            if Instant::now() > deadline {
                bail!("node {id} does not answer at {addr}");
            }
            if let Some(status) = self
                .running
                .get_mut(&id)
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!(
                    "node {id} exited: {status}; see {}",
                    self.dir.join(format!("node{id}.log")).display()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Kills node `id` with SIGKILL: no destructor runs, nothing is flushed.
    ///
    /// # Errors
    /// The kill or the wait failed.
    pub fn kill(&mut self, id: NodeId) -> anyhow::Result<()> {
        let mut child = self
            .running
            .remove(&id)
            .context("the node is not running")?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// The process id of node `id`, if it runs.
    ///
    /// # Panics
    /// For a node not in the cluster.
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        assert!(self.addrs.contains_key(&id), "node {id} is in the cluster");
        self.running.get(&id).map(Child::id)
    }

    /// Whether node `id` runs.
    pub fn is_running(&self, id: NodeId) -> bool {
        self.running.contains_key(&id)
    }

    /// Waits until a running node knows a leader that is running, and
    /// returns it.
    ///
    /// # Errors
    /// None within `patience`.
    pub async fn leader(&self, patience: Duration) -> anyhow::Result<NodeId> {
        let client = self.client();
        let deadline = Instant::now() + patience;
        while Instant::now() < deadline {
            for (id, addr) in &self.addrs {
                if !self.is_running(*id) {
                    continue;
                }
                if let Ok(s) = client.state(addr).await {
                    if let Some(l) = s.leader.filter(|l| self.is_running(*l) && *l == s.id) {
                        return Ok(l);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("no leader within {patience:?}")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.running.values_mut() {
            // Best effort: the process may be gone already.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
