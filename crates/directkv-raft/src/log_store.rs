//! The Raft log (table `raft.log`), vote, committed and purged log ids
//! (rows of `raft.meta`) in the database.
//!
//! Appends commit durably before openraft hears they are flushed; the vote
//! commits durably before `save_vote` returns. A truncation deletes from
//! the log's end down and a purge from its start up, each in bounded
//! transactions, so a crash part way leaves the log contiguous; a purge
//! records its log id first, in its first transaction, and the next open
//! finishes it. A purge is kept only as far as the applied state reaches
//! (a follower is asked to purge up to a snapshot it is still installing);
//! the rest is shown at once and kept once an apply or the install reaches
//! it.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::MutexGuard;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogReader, StorageError, Vote,
};

use crate::codec::{decode_entry, encode_entry, entry_log_id};
use crate::store::{
    blocking, delete_range, durable, from_json, get_json, lazy, put_json, read, runs, Db,
};
use crate::{keys, Entry, Error, NodeId, TypeConfig};

/// Entries one read transaction reads at most.
const READ_CHUNK_ENTRIES: usize = 256;

/// The log half of a node's storage (and its reader: a clone).
#[derive(Clone)]
pub struct LogStore {
    db: Db,
}

impl LogStore {
    /// The log store over `db`, finishing a purge a crash interrupted.
    pub(crate) fn load(db: Db) -> Result<Self, Error> {
        let purged: Option<LogId<NodeId>> = get_json(&db, keys::PURGED, "purged log id")?;
        if let Some(p) = purged {
            let hi = log_key_after(p.index);
            delete_range(&db, &db.log, &keys::log(0), hi.as_deref(), false, false)?;
        }
        Ok(LogStore { db })
    }

    /// The database this log lives in.
    pub fn database(&self) -> &directkv::Database {
        &self.db
    }

    fn state(&self) -> Result<LogState<TypeConfig>, Error> {
        let pending = *lock_pending(&self.db)?;
        read(&self.db, |r| Self::state_in(&self.db, r, pending))
    }

