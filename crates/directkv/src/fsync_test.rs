//! The measurement behind `directkv test-fsync`: which sync method is fastest on
//! a filesystem, and whether the device is honest about durability.
//!
//! The tests follow PostgreSQL's `pg_test_fsync` so the two can be compared
//! figure by figure, and add what it lacks: every method with and without direct
//! I/O, the per-write `RWF_DSYNC` method, non-synced direct writes as the honest
//! baseline for direct methods, and a verdict from sysfs and the figures.
//!
//! | group             | what one op is                                            |
//! |-------------------|-----------------------------------------------------------|
//! | `one_write`       | one block write at offset 0, then the method's sync       |
//! | `two_writes`      | two block writes at offsets 0 and 1 block, then the sync  |
//! | `open_sync_sizes` | `open_sync+direct`: 2 blocks as 1, 2, 4, 8, 16 writes     |
//! | `fd_sync`         | open, write, fsync, close / open, write, close, open, fsync, close |
//! | `non_sync`        | one block write, no sync (buffered and direct)            |
//!
//! Every op overwrites blocks that were written and synced when the test file was
//! prepared, as a recycled WAL segment is, so no sync pays for extent conversion.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::io::{
    device_info, fs_info, AlignedBuf, Alignment, DeviceInfo, DirectFile, DirectIo, FileOptions,
    Fill, FsInfo, SyncMethod, SyncVariant,
};

/// Bytes of the prepared test file (PostgreSQL's WAL segment size).
pub const TEST_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Rotations per second of the fastest rotating disks (15,000 rpm). A disk that
/// says it rotates and completes more durable syncs per second than this is
/// acknowledging them from a volatile cache (LESSONS.md §1).
pub const ROTATIONAL_SYNCS_PER_SEC_MAX: f64 = 250.0;

/// A durable method at least this fraction of the speed of not syncing at all
/// (same write, same I/O path) is implausible for a device that really flushes.
pub const NO_SYNC_RATIO_SUSPICIOUS: f64 = 0.5;

/// Schema version of [`Report`] and [`DeviceProfile`] JSON.
pub const SCHEMA_VERSION: u32 = 1;

/// The file name of a saved [`DeviceProfile`] inside the directory it describes.
pub const PROFILE_FILE_NAME: &str = ".directkv-device-profile.json";

/// What to measure.
#[derive(Debug, Clone)]
pub struct Options {
    /// The scratch file; it must not exist, and is removed afterwards.
    pub path: PathBuf,
    /// How long each test runs.
    pub seconds_per_test: f64,
    /// The size of one write (the "8 kB" of `pg_test_fsync`).
    pub block_bytes: usize,
}

/// Receives progress while the tests run.
pub trait Observer {
    /// The number of tests about to run.
    fn planned(&self, _tests: usize) {}
    /// A test starts.
    fn started(&self, _label: &str) {}
    /// A test ended.
    fn finished(&self, _result: &TestResult) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Observer for Silent {}

/// The outcome of one test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Outcome {
    /// The test ran.
    Measured {
        /// Completed ops.
        ops: u64,
        /// Wall time of the ops, in seconds.
        seconds: f64,
        /// Ops per second.
        ops_per_sec: f64,
        /// Microseconds per op.
        usecs_per_op: f64,
    },
    /// The test could not run here.
    NotAvailable {
        /// Why.
        reason: String,
    },
}

/// One measured line of the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestResult {
    /// The group id (`one_write`, `two_writes`, `open_sync_sizes`, `fd_sync`, `non_sync`).
    pub group: String,
    /// A stable machine id, e.g. `one_write/fdatasync+direct`.
    pub id: String,
    /// The human label.
    pub label: String,
    /// The sync variant, for tests of one.
    pub variant: Option<SyncVariant>,
    /// Writes per op.
    pub writes_per_op: usize,
    /// Bytes per write.
    pub write_bytes: usize,
    /// What happened.
    pub outcome: Outcome,
}

