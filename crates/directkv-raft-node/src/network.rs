//! openraft's network over HTTP: each Raft RPC is a POST of its request as
//! JSON to the target node's `/raft/…` route, answered with
//! `Result<response, RaftError>` as JSON (see [`crate::server`]).

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
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Makes a connection to each peer; they share one HTTP client (and its
/// connection pool).
#[derive(Clone)]
pub struct Network {
    client: reqwest::Client,
}

impl Network {
    /// A network whose requests give up after `timeout` unless openraft
    /// asks for less.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(timeout: Duration) -> reqwest::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .tcp_nodelay(true)
            .build()?;
        Ok(Network { client })
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            client: self.client.clone(),
            target,
            node: node.clone(),
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
        let sent = self
            .client
            .post(url)
            .timeout(option.hard_ttl())
            .json(req)
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
        let body: Result<Resp, E> = resp
            .json()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
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
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        self.call("append", &rpc, &option).await
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
