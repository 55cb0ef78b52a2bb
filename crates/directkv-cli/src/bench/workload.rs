//! The workloads: what is loaded, what one operation does, and the TPC-B
//! consistency check.
//!
//! - `tpcb`, modelled on pgbench's TPC-B-like script: scale `s` gives
//!   100,000·s accounts, 10·s tellers and `s` branches, balances starting at
//!   zero; a transaction adds a random delta in [-5000, 5000] to one random
//!   account, teller and branch (reading each first) and appends a history
//!   record, then commits durably.
//! - `ycsb` A–F over `--keys` records (zipfian or uniform key choice): A 50%
//!   reads / 50% updates, B 95/5, C reads only, D 95% reads of the latest
//!   records / 5% inserts, E 95% short scans / 5% inserts, F 50% reads / 50%
//!   read-modify-writes.
//! - `fill`: inserts `--keys` new keys in key or random order, `--batch` per
//!   durable commit.
//! - `read`: random point reads. `scan`: range scans of `--scan-length` keys
//!   from random starting points.

// Keys are big-endian numbers so that byte order is numeric order: loads in
// key order then append at the right edge, as a database's would.
#![allow(clippy::big_endian_bytes)]

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::store::{Store, TxnOps};

/// Which workload, with its own parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Workload {
    /// pgbench-like TPC-B.
    Tpcb {
        /// Scale factor (100,000 accounts each).
        scale: u64,
    },
    /// YCSB core workload `kind` (`a`..`f`).
    Ycsb {
        /// a, b, c, d, e or f.
        kind: char,
        /// Zipfian (θ = 0.99, scrambled) rather than uniform key choice.
        zipfian: bool,
    },
    /// Inserts of new keys.
    Fill {
        /// In random rather than key order.
        random: bool,
        /// Keys per commit.
        batch: u64,
    },
    /// Point reads.
    Read {
        /// Zipfian rather than uniform key choice.
        zipfian: bool,
    },
    /// Range scans.
    Scan {
        /// Keys per scan.
        length: usize,
    },
}

/// Sizes shared by the workloads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Shape {
    /// Records loaded before the run (ycsb, read, scan) or to insert (fill).
    pub keys: u64,
    /// Bytes per value (per account row in tpcb).
    pub value_size: usize,
    /// Longest YCSB E scan.
    pub scan_length: usize,
}

impl Workload {
    /// The name used in reports.
    pub fn name(&self) -> String {
        match self {
            Workload::Tpcb { .. } => "tpcb".into(),
            Workload::Ycsb { kind, zipfian } => {
                format!(
                    "ycsb-{kind}-{}",
                    if *zipfian { "zipfian" } else { "uniform" }
                )
            }
            Workload::Fill { random, .. } => {
                format!("fill-{}", if *random { "random" } else { "seq" })
            }
            Workload::Read { zipfian } => {
                format!("read-{}", if *zipfian { "zipfian" } else { "uniform" })
            }
            Workload::Scan { .. } => "scan".into(),
        }
    }

    /// What one operation counts.
    pub fn unit(&self) -> &'static str {
        match self {
            Workload::Tpcb { .. } => "transactions",
            Workload::Fill { .. } => "keys",
            Workload::Scan { .. } => "scans",
            _ => "operations",
        }
    }

    /// Identifies the data set a run needs loaded: runs with equal tags
    /// reuse one load.
    pub fn data_tag(&self, shape: &Shape) -> Option<String> {
        match self {
            Workload::Tpcb { scale } => Some(format!("tpcb-s{scale}-v{}", shape.value_size)),
            Workload::Fill { .. } => None,
            _ => Some(format!("kv-k{}-v{}", shape.keys, shape.value_size)),
        }
    }

    /// Loads the data set; `progress` gets the number of records stored.
    pub fn load(&self, store: &dyn Store, shape: &Shape, progress: &dyn Fn(u64)) -> Result<()> {
        const BATCH: usize = 5000;
        let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(BATCH);
        let mut done = 0u64;
        let mut flush = |batch: &mut Vec<(Vec<u8>, Vec<u8>)>| -> Result<()> {
            store.transact(&mut |t| {
                for (k, v) in batch.iter() {
                    t.put(k, v)?;
                }
                Ok(())
            })?;
            done += batch.len() as u64;
            progress(done);
            batch.clear();
            Ok(())
        };
        match self {
            Workload::Tpcb { scale } => {
                let rows = [
                    (b'A', 100_000 * scale, shape.value_size),
                    (b'B', *scale, shape.value_size),
                    (b'T', 10 * scale, shape.value_size),
                ];
                for (table, n, size) in rows {
                    for id in 0..n {
                        batch.push((tpcb_key(table, id), balance_row(0, size)));
                        if batch.len() == BATCH {
                            flush(&mut batch)?;
                        }
                    }
                }
            }
            Workload::Fill { .. } => return Ok(()),
            _ => {
                // Loaded in key order so the tree is packed; the keys are
                // hashes of record numbers, so the workload's choices land
                // all over it.
                let mut keys: Vec<[u8; 9]> = Vec::new();
                usize::try_from(shape.keys)
                    .ok()
                    .and_then(|n| keys.try_reserve_exact(n).ok())
                    .with_context(|| {
                        format!(
                            "--keys {}: no room in memory to sort that many keys for the load",
                            shape.keys
                        )
                    })?;
                keys.extend((0..shape.keys).map(ycsb_key));
                keys.sort_unstable();
                for k in keys {
                    batch.push((k.to_vec(), value_bytes(0, shape.value_size)));
                    if batch.len() == BATCH {
                        flush(&mut batch)?;
                    }
                }
            }
        }
        if !batch.is_empty() {
            flush(&mut batch)?;
        }
        store.finish_load()
    }

    /// How many records the load stores (for the progress bar).
    pub fn load_records(&self, shape: &Shape) -> u64 {
        match self {
            Workload::Tpcb { scale } => 100_000 * scale + 11 * scale,
            Workload::Fill { .. } => 0,
            _ => shape.keys,
        }
    }
}

