//! `SimStorage`: a deterministic disk in memory, behind the same [`Storage`]
//! trait as the real backend, that loses, reorders and tears unsynced writes on
//! purpose (RELIABILITY.md §2.1).
//!
//! State per file: a **live** image (what reads see) and a **durable** image
//! (what survives a crash), plus the writes made since the file's last sync.
//! Directory entries likewise have a live and a durable namespace; a directory
//! sync makes that directory's live entries durable. Directories themselves
//! are durable once created (a simplification: the engine creates them once).
//!
//! Life cycle of a run: arm [`SimStorage::power_fail_after`]; the engine runs
//! until the Nth mutating operation, after which every write and sync fails
//! with `EIO` and changes nothing (the power is off); drop the engine; call
//! [`SimStorage::crash`], which decides for each unsynced write whether it
//! reached the media whole, not at all, or torn (per 512-byte sector: new,
//! old, or garbage), then makes the durable state the live one. Reopen.
//! Or call [`SimStorage::kill`] instead: a kill of the process, which keeps
//! every operation that completed, synced or not.
//!
//! Sync methods are honoured: files opened `open_sync`/`open_datasync`/
//! `pwrite_dsync` make each write durable as it completes.
//!
//! The opening rules of the real files hold where the simulated disk has
//! the objects they are about: an `exclusive` create of an existing file
//! fails with `EEXIST`, and a directory opened as a file is
//! [`Error::NotARegularFile`]. It has no symlinks, FIFOs or devices, and no
//! modes: [`Storage::stat`] answers `0600` for files and `0700` for
//! directories, owned by uid 0.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

mod file;
mod table;

use super::rng::Rng;
use crate::error::{Error, IoOp};

/// The sector size the simulator tears at.
pub const SIM_SECTOR_BYTES: usize = 512;

#[derive(Debug, Default)]
struct FileData {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// Unsynced writes: (offset, length), in order.
    pending: Vec<(usize, usize)>,
    /// An unsynced change of size (`set_len`): at a crash the durable
    /// image takes the live size or keeps its own.
    resized: bool,
}

#[derive(Debug, Default)]
struct State {
    files: HashMap<u64, FileData>,
    next_id: u64,
    live: BTreeMap<PathBuf, u64>,
    durable: BTreeMap<PathBuf, u64>,
    dirs: std::collections::BTreeSet<PathBuf>,
    locks: std::collections::BTreeSet<PathBuf>,
    /// Mutating operations so far (writes, syncs, allocations, renames, ...).
    ops: u64,
    /// Power fails once `ops` reaches this.
    fail_at: Option<u64>,
    powered_off: bool,
    crashes: u64,
    /// The sync that fails with EIO, counted in syncs from when it was armed.
    sync_fail_in: Option<u64>,
    /// Random faults: one write in `write_fault_one_in` and one read in
    /// `read_fault_one_in` fails with EIO (0: never).
    write_fault_one_in: u64,
    read_fault_one_in: u64,
    /// Bytes the disk holds; writes and allocations past it fail with ENOSPC.
    capacity_bytes: Option<u64>,
    rng: Option<Rng>,
}

/// Counters of a simulated disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Mutating operations so far.
    pub ops: u64,
    /// Whether the power is off now.
    pub powered_off: bool,
    /// Crashes simulated.
    pub crashes: u64,
}

/// A simulated disk.
#[derive(Debug, Clone, Default)]
pub struct SimStorage {
    state: Arc<Mutex<State>>,
}

/// The disk's state. A panic while it is held is already a failed test;
/// the state is still whole enough to report it.
fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    crate::health::lock_even_poisoned(m)
}

fn eio(op: IoOp, path: &Path) -> Error {
    Error::from_io(op, path, None, std::io::Error::from_raw_os_error(libc::EIO))
}

fn enoent(op: IoOp, path: &Path) -> Error {
    Error::from_io(
        op,
        path,
        None,
        std::io::Error::from_raw_os_error(libc::ENOENT),
    )
}

