//! Log archiving on the simulated disk, through power cuts and a full disk.
//!
//! - A power cut anywhere in a run of commits and checkpoints (aimed, for
//!   most seeds, at the archiving and recycling steps that end a
//!   checkpoint) loses no segment: after the crash and a reopen, the
//!   archive's names form one run without a hole, every segment from the
//!   backup's first to the live log's current one is in the archive or still
//!   in the live log (none was recycled before its copy was complete), the
//!   archive's copy of a segment the engine counts as archived holds the live
//!   segment's bytes, archiving after the reopen never fails, and a restore of
//!   the backup carried forward from the archive to a commit made after the
//!   crash gives exactly the state that commit saw.
//! - A disk that fills up fails archive copies, counted in
//!   `stats().archive` with the reason, while the unarchived segments stay;
//!   once space is back the archive catches up (in place, or after the
//!   reopen a poisoned database needs) and restores to the last commit
//!   acknowledged before the disk filled.
//!
//! Everything runs without background threads, so each seed's run (and its
//! operation count on the simulated disk) repeats exactly. The disk is
//! `SimStorage` behind a thin wrapper ([`Disk`]) that gives the files
//! opened without direct I/O the unaligned requests a backup's manifest
//! needs, renames a restore's directory, and notes where archiving and
//! recycling happen so that the power cuts can be aimed there.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use directkv::internals::engine::restore_chain_with;
use directkv::internals::io::{
    Alignment, FileMeta, FileOptions, Fill, IoMut, IoRef, Storage, StorageFile,
};
use directkv::internals::sim::{Rng, SimStorage};
use directkv::internals::wal::{Layout, SegmentHeader};
use directkv::{BackupOptions, Database, Error, IoOp, Lsn, Options, RestoreTarget};
use directkv::{DirectIo, FileKind, IoPath, Permissions};

/// The simulated disk as the engine's storage, with buffered I/O for the
/// files opened without direct I/O.
///
/// `SimStorage` holds every request to direct-I/O alignment, whatever the
/// file was opened with; but a backup's and a restore's small files (the
/// manifest and the completion marker, `backup::files::write_small` and
/// `read_small`) are written and read at their own length through
/// `DirectIo::Off`, as the real storage allows. Such an unaligned request
/// on such a file goes to the file's live image here (a write replaces the
/// file, durably; a read copies from it); everything else, and every
/// request of the log, the data file and the archive, goes to the
/// simulated disk unchanged. It does not rename directories either, which a
/// restore's last step does: see [`Disk::rename_dir`].
///
/// It notes the number of each operation on the archive and of each step
/// of preparing and recycling a log segment (the operations that create,
/// rename or remove a file there, sync the directory, allocate a segment,
/// write a segment's header and sync it), for the test to aim its power
/// cuts at.
#[derive(Debug, Clone)]
struct Disk(SimStorage, Arc<Mutex<Vec<(u64, Step)>>>, Plant);

/// Bytes another writer puts under the name an archive copy is about to
/// be renamed to, just before the rename (once).
type Plant = Arc<Mutex<Option<Vec<u8>>>>;

/// What a noted operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Copying a segment into the archive.
    Archive,
    /// Syncing the new header of a segment being recycled: the step
    /// between its archiving and its new name.
    Reheader,
    /// Another step of preparing or recycling a segment.
    Segment,
}

/// The simulated disk's own file and lock.
type SimFile = <SimStorage as Storage>::File;
type SimLock = <SimStorage as Storage>::Lock;

/// The number of the log segment a file name names (`{n:016X}.seg`, as
/// `docs/wal_format.md` gives it), if it names one.
fn parse_segment_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".seg")?;
    (hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u64::from_str_radix(hex, 16).ok())?
}

struct DiskFile {
    file: SimFile,
    disk: Disk,
    path: PathBuf,
    buffered: bool,
    /// In the archive: every write and sync is noted.
    archived: bool,
    /// A log segment (or one being prepared, a `.tmp`): its header writes
    /// and the syncs after them are noted.
    segment: bool,
    header_written: AtomicBool,
}

/// What an operation on `path` does, if it is noted.
fn step_of(path: &Path) -> Option<Step> {
    if path.starts_with(ARCHIVE) {
        Some(Step::Archive)
    } else if path.starts_with(WAL) {
        Some(Step::Segment)
    } else {
        None
    }
}

impl Disk {
    fn new() -> Disk {
        Disk(SimStorage::new(), Arc::default(), Arc::default())
    }

