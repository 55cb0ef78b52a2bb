//! Runs a workload in each configuration, side by side: every run is a fresh
//! child process (inside its own memory cgroup when `--memory-limit` is
//! given), configurations alternate round by round, and the parent prints
//! the table, JSON lines and charts.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use super::report::{self, Latency, RunReport, SCHEMA};
use super::store::{self, Engine};
use super::sys::{self, Cpu, IoCounters, MemCgroup};
use super::workload::{self, Client, Shape, Shared, Workload};

/// Options every workload takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Directory for the benchmark databases (kept and reused by later runs
    /// with the same data set; `--fresh` reloads).
    #[arg(long, default_value = "directkv-bench")]
    pub dir: PathBuf,
    /// Client threads.
    #[arg(long, default_value_t = 8)]
    pub clients: u64,
    /// Seconds each configuration runs.
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Records for ycsb, read and scan (loaded first) and fill (inserted).
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Bytes per value (per account, teller and branch row in tpcb).
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Engine cache size (default: 3/4 of --memory-limit, else 128M).
    #[arg(long, value_parser = crate::size::parse_bytes)]
    pub cache: Option<u64>,
    /// Run each configuration in a fresh memory cgroup with this limit, page
    /// cache included (e.g. 512M, 1G). Needs root and a memory controller.
    #[arg(long, value_parser = crate::size::parse_bytes)]
    pub memory_limit: Option<u64>,
    /// Seed of the clients' random choices.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Configurations, run side by side, the first is the baseline: direct or
    /// buffered, then optionally the suffixes -no-readahead, -fifo, one of
    /// -uring/-threads/-no-aio, and -whole-images (in that order), then
    /// optionally /METHOD, a WAL sync method (e.g. direct/fdatasync); with
    /// the peers feature also rocksdb, rocksdb-direct, lmdb, sqlite.
    #[arg(long, value_delimiter = ',', default_value = "direct")]
    pub compare: Vec<String>,
    /// WAL sync methods to compare with direct I/O (each adds a configuration
    /// `direct/<method>`), e.g. fdatasync,open_datasync+direct.
    #[arg(long, value_delimiter = ',')]
    pub compare_sync: Vec<String>,
    /// Rounds; configurations alternate within each.
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// Print JSON lines (one per run, then a summary) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write SVG charts (throughput, p99, and the slowest operation beside the
    /// device probe, over time; the comparison) here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Reload the data set even if one with the same parameters exists.
    #[arg(long)]
    pub fresh: bool,
    /// Skip the TPC-B consistency check after a tpcb run.
    #[arg(long)]
    pub no_check: bool,
    /// This engine's page size when it creates the data set (4k, 8k, 16k;
    /// default: the engine's).
    #[arg(long, value_parser = crate::size::parse_bytes)]
    pub page_size: Option<u64>,
    /// This engine's checkpoint distance in WAL bytes (default: the engine's).
    #[arg(long, value_parser = crate::size::parse_bytes)]
    pub checkpoint_wal: Option<u64>,
}

/// What a child process is told to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildSpec {
    workload: Workload,
    shape: Shape,
    config: String,
    round: u32,
    clients: u64,
    seconds: f64,
    seed: u64,
    cache_bytes: u64,
    memory_limit: Option<u64>,
    cgroup: Option<PathBuf>,
    dir: PathBuf,
    fresh: bool,
    check: bool,
    nonce: u64,
    tuning: store::Tuning,
    /// Only load the data set (in a process of its own, so the allocator's
    /// leftovers of loading do not count in the measured run's memory).
    load_only: bool,
}

/// The tpcb scale whose data is about `ratio` times `limit` bytes.
pub fn tpcb_scale_for(limit: u64, value_size: usize, ratio: f64) -> u64 {
    // An account row costs its key, value and slot in packed leaves.
    let per_scale = 100_000.0 * (value_size as f64 + 5.0 + 9.0) * 1.04;
    ((limit as f64 * ratio / per_scale).ceil() as u64).max(1)
}