impl TestResult {
    /// Ops per second, if measured.
    pub fn ops_per_sec(&self) -> Option<f64> {
        match self.outcome {
            Outcome::Measured { ops_per_sec, .. } => Some(ops_per_sec),
            Outcome::NotAvailable { .. } => None,
        }
    }
}

/// How believable the durable figures are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Nothing suggests syncs are acknowledged before data is stable.
    Plausible,
    /// Some figure is faster than a device that flushes could be.
    Suspicious,
    /// Too little was measured or known to judge.
    Unknown,
}

/// The honesty check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Honesty {
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in sentences.
    pub notes: Vec<String>,
}

/// The fastest durable method of the one-write group.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fastest {
    /// The winner.
    pub variant: SyncVariant,
    /// Its rate.
    pub ops_per_sec: f64,
    /// Its latency.
    pub usecs_per_op: f64,
}

/// Everything `test-fsync` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The scratch file.
    pub file: PathBuf,
    /// Its filesystem.
    pub filesystem: FsInfo,
    /// Its block device, where sysfs knows it.
    pub device: Option<DeviceInfo>,
    /// Direct-I/O alignment, or `None` where direct I/O is unavailable.
    pub alignment: Option<Alignment>,
    /// Why direct I/O is unavailable, where it is.
    pub direct_io_unavailable: Option<String>,
    /// Bytes per write.
    pub block_bytes: usize,
    /// Seconds per test.
    pub seconds_per_test: f64,
    /// Every test, in order.
    pub results: Vec<TestResult>,
    /// The fastest durable method.
    pub fastest_durable: Option<Fastest>,
    /// The honesty verdict.
    pub honesty: Honesty,
}

impl Report {
    /// The result with this id.
    pub fn result(&self, id: &str) -> Option<&TestResult> {
        self.results.iter().find(|r| r.id == id)
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Sync {
        variant: SyncVariant,
        writes: usize,
        write_bytes: usize,
    },
    FdSync {
        close_before_sync: bool,
    },
}

#[derive(Debug, Clone)]
struct Spec {
    group: &'static str,
    id: String,
    label: String,
    kind: Kind,
}

fn kib(bytes: usize) -> String {
    if bytes % 1024 == 0 {
        format!("{}kB", bytes / 1024)
    } else {
        format!("{bytes}B")
    }
}

fn plan(block: usize) -> Vec<Spec> {
    let mut specs = Vec::new();
    for (group, writes) in [("one_write", 1usize), ("two_writes", 2)] {
        for variant in SyncVariant::all().filter(|v| v.method.is_durable()) {
            specs.push(Spec {
                group,
                id: format!("{group}/{variant}"),
                label: variant.to_string(),
                kind: Kind::Sync {
                    variant,
                    writes,
                    write_bytes: block,
                },
            });
        }
    }
    let total = 2 * block;
    let open_sync = SyncVariant {
        method: SyncMethod::OpenSync,
        direct: true,
    };
    for writes in [1usize, 2, 4, 8, 16] {
        let write_bytes = total / writes;
        specs.push(Spec {
            group: "open_sync_sizes",
            id: format!("open_sync_sizes/{writes}x{write_bytes}"),
            label: format!("{writes:>2} * {:>4} open_sync write(s)", kib(write_bytes)),
            kind: Kind::Sync {
                variant: open_sync,
                writes,
                write_bytes,
            },
        });
    }
    for (close_before_sync, id, label) in [
        (false, "fd_sync/write_fsync_close", "write, fsync, close"),
        (true, "fd_sync/write_close_fsync", "write, close, fsync"),
    ] {
        specs.push(Spec {
            group: "fd_sync",
            id: id.to_string(),
            label: label.to_string(),
            kind: Kind::FdSync { close_before_sync },
        });
    }
    for direct in [false, true] {
        let variant = SyncVariant {
            method: SyncMethod::None,
            direct,
        };
        specs.push(Spec {
            group: "non_sync",
            id: format!("non_sync/{variant}"),
            label: if direct { "write+direct" } else { "write" }.to_string(),
            kind: Kind::Sync {
                variant,
                writes: 1,
                write_bytes: block,
            },
        });
    }
    specs
}

/// The group titles, in report order, with the note printed under each.
pub const GROUPS: [(&str, &str, &str); 5] = [
    (
        "one_write",
        "Compare file sync methods using one {block} write",
        "each durable method without and with direct I/O (O_DIRECT)",
    ),
    (
        "two_writes",
        "Compare file sync methods using two {block} writes",
        "fsync/fdatasync pay one sync for both writes; open_* and pwrite_dsync pay two",
    ),
    (
        "open_sync_sizes",
        "Compare open_sync with different write sizes",
        "the cost of writing {total} in different write sizes (O_SYNC + O_DIRECT)",
    ),
    (
        "fd_sync",
        "Test if fsync on non-write file descriptor is honored",
        "if the times are similar, fsync() can sync data written on another descriptor",
    ),
    (
        "non_sync",
        "Non-synced {block} writes",
        "for reference: what the same write costs without any sync",
    ),
];

struct Clock {
    deadline: Instant,
    start: Instant,
}

impl Clock {
    fn new(seconds: f64) -> Clock {
        let start = Instant::now();
        Clock {
            start,
            deadline: start + Duration::from_secs_f64(seconds),
        }
    }

