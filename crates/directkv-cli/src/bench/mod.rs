//! `directkv bench`: measurements run side by side in one process.

pub mod memory;
pub mod updates;
pub mod wal;

use anyhow::Result;

/// `directkv bench …`
#[derive(clap::Subcommand)]
pub enum Command {
    /// Durable commits/s and latency of the write-ahead log alone, for each
    /// number of committing threads, sync method and record size, with the same
    /// method's test-fsync rate measured beside it.
    Wal(wal::Args),
    /// The one-cache check: a data set several times the cache, read at random,
    /// with direct and with buffered I/O; RSS and page-cache residency of each.
    Memory(memory::Args),
    /// Random single-key durable updates with checkpoints: commits/s, latency,
    /// WAL bytes per commit and the full-page-image share.
    Updates(updates::Args),
}

pub fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Wal(args) => wal::run(args),
        Command::Memory(args) => memory::run(args),
        Command::Updates(args) => updates::run(args),
    }
}
