//! Transactions: what they read and write, how they lock, and how a
//! commit applies them, over the state they share ([`core::TxnCore`]).
//!
//! - [`read`]: read transactions and range iterators; [`write`]: write
//!   transactions, many at once; [`locks`]: their row locks; [`ticket`]:
//!   the first-come, first-served writer lock of `serial_writers`.
//! - [`commit`]: applying a transaction (page records, apply, log), over
//!   the narrow [`commit::CommitEnv`]; [`versions`]: snapshots and the
//!   version store; [`shape`]: how readers descend while a commit changes
//!   the tree.
//! - [`core`]: the part of the engine's state these own.

pub(crate) mod commit;
pub(crate) mod core;
pub(crate) mod drops;
pub(crate) mod locks;
pub(crate) mod read;
pub(crate) mod shape;
pub(crate) mod step;
pub(crate) mod tables;
pub(crate) mod ticket;
pub(crate) mod versions;
pub(crate) mod write;
