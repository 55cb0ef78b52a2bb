//! A first-come, first-served lock: the one writer lock of
//! `Options::serial_writers`.
//!
//! Invariants:
//! - Holders are served in the order they asked (ticket order), one at a
//!   time.
//! - A thread that asks again while holding it is a bug (it would wait for
//!   itself forever), asserted: it panics rather than hang.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

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
    /// (next ticket to hand out, ticket being served).
    state: Mutex<(u64, u64)>,
    turn: Box<[Condvar]>,
    /// The holder's [`thread_token`], 0 while free.
    owner: AtomicU64,
}

impl Default for TicketLock {
    fn default() -> Self {
        TicketLock {
            state: Mutex::new((0, 0)),
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

    /// Waits for the lock, first come first served; returns the ticket that
    /// [`release`](Self::release) takes back.
    pub fn acquire(&self) -> u64 {
        assert!(
            !self.held_by_this_thread(),
            "a thread waits for its own lock"
        );
        // The ticket state's critical sections are counter arithmetic: a
        // panic cannot leave it half changed.
        let mut s = health::lock_even_poisoned(&self.state);
        let mine = s.0;
        s.0 += 1;
        while s.1 != mine {
            s = self.slot(mine).wait(s).unwrap_or_else(|p| p.into_inner());
        }
        assert_eq!(s.1, mine, "served in ticket order");
        let before = self.owner.swap(thread_token(), Ordering::AcqRel);
        assert_eq!(before, 0, "one holder at a time");
        mine
    }

    /// Releases the lock held with `ticket`, waking the next in line.
    pub fn release(&self, ticket: u64) {
        // The ticket state's critical sections are counter arithmetic: a
        // panic cannot leave it half changed.
        let mut s = health::lock_even_poisoned(&self.state);
        assert_eq!(s.1, ticket, "released by its holder");
        let before = self.owner.swap(0, Ordering::AcqRel);
        assert_ne!(before, 0, "released while held");
        s.1 += 1;
        let next = s.1;
        if s.0 > next {
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
                            let t = lock.acquire();
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
}
