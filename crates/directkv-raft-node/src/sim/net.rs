//! The simulated network: openraft's RPCs delivered by calling the target
//! node's handler directly, after delays drawn from the seed, and lost,
//! duplicated or cut as the fault settings and the partition say.
//!
//! - Each leg (request, then answer) waits a delay drawn in
//!   `delay_ms`; delays differ per message, so messages overtake each
//!   other.
//! - A leg is lost with `drop_per_mille`, or when its link is cut as it
//!   leaves or as it arrives, or (a scripted schedule's tool) when it
//!   carries log entries over a link whose appends are muted: the sender
//!   sees it only when its timeout (openraft's time to live for the RPC)
//!   runs out, as over a real network.
//! - An append or a vote delivered is delivered again, later, with
//!   `dup_per_mille`: the copy's answer goes nowhere (a stale message).
//! - A node that is down refuses at once (connection refused), and
//!   openraft backs off.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use directkv_raft::{KvReader, NodeId, Raft, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{AnyError, BasicNode};

use super::Rng;

/// How the network misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// A leg's delay, in milliseconds, drawn in `lo..=hi`.
    pub delay_ms: (u64, u64),
    /// Legs lost, per thousand.
    pub drop_per_mille: u32,
    /// Appends and votes delivered twice, per thousand.
    pub dup_per_mille: u32,
}

impl Faults {
    /// A network that only delays, by 1 to 5 ms.
    pub fn none() -> Self {
        Faults {
            delay_ms: (1, 5),
            drop_per_mille: 0,
            dup_per_mille: 0,
        }
    }
}

/// A node that is up: its Raft and its state machine's reader.
#[derive(Clone)]
pub(crate) struct Up {
    pub(crate) raft: Raft,
    pub(crate) reader: KvReader,
}

/// The network's state: which nodes are up, which links are cut.
pub(crate) struct Net {
    state: Mutex<State>,
}

struct State {
    rng: Rng,
    faults: Faults,
    up: BTreeMap<NodeId, Up>,
    /// Cut links, from → to.
    cut: BTreeSet<(NodeId, NodeId)>,
    /// Links, from → to, that lose appends and snapshots (votes pass).
    muted: BTreeSet<(NodeId, NodeId)>,
}

/// One RPC.
enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
}

/// Its answer.
enum Answer {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
}

/// Why an RPC got no answer.
enum Lost {
    /// The target is down: refused at once.
    Down,
    /// Dropped or cut: no answer within the timeout.
    Silent,
}

/// What a leg does.
struct Leg {
    delay: Duration,
    lost: bool,
    /// Delivered again this much later.
    dup: Option<Duration>,
}

