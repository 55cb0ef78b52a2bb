//! The simulated disk's own behaviour: what a crash, a kill and a cut
//! leave of synced and unsynced writes, entries and sizes.

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
/// seeds), and when it keeps the old size, unsynced writes the cut
/// removed may be there (whole, torn or not: as direct writes may have
/// reached the media before a lost cut). A synced cut stays, also when
/// the file grew again before the sync: the bytes past the cut are the
/// zeros the live file showed.
#[test]
fn a_cut_is_live_at_once_and_durable_at_its_sync() {
    let mut sizes = std::collections::BTreeSet::new();
    let mut cut_writes_seen = false;
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
        cut_writes_seen |= back.len() == 8192 && back[1024..].contains(&2);
        sizes.insert(back.len());
    }
    assert_eq!(sizes.len(), 2, "a crash keeps either size: {sizes:?}");
    assert!(
        cut_writes_seen,
        "a write the lost cut removed may be on the media"
    );
    for regrow in [true, false] {
        let disk = SimStorage::new();
        disk.create_dir_all(Path::new("/d")).expect("mkdir");
        let f = disk.open(Path::new("/d/x"), &opts()).expect("open");
        let mut buf = AlignedBuf::new(8192, 512).expect("buf");
        buf.as_mut_slice().fill(1);
        f.write_all_at(buf.io_all(), 0).expect("write");
        f.sync_all().expect("sync");
        disk.sync_dir(Path::new("/d")).expect("sync dir");
        f.set_len(1024).expect("cut");
        let len = if regrow { 8192 } else { 1024 };
        f.set_len(len).expect("grow again");
        f.sync_all().expect("sync");
        drop(f);
        disk.crash(3);
        let back = disk.file_bytes(Path::new("/d/x")).expect("file");
        assert_eq!(back.len(), len as usize);
        assert!(back[..1024].iter().all(|&b| b == 1));
        assert!(back[1024..].iter().all(|&b| b == 0), "the synced cut holds");
    }
}
