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
    /// Unsynced changes of size (`set_len`): at a crash the durable image
    /// takes them (cut to `cut_to`, then sized as the live file) or keeps
    /// its own size and bytes.
    resized: bool,
    /// The smallest size a `set_len` left since the last sync.
    cut_to: Option<usize>,
    /// Unsynced writes a cut removed from the live file, with their bytes:
    /// when a crash keeps the old size they may have reached the media,
    /// whole, torn or not at all.
    cut_off: Vec<(usize, Vec<u8>)>,
}

impl FileData {
    /// Cuts or extends the live file to `len` (see [`FileData::resized`]).
    fn set_len(&mut self, len: usize) {
        if len < self.live.len() {
            self.cut_to = Some(self.cut_to.map_or(len, |c| c.min(len)));
            for &(off, n) in &self.pending {
                if off + n > len {
                    let from = off.max(len);
                    self.cut_off.push((from, self.live[from..off + n].to_vec()));
                }
            }
            self.pending.retain(|&(off, _)| off < len);
            for (off, n) in &mut self.pending {
                *n = (*n).min(len - *off);
            }
        }
        self.live.resize(len, 0);
        self.resized = true;
        assert!(
            self.pending.iter().all(|&(off, n)| off + n <= len),
            "no pending write lies past the end"
        );
    }

    /// The size changes since the last sync reach the durable image.
    fn settle_size(&mut self) {
        if let Some(c) = self.cut_to.take() {
            self.durable.truncate(c);
        }
        self.durable.resize(self.live.len(), 0);
        self.cut_off.clear();
        self.resized = false;
    }
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
            f.settle_size();
            for &(off, n) in &f.pending {
                let end = (off + n).min(len);
                if off < end {
                    f.durable[off..end].copy_from_slice(&f.live[off..end]);
                }
            }
            f.pending.clear();
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
            if std::mem::take(&mut f.resized) {
                if rng.chance(1, 2) {
                    f.settle_size();
                } else {
                    for (off, bytes) in std::mem::take(&mut f.cut_off) {
                        apply_bytes(f, off, &bytes, &mut rng);
                    }
                    f.cut_to = None;
                }
            }
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
            assert!(
                f.cut_off.is_empty() && f.cut_to.is_none(),
                "a crash settles every cut"
            );
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
            f.cut_to = None;
            f.cut_off.clear();
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
                cut_to: None,
                cut_off: Vec::new(),
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

/// Applies a write a cut removed, `bytes` at `off`, to the durable image
/// of a file whose cut a crash did not keep: each sector whole, not at all
/// or (one time in four of those not kept) garbage, as `rng` decides.
fn apply_bytes(f: &mut FileData, off: usize, bytes: &[u8], rng: &mut Rng) {
    let end = off + bytes.len();
    if f.durable.len() < end {
        f.durable.resize(end, 0);
    }
    let mut at = off;
    while at < end {
        let stop = (((at / SIM_SECTOR_BYTES) + 1) * SIM_SECTOR_BYTES).min(end);
        match rng.range(0, 3) {
            0 => f.durable[at..stop].copy_from_slice(&bytes[at - off..stop - off]),
            1 => {}
            _ if rng.chance(1, 4) => f.durable[at..stop].fill(rng.next_u64() as u8),
            _ => {}
        }
        assert!(stop > at, "every step settles at least one byte");
        at = stop;
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
mod tests;
