//! The replicated key-value state machine.
//!
//! User data lives in the table of a **generation** (`raft.data.`g).
//! Applying a batch of entries is one transaction that changes the data
//! and the applied state (`applied` in `raft.meta`: last applied log id,
//! membership, generation) together. Installing a snapshot writes its
//! pairs into the next generation's table, which nothing reads, then flips
//! the applied state and the snapshot record and drops the old
//! generation's table in one durable commit (the engine frees its pages
//! afterwards, in bounded steps). Opening drops the table of any other
//! generation: what a crash in the middle of an install left.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftSnapshotBuilder,
    Snapshot, StorageError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use tokio::io::AsyncWriteExt;

use crate::chunks::SnapshotBytes;
use crate::snapshot::{self, read_chunk, write_chunk, Meta, Stored, Summary, Writes, CHUNK_BYTES};
use crate::store::{
    blocking, durable, from_json, lazy, put_json, read, read_some, runs, storage_error, ChunkPin,
    Db,
};
use crate::{keys, Entry, Error, NodeId, Request, Response, TypeConfig};

/// Snapshot builds beside the writes before one with the writes held back.
const BUILD_ATTEMPTS: usize = 4;

/// The applied state, stored under `applied` in `raft.meta`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Applied {
    /// The last entry applied.
    pub(crate) last: Option<LogId<NodeId>>,
    /// The last membership applied.
    pub(crate) membership: StoredMembership<NodeId, BasicNode>,
    /// The generation user data lives under.
    pub(crate) generation: u64,
}

pub(crate) fn applied_in(db: &Db, r: &directkv::ReadTxn<'_>) -> Result<Applied, Error> {
    applied_of(r.table(&db.meta).get(keys::APPLIED)?)
}

/// The applied state stored as `bytes` (the default when there is none).
pub(crate) fn applied_of(bytes: Option<Vec<u8>>) -> Result<Applied, Error> {
    Ok(from_json(bytes, "applied state")?.unwrap_or_default())
}

/// What the state machine and its snapshot builders share.
struct Shared {
    db: Db,
    /// Held while a snapshot is stored (its record flipped, the chunks of
    /// others deleted) and while a sequence number is handed out and
    /// pinned.
    store_lock: Mutex<()>,
    /// The sequence number of the next snapshot stored.
    next_seq: AtomicU64,
}

impl Shared {
    fn lock(&self) -> Result<MutexGuard<'_, ()>, Error> {
        self.store_lock.lock().map_err(|_| {
            Error::Stopped("an earlier snapshot store panicked; reopen the database".into())
        })
    }

    /// A new sequence number for a snapshot's chunks, pinned, and its
    /// chunk table, created: no cleanup drops it while the pin lives.
    /// Taken under the store lock, so that no cleanup running decides on
    /// the chunks to keep without it.
    fn begin_chunks(&self) -> Result<ChunkPin, Error> {
        let _held = self.lock()?;
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let pin = self.db.pin(seq);
        snapshot::create_chunks(&self.db, seq)?;
        Ok(pin)
    }

    /// Makes `stored` (its chunks written) the current snapshot and drops
    /// the chunk tables of every other snapshot not in use, in one durable
    /// commit; for an install, `applied` and the drop of the data table of
    /// the generation it replaces go in the same commit. A built snapshot
    /// older than the current one is not stored. Returns whether it was.
    fn store(&self, stored: &Stored, applied: Option<(&Applied, u64)>) -> Result<bool, Error> {
        let _held = self.lock()?;
        let db = &self.db;
        let current = read(db, |r| snapshot::record(db, r))?;
        if applied.is_none()
            && current
                .as_ref()
                .is_some_and(|c| c.meta.last_log_id > stored.meta.last_log_id)
        {
            return Ok(false);
        }
        assert!(
            current.as_ref().is_none_or(|c| c.seq != stored.seq),
            "a snapshot's chunks are made current once"
        );
        assert!(
            stored.seq < self.next_seq.load(Ordering::Relaxed),
            "a stored snapshot's sequence number was handed out"
        );
        // Pins are taken under the store lock: none is added meanwhile.
        let mut keep = db.pinned();
        keep.push(stored.seq);
        let dropped = db.write(&durable(), |w| {
            put_json(w, &db.meta, keys::SNAPSHOT, stored)?;
            if let Some((a, old)) = applied {
                assert!(old < a.generation, "an install moves to a new generation");
                put_json(w, &db.meta, keys::APPLIED, a)?;
                w.drop_table(&keys::data_table(old))?;
            }
            snapshot::drop_chunks_but(w, &keep)
        })?;
        db.forget_snap_tables(&dropped);
        Ok(true)
    }

    /// A copy, in this database under a new sequence number, of `data`
    /// (another database's snapshot, or one of this database's not
    /// received for installing), a chunk at a time.
    fn copy_in(&self, data: &SnapshotBytes) -> Result<SnapshotBytes, Error> {
        let pin = self.begin_chunks()?;
        let from = data.pin();
        let chunks = data.len().div_ceil(CHUNK_BYTES as u64);
        for n in 0..chunks {
            let n = u32::try_from(n).map_err(|_| Error::Snapshot("too many chunks".into()))?;
            let bytes = read_chunk(&from.db, from.seq, n)?;
            write_chunk(&self.db, Writes::Beside, pin.seq, n, &bytes)?;
        }
        assert!(
            !Arc::ptr_eq(&from.db, &self.db) || pin.seq != from.seq,
            "a copy has chunks of its own"
        );
        Ok(SnapshotBytes::stored(pin, data.len()))
    }
}

