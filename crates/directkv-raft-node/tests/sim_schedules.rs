//! Scripted schedules in the simulated cluster
//! (`directkv_raft_node::sim::Script`): sequences that random faults reach
//! too rarely, run step by step, partitions on cue. The five-node resend
//! sequence: a write the leader copied to one follower only, removed from
//! the leader's log as a conflict by a leader elected without that
//! follower, which is elected in turn and commits it, is applied once:
//! its client is told its outcome is unknown and does not send it again,
//! and the history is linearizable.

use std::path::Path;
use std::time::Duration;

use directkv_raft::Request;
use directkv_raft_node::history::{Outcome, Record};
use directkv_raft_node::lincheck::{self, Budget, Verdict};
use directkv_raft_node::sim::{block_on, Script};

/// A client's patience in these schedules: longer than any of them.
const LONG: Duration = Duration::from_secs(60);

fn put(value: &str) -> Request {
    Request::Put {
        key: b"k".to_vec(),
        value: value.as_bytes().to_vec(),
    }
}

#[test]
fn a_write_removed_as_a_conflict_then_committed_elsewhere_is_applied_once() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let history = block_on(7, resend_schedule(dir.path()))
        .expect("the runtime")
        .expect("the schedule runs");
    let report = lincheck::check(&history, Budget::default());
    assert_eq!(report.verdict, Verdict::Linearizable, "{history:#?}");
}

async fn resend_schedule(root: &Path) -> anyhow::Result<Vec<Record>> {
    let s = Script::start(7, 5, root).await?;
    let written = |o: &Outcome| matches!(o, Outcome::Written(_));
    assert!(written(&s.write(0, 1, put("a"), LONG).await));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let synced = s.last_log_at(1);
    assert!(
        (2..=5).all(|id| s.last_log_at(id) == synced),
        "every node holds the first write"
    );
    // Leader 1 with follower 2 alone: client 1's write W reaches 2 only.
    s.cut(&[1, 2], &[3, 4, 5]);
    let a = tokio::spawn({
        let s = s.clone();
        async move { s.write(1, 1, put("w"), LONG).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let w = synced.map(|i| i + 1);
    assert_eq!(
        (s.last_log_at(1), s.last_log_at(2)),
        (w, w),
        "W is in 1's and 2's logs"
    );
    assert_eq!(s.last_log_at(3), synced, "W is not in 3's log");
    // 3 is elected by 4 and 5 (not by 2), and its entries reach neither.
    s.mute_appends(3, 4);
    s.mute_appends(3, 5);
    s.elect(3).await?;
    // 3 with 1: 3's first entry replaces W in 1's log.
    s.heal();
    s.cut(&[1, 3], &[2, 4, 5]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(s.leader_at(1), Some(3), "1 follows 3");
    // 2, whose log holds W, is elected by 4 and 5 and commits W.
    s.elect(2).await?;
    let seen = s.read(2, 2, b"k", LONG).await;
    assert_eq!(
        seen,
        Outcome::Read(Some(b"w".to_vec())),
        "W committed through 2"
    );
    assert!(written(&s.write(2, 2, put("x"), LONG).await));
    // Every link mended: W was not proposed again.
    s.heal();
    let outcome = a.await?;
    assert_eq!(
        outcome,
        Outcome::Unknown,
        "W's client is told its outcome is unknown"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let last = s.read(2, 2, b"k", LONG).await;
    assert_eq!(
        last,
        Outcome::Read(Some(b"x".to_vec())),
        "W applied once, before x"
    );
    s.stop().await?;
    Ok(s.history())
}
