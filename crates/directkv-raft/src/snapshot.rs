//! A snapshot's bytes, written and checked a chunk at a time, and the
//! snapshots kept in the database.
//!
//! The bytes are `magic (8) | version (4) | meta length (4) | meta (JSON) |
//! pair count (8) | pairs | CRC32C (4)`, each pair `key length (4) | key |
//! value length (4) | value`, little-endian; the CRC covers everything
//! before it. openraft moves them between nodes in chunks; the receiver
//! checks the metadata before it writes a pair, and the CRC, the count and
//! the length before the install takes effect.
//!
//! A snapshot is stored as chunks of [`CHUNK_BYTES`] in a table of its
//! own, named by its sequence number (`raft.snap.`seq, keyed by chunk
//! number), and the current one is named by a record (`snapshot` in
//! `raft.meta`: the sequence, the metadata, the length and the CRC).
//! Invariants:
//!
//! - neither side holds more than a chunk of a snapshot and one pair: the
//!   [`Writer`] emits each chunk as it fills (chunk 0, which holds the
//!   count, last), and [`parse`] pulls one chunk at a time;
//! - every chunk but the last is [`CHUNK_BYTES`] long, the last is the
//!   rest: a chunk of another length is damage;
//! - no key is over [`KEY_MAX`] and no value over [`VALUE_MAX`] (the state
//!   machine never stores one), so a damaged length never allocates more;
//! - the chunk table of a sequence neither current nor pinned (being read
//!   or received, see [`crate::store::ChunkPin`]) is garbage: each store of
//!   a snapshot drops it in the commit that flips the record, and each open
//!   drops what a crash left.

use openraft::{BasicNode, SnapshotMeta};
use serde::{Deserialize, Serialize};

use crate::codec::put_bytes;
use crate::store::{delete_range_by, from_json, lazy, Db};
use crate::{keys, Error, NodeId, KEY_MAX, VALUE_MAX};

const MAGIC: &[u8; 8] = b"DKVRSNAP";
const VERSION: u32 = 1;

/// Bytes per stored chunk.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// The longest metadata accepted (a membership of a few thousand nodes):
/// the header, with the count, fits in chunk 0.
const META_MAX: usize = CHUNK_BYTES / 2;

/// The bytes around the pairs: magic, version, meta length, count, CRC.
const FRAME_BYTES: u64 = 8 + 4 + 4 + 8 + 4;

// A pair of the largest key and value fits in a chunk's reach: a reader
// holds at most a chunk and a pair.
const _: () = assert!(KEY_MAX + VALUE_MAX + 8 <= 2 * CHUNK_BYTES);

/// A snapshot's metadata as openraft defines it.
pub(crate) type Meta = SnapshotMeta<NodeId, BasicNode>;

/// Builds a snapshot's bytes pair by pair and hands each full chunk to an
/// `emit(chunk number, bytes)` callback.
pub(crate) struct Writer {
    chunk_bytes: usize,
    /// Chunk 0 once full: it holds the count, so it goes last.
    first: Option<Vec<u8>>,
    /// The bytes of chunk `next`, not yet emitted.
    cur: Vec<u8>,
    next: u32,
    count_at: usize,
    count: u64,
    /// The CRC and length of the chunks emitted (all after chunk 0).
    crc_rest: u32,
    len_rest: u64,
}

/// What [`Writer::finish`] and [`parse`] learn of a snapshot's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) len: u64,
    pub(crate) crc: u32,
    pub(crate) count: u64,
}

impl Writer {
    pub(crate) fn new(meta: &Meta, chunk_bytes: usize) -> Self {
        let json = serde_json::to_vec(meta).expect("snapshot metadata serializes");
        assert!(
            json.len() <= META_MAX,
            "a membership of {} bytes",
            json.len()
        );
        assert!(
            json.len() + 24 <= chunk_bytes,
            "the header, count included, fits in chunk 0"
        );
        let mut cur = Vec::with_capacity(chunk_bytes.min(64 + json.len()));
        cur.extend_from_slice(MAGIC);
        cur.extend_from_slice(&VERSION.to_le_bytes());
        put_bytes(&mut cur, &json);
        let count_at = cur.len();
        cur.extend_from_slice(&0u64.to_le_bytes());
        Writer {
            chunk_bytes,
            first: None,
            cur,
            next: 0,
            count_at,
            count: 0,
            crc_rest: 0,
            len_rest: 0,
        }
    }

