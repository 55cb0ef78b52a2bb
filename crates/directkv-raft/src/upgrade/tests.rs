//! The upgrade from the prefix layout: a database written as the releases
//! before tables wrote it (by [`write_prefix_layout`], a writer of that
//! layout kept for these tests) opens with the same vote, committed and
//! purged ids, log, applied state, data and current snapshot, and nothing
//! left in the default keyspace but a fence under each of the five record
//! keys that the prefix layout's decoders refuse (so that a build of that
//! layout refuses the database, from the upgrade's first commit on, and a
//! new database too); and an upgrade stopped after any number of its
//! steps, the database then dropped without a close, is fenced and
//! resumes at the next open to the same result; and so does one whose
//! process aborts (no destructor, no flush: the steps' commits that did
//! not wait for the log may be lost) after any of a range of its commits;
//! and a family whose keys fill its steps exactly upgrades.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{
    CommittedLeaderId, EntryPayload, LogId, Membership, RaftLogReader, StoredMembership, Vote,
};
use tokio::io::AsyncReadExt;

use super::*;
use crate::codec::encode_entry;
use crate::snapshot::{Meta, Writer, CHUNK_BYTES};
use crate::state_machine::Applied;
use crate::{Entry, Request};

/// What [`write_prefix_layout`] wrote, to compare the upgraded state with.
struct Written {
    vote: Vote<u64>,
    committed: Option<LogId<u64>>,
    purged: LogId<u64>,
    /// The log past the purge point.
    entries: Vec<Entry>,
    applied: Applied,
    /// The applied generation's pairs.
    data: Vec<(Vec<u8>, Vec<u8>)>,
    snapshot: (Meta, Vec<u8>),
}

fn id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(2, 1), index)
}

fn options() -> directkv::Options {
    directkv::Options {
        cache_bytes: 8 << 20,
        page_bytes: 4096,
        wal_sync: Some(directkv::SyncVariant {
            method: directkv::SyncMethod::Fdatasync,
            direct: true,
        }),
        wal_segment_bytes: 1 << 20,
        data_extend_bytes: 0,
        publish_stats: false,
        ..directkv::Options::default()
    }
}

/// `family`, then `numbers` big-endian: a key of the prefix layout.
fn old_key(family: u8, numbers: &[u64], tail: &[u8]) -> Vec<u8> {
    let mut k = vec![family];
    for n in numbers {
        k.extend_from_slice(&n.to_be_bytes());
    }
    k.extend_from_slice(tail);
    k
}

fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("serializes")
}

/// Writes, through the default keyspace, a node's state in the prefix
/// layout: log 1..=10 purged to 2 (entry 1 left behind by a crash), data
/// of generation 1 applied to 9, a leftover of generations 0 and 2, the
/// current snapshot (sequence 4, two chunks) and a leftover chunk of 3.
fn write_prefix_layout(db: &Database) -> Written {
    let membership = Membership::new(vec![[1u64].into_iter().collect()], None);
    let stored_membership = StoredMembership::new(Some(id(3)), membership.clone());
    let put = |i: u64| Entry {
        log_id: id(i),
        payload: match i {
            3 => EntryPayload::Membership(membership.clone()),
            _ => EntryPayload::Normal(Request::Put {
                key: format!("k{i}").into_bytes(),
                value: vec![i as u8; 40],
            }),
        },
    };
    let applied = Applied {
        last: Some(id(9)),
        membership: stored_membership.clone(),
        generation: 1,
    };
    let data: Vec<_> = (4..=9u64)
        .map(|i| (format!("k{i}").into_bytes(), vec![i as u8; 40]))
        .collect();
    let meta = Meta {
        last_log_id: Some(id(8)),
        last_membership: stored_membership,
        snapshot_id: "2-8-0".into(),
    };
    let (chunks, stored) = snapshot_of(&meta, 4);
    let w = Written {
        vote: Vote::new_committed(2, 1),
        committed: Some(id(9)),
        purged: id(2),
        entries: (3..=10).map(put).collect(),
        applied,
        data,
        snapshot: (meta, chunks.concat()),
    };
    let mut rows: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    rows.insert(b"v".to_vec(), json(&w.vote));
    rows.insert(b"c".to_vec(), json(&w.committed));
    rows.insert(b"p".to_vec(), json(&w.purged));
    rows.insert(b"a".to_vec(), json(&w.applied));
    rows.insert(b"s".to_vec(), json(&stored));
    for e in std::iter::once(put(1)).chain(w.entries.iter().cloned()) {
        rows.insert(old_key(b'l', &[e.log_id.index], &[]), encode_entry(&e));
    }
    for (g, (k, v)) in [
        (0, (b"gone".to_vec(), vec![0])),
        (2, (b"staged".to_vec(), vec![2])),
    ]
    .into_iter()
    .chain(w.data.iter().map(|kv| (1, kv.clone())))
    {
        rows.insert(old_key(b'd', &[g], &k), v);
    }
    for (n, c) in chunks.iter().enumerate() {
        let n = u32::try_from(n).expect("few chunks");
        rows.insert(old_key(b't', &[4], &n.to_be_bytes()), c.clone());
    }
    rows.insert(old_key(b't', &[3], &0u32.to_be_bytes()), b"old".to_vec());
    for (k, v) in &rows {
        let mut t = db.begin_write().expect("write");
        t.put(k, v).expect("put");
        t.commit().expect("commit");
    }
    w
}

