//! `directkv crash-workload DIR`: the child of the real-process crash test. It
//! runs bank transfers (the sum of all balances never changes) and prints
//! `acked N` after commit N returned, so a parent that kills it with SIGKILL
//! knows exactly which commits were acknowledged.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use directkv::{Database, Options};

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
}

fn key(a: u64) -> Vec<u8> {
    format!("acct{a:05}").into_bytes()
}

pub fn run(args: Args) -> Result<()> {
    let opts = Options {
        cache_bytes: args.cache,
        page_bytes: 4096,
        checkpoint_wal_bytes: 2 << 20,
        wal_segment_bytes: 1 << 20,
        async_io: crate::io_backend_from_env()?,
        ..Options::default()
    };
    let db = Database::open(&args.dir, opts)?;
    let next = match db.begin_read()?.get(b"next")? {
        Some(v) => u64::from_le_bytes(v.as_slice().try_into()?),
        None => {
            let mut w = db.begin_write()?;
            for a in 0..ACCOUNTS {
                w.put(&key(a), &START_BALANCE.to_le_bytes())?;
            }
            w.put(b"next", &0u64.to_le_bytes())?;
            w.commit()?;
            0
        }
    };
    let out = std::io::stdout();
    let mut x = next.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for n in next.. {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (from, to) = (x % ACCOUNTS, (x >> 20) % ACCOUNTS);
        let amount = (x >> 40) as i64 % 100;
        let mut w = db.begin_write()?;
        let bal = |w: &directkv::WriteTxn<'_>, a| -> Result<i64> {
            let v = w
                .get(&key(a))?
                .ok_or_else(|| anyhow::anyhow!("missing account"))?;
            Ok(i64::from_le_bytes(v.as_slice().try_into()?))
        };
        let (f, t) = (bal(&w, from)?, bal(&w, to)?);
        if from != to {
            w.put(&key(from), &(f - amount).to_le_bytes())?;
            w.put(&key(to), &(t + amount).to_le_bytes())?;
        }
        w.put(format!("txn{n:08}").as_bytes(), &[0xAB; 64])?;
        w.put(b"next", &(n + 1).to_le_bytes())?;
        w.commit()?;
        writeln!(out.lock(), "acked {n}")?;
    }
    Ok(())
}
