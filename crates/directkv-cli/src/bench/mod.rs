//! `directkv bench`: workloads and measurements run side by side in one run.
//!
//! With no subcommand, the default benchmark: a short pgbench-like TPC-B run
//! comparing direct and buffered I/O under a memory budget with a data set
//! several times larger (see the README).

mod driver;
pub mod memory;
#[cfg(feature = "peers")]
mod peers;
mod report;
mod store;
mod sys;
pub mod updates;
pub mod wal;
mod workload;
pub mod writers;

use std::path::PathBuf;

use anyhow::Result;

pub use driver::Common;
use workload::{Shape, Workload};

/// `directkv bench [WORKLOAD]`
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// (Default benchmark) Directory for the databases.
    #[arg(long, default_value = "directkv-bench")]
    dir: PathBuf,
    /// (Default benchmark) Seconds per configuration.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// (Default benchmark) The memory budget of each configuration.
    #[arg(long, default_value = "256M", value_parser = crate::size::parse_bytes)]
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
    /// One measured run (started by the parent with its specification).
    #[command(hide = true)]
    Child {
        /// The run's specification, JSON.
        spec: String,
    },
}

/// `directkv bench tpcb`
#[derive(clap::Args)]
pub struct TpcbArgs {
    /// Scale factor (default: a data set 4.5x --memory-limit, else 10).
    #[arg(long)]
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
    /// Longest scan of workload e.
    #[arg(long, default_value_t = 100)]
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
    /// Keys per durable commit.
    #[arg(long, default_value_t = 100)]
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
    /// Keys per scan.
    #[arg(long, default_value_t = 100)]
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
        args.common.memory_limit.map_or(10, |l| {
            driver::tpcb_scale_for(l, args.common.value_size, 4.5)
        })
    });
    if scale == 0 || scale > u64::from(u32::MAX) / 100_000 {
        anyhow::bail!("--scale must be between 1 and {}", u32::MAX / 100_000);
    }
    let shape = shape(&args.common, 1);
    driver::run(Workload::Tpcb { scale }, shape, &args.common)
}

/// Runs `directkv bench …`.
pub fn run(args: Args) -> Result<()> {
    let Some(cmd) = args.command else {
        // The default benchmark, spelled out so it can be rerun and varied.
        let mut argv: Vec<String> = ["directkv", "bench", "tpcb", "--compare", "direct,buffered"]
            .map(String::from)
            .to_vec();
        // The budget needs a memory cgroup; without one, say why and run
        // the same data set unbudgeted rather than not at all.
        match sys::MemCgroup::create(
            &format!("directkv-bench-probe-{}", std::process::id()),
            args.memory_limit,
        ) {
            Ok(_probe) => argv.extend([
                "--memory-limit".into(),
                format!("{}M", args.memory_limit >> 20),
            ]),
            Err(e) => {
                eprintln!("no memory budget: {e:#}; running without one (data fits in memory)");
                let scale = driver::tpcb_scale_for(args.memory_limit, 100, 4.5);
                argv.extend(["--scale".into(), scale.to_string()]);
            }
        }
        argv.extend([
            "--seconds".into(),
            args.seconds.to_string(),
            "--dir".into(),
            args.dir.display().to_string(),
        ]);
        if args.json {
            argv.push("--json".into());
        }
        if let Some(p) = &args.plot {
            argv.extend(["--plot".into(), p.display().to_string()]);
        }
        if !args.json {
            println!("running: {}", argv.join(" "));
        }
        let parsed = <DefaultCli as clap::Parser>::try_parse_from(argv)?;
        return tpcb(parsed.tpcb);
    };
    match cmd {
        Command::Tpcb(a) => tpcb(a),
        Command::Ycsb(a) => {
            let kind = a.workload.chars().next().unwrap_or('a');
            let zipfian = a.distribution == Distribution::Zipfian;
            driver::run(
                Workload::Ycsb { kind, zipfian },
                shape(&a.common, a.scan_length),
                &a.common,
            )
        }
        Command::Fill(a) => {
            if a.batch == 0 {
                anyhow::bail!("--batch must be positive");
            }
            let w = Workload::Fill {
                random: a.order == Order::Random,
                batch: a.batch,
            };
            driver::run(w, shape(&a.common, 1), &a.common)
        }
        Command::Read(a) => {
            let w = Workload::Read {
                zipfian: a.distribution == Distribution::Zipfian,
            };
            driver::run(w, shape(&a.common, 1), &a.common)
        }
        Command::Scan(a) => {
            if a.length == 0 {
                anyhow::bail!("--length must be positive");
            }
            let w = Workload::Scan { length: a.length };
            driver::run(w, shape(&a.common, a.length), &a.common)
        }
        Command::Wal(a) => wal::run(a),
        Command::Memory(a) => memory::run(a),
        Command::Updates(a) => updates::run(a),
        Command::Writers(a) => writers::run(a),
        Command::Child { spec } => driver::child(&spec),
    }
}

/// Parses the default benchmark's command line.
#[derive(clap::Parser)]
#[command(name = "directkv")]
struct DefaultCli {
    #[arg(value_parser = ["bench"])]
    _bench: String,
    #[arg(value_parser = ["tpcb"])]
    _tpcb: String,
    #[command(flatten)]
    tpcb: TpcbArgs,
}
