//! The tables at open: made on a new database, moved into from the prefix
//! layout of earlier releases, and cleaned of what a crash left.
//!
//! The prefix layout kept every record in the default keyspace under a
//! one-byte family: `v` `c` `p` `a` `s` (the vote, committed, purged,
//! applied and snapshot records), `l` index (log entries), `d` generation
//! key (data), `t` sequence chunk (snapshot chunks). The upgrade moves it
//! into the tables of [`crate::keys`]:
//!
//! 1. one transaction creates `raft.upgrade` and copies the five records
//!    into it, puts [`old::FENCE`] under each of their five keys, and
//!    creates `raft.log`, the data table of the applied generation and the
//!    chunk table of the current snapshot, read from the `a` and `s`
//!    records; resuming, it finds `raft.upgrade` and reads them there, so
//!    every step reads the same ones;
//! 2. each following transaction takes the next keys of one family (at
//!    most [`DELETE_BATCH_KEYS`] keys or about a batch's bytes), puts each
//!    into its table and deletes it from the default keyspace: a key is in
//!    exactly one place at every commit. Data of another generation and
//!    chunks of another snapshot (what the old open would have deleted)
//!    are only deleted;
//! 3. the last transaction creates `raft.meta`, moves the five records
//!    into it from `raft.upgrade`, drops that, and waits for the log.
//!
//! The fences stay for good: from the first commit on, a build of the
//! prefix layout that opens the database meets a record it cannot decode
//! and refuses it, instead of opening it as a node that never voted (it
//! could vote twice in a term) or with a state that is not the one
//! applied. A new database takes the same path with nothing to move, so
//! it carries the fences too.
//!
//! `raft.meta` exists exactly when the layout is complete, so a crash at
//! any point leaves a database whose next open resumes the upgrade where
//! its last commit left it (the commits are one sequence in the log: a
//! crash keeps a prefix of them). Once the layout is complete, each open drops the data
//! tables of generations not applied and the chunk tables of snapshots not
//! current: what a crash in an install or a snapshot's store left.

// The prefix layout's numbers are big-endian, so that keys sort as they do.
#![allow(clippy::big_endian_bytes)]

use directkv::{Database, ReadTxn, Table, WriteTxn};

use crate::snapshot::Stored;
use crate::state_machine::applied_of;
use crate::store::{durable, from_json, lazy, Tables, DELETE_BATCH_KEYS};
use crate::{keys, DecodeError, Error};

/// The prefix layout's keys and families.
pub(crate) mod old {
    /// The records, each with its key in `raft.meta`.
    pub(crate) const RECORDS: [(&[u8], &[u8]); 5] = [
        (b"v", crate::keys::VOTE),
        (b"c", crate::keys::COMMITTED),
        (b"p", crate::keys::PURGED),
        (b"a", crate::keys::APPLIED),
        (b"s", crate::keys::SNAPSHOT),
    ];
    /// The applied state's key.
    pub(crate) const APPLIED: &[u8] = b"a";
    /// The snapshot record's key.
    pub(crate) const SNAPSHOT: &[u8] = b"s";
    /// What each of the five record keys holds from the upgrade's first
    /// transaction on (and on a database made with tables): not JSON (its
    /// first byte is not valid UTF-8), so that a build of the prefix
    /// layout, which reads these records at open or before it votes,
    /// refuses the database instead of taking it for a new node with no
    /// vote, or serving a state it does not hold.
    pub(crate) const FENCE: &[u8] =
        b"\xffdirectkv-raft: the records are in table raft.meta; a build of the prefix layout cannot read them";
    /// Log entries: `l` index (u64 big-endian).
    pub(crate) const LOG: u8 = b'l';
    /// Data: `d` generation (u64 big-endian) user-key.
    pub(crate) const DATA: u8 = b'd';
    /// Snapshot chunks: `t` sequence (u64 big-endian) chunk (u32 big-endian).
    pub(crate) const CHUNK: u8 = b't';
    /// The families, in the order the upgrade moves them.
    pub(crate) const FAMILIES: [u8; 3] = [LOG, DATA, CHUNK];
}

/// Where the upgrade puts what it moves.
struct Targets {
    log: Table,
    data: Table,
    generation: u64,
    snap: Option<(u64, Table)>,
}

/// What one step of the upgrade did.
struct Step {
    /// Keys of the family are left after this step's.
    more: bool,
    /// A key of the family that does not parse (nothing was moved).
    bad: Option<Vec<u8>>,
}