/// Runs `workload` in every configuration of `common` and reports.
pub fn run(workload: Workload, shape: Shape, common: &Common) -> Result<()> {
    let mut configs = common.compare.clone();
    for s in &common.compare_sync {
        configs.push(format!("direct/{s}"));
    }
    configs.dedup();
    if configs.is_empty() {
        bail!("no configuration to run (--compare is empty)");
    }
    for c in &configs {
        Engine::parse(c)?.available()?;
    }
    if common.clients == 0 || common.seconds <= 0.0 || common.rounds == 0 {
        bail!("--clients, --seconds and --rounds must be positive");
    }
    if shape.keys == 0 {
        bail!("--keys must be positive");
    }
    let cache_bytes = common
        .cache
        .unwrap_or_else(|| common.memory_limit.map_or(128 << 20, |l| l / 4 * 3));
    if let Some(limit) = common.memory_limit {
        if cache_bytes >= limit {
            bail!(
                "--cache ({cache_bytes} bytes) must be below --memory-limit ({limit} bytes): \
                 the engine needs room for its WAL buffers and the process itself"
            );
        }
    }
    std::fs::create_dir_all(&common.dir)
        .with_context(|| format!("create {}", common.dir.display()))?;
    let exe = std::env::current_exe().context("own executable")?;
    let mut runs = Vec::new();
    let name = workload.name();
    if !common.json {
        let data = workload.data_tag(&shape).unwrap_or_else(|| "empty".into());
        println!(
            "{name}: {} clients, {} s per run, data set {data}, cache {} MiB{}, configurations {}",
            common.clients,
            common.seconds,
            cache_bytes >> 20,
            common
                .memory_limit
                .map_or(String::new(), |l| format!(", memory limit {} MiB", l >> 20)),
            configs.join(", ")
        );
    }
    let mut serial = 0u32;
    for round in 1..=common.rounds {
        for config in &configs {
            serial += 1;
            let cgroup = match common.memory_limit {
                Some(limit) => Some(
                    MemCgroup::create(
                        &format!("directkv-bench-{}-{serial}", std::process::id()),
                        limit,
                    )
                    .context("--memory-limit")?,
                ),
                None => None,
            };
            let spec = ChildSpec {
                workload: workload.clone(),
                shape: shape.clone(),
                config: config.clone(),
                round,
                clients: common.clients,
                seconds: common.seconds,
                seed: common.seed.wrapping_add(u64::from(round)),
                cache_bytes,
                memory_limit: common.memory_limit,
                cgroup: cgroup.as_ref().map(|c| c.path().to_path_buf()),
                dir: common.dir.clone(),
                fresh: common.fresh && round == 1,
                check: !common.no_check,
                tuning: store::Tuning {
                    page_bytes: common.page_size.map(|p| p as u32),
                    checkpoint_wal_bytes: common.checkpoint_wal,
                },
                load_only: false,
                nonce: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
            };
            let load = ChildSpec {
                load_only: true,
                cgroup: None,
                ..spec.clone()
            };
            let loaded = run_child(&exe, &load);
            let load_seconds = loaded.as_ref().map_or(0.0, |l| l.load_seconds);
            let measured = ChildSpec {
                fresh: false,
                ..spec.clone()
            };
            let mut r = loaded
                .and_then(|_| run_child(&exe, &measured))
                .unwrap_or_else(|e| {
                    let why = match &cgroup {
                        Some(cg) if cg.oom_killed() => format!(
                            "killed for memory under the {} MiB limit",
                            common.memory_limit.unwrap_or(0) >> 20
                        ),
                        _ => format!("{e:#}"),
                    };
                    RunReport::failed(&name, config, round, why)
                });
            if let Some(cg) = &cgroup {
                r.cgroup_peak_bytes = cg.peak_bytes();
            }
            r.load_seconds = load_seconds;
            if common.json {
                println!("{}", serde_json::to_string(&r)?);
            }
            runs.push(r);
        }
    }
    let summary = report::summarize(&name, &configs, &runs);
    if common.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        report::print_table(&runs, &summary);
    }
    if let Some(dir) = &common.plot {
        report::plot(dir, &runs, &summary)?;
        if !common.json {
            println!("charts written to {}", dir.display());
        }
    }
    if let Some(bad) = runs
        .iter()
        .find(|r| r.consistency.as_ref().is_some_and(|c| !c.ok))
    {
        bail!("the TPC-B consistency check FAILED for {}", bad.config);
    }
    Ok(())
}

