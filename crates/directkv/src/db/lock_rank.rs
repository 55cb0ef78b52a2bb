//! The engine's lock order, asserted: every lock of the engine's own state
//! that another engine lock may be taken under carries a [`Rank`], and a
//! thread may only block on a lock ranked above every ranked lock it holds.
//! The order itself is written once, in [`super::engine`]'s module docs.
//!
//! In debug builds each thread keeps the ranks it holds on a thread-local
//! list: taking a lock whose rank is not above the highest held panics (a
//! bug: with the opposite order on another thread, the two could wait on
//! each other forever). Release builds keep only the rank beside the lock
//! and check nothing. A `try_lock` never waits, so it is not checked, but
//! the rank it took is held until its guard drops like any other.
//!
//! Invariants:
//! - A guard's rank is on its thread's list exactly while the guard lives
//!   (guards are not `Send`, so they drop on the thread that took them).
//! - Poisoning is an error, as with [`crate::health::lock`].

use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::Result;
use crate::health;

/// A lock's place in the engine's lock order: a thread takes ranked locks
/// in increasing rank only (see [`super::engine`] for the whole order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rank {
    /// `CheckpointState::checkpointing`: the first lock a checkpoint (or a
    /// backup's checkpoint) takes.
    Checkpointing = 1,
    /// `TxnCore::committer`: the commit section.
    Committer = 2,
    /// `TxnCore::tree`: the tree's root state.
    Tree = 3,
    /// `CheckpointState::control`: the control file.
    Control = 4,
    /// `Inner::readahead`: the readahead queue, a leaf.
    Readahead = 5,
}

#[cfg(debug_assertions)]
thread_local! {
    /// The ranks this thread holds, in the order it took them.
    static HELD: std::cell::RefCell<Vec<Rank>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Asserts that this thread may wait for a lock of `rank` (debug builds).
fn check_order(rank: Rank) {
    #[cfg(debug_assertions)]
    HELD.with(|held| {
        if let Some(top) = held.borrow().iter().max() {
            assert!(
                *top < rank,
                "lock order: {rank:?} taken while holding {top:?} (see db::engine)"
            );
        }
    });
    #[cfg(not(debug_assertions))]
    let _ = rank;
}

/// Notes that this thread now holds `rank` (debug builds).
fn note_taken(rank: Rank) {
    #[cfg(debug_assertions)]
    HELD.with(|held| held.borrow_mut().push(rank));
    #[cfg(not(debug_assertions))]
    let _ = rank;
}

/// Notes that this thread released `rank` (debug builds).
fn note_released(rank: Rank) {
    #[cfg(debug_assertions)]
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        let at = held.iter().rposition(|&r| r == rank);
        assert!(at.is_some(), "a released lock was noted as held");
        if let Some(at) = at {
            held.remove(at);
        }
    });
    #[cfg(not(debug_assertions))]
    let _ = rank;
}

/// A guard of a ranked lock: the inner guard, and its rank on this
/// thread's list until it drops.
pub(crate) struct Ranked<G> {
    guard: G,
    rank: Rank,
}

impl<G> Ranked<G> {
    fn taken(guard: G, rank: Rank) -> Self {
        note_taken(rank);
        Ranked { guard, rank }
    }
}

impl<G> Drop for Ranked<G> {
    fn drop(&mut self) {
        note_released(self.rank);
    }
}

impl<G: Deref> Deref for Ranked<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: DerefMut> DerefMut for Ranked<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

/// A guard of a [`RankedMutex`].
pub(crate) type RankedMutexGuard<'a, T> = Ranked<MutexGuard<'a, T>>;

/// A mutex with a place in the lock order.
pub(crate) struct RankedMutex<T> {
    mutex: Mutex<T>,
    rank: Rank,
}

impl<T> RankedMutex<T> {
    /// A mutex of `rank` holding `value`.
    pub(crate) fn new(rank: Rank, value: T) -> Self {
        RankedMutex {
            mutex: Mutex::new(value),
            rank,
        }
    }

