//! How long a quiet database's last commit takes to reach the log archive
//! with `archive_timeout`, measured from outside: each round waits past the
//! timeout with nothing to commit, commits one key, and polls `stats()`
//! until the archive holds every durable record.
//!
//! ```text
//! cargo run --release -p directkv --example archive_lag -- DIR [TIMEOUT_MS [ROUNDS]]
//! ```
//!
//! `DIR` must not exist; the database and its archive are made inside it.
//! Each figure is the timeout, the archiver's poll (100 ms) and the copy of
//! the segment being written.

use std::time::{Duration, Instant};

use directkv::{Database, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: archive_lag DIR [TIMEOUT_MS [ROUNDS]]")?;
    let timeout_ms: u64 = args.next().map_or(Ok(1000), |s| s.parse())?;
    let rounds: u32 = args.next().map_or(Ok(3), |s| s.parse())?;
    let root = std::path::Path::new(&dir);
    if root.exists() {
        return Err(format!("{dir} exists; give a fresh path").into());
    }
    let timeout = Duration::from_millis(timeout_ms);
    let db = Database::open(
        root.join("db"),
        Options {
            wal_archive: Some(root.join("archive")),
            archive_timeout: Some(timeout),
            ..Options::default()
        },
    )?;
    for round in 0..rounds {
        std::thread::sleep(timeout + Duration::from_millis(500));
        let mut w = db.begin_write()?;
        w.put(format!("k{round}").as_bytes(), b"v")?;
        w.commit()?;
        let began = Instant::now();
        while db.stats().archive.lag_bytes > 0 {
            if began.elapsed() > timeout * 10 + Duration::from_secs(10) {
                return Err(
                    format!("round {round}: not archived after {:?}", began.elapsed()).into(),
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        println!(
            "archive_timeout {timeout_ms} ms, round {round}: the commit reached the archive after {:.2} s",
            began.elapsed().as_secs_f64()
        );
    }
    db.close()?;
    Ok(())
}
