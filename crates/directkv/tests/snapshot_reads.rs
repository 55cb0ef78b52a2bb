//! Read transactions are snapshots: every read in one sees the same
//! committed state, while writers commit beside it, on real files.
//!
//! - The bank: writers move money between accounts (emptied accounts are
//!   deleted, new ones inserted) while readers sum every balance inside one
//!   read transaction, by prefix scan, by reverse range and by point gets:
//!   no reader may ever see a total other than the money that exists.
//! - The bank under structure changes: with 4 KiB pages, a small cache,
//!   balances carrying padding (some past a page, in overflow chains) and
//!   a thread inserting and deleting runs of zero-balance entries among
//!   the accounts, commits split and free pages and move the root while
//!   readers descend without a lock: still no wrong total.
//! - An iterator held across thousands of commits yields exactly the
//!   entries of its snapshot, in both directions, also after its
//!   transaction is dropped.
//! - A leaf of small keys naming hundreds of large values is scanned in
//!   batches of bounded value bytes, each starting just past the last: a
//!   scan at a snapshot, forward, backward and from inside the leaf, still
//!   yields exactly the snapshot's entries while commits change them.
//! - A snapshot that would need more than the version store's cap is given
//!   up: its next read is `SnapshotTooOld`, never a wrong value, and the
//!   store stays within the cap.
//! - A commit too large for the cache, rolled back again and again, never
//!   shows a reader one of its values.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use directkv::{Database, Durability, Error, Options, WriteOptions};

const ACCOUNTS: u64 = 1000;
const START_BALANCE: u64 = 1000;
const MONEY: u64 = ACCOUNTS * START_BALANCE;
/// Sums in a row one bank reader may see given up before the test fails:
/// a reader that never keeps a snapshot through one sum shows a cap that
/// gives up what it could hold.
const GIVEN_UP_IN_A_ROW_MAX: u64 = 1000;

fn options() -> Options {
    Options {
        cache_bytes: 64 << 20,
        durability: Durability::NoSyncNotDurable,
        ..Options::default()
    }
}

fn account(i: u64) -> Vec<u8> {
    format!("acct/{i:05}").into_bytes()
}

/// The balance an entry holds: its first 8 bytes (padding may follow).
fn balance(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().expect("an 8-byte balance"))
}

/// `amount` as a stored balance, with `pad` bytes of padding after it.
fn stored(amount: u64, pad: usize) -> Vec<u8> {
    let mut v = amount.to_le_bytes().to_vec();
    v.resize(8 + pad, 0xA5);
    v
}

/// One transfer: up to `amount` from `from` to `to`; an account left at
/// zero is deleted, and a missing destination is created. Returns whether
/// it committed (a missing source aborts it).
fn transfer(db: &Database, from: u64, to: u64, amount: u64) -> directkv::Result<bool> {
    transfer_padded(db, from, to, amount, 0)
}

/// [`transfer`], the balances it writes padded with `pad` bytes.
fn transfer_padded(
    db: &Database,
    from: u64,
    to: u64,
    amount: u64,
    pad: usize,
) -> directkv::Result<bool> {
    // Writers run at once and read their snapshots; Serializable refuses a
    // transfer whose balances changed since, and `transaction` runs it
    // again, so money is neither made nor lost.
    db.transaction(&WriteOptions::default(), |w| {
        let (fk, tk) = (account(from), account(to));
        let Some(fv) = w.get(&fk)? else {
            return Ok(false); // nothing to move
        };
        let have = balance(&fv);
        let moved = amount.min(have);
        let to_before = w.get(&tk)?.map_or(0, |v| balance(&v));
        if have == moved {
            w.delete(&fk)?;
        } else {
            w.put(&fk, &stored(have - moved, pad))?;
        }
        w.put(&tk, &stored(to_before + moved, pad))?;
        Ok(true)
    })
}

/// How a reader sums the balances.
#[derive(Clone, Copy, Debug)]
enum Sum {
    Prefix,
    ReverseRange,
    PointGets,
}