    pub(crate) fn pair(
        &mut self,
        key: &[u8],
        value: &[u8],
        emit: &mut impl FnMut(u32, &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        assert!(key.len() <= KEY_MAX, "the state holds no key over KEY_MAX");
        assert!(value.len() <= VALUE_MAX, "nor a value over VALUE_MAX");
        put_bytes(&mut self.cur, key);
        put_bytes(&mut self.cur, value);
        self.count += 1;
        self.spill(emit)
    }

    /// Emits every full chunk in `cur`.
    fn spill(
        &mut self,
        emit: &mut impl FnMut(u32, &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        while self.cur.len() >= self.chunk_bytes {
            let rest = self.cur.split_off(self.chunk_bytes);
            let full = std::mem::replace(&mut self.cur, rest);
            assert_eq!(full.len(), self.chunk_bytes, "a spilled chunk is full");
            if self.next == 0 {
                self.first = Some(full);
            } else {
                self.crc_rest = crc32c::crc32c_append(self.crc_rest, &full);
                self.len_rest += full.len() as u64;
                emit(self.next, &full)?;
            }
            self.next += 1;
        }
        Ok(())
    }

    /// Writes the count and the CRC, emits the chunks left (chunk 0 last).
    pub(crate) fn finish(
        mut self,
        emit: &mut impl FnMut(u32, &[u8]) -> Result<(), Error>,
    ) -> Result<Summary, Error> {
        let count = self.count.to_le_bytes();
        let head = self.first.as_mut().unwrap_or(&mut self.cur);
        head[self.count_at..self.count_at + 8].copy_from_slice(&count);
        let (crc, len) = match &self.first {
            None => (crc32c::crc32c(&self.cur), self.cur.len() as u64),
            Some(first) => {
                let tail = self.len_rest + self.cur.len() as u64;
                let rest = crc32c::crc32c_append(self.crc_rest, &self.cur);
                let len_tail = usize::try_from(tail).expect("a snapshot fits the address space");
                let crc = crc32c::crc32c_combine(crc32c::crc32c(first), rest, len_tail);
                (crc, first.len() as u64 + tail)
            }
        };
        self.cur.extend_from_slice(&crc.to_le_bytes());
        self.spill(emit)?;
        if !self.cur.is_empty() || self.next == 0 {
            let last = std::mem::take(&mut self.cur);
            emit(self.next, &last)?;
            self.next += 1;
        }
        if let Some(first) = self.first.take() {
            emit(0, &first)?;
        }
        let summary = Summary {
            len: len + 4,
            crc,
            count: self.count,
        };
        assert_eq!(
            u64::from(self.next),
            summary.len.div_ceil(self.chunk_bytes as u64),
            "every chunk of the length is emitted"
        );
        assert!(summary.len >= FRAME_BYTES, "a snapshot has its frame");
        Ok(summary)
    }
}

/// Pulls a snapshot's bytes a chunk at a time from `fetch(chunk number)`,
/// checking each chunk's length, and keeps the CRC of what it consumed.
struct Source<F> {
    fetch: F,
    len: u64,
    chunk_bytes: usize,
    buf: Vec<u8>,
    at: usize,
    next: u32,
    consumed: u64,
    crc: u32,
}

impl<F: FnMut(u32) -> Result<Vec<u8>, Error>> Source<F> {
    fn fill(&mut self) -> Result<(), Error> {
        let start = u64::from(self.next) * self.chunk_bytes as u64;
        assert!(
            start < self.len,
            "a chunk is fetched only while bytes are left"
        );
        let expected = (self.len - start).min(self.chunk_bytes as u64);
        let chunk = (self.fetch)(self.next)?;
        if chunk.len() as u64 != expected {
            return Err(Error::Snapshot(format!(
                "chunk {} is {} bytes, expected {expected}",
                self.next,
                chunk.len()
            )));
        }
        self.buf = chunk;
        self.at = 0;
        self.next += 1;
        Ok(())
    }

    /// Replaces `out` with the next `n` bytes.
    fn take(&mut self, n: usize, out: &mut Vec<u8>, what: &str) -> Result<(), Error> {
        if n as u64 > self.len - self.consumed {
            return Err(Error::Snapshot(format!(
                "{what}: {n} bytes needed, {} left",
                self.len - self.consumed
            )));
        }
        out.clear();
        while out.len() < n {
            if self.at == self.buf.len() {
                self.fill()?;
            }
            let k = (n - out.len()).min(self.buf.len() - self.at);
            let piece = &self.buf[self.at..self.at + k];
            self.crc = crc32c::crc32c_append(self.crc, piece);
            out.extend_from_slice(piece);
            self.at += k;
        }
        self.consumed += n as u64;
        assert!(self.consumed <= self.len, "nothing is read past the end");
        Ok(())
    }

    fn u32(&mut self, scratch: &mut Vec<u8>, what: &str) -> Result<u32, Error> {
        self.take(4, scratch, what)?;
        Ok(u32::from_le_bytes(
            scratch[..].try_into().expect("four bytes taken"),
        ))
    }

    fn u64(&mut self, scratch: &mut Vec<u8>, what: &str) -> Result<u64, Error> {
        self.take(8, scratch, what)?;
        Ok(u64::from_le_bytes(
            scratch[..].try_into().expect("eight bytes taken"),
        ))
    }

    /// `len (4) | bytes` into `out`, refused when over `max`.
    fn bytes(&mut self, out: &mut Vec<u8>, max: usize, what: &str) -> Result<(), Error> {
        let n = self.u32(out, what)? as usize;
        if n > max {
            return Err(Error::Snapshot(format!("{what} of {n} bytes, over {max}")));
        }
        self.take(n, out, what)
    }
}

/// Checks a snapshot of `len` bytes pulled from `fetch` in chunks of
/// `chunk_bytes`: `check_meta` sees its metadata before any pair goes to
/// `on_pair`; the count, the length and the CRC are checked after the last.
///
/// # Errors
/// [`Error::Snapshot`] for a wrong magic, version, length, chunk, count or
/// CRC; whatever `fetch`, `check_meta` or `on_pair` return.
pub(crate) fn parse(
    len: u64,
    chunk_bytes: usize,
    fetch: impl FnMut(u32) -> Result<Vec<u8>, Error>,
    check_meta: impl FnOnce(&Meta) -> Result<(), Error>,
    mut on_pair: impl FnMut(&[u8], &[u8]) -> Result<(), Error>,
) -> Result<Summary, Error> {
    let bad = |why: String| Error::Snapshot(why);
    if len < FRAME_BYTES {
        return Err(bad(format!("{len} bytes is too short")));
    }
    let mut src = Source {
        fetch,
        len,
        chunk_bytes,
        buf: Vec::new(),
        at: 0,
        next: 0,
        consumed: 0,
        crc: 0,
    };
    let (mut key, mut value) = (Vec::new(), Vec::new());
    src.take(MAGIC.len(), &mut key, "magic")?;
    if key != MAGIC {
        return Err(bad("not a directkv-raft snapshot".into()));
    }
    let version = src.u32(&mut key, "version")?;
    if version != VERSION {
        return Err(bad(format!("version {version}, expected {VERSION}")));
    }
    src.bytes(&mut value, META_MAX, "metadata")?;
    let meta: Meta = serde_json::from_slice(&value).map_err(|e| bad(format!("metadata: {e}")))?;
    check_meta(&meta)?;
    let count = src.u64(&mut key, "count")?;
    for _ in 0..count {
        src.bytes(&mut key, KEY_MAX, "key")?;
        src.bytes(&mut value, VALUE_MAX, "value")?;
        on_pair(&key, &value)?;
    }
    let crc = src.crc;
    let left = src.len - src.consumed;
    if left != 4 {
        return Err(bad(format!(
            "{count} pairs leave {left} bytes, not the CRC's 4"
        )));
    }
    let stored = src.u32(&mut key, "CRC")?;
    if crc != stored {
        return Err(bad(format!("CRC32C {crc:#010x}, expected {stored:#010x}")));
    }
    assert_eq!(src.consumed, len, "every byte is read once");
    Ok(Summary { len, crc, count })
}

/// The record of the stored current snapshot.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Stored {
    pub(crate) meta: Meta,
    /// The sequence number its chunks are stored under.
    pub(crate) seq: u64,
    /// Its length in bytes.
    pub(crate) len: u64,
    /// The CRC32C of all its bytes.
    pub(crate) crc: u32,
}

/// The stored current snapshot's record, if there is one.
pub(crate) fn record(db: &Db, r: &directkv::ReadTxn<'_>) -> Result<Option<Stored>, Error> {
    from_json(r.table(&db.meta).get(keys::SNAPSHOT)?, "snapshot record")
}

/// Chunk `n` of snapshot `seq`, in a read transaction of its own.
///
/// # Errors
/// [`Error::Snapshot`] when it is missing.
pub(crate) fn read_chunk(db: &Db, seq: u64, n: u32) -> Result<Vec<u8>, Error> {
    let table = db.snap_table(seq)?;
    let key = keys::chunk(n);
    crate::store::read(db, |r| Ok(r.table(&table).get(&key)?))?
        .ok_or_else(|| Error::Snapshot(format!("chunk {n} of snapshot {seq} is missing")))
}

/// Whether a chunk write runs beside the crate's writes or while the
/// caller holds them back ([`crate::store::Store::quiesced`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writes {
    Beside,
    Held,
}

