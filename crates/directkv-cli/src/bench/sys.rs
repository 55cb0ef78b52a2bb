//! What the operating system says about a benchmark process: resident memory,
//! page-cache residency of files (mincore), I/O and CPU counters, and memory
//! cgroups that put a budget on a run's memory, page cache included.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// A scratch directory `prefix…` inside `dir`, which is created if missing;
/// removed when dropped.
pub fn scratch_dir(dir: &Path, prefix: &str) -> Result<tempfile::TempDir> {
    fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(dir)
        .with_context(|| format!("scratch directory in {}", dir.display()))
}

/// A field of `/proc/self/status` in KiB (`VmRSS:`, `VmHWM:`), 0 if absent.
pub fn proc_status_kib(field: &str) -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets the peak resident set size (`VmHWM`) to the current one, so a peak
/// read later covers only what followed.
pub fn reset_peak_rss() {
    // Writing 5 to clear_refs resets the peak RSS (Linux 4.0 and later); where
    // it is refused the peak simply covers the whole process.
    let _ = fs::write("/proc/self/clear_refs", "5");
}

/// Bytes of `path` resident in the page cache.
pub fn cached_bytes(path: &Path) -> Result<u64> {
    use std::os::fd::AsRawFd;
    let file = fs::File::open(path)?;
    let len = file.metadata()?.len() as usize;
    if len == 0 {
        return Ok(0);
    }
    // SAFETY: a read-only shared mapping of a file we keep open; it is only
    // passed to mincore, never read, and unmapped before return.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        bail!(
            "mmap {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    let page = 4096usize;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `addr..addr+len` is the mapping made above and `vec` has one byte
    // per page of it.
    let rc = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: unmapping exactly the mapping made above.
    unsafe { libc::munmap(addr, len) };
    if rc != 0 {
        bail!("mincore {}: {err}", path.display());
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count() as u64 * page as u64)
}

/// Every regular file under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => out.push(e.path()),
                _ => {}
            }
        }
    }
    out
}

/// Total size and page-cache-resident bytes of the files under `dir`.
pub fn dir_size_and_cached(dir: &Path) -> (u64, u64) {
    files_under(dir).iter().fold((0, 0), |(size, cached), f| {
        let len = fs::metadata(f).map(|m| m.len()).unwrap_or(0);
        (size + len, cached + cached_bytes(f).unwrap_or(0))
    })
}

