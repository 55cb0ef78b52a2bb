//! `directkv bench`: measurements run side by side in one process.

pub mod wal;

use anyhow::Result;

/// `directkv bench …`
#[derive(clap::Subcommand)]
pub enum Command {
    /// Durable commits/s and latency of the write-ahead log alone, for each
    /// number of committing threads, sync method and record size, with the same
    /// method's test-fsync rate measured beside it.
    Wal(wal::Args),
}

pub fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Wal(args) => wal::run(args),
    }
}
