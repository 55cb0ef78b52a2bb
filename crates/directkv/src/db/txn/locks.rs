//! Row locks: exclusive locks on keys, taken by a write transaction's
//! `put`, `delete` and `get_for_update` and held until its commit record is
//! appended (or it ends without one).
//!
//! Each locked key has one holder and a first-come, first-served queue of
//! waiters; a release hands the key to the first waiter, so no waiter is
//! overtaken by a later arrival. A waiter sleeps on a grant of its own (a
//! futex word), so a release wakes only the transaction it hands the key
//! to, and that transaction goes on without taking the table's lock again:
//! on a hot key, the next holder does not queue for the table behind the
//! transactions still arriving.
//!
//! Deadlocks: a transaction waits for the holder of its key and for every
//! waiter ahead of it in that key's queue (they get the key first). Before
//! it sleeps, a transaction follows those edges through every other waiting
//! transaction (the holders alone suffice, see [`closes_cycle`]); if they
//! lead back to itself, it is the victim and gets
//! [`Error::Deadlock`] instead of waiting. Every edge of the graph is made
//! by a transaction starting to wait (a hand-off only turns an edge to a
//! waiter ahead into an edge to the holder), so checking there finds every
//! cycle when it closes.
//!
//! Invariants:
//! - A key in the table has a holder; a holder is never also a waiter of the
//!   same key; a transaction waits for at most one key at a time.
//! - The queue is served in arrival order: the key passes only to the
//!   queue's front.
//! - A waiter that gives up (timeout) leaves the queue, and a key whose
//!   holder leaves with no waiter leaves the table: nothing outlives its
//!   transactions.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::format::TxnId;
use crate::health;

/// Transactions a deadlock search visits at most (every waiting transaction
/// once; a bound far above any thread count, asserted).
const DEADLOCK_SEARCH_MAX: usize = 1 << 20;

/// A transaction waiting for a key.
struct Waiter {
    txn: TxnId,
    grant: Arc<Grant>,
}

/// The word a waiter sleeps on: 0 while it waits, 1 once a release handed
/// it the key (set under the table's lock, never set back).
#[derive(Default)]
struct Grant(AtomicU32);

impl Grant {
    fn is_granted(&self) -> bool {
        self.0.load(Ordering::Acquire) == 1
    }

    /// Marks the key handed over; called under the table's lock.
    fn give(&self) {
        let before = self.0.swap(1, Ordering::AcqRel);
        assert_eq!(before, 0, "a key is handed to a waiter once");
    }

    /// Sleeps until given the key, at most `limit` (`None`: no limit); may
    /// return early (a signal): the caller looks again.
    fn sleep(&self, limit: Option<Duration>) {
        health::sleep_on(&self.0, 0, limit);
    }
}

/// The grants a release handed out, woken when it is dropped: after the
/// table's lock is let go, and also when the release panics part way
/// (a waiter given its key must not sleep on until its timeout).
#[derive(Default)]
struct Handed(Vec<Arc<Grant>>);

impl Drop for Handed {
    fn drop(&mut self) {
        for grant in &self.0 {
            health::wake_on(&grant.0, 1);
        }
    }
}

/// One locked key.
struct KeyLock {
    holder: TxnId,
    queue: VecDeque<Waiter>,
}

#[derive(Default)]
struct Table {
    keys: HashMap<Vec<u8>, KeyLock>,
    /// Waiting transaction → the key it waits for.
    waiting: HashMap<TxnId, Vec<u8>>,
}

/// What the lock table counts, as `Stats::transactions` reports it.
#[derive(Default)]
pub(in crate::db) struct LockCounters {
    pub(in crate::db) waits: AtomicU64,
    pub(in crate::db) waited_us: AtomicU64,
    pub(in crate::db) deadlocks: AtomicU64,
    pub(in crate::db) timeouts: AtomicU64,
}

/// The row locks of one database.
#[derive(Default)]
pub(crate) struct LockTable {
    table: Mutex<Table>,
    pub(in crate::db) counters: LockCounters,
}

