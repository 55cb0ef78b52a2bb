//! `directkv test-fsync`: the measurement ([`measure`]) and its output.

pub mod measure;

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, Result};
use directkv::internals::io::profile::{DeviceProfile, Outcome, Verdict};
use indicatif::{ProgressBar, ProgressStyle};
use measure::{Observer, Report, TestResult, GROUPS};

/// Options of `directkv test-fsync`.
#[derive(clap::Args)]
pub struct Args {
    /// Scratch file to test with (must not exist; removed afterwards). Put it on
    /// the filesystem the WAL will live on. Default: a file in the current directory.
    #[arg(long, short = 'f')]
    file: Option<PathBuf>,
    /// Seconds per test.
    #[arg(long, short = 's', default_value_t = 2.0)]
    seconds: f64,
    /// Size of one write (the WAL block), e.g. 8192 or 8k.
    #[arg(long, default_value = "8k", value_parser = crate::size::parse_bytes)]
    block_size: u64,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
    /// Save a device profile the engine reads at open to pick its sync method.
    /// Without a value: `.directkv-device-profile.json` in the tested directory.
    #[arg(long, num_args = 0..=1, value_name = "PATH")]
    save_profile: Option<Option<PathBuf>>,
}

struct Progress(ProgressBar);

impl Observer for Progress {
    fn planned(&self, tests: usize) {
        self.0.set_length(tests as u64);
    }
    fn started(&self, label: &str) {
        self.0.set_message(label.trim().to_string());
    }
    fn finished(&self, _result: &TestResult) {
        self.0.inc(1);
    }
}

pub fn run(args: Args) -> Result<()> {
    let path = args.file.clone().unwrap_or_else(|| {
        PathBuf::from(format!("directkv-test-fsync.{}.tmp", std::process::id()))
    });
    let opts = measure::Options {
        path: path.clone(),
        seconds_per_test: args.seconds,
        block_bytes: usize::try_from(args.block_size).context("block size")?,
    };
    let bar = if args.json || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} {msg} ({eta} left)")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        bar
    };
    let report = measure::run(&opts, &Progress(bar.clone()))
        .with_context(|| format!("test-fsync on {}", path.display()))?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    if let Some(target) = args.save_profile {
        save_profile(&report, target, &path, args.json)?;
    }
    Ok(())
}

fn save_profile(
    report: &Report,
    target: Option<PathBuf>,
    tested: &std::path::Path,
    quiet: bool,
) -> Result<()> {
    let target = target.unwrap_or_else(|| {
        let dir = match tested.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        dir.join(DeviceProfile::FILE_NAME)
    });
    let profile = measure::profile_from_report(report)
        .context("no durable method was measured, so there is no profile to save")?;
    profile.save(&directkv::internals::io::At::cwd(&target))?;
    if !quiet {
        println!("\ndevice profile saved to {}", target.display());
    }
    Ok(())
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

fn print_header(r: &Report) {
    println!("directkv test-fsync on {}", r.file.display());
    let fs = &r.filesystem;
    match &r.device {
        Some(d) => println!(
            "  filesystem {} on {} (rotational: {}, write cache: {}, FUA: {}, logical/physical \
             block: {}/{} bytes)",
            fs.fs_type,
            d.name,
            yes_no(d.rotational),
            d.write_cache.as_deref().unwrap_or("unknown"),
            yes_no(d.fua),
            d.logical_block_bytes.unwrap_or(0),
            d.physical_block_bytes.unwrap_or(0),
        ),
        None => println!("  filesystem {} (no block device)", fs.fs_type),
    }
    match (&r.alignment, &r.direct_io_unavailable) {
        (Some(a), _) => println!(
            "  direct I/O: available; alignment memory {} / write offset {} / read offset {} \
             bytes (from {:?})",
            a.memory_bytes, a.offset_bytes, a.read_offset_bytes, a.source
        ),
        (None, Some(why)) => println!("  direct I/O: unavailable ({why}); +direct tests skipped"),
        (None, None) => println!("  direct I/O: unavailable"),
    }
    let atomic = r.device.as_ref().and_then(|d| d.atomic_write_max_bytes);
    match atomic {
        Some(n) if n > 0 => println!("  untorn writes: up to {n} bytes (RWF_ATOMIC)"),
        _ => println!("  untorn writes: none promised by the device"),
    }
    println!(
        "  {} second(s) per test, {}-byte writes",
        r.seconds_per_test, r.block_bytes
    );
}

fn print_report(r: &Report) {
    print_header(r);
    let block = format!("{}kB", r.block_bytes / 1024);
    let total = format!("{}kB", 2 * r.block_bytes / 1024);
    for (group, title, note) in GROUPS {
        println!();
        println!("{}:", title.replace("{block}", &block));
        println!("({})", note.replace("{total}", &total));
        for res in r.results.iter().filter(|res| res.group == group) {
            match &res.outcome {
                Outcome::Measured {
                    ops_per_sec,
                    usecs_per_op,
                    ..
                } => println!(
                    "        {:<34}{:>13.3} ops/sec  {:>6.0} usecs/op",
                    res.label, ops_per_sec, usecs_per_op
                ),
                Outcome::NotAvailable { reason } => {
                    println!("        {:<34}{:>13}  ({reason})", res.label, "n/a")
                }
            }
        }
    }
    println!();
    match &r.fastest_durable {
        Some(f) => println!(
            "Fastest durable method: {} ({:.0} ops/sec, {:.0} usecs per sync)",
            f.variant, f.ops_per_sec, f.usecs_per_op
        ),
        None => println!("Fastest durable method: none measured"),
    }
    let verdict = match r.honesty.verdict {
        Verdict::Plausible => "plausible",
        Verdict::Suspicious => "SUSPICIOUS",
        Verdict::Unknown => "unknown",
    };
    println!("Durability honesty: {verdict}");
    for note in &r.honesty.notes {
        println!("  - {note}");
    }
}