/// The state-machine half of a node's storage.
pub struct StateMachine {
    applied: Applied,
    shared: Arc<Shared>,
}

impl StateMachine {
    /// The state machine over `db` (whose open dropped what a crash left
    /// of an install or of a snapshot being stored).
    pub(crate) fn load(db: Db) -> Result<Self, Error> {
        let (applied, stored) = read(&db, |r| {
            Ok((applied_in(&db, r)?, snapshot::record(&db, r)?))
        })?;
        assert_eq!(
            db.data_table().0,
            applied.generation,
            "the data table opened is the applied generation's"
        );
        let next_seq = stored.map_or(0, |s| s.seq + 1);
        Ok(StateMachine {
            applied,
            shared: Arc::new(Shared {
                db,
                store_lock: Mutex::new(()),
                next_seq: AtomicU64::new(next_seq),
            }),
        })
    }

    /// A reader of the applied state, for serving reads (after
    /// `Raft::ensure_linearizable` for linearizable ones).
    pub fn reader(&self) -> KvReader {
        KvReader {
            db: self.shared.db.clone(),
        }
    }

    /// The database this state machine lives in.
    pub fn database(&self) -> &directkv::Database {
        &self.shared.db
    }

    /// Applies `entries` in transactions of about `batch_bytes` each; each
    /// commits its entries' effects with the applied state they reach.
    fn apply_now(
        db: &Db,
        base: &Applied,
        entries: &[Entry],
    ) -> Result<(Vec<Response>, Applied), Error> {
        let mut applied = base.clone();
        let mut out = Vec::with_capacity(entries.len());
        let (generation, data) = db.data_table();
        assert_eq!(
            generation, base.generation,
            "entries apply to the current data"
        );
        for run in runs(entries, db.batch_bytes, entry_bytes) {
            let (responses, next) =
                db.write(&lazy(), |w| apply_run(w, (&db.meta, &data), &applied, run))?;
            out.extend(responses);
            applied = next;
        }
        assert_eq!(out.len(), entries.len(), "one response per entry");
        Ok((out, applied))
    }

    /// Installs `data` under `meta`: its pairs go to the next generation's
    /// table, which nothing reads, in bounded transactions as its chunks
    /// are read; once every check passed, the applied state and the
    /// snapshot record flip and the old generation's table is dropped, in
    /// one durable commit. A refused snapshot's table is dropped again and
    /// nothing changed; a table of the next generation that an earlier
    /// install left (its drop failed) is dropped when the table is made.
    fn install_now(
        shared: &Shared,
        base: &Applied,
        meta: &Meta,
        data: SnapshotBytes,
    ) -> Result<Applied, Error> {
        let data = if data.received_into(&shared.db) {
            data
        } else {
            shared.copy_in(&data)?
        };
        let generation = base.generation + 1;
        let db = &shared.db;
        let name = keys::data_table(generation);
        let table = db.write(&lazy(), |w| create_fresh(w, &name))?;
        let summary = match stage(db, &table, meta, &data) {
            Ok(s) => s,
            Err(e) => {
                // The staging error is the one to report; a table this
                // fails to drop is dropped by the next install or open.
                let _ = db.write(&lazy(), |w| w.drop_table(&name));
                return Err(e);
            }
        };
        let applied = Applied {
            last: meta.last_log_id,
            membership: meta.last_membership.clone(),
            generation,
        };
        let stored = Stored {
            meta: meta.clone(),
            seq: data.pin().seq,
            len: summary.len,
            crc: summary.crc,
        };
        assert_eq!(summary.len, data.len(), "every byte received was checked");
        let flipped = shared.store(&stored, Some((&applied, base.generation)))?;
        assert!(flipped, "an install always stores its snapshot");
        db.set_data_table(generation, table);
        Ok(applied)
    }
}