fn sum_once(db: &Database, how: Sum) -> directkv::Result<u64> {
    let r = db.begin_read()?;
    let mut total = 0;
    match how {
        Sum::Prefix => {
            for e in r.prefix(b"acct/") {
                total += balance(&e?.1);
            }
        }
        Sum::ReverseRange => {
            let (lo, hi) = (b"acct/".as_slice(), b"acct0".as_slice());
            for e in r.range(lo..hi).rev() {
                total += balance(&e?.1);
            }
        }
        Sum::PointGets => {
            for i in 0..ACCOUNTS {
                if let Some(v) = r.get(&account(i))? {
                    total += balance(&v);
                }
            }
        }
    }
    Ok(total)
}

/// A small deterministic generator (xorshift), one per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Inserts a run of zero-balance entries after a random account, then
/// deletes them: leaves split, empty and are freed, branches with them.
fn churn(db: &Database, rng: &mut Rng) {
    let at = account(rng.next() % ACCOUNTS);
    let n = 20 + rng.next() % 100;
    let key = |j: u64| [at.as_slice(), format!("~{j:04}").as_bytes()].concat();
    let opts = WriteOptions::default();
    db.transaction(&opts, |w| {
        (0..n).try_for_each(|j| w.put(&key(j), &stored(0, 300)))
    })
    .expect("insert a run");
    db.transaction(&opts, |w| (0..n).try_for_each(|j| w.delete(&key(j))))
        .expect("delete the run");
}

/// Runs the bank with `writers` and one reader per way of summing for
/// `secs`; returns (read transactions, wrong totals, commits).
fn run_bank(db: &Arc<Database>, writers: usize, secs: f64) -> (u64, u64, u64) {
    run_bank_with(db, writers, secs, false)
}