    fn outcome(&self, ops: u64) -> Outcome {
        let seconds = self.start.elapsed().as_secs_f64();
        Outcome::Measured {
            ops,
            seconds,
            ops_per_sec: ops as f64 / seconds,
            usecs_per_op: seconds * 1e6 / ops.max(1) as f64,
        }
    }
}

fn fill_pattern(bytes: &mut [u8]) {
    // A non-repeating pattern, so a compressing or deduplicating device cannot
    // shortcut the writes.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

fn open_for(path: &Path, variant: SyncVariant) -> Result<DirectFile> {
    DirectFile::open(
        path,
        &FileOptions {
            direct_io: if variant.direct {
                DirectIo::On
            } else {
                DirectIo::Off
            },
            sync: variant.method,
            ..FileOptions::default()
        },
    )
}

fn run_sync(path: &Path, seconds: f64, kind: Kind) -> Result<Outcome> {
    let Kind::Sync {
        variant,
        writes,
        write_bytes,
    } = kind
    else {
        unreachable!("run_sync takes Kind::Sync");
    };
    let file = match open_for(path, variant) {
        Ok(f) => f,
        Err(Error::DirectIoUnsupported { fs_type, .. }) => {
            return Ok(Outcome::NotAvailable {
                reason: format!("{fs_type} refuses O_DIRECT"),
            })
        }
        Err(e) => return Err(e),
    };
    let unit = file.alignment().io_unit_bytes() as usize;
    if variant.direct && write_bytes % unit != 0 {
        return Ok(Outcome::NotAvailable {
            reason: format!("{write_bytes}-byte writes are below the {unit}-byte direct-I/O unit"),
        });
    }
    let mut buf = AlignedBuf::new(write_bytes.max(unit), unit as u32)?;
    fill_pattern(buf.as_mut_slice());
    let data = buf.io(0..write_bytes)?;
    let clock = Clock::new(seconds);
    let mut ops = 0u64;
    loop {
        for i in 0..writes {
            file.write_all_at(data, (i * write_bytes) as u64)?;
        }
        file.sync()?;
        ops += 1;
        if Instant::now() >= clock.deadline {
            return Ok(clock.outcome(ops));
        }
    }
}

fn run_fd_sync(
    path: &Path,
    seconds: f64,
    block: usize,
    close_before_sync: bool,
) -> Result<Outcome> {
    let variant = SyncVariant {
        method: SyncMethod::Fsync,
        direct: false,
    };
    let mut buf = AlignedBuf::new(block, crate::constants::SECTOR_BYTES)?;
    fill_pattern(buf.as_mut_slice());
    let clock = Clock::new(seconds);
    let mut ops = 0u64;
    loop {
        let file = open_for(path, variant)?;
        file.write_all_at(buf.io_all(), 0)?;
        if close_before_sync {
            drop(file);
            open_for(path, variant)?.sync_all()?;
        } else {
            file.sync_all()?;
        }
        ops += 1;
        if Instant::now() >= clock.deadline {
            return Ok(clock.outcome(ops));
        }
    }
}

fn prepare(path: &Path) -> Result<(Option<Alignment>, Option<String>)> {
    let created = DirectFile::open(
        path,
        &FileOptions {
            create: true,
            direct_io: DirectIo::Auto,
            sync: SyncMethod::Fsync,
            ..FileOptions::default()
        },
    )?;
    created.allocate(TEST_FILE_BYTES, Fill::Zero)?;
    match created.io_path() {
        crate::io::IoPath::Direct => Ok((Some(created.alignment()), None)),
        crate::io::IoPath::BufferedFallback { fs_type } => {
            Ok((None, Some(format!("{fs_type} refuses O_DIRECT"))))
        }
        crate::io::IoPath::Buffered => unreachable!("opened with DirectIo::Auto"),
    }
}

/// Runs every test on `opts.path` and returns the report. The file is created
/// and removed by this call.
///
/// # Errors
/// [`Error::InvalidArgument`] when the file already exists or the block size is
/// not a positive multiple of 512; I/O errors from preparing the file or from a
/// write or sync (a failed sync is an error, never a figure).
pub fn run(opts: &Options, observer: &dyn Observer) -> Result<Report> {
    if opts.block_bytes == 0 || opts.block_bytes % 512 != 0 || opts.block_bytes > 1 << 20 {
        return Err(Error::InvalidArgument(format!(
            "block size {} must be a multiple of 512 up to 1 MiB",
            opts.block_bytes
        )));
    }
    if !(opts.seconds_per_test > 0.0 && opts.seconds_per_test.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "seconds per test must be positive, not {}",
            opts.seconds_per_test
        )));
    }
    if opts.path.exists() {
        return Err(Error::InvalidArgument(format!(
            "{} exists; test-fsync writes a scratch file and removes it, so point --file \
             at a path that does not exist",
            opts.path.display()
        )));
    }
    let result = run_prepared(opts, observer);
    let _ = std::fs::remove_file(&opts.path);
    result
}

