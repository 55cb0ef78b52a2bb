//! The client API's messages: what a client sends a node over HTTP and
//! what it gets back.

use std::collections::{BTreeMap, BTreeSet};

use directkv_raft::{NodeId, Response};
use serde::{Deserialize, Serialize};

/// A node's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Reply<T> {
    /// Done.
    Ok(T),
    /// This node is not the leader; the leader, when it knows one.
    NotLeader {
        /// The leader's id.
        leader: Option<NodeId>,
        /// The leader's address.
        addr: Option<String>,
    },
    /// Refused before anything was done (over a limit; the node shutting
    /// down).
    Rejected(String),
    /// Failed. For a write, its outcome is unknown: it may yet commit.
    Failed(String),
}

/// A committed write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    /// The log index it committed at.
    pub index: u64,
    /// The state machine's answer.
    pub response: Response,
}

/// A linearizable read of one key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Read {
    /// The key.
    pub key: Vec<u8>,
}

/// Makes a new cluster of these nodes (on one node, once).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Init {
    /// Each member's id and address.
    pub nodes: BTreeMap<NodeId, String>,
}

/// Adds a learner: a node that receives the log but does not vote.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddLearner {
    /// Its id.
    pub id: NodeId,
    /// Its address.
    pub addr: String,
}

/// Makes these nodes the voting members (learners among them are
/// promoted; members left out become learners).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChangeMembership {
    /// The voters.
    pub members: BTreeSet<NodeId>,
}

/// A node's own view, read without consensus: for tests that compare
/// replicas and for operators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    /// The node's id.
    pub id: NodeId,
    /// The leader it knows.
    pub leader: Option<NodeId>,
    /// Its current term.
    pub term: u64,
    /// The last log index it applied.
    pub applied: Option<u64>,
    /// The voting members.
    pub voters: BTreeSet<NodeId>,
    /// Keys in its state machine.
    pub keys: u64,
    /// A CRC32C of every key and value in order: equal on replicas that
    /// applied the same entries.
    pub digest: u32,
}
