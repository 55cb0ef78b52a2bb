//! Model-based test of the engine: random sequences of put, delete, get,
//! range (forward and reverse), prefix, commit, abort, checkpoint and reopen,
//! checked step by step against a `BTreeMap`. The cache is 16 pages of 4 KiB,
//! so every sequence exercises eviction, splits, page frees, overflow values
//! and recovery from the WAL (reopen without close drops the handle the way a
//! crash would, minus the lost page cache).

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use directkv::{Database, Durability, Options};
use directkv::{SyncMethod, SyncVariant};
use proptest::prelude::*;

fn options() -> Options {
    Options {
        cache_bytes: 16 * 4096,
        page_bytes: 4096,
        wal_sync: Some(SyncVariant {
            method: SyncMethod::Fdatasync,
            direct: false,
        }),
        durability: Durability::NoSyncNotDurable,
        wal_segment_bytes: 256 * 1024,
        // CI reruns this suite on the thread-pool backend through the
        // variable the directkv command honours; the library reads no
        // environment itself.
        async_io: common::env_async_io(),
        ..Options::default()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Put(u16, usize),
    Delete(u16),
    Get(u16),
    Range(u16, u16, bool),
    Prefix(u8),
    Commit,
    Abort,
    Checkpoint,
    Reopen { clean: bool },
}

fn key(k: u16) -> Vec<u8> {
    format!("k{:03}", k % 400).into_bytes()
}

fn value(k: u16, len: usize) -> Vec<u8> {
    (0..len).map(|i| (k as usize * 31 + i) as u8).collect()
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (any::<u16>(), prop_oneof![0usize..40, 40usize..900, Just(3000), Just(20_000)])
            .prop_map(|(k, l)| Op::Put(k, l)),
        12 => any::<u16>().prop_map(Op::Delete),
        10 => any::<u16>().prop_map(Op::Get),
        4 => (any::<u16>(), any::<u16>(), any::<bool>()).prop_map(|(a, b, r)| Op::Range(a, b, r)),
        2 => (0u8..10).prop_map(Op::Prefix),
        10 => Just(Op::Commit),
        3 => Just(Op::Abort),
        1 => Just(Op::Checkpoint),
        2 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
    ]
}

fn overlay(
    committed: &BTreeMap<Vec<u8>, Vec<u8>>,
    pending: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut v = committed.clone();
    for (k, x) in pending {
        match x {
            Some(x) => v.insert(k.clone(), x.clone()),
            None => v.remove(k),
        };
    }
    v
}