/// State shared by the clients of one run.
pub struct Shared {
    workload: Workload,
    shape: Shape,
    zipf: Option<Zipf>,
    /// Records inserted during the run (ycsb D/E, fill).
    inserted: AtomicU64,
    /// Distinguishes this run's inserts and history records from earlier runs
    /// on the same data.
    nonce: u64,
}

impl Shared {
    /// Prepares a run (the zipfian constants take a pass over the key count).
    pub fn new(workload: Workload, shape: Shape, nonce: u64) -> Shared {
        let zipfian = matches!(
            workload,
            Workload::Ycsb { zipfian: true, .. } | Workload::Read { zipfian: true }
        );
        let zipf = zipfian.then(|| Zipf::new(shape.keys.max(2), 0.99));
        Shared {
            workload,
            shape,
            zipf,
            inserted: AtomicU64::new(0),
            nonce,
        }
    }

    /// Whether the workload has run out of work (a fill that stored every key).
    pub fn exhausted(&self) -> bool {
        matches!(self.workload, Workload::Fill { .. })
            && self.inserted.load(Ordering::Relaxed) >= self.shape.keys
    }

    /// Runs one operation for `client`; returns how many units it counts for.
    pub fn op(&self, store: &dyn Store, client: &mut Client) -> Result<u64> {
        match &self.workload {
            Workload::Tpcb { scale } => self.tpcb_op(store, client, *scale),
            Workload::Ycsb { kind, .. } => self.ycsb_op(store, &mut client.rng, *kind),
            Workload::Fill { random, batch } => self.fill_op(store, *random, *batch),
            Workload::Read { .. } => {
                store.get(&ycsb_key(self.choose(&mut client.rng)))?;
                Ok(1)
            }
            Workload::Scan { length } => {
                let start = ycsb_key(client.rng.below(self.shape.keys));
                store.scan(&start, &[0xFF; 9], *length, &mut |_, _| {})?;
                Ok(1)
            }
        }
    }

    /// One TPC-B transaction: an account, its teller and its branch get
    /// `delta`, and a history row is appended.
    fn tpcb_op(&self, store: &dyn Store, client: &mut Client, scale: u64) -> Result<u64> {
        let rng = &mut client.rng;
        let aid = rng.below(100_000 * scale);
        let tid = rng.below(10 * scale);
        let bid = rng.below(scale);
        let delta = rng.below(10_001) as i64 - 5000;
        let seq = client.seq;
        client.seq += 1;
        let size = self.shape.value_size;
        let hist_key = history_key(self.nonce, client.id, seq);
        let mut hist = Vec::with_capacity(50);
        hist.extend_from_slice(&delta.to_le_bytes());
        hist.extend_from_slice(&aid.to_le_bytes());
        hist.extend_from_slice(&tid.to_le_bytes());
        hist.extend_from_slice(&bid.to_le_bytes());
        hist.resize(50, b' ');
        let keys = [
            tpcb_key(b'A', aid),
            tpcb_key(b'T', tid),
            tpcb_key(b'B', bid),
        ];
        store.transact(&mut |t| {
            for key in &keys {
                add_balance(t, key, delta, size)?;
            }
            t.put(&hist_key, &hist)
        })?;
        Ok(1)
    }

