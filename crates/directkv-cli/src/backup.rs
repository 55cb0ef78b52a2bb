//! `directkv backup SRC DEST`, `directkv verify-backup DIR` and
//! `directkv restore BACKUP DEST`: online backups from the command line
//! (docs/backup.md).
//!
//! `backup` opens SRC itself, so a database another process has open is
//! refused by its lock: a backup is taken by the process that has the
//! database open, never by copying moving files from outside.

use std::path::PathBuf;

use anyhow::{Context, Result};
use directkv::{BackupOptions, Database, Options};

use crate::size::parse_bytes;

/// Options of `directkv backup`.
#[derive(clap::Args)]
pub struct BackupArgs {
    /// The database directory.
    src: PathBuf,
    /// The backup directory to make (new, or empty).
    dest: PathBuf,
    /// At most this many bytes per second, e.g. 50M (default: unlimited,
    /// below every other I/O of the engine).
    #[arg(long, value_parser = parse_bytes)]
    rate: Option<u64>,
    /// Run the starting checkpoint at full speed (sooner to start, harder on
    /// commits) instead of paced like a background one.
    #[arg(long)]
    fast_checkpoint: bool,
    /// Make an incremental backup on top of this earlier backup (full or
    /// incremental) of the same database: only pages changed since its
    /// start are copied.
    #[arg(long)]
    incremental_from: Option<PathBuf>,
    /// Cache to open the database with, e.g. 64M.
    #[arg(long, default_value = "64M", value_parser = parse_bytes)]
    cache: u64,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// Options of `directkv verify-backup`.
#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The backup directory.
    dir: PathBuf,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// Options of `directkv restore`.
#[derive(clap::Args)]
pub struct RestoreArgs {
    /// The backup directories, then the database directory to make (which
    /// must not exist): one full backup, or a chain (the full backup, then
    /// each incremental one on top of it, oldest first).
    #[arg(required = true, num_args = 2..)]
    paths: Vec<PathBuf>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

pub fn backup(args: BackupArgs) -> Result<()> {
    let opts = Options {
        cache_bytes: usize::try_from(args.cache).context("--cache does not fit in memory")?,
        create_if_missing: false,
        publish_stats: false,
        async_io: crate::io_backend_from_env()?,
        ..Options::default()
    };
    let db =
        Database::open(&args.src, opts).with_context(|| format!("open {}", args.src.display()))?;
    let opts = BackupOptions {
        rate_bytes: args.rate,
        fast_checkpoint: args.fast_checkpoint,
        incremental_from: args.incremental_from.clone(),
    };
    let report = with_progress(&db, &args.dest, &opts, args.json).with_context(|| {
        format!(
            "back up {} into {}",
            args.src.display(),
            args.dest.display()
        )
    })?;
    db.close().context("close")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let secs = report.micros as f64 / 1e6;
    let mib = (report.data_bytes + report.wal_bytes) as f64 / f64::from(1u32 << 20);
    let kind = if report.incremental {
        "incremental backup"
    } else {
        "backup"
    };
    println!("{kind} {} of {}", report.backup_id, args.src.display());
    if report.incremental {
        println!(
            "  {} of {} pages changed since the parent's start (found by reading every page's LSN)",
            report.pages_copied, report.pages_scanned
        );
    }
    println!(
        "  {} pages ({:.1} MiB) and {:.1} MiB of log in {secs:.2} s ({:.1} MiB/s)",
        report.pages_copied,
        report.data_bytes as f64 / f64::from(1u32 << 20),
        report.wal_bytes as f64 / f64::from(1u32 << 20),
        mib / secs.max(1e-9)
    );
    println!(
        "  log {} to {}; pages read again {}, covered by the log {}",
        report.start_lsn, report.end_lsn, report.pages_reread, report.pages_covered_by_log
    );
    Ok(())
}

/// Runs the backup while a bar follows `stats().backup`.
fn with_progress(
    db: &Database,
    dest: &std::path::Path,
    opts: &BackupOptions,
    json: bool,
) -> directkv::Result<directkv::BackupReport> {
    std::thread::scope(|s| {
        let running = s.spawn(|| db.backup(dest, opts));
        let bar = progress_bar(json);
        while !running.is_finished() {
            let p = db.stats().backup;
            bar.set_length(p.pages_total.max(1));
            bar.set_position(p.pages_done);
            bar.set_message(format!("{} MiB written", p.bytes_copied >> 20));
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        bar.finish_and_clear();
        running.join().unwrap_or_else(|_| {
            Err(directkv::Error::InvalidArgument(
                "the backup panicked".into(),
            ))
        })
    })
}

/// A bar of pages read, on a terminal and without `--json`.
fn progress_bar(json: bool) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if json || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(1);
    bar.set_style(
        indicatif::ProgressStyle::with_template("backup [{bar:40}] {pos}/{len} pages, {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar
}

pub fn verify(args: VerifyArgs) -> Result<()> {
    let report = directkv::verify_backup(&args.dir)
        .with_context(|| format!("verify {}", args.dir.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "backup {} in {}: good",
        report.backup_id,
        args.dir.display()
    );
    println!(
        "  {} files ({} bytes) match the manifest; {} pages verify; {} log records from {} \
         reach {}",
        report.files,
        report.bytes,
        report.pages,
        report.log_records,
        report.start_lsn,
        report.end_lsn
    );
    match &report.check {
        Some(c) => println!(
            "  restored and opened: {} keys, {} pages, depth {}; structure checks",
            c.keys, c.pages, c.depth
        ),
        None => println!("  an incremental backup: it opens only restored with its chain"),
    }
    Ok(())
}

pub fn restore(args: RestoreArgs) -> Result<()> {
    let (dest, chain) = args
        .paths
        .split_last()
        .context("a backup and a destination")?;
    let report = directkv::restore_backup_chain(chain, dest)
        .with_context(|| format!("restore into {}", dest.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "restored backup {} ({} backup(s) combined, {} pages from increments) into {} ({} \
         bytes); its first open replays the log",
        report.backup_id,
        report.backups,
        report.pages_from_increments,
        dest.display(),
        report.bytes
    );
    Ok(())
}