fn run_prepared(opts: &Options, observer: &dyn Observer) -> Result<Report> {
    let (alignment, direct_io_unavailable) = prepare(&opts.path)?;
    let filesystem = fs_info(&opts.path)?;
    let device = device_info(filesystem.dev);
    let specs = plan(opts.block_bytes);
    observer.planned(specs.len());
    let mut results = Vec::with_capacity(specs.len());
    for spec in specs {
        observer.started(&spec.label);
        let outcome = match spec.kind {
            Kind::Sync { .. } => run_sync(&opts.path, opts.seconds_per_test, spec.kind)?,
            Kind::FdSync { close_before_sync } => run_fd_sync(
                &opts.path,
                opts.seconds_per_test,
                opts.block_bytes,
                close_before_sync,
            )?,
        };
        let (variant, writes_per_op, write_bytes) = match spec.kind {
            Kind::Sync {
                variant,
                writes,
                write_bytes,
            } => (Some(variant), writes, write_bytes),
            Kind::FdSync { .. } => (None, 1, opts.block_bytes),
        };
        let result = TestResult {
            group: spec.group.to_string(),
            id: spec.id,
            label: spec.label,
            variant,
            writes_per_op,
            write_bytes,
            outcome,
        };
        observer.finished(&result);
        results.push(result);
    }
    let fastest_durable = fastest_durable(&results);
    let honesty = judge(&results, device.as_ref(), fastest_durable.as_ref());
    Ok(Report {
        schema_version: SCHEMA_VERSION,
        file: opts.path.clone(),
        filesystem,
        device,
        alignment,
        direct_io_unavailable,
        block_bytes: opts.block_bytes,
        seconds_per_test: opts.seconds_per_test,
        results,
        fastest_durable,
        honesty,
    })
}