/// [`run_bank`]; with `reshape`, transfers pad balances by up to 5 KiB and
/// one more thread churns runs of entries (see [`churn`]). A reader whose
/// snapshot the version store's cap gave up sums again in a new one
/// (`read transactions` counts the sums that finished).
fn run_bank_with(db: &Arc<Database>, writers: usize, secs: f64, reshape: bool) -> (u64, u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let (reads, wrong, commits) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut handles = Vec::new();
    for t in 0..writers {
        let (db, stop, commits) = (db.clone(), stop.clone(), commits.clone());
        handles.push(std::thread::spawn(move || {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
            while !stop.load(Ordering::Relaxed) {
                let (a, b) = (rng.next() % ACCOUNTS, rng.next() % ACCOUNTS);
                let pad = if reshape {
                    (rng.next() % 5000) as usize
                } else {
                    0
                };
                let amount = 1 + rng.next() % 1500;
                if a != b && transfer_padded(&db, a, b, amount, pad).expect("transfer") {
                    commits.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    if reshape {
        let (db, stop) = (db.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let mut rng = Rng(0xD1B5_4A32_D192_ED03);
            while !stop.load(Ordering::Relaxed) {
                churn(&db, &mut rng);
            }
        }));
    }
    for how in [Sum::Prefix, Sum::ReverseRange, Sum::PointGets] {
        let (db, stop, reads, wrong) = (db.clone(), stop.clone(), reads.clone(), wrong.clone());
        handles.push(std::thread::spawn(move || {
            let (mut finished, mut given_up) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let total = match sum_once(&db, how) {
                    Ok(total) => total,
                    // A reader descheduled for long while the writers run
                    // may need more versions than the cap holds: its
                    // snapshot is given up, and the sum starts again in a
                    // new one (the database counts it).
                    Err(Error::SnapshotTooOld { .. }) => {
                        given_up += 1;
                        assert!(
                            given_up <= GIVEN_UP_IN_A_ROW_MAX,
                            "{how:?}: {given_up} sums in a row given up"
                        );
                        continue;
                    }
                    Err(e) => panic!("a snapshot read: {e}"),
                };
                given_up = 0;
                finished += 1;
                reads.fetch_add(1, Ordering::Relaxed);
                if total != MONEY {
                    eprintln!("{how:?} saw {total}, not {MONEY}");
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
            }
            assert!(finished > 0, "{how:?} finished no sum");
        }));
    }
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("no thread panicked");
    }
    (
        reads.load(Ordering::Relaxed),
        wrong.load(Ordering::Relaxed),
        commits.load(Ordering::Relaxed),
    )
}

/// The bank's cap: room for the versions of about 10,000 transfers (two
/// keys each, some 300 bytes a version as counted), so a reader is given
/// up only when kept off a core for that long.
const BANK_VERSION_STORE_BYTES: usize = 6 << 20;

fn open_bank(dir: &std::path::Path) -> Arc<Database> {
    let opts = Options {
        version_store_bytes: Some(BANK_VERSION_STORE_BYTES),
        ..options()
    };
    open_bank_with(dir, opts)
}

fn open_bank_with(dir: &std::path::Path, opts: Options) -> Arc<Database> {
    let db = Database::open(dir, opts).expect("open");
    let mut w = db.begin_write().expect("begin");
    for i in 0..ACCOUNTS {
        w.put(&account(i), &START_BALANCE.to_le_bytes())
            .expect("put");
    }
    w.commit().expect("commit");
    Arc::new(db)
}

/// Four writers move money (deleting emptied accounts, creating new ones)
/// while three readers each sum it inside one read transaction: every sum
/// is the money that exists. `DIRECTKV_BANK_SECS` runs it longer.
#[test]
fn the_bank_never_shows_a_torn_total() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open_bank(dir.path());
    let secs = std::env::var("DIRECTKV_BANK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4.0);
    let (reads, wrong, commits) = run_bank(&db, 4, secs);
    eprintln!(
        "{reads} read transactions, {wrong} wrong totals, {commits} transfers, \
         {} snapshots given up",
        db.stats().snapshots.snapshots_too_old
    );
    assert_eq!(wrong, 0, "a read transaction saw a torn state");
    assert!(reads >= 3, "every reader finished a sum");
    assert!(commits > 0, "the writers committed");
    // Readers overlapped commits, so before-images were kept; with every
    // snapshot gone, the next commit drops them all.
    let st = db.stats().snapshots;
    assert_eq!(st.active_snapshots, 0);
    assert!(
        st.commit_seq > commits,
        "every transfer has a commit number"
    );
    assert!(
        st.versions_stored > 0,
        "commits kept before-images for readers"
    );
    let from = (0..ACCOUNTS)
        .find(|&i| transfer(&db, i, (i + 1) % ACCOUNTS, 1).expect("transfer"))
        .expect("some account has money");
    assert!(from < ACCOUNTS);
    let st = db.stats().snapshots;
    assert_eq!((st.versions, st.version_store_bytes), (0, 0));
    // A reader kept off a core long enough is given up (the exact bound
    // is tested single-threaded in
    // `a_snapshot_past_the_cap_is_given_up_not_served_wrong`); a cap that
    // gave up snapshots it could hold would hit nearly every sum.
    assert!(
        st.snapshots_too_old * 4 <= reads,
        "the bank's cap holds nearly every reader: {} given up, {reads} sums",
        st.snapshots_too_old
    );
    assert_eq!(sum_once(&db, Sum::Prefix).expect("sum"), MONEY);
}

/// The bank while commits keep changing the tree's structure under
/// lock-free readers: splits (padding, runs of inserts), overflow chains
/// made and freed, leaves emptied and freed, the root grown. Readers may
/// run descents again, never return a wrong total, and never wait for an
/// apply (they take no lock). `DIRECTKV_BANK_SECS` runs it longer.
#[test]
fn the_bank_holds_while_commits_split_and_free_pages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        page_bytes: 4096,
        cache_bytes: 16 << 20,
        version_store_bytes: Some(8 << 20),
        ..options()
    };
    let db = open_bank_with(dir.path(), opts);
    let secs = std::env::var("DIRECTKV_BANK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4.0);
    let (reads, wrong, commits) = run_bank_with(&db, 3, secs, true);
    let report = db.check().expect("the tree is whole");
    eprintln!(
        "{reads} read transactions, {wrong} wrong totals, {commits} transfers, \
         {} snapshots given up, {} descents run again; tree of depth {}, {} pages, {} free",
        db.stats().snapshots.snapshots_too_old,
        db.stats().transactions.shape_retries,
        report.depth,
        report.tree_pages,
        report.free_pages
    );
    assert_eq!(wrong, 0, "a read transaction saw a torn state");
    assert!(reads >= 3 && commits > 0, "readers and writers ran");
    assert!(report.depth >= 2, "the root is a branch: splits happened");
    assert_eq!(sum_once(&db, Sum::Prefix).expect("sum"), MONEY);
}

fn load(db: &Database, n: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model = BTreeMap::new();
    let mut w = db.begin_write().expect("begin");
    for i in 0..n {
        let (k, v) = (
            format!("k{i:06}").into_bytes(),
            format!("v{i}-0").into_bytes(),
        );
        w.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    w.commit().expect("commit");
    model
}

/// Iterators keep their snapshot across thousands of commits that change,
/// delete and insert keys ahead of and behind them, also once their read
/// transaction is dropped; a point read in the same snapshot agrees.
#[test]
fn iterators_keep_their_snapshot_across_thousands_of_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Room for every version of the 9,000 changes below, each counted at
    // its key, value and overhead: the snapshot is never given up here.
    let opts = Options {
        version_store_bytes: Some(8 << 20),
        ..options()
    };
    let db = Database::open(dir.path(), opts).expect("open");
    let model = load(&db, 2000);
    let r = db.begin_read().expect("read");
    let mut fwd = r.prefix(b"k");
    let mut back = r.range(b"k".as_slice()..b"l".as_slice());
    let mut seen_fwd = Vec::new();
    let mut seen_back = Vec::new();
    for _ in 0..300 {
        seen_fwd.push(fwd.next().expect("entry").expect("read"));
        seen_back.push(back.next_back().expect("entry").expect("read"));
    }
    let probe = r.get(b"k001000").expect("get");
    let mut rng = Rng(7);
    for c in 0..3000u64 {
        let mut w = db.begin_write().expect("begin");
        for _ in 0..3 {
            let i = rng.next() % 2400;
            let k = format!("k{i:06}").into_bytes();
            match rng.next() % 3 {
                0 => w.delete(&k).expect("delete"),
                _ => w.put(&k, format!("v{i}-{c}").as_bytes()).expect("put"),
            }
        }
        w.commit().expect("commit");
        if c == 1500 {
            assert_eq!(
                r.get(b"k001000").expect("get"),
                probe,
                "a point read agrees"
            );
        }
    }
    drop(r);
    assert!(
        db.stats().snapshots.versions > 0,
        "the iterators' snapshot keeps versions"
    );
    for e in fwd.by_ref() {
        seen_fwd.push(e.expect("read"));
    }
    for e in back.by_ref().rev() {
        seen_back.push(e.expect("read"));
    }
    let want: Vec<_> = model.into_iter().collect();
    assert_eq!(seen_fwd, want, "forward: the snapshot, whole and in order");
    seen_back.reverse();
    assert_eq!(
        seen_back, want,
        "backward: the snapshot, whole and in order"
    );
    drop((fwd, back));
    let mut w = db.begin_write().expect("begin");
    w.put(b"k000000", b"last").expect("put");
    w.commit().expect("commit");
    let st = db.stats().snapshots;
    assert_eq!((st.active_snapshots, st.versions), (0, 0), "{st:?}");
}

/// A value past a page: each is stored in an overflow chain.
fn large(i: u64, round: u64) -> Vec<u8> {
    vec![(i * 7 + round) as u8; 20_000 + (i as usize % 7) * 1000]
}

/// Scans over leaves of short keys and large values (a leaf names far more
/// value bytes than a batch holds) see their snapshot, whole and in order,
/// forward, backward and from a key inside a leaf, while commits change,
/// delete and insert values among them.
#[test]
fn scans_of_large_values_come_in_bounded_batches_at_their_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        version_store_bytes: Some(64 << 20),
        ..options()
    };
    let db = Database::open(dir.path(), opts).expect("open");
    let mut model = BTreeMap::new();
    let mut w = db.begin_write().expect("begin");
    for i in (0..600u64).step_by(2) {
        let (k, v) = (format!("b{i:04}").into_bytes(), large(i, 0));
        w.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    w.commit().expect("commit");
    let r = db.begin_read().expect("read");
    let mut w = db.begin_write().expect("begin");
    for i in 0..600u64 {
        let k = format!("b{i:04}").into_bytes();
        match i % 5 {
            0 => w.delete(&k).expect("delete"),
            1 | 3 => w.put(&k, &large(i, 1)).expect("put"),
            _ => {}
        }
    }
    w.commit().expect("commit");
    let want: Vec<_> = model.clone().into_iter().collect();
    let fwd: Vec<_> = r.prefix(b"b").map(|e| e.expect("read")).collect();
    assert_eq!(fwd, want, "forward: the snapshot, whole and in order");
    let mut back: Vec<_> = r.prefix(b"b").rev().map(|e| e.expect("read")).collect();
    back.reverse();
    assert_eq!(back, want, "backward: the snapshot, whole and in order");
    let (lo, hi) = (b"b0101".as_slice(), b"b0457".as_slice());
    let inner: Vec<_> = r.range(lo..hi).map(|e| e.expect("read")).collect();
    let want_inner: Vec<_> = model
        .range(lo.to_vec()..hi.to_vec())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(inner, want_inner, "a range from inside a leaf");
    drop(r);
    let now = db.begin_read().expect("read");
    let latest: Vec<_> = now.prefix(b"b").map(|e| e.expect("read")).collect();
    let mut model_now = model;
    for i in 0..600u64 {
        let k = format!("b{i:04}").into_bytes();
        match i % 5 {
            0 => {
                model_now.remove(&k);
            }
            1 | 3 => {
                model_now.insert(k, large(i, 1));
            }
            _ => {}
        }
    }
    assert_eq!(latest, model_now.into_iter().collect::<Vec<_>>());
}

/// A snapshot that would need more than the cap is given up: its next read
/// is SnapshotTooOld; the store stays within the cap; a new read
/// transaction reads the latest state; a snapshot that fits is never
/// given up.
#[test]
fn a_snapshot_past_the_cap_is_given_up_not_served_wrong() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = 64 << 10;
    let opts = Options {
        version_store_bytes: Some(cap),
        ..options()
    };
    let db = Database::open(dir.path(), opts).expect("open");
    load(&db, 100);
    // The old snapshot reads 1,000-byte values, so the versions it reads
    // once every key changed pass the cap by themselves: 100 x (1,000 +
    // 2 x 7 + 272) = 128,600 bytes against 65,536.
    let read_by_old = vec![6u8; 1000];
    let mut w = db.begin_write().expect("begin");
    for i in 0..100 {
        w.put(format!("k{i:06}").as_bytes(), &read_by_old)
            .expect("put");
    }
    w.commit().expect("commit");
    let old = db.begin_read().expect("read");
    assert_eq!(old.get(b"k000005").expect("get"), Some(read_by_old));
    let value = vec![7u8; 1000];
    for round in 0..2u8 {
        for i in 0..100 {
            let mut w = db.begin_write().expect("begin");
            w.put(format!("k{i:06}").as_bytes(), &value).expect("put");
            w.put(b"round", &[round]).expect("put");
            w.commit().expect("commit");
            let st = db.stats().snapshots;
            assert!(st.version_store_bytes <= cap as u64, "{st:?}");
        }
    }
    match old.get(b"k000005") {
        Err(Error::SnapshotTooOld { cap_bytes, .. }) => assert_eq!(cap_bytes, cap),
        other => panic!("expected SnapshotTooOld, got {other:?}"),
    }
    let e = old.prefix(b"k").next().expect("an item");
    assert!(matches!(e, Err(Error::SnapshotTooOld { .. })), "{e:?}");
    let st = db.stats().snapshots;
    assert_eq!(st.snapshots_too_old, 1);
    let fresh = db.begin_read().expect("read");
    assert_eq!(fresh.get(b"k000005").expect("get"), Some(value.clone()));
    // A snapshot whose versions fit keeps reading through small commits.
    for i in 0..20 {
        let mut w = db.begin_write().expect("begin");
        w.put(format!("k{i:06}").as_bytes(), b"small").expect("put");
        w.commit().expect("commit");
    }
    assert_eq!(fresh.get(b"k000005").expect("get"), Some(value));
    assert_eq!(db.stats().snapshots.snapshots_too_old, 1);
    drop((old, fresh));
    assert_eq!(db.stats().snapshots.active_snapshots, 0);
}

