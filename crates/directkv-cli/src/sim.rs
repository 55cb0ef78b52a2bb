//! `directkv sim`: the random crash campaign on the simulated disk, for as many
//! seeds as asked, each followed by a few runs of the corruption campaign
//! (one file of a closed database damaged one way: deleted, truncated,
//! zero-filled, flipped, replaced by an older copy), with progress and seeds
//! per second; stops at the first failing seed and prints the line that
//! replays it.

use std::io::IsTerminal;
use std::time::Instant;

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};

/// Options of `directkv sim`.
#[derive(clap::Args)]
pub struct Args {
    /// How many seeds to run.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Damaged reopens per seed (the corruption campaign); 0: none.
    #[arg(long, default_value_t = 2)]
    damage: u64,
    /// Print one JSON summary line at the end.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let end = seeds_end(args.from, args.seeds)?;
    let bar = if args.json || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(args.seeds);
        bar.set_style(
            ProgressStyle::with_template(
                "[{bar:30}] {pos}/{len} seeds {per_sec} ({eta} left) {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar
    };
    let start = Instant::now();
    let (mut acked, mut crashes, mut detected) = (0u64, 0u64, 0u64);
    let (mut overlapped, mut refused) = (0u64, 0u64);
    for seed in args.from..end {
        let run = directkv::internals::sim::run_seed(seed).and_then(|r| {
            let d = match args.damage {
                0 => 0,
                n => directkv::internals::sim::sweep_corruption(seed, n)?,
            };
            Ok((r, d))
        });
        match run {
            Ok((r, d)) => {
                acked += r.acked;
                crashes += r.crashes;
                overlapped += r.overlapped;
                refused += r.refused;
                detected += d;
            }
            Err(f) => {
                bar.abandon();
                bail!("{f}");
            }
        }
        bar.inc(1);
        if !bar.is_hidden() && seed % 100 == 0 {
            bar.set_message(format!("{acked} commits, {crashes} crashes"));
        }
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let rate = args.seeds as f64 / secs;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "seeds": args.seeds, "from": args.from, "failures": 0, "seconds": secs,
                "seeds_per_sec": rate, "acked_commits": acked, "crashes": crashes,
                "overlapped_commits": overlapped, "refused_commits": refused,
                "damaged_reopens": args.seeds * args.damage, "damage_detected": detected,
            })
        );
    } else {
        println!(
            "{} seeds from {} passed in {secs:.1} s ({rate:.0} seeds/s): {acked} acknowledged \
             commits ({overlapped} beside another open write transaction, {refused} more \
             refused as conflicts), {crashes} crashes, {} damaged reopens ({detected} \
             refused, the rest read back whole or as reported), no invariant broken",
            args.seeds,
            args.from,
            args.seeds * args.damage
        );
    }
    Ok(())
}

/// The end of the seed range: one that wrapped would run no seed and
/// report a pass.
fn seeds_end(from: u64, seeds: u64) -> Result<u64> {
    from.checked_add(seeds).ok_or_else(|| {
        anyhow::anyhow!(
            "--from {from} and --seeds {seeds} run past the last seed, {}",
            u64::MAX
        )
    })
}