/// Measures one write of `block_bytes` plus the variant's sync, repeated for
/// `seconds`, on a scratch file at `path` (created, prepared and removed): the
/// `one_write` figure of [`run`] for a single variant, for benchmarks that put
/// it beside their own.
///
/// # Errors
/// As [`run`].
pub fn measure_one(
    path: &Path,
    variant: SyncVariant,
    block_bytes: usize,
    seconds: f64,
) -> Result<Outcome> {
    if path.exists() {
        return Err(Error::InvalidArgument(format!("{} exists", path.display())));
    }
    let result = prepare(path).and_then(|_| {
        run_sync(
            path,
            seconds,
            Kind::Sync {
                variant,
                writes: 1,
                write_bytes: block_bytes,
            },
        )
    });
    let _ = std::fs::remove_file(path);
    result
}

/// Seconds each candidate is measured by [`measure_and_save`].
pub const QUICK_SECONDS: f64 = 0.15;

/// Measures each candidate briefly (one 4 KiB write and its sync, repeated) in
/// `dir`, saves the result as `dir`'s device profile, and returns the fastest.
/// `None` when nothing could be measured (the caller falls back to a default).
pub fn measure_and_save(dir: &Path, candidates: &[SyncVariant]) -> Option<SyncVariant> {
    let scratch = dir.join(format!(".directkv-sync-probe-{}", std::process::id()));
    let mut measured = Vec::new();
    for &v in candidates {
        if let Ok(Outcome::Measured { ops_per_sec, .. }) =
            measure_one(&scratch, v, 4096, QUICK_SECONDS)
        {
            measured.push((v, ops_per_sec));
        }
    }
    let &(best, ops) = measured.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    if let Ok(filesystem) = fs_info(dir) {
        let profile = DeviceProfile {
            schema_version: SCHEMA_VERSION,
            filesystem,
            alignment: None,
            fastest_durable: best,
            sync_latency_us: 1e6 / ops,
            measured,
            verdict: Verdict::Unknown,
            measured_at_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        };
        // Not saving only means measuring again next time.
        let _ = profile.save(&dir.join(PROFILE_FILE_NAME));
    }
    Some(best)
}

/// The durable variant with the most ops/s in the one-write group.
pub fn fastest_durable(results: &[TestResult]) -> Option<Fastest> {
    results
        .iter()
        .filter(|r| r.group == "one_write")
        .filter_map(|r| {
            let variant = r.variant?;
            match r.outcome {
                Outcome::Measured {
                    ops_per_sec,
                    usecs_per_op,
                    ..
                } if variant.method.is_durable() => Some(Fastest {
                    variant,
                    ops_per_sec,
                    usecs_per_op,
                }),
                _ => None,
            }
        })
        .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
}

/// Judges whether the durable figures are believable for the device.
pub fn judge(
    results: &[TestResult],
    device: Option<&DeviceInfo>,
    fastest: Option<&Fastest>,
) -> Honesty {
    let mut notes = Vec::new();
    let mut suspicious = false;
    let Some(fastest) = fastest else {
        return Honesty {
            verdict: Verdict::Unknown,
            notes: vec!["no durable method could be measured".into()],
        };
    };
    if let Some(dev) = device {
        match dev.write_cache.as_deref() {
            Some("write back") => notes.push(format!(
                "{} has a volatile write cache ({}): durable writes must end in a cache \
                 flush{}",
                dev.name,
                "write back",
                if dev.fua == Some(true) {
                    " or a FUA write"
                } else {
                    "; it does not support FUA, so O_SYNC/O_DSYNC writes are followed by a flush"
                }
            )),
            Some("write through") => notes.push(format!(
                "{} reports no volatile write cache (write through)",
                dev.name
            )),
            _ => {}
        }
        if dev.rotational == Some(true) && fastest.ops_per_sec > ROTATIONAL_SYNCS_PER_SEC_MAX {
            suspicious = true;
            notes.push(format!(
                "{} says it is rotational, yet {} completed {:.0} durable syncs/s, more than a \
                 disk can turn ({ROTATIONAL_SYNCS_PER_SEC_MAX:.0}/s at 15,000 rpm): either it \
                 does not really rotate (virtual disks often claim to) or a volatile cache \
                 acknowledges flushes",
                dev.name, fastest.variant, fastest.ops_per_sec
            ));
        }
    } else {
        notes.push("no block device behind this filesystem (sysfs has no queue for it)".into());
    }
    let close_to_no_sync = close_to_no_sync(results);
    if !close_to_no_sync.is_empty() {
        suspicious = true;
        notes.push(format!(
            "{} ran within 2x of the same write with no sync at all: the flush costs \
             little next to the write, so either the device has power-loss protection or \
             its flushes do not reach stable storage; confirm with a power-pull test \
             before trusting it",
            close_to_no_sync.join(", ")
        ));
    }
    notes.push(format!(
        "fastest durable method: {} at {:.0} ops/s ({:.0} us per sync)",
        fastest.variant, fastest.ops_per_sec, fastest.usecs_per_op
    ));
    Honesty {
        verdict: if suspicious {
            Verdict::Suspicious
        } else {
            Verdict::Plausible
        },
        notes,
    }
}

