//! A node: its Raft, its storage and its HTTP routes.
//!
//! | route                          | body                       | answer |
//! |--------------------------------|----------------------------|--------|
//! | `POST /raft/append`, `/raft/vote`, `/raft/snapshot` | openraft's RPCs, in bincode ([`crate::wire`]) | `Result` of the RPC, in bincode |
//! | `POST /kv/write`               | [`Request`]                | [`Reply`]`<`[`Written`]`>` |
//! | `POST /kv/read`                | [`Read`]                   | [`Reply`]`<Option<bytes>>`, linearizable |
//! | `POST /cluster/init`           | [`Init`]                   | [`Reply`]`<()>` |
//! | `POST /cluster/add-learner`    | [`AddLearner`]             | [`Reply`]`<index>` |
//! | `POST /cluster/change-membership` | [`ChangeMembership`]    | [`Reply`]`<index>` |
//! | `GET /cluster/state`           |                            | [`NodeState`] |

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use directkv_raft::{KvReader, NodeId, Raft, Request, Response, TypeConfig, BATCH_MAX_BYTES};
use openraft::error::{
    CheckIsLeaderError, ClientWriteError, ForwardToLeader, InstallSnapshotError, RaftError,
};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, ClientWriteResponse, InstallSnapshotRequest,
    InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Config, SnapshotPolicy};
use tokio::sync::{mpsc, oneshot};

use crate::api::{AddLearner, ChangeMembership, Init, NodeState, Read, Reply, Written};
use crate::network::Network;
use crate::wire::{Bin, BODY_BYTES_MAX};

/// How a node is started.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// Its id.
    pub id: NodeId,
    /// Where it listens (also its address in the cluster).
    pub addr: String,
    /// Its database directory.
    pub dir: PathBuf,
    /// The database's cache.
    pub cache_bytes: usize,
    /// The leader's heartbeat.
    pub heartbeat: Duration,
    /// A follower that hears no leader for a random time between this and
    /// twice this starts an election.
    pub election_timeout: Duration,
    /// A snapshot is built once this many entries were applied since the
    /// last one (then the log before it is purged).
    pub snapshot_every: u64,
    /// Where to send a peer's RPCs instead of its address in the cluster
    /// (the fault tests' forwarders): peer id → host:port.
    pub routes: std::collections::BTreeMap<NodeId, String>,
}

struct Node {
    id: NodeId,
    raft: Raft,
    reader: KvReader,
    /// Commands for the proposer, each with where its answer goes.
    proposals: mpsc::Sender<Pending>,
    /// Holds elections off while a snapshot streams in.
    snapshot_hold: SnapshotHold,
}

/// Holds off this node's elections while a snapshot streams in from the
/// leader. openraft takes word from the leader only with a snapshot's last
/// chunk, so a transfer longer than the election timeout would make the
/// receiver stand for election half way: the leader steps down, the next
/// one starts the transfer again, and the receiver times out again, for
/// ever. Elections are held from a chunk until the last one, a refused one,
/// or a silence of the longest election timeout (the sender is gone).
struct SnapshotHold {
    /// When the last chunk came while held; `None`: elections allowed.
    last: std::sync::Mutex<Option<Instant>>,
    /// The silence after which elections are allowed again.
    quiet: Duration,
}

