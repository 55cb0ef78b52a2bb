//! Model-based test of snapshots: random sequences of write transactions
//! (puts of small and overflow values, deletes, commits, aborts) with read
//! transactions begun between them and read much later, each checked
//! against a copy of the model taken when it began. The cache is 16 pages
//! of 4 KiB and the version store's cap small, so snapshots are given up:
//! a given-up snapshot must return `SnapshotTooOld` from then on, and a
//! live one exactly its copy, by get, range (both directions) and prefix.

mod common;

use std::collections::BTreeMap;

use directkv::{Database, Durability, Error, Options, ReadTxn};
use directkv::{SyncMethod, SyncVariant};
use proptest::prelude::*;

const CAP: usize = 48 << 10;

fn options() -> Options {
    Options {
        cache_bytes: 16 * 4096,
        page_bytes: 4096,
        version_store_bytes: Some(CAP),
        wal_sync: Some(SyncVariant {
            method: SyncMethod::Fdatasync,
            direct: false,
        }),
        durability: Durability::NoSyncNotDurable,
        wal_segment_bytes: 256 * 1024,
        ..Options::default()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Put(u16, usize),
    Delete(u16),
    Commit,
    Abort,
    /// Begin a read transaction.
    Begin,
    /// Read snapshot `n % live` by get of a key.
    Get(usize, u16),
    /// Read snapshot `n % live` by range `a..b`, forward or backward.
    Range(usize, u16, u16, bool),
    /// Read snapshot `n % live` by prefix.
    Prefix(usize, u8),
    /// End snapshot `n % live`.
    End(usize),
}

fn key(k: u16) -> Vec<u8> {
    format!("k{:03}", k % 300).into_bytes()
}

fn value(k: u16, len: usize) -> Vec<u8> {
    (0..len).map(|i| (k as usize * 17 + i) as u8).collect()
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (any::<u16>(), prop_oneof![0usize..40, 40usize..600, Just(3000), Just(9000)])
            .prop_map(|(k, l)| Op::Put(k, l)),
        10 => any::<u16>().prop_map(Op::Delete),
        12 => Just(Op::Commit),
        2 => Just(Op::Abort),
        4 => Just(Op::Begin),
        10 => (any::<usize>(), any::<u16>()).prop_map(|(n, k)| Op::Get(n, k)),
        4 => (any::<usize>(), any::<u16>(), any::<u16>(), any::<bool>())
            .prop_map(|(n, a, b, r)| Op::Range(n, a, b, r)),
        2 => (any::<usize>(), 0u8..10).prop_map(|(n, p)| Op::Prefix(n, p)),
        2 => any::<usize>().prop_map(Op::End),
    ]
}

/// A read transaction with the state it must see, or `None` once given up.
struct Held<'db> {
    txn: ReadTxn<'db>,
    model: Option<BTreeMap<Vec<u8>, Vec<u8>>>,
}

/// Checks one read of `h`: the model's answer while live; once the engine
/// says the snapshot is too old, it stays so.
fn check<T: PartialEq + std::fmt::Debug>(
    h: &mut Held<'_>,
    got: Result<T, Error>,
    want: impl FnOnce(&BTreeMap<Vec<u8>, Vec<u8>>) -> T,
) {
    match (got, &h.model) {
        (Ok(got), Some(model)) => assert_eq!(got, want(model)),
        (Err(Error::SnapshotTooOld { .. }), _) => h.model = None,
        (Ok(got), None) => panic!("a given-up snapshot read {got:?}"),
        (Err(e), _) => panic!("read: {e}"),
    }
}

/// Entries read from a range, in key order.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn read_range(h: &Held<'_>, a: &[u8], b: &[u8], rev: bool) -> Result<Entries, Error> {
    let it = h.txn.range(a..b);
    if rev {
        let mut v: Vec<_> = it.rev().collect::<Result<_, _>>()?;
        v.reverse();
        Ok(v)
    } else {
        it.collect()
    }
}

fn run(ops: &[Op]) {
    let dir = common::scratch();
    let db = Database::open(dir.path(), options()).expect("open");
    let mut committed: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut pending: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    let mut held: Vec<Held<'_>> = Vec::new();
    for op in ops {
        match op {
            Op::Put(k, l) => {
                pending.insert(key(*k), Some(value(*k, *l)));
            }
            Op::Delete(k) => {
                pending.insert(key(*k), None);
            }
            Op::Commit | Op::Abort => {
                let mut w = db.begin_write().expect("begin");
                for (k, v) in &pending {
                    match v {
                        Some(v) => w.put(k, v).expect("put"),
                        None => w.delete(k).expect("delete"),
                    }
                }
                let writes = std::mem::take(&mut pending);
                if matches!(op, Op::Abort) {
                    w.abort();
                    continue;
                }
                match w.commit() {
                    Ok(()) => {
                        for (k, v) in writes {
                            match v {
                                Some(v) => committed.insert(k, v),
                                None => committed.remove(&k),
                            };
                        }
                    }
                    Err(Error::TransactionTooLarge { .. }) => {}
                    Err(e) => panic!("commit: {e}"),
                }
                let st = db.stats().snapshots;
                assert!(
                    st.version_store_bytes <= CAP as u64 || st.active_snapshots == 0,
                    "{st:?}"
                );
            }
            Op::Begin => held.push(Held {
                txn: db.begin_read().expect("read"),
                model: Some(committed.clone()),
            }),
            Op::Get(n, k) if !held.is_empty() => {
                let i = n % held.len();
                let k = key(*k);
                let got = held[i].txn.get(&k);
                check(&mut held[i], got, |m| m.get(&k).cloned());
            }
            Op::Range(n, a, b, rev) if !held.is_empty() => {
                let i = n % held.len();
                let (a, b) = (key(*a), key(*b));
                let got = read_range(&held[i], &a, &b, *rev);
                check(&mut held[i], got, |m| {
                    if a >= b {
                        return Vec::new();
                    }
                    m.range(a.clone()..b.clone())
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                });
            }
            Op::Prefix(n, p) if !held.is_empty() => {
                let i = n % held.len();
                let p = format!("k{p}").into_bytes();
                let got: Result<Vec<_>, _> = held[i].txn.prefix(&p).collect();
                check(&mut held[i], got, |m| {
                    m.iter()
                        .filter(|(k, _)| k.starts_with(&p))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                });
            }
            Op::End(n) if !held.is_empty() => {
                let i = n % held.len();
                held.swap_remove(i);
            }
            _ => {}
        }
    }
    let live = held.len() as u64;
    assert_eq!(
        db.stats().snapshots.active_snapshots + given_up(&held),
        live
    );
    drop(held);
    let mut w = db.begin_write().expect("begin");
    w.put(b"last", b"").expect("put");
    w.commit().expect("commit");
    let st = db.stats().snapshots;
    assert_eq!(
        (st.active_snapshots, st.versions, st.version_store_bytes),
        (0, 0, 0)
    );
}

/// Held snapshots the engine gave up (found so by a read, or not read since).
fn given_up(held: &[Held<'_>]) -> u64 {
    held.iter()
        .filter(|h| matches!(h.txn.get(b"k000"), Err(Error::SnapshotTooOld { .. })))
        .count() as u64
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("DIRECTKV_MODEL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    })]

    #[test]
    fn snapshots_match_copies_of_a_btreemap(ops in prop::collection::vec(op(), 1..300)) {
        run(&ops);
    }
}
