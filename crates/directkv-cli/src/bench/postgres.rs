//! PostgreSQL as a peer of `bench tpcb` (configuration `postgres`, also
//! `pgbench`): PostgreSQL's own `pgbench` against a scratch cluster in the
//! bench's directory, reported as a row like every other configuration's.
//!
//! - The cluster is `<dir>/postgres-tpcb-s<scale>/`, made by `initdb
//!   --data-checksums` and loaded by `pgbench -i -s <scale>` in the load
//!   child (outside the memory budget, as every engine's load), complete when
//!   `<dir>/postgres-tpcb-s<scale>.loaded` holds its tag; later runs reuse it.
//! - Server states: stopped → running ([`Server::start`], `pg_ctl -w start`)
//!   → stopped ([`Server::stop`], or the guard's drop on any error). A child
//!   never returns, by success or error, with the server running.
//! - The server listens only on a Unix socket in its data directory, with
//!   `fsync` and `synchronous_commit` on, `shared_buffers` = the run's cache
//!   and room for the clients in `max_connections`; every setting is given on
//!   the command line of each start, so a reused cluster gets the run's.
//! - Run as root, every PostgreSQL program runs as the `postgres` user
//!   (`runuser`), which owns the cluster and the log directory.
//! - Under `--memory-limit` the server's processes are in the run's memory
//!   cgroup: started by the child that joined it, and moved there by pid too.
//! - The measured run is `pgbench -n -c CLIENTS -j CORES -T SECONDS -M
//!   prepared -l`, after the vacuum of branches and tellers that pgbench does
//!   itself without `-n`; its truncation of the history is left out so the
//!   TPC-B check (balances sum to the history's deltas) holds on a reused
//!   cluster.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};

use super::pgbench::{self, LogFigures, Printed};
use super::report::RunReport;
use super::sys::{self, Cpu, MemCgroup, ProbeResult};
use super::workload::Consistency;

/// The configuration's name.
pub const CONFIG: &str = "postgres";
/// Another name `--compare` accepts for it.
const ALIAS: &str = "pgbench";
/// Where Debian and Ubuntu install PostgreSQL 15's programs.
const BIN_DIR: &str = "/usr/lib/postgresql/15/bin";
/// Names the one directory to take PostgreSQL's programs from, instead of
/// [`BIN_DIR`] and then `PATH`.
pub const BIN_DIR_ENV: &str = "DIRECTKV_POSTGRES_BIN";
/// The programs the peer runs.
const TOOLS: [&str; 4] = ["initdb", "pg_ctl", "pgbench", "psql"];
/// The user that owns the cluster when the bench runs as root.
const SERVER_USER: &str = "postgres";
/// Connections beyond the clients: pgbench's own, psql, spare.
const CONNECTIONS_SPARE: u64 = 5;
/// Longest Unix socket path (`sun_path` holds 108 bytes with the NUL).
const SOCKET_PATH_MAX: usize = 107;
/// How often the server's memory is sampled during a run.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(200);
/// How long past its `-T` a pgbench may take before it is killed.
const OVERRUN_MAX: Duration = Duration::from_secs(120);
/// Most processes of one server (postmaster, its helpers, one per client).
const SERVER_PROCESSES_MAX: usize = 4096;

/// `CONFIG` if `name` names the PostgreSQL peer.
pub fn canonical(name: &str) -> Option<&'static str> {
    (name == CONFIG || name == ALIAS).then_some(CONFIG)
}

/// The directory holding PostgreSQL's programs: the one [`BIN_DIR_ENV`]
/// names, else [`BIN_DIR`], else the first directory on `PATH` that has
/// them all. The error says what is missing.
pub fn find_binaries() -> Result<PathBuf> {
    let has_all = |d: &Path| TOOLS.iter().all(|t| d.join(t).is_file());
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV).map(PathBuf::from) {
        if !has_all(&dir) {
            bail!(
                "PostgreSQL's {} are not in {} ({BIN_DIR_ENV})",
                TOOLS.join(", "),
                dir.display()
            );
        }
        return Ok(dir);
    }
    let mut dirs = vec![PathBuf::from(BIN_DIR)];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter().find(|d| has_all(d)).with_context(|| {
        format!(
            "PostgreSQL's {} are neither in {BIN_DIR} nor on PATH",
            TOOLS.join(", ")
        )
    })
}