/// A reader that begins while a writer commits sees that commit whole or
/// not at all, across many short read transactions racing commits that
/// change two keys together.
#[test]
fn a_snapshot_begun_during_a_commit_sees_it_whole_or_not_at_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Database::open(dir.path(), options()).expect("open"));
    let mut w = db.begin_write().expect("begin");
    w.put(b"a", &0u64.to_le_bytes()).expect("put");
    w.put(b"b", &0u64.to_le_bytes()).expect("put");
    w.commit().expect("commit");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let mut w = db.begin_write().expect("begin");
                w.put(b"a", &n.to_le_bytes()).expect("put");
                w.put(b"b", &n.to_le_bytes()).expect("put");
                w.commit().expect("commit");
            }
        })
    };
    let until = Instant::now() + Duration::from_secs(2);
    let mut reads = 0u64;
    let mut given_up = 0u64;
    while Instant::now() < until || reads < 100 {
        let r = db.begin_read().expect("read");
        // A reader descheduled while the writer fills the version store's
        // cap is given up (a typed error, never a wrong value): it begins
        // again.
        let (a, b) = match (r.get(b"a"), {
            std::thread::yield_now();
            r.get(b"b")
        }) {
            (Err(Error::SnapshotTooOld { .. }), _) | (_, Err(Error::SnapshotTooOld { .. })) => {
                given_up += 1;
                continue;
            }
            (a, b) => (a.expect("get").expect("a"), b.expect("get").expect("b")),
        };
        assert_eq!(a, b, "both keys from one commit");
        reads += 1;
    }
    // At least 100 snapshots read both keys (the loop's condition).
    eprintln!("{reads} snapshots read both keys, {given_up} were given up");
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
}