fn run_child(exe: &Path, spec: &ChildSpec) -> Result<RunReport> {
    let out = Command::new(exe)
        .args(["bench", "child"])
        .arg(serde_json::to_string(spec)?)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .context("start the benchmark child")?;
    if !out.status.success() {
        bail!("{} run failed ({})", spec.config, out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .context("the benchmark child printed no report")?;
    serde_json::from_str(line).context("parse the child's report")
}

/// The child side: join the cgroup, load (or reuse) the data, run, measure,
/// print one JSON report.
pub fn child(spec_json: &str) -> Result<()> {
    let spec: ChildSpec = serde_json::from_str(spec_json).context("child spec")?;
    if let Some(cg) = &spec.cgroup {
        MemCgroup::join(cg)?;
    }
    let report = measure(&spec)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

fn measure(spec: &ChildSpec) -> Result<RunReport> {
    let (engine, data_dir, load_seconds) = load(spec)?;
    if spec.load_only {
        return Ok(RunReport {
            load_seconds,
            ..RunReport::failed(
                &spec.workload.name(),
                &spec.config,
                spec.round,
                String::new(),
            )
        });
    }
    run_measured(spec, &engine, &data_dir)
}

/// Loads the data set unless a load with the same parameters is there.
fn load(spec: &ChildSpec) -> Result<(Engine, PathBuf, f64)> {
    let engine = Engine::parse(&spec.config)?;
    let tag = spec
        .workload
        .data_tag(&spec.shape)
        .map(|t| match spec.tuning.page_bytes {
            Some(p) if engine.family() == "directkv" => format!("{t}-p{p}"),
            _ => t,
        });
    let data_dir = spec.dir.join(format!(
        "{}-{}",
        engine.family(),
        tag.as_deref().unwrap_or("fill")
    ));
    let marker = spec.dir.join(format!(
        "{}-{}.loaded",
        engine.family(),
        tag.as_deref().unwrap_or("fill")
    ));
    let loaded = tag.is_some()
        && !spec.fresh
        && std::fs::read_to_string(&marker).is_ok_and(|t| Some(t.trim()) == tag.as_deref());
    let mut load_seconds = 0.0;
    if !loaded {
        let _ = std::fs::remove_file(&marker);
        if data_dir.exists() {
            std::fs::remove_dir_all(&data_dir)
                .with_context(|| format!("remove {}", data_dir.display()))?;
        }
        std::fs::create_dir_all(&data_dir)?;
        let t = Instant::now();
        let total = spec.workload.load_records(&spec.shape);
        if total > 0 {
            let bar = bar(
                total,
                &format!("{} load {}", spec.config, tag.as_deref().unwrap_or("")),
            );
            let s = store::open(&engine, &data_dir, spec.cache_bytes, &spec.tuning, true)?;
            spec.workload
                .load(s.as_ref(), &spec.shape, &|n| bar.set_position(n))?;
            drop(s);
            bar.finish_and_clear();
        }
        load_seconds = t.elapsed().as_secs_f64();
        if let Some(tag) = &tag {
            std::fs::write(&marker, tag)?;
        }
    }
    Ok((engine, data_dir, load_seconds))
}

fn run_measured(spec: &ChildSpec, engine: &Engine, data_dir: &Path) -> Result<RunReport> {
    let load_seconds = 0.0;
    // Every run starts with the data out of the OS page cache.
    sys::evict_page_cache(data_dir);
    let opened = Instant::now();
    let s = store::open(engine, data_dir, spec.cache_bytes, &spec.tuning, false)?;
    let open_seconds = opened.elapsed().as_secs_f64();
    let shared = Shared::new(spec.workload.clone(), spec.shape.clone(), spec.nonce);
    let secs = spec.seconds.ceil() as usize;
    let per_second: Mutex<Vec<(u64, Histogram<u64>)>> = Mutex::new(
        (0..secs)
            .map(|_| Ok((0, Histogram::new_with_bounds(1, 3_600_000_000, 2)?)))
            .collect::<Result<_, hdrhistogram::CreationError>>()?,
    );
    sys::reset_peak_rss();
    let stats0 = s.stats();
    let io0 = IoCounters::now();
    let cpu0 = Cpu::now();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(spec.seconds);
    let bar = bar(secs as u64, &format!("{} run", spec.config));
    let mut checkpointing = vec![false; secs];
    let disk = sys::DiskSampler::for_path(data_dir);
    let mut disk_at = disk.as_ref().and_then(|d| d.now());
    let mut disk_second = 0usize;
    let mut device_us: Vec<u64> = Vec::with_capacity(secs);
    let probe = sys::DeviceProbe::start(data_dir, start, secs);
    let results: Vec<Result<(u64, Histogram<u64>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..spec.clients)
            .map(|id| {
                let (store, shared, per_second) = (s.as_ref(), &shared, &per_second);
                scope.spawn(move || -> Result<(u64, Histogram<u64>)> {
                    let mut client = Client::new(id, spec.seed);
                    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
                    let mut ops = 0u64;
                    loop {
                        let t = Instant::now();
                        if t >= deadline || shared.exhausted() {
                            break;
                        }
                        let n = shared.op(store, &mut client)?;
                        let done = Instant::now();
                        let us = (done - t).as_micros().max(1) as u64;
                        hist.saturating_record(us);
                        ops += n;
                        let sec = (done - start).as_secs() as usize;
                        let mut ps = per_second.lock().unwrap_or_else(|p| p.into_inner());
                        if let Some((count, h)) = ps.get_mut(sec) {
                            *count += n;
                            h.saturating_record(us);
                        }
                    }
                    Ok((ops, hist))
                })
            })
            .collect();
        while Instant::now() < deadline && !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(200));
            let now = start.elapsed().as_secs() as usize;
            // Seconds in which this engine was checkpointing, for the charts.
            if s.stats()["checkpoint_running"] == serde_json::Value::Bool(true) {
                if let Some(flag) = checkpointing.get_mut(now) {
                    *flag = true;
                }
            }
            // The device's time per request over the second just ended.
            if now > disk_second && device_us.len() < secs {
                if let (Some(d), Some(before)) = (&disk, disk_at) {
                    if let Some(after) = d.now() {
                        let n = after.requests.saturating_sub(before.requests);
                        let ms = after.ms.saturating_sub(before.ms);
                        device_us.push((ms * 1000).checked_div(n).unwrap_or(0));
                        disk_at = Some(after);
                    }
                }
                disk_second = now;
            }
            bar.set_position(now as u64);
            let ps = per_second.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((n, _)) = now.checked_sub(1).and_then(|i| ps.get(i)) {
                bar.set_message(format!("{n} {}/s", spec.workload.unit()));
            }
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a client panicked")))
            })
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let probe = probe.map(sys::DeviceProbe::finish).unwrap_or_default();
    let mut io = IoCounters::now().since(io0);
    io.read_bytes = io.read_bytes.saturating_sub(probe.bytes);
    io.rchar = io.rchar.saturating_sub(probe.bytes);
    let cpu = Cpu::now().since(cpu0);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
    let mut ops = 0;
    for r in results {
        let (n, h) = r?;
        ops += n;
        hist.add(&h)?;
    }
    let rss_peak = sys::proc_status_kib("VmHWM:") * 1024;
    let rss_end = sys::proc_status_kib("VmRSS:") * 1024;
    let (db_bytes, db_cached) = sys::dir_size_and_cached(data_dir);
    let engine_stats = s.stats();
    let consistency = match (&spec.workload, spec.check) {
        (Workload::Tpcb { .. }, true) => Some(workload::tpcb_consistency(s.as_ref())?),
        _ => None,
    };
    drop(s);
    let ps = per_second.into_inner().unwrap_or_else(|p| p.into_inner());
    let memory = rss_peak + db_cached;
    Ok(RunReport {
        schema: SCHEMA.into(),
        kind: "run".into(),
        workload: spec.workload.name(),
        config: spec.config.clone(),
        round: spec.round,
        clients: spec.clients,
        unit: spec.workload.unit().into(),
        cache_bytes: spec.cache_bytes,
        memory_limit_bytes: spec.memory_limit,
        load_seconds,
        open_seconds,
        seconds: elapsed,
        ops,
        ops_per_sec: ops as f64 / elapsed,
        latency: Latency {
            mean_us: hist.mean(),
            p50_us: hist.value_at_quantile(0.5),
            p99_us: hist.value_at_quantile(0.99),
            p999_us: hist.value_at_quantile(0.999),
            max_us: hist.max(),
        },
        per_second_ops: ps.iter().map(|(n, _)| *n).collect(),
        per_second_p99_us: ps.iter().map(|(_, h)| h.value_at_quantile(0.99)).collect(),
        per_second_checkpointing: checkpointing,
        per_second_max_us: ps.iter().map(|(_, h)| h.max()).collect(),
        per_second_device_us: device_us,
        per_second_probe_max_us: probe.per_second_max_us,
        rss_peak_bytes: rss_peak,
        rss_end_bytes: rss_end,
        cgroup_peak_bytes: None,
        db_bytes,
        db_cached_bytes: db_cached,
        memory_bytes: memory,
        memory_per_cache: memory as f64 / spec.cache_bytes.max(1) as f64,
        io,
        cpu,
        wait_per_op_us: report::wait_per_op(&stats0, &engine_stats, ops),
        engine_stats,
        consistency,
        error: None,
    })
}

fn bar(len: u64, prefix: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>28} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix.to_string());
    bar
}
