//! `directkv wal dump` end to end: it lists every record of a log written
//! through the library with its LSN, kind and length, summarises by kind, and
//! exits non-zero naming the segment and offset when the log is corrupt before
//! its end. A `--from` past the log's end or inside a record is refused with
//! an error saying so (never "corrupt", never a dump from elsewhere).

use std::process::Command;

use directkv::internals::io::OsStorage;
use directkv::internals::wal::{Wal, WalOptions};
use directkv::Lsn;

fn write_log(dir: &std::path::Path, flushes: usize) -> Vec<Lsn> {
    let mut o = WalOptions::new(dir.join("wal"), [3; 16]);
    o.segment_bytes = 256 * 1024;
    let (wal, _) = Wal::open(OsStorage::default(), o, Lsn::ZERO, |_| Ok(())).expect("open");
    let mut ends = Vec::new();
    for i in 0..flushes {
        let lsn = wal
            .append(16 + i as u8, &vec![i as u8; 100 * i])
            .expect("append");
        wal.flush(lsn).expect("flush");
        ends.push(lsn);
    }
    wal.close().expect("close");
    ends
}

fn dump(dir: &std::path::Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_directkv"))
        .args(["wal", "dump"])
        .arg(dir)
        .args(extra)
        .output()
        .expect("run")
}

#[test]
fn dump_lists_records_and_summarises() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    write_log(dir.path(), 5);
    let out = dump(dir.path(), &["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let user: Vec<_> = lines
        .iter()
        .filter(|l| l["kind_code"].as_u64().is_some_and(|k| k >= 16))
        .collect();
    assert_eq!(user.len(), 5);
    for (i, r) in user.iter().enumerate() {
        assert_eq!(r["length"], 100 * i);
        assert_eq!(r["kind_code"], 16 + i);
        assert_eq!(r["crc"], "ok");
        // Kinds 16 to 19 are a caller's own; 20 is the engine's page record.
        let name = if i < 4 {
            format!("user({})", 16 + i)
        } else {
            "page".into()
        };
        assert_eq!(r["kind"], name.as_str());
    }
    let summary = lines.last().expect("summary");
    assert_eq!(summary["summary"], true);
    assert_eq!(
        summary["kinds"]["flush_header"]["records"], 6,
        "5 flushes + the next one's"
    );
    let text = dump(dir.path(), &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("clean end"), "{text}");
    assert!(text.contains("flush_header"), "{text}");
}

#[test]
fn dump_reports_mid_log_corruption() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let ends = write_log(dir.path(), 6);
    // Flip a payload byte of the third record; later flushes follow it.
    let seg = dir.path().join("wal").join("0000000000000000.seg");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&seg)
        .expect("seg");
    let at = 4096 + ends[2].get() - 10;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).expect("read");
    b[0] ^= 0xFF;
    f.write_all_at(&b, at).expect("write");
    let out = dump(dir.path(), &[]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("CORRUPT"), "{text}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("0000000000000000.seg"), "{err}");
    // A start past the damage cannot be shown to be a record's, and a dump
    // from there would not meet the damage: refused, never a panic or a
    // "clean end".
    for from in [ends[4].get(), 1 << 40, u64::MAX] {
        let out = dump(dir.path(), &["--from", &from.to_string()]);
        assert!(!out.status.success(), "--from {from} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("stops being readable"), "--from {from}: {err}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("clean end"));
    }
}

/// The LSN where the log written by `write_log` ends, as the dump says.
fn log_end(dir: &std::path::Path) -> u64 {
    let out = dump(dir, &["--json", "--summary"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("summary")).expect("json");
    let end = summary["end"].as_str().expect("end");
    directkv_lsn(end)
}

/// Parses an LSN as the dump prints it (`HI/LO` in hex).
fn directkv_lsn(text: &str) -> u64 {
    let (hi, lo) = text.split_once('/').expect("HI/LO");
    u64::from_str_radix(hi, 16).expect("hi") << 32 | u64::from_str_radix(lo, 16).expect("lo")
}

#[test]
fn wal_dump_from_past_the_end_is_an_error() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    write_log(dir.path(), 3);
    let end = log_end(dir.path());
    for from in [end + 1, u64::MAX] {
        let out = dump(dir.path(), &["--from", &from.to_string()]);
        assert!(!out.status.success(), "--from {from} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is past the end of the log at"), "{err}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("clean end"));
    }
    // The end itself is a place to start: nothing follows it.
    let out = dump(dir.path(), &["--from", &end.to_string()]);
    assert!(out.status.success());
}

#[test]
fn wal_dump_from_inside_a_record_is_an_error_not_corruption() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    write_log(dir.path(), 3);
    let out = dump(dir.path(), &["--from", "3"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a record boundary"), "{err}");
    assert!(!err.contains("corrupt"), "{err}");
}

#[test]
fn wal_dump_from_a_record_start_dumps_from_there() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    write_log(dir.path(), 4);
    let all = dump(dir.path(), &["--json"]);
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&all.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .filter(|l: &serde_json::Value| l["lsn"].is_u64())
        .collect();
    let third = &records[2];
    let lsn = third["lsn"].as_u64().expect("lsn");
    let out = dump(dir.path(), &["--json", "--from", &lsn.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("a record")).expect("json");
    assert_eq!(first["lsn"], lsn);
    assert_eq!(
        text.lines().count(),
        records.len() - 2 + 1,
        "the rest and a summary"
    );
}