/// Creates the table `name`, empty, dropping one of that name left by an
/// earlier install that failed.
fn create_fresh(w: &mut directkv::WriteTxn<'_>, name: &str) -> directkv::Result<directkv::Table> {
    match w.drop_table(name) {
        Ok(()) | Err(directkv::Error::TableNotFound { .. }) => {}
        Err(e) => return Err(e),
    }
    w.create_table(name)
}

/// Checks `data` and writes its pairs into `table`, in bounded
/// transactions that do not wait for the log (the install's flip does);
/// its metadata must be `meta`'s before any pair is written.
fn stage(
    db: &Db,
    table: &directkv::Table,
    meta: &Meta,
    data: &SnapshotBytes,
) -> Result<Summary, Error> {
    let seq = data.pin().seq;
    let check_meta = |m: &Meta| {
        if m.last_log_id != meta.last_log_id || m.last_membership != meta.last_membership {
            return Err(Error::Snapshot(format!(
                "its bytes are of {m} but it is installed as {meta}"
            )));
        }
        Ok(())
    };
    // A chunk's worth per transaction: the pairs are held twice until
    // their commit (here and in the transaction).
    let stage_bytes = db.batch_bytes.min(CHUNK_BYTES);
    let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut bytes = 0usize;
    let flush = |batch: &mut Vec<(Vec<u8>, Vec<u8>)>| {
        db.write(&lazy(), |w| {
            let mut t = w.table(table);
            for (k, v) in batch.iter() {
                t.put(k, v)?;
            }
            Ok(())
        })?;
        batch.clear();
        Ok::<(), Error>(())
    };
    let summary = snapshot::parse(
        data.len(),
        CHUNK_BYTES,
        |n| read_chunk(db, seq, n),
        check_meta,
        |k, v| {
            bytes += k.len() + v.len();
            batch.push((k.to_vec(), v.to_vec()));
            if bytes >= stage_bytes {
                flush(&mut batch)?;
                bytes = 0;
            }
            Ok(())
        },
    )?;
    flush(&mut batch)?;
    assert!(batch.is_empty(), "every pair is written");
    Ok(summary)
}

/// About what applying `e` writes.
fn entry_bytes(e: &Entry) -> usize {
    match &e.payload {
        EntryPayload::Normal(req) => req.bytes(),
        EntryPayload::Blank | EntryPayload::Membership(_) => 0,
    }
}

/// Applies `run` in `w` to the data table on top of `base` and records the
/// applied state it reaches in the meta table; returns the responses and
/// that state.
fn apply_run(
    w: &mut directkv::WriteTxn<'_>,
    (meta, data): (&directkv::Table, &directkv::Table),
    base: &Applied,
    run: &[Entry],
) -> directkv::Result<(Vec<Response>, Applied)> {
    let mut next = base.clone();
    let mut out = Vec::with_capacity(run.len());
    for e in run {
        assert!(
            next.last.is_none_or(|l| l.index < e.log_id.index),
            "entries apply in log order, each once: {:?} after {:?}",
            e.log_id,
            next.last
        );
        next.last = Some(e.log_id);
        out.push(match &e.payload {
            EntryPayload::Blank => Response::Nothing,
            EntryPayload::Normal(req) => execute(&mut w.table(data), req)?,
            EntryPayload::Membership(m) => {
                next.membership = StoredMembership::new(Some(e.log_id), m.clone());
                Response::Nothing
            }
        });
    }
    put_json(w, meta, keys::APPLIED, &next)?;
    Ok((out, next))
}

