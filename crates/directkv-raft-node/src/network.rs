//! openraft's network over HTTP: each Raft RPC is a POST of its request in
//! bincode ([`crate::wire`]) to the target node's `/raft/…` route, answered
//! with `Result<response, RaftError>` in bincode (see [`crate::server`]).
//! An append carries at most [`APPEND_BYTES_MAX`] of entries (or one
//! larger entry) and reports the rest as not yet sent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use directkv_raft::{NodeId, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Entry, LogId};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::wire::{self, APPEND_BYTES_MAX};

/// Makes a connection to each peer; they share one HTTP client (and its
/// connection pool).
#[derive(Clone)]
pub struct Network {
    client: reqwest::Client,
    routes: Arc<BTreeMap<NodeId, String>>,
}

impl Network {
    /// A network whose requests give up after `timeout` unless openraft
    /// asks for less, and that sends node `id`'s RPCs to `routes[id]` where
    /// given instead of the node's address in the membership (the fault
    /// tests' forwarders, [`crate::proxy`]).
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(timeout: Duration, routes: BTreeMap<NodeId, String>) -> reqwest::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .tcp_nodelay(true)
            .build()?;
        Ok(Network {
            client,
            routes: Arc::new(routes),
        })
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        let addr = self.routes.get(&target).unwrap_or(&node.addr);
        Peer {
            client: self.client.clone(),
            target,
            node: BasicNode::new(addr),
        }
    }
}

/// One peer's RPCs.
pub struct Peer {
    client: reqwest::Client,
    target: NodeId,
    node: BasicNode,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, E>>;

impl Peer {
    async fn call<Req, Resp, E>(
        &self,
        route: &str,
        req: &Req,
        option: &RPCOption,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let url = format!("http://{}/raft/{route}", self.node.addr);
        let body = wire::encode(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        assert!(!body.is_empty(), "every RPC has a body to send");
        let sent = self
            .client
            .post(url)
            .timeout(option.hard_ttl())
            .header(reqwest::header::CONTENT_TYPE, wire::CONTENT_TYPE)
            .body(body)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            // Not listening (down, restarting): openraft backs off.
            Err(e) if e.is_connect() => return Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        let status = resp.status();
        if !status.is_success() {
            let e = openraft::AnyError::error(format!(
                "{route} to node {}: HTTP {status}",
                self.target
            ));
            return Err(RPCError::Network(NetworkError::new(&e)));
        }
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let body: Result<Resp, E> =
            wire::decode(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        body.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                e,
            ))
        })
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        let cut = cut_to_budget(&mut rpc.entries, APPEND_BYTES_MAX);
        assert!(
            cut.is_none() || cut == rpc.entries.last().map(|e| e.log_id),
            "a cut append answers up to the last entry it carries"
        );
        let resp = self.call("append", &rpc, &option).await?;
        Ok(answer(resp, cut))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        self.call("snapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, RaftError<NodeId>> {
        self.call("vote", &rpc, &option).await
    }
}

/// Keeps the first entries whose encoding fits in `budget` bytes, and
/// always the first one. openraft times an append out after one heartbeat
/// interval and sends it again with every entry logged since, so an
/// unbounded append that is slow once only grows and times out again.
/// Returns the id of the last entry kept when some were cut: the append
/// then answers a partial success up to it, and openraft sends the rest
/// next.
fn cut_to_budget(entries: &mut Vec<Entry<TypeConfig>>, budget: usize) -> Option<LogId<NodeId>> {
    let mut bytes = 0usize;
    let keep = entries
        .iter()
        .position(|e| {
            bytes = bytes.saturating_add(wire::encoded_len(e));
            bytes > budget
        })
        .map_or(entries.len(), |over| over.max(1));
    if keep == entries.len() {
        return None;
    }
    assert!(
        keep >= 1 && keep < entries.len(),
        "a cut keeps the first entry and drops some"
    );
    entries.truncate(keep);
    let last = entries.last().expect("an append keeps its first entry");
    Some(last.log_id)
}

/// What openraft is told of an append the follower answered `resp`, when
/// [`cut_to_budget`] cut it after `cut`: a success is partial, up to the
/// last entry sent. A conflict or a higher vote concern the append's
/// start and vote, which the cut left as they were.
fn answer(
    resp: AppendEntriesResponse<NodeId>,
    cut: Option<LogId<NodeId>>,
) -> AppendEntriesResponse<NodeId> {
    match (resp, cut) {
        (AppendEntriesResponse::Success, Some(last)) => {
            AppendEntriesResponse::PartialSuccess(Some(last))
        }
        (resp, _) => resp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use directkv_raft::Request;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entries(values: &[usize]) -> Vec<Entry<TypeConfig>> {
        (1..)
            .zip(values)
            .map(|(index, &len)| Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
                payload: EntryPayload::Normal(Request::Put {
                    key: vec![b'k'],
                    value: vec![0; len],
                }),
            })
            .collect()
    }

    #[test]
    fn an_append_keeps_what_fits_and_always_its_first_entry() {
        let mut es = entries(&[10, 10, 10]);
        assert_eq!(cut_to_budget(&mut es, 1000), None, "all fit");
        assert_eq!(es.len(), 3);

        let mut es = entries(&[400, 400, 400]);
        let last = cut_to_budget(&mut es, 1000).expect("cut");
        assert_eq!(es.len(), 2);
        assert_eq!(last.index, 2);

        let mut es = entries(&[5000, 10]);
        let last = cut_to_budget(&mut es, 1000).expect("cut");
        assert_eq!(es.len(), 1, "a first entry over the budget goes alone");
        assert_eq!(last.index, 1);

        let mut es = entries(&[5000]);
        assert_eq!(cut_to_budget(&mut es, 1000), None, "alone, nothing to cut");
        let mut none = entries(&[]);
        assert_eq!(cut_to_budget(&mut none, 1000), None);

        // Exactly the budget fits; a byte more does not.
        let one = wire::encoded_len(&entries(&[100])[0]);
        let mut es = entries(&[100, 100, 100]);
        assert_eq!(cut_to_budget(&mut es, 2 * one), Some(es[1].log_id));
        assert_eq!(es.len(), 2);
        let mut es = entries(&[100, 100]);
        assert_eq!(cut_to_budget(&mut es, 2 * one), None);
        let mut es = entries(&[100, 100]);
        assert_eq!(cut_to_budget(&mut es, 2 * one - 1), Some(es[0].log_id));
    }

    #[test]
    fn a_cut_append_answers_a_partial_success_up_to_its_last_entry() {
        let last = LogId::new(CommittedLeaderId::new(2, 1), 7);
        assert_eq!(
            answer(AppendEntriesResponse::Success, Some(last)),
            AppendEntriesResponse::PartialSuccess(Some(last))
        );
        assert_eq!(
            answer(AppendEntriesResponse::Success, None),
            AppendEntriesResponse::Success
        );
        let others = || {
            [
                AppendEntriesResponse::Conflict,
                AppendEntriesResponse::HigherVote(openraft::Vote::new(3, 2)),
            ]
        };
        for (other, expected) in others().into_iter().zip(others()) {
            assert_eq!(answer(other, Some(last)), expected);
        }
        for (other, expected) in others().into_iter().zip(others()) {
            assert_eq!(answer(other, None), expected);
        }
    }
}
