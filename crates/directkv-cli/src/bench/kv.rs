//! The key-value workloads (tpcb, ycsb, fill, read, scan) as a bench the
//! driver runs: per configuration a child loads the data set (or reuses an
//! earlier load with the same parameters), then a second child, inside the
//! memory budget, opens the engine cold, runs the clients for `--seconds`
//! and measures.
//!
//! - A data set lives in `<dir>/<engine family>-<tag>/`, complete when
//!   `<dir>/<engine family>-<tag>.loaded` holds the tag.
//! - Every measured run starts with the data set out of the OS page cache.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::driver::{self, Run, Runs, Spec};
use super::latency::LatencyHistogram;
use super::output::{Line, Writer};
use super::postgres;
use super::report::{self, RunReport};
use super::store::{self, Engine, Store};
use super::sys::{self, Cpu, IoCounters, ProbeResult};
use super::workload::{self, Client, Shape, Shared, Workload};

/// Default directory of the data sets.
pub const DIR_DEFAULT: &str = "directkv-bench";
/// Default client threads.
pub const CLIENTS_DEFAULT: u64 = 8;
/// Default seconds per configuration.
pub const SECONDS_DEFAULT: f64 = 20.0;
/// Default records of ycsb, read, scan and fill.
pub const KEYS_DEFAULT: u64 = 1_000_000;
/// Default bytes per value.
pub const VALUE_SIZE_DEFAULT: usize = 100;
/// Default seed of the clients' random choices.
pub const SEED_DEFAULT: u64 = 42;
/// How often the watcher samples a run (checkpointing, device, progress).
const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// The parser of a `--value-size`: bytes from [`VALUE_SIZE_MIN`] to
/// [`VALUE_SIZE_MAX`].
///
/// [`VALUE_SIZE_MIN`]: super::args::VALUE_SIZE_MIN
/// [`VALUE_SIZE_MAX`]: super::args::VALUE_SIZE_MAX
pub fn value_size() -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync + 'static {
    super::args::whole_in(super::args::VALUE_SIZE_MIN, super::args::VALUE_SIZE_MAX)
}

/// Options every key-value workload takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Directory for the benchmark databases (kept and reused by later runs
    /// with the same data set; `--fresh` reloads).
    #[arg(long, default_value = DIR_DEFAULT)]
    pub dir: PathBuf,
    /// Client threads (at least 1); several, comma-separated (1,8,32,64),
    /// sweep: every configuration runs with each, named CONFIG@CLIENTS,
    /// and a table of throughput by clients follows.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "8",
        value_parser = super::args::whole_in::<u64>(1, super::args::THREADS_MAX)
    )]
    pub clients: Vec<u64>,
    /// Seconds each configuration runs (more than 0).
    #[arg(long, default_value_t = SECONDS_DEFAULT, value_parser = super::args::parse_seconds)]
    pub seconds: f64,
    /// Records for ycsb, read and scan (loaded first) and fill (inserted),
    /// 1 to 10^10.
    #[arg(
        long,
        default_value_t = KEYS_DEFAULT,
        value_parser = super::args::whole_in::<u64>(1, super::args::KEYS_MAX)
    )]
    pub keys: u64,
    /// Bytes per value (per account, teller and branch row in tpcb), 8 to
    /// 64 MiB.
    #[arg(long, default_value_t = VALUE_SIZE_DEFAULT, value_parser = value_size())]
    pub value_size: usize,
    /// Engine cache size (default: 3/4 of --memory-limit, else 128M).
    #[arg(long, value_parser = super::args::parse_positive_bytes)]
    pub cache: Option<u64>,
    /// Seed of the clients' random choices.
    #[arg(long, default_value_t = SEED_DEFAULT)]
    pub seed: u64,
    /// Configurations, run side by side, the first is the baseline: direct or
    /// buffered, then optionally the suffixes -no-readahead, -fifo, one of
    /// -uring/-threads/-no-aio, and -whole-images (in that order), then
    /// optionally /METHOD, a WAL sync method (e.g. direct/fdatasync); with
    /// the peers feature also rocksdb, rocksdb-direct, rocksdb-tuned (sized
    /// to fit a memory budget), lmdb, sqlite; for tpcb also postgres (or
    /// pgbench): PostgreSQL's own pgbench, where PostgreSQL is installed
    /// (skipped, saying so, where not).
    #[arg(long, value_delimiter = ',', default_value = "direct")]
    pub compare: Vec<String>,
    /// WAL sync methods to compare with direct I/O (each adds a configuration
    /// `direct/<method>`), e.g. fdatasync,open_datasync+direct.
    #[arg(long, value_delimiter = ',')]
    pub compare_sync: Vec<String>,
    #[command(flatten)]
    pub runs: Runs,
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
    /// This engine's page size when it creates the data set: 4k, 8k or 16k
    /// (default: the engine's).
    #[arg(long, value_parser = crate::size::parse_page_size)]
    pub page_size: Option<u32>,
    /// This engine's checkpoint distance in WAL bytes (default: the engine's).
    #[arg(long, value_parser = super::args::parse_positive_bytes)]
    pub checkpoint_wal: Option<u64>,
    /// Hold one read transaction open through each run and report what its
    /// snapshot cost (the version store's peak) and whether it was kept.
    #[arg(long)]
    pub hold_snapshot: bool,
}