/// What one run of the peer is told.
pub struct PgRun<'a> {
    /// The bench's directory (`--dir`).
    pub dir: &'a Path,
    /// TPC-B scale.
    pub scale: u64,
    /// pgbench clients.
    pub clients: u64,
    /// Seconds of the run (`-T`, rounded up).
    pub seconds: f64,
    /// `shared_buffers`, bytes.
    pub cache_bytes: u64,
    /// Whether to run the TPC-B check after the run.
    pub check: bool,
    /// The run's memory cgroup, if it has a budget.
    pub cgroup: Option<&'a Path>,
}

/// The owner of the cluster, when it is not the bench's own user.
struct User {
    name: String,
    uid: u32,
    gid: u32,
}

/// PostgreSQL's programs, run as the cluster's owner.
struct Programs {
    bin_dir: PathBuf,
    user: Option<User>,
}

impl Programs {
    fn new() -> Result<Programs> {
        let bin_dir = find_binaries()?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let user = if root {
            Some(user_ids(SERVER_USER)?)
        } else {
            None
        };
        Ok(Programs { bin_dir, user })
    }

    /// A command running `tool`, as the cluster's owner, from `/` (the
    /// owner may not be allowed into the bench's working directory).
    fn command(&self, tool: &str) -> Command {
        assert!(
            TOOLS.contains(&tool),
            "{tool} is one of the peer's programs"
        );
        let path = self.bin_dir.join(tool);
        let mut cmd = match &self.user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", &u.name, "--"]).arg(path);
                c
            }
            None => Command::new(path),
        };
        cmd.current_dir("/").stdin(Stdio::null());
        cmd
    }

    /// Runs `tool` to its end; its standard output, or an error with the end
    /// of what it wrote to standard error.
    fn run<S: AsRef<OsStr>>(&self, tool: &str, args: &[S]) -> Result<String> {
        let out = self
            .command(tool)
            .args(args)
            .output()
            .with_context(|| format!("start {tool}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(8).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!("{tool} failed ({}): {}", out.status, tail.join(" / "));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Makes `path` (just created by this process) the cluster owner's.
    fn give(&self, path: &Path) -> Result<()> {
        match &self.user {
            Some(u) => std::os::unix::fs::chown(path, Some(u.uid), Some(u.gid))
                .with_context(|| format!("give {} to {}", path.display(), u.name)),
            None => Ok(()),
        }
    }
}

/// The user and group ids of `name`.
fn user_ids(name: &str) -> Result<User> {
    let c_name = std::ffi::CString::new(name).context("a user name has no NUL")?;
    // SAFETY: `c_name` is NUL-terminated and outlives the call; getpwnam
    // returns null or a record in static storage, read at once below; no
    // other thread of this process calls a getpw* function that could reuse it.
    let pw = unsafe { libc::getpwnam(c_name.as_ptr()) };
    if pw.is_null() {
        bail!("running as root, PostgreSQL needs the user {name:?}, and there is none");
    }
    // SAFETY: non-null, so it points to a valid passwd record (see above).
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    assert!(uid != 0, "the cluster's owner is not root");
    Ok(User {
        name: name.to_string(),
        uid,
        gid,
    })
}

/// The cluster's directory for `scale` under the bench's `dir`, absolute.
fn cluster_dir(dir: &Path, scale: u64) -> Result<(PathBuf, String)> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("find {}", dir.display()))?;
    let tag = format!("tpcb-s{scale}");
    Ok((dir.join(format!("{CONFIG}-{tag}")), tag))
}

/// A running server of the cluster; stopped by [`Server::stop`] or on drop.
struct Server<'a> {
    programs: &'a Programs,
    data_dir: PathBuf,
    running: bool,
}