    /// Locks it, after checking the lock order; poisoning is an error.
    pub(crate) fn lock(&self) -> Result<RankedMutexGuard<'_, T>> {
        check_order(self.rank);
        let guard = health::lock(&self.mutex)?;
        Ok(Ranked::taken(guard, self.rank))
    }

    /// Locks it even when poisoned, after checking the lock order: only for
    /// teardown (see [`crate::health::lock_even_poisoned`]).
    pub(crate) fn lock_even_poisoned(&self) -> RankedMutexGuard<'_, T> {
        check_order(self.rank);
        let guard = health::lock_even_poisoned(&self.mutex);
        Ranked::taken(guard, self.rank)
    }

    /// Locks it if it is free and not poisoned; never waits, so the order
    /// is not checked.
    pub(crate) fn try_lock(&self) -> Option<RankedMutexGuard<'_, T>> {
        let guard = self.mutex.try_lock().ok()?;
        Some(Ranked::taken(guard, self.rank))
    }
}

/// A readers-writer lock with a place in the lock order.
pub(crate) struct RankedRwLock<T> {
    lock: RwLock<T>,
    rank: Rank,
}

impl<T> RankedRwLock<T> {
    /// A lock of `rank` holding `value`.
    pub(crate) fn new(rank: Rank, value: T) -> Self {
        RankedRwLock {
            lock: RwLock::new(value),
            rank,
        }
    }

    /// Takes it shared, after checking the lock order.
    pub(crate) fn read(&self) -> Result<Ranked<RwLockReadGuard<'_, T>>> {
        check_order(self.rank);
        let guard = health::read(&self.lock)?;
        Ok(Ranked::taken(guard, self.rank))
    }

    /// Takes it exclusively, after checking the lock order.
    pub(crate) fn write(&self) -> Result<Ranked<RwLockWriteGuard<'_, T>>> {
        check_order(self.rank);
        let guard = health::write(&self.lock)?;
        Ok(Ranked::taken(guard, self.rank))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Locks taken in increasing rank, and released in any order, pass.
    #[test]
    fn increasing_ranks_pass_and_release_in_any_order() {
        let committer = RankedMutex::new(Rank::Committer, ());
        let tree = RankedRwLock::new(Rank::Tree, 7u64);
        let control = RankedMutex::new(Rank::Control, ());
        let c = committer.lock().expect("committer");
        let t = tree.write().expect("tree");
        drop(c);
        let k = control.lock().expect("control");
        assert_eq!(*t, 7);
        drop(t);
        drop(k);
        // With nothing held, any rank may be taken again.
        let _c = committer.lock().expect("committer again");
    }

    /// Waiting for the commit section while holding the tree lock is the
    /// order a commit reverses: the checker stops it.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "lock order: Committer taken while holding Tree")]
    fn out_of_order_acquisition_panics() {
        let committer = RankedMutex::new(Rank::Committer, ());
        let tree = RankedRwLock::new(Rank::Tree, ());
        let _t = tree.read().expect("tree");
        let _c = committer.lock();
    }

    /// Taking the same rank twice (a second control lock, say) is out of
    /// order too: the same thread would wait on itself.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "lock order: Control taken while holding Control")]
    fn same_rank_twice_panics() {
        let a = RankedMutex::new(Rank::Control, ());
        let b = RankedMutex::new(Rank::Control, ());
        let _a = a.lock().expect("first");
        let _b = b.lock();
    }

    /// A `try_lock` never waits, so it may go against the order; what it
    /// took still counts for the locks after it.
    #[cfg(debug_assertions)]
    #[test]
    fn try_lock_is_unchecked_but_held() {
        let tree = RankedRwLock::new(Rank::Tree, ());
        let checkpointing = RankedMutex::new(Rank::Checkpointing, ());
        let control = RankedMutex::new(Rank::Control, ());
        let t = tree.read().expect("tree");
        let one = checkpointing.try_lock();
        assert!(one.is_some(), "a free lock is taken");
        drop(t);
        let k = control.lock().expect("control is above both");
        drop(k);
        // The tree is above checkpointing: taking it again passes.
        let t = tree.read().expect("tree again");
        drop(t);
        drop(one);
    }
}