impl Default for Common {
    /// The options as the command line's defaults give them.
    fn default() -> Common {
        Common {
            dir: PathBuf::from(DIR_DEFAULT),
            clients: vec![CLIENTS_DEFAULT],
            seconds: SECONDS_DEFAULT,
            keys: KEYS_DEFAULT,
            value_size: VALUE_SIZE_DEFAULT,
            cache: None,
            seed: SEED_DEFAULT,
            compare: vec!["direct".into()],
            compare_sync: Vec::new(),
            runs: Runs {
                rounds: 1,
                memory_limit: None,
                json: false,
            },
            plot: None,
            fresh: false,
            no_check: false,
            page_size: None,
            checkpoint_wal: None,
            hold_snapshot: false,
        }
    }
}

/// The tpcb scale whose data is about `ratio` times `limit` bytes.
pub fn tpcb_scale_for(limit: u64, value_size: usize, ratio: f64) -> u64 {
    // An account row costs its key, value and slot in packed leaves.
    let per_scale = 100_000.0 * (value_size as f64 + 5.0 + 9.0) * 1.04;
    ((limit as f64 * ratio / per_scale).ceil() as u64).max(1)
}

/// A key-value workload in every configuration: what each child is told.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KvSpec {
    workload: Workload,
    shape: Shape,
    configs: Vec<String>,
    /// Client threads, one count or a sweep (see [`sweep`]).
    clients: Vec<u64>,
    seconds: f64,
    seed: u64,
    cache_bytes: u64,
    dir: PathBuf,
    fresh: bool,
    check: bool,
    tuning: store::Tuning,
    plot: Option<PathBuf>,
    #[serde(default)]
    hold_snapshot: bool,
}

/// Runs `workload` in every configuration of `common` and reports.
pub fn run(workload: Workload, shape: Shape, common: &Common) -> Result<()> {
    let spec = KvSpec::new(workload, shape, common)?;
    if spec.configs.is_empty() {
        println!("nothing to run: every configuration asked for was skipped");
        return Ok(());
    }
    std::fs::create_dir_all(&spec.dir).with_context(|| format!("create {}", spec.dir.display()))?;
    if !common.runs.json {
        println!("{}", spec.describe(common.runs.memory_limit));
    }
    driver::run(&spec, &common.runs)
}