    /// One operation of YCSB workload `kind`: a read (or a scan), else its
    /// write (an insert, a read-modify-write or an update).
    fn ycsb_op(&self, store: &dyn Store, rng: &mut Rng, kind: char) -> Result<u64> {
        let p = rng.below(100);
        let write = match kind {
            'a' | 'f' => p < 50,
            'b' | 'd' | 'e' => p < 5,
            _ => false,
        };
        if !write {
            match kind {
                'd' => {
                    store.get(&self.latest_key(rng))?;
                }
                'e' => {
                    let start = ycsb_key(self.choose(rng));
                    let len = 1 + rng.below(self.shape.scan_length as u64) as usize;
                    store.scan(&start, &[0xFF; 9], len, &mut |_, _| {})?;
                }
                _ => {
                    store.get(&ycsb_key(self.choose(rng)))?;
                }
            }
            return Ok(1);
        }
        match kind {
            'd' | 'e' => {
                let i = self.inserted.fetch_add(1, Ordering::Relaxed);
                let key = self.inserted_key(i);
                let value = value_bytes(i, self.shape.value_size);
                store.transact(&mut |t| t.put(&key, &value))?;
            }
            'f' => {
                let key = ycsb_key(self.choose(rng));
                read_modify_write(store, &key, self.shape.value_size)?;
            }
            _ => {
                let key = ycsb_key(self.choose(rng));
                let value = value_bytes(rng.next(), self.shape.value_size);
                store.transact(&mut |t| t.put(&key, &value))?;
            }
        }
        Ok(1)
    }

    /// The next `batch` keys of a fill, in one transaction (random order:
    /// a bijection of the key numbers); the keys it wrote.
    fn fill_op(&self, store: &dyn Store, random: bool, batch: u64) -> Result<u64> {
        let start = self.inserted.fetch_add(batch, Ordering::Relaxed);
        let end = (start + batch).min(self.shape.keys);
        if start >= end {
            return Ok(0);
        }
        assert!(end - start <= batch, "a fill writes at most its batch");
        let n = self.shape.keys;
        let size = self.shape.value_size;
        let nonce = self.nonce;
        store.transact(&mut |t| {
            for i in start..end {
                // A multiplicative bijection of 0..n for random order.
                let k = if random { permute(i, n) } else { i };
                let mut key = Vec::with_capacity(17);
                key.push(b'F');
                key.extend_from_slice(&nonce.to_be_bytes());
                key.extend_from_slice(&k.to_be_bytes());
                t.put(&key, &value_bytes(i, size))?;
            }
            Ok(())
        })?;
        Ok(end - start)
    }

    fn choose(&self, rng: &mut Rng) -> u64 {
        match &self.zipf {
            // Scrambled: the popular records are spread over the key space.
            Some(z) => fnv(z.next(rng.unit())) % self.shape.keys,
            None => rng.below(self.shape.keys),
        }
    }

    /// A key near the most recently inserted ones (YCSB's "latest").
    fn latest_key(&self, rng: &mut Rng) -> Vec<u8> {
        let inserted = self.inserted.load(Ordering::Relaxed);
        let back = match &self.zipf {
            Some(z) => z.next(rng.unit()),
            None => rng.below(self.shape.keys),
        };
        if back < inserted {
            self.inserted_key(inserted - 1 - back)
        } else {
            let i = self.shape.keys - 1 - (back - inserted).min(self.shape.keys - 1);
            ycsb_key(i).to_vec()
        }
    }

    fn inserted_key(&self, i: u64) -> Vec<u8> {
        let mut k = Vec::with_capacity(17);
        k.push(b'v');
        k.extend_from_slice(&fnv(i ^ self.nonce.rotate_left(32)).to_be_bytes());
        k.extend_from_slice(&i.to_be_bytes());
        k
    }
}

/// One client's state.
pub struct Client {
    /// Client number.
    pub id: u64,
    rng: Rng,
    seq: u64,
}

impl Client {
    /// Client `id` of a run seeded with `seed`.
    pub fn new(id: u64, seed: u64) -> Client {
        Client {
            id,
            rng: Rng(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03),
            seq: 0,
        }
    }
}

/// YCSB F's read-modify-write of `key`: the read under the row lock, as an
/// UPDATE would read it.
fn read_modify_write(store: &dyn Store, key: &[u8], size: usize) -> Result<()> {
    store.transact(&mut |t| {
        let old = t.get_for_update(key)?;
        let n = old.as_deref().map_or(0, first_u64).wrapping_add(1);
        t.put(key, &value_bytes(n, size))
    })
}

fn add_balance(t: &mut dyn TxnOps, key: &[u8], delta: i64, size: usize) -> Result<()> {
    let old = t
        .get_for_update(key)?
        .with_context(|| format!("tpcb row {key:?} is missing"))?;
    let balance = first_u64(&old) as i64 + delta;
    t.put(key, &balance_row(balance, size))
}