/// A snapshot of three large pairs under `meta` (two chunks), and its
/// record as sequence `seq`.
fn snapshot_of(meta: &Meta, seq: u64) -> (Vec<Vec<u8>>, Stored) {
    let mut chunks = BTreeMap::new();
    let mut emit = |n: u32, b: &[u8]| {
        chunks.insert(n, b.to_vec());
        Ok(())
    };
    let mut w = Writer::new(meta, CHUNK_BYTES);
    for i in 0..3u8 {
        w.pair(&[b'x', i], &vec![i; 500_000], &mut emit)
            .expect("pair");
    }
    let summary = w.finish(&mut emit).expect("finish");
    let chunks: Vec<Vec<u8>> = chunks.into_values().collect();
    assert_eq!(chunks.len(), 2, "two chunks");
    let stored = Stored {
        meta: meta.clone(),
        seq,
        len: summary.len,
        crc: summary.crc,
    };
    (chunks, stored)
}

/// Checks that a build of the prefix layout refuses `db`: each of the
/// five record keys of the default keyspace holds a value that is not
/// JSON, which that build's decoder of the record (serde_json of its
/// type) refuses.
fn check_refused_by_prefix_builds(db: &Database) {
    let r = db.begin_read().expect("read");
    let get = |k: &[u8]| r.get(k).expect("get").expect("a fence is there");
    for (k, _) in old::RECORDS {
        assert!(
            serde_json::from_slice::<serde_json::Value>(&get(k)).is_err(),
            "{k:?} is not JSON"
        );
    }
    assert!(serde_json::from_slice::<Vote<u64>>(&get(b"v")).is_err());
    assert!(serde_json::from_slice::<Option<LogId<u64>>>(&get(b"c")).is_err());
    assert!(serde_json::from_slice::<LogId<u64>>(&get(b"p")).is_err());
    assert!(serde_json::from_slice::<Applied>(&get(b"a")).is_err());
    assert!(serde_json::from_slice::<Stored>(&get(b"s")).is_err());
}

/// Opens `dir` with the crate and checks it holds what `w` wrote, in
/// tables, with nothing left in the default keyspace but the fences.
fn check_upgraded(rt: &tokio::runtime::Runtime, dir: &std::path::Path, w: &Written) {
    let (mut log, mut sm) = crate::open(dir, options()).expect("open");
    let db = log.database();
    let left: Vec<Vec<u8>> = db
        .begin_read()
        .expect("read")
        .range(..)
        .map(|kv| kv.expect("read").0)
        .collect();
    assert_eq!(
        left,
        [b"a", b"c", b"p", b"s", b"v"],
        "only the fences are left"
    );
    check_refused_by_prefix_builds(db);
    let names: Vec<String> = db.begin_read().expect("read").list_tables().expect("list")[..]
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(
        names,
        ["raft.data.1", "raft.log", "raft.meta", "raft.snap.4"]
    );
    rt.block_on(async {
        assert_eq!(log.read_vote().await.expect("vote"), Some(w.vote));
        assert_eq!(log.read_committed().await.expect("committed"), w.committed);
        let state = log.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id, Some(w.purged));
        assert_eq!(state.last_log_id, Some(id(10)));
        let entries = log.try_get_log_entries(0..100).await.expect("entries");
        let bytes = |es: &[Entry]| es.iter().map(encode_entry).collect::<Vec<_>>();
        assert_eq!(bytes(&entries), bytes(&w.entries), "the log past the purge");
        let applied = sm.applied_state().await.expect("applied");
        assert_eq!(applied, (w.applied.last, w.applied.membership.clone()));
        let mut current = sm
            .get_current_snapshot()
            .await
            .expect("current")
            .expect("a snapshot");
        assert_eq!(current.meta, w.snapshot.0);
        let mut bytes = Vec::new();
        current
            .snapshot
            .read_to_end(&mut bytes)
            .await
            .expect("read");
        assert!(bytes == w.snapshot.1, "the snapshot's bytes are the same");
    });
    let all = sm.reader().all().expect("all");
    assert_eq!(all, (w.applied.last, w.data.clone()));
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().expect("runtime")
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("scratch dir")
}

#[test]
fn a_database_of_the_prefix_layout_opens_with_the_same_state() {
    let dir = scratch();
    let written = {
        let db = Database::open(dir.path(), options()).expect("open");
        write_prefix_layout(&db)
    };
    let rt = runtime();
    check_upgraded(&rt, dir.path(), &written);
    // Upgraded once: a second open finds the tables as they are.
    check_upgraded(&rt, dir.path(), &written);
}

