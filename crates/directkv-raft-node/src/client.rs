//! A client of a cluster: it sends each call to the node it believes
//! leads, follows "not the leader" answers, and tries the other nodes when
//! one does not answer, until a deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::bail;
use directkv_raft::{NodeId, Request};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::{AddLearner, ChangeMembership, Init, NodeState, Read, Reply, Written};

/// Pause before trying again after a node did not answer or knew no
/// leader.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Redirects followed in a row before pausing.
const REDIRECTS_MAX: u32 = 3;

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
    pub async fn write(&mut self, req: &Request) -> Result<Written, ClientError> {
        self.call("/kv/write", req, false).await
    }

    /// Reads `key` linearizably: the value of every write acknowledged
    /// before the call began, or a later one.
    ///
    /// # Errors
    /// No leader answered before the deadline.
    pub async fn read(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
        self.call("/kv/read", &Read { key: key.to_vec() }, true)
            .await
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
            Reply::Failed(e) | Reply::Rejected(e) => bail!("init: {e}"),
            Reply::NotLeader { .. } => bail!("init: refused"),
        }
    }

    /// Adds a learner and waits until it has caught up.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub async fn add_learner(&mut self, id: NodeId, addr: &str) -> Result<u64, ClientError> {
        let req = AddLearner {
            id,
            addr: addr.to_string(),
        };
        // Adding a learner again changes nothing.
        self.call("/cluster/add-learner", &req, true).await
    }

    /// Makes `members` the voters.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub async fn change_membership(
        &mut self,
        members: BTreeSet<NodeId>,
    ) -> Result<u64, ClientError> {
        // Asking for the same voters again changes nothing.
        self.call(
            "/cluster/change-membership",
            &ChangeMembership { members },
            true,
        )
        .await
    }

    /// The state of the node at `addr`, as it sees it.
    ///
    /// # Errors
    /// The node did not answer.
    pub async fn state(&self, addr: &str) -> anyhow::Result<NodeState> {
        let url = format!("http://{addr}/cluster/state");
        // It reads the node's whole state machine: give it time.
        let req = self.http.get(url).timeout(Duration::from_secs(60));
        match req.send().await?.json().await? {
            Reply::Ok(s) => Ok(s),
            Reply::Failed(e) | Reply::Rejected(e) => bail!("state of {addr}: {e}"),
            Reply::NotLeader { .. } => bail!("state of {addr}: refused"),
        }
    }

    fn next_node(&mut self) {
        let at = self.addrs.iter().position(|a| *a == self.target);
        let next = at.map_or(0, |i| (i + 1) % self.addrs.len());
        self.target = self.addrs[next].clone();
        assert!(
            at.is_none() || self.addrs.len() == 1 || at != Some(next),
            "the client moves on to another node"
        );
    }

    /// Sends `body` to `route` on the leader until it is done, refused, or
    /// the patience runs out. It sends again only when the last attempt
    /// certainly did nothing (no connection; not the leader, which
    /// openraft also answers for a proposal it dropped from its log),
    /// unless `idempotent`, when any failure is tried again.
    async fn call<B: Serialize, T: DeserializeOwned>(
        &mut self,
        route: &str,
        body: &B,
        idempotent: bool,
    ) -> Result<T, ClientError> {
        let deadline = Instant::now() + self.patience;
        let mut last = ClientError::Unavailable("no node answered".into());
        let mut redirects = 0;
        while Instant::now() < deadline {
            assert!(redirects <= REDIRECTS_MAX, "redirects are bounded");
            let at = self.target.clone();
            match self.attempt::<B, T>(route, body).await {
                Attempt::Done(v) => return Ok(v),
                Attempt::Refused(why) => return Err(ClientError::Rejected(format!("{at}: {why}"))),
                Attempt::Unknown(why) if !idempotent => {
                    return Err(ClientError::Unknown(format!("{at}: {why}")))
                }
                // An empty address: the node knows no leader (an election
                // is under way), so the next node is asked, not this one
                // again.
                Attempt::Redirect(addr)
                    if !addr.is_empty() && addr != at && redirects < REDIRECTS_MAX =>
                {
                    redirects += 1;
                    self.target = addr;
                    continue;
                }
                Attempt::Redirect(_) => {
                    last = ClientError::Unavailable(format!("{at} knows no leader"));
                    self.next_node();
                }
                Attempt::Unreachable(why) | Attempt::Unknown(why) => {
                    last = ClientError::Unavailable(format!("{at}: {why}"));
                    self.next_node();
                }
            }
            redirects = 0;
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        Err(last)
    }

    async fn attempt<B: Serialize, T: DeserializeOwned>(
        &self,
        route: &str,
        body: &B,
    ) -> Attempt<T> {
        let url = format!("http://{}{route}", self.target);
        let resp = match self.http.post(url).json(body).send().await {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Attempt::Unreachable(e.to_string()),
            Err(e) => return Attempt::Unknown(e.to_string()),
        };
        let status = resp.status();
        if status.is_client_error() {
            // Refused before any handler ran (too large, malformed).
            return Attempt::Refused(format!("HTTP {status}"));
        }
        match resp.json::<Reply<T>>().await {
            Ok(Reply::Ok(v)) => Attempt::Done(v),
            Ok(Reply::Rejected(why)) => Attempt::Refused(why),
            Ok(Reply::NotLeader { addr, .. }) => Attempt::Redirect(addr.unwrap_or_default()),
            Ok(Reply::Failed(why)) => Attempt::Unknown(why),
            Err(e) => Attempt::Unknown(format!("HTTP {status}: {e}")),
        }
    }
}

/// What one attempt of [`Client::call`] came to.
enum Attempt<T> {
    Done(T),
    /// Refused: nothing was done.
    Refused(String),
    /// Not the leader; the leader's address, or empty.
    Redirect(String),
    /// No connection: nothing was sent.
    Unreachable(String),
    /// Sent, with no answer to tell whether it was done.
    Unknown(String),
}

/// Why a call did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Refused (over a limit, malformed, the node shutting down): nothing
    /// was done.
    #[error("refused: {0}")]
    Rejected(String),
    /// A write was sent and no answer came back: it may or may not have
    /// been done (a later read tells).
    #[error("outcome unknown: {0}")]
    Unknown(String),
    /// No leader answered before the patience ran out.
    #[error("unavailable: {0}")]
    Unavailable(String),
}
