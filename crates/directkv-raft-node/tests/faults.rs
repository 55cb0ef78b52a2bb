//! Three node processes on loopback under faults, judged as clients see
//! them. Writers put unique keys, overwrite, delete and compare-and-set a
//! small set of shared keys, and now and then write a batch of two shared
//! keys; readers read shared keys and the writers' latest unique keys.
//! Every operation goes into one history with its outcome, unknown ones
//! (timeouts, `Failed`) included, each recorded once however often the
//! client resent it. Meanwhile the test SIGKILLs the leader again and
//! again (`DIRECTKV_RAFT_LEADER_KILLS`, 20 by default), a follower every
//! fourth round, restarting each, and every third round pauses the leader
//! with SIGSTOP for longer than the longest election timeout before
//! resuming it with SIGCONT. At the end the history must be linearizable
//! ([`directkv_raft_node::lincheck`]; undecided fails too), every
//! acknowledged unique put must be readable (linearizably) from the
//! leader, and the three state machines must agree: the same last applied
//! index and the same digest of every key and value.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::BTreeSet;

use directkv_raft::{NodeId, Request, Response};
use directkv_raft_node::client::{Client, ClientError};
use directkv_raft_node::cluster::{Cluster, NodeArgs};
use directkv_raft_node::history::{History, Op, Outcome};
use directkv_raft_node::lincheck::{self, Budget, Verdict};

const WRITERS: usize = 4;
const READERS: usize = 2;

/// Keys every writer overwrites.
const SHARED_KEYS: usize = 4;

/// The client id of the final reads.
const FINAL_READER: u32 = 100;

/// How long a paused leader stays stopped: over the election timeout's
/// high end (twice `NodeArgs::election_ms`, 400 ms by default).
const PAUSE: Duration = Duration::from_millis(1200);

fn kills() -> usize {
    std::env::var("DIRECTKV_RAFT_LEADER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

fn shared(i: usize) -> Vec<u8> {
    format!("s{}", i % SHARED_KEYS).into_bytes()
}

fn unique(w: usize, seq: u64) -> Vec<u8> {
    format!("w{w}-{seq:06}").into_bytes()
}

/// A small deterministic generator (xorshift64*), one per task.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Writer `w`'s `seq`th request: mostly a unique put, else a shared key's
/// put, delete, compare-and-set (expecting the value `known` last showed
/// it) or a batch of two shared puts. Every value is new.
fn writer_request(w: usize, seq: u64, rng: &mut Rng, known: &[Option<Vec<u8>>]) -> Request {
    let value = format!("w{w} {seq}").into_bytes();
    let s = rng.below(SHARED_KEYS as u64) as usize;
    match rng.below(10) {
        0..=5 => Request::Put {
            key: unique(w, seq),
            value,
        },
        6 => Request::Put {
            key: shared(s),
            value,
        },
        7 if rng.below(3) == 0 => Request::Delete { key: shared(s) },
        7 | 8 => Request::CompareAndSet {
            key: shared(s),
            expected: known[s].clone(),
            new: Some(value),
        },
        _ => Request::Batch(vec![
            Request::Put {
                key: shared(s),
                value: [&value[..], b" a"].concat(),
            },
            Request::Put {
                key: shared(s + 1),
                value: [&value[..], b" b"].concat(),
            },
        ]),
    }
}

/// What writer `w` learns of shared key values from an answer.
fn learn(req: &Request, resp: &Response, known: &mut [Option<Vec<u8>>]) {
    let slot = |key: &[u8]| {
        let s = std::str::from_utf8(&key[1..]).ok()?.parse::<usize>().ok()?;
        (key[0] == b's').then_some(s)
    };
    match (req, resp) {
        (Request::Batch(reqs), Response::Batch(resps)) => {
            for (r, a) in reqs.iter().zip(resps) {
                learn(r, a, known);
            }
        }
        (Request::Put { key, value }, _) => slot(key).into_iter().for_each(|s| {
            known[s] = Some(value.clone());
        }),
        (Request::Delete { key }, _) => slot(key).into_iter().for_each(|s| known[s] = None),
        (Request::CompareAndSet { key, new, .. }, Response::Done { .. }) => {
            slot(key).into_iter().for_each(|s| known[s] = new.clone())
        }
        (Request::CompareAndSet { key, .. }, Response::Mismatch { current }) => slot(key)
            .into_iter()
            .for_each(|s| known[s] = current.clone()),
        _ => {}
    }
}

/// Where each writer is: its next sequence number.
type Progress = Arc<Vec<AtomicU64>>;

fn start_writers(
    cluster: &Cluster,
    stop: &Arc<AtomicBool>,
    history: &Arc<History>,
    progress: &Progress,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..WRITERS)
        .map(|w| {
            let mut client = cluster.client();
            client.patience = Duration::from_secs(3);
            let (stop, history, progress) = (stop.clone(), history.clone(), progress.clone());
            tokio::spawn(async move {
                let mut rng = Rng(0x9E37_79B9 + w as u64);
                let mut known = vec![None; SHARED_KEYS];
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let req = writer_request(w, seq, &mut rng, &known);
                    // Recorded once with its final outcome, never written
                    // again by the test: an unknown one stays unknown.
                    if let Ok(done) = history.write(w as u32, &mut client, &req).await {
                        learn(&req, &done.response, &mut known);
                    }
                    seq += 1;
                    progress[w].store(seq, Ordering::Relaxed);
                }
            })
        })
        .collect()
}

