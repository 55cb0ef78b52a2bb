//! The engine's own sync probe and the device profile it keeps.
//!
//! When `Options::wal_sync` is not set, open picks the WAL's sync method from
//! the device profile saved in the WAL directory, and measures once (each
//! durable candidate for [`QUICK_SECONDS`], one 4 KiB write and its sync,
//! repeated, on a scratch file it removes) and saves the profile when there
//! is none. `directkv test-fsync --save-profile` writes the same profile from
//! a full measurement.
//!
//! Invariants:
//! - A profile is trusted only for the filesystem it was measured on (same
//!   device number and type) and the schema this build writes; anything else
//!   is ignored and measured again, never used.
//! - A failed write or sync during a measurement is an error, never a figure.
//! - Every measured op overwrites blocks that were written and synced when
//!   the scratch file was prepared, as a recycled WAL segment is, so no sync
//!   pays for extent conversion.
//! - A scratch file is created exclusively (`O_EXCL`, never through a
//!   symlink) and its first block, written before anything else, carries
//!   [`SCRATCH_MAGIC`] and the pid in its name; measurements write after
//!   [`SCRATCH_HEADER_BYTES`]. So a process killed mid-measurement leaves a
//!   file the next open recognises and removes
//!   ([`remove_scratch_leftovers`]): only one named `.directkv-*-probe-PID`,
//!   of a process that is gone, that carries the magic and that pid.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

mod scratch;
pub use scratch::Scratch;

use crate::error::{Error, Result};
use crate::io::{
    AlignedBuf, Alignment, At, DirectFile, DirectIo, FileKind, FileOptions, Fill, FsInfo,
    Permissions, Storage, StorageFile, SyncMethod, SyncVariant,
};