impl State {
    /// After a crash or a kill, once the live namespace is the durable one:
    /// a file no name reaches is gone, the locks went with the process, and
    /// the power is back on.
    fn restart(&mut self) {
        assert!(
            self.live == self.durable,
            "after a crash only durable entries exist"
        );
        let referenced: std::collections::BTreeSet<u64> = self.durable.values().copied().collect();
        self.files.retain(|id, _| referenced.contains(id));
        self.locks.clear();
        self.fail_at = None;
        self.powered_off = false;
        self.crashes += 1;
        assert!(
            self.files.keys().all(|id| referenced.contains(id)),
            "no orphan file survives"
        );
    }

    /// Counts a mutating operation; `false` when the power is (now) off.
    fn step(&mut self) -> bool {
        if self.powered_off {
            return false;
        }
        let before = self.ops;
        self.ops += 1;
        assert!(self.ops > before, "the operation count only grows");
        if self.fail_at.is_some_and(|n| self.ops >= n) {
            self.powered_off = true;
            return false;
        }
        true
    }

    /// Whether a random fault hits this operation.
    fn random_fault(&mut self, write: bool) -> bool {
        let one_in = if write {
            self.write_fault_one_in
        } else {
            self.read_fault_one_in
        };
        match (&mut self.rng, one_in) {
            (Some(rng), n) if n > 0 => rng.chance(1, n),
            _ => false,
        }
    }

    /// Whether growing file `id` to `len` bytes would exceed the capacity.
    fn over_capacity(&self, id: u64, len: usize) -> bool {
        let Some(cap) = self.capacity_bytes else {
            return false;
        };
        let others: usize = self
            .files
            .iter()
            .filter(|(k, _)| **k != id)
            .map(|(_, f)| f.live.len())
            .sum();
        let own = self.files.get(&id).map_or(0, |f| f.live.len()).max(len);
        (others + own) as u64 > cap
    }

    /// Makes the file's pending writes and its size durable. Only what is
    /// pending: bytes a failed sync dropped stay readable but never reach
    /// the media (a later sync has nothing of them to write).
    fn sync_file(&mut self, id: u64) {
        if let Some(f) = self.files.get_mut(&id) {
            let len = f.live.len();
            f.durable.resize(len, 0);
            for &(off, n) in &f.pending {
                let end = (off + n).min(len);
                if off < end {
                    f.durable[off..end].copy_from_slice(&f.live[off..end]);
                }
            }
            f.pending.clear();
            f.resized = false;
            assert_eq!(
                f.durable.len(),
                f.live.len(),
                "a synced file is durable whole"
            );
        }
    }
}

impl SimStorage {
    /// The disk's sector: every request is held to its alignment.
    pub const SECTOR_BYTES: usize = SIM_SECTOR_BYTES;

    /// An empty disk.
    pub fn new() -> SimStorage {
        SimStorage::default()
    }

    /// The power fails at the `n`th mutating operation from now.
    pub fn power_fail_after(&self, n: u64) {
        let mut s = lock(&self.state);
        let at = s.ops + n.max(1);
        assert!(at > s.ops, "the power fails at an operation still to come");
        s.fail_at = Some(at);
    }

    /// The `n`th sync from now fails with `EIO` the Linux way: the file's
    /// unsynced writes are dropped (they stay readable until a crash but will
    /// never be durable) and the next sync reports success
    /// (RELIABILITY.md §3.1).
    pub fn fail_sync_linux_style(&self, n: u64) {
        lock(&self.state).sync_fail_in = Some(n.max(1));
    }

    /// Random faults from now on: one write in `write_one_in` and one read in
    /// `read_one_in` fails with EIO (0 turns each off), drawn from `seed`.
    pub fn set_random_faults(&self, write_one_in: u64, read_one_in: u64, seed: u64) {
        let mut s = lock(&self.state);
        s.write_fault_one_in = write_one_in;
        s.read_fault_one_in = read_one_in;
        s.rng = Some(Rng::new(seed));
    }

