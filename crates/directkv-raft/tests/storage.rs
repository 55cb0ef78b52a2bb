//! directkv-raft beyond openraft's suite: the key-value commands, snapshots
//! built while entries apply and installed atomically, damaged snapshots
//! refused, purge and truncate across a reopen, and SIGKILL at random
//! points of a node's storage work (appends, applies, snapshot builds and
//! installs) losing no acknowledged append and applying no entry twice;
//! log reads and snapshot builds that go on while writes outrun the
//! version store.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

use common::{options, scratch, table_rows};
use directkv_raft::{
    Entry, LogStore, Request, Response, SnapshotBytes, StateMachine, KEY_MAX, VALUE_MAX,
};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().expect("runtime")
}

fn id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 0), index)
}

fn normal(index: u64, req: Request) -> Entry {
    Entry {
        log_id: id(index),
        payload: EntryPayload::Normal(req),
    }
}

fn put(index: u64, key: &[u8], value: &[u8]) -> Entry {
    normal(
        index,
        Request::Put {
            key: key.to_vec(),
            value: value.to_vec(),
        },
    )
}

#[test]
fn commands_answer_as_a_key_value_store() {
    let dir = scratch();
    // The smallest page size: the key limit must fit it.
    let (_log, mut sm) = directkv_raft::open(dir.path(), options(4096)).expect("open");
    let reader = sm.reader();
    let long_key = vec![b'k'; KEY_MAX];
    let cas = |i, expected: Option<&[u8]>, new: Option<&[u8]>| {
        normal(
            i,
            Request::CompareAndSet {
                key: b"c".to_vec(),
                expected: expected.map(<[u8]>::to_vec),
                new: new.map(<[u8]>::to_vec),
            },
        )
    };
    let entries = vec![
        put(1, b"a", b"1"),
        put(2, b"a", b"2"),
        normal(3, Request::Delete { key: b"a".to_vec() }),
        normal(4, Request::Delete { key: b"a".to_vec() }),
        cas(5, None, Some(b"x")),
        cas(6, None, Some(b"y")),
        cas(7, Some(b"x"), None),
        put(8, &long_key, &vec![1; 3000]),
        put(9, &vec![b'k'; KEY_MAX + 1], b"v"),
        put(10, b"big", &vec![0; VALUE_MAX + 1]),
    ];
    let out = rt().block_on(sm.apply(entries)).expect("apply");
    let done = |p: Option<&[u8]>| Response::Done {
        previous: p.map(<[u8]>::to_vec),
    };
    assert_eq!(
        out[..8].to_vec(),
        vec![
            done(None),
            done(Some(b"1")),
            done(Some(b"2")),
            done(None),
            done(None),
            Response::Mismatch {
                current: Some(b"x".to_vec())
            },
            done(Some(b"x")),
            done(None),
        ]
    );
    assert!(matches!(out[8], Response::Rejected { .. }), "{:?}", out[8]);
    assert!(matches!(out[9], Response::Rejected { .. }), "{:?}", out[9]);
    assert_eq!(reader.get(b"a").expect("get"), None);
    assert_eq!(reader.get(b"c").expect("get"), None);
    assert_eq!(reader.get(&long_key).expect("get"), Some(vec![1; 3000]));
    assert_eq!(reader.get(b"big").expect("get"), None);
    assert_eq!(reader.last_applied().expect("applied"), Some(id(10)));
    // A batch applies its commands in order, each answered; a batch in a
    // batch is refused whole.
    let batch = Request::Batch(vec![
        Request::Put {
            key: b"b".to_vec(),
            value: b"1".to_vec(),
        },
        Request::CompareAndSet {
            key: b"b".to_vec(),
            expected: Some(b"1".to_vec()),
            new: Some(b"2".to_vec()),
        },
        Request::Delete {
            key: b"none".to_vec(),
        },
    ]);
    let nested = Request::Batch(vec![Request::Batch(vec![])]);
    let out = rt()
        .block_on(sm.apply([normal(11, batch), normal(12, nested)]))
        .expect("apply");
    assert_eq!(
        out[0],
        Response::Batch(vec![done(None), done(Some(b"1")), done(None)])
    );
    assert!(matches!(out[1], Response::Rejected { .. }), "{:?}", out[1]);
    assert_eq!(reader.get(b"b").expect("get"), Some(b"2".to_vec()));
}

