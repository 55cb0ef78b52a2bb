//! `directkv bench recovery`: how fast a crashed database comes back. Runs
//! the TPC-B load (`directkv bench tpcb`, direct I/O, default options) in a
//! child process, kills it with SIGKILL once the log since the last
//! checkpoint nears the checkpoint distance (the most a crash leaves to
//! replay in steady state), reopens the database, and prints the WAL
//! replayed, the time of each phase of the open, and the replay rate over
//! the rate the commits were made.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use directkv::{Database, Options};

use super::args::{self, whole_in};

/// Options of `directkv bench recovery`.
#[derive(clap::Args)]
pub struct Args {
    /// Directory for the database (its TPC-B data set is loaded once and
    /// kept, as `bench tpcb` does).
    #[arg(long, default_value = "directkv-bench")]
    dir: PathBuf,
    /// TPC-B scale factor.
    #[arg(long, default_value_t = 10, value_parser = whole_in::<u64>(1, args::SCALE_MAX))]
    scale: u64,
    /// Client threads of the load.
    #[arg(long, default_value_t = 8, value_parser = whole_in::<usize>(1, args::THREADS_MAX))]
    clients: usize,
    /// Cache of the load and of the reopen, e.g. 512M.
    #[arg(long, default_value = "512M", value_parser = args::parse_positive_bytes)]
    cache: u64,
    /// The checkpoint distance of the load (default: the engine's).
    #[arg(long, value_parser = args::parse_positive_bytes)]
    checkpoint_wal: Option<u64>,
    /// Kill when the log since the redo point reaches this share of the
    /// checkpoint distance (above 0, at most 2).
    #[arg(long, default_value_t = 0.9, value_parser = args::parse_share)]
    at: f64,
    /// Give up when that has not happened after this many seconds of load
    /// (1 to a day).
    #[arg(
        long,
        default_value_t = 300,
        value_parser = whole_in::<u64>(1, args::TIMEOUT_SECONDS_MAX)
    )]
    timeout: u64,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// What the open's stats file says at one moment.
struct Sample {
    unix_ms: u64,
    commits: u64,
    wal_since_redo: u64,
}

fn sample(db: &Path) -> Option<Sample> {
    let text = std::fs::read_to_string(db.join("stats.json")).ok()?;
    let doc: serde_json::Value = serde_json::from_str(&text).ok()?;
    let s = &doc["stats"];
    Some(Sample {
        unix_ms: doc["unix_ms"].as_u64()?,
        commits: s["commits"].as_u64()?,
        wal_since_redo: s["wal_since_redo_bytes"].as_u64()?,
    })
}

pub fn run(args: Args) -> Result<()> {
    if !(0.0..=2.0).contains(&args.at) || args.clients == 0 || args.scale == 0 {
        bail!("--at must be in 0..=2, --clients and --scale at least 1");
    }
    std::fs::create_dir_all(&args.dir).with_context(|| format!("{}", args.dir.display()))?;
    let db_dir = args.dir.join(format!("directkv-tpcb-s{}-v100", args.scale));
    if !args
        .dir
        .join(format!("directkv-tpcb-s{}-v100.loaded", args.scale))
        .exists()
    {
        // Load the data set first, so every sample below is of the load.
        let status = tpcb(&args, 1)
            .stdout(Stdio::null())
            .status()
            .context("load the data set")?;
        if !status.success() {
            bail!("loading the TPC-B data set failed ({status})");
        }
    }
    let _ = std::fs::remove_file(db_dir.join("stats.json"));
    let distance = args
        .checkpoint_wal
        .unwrap_or(Options::default().checkpoint_wal_bytes);
    let (first, last) = load_until_kill(&args, &db_dir, distance)?;
    // The rate the commits were made, between the first and the last
    // sample of the steady load.
    let made_secs = (last.unix_ms.saturating_sub(first.unix_ms)) as f64 / 1e3;
    let made_rate = (last.commits - first.commits) as f64 / made_secs.max(1e-3);
    let opts = Options {
        cache_bytes: usize::try_from(args.cache).context("--cache does not fit")?,
        create_if_missing: false,
        publish_stats: false,
        async_io: crate::io_backend_from_env()?,
        ..Options::default()
    };
    let (db, open_secs) = reopen(&db_dir, &opts)?;
    let recovery = db.stats().recovery;
    db.close().context("close")?;
    let report = Report {
        distance_bytes: distance,
        killed_at_bytes: last.wal_since_redo,
        made_rate,
        recovery,
        open_secs,
    };
    if args.json {
        report.print_json(&args)
    } else {
        report.print_text();
        Ok(())
    }
}

/// What `bench recovery` measured.
struct Report {
    /// The checkpoint distance.
    distance_bytes: u64,
    /// The log since the redo point in the last sample before the kill.
    killed_at_bytes: u64,
    /// Commits a second while the load ran.
    made_rate: f64,
    /// The reopen's recovery.
    recovery: directkv::RecoveryStats,
    /// How long the reopen took, replay included.
    open_secs: f64,
}

