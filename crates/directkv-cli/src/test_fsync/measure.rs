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
//! The single-variant measurement and the device profile are the engine's
//! (`internals::io::profile`), which open uses too.

use std::path::PathBuf;

use directkv::internals::io::profile::{DeviceProfile, Outcome, Scratch, Verdict};
use directkv::internals::io::{Alignment, At, DeviceInfo, FsInfo};
use directkv::{Error, Result, SyncMethod, SyncVariant};
use serde::{Deserialize, Serialize};

/// Rotations per second of the fastest rotating disks (15,000 rpm). A disk that
/// says it rotates and completes more durable syncs per second than this is
/// acknowledging them from a volatile cache (LESSONS.md §1).
pub const ROTATIONAL_SYNCS_PER_SEC_MAX: f64 = 250.0;

/// A durable method at least this fraction of the speed of not syncing at all
/// (same write, same I/O path) is implausible for a device that really flushes.
pub const NO_SYNC_RATIO_SUSPICIOUS: f64 = 0.5;

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
    /// [`DeviceProfile::SCHEMA_VERSION`].
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
    run_prepared(opts, observer)
}

fn run_prepared(opts: &Options, observer: &dyn Observer) -> Result<Report> {
    // Removed when it goes out of scope, whatever the measurements return.
    let scratch = Scratch::create(At::cwd(&opts.path))?;
    let (alignment, direct_io_unavailable) = (
        scratch.alignment(),
        scratch.direct_io_unavailable().map(str::to_string),
    );
    let filesystem = FsInfo::of(&opts.path)?;
    let device = filesystem.device();
    let specs = plan(opts.block_bytes);
    observer.planned(specs.len());
    let mut results = Vec::with_capacity(specs.len());
    for spec in specs {
        observer.started(&spec.label);
        let outcome = match spec.kind {
            Kind::Sync {
                variant,
                writes,
                write_bytes,
            } => scratch.measure_sync(variant, writes, write_bytes, opts.seconds_per_test)?,
            Kind::FdSync { close_before_sync } => scratch.measure_reopened_sync(
                opts.block_bytes,
                opts.seconds_per_test,
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
        schema_version: DeviceProfile::SCHEMA_VERSION,
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

/// Builds the device profile from a report; `None` if no durable method was measured.
pub fn profile_from_report(report: &Report) -> Option<DeviceProfile> {
    let fastest = report.fastest_durable?;
    let measured = report
        .results
        .iter()
        .filter(|r| r.group == "one_write")
        .filter_map(|r| Some((r.variant?, r.ops_per_sec()?)))
        .collect();
    Some(DeviceProfile {
        schema_version: DeviceProfile::SCHEMA_VERSION,
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
