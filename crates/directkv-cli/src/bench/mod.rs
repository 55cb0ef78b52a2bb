//! `directkv bench`: workloads and measurements run side by side in one run.
//!
//! Every bench is a spec the one driver runs (`driver`): one child process
//! per configuration and round, the memory budget applied in one place, one
//! latency histogram (`latency`) and one writer of tables and JSON lines
//! (`output`). With no subcommand, the default benchmark: a short pgbench-like
//! TPC-B run comparing direct and buffered I/O under a memory budget with a
//! data set several times larger (see the README).

mod args;
mod driver;
mod kv;
mod latency;
pub mod memory;
mod output;
#[cfg(any(
    feature = "peer-rocksdb",
    feature = "peer-lmdb",
    feature = "peer-sqlite"
))]
mod peers;
mod pgbench;
mod postgres;
pub mod recovery;
mod report;
mod store;
mod sys;
pub mod updates;
pub mod wal;
mod workload;
pub mod writers;

use std::path::PathBuf;

use anyhow::{bail, Result};

pub use args::parse_seconds;
pub use kv::Common;
use workload::{Shape, Workload};

/// `directkv bench [WORKLOAD]`
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// (Default benchmark) Directory for the databases.
    #[arg(long, default_value = kv::DIR_DEFAULT)]
    dir: PathBuf,
    /// (Default benchmark) Seconds per configuration (more than 0).
    #[arg(long, default_value_t = kv::SECONDS_DEFAULT, value_parser = args::parse_seconds)]
    seconds: f64,
    /// (Default benchmark) The memory budget of each configuration.
    #[arg(long, default_value = "256M", value_parser = args::parse_positive_bytes)]
    memory_limit: u64,
    /// (Default benchmark) Print JSON lines.
    #[arg(long)]
    json: bool,
    /// (Default benchmark) Write SVG charts here.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// The benchmarks.
#[derive(clap::Subcommand)]
pub enum Command {
    /// pgbench-like TPC-B: scale s gives 100,000·s accounts, 10·s tellers,
    /// s branches; each transaction updates one of each and appends history.
    Tpcb(TpcbArgs),
    /// YCSB core workloads A–F.
    Ycsb(YcsbArgs),
    /// Inserts of new keys, in key or random order.
    Fill(FillArgs),
    /// Random point reads.
    Read(ReadArgs),
    /// Range scans from random starting points.
    Scan(ScanArgs),
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
    /// Concurrent positional writes to one file: 1, 2, 4 threads, direct
    /// and buffered, writes/s each and the scale-up over one thread.
    Writers(writers::Args),
    /// A crash under the TPC-B load near the checkpoint distance, then the
    /// reopen: WAL replayed, time per phase, replay rate over commit rate.
    Recovery(recovery::Args),
    /// TPC-B with and without online backups taken back to back through the
    /// run, a full one then an increment of it in turn (each configuration
    /// beside its `-backup` twin): foreground tps and latency, backup MB/s,
    /// the page cache a backup added, and the increment's size against the
    /// full one's.
    Backup(TpcbArgs),
    /// One child of a bench (started by the parent with its specification).
    #[command(hide = true)]
    Child {
        /// Which bench (`kv`, `wal`, `memory`, `updates`, `writers`).
        kind: String,
        /// The bench's specification and the run's, JSON.
        spec: String,
    },
}

/// `directkv bench tpcb`
#[derive(clap::Args)]
pub struct TpcbArgs {
    /// Scale factor (default: a data set 4.5x --memory-limit, else 10).
    #[arg(long, value_parser = args::whole_in::<u64>(1, args::SCALE_MAX))]
    scale: Option<u64>,
    #[command(flatten)]
    common: Common,
}

/// Key choice.
#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// Skewed, θ = 0.99, popular keys scattered over the key space.
    Zipfian,
    /// Every key equally likely.
    Uniform,
}

/// `directkv bench ycsb`
#[derive(clap::Args)]
pub struct YcsbArgs {
    /// Core workload: a (50% updates), b (5% updates), c (reads), d (reads of
    /// the latest, 5% inserts), e (short scans, 5% inserts), f (50%
    /// read-modify-write).
    #[arg(long, default_value = "a", value_parser = ["a", "b", "c", "d", "e", "f"])]
    workload: String,
    /// Key choice.
    #[arg(long, value_enum, default_value_t = Distribution::Zipfian)]
    distribution: Distribution,
    /// Longest scan of workload e (at least 1).
    #[arg(long, default_value_t = 100, value_parser = args::whole_in::<usize>(1, args::BATCH_MAX))]
    scan_length: usize,
    #[command(flatten)]
    common: Common,
}

/// Insert order of `fill`.
#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Ascending keys.
    Seq,
    /// A random permutation.
    Random,
}

/// `directkv bench fill`
#[derive(clap::Args)]
pub struct FillArgs {
    /// Key order.
    #[arg(long, value_enum, default_value_t = Order::Random)]
    order: Order,
    /// Keys per durable commit (at least 1).
    #[arg(long, default_value_t = 100, value_parser = args::whole_in::<u64>(1, args::BATCH_MAX))]
    batch: u64,
    #[command(flatten)]
    common: Common,
}

/// `directkv bench read`
#[derive(clap::Args)]
pub struct ReadArgs {
    /// Key choice.
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    distribution: Distribution,
    #[command(flatten)]
    common: Common,
}

/// `directkv bench scan`
#[derive(clap::Args)]
pub struct ScanArgs {
    /// Keys per scan (at least 1).
    #[arg(long, default_value_t = 100, value_parser = args::whole_in::<usize>(1, args::BATCH_MAX))]
    length: usize,
    #[command(flatten)]
    common: Common,
}

