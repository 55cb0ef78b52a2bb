//! A replicated key-value server: [`directkv_raft`] under openraft, with
//! openraft's network and a client API over HTTP ([`server`]), a client
//! that follows the leader ([`client`]), node processes on loopback for
//! tests and benchmarks ([`cluster`]) with forwarders that partition them
//! ([`proxy`]), the replication bench ([`bench`](mod@bench)), and a
//! history of client operations ([`history`]) with a linearizability
//! checker to judge it ([`lincheck`]), and, with the `sim` feature, a
//! deterministic simulation of a whole cluster in one process (`sim`).
//! The `directkv-raft-node` program runs all of it.

#![deny(missing_docs)]

pub mod api;
pub mod bench;
pub mod client;
pub mod cluster;
pub mod history;
pub mod lincheck;
pub mod network;
pub mod proxy;
pub mod server;
#[cfg(feature = "sim")]
pub mod sim;
pub mod wire;