/// Writes back and drops the page cache of every file under `dir`, so a run
/// starts cold whatever ran before it.
pub fn evict_page_cache(dir: &Path) {
    use std::os::fd::AsRawFd;
    for f in files_under(dir) {
        let Ok(file) = fs::OpenOptions::new().read(true).write(true).open(&f) else {
            continue;
        };
        // Dirty pages are not dropped; write them back first.
        let _ = file.sync_data();
        // SAFETY: a valid open descriptor; fadvise only drops clean cached
        // pages of it.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// `/proc/self/io`: bytes this process caused to be read from and written to
/// storage, and bytes passed through read/write calls.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct IoCounters {
    /// Bytes read from storage (page-cache misses and direct reads).
    pub read_bytes: u64,
    /// Bytes written to storage (or dirtied in the page cache).
    pub write_bytes: u64,
    /// Bytes passed to read calls.
    pub rchar: u64,
    /// Bytes passed to write calls.
    pub wchar: u64,
}

impl IoCounters {
    /// The counters now (zeros where `/proc/self/io` is unreadable).
    pub fn now() -> IoCounters {
        Self::parse(&fs::read_to_string("/proc/self/io").unwrap_or_default())
    }

    /// Another process's counters now; `None` once it has exited (or where
    /// this process may not read them).
    pub fn of_process(pid: u32) -> Option<IoCounters> {
        fs::read_to_string(format!("/proc/{pid}/io"))
            .ok()
            .map(|t| Self::parse(&t))
    }

    /// The counters of a `/proc/<pid>/io` text (zeros for missing lines).
    fn parse(text: &str) -> IoCounters {
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        IoCounters {
            read_bytes: field("read_bytes:"),
            write_bytes: field("write_bytes:"),
            rchar: field("rchar:"),
            wchar: field("wchar:"),
        }
    }

    /// The sum of two processes' counters.
    pub fn plus(self, other: IoCounters) -> IoCounters {
        IoCounters {
            read_bytes: self.read_bytes + other.read_bytes,
            write_bytes: self.write_bytes + other.write_bytes,
            rchar: self.rchar + other.rchar,
            wchar: self.wchar + other.wchar,
        }
    }

    /// What happened since `before`.
    pub fn since(self, before: IoCounters) -> IoCounters {
        IoCounters {
            read_bytes: self.read_bytes.saturating_sub(before.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(before.write_bytes),
            rchar: self.rchar.saturating_sub(before.rchar),
            wchar: self.wchar.saturating_sub(before.wchar),
        }
    }
}

/// The block device under a path, as `/proc/diskstats` counts it:
/// requests completed and milliseconds spent on them (reads, writes and
/// cache flushes). The whole machine's traffic to that device, so a device
/// stall shows whoever caused it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskCounters {
    /// Requests completed.
    pub requests: u64,
    /// Milliseconds spent by them, summed.
    pub ms: u64,
}

/// Reads the `/proc/diskstats` counters of one device.
#[derive(Debug, Clone)]
pub struct DiskSampler {
    name: String,
}

impl DiskSampler {
    /// The sampler for the device holding `path`; `None` where it cannot be
    /// found (no `/sys`, a filesystem without a block device).
    pub fn for_path(path: &Path) -> Option<DiskSampler> {
        use std::os::unix::fs::MetadataExt;
        let dev = fs::metadata(path).ok()?.dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let link = fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
        let name = link.file_name()?.to_string_lossy().into_owned();
        let sampler = DiskSampler { name };
        sampler.now().map(|_| sampler)
    }

    /// The counters now.
    pub fn now(&self) -> Option<DiskCounters> {
        let text = fs::read_to_string("/proc/diskstats").ok()?;
        let fields: Vec<u64> = text.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            let _major = it.next()?;
            let _minor = it.next()?;
            (it.next()? == self.name).then(|| it.filter_map(|f| f.parse().ok()).collect())
        })?;
        // reads, merged, sectors, ms; writes, merged, sectors, ms; in flight,
        // io ms, weighted ms; discards (4); flushes, flush ms (Linux 5.5+).
        let at = |i: usize| fields.get(i).copied().unwrap_or(0);
        Some(DiskCounters {
            requests: at(0) + at(4) + at(15),
            ms: at(3) + at(7) + at(16),
        })
    }
}

/// CPU seconds of this process.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Cpu {
    /// User-mode seconds.
    pub user_s: f64,
    /// Kernel-mode seconds.
    pub sys_s: f64,
}

impl Cpu {
    /// CPU time used so far by every thread of this process.
    pub fn now() -> Cpu {
        Self::rusage(libc::RUSAGE_SELF)
    }

    /// CPU time used so far by this process's children that have ended and
    /// been waited for (and by theirs that they waited for).
    pub fn children() -> Cpu {
        Self::rusage(libc::RUSAGE_CHILDREN)
    }

