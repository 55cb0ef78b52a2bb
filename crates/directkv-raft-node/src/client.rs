//! A client of a cluster: it sends each call to the node it believes
//! leads, follows "not the leader" answers, and tries the other nodes when
//! one does not answer, until a deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use directkv_raft::{NodeId, Request};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::{AddLearner, ChangeMembership, Init, NodeState, Read, Reply, Written};

/// Pause before trying again after a node did not answer or knew no
/// leader.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// A client of the nodes at `addrs`.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    addrs: Vec<String>,
    target: String,
    /// How long one call keeps trying.
    pub patience: Duration,
}

impl Client {
    /// A client of the nodes at `addrs` (at least one).
    ///
    /// # Panics
    /// With no address.
    pub fn new(addrs: Vec<String>) -> Self {
        assert!(!addrs.is_empty(), "a client needs a node to talk to");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .build()
            .expect("an HTTP client with no TLS builds");
        let target = addrs[0].clone();
        Client {
            http,
            addrs,
            target,
            patience: Duration::from_secs(20),
        }
    }

    /// Writes through the leader; `Ok` only once the write committed.
    ///
    /// # Errors
    /// No leader accepted it before the deadline; the write's outcome is
    /// unknown (a node may have logged it before failing).
    pub async fn write(&mut self, req: &Request) -> anyhow::Result<Written> {
        self.call("/kv/write", req).await
    }

    /// Reads `key` linearizably: the value of every write acknowledged
    /// before the call began, or a later one.
    ///
    /// # Errors
    /// No leader answered before the deadline.
    pub async fn read(&mut self, key: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
        self.call("/kv/read", &Read { key: key.to_vec() }).await
    }

    /// Makes a new cluster of `nodes` (sent to the first address).
    ///
    /// # Errors
    /// The node refused (already initialized, say) or did not answer.
    pub async fn init(&mut self, nodes: BTreeMap<NodeId, String>) -> anyhow::Result<()> {
        let url = format!("http://{}/cluster/init", self.addrs[0]);
        let reply: Reply<()> = self
            .http
            .post(url)
            .json(&Init { nodes })
            .send()
            .await?
            .json()
            .await?;
        match reply {
            Reply::Ok(()) => Ok(()),
            Reply::Failed(e) => bail!("init: {e}"),
            Reply::NotLeader { .. } => bail!("init: refused"),
        }
    }

    /// Adds a learner and waits until it has caught up.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub async fn add_learner(&mut self, id: NodeId, addr: &str) -> anyhow::Result<u64> {
        let req = AddLearner {
            id,
            addr: addr.to_string(),
        };
        self.call("/cluster/add-learner", &req).await
    }

    /// Makes `members` the voters.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub async fn change_membership(&mut self, members: BTreeSet<NodeId>) -> anyhow::Result<u64> {
        self.call("/cluster/change-membership", &ChangeMembership { members })
            .await
    }

    /// The state of the node at `addr`, as it sees it.
    ///
    /// # Errors
    /// The node did not answer.
    pub async fn state(&self, addr: &str) -> anyhow::Result<NodeState> {
        let url = format!("http://{addr}/cluster/state");
        match self.http.get(url).send().await?.json().await? {
            Reply::Ok(s) => Ok(s),
            Reply::Failed(e) => bail!("state of {addr}: {e}"),
            Reply::NotLeader { .. } => bail!("state of {addr}: refused"),
        }
    }

    fn next_node(&mut self) {
        let at = self.addrs.iter().position(|a| *a == self.target);
        let next = at.map_or(0, |i| (i + 1) % self.addrs.len());
        self.target = self.addrs[next].clone();
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &mut self,
        route: &str,
        body: &B,
    ) -> anyhow::Result<T> {
        let deadline = Instant::now() + self.patience;
        let mut last = anyhow!("no node answered");
        while Instant::now() < deadline {
            let url = format!("http://{}{route}", self.target);
            let sent = self.http.post(url).json(body).send().await;
            let reply = match sent {
                Ok(resp) => resp.json::<Reply<T>>().await,
                Err(e) => Err(e),
            };
            match reply {
                Ok(Reply::Ok(v)) => return Ok(v),
                Ok(Reply::NotLeader {
                    addr: Some(addr), ..
                }) if addr != self.target => {
                    self.target = addr;
                    continue;
                }
                Ok(Reply::NotLeader { .. }) => {
                    last = anyhow!("{} knows no leader", self.target);
                    self.next_node();
                }
                Ok(Reply::Failed(e)) => {
                    last = anyhow!("{}: {e}", self.target);
                    self.next_node();
                }
                Err(e) => {
                    last = anyhow!("{}: {e}", self.target);
                    self.next_node();
                }
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        Err(last.context(format!("{route}: gave up after {:?}", self.patience)))
    }
}
