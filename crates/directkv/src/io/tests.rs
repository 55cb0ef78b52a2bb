//! The I/O layer against real files: alignment detection agrees with the kernel
//! and sysfs, each sync method opens exactly the flags it claims (read back from
//! `/proc/self/fdinfo`), direct I/O falls back or fails as `DirectIo` says on
//! tmpfs, concurrent positional writes land byte-exact, a buffered reader sees
//! what a direct writer wrote, and a failed write poisons the file for good.
//!
//! A sync probe's scratch file carries the engine's magic from its first
//! write, is private, is never written through, and is no leftover while its
//! process lives.
//!
//! Direct-I/O cases run in a temporary directory (`tempfile::tempdir()`);
//! where that filesystem refuses `O_DIRECT` they print why and skip.

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::fs::{device_info, fs_info};
use super::profile;
use super::{
    statx_direct_io, AlignedBuf, AlignmentSource, At, DirectFile, DirectIo, FileOptions, Fill,
    IoPath, OsStorage, Storage, StorageFile, SyncMethod,
};
use crate::error::Error;

fn opts(direct_io: DirectIo, sync: SyncMethod) -> FileOptions {
    FileOptions {
        create: true,
        direct_io,
        sync,
        ..FileOptions::default()
    }
}

/// Opens `name` in `dir` with direct I/O, or returns `None` (and says why) when
/// the filesystem refuses it.
fn open_direct(dir: &Path, name: &str, sync: SyncMethod) -> Option<DirectFile> {
    match DirectFile::open(dir.join(name), &opts(DirectIo::On, sync)) {
        Ok(f) => Some(f),
        Err(Error::DirectIoUnsupported { fs_type, .. }) => {
            eprintln!("skipped: {fs_type} at {} refuses O_DIRECT", dir.display());
            None
        }
        Err(e) => panic!("open: {e}"),
    }
}

fn fdinfo_flags(file: &DirectFile) -> u32 {
    let text =
        std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd())).expect("fdinfo");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .expect("flags line");
    u32::from_str_radix(line.trim(), 8).expect("octal flags")
}

fn tmpfs_dir() -> Option<PathBuf> {
    let shm = Path::new("/dev/shm");
    match fs_info(shm) {
        Ok(info) if info.fs_type == "tmpfs" => Some(shm.to_path_buf()),
        _ => {
            eprintln!("skipped: /dev/shm is not a tmpfs here");
            None
        }
    }
}

#[test]
fn alignment_matches_statx_and_sysfs() {
    let dir = tempfile::tempdir().expect("dir");
    let Some(file) = open_direct(dir.path(), "a", SyncMethod::Fdatasync) else {
        return;
    };
    let a = file.alignment();
    // Cross-check against the C library's statx binding, independent of ours.
    let mut st = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: valid fd, NUL-terminated empty path, writable statx buffer.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            st.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0);
    // SAFETY: statx returned 0 and filled the buffer.
    let st = unsafe { st.assume_init() };
    if st.stx_mask & libc::STATX_DIOALIGN != 0 {
        assert_eq!(a.source, AlignmentSource::Statx);
        assert_eq!(a.memory_bytes, st.stx_dio_mem_align);
        assert_eq!(a.offset_bytes, st.stx_dio_offset_align);
    } else {
        assert!(matches!(
            a.source,
            AlignmentSource::Probe | AlignmentSource::Default
        ));
    }
    assert!(a.read_offset_bytes <= a.offset_bytes);
    let ours = statx_direct_io(&file).expect("statx");
    let info = fs_info(dir.path()).expect("fs info");
    assert_eq!(ours.dev, info.dev, "statx and stat agree on the device");
    if let Some(dev) = device_info(info.dev) {
        let logical = dev.logical_block_bytes.expect("logical block size");
        // Block-device filesystems align direct I/O to the logical block size.
        assert_eq!(a.offset_bytes, logical, "{dev:?}");
        if dev.atomic_write_max_bytes.unwrap_or(0) == 0 {
            assert_eq!(
                file.atomic_write(),
                None,
                "no untorn writes without device support"
            );
        }
    }
}