    /// Notes the operation about to run, if it is one of `step`.
    fn note(&self, step: Option<Step>) {
        if let Some(step) = step {
            let next = self.0.stats().ops + 1;
            self.1.lock().expect("trace").push((next, step));
        }
    }

    /// The operations noted so far.
    fn noted_ops(&self) -> Vec<(u64, Step)> {
        self.1.lock().expect("trace").clone()
    }
}

impl DiskFile {
    fn emulated(&self, offset: u64, len: usize) -> bool {
        let unit = SimStorage::SECTOR_BYTES as u64;
        self.buffered && (offset % unit != 0 || len as u64 % unit != 0)
    }

    fn power_check(&self, op: IoOp) -> directkv::Result<()> {
        if self.disk.0.stats().powered_off {
            let eio = std::io::Error::from_raw_os_error(libc::EIO);
            return Err(Error::from_io(op, &self.path, None, eio));
        }
        Ok(())
    }

    fn note_sync(&self) {
        let header = self.header_written.swap(false, Ordering::Relaxed);
        let recycling = header
            && self
                .path
                .file_name()
                .and_then(|n| parse_segment_file_name(&n.to_string_lossy()))
                .is_some();
        self.disk.note(if self.archived {
            Some(Step::Archive)
        } else if recycling {
            Some(Step::Reheader)
        } else {
            header.then_some(Step::Segment)
        });
    }
}

impl StorageFile for DiskFile {
    fn path(&self) -> &Path {
        self.file.path()
    }
    fn alignment(&self) -> Alignment {
        self.file.alignment()
    }
    fn io_path(&self) -> IoPath {
        self.file.io_path()
    }
    fn read_at(&self, mut buf: IoMut<'_>, offset: u64) -> directkv::Result<usize> {
        if !self.emulated(offset, buf.len()) {
            return self.file.read_at(buf, offset);
        }
        let image = self.disk.0.file_bytes(&self.path).unwrap_or_default();
        let from = (offset as usize).min(image.len());
        let n = buf.len().min(image.len() - from);
        buf.bytes_mut()[..n].copy_from_slice(&image[from..from + n]);
        Ok(n)
    }
    fn write_all_at(&self, data: IoRef<'_>, offset: u64) -> directkv::Result<()> {
        if !self.emulated(offset, data.len()) {
            let header = self.segment && offset == 0;
            self.header_written.store(header, Ordering::Relaxed);
            self.disk.note(if header {
                Some(Step::Segment)
            } else {
                self.archived.then_some(Step::Archive)
            });
            return self.file.write_all_at(data, offset);
        }
        self.power_check(IoOp::Write)?;
        let mut image = self.disk.0.file_bytes(&self.path).unwrap_or_default();
        let end = offset as usize + data.len();
        if image.len() < end {
            image.resize(end, 0);
        }
        image[offset as usize..end].copy_from_slice(data.bytes());
        self.disk.0.set_file_bytes(&self.path, image);
        Ok(())
    }
    fn sync(&self) -> directkv::Result<()> {
        self.note_sync();
        self.file.sync()
    }
    fn sync_all(&self) -> directkv::Result<()> {
        self.note_sync();
        self.file.sync_all()
    }
    fn len(&self) -> directkv::Result<u64> {
        if self.buffered {
            // The emulated writes replace the file under its name.
            return Ok(self.disk.0.file_len(&self.path).unwrap_or(0) as u64);
        }
        self.file.len()
    }
    fn allocate(&self, len: u64, fill: Fill) -> directkv::Result<()> {
        self.disk.note(step_of(&self.path));
        self.file.allocate(len, fill)
    }
    fn set_len(&self, len: u64) -> directkv::Result<()> {
        self.disk.note(step_of(&self.path));
        self.file.set_len(len)
    }
}

impl Storage for Disk {
    type File = DiskFile;
    type Lock = SimLock;

