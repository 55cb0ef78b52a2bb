//! Three node processes on loopback; writers put unique keys and record
//! every acknowledged write; the test SIGKILLs the leader again and again
//! (`DIRECTKV_RAFT_LEADER_KILLS`, 20 by default) and, separately, a
//! follower every fourth round, restarting each. At the end every
//! acknowledged write must be readable (linearizably) from the leader, and
//! the three state machines must agree: the same last applied index and
//! the same digest of every key and value.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use directkv_raft::Request;
use directkv_raft_node::client::ClientError;
use directkv_raft_node::cluster::{Cluster, NodeArgs};

const WRITERS: usize = 4;

fn kills() -> usize {
    std::env::var("DIRECTKV_RAFT_LEADER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

type Acked = Arc<Mutex<Vec<(Vec<u8>, Vec<u8>)>>>;

fn start_writers(
    cluster: &Cluster,
    stop: &Arc<AtomicBool>,
    acked: &Acked,
) -> Vec<tokio::task::JoinHandle<u64>> {
    (0..WRITERS)
        .map(|w| {
            let mut client = cluster.client();
            client.patience = Duration::from_secs(3);
            let (stop, acked) = (stop.clone(), acked.clone());
            tokio::spawn(async move {
                let mut unknown = 0;
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("w{w}-{seq:06}").into_bytes();
                    let value = format!("value {w} {seq}").into_bytes();
                    let req = Request::Put {
                        key: key.clone(),
                        value: value.clone(),
                    };
                    match client.write(&req).await {
                        Ok(_) => acked.lock().expect("acked").push((key, value)),
                        // Its outcome is unknown: it may or may not be there.
                        Err(_) => unknown += 1,
                    }
                    seq += 1;
                }
                unknown
            })
        })
        .collect()
}

/// Kills node `id`, waits for a leader among the others, restarts it.
async fn kill_and_restart(cluster: &mut Cluster, id: u64) {
    cluster.kill(id).expect("kill");
    let leader = cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("a new leader among the survivors");
    assert_ne!(leader, id, "the dead node does not lead");
    cluster.start(id).await.expect("restart");
}

/// Waits until every node has applied the same entries, asserts that
/// their state machines agree, and returns their states.
async fn converged(cluster: &Cluster) -> Vec<directkv_raft_node::api::NodeState> {
    let client = cluster.client();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut states = Vec::new();
        for addr in cluster.addrs().values() {
            match client.state(addr).await {
                Ok(s) => states.push(s),
                // Busy (installing a snapshot, say): ask again.
                Err(_) if Instant::now() < deadline => break,
                Err(e) => panic!("no state from {addr}: {e}"),
            }
        }
        if states.len() < cluster.addrs().len() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let same = states
            .windows(2)
            .all(|w| (w[0].applied, w[0].digest) == (w[1].applied, w[1].digest));
        if same || Instant::now() > deadline {
            for s in &states[1..] {
                assert_eq!(
                    (s.applied, s.keys, s.digest),
                    (states[0].applied, states[0].keys, states[0].digest),
                    "replicas agree: {states:?}"
                );
            }
            return states;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Three node processes of the test's binary under `dir`, started and
/// made one cluster.
async fn three_nodes(dir: &std::path::Path, args: NodeArgs) -> Cluster {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_directkv-raft-node"));
    let mut cluster = Cluster::new(exe, dir, 3, args).expect("cluster");
    for id in 1..=3 {
        cluster.start(id).await.expect("start");
    }
    cluster
        .client()
        .init(cluster.addrs().clone())
        .await
        .expect("init");
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_acknowledged_write_is_lost_over_leader_kills_and_replicas_agree() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let args = NodeArgs {
        cache_mib: 16,
        // Snapshots and purges happen during the run: a restarted node may
        // catch up from a snapshot.
        snapshot_every: 200,
        ..NodeArgs::default()
    };
    let mut cluster = three_nodes(dir.path(), args).await;
    cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("leader");
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Acked = Arc::default();
    let writers = start_writers(&cluster, &stop, &acked);
    let mut leader_kills = 0;
    for round in 0..kills() {
        tokio::time::sleep(Duration::from_millis(300 + (round as u64 * 97) % 400)).await;
        let leader = cluster
            .leader(Duration::from_secs(30))
            .await
            .expect("leader");
        kill_and_restart(&mut cluster, leader).await;
        leader_kills += 1;
        if round % 4 == 3 {
            let leader = cluster
                .leader(Duration::from_secs(30))
                .await
                .expect("leader");
            let follower = (1..=3).find(|&id| id != leader).expect("a follower");
            kill_and_restart(&mut cluster, follower).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut unknown = 0;
    for w in writers {
        unknown += w.await.expect("writer");
    }
    let acked = acked.lock().expect("acked").clone();
    eprintln!(
        "{leader_kills} leader kills; {} writes acknowledged, {unknown} with unknown outcome",
        acked.len()
    );
    assert!(leader_kills >= kills());
    assert!(
        acked.len() > 100,
        "the writers made progress: {}",
        acked.len()
    );
    let mut client = cluster.client();
    for (key, value) in &acked {
        let got = client.read(key).await.expect("read");
        assert_eq!(
            got.as_ref(),
            Some(value),
            "acknowledged write {}",
            String::from_utf8_lossy(key)
        );
    }
    let states = converged(&cluster).await;
    assert!(states[0].keys >= acked.len() as u64);
}

/// Values of the largest size a command may carry, and a snapshot of
/// several MiB (more than one install chunk, more than a default HTTP body
/// limit), reach a follower that was down while the log it missed was
/// purged: it catches up by installing the snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_values_and_snapshots_reach_a_follower_that_missed_them() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let args = NodeArgs {
        cache_mib: 16,
        snapshot_every: 4,
        ..NodeArgs::default()
    };
    let mut cluster = three_nodes(dir.path(), args).await;
    let leader = cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("leader");
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    cluster.kill(follower).expect("kill");
    let mut client = cluster.client();
    let big = |i: u8| vec![i; directkv_raft::VALUE_MAX];
    for i in 0..12u8 {
        let req = Request::Put {
            key: vec![b'k', i],
            value: big(i),
        };
        // A put of the same value again is harmless, so an outcome left
        // unknown (a request that outlived the client's timeout on a busy
        // machine) is settled by writing again.
        let mut tries = 0;
        loop {
            match client.write(&req).await {
                Ok(_) => break,
                Err(ClientError::Unknown(why)) if tries < 5 => {
                    tries += 1;
                    eprintln!("write {i}: outcome unknown ({why}); writing again");
                }
                Err(e) => panic!("a write of the largest value: {e:?}"),
            }
        }
    }
    cluster.start(follower).await.expect("restart");
    let states = converged(&cluster).await;
    assert_eq!(states[0].keys, 12);
    let got = client.read(&[b'k', 11]).await.expect("read");
    assert_eq!(got, Some(big(11)));
}