#[test]
fn sync_methods_open_the_right_flags() {
    let dir = tempfile::tempdir().expect("dir");
    let direct_works = open_direct(dir.path(), "probe", SyncMethod::None).is_some();
    for method in SyncMethod::ALL {
        for direct in [false, true] {
            if direct && !direct_works {
                continue;
            }
            let mode = if direct { DirectIo::On } else { DirectIo::Off };
            let f = DirectFile::open(dir.path().join("f"), &opts(mode, method)).expect("open");
            let flags = fdinfo_flags(&f) as i32;
            assert_eq!(
                flags & libc::O_DIRECT != 0,
                direct,
                "{method} direct={direct}"
            );
            let sync_bits = flags & libc::O_SYNC;
            let want = match method {
                SyncMethod::OpenSync => libc::O_SYNC,
                SyncMethod::OpenDatasync => libc::O_DSYNC,
                _ => 0,
            };
            assert_eq!(sync_bits, want, "{method}: flags {flags:o}");
            assert_eq!(f.sync_method(), method);
            assert_eq!(f.is_direct(), direct);
        }
    }
}

#[test]
fn every_sync_method_writes_and_syncs() {
    let dir = tempfile::tempdir().expect("dir");
    for method in SyncMethod::ALL {
        let f = DirectFile::open(
            dir.path().join(method.name()),
            &opts(DirectIo::Auto, method),
        )
        .expect("open");
        let unit = f.alignment().io_unit_bytes();
        let mut buf = AlignedBuf::new(8192, unit).expect("buf");
        buf.as_mut_slice().fill(method as u8 + 1);
        f.write_all_at(buf.io_all(), 8192).expect("write");
        f.sync().expect("sync");
        let back = std::fs::read(f.path()).expect("read back");
        assert_eq!(back.len(), 16384);
        assert!(
            back[8192..].iter().all(|&b| b == method as u8 + 1),
            "{method}"
        );
    }
}