/// Creates the chunk table of snapshot `seq` (empty), in a commit that
/// does not wait for the log: a crash may lose it, and nothing names it
/// until a record's flip, which waits.
pub(crate) fn create_chunks(db: &Db, seq: u64) -> Result<(), Error> {
    let name = keys::snap_table(seq);
    let table = db.write(&lazy(), |w| w.create_table(&name))?;
    db.add_snap_table(seq, table);
    Ok(())
}

/// Stores chunk `n` of snapshot `seq`, in a transaction of its own that
/// does not wait for the log (the record's flip does).
pub(crate) fn write_chunk(
    db: &Db,
    writes: Writes,
    seq: u64,
    n: u32,
    bytes: &[u8],
) -> Result<(), Error> {
    assert!(bytes.len() <= CHUNK_BYTES, "a chunk is at most CHUNK_BYTES");
    let table = db.snap_table(seq)?;
    let key = keys::chunk(n);
    let body = |w: &mut directkv::WriteTxn<'_>| w.table(&table).put(&key, bytes);
    match writes {
        Writes::Beside => db.write(&lazy(), body),
        Writes::Held => db.write_held(&lazy(), body),
    }
}

/// Drops, in `w`, the chunk table of every stored snapshot whose sequence
/// is not in `keep`; returns the sequences dropped. The engine frees their
/// pages afterwards, in bounded steps.
pub(crate) fn drop_chunks_but(
    w: &mut directkv::WriteTxn<'_>,
    keep: &[u64],
) -> directkv::Result<Vec<u64>> {
    let mut dropped = Vec::new();
    for t in w.list_tables()? {
        match keys::snap_seq(&t.name) {
            Some(seq) if !keep.contains(&seq) => {
                w.drop_table(&t.name)?;
                dropped.push(seq);
            }
            _ => {}
        }
    }
    assert!(
        dropped.iter().all(|s| !keep.contains(s)),
        "no kept snapshot's chunks are dropped"
    );
    Ok(dropped)
}