/// The durable one-write variants at least [`NO_SYNC_RATIO_SUSPICIOUS`] as fast
/// as a non-synced write on the same I/O path (buffered or direct).
fn close_to_no_sync(results: &[TestResult]) -> Vec<String> {
    let baseline = |direct: bool| {
        results
            .iter()
            .find(|r| r.group == "non_sync" && r.variant.map(|v| v.direct) == Some(direct))
            .and_then(TestResult::ops_per_sec)
    };
    results
        .iter()
        .filter(|r| r.group == "one_write")
        .filter_map(|r| {
            let (v, ops) = (r.variant?, r.ops_per_sec()?);
            let base = baseline(v.direct)?;
            (v.method.is_durable() && ops >= NO_SYNC_RATIO_SUSPICIOUS * base)
                .then(|| format!("{v} ({ops:.0} vs {base:.0} ops/s)"))
        })
        .collect()
}

/// What the engine remembers about a filesystem so it need not measure again:
/// written by `directkv test-fsync --save-profile`, read at open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The filesystem measured.
    pub filesystem: FsInfo,
    /// Its direct-I/O alignment, or `None` where direct I/O is unavailable.
    pub alignment: Option<Alignment>,
    /// The fastest durable method.
    pub fastest_durable: SyncVariant,
    /// Its sync latency in microseconds.
    pub sync_latency_us: f64,
    /// Ops/s of every durable one-write variant measured.
    pub measured: Vec<(SyncVariant, f64)>,
    /// The honesty verdict.
    pub verdict: Verdict,
    /// Seconds since the Unix epoch when measured.
    pub measured_at_unix: u64,
}

impl DeviceProfile {
    /// Builds the profile from a report; `None` if no durable method was measured.
    pub fn from_report(report: &Report) -> Option<DeviceProfile> {
        let fastest = report.fastest_durable?;
        let measured = report
            .results
            .iter()
            .filter(|r| r.group == "one_write")
            .filter_map(|r| Some((r.variant?, r.ops_per_sec()?)))
            .collect();
        Some(DeviceProfile {
            schema_version: SCHEMA_VERSION,
            filesystem: report.filesystem.clone(),
            alignment: report.alignment,
            fastest_durable: fastest.variant,
            sync_latency_us: fastest.usecs_per_op,
            measured,
            verdict: report.honesty.verdict,
            measured_at_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        })
    }