impl SnapshotHold {
    fn last(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // The guarded value is a time: nothing half-written to fear.
        match self.last.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn hold(&self, raft: &Raft) {
        *self.last() = Some(Instant::now());
        raft.runtime_config().elect(false);
    }

    fn release(&self, raft: &Raft) {
        *self.last() = None;
        raft.runtime_config().elect(true);
    }

    /// Allows elections again once no chunk has come for `quiet`.
    async fn watch(node: Arc<Node>) {
        let hold = &node.snapshot_hold;
        assert!(!hold.quiet.is_zero(), "a watch of no silence would spin");
        loop {
            tokio::time::sleep(hold.quiet / 4).await;
            let silent = hold.last().is_some_and(|t| t.elapsed() >= hold.quiet);
            if silent {
                hold.release(&node.raft);
            }
        }
    }
}

/// A command waiting to be proposed and the client waiting for it.
type Pending = (Request, oneshot::Sender<Reply<Written>>);

/// Entries one append RPC carries at most.
const APPEND_ENTRIES_MAX: u64 = 64;

/// Bytes of snapshot one install RPC carries.
const SNAPSHOT_CHUNK_BYTES: u64 = 1 << 20;

/// Commands one proposal carries at most.
const PROPOSAL_COMMANDS_MAX: usize = 1024;

/// Commands queued for the proposer at most; a client beyond waits.
const PROPOSAL_QUEUE: usize = 4096;

/// Proposes the clients' commands, one proposal at a time, each carrying
/// every command that arrived while the one before was being logged and
/// committed (up to [`PROPOSAL_COMMANDS_MAX`] and [`BATCH_MAX_BYTES`]).
/// openraft logs one proposal per durable append and waits for each
/// append before the next, so this is what gives the cluster group
/// commit.
async fn proposer(raft: Raft, mut rx: mpsc::Receiver<Pending>) {
    let mut carry: Option<Pending> = None;
    loop {
        let first = match carry.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let mut bytes = first.0.bytes();
        let mut batch = vec![first];
        while batch.len() < PROPOSAL_COMMANDS_MAX {
            let Ok(p) = rx.try_recv() else { break };
            if bytes + p.0.bytes() > BATCH_MAX_BYTES {
                carry = Some(p);
                break;
            }
            bytes += p.0.bytes();
            batch.push(p);
        }
        assert!(
            batch.len() <= PROPOSAL_COMMANDS_MAX,
            "a proposal carries at most {PROPOSAL_COMMANDS_MAX} commands"
        );
        assert!(
            batch.len() == 1 || bytes <= BATCH_MAX_BYTES,
            "only a command alone may be over the batch's bytes"
        );
        propose(&raft, batch).await;
    }
}

async fn propose(raft: &Raft, mut batch: Vec<Pending>) {
    assert!(!batch.is_empty(), "a proposal carries a command");
    if batch.len() == 1 {
        let (req, tx) = batch.pop().expect("one command");
        // The client may have gone; nobody to tell then.
        let _ = tx.send(propose_write(raft, req).await);
        return;
    }
    let (reqs, txs): (Vec<Request>, Vec<_>) = batch.into_iter().unzip();
    let n = reqs.len();
    match propose_write(raft, Request::Batch(reqs)).await {
        Reply::Ok(Written {
            index,
            response: Response::Batch(answers),
        }) => {
            assert_eq!(answers.len(), n, "one answer per command");
            for (tx, response) in txs.into_iter().zip(answers) {
                let _ = tx.send(Reply::Ok(Written { index, response }));
            }
        }
        // Refused or failed whole: every command gets the same answer.
        other => {
            for tx in txs {
                let _ = tx.send(other.clone());
            }
        }
    }
}

/// Opens the node's storage, starts its Raft and serves its routes until
/// the process is stopped.
///
/// # Errors
/// The database does not open, the address cannot be bound, the Raft
/// configuration is invalid.
pub async fn serve(opts: NodeOptions) -> anyhow::Result<()> {
    let db_opts = directkv::Options {
        cache_bytes: opts.cache_bytes,
        ..directkv::Options::default()
    };
    let dir = opts.dir.clone();
    let (log, sm) = tokio::task::spawn_blocking(move || directkv_raft::open(dir, db_opts))
        .await?
        .with_context(|| format!("opening {}", opts.dir.display()))?;
    let reader = sm.reader();
    let election_ms = opts.election_timeout.as_millis() as u64;
    let config = Config {
        cluster_name: "directkv".into(),
        heartbeat_interval: opts.heartbeat.as_millis() as u64,
        election_timeout_min: election_ms,
        election_timeout_max: election_ms * 2,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(opts.snapshot_every),
        max_in_snapshot_log_to_keep: opts.snapshot_every / 2,
        // An append also stops at `APPEND_BYTES_MAX` (see `crate::wire`).
        snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
        max_payload_entries: APPEND_ENTRIES_MAX,
        install_snapshot_timeout: 10_000,
        ..Config::default()
    }
    .validate()?;
    let network = Network::new(Duration::from_secs(10), opts.routes.clone())?;
    let raft = Raft::new(opts.id, Arc::new(config), network, log, sm).await?;
    let (proposals, rx) = mpsc::channel(PROPOSAL_QUEUE);
    let mut proposer = tokio::spawn(proposer(raft.clone(), rx));
    let node = Arc::new(Node {
        id: opts.id,
        raft,
        reader,
        proposals,
        snapshot_hold: SnapshotHold {
            last: std::sync::Mutex::new(None),
            quiet: Duration::from_millis(2 * election_ms),
        },
    });
    tokio::spawn(SnapshotHold::watch(node.clone()));
    let app = Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route("/raft/snapshot", post(snapshot))
        .route("/kv/write", post(write))
        .route("/kv/read", post(read))
        .route("/cluster/init", post(init))
        .route("/cluster/add-learner", post(add_learner))
        .route("/cluster/change-membership", post(change_membership))
        .route("/cluster/state", get(state))
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .with_state(node.clone());
    let listener = tokio::net::TcpListener::bind(&opts.addr)
        .await
        .with_context(|| format!("binding {}", opts.addr))?;
    let server = axum::serve(listener, app).with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    });
    // A node whose Raft stopped (a storage error is fatal to it) or whose
    // proposer ended serves nothing right: the process exits with the
    // error instead of answering every request with one.
    let stopped = tokio::select! {
        r = server => r.map_err(anyhow::Error::from),
        r = &mut proposer => Err(anyhow::anyhow!("the proposer stopped: {r:?}")),
        e = raft_stopped(&node.raft) => Err(anyhow::anyhow!("Raft stopped: {e}")),
    };
    node.raft.shutdown().await?;
    stopped
}