impl<'a> Server<'a> {
    /// Starts the cluster in `data_dir` for `clients` with `cache_bytes` of
    /// shared buffers, and waits until it accepts connections.
    fn start(
        programs: &'a Programs,
        data_dir: &Path,
        cache_bytes: u64,
        clients: u64,
    ) -> Result<Server<'a>> {
        let socket = data_dir.join(".s.PGSQL.5432");
        if socket.as_os_str().len() > SOCKET_PATH_MAX {
            bail!(
                "the server's socket {} is longer than {SOCKET_PATH_MAX} bytes: use a shorter --dir",
                socket.display()
            );
        }
        let dir = data_dir.to_str().filter(|d| !d.contains('\''));
        let Some(dir) = dir else {
            bail!("{} cannot be quoted for pg_ctl", data_dir.display());
        };
        let options = format!(
            "-c listen_addresses='' -c unix_socket_directories='{dir}' -c port=5432 \
             -c shared_buffers={}kB -c max_connections={} -c fsync=on \
             -c synchronous_commit=on -c full_page_writes=on",
            (cache_bytes / 1024).max(128),
            clients + CONNECTIONS_SPARE
        );
        // The guard exists before the start: a start that fails half way
        // (a timeout) still gets its stop.
        let server = Server {
            programs,
            data_dir: data_dir.to_path_buf(),
            running: true,
        };
        let log = data_dir.join("server.log");
        let args = [OsStr::new("-w"), "-D".as_ref(), data_dir.as_os_str()];
        let args = [&args[..], &["-l".as_ref(), log.as_os_str(), "-o".as_ref()]].concat();
        let args = [&args[..], &[options.as_ref(), "start".as_ref()]].concat();
        programs.run("pg_ctl", &args)?;
        Ok(server)
    }

    /// Stops the server (`fast`: clients are disconnected, then a shutdown
    /// checkpoint) and waits until it is down.
    fn stop(mut self) -> Result<()> {
        self.running = false;
        self.pg_ctl_stop()
    }

    fn pg_ctl_stop(&self) -> Result<()> {
        let d = self.data_dir.as_os_str();
        let args = [
            OsStr::new("-w"),
            "-D".as_ref(),
            d,
            "-m".as_ref(),
            "fast".as_ref(),
        ];
        self.programs
            .run("pg_ctl", &[&args[..], &["stop".as_ref()]].concat())?;
        Ok(())
    }

    /// Options that connect a client program to this server.
    fn connection(&self) -> Vec<&OsStr> {
        vec![
            "-h".as_ref(),
            self.data_dir.as_os_str(),
            "-U".as_ref(),
            SERVER_USER.as_ref(),
        ]
    }

    /// The postmaster's pid (first line of `postmaster.pid`) and its
    /// children's.
    fn pids(&self) -> Result<Vec<u32>> {
        let file = self.data_dir.join("postmaster.pid");
        let text = fs::read_to_string(&file).with_context(|| format!("read {}", file.display()))?;
        let postmaster: u32 = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .with_context(|| format!("no pid in {}", file.display()))?;
        let mut pids = vec![postmaster];
        for entry in fs::read_dir("/proc").context("read /proc")?.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if parent_pid(pid) == Some(postmaster) && pids.len() < SERVER_PROCESSES_MAX {
                pids.push(pid);
            }
        }
        Ok(pids)
    }

    /// Runs one SQL statement with psql; its unaligned output.
    fn sql(&self, statement: &str) -> Result<String> {
        let mut args = self.connection();
        args.extend(["-X", "-q", "-A", "-t", "-F", " ", "-v", "ON_ERROR_STOP=1"].map(OsStr::new));
        args.extend(["-d", "postgres", "-c", statement].map(OsStr::new));
        self.programs.run("psql", &args)
    }
}

impl Drop for Server<'_> {
    fn drop(&mut self) {
        if self.running {
            if let Err(e) = self.pg_ctl_stop() {
                eprintln!(
                    "stopping the PostgreSQL server in {}: {e:#}",
                    self.data_dir.display()
                );
            }
        }
    }
}

/// The load child: makes and loads the cluster unless a complete one for
/// this scale is there (or `fresh`); returns the seconds it took.
pub fn load(r: &PgRun, fresh: bool) -> Result<f64> {
    let (data_dir, tag) = cluster_dir(r.dir, r.scale)?;
    let marker = data_dir.with_extension("loaded");
    let loaded = !fresh && fs::read_to_string(&marker).is_ok_and(|t| t.trim() == tag);
    if loaded && data_dir.join("PG_VERSION").is_file() {
        return Ok(0.0);
    }
    let programs = Programs::new()?;
    let t = Instant::now();
    let _ = fs::remove_file(&marker);
    if data_dir.exists() {
        fs::remove_dir_all(&data_dir).with_context(|| format!("remove {}", data_dir.display()))?;
    }
    fs::create_dir(&data_dir).with_context(|| format!("create {}", data_dir.display()))?;
    programs.give(&data_dir)?;
    let d = data_dir.as_os_str();
    let initdb = [
        OsStr::new("--data-checksums"),
        "-D".as_ref(),
        d,
        "-U".as_ref(),
    ];
    let initdb = [
        &initdb[..],
        &[SERVER_USER.as_ref(), "-A".as_ref(), "trust".as_ref()],
    ]
    .concat();
    programs.run("initdb", &initdb).with_context(|| {
        format!(
            "initdb in {} (the {SERVER_USER} user must be able to reach it)",
            data_dir.display()
        )
    })?;
    let server = Server::start(&programs, &data_dir, r.cache_bytes, r.clients)?;
    let mut args = server.connection();
    let scale = r.scale.to_string();
    args.extend(["-i", "-q", "-s", &scale, "postgres"].map(OsStr::new));
    programs.run("pgbench", &args)?;
    server.stop()?;
    fs::write(&marker, &tag).with_context(|| format!("write {}", marker.display()))?;
    Ok(t.elapsed().as_secs_f64())
}

