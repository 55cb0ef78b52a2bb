//! A bank transfer: move money between two accounts in one transaction, so
//! the total never changes, after a crash too. Each transfer commits both
//! balances or neither.
//!
//! `cargo run -p directkv --example bank [DIR]`

use directkv::{Database, Error, Options, WriteTxn};

const ACCOUNTS: u32 = 100;
const OPENING_BALANCE: i64 = 1_000;

fn key(account: u32) -> Vec<u8> {
    format!("account/{account:05}").into_bytes()
}

fn balance(w: &WriteTxn<'_>, account: u32) -> directkv::Result<i64> {
    let bytes = w
        .get(&key(account))?
        .ok_or_else(|| Error::InvalidArgument(format!("no account {account}")))?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    text.parse()
        .map_err(|_| Error::InvalidArgument(format!("account {account} holds {text:?}")))
}

/// Moves `amount` from `from` to `to`, refusing an overdraft.
fn transfer(db: &Database, from: u32, to: u32, amount: i64) -> directkv::Result<bool> {
    let mut w = db.begin_write()?;
    let (a, b) = (balance(&w, from)?, balance(&w, to)?);
    if a < amount {
        w.abort(); // nothing of it is applied
        return Ok(false);
    }
    w.put(&key(from), (a - amount).to_string().as_bytes())?;
    w.put(&key(to), (b + amount).to_string().as_bytes())?;
    w.commit()?;
    Ok(true)
}

fn main() -> directkv::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "directkv-example-bank".into());
    let db = Database::open(&dir, Options::default())?;
    let mut w = db.begin_write()?;
    for account in 0..ACCOUNTS {
        if w.get(&key(account))?.is_none() {
            w.put(&key(account), OPENING_BALANCE.to_string().as_bytes())?;
        }
    }
    w.commit()?;

    let mut done = 0;
    for i in 0..1_000u32 {
        let (from, to) = (i * 7 % ACCOUNTS, i * 13 % ACCOUNTS);
        if from != to && transfer(&db, from, to, i64::from(i % 50))? {
            done += 1;
        }
    }
    let r = db.begin_read()?;
    let mut total = 0i64;
    for entry in r.prefix(b"account/") {
        let (_, value) = entry?;
        total += String::from_utf8_lossy(&value).parse::<i64>().unwrap_or(0);
    }
    println!(
        "{done} transfers; total {total}, opening total {}",
        i64::from(ACCOUNTS) * OPENING_BALANCE
    );
    drop(r); // a read transaction is a snapshot, held until dropped
    db.close()
}