/// Resolves when the node's Raft has stopped, with why.
async fn raft_stopped(raft: &Raft) -> String {
    let mut metrics = raft.metrics();
    loop {
        if let Err(e) = &metrics.borrow().running_state {
            return e.to_string();
        }
        if metrics.changed().await.is_err() {
            return "its metrics channel closed".into();
        }
    }
}

type App = State<Arc<Node>>;

async fn append(
    State(n): App,
    Bin(rpc): Bin<AppendEntriesRequest<TypeConfig>>,
) -> Bin<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>> {
    Bin(n.raft.append_entries(rpc).await)
}

async fn vote(
    State(n): App,
    Bin(rpc): Bin<VoteRequest<NodeId>>,
) -> Bin<Result<VoteResponse<NodeId>, RaftError<NodeId>>> {
    Bin(n.raft.vote(rpc).await)
}

async fn snapshot(
    State(n): App,
    Bin(rpc): Bin<InstallSnapshotRequest<TypeConfig>>,
) -> Bin<Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>> {
    let (vote, done) = (rpc.vote, rpc.done);
    n.snapshot_hold.hold(&n.raft);
    let r = n.raft.install_snapshot(rpc).await;
    // After the last chunk (whose install took word from the leader), or a
    // chunk refused (a stale leader's, or a failure), elections may run.
    let refused = !matches!(&r, Ok(resp) if resp.vote <= vote);
    if done || refused {
        n.snapshot_hold.release(&n.raft);
    }
    Bin(r)
}

fn not_leader<T>(f: &ForwardToLeader<NodeId, BasicNode>) -> Reply<T> {
    Reply::NotLeader {
        leader: f.leader_id,
        addr: f.leader_node.as_ref().map(|n| n.addr.clone()),
    }
}

/// Proposes a client's write. `NotLeader` (the client sends it elsewhere)
/// only when this node did not lead before proposing, so nothing was
/// logged. openraft answers `ForwardToLeader` as well to a write whose
/// entry a new leader removed from this node's log as a conflict, while
/// another replica may hold it and, elected, commit it: resent, it would
/// apply twice. So a `ForwardToLeader` after proposing is an unknown
/// outcome (`Failed`), which a client does not resend.
pub(crate) async fn propose_write(raft: &Raft, req: Request) -> Reply<Written> {
    let leads = {
        let m = raft.metrics();
        let m = m.borrow();
        if m.current_leader == Some(m.id) {
            None
        } else {
            let leader = m.current_leader;
            let node = leader.and_then(|l| m.membership_config.membership().get_node(&l).cloned());
            Some((leader, node.map(|n| n.addr)))
        }
    };
    if let Some((leader, addr)) = leads {
        return Reply::NotLeader { leader, addr };
    }
    match raft.client_write(req).await {
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => Reply::Failed(format!(
            "this node stopped leading while the write was proposed (leader now {:?}): it may \
             or may not commit",
            f.leader_id
        )),
        r => written(r),
    }
}