fn run(dir: &Path, ops: &[Op]) {
    let mut committed: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut db = Database::open(dir, options()).expect("open");
    let mut i = 0;
    while i < ops.len() {
        if let Op::Reopen { clean } = ops[i] {
            if clean {
                db.close().expect("close");
            } else {
                drop(db);
            }
            db = Database::open(dir, options()).expect("reopen");
            i += 1;
            continue;
        }
        // One write transaction, until a commit, an abort or a reopen.
        let mut pending: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let mut w = db.begin_write().expect("begin");
        while i < ops.len() {
            match &ops[i] {
                Op::Put(k, l) => {
                    let (k, v) = (key(*k), value(*k, *l));
                    w.put(&k, &v).expect("put");
                    pending.insert(k, Some(v));
                }
                Op::Delete(k) => {
                    let k = key(*k);
                    w.delete(&k).expect("delete");
                    pending.insert(k, None);
                }
                Op::Get(k) => {
                    let k = key(*k);
                    let got = w.get(&k).expect("get");
                    assert_eq!(
                        got,
                        overlay(&committed, &pending).get(&k).cloned(),
                        "get {k:?}"
                    );
                    let r = db.begin_read().expect("read");
                    assert_eq!(r.get(&k).expect("get"), committed.get(&k).cloned());
                }
                Op::Range(a, b, rev) => {
                    let (a, b) = (key(*a), key(*b));
                    // Forward ranges are sometimes inverted (allowed, and empty).
                    let (a, b) = if *rev && a > b { (b, a) } else { (a, b) };
                    let expect: Vec<_> = overlay(&committed, &pending)
                        .into_iter()
                        .filter(|(k, _)| *k >= a && *k < b)
                        .collect();
                    let it = w.range(a.as_slice()..b.as_slice());
                    let mut got: Vec<_> = if *rev {
                        it.rev().collect::<Result<_, _>>().expect("range")
                    } else {
                        it.collect::<Result<_, _>>().expect("range")
                    };
                    if *rev {
                        got.reverse();
                    }
                    assert_eq!(got, expect, "range {a:?}..{b:?} rev={rev}");
                }
                Op::Prefix(p) => {
                    let p = format!("k{p}").into_bytes();
                    let expect: Vec<_> = committed
                        .iter()
                        .filter(|(k, _)| k.starts_with(&p))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    let r = db.begin_read().expect("read");
                    let got: Vec<_> = r.prefix(&p).collect::<Result<_, _>>().expect("prefix");
                    assert_eq!(got, expect);
                }
                Op::Checkpoint => db.checkpoint().expect("checkpoint"),
                Op::Commit => {
                    match w.commit() {
                        Ok(()) => committed = overlay(&committed, &pending),
                        // Too large for the tiny cache: rolled back, nothing changed.
                        Err(directkv::Error::TransactionTooLarge { .. }) => {}
                        Err(e) => panic!("commit: {e}"),
                    }
                    i += 1;
                    break;
                }
                Op::Abort => {
                    w.abort();
                    i += 1;
                    break;
                }
                Op::Reopen { .. } => {
                    drop(w);
                    break;
                }
            }
            i += 1;
            if i == ops.len() {
                drop(w);
                break;
            }
        }
    }
    drop(db);
    let db = Database::open(dir, options()).expect("final reopen");
    db.check().expect("integrity check after the last reopen");
    let all: Vec<_> = db
        .begin_read()
        .expect("read")
        .range::<std::ops::RangeFull>(..)
        .collect::<Result<_, _>>()
        .expect("scan");
    let expect: Vec<_> = committed.into_iter().collect();
    let summary = |v: &[(Vec<u8>, Vec<u8>)]| -> Vec<(String, usize)> {
        v.iter()
            .map(|(k, x)| (String::from_utf8_lossy(k).into_owned(), x.len()))
            .collect()
    };
    assert_eq!(
        summary(&all),
        summary(&expect),
        "keys and value sizes after the last reopen"
    );
    assert!(all == expect, "values after the last reopen");
}

/// Threads the random sequences are split over: a case waits on `fsync`
/// and file creation more than it computes, so lanes overlap their waits.
const LANES: u32 = 3;

/// `DIRECTKV_MODEL_CASES` random sequences (64 by default), each against a
/// fresh database, split over [`LANES`] threads; a failure is shrunk and
/// reported with the smallest sequence found.
#[test]
fn engine_matches_a_btreemap() {
    let cases: u32 = std::env::var("DIRECTKV_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let failures: Vec<String> = std::thread::scope(|s| {
        let lanes: Vec<_> = (0..LANES)
            .map(|_| {
                s.spawn(move || {
                    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
                        cases: cases.div_ceil(LANES),
                        max_shrink_iters: 200,
                        ..ProptestConfig::default()
                    });
                    let sequences = prop::collection::vec(op(), 1..300);
                    runner
                        .run(&sequences, |ops| {
                            let dir = common::scratch();
                            run(dir.path(), &ops);
                            Ok(())
                        })
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        lanes
            .into_iter()
            .filter_map(|l| l.join().expect("a lane returns its result").err())
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn many_keys_grow_and_shrink_the_tree() {
    let dir = common::scratch();
    let opts = Options {
        cache_bytes: 4 << 20,
        ..options()
    };
    let db = Database::open(dir.path(), opts.clone()).expect("open");
    for round in 0..3 {
        let mut w = db.begin_write().expect("begin");
        for i in 0..3000u32 {
            w.put(format!("key{i:06}").as_bytes(), &[round as u8; 100])
                .expect("put");
        }
        w.commit().expect("commit");
        let mut w = db.begin_write().expect("begin");
        for i in (0..3000u32).filter(|i| i % 3 != 0) {
            w.delete(format!("key{i:06}").as_bytes()).expect("delete");
        }
        w.commit().expect("commit");
    }
    let live = db
        .begin_read()
        .expect("read")
        .range::<std::ops::RangeFull>(..)
        .count();
    assert_eq!(live, 1000);
    let report = db.check().expect("integrity check");
    assert_eq!(report.keys, 1000);
    let pages = db.stats().cache;
    db.close().expect("close");
    let size = std::fs::metadata(dir.path().join("data"))
        .expect("meta")
        .len();
    assert!(
        size < 3 * 3000 * 100 * 2,
        "freed pages are reused: {size} bytes, {pages:?}"
    );
}