/// Runs one command in `w`, the data table.
fn execute(w: &mut directkv::TableMut<'_, '_>, req: &Request) -> directkv::Result<Response> {
    if let Err(reason) = req.check() {
        return Ok(Response::Rejected { reason });
    }
    let Some(key) = req.key() else {
        let Request::Batch(reqs) = req else {
            unreachable!("only a batch has no key");
        };
        let out = reqs
            .iter()
            .map(|r| execute(w, r))
            .collect::<directkv::Result<Vec<_>>>()?;
        assert_eq!(out.len(), reqs.len(), "one answer per command");
        return Ok(Response::Batch(out));
    };
    let current = w.get(key)?;
    Ok(match req {
        Request::Put { value, .. } => {
            w.put(key, value)?;
            Response::Done { previous: current }
        }
        Request::Delete { .. } => {
            if current.is_some() {
                w.delete(key)?;
            }
            Response::Done { previous: current }
        }
        Request::CompareAndSet { expected, new, .. } if current == *expected => {
            match new {
                Some(v) => w.put(key, v)?,
                None if current.is_some() => w.delete(key)?,
                None => {}
            }
            Response::Done { previous: current }
        }
        Request::CompareAndSet { .. } => Response::Mismatch { current },
        Request::Batch(_) => unreachable!("a batch has no key"),
    })
}

/// Reads the applied state: the values every replica agrees on up to its
/// last applied entry. Each call reads one snapshot of the database.
#[derive(Clone)]
pub struct KvReader {
    db: Db,
}

impl KvReader {
    /// The value of `key`.
    ///
    /// # Errors
    /// Database errors; [`Error::Decode`] for a damaged applied state.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        read(&self.db, |r| {
            let a = applied_in(&self.db, r)?;
            let data = self.db.data_in(r, a.generation)?;
            Ok(r.table(&data).get(key)?)
        })
    }

    /// The last entry applied.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub fn last_applied(&self) -> Result<Option<LogId<NodeId>>, Error> {
        Ok(read(&self.db, |r| applied_in(&self.db, r))?.last)
    }

    /// Every key and value, in key order, with the last entry applied: what
    /// two replicas compare to agree.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    #[allow(clippy::type_complexity)]
    pub fn all(&self) -> Result<(Option<LogId<NodeId>>, Vec<(Vec<u8>, Vec<u8>)>), Error> {
        read(&self.db, |r| Self::all_in(&self.db, r))
    }

    /// How many keys there are and a CRC32C of every key and value in
    /// order (each key's length, the key, the value), with the last entry
    /// applied, read from one snapshot without holding the state: equal on
    /// replicas that applied the same entries.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub fn digest(&self) -> Result<(Option<LogId<NodeId>>, u64, u32), Error> {
        read(&self.db, |r| {
            let a = applied_in(&self.db, r)?;
            let data = self.db.data_in(r, a.generation)?;
            let (mut keys, mut digest) = (0u64, 0u32);
            for kv in r.table(&data).range(..) {
                let (k, v) = kv?;
                for part in [&(k.len() as u64).to_le_bytes()[..], &k, &v] {
                    digest = crc32c::crc32c_append(digest, part);
                }
                keys += 1;
            }
            Ok((a.last, keys, digest))
        })
    }

    #[allow(clippy::type_complexity)]
    fn all_in(
        db: &Db,
        r: &directkv::ReadTxn<'_>,
    ) -> Result<(Option<LogId<NodeId>>, Vec<(Vec<u8>, Vec<u8>)>), Error> {
        let a = applied_in(db, r)?;
        let data = db.data_in(r, a.generation)?;
        let mut out = Vec::new();
        for kv in r.table(&data).range(..) {
            out.push(kv?);
        }
        assert!(
            out.windows(2).all(|w| w[0].0 < w[1].0),
            "user keys come in order"
        );
        Ok((a.last, out))
    }
}

/// Builds a snapshot from one snapshot read while entries keep being
/// applied.
pub struct SnapshotBuilder {
    shared: Arc<Shared>,
}

impl SnapshotBuilder {
    /// Builds a snapshot into chunks of a new sequence number and stores
    /// it as the current one (unless a newer one is).
    fn build_now(&self) -> Result<(Meta, SnapshotBytes), Error> {
        let db = &self.shared.db;
        let mut pin = self.shared.begin_chunks()?;
        // Optimistically beside the writes; if the read keeps being given
        // up (writes outrun the version store during the build), once more
        // with every write of this crate held back.
        let built = match read_some(db, BUILD_ATTEMPTS, |r| {
            self.build_in(r, &pin, Writes::Beside)
        }) {
            Err(Error::Database(e)) if e.is_retryable() => {
                // Under a new sequence: overwriting the chunks the attempts
                // given up left would keep each old chunk as a version while
                // this read lives, and give it up too. The old sequence,
                // unpinned, goes with the next store's cleanup.
                pin = self.shared.begin_chunks()?;
                db.quiesced(|| read_some(db, 1, |r| self.build_in(r, &pin, Writes::Held)))
            }
            r => r,
        };
        let (meta, summary) = built?;
        let chunks = summary.len.div_ceil(CHUNK_BYTES as u64);
        let chunks =
            u32::try_from(chunks).map_err(|_| Error::Snapshot("too many chunks".into()))?;
        // An attempt given up may have written more chunks than this one.
        snapshot::delete_chunks_from(db, pin.seq, chunks)?;
        let stored = Stored {
            meta: meta.clone(),
            seq: pin.seq,
            len: summary.len,
            crc: summary.crc,
        };
        self.shared.store(&stored, None)?;
        Ok((meta, SnapshotBytes::stored(pin, summary.len)))
    }