/// The value `round` gives key `i` of the rolled-back test (1,000 bytes).
fn big_value(i: u64, round: u64) -> Vec<u8> {
    let mut v = format!("{i}:{round}:").into_bytes();
    v.resize(1000, b'v');
    v
}

/// A commit too large for the cache changes pages, then puts them back
/// and retracts its versions (`TransactionTooLarge`), again and again,
/// while readers read the keys it changes by point gets and by prefix
/// scans, without the tree's lock: no reader ever sees one of its values.
#[test]
fn values_of_a_rolled_back_commit_are_never_read() {
    const KEYS: u64 = 400;
    const ROUNDS: u64 = 40;
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        page_bytes: 4096,
        cache_bytes: 64 * 4096,
        version_store_bytes: Some(4 << 20),
        durability: Durability::NoSyncNotDurable,
        ..Options::default()
    };
    let db = Database::open(dir.path(), opts).expect("open");
    let key = |i: u64| format!("big/{i:04}").into_bytes();
    for batch in 0..KEYS / 10 {
        let mut w = db.begin_write().expect("begin");
        for i in batch * 10..batch * 10 + 10 {
            w.put(&key(i), &big_value(i, 0)).expect("put");
        }
        w.commit().expect("a small commit fits");
    }
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let check = |i: u64, v: Option<Vec<u8>>| {
        assert_eq!(v, Some(big_value(i, 0)), "key {i}: a value never committed");
    };
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (db, stop, reads) = (&db, &stop, &reads);
            s.spawn(move || {
                let mut n = t;
                while !stop.load(Ordering::Relaxed) {
                    let r = db.begin_read().expect("begin_read");
                    for _ in 0..50 {
                        n = (n * 7 + 13) % (KEYS / 5);
                        // The rolling-back commit may hold every frame: a
                        // read may find none free, a clear error, never a
                        // value.
                        match r.get(&key(n)) {
                            Ok(v) => check(n, v),
                            Err(Error::CacheExhausted { .. }) => {}
                            Err(e) => panic!("get: {e}"),
                        }
                    }
                    let scans = reads.fetch_add(1, Ordering::Relaxed) % 8 == 0;
                    for e in r.prefix(b"big/").take_while(|_| scans) {
                        match e {
                            Ok((k, v)) => {
                                let i = std::str::from_utf8(&k[4..]).expect("utf8");
                                check(i.parse().expect("a number"), Some(v));
                            }
                            Err(Error::CacheExhausted { .. }) => break,
                            Err(e) => panic!("scan: {e}"),
                        }
                    }
                }
            });
        }
        for round in 1..=ROUNDS {
            let mut w = db.begin_write().expect("begin");
            for i in 0..KEYS {
                w.put(&key(i), &big_value(i, round)).expect("put");
            }
            match w.commit() {
                Err(Error::TransactionTooLarge { .. }) => {}
                r => panic!("the commit cannot fit the cache: {r:?}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let st = db.stats();
    assert!(reads.load(Ordering::Relaxed) > 0, "readers ran");
    assert!(
        st.transactions.commit_misses > 0,
        "commits were rolled back"
    );
    let r = db.begin_read().expect("read");
    for i in 0..KEYS {
        check(i, r.get(&key(i)).expect("get"));
    }
    eprintln!(
        "{} read transactions beside {ROUNDS} rolled-back commits ({} attempts rolled back)",
        reads.load(Ordering::Relaxed),
        st.transactions.commit_misses
    );
}
