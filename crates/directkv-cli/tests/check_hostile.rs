//! `directkv check` on a database whose files carry a field no build
//! writes, checksums recomputed: it exits 1 with a message naming the file
//! and the field, never panics (exit 101), hangs, or grows the data file
//! without end, and never passes a database whose replay would apply a
//! record where it cannot belong.
//!
//! Five cases, the ones found from outside: `CONTROL`'s page count at 2^60
//! and at `u64::MAX`, its page size at 0 and at 2^30, and in a database
//! left without a checkpoint, the last page record moved to page 0 (the
//! data file's head). The full table of fields is the engine's
//! (crates/directkv/tests/hostile_fields.rs).

use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;

/// Bytes the data file may grow by while `check` runs before the run
/// counts as unbounded disk use (the case of a page count of 2^60 grew it
/// by hundreds of MiB until killed).
const DATA_GROWTH_BYTES_MAX: u64 = 64 << 20;

/// Runs `directkv check DIR`; kills it and fails if the data file grows
/// past [`DATA_GROWTH_BYTES_MAX`] meanwhile.
fn check(dir: &Path) -> Output {
    let data = dir.join("data");
    let size = || std::fs::metadata(&data).map(|m| m.len()).unwrap_or(0);
    let start = size();
    let mut child = Command::new(env!("CARGO_BIN_EXE_directkv"))
        .arg("check")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run directkv check");
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if size() > start + DATA_GROWTH_BYTES_MAX {
            child.kill().expect("kill");
            let _ = child.wait();
            panic!("check grew the data file from {start} to {} bytes", size());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `check` failed with exit 1 (not a panic's 101) naming `words`.
fn refused(dir: &Path, words: &[&str]) -> String {
    let out = check(dir);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    for w in words {
        assert!(err.contains(w), "{w}: {err}");
    }
    err
}

/// A database of 300 commits, closed (`crashed`: dropped after its last
/// acknowledged commit).
fn database(dir: &Path, crashed: bool) {
    let db = common::database_with_commits(dir, 300);
    if crashed {
        drop(db);
    } else {
        db.close().expect("close");
    }
}

/// Writes `value` at `field` of `CONTROL`'s newest slot and reseals its
/// CRC (bytes 0..88, at 88: docs/file_format.md).
fn rewrite_control(dir: &Path, field: usize, value: &[u8]) {
    let path = dir.join("CONTROL");
    let mut b = std::fs::read(&path).expect("CONTROL");
    let generation = |at: usize| {
        let crc = u32::from_le_bytes(b[at + 88..at + 92].try_into().expect("4"));
        (crc == crc32c::crc32c(&b[at..at + 88]))
            .then(|| u64::from_le_bytes(b[at + 16..at + 24].try_into().expect("8")))
    };
    let slot = if generation(4096) > generation(0) {
        4096
    } else {
        0
    };
    b[slot + field..slot + field + value.len()].copy_from_slice(value);
    let crc = crc32c::crc32c(&b[slot..slot + 88]);
    b[slot + 88..slot + 92].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, b).expect("write CONTROL");
}

#[test]
fn check_refuses_a_page_count_of_2_pow_60_without_growing_the_file() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    database(dir.path(), false);
    rewrite_control(dir.path(), 64, &(1u64 << 60).to_le_bytes());
    refused(dir.path(), &["CONTROL", "page count 1152921504606846976"]);
}

#[test]
fn check_refuses_a_page_count_of_u64_max() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    database(dir.path(), false);
    rewrite_control(dir.path(), 64, &u64::MAX.to_le_bytes());
    refused(dir.path(), &["CONTROL", "page count 18446744073709551615"]);
}

#[test]
fn check_refuses_a_page_size_of_0_or_2_pow_30_without_a_panic() {
    for size in [0u32, 1 << 30] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
        database(dir.path(), false);
        rewrite_control(dir.path(), 12, &size.to_le_bytes());
        refused(dir.path(), &["CONTROL", &format!("page size {size}")]);
    }
}

/// The last page record of the log, moved to page 0 with both its CRCs
/// recomputed: replay applied it to the head page, so the last commit's
/// key read its old value, and `check` passed.
#[test]
fn check_refuses_a_page_record_naming_the_head_page() {
    use directkv::internals::wal::WalReader;
    use directkv::internals::wal::{segment_file_name, Layout};
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    database(dir.path(), true);
    let segment_bytes = directkv::Options::default().wal_segment_bytes;
    let layout = Layout { segment_bytes };
    let wal = dir.path().join("wal");
    let mut reader = WalReader::new(
        directkv::internals::io::OsStorage::default(),
        &wal,
        segment_bytes,
        None,
        directkv::Lsn::ZERO,
    );
    let mut last = None;
    while let Some(rec) = reader.next_user_record().expect("read the log") {
        if rec.kind == 20 {
            last = Some((rec.lsn, rec.payload));
        }
    }
    let (lsn, mut payload) = last.expect("a page record");
    // Record header (docs/wal_format.md): header CRC over the LSN and bytes
    // 4..16, payload length, payload CRC, kind; the payload after it.
    payload[8..16].copy_from_slice(&0u64.to_le_bytes());
    let seg = wal.join(segment_file_name(layout.segment_of(lsn)));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&seg)
        .expect("segment");
    let at = layout.file_offset(lsn);
    let mut h = [0u8; 16];
    f.read_exact_at(&mut h, at).expect("header");
    h[8..12].copy_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    let mut covered = lsn.get().to_le_bytes().to_vec();
    covered.extend_from_slice(&h[4..16]);
    h[0..4].copy_from_slice(&crc32c::crc32c(&covered).to_le_bytes());
    f.write_all_at(&h, at).expect("header");
    f.write_all_at(&payload, at + 16).expect("payload");
    let name = seg.file_name().expect("name").to_string_lossy().to_string();
    refused(dir.path(), &[&name, "page 0"]);
}
