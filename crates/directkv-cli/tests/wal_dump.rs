//! `directkv wal dump` end to end: it lists every record of a log written
//! through the library with its LSN, kind and length, summarises by kind, and
//! exits non-zero naming the segment and offset when the log is corrupt before
//! its end.

use std::process::Command;

use directkv::internals::io::OsStorage;
use directkv::internals::wal::{Wal, WalOptions};
use directkv::Lsn;

fn write_log(dir: &std::path::Path, flushes: usize) -> Vec<Lsn> {
    let mut o = WalOptions::new(dir.join("wal"), [3; 16]);
    o.segment_bytes = 256 * 1024;
    let (wal, _) = Wal::open(OsStorage, o, Lsn::ZERO, |_| Ok(())).expect("open");
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
        .filter(|l| l["kind"].as_str().is_some_and(|k| k.starts_with("user")))
        .collect();
    assert_eq!(user.len(), 5);
    for (i, r) in user.iter().enumerate() {
        assert_eq!(r["length"], 100 * i);
        assert_eq!(r["kind_code"], 16 + i);
        assert_eq!(r["crc"], "ok");
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
    let at = 4096 + ends[2].0 - 10;
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
}
