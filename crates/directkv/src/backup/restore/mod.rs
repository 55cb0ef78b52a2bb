//! Using a backup, with no database open: checking it
//! ([`verify_backup`], which opens a copy as a database), restoring it or a
//! chain of them into a new directory (`copy.rs`), and rolling the result
//! forward through a log archive to a chosen commit (`pitr.rs`, which
//! reads the engine's commit records); `checks.rs` holds the checks both
//! verify and restore run. It sits above `db`; what a backup is on disk is
//! the rest of `crate::backup`. docs/backup.md has the design.

mod checks;
mod copy;
mod pitr;
mod verify;

pub use copy::{
    restore_backup, restore_backup_chain, restore_backup_chain_to, restore_chain_with,
    RestoreReport,
};
pub use pitr::{RestoreTarget, RolledForward};
pub use verify::{verify_backup, VerifyReport};