/// Every byte of a snapshot, read from its start.
fn bytes_of(rt: &tokio::runtime::Runtime, data: &mut SnapshotBytes) -> Vec<u8> {
    rt.block_on(async {
        data.seek(std::io::SeekFrom::Start(0)).await?;
        let mut out = Vec::new();
        data.read_to_end(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    })
    .expect("read the snapshot")
}

/// `bytes` received by `sm` as openraft's transport writes them.
fn receive(
    rt: &tokio::runtime::Runtime,
    sm: &mut StateMachine,
    bytes: &[u8],
) -> Box<SnapshotBytes> {
    rt.block_on(async {
        let mut data = sm.begin_receiving_snapshot().await.expect("begin");
        data.write_all(bytes).await.expect("write");
        data
    })
}

/// Every key in the database's data tables, of every generation.
fn raw_data_keys(sm: &StateMachine) -> usize {
    table_rows(sm.database(), "raft.data.")
}

#[test]
fn a_snapshot_is_built_while_entries_apply_and_installs_atomically() {
    let (d1, d2) = (scratch(), scratch());
    let (_l1, mut leader) = directkv_raft::open(d1.path(), options(4096)).expect("open");
    let (l2, mut follower) = directkv_raft::open(d2.path(), options(4096)).expect("open");
    let rt = rt();
    let batch = |from: u64, n: u64, tag: u8| -> Vec<Entry> {
        (from..from + n)
            .map(|i| put(i, format!("key{:05}", i % 700).as_bytes(), &[tag; 200]))
            .collect()
    };
    rt.block_on(leader.apply(batch(1, 1000, 1))).expect("apply");
    // The builder reads one snapshot; entries applied meanwhile are not in it.
    let mut builder = rt.block_on(leader.get_snapshot_builder());
    let expected = leader.reader().all().expect("all");
    let (snap, _) = rt.block_on(async {
        tokio::join!(builder.build_snapshot(), leader.apply(batch(1001, 300, 2)))
    });
    let snap = snap.expect("build");
    // The build read one snapshot, before or after the concurrent apply
    // committed: whichever, it holds exactly that state.
    let expected = match snap.meta.last_log_id {
        Some(l) if l == id(1000) => expected,
        Some(l) if l == id(1300) => leader.reader().all().expect("all"),
        other => panic!("a snapshot of a state never committed: {other:?}"),
    };
    // The follower holds older data of its own, which the install replaces.
    rt.block_on(follower.apply(batch(1, 50, 9))).expect("apply");
    let before = raw_data_keys(&follower);
    assert_eq!(before, 50);
    let mut snap = snap;
    let bytes = bytes_of(&rt, &mut snap.snapshot);
    rt.block_on(follower.install_snapshot(&snap.meta, snap.snapshot))
        .expect("install");
    assert_eq!(follower.reader().all().expect("all"), expected);
    assert_eq!(
        raw_data_keys(&follower),
        expected.1.len(),
        "the old generation is gone"
    );
    let mut current = rt
        .block_on(follower.get_current_snapshot())
        .expect("current")
        .expect("some");
    assert_eq!(current.meta, snap.meta);
    assert_eq!(bytes_of(&rt, &mut current.snapshot), bytes);
    // Reopened (a snapshot's bytes hold its database open), the follower
    // has the installed state and applies on.
    drop((l2, follower, current));
    let (_l2, mut follower) = directkv_raft::open(d2.path(), options(4096)).expect("reopen");
    let state = rt.block_on(follower.applied_state()).expect("state");
    assert_eq!(state.0, snap.meta.last_log_id);
    let last = state.0.map_or(0, |l| l.index);
    if last < 1300 {
        rt.block_on(follower.apply(batch(last + 1, 1300 - last, 2)))
            .expect("apply");
    }
    assert_eq!(
        follower.reader().all().expect("all"),
        leader.reader().all().expect("all")
    );
}

#[test]
fn a_damaged_snapshot_is_refused_and_changes_nothing() {
    let (d1, d2) = (scratch(), scratch());
    let (_l1, mut leader) = directkv_raft::open(d1.path(), options(4096)).expect("open");
    let (_l2, mut follower) = directkv_raft::open(d2.path(), options(4096)).expect("open");
    let rt = rt();
    rt.block_on(leader.apply((1..=20).map(|i| put(i, &[i as u8], b"v"))))
        .expect("apply");
    rt.block_on(follower.apply([put(1, b"mine", b"x")]))
        .expect("apply");
    let mut snap = rt
        .block_on(async { leader.get_snapshot_builder().await.build_snapshot().await })
        .expect("build");
    let bytes = bytes_of(&rt, &mut snap.snapshot);
    let before = follower.reader().all().expect("all");
    for at in [0, 9, bytes.len() / 2, bytes.len() - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x40;
        let bad = receive(&rt, &mut follower, &bad);
        let r = rt.block_on(follower.install_snapshot(&snap.meta, bad));
        assert!(r.is_err(), "a flip at byte {at} is refused");
        assert_eq!(follower.reader().all().expect("all"), before);
        assert_eq!(raw_data_keys(&follower), 1, "its staged pairs are gone");
    }
    // Good bytes under another snapshot's metadata are refused too.
    let mut other = snap.meta.clone();
    other.last_log_id = Some(id(19));
    let good = receive(&rt, &mut follower, &bytes);
    let r = rt.block_on(follower.install_snapshot(&other, good));
    assert!(r.is_err());
    assert_eq!(follower.reader().all().expect("all"), before);
    assert!(rt
        .block_on(follower.get_current_snapshot())
        .expect("get")
        .is_none());
}

fn log_indexes(log: &mut LogStore, rt: &tokio::runtime::Runtime) -> Vec<u64> {
    rt.block_on(log.try_get_log_entries(0..))
        .expect("read")
        .iter()
        .map(|e| e.log_id.index)
        .collect()
}

#[test]
fn purge_and_truncate_hold_across_a_reopen() {
    let dir = scratch();
    let rt = rt();
    {
        let (mut log, mut sm) = directkv_raft::open(dir.path(), options(4096)).expect("open");
        // Values big enough that both take several bounded transactions.
        let entries: Vec<Entry> = (1..=3000).map(|i| put(i, b"k", &[1; 2000])).collect();
        rt.block_on(log.blocking_append(entries.clone()))
            .expect("append");
        // A purge goes as far as the applied state: what openraft purges
        // is inside a snapshot of it.
        rt.block_on(sm.apply(entries[..2500].to_vec()))
            .expect("apply");
        rt.block_on(log.purge(id(1200))).expect("purge");
        rt.block_on(log.truncate(id(2501))).expect("truncate");
        assert_eq!(
            log_indexes(&mut log, &rt),
            (1201..=2500).collect::<Vec<_>>()
        );
        // Small entries: a short range is read whole.
        let some = rt
            .block_on(log.limited_get_log_entries(1201, 1211))
            .expect("read");
        assert!(some.iter().map(|e| e.log_id.index).eq(1201..1211));
    }
    let (mut log, _sm) = directkv_raft::open(dir.path(), options(4096)).expect("reopen");
    assert_eq!(
        log_indexes(&mut log, &rt),
        (1201..=2500).collect::<Vec<_>>()
    );
    let state = rt.block_on(log.get_log_state()).expect("state");
    assert_eq!(state.last_purged_log_id, Some(id(1200)));
    assert_eq!(state.last_log_id, Some(id(2500)));
    // Purged to past its end, the log keeps its last id in the purge record.
    rt.block_on(log.purge(id(2500))).expect("purge");
    let state = rt.block_on(log.get_log_state()).expect("state");
    assert_eq!(state.last_log_id, Some(id(2500)));
    assert!(log_indexes(&mut log, &rt).is_empty());
}

/// A follower is asked to purge up to a snapshot while it still installs
/// it. The purge shows at once, but is kept only as far as the applied
/// state reaches: a crash before the install's commit must not leave
/// entries that neither the log nor the state machine holds. Applying (or
/// installing) past the purge point completes it.
#[test]
fn a_purge_past_the_applied_state_waits_for_it() {
    let dir = scratch();
    let rt = rt();
    let entries: Vec<Entry> = (1..=150).map(|i| put(i, b"k", &[1; 100])).collect();
    {
        let (mut log, mut sm) = directkv_raft::open(dir.path(), options(4096)).expect("open");
        rt.block_on(log.blocking_append(entries.clone()))
            .expect("append");
        rt.block_on(sm.apply(entries[..100].to_vec()))
            .expect("apply");
        rt.block_on(log.purge(id(150))).expect("purge");
        let state = rt.block_on(log.get_log_state()).expect("state");
        assert_eq!(state.last_purged_log_id, Some(id(150)), "shown as done");
        assert!(
            log_indexes(&mut log, &rt).is_empty(),
            "nothing below it reads"
        );
        // A crash here (no install, no more applies): the log and the
        // applied state must still meet after the reopen.
    }
    let (mut log, mut sm) = directkv_raft::open(dir.path(), options(4096)).expect("reopen");
    let state = rt.block_on(log.get_log_state()).expect("state");
    let (applied, _) = rt.block_on(sm.applied_state()).expect("applied");
    assert_eq!(applied, Some(id(100)));
    assert_eq!(
        state.last_purged_log_id,
        Some(id(100)),
        "kept as far as applied"
    );
    assert_eq!(log_indexes(&mut log, &rt), (101..=150).collect::<Vec<_>>());
    // Purged again and applied past it: the purge is kept in full.
    rt.block_on(log.purge(id(150))).expect("purge");
    rt.block_on(sm.apply(entries[100..].to_vec()))
        .expect("apply");
    drop((log, sm));
    let (mut log, _sm) = directkv_raft::open(dir.path(), options(4096)).expect("reopen");
    let state = rt.block_on(log.get_log_state()).expect("state");
    assert_eq!(state.last_purged_log_id, Some(id(150)));
    assert!(log_indexes(&mut log, &rt).is_empty());
}

const CHILD_ENV: &str = "DIRECTKV_RAFT_KILL_CHILD";

/// The child of the kill test: appends entry i durably, says so, applies
/// it (a compare-and-set of the counter from i-1 to i), and every
/// 150 entries builds a snapshot and installs it (the same state, a new
/// generation). Runs until killed.
#[test]
fn kill_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = rt();
    let (mut log, mut sm) = directkv_raft::open(&dir, options(4096)).expect("open");
    let state = rt.block_on(log.get_log_state()).expect("state");
    let mut next = state.last_log_id.map_or(1, |l| l.index + 1);
    // Entries logged but not applied before the kill are applied first.
    let applied = rt.block_on(sm.applied_state()).expect("applied").0;
    let from = applied.map_or(1, |l| l.index + 1);
    let pending = rt
        .block_on(log.try_get_log_entries(from..next))
        .expect("read");
    rt.block_on(sm.apply(pending)).expect("apply pending");
    loop {
        let e = counter_entry(next);
        rt.block_on(log.blocking_append([e.clone()]))
            .expect("append");
        println!("acked {next}");
        let out = rt.block_on(sm.apply([e])).expect("apply");
        assert!(
            matches!(out[0], Response::Done { .. }),
            "entry {next}: {:?}",
            out[0]
        );
        if next % 150 == 0 {
            let snap = rt
                .block_on(async { sm.get_snapshot_builder().await.build_snapshot().await })
                .expect("build");
            rt.block_on(sm.install_snapshot(&snap.meta, snap.snapshot))
                .expect("install");
        }
        next += 1;
    }
}