    /// Limits the disk to `bytes` (over all files' live sizes); `None` lifts it.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        lock(&self.state).capacity_bytes = bytes;
    }

    /// Bytes held by all files (live sizes).
    pub fn used_bytes(&self) -> u64 {
        lock(&self.state)
            .files
            .values()
            .map(|f| f.live.len() as u64)
            .sum()
    }

    /// The disk's counters.
    pub fn stats(&self) -> SimStats {
        let s = lock(&self.state);
        SimStats {
            ops: s.ops,
            powered_off: s.powered_off,
            crashes: s.crashes,
        }
    }

    /// Power loss: every unsynced write is applied, dropped or torn at sector
    /// granularity as `seed` decides; unsynced directory entries are lost; the
    /// durable state becomes the live one and the power comes back.
    pub fn crash(&self, seed: u64) {
        let mut rng = Rng::new(seed);
        let mut s = lock(&self.state);
        let mut ids: Vec<u64> = s.files.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let f = s.files.get_mut(&id).expect("listed id");
            let pending = std::mem::take(&mut f.pending);
            for (off, len) in pending {
                match rng.range(0, 3) {
                    0 => apply(f, off, len, |_| true, &mut rng),
                    1 => {}
                    _ => {
                        let mut r2 = Rng::new(rng.next_u64());
                        apply(f, off, len, move |_| r2.chance(1, 2), &mut rng);
                    }
                }
            }
            if std::mem::take(&mut f.resized) && rng.chance(1, 2) {
                f.durable.resize(f.live.len(), 0);
            }
            f.live.clone_from(&f.durable);
            assert!(f.pending.is_empty(), "a crash settles every pending write");
        }
        let durable = s.durable.clone();
        s.live = durable;
        s.restart();
    }

    /// The process killed (SIGKILL), the machine running on: every
    /// operation that completed stays, each write in its file and each entry
    /// in its directory, synced or not, and nothing after the power-fail
    /// point happened; a file no name reaches is gone, and the locks go
    /// with the process. What a kill leaves that a power loss does not: an
    /// unsynced file a creation left half made, under its name.
    pub fn kill(&self) {
        let mut s = lock(&self.state);
        for f in s.files.values_mut() {
            f.pending.clear();
            f.resized = false;
            f.durable.clone_from(&f.live);
        }
        let live = s.live.clone();
        s.durable = live;
        s.restart();
        assert!(
            s.files
                .values()
                .all(|f| f.live == f.durable && f.pending.is_empty()),
            "after a kill what was written is what stays"
        );
    }

    /// Flips one bit of a file's durable and live images (bit rot).
    pub fn flip_bit(&self, path: &Path, offset: usize, bit: u8) -> bool {
        let mut s = lock(&self.state);
        let Some(&id) = s.live.get(path) else {
            return false;
        };
        let f = s.files.get_mut(&id).expect("named file");
        if offset >= f.live.len() {
            return false;
        }
        f.live[offset] ^= 1 << (bit % 8);
        if offset < f.durable.len() {
            f.durable[offset] ^= 1 << (bit % 8);
        }
        true
    }

    /// Copies `len` bytes of a file from `from` to `to` in both images (a
    /// misdirected write of a whole page).
    pub fn copy_within(&self, path: &Path, from: usize, to: usize, len: usize) -> bool {
        let mut s = lock(&self.state);
        let Some(&id) = s.live.get(path) else {
            return false;
        };
        let f = s.files.get_mut(&id).expect("named file");
        if from + len > f.live.len() || to + len > f.live.len() || to + len > f.durable.len() {
            return false;
        }
        f.live.copy_within(from..from + len, to);
        f.durable.copy_within(from..from + len, to);
        true
    }

    /// A file's bytes (its live image), if it exists.
    pub fn file_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        let s = lock(&self.state);
        s.live
            .get(path)
            .and_then(|id| s.files.get(id))
            .map(|f| f.live.clone())
    }

    /// Replaces a file's bytes, durably (creating it): a user editing or
    /// restoring it while the database is closed.
    pub fn set_file_bytes(&self, path: &Path, bytes: Vec<u8>) {
        let mut s = lock(&self.state);
        let id = s.next_id;
        s.next_id += 1;
        s.files.insert(
            id,
            FileData {
                live: bytes.clone(),
                durable: bytes,
                pending: Vec::new(),
                resized: false,
            },
        );
        s.live.insert(path.to_path_buf(), id);
        s.durable.insert(path.to_path_buf(), id);
        assert_eq!(s.live.get(path), s.durable.get(path));
    }

    /// Removes a file, or a directory and everything under it, durably.
    pub fn remove_tree(&self, path: &Path) {
        let mut s = lock(&self.state);
        s.live.retain(|p, _| !p.starts_with(path));
        s.durable.retain(|p, _| !p.starts_with(path));
        s.dirs.retain(|p| !p.starts_with(path));
        assert!(!s.live.keys().any(|p| p.starts_with(path)));
    }

    /// The live length of a file, if it exists.
    pub fn file_len(&self, path: &Path) -> Option<usize> {
        let s = lock(&self.state);
        s.live
            .get(path)
            .and_then(|id| s.files.get(id))
            .map(|f| f.live.len())
    }
}

