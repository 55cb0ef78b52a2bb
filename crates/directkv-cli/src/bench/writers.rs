//! `directkv bench writers`: do concurrent positional writes to one file
//! scale? 1, 2, 4… threads each write random pages of their own region of one
//! preallocated file, with direct I/O and then buffered, side by side. Direct
//! I/O takes no per-file write lock, so writers proceed in parallel as far
//! as the device allows (DESIGN.md invariant 8); buffered writes to one file
//! serialize on its inode lock.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use directkv::internals::io::{AlignedBuf, DirectFile, DirectIo, FileOptions, Fill, SyncMethod};
use serde::Serialize;

/// Options of `directkv bench writers`.
#[derive(clap::Args)]
pub struct Args {
    /// Directory for the scratch file.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Thread counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    threads: Vec<usize>,
    /// Bytes per write.
    #[arg(long, default_value = "8k", value_parser = crate::size::parse_bytes)]
    block_size: u64,
    /// Size of the file the writers share.
    #[arg(long, default_value = "512M", value_parser = crate::size::parse_bytes)]
    file_size: u64,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Also measure buffered writes (the page cache's per-file write lock).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    buffered: bool,
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
}

/// One measurement.
#[derive(Debug, Serialize)]
struct Row {
    io: &'static str,
    threads: usize,
    writes_per_sec: f64,
    mb_per_sec: f64,
    /// Over the same I/O path with one thread.
    scaling: f64,
}

pub fn run(args: Args) -> Result<()> {
    anyhow::ensure!(
        args.block_size >= 512 && args.block_size % 512 == 0,
        "--block-size must be a multiple of 512"
    );
    let path = args
        .dir
        .join(format!(".directkv-bench-writers-{}", std::process::id()));
    let result = measure_all(&args, &path);
    let _ = std::fs::remove_file(&path);
    let rows = result?;
    for r in &rows {
        if args.json {
            println!("{}", serde_json::to_string(r)?);
        } else {
            println!(
                "{:<9} {:>2} threads {:>10.0} writes/s {:>8.1} MB/s  {:.2}x one thread",
                r.io, r.threads, r.writes_per_sec, r.mb_per_sec, r.scaling
            );
        }
    }
    Ok(())
}

fn measure_all(args: &Args, path: &std::path::Path) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let modes: &[(&'static str, DirectIo)] = if args.buffered {
        &[("direct", DirectIo::On), ("buffered", DirectIo::Off)]
    } else {
        &[("direct", DirectIo::On)]
    };
    for &(io, direct_io) in modes {
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
        file.allocate(args.file_size, Fill::Zero)?;
        let mut one = 0.0;
        for &threads in &args.threads {
            let rate = measure(&file, args, threads.max(1))?;
            if threads == 1 || one == 0.0 {
                one = rate;
            }
            rows.push(Row {
                io,
                threads,
                writes_per_sec: rate,
                mb_per_sec: rate * args.block_size as f64 / 1e6,
                scaling: rate / one,
            });
        }
    }
    Ok(rows)
}

fn measure(file: &DirectFile, args: &Args, threads: usize) -> Result<f64> {
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