#[test]
fn tmpfs_auto_falls_back_and_on_fails_cleanly() {
    let Some(shm) = tmpfs_dir() else { return };
    let dir = tempfile::tempdir_in(shm).expect("tmpfs dir");
    let path = dir.path().join("x");
    let err = DirectFile::open(&path, &opts(DirectIo::On, SyncMethod::Fdatasync))
        .expect_err("tmpfs refuses O_DIRECT");
    match &err {
        Error::DirectIoUnsupported { path: p, fs_type } => {
            assert_eq!(p, &path);
            assert_eq!(fs_type, "tmpfs");
        }
        other => panic!("wrong error {other}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("tmpfs") && msg.contains("Auto"), "{msg}");
    assert!(!path.exists(), "a refused open leaves no file behind");

    let f = DirectFile::open(&path, &opts(DirectIo::Auto, SyncMethod::Fdatasync)).expect("auto");
    assert_eq!(
        f.io_path(),
        &IoPath::BufferedFallback {
            fs_type: "tmpfs".into()
        }
    );
    assert!(!f.is_direct());
    assert_eq!(fdinfo_flags(&f) as i32 & libc::O_DIRECT, 0);
    let mut buf = AlignedBuf::new(4096, 512).expect("buf");
    buf.as_mut_slice().fill(7);
    f.write_all_at(buf.io_all(), 0).expect("write");
    f.sync().expect("sync");
    assert_eq!(std::fs::read(&path).expect("read"), vec![7u8; 4096]);
}

#[test]
fn unaligned_direct_io_is_a_typed_error() {
    let dir = tempfile::tempdir().expect("dir");
    let Some(f) = open_direct(dir.path(), "u", SyncMethod::None) else {
        return;
    };
    let unit = f.alignment().offset_bytes as u64;
    let buf = AlignedBuf::new(8192, f.alignment().io_unit_bytes()).expect("buf");
    let err = f
        .write_all_at(buf.io_all(), unit / 2)
        .expect_err("unaligned offset");
    assert!(matches!(err, Error::Unaligned { .. }), "{err}");
    // A buffer whose unit is below the file's memory alignment is refused too.
    if f.alignment().memory_bytes > 512 {
        let small = AlignedBuf::new(8192, 512).expect("buf");
        assert!(matches!(
            f.write_all_at(small.io_all(), 0),
            Err(Error::Unaligned { .. })
        ));
    }
    assert!(
        f.failure().is_none(),
        "a refused request is not an I/O failure"
    );
    f.write_all_at(buf.io_all(), 0)
        .expect("aligned write still works");
}

#[test]
fn concurrent_positional_writes_are_exact() {
    const THREADS: usize = 4;
    const BLOCKS_PER_THREAD: usize = 64;
    const BLOCK: usize = 4096;
    let dir = tempfile::tempdir().expect("dir");
    let Some(f) = open_direct(dir.path(), "c", SyncMethod::Fdatasync) else {
        return;
    };
    let f = Arc::new(f);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let f = Arc::clone(&f);
            std::thread::spawn(move || {
                let unit = f.alignment().io_unit_bytes();
                let mut buf = AlignedBuf::new(BLOCK, unit).expect("buf");
                for i in 0..BLOCKS_PER_THREAD {
                    // Interleave the threads' blocks so neighbours belong to others.
                    let block = i * THREADS + t;
                    let tag = (block as u32).to_le_bytes();
                    for chunk in buf.as_mut_slice().chunks_mut(4) {
                        chunk.copy_from_slice(&tag);
                    }
                    f.write_all_at(buf.io_all(), (block * BLOCK) as u64)
                        .expect("write");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer thread");
    }
    f.sync().expect("sync");
    let bytes = std::fs::read(f.path()).expect("read");
    assert_eq!(bytes.len(), THREADS * BLOCKS_PER_THREAD * BLOCK);
    for (block, chunk) in bytes.chunks(BLOCK).enumerate() {
        let tag = (block as u32).to_le_bytes();
        assert!(
            chunk.chunks(4).all(|w| w == tag),
            "block {block} holds another block's bytes"
        );
    }
}

#[test]
fn buffered_reader_sees_direct_writes() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().expect("dir");
    let Some(f) = open_direct(dir.path(), "coherent", SyncMethod::None) else {
        return;
    };
    let reader = std::fs::File::open(f.path()).expect("buffered open");
    let unit = f.alignment().io_unit_bytes();
    let mut buf = AlignedBuf::new(8192, unit).expect("buf");
    for round in 0u8..3 {
        buf.as_mut_slice().fill(round + 1);
        // The buffered reader has the old bytes cached after the first round.
        f.write_all_at(buf.io_all(), 0).expect("direct write");
        let mut seen = vec![0u8; 8192];
        reader.read_exact_at(&mut seen, 0).expect("buffered read");
        assert!(seen.iter().all(|&b| b == round + 1), "round {round} stale");
    }
    // And the other way: a buffered write is seen by a direct read.
    let writer = std::fs::OpenOptions::new()
        .write(true)
        .open(f.path())
        .expect("buffered writer");
    writer
        .write_all_at(&[9u8; 8192], 0)
        .expect("buffered write");
    let mut back = AlignedBuf::new(8192, unit).expect("buf");
    f.read_exact_at(back.io_all_mut(), 0).expect("direct read");
    assert!(back.as_slice().iter().all(|&b| b == 9));
}

#[test]
fn failed_write_poisons_writes_and_syncs_but_not_reads() {
    let dir = tempfile::tempdir().expect("dir");
    let f = DirectFile::open(
        dir.path().join("p"),
        &opts(DirectIo::Auto, SyncMethod::Fdatasync),
    )
    .expect("open");
    let unit = f.alignment().io_unit_bytes();
    let buf = AlignedBuf::new(4096, unit).expect("buf");
    f.write_all_at(buf.io_all(), 0).expect("first write");
    // Far past any filesystem's maximum file size: EFBIG or EINVAL from the kernel.
    let beyond = (i64::MAX as u64) - 4095;
    let err = f
        .write_all_at(buf.io_all(), beyond)
        .expect_err("write past max size");
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(f.failure().is_some());
    let err = f.sync().expect_err("sync after a failed write");
    assert!(matches!(err, Error::Poisoned { .. }), "{err}");
    assert!(matches!(
        f.write_all_at(buf.io_all(), 0),
        Err(Error::Poisoned { .. })
    ));
    assert!(matches!(f.sync_all(), Err(Error::Poisoned { .. })));
    let mut back = AlignedBuf::new(4096, unit).expect("buf");
    f.read_exact_at(back.io_all_mut(), 0)
        .expect("reads still work");
}

#[test]
fn read_past_end_is_a_typed_error() {
    let dir = tempfile::tempdir().expect("dir");
    let f = DirectFile::open(
        dir.path().join("r"),
        &opts(DirectIo::Auto, SyncMethod::None),
    )
    .expect("open");
    let unit = f.alignment().io_unit_bytes();
    let mut buf = AlignedBuf::new(8192, unit).expect("buf");
    f.write_all_at(buf.io(0..4096).expect("view"), 0)
        .expect("write");
    let err = f.read_exact_at(buf.io_all_mut(), 0).expect_err("short");
    assert!(
        matches!(
            err,
            Error::UnexpectedEof {
                wanted: 8192,
                got: 4096,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn zero_fill_allocates_every_block() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("dir");
    let f = DirectFile::open(
        dir.path().join("z"),
        &opts(DirectIo::Auto, SyncMethod::Fdatasync),
    )
    .expect("open");
    let len = 4 * 1024 * 1024 + 8192;
    f.allocate(len, Fill::Zero).expect("allocate");
    assert_eq!(f.len().expect("len"), len);
    let meta = std::fs::metadata(f.path()).expect("meta");
    assert!(
        meta.blocks() * 512 >= len,
        "blocks allocated: {}",
        meta.blocks()
    );
    let bytes = std::fs::read(f.path()).expect("read");
    assert!(bytes.iter().all(|&b| b == 0));
    // Growing again keeps what was written below the old size.
    let mut buf = AlignedBuf::new(8192, f.alignment().io_unit_bytes()).expect("buf");
    buf.as_mut_slice().fill(3);
    f.write_all_at(buf.io_all(), 0).expect("write");
    f.allocate(len * 2, Fill::Zero).expect("grow");
    let bytes = std::fs::read(f.path()).expect("read");
    assert!(bytes[..8192].iter().all(|&b| b == 3));
    assert!(bytes[8192..].iter().all(|&b| b == 0));
    let g = DirectFile::open(
        dir.path().join("r"),
        &opts(DirectIo::Auto, SyncMethod::None),
    )
    .expect("open");
    g.allocate(1 << 20, Fill::Reserve).expect("reserve");
    assert_eq!(g.len().expect("len"), 1 << 20);
}

/// ramfs is a filesystem where the kernel itself refuses `O_DIRECT` (`EINVAL` at
/// open, after creating the file). Mounting it needs root; elsewhere this skips.
#[test]
fn kernel_refusal_of_o_direct_is_handled() {
    let dir = tempfile::tempdir().expect("dir");
    let mnt = dir.path().join("ramfs");
    std::fs::create_dir(&mnt).expect("mkdir");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "ramfs", "ramfs"])
        .arg(&mnt)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !mounted {
        eprintln!("skipped: cannot mount ramfs here (needs root)");
        return;
    }
    let path = mnt.join("x");
    let on = DirectFile::open(&path, &opts(DirectIo::On, SyncMethod::Fdatasync));
    let auto = DirectFile::open(&path, &opts(DirectIo::Auto, SyncMethod::Fdatasync))
        .map(|f| f.io_path().clone());
    let path_left = path.exists();
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    assert!(
        matches!(on, Err(Error::DirectIoUnsupported { ref fs_type, .. }) if fs_type == "ramfs"),
        "{on:?}"
    );
    assert_eq!(
        auto.expect("auto falls back"),
        IoPath::BufferedFallback {
            fs_type: "ramfs".into()
        }
    );
    assert!(path_left, "the Auto open created the file");
}

#[test]
fn issue19_a_scratch_file_carries_the_magic_from_its_first_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir
        .path()
        .join(profile::scratch_name(profile::SCRATCH_PREFIXES[0]));
    let at = At::cwd(&path);
    profile::prepare(&at).expect("prepare");
    let head = std::fs::read(&path).expect("read");
    assert_eq!(head.len() as u64, profile::TEST_FILE_BYTES);
    assert!(profile::is_scratch_header(&head, std::process::id()));
    assert_eq!(
        std::fs::metadata(&path).expect("stat").permissions().mode() & 0o077,
        0,
        "private"
    );
    // A second prepare never writes through what is there.
    assert!(profile::prepare(&at).is_err(), "exclusive create");
    // This process is alive: its scratch file is not a leftover.
    let storage = OsStorage::default();
    let removed = profile::remove_scratch_leftovers(&storage, dir.path()).expect("scan");
    assert!(removed.is_empty() && path.exists());
}

/// A scratch file is made only where nothing is, measures, and is gone
/// once dropped; one that cannot be made leaves nothing behind.
#[test]
fn a_scratch_file_refuses_an_existing_path_and_goes_when_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = dir.path().join("taken");
    std::fs::write(&taken, b"keep").expect("write");
    assert!(matches!(
        profile::Scratch::create(At::cwd(&taken)),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(std::fs::read(&taken).expect("read"), b"keep", "untouched");
    let path = dir
        .path()
        .join(profile::scratch_name(profile::SCRATCH_PREFIXES[0]));
    let scratch = profile::Scratch::create(At::cwd(&path)).expect("create");
    assert!(scratch.alignment().is_some() != scratch.direct_io_unavailable().is_some());
    let head = std::fs::read(&path).expect("read");
    assert_eq!(&head[..8], &profile::Scratch::MAGIC);
    let variant = super::SyncVariant {
        method: SyncMethod::Fdatasync,
        direct: false,
    };
    for outcome in [
        scratch
            .measure_sync(variant, 2, 4096, 0.02)
            .expect("measure"),
        scratch
            .measure_reopened_sync(4096, 0.02, true)
            .expect("measure"),
    ] {
        assert!(matches!(outcome, profile::Outcome::Measured { ops, .. } if ops >= 1));
    }
    drop(scratch);
    assert!(!path.exists(), "removed when dropped");
}

/// `rename_new` moves a file to a free name and refuses a taken one with
/// `EEXIST`, leaving both files as they were.
#[test]
fn rename_new_refuses_a_taken_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    std::fs::write(&a, b"new").expect("write");
    std::fs::write(&b, b"taken").expect("write");
    let storage = OsStorage::default();
    let err = storage.rename_new(&a, &b).expect_err("b is taken");
    let Error::Io { source, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(source.raw_os_error(), Some(libc::EEXIST), "{err}");
    assert_eq!(std::fs::read(&a).expect("a"), b"new");
    assert_eq!(std::fs::read(&b).expect("b"), b"taken");
    storage.rename_new(&a, &c).expect("c is free");
    assert!(!a.exists());
    assert_eq!(std::fs::read(&c).expect("c"), b"new");
    // The fallbacks of filesystems without RENAME_NOREPLACE, and without
    // hard links, keep the same contract.
    for name in ["link", "checked rename"] {
        let rename_new = |from: &Path, to: &Path| {
            let (from, to) = (storage.os_at(from), storage.os_at(to));
            match name {
                "link" => from.link_new_to(&to),
                _ => from.checked_rename_to(&to),
            }
        };
        std::fs::write(&a, b"new").expect("write");
        let err = rename_new(&a, &b).expect_err(name);
        let Error::Io { source, .. } = &err else {
            panic!("{name}: {err:?}");
        };
        assert_eq!(source.raw_os_error(), Some(libc::EEXIST), "{name}: {err}");
        assert_eq!(std::fs::read(&b).expect("b"), b"taken", "{name}");
        std::fs::remove_file(&c).expect("clear c");
        rename_new(&a, &c).expect(name);
        assert!(!a.exists(), "{name}");
        assert_eq!(std::fs::read(&c).expect("c"), b"new", "{name}");
    }
}

/// `set_len` through the storage trait cuts a file and extends it with
/// zeros.
#[test]
fn set_len_cuts_and_extends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = DirectFile::open(
        dir.path().join("cut"),
        &opts(DirectIo::Auto, SyncMethod::Fdatasync),
    )
    .expect("open");
    let unit = f.alignment().io_unit_bytes();
    let mut buf = AlignedBuf::new(8192, unit).expect("buf");
    buf.as_mut_slice().fill(7);
    f.write_all_at(buf.io_all(), 0).expect("write");
    StorageFile::set_len(&f, 4096).expect("cut");
    f.sync_all().expect("sync");
    assert_eq!(f.len().expect("len"), 4096);
    StorageFile::set_len(&f, 8192).expect("extend");
    let back = std::fs::read(f.path()).expect("read back");
    assert_eq!(back.len(), 8192);
    assert!(back[..4096].iter().all(|&b| b == 7));
    assert!(back[4096..].iter().all(|&b| b == 0), "zeros past the cut");
}
