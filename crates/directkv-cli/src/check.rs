//! `directkv check DBDIR`: opens a database (running its recovery if it was
//! not closed), says what recovery did, then walks the whole tree and proves
//! its structure, and reports the modes and owners of the database's files,
//! warning about those others may read or write.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use directkv::{Database, Options};

use crate::size::parse_bytes;

/// Options of `directkv check`.
#[derive(clap::Args)]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    /// Cache to open it with (recovery's working memory), e.g. 64M.
    #[arg(long, default_value = "64M", value_parser = parse_bytes)]
    cache: u64,
    /// Only recover; skip the structural walk.
    #[arg(long)]
    recover_only: bool,
    /// Close with a checkpoint. (An open that replayed transactions ends
    /// with a checkpoint anyway, so the next open has nothing to replay.)
    #[arg(long)]
    checkpoint: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// Open (and report) a database even if its group or others may write
    /// its files; without it such a database is refused, naming the path.
    #[arg(long)]
    accept_writable_by_others: bool,
    /// Open a backup's directory as a database: its recovery and first
    /// checkpoint make it one, which ends it as a backup (and as the base
    /// of incremental ones). Without it a backup is refused;
    /// `directkv verify-backup` checks one without changing it. What
    /// `directkv restore` made needs no flag: it is a database, no backup.
    #[arg(long)]
    open_backup: bool,
}

/// Refuses `dir` when its `CONTROL` is a backup's, unless `open_anyway`:
/// the open that checking (or backing up) needs would end it as a backup.
/// What `directkv restore` made is a database to be, and accepted: it holds
/// the restore's record and no backup marker, so nothing takes it for a
/// backup, and its open replays its log and makes it a database.
pub(crate) fn refuse_a_backup(dir: &std::path::Path, open_anyway: bool) -> Result<()> {
    let storage = directkv::internals::io::OsStorage::default();
    // A CONTROL that does not read is the open's to report.
    let Ok(control) = directkv::internals::pages::ControlFile::read(&storage, &dir.join("CONTROL"))
    else {
        return Ok(());
    };
    let backup = control.is_backup();
    if backup && !open_anyway && !directkv::internals::engine::is_restored_copy(&storage, dir) {
        anyhow::bail!(
            "{} is a backup: `directkv verify-backup` checks it without changing it, and \
             `directkv restore` makes a database of a copy of it; opening it (`check \
             --open-backup`) makes it a database and ends it as a backup",
            dir.display()
        );
    }
    Ok(())
}

pub fn run(args: Args) -> Result<()> {
    refuse_a_backup(&args.dir, args.open_backup)?;
    let opts = Options {
        cache_bytes: usize::try_from(args.cache).context("--cache does not fit in memory")?,
        create_if_missing: false,
        background_threads: false,
        async_io: crate::io_backend_from_env()?,
        publish_stats: false,
        accept_writable_by_others: args.accept_writable_by_others,
        ..Options::default()
    };
    let t = Instant::now();
    let db =
        Database::open(&args.dir, opts).with_context(|| format!("open {}", args.dir.display()))?;
    let open_seconds = t.elapsed().as_secs_f64();
    let stats = db.stats();
    let recovery = stats.recovery;
    let t = Instant::now();
    let report = if args.recover_only {
        None
    } else {
        Some(db.check()?)
    };
    let check_seconds = t.elapsed().as_secs_f64();
    if args.checkpoint {
        db.close().context("checkpoint after recovery")?;
    }
    if args.json {
        let doc = serde_json::json!({
            "dir": args.dir.to_string_lossy(),
            "open_seconds": open_seconds,
            "recovery": recovery,
            "readable_by_others": stats.readable_by_others,
            "check": report,
            "check_seconds": check_seconds,
            "checkpointed": args.checkpoint,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!("{}", args.dir.display());
    print_recovery(&recovery, open_seconds);
    if let Some(c) = &report {
        println!(
            "check: ok in {check_seconds:.2} s: {} keys, {} tables, depth {}, {} pages ({} tree, {} overflow, {} free)",
            c.keys, c.tables, c.depth, c.pages, c.tree_pages, c.overflow_pages, c.free_pages
        );
        print_tables(c);
        print_files(c);
    } else {
        for path in &stats.readable_by_others {
            println!("warning: {} is readable by others", path.display());
        }
    }
    if args.checkpoint {
        println!("checkpointed: the next open replays nothing");
    }
    Ok(())
}

/// Tables shown by name at most; `--json` lists every one.
const TABLES_SHOWN: usize = 20;

/// The named tables, the largest first (at most [`TABLES_SHOWN`]).
fn print_tables(c: &directkv::CheckReport) {
    let mut t: Vec<_> = c.table_details.iter().collect();
    t.sort_by_key(|t| std::cmp::Reverse(t.pages));
    for t in t.iter().take(TABLES_SHOWN) {
        let name = if t.dropped { "(dropped)" } else { &t.name };
        println!(
            "table {name} (id {}): {} keys, {} pages",
            t.id, t.keys, t.pages
        );
    }
    if t.len() > TABLES_SHOWN {
        println!(
            "... and {} more tables (--json lists them)",
            t.len() - TABLES_SHOWN
        );
    }
}

/// The modes and owners of the database's files, then a warning for each
/// path others may read or write.
fn print_files(c: &directkv::CheckReport) {
    println!("files (mode, owner uid:gid, kind, path):");
    for f in &c.files {
        let kind = serde_json::to_value(f.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        println!(
            "  {} {}:{} {kind:7} {}",
            f.mode,
            f.uid,
            f.gid,
            f.path.display()
        );
    }
    for path in &c.writable_by_others {
        println!(
            "warning: {} is writable by its group or others",
            path.display()
        );
    }
    for path in &c.readable_by_others {
        println!("warning: {} is readable by others", path.display());
    }
}

/// The text lines of what the open's recovery did.
fn print_recovery(r: &directkv::RecoveryStats, open_seconds: f64) {
    if r.transactions == 0 && r.page_records == 0 {
        println!("open: {open_seconds:.2} s, no transaction to replay (closed cleanly)");
    } else {
        println!(
            "open: {open_seconds:.2} s; replayed {:.1} MiB of WAL in {:.2} s: {} transactions, \
             {} page records; pages: {} installed from full images, {} read ({} read ahead, \
             up to {} at once); end-of-recovery checkpoint {:.2} s",
            r.wal_bytes as f64 / (1 << 20) as f64,
            r.micros as f64 / 1e6,
            r.transactions,
            r.page_records,
            r.pages_from_images,
            r.pages_read,
            r.read_ahead_pages,
            r.read_ahead_batch_max,
            r.checkpoint_micros as f64 / 1e6,
        );
    }
    if let Some(lsn) = r.torn_tail_lsn {
        println!(
            "torn tail: {} record(s), {} bytes from LSN {} were discarded as the last flush \
             torn by a crash before its sync completed (damage to that flush after it looks \
             the same)",
            r.torn_tail_records,
            r.torn_tail_bytes,
            directkv::Lsn::new(lsn)
        );
    }
}