/// What the measured pgbench and the watch beside it saw.
struct Driven {
    printed: Printed,
    figures: LogFigures,
    watch: ServerWatch,
    /// pgbench's own CPU time (the clients' side).
    client_cpu: Cpu,
    probe: ProbeResult,
    seconds: u64,
}

/// The measuring child: starts the loaded cluster cold (inside the run's
/// cgroup), runs pgbench, checks, stops the server; the run's row.
pub fn measure(r: &PgRun) -> Result<RunReport> {
    let programs = Programs::new()?;
    let (data_dir, _) = cluster_dir(r.dir, r.scale)?;
    if !data_dir.join("PG_VERSION").is_file() {
        bail!("no loaded PostgreSQL cluster in {}", data_dir.display());
    }
    let log_dir = fresh_log_dir(&programs, r.dir)?;
    // Every run starts with the data out of the OS page cache.
    sys::evict_page_cache(&data_dir);
    let opened = Instant::now();
    let server = Server::start(&programs, &data_dir, r.cache_bytes, r.clients)?;
    let open_seconds = opened.elapsed().as_secs_f64();
    if let Some(cgroup) = r.cgroup {
        for pid in server.pids()? {
            MemCgroup::add(cgroup, pid)?;
        }
    }
    // One statement per call: psql runs a -c string as one transaction,
    // and VACUUM cannot run inside one.
    server.sql("VACUUM pgbench_branches")?;
    server.sql("VACUUM pgbench_tellers")?;
    let driven = drive(r, &server, &log_dir)?;
    let (db_bytes, db_cached_bytes) = sys::dir_size_and_cached(&data_dir);
    let consistency = if r.check {
        Some(consistency(&server)?)
    } else {
        None
    };
    server.stop()?;
    Ok(report(
        r,
        driven,
        open_seconds,
        (db_bytes, db_cached_bytes),
        consistency,
    ))
}

/// The log directory of the measured run, `<dir>/postgres-run/`: emptied,
/// and the cluster owner's (pgbench writes its logs there).
fn fresh_log_dir(programs: &Programs, dir: &Path) -> Result<PathBuf> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("find {}", dir.display()))?
        .join(format!("{CONFIG}-run"));
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("remove {}", dir.display()))?;
    }
    fs::create_dir(&dir).with_context(|| format!("create {}", dir.display()))?;
    programs.give(&dir)?;
    Ok(dir)
}

/// Runs the measured pgbench, sampling the server's memory meanwhile, with
/// the device probe beside it; reads its summary and its log.
fn drive(r: &PgRun, server: &Server, log_dir: &Path) -> Result<Driven> {
    let seconds = (r.seconds.ceil() as u64).max(1);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let jobs = cores.min(r.clients).max(1);
    let prefix = log_dir.join("pgbench_log");
    let mut args = server.connection();
    let (c, j, t) = (r.clients.to_string(), jobs.to_string(), seconds.to_string());
    let log_prefix = format!("--log-prefix={}", prefix.display());
    args.extend(["-n", "-c", &c, "-j", &j, "-T", &t, "-M", "prepared", "-l"].map(OsStr::new));
    args.extend([log_prefix.as_str(), "postgres"].map(OsStr::new));
    let stdout_path = log_dir.join("pgbench.out");
    let stdout = fs::File::create(&stdout_path).context("create pgbench's output file")?;
    let stderr = stdout.try_clone().context("pgbench's output file")?;
    let start = Instant::now();
    let start_us = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let probe = sys::DeviceProbe::start(&server.data_dir, start, seconds as usize);
    let mut watch = ServerWatch::start(&server.pids()?);
    let children_cpu = Cpu::children();
    let mut child = server
        .programs
        .command("pgbench")
        .args(&args)
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .context("start pgbench")?;
    let deadline = start + Duration::from_secs(seconds) + OVERRUN_MAX;
    let status = loop {
        if let Some(status) = child.try_wait().context("wait for pgbench")? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("pgbench ran {OVERRUN_MAX:?} past its {seconds} s; killed");
        }
        watch_sample(&mut watch, server);
        std::thread::sleep(SAMPLE_INTERVAL);
    };
    watch_sample(&mut watch, server);
    let probe = probe.map(sys::DeviceProbe::finish).unwrap_or_default();
    let output = fs::read_to_string(&stdout_path).context("read pgbench's output")?;
    if !status.success() {
        bail!("pgbench failed ({status}): {}", output.trim());
    }
    Ok(Driven {
        printed: pgbench::parse_printed(&output)?,
        figures: pgbench::read_logs(log_dir, "pgbench_log", start_us, seconds as usize)?,
        watch,
        client_cpu: Cpu::children().since(children_cpu),
        probe,
        seconds,
    })
}

