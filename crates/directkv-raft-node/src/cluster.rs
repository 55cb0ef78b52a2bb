//! Node processes on this machine, on loopback: started, killed with
//! SIGKILL, paused with SIGSTOP and resumed with SIGCONT, and restarted by
//! the fault tests, the bench and `directkv-raft-node cluster`; in a
//! partitionable cluster ([`Cluster::partitionable`]) every node reaches
//! every other through a forwarder of its own ([`FaultProxy`]), which
//! [`Cluster::partition`] cuts.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use directkv_raft::NodeId;

use crate::client::Client;
use crate::proxy::FaultProxy;

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
    /// The forwarder from node `i` to node `j`, for every ordered pair of a
    /// partitionable cluster; none otherwise.
    proxies: BTreeMap<(NodeId, NodeId), FaultProxy>,
    /// Running nodes stopped with SIGSTOP: they answer nothing until
    /// resumed.
    paused: BTreeSet<NodeId>,
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
            proxies: BTreeMap::new(),
            paused: BTreeSet::new(),
        })
    }

    /// As [`new`](Self::new), with a forwarder in front of every ordered
    /// pair of the `n` nodes, all healed: node `i` sends its RPCs for node
    /// `j` through the forwarder `i → j`. Clients reach every node directly.
    /// Must be called inside a tokio runtime, which runs the forwarders.
    ///
    /// # Errors
    /// No free port.
    pub async fn partitionable(
        exe: &Path,
        dir: &Path,
        n: u64,
        args: NodeArgs,
    ) -> anyhow::Result<Self> {
        let mut cluster = Cluster::new(exe, dir, n, args)?;
        for &i in cluster.addrs.keys() {
            for (&j, addr) in &cluster.addrs {
                if i != j {
                    let proxy = FaultProxy::start(addr.clone()).await?;
                    cluster.proxies.insert((i, j), proxy);
                }
            }
        }
        assert_eq!(cluster.proxies.len() as u64, n * (n - 1));
        Ok(cluster)
    }

    /// Cuts every pair of nodes that are on different `sides` (a node on no
    /// side is alone) and heals every other pair; in both directions.
    ///
    /// # Panics
    /// When the cluster is not partitionable, or a node is on two sides.
    pub fn partition(&self, sides: &[&[NodeId]]) {
        assert!(!self.proxies.is_empty(), "a partitionable cluster");
        let side_of = |id: NodeId| {
            let mut found = sides.iter().enumerate().filter(|(_, s)| s.contains(&id));
            let side = found.next().map(|(k, _)| k);
            assert!(found.next().is_none(), "node {id} is on two sides");
            side
        };
        for (&(i, j), proxy) in &self.proxies {
            let together = matches!((side_of(i), side_of(j)), (Some(a), Some(b)) if a == b);
            proxy.set_cut(!together);
        }
    }

    /// Heals every pair.
    pub fn heal(&self) {
        for proxy in self.proxies.values() {
            proxy.set_cut(false);
        }
    }

    /// Whether the pair `from → to` is cut.
    pub fn is_cut(&self, from: NodeId, to: NodeId) -> bool {
        self.proxies
            .get(&(from, to))
            .is_some_and(FaultProxy::is_cut)
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
        let child =
            Command::new(&self.exe)
                .arg("serve")
                .args(["--id", &id.to_string(), "--addr", &addr])
                .arg("--dir")
                .arg(self.dir.join(format!("node{id}")))
                .args(["--cache-mib", &a.cache_mib.to_string()])
                .args(["--heartbeat-ms", &a.heartbeat_ms.to_string()])
                .args(["--election-ms", &a.election_ms.to_string()])
                .args(["--snapshot-every", &a.snapshot_every.to_string()])
                .args(self.proxies.iter().filter(|((i, _), _)| *i == id).flat_map(
                    |((_, j), proxy)| ["--route".to_string(), format!("{j}={}", proxy.addr())],
                ))
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
        // SIGKILL ends a stopped process too.
        self.paused.remove(&id);
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// Stops node `id` with SIGSTOP: it keeps its memory, files and
    /// sockets but runs nothing (no heartbeat, no answer) until
    /// [`resume`](Self::resume)d, as a process the machine stalls.
    ///
    /// # Errors
    /// The node is not running or the signal failed.
    ///
    /// # Panics
    /// If it is paused already.
    pub fn pause(&mut self, id: NodeId) -> anyhow::Result<()> {
        let child = self.running.get(&id).context("the node is not running")?;
        assert!(!self.paused.contains(&id), "node {id} is paused already");
        signal(child, libc::SIGSTOP)?;
        self.paused.insert(id);
        Ok(())
    }

    /// Lets paused node `id` run again with SIGCONT.
    ///
    /// # Errors
    /// The signal failed.
    ///
    /// # Panics
    /// If it is not paused.
    pub fn resume(&mut self, id: NodeId) -> anyhow::Result<()> {
        assert!(self.paused.contains(&id), "node {id} is not paused");
        let child = self.running.get(&id).expect("a paused node runs");
        signal(child, libc::SIGCONT)?;
        self.paused.remove(&id);
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

    /// Whether node `id` runs and is not paused: whether it can answer.
    pub fn is_answering(&self, id: NodeId) -> bool {
        self.is_running(id) && !self.paused.contains(&id)
    }

    /// Waits until a node that answers (running, not paused) knows itself
    /// the leader, and returns it.
    ///
    /// # Errors
    /// None within `patience`.
    pub async fn leader(&self, patience: Duration) -> anyhow::Result<NodeId> {
        let client = self.client();
        let deadline = Instant::now() + patience;
        while Instant::now() < deadline {
            for (id, addr) in &self.addrs {
                if !self.is_answering(*id) {
                    continue;
                }
                if let Ok(s) = client.state(addr).await {
                    if let Some(l) = s.leader.filter(|l| *l == s.id) {
                        return Ok(l);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("no leader within {patience:?}")
    }
}

/// Sends `sig` to the process of `child`.
fn signal(child: &Child, sig: libc::c_int) -> anyhow::Result<()> {
    let pid = libc::pid_t::try_from(child.id()).context("a pid fits pid_t")?;
    assert!(pid > 0, "a child's pid names one process");
    // SAFETY: kill(2) reads and writes no memory of this process; `pid` is
    // a child not yet waited for (the `Child` is held), so it still names
    // that process and no other.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("kill(2)");
    }
    Ok(())
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