impl LockTable {
    fn table(&self) -> Result<MutexGuard<'_, Table>> {
        health::lock(&self.table)
    }

    /// Locks `key` for `txn`, waiting first come first served while another
    /// transaction holds it, at most `timeout`. Returns whether it was newly
    /// taken (false: `txn` held it already).
    ///
    /// # Errors
    /// [`Error::Deadlock`] when waiting would close a cycle of waits (`txn`
    /// is the victim and waits for nothing); [`Error::LockTimeout`] when
    /// the wait ran out; [`Error::Poisoned`] when a thread panicked holding
    /// the table.
    pub(in crate::db) fn lock(&self, txn: TxnId, key: &[u8], timeout: Duration) -> Result<bool> {
        let mut t = self.table()?;
        assert!(!t.waiting.contains_key(&txn), "a transaction waits once");
        let holder = match t.keys.get(key) {
            None => {
                let queue = VecDeque::new();
                t.keys.insert(key.to_vec(), KeyLock { holder: txn, queue });
                return Ok(true);
            }
            Some(l) if l.holder == txn => return Ok(false),
            Some(l) => l.holder,
        };
        if closes_cycle(&t, txn, holder) {
            self.counters.deadlocks.fetch_add(1, Ordering::Relaxed);
            return Err(Error::Deadlock {
                key: super::tables::shown(key),
            });
        }
        let grant = Arc::new(Grant::default());
        let l = t.keys.get_mut(key).expect("looked up above");
        l.queue.push_back(Waiter {
            txn,
            grant: grant.clone(),
        });
        t.waiting.insert(txn, key.to_vec());
        drop(t);
        let started = Instant::now();
        let r = self.wait(txn, key, &grant, (started, timeout));
        let waited = started.elapsed();
        self.counters.waits.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.counters.waited_us.fetch_add(us, Ordering::Relaxed);
        r.map(|()| true).map_err(|e| {
            if matches!(e, Error::LockTimeout { .. }) {
                self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
            }
            e
        })
    }

    /// Sleeps until `key` is handed to `txn` or `timeout` passes. A
    /// timeout past what the clock can count (`Duration::MAX`) has no
    /// deadline: the wait lasts until the key is handed over.
    fn wait(
        &self,
        txn: TxnId,
        key: &[u8],
        grant: &Grant,
        (started, timeout): (Instant, Duration),
    ) -> Result<()> {
        let deadline = started.checked_add(timeout);
        loop {
            if grant.is_granted() {
                return Ok(());
            }
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => break,
                },
            };
            grant.sleep(left);
        }
        assert!(deadline.is_some(), "only a deadline ends a wait ungranted");
        // Out of time: unless the key was handed over meanwhile, leave the
        // queue. After a panic that poisoned the table (the database is
        // stopping) leave nothing behind either: a granted key is kept
        // (the transaction releases it when it ends), a place in the queue
        // is given up.
        let (mut t, poisoned) = match self.table.lock() {
            Ok(t) => (t, false),
            Err(p) => (p.into_inner(), true),
        };
        if grant.is_granted() {
            assert_eq!(t.keys.get(key).map(|l| l.holder), Some(txn), "granted");
            return Ok(());
        }
        leave(&mut t, txn, key);
        if poisoned {
            return Err(health::lock_poisoned());
        }
        Err(Error::LockTimeout {
            key: super::tables::shown(key),
            waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// Releases the locks `txn` holds on `keys`, handing each to its first
    /// waiter.
    pub(in crate::db) fn release_all(&self, txn: TxnId, keys: &[Vec<u8>]) {
        if keys.is_empty() {
            return;
        }
        // Releasing must run even after a panic elsewhere: the table's
        // critical sections leave it whole (they change it only in
        // single map operations after every assertion).
        // Declared before the guard, so dropped (and woken) after it.
        let mut handed = Handed::default();
        let mut guard = health::lock_even_poisoned(&self.table);
        let t = &mut *guard;
        for key in keys {
            let Some(l) = t.keys.get_mut(key.as_slice()) else {
                panic!("a transaction releases only keys it locked");
            };
            assert_eq!(l.holder, txn, "released by its holder");
            match l.queue.pop_front() {
                Some(next) => {
                    l.holder = next.txn;
                    let was = t.waiting.remove(&next.txn);
                    assert!(was.is_some(), "the next holder was waiting");
                    next.grant.give();
                    handed.0.push(next.grant);
                }
                None => {
                    t.keys.remove(key.as_slice());
                }
            }
        }
        // The next holders wake after the table's lock is let go.
        drop(guard);
        drop(handed);
    }

    /// Keys locked now (for stats and tests).
    pub(in crate::db) fn locked_keys(&self) -> usize {
        health::lock_even_poisoned(&self.table).keys.len()
    }

    /// Transactions waiting for a lock now.
    pub(in crate::db) fn waiting(&self) -> usize {
        health::lock_even_poisoned(&self.table).waiting.len()
    }
}

/// Takes waiting `txn` out of `key`'s queue (it gave up).
fn leave(t: &mut Table, txn: TxnId, key: &[u8]) {
    let l = t.keys.get_mut(key).expect("a waited-for key is locked");
    assert_ne!(l.holder, txn, "a holder does not leave a queue");
    let before = l.queue.len();
    l.queue.retain(|w| w.txn != txn);
    assert_eq!(l.queue.len() + 1, before, "a waiter leaves its queue once");
    let was = t.waiting.remove(&txn);
    assert!(was.is_some(), "a waiter was waiting");
}

/// Whether `txn` waiting for a key held by `holder` would close a cycle:
/// whether the transactions it would wait for lead back to it.
///
/// Only holders need following. A cycle closes at `txn`, which is in no
/// queue, so its last edge is a waiter's edge to a holder. And a waiter
/// ahead in a queue leads nowhere the queue's holder does not: it waits
/// for that one key only, so its own edges go to the same holder and the
/// waiters ahead of it. The walk is therefore a chain, holder to the key
/// it waits for to that key's holder, each step one look-up (following
/// every waiter ahead visited a queue of n waiters n²/2 times).
fn closes_cycle(t: &Table, txn: TxnId, holder: TxnId) -> bool {
    let mut seen = HashSet::new();
    let mut next = Some(holder);
    while let Some(x) = next {
        if x == txn {
            return true;
        }
        if !seen.insert(x) {
            return false;
        }
        assert!(seen.len() <= DEADLOCK_SEARCH_MAX, "the search is bounded");
        next = t.waiting.get(&x).map(|k| {
            let l = t.keys.get(k).expect("a waited-for key is locked");
            assert_ne!(l.holder, x, "a holder does not wait for its own key");
            l.holder
        });
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn t(id: u64) -> TxnId {
        TxnId::new(id)
    }

    const LONG: Duration = Duration::from_secs(30);

    /// A held key makes a second transaction wait until it is released,
    /// then passes to it; a released key with no waiter leaves the table.
    #[test]
    fn a_key_passes_to_its_waiter() {
        let locks = Arc::new(LockTable::default());
        assert!(locks.lock(t(1), b"k", LONG).expect("free"));
        assert!(!locks.lock(t(1), b"k", LONG).expect("held already"));
        let l2 = locks.clone();
        let waiter = std::thread::spawn(move || l2.lock(t(2), b"k", LONG));
        while health::lock_even_poisoned(&locks.table).waiting.is_empty() {
            std::thread::yield_now();
        }
        locks.release_all(t(1), &[b"k".to_vec()]);
        assert!(waiter.join().expect("no panic").expect("granted"));
        locks.release_all(t(2), &[b"k".to_vec()]);
        assert_eq!(locks.locked_keys(), 0);
    }

    /// A timeout the clock cannot add (`Duration::MAX`, "wait as long as it
    /// takes") waits until the key is handed over, instead of overflowing
    /// the deadline.
    #[test]
    fn an_endless_timeout_waits_for_the_key() {
        let locks = Arc::new(LockTable::default());
        locks.lock(t(1), b"k", Duration::MAX).expect("free");
        let (waiter, returned) = queue_waiter(&locks, 2, b"k", Duration::MAX);
        assert!(
            matches!(
                returned.recv_timeout(Duration::from_millis(50)),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            ),
            "it waits, alive, while the key is held"
        );
        locks.release_all(t(1), &[b"k".to_vec()]);
        returned.recv_timeout(LONG).expect("woken by the release");
        assert!(waiter.join().expect("no panic").expect("granted"));
        locks.release_all(t(2), &[b"k".to_vec()]);
        assert_eq!(locks.locked_keys(), 0);
    }

    /// Starts transaction `id` waiting for `key` on a thread, and returns
    /// once it is queued: its handle, and a channel that hears when its
    /// `lock` returned.
    fn queue_waiter(
        locks: &Arc<LockTable>,
        id: u64,
        key: &'static [u8],
        timeout: Duration,
    ) -> (
        std::thread::JoinHandle<Result<bool>>,
        std::sync::mpsc::Receiver<()>,
    ) {
        let (l, (done, returned)) = (locks.clone(), std::sync::mpsc::channel());
        let waiter = std::thread::spawn(move || {
            let r = l.lock(t(id), key, timeout);
            done.send(()).expect("the test waits for it");
            r
        });
        while !health::lock_even_poisoned(&locks.table)
            .waiting
            .contains_key(&t(id))
        {
            std::thread::yield_now();
        }
        (waiter, returned)
    }

    /// The queue is served in arrival order: with 2, 3 and 4 queued behind
    /// 1 in that order, and 5 arriving while 2 holds, each release hands
    /// the key to the earliest arrival still waiting, and to it alone.
    #[test]
    fn waiters_are_served_in_arrival_order() {
        let locks = Arc::new(LockTable::default());
        locks.lock(t(1), b"k", LONG).expect("free");
        let mut queued: VecDeque<_> = [2, 3, 4]
            .into_iter()
            .map(|id| (id, queue_waiter(&locks, id, b"k", LONG)))
            .collect();
        let mut holder = 1;
        while let Some((id, (waiter, returned))) = queued.pop_front() {
            locks.release_all(t(holder), &[b"k".to_vec()]);
            returned
                .recv_timeout(LONG)
                .expect("the front waiter is woken");
            assert!(waiter.join().expect("no panic").expect("granted"));
            holder = id;
            let table = health::lock_even_poisoned(&locks.table);
            for (later, _) in &queued {
                assert!(
                    table.waiting.contains_key(&t(*later)),
                    "a later arrival still waits"
                );
            }
            drop(table);
            if id == 2 {
                queued.push_back((5, queue_waiter(&locks, 5, b"k", LONG)));
            }
        }
        assert_eq!(holder, 5, "the last arrival is served last");
        locks.release_all(t(holder), &[b"k".to_vec()]);
        assert_eq!(locks.locked_keys(), 0);
    }

    /// A waiter handed the key goes on without the table's lock: it
    /// returns while another thread holds the table.
    #[test]
    fn a_granted_waiter_goes_on_without_the_table() {
        let locks = Arc::new(LockTable::default());
        locks.lock(t(1), b"k", LONG).expect("free");
        let (waiter, returned) = queue_waiter(&locks, 2, b"k", LONG);
        locks.release_all(t(1), &[b"k".to_vec()]);
        let table = health::lock_even_poisoned(&locks.table);
        returned
            .recv_timeout(LONG)
            .expect("the new holder returns while the table is held");
        drop(table);
        assert!(waiter.join().expect("no panic").expect("granted"));
    }

    /// A release that panics part way (a bug) still wakes the waiters it
    /// handed keys to before the panic: they do not sleep on until their
    /// timeout.
    #[test]
    fn a_release_that_panics_wakes_whom_it_handed_keys() {
        let locks = Arc::new(LockTable::default());
        locks.lock(t(1), b"a", LONG).expect("free");
        let (waiter, returned) = queue_waiter(&locks, 2, b"a", 4 * LONG);
        // `b` was never locked: the release hands `a` over, then panics.
        let release = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            locks.release_all(t(1), &[b"a".to_vec(), b"b".to_vec()]);
        }));
        assert!(release.is_err(), "releasing a key never locked is a bug");
        returned
            .recv_timeout(LONG)
            .expect("the waiter handed `a` is woken");
        assert!(waiter.join().expect("no panic").expect("granted"));
    }

    /// Two transactions each holding what the other asks for: the second to
    /// ask is the victim, and the first gets its key once the victim's
    /// locks go.
    #[test]
    fn a_cycle_of_waits_makes_a_victim() {
        let locks = Arc::new(LockTable::default());
        locks.lock(t(1), b"a", LONG).expect("free");
        locks.lock(t(2), b"b", LONG).expect("free");
        let l1 = locks.clone();
        let first = std::thread::spawn(move || l1.lock(t(1), b"b", LONG));
        while health::lock_even_poisoned(&locks.table).waiting.is_empty() {
            std::thread::yield_now();
        }
        let err = locks.lock(t(2), b"a", LONG).expect_err("a deadlock");
        assert!(matches!(err, Error::Deadlock { .. }), "{err}");
        locks.release_all(t(2), &[b"b".to_vec()]);
        assert!(first.join().expect("no panic").expect("granted"));
        assert_eq!(locks.counters.deadlocks.load(Ordering::Relaxed), 1);
    }

    /// A cycle through a queue: 3 waits behind 2 for `a`, which 1 holds,
    /// and 1 asks for `b`, which 3 holds. 1 is the victim; with it gone,
    /// 2 and then 3 get `a`.
    #[test]
    fn a_cycle_through_a_queue_makes_a_victim() {
        let locks = Arc::new(LockTable::default());
        locks.lock(t(1), b"a", LONG).expect("free");
        locks.lock(t(3), b"b", LONG).expect("free");
        let waiters: Vec<_> = [2, 3]
            .into_iter()
            .map(|id| {
                let l = locks.clone();
                let w = std::thread::spawn(move || l.lock(t(id), b"a", LONG));
                while !health::lock_even_poisoned(&locks.table)
                    .waiting
                    .contains_key(&t(id))
                {
                    std::thread::yield_now();
                }
                w
            })
            .collect();
        let err = locks.lock(t(1), b"b", LONG).expect_err("a deadlock");
        assert!(matches!(err, Error::Deadlock { .. }), "{err}");
        locks.release_all(t(1), &[b"a".to_vec()]);
        let mut waiters = waiters.into_iter();
        let second = waiters.next().expect("two waiters");
        assert!(second.join().expect("no panic").expect("granted"));
        locks.release_all(t(2), &[b"a".to_vec()]);
        let third = waiters.next().expect("two waiters");
        assert!(third.join().expect("no panic").expect("granted"));
        assert_eq!(locks.counters.deadlocks.load(Ordering::Relaxed), 1);
    }

    /// A wait that runs out leaves the queue, and the key goes to the next
    /// waiter in line.
    #[test]
    fn a_timed_out_waiter_leaves_the_queue() {
        let locks = LockTable::default();
        locks.lock(t(1), b"k", LONG).expect("free");
        let err = locks
            .lock(t(2), b"k", Duration::from_millis(20))
            .expect_err("times out");
        assert!(matches!(err, Error::LockTimeout { .. }), "{err}");
        assert!(health::lock_even_poisoned(&locks.table).waiting.is_empty());
        locks.release_all(t(1), &[b"k".to_vec()]);
        assert_eq!(locks.locked_keys(), 0);
        assert_eq!(locks.counters.timeouts.load(Ordering::Relaxed), 1);
    }
}
