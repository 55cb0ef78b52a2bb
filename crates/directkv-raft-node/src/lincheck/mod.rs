//! A linearizability checker for the client API: reads, puts, deletes,
//! compare-and-sets and batches, judged against one key-value map whose
//! keys all start absent.
//!
//! Semantics (those of Knossos and Porcupine): a history is linearizable
//! when there is one order of its operations, each taking effect at one
//! instant, in which every result is what the state machine answers, and
//!
//! - an operation of known outcome took effect between its invocation and
//!   its completion (so one completed before another was invoked comes
//!   first);
//! - an operation of unknown outcome (a timeout, a `Failed` answer) took
//!   effect at one instant after its invocation, or never, and its result
//!   is not checked;
//! - a write refused with nothing done, and a read of unknown outcome,
//!   affect nothing and are left out; so is a write of unknown outcome
//!   none of whose values any result shows (`prune.rs` says when, and why
//!   that keeps the verdict).
//!
//! The search is Wing and Gong's, with Lowe's memoisation of (operations
//! linearized, state) pairs (`search.rs`). The history is first cut into
//! partitions that cannot affect each other, as Porcupine does by key;
//! a batch touching several keys ties their partitions together: the keys
//! are merged with union-find into one partition, searched as one
//! (`partition.rs`). A search has a step budget ([`Budget`]); a partition
//! it does not decide makes the history [`Verdict::Undecided`], never
//! linearizable. A refusal names the partition's keys and the operations
//! involved ([`Refusal`]).

mod check;
mod partition;
mod prune;
mod search;
#[cfg(test)]
mod tests;

pub use check::{check, describe, Budget, Refusal, Report, Undecided, Verdict};