/// Applies a pending write `[off, off+len)` to the durable image, sector by
/// sector: whole when `keep` says so, else the sector keeps its old bytes or
/// (one time in four) becomes garbage.
fn apply(
    f: &mut FileData,
    off: usize,
    len: usize,
    mut keep: impl FnMut(usize) -> bool,
    rng: &mut Rng,
) {
    assert!(
        off <= f.live.len(),
        "a pending write lies inside the file it was written to"
    );
    let end = (off + len).min(f.live.len());
    if f.durable.len() < end {
        f.durable.resize(end, 0);
    }
    let mut at = off;
    while at < end {
        let next = ((at / SIM_SECTOR_BYTES) + 1) * SIM_SECTOR_BYTES;
        let stop = next.min(end);
        if keep(at) {
            f.durable[at..stop].copy_from_slice(&f.live[at..stop]);
        } else if rng.chance(1, 4) {
            for b in &mut f.durable[at..stop] {
                *b = rng.next_u64() as u8;
            }
        }
        assert!(stop > at, "every step settles at least one byte");
        at = stop;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{AlignedBuf, FileKind, FileOptions, Fill, Storage, StorageFile, SyncMethod};

    fn opts() -> FileOptions {
        FileOptions {
            create: true,
            sync: SyncMethod::Fdatasync,
            ..FileOptions::default()
        }
    }

    #[test]
    fn only_a_directory_is_anchored() {
        let disk = SimStorage::new();
        let dir = Path::new("/db");
        let missing = disk.anchor(dir).expect_err("nothing there yet");
        assert!(matches!(missing, Error::Io { .. }), "{missing}");
        disk.create_dir_all(dir).expect("mkdir");
        let held = disk.anchor(dir).expect("a directory");
        drop(held.open(&dir.join("data"), &opts()).expect("create"));
        let err = disk.anchor(&dir.join("data")).expect_err("a file");
        assert!(
            matches!(&err, Error::NotADirectory { kind, .. } if kind == "regular file"),
            "{err}"
        );
    }

    #[test]
    fn unsynced_writes_and_entries_may_vanish_synced_ones_stay() {
        let disk = SimStorage::new();
        let dir = Path::new("/db");
        disk.create_dir_all(dir).expect("mkdir");
        let f = disk.open(&dir.join("a"), &opts()).expect("open");
        let mut buf = AlignedBuf::new(4096, 512).expect("buf");
        buf.as_mut_slice().fill(1);
        f.write_all_at(buf.io_all(), 0).expect("write");
        f.sync_all().expect("sync");
        disk.sync_dir(dir).expect("sync dir");
        buf.as_mut_slice().fill(2);
        f.write_all_at(buf.io_all(), 0).expect("write");
        let g = disk.open(&dir.join("b"), &opts()).expect("open b");
        g.write_all_at(buf.io_all(), 0).expect("write b");
        g.sync_all().expect("sync b");
        drop((f, g));
        disk.crash(7);
        assert!(
            !disk.exists(&dir.join("b")),
            "its directory entry was never synced"
        );
        let f = disk.open(&dir.join("a"), &opts()).expect("reopen");
        let mut back = AlignedBuf::new(4096, 512).expect("buf");
        f.read_at(back.io_all_mut(), 0).expect("read");
        // Each sector holds 1 (old), 2 (new) or garbage; never anything else
        // where it was synced as 1 and left alone.
        assert_eq!(back.len(), 4096);
    }

    /// A kill keeps every completed write and entry, synced or not, and
    /// nothing after the power-fail point; a file no name reaches is gone.
    #[test]
    fn a_kill_keeps_what_completed_and_nothing_after() {
        let disk = SimStorage::new();
        disk.create_dir_all(Path::new("/d")).expect("mkdir");
        let f = disk.open(Path::new("/d/x"), &opts()).expect("open");
        let mut buf = AlignedBuf::new(512, 512).expect("buf");
        buf.as_mut_slice().fill(1);
        f.write_all_at(buf.io_all(), 0).expect("unsynced write");
        let g = disk.open(Path::new("/d/gone"), &opts()).expect("open");
        disk.remove_file(Path::new("/d/gone")).expect("unlink");
        // The next mutating operation is the one the power fails at.
        disk.power_fail_after(1);
        buf.as_mut_slice().fill(2);
        assert!(f.write_all_at(buf.io_all(), 0).is_err(), "after the point");
        drop((f, g));
        disk.kill();
        assert!(disk.exists(Path::new("/d/x")), "the unsynced entry stays");
        assert!(!disk.exists(Path::new("/d/gone")));
        let bytes = disk.file_bytes(Path::new("/d/x")).expect("file");
        assert!(
            bytes[..512].iter().all(|&b| b == 1),
            "the completed write stays"
        );
        disk.crash(3);
        assert!(
            disk.exists(Path::new("/d/x")),
            "what a kill left is durable: a power cut after it keeps it"
        );
    }

    #[test]
    fn bytes_a_failed_sync_dropped_never_become_durable() {
        let disk = SimStorage::new();
        disk.create_dir_all(Path::new("/d")).expect("mkdir");
        let f = disk.open(Path::new("/d/x"), &opts()).expect("open");
        disk.sync_dir(Path::new("/d")).expect("sync dir");
        let mut buf = AlignedBuf::new(512, 512).expect("buf");
        buf.as_mut_slice().fill(1);
        f.write_all_at(buf.io_all(), 0).expect("write");
        f.sync_all().expect("sync");
        buf.as_mut_slice().fill(2);
        f.write_all_at(buf.io_all(), 0).expect("dropped write");
        disk.fail_sync_linux_style(1);
        assert!(f.sync_all().is_err(), "the armed sync fails");
        // The failed handle refuses more; through another, a later write
        // elsewhere is synced: the sync reports success and writes what is
        // pending, not the sector the failure dropped.
        let g = disk.open(Path::new("/d/x"), &opts()).expect("reopen");
        buf.as_mut_slice().fill(3);
        g.write_all_at(buf.io_all(), 512).expect("write");
        g.allocate(4096, Fill::Reserve).expect("allocate");
        g.sync_all().expect("a later sync succeeds");
        let live = disk.file_bytes(Path::new("/d/x")).expect("file");
        assert_eq!(
            (live[0], live[512]),
            (2, 3),
            "the dropped bytes stay readable"
        );
        drop((f, g));
        disk.crash(1);
        let durable = disk.file_bytes(Path::new("/d/x")).expect("file");
        assert_eq!(durable.len(), 4096, "the allocation is durable");
        assert_eq!(
            (durable[0], durable[512], durable[1024]),
            (1, 3, 0),
            "the dropped sector kept its synced bytes"
        );
    }

    #[test]
    fn power_failure_stops_every_later_write() {
        let disk = SimStorage::new();
        disk.create_dir_all(Path::new("/d")).expect("mkdir");
        let f = disk.open(Path::new("/d/x"), &opts()).expect("open");
        disk.power_fail_after(2);
        let buf = AlignedBuf::new(512, 512).expect("buf");
        f.write_all_at(buf.io_all(), 0).expect("first write");
        assert!(f.write_all_at(buf.io_all(), 512).is_err());
        assert!(matches!(f.sync(), Err(Error::Poisoned { .. })));
        assert!(disk.stats().powered_off);
        disk.crash(1);
        assert!(!disk.stats().powered_off);
    }

    #[test]
    fn the_opening_rules_of_real_files_hold() {
        let disk = SimStorage::new();
        disk.create_dir_all(Path::new("/d")).expect("mkdir");
        let new = FileOptions {
            exclusive: true,
            ..opts()
        };
        disk.open(Path::new("/d/x"), &new).expect("a new file");
        let again = disk.open(Path::new("/d/x"), &new).expect_err("exists");
        assert_eq!(again.raw_os_error(), Some(libc::EEXIST), "{again}");
        let dir = disk
            .open(Path::new("/d"), &opts())
            .expect_err("a directory");
        assert!(matches!(dir, Error::NotARegularFile { .. }), "{dir}");
        let meta = disk.stat(Path::new("/d/x")).expect("stat");
        assert_eq!((meta.kind, meta.mode), (FileKind::File, 0o600));
        assert_eq!(
            disk.stat(Path::new("/d")).expect("stat").kind,
            FileKind::Dir
        );
    }

    /// A cut takes effect at once for the live file; a crash before the
    /// next sync leaves the durable size either way (both seen over
    /// seeds), never a byte the cut removed when it held, and a synced
    /// cut stays. Writes pending past the cut go with it.
    #[test]
    fn a_cut_is_live_at_once_and_durable_at_its_sync() {
        let mut sizes = std::collections::BTreeSet::new();
        for seed in 0..32 {
            let disk = SimStorage::new();
            disk.create_dir_all(Path::new("/d")).expect("mkdir");
            let f = disk.open(Path::new("/d/x"), &opts()).expect("open");
            let mut buf = AlignedBuf::new(8192, 512).expect("buf");
            buf.as_mut_slice().fill(1);
            f.write_all_at(buf.io_all(), 0).expect("write");
            f.sync_all().expect("sync");
            disk.sync_dir(Path::new("/d")).expect("sync dir");
            buf.as_mut_slice().fill(2);
            f.write_all_at(buf.io_all(), 0).expect("unsynced write");
            f.set_len(1024).expect("cut");
            assert_eq!(f.len().expect("len"), 1024);
            drop(f);
            disk.crash(seed);
            let back = disk.file_bytes(Path::new("/d/x")).expect("file");
            assert!(back.len() == 1024 || back.len() == 8192, "{}", back.len());
            assert!(
                back[1024..].iter().all(|&b| b == 1),
                "bytes past the cut are the synced ones"
            );
            sizes.insert(back.len());
        }
        assert_eq!(sizes.len(), 2, "a crash keeps either size: {sizes:?}");
        let disk = SimStorage::new();
        disk.create_dir_all(Path::new("/d")).expect("mkdir");
        let f = disk.open(Path::new("/d/x"), &opts()).expect("open");
        let buf = AlignedBuf::new(8192, 512).expect("buf");
        f.write_all_at(buf.io_all(), 0).expect("write");
        f.set_len(4096).expect("cut");
        f.sync_all().expect("sync");
        disk.sync_dir(Path::new("/d")).expect("sync dir");
        drop(f);
        disk.crash(3);
        assert_eq!(
            disk.file_bytes(Path::new("/d/x")).map(|b| b.len()),
            Some(4096)
        );
    }
}