    /// Streams the state `r` reads into the chunks `pin` names.
    fn build_in(
        &self,
        r: &directkv::ReadTxn<'_>,
        pin: &ChunkPin,
        writes: Writes,
    ) -> Result<(Meta, Summary), Error> {
        let db = &self.shared.db;
        let a = applied_in(db, r)?;
        let data = db.data_in(r, a.generation)?;
        // Unique: two builds at one log id get two ids.
        let n = self.shared.next_seq.fetch_add(1, Ordering::Relaxed);
        let id = match a.last {
            Some(l) => format!("{}-{}-{n}", l.leader_id.term, l.index),
            None => format!("empty-{n}"),
        };
        let meta = Meta {
            last_log_id: a.last,
            last_membership: a.membership,
            snapshot_id: id,
        };
        let mut emit = |n: u32, bytes: &[u8]| write_chunk(db, writes, pin.seq, n, bytes);
        let mut w = snapshot::Writer::new(&meta, CHUNK_BYTES);
        for kv in r.table(&data).range(..) {
            let (k, v) = kv?;
            w.pair(&k, &v, &mut emit)?;
        }
        let summary = w.finish(&mut emit)?;
        assert!(summary.len > 0, "a snapshot has bytes");
        Ok((meta, summary))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let me = SnapshotBuilder {
            shared: self.shared.clone(),
        };
        let (meta, bytes) = blocking(
            self.shared.db.exec,
            ErrorSubject::Snapshot(None),
            ErrorVerb::Write,
            move || me.build_now(),
        )
        .await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(bytes),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        Ok((self.applied.last, self.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let (db, base) = (self.shared.db.clone(), self.applied.clone());
        let (out, next) = blocking(
            self.shared.db.exec,
            ErrorSubject::StateMachine,
            ErrorVerb::Write,
            move || {
                let applied = Self::apply_now(&db, &base, &entries)?;
                crate::log_store::purge_covered(&db)?;
                Ok(applied)
            },
        )
        .await?;
        self.applied = next;
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            shared: self.shared.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<SnapshotBytes>, StorageError<NodeId>> {
        let shared = self.shared.clone();
        let pin = blocking(
            self.shared.db.exec,
            ErrorSubject::Snapshot(None),
            ErrorVerb::Write,
            move || shared.begin_chunks(),
        )
        .await?;
        Ok(Box::new(SnapshotBytes::receiving(pin)))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        mut snapshot: Box<SnapshotBytes>,
    ) -> Result<(), StorageError<NodeId>> {
        let sig = Some(meta.signature());
        // Stores what is still buffered of a snapshot being received.
        snapshot.shutdown().await.map_err(|e| {
            storage_error(ErrorSubject::Snapshot(sig.clone()), ErrorVerb::Write, &e)
        })?;
        let (shared, base, m) = (self.shared.clone(), self.applied.clone(), meta.clone());
        let next = blocking(
            self.shared.db.exec,
            ErrorSubject::Snapshot(sig),
            ErrorVerb::Write,
            move || {
                let applied = Self::install_now(&shared, &base, &m, *snapshot)?;
                crate::log_store::purge_covered(&shared.db)?;
                Ok(applied)
            },
        )
        .await?;
        self.applied = next;
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let shared = self.shared.clone();
        blocking(
            self.shared.db.exec,
            ErrorSubject::Snapshot(None),
            ErrorVerb::Read,
            move || {
                // Held: no store deletes this one's chunks before they are
                // pinned; the pin keeps them while they are read.
                let _held = shared.lock()?;
                let db = &shared.db;
                let Some(stored) = read(db, |r| snapshot::record(db, r))? else {
                    return Ok(None);
                };
                let pin = shared.db.pin(stored.seq);
                Ok(Some(Snapshot {
                    meta: stored.meta,
                    snapshot: Box::new(SnapshotBytes::stored(pin, stored.len)),
                }))
            },
        )
        .await
    }
}
