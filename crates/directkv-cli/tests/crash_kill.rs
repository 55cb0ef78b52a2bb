//! Real crashes (RELIABILITY.md F1, C9): a child process commits bank transfers
//! between accounts spread over ten named tables (each commit writes up to
//! two tables and the default keyspace), from several threads at once
//! (concurrent write transactions, Serializable)
//! on a real directory with direct I/O and durable commits, printing each
//! acknowledged commit; the parent kills it with SIGKILL after a random delay,
//! reopens, and checks that every acknowledged commit of every thread is
//! there, that no transfer is half applied or lost to a concurrent one (the
//! balances still sum to the opening total), and that each thread's commits
//! present form a prefix with no holes. The child then resumes
//! on the recovered database, so the cycles also crash during and right after
//! recovery. `DIRECTKV_CRASH_CYCLES` sets the number of cycles (default 25).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use directkv::{Database, Options};

const ACCOUNTS: u64 = 200;
const START_BALANCE: i64 = 1000;

/// Threads the child commits from.
const THREADS: u64 = 4;

/// Checks the recovered database against what each thread had acknowledged
/// (`acked[t]`: its last acknowledged commit); returns the commits present.
fn check(dir: &std::path::Path, acked: &[Option<u64>]) -> u64 {
    let opts = Options {
        cache_bytes: 1 << 20,
        page_bytes: 4096,
        ..Options::default()
    };
    let db = Database::open(dir, opts).expect("recovery opens the database");
    let r = db.begin_read().expect("read");
    let mut total = 0;
    for (t, acked) in acked.iter().enumerate() {
        let next = r
            .get(format!("next{t:02}").as_bytes())
            .expect("get")
            .map(|v| u64::from_le_bytes(v.as_slice().try_into().expect("8 bytes")))
            .unwrap_or(0);
        if let Some(a) = acked {
            assert!(
                next > *a,
                "thread {t}: acknowledged commit {a} lost: its counter is {next}"
            );
        }
        let prefix = format!("txn{t:02}-");
        let txns: Vec<_> = r
            .prefix(prefix.as_bytes())
            .map(|e| e.expect("scan").0)
            .collect();
        assert_eq!(txns.len() as u64, next, "thread {t}: commits form a prefix");
        for (i, k) in txns.iter().enumerate() {
            assert_eq!(k, format!("{prefix}{i:08}").as_bytes(), "no holes");
        }
        total += next;
    }
    let mut sum = 0i64;
    let tables = r.list_tables().expect("list");
    assert!(tables.is_empty() || tables.len() == 10, "{tables:?}");
    for (i, info) in tables.iter().enumerate() {
        assert_eq!(info.name, format!("bank{i}"), "the ten tables, all or none");
        let t = r.open_table(&info.name).expect("open");
        sum += r
            .table(&t)
            .prefix(b"acct")
            .map(|e| i64::from_le_bytes(e.expect("scan").1.as_slice().try_into().expect("8")))
            .sum::<i64>();
    }
    if total > 0 {
        assert_eq!(
            sum,
            ACCOUNTS as i64 * START_BALANCE,
            "a transfer was half applied, or an update lost"
        );
    }
    total
}

/// Reads `acked T N` lines into `acked` until `deadline`; false when the
/// child's output ended first.
fn collect_acks(
    rx: &mpsc::Receiver<(usize, u64)>,
    acked: &mut [Option<u64>],
    deadline: std::time::Instant,
) -> bool {
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok((t, n)) => acked[t] = acked[t].max(Some(n)),
            Err(mpsc::RecvTimeoutError::Timeout) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => return false,
        }
    }
    true
}

#[test]
fn sigkill_never_loses_an_acknowledged_commit() {
    let cycles: usize = std::env::var("DIRECTKV_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(25);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let mut seed: u64 = 0x5EED_1234 ^ u64::from(std::process::id());
    let mut total = 0;
    for cycle in 0..cycles {
        let mut child = Command::new(env!("CARGO_BIN_EXE_directkv"))
            .arg("crash-workload")
            .arg(dir.path())
            .args(["--threads", &THREADS.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("acked ") {
                    let (t, n) = rest.split_once(' ').expect("acked T N");
                    let _ = tx.send((t.parse().expect("thread"), n.parse().expect("number")));
                }
            }
        });
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_millis(10 + seed % 290);
        let mut acked = vec![None; THREADS as usize];
        let deadline = std::time::Instant::now() + delay;
        if !collect_acks(&rx, &mut acked, deadline) {
            let out = child.wait_with_output().expect("child output");
            panic!(
                "child exited early: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // SIGKILL: no destructor, no flush, no checkpoint.
        child.kill().expect("kill");
        let _ = child.wait();
        reader.join().expect("reader");
        while let Ok((t, n)) = rx.try_recv() {
            acked[t] = acked[t].max(Some(n));
        }
        let present = check(dir.path(), &acked);
        total += acked.iter().flatten().map(|a| a + 1).sum::<u64>();
        eprintln!(
            "cycle {cycle}: killed after {delay:?}, acked through {acked:?}, recovered {present}"
        );
    }
    assert!(total > 0, "the child committed something");
}

/// F21: a second process opening a database this process holds gets a clear
/// error naming the holder, and the database is untouched by the attempt.
#[test]
fn a_second_process_is_refused_and_told_who_holds_it() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let opts = Options {
        cache_bytes: 1 << 20,
        page_bytes: 4096,
        ..Options::default()
    };
    let db = Database::open(dir.path(), opts).expect("open");
    let out = Command::new(env!("CARGO_BIN_EXE_directkv"))
        .arg("crash-workload")
        .arg(dir.path())
        .output()
        .expect("run child");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already open"), "{err}");
    assert!(
        err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    drop(db);
}