#[test]
fn an_upgrade_stopped_after_any_step_resumes_at_the_next_open() {
    let rt = runtime();
    for steps in 0..STEPS_SWEEP_MAX {
        let dir = scratch();
        let (written, complete) = {
            let db = Database::open(dir.path(), options()).expect("open");
            let written = write_prefix_layout(&db);
            // Small batches: a step moves a key or two.
            let complete = upgrade(&db, 64, steps).expect("upgrade");
            let has_meta = db.begin_read().expect("read").open_table(keys::META);
            assert_eq!(has_meta.is_ok(), complete, "raft.meta marks completion");
            check_refused_by_prefix_builds(&db);
            // Dropped without a close.
            (written, complete)
        };
        check_upgraded(&rt, dir.path(), &written);
        if complete {
            // Stopped after 0, 1, ... steps-1 steps before this one.
            assert!(
                steps > 10,
                "the sweep stopped the upgrade at {steps} points"
            );
            return;
        }
    }
    panic!("the upgrade did not complete in {STEPS_SWEEP_MAX} steps");
}

#[test]
fn a_new_database_is_refused_by_builds_of_the_prefix_layout() {
    let dir = scratch();
    drop(crate::open(dir.path(), options()).expect("open"));
    let db = Database::open(dir.path(), options()).expect("open");
    check_refused_by_prefix_builds(&db);
}

/// More steps than the upgrade of [`write_prefix_layout`]'s state takes.
const STEPS_SWEEP_MAX: u64 = 64;

const CHILD_DIR: &str = "DIRECTKV_RAFT_UPGRADE_CHILD";
const CHILD_COMMITS: &str = "DIRECTKV_RAFT_UPGRADE_COMMITS";

/// The child of the abort test: upgrades the database while a thread
/// watches its commits and aborts the process after the Nth. Prints
/// `upgraded` if the upgrade ends first.
#[test]
fn upgrade_child() {
    let (Ok(dir), Ok(commits)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_COMMITS)) else {
        return;
    };
    let commits: u64 = commits.parse().expect("a number");
    let db = Database::open(&dir, options()).expect("open");
    let start = db.stats().commits;
    std::thread::scope(|s| {
        s.spawn(|| loop {
            if db.stats().commits >= start.saturating_add(commits) {
                std::process::abort();
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        });
        assert!(upgrade(&db, 64, u64::MAX).expect("upgrade"));
        println!("upgraded");
        std::process::exit(0);
    });
}

/// Runs the child until it aborts or upgrades; returns whether it upgraded.
fn run_upgrade_child(dir: &std::path::Path, commits: u64) -> bool {
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "upgrade::tests::upgrade_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir)
        .env(CHILD_COMMITS, commits.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .expect("run the child");
    BufReader::new(&out.stdout[..])
        .lines()
        // libtest prints the test's name on the line the child prints to.
        .any(|l| l.is_ok_and(|l| l.ends_with("upgraded")))
}

#[test]
fn an_upgrade_whose_process_aborts_part_way_resumes_at_the_next_open() {
    let rt = runtime();
    let mut aborted = 0;
    // The upgrade of this state takes about 30 commits; with no limit it
    // completes.
    for commits in [1, 2, 5, 9, 14, 20, 27, u64::MAX] {
        let dir = scratch();
        let written = {
            let db = Database::open(dir.path(), options()).expect("open");
            write_prefix_layout(&db)
        };
        let upgraded = run_upgrade_child(dir.path(), commits);
        assert!(
            upgraded || commits != u64::MAX,
            "without a limit it upgrades"
        );
        aborted += usize::from(!upgraded);
        check_upgraded(&rt, dir.path(), &written);
    }
    assert!(aborted >= 5, "{aborted} children aborted part way");
}

/// Writes, in one transaction, the applied state of generation 1 with
/// nothing applied and `n` pairs of that generation in the prefix layout;
/// returns the pairs.
fn write_data_family(db: &Database, n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let applied = Applied {
        generation: 1,
        ..Applied::default()
    };
    let pairs: Vec<_> = (0..n)
        .map(|i| {
            (
                format!("k{i:06}").into_bytes(),
                (i as u64).to_le_bytes().to_vec(),
            )
        })
        .collect();
    let mut t = db.begin_write().expect("write");
    t.put(b"a", &json(&applied)).expect("put");
    for (k, v) in &pairs {
        t.put(&old_key(b'd', &[1], k), v).expect("put");
    }
    t.commit().expect("commit");
    pairs
}

#[test]
fn a_family_a_whole_number_of_steps_long_upgrades() {
    // Steps end on the key bound: the last step of the family takes
    // exactly as many keys as a step may, and finds nothing after them.
    for n in [
        DELETE_BATCH_KEYS,
        DELETE_BATCH_KEYS + 1,
        2 * DELETE_BATCH_KEYS,
    ] {
        let dir = scratch();
        let pairs = {
            let db = Database::open(dir.path(), options()).expect("open");
            let pairs = write_data_family(&db, n);
            // Bytes to spare: the key bound ends each step.
            assert!(upgrade(&db, 1 << 20, u64::MAX).expect("upgrade"), "{n}");
            pairs
        };
        let (_log, sm) = crate::open(dir.path(), options()).expect("open");
        assert_eq!(sm.reader().all().expect("all"), (None, pairs), "{n}");
    }
}
