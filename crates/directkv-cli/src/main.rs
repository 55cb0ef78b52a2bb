//! The `directkv` command.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod size;
mod test_fsync;

/// directkv: a transactional key-value engine that owns its I/O, and its tools.
#[derive(Parser)]
#[command(name = "directkv", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure every WAL sync method on a filesystem, name the fastest durable one,
    /// and judge whether the device is honest about durability.
    TestFsync(test_fsync::Args),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::TestFsync(args) => test_fsync::run(args),
    }
}
