//! How one open database is doing ([`Vitals`]): whether it runs or failed,
//! what its replay at open did, and the counters behind `stats()`.
//!
//! Invariants:
//! - `health` moves `Running → Failed` once and never back (see
//!   [`crate::health`]); every operation checks it first.
//! - `recovery` is written once, by open, before any other thread sees it.

use super::stats::{Counters, RecoveryStats};
use crate::health::Health;

/// Health, replay figures and counters of one open database.
pub(crate) struct Vitals {
    /// The engine's counters: atomics any thread updates, `Relaxed` (they
    /// order nothing) except `commit_clock_us`, raised with `AcqRel` so
    /// commit times never go back (see [`Counters::commit_time_us`]).
    pub(super) counters: Counters,
    /// What the replay at open did. Immutable after open.
    pub(super) recovery: RecoveryStats,
    /// Running or failed; its own atomic latch (Acquire/Release) and cause
    /// mutex (see [`crate::health`]). Any thread.
    pub(crate) health: Health,
}
