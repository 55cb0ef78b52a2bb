//! A first-come, first-served lock: the one writer lock of
//! `Options::serial_writers`.
//!
//! Invariants:
//! - Holders are served in the order they asked (ticket order), one at a
//!   time; a ticket whose waiter gave up (its timeout passed) is skipped
//!   when its turn comes.
//! - A thread that asks again while holding it is a bug (it would wait for
//!   itself forever), asserted: it panics rather than hang. The lock knows
//!   the thread that took it; a holder that moved to another thread is
//!   caught by the timeout instead.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::health;

/// Condition variables a [`TicketLock`] spreads its waiters over.
const TICKET_SLOTS: usize = 64;

/// A first-come, first-served lock. A waiter sleeps on the condition
/// variable of its ticket's slot, so a release wakes only the waiter whose
/// turn it is (and any waiter 64 tickets behind it), not every waiter: with
/// many writers queued, waking them all to find the one whose turn it is
/// cost more than the transactions themselves on two cores.
///
/// It also remembers which thread holds it, so that callers can refuse a
/// thread that asks for it again while holding it (it would wait for itself
/// forever; `acquire` asserts it never does).
pub(crate) struct TicketLock {
    state: Mutex<Tickets>,
    turn: Box<[Condvar]>,
    /// The holder's [`thread_token`], 0 while free.
    owner: AtomicU64,
}

/// The tickets handed out and served.
#[derive(Default)]
struct Tickets {
    /// The next ticket to hand out.
    next: u64,
    /// The ticket being served.
    serving: u64,
    /// Tickets past `serving` whose waiters gave up.
    abandoned: BTreeSet<u64>,
}

impl Default for TicketLock {
    fn default() -> Self {
        TicketLock {
            state: Mutex::new(Tickets::default()),
            turn: (0..TICKET_SLOTS).map(|_| Condvar::new()).collect(),
            owner: AtomicU64::new(0),
        }
    }
}

/// A number unique to the calling thread for the life of the process (never 0).
fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TOKEN.with(|t| *t)
}

impl TicketLock {
    fn slot(&self, ticket: u64) -> &Condvar {
        &self.turn[(ticket % TICKET_SLOTS as u64) as usize]
    }

    /// Whether the calling thread holds the lock.
    pub fn held_by_this_thread(&self) -> bool {
        self.owner.load(Ordering::Acquire) == thread_token()
    }

    /// Waits for the lock, first come first served, at most `timeout`
    /// (`Duration::MAX`: as long as it takes); returns the ticket that
    /// [`release`](Self::release) takes back, or `None` when the time ran
    /// out (the ticket is then skipped).
    pub fn acquire(&self, timeout: Duration) -> Option<u64> {
        assert!(
            !self.held_by_this_thread(),
            "a thread waits for its own lock"
        );
        let deadline = Instant::now().checked_add(timeout);
        // The ticket state's critical sections are counter and set
        // arithmetic: a panic cannot leave it half changed.
        let mut s = health::lock_even_poisoned(&self.state);
        let mine = s.next;
        s.next += 1;
        while s.serving != mine {
            assert!(s.serving < mine, "tickets are served in order");
            s = match deadline {
                None => self.slot(mine).wait(s).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        s.abandoned.insert(mine);
                        return None;
                    }
                    let waited = self.slot(mine).wait_timeout(s, d - now);
                    waited.unwrap_or_else(|p| p.into_inner()).0
                }
            };
        }
        assert_eq!(s.serving, mine, "served in ticket order");
        let before = self.owner.swap(thread_token(), Ordering::AcqRel);
        assert_eq!(before, 0, "one holder at a time");
        Some(mine)
    }

    /// Releases the lock held with `ticket`, waking the next in line (past
    /// the tickets given up).
    pub fn release(&self, ticket: u64) {
        // The ticket state's critical sections are counter and set
        // arithmetic: a panic cannot leave it half changed.
        let mut s = health::lock_even_poisoned(&self.state);
        assert_eq!(s.serving, ticket, "released by its holder");
        let before = self.owner.swap(0, Ordering::AcqRel);
        assert_ne!(before, 0, "released while held");
        s.serving += 1;
        while s.abandoned.first() == Some(&s.serving) {
            s.abandoned.pop_first();
            s.serving += 1;
        }
        assert!(
            s.abandoned.first().is_none_or(|&t| t > s.serving),
            "only tickets still to come are given up"
        );
        let next = s.serving;
        if s.next > next {
            self.slot(next).notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Holders are mutually exclusive and served in ticket order, also with
    /// more waiters than the lock has slots (two share a slot then).
    #[test]
    fn ticket_lock_excludes_and_serves_in_order() {
        for threads in [4usize, 80] {
            let lock = Arc::new(TicketLock::default());
            let inside = Arc::new(AtomicU64::new(0));
            let served = Arc::new(Mutex::new(Vec::new()));
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let (lock, inside, served) = (lock.clone(), inside.clone(), served.clone());
                    std::thread::spawn(move || {
                        for _ in 0..200 {
                            let t = lock.acquire(Duration::MAX).expect("no timeout");
                            // A second holder would see 1 here.
                            assert_eq!(inside.swap(1, Ordering::SeqCst), 0);
                            served.lock().expect("not poisoned").push(t);
                            std::thread::yield_now();
                            inside.store(0, Ordering::SeqCst);
                            lock.release(t);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().expect("no holder panicked");
            }
            let served = served.lock().expect("not poisoned");
            let expected: Vec<u64> = (0..(threads * 200) as u64).collect();
            assert_eq!(*served, expected, "{threads} threads");
        }
    }

    /// A waiter whose time runs out gives its ticket up; the release that
    /// reaches it serves the next waiter, who would otherwise wait for a
    /// ticket nobody holds.
    #[test]
    fn a_ticket_given_up_is_skipped() {
        let lock = Arc::new(TicketLock::default());
        let held = lock.acquire(Duration::MAX).expect("free");
        let impatient = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.acquire(Duration::from_millis(20)))
        };
        assert_eq!(
            impatient.join().expect("no panic"),
            None,
            "its time ran out"
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let patient = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                let t = lock.acquire(Duration::MAX).expect("no timeout");
                tx.send(t).expect("send");
                lock.release(t);
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        lock.release(held);
        let served = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the waiter behind the given-up ticket is served");
        assert_eq!(served, held + 2, "the ticket between was skipped");
        patient.join().expect("no panic");
        let again = lock.acquire(Duration::ZERO).expect("free again");
        assert_eq!(again, held + 3);
        lock.release(again);
    }
}