    fn rusage(who: libc::c_int) -> Cpu {
        assert!(who == libc::RUSAGE_SELF || who == libc::RUSAGE_CHILDREN);
        // SAFETY: getrusage fills the zeroed struct we pass; `who` is one of
        // the two valid values (asserted).
        let ru = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(who, &mut ru);
            ru
        };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Cpu {
            user_s: secs(ru.ru_utime),
            sys_s: secs(ru.ru_stime),
        }
    }

    /// Another process's CPU time so far (`/proc/<pid>/stat`); `None` once
    /// it has exited.
    pub fn of_process(pid: u32) -> Option<Cpu> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // After the command's closing parenthesis: field 3 (state) on;
        // utime and stime are fields 14 and 15, in clock ticks.
        let mut after = stat[stat.rfind(')')? + 1..].split_whitespace().skip(11);
        let user: u64 = after.next()?.parse().ok()?;
        let sys: u64 = after.next()?.parse().ok()?;
        // SAFETY: sysconf has no preconditions; _SC_CLK_TCK is a valid name.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        Some(Cpu {
            user_s: user as f64 / ticks,
            sys_s: sys as f64 / ticks,
        })
    }

    /// The sum of two processes' CPU time.
    pub fn plus(self, other: Cpu) -> Cpu {
        Cpu {
            user_s: self.user_s + other.user_s,
            sys_s: self.sys_s + other.sys_s,
        }
    }

    /// What was used since `before`.
    pub fn since(self, before: Cpu) -> Cpu {
        Cpu {
            user_s: self.user_s - before.user_s,
            sys_s: self.sys_s - before.sys_s,
        }
    }
}

/// Which cgroup hierarchy holds the memory controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CgroupVersion {
    V1,
    V2,
}

/// A fresh memory cgroup whose limit covers the processes in it and the page
/// cache they fill. Removed on drop.
pub struct MemCgroup {
    path: PathBuf,
    version: CgroupVersion,
}

