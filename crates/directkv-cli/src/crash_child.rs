//! `directkv crash-workload DIR`: the child of the real-process crash test. Its
//! threads run bank transfers at once (the sum of all balances never
//! changes) between accounts spread over [`TABLES`] named tables, each
//! transfer with its record and counter in the default keyspace, so every
//! commit spans up to three trees; each thread prints `acked T N` after its
//! commit N returned, so a parent that kills it with SIGKILL knows exactly
//! which commits were acknowledged.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use directkv::{Database, Options, WriteOptions};

/// Accounts in the workload; each starts at [`START_BALANCE`].
pub const ACCOUNTS: u64 = 200;
/// Every account's opening balance.
pub const START_BALANCE: i64 = 1000;

/// Options of the hidden `crash-workload` command.
#[derive(clap::Args)]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    /// Cache size in bytes (small, so pages are evicted and checkpoints run).
    #[arg(long, default_value_t = 1 << 20)]
    cache: usize,
    /// Threads committing at once, each with its own counter and records.
    #[arg(long, default_value_t = 1)]
    threads: u64,
}

/// Threads the workload runs at most (each has a counter from the start).
pub const THREADS_MAX: u64 = 8;

/// Named tables the accounts are spread over.
pub const TABLES: u64 = 10;

/// The table account `a` is in.
pub fn table_name(a: u64) -> String {
    format!("bank{}", a % TABLES)
}

/// Account `a`'s key in its table.
pub fn key(a: u64) -> Vec<u8> {
    format!("acct{a:05}").into_bytes()
}

/// Thread `t`'s counter: the number of its commits.
pub fn counter_key(t: u64) -> Vec<u8> {
    format!("next{t:02}").into_bytes()
}

/// The record commit `n` of thread `t` writes.
pub fn record_key(t: u64, n: u64) -> Vec<u8> {
    format!("txn{t:02}-{n:08}").into_bytes()
}

pub fn run(args: Args) -> Result<()> {
    anyhow::ensure!(
        (1..=THREADS_MAX).contains(&args.threads),
        "--threads is 1 to {THREADS_MAX}"
    );
    let opts = Options {
        cache_bytes: args.cache,
        page_bytes: 4096,
        checkpoint_wal_bytes: 2 << 20,
        wal_segment_bytes: 1 << 20,
        async_io: crate::io_backend_from_env()?,
        ..Options::default()
    };
    let db = Database::open(&args.dir, opts)?;
    if db.begin_read()?.get(&counter_key(0))?.is_none() {
        let mut w = db.begin_write()?;
        let tables = (0..TABLES)
            .map(|t| w.create_table(&table_name(t)))
            .collect::<directkv::Result<Vec<_>>>()?;
        for a in 0..ACCOUNTS {
            let t = &tables[(a % TABLES) as usize];
            w.table(t).put(&key(a), &START_BALANCE.to_le_bytes())?;
        }
        for t in 0..THREADS_MAX {
            w.put(&counter_key(t), &0u64.to_le_bytes())?;
        }
        w.commit()?;
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.threads)
            .map(|t| {
                let db = &db;
                s.spawn(move || transfers(db, t))
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(r) => r?,
                Err(_) => anyhow::bail!("a workload thread panicked"),
            }
        }
        Ok(())
    })
}

/// Thread `t`'s transfers, each one transaction (run again on a conflict),
/// printing `acked T N` once commit `n` returned.
fn transfers(db: &Database, t: u64) -> Result<()> {
    let next = db
        .begin_read()?
        .get(&counter_key(t))?
        .ok_or_else(|| anyhow::anyhow!("missing counter"))?;
    let next = u64::from_le_bytes(next.as_slice().try_into()?);
    let out = std::io::stdout();
    let mut x = (next ^ (t << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for n in next.. {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (from, to) = (x % ACCOUNTS, (x >> 20) % ACCOUNTS);
        let amount = (x >> 40) as i64 % 100;
        db.transaction(&WriteOptions::default(), |w| {
            // Snapshot reads, validated at commit: a lost update would show
            // as money made or lost.
            let (tf, tt) = (
                w.open_table(&table_name(from))?,
                w.open_table(&table_name(to))?,
            );
            let bal = |w: &mut directkv::WriteTxn<'_>, t, a| -> directkv::Result<i64> {
                let v = w.table(t).get(&key(a))?.unwrap_or_default();
                Ok(v.as_slice().try_into().map_or(i64::MIN, i64::from_le_bytes))
            };
            let (f, to_bal) = (bal(w, &tf, from)?, bal(w, &tt, to)?);
            if from != to {
                w.table(&tf).put(&key(from), &(f - amount).to_le_bytes())?;
                w.table(&tt)
                    .put(&key(to), &(to_bal + amount).to_le_bytes())?;
            }
            w.put(&record_key(t, n), &[0xAB; 64])?;
            w.put(&counter_key(t), &(n + 1).to_le_bytes())
        })?;
        writeln!(out.lock(), "acked {t} {n}")?;
    }
    Ok(())
}