/// Bytes of the prepared test file (PostgreSQL's WAL segment size).
pub const TEST_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Schema version of [`DeviceProfile`] JSON (and of `directkv test-fsync`'s report).
pub const PROFILE_SCHEMA_VERSION: u32 = 1;

/// The file name of a saved [`DeviceProfile`] inside the directory it describes.
pub const PROFILE_FILE_NAME: &str = ".directkv-device-profile.json";

/// The magic at the start of every scratch file the engine writes.
pub const SCRATCH_MAGIC: [u8; 8] = *b"DKVSCRAT";

/// Bytes at the head of a scratch file kept for its header: measurements
/// write after them. A multiple of every direct-I/O unit the engine accepts.
pub const SCRATCH_HEADER_BYTES: u64 = 64 * 1024;

const _: () = assert!(SCRATCH_HEADER_BYTES % 4096 == 0);
const _: () = assert!(SCRATCH_HEADER_BYTES * 16 <= TEST_FILE_BYTES);

/// Name prefixes of the engine's scratch files; the pid of the process that
/// made one follows.
pub const SCRATCH_PREFIXES: [&str; 2] = [".directkv-sync-probe-", ".directkv-direct-probe-"];

/// Name prefix of the direct-I/O alignment probe's scratch file
/// ([`super::align::probe`]), in the directory of the file being opened;
/// the pid follows. It carries no header: it holds only zeros and the
/// probe's `0xA5` bytes, in at most [`ALIGN_PROBE_BYTES_MAX`].
pub const ALIGN_PROBE_PREFIX: &str = ".directkv-align-probe-";

/// The largest file the alignment probe makes: its largest write, at an
/// offset of its own size.
pub const ALIGN_PROBE_BYTES_MAX: u64 = 2 * crate::constants::DIRECT_IO_ALIGN_DEFAULT as u64;

/// The name of this process's scratch file for the probe of `prefix`.
pub fn scratch_name(prefix: &str) -> String {
    assert!(
        SCRATCH_PREFIXES.contains(&prefix),
        "one of the scratch names"
    );
    format!("{prefix}{}", std::process::id())
}

/// The pid a scratch file's name carries, if `name` is one.
pub fn scratch_pid(name: &str) -> Option<u32> {
    let digits = SCRATCH_PREFIXES.iter().find_map(|p| name.strip_prefix(p))?;
    pid_of(digits)
}

/// The pid an alignment probe's file name carries, if `name` is one.
fn align_probe_pid(name: &str) -> Option<u32> {
    pid_of(name.strip_prefix(ALIGN_PROBE_PREFIX)?)
}

/// `digits` as a pid: a decimal number of a possible process.
fn pid_of(digits: &str) -> Option<u32> {
    if digits.is_empty() || digits.len() > 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // pid 0 and anything beyond i32 is no process (and `kill(0, …)` would
    // mean the process group).
    digits
        .parse::<u32>()
        .ok()
        .filter(|&p| p > 0 && p <= i32::MAX as u32)
}

/// The header block of a scratch file of `pid`: the magic, the pid
/// (little-endian u32) and a line for whoever finds it.
fn scratch_header(pid: u32, bytes: usize) -> Result<AlignedBuf> {
    let note = b"\ndirectkv scratch file, safe to remove\n";
    assert!(bytes >= 12 + note.len() && bytes as u64 <= SCRATCH_HEADER_BYTES);
    let mut buf = AlignedBuf::new(bytes, bytes as u32)?;
    let b = buf.as_mut_slice();
    b[..8].copy_from_slice(&SCRATCH_MAGIC);
    b[8..12].copy_from_slice(&pid.to_le_bytes());
    b[12..12 + note.len()].copy_from_slice(note);
    Ok(buf)
}

/// Writes the scratch header at the start of `file`, a new scratch file of
/// this process (before anything else is written to it).
///
/// # Errors
/// [`Error::InvalidArgument`] when the file's I/O unit exceeds
/// [`SCRATCH_HEADER_BYTES`]; I/O errors of the write.
pub fn stamp_scratch(file: &DirectFile) -> Result<()> {
    let unit = u64::from(file.alignment().io_unit_bytes());
    if unit > SCRATCH_HEADER_BYTES || SCRATCH_HEADER_BYTES % unit != 0 {
        return Err(Error::InvalidArgument(format!(
            "{}: I/O unit {unit} does not divide the {SCRATCH_HEADER_BYTES}-byte scratch header",
            file.path().display()
        )));
    }
    let header = scratch_header(std::process::id(), unit as usize)?;
    file.write_all_at(header.io_all(), 0)
}

/// Whether the first bytes of a file are the scratch header of `pid`.
pub fn is_scratch_header(head: &[u8], pid: u32) -> bool {
    head.len() >= 12 && head[..8] == SCRATCH_MAGIC && head[8..12] == pid.to_le_bytes()
}

/// Whether process `pid` exists (`kill(pid, 0)`; `EPERM` means it exists).
fn process_alive(pid: u32) -> bool {
    assert!(
        pid > 0 && pid <= i32::MAX as u32,
        "a real pid, never a group"
    );
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Removes the scratch files a killed process left in `dir`: each entry
/// named as a scratch file of a process that is gone (not this one), that
/// is a regular file and starts with the scratch header of that pid, and
/// each alignment probe's leftover (`is_align_probe_leftover`).
/// Anything else, however named, is left alone. Returns what it removed.
///
/// # Errors
/// I/O errors of listing `dir` or of removing a leftover; a candidate that
/// cannot be read is left in place, not an error.
pub fn remove_scratch_leftovers<S: Storage>(storage: &S, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for name in storage.list_dir(dir)? {
        let leftover = match scratch_pid(&name) {
            Some(pid) => gone(pid) && scratch_head_of(storage, &dir.join(&name), pid),
            None => is_align_probe_leftover(storage, dir, &name),
        };
        if leftover {
            let path = dir.join(&name);
            storage.remove_file(&path)?;
            removed.push(path);
        }
    }
    assert!(
        removed.iter().all(|p| p.parent() == Some(dir)),
        "only in dir"
    );
    Ok(removed)
}

/// Whether `pid` is neither this process nor a live one.
fn gone(pid: u32) -> bool {
    pid != std::process::id() && !process_alive(pid)
}

/// Whether `name` in `dir` is an alignment probe's file: named as one, a
/// regular file of at most [`ALIGN_PROBE_BYTES_MAX`] holding only zeros and
/// `0xA5` bytes. A file that cannot be read is not one.
pub fn is_align_probe_file<S: Storage>(storage: &S, dir: &Path, name: &str) -> bool {
    let path = dir.join(name);
    align_probe_pid(name).is_some()
        && matches!(storage.stat(&path), Ok(m) if m.kind == FileKind::File)
        && only_probe_bytes(storage, &path).unwrap_or(false)
}

/// Whether `name` in `dir` is an alignment probe's file
/// ([`is_align_probe_file`]) that a process now gone left behind.
pub fn is_align_probe_leftover<S: Storage>(storage: &S, dir: &Path, name: &str) -> bool {
    align_probe_pid(name).is_some_and(gone) && is_align_probe_file(storage, dir, name)
}

/// Opens `path` to look at: read-only, through the page cache.
fn open_to_look<S: Storage>(storage: &S, path: &Path) -> Result<S::File> {
    storage.open(
        path,
        &FileOptions {
            read_only: true,
            direct_io: DirectIo::Off,
            ..FileOptions::default()
        },
    )
}

fn only_probe_bytes<S: Storage>(storage: &S, path: &Path) -> Result<bool> {
    let file = open_to_look(storage, path)?;
    if file.len()? > ALIGN_PROBE_BYTES_MAX {
        return Ok(false);
    }
    let mut buf = AlignedBuf::new(ALIGN_PROBE_BYTES_MAX as usize, 512)?;
    let n = file.read_at(buf.io_all_mut(), 0)?;
    assert!(
        n as u64 <= ALIGN_PROBE_BYTES_MAX,
        "a read fills at most its buffer"
    );
    Ok(buf.as_slice()[..n].iter().all(|&b| b == 0 || b == 0xA5))
}

/// Whether the regular file at `path` starts with the scratch header of
/// `pid`; one that cannot be read does not.
fn scratch_head_of<S: Storage>(storage: &S, path: &Path, pid: u32) -> bool {
    matches!(storage.stat(path), Ok(m) if m.kind == FileKind::File)
        && scratch_head_matches(storage, path, pid).unwrap_or(false)
}

fn scratch_head_matches<S: Storage>(storage: &S, path: &Path, pid: u32) -> Result<bool> {
    let file = open_to_look(storage, path)?;
    let mut head = AlignedBuf::new(512, 512)?;
    let n = file.read_at(head.io_all_mut(), 0)?;
    assert!(n <= 512, "a read fills at most its buffer");
    Ok(is_scratch_header(&head.as_slice()[..n], pid))
}

/// Whether a file in `dir` can be opened for direct I/O (and is not on a
/// memory-backed filesystem): a scratch file made, stamped and removed.
pub fn direct_io_works(dir: &At<'_>) -> bool {
    let probe = dir.join(scratch_name(SCRATCH_PREFIXES[1]));
    let made = DirectFile::open_at(
        &probe,
        &FileOptions {
            create: true,
            exclusive: true,
            direct_io: DirectIo::On,
            sync: SyncMethod::None,
            ..FileOptions::default()
        },
    );
    let ok = match made {
        Ok(file) => stamp_scratch(&file).is_ok(),
        Err(_) => false,
    };
    let _ = probe.unlink();
    ok
}

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

/// The deadline of a measurement and the figures at its end.
pub struct Clock {
    deadline: Instant,
    start: Instant,
}

impl Clock {
    /// A measurement of `seconds` starting now.
    pub fn new(seconds: f64) -> Clock {
        assert!(
            seconds > 0.0 && seconds.is_finite(),
            "a measurement lasts a while"
        );
        let start = Instant::now();
        Clock {
            start,
            deadline: start + Duration::from_secs_f64(seconds),
        }
    }

    /// Whether the measurement is over.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// The figures of `ops` completed ops since the start.
    pub fn outcome(&self, ops: u64) -> Outcome {
        let seconds = self.start.elapsed().as_secs_f64();
        Outcome::Measured {
            ops,
            seconds,
            ops_per_sec: ops as f64 / seconds,
            usecs_per_op: seconds * 1e6 / ops.max(1) as f64,
        }
    }
}

/// Fills `bytes` with a non-repeating pattern.
pub fn fill_pattern(bytes: &mut [u8]) {
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

/// Opens `at` for `variant`: its sync method, with or without direct I/O.
///
/// # Errors
/// As [`DirectFile::open`].
pub fn open_for(at: &At<'_>, variant: SyncVariant) -> Result<DirectFile> {
    DirectFile::open_at(
        at,
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

/// Measures `writes` writes of `write_bytes` each (at consecutive offsets
/// from `SCRATCH_HEADER_BYTES`) plus the variant's sync, repeated for `seconds`, on the scratch
/// file at `path` made by [`prepare`].
///
/// # Errors
/// I/O errors of a write or sync (a failed sync is an error, never a figure).
pub fn measure_sync(
    at: &At<'_>,
    variant: SyncVariant,
    writes: usize,
    write_bytes: usize,
    seconds: f64,
) -> Result<Outcome> {
    assert!(writes >= 1 && write_bytes > 0, "an op writes something");
    assert!(seconds > 0.0, "a measurement takes time");
    let file = match open_for(at, variant) {
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
    let span = (writes * write_bytes) as u64;
    if SCRATCH_HEADER_BYTES % unit as u64 != 0 || SCRATCH_HEADER_BYTES + span > TEST_FILE_BYTES {
        return Ok(Outcome::NotAvailable {
            reason: format!("{writes} writes of {write_bytes} bytes do not fit the scratch file"),
        });
    }
    let mut buf = AlignedBuf::new(write_bytes.max(unit), unit as u32)?;
    fill_pattern(buf.as_mut_slice());
    let data = buf.io(0..write_bytes)?;
    let clock = Clock::new(seconds);
    let mut ops = 0u64;
    loop {
        for i in 0..writes {
            file.write_all_at(data, SCRATCH_HEADER_BYTES + (i * write_bytes) as u64)?;
        }
        file.sync()?;
        ops += 1;
        if Instant::now() >= clock.deadline {
            return Ok(clock.outcome(ops));
        }
    }
}

/// Creates the scratch file at `path` (exclusively, private), stamps its
/// header (`stamp_scratch`) and writes the rest through once (zeros,
/// synced), as a recycled WAL segment is; returns its direct-I/O alignment,
/// or why direct I/O is unavailable there.
///
/// # Errors
/// I/O errors of the creation (`EEXIST` when `path` exists), the header,
/// the fill or the sync.
pub fn prepare(at: &At<'_>) -> Result<(Option<Alignment>, Option<String>)> {
    let created = DirectFile::open_at(
        at,
        &FileOptions {
            create: true,
            exclusive: true,
            direct_io: DirectIo::Auto,
            sync: SyncMethod::Fsync,
            ..FileOptions::default()
        },
    )?;
    stamp_scratch(&created)?;
    assert!(
        created.len()? <= SCRATCH_HEADER_BYTES,
        "only the header yet"
    );
    created.allocate(TEST_FILE_BYTES, Fill::Zero)?;
    match created.io_path() {
        crate::io::IoPath::Direct => Ok((Some(created.alignment()), None)),
        crate::io::IoPath::BufferedFallback { fs_type } => {
            Ok((None, Some(format!("{fs_type} refuses O_DIRECT"))))
        }
        crate::io::IoPath::Buffered => unreachable!("opened with DirectIo::Auto"),
    }
}

/// Seconds each candidate is measured by [`measure_and_save`].
pub const QUICK_SECONDS: f64 = 0.15;

/// Measures each candidate briefly (one 4 KiB write and its sync, repeated) in
/// `dir`, saves the result as `dir`'s device profile, and returns the fastest.
/// `None` when nothing could be measured (the caller falls back to a default).
pub fn measure_and_save(dir: &At<'_>, candidates: &[SyncVariant]) -> Option<SyncVariant> {
    let mut measured = Vec::new();
    for &v in candidates {
        let scratch = Scratch::create(dir.join(scratch_name(SCRATCH_PREFIXES[0])));
        if let Ok(Outcome::Measured { ops_per_sec, .. }) =
            scratch.and_then(|s| s.measure_sync(v, 1, 4096, QUICK_SECONDS))
        {
            measured.push((v, ops_per_sec));
        }
    }
    let &(best, ops) = measured.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    assert!(ops > 0.0, "a measured variant completed an op");
    if let Ok(filesystem) = dir.fs_info() {
        let profile = DeviceProfile {
            schema_version: PROFILE_SCHEMA_VERSION,
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

/// What the engine remembers about a filesystem so it need not measure again:
/// written by `directkv test-fsync --save-profile`, read at open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    /// [`SCHEMA_VERSION`](Self::SCHEMA_VERSION).
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
    /// The schema this build writes and trusts.
    pub const SCHEMA_VERSION: u32 = PROFILE_SCHEMA_VERSION;
    /// The profile's file name in the directory it describes.
    pub const FILE_NAME: &'static str = PROFILE_FILE_NAME;

    /// Writes the profile as JSON to `path` (atomically: a new private temp
    /// file, fsync, rename, directory fsync).
    ///
    /// # Errors
    /// I/O errors of the write, sync or rename.
    pub fn save(&self, at: &At<'_>) -> Result<()> {
        use crate::error::IoOp;
        let json = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::InvalidArgument(format!("profile encoding: {e}")))?;
        let name = at.path().file_name().map_or_else(
            || "profile".to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let tmp = at.parent().join(format!("{name}.tmp"));
        crate::io::write_new_file(&tmp, &json, Permissions::Private)?
            .sync_all()
            .map_err(|e| Error::from_io(IoOp::Sync, tmp.path(), None, e))?;
        tmp.rename_to(at)?;
        at.parent().sync_dir()
    }

    /// Reads a profile from `path`.
    ///
    /// # Errors
    /// I/O errors; [`Error::Corruption`] when the file is not a profile of this
    /// schema version.
    pub fn load(at: &At<'_>) -> Result<DeviceProfile> {
        Self::decode(&crate::io::read_file(at)?, at.path())
    }

    /// Decodes the bytes of a profile file; `path` only names it in errors.
    ///
    /// # Errors
    /// [`Error::Corruption`] when the bytes are not a profile of this schema
    /// version.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<DeviceProfile> {
        let profile: DeviceProfile =
            serde_json::from_slice(bytes).map_err(|e| Error::Corruption {
                path: path.to_path_buf(),
                offset: 0,
                page: None,
                detail: format!("not a directkv device profile: {e}"),
            })?;
        if profile.schema_version != PROFILE_SCHEMA_VERSION {
            return Err(Error::Corruption {
                path: path.to_path_buf(),
                offset: 0,
                page: None,
                detail: format!(
                    "profile schema {} is not the supported {PROFILE_SCHEMA_VERSION}",
                    profile.schema_version
                ),
            });
        }
        Ok(profile)
    }

    /// The profile saved in `dir`, if there is one and it describes the
    /// filesystem `dir` is on now (same device number and type). A stale or
    /// unreadable profile is ignored, never trusted.
    pub fn load_for_dir(dir: &At<'_>) -> Option<DeviceProfile> {
        let profile = Self::load(&dir.join(PROFILE_FILE_NAME)).ok()?;
        let fs = dir.fs_info().ok()?;
        (fs.dev == profile.filesystem.dev && fs.magic == profile.filesystem.magic)
            .then_some(profile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_names_carry_a_real_pid() {
        assert_eq!(scratch_pid(".directkv-sync-probe-1234"), Some(1234));
        assert_eq!(scratch_pid(".directkv-direct-probe-7"), Some(7));
        for name in [
            ".directkv-sync-probe-0",
            ".directkv-sync-probe-",
            ".directkv-sync-probe-12a",
            ".directkv-sync-probe--1",
            ".directkv-sync-probe-99999999999",
            ".directkv-align-probe-12",
            "directkv-sync-probe-12",
        ] {
            assert_eq!(scratch_pid(name), None, "{name}");
        }
    }

    #[test]
    fn a_profile_read_and_written_again_keeps_its_figures() {
        // A figure with more digits than an f64 holds (found by the fuzz
        // target): without exact float parsing, a second round trip moved
        // its last digit.
        let json = br#"{"schema_version":1,"filesystem":{"fs_type":"ext4","magic":61267,
            "dev":[254,0],"block_bytes":4096,"available_bytes":1},"alignment":null,
            "fastest_durable":{"method":"fdatasync","direct":false},"sync_latency_us":73.5,
            "measured":[[{"method":"fdatasync","direct":false},128471.982649620044]],
            "verdict":"unknown","measured_at_unix":0}"#;
        let path = Path::new("profile.json");
        let first = DeviceProfile::decode(json, path).expect("a profile");
        let again = serde_json::to_vec(&first).expect("encode");
        assert_eq!(DeviceProfile::decode(&again, path).expect("decode"), first);
    }

    #[test]
    fn the_header_names_its_pid() {
        let header = scratch_header(42, 4096).expect("header");
        assert!(is_scratch_header(header.as_slice(), 42));
        assert!(!is_scratch_header(header.as_slice(), 43));
        assert!(!is_scratch_header(&header.as_slice()[..11], 42));
    }
}
