//! Named tables in the crash campaign: a transaction's operations may write
//! a table's keys, or drop a table, beside the default keyspace's.
//!
//! The model stays one map of keys: a table's key `k` is `t<N>/k` in it,
//! and a drop of table `t<N>` is the operation `(t<N>/, None)`, which
//! removes every key of that table from the model (and, in the database,
//! drops it; a later write to the table creates it again, empty). A table
//! is created by the first write to it; a drop of a table that is not
//! there changes nothing, and is not recorded.

use std::collections::BTreeMap;

use crate::db::{ReadTxn, WriteTxn};
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::sim::rng::Rng;

/// Tables the campaign's transactions use.
const TABLES: u64 = 3;

/// A random key of the campaign: one in three of a table's.
pub(super) fn random_key(rng: &mut Rng) -> Vec<u8> {
    match rng.chance(1, 3) {
        true => format!("t{}/k{:03}", rng.range(0, TABLES), rng.range(0, 150)).into_bytes(),
        false => format!("k{:03}", rng.range(0, 200)).into_bytes(),
    }
}

/// A drop of a random table, as an operation.
pub(super) fn random_drop(rng: &mut Rng) -> Vec<u8> {
    format!("t{}/", rng.range(0, TABLES)).into_bytes()
}

/// The table a key of the model is in (`None`: the default keyspace) and
/// its key there (empty for a drop).
fn split(key: &[u8]) -> Option<(String, &[u8])> {
    let slash = key.iter().position(|&b| b == b'/')?;
    let name = std::str::from_utf8(&key[..slash]).ok()?;
    assert!(name.starts_with('t'), "only tables' keys have a slash");
    Some((name.to_string(), &key[slash + 1..]))
}

/// Applies one operation to the model.
pub(super) fn apply_to_model(m: &mut BTreeMap<Vec<u8>, Vec<u8>>, k: &[u8], v: &Option<Vec<u8>>) {
    match (split(k), v) {
        (Some((_, [])), None) => m.retain(|key, _| !key.starts_with(k)),
        (_, Some(v)) => drop(m.insert(k.to_vec(), v.clone())),
        (_, None) => drop(m.remove(k)),
    }
}

/// Applies one operation in `w`; returns whether it did anything the model
/// must record (a drop of a table that is not there does not).
///
/// # Errors
/// The transaction's errors.
pub(super) fn apply<S: Storage>(
    w: &mut WriteTxn<'_, S>,
    k: &[u8],
    v: &Option<Vec<u8>>,
) -> Result<bool> {
    let Some((name, key)) = split(k) else {
        match v {
            Some(v) => w.put(k, v)?,
            None => w.delete(k)?,
        }
        return Ok(true);
    };
    if key.is_empty() {
        assert!(v.is_none(), "a drop writes nothing");
        return match w.drop_table(&name) {
            Ok(()) => Ok(true),
            Err(Error::TableNotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        };
    }
    let t = match w.open_table(&name) {
        Ok(t) => t,
        Err(Error::TableNotFound { .. }) => w.create_table(&name)?,
        Err(e) => return Err(e),
    };
    match v {
        Some(v) => w.table(&t).put(key, v)?,
        None => w.table(&t).delete(key)?,
    }
    Ok(true)
}

/// Everything `r` reads, as the model keys it: the default keyspace and
/// every table's keys.
///
/// # Errors
/// The reads' errors.
pub(in crate::sim) fn read_all<S: Storage>(
    r: &ReadTxn<'_, S>,
) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let mut got = BTreeMap::new();
    for e in r.range::<std::ops::RangeFull>(..) {
        let (k, v) = e?;
        got.insert(k, v);
    }
    for info in r.list_tables()? {
        let t = r.open_table(&info.name)?;
        for e in r.table(&t).prefix(b"") {
            let (k, v) = e?;
            let mut key = format!("{}/", info.name).into_bytes();
            key.extend_from_slice(&k);
            got.insert(key, v);
        }
    }
    Ok(got)
}