/// A table row key: the table's letter and the row id, big-endian.
fn tpcb_key(table: u8, id: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(table);
    k.extend_from_slice(&(id as u32).to_be_bytes());
    k
}

fn history_key(nonce: u64, client: u64, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(21);
    k.push(b'H');
    k.extend_from_slice(&nonce.to_be_bytes());
    k.extend_from_slice(&(client as u32).to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn balance_row(balance: i64, size: usize) -> Vec<u8> {
    let mut v = balance.to_le_bytes().to_vec();
    v.resize(size.max(8), b' ');
    v
}

fn value_bytes(n: u64, size: usize) -> Vec<u8> {
    let mut v = n.to_le_bytes().to_vec();
    v.resize(size.max(8), b'x');
    v
}

fn first_u64(v: &[u8]) -> u64 {
    v.get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn ycsb_key(i: u64) -> [u8; 9] {
    let mut k = [b'u'; 9];
    k[1..].copy_from_slice(&fnv(i).to_be_bytes());
    k
}

/// FNV-1a over the 8 bytes of `x` (YCSB hashes record numbers the same way).
fn fnv(x: u64) -> u64 {
    let mut h = 0xCBF2_9CE4_8422_2325u64;
    for b in x.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01B3);
    }
    h
}

/// A bijection of `0..n`: multiplication by a constant coprime to `n`.
fn permute(i: u64, n: u64) -> u64 {
    let mut m = 0x9E37_79B9_7F4A_7C15u64 % n.max(1);
    while gcd(m, n) != 1 {
        m += 1;
    }
    ((u128::from(i) * u128::from(m)) % u128::from(n.max(1))) as u64
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// splitmix64: fast, seedable, good enough for choosing keys.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn seeded(seed: u64) -> Rng {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n.max(1))) >> 64) as u64
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipfian ranks over `0..n` (Gray et al., "Quickly generating billion-record
/// synthetic databases", as YCSB uses it): rank 0 is the most popular.
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    /// The distribution over `n` items with skew `theta` (0 < θ < 1).
    pub fn new(n: u64, theta: f64) -> Zipf {
        let zetan: f64 = (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum();
        let zeta2 = 1.0 + 0.5f64.powf(theta);
        Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
        }
    }

    /// The rank for a uniform `u` in [0, 1).
    pub fn next(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// The TPC-B consistency check: the balances of accounts, tellers and
/// branches each sum to the sum of the history deltas.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Consistency {
    /// Sum of account balances.
    pub accounts: i64,
    /// Sum of teller balances.
    pub tellers: i64,
    /// Sum of branch balances.
    pub branches: i64,
    /// Sum of history deltas.
    pub history: i64,
    /// History records.
    pub history_records: u64,
    /// Whether all four sums agree.
    pub ok: bool,
}

/// Runs the TPC-B consistency check over the whole store.
pub fn tpcb_consistency(store: &dyn Store) -> Result<Consistency> {
    let sum = |table: u8| -> Result<(i64, u64)> {
        let (mut total, mut n) = (0i64, 0u64);
        store.scan(&[table], &[table + 1], usize::MAX, &mut |_, v| {
            total = total.wrapping_add(first_u64(v) as i64);
            n += 1;
        })?;
        Ok((total, n))
    };
    let (accounts, _) = sum(b'A')?;
    let (branches, _) = sum(b'B')?;
    let (history, history_records) = sum(b'H')?;
    let (tellers, _) = sum(b'T')?;
    if history_records == 0 && accounts != 0 {
        bail!("tpcb data without history records but with non-zero balances");
    }
    Ok(Consistency {
        accounts,
        tellers,
        branches,
        history,
        history_records,
        ok: accounts == history && tellers == history && branches == history,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_ranks_are_skewed_and_in_range() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = Rng(7);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[z.next(rng.unit()) as usize] += 1;
        }
        // Rank 0 is the most popular; the top 1% of items get a large share.
        assert!(counts[0] > counts[10] && counts[10] > counts[500]);
        let top: u32 = counts[..10].iter().sum();
        assert!(top > 30_000, "top ten got {top} of 100000");
    }

    #[test]
    fn permute_is_a_bijection() {
        for n in [1u64, 7, 100, 1000, 4096] {
            let mut seen: Vec<u64> = (0..n).map(|i| permute(i, n)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>());
        }
    }

    #[test]
    fn rng_below_stays_below() {
        let mut r = Rng(1);
        assert!((0..10_000).all(|_| r.below(37) < 37));
        assert_eq!(r.below(1), 0);
    }
}