/// Opens the crate's tables in `db`, upgrading the prefix layout and
/// dropping what a crash left, in transactions of about `batch_bytes`.
///
/// # Errors
/// Database errors; [`Error::Decode`] for a damaged record or key;
/// `TableNotFound` when a table the records name is missing.
pub(crate) fn open_tables(db: &Database, batch_bytes: usize) -> Result<Tables, Error> {
    let complete = upgrade(db, batch_bytes, u64::MAX)?;
    assert!(complete, "an upgrade without a step limit completes");
    let r = db.begin_read()?;
    let meta = r.open_table(keys::META)?;
    let log = r.open_table(keys::LOG)?;
    let applied = applied_of(r.table(&meta).get(keys::APPLIED)?)?;
    let stored: Option<Stored> = from_json(r.table(&meta).get(keys::SNAPSHOT)?, "snapshot record")?;
    drop(r);
    let (generation, seq) = (applied.generation, stored.map(|s| s.seq));
    let (data, snap) = db.transaction(&lazy(), |w| {
        for t in w.list_tables()? {
            let stale_data = keys::data_generation(&t.name).is_some_and(|g| g != generation);
            let stale_snap = keys::snap_seq(&t.name).is_some_and(|s| Some(s) != seq);
            if stale_data || stale_snap {
                w.drop_table(&t.name)?;
            }
        }
        let data = w.open_table(&keys::data_table(generation))?;
        let snap = match seq {
            Some(s) => Some((s, w.open_table(&keys::snap_table(s))?)),
            None => None,
        };
        Ok((data, snap))
    })?;
    Ok(Tables {
        meta,
        log,
        data: (generation, data),
        snap,
    })
}