/// Samples the server's processes; nothing where its pids cannot be read
/// (a server that died makes pgbench fail, which says more, and an error
/// here would leave pgbench running).
fn watch_sample(watch: &mut ServerWatch, server: &Server) {
    if let Ok(pids) = server.pids() {
        watch.sample(&pids);
    }
}

/// The TPC-B check on PostgreSQL's tables: the account, teller and branch
/// balances each sum to the history's deltas.
fn consistency(server: &Server) -> Result<Consistency> {
    // One process scans: parallel workers would each need memory of their
    // own inside the run's budget, after the run.
    let text = server.sql(
        "SET max_parallel_workers_per_gather = 0; \
         SELECT (SELECT coalesce(sum(abalance), 0) FROM pgbench_accounts), \
                (SELECT coalesce(sum(tbalance), 0) FROM pgbench_tellers), \
                (SELECT coalesce(sum(bbalance), 0) FROM pgbench_branches), \
                (SELECT coalesce(sum(delta), 0) FROM pgbench_history), \
                (SELECT count(*) FROM pgbench_history)",
    )?;
    let numbers: Vec<i64> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<std::result::Result<_, _>>()
        .with_context(|| format!("the TPC-B check's sums: {text:?}"))?;
    let [accounts, tellers, branches, history, records] = numbers[..] else {
        bail!("the TPC-B check gave {text:?}, not five numbers");
    };
    Ok(Consistency {
        accounts,
        tellers,
        branches,
        history,
        history_records: records.max(0) as u64,
        ok: accounts == history && tellers == history && branches == history,
    })
}

/// The run's row, as other configurations' rows are made, the process
/// figures being the server's: RSS is its processes' summed PSS (shared
/// buffers counted once), `io` theirs, `cpu` theirs and pgbench's.
fn report(
    r: &PgRun,
    d: Driven,
    open_seconds: f64,
    (db_bytes, db_cached_bytes): (u64, u64),
    consistency: Option<Consistency>,
) -> RunReport {
    let per_second = &d.figures.per_second;
    let (io, server_cpu) = d.watch.totals();
    let rss_peak_bytes = d.watch.pss_peak_bytes;
    let memory_bytes = rss_peak_bytes + db_cached_bytes;
    let engine_stats = serde_json::json!({
        "pgbench_tps": d.printed.tps,
        "pgbench_transactions": d.printed.transactions,
        "pgbench_failed_transactions": d.printed.failed,
        "log_transactions": d.figures.transactions,
        "log_files": d.figures.files,
        "shared_buffers_bytes": r.cache_bytes,
    });
    RunReport {
        clients: r.clients,
        unit: "transactions".into(),
        cache_bytes: r.cache_bytes,
        load_seconds: 0.0,
        open_seconds,
        seconds: d.seconds as f64,
        ops: d.figures.transactions,
        ops_per_sec: d.printed.tps,
        latency: d.figures.latency.latency(),
        per_second_ops: per_second.iter().map(|(n, _)| *n).collect(),
        per_second_p99_us: per_second
            .iter()
            .map(|(_, h)| h.quantile_us(0.99))
            .collect(),
        per_second_checkpointing: vec![false; per_second.len()],
        per_second_max_us: per_second.iter().map(|(_, h)| h.max_us()).collect(),
        per_second_device_us: Vec::new(),
        per_second_probe_max_us: d.probe.per_second_max_us,
        rss_peak_bytes,
        rss_end_bytes: d.watch.pss_end_bytes,
        db_bytes,
        db_cached_bytes,
        memory_bytes,
        memory_per_cache: memory_bytes as f64 / r.cache_bytes.max(1) as f64,
        io,
        cpu: server_cpu.plus(d.client_cpu),
        engine_stats,
        wait_per_op_us: Default::default(),
        txn_per_sec: Default::default(),
        consistency,
        snapshot_hold: None,
        backups: None,
    }
}

mod watch;
use watch::{parent_pid, ServerWatch};
