//! `directkv bench writers`: do concurrent positional writes to one file
//! scale? 1, 2, 4… threads each write random pages of their own region of one
//! preallocated file, with direct I/O and then buffered, side by side. Direct
//! I/O takes no per-file write lock, so writers proceed in parallel as far
//! as the device allows (DESIGN.md invariant 8); buffered writes to one file
//! serialize on its inode lock.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use directkv::internals::io::{AlignedBuf, DirectFile, FileOptions, Fill};
use directkv::{DirectIo, SyncMethod};
use serde::{Deserialize, Serialize};

use super::args::{non_empty, parse_positive_bytes, parse_seconds};
use super::driver::{self, Run, Runs, Spec};
use super::output::{col, Column, TableRow};

/// Options of `directkv bench writers`.
#[derive(clap::Args)]
pub struct Args {
    /// Directory for the scratch file.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Thread counts to measure (each at least 1).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4",
        value_parser = super::args::whole_in::<usize>(1, super::args::THREADS_MAX)
    )]
    threads: Vec<usize>,
    /// Bytes per write (a multiple of 512).
    #[arg(long, default_value = "8k", value_parser = parse_positive_bytes)]
    block_size: u64,
    /// Size of the file the writers share.
    #[arg(long, default_value = "512M", value_parser = parse_positive_bytes)]
    file_size: u64,
    /// Seconds per measurement (more than 0).
    #[arg(long, default_value_t = 5.0, value_parser = parse_seconds)]
    seconds: f64,
    /// Also measure buffered writes (the page cache's per-file write lock).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    buffered: bool,
    #[command(flatten)]
    runs: Runs,
}

/// One thread count on one I/O path (`config`: direct or buffered).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Row {
    threads: usize,
    writes_per_sec: f64,
    mb_per_sec: f64,
    /// Over the same I/O path with one thread.
    scaling: f64,
}

impl TableRow for Row {
    const COLUMNS: &'static [Column] = &[
        col("threads", 7),
        col("writes/s", 10),
        col("MB/s", 8),
        col("x one thread", 12),
    ];

    fn cells(&self) -> Vec<String> {
        vec![
            self.threads.to_string(),
            format!("{:.0}", self.writes_per_sec),
            format!("{:.1}", self.mb_per_sec),
            format!("{:.2}", self.scaling),
        ]
    }
}

/// `bench writers` as the driver runs it: one configuration per I/O path.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WritersSpec {
    dir: PathBuf,
    threads: Vec<usize>,
    block_size: u64,
    file_size: u64,
    seconds: f64,
    modes: Vec<String>,
}

/// Runs `directkv bench writers`.
pub fn run(args: Args) -> Result<()> {
    non_empty("--threads", &args.threads)?;
    if args.block_size % 512 != 0 {
        bail!(
            "--block-size must be a multiple of 512 (got {})",
            args.block_size
        );
    }
    if args.file_size < args.block_size {
        bail!("--file-size must hold at least one --block-size block");
    }
    let mut modes = vec!["direct".to_string()];
    if args.buffered {
        modes.push("buffered".into());
    }
    let spec = WritersSpec {
        dir: args.dir,
        threads: args.threads,
        block_size: args.block_size,
        file_size: args.file_size,
        seconds: args.seconds,
        modes,
    };
    driver::run(&spec, &args.runs)
}

impl Spec for WritersSpec {
    const KIND: &'static str = "writers";
    type Row = Row;

    fn configs(&self) -> &[String] {
        &self.modes
    }

    fn measure(&self, run: &Run) -> Result<Vec<Row>> {
        let direct_io = match run.config.as_str() {
            "direct" => DirectIo::On,
            "buffered" => DirectIo::Off,
            m => bail!("unknown I/O path {m:?}"),
        };
        let path = self
            .dir
            .join(format!(".directkv-bench-writers-{}", std::process::id()));
        let result = self.measure_all(&path, direct_io);
        let _ = std::fs::remove_file(&path);
        result
    }
}

impl WritersSpec {
    fn measure_all(&self, path: &Path, direct_io: DirectIo) -> Result<Vec<Row>> {
        let file = DirectFile::open(
            path,
            &FileOptions {
                create: true,
                direct_io,
                sync: SyncMethod::None,
                ..FileOptions::default()
            },
        )
        .with_context(|| format!("open {}", path.display()))?;
        file.allocate(self.file_size, Fill::Zero)?;
        let mut rows = Vec::new();
        let mut one = 0.0;
        for &threads in &self.threads {
            let rate = measure(&file, self, threads)?;
            if threads == 1 || one == 0.0 {
                one = rate;
            }
            rows.push(Row {
                threads,
                writes_per_sec: rate,
                mb_per_sec: rate * self.block_size as f64 / 1e6,
                scaling: rate / one,
            });
        }
        Ok(rows)
    }
}

fn measure(file: &DirectFile, args: &WritersSpec, threads: usize) -> Result<f64> {
    let unit = file.alignment().io_unit_bytes();
    let blocks = args.file_size / args.block_size;
    let per_thread = (blocks / threads as u64).max(1);
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let counts: Vec<Result<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                s.spawn(move || -> Result<u64> {
                    let mut buf = AlignedBuf::new(args.block_size as usize, unit)?;
                    buf.as_mut_slice().fill(t as u8 + 1);
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                    let mut n = 0;
                    while Instant::now() < deadline {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // A random block of this thread's own region.
                        let block = t * per_thread + x % per_thread;
                        file.write_all_at(buf.io_all(), block * args.block_size)?;
                        n += 1;
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a writer panicked")))
            })
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let mut total = 0;
    for c in counts {
        total += c?;
    }
    Ok(total as f64 / elapsed)
}
