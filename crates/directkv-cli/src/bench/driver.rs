//! The one driver of every bench: each configuration runs in a fresh child
//! process (inside its own memory cgroup when `--memory-limit` is given),
//! configurations alternate round by round, and every row goes out through
//! the one writer.
//!
//! - A bench is a [`Spec`]: its configurations, what a child measures for one
//!   of them, and optionally a load that runs first, in a child of its own
//!   and outside the memory budget.
//! - Per configuration run: (load child) → (cgroup made) → measuring child
//!   joins it → rows printed → cgroup removed. A child that fails or is killed
//!   gives one row with `error` set; the command goes on with the other runs
//!   and exits non-zero at the end.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::output::{Line, TableRow, Writer, SCHEMA};
use super::sys::MemCgroup;

/// How every bench runs its configurations.
#[derive(clap::Args, Debug, Clone)]
pub struct Runs {
    /// Rounds; configurations alternate within each.
    #[arg(
        long,
        default_value_t = 1,
        value_parser = super::args::whole_in::<u32>(1, super::args::ROUNDS_MAX)
    )]
    pub rounds: u32,
    /// Run each configuration in a fresh memory cgroup with this limit, page
    /// cache included (e.g. 512M, 1G). Needs root and a memory controller.
    #[arg(long, value_parser = super::args::parse_positive_bytes)]
    pub memory_limit: Option<u64>,
    /// Print JSON lines (one per row) instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// What a bench is: the driver runs it, one child process per configuration
/// and round.
pub trait Spec: Serialize + DeserializeOwned {
    /// Names the bench on the child's command line (`bench child KIND SPEC`).
    const KIND: &'static str;
    /// What a child reports for one configuration (one or more rows).
    type Row: Serialize + DeserializeOwned + Default + TableRow;
    /// The bench's name in reports (`workload`); by default its kind.
    fn name(&self) -> String {
        Self::KIND.into()
    }
    /// The configurations, in order; the first is the baseline.
    fn configs(&self) -> &[String];
    /// Whether a configuration needs a load (in a child of its own, before
    /// the measuring one and outside the memory budget).
    fn loads(&self) -> bool {
        false
    }
    /// The child side of the load; returns its seconds.
    fn load(&self, _run: &Run) -> Result<f64> {
        Ok(0.0)
    }
    /// The child side: measures one configuration.
    fn measure(&self, run: &Run) -> Result<Vec<Self::Row>>;
    /// The parent side, after every run: summaries, extra tables, charts.
    /// An error here (a failed check) makes the command fail.
    fn finish(&self, _lines: &[Line<Self::Row>], _out: Writer) -> Result<()> {
        Ok(())
    }
}

/// Which part of a configuration's run a child does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Load the data set.
    Load,
    /// Measure.
    Measure,
}

/// One configuration's run, as its child is told.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    /// The configuration.
    pub config: String,
    /// Round, from 1.
    pub round: u32,
    /// What this child does.
    pub phase: Phase,
    /// Seconds the load took (0 when it reused an earlier one).
    pub load_seconds: f64,
    /// The memory cgroup to join first.
    pub cgroup: Option<PathBuf>,
    /// A number no other run shares (keys a run inserts are unique by it).
    pub nonce: u64,
}

#[derive(Serialize, Deserialize)]
struct ChildSpec<S> {
    spec: S,
    run: Run,
}

/// Fails, saying why, where a memory cgroup with `limit` bytes cannot be made.
pub fn memory_budget_available(limit: u64) -> Result<()> {
    let name = format!("directkv-bench-probe-{}", std::process::id());
    MemCgroup::create(&name, limit).map(drop)
}