/// Deletes chunks `from..` of snapshot `seq`: what an earlier, longer
/// attempt at it left.
pub(crate) fn delete_chunks_from(db: &Db, seq: u64, from: u32) -> Result<(), Error> {
    let table = db.snap_table(seq)?;
    let lo = keys::chunk(from);
    delete_range_by(db, &table, (&lo, None), false, false, CHUNK_BYTES)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

    /// `pairs` written in chunks of `chunk_bytes`, and the chunks by number.
    fn write(pairs: &[(Vec<u8>, Vec<u8>)], chunk_bytes: usize) -> (Summary, Vec<Vec<u8>>) {
        let mut chunks = BTreeMap::new();
        let mut emit = |n: u32, b: &[u8]| {
            assert!(chunks.insert(n, b.to_vec()).is_none(), "chunk {n} once");
            Ok(())
        };
        let mut w = Writer::new(&Meta::default(), chunk_bytes);
        for (k, v) in pairs {
            w.pair(k, v, &mut emit).expect("pair");
        }
        let summary = w.finish(&mut emit).expect("finish");
        let chunks: Vec<Vec<u8>> = chunks.into_values().collect();
        (summary, chunks)
    }

    fn read(summary: &Summary, chunks: &[Vec<u8>], chunk_bytes: usize) -> Result<Pairs, Error> {
        let mut out = Vec::new();
        let fetch = |n: u32| {
            chunks
                .get(n as usize)
                .cloned()
                .ok_or_else(|| Error::Snapshot("missing".into()))
        };
        let got = parse(
            summary.len,
            chunk_bytes,
            fetch,
            |_| Ok(()),
            |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                Ok(())
            },
        )?;
        assert_eq!(got, *summary);
        Ok(out)
    }

    fn sample() -> Pairs {
        (0..40u32)
            .map(|i| {
                (
                    format!("key{i:03}").into_bytes(),
                    vec![i as u8; (i as usize * 37) % 300],
                )
            })
            .collect()
    }

    #[test]
    fn a_snapshot_round_trips_across_chunk_boundaries() {
        let pairs = sample();
        let whole = write(&pairs, 1 << 20);
        assert_eq!(whole.1.len(), 1, "all in one chunk");
        for chunk_bytes in [150, 211, 333, 1 << 20] {
            let (summary, chunks) = write(&pairs, chunk_bytes);
            assert_eq!(summary, whole.0, "the bytes do not depend on the chunking");
            assert_eq!(chunks.concat(), whole.1.concat());
            assert_eq!(read(&summary, &chunks, chunk_bytes).expect("parses"), pairs);
        }
        let (empty, chunks) = write(&[], 150);
        assert_eq!(empty.count, 0);
        assert!(read(&empty, &chunks, 150).expect("parses").is_empty());
    }

    #[test]
    fn any_damage_or_cut_is_refused() {
        let chunk_bytes = 150;
        let (summary, chunks) = write(&sample()[..8], chunk_bytes);
        assert!(chunks.len() > 2, "pairs span chunks");
        let bytes = chunks.concat();
        let split = |b: &[u8]| {
            b.chunks(chunk_bytes)
                .map(<[u8]>::to_vec)
                .collect::<Vec<_>>()
        };
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            assert!(
                read(&summary, &split(&b), chunk_bytes).is_err(),
                "flip at {i}"
            );
            let cut = Summary {
                len: i as u64,
                ..summary
            };
            assert!(
                read(&cut, &split(&bytes[..i]), chunk_bytes).is_err(),
                "cut at {i}"
            );
        }
        // A chunk of the wrong length, or one missing, is refused too.
        let mut short = chunks.clone();
        short[1].pop();
        assert!(read(&summary, &short, chunk_bytes).is_err());
        assert!(read(&summary, &chunks[..chunks.len() - 1], chunk_bytes).is_err());
    }
}