    /// The log's state, with a purge still `pending` shown as done.
    fn state_in(
        db: &Db,
        r: &directkv::ReadTxn<'_>,
        pending: Option<LogId<NodeId>>,
    ) -> Result<LogState<TypeConfig>, Error> {
        let stored: Option<LogId<NodeId>> =
            from_json(r.table(&db.meta).get(keys::PURGED)?, "purged log id")?;
        let purged = stored.max(pending);
        let first = keys::log(purged.map_or(0, |p| p.index.saturating_add(1)));
        let last = match r.table(&db.log).range(first.as_slice()..).next_back() {
            Some(kv) => {
                let (k, v) = kv?;
                let id = entry_log_id(&v)?;
                check_index(&k, id.index)?;
                Some(id)
            }
            None => None,
        };
        // A log purged to its end keeps its last id in the purge record.
        let last = match (last, purged) {
            (Some(l), Some(p)) if p.index > l.index => Some(p),
            (l, p) => l.or(p),
        };
        assert!(
            purged.is_none() || last >= purged,
            "the log does not end before its purge point"
        );
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    fn entries(&self, lo: Bound<u64>, hi: Bound<u64>) -> Result<Vec<Entry>, Error> {
        // Entries a pending purge still keeps are not the log's any more.
        let lo = match (self.purged_floor()?, lo) {
            (Some(p), Bound::Unbounded) => Bound::Excluded(p),
            (Some(p), Bound::Included(i)) if i <= p => Bound::Excluded(p),
            (Some(p), Bound::Excluded(i)) if i < p => Bound::Excluded(p),
            (_, lo) => lo,
        };
        let lo = match lo {
            Bound::Included(i) => Bound::Included(keys::log(i).to_vec()),
            Bound::Excluded(i) => Bound::Excluded(keys::log(i).to_vec()),
            Bound::Unbounded => Bound::Included(keys::log(0).to_vec()),
        };
        let hi = match hi {
            Bound::Included(i) => Bound::Included(keys::log(i).to_vec()),
            Bound::Excluded(i) => Bound::Excluded(keys::log(i).to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        // Entries do not change once written (a truncation removes them
        // from the end, on a follower, which does not read them), so the
        // range is read in short read transactions, each started where the
        // last stopped: none holds a snapshot long while writes go on.
        let mut out: Vec<Entry> = Vec::new();
        let mut from = lo;
        loop {
            let (chunk, more) = read(&self.db, |r| {
                let range = (as_slice(&from), as_slice(&hi));
                Self::entries_in(&self.db, r, range, self.db.batch_bytes)
            })?;
            if let (Some(prev), Some(first)) = (out.last(), chunk.first()) {
                assert!(
                    prev.log_id.index < first.log_id.index,
                    "chunks follow one another"
                );
            }
            if let Some(last) = chunk.last() {
                from = Bound::Excluded(keys::log(last.log_id.index).to_vec());
            }
            out.extend(chunk);
            if !more {
                return Ok(out);
            }
        }
    }

    /// Up to [`READ_CHUNK_ENTRIES`] entries or about `limit` bytes of
    /// `range`, and whether more follow.
    fn entries_in(
        db: &Db,
        r: &directkv::ReadTxn<'_>,
        range: (Bound<&[u8]>, Bound<&[u8]>),
        limit: usize,
    ) -> Result<(Vec<Entry>, bool), Error> {
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut it = r.table(&db.log).range(range);
        while out.len() < READ_CHUNK_ENTRIES && bytes < limit {
            let Some(kv) = it.next() else {
                return Ok((out, false));
            };
            let (k, v) = kv?;
            bytes += v.len();
            let e = decode_entry(&v)?;
            check_index(&k, e.log_id.index)?;
            out.push(e);
        }
        assert!(
            out.windows(2)
                .all(|w| w[0].log_id.index < w[1].log_id.index),
            "entries read come in index order"
        );
        Ok((out, true))
    }

    /// Writes `entries` in index order, in transactions of at most
    /// `batch_bytes`; only the last waits for the log (and carries the
    /// others). A crash part way keeps a prefix of them: a log that is
    /// still contiguous, and none of them was reported flushed.
    fn append_now(&self, entries: &[Entry]) -> Result<(), Error> {
        let encoded: Vec<_> = entries
            .iter()
            .map(|e| (keys::log(e.log_id.index), encode_entry(e)))
            .collect();
        assert!(
            entries
                .windows(2)
                .all(|w| w[0].log_id.index + 1 == w[1].log_id.index),
            "appended entries are consecutive"
        );
        let mut batches =
            runs(&encoded, self.db.batch_bytes, |(k, v)| k.len() + v.len()).peekable();
        while let Some(batch) = batches.next() {
            let opts = if batches.peek().is_none() {
                durable()
            } else {
                lazy()
            };
            self.db.write(&opts, |w| {
                let mut log = w.table(&self.db.log);
                for (k, v) in batch {
                    log.put(k, v)?;
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Purges up to `upto`: at once as far as the applied state reaches,
    /// the rest once it does ([`purge_covered`]). Either way the log reads
    /// from past `upto` from now on.
    fn purge_now(&self, upto: LogId<NodeId>) -> Result<(), Error> {
        let mut pending = lock_pending(&self.db)?;
        assert!(
            pending.is_none_or(|p| p.index <= upto.index),
            "a purge only moves the log's start forward: {upto} after {pending:?}"
        );
        *pending = Some(upto);
        purge_pending(&self.db, &mut pending)
    }

    /// The index up to which the log is purged, durably or pending.
    fn purged_floor(&self) -> Result<Option<u64>, Error> {
        let stored: Option<LogId<NodeId>> = get_json(&self.db, keys::PURGED, "purged log id")?;
        let pending = *lock_pending(&self.db)?;
        Ok(stored.max(pending).map(|p| p.index))
    }
}

fn lock_pending(db: &Db) -> Result<MutexGuard<'_, Option<LogId<NodeId>>>, Error> {
    db.purge_pending
        .lock()
        .map_err(|_| Error::Stopped("a purge panicked; reopen the database".into()))
}

/// Does the part of a pending purge that the applied state now covers
/// (called after every apply and install).
///
/// # Errors
/// Database errors.
pub(crate) fn purge_covered(db: &Db) -> Result<(), Error> {
    purge_pending(db, &mut *lock_pending(db)?)
}

/// Purges durably up to the pending purge point or the last applied entry,
/// whichever is lower, and clears the pending point once it is reached.
///
/// A purged entry must be one the applied state holds whenever the purge
/// is kept: a follower installing a snapshot is asked to purge up to it
/// before the install's commit, and a crash that kept the purge but not
/// the install would leave entries neither the log nor the state machine
/// has. The applied state read here is committed before the purge's
/// commits, and a crash keeps a prefix of the commits, so it does.
fn purge_pending(db: &Db, pending: &mut Option<LogId<NodeId>>) -> Result<(), Error> {
    let Some(want) = *pending else {
        return Ok(());
    };
    let applied = read(db, |r| crate::state_machine::applied_in(db, r))?.last;
    let reach = match applied {
        Some(a) if a.index >= want.index => want,
        Some(a) => a,
        None => return Ok(()),
    };
    assert!(reach.index <= want.index, "a purge stops at what was asked");
    // The record first: a crash after it leaves entries the next open
    // deletes, never a log whose start is unknown.
    let before: Option<LogId<NodeId>> = get_json(db, keys::PURGED, "purged log id")?;
    if before.is_none_or(|b| b.index < reach.index) {
        db.write(&lazy(), |w| put_json(w, &db.meta, keys::PURGED, &reach))?;
        let hi = log_key_after(reach.index);
        delete_range(db, &db.log, &keys::log(0), hi.as_deref(), false, false)?;
    }
    if reach == want {
        *pending = None;
    }
    Ok(())
}

/// Refuses an entry stored under another index's key (a damaged record).
fn check_index(key: &[u8], index: u64) -> Result<(), Error> {
    match keys::log_index(key) {
        Some(i) if i == index => Ok(()),
        other => Err(Error::Decode(crate::DecodeError {
            what: "log entry",
            why: format!("entry {index} stored under key {other:?}"),
        })),
    }
}

/// The first log key past index `i`; `None` past the last index there is.
fn log_key_after(i: u64) -> Option<Vec<u8>> {
    i.checked_add(1).map(|next| keys::log(next).to_vec())
}

fn as_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    /// The first entries of `start..end`, about the store's batch bytes of
    /// them (at least one): what replication reads, and holds, for one
    /// append RPC stays bounded whatever the entries' sizes.
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        let me = self.clone();
        blocking(
            self.db.exec,
            ErrorSubject::Logs,
            ErrorVerb::Read,
            move || {
                let (lo, hi) = (keys::log(start).to_vec(), keys::log(end).to_vec());
                let (chunk, _more) = read(&me.db, |r| {
                    Self::entries_in(
                        &me.db,
                        r,
                        (Bound::Included(&lo[..]), Bound::Excluded(&hi[..])),
                        me.db.batch_bytes,
                    )
                })?;
                Ok(chunk)
            },
        )
        .await
    }

    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        let me = self.clone();
        let (lo, hi) = (range.start_bound().cloned(), range.end_bound().cloned());
        blocking(
            self.db.exec,
            ErrorSubject::Logs,
            ErrorVerb::Read,
            move || me.entries(lo, hi),
        )
        .await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let me = self.clone();
        blocking(
            self.db.exec,
            ErrorSubject::Logs,
            ErrorVerb::Read,
            move || me.state(),
        )
        .await
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let (db, vote) = (self.db.clone(), *vote);
        blocking(
            self.db.exec,
            ErrorSubject::Vote,
            ErrorVerb::Write,
            move || db.write(&durable(), |w| put_json(w, &db.meta, keys::VOTE, &vote)),
        )
        .await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        let db = self.db.clone();
        blocking(
            self.db.exec,
            ErrorSubject::Vote,
            ErrorVerb::Read,
            move || get_json(&db, keys::VOTE, "vote"),
        )
        .await
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        let db = self.db.clone();
        // Lost in a crash, it only means re-applying from an older id: the
        // state machine's applied id is what counts.
        blocking(
            self.db.exec,
            ErrorSubject::Store,
            ErrorVerb::Write,
            move || {
                db.write(&lazy(), |w| {
                    put_json(w, &db.meta, keys::COMMITTED, &committed)
                })
            },
        )
        .await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        let db = self.db.clone();
        blocking(
            self.db.exec,
            ErrorSubject::Store,
            ErrorVerb::Read,
            move || {
                let c: Option<Option<LogId<NodeId>>> =
                    get_json(&db, keys::COMMITTED, "committed log id")?;
                Ok(c.flatten())
            },
        )
        .await
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let me = self.clone();
        let r = blocking(
            self.db.exec,
            ErrorSubject::Logs,
            ErrorVerb::Write,
            move || me.append_now(&entries),
        )
        .await;
        match &r {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        r
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let db = self.db.clone();
        blocking(
            self.db.exec,
            ErrorSubject::Logs,
            ErrorVerb::Delete,
            move || {
                let lo = keys::log(log_id.index);
                delete_range(&db, &db.log, &lo, None, true, true)?;
                Ok(())
            },
        )
        .await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let me = self.clone();
        blocking(
            self.db.exec,
            ErrorSubject::Logs,
            ErrorVerb::Delete,
            move || me.purge_now(log_id),
        )
        .await
    }
}
