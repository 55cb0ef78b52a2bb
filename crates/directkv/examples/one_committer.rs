//! One thread committing single 100-byte puts on a fresh database with the
//! default options: the path every durable commit takes, measured from
//! outside. Prints commits/s, the WAL's sync method and flushes, and the
//! pages written per commit, by cause.
//!
//! ```text
//! cargo run --release --example one_committer -- DIR [SECONDS [SYNC]]
//! ```
//!
//! `SYNC` (say `fdatasync+direct`) fixes the WAL's sync method; without it
//! the engine picks the fastest it measures.
//!
//! Compare with `directkv bench wal --threads 1 --methods METHOD
//! --record-sizes 100`, the log alone with the same sync method.

use std::time::{Duration, Instant};

use directkv::{Database, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: one_committer DIR [SECONDS [SYNC]]")?;
    let seconds: f64 = args.next().map_or(Ok(10.0), |s| s.parse())?;
    let wal_sync = args.next().map(|s| s.parse()).transpose()?;
    if std::path::Path::new(&dir).exists() {
        return Err(format!("{dir} exists; give a fresh path").into());
    }
    let db = Database::open(
        &dir,
        Options {
            wal_sync,
            ..Options::default()
        },
    )?;
    let value = [0x5au8; 100];
    let started = Instant::now();
    let mut commits = 0u64;
    while started.elapsed() < Duration::from_secs_f64(seconds) {
        let mut w = db.begin_write()?;
        w.put(format!("key{:08}", commits % 10_000).as_bytes(), &value)?;
        w.commit()?;
        commits += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    let s = db.stats();
    let per = |n: u64| n as f64 / commits as f64;
    println!(
        "{commits} commits in {secs:.1} s: {:.0} commits/s; WAL sync {:?}, {} flushes; pages \
         written per commit: {:.3} (cleaner {:.3}, eviction {:.3})",
        commits as f64 / secs,
        s.wal_sync,
        s.wal.flushes,
        per(s.pages_written),
        per(s.cleaner_writes),
        per(s.eviction_writes),
    );
    db.close()?;
    Ok(())
}