type WriteResult =
    Result<ClientWriteResponse<TypeConfig>, RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>>;

fn written(r: WriteResult) -> Reply<Written> {
    match r {
        Ok(w) => Reply::Ok(Written {
            index: w.log_id.index,
            response: w.data,
        }),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => not_leader(&f),
        Err(e) => Reply::Failed(e.to_string()),
    }
}

async fn write(State(n): App, Json(req): Json<Request>) -> Json<Reply<Written>> {
    if let Err(why) = req.check() {
        return Json(Reply::Rejected(why));
    }
    if matches!(req, Request::Batch(_)) {
        // A client's own batch is proposed as it is: batches do not nest.
        return Json(propose_write(&n.raft, req).await);
    }
    let (tx, rx) = oneshot::channel();
    if n.proposals.send((req, tx)).await.is_err() {
        return Json(Reply::Rejected("the node is shutting down".into()));
    }
    // The proposer gone with the command: proposed or not, nobody knows.
    Json(
        rx.await
            .unwrap_or_else(|_| Reply::Failed("the node's proposer stopped".into())),
    )
}

async fn read(State(n): App, Json(req): Json<Read>) -> Json<Reply<Option<Vec<u8>>>> {
    // Linearizable: confirm leadership with a quorum and wait until the
    // state machine has applied everything committed before the read.
    match n.raft.ensure_linearizable().await {
        Ok(_) => {}
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
            return Json(not_leader(&f))
        }
        Err(e) => return Json(Reply::Failed(e.to_string())),
    }
    let reader = n.reader.clone();
    let got = tokio::task::spawn_blocking(move || reader.get(&req.key)).await;
    Json(match got {
        Ok(Ok(v)) => Reply::Ok(v),
        Ok(Err(e)) => Reply::Failed(e.to_string()),
        Err(e) => Reply::Failed(e.to_string()),
    })
}

async fn init(State(n): App, Json(req): Json<Init>) -> Json<Reply<()>> {
    let nodes: std::collections::BTreeMap<NodeId, BasicNode> = req
        .nodes
        .into_iter()
        .map(|(id, addr)| (id, BasicNode { addr }))
        .collect();
    Json(match n.raft.initialize(nodes).await {
        Ok(()) => Reply::Ok(()),
        Err(e) => Reply::Failed(e.to_string()),
    })
}

async fn add_learner(State(n): App, Json(req): Json<AddLearner>) -> Json<Reply<u64>> {
    let node = BasicNode { addr: req.addr };
    Json(index_of(written(
        n.raft.add_learner(req.id, node, true).await,
    )))
}

async fn change_membership(State(n): App, Json(req): Json<ChangeMembership>) -> Json<Reply<u64>> {
    Json(index_of(written(
        n.raft.change_membership(req.members, false).await,
    )))
}

fn index_of(r: Reply<Written>) -> Reply<u64> {
    match r {
        Reply::Ok(w) => Reply::Ok(w.index),
        Reply::NotLeader { leader, addr } => Reply::NotLeader { leader, addr },
        Reply::Rejected(e) => Reply::Rejected(e),
        Reply::Failed(e) => Reply::Failed(e),
    }
}

async fn state(State(n): App) -> Json<Reply<NodeState>> {
    let m = n.raft.metrics().borrow().clone();
    let reader = n.reader.clone();
    // Streamed from one read: the state may be far larger than memory.
    let all = tokio::task::spawn_blocking(move || reader.digest()).await;
    let (applied, keys, digest) = match all {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return Json(Reply::Failed(e.to_string())),
        Err(e) => return Json(Reply::Failed(e.to_string())),
    };
    Json(Reply::Ok(NodeState {
        id: n.id,
        leader: m.current_leader,
        term: m.current_term,
        applied: applied.map(|l| l.index),
        voters: m.membership_config.membership().voter_ids().collect(),
        keys,
        digest,
    }))
}