impl KvSpec {
    /// The spec `common` asks for; the error says which option is wrong.
    fn new(workload: Workload, shape: Shape, common: &Common) -> Result<KvSpec> {
        let mut configs = common.compare.clone();
        configs.extend(common.compare_sync.iter().map(|s| format!("direct/{s}")));
        configs.dedup();
        if configs.is_empty() || configs.iter().any(String::is_empty) {
            bail!("--compare needs at least one configuration, and no empty names");
        }
        let configs = sweep(runnable(&workload, configs)?, &common.clients);
        if common.clients.is_empty()
            || common.clients.contains(&0)
            || common.seconds.is_nan()
            || common.seconds <= 0.0
            || shape.keys == 0
        {
            bail!("--clients, --seconds and --keys must be positive");
        }
        let limit = common.runs.memory_limit;
        let cache_bytes = common
            .cache
            .unwrap_or_else(|| limit.map_or(128 << 20, |l| l / 4 * 3));
        if cache_bytes == 0 {
            bail!("--cache must be positive");
        }
        if let Some(limit) = limit.filter(|&l| cache_bytes >= l) {
            bail!(
                "--cache ({cache_bytes} bytes) must be below --memory-limit ({limit} bytes): \
                 the engine needs room for its WAL buffers and the process itself"
            );
        }
        Ok(KvSpec {
            workload,
            shape,
            configs,
            clients: common.clients.clone(),
            seconds: common.seconds,
            seed: common.seed,
            cache_bytes,
            dir: common.dir.clone(),
            fresh: common.fresh,
            check: !common.no_check,
            tuning: store::Tuning {
                page_bytes: common.page_size,
                checkpoint_wal_bytes: common.checkpoint_wal,
            },
            plot: common.plot.clone(),
            hold_snapshot: common.hold_snapshot,
        })
    }

    fn describe(&self, memory_limit: Option<u64>) -> String {
        let data = self
            .workload
            .data_tag(&self.shape)
            .unwrap_or_else(|| "empty".into());
        format!(
            "{}: {} clients, {} s per run, data set {data}, cache {} MiB{}, configurations {}",
            self.workload.name(),
            self.clients
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(","),
            self.seconds,
            self.cache_bytes >> 20,
            memory_limit.map_or(String::new(), |l| format!(", memory limit {} MiB", l >> 20)),
            self.configs.join(", ")
        )
    }

    /// Loads the data set unless a load with the same parameters is there;
    /// returns its directory and the seconds the load took.
    fn data_set(&self, engine: &Engine, config: &str, fresh: bool) -> Result<(PathBuf, f64)> {
        let tag = self
            .workload
            .data_tag(&self.shape)
            .map(|t| match self.tuning.page_bytes {
                Some(p) if engine.family() == "directkv" => format!("{t}-p{p}"),
                _ => t,
            });
        let name = format!(
            "{}-{}",
            engine.data_name(),
            tag.as_deref().unwrap_or("fill")
        );
        let data_dir = self.dir.join(&name);
        let marker = self.dir.join(format!("{name}.loaded"));
        let loaded = tag.is_some()
            && !fresh
            && std::fs::read_to_string(&marker).is_ok_and(|t| Some(t.trim()) == tag.as_deref());
        if loaded {
            return Ok((data_dir, 0.0));
        }
        let _ = std::fs::remove_file(&marker);
        if data_dir.exists() {
            std::fs::remove_dir_all(&data_dir)
                .with_context(|| format!("remove {}", data_dir.display()))?;
        }
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("create {}", data_dir.display()))?;
        let t = Instant::now();
        let total = self.workload.load_records(&self.shape);
        if total > 0 {
            let bar = bar(
                total,
                &format!("{config} load {}", tag.as_deref().unwrap_or("")),
            );
            let s = store::open(engine, &data_dir, self.cache_bytes, &self.tuning, true)?;
            self.workload
                .load(s.as_ref(), &self.shape, &|n| bar.set_position(n))?;
            drop(s);
            bar.finish_and_clear();
        }
        let load_seconds = t.elapsed().as_secs_f64();
        if let Some(tag) = &tag {
            std::fs::write(&marker, tag).with_context(|| format!("write {}", marker.display()))?;
        }
        Ok((data_dir, load_seconds))
    }
}

