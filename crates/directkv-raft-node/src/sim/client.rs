//! The simulation's clients: tasks that each run one operation at a time
//! (reads, puts, deletes, compare-and-sets on a few keys, every value
//! written unique), recorded in a [`History`]. They follow the leader as
//! [`crate::client::Client`] does: an operation is sent again only when
//! the last attempt certainly did nothing (the node is down, or it
//! answered `NotLeader`); a write is proposed by the node's own
//! [`crate::server`] code, and a read is linearizable as the server's.
//! An operation without an answer within [`PATIENCE`] is unknown.
//!
//! Clients talk to nodes without the simulated network (a client beside
//! every node): its faults are between the nodes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use directkv_raft::{NodeId, Request, Response};
use openraft::error::{CheckIsLeaderError, RaftError};

use super::net::{Net, Up};
use super::Rng;
use crate::api::Reply;
use crate::history::{History, Op, Outcome};

/// How long a client waits for one operation before it counts as unknown.
pub(crate) const PATIENCE: Duration = Duration::from_secs(3);

/// How long a client waits before sending again elsewhere.
const RETRY: Duration = Duration::from_millis(10);

/// What the clients do.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Workload {
    /// Operations per client.
    pub(crate) ops: u32,
    /// Keys they touch.
    pub(crate) keys: u32,
}

/// Client `id`: runs its operations against the nodes `ids`, recorded in
/// `history`.
pub(crate) async fn run(
    net: Arc<Net>,
    history: Arc<History>,
    id: u32,
    ids: Vec<NodeId>,
    work: Workload,
    mut rng: Rng,
) {
    assert!(
        !ids.is_empty() && work.keys > 0,
        "a client has nodes and keys"
    );
    let mut target = ids[rng.range(0, ids.len() as u64 - 1) as usize];
    // The value this client last saw under each key: what a
    // compare-and-set expects.
    let mut seen: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    for seq in 0..work.ops {
        let op = next_op(&mut rng, id, seq, work.keys, &seen);
        let outcome = recorded(&net, &history, id, &ids, &mut target, op.clone(), PATIENCE).await;
        learn(&mut seen, &op, &outcome);
        tokio::time::sleep(Duration::from_millis(rng.range(0, 60))).await;
    }
}

/// Runs `op` as client `id`'s, starting at node `target` (which follows
/// the leader), recorded in `history`; unknown after `patience`.
pub(crate) async fn recorded(
    net: &Net,
    history: &History,
    id: u32,
    ids: &[NodeId],
    target: &mut NodeId,
    op: Op,
    patience: Duration,
) -> Outcome {
    let call = history.invoke(id, op.clone());
    let outcome = tokio::time::timeout(patience, attempt(net, ids, target, &op))
        .await
        .unwrap_or(Outcome::Unknown);
    history.complete(call, outcome.clone());
    outcome
}

/// Client `id`'s operation number `seq`.
fn next_op(
    rng: &mut Rng,
    id: u32,
    seq: u32,
    keys: u32,
    seen: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
) -> Op {
    let key = format!("k{}", rng.range(0, u64::from(keys) - 1)).into_bytes();
    let value = format!("c{id}-{seq}").into_bytes();
    match rng.range(0, 99) {
        0..=39 => Op::Read { key },
        40..=64 => Op::Write(Request::Put { key, value }),
        65..=69 => Op::Write(Request::Delete { key }),
        _ => {
            let expected = seen.get(&key).cloned().flatten();
            Op::Write(Request::CompareAndSet {
                key,
                expected,
                new: Some(value),
            })
        }
    }
}

/// Remembers the value an answer showed under its key.
fn learn(seen: &mut BTreeMap<Vec<u8>, Option<Vec<u8>>>, op: &Op, outcome: &Outcome) {
    let shown = match (op, outcome) {
        (Op::Read { key }, Outcome::Read(v)) => Some((key, v.clone())),
        (Op::Write(Request::Put { key, value }), Outcome::Written(_)) => {
            Some((key, Some(value.clone())))
        }
        (Op::Write(Request::Delete { key }), Outcome::Written(_)) => Some((key, None)),
        (
            Op::Write(Request::CompareAndSet { key, new, .. }),
            Outcome::Written(Response::Done { .. }),
        ) => Some((key, new.clone())),
        (
            Op::Write(Request::CompareAndSet { key, .. }),
            Outcome::Written(Response::Mismatch { current }),
        ) => Some((key, current.clone())),
        _ => None,
    };
    if let Some((key, value)) = shown {
        seen.insert(key.clone(), value);
    }
}

/// Sends `op` until a node answers it, following `NotLeader` answers
/// and skipping nodes that are down.
async fn attempt(net: &Net, ids: &[NodeId], target: &mut NodeId, op: &Op) -> Outcome {
    loop {
        let Some(up) = net.up(*target) else {
            *target = next_after(ids, *target);
            tokio::time::sleep(RETRY).await;
            continue;
        };
        let reply = match op {
            Op::Read { key } => match read(up, key).await {
                Reply::Ok(v) => Reply::Ok(Outcome::Read(v)),
                Reply::NotLeader { leader, addr } => Reply::NotLeader { leader, addr },
                Reply::Rejected(e) => Reply::Rejected(e),
                Reply::Failed(e) => Reply::Failed(e),
            },
            Op::Write(req) => match crate::server::propose_write(&up.raft, req.clone()).await {
                Reply::Ok(w) => Reply::Ok(Outcome::Written(w.response)),
                Reply::NotLeader { leader, addr } => Reply::NotLeader { leader, addr },
                Reply::Rejected(e) => Reply::Rejected(e),
                Reply::Failed(e) => Reply::Failed(e),
            },
        };
        match reply {
            Reply::Ok(outcome) => return outcome,
            // Certainly not done: send it again, to the leader if known.
            Reply::NotLeader { leader, .. } => {
                *target = leader
                    .filter(|l| *l != *target && ids.contains(l))
                    .unwrap_or_else(|| next_after(ids, *target));
                tokio::time::sleep(RETRY).await;
            }
            Reply::Rejected(_) => return Outcome::NotDone,
            Reply::Failed(_) => return Outcome::Unknown,
        }
    }
}

/// The node after `id` in `ids`, round.
fn next_after(ids: &[NodeId], id: NodeId) -> NodeId {
    let at = ids.iter().position(|&i| i == id).unwrap_or(0);
    let next = ids[(at + 1) % ids.len()];
    assert!(ids.len() == 1 || next != id, "the next node is another one");
    next
}

/// A linearizable read at a node, as the server's: confirm leadership
/// with a quorum and wait for the state machine to apply what was
/// committed before, then read the applied state.
async fn read(up: Up, key: &[u8]) -> Reply<Option<Vec<u8>>> {
    match up.raft.ensure_linearizable().await {
        Ok(_) => {}
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
            return Reply::NotLeader {
                leader: f.leader_id,
                addr: None,
            }
        }
        Err(e) => return Reply::Failed(e.to_string()),
    }
    match up.reader.get(key) {
        Ok(v) => Reply::Ok(v),
        Err(e) => Reply::Failed(e.to_string()),
    }
}
