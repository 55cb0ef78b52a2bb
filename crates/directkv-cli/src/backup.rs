//! `directkv backup SRC DEST`, `directkv verify-backup DIR` and
//! `directkv restore BACKUP DEST`: online backups from the command line
//! (docs/backup.md).
//!
//! `backup` opens SRC itself, so a database another process has open is
//! refused by its lock: a backup is taken by the process that has the
//! database open, never by copying moving files from outside.

use std::path::PathBuf;

use anyhow::{Context, Result};
use directkv::{BackupOptions, Database, Lsn, Options, RestoreTarget};

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
    /// A log archive (the database's `wal_archive`) to carry the restored
    /// state forward from, to `--to-lsn`, `--to-time` or `--to-end`.
    #[arg(long, requires = "target")]
    archive: Option<PathBuf>,
    /// Restore exactly the commits whose record ends at or before this LSN
    /// (decimal, or `H/LLLLLLLL` hex as the tools print it).
    #[arg(long, group = "target", value_parser = parse_lsn)]
    to_lsn: Option<Lsn>,
    /// Restore exactly the commits made at or before this time: UTC
    /// `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`, or microseconds since the epoch.
    #[arg(long, group = "target", value_parser = parse_time_us)]
    to_time: Option<u64>,
    /// Restore every commit the archive holds.
    #[arg(long, group = "target")]
    to_end: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// An LSN: decimal, or `H/LLLLLLLL` (high and low 32 bits in hex).
fn parse_lsn(s: &str) -> std::result::Result<Lsn, String> {
    let bad = || format!("{s:?} is not an LSN (decimal, or H/LLLLLLLL in hex)");
    match s.split_once('/') {
        Some((hi, lo)) => {
            let hi = u64::from_str_radix(hi, 16).map_err(|_| bad())?;
            let lo = u64::from_str_radix(lo, 16).map_err(|_| bad())?;
            if hi > u64::from(u32::MAX) || lo > u64::from(u32::MAX) {
                return Err(bad());
            }
            Ok(Lsn::new(hi << 32 | lo))
        }
        None => s.parse().map(Lsn::new).map_err(|_| bad()),
    }
}

/// A UTC time `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`, or microseconds since the
/// epoch, as microseconds since the epoch.
fn parse_time_us(s: &str) -> std::result::Result<u64, String> {
    if let Ok(us) = s.parse::<u64>() {
        return Ok(us);
    }
    let bad = || format!("{s:?} is not a time: YYYY-MM-DDTHH:MM:SS[.ffffff]Z (UTC) or µs");
    let body = s.strip_suffix('Z').ok_or_else(bad)?;
    let (date, time) = body.split_once('T').ok_or_else(bad)?;
    let num = |p: &str| p.parse::<u64>().map_err(|_| bad());
    let d: Vec<&str> = date.split('-').collect();
    let (whole, frac) = time.split_once('.').unwrap_or((time, ""));
    let t: Vec<&str> = whole.split(':').collect();
    if d.len() != 3 || t.len() != 3 || frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let (y, m, day) = (num(d[0])?, num(d[1])?, num(d[2])?);
    let (h, min, sec) = (num(t[0])?, num(t[1])?, num(t[2])?);
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return Err(bad());
    }
    if h > 23 || min > 59 || sec > 60 {
        return Err(bad());
    }
    let micros = if frac.is_empty() {
        0
    } else {
        num(frac)? * 10u64.pow(6 - frac.len() as u32)
    };
    let days = days_from_civil(y, m, day);
    Ok(((days * 86_400 + h * 3_600 + min * 60 + sec) * 1_000_000) + micros)
}

/// Days from 1970-01-01 to the given date (proleptic Gregorian calendar).
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Refuses, before SRC is opened (its recovery and checkpoint change it),
/// what the backup would refuse after: SRC a backup (opening it ends it as
/// one), and DEST that is not new or an empty directory.
fn check_args(args: &BackupArgs) -> Result<()> {
    crate::check::refuse_a_backup(&args.src, false)?;
    match std::fs::symlink_metadata(&args.dest) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("look at {}", args.dest.display())),
        Ok(m) if m.is_dir() => {
            let mut entries = std::fs::read_dir(&args.dest)
                .with_context(|| format!("list {}", args.dest.display()))?;
            if entries.next().is_some() {
                anyhow::bail!(
                    "{} exists and is not empty: a backup is made in a new or empty directory",
                    args.dest.display()
                );
            }
            Ok(())
        }
        Ok(_) => anyhow::bail!(
            "{} exists and is not a directory: a backup is made in a new or empty directory",
            args.dest.display()
        ),
    }
}

pub fn backup(args: BackupArgs) -> Result<()> {
    check_args(&args)?;
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
            "  {} pages changed since the parent's start ({} read to find them)",
            report.pages_copied, report.pages_scanned
        );
        match report.delta_chain_links {
            Some(n) => println!(
                "  {} stored as the bytes that differ from the chain of {n} backup(s) up to the \
                 parent, the rest whole",
                report.pages_as_deltas
            ),
            None => println!(
                "  stored whole: the backups the parent builds on are not beside it, so there is \
                 no page to store a difference from"
            ),
        }
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
    if report.deltas > 0 {
        println!(
            "  {} pages held as deltas apply inside a page; the pages they make are checked when \
             the chain is restored",
            report.deltas
        );
    }
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
    let target = match (args.to_lsn, args.to_time, args.to_end) {
        (Some(l), _, _) => Some(RestoreTarget::Lsn(l)),
        (_, Some(t), _) => Some(RestoreTarget::TimeUs(t)),
        (_, _, true) => Some(RestoreTarget::End),
        _ => None,
    };
    let report = match (&args.archive, target) {
        (Some(archive), Some(target)) => {
            directkv::restore_backup_chain_to(chain, archive, target, dest)
        }
        (None, None) => directkv::restore_backup_chain(chain, dest),
        _ => anyhow::bail!(
            "--to-lsn, --to-time and --to-end need --archive, and --archive one of them"
        ),
    }
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
    if let Some(r) = report.rolled_forward {
        println!(
            "  carried forward from the archive ({} segments): {} commits after the backup, the \
             log ends at {}{}",
            r.archived_segments,
            r.commits,
            r.log_end,
            r.last_commit_time_us.map_or(String::new(), |t| format!(
                ", its last commit at {t} µs since the epoch"
            ))
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_targets_parse_as_the_tools_print_them() {
        assert_eq!(parse_lsn("1048576"), Ok(Lsn::new(1 << 20)));
        assert_eq!(parse_lsn("1/000F0000"), Ok(Lsn::new((1 << 32) | 0xF_0000)));
        assert_eq!(
            parse_lsn(&Lsn::new(123_456_789).to_string()),
            Ok(Lsn::new(123_456_789))
        );
        assert!(parse_lsn("1/2/3").is_err() && parse_lsn("x").is_err());
        assert_eq!(parse_time_us("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_time_us("1700000000000000"), Ok(1_700_000_000_000_000));
        // 2026-11-25T22:13:20Z is 1,795,644,800 s since the epoch.
        assert_eq!(
            parse_time_us("2026-11-25T22:13:20.5Z"),
            Ok(1_795_644_800_500_000)
        );
        assert_eq!(
            parse_time_us("2000-03-01T00:00:00Z"),
            Ok(951_868_800_000_000)
        );
        for bad in [
            "2026-11-25 22:13:20Z",
            "2026-13-01T00:00:00Z",
            "2026-11-25T22:13:20",
            "soon",
        ] {
            assert!(parse_time_us(bad).is_err(), "{bad}");
        }
    }
}