/// Runs every configuration of `spec` `runs.rounds` times and reports.
///
/// # Errors
/// When a run failed (after every run is reported), when `spec.finish` fails,
/// or when the memory cgroup cannot be made.
pub fn run<S: Spec>(spec: &S, runs: &Runs) -> Result<()> {
    assert!(!spec.configs().is_empty(), "a bench has a configuration");
    if runs.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let out = Writer::new(runs.json);
    let exe = std::env::current_exe().context("own executable")?;
    out.header::<S::Row>();
    let mut lines = Vec::new();
    for round in 1..=runs.rounds {
        for config in spec.configs() {
            let serial = lines.len();
            for line in run_config(&exe, spec, runs, config, round, serial)? {
                out.line(&line)?;
                lines.push(line);
            }
        }
    }
    spec.finish(&lines, out)?;
    let failed: Vec<&str> = lines
        .iter()
        .filter(|l| l.error.is_some())
        .map(|l| l.config.as_str())
        .collect();
    if !failed.is_empty() {
        bail!(
            "{} of {} runs failed ({})",
            failed.len(),
            lines.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// One configuration's run in one round: its lines, one with `error` set if
/// it failed.
fn run_config<S: Spec>(
    exe: &Path,
    spec: &S,
    runs: &Runs,
    config: &str,
    round: u32,
    serial: usize,
) -> Result<Vec<Line<S::Row>>> {
    let cgroup = match runs.memory_limit {
        Some(limit) => {
            let name = format!("directkv-bench-{}-{serial}", std::process::id());
            Some(MemCgroup::create(&name, limit).context("--memory-limit")?)
        }
        None => None,
    };
    let mut run = Run {
        config: config.to_string(),
        round,
        phase: Phase::Load,
        load_seconds: 0.0,
        cgroup: None,
        nonce: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    };
    let measured = (|| -> Result<Vec<S::Row>> {
        if spec.loads() {
            run.load_seconds = run_child(exe, spec, &run)?;
        }
        run.phase = Phase::Measure;
        run.cgroup = cgroup.as_ref().map(|c| c.path().to_path_buf());
        run_child(exe, spec, &run)
    })();
    let line = |row, error| Line {
        schema: SCHEMA,
        kind: "run",
        workload: spec.name(),
        config: config.to_string(),
        round,
        memory_limit_bytes: runs.memory_limit,
        cgroup_peak_bytes: cgroup.as_ref().and_then(MemCgroup::peak_bytes),
        row,
        error,
    };
    Ok(match measured {
        Ok(rows) => rows.into_iter().map(|r| line(r, None)).collect(),
        Err(e) => {
            let why = match &cgroup {
                Some(cg) if cg.oom_killed() => format!(
                    "killed for memory under the {} MiB limit",
                    runs.memory_limit.unwrap_or(0) >> 20
                ),
                _ => format!("{e:#}"),
            };
            vec![line(S::Row::default(), Some(why))]
        }
    })
}

/// Runs one child and parses the last line it printed.
fn run_child<S: Spec, T: DeserializeOwned>(exe: &Path, spec: &S, run: &Run) -> Result<T> {
    let child = ChildSpec {
        spec,
        run: run.clone(),
    };
    let out = Command::new(exe)
        .args(["bench", "child", S::KIND])
        .arg(serde_json::to_string(&child)?)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .context("start the benchmark child")?;
    if !out.status.success() {
        bail!("{} run failed ({})", run.config, out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .context("the benchmark child printed no report")?;
    serde_json::from_str(last).context("parse the child's report")
}

/// The child side: join the cgroup, load or measure, print the result as
/// one JSON line.
pub fn child<S: Spec>(spec_json: &str) -> Result<()> {
    let ChildSpec::<S> { spec, run } = serde_json::from_str(spec_json).context("child spec")?;
    if let Some(cg) = &run.cgroup {
        MemCgroup::join(cg)?;
    }
    let line = match run.phase {
        Phase::Load => serde_json::to_string(&spec.load(&run)?)?,
        Phase::Measure => serde_json::to_string(&spec.measure(&run)?)?,
    };
    println!("{line}");
    Ok(())
}