impl Net {
    pub(crate) fn new(rng: Rng, faults: Faults) -> Arc<Net> {
        Arc::new(Net {
            state: Mutex::new(State {
                rng,
                faults,
                up: BTreeMap::new(),
                cut: BTreeSet::new(),
                muted: BTreeSet::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change is one insert, remove or field set.
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Node `id` is up as `up`.
    pub(crate) fn set_up(&self, id: NodeId, up: Up) {
        let old = self.lock().up.insert(id, up);
        assert!(old.is_none(), "a node comes up once until it goes down");
    }

    /// Node `id` goes down: its Raft, for the caller to stop.
    pub(crate) fn set_down(&self, id: NodeId) -> Option<Up> {
        self.lock().up.remove(&id)
    }

    /// Node `id`, if it is up.
    pub(crate) fn up(&self, id: NodeId) -> Option<Up> {
        self.lock().up.get(&id).cloned()
    }

    /// Cuts every link between `a` and `b`, both ways.
    pub(crate) fn cut(&self, a: &[NodeId], b: &[NodeId]) {
        let mut s = self.lock();
        for &x in a {
            for &y in b {
                assert_ne!(x, y, "a node is on one side of a cut");
                s.cut.insert((x, y));
                s.cut.insert((y, x));
            }
        }
    }

    /// Loses the appends and snapshots `from` sends `to`; votes pass.
    pub(crate) fn mute_appends(&self, from: NodeId, to: NodeId) {
        assert_ne!(from, to, "a link joins two nodes");
        self.lock().muted.insert((from, to));
    }

    /// Mends every link.
    pub(crate) fn heal(&self) {
        let mut s = self.lock();
        s.cut.clear();
        s.muted.clear();
    }

    fn is_cut(&self, from: NodeId, to: NodeId) -> bool {
        self.lock().cut.contains(&(from, to))
    }

    /// Sets how the network misbehaves from now on.
    pub(crate) fn set_faults(&self, faults: Faults) {
        assert!(faults.delay_ms.0 <= faults.delay_ms.1, "delays are a range");
        self.lock().faults = faults;
    }

    /// Draws from the network's generator.
    pub(crate) fn draw<T>(&self, f: impl FnOnce(&mut Rng) -> T) -> T {
        f(&mut self.lock().rng)
    }

    /// What the leg `from` → `to` of a message does; `log`: it carries
    /// log entries (an append or a snapshot).
    fn leg(&self, from: NodeId, to: NodeId, log: bool, may_dup: bool) -> Leg {
        let mut s = self.lock();
        let f = s.faults;
        let delay = Duration::from_millis(s.rng.range(f.delay_ms.0, f.delay_ms.1));
        let lost = s.rng.chance(f.drop_per_mille)
            || s.cut.contains(&(from, to))
            || (log && s.muted.contains(&(from, to)));
        let dup = (may_dup && s.rng.chance(f.dup_per_mille))
            .then(|| Duration::from_millis(s.rng.range(1, 10 * f.delay_ms.1.max(1))));
        Leg { delay, lost, dup }
    }

    /// Delivers `rpc` from `from` to `to` and brings its answer back, or
    /// says why not; `ttl` is how long the sender waits.
    async fn send(
        self: &Arc<Self>,
        from: NodeId,
        to: NodeId,
        rpc: Rpc,
        ttl: Duration,
    ) -> Result<Answer, Lost> {
        if self.up(to).is_none() {
            return Err(Lost::Down);
        }
        let may_dup = !matches!(rpc, Rpc::Snapshot(_));
        let log = !matches!(rpc, Rpc::Vote(_));
        let out = self.leg(from, to, log, may_dup);
        let deadline = tokio::time::Instant::now() + ttl;
        if out.lost {
            tokio::time::sleep_until(deadline).await;
            return Err(Lost::Silent);
        }
        tokio::time::sleep(out.delay).await;
        if self.is_cut(from, to) {
            tokio::time::sleep_until(deadline).await;
            return Err(Lost::Silent);
        }
        // The node as it is when the message arrives (maybe restarted).
        let Some(raft) = self.up(to).map(|u| u.raft) else {
            return Err(Lost::Down);
        };
        if let (Some(later), Some(copy)) = (out.dup, rpc.copy()) {
            let net = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(later).await;
                // A stale copy: its answer goes nowhere.
                if let Some(up) = net.up(to) {
                    let _ = copy.handle(&up.raft).await;
                }
            });
        }
        let answer = rpc.handle(&raft).await;
        drop(raft);
        let back = self.leg(to, from, false, false);
        if back.lost {
            tokio::time::sleep_until(deadline).await;
            return Err(Lost::Silent);
        }
        tokio::time::sleep(back.delay).await;
        if self.is_cut(to, from) {
            tokio::time::sleep_until(deadline).await;
            return Err(Lost::Silent);
        }
        Ok(answer)
    }
}

impl Rpc {
    /// A copy to deliver again (appends and votes).
    fn copy(&self) -> Option<Rpc> {
        match self {
            Rpc::Append(r) => Some(Rpc::Append(r.clone())),
            Rpc::Vote(r) => Some(Rpc::Vote(r.clone())),
            Rpc::Snapshot(_) => None,
        }
    }

    async fn handle(self, raft: &Raft) -> Answer {
        match self {
            Rpc::Append(r) => Answer::Append(raft.append_entries(r).await),
            Rpc::Vote(r) => Answer::Vote(raft.vote(r).await),
            Rpc::Snapshot(r) => Answer::Snapshot(raft.install_snapshot(r).await),
        }
    }
}

/// Makes each node's connections to its peers.
#[derive(Clone)]
pub(crate) struct SimNetwork {
    pub(crate) net: Arc<Net>,
    pub(crate) from: NodeId,
}

impl RaftNetworkFactory<TypeConfig> for SimNetwork {
    type Network = SimPeer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> SimPeer {
        SimPeer {
            net: self.net.clone(),
            from: self.from,
            to: target,
            node: node.clone(),
        }
    }
}

/// One node's RPCs to one peer.
pub(crate) struct SimPeer {
    net: Arc<Net>,
    from: NodeId,
    to: NodeId,
    node: BasicNode,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, E>>;

impl SimPeer {
    async fn call(
        &self,
        rpc: Rpc,
        option: &RPCOption,
    ) -> Result<Answer, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self
            .net
            .send(self.from, self.to, rpc, option.hard_ttl())
            .await
        {
            Ok(a) => Ok(a),
            Err(Lost::Down) => {
                let e = AnyError::error(format!("node {} is down", self.to));
                Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
            Err(Lost::Silent) => {
                let e = AnyError::error(format!("no answer from node {}", self.to));
                Err(RPCError::Network(NetworkError::new(&e)))
            }
        }
    }

    fn remote<E: std::error::Error>(&self, e: E) -> RPCError<NodeId, BasicNode, E> {
        RPCError::RemoteError(RemoteError::new_with_node(self.to, self.node.clone(), e))
    }
}

/// The same failure, for an RPC of another error type.
fn retype<E: std::error::Error>(
    e: RPCError<NodeId, BasicNode, RaftError<NodeId>>,
) -> RPCError<NodeId, BasicNode, E> {
    match e {
        RPCError::Unreachable(u) => RPCError::Unreachable(u),
        RPCError::Network(n) => RPCError::Network(n),
        other => unreachable!("a lost RPC is unreachable or silent: {other}"),
    }
}

impl RaftNetwork<TypeConfig> for SimPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        match self.call(Rpc::Append(rpc), &option).await? {
            Answer::Append(r) => r.map_err(|e| self.remote(e)),
            _ => unreachable!("an append is answered as one"),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        match self
            .call(Rpc::Snapshot(rpc), &option)
            .await
            .map_err(retype)?
        {
            Answer::Snapshot(r) => r.map_err(|e| self.remote(e)),
            _ => unreachable!("an install is answered as one"),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, RaftError<NodeId>> {
        match self.call(Rpc::Vote(rpc), &option).await? {
            Answer::Vote(r) => r.map_err(|e| self.remote(e)),
            _ => unreachable!("a vote is answered as one"),
        }
    }
}