    /// Writes the profile as JSON to `path` (atomically: temp file, fsync, rename,
    /// directory fsync).
    ///
    /// # Errors
    /// I/O errors of the write, sync or rename.
    pub fn save(&self, path: &Path) -> Result<()> {
        use crate::error::IoOp;
        let json = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::InvalidArgument(format!("profile encoding: {e}")))?;
        let tmp = path.with_extension("tmp");
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&json)?;
            f.sync_all()
        };
        write().map_err(|e| Error::from_io(IoOp::Write, &tmp, None, e))?;
        std::fs::rename(&tmp, path).map_err(|e| Error::from_io(IoOp::Rename, path, None, e))?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        crate::io::sync_dir(dir)
    }

    /// Reads a profile from `path`.
    ///
    /// # Errors
    /// I/O errors; [`Error::Corruption`] when the file is not a profile of this
    /// schema version.
    pub fn load(path: &Path) -> Result<DeviceProfile> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::from_io(crate::error::IoOp::Read, path, None, e))?;
        let profile: DeviceProfile =
            serde_json::from_slice(&bytes).map_err(|e| Error::Corruption {
                path: path.to_path_buf(),
                offset: 0,
                detail: format!("not a directkv device profile: {e}"),
            })?;
        if profile.schema_version != SCHEMA_VERSION {
            return Err(Error::Corruption {
                path: path.to_path_buf(),
                offset: 0,
                detail: format!(
                    "profile schema {} is not the supported {SCHEMA_VERSION}",
                    profile.schema_version
                ),
            });
        }
        Ok(profile)
    }

    /// The profile saved in `dir`, if there is one and it describes the
    /// filesystem `dir` is on now (same device number and type). A stale or
    /// unreadable profile is ignored, never trusted.
    pub fn load_for_dir(dir: &Path) -> Option<DeviceProfile> {
        let profile = Self::load(&dir.join(PROFILE_FILE_NAME)).ok()?;
        let fs = fs_info(dir).ok()?;
        (fs.dev == profile.filesystem.dev && fs.magic == profile.filesystem.magic)
            .then_some(profile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_covers_every_durable_variant_twice() {
        let specs = plan(8192);
        for group in ["one_write", "two_writes"] {
            let n = specs.iter().filter(|s| s.group == group).count();
            assert_eq!(n, 10, "{group}: 5 durable methods x direct on/off");
        }
        assert_eq!(
            specs
                .iter()
                .filter(|s| s.group == "open_sync_sizes")
                .count(),
            5
        );
        let ids: std::collections::HashSet<_> = specs.iter().map(|s| &s.id).collect();
        assert_eq!(ids.len(), specs.len(), "ids are unique");
    }

    fn measured(group: &str, v: &str, ops: f64) -> TestResult {
        TestResult {
            group: group.into(),
            id: format!("{group}/{v}"),
            label: v.into(),
            variant: Some(v.parse().expect("variant")),
            writes_per_op: 1,
            write_bytes: 8192,
            outcome: Outcome::Measured {
                ops: ops as u64,
                seconds: 1.0,
                ops_per_sec: ops,
                usecs_per_op: 1e6 / ops,
            },
        }
    }

    fn disk(rotational: bool) -> DeviceInfo {
        DeviceInfo {
            name: "sdz".into(),
            rotational: Some(rotational),
            write_cache: Some("write back".into()),
            fua: Some(false),
            logical_block_bytes: Some(512),
            physical_block_bytes: Some(4096),
            atomic_write_max_bytes: None,
        }
    }

    #[test]
    fn verdict_flags_a_spinning_disk_that_syncs_too_fast() {
        let results = vec![
            measured("one_write", "fdatasync", 7000.0),
            measured("non_sync", "none", 3_000_000.0),
        ];
        let fastest = fastest_durable(&results).expect("fastest");
        assert_eq!(fastest.variant.method, SyncMethod::Fdatasync);
        let h = judge(&results, Some(&disk(true)), Some(&fastest));
        assert_eq!(h.verdict, Verdict::Suspicious, "{:?}", h.notes);
        let h = judge(&results, Some(&disk(false)), Some(&fastest));
        assert_eq!(h.verdict, Verdict::Plausible, "{:?}", h.notes);
    }

    #[test]
    fn verdict_flags_sync_as_fast_as_no_sync() {
        let results = vec![
            measured("one_write", "fdatasync+direct", 9000.0),
            measured("non_sync", "none+direct", 10000.0),
        ];
        let fastest = fastest_durable(&results).expect("fastest");
        let h = judge(&results, Some(&disk(false)), Some(&fastest));
        assert_eq!(h.verdict, Verdict::Suspicious, "{:?}", h.notes);
        assert_eq!(judge(&[], None, None).verdict, Verdict::Unknown);
    }
}