/// Moves the prefix layout into tables (or makes them on a new database),
/// at most `steps_max` steps of moving keys; returns whether the layout is
/// complete (`raft.meta` exists).
///
/// # Errors
/// As [`open_tables`].
pub(crate) fn upgrade(db: &Database, batch_bytes: usize, steps_max: u64) -> Result<bool, Error> {
    let r = db.begin_read()?;
    match r.open_table(keys::META) {
        Ok(_) => return Ok(true),
        Err(directkv::Error::TableNotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let (applied, snapshot) = records_of(&r)?;
    drop(r);
    let generation = applied_of(applied.clone())?.generation;
    let stored: Option<Stored> = from_json(snapshot, "snapshot record")?;
    let seq = stored.map(|s| s.seq);
    let targets = db.transaction(&lazy(), |w| {
        match w.open_table(keys::UPGRADE) {
            Ok(_) => {}
            Err(directkv::Error::TableNotFound { .. }) => {
                let moved = fence(w)?;
                assert!(
                    moved == applied,
                    "the applied state moved is the one the upgrade decoded"
                );
            }
            Err(e) => return Err(e),
        }
        Ok(Targets {
            log: create_or_open(w, keys::LOG)?,
            data: create_or_open(w, &keys::data_table(generation))?,
            generation,
            snap: match seq {
                Some(s) => Some((s, create_or_open(w, &keys::snap_table(s))?)),
                None => None,
            },
        })
    })?;
    let mut steps = 0u64;
    for family in old::FAMILIES {
        loop {
            if steps >= steps_max {
                return Ok(false);
            }
            steps += 1;
            let step = db.transaction(&lazy(), |w| move_batch(w, family, &targets, batch_bytes))?;
            if let Some(key) = step.bad {
                return Err(Error::Decode(DecodeError {
                    what: "key of the prefix layout",
                    why: format!("{key:?} does not parse"),
                }));
            }
            if !step.more {
                break;
            }
        }
    }
    db.transaction(&durable(), finish)?;
    Ok(true)
}

/// The bytes of the applied state and the snapshot record, as `r` sees
/// them: in `raft.upgrade` once the upgrade's first transaction committed,
/// else in the default keyspace.
#[allow(clippy::type_complexity)]
fn records_of(r: &ReadTxn<'_>) -> directkv::Result<(Option<Vec<u8>>, Option<Vec<u8>>)> {
    match r.open_table(keys::UPGRADE) {
        Ok(t) => Ok((
            r.table(&t).get(keys::APPLIED)?,
            r.table(&t).get(keys::SNAPSHOT)?,
        )),
        Err(directkv::Error::TableNotFound { .. }) => {
            Ok((r.get(old::APPLIED)?, r.get(old::SNAPSHOT)?))
        }
        Err(e) => Err(e),
    }
}

/// In the upgrade's first transaction: creates `raft.upgrade`, copies the
/// five records into it and puts [`old::FENCE`] in their place (under
/// each of the five keys, whether it held a record or not). Returns the
/// applied state's bytes copied.
fn fence(w: &mut WriteTxn<'_>) -> directkv::Result<Option<Vec<u8>>> {
    let records = w.create_table(keys::UPGRADE)?;
    let mut applied = None;
    for (from, to) in old::RECORDS {
        let v = w.get(from)?;
        if let Some(v) = &v {
            w.table(&records).put(to, v)?;
        }
        if from == old::APPLIED {
            applied = v;
        }
        w.put(from, old::FENCE)?;
    }
    let fenced = w.get(old::APPLIED)?;
    assert!(
        fenced.as_deref() == Some(old::FENCE),
        "the records are fenced in the transaction that moves them"
    );
    Ok(applied)
}

/// The table `name`, created if there is none.
fn create_or_open(w: &mut WriteTxn<'_>, name: &str) -> directkv::Result<Table> {
    match w.open_table(name) {
        Err(directkv::Error::TableNotFound { .. }) => w.create_table(name),
        r => r,
    }
}

/// Moves the first keys of `family` into their tables, in `w`.
fn move_batch(
    w: &mut WriteTxn<'_>,
    family: u8,
    to: &Targets,
    batch_bytes: usize,
) -> directkv::Result<Step> {
    let (lo, hi) = ([family], [family + 1]);
    let mut batch = Vec::new();
    let mut bytes = 0usize;
    let mut it = w.range(&lo[..]..&hi[..]);
    while batch.len() < DELETE_BATCH_KEYS && bytes < batch_bytes {
        let Some(kv) = it.next() else { break };
        let (k, v) = kv?;
        bytes += k.len() + v.len();
        batch.push((k, v));
    }
    let more = it.next().transpose()?.is_some();
    drop(it);
    let placed: Vec<_> = batch.iter().map(|(k, _)| place(k, to)).collect();
    if let Some(i) = placed.iter().position(Option::is_none) {
        let bad = Some(batch.swap_remove(i).0);
        return Ok(Step { more, bad });
    }
    assert!(
        batch.len() <= DELETE_BATCH_KEYS,
        "a step is bounded in keys"
    );
    // A step stops at a bound (keys or bytes) or at the family's end: one
    // that stops short of both bounds leaves nothing of the family (one
    // that reaches a bound may or may not).
    assert!(
        !more || batch.len() == DELETE_BATCH_KEYS || bytes >= batch_bytes,
        "a step that stops short of its bounds stops at the family's end"
    );
    for ((k, v), dest) in batch.iter().zip(placed) {
        if let Some(Some((table, key))) = dest {
            w.table(table).put(key, v)?;
        }
        w.delete(k)?;
    }
    Ok(Step { more, bad: None })
}

/// Where the prefix-layout key `k` goes: `Some(Some((table, key)))`,
/// `Some(None)` for a key that is only deleted (of another generation or
/// snapshot), `None` for one that does not parse.
#[allow(clippy::type_complexity)]
fn place<'k, 't>(k: &'k [u8], to: &'t Targets) -> Option<Option<(&'t Table, &'k [u8])>> {
    let (&family, rest) = k.split_first()?;
    let number = |b: &[u8]| {
        b.get(..8)
            .map(|n| u64::from_be_bytes(n.try_into().expect("8")))
    };
    match family {
        old::LOG if rest.len() == 8 => Some(Some((&to.log, rest))),
        old::DATA => {
            let g = number(rest)?;
            Some((g == to.generation).then_some((&to.data, &rest[8..])))
        }
        old::CHUNK if rest.len() == 12 => {
            let seq = number(rest)?;
            Some(match &to.snap {
                Some((s, table)) if *s == seq => Some((table, &rest[8..])),
                _ => None,
            })
        }
        _ => None,
    }
}

/// The upgrade's last step: `raft.meta`, with the records moved into it
/// from `raft.upgrade`, which is dropped; the fences stay.
fn finish(w: &mut WriteTxn<'_>) -> directkv::Result<()> {
    for family in old::FAMILIES {
        let (lo, hi) = ([family], [family + 1]);
        let left = w.range(&lo[..]..&hi[..]).next().transpose()?;
        assert!(
            left.is_none(),
            "every family is moved before the layout is complete"
        );
    }
    let meta = w.create_table(keys::META)?;
    let records = w.open_table(keys::UPGRADE)?;
    for (_, key) in old::RECORDS {
        if let Some(v) = w.table(&records).get(key)? {
            w.table(&meta).put(key, &v)?;
        }
    }
    w.drop_table(keys::UPGRADE)?;
    Ok(())
}

#[cfg(test)]
mod tests;
