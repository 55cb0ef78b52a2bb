//! Where committers sleep while a flush is under way, and whom the end of a
//! flush wakes.
//!
//! A flush `g` (the `g`-th begun) covers the log up to the end it took when
//! it began. A waiter whose record ends at or before that end needs flush
//! `g`; one whose record ends after it needs flush `g + 1`, which nobody
//! has begun yet. The two kinds sleep on different words, chosen by the
//! parity of the flush they need, so that the end of flush `g` wakes:
//! - every waiter of flush `g` (all of them are done), and
//! - **one** waiter of flush `g + 1`, to lead it; the rest of them stay
//!   asleep until flush `g + 1` ends.
//!
//! The woken waiters check the published durable end without the log's
//! lock, so the ones whose commit is durable return without queueing for it.
//! (Waking every waiter at every flush end, as one condition variable does,
//! had each of them take the log's lock in turn, most to fall asleep again,
//! while committers queued behind them to append.)
//!
//! Invariants:
//! - A word changes only under the log's lock, and a waiter reads the value
//!   it sleeps on under that lock. The kernel sleeps only while the word
//!   still holds that value, so an end that comes between a waiter's
//!   decision and its sleep is never missed.
//! - Every flush end changes both words, then wakes: a waiter of flush
//!   `g + 1` that was not yet asleep when the one wake-up went out finds its
//!   word changed and looks again, so flush `g + 1` always gets a leader.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::health::{sleep_on, wake_on, WAKE_ALL};

/// The two words committers sleep on, by the parity of the flush they need.
pub(in crate::wal) struct FlushEnds {
    words: [AtomicU32; 2],
}

/// What a waiter sleeps on: a word and the value it read under the log's
/// lock.
#[must_use = "a ticket is for sleeping on"]
pub(super) struct Ticket {
    slot: usize,
    seen: u32,
}

impl FlushEnds {
    pub(super) fn new() -> Self {
        FlushEnds {
            words: [AtomicU32::new(0), AtomicU32::new(0)],
        }
    }

    fn word(&self, generation: u64) -> &AtomicU32 {
        &self.words[(generation % 2) as usize]
    }

    /// A ticket to sleep until flush `generation` ends (or, for the flush
    /// after the one under way, until it may be led). Taken under the log's
    /// lock.
    pub(super) fn ticket(&self, generation: u64) -> Ticket {
        let slot = (generation % 2) as usize;
        Ticket {
            slot,
            seen: self.words[slot].load(Ordering::Acquire),
        }
    }

    /// Sleeps on `ticket` (after the log's lock is let go) until a wake-up,
    /// or at once if its word has changed since. May return early (a
    /// signal): the caller looks again either way.
    pub(super) fn sleep(&self, ticket: Ticket) {
        sleep_on(&self.words[ticket.slot], ticket.seen, None);
    }

    /// Marks the end of a flush (or the log's failure or stop), under the
    /// log's lock: both words change (see the module's invariants).
    pub(in crate::wal) fn mark_end(&self) {
        for w in &self.words {
            w.fetch_add(1, Ordering::Release);
        }
    }

    /// Wakes, after the log's lock is let go, every waiter of flush
    /// `generation` and one waiter of the flush after it.
    pub(super) fn wake(&self, generation: u64) {
        wake_on(self.word(generation), WAKE_ALL);
        wake_on(self.word(generation + 1), 1);
    }

    /// Wakes every waiter, after [`mark_end`](Self::mark_end) and the log's
    /// lock is let go: the log has failed or stopped, and each of them must
    /// look.
    pub(in crate::wal) fn wake_everyone(&self) {
        for w in &self.words {
            wake_on(w, WAKE_ALL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::Duration;

    /// How long a round waits for the next flush's leader to run, however
    /// loaded the machine: far beyond any scheduling delay.
    const LEADER_WAIT_MAX: Duration = Duration::from_secs(30);

    /// One round: four waiters of flush 6 and three of flush 7 go to sleep,
    /// flush 6 ends; returns how many of flush 7's woke then. All of them
    /// wake by the end of flush 7.
    fn leaders_woken_by_one_end() -> usize {
        let ends = Arc::new(FlushEnds::new());
        let woken = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let spawn = |generation: u64| {
            let (ends, woken) = (ends.clone(), woken.clone());
            let ticket = ends.ticket(generation);
            std::thread::spawn(move || {
                ends.sleep(ticket);
                woken[(generation % 2) as usize].fetch_add(1, Ordering::SeqCst);
            })
        };
        let covered: Vec<_> = (0..4).map(|_| spawn(6)).collect();
        let next: Vec<_> = (0..3).map(|_| spawn(7)).collect();
        // Give every thread time to fall asleep (one that has not finds its
        // word changed and returns at once, like a woken one).
        std::thread::sleep(Duration::from_millis(100));
        ends.mark_end();
        ends.wake(6);
        for h in covered {
            h.join()
                .expect("every waiter of the flush that ended wakes");
        }
        assert_eq!(woken[0].load(Ordering::SeqCst), 4);
        // The next flush gets a leader (however long a loaded machine takes
        // to run it); then any more woken have had time to show.
        let deadline = std::time::Instant::now() + LEADER_WAIT_MAX;
        while woken[1].load(Ordering::SeqCst) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the next flush gets a leader"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(100));
        let leaders = woken[1].load(Ordering::SeqCst);
        // A ticket for flush 7 taken before its end does not sleep after it.
        let late = ends.ticket(7);
        ends.mark_end();
        ends.sleep(late);
        ends.wake(7);
        for h in next {
            h.join().expect("the next flush's waiters wake at its end");
        }
        assert_eq!(woken[1].load(Ordering::SeqCst), 3);
        leaders
    }

    /// The end of a flush wakes all its waiters and exactly one of the next
    /// flush's. A round where a thread was slow to fall asleep wakes more;
    /// waking them all would do so in every round.
    #[test]
    fn an_end_wakes_its_waiters_and_one_leader() {
        let rounds: Vec<usize> = (0..5).map(|_| leaders_woken_by_one_end()).collect();
        assert!(rounds.contains(&1), "leaders woken per round: {rounds:?}");
    }
}