/// Entry `i` moves the counter from `i - 1` to `i`: applied twice or
/// skipped, it would not match.
fn counter_entry(i: u64) -> Entry {
    let enc = |n: u64| n.to_le_bytes().to_vec();
    normal(
        i,
        Request::CompareAndSet {
            key: b"counter".to_vec(),
            expected: (i > 1).then(|| enc(i - 1)),
            new: Some(enc(i)),
        },
    )
}

fn run_child_until_killed(dir: &Path, after: Duration) -> u64 {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "kill_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut acked = 0;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("acked ") {
                acked = n.parse().expect("a number");
            }
        }
        acked
    });
    std::thread::sleep(after);
    // SIGKILL: no destructor, no flush.
    child.kill().expect("kill");
    child.wait().expect("wait");
    reader.join().expect("reader")
}

#[test]
fn sigkill_loses_no_acknowledged_append_and_applies_no_entry_twice() {
    let cycles: u64 = std::env::var("DIRECTKV_RAFT_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let dir = scratch();
    let rt = rt();
    let mut acked_max = 0;
    for cycle in 0..cycles {
        let after = Duration::from_millis(300 + (cycle * 137) % 900);
        let acked = run_child_until_killed(dir.path(), after);
        acked_max = acked_max.max(acked);
        let (mut log, sm) = directkv_raft::open(dir.path(), options(4096)).expect("reopen");
        let state = rt.block_on(log.get_log_state()).expect("state");
        let last = state.last_log_id.map_or(0, |l| l.index);
        assert!(
            last >= acked_max,
            "cycle {cycle}: acked {acked_max}, log ends at {last}"
        );
        assert_eq!(log_indexes(&mut log, &rt), (1..=last).collect::<Vec<_>>());
        let (applied, pairs) = sm.reader().all().expect("all");
        let applied = applied.map_or(0, |l| l.index);
        assert!(
            applied <= last,
            "cycle {cycle}: applied {applied} past the log's {last}"
        );
        let counter = sm.reader().get(b"counter").expect("get");
        let expected = (applied > 0).then(|| applied.to_le_bytes().to_vec());
        assert_eq!(
            counter, expected,
            "cycle {cycle}: each entry applied exactly once"
        );
        assert_eq!(pairs.len(), usize::from(applied > 0));
        assert_eq!(
            raw_data_keys(&sm),
            pairs.len(),
            "cycle {cycle}: no other generation left"
        );
    }
    assert!(acked_max > 0, "the child made progress");
}

#[test]
fn batches_of_the_largest_values_fit_a_small_cache() {
    let dir = scratch();
    let rt = rt();
    let (mut log, mut sm) = directkv_raft::open(dir.path(), options(4096)).expect("open");
    // 24 MiB in one append and one apply, through an 8 MiB cache.
    let entries: Vec<Entry> = (1..=24)
        .map(|i| put(i, format!("k{i}").as_bytes(), &vec![i as u8; VALUE_MAX]))
        .collect();
    rt.block_on(log.blocking_append(entries.clone()))
        .expect("append");
    // What replication reads for one append RPC stops at about the store's
    // batch bytes, and always holds the first entry.
    let first = rt
        .block_on(log.limited_get_log_entries(1, 25))
        .expect("read");
    assert!(
        !first.is_empty() && first.len() < 24,
        "{} entries",
        first.len()
    );
    assert!(first
        .iter()
        .map(|e| e.log_id.index)
        .eq(1..=first.len() as u64));
    let out = rt.block_on(sm.apply(entries)).expect("apply");
    assert_eq!(out.len(), 24);
    let snap = rt
        .block_on(async { sm.get_snapshot_builder().await.build_snapshot().await })
        .expect("build");
    assert!(snap.snapshot.len() > 24 * VALUE_MAX as u64);
    rt.block_on(sm.install_snapshot(&snap.meta, snap.snapshot))
        .expect("install");
    assert_eq!(
        sm.reader().get(b"k7").expect("get"),
        Some(vec![7; VALUE_MAX])
    );
    rt.block_on(log.purge(id(24))).expect("purge");
}

#[test]
fn reads_start_over_when_writes_outrun_the_version_store() {
    let dir = scratch();
    let opts = directkv::Options {
        version_store_bytes: Some(directkv::VERSION_STORE_BYTES_MIN),
        ..options(4096)
    };
    let (log, mut sm) = directkv_raft::open(dir.path(), opts).expect("open");
    let rt = rt();
    // 20 MB of entries, appended as fast as the disk syncs.
    let writer = {
        let mut log = log.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            for b in 0..400u64 {
                let batch: Vec<Entry> = (b * 50 + 1..=b * 50 + 50)
                    .map(|j| put(j, format!("k{}", j % 4000).as_bytes(), &[j as u8; 1000]))
                    .collect();
                rt.block_on(log.blocking_append(batch)).expect("append");
            }
        })
    };
    // Meanwhile: build snapshots of the state being changed...
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let builder = {
        let (mut b, stop) = (rt.block_on(sm.get_snapshot_builder()), stop.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            let mut built = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                rt.block_on(b.build_snapshot()).expect("a snapshot build");
                built += 1;
            }
            built
        })
    };
    // ... and read what was appended, in openraft's batches, and apply it.
    let mut reader = log.clone();
    let mut applied = 0;
    let mut rounds = 0u64;
    while applied < 20_000 {
        // A writer that died would leave this loop waiting for ever.
        if writer.is_finished() {
            let appended = rt.block_on(reader.get_log_state()).expect("state");
            if appended.last_log_id.map_or(0, |l| l.index) == applied {
                break;
            }
        }
        let entries = rt
            .block_on(reader.try_get_log_entries(applied + 1..applied + 301))
            .expect("a log read");
        assert!(entries
            .iter()
            .zip(applied + 1..)
            .all(|(e, i)| e.log_id.index == i));
        applied += entries.len() as u64;
        rt.block_on(sm.apply(entries)).expect("apply");
        rounds += 1;
    }
    writer.join().expect("writer");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(builder.join().expect("builder") > 0);
    let given_up = sm.database().stats().snapshots.snapshots_too_old;
    eprintln!("{rounds} rounds; {given_up} snapshots given up and read again");
    assert!(given_up > 0, "the test reached the path it is about");
    assert_eq!(
        sm.reader().last_applied().expect("applied"),
        Some(id(20_000))
    );
}