fn start_readers(
    cluster: &Cluster,
    stop: &Arc<AtomicBool>,
    history: &Arc<History>,
    progress: &Progress,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..READERS)
        .map(|r| {
            let mut client = cluster.client();
            client.patience = Duration::from_secs(3);
            let (stop, history, progress) = (stop.clone(), history.clone(), progress.clone());
            tokio::spawn(async move {
                let mut rng = Rng(0xC0FF_EE00 + r as u64);
                while !stop.load(Ordering::Relaxed) {
                    let key = if rng.below(2) == 0 {
                        shared(rng.below(SHARED_KEYS as u64) as usize)
                    } else {
                        // One of a writer's latest: in flight, done, or
                        // never a put's key (then absent).
                        let w = rng.below(WRITERS as u64) as usize;
                        let at = progress[w].load(Ordering::Relaxed);
                        unique(w, at.saturating_sub(rng.below(3)))
                    };
                    let id = (WRITERS + r) as u32;
                    // A failed read is in the history too (as unknown).
                    let _ = history.read(id, &mut client, &key).await;
                }
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
    let all: Vec<NodeId> = cluster.addrs().keys().copied().collect();
    converged_among(cluster, &all).await
}

/// As [`converged`], for the nodes `ids`.
async fn converged_among(
    cluster: &Cluster,
    ids: &[NodeId],
) -> Vec<directkv_raft_node::api::NodeState> {
    let client = cluster.client();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut states = Vec::new();
        for addr in ids.iter().map(|&id| cluster.addr(id)) {
            match client.state(addr).await {
                Ok(s) => states.push(s),
                // Busy (installing a snapshot, say): ask again.
                Err(_) if Instant::now() < deadline => break,
                Err(e) => panic!("no state from {addr}: {e}"),
            }
        }
        if states.len() < ids.len() {
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

/// The faults of one run: leader kills, follower kills, leader pauses.
async fn faults(cluster: &mut Cluster) -> (usize, usize, usize) {
    let (mut leader_kills, mut follower_kills, mut pauses) = (0, 0, 0);
    for round in 0..kills() {
        tokio::time::sleep(Duration::from_millis(300 + (round as u64 * 97) % 400)).await;
        let leader = cluster
            .leader(Duration::from_secs(30))
            .await
            .expect("leader");
        if round % 3 == 1 {
            // Stalled past the election timeout: the others elect a new
            // leader while the old one still believes it leads.
            cluster.pause(leader).expect("pause");
            tokio::time::sleep(PAUSE).await;
            cluster.resume(leader).expect("resume");
            pauses += 1;
            continue;
        }
        kill_and_restart(cluster, leader).await;
        leader_kills += 1;
        if round % 4 == 3 {
            let leader = cluster
                .leader(Duration::from_secs(30))
                .await
                .expect("leader");
            let follower = (1..=3).find(|&id| id != leader).expect("a follower");
            kill_and_restart(cluster, follower).await;
            follower_kills += 1;
        }
    }
    (leader_kills, follower_kills, pauses)
}

/// Reads every acknowledged unique put back (into the history too) and
/// asserts each has its value; returns how many.
async fn acknowledged_puts_are_readable(history: &History, client: &mut Client) -> usize {
    let acked: Vec<(Vec<u8>, Vec<u8>)> = history
        .records()
        .into_iter()
        .filter_map(|r| match (r.op, r.outcome) {
            (Op::Write(Request::Put { key, value }), Outcome::Written(_)) if key[0] == b'w' => {
                Some((key, value))
            }
            _ => None,
        })
        .collect();
    for (key, value) in &acked {
        let got = history.read(FINAL_READER, client, key).await.expect("read");
        assert_eq!(
            got.as_ref(),
            Some(value),
            "acknowledged write {}",
            String::from_utf8_lossy(key)
        );
    }
    acked.len()
}

/// Judges the history: linearizable, or the test fails with why.
fn judge(history: &History) {
    let records = history.records();
    let unknown_writes = records
        .iter()
        .filter(|r| matches!(r.op, Op::Write(_)) && !r.is_known())
        .count();
    let started = Instant::now();
    let report = lincheck::check(&records, Budget::default());
    eprintln!(
        "history: {} operations, {unknown_writes} writes of unknown outcome; checker: {} \
         partitions (largest {}), {} searched ({} unknown), {} left out, {} unknown writes \
         left out (nothing showed them), {} steps, {:?}",
        records.len(),
        report.partitions,
        report.largest_partition,
        report.operations,
        report.unknown,
        report.skipped,
        report.unseen,
        report.steps,
        started.elapsed()
    );
    match report.verdict {
        Verdict::Linearizable => {}
        Verdict::Refused(why) => panic!("{why}"),
        Verdict::Undecided(u) => panic!("the checker could not decide: {u}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn histories_are_linearizable_and_acknowledged_writes_kept_over_kills_and_pauses() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let args = NodeArgs {
        cache_mib: 16,
        // Snapshots and purges happen during the run: a restarted node may
        // catch up from a snapshot.
        snapshot_every: 200,
        ..NodeArgs::default()
    };
    assert!(PAUSE > Duration::from_millis(2 * args.election_ms));
    let mut cluster = three_nodes(dir.path(), args).await;
    cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("leader");
    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(History::new());
    let progress: Progress = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = start_writers(&cluster, &stop, &history, &progress);
    tasks.extend(start_readers(&cluster, &stop, &history, &progress));
    let (leader_kills, follower_kills, pauses) = faults(&mut cluster).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("client task");
    }
    eprintln!("{leader_kills} leader kills, {follower_kills} follower kills, {pauses} pauses");
    assert_eq!(leader_kills + pauses, kills());
    let acked = acknowledged_puts_are_readable(&history, &mut cluster.client()).await;
    assert!(acked > 100, "the writers made progress: {acked}");
    let states = converged(&cluster).await;
    assert!(states[0].keys >= acked as u64);
    judge(&history);
}

fn partitions() -> usize {
    std::env::var("DIRECTKV_RAFT_PARTITIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
}

/// Replaces voter `out` with node `new` while `out` is cut off: `new`
/// (started if it is not running) is added as a learner, caught up and
/// promoted in one change that removes `out`, which is then killed (a
/// removed server is shut down) once the change has committed.
async fn replace_voter(
    cluster: &mut Cluster,
    voters: &mut BTreeSet<NodeId>,
    out: NodeId,
    new: NodeId,
) {
    if !cluster.is_running(new) {
        cluster.start(new).await.expect("start the new voter");
    }
    let mut admin = cluster.client();
    admin.patience = Duration::from_secs(60);
    admin
        .add_learner(new, cluster.addr(new))
        .await
        .expect("a learner caught up");
    assert!(voters.remove(&out) && voters.insert(new));
    admin
        .change_membership(voters.clone())
        .await
        .expect("the voters changed");
    cluster.kill(out).expect("shut the removed voter down");
}

/// Partitions and membership changes, judged the same way. Four node
/// processes behind forwarders (`Cluster::partitionable`), three of them
/// the first voters. Each round (`DIRECTKV_RAFT_PARTITIONS`, 8 by default)
/// cuts one node off from all the others, then heals: on even rounds the
/// leader, until the others have elected a leader of their own (and a
/// little longer), on odd ones a follower, for longer than an election
/// timeout.
/// On rounds 3 and 7 the cut-off follower is replaced while cut off: the
/// spare node is added as a learner and promoted in one change that
/// removes the follower, which is then shut down (on round 7 the spare is
/// the voter removed on round 3, restarted with its old log). The history
/// must be linearizable, every acknowledged unique put readable, and the
/// final voters must agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn histories_are_linearizable_over_partitions_and_membership_changes() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let args = NodeArgs {
        cache_mib: 16,
        snapshot_every: 200,
        ..NodeArgs::default()
    };
    assert!(PAUSE > Duration::from_millis(2 * args.election_ms));
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_directkv-raft-node"));
    let mut cluster = Cluster::partitionable(exe, dir.path(), 4, args)
        .await
        .expect("cluster");
    let mut voters: BTreeSet<NodeId> = (1..=3).collect();
    for &id in &voters {
        cluster.start(id).await.expect("start");
    }
    let first = voters.iter().map(|&id| (id, cluster.addr(id).to_string()));
    cluster.client().init(first.collect()).await.expect("init");
    cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("leader");
    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(History::new());
    let progress: Progress = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = start_writers(&cluster, &stop, &history, &progress);
    tasks.extend(start_readers(&cluster, &stop, &history, &progress));
    let mut spare: NodeId = 4;
    let (mut replaced, mut elections) = (0, 0);
    for round in 0..partitions() {
        tokio::time::sleep(Duration::from_millis(300 + (round as u64 * 97) % 400)).await;
        let leader = cluster
            .leader(Duration::from_secs(30))
            .await
            .expect("leader");
        let alone = match round % 2 {
            0 => leader,
            _ => *voters.iter().find(|&&id| id != leader).expect("a follower"),
        };
        let rest: Vec<NodeId> = cluster
            .addrs()
            .keys()
            .copied()
            .filter(|&id| id != alone)
            .collect();
        cluster.partition(&[&[alone], &rest]);
        if alone == leader {
            // Until the others elect a leader of their own; the old one
            // still believes it leads, and takes writes it cannot commit.
            let new = leader_among(&cluster, &rest).await;
            assert_ne!(new, leader);
            elections += 1;
        }
        tokio::time::sleep(PAUSE).await;
        if round % 4 == 3 {
            replace_voter(&mut cluster, &mut voters, alone, spare).await;
            spare = alone;
            replaced += 1;
        }
        cluster.heal();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("client task");
    }
    eprintln!(
        "{} partitions, {elections} leaders replaced while cut off, {replaced} voters \
         replaced; voters {voters:?}",
        partitions()
    );
    assert_eq!(replaced, partitions() / 4);
    assert_eq!(elections, partitions().div_ceil(2));
    let acked = acknowledged_puts_are_readable(&history, &mut cluster.client()).await;
    assert!(acked > 100, "the writers made progress: {acked}");
    let ids: Vec<NodeId> = voters.iter().copied().collect();
    let states = converged_among(&cluster, &ids).await;
    assert!(states.iter().all(|s| s.voters == voters), "{states:?}");
    judge(&history);
}

/// Waits until one of the running nodes `among` says it leads, and
/// returns it.
async fn leader_among(cluster: &Cluster, among: &[NodeId]) -> NodeId {
    let client = cluster.client();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for &id in among.iter().filter(|&&id| cluster.is_running(id)) {
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