fn shape(c: &Common, scan_length: usize) -> Shape {
    Shape {
        keys: c.keys,
        value_size: c.value_size,
        scan_length: scan_length.max(1),
    }
}

fn tpcb(args: TpcbArgs) -> Result<()> {
    let scale = args.scale.unwrap_or_else(|| {
        args.common
            .runs
            .memory_limit
            .map_or(10, |l| kv::tpcb_scale_for(l, args.common.value_size, 4.5))
    });
    if scale == 0 || scale > args::SCALE_MAX {
        bail!(
            "--scale must be between 1 and {} (got {scale})",
            args::SCALE_MAX
        );
    }
    let shape = shape(&args.common, 1);
    kv::run(Workload::Tpcb { scale }, shape, &args.common)
}

/// The default benchmark: TPC-B, direct against buffered I/O and, where it
/// is installed, PostgreSQL's own pgbench, all under the memory budget where
/// a memory cgroup can be made. Its options are built here as values; the
/// equivalent command line is printed so the run can be repeated and varied.
fn default_bench(args: Args) -> Result<()> {
    let mut compare: Vec<String> = vec!["direct".into(), "buffered".into()];
    match postgres::find_binaries() {
        Ok(_) => compare.push(postgres::CONFIG.into()),
        Err(e) if !args.json => println!("PostgreSQL's row is left out: {e:#}"),
        Err(_) => {}
    }
    let mut common = Common {
        dir: args.dir,
        seconds: args.seconds,
        compare,
        plot: args.plot,
        ..Common::default()
    };
    common.runs.json = args.json;
    // The budget needs a memory cgroup; without one, say why and run the
    // same data set unbudgeted rather than not at all.
    let scale = match driver::memory_budget_available(args.memory_limit) {
        Ok(()) => {
            common.runs.memory_limit = Some(args.memory_limit);
            None
        }
        Err(e) => {
            eprintln!("no memory budget: {e:#}; running without one (data fits in memory)");
            Some(kv::tpcb_scale_for(
                args.memory_limit,
                common.value_size,
                4.5,
            ))
        }
    };
    if !common.runs.json {
        println!("running: {}", default_command_line(scale, &common));
    }
    tpcb(TpcbArgs { scale, common })
}

/// The command line that runs what the default benchmark runs.
fn default_command_line(scale: Option<u64>, common: &Common) -> String {
    let mut line = format!("directkv bench tpcb --compare {}", common.compare.join(","));
    if let Some(limit) = common.runs.memory_limit {
        line += &format!(" --memory-limit {limit}");
    }
    if let Some(scale) = scale {
        line += &format!(" --scale {scale}");
    }
    line += &format!(
        " --seconds {} --dir {}",
        common.seconds,
        common.dir.display()
    );
    if common.runs.json {
        line += " --json";
    }
    if let Some(p) = &common.plot {
        line += &format!(" --plot {}", p.display());
    }
    line
}

/// Runs `directkv bench …`.
pub fn run(args: Args) -> Result<()> {
    #[cfg(any(
        feature = "peer-rocksdb",
        feature = "peer-lmdb",
        feature = "peer-sqlite"
    ))]
    peers::register();
    let Some(cmd) = args.command else {
        return default_bench(args);
    };
    match cmd {
        Command::Tpcb(a) => tpcb(a),
        Command::Backup(mut a) => {
            // Each configuration of this engine beside its twin taking backups.
            let twins: Vec<String> = a
                .common
                .compare
                .iter()
                .filter(|c| c.starts_with("direct") || c.starts_with("buffered"))
                .map(|c| match c.split_once('/') {
                    Some((base, method)) => format!("{base}-backup/{method}"),
                    None => format!("{c}-backup"),
                })
                .collect();
            a.common.compare.extend(twins);
            tpcb(a)
        }
        Command::Ycsb(a) => {
            let kind = a.workload.chars().next().unwrap_or('a');
            let zipfian = a.distribution == Distribution::Zipfian;
            kv::run(
                Workload::Ycsb { kind, zipfian },
                shape(&a.common, a.scan_length),
                &a.common,
            )
        }
        Command::Fill(a) => {
            let w = Workload::Fill {
                random: a.order == Order::Random,
                batch: a.batch,
            };
            kv::run(w, shape(&a.common, 1), &a.common)
        }
        Command::Read(a) => {
            let w = Workload::Read {
                zipfian: a.distribution == Distribution::Zipfian,
            };
            kv::run(w, shape(&a.common, 1), &a.common)
        }
        Command::Scan(a) => {
            let w = Workload::Scan { length: a.length };
            kv::run(w, shape(&a.common, a.length), &a.common)
        }
        Command::Wal(a) => wal::run(a),
        Command::Memory(a) => memory::run(a),
        Command::Updates(a) => updates::run(a),
        Command::Writers(a) => writers::run(a),
        Command::Recovery(a) => recovery::run(a),
        Command::Child { kind, spec } => child(&kind, &spec),
    }
}

/// The child side of every bench, by the kind the parent named.
fn child(kind: &str, spec: &str) -> Result<()> {
    use driver::Spec;
    match kind {
        kv::KvSpec::KIND => driver::child::<kv::KvSpec>(spec),
        wal::WalSpec::KIND => driver::child::<wal::WalSpec>(spec),
        memory::MemorySpec::KIND => driver::child::<memory::MemorySpec>(spec),
        updates::UpdatesSpec::KIND => driver::child::<updates::UpdatesSpec>(spec),
        writers::WritersSpec::KIND => driver::child::<writers::WritersSpec>(spec),
        _ => bail!("unknown bench child kind {kind:?}"),
    }
}