impl Report {
    fn replay_secs(&self) -> f64 {
        self.recovery.micros as f64 / 1e6
    }

    fn replay_rate(&self) -> f64 {
        self.recovery.transactions as f64 / self.replay_secs().max(1e-6)
    }

    /// The report as one JSON document.
    fn print_json(&self, args: &Args) -> Result<()> {
        let doc = serde_json::json!({
            "scale": args.scale, "clients": args.clients,
            "checkpoint_wal_bytes": self.distance_bytes,
            "killed_at_wal_since_redo_bytes": self.killed_at_bytes,
            "commit_rate": self.made_rate, "recovery": self.recovery,
            "open_seconds": self.open_secs,
            "replay_seconds": self.replay_secs(), "replay_rate": self.replay_rate(),
            "replay_over_commit": self.replay_rate() / self.made_rate.max(1e-6),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        Ok(())
    }

    fn print_text(&self) {
        let r = &self.recovery;
        println!(
            "killed at {:.0} MiB of log since the redo point (checkpoint distance {} MiB); \
             commits were made at {:.0}/s",
            self.killed_at_bytes as f64 / (1 << 20) as f64,
            self.distance_bytes >> 20,
            self.made_rate
        );
        println!(
            "reopen: {:.2} s; replay {:.2} s of it: {:.1} MiB of WAL, {} \
             transactions, {} pages read ({} read ahead, up to {} at once), {} from full images; \
             end-of-recovery checkpoint {:.2} s",
            self.open_secs,
            self.replay_secs(),
            r.wal_bytes as f64 / (1 << 20) as f64,
            r.transactions,
            r.pages_read,
            r.read_ahead_pages,
            r.read_ahead_batch_max,
            r.pages_from_images,
            r.checkpoint_micros as f64 / 1e6,
        );
        println!(
            "replay rate {:.0} transactions/s = {:.1}x the rate they were committed",
            self.replay_rate(),
            self.replay_rate() / self.made_rate.max(1e-6)
        );
    }
}

/// Opens the database once the killed processes have let go of it (the
/// load's own child dies a moment after the load); returns it and how long
/// the open took.
fn reopen(db_dir: &Path, opts: &Options) -> Result<(Database, f64)> {
    let gave_up = Instant::now() + Duration::from_secs(30);
    loop {
        let t = Instant::now();
        match Database::open(db_dir, opts.clone()) {
            Ok(db) => return Ok((db, t.elapsed().as_secs_f64())),
            Err(directkv::Error::DatabaseLocked { .. }) if Instant::now() < gave_up => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).context("reopen after the kill"),
        }
    }
}

/// The command of `bench tpcb` with direct I/O for `seconds`.
fn tpcb(args: &Args, seconds: u64) -> Command {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("directkv"));
    let mut c = Command::new(exe);
    c.args(["bench", "tpcb", "--compare", "direct", "--no-check"])
        .arg("--scale")
        .arg(args.scale.to_string())
        .arg("--clients")
        .arg(args.clients.to_string())
        .arg("--cache")
        .arg(args.cache.to_string())
        .arg("--seconds")
        .arg(seconds.to_string())
        .arg("--dir")
        .arg(&args.dir);
    if let Some(bytes) = args.checkpoint_wal {
        c.arg("--checkpoint-wal").arg(bytes.to_string());
    }
    c
}

/// Runs the load in a child until the log since the redo point reaches
/// `args.at` of `distance`, then kills it; returns the first and the last
/// stats samples of the load.
fn load_until_kill(args: &Args, db_dir: &Path, distance: u64) -> Result<(Sample, Sample)> {
    let mut child = tpcb(args, args.timeout + 60)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("start the load")?;
    let pgid = child.id() as i32;
    let kill = || {
        // SAFETY: kill(2) with a negative pid signals the process group the
        // child leads (made above); it touches no memory of ours.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    };
    let started = Instant::now();
    let mut first: Option<Sample> = None;
    let outcome = loop {
        std::thread::sleep(Duration::from_millis(100));
        if let Ok(Some(status)) = child.try_wait() {
            break Err(anyhow::anyhow!("the load ended by itself ({status})"));
        }
        if started.elapsed() > Duration::from_secs(args.timeout) {
            break Err(anyhow::anyhow!(
                "the log never reached {:.0}% of the checkpoint distance in {} s",
                args.at * 100.0,
                args.timeout
            ));
        }
        let Some(s) = sample(db_dir) else { continue };
        if s.commits == 0 {
            continue;
        }
        let Some(f) = &first else {
            first = Some(s);
            continue;
        };
        if s.wal_since_redo as f64 >= args.at * distance as f64 && s.unix_ms > f.unix_ms {
            kill();
            break Ok(s);
        }
    };
    if outcome.is_err() {
        kill();
    }
    let _ = child.wait();
    let last = outcome?;
    let first = first.context("no sample of the load")?;
    Ok((first, last))
}