    fn lock_exclusive(&self, path: &Path, permissions: Permissions) -> directkv::Result<SimLock> {
        self.0.lock_exclusive(path, permissions)
    }
    fn open(&self, path: &Path, opts: &FileOptions) -> directkv::Result<DiskFile> {
        self.note(step_of(path).filter(|_| opts.create && !self.0.exists(path)));
        Ok(DiskFile {
            file: self.0.open(path, opts)?,
            disk: self.clone(),
            path: path.to_path_buf(),
            buffered: opts.direct_io == DirectIo::Off,
            archived: path.starts_with(ARCHIVE),
            segment: path.starts_with(WAL),
            header_written: AtomicBool::new(false),
        })
    }
    fn create_dirs(&self, path: &Path, permissions: Permissions) -> directkv::Result<()> {
        self.0.create_dirs(path, permissions)
    }
    fn stat(&self, path: &Path) -> directkv::Result<FileMeta> {
        self.0.stat(path)
    }
    fn list_dir(&self, path: &Path) -> directkv::Result<Vec<String>> {
        self.0.list_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> directkv::Result<()> {
        if self.0.stat(from)?.kind == FileKind::Dir {
            return self.rename_dir(from, to);
        }
        self.note(step_of(from));
        self.plant(to);
        self.0.rename(from, to)
    }
    fn rename_new(&self, from: &Path, to: &Path) -> directkv::Result<()> {
        self.note(step_of(from));
        self.plant(to);
        self.0.rename_new(from, to)
    }
    fn remove_file(&self, path: &Path) -> directkv::Result<()> {
        self.note(step_of(path));
        self.0.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> directkv::Result<()> {
        // The archive's and the log's own directory; a restore's are not.
        let own = path == Path::new(ARCHIVE) || path == Path::new(WAL);
        self.note(step_of(&path.join("entry")).filter(|_| own));
        self.0.sync_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.exists(path)
    }
    fn anchor(&self, dir: &Path) -> directkv::Result<Disk> {
        Ok(Disk(
            self.0.anchor(dir)?,
            Arc::clone(&self.1),
            Arc::clone(&self.2),
        ))
    }
}

impl Disk {
    /// Puts the planted bytes, if any, under `to` when it is in the archive.
    fn plant(&self, to: &Path) {
        if to.starts_with(ARCHIVE) {
            if let Some(bytes) = self.2.lock().expect("plant").take() {
                self.0.set_file_bytes(to, bytes);
            }
        }
    }

    /// A restore's last step renames its scratch directory, which the
    /// simulated disk does not do: here its files move to the new name,
    /// durably, and the old tree goes.
    fn rename_dir(&self, from: &Path, to: &Path) -> directkv::Result<()> {
        if self.0.stats().powered_off {
            let eio = std::io::Error::from_raw_os_error(libc::EIO);
            return Err(Error::from_io(IoOp::Rename, from, None, eio));
        }
        let mut stack = vec![from.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let target = to.join(dir.strip_prefix(from).expect("under the tree"));
            self.0.create_dirs(&target, Permissions::Private)?;
            for name in self.0.list_dir(&dir)? {
                let path = dir.join(&name);
                if self.0.stat(&path)?.kind == FileKind::Dir {
                    stack.push(path);
                } else {
                    let bytes = self.0.file_bytes(&path).expect("a listed file");
                    self.0.set_file_bytes(&target.join(&name), bytes);
                }
            }
        }
        self.0.remove_tree(from);
        Ok(())
    }
}

impl std::ops::Deref for Disk {
    type Target = SimStorage;
    fn deref(&self) -> &SimStorage {
        &self.0
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
type Db = Database<Disk>;

const DB: &str = "/sim/db";
const WAL: &str = "/sim/db/wal";
const ARCHIVE: &str = "/sim/archive";
const BACKUP: &str = "/sim/backup";
const SEGMENT_BYTES: u64 = 64 << 10;
const LAYOUT: Layout = Layout {
    segment_bytes: SEGMENT_BYTES,
};

fn opts(archive: bool) -> Options {
    Options {
        cache_bytes: 32 * 4096,
        page_bytes: 4096,
        wal_sync: common::SIM_SYNC,
        wal_segment_bytes: SEGMENT_BYTES,
        checkpoint_wal_bytes: 128 << 10,
        wal_archive: archive.then(|| PathBuf::from(ARCHIVE)),
        // Nothing runs behind the test's back: every seed repeats exactly.
        background_threads: false,
        publish_stats: false,
        ..Options::default()
    }
}

fn open(disk: &Disk) -> Db {
    Database::open_with(disk.clone(), Path::new(DB), opts(true)).expect("open")
}

/// A key of the first `keys`.
fn key(rng: &mut Rng, keys: u64) -> Vec<u8> {
    format!("k{:04}", rng.range(0, keys)).into_bytes()
}

/// A value of 200–2000 bytes that differs from its neighbours.
fn value(rng: &mut Rng) -> Vec<u8> {
    let len = rng.range(200, 2001) as usize;
    let b = rng.next_u64() as u8;
    (0..len).map(|i| b.wrapping_add((i / 7) as u8)).collect()
}

/// Why a commit failed, and the state it leaves if it may have committed.
struct Failed {
    error: Error,
    /// `model` with the transaction applied, when `commit_lsn` itself
    /// failed (its outcome is for recovery to decide).
    if_committed: Option<Model>,
}

/// One transaction of one to four puts and deletes; applied to `model`
/// once it committed. Returns its commit LSN.
fn commit_some(db: &Db, model: &mut Model, rng: &mut Rng, keys: u64) -> Result<Lsn, Failed> {
    let early = |error| Failed {
        error,
        if_committed: None,
    };
    let mut writes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    let mut w = db.begin_write().map_err(early)?;
    for _ in 0..rng.range(1, 5) {
        let k = key(rng, keys);
        if rng.chance(1, 5) {
            w.delete(&k).map_err(early)?;
            writes.push((k, None));
        } else {
            let v = value(rng);
            w.put(&k, &v).map_err(early)?;
            writes.push((k, Some(v)));
        }
    }
    let apply = |model: &mut Model| {
        for (k, v) in &writes {
            match v {
                Some(v) => model.insert(k.clone(), v.clone()),
                None => model.remove(k),
            };
        }
    };
    match w.commit_lsn() {
        Ok(lsn) => {
            apply(model);
            Ok(lsn)
        }
        Err(error) => {
            let mut next = model.clone();
            apply(&mut next);
            Err(Failed {
                error,
                if_committed: Some(next),
            })
        }
    }
}

fn contents(db: &Db) -> Model {
    let r = db.begin_read().expect("read");
    r.range(..).map(|kv| kv.expect("row")).collect()
}

/// Big values under keys of their own until `segments` more segments are
/// complete, so every commit before is in a complete segment.
fn push_log_on(db: &Db, segments: u64) {
    let until = db.stats().wal.end_lsn + segments * SEGMENT_BYTES;
    let mut i = 0u32;
    while db.stats().wal.end_lsn < until {
        let mut w = db.begin_write().expect("begin pad");
        w.put(format!("pad{:03}", i % 40).as_bytes(), &[i as u8; 3000])
            .expect("put pad");
        w.commit().expect("commit pad");
        i += 1;
    }
}

/// The segment numbers in `dir` (`*.tmp` and other names ignored).
fn segments_in(disk: &Disk, dir: &str) -> Vec<u64> {
    let mut v: Vec<u64> = disk
        .list_dir(Path::new(dir))
        .expect("list")
        .iter()
        .filter_map(|name| parse_segment_file_name(name))
        .collect();
    v.sort_unstable();
    v
}

/// The segment number the header of `path` carries, if it has a valid one.
fn header_number(disk: &Disk, path: &Path) -> Option<u64> {
    let bytes = disk.file_bytes(path)?;
    SegmentHeader::decode(&bytes).ok().map(|h| h.segment_no)
}

/// The invariants of the archive against the live log, from segment
/// `from` (the backup's first) on:
/// - the archive's segment names are one run without a hole;
/// - every segment the engine counts as archived is there, and holds the
///   bytes of the live segment where one is still in the log;
/// - every segment from `from` to the current one is in the archive or in
///   the live log under its own number: none was recycled unarchived.
///
/// Returns the archive's segments.
fn assert_no_segment_lost(disk: &Disk, db: &Db, from: u64, ctx: &str) -> Vec<u64> {
    let archived = segments_in(disk, ARCHIVE);
    if let (Some(&first), Some(&last)) = (archived.first(), archived.last()) {
        assert!(
            archived.iter().copied().eq(first..=last),
            "{ctx}: the archive has a hole: {archived:?}"
        );
    }
    for name in disk.list_dir(Path::new(ARCHIVE)).expect("list archive") {
        let base = name.strip_suffix(".tmp").unwrap_or(&name);
        // The archive's identity is its one other file.
        assert!(
            parse_segment_file_name(base).is_some() || base == "ARCHIVE_ID",
            "{ctx}: a foreign name {name} in the archive"
        );
    }
    let stats = db.stats();
    let next = stats.archive.next_segment;
    let current = LAYOUT.segment_of(Lsn::new(stats.wal.end_lsn));
    let wal = Path::new(WAL);
    let live: Vec<u64> = segments_in(disk, WAL)
        .into_iter()
        .filter(|&n| n <= current)
        .filter(|&n| header_number(disk, &wal.join(file_name(n))) == Some(n))
        .collect();
    for n in from..next {
        assert!(
            archived.binary_search(&n).is_ok(),
            "{ctx}: segment {n} counts as archived (next {next}) but is not in the archive \
             {archived:?}"
        );
        if live.binary_search(&n).is_ok() && n < current {
            let ours = disk.file_bytes(&wal.join(file_name(n)));
            let theirs = disk.file_bytes(&Path::new(ARCHIVE).join(file_name(n)));
            assert!(
                ours == theirs,
                "{ctx}: the archive's copy of segment {n} differs from the live segment"
            );
        }
    }
    for n in from..=current {
        assert!(
            archived.binary_search(&n).is_ok() || live.binary_search(&n).is_ok(),
            "{ctx}: segment {n} is neither archived ({archived:?}) nor in the live log \
             ({live:?}, current {current}, next to archive {next}): recycled unarchived"
        );
    }
    assert!(
        next <= current,
        "{ctx}: the archiver ({next}) is never past the current segment ({current})"
    );
    archived
}

fn file_name(n: u64) -> String {
    directkv::internals::wal::segment_file_name(n)
}

/// The backup's first log segment.
fn backup_first_segment(disk: &Disk) -> u64 {
    *segments_in(disk, &format!("{BACKUP}/wal"))
        .first()
        .expect("the backup has a log")
}

/// Restores the backup carried forward to `lsn` into `dest` and returns
/// the restored database's contents (after `check`).
fn restore_to(disk: &Disk, dest: &str, lsn: Lsn, ctx: &str) -> Model {
    let dest = Path::new(dest);
    let report = restore_chain_with(
        disk,
        &[BACKUP],
        dest,
        Some((Path::new(ARCHIVE), RestoreTarget::Lsn(lsn))),
        |p| disk.remove_tree(p),
    )
    .unwrap_or_else(|e| panic!("{ctx}: restore to {lsn}: {e}"));
    let rolled = report.rolled_forward.expect("rolled forward");
    assert_eq!(
        rolled.last_commit_lsn,
        Some(lsn),
        "{ctx}: the restore stops at the commit ending at {lsn}: {rolled:?}"
    );
    assert_eq!(rolled.log_end, lsn, "{ctx}: {rolled:?}");
    let db = Database::open_with(disk.clone(), dest, opts(false))
        .unwrap_or_else(|e| panic!("{ctx}: open restored {}: {e}", dest.display()));
    db.check()
        .unwrap_or_else(|e| panic!("{ctx}: check restored: {e}"));
    let got = contents(&db);
    db.close().expect("close restored");
    got
}

/// A database with an archive: 50 small commits, a checkpoint, a full
/// backup. Returns the database and its contents.
fn start(disk: &Disk, rng: &mut Rng) -> (Db, Model) {
    let db = open(disk);
    let mut model = Model::new();
    for i in 0..50u32 {
        let mut w = db.begin_write().expect("begin");
        let k = key(rng, 300);
        let v = vec![i as u8; 20 + rng.range(0, 100) as usize];
        w.put(&k, &v).expect("put");
        w.commit().expect("commit");
        model.insert(k, v);
    }
    db.checkpoint().expect("checkpoint");
    db.backup(BACKUP, &BackupOptions::default())
        .expect("backup");
    (db, model)
}

/// What a run of the workload did before it stopped.
#[derive(Default)]
struct Run {
    /// The commits acknowledged.
    acked: Model,
    /// The state if the commit that failed took effect.
    if_committed: Option<Model>,
    /// The operations on the archive and the log's segment files (see
    /// [`Disk`]), counted from the run's start.
    noted: Vec<(u64, Step)>,
    /// The operations the whole run made.
    ops: u64,
    error: Option<Error>,
}

const WORKLOAD_COMMITS: u32 = 120;

/// Commits with a checkpoint after every 20th, until the first error.
fn workload(disk: &Disk, db: &Db, model: Model, rng: &mut Rng) -> Run {
    let base = disk.stats().ops;
    let mut run = Run {
        acked: model,
        ..Run::default()
    };
    for i in 1..=WORKLOAD_COMMITS {
        if let Err(f) = commit_some(db, &mut run.acked, rng, 300) {
            run.if_committed = f.if_committed;
            run.error = Some(f.error);
            break;
        }
        if i % 20 == 0 {
            if let Err(e) = db.checkpoint() {
                run.error = Some(e);
                break;
            }
        }
    }
    run.ops = disk.stats().ops - base;
    run.noted = disk
        .noted_ops()
        .into_iter()
        .filter(|&(n, _)| n > base)
        .map(|(n, step)| (n - base, step))
        .collect();
    run
}

/// Where the power fails for `seed`, counted from the workload's start:
/// by the seed's remainder modulo 4, at one of the operations of archiving
/// a segment (0), at the sync of a recycled segment's new header (1), at
/// any step of archiving, preparing or recycling a segment (2), or anywhere
/// (3). (A seed whose run has no such operation cuts anywhere.)
fn cut_point(seed: u64, dry: &Run) -> u64 {
    let mut rng = Rng::new(seed ^ 0xA5C1_7E57);
    let aimed: Vec<u64> = dry
        .noted
        .iter()
        .filter(|(_, step)| match seed % 4 {
            0 => *step == Step::Archive,
            1 => *step == Step::Reheader,
            2 => true,
            _ => false,
        })
        .map(|&(n, _)| n)
        .collect();
    if aimed.is_empty() {
        return rng.range(1, dry.ops + 1);
    }
    aimed[rng.range(0, aimed.len() as u64) as usize]
}

/// Runs `f` for each seed and fails after all of them with the seeds that
/// failed (each one's panic message is printed as it happens).
fn for_seeds(seeds: std::ops::Range<u64>, f: impl Fn(u64)) {
    let failed: Vec<u64> = seeds
        .filter(|&seed| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(seed))).is_err())
        .collect();
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
}

#[test]
fn a_crash_between_archiving_and_recycling_loses_no_segment() {
    for_seeds(0..30, crash_run);
}

/// One seed of [`a_crash_between_archiving_and_recycling_loses_no_segment`].
fn crash_run(seed: u64) {
    let ctx = format!("seed {seed}");
    // A dry run of the same workload counts its operations.
    let dry = {
        let disk = Disk::new();
        let mut rng = Rng::new(seed);
        let (db, model) = start(&disk, &mut rng);
        let run = workload(&disk, &db, model, &mut rng);
        assert!(
            run.error.is_none(),
            "{ctx}: the dry run fails: {:?}",
            run.error
        );
        run
    };
    let cut = cut_point(seed, &dry);

    let disk = Disk::new();
    let mut rng = Rng::new(seed);
    let (db, model) = start(&disk, &mut rng);
    let from = backup_first_segment(&disk);
    disk.power_fail_after(cut);
    let run = workload(&disk, &db, model, &mut rng);
    let cut_at = disk.stats().powered_off;
    // The power is off (now, if the cut lay past the workload's end): the
    // database's drop reaches nothing on the disk, as if the process died
    // with it (`mem::forget` would do the same, and keep each seed's
    // buffers and disk for the rest of the test).
    disk.power_fail_after(1);
    drop(db);
    disk.crash(seed);

    let db = open(&disk);
    let found = contents(&db);
    assert!(
        found == run.acked || Some(&found) == run.if_committed.as_ref(),
        "{ctx} (cut at op {cut} of {}, power off {cut_at}, error {:?}): the reopened \
         database holds neither the acknowledged commits nor them and the one in flight",
        dry.ops,
        run.error
    );
    assert_no_segment_lost(&disk, &db, from, &format!("{ctx}, after the crash"));

    let mut model = found;
    let mut recorded: Vec<(Lsn, Model)> = Vec::new();
    for _ in 0..25 {
        let lsn = commit_some(&db, &mut model, &mut rng, 300)
            .unwrap_or_else(|f| panic!("{ctx}: commit after reopen: {}", f.error));
        let now = contents(&db);
        assert!(now == model, "{ctx}: the database holds the model");
        recorded.push((lsn, now));
    }
    push_log_on(&db, 3);
    db.checkpoint().expect("checkpoint after reopen");
    let s = db.stats().archive;
    assert!(
        s.enabled && s.failures == 0 && s.last_failure.is_none(),
        "{ctx} (cut at op {cut}): archiving fails after the reopen: {s:?}"
    );
    let last = recorded.last().expect("recorded").0;
    assert!(
        s.next_segment > LAYOUT.segment_of(last),
        "{ctx}: the recorded commits are archived: {s:?}, last commit at {last}"
    );
    assert_no_segment_lost(&disk, &db, from, &format!("{ctx}, after the commits"));
    db.close().expect("close");

    let mut pick = Rng::new(seed ^ 0x5EED);
    for i in 0..3 {
        let k = pick.range(0, recorded.len() as u64) as usize;
        let (lsn, want) = &recorded[k];
        let c = format!("{ctx}, restore {i} to commit {k} at {lsn}");
        let got = restore_to(&disk, &format!("/sim/restored{i}"), *lsn, &c);
        assert!(
            got == *want,
            "{c}: the restored database differs from the commit's state"
        );
    }
}

/// The segments `from..=to` the live log holds under their own numbers.
fn live_segments(disk: &Disk, from: u64, to: u64) -> Vec<u64> {
    let wal = Path::new(WAL);
    segments_in(disk, WAL)
        .into_iter()
        .filter(|&n| (from..=to).contains(&n))
        .filter(|&n| header_number(disk, &wal.join(file_name(n))) == Some(n))
        .collect()
}

fn current_segment(db: &Db) -> u64 {
    LAYOUT.segment_of(Lsn::new(db.stats().wal.end_lsn))
}

#[test]
fn archive_enospc_keeps_segments_and_catches_up() {
    // Room for less than one more segment, and for one and a half.
    for (seed, room) in [(7u64, SEGMENT_BYTES * 3 / 4), (8, SEGMENT_BYTES * 3 / 2)] {
        enospc_run(seed, room);
    }
}

/// One run of [`archive_enospc_keeps_segments_and_catches_up`]: the disk
/// holds `room` bytes more than it does once the database is warm.
fn enospc_run(seed: u64, room: u64) {
    let ctx = format!("seed {seed}, room {room}");
    let disk = Disk::new();
    let mut rng = Rng::new(seed);
    let (db, mut model) = start(&disk, &mut rng);
    let from = backup_first_segment(&disk);
    // Warm: the data file at the size 40 keys keep it at, and spare
    // segments ahead (a burst of log, then a checkpoint that recycles it),
    // so that only archive copies and new segments need space.
    for _ in 0..3 {
        for _ in 0..20 {
            commit_some(&db, &mut model, &mut rng, 40).unwrap_or_else(|f| panic!("{}", f.error));
        }
        db.checkpoint().expect("checkpoint");
    }
    push_log_on(&db, 8);
    model = contents(&db);
    db.checkpoint().expect("checkpoint");
    assert_eq!(
        db.stats().archive.failures,
        0,
        "{ctx}: {:?}",
        db.stats().archive
    );
    let spares = segments_in(&disk, WAL)
        .into_iter()
        .filter(|&n| n > current_segment(&db))
        .count();
    assert!(
        spares >= 4,
        "{ctx}: the warm log has spare segments: {spares}"
    );

    disk.set_capacity(Some(disk.used_bytes() + room));
    let mut last: (Lsn, Model) = (Lsn::ZERO, Model::new());
    let mut failing_checkpoints = 0u32;
    let mut commits_while_failing = 0u32;
    let mut failures_before = 0;
    let end = 'rounds: loop {
        for _ in 0..20 {
            match commit_some(&db, &mut model, &mut rng, 40) {
                Ok(lsn) => {
                    last = (lsn, model.clone());
                    if failures_before > 0 {
                        commits_while_failing += 1;
                    }
                }
                Err(f) => break 'rounds f.error,
            }
        }
        if let Err(e) = db.checkpoint() {
            break 'rounds e;
        }
        let s = db.stats().archive;
        if s.failures > 0 {
            assert!(
                s.failures > failures_before,
                "{ctx}: every checkpoint's archiving fails while the disk is full: {s:?}"
            );
            failing_checkpoints += 1;
            let current = current_segment(&db);
            let kept = live_segments(&disk, s.next_segment, current);
            assert!(
                kept.iter().copied().eq(s.next_segment..=current),
                "{ctx}: the log keeps every segment not archived ({}..={current}): {kept:?}",
                s.next_segment
            );
        }
        failures_before = s.failures;
        assert_no_segment_lost(&disk, &db, from, &format!("{ctx}, disk full"));
        assert!(
            failing_checkpoints < 100,
            "{ctx}: the log never ran out of space while archiving failed"
        );
    };
    assert!(
        matches!(end, Error::DiskFull { .. }),
        "{ctx}: a full disk stops commits with DiskFull, not {end}"
    );
    let s = db.stats().archive;
    assert!(
        s.failures > 0 && failing_checkpoints >= 2 && commits_while_failing >= 20,
        "{ctx}: archiving failed ({s:?}) while checkpoints ({failing_checkpoints}) and commits \
         ({commits_while_failing}) went on"
    );
    let why = s.last_failure.clone().expect("the last failure is kept");
    assert!(
        why.contains("no space left") && why.contains(&file_name(s.next_segment)),
        "{ctx}: the failure names the segment and the cause: {why}"
    );
    let stuck = s.next_segment;
    assert_no_segment_lost(&disk, &db, from, &format!("{ctx}, commits stopped"));

    // Space again: archiving catches up in place, or after the reopen a
    // poisoned database needs.
    disk.set_capacity(None);
    let db = match db.checkpoint() {
        Ok(()) => db,
        Err(e) => {
            assert!(
                matches!(e, Error::Poisoned { .. }),
                "{ctx}: a database stopped by a full log is poisoned: {e}"
            );
            drop(db);
            let db = open(&disk);
            assert!(
                contents(&db) == model,
                "{ctx}: the reopened database holds exactly the acknowledged commits"
            );
            db
        }
    };
    push_log_on(&db, 2);
    db.checkpoint().expect("checkpoint with space");
    let caught_up = db.stats().archive;
    assert!(
        caught_up.next_segment > stuck && caught_up.last_failure.is_none(),
        "{ctx}: archiving catches up from segment {stuck}: {caught_up:?}"
    );
    assert!(
        live_segments(&disk, stuck, stuck).is_empty(),
        "{ctx}: segment {stuck}, archived now, is recycled"
    );
    let mut after = model.clone();
    let later =
        commit_some(&db, &mut after, &mut rng, 40).unwrap_or_else(|f| panic!("{}", f.error));
    let later_state = contents(&db);
    push_log_on(&db, 2);
    db.checkpoint().expect("checkpoint with space");
    let s = db.stats();
    assert!(
        s.archive.failures == caught_up.failures && s.archive.last_failure.is_none(),
        "{ctx}: no more failures once there is space: {:?} then {:?}",
        caught_up,
        s.archive
    );
    assert_eq!(
        s.archive.next_segment,
        LAYOUT.segment_of(Lsn::new(s.wal.durable_lsn)),
        "{ctx}: every complete segment is archived"
    );
    assert_no_segment_lost(&disk, &db, from, &format!("{ctx}, caught up"));
    db.close().expect("close");

    let got = restore_to(&disk, "/sim/restored-full", last.0, &ctx);
    assert!(
        got == last.1,
        "{ctx}: the restore to the last commit before the disk filled ({}) gives its state",
        last.0
    );
    let got = restore_to(&disk, "/sim/restored-later", later, &ctx);
    assert!(
        got == later_state,
        "{ctx}: the restore to a commit after the disk had space again ({later}) gives its \
         state"
    );
}

/// A file that appears under a segment's name in the archive while the
/// segment is being copied there is not replaced by the copy: the round
/// fails naming it, the file keeps its bytes, the segment stays in the log
/// unarchived, and once the file is gone the archive catches up.
#[test]
fn a_file_that_appears_during_a_copy_is_not_replaced() {
    let disk = Disk::new();
    let db = open(&disk);
    db.checkpoint().expect("checkpoint");
    let next = db.stats().archive.next_segment;
    let foreign = vec![7u8; SEGMENT_BYTES as usize];
    *disk.2.lock().expect("plant") = Some(foreign.clone());
    push_log_on(&db, 2);
    db.checkpoint().expect("checkpoint");
    let s = db.stats().archive;
    assert!(s.failures > 0, "{s:?}");
    assert_eq!(s.next_segment, next, "{s:?}");
    let planted = Path::new(ARCHIVE).join(file_name(next));
    assert_eq!(disk.file_bytes(&planted), Some(foreign), "the file is kept");
    assert!(
        segments_in(&disk, WAL).contains(&next),
        "the segment stays in the log"
    );
    let names = disk.list_dir(Path::new(ARCHIVE)).expect("list");
    assert!(
        names.iter().all(|n| !n.ends_with(".tmp")),
        "no copy is left behind: {names:?}"
    );
    disk.remove_file(&planted).expect("clear the way");
    push_log_on(&db, 1);
    db.checkpoint().expect("checkpoint");
    let s = db.stats().archive;
    assert!(s.next_segment > next + 1, "the archive caught up: {s:?}");
    assert!(s.last_failure.is_none(), "{s:?}");
}