impl MemCgroup {
    /// Makes a memory cgroup limited to `limit` bytes beside the current
    /// process's own (v2 if the unified hierarchy has the memory controller,
    /// else v1). The error says why that is impossible here.
    pub fn create(name: &str, limit: u64) -> Result<MemCgroup> {
        let self_cgroups =
            fs::read_to_string("/proc/self/cgroup").context("read /proc/self/cgroup")?;
        let v2_root = Path::new("/sys/fs/cgroup");
        let v2_controllers = fs::read_to_string(v2_root.join("cgroup.controllers")).ok();
        let (base, version) = if v2_controllers
            .as_deref()
            .is_some_and(|c| c.split_whitespace().any(|w| w == "memory"))
        {
            let rel = self_cgroups
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .unwrap_or("/");
            // A v2 cgroup with processes cannot enable controllers for its
            // children, so the new group goes beside ours, under our parent.
            let own = v2_root.join(rel.trim_start_matches('/'));
            let parent = own.parent().unwrap_or(v2_root).to_path_buf();
            let _ = fs::write(parent.join("cgroup.subtree_control"), "+memory");
            (parent, CgroupVersion::V2)
        } else {
            let v1_root = Path::new("/sys/fs/cgroup/memory");
            if !v1_root.join("memory.limit_in_bytes").exists() {
                bail!("no memory cgroup controller is mounted (neither v2 with memory nor v1 at /sys/fs/cgroup/memory)");
            }
            let rel = self_cgroups
                .lines()
                .find_map(|l| {
                    let mut parts = l.splitn(3, ':');
                    let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
                    ctrl.split(',').any(|c| c == "memory").then_some(path)
                })
                .unwrap_or("/");
            (v1_root.join(rel.trim_start_matches('/')), CgroupVersion::V1)
        };
        let path = base.join(name);
        match fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => bail!(
                "cannot create a memory cgroup under {} (permission denied; run as root or delegate the cgroup)",
                base.display()
            ),
            Err(e) => return Err(e).with_context(|| format!("create cgroup {}", path.display())),
        }
        let cg = MemCgroup { path, version };
        let limit_file = match version {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        };
        fs::write(cg.path.join(limit_file), limit.to_string())
            .with_context(|| format!("set {limit_file} of {}", cg.path.display()))?;
        if version == CgroupVersion::V2 {
            // No swap: the budget is RAM.
            let _ = fs::write(cg.path.join("memory.swap.max"), "0");
        }
        Ok(cg)
    }

    /// The cgroup's directory (passed to the child, which joins it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the calling process into the cgroup at `path`.
    pub fn join(path: &Path) -> Result<()> {
        Self::add(path, std::process::id())
    }

    /// Moves process `pid` into the cgroup at `path` (its children forked
    /// later are born there; in v1, ones forked before stay where they are).
    pub fn add(path: &Path, pid: u32) -> Result<()> {
        assert!(pid > 0, "a process id");
        fs::write(path.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("move process {pid} into cgroup {}", path.display()))
    }

    /// The most memory (process and page cache) the cgroup held.
    pub fn peak_bytes(&self) -> Option<u64> {
        let file = match self.version {
            CgroupVersion::V1 => "memory.max_usage_in_bytes",
            CgroupVersion::V2 => "memory.peak",
        };
        fs::read_to_string(self.path.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Whether the kernel killed a process of the cgroup for memory.
    pub fn oom_killed(&self) -> bool {
        let (file, key) = match self.version {
            CgroupVersion::V1 => ("memory.oom_control", "oom_kill "),
            CgroupVersion::V2 => ("memory.events", "oom_kill "),
        };
        fs::read_to_string(self.path.join(file))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .is_some_and(|n| n > 0)
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // The child has exited; its page cache charges move to the parent.
        for _ in 0..50 {
            if fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Interval between two reads of the device probe.
const PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(10);

/// Reads of the device probe, by second of the run.
#[derive(Debug, Clone, Default)]
pub struct ProbeResult {
    /// The slowest probe read that ended in each second, microseconds (0
    /// where none ended).
    pub per_second_max_us: Vec<u64>,
    /// Bytes the probe read (to take out of the run's own I/O).
    pub bytes: u64,
}

/// An independent observer of the device: a thread that reads one 4 KiB
/// block at a random offset of the data set's largest file every 10 ms,
/// with direct I/O (so the page cache neither serves nor keeps it). When an
/// engine's slowest operation coincides with a slow probe read, the device
/// stalled for everyone, not the engine. It adds about 100 reads a second.
pub struct DeviceProbe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<ProbeResult>,
}

impl DeviceProbe {
    /// Starts probing the largest file under `dir` (seconds counted from
    /// `start`); `None` where no file there can be read with direct I/O
    /// (tmpfs, or no file of at least a block).
    pub fn start(dir: &Path, start: std::time::Instant, secs: usize) -> Option<DeviceProbe> {
        use directkv::internals::io::{AlignedBuf, DirectFile, FileOptions};
        use directkv::DirectIo;
        let path = files_under(dir)
            .into_iter()
            .filter_map(|p| Some((fs::metadata(&p).ok()?.len(), p)))
            .max_by_key(|(len, _)| *len)?
            .1;
        let opts = FileOptions {
            read_only: true,
            direct_io: DirectIo::On,
            ..FileOptions::default()
        };
        let file = DirectFile::open(&path, &opts).ok()?;
        let unit = file.alignment().io_unit_bytes().max(4096);
        let blocks = file.len().ok()? / u64::from(unit);
        if blocks == 0 {
            return None;
        }
        let mut buf = AlignedBuf::new(unit as usize, unit).ok()?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = std::sync::Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("bench-device-probe".into())
            .spawn(move || {
                let mut out = ProbeResult {
                    per_second_max_us: vec![0; secs],
                    bytes: 0,
                };
                let mut rng = super::workload::Rng::seeded(0x5EED);
                while !stopped.load(std::sync::atomic::Ordering::Acquire) {
                    let at = rng.below(blocks) * u64::from(unit);
                    let t = std::time::Instant::now();
                    if file.read_exact_at(buf.io_all_mut(), at).is_err() {
                        break;
                    }
                    let done = std::time::Instant::now();
                    out.bytes += u64::from(unit);
                    let us = (done - t).as_micros() as u64;
                    let sec = (done - start).as_secs() as usize;
                    if let Some(m) = out.per_second_max_us.get_mut(sec) {
                        *m = (*m).max(us);
                    }
                    std::thread::sleep(PROBE_INTERVAL);
                }
                out
            })
            .ok()?;
        Some(DeviceProbe { stop, thread })
    }

    /// Stops the probe and returns what it saw.
    pub fn finish(self) -> ProbeResult {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread.join().unwrap_or_default()
    }
}
