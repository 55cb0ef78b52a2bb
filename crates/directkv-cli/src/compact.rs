//! `directkv compact DBDIR`: opens a database, moves the pages in use out
//! of its data file's end into free pages nearer its start, cuts the file
//! and closes it, reporting what it gave back.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use directkv::{CompactOptions, Database, Options};

use crate::size::parse_bytes;

/// Options of `directkv compact`.
#[derive(clap::Args)]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    /// Cache to open it with, e.g. 64M.
    #[arg(long, default_value = "64M", value_parser = parse_bytes)]
    cache: u64,
    /// Stop after this many steps (short internal commits), leaving the
    /// compaction under way for a later run; at least 1.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_steps: Option<u64>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    crate::check::refuse_a_backup(&args.dir, false)?;
    let opts = Options {
        cache_bytes: usize::try_from(args.cache).context("--cache does not fit in memory")?,
        create_if_missing: false,
        // Nothing runs beside it: the checkpoint before the cut need not
        // be paced as a background checkpointer's is.
        background_threads: false,
        async_io: crate::io_backend_from_env()?,
        publish_stats: false,
        ..Options::default()
    };
    let db =
        Database::open(&args.dir, opts).with_context(|| format!("open {}", args.dir.display()))?;
    let t = Instant::now();
    let report = db.compact_with(&CompactOptions {
        max_steps: args.max_steps,
    })?;
    let seconds = t.elapsed().as_secs_f64();
    db.close().context("close")?;
    if args.json {
        let doc = serde_json::json!({
            "dir": args.dir.to_string_lossy(),
            "seconds": seconds,
            "report": report,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!("{}", args.dir.display());
    println!(
        "data file {:.1} MiB -> {:.1} MiB ({} -> {} pages) in {seconds:.2} s",
        mib(report.file_bytes_before),
        mib(report.file_bytes_after),
        report.pages_before,
        report.pages_after
    );
    println!(
        "{} pages moved, {} free pages listed, {} passes, {} steps",
        report.pages_moved, report.pages_listed, report.passes, report.steps
    );
    if report.boundary == 0 {
        println!("nothing to compact: less than a sixteenth of the file is free");
    }
    if !report.finished {
        println!("stopped by --max-steps: the next `directkv compact` goes on with it");
    }
    if report.cut_deferred {
        println!("the cut waits for a backup: the next `directkv compact` makes it");
    }
    Ok(())
}
