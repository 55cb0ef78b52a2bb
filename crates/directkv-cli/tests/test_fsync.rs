//! `directkv test-fsync` end to end, through the binary: its JSON report keeps its
//! schema; it measures on ext4 (the build's filesystem), on tmpfs (direct I/O
//! reported unavailable, the rest measured), on an XFS loop image, and on a loop
//! device with 4096-byte sectors (alignment 4096, finer writes reported n/a); it
//! refuses to clobber an existing file; and `--save-profile` writes a profile the
//! library reads back for the same filesystem.
//!
//! The loop-device cases need root, `losetup` and `mkfs.*`; without them they
//! print why and skip. Timing figures are never asserted, only their presence.

use std::path::Path;
use std::process::Command;

use directkv::internals::io::profile::DeviceProfile;
use serde_json::Value;

mod common;
use common::loop_fs;

const SECONDS: &str = "0.02";

fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir")
}

fn test_fsync(file: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_directkv"))
        .args(["test-fsync", "--seconds", SECONDS, "--file"])
        .arg(file)
        .args(extra)
        .output()
        .expect("run directkv")
}

fn json_report(file: &Path) -> Value {
    let out = test_fsync(file, &["--json"]);
    assert!(
        out.status.success(),
        "test-fsync failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!file.exists(), "the scratch file is removed");
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON document")
}

fn results(report: &Value) -> &Vec<Value> {
    report["results"].as_array().expect("results array")
}

fn check_schema(report: &Value) {
    assert_eq!(report["schema_version"], 1);
    for key in [
        "file",
        "filesystem",
        "block_bytes",
        "seconds_per_test",
        "honesty",
    ] {
        assert!(!report[key].is_null(), "missing {key}");
    }
    assert!(report["filesystem"]["fs_type"].is_string());
    let groups = [
        "one_write",
        "two_writes",
        "open_sync_sizes",
        "fd_sync",
        "non_sync",
    ];
    let results = results(report);
    assert_eq!(results.len(), 29, "10 + 10 + 5 + 2 + 2 tests");
    for r in results {
        assert!(groups.contains(&r["group"].as_str().expect("group")), "{r}");
        assert!(r["id"].is_string() && r["label"].is_string());
        match r["outcome"]["status"].as_str() {
            Some("measured") => {
                assert!(r["outcome"]["ops"].as_u64().expect("ops") > 0);
                assert!(r["outcome"]["ops_per_sec"].as_f64().expect("rate") > 0.0);
                assert!(r["outcome"]["usecs_per_op"].is_number());
            }
            Some("not_available") => assert!(r["outcome"]["reason"].is_string()),
            other => panic!("unknown status {other:?}"),
        }
    }
    let verdict = report["honesty"]["verdict"].as_str().expect("verdict");
    assert!(["plausible", "suspicious", "unknown"].contains(&verdict));
    let fastest = &report["fastest_durable"];
    let name = fastest["variant"]["method"]
        .as_str()
        .expect("fastest method");
    assert_ne!(name, "none", "the fastest durable method is durable");
}

fn measured(report: &Value, id: &str) -> bool {
    results(report)
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no result {id}"))["outcome"]["status"]
        == "measured"
}

#[test]
fn json_report_on_the_build_filesystem() {
    let dir = scratch_dir();
    let report = json_report(&dir.path().join("t"));
    check_schema(&report);
    assert!(measured(&report, "one_write/fdatasync"));
    if report["alignment"].is_object() {
        assert!(measured(&report, "one_write/fdatasync+direct"));
        assert!(measured(&report, "one_write/pwrite_dsync+direct"));
    }
}

#[test]
fn tmpfs_reports_direct_io_unavailable_and_measures_the_rest() {
    let shm = Path::new("/dev/shm");
    if directkv::internals::io::FsInfo::of(shm)
        .map(|i| i.fs_type)
        .ok()
        .as_deref()
        != Some("tmpfs")
    {
        eprintln!("skipped: /dev/shm is not tmpfs here");
        return;
    }
    let dir = tempfile::tempdir_in(shm).expect("tmpfs dir");
    let report = json_report(&dir.path().join("t"));
    check_schema(&report);
    assert!(report["alignment"].is_null());
    let why = report["direct_io_unavailable"].as_str().expect("reason");
    assert!(why.contains("tmpfs"), "{why}");
    for r in results(&report) {
        let direct = r["variant"]["direct"] == true;
        let status = &r["outcome"]["status"];
        if direct {
            assert_eq!(status, "not_available", "{r}");
        } else {
            assert_eq!(status, "measured", "{r}");
        }
    }
    let text = test_fsync(&dir.path().join("u"), &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("direct I/O: unavailable"), "{text}");
}

#[test]
fn refuses_to_clobber_an_existing_file() {
    let dir = scratch_dir();
    let file = dir.path().join("precious");
    std::fs::write(&file, b"keep me").expect("write");
    let out = test_fsync(&file, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exists"), "{err}");
    assert_eq!(std::fs::read(&file).expect("read"), b"keep me");
    let out = test_fsync(&dir.path().join("x"), &["--block-size", "1000"]);
    assert!(
        !out.status.success(),
        "a block size that is not 512-aligned is refused"
    );
}

#[test]
fn save_profile_is_read_back_for_the_same_filesystem() {
    let dir = scratch_dir();
    let out = test_fsync(&dir.path().join("t"), &["--save-profile"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join(DeviceProfile::FILE_NAME).exists());
    let profile = DeviceProfile::load_for_dir(&directkv::internals::io::At::cwd(dir.path()))
        .expect("profile for this dir");
    assert!(profile.fastest_durable.method.is_durable());
    assert!(profile.sync_latency_us > 0.0);
    assert!(!profile.measured.is_empty());
    // A profile moved to another filesystem does not apply there.
    if let Ok(shm) = tempfile::tempdir_in("/dev/shm") {
        std::fs::copy(
            dir.path().join(DeviceProfile::FILE_NAME),
            shm.path().join(DeviceProfile::FILE_NAME),
        )
        .expect("copy");
        assert!(
            DeviceProfile::load_for_dir(&directkv::internals::io::At::cwd(shm.path())).is_none()
        );
    }
    // A damaged profile is ignored, never trusted.
    std::fs::write(dir.path().join(DeviceProfile::FILE_NAME), b"{ not json").expect("write");
    assert!(DeviceProfile::load_for_dir(&directkv::internals::io::At::cwd(dir.path())).is_none());
}

#[test]
fn xfs_loop_image() {
    let dir = scratch_dir();
    let Some(fs) = loop_fs(dir.path(), "mkfs.xfs", 320, 512) else {
        return;
    };
    let report = json_report(&fs.mount.join("t"));
    check_schema(&report);
    assert_eq!(report["filesystem"]["fs_type"], "xfs");
    assert!(report["alignment"].is_object(), "XFS supports direct I/O");
    assert!(measured(&report, "one_write/open_datasync+direct"));
}

#[test]
fn four_k_sector_device_aligns_to_4096() {
    let dir = scratch_dir();
    let Some(fs) = loop_fs(dir.path(), "mkfs.ext4", 64, 4096) else {
        return;
    };
    let report = json_report(&fs.mount.join("t"));
    check_schema(&report);
    assert_eq!(report["alignment"]["offset_bytes"], 4096);
    assert_eq!(report["device"]["logical_block_bytes"], 4096);
    // 2 kB and 1 kB direct writes cannot be issued on a 4 kB-sector device.
    assert!(!measured(&report, "open_sync_sizes/8x2048"));
    assert!(!measured(&report, "open_sync_sizes/16x1024"));
    assert!(measured(&report, "open_sync_sizes/4x4096"));
}
