//! Partitions of real node processes on loopback, through the forwarders
//! of a partitionable cluster (`Cluster::partitionable`, `proxy.rs`):
//!
//! - A leader cut off from the majority commits nothing: a write sent to it
//!   is never acknowledged, a linearizable read from it never answers; the
//!   majority elects a leader of its own and goes on committing; once
//!   healed, the replicas agree, the majority's write is there and the
//!   write the isolated leader took is not (its entry was overwritten).
//! - Membership changes while a voter is cut off: a learner added, caught
//!   up and promoted, the cut-off voter removed; the cluster of the new
//!   voters commits, and after healing every node agrees.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use directkv_raft::{NodeId, Request};
use directkv_raft_node::client::Client;
use directkv_raft_node::cluster::{Cluster, NodeArgs};

fn put(key: &str, value: &str) -> Request {
    Request::Put {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    }
}

/// A client of node `id` alone, which gives up after `patience`.
fn client_of(cluster: &Cluster, ids: &[NodeId], patience: Duration) -> Client {
    let mut c = Client::new(ids.iter().map(|&id| cluster.addr(id).to_string()).collect());
    c.patience = patience;
    c
}

/// Nodes `1..=total` of a partitionable cluster; `1..=voters` started and
/// made the cluster.
async fn cluster(dir: &std::path::Path, total: u64, voters: u64) -> Cluster {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_directkv-raft-node"));
    let args = NodeArgs {
        cache_mib: 16,
        ..NodeArgs::default()
    };
    let mut cluster = Cluster::partitionable(exe, dir, total, args)
        .await
        .expect("cluster");
    for id in 1..=voters {
        cluster.start(id).await.expect("start");
    }
    let members = cluster
        .addrs()
        .iter()
        .filter(|(id, _)| **id <= voters)
        .map(|(id, addr)| (*id, addr.clone()))
        .collect();
    cluster.client().init(members).await.expect("init");
    cluster
}

/// Waits until one of `among` says it leads, and returns it.
async fn leader_among(cluster: &Cluster, among: &[NodeId]) -> NodeId {
    let client = cluster.client();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for &id in among {
            if let Ok(s) = client.state(cluster.addr(id)).await {
                if s.leader == Some(id) {
                    return id;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader among {among:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every node in `ids` has applied the same entries, asserts
/// their state machines agree, and returns the number of keys.
async fn agree(cluster: &Cluster, ids: &[NodeId]) -> u64 {
    let client = cluster.client();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut states = Vec::new();
        for &id in ids {
            if let Ok(s) = client.state(cluster.addr(id)).await {
                states.push(s);
            }
        }
        let same = states.len() == ids.len()
            && states
                .windows(2)
                .all(|w| (w[0].applied, w[0].digest) == (w[1].applied, w[1].digest));
        if same {
            return states[0].keys;
        }
        assert!(Instant::now() < deadline, "replicas disagree: {states:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_off_from_the_majority_commits_nothing() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let cluster = cluster(dir.path(), 3, 3).await;
    let old = leader_among(&cluster, &[1, 2, 3]).await;
    let rest: Vec<NodeId> = (1..=3).filter(|&id| id != old).collect();
    client_of(&cluster, &[old], Duration::from_secs(10))
        .write(&put("before", "1"))
        .await
        .expect("a write before the cut");
    cluster.partition(&[&[old], &rest]);
    assert!(cluster.is_cut(old, rest[0]) && cluster.is_cut(rest[1], old));
    assert!(!cluster.is_cut(rest[0], rest[1]));

    // The isolated leader can neither commit nor serve a linearizable read.
    let mut isolated = client_of(&cluster, &[old], Duration::from_secs(3));
    let lost = isolated.write(&put("isolated", "never")).await;
    assert!(lost.is_err(), "a write without a quorum: {lost:?}");
    let read = isolated.read(b"before").await;
    assert!(read.is_err(), "a read without a quorum: {read:?}");

    // The majority elects its own leader and commits.
    let new = leader_among(&cluster, &rest).await;
    assert_ne!(new, old);
    client_of(&cluster, &rest, Duration::from_secs(20))
        .write(&put("majority", "2"))
        .await
        .expect("the majority commits");

    cluster.heal();
    assert_eq!(agree(&cluster, &[1, 2, 3]).await, 2);
    let mut all = cluster.client();
    assert_eq!(
        all.read(b"majority").await.expect("read"),
        Some(b"2".to_vec())
    );
    assert_eq!(
        all.read(b"before").await.expect("read"),
        Some(b"1".to_vec())
    );
    // The isolated leader's entry was overwritten, never applied anywhere.
    assert_eq!(all.read(b"isolated").await.expect("read"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn membership_changes_while_a_voter_is_cut_off() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let mut cluster = cluster(dir.path(), 4, 3).await;
    let leader = leader_among(&cluster, &[1, 2, 3]).await;
    let cut = (1..=3).find(|&id| id != leader).expect("a follower");
    let keep: Vec<NodeId> = (1..=4).filter(|&id| id != cut).collect();
    cluster.partition(&[&[cut], &keep]);
    cluster.start(4).await.expect("start the learner");
    let mut client = client_of(&cluster, &keep, Duration::from_secs(30));
    for i in 0..20 {
        client
            .write(&put(&format!("k{i}"), "v"))
            .await
            .expect("the majority commits");
    }
    client
        .add_learner(4, cluster.addr(4))
        .await
        .expect("a learner caught up");
    let voters: BTreeSet<NodeId> = keep.iter().copied().collect();
    client
        .change_membership(voters.clone())
        .await
        .expect("the cut-off voter removed, the learner promoted");
    client
        .write(&put("after", "v"))
        .await
        .expect("the new voters commit");
    let state = client.state(cluster.addr(4)).await.expect("state");
    assert_eq!(state.voters, voters);
    assert_eq!(agree(&cluster, &keep).await, 21);

    // Healed, the removed node learns nothing it may act on; the voters
    // still agree and still commit.
    cluster.heal();
    client
        .write(&put("healed", "v"))
        .await
        .expect("commits after healing");
    assert_eq!(agree(&cluster, &keep).await, 22);
}