/// The configurations as they run: PostgreSQL's two names made one, and
/// PostgreSQL left out (saying why) where its programs are not installed;
/// the error names a configuration this build cannot run.
fn runnable(workload: &Workload, configs: Vec<String>) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::with_capacity(configs.len());
    for c in configs {
        let name = match postgres::canonical(&c) {
            Some(pg) => {
                if !matches!(workload, Workload::Tpcb { .. }) {
                    bail!("{c} runs only tpcb (it is PostgreSQL's pgbench)");
                }
                if let Err(e) = postgres::find_binaries() {
                    eprintln!("skipping {c}: {e:#}");
                    continue;
                }
                pg.to_string()
            }
            None => {
                Engine::parse(&c)?.available()?;
                c
            }
        };
        if !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

/// The configurations to run: `configs` as they are for one client count;
/// for a sweep, each with every count (`CONFIG@CLIENTS`), the configurations
/// alternating within a count.
fn sweep(configs: Vec<String>, clients: &[u64]) -> Vec<String> {
    if clients.len() <= 1 {
        return configs;
    }
    clients
        .iter()
        .flat_map(|c| configs.iter().map(move |n| format!("{n}@{c}")))
        .collect()
}

/// A configuration's name without a sweep's `@CLIENTS`, and that count.
pub fn split_clients(config: &str) -> (&str, Option<u64>) {
    match config.rsplit_once('@') {
        Some((name, c)) => match c.parse() {
            Ok(c) => (name, Some(c)),
            Err(_) => (config, None),
        },
        None => (config, None),
    }
}

impl KvSpec {
    /// The client threads of a run of `config`.
    fn clients_of(&self, config: &str) -> u64 {
        let first = self.clients.first().copied();
        let c = split_clients(config).1.or(first).expect("a client count");
        assert!(c > 0, "a run has a client");
        c
    }

    /// What a run of the PostgreSQL peer is told.
    fn pg_run<'a>(&'a self, run: &Run, cgroup: Option<&'a Path>) -> Result<postgres::PgRun<'a>> {
        let Workload::Tpcb { scale } = self.workload else {
            bail!("{} runs only tpcb", postgres::CONFIG);
        };
        Ok(postgres::PgRun {
            dir: &self.dir,
            scale,
            clients: self.clients_of(&run.config),
            seconds: self.seconds,
            cache_bytes: self.cache_bytes,
            check: self.check,
            cgroup,
        })
    }
}

impl Spec for KvSpec {
    const KIND: &'static str = "kv";
    type Row = RunReport;

    fn name(&self) -> String {
        self.workload.name()
    }

    fn configs(&self) -> &[String] {
        &self.configs
    }

    fn loads(&self) -> bool {
        true
    }

    fn load(&self, run: &Run) -> Result<f64> {
        let fresh = self.fresh && run.round == 1;
        let (config, _) = split_clients(&run.config);
        if config == postgres::CONFIG {
            return postgres::load(&self.pg_run(run, None)?, fresh);
        }
        let engine = Engine::parse(config)?;
        Ok(self.data_set(&engine, config, fresh)?.1)
    }

    fn measure(&self, run: &Run) -> Result<Vec<RunReport>> {
        let (config, _) = split_clients(&run.config);
        if config == postgres::CONFIG {
            let mut report = postgres::measure(&self.pg_run(run, run.cgroup.as_deref())?)?;
            report.load_seconds = run.load_seconds;
            return Ok(vec![report]);
        }
        let engine = Engine::parse(config)?;
        let (data_dir, _) = self.data_set(&engine, config, false)?;
        let mut report = self.run_measured(run, &engine, &data_dir)?;
        report.load_seconds = run.load_seconds;
        Ok(vec![report])
    }

    fn finish(&self, lines: &[Line<RunReport>], out: Writer) -> Result<()> {
        let summary = report::summarize(&self.name(), &self.configs, lines);
        out.json_line(&summary)?;
        if !out.json() {
            report::print_waits(lines);
            report::print_summary(lines, &summary);
            if self.clients.len() > 1 {
                report::print_by_clients(lines, &self.clients);
            }
            report::print_snapshot_holds(lines);
            report::print_backups(lines);
        }
        if let Some(dir) = &self.plot {
            report::plot(dir, lines, &summary)?;
            if !out.json() {
                println!("charts written to {}", dir.display());
            }
        }
        if let Some(bad) = lines
            .iter()
            .find(|l| l.row.consistency.as_ref().is_some_and(|c| !c.ok))
        {
            bail!("the TPC-B consistency check FAILED for {}", bad.config);
        }
        Ok(())
    }
}

/// Operations and latencies in each second of a run, shared by its clients.
type PerSecond = Mutex<Vec<(u64, LatencyHistogram)>>;

/// What one run's clients, watcher and device probe saw.
struct Driven {
    clients: Vec<Result<(u64, LatencyHistogram)>>,
    snapshot_hold: Option<store::SnapshotHold>,
    backups: Option<store::BackupLoad>,
    watched: Watched,
    probe: ProbeResult,
    elapsed: f64,
}

/// The operations the clients did, and their latencies in one histogram.
fn merge_clients(clients: Vec<Result<(u64, LatencyHistogram)>>) -> Result<(u64, LatencyHistogram)> {
    let mut hist = LatencyHistogram::new()?;
    let mut ops = 0;
    for r in clients {
        let (n, h) = r?;
        ops += n;
        hist.add(&h)?;
    }
    Ok((ops, hist))
}

/// What the engine and the OS said before the run.
struct Before {
    stats: serde_json::Value,
    io: IoCounters,
    cpu: Cpu,
    open_seconds: f64,
}

impl KvSpec {
    fn run_measured(&self, run: &Run, engine: &Engine, data_dir: &Path) -> Result<RunReport> {
        // Every run starts with the data out of the OS page cache.
        sys::evict_page_cache(data_dir);
        let opened = Instant::now();
        let s = store::open(engine, data_dir, self.cache_bytes, &self.tuning, false)?;
        let open_seconds = opened.elapsed().as_secs_f64();
        let per_second = self.per_second()?;
        sys::reset_peak_rss();
        let before = Before {
            stats: s.stats(),
            io: IoCounters::now(),
            cpu: Cpu::now(),
            open_seconds,
        };
        let driven = self.drive(run, s.as_ref(), &per_second, data_dir)?;
        let mut io = IoCounters::now().since(before.io);
        io.read_bytes = io.read_bytes.saturating_sub(driven.probe.bytes);
        io.rchar = io.rchar.saturating_sub(driven.probe.bytes);
        let cpu = Cpu::now().since(before.cpu);
        let (ops, hist) = merge_clients(driven.clients)?;
        let rss_peak_bytes = sys::proc_status_kib("VmHWM:") * 1024;
        let rss_end_bytes = sys::proc_status_kib("VmRSS:") * 1024;
        let (db_bytes, db_cached_bytes) = sys::dir_size_and_cached(data_dir);
        let engine_stats = s.stats();
        // The check scans everything: after the memory figures are taken.
        let consistency = match (&self.workload, self.check) {
            (Workload::Tpcb { .. }, true) => Some(workload::tpcb_consistency(s.as_ref())?),
            _ => None,
        };
        drop(s);
        let per_second = per_second.into_inner().unwrap_or_else(|p| p.into_inner());
        let memory_bytes = rss_peak_bytes + db_cached_bytes;
        Ok(RunReport {
            clients: self.clients_of(&run.config),
            unit: self.workload.unit().into(),
            cache_bytes: self.cache_bytes,
            load_seconds: 0.0,
            open_seconds: before.open_seconds,
            seconds: driven.elapsed,
            ops,
            ops_per_sec: ops as f64 / driven.elapsed,
            latency: hist.latency(),
            per_second_ops: per_second.iter().map(|(n, _)| *n).collect(),
            per_second_p99_us: per_second
                .iter()
                .map(|(_, h)| h.quantile_us(0.99))
                .collect(),
            per_second_checkpointing: driven.watched.checkpointing,
            per_second_max_us: per_second.iter().map(|(_, h)| h.max_us()).collect(),
            per_second_device_us: driven.watched.device_us,
            per_second_probe_max_us: driven.probe.per_second_max_us,
            rss_peak_bytes,
            rss_end_bytes,
            db_bytes,
            db_cached_bytes,
            memory_bytes,
            memory_per_cache: memory_bytes as f64 / self.cache_bytes.max(1) as f64,
            io,
            cpu,
            wait_per_op_us: report::wait_per_op(&before.stats, &engine_stats, ops),
            txn_per_sec: report::txn_per_sec(&before.stats, &engine_stats, driven.elapsed),
            engine_stats,
            consistency,
            snapshot_hold: driven.snapshot_hold,
            backups: driven.backups,
        })
    }

    /// Runs the clients until the deadline (or a fill's last key), watching
    /// the engine and the device meanwhile.
    fn drive(
        &self,
        run: &Run,
        store: &dyn Store,
        per_second: &PerSecond,
        data_dir: &Path,
    ) -> Result<Driven> {
        let shared = Shared::new(self.workload.clone(), self.shape.clone(), run.nonce);
        let secs = self.seconds.ceil() as usize;
        let bar = bar(secs as u64, &format!("{} run", run.config));
        let device = DeviceSeries::new(data_dir, secs);
        let start = Instant::now();
        let deadline = start + Duration::from_secs_f64(self.seconds);
        let probe = sys::DeviceProbe::start(data_dir, start, secs);
        let done = AtomicBool::new(false);
        let (clients, watched, snapshot_hold, backups, elapsed) = std::thread::scope(|scope| {
            let holder = self
                .hold_snapshot
                .then(|| scope.spawn(|| store.hold_snapshot(&done)));
            let backer = scope.spawn(|| store.backups(&done));
            let handles: Vec<_> = (0..self.clients_of(&run.config))
                .map(|id| {
                    let (shared, client) = (&shared, Client::new(id, self.seed_of(run)));
                    scope.spawn(move || {
                        client_loop(store, shared, client, per_second, start, deadline)
                    })
                })
                .collect();
            let watch = Watch {
                store,
                per_second,
                bar: &bar,
                unit: self.workload.unit(),
                start,
                deadline,
            };
            let watched = watch.run(device, secs, &|| handles.iter().all(|h| h.is_finished()));
            done.store(true, Ordering::Release);
            let clients = handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a client panicked")))
                })
                .collect();
            // The clients' time: a backup under way finishes after it.
            let elapsed = start.elapsed().as_secs_f64();
            let backups = backer
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the backup thread panicked")));
            let hold = holder.map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the snapshot holder panicked")))
            });
            (clients, watched, hold.transpose(), backups, elapsed)
        });
        let snapshot_hold = snapshot_hold?.flatten();
        let backups = backups?;
        bar.finish_and_clear();
        let probe = probe.map(sys::DeviceProbe::finish).unwrap_or_default();
        Ok(Driven {
            clients,
            snapshot_hold,
            backups,
            watched,
            probe,
            elapsed,
        })
    }

    /// Empty per-second series for the run's seconds.
    fn per_second(&self) -> Result<PerSecond> {
        let secs = self.seconds.ceil() as usize;
        let series = (0..secs)
            .map(|_| Ok((0, LatencyHistogram::coarse()?)))
            .collect::<Result<_>>()?;
        Ok(Mutex::new(series))
    }

    /// The clients' seed in `run`: rounds differ, configurations of a round
    /// make the same choices.
    fn seed_of(&self, run: &Run) -> u64 {
        self.seed.wrapping_add(u64::from(run.round))
    }
}

/// One client: operations until the deadline; its count and latencies.
fn client_loop(
    store: &dyn Store,
    shared: &Shared,
    mut client: Client,
    per_second: &PerSecond,
    start: Instant,
    deadline: Instant,
) -> Result<(u64, LatencyHistogram)> {
    let mut hist = LatencyHistogram::new()?;
    let mut ops = 0u64;
    loop {
        let t = Instant::now();
        if t >= deadline || shared.exhausted() {
            break;
        }
        let n = shared.op(store, &mut client)?;
        let done = Instant::now();
        let us = (done - t).as_micros().max(1) as u64;
        hist.record_us(us);
        ops += n;
        let sec = (done - start).as_secs() as usize;
        let mut ps = per_second.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((count, h)) = ps.get_mut(sec) {
            *count += n;
            h.record_us(us);
        }
    }
    Ok((ops, hist))
}

mod watch;
use watch::{bar, DeviceSeries, Watch, Watched};
