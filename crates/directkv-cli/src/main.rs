//! The `directkv` command.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod backup;
mod bench;
mod check;
mod compact;
mod crash_child;
mod sim;
mod size;
mod stats;
mod test_fsync;
mod wal;

/// The asynchronous I/O options every database this command opens uses: the
/// defaults, with the backend named by `DIRECTKV_IO_BACKEND` (`uring`,
/// `threads`, `off`, `auto`) where it is set. The library reads no
/// environment; this command is where the variable is honoured.
fn io_backend_from_env() -> Result<directkv::AioOptions> {
    Ok(directkv::AioOptions::default().with_env_override()?)
}

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
    /// Benchmarks, side by side in one run. With no workload: a short TPC-B
    /// run, direct vs buffered I/O under a memory budget.
    Bench(Box<bench::Args>),
    /// The workload of the real-process crash test (kills it at random).
    #[command(hide = true)]
    CrashWorkload(crash_child::Args),
    /// Run the random crash campaign on the simulated disk.
    Sim(sim::Args),
    /// The counters an open database publishes: cache, I/O, WAL, stalls by
    /// cause with histograms.
    Stats(stats::Args),
    /// Open a database (recovering it if it was not closed), report what
    /// recovery did, and prove the tree's structure.
    Check(check::Args),
    /// Give a database's free space back to the filesystem: move the pages
    /// in use out of the data file's end, then cut the file.
    Compact(compact::Args),
    /// Inspect a write-ahead log.
    #[command(subcommand)]
    Wal(wal::Command),
    /// Back up a database while it runs (it must not be open elsewhere):
    /// a checked page copy plus the log, openable as a database.
    Backup(backup::BackupArgs),
    /// Check a backup: manifest, every file's CRC, every page and log
    /// record, then restore it into a scratch copy, open it and check it.
    VerifyBackup(backup::VerifyArgs),
    /// Restore a backup into a new database directory.
    Restore(backup::RestoreArgs),
}

fn main() -> Result<()> {
    // SAFETY: restoring the default disposition of SIGPIPE before any thread
    // starts, so `directkv … | head` ends quietly like other tools.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    match cli.command {
        Command::TestFsync(args) => test_fsync::run(args),
        Command::Wal(cmd) => wal::run(cmd),
        Command::Sim(args) => sim::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Check(args) => check::run(args),
        Command::Compact(args) => compact::run(args),
        Command::Bench(args) => bench::run(*args),
        Command::CrashWorkload(args) => crash_child::run(args),
        Command::Backup(args) => backup::backup(args),
        Command::VerifyBackup(args) => backup::verify(args),
        Command::Restore(args) => backup::restore(args),
    }
}
