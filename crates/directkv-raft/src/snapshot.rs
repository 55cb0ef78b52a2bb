//! A snapshot's bytes, and the current snapshot kept in the database.
//!
//! The bytes are `magic (8) | version (4) | meta length (4) | meta (JSON) |
//! pair count (8) | pairs | CRC32C (4)`, each pair `key length (4) | key |
//! value length (4) | value`, little-endian; the CRC covers everything
//! before it. openraft moves them between nodes in chunks; the receiver
//! checks the CRC, the count and the metadata before installing.
//!
//! The current snapshot is stored as chunks of [`CHUNK_BYTES`] under a
//! sequence number, and a record (`s`) naming the sequence, the metadata,
//! the length and the CRC. New chunks are written first; the record flips
//! in one commit; the old chunks go after.

use openraft::{BasicNode, SnapshotMeta};
use serde::{Deserialize, Serialize};

use crate::codec::{put_bytes, Reader};
use crate::store::{delete_range, from_json, lazy, Db};
use crate::{keys, Error, NodeId};

const MAGIC: &[u8; 8] = b"DKVRSNAP";
const VERSION: u32 = 1;

/// Bytes per stored chunk.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// A snapshot's metadata as openraft defines it.
pub(crate) type Meta = SnapshotMeta<NodeId, BasicNode>;

/// Builds a snapshot's bytes pair by pair.
pub(crate) struct Writer {
    out: Vec<u8>,
    count_at: usize,
    count: u64,
}

impl Writer {
    pub(crate) fn new(meta: &Meta) -> Self {
        let json = serde_json::to_vec(meta).expect("snapshot metadata serializes");
        let mut out = Vec::with_capacity(64 + json.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        put_bytes(&mut out, &json);
        let count_at = out.len();
        out.extend_from_slice(&0u64.to_le_bytes());
        Writer {
            out,
            count_at,
            count: 0,
        }
    }

    pub(crate) fn pair(&mut self, key: &[u8], value: &[u8]) {
        let before = self.out.len();
        put_bytes(&mut self.out, key);
        put_bytes(&mut self.out, value);
        self.count += 1;
        assert_eq!(
            self.out.len(),
            before + 8 + key.len() + value.len(),
            "a pair is its lengths and its bytes"
        );
    }

    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.out[self.count_at..self.count_at + 8].copy_from_slice(&self.count.to_le_bytes());
        let crc = crc32c::crc32c(&self.out);
        self.out.extend_from_slice(&crc.to_le_bytes());
        assert!(
            self.out.len() >= MAGIC.len() + 4 + 4 + 8 + 4,
            "a snapshot has its header and trailer"
        );
        self.out
    }
}

/// A snapshot's bytes, checked: its metadata and its pairs.
pub(crate) struct Parsed<'a> {
    pub(crate) meta: Meta,
    pub(crate) pairs: Vec<(&'a [u8], &'a [u8])>,
}

/// Checks and parses a snapshot's bytes.
///
/// # Errors
/// [`Error::Snapshot`] for a wrong magic, version, CRC, count or length.
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed<'_>, Error> {
    let bad = |why: String| Error::Snapshot(why);
    let Some(body_len) = bytes.len().checked_sub(4) else {
        return Err(bad(format!("{} bytes is too short", bytes.len())));
    };
    let (body, trailer) = bytes.split_at(body_len);
    let stored = u32::from_le_bytes(trailer.try_into().expect("four bytes split off"));
    let crc = crc32c::crc32c(body);
    if crc != stored {
        return Err(bad(format!("CRC32C {crc:#010x}, expected {stored:#010x}")));
    }
    let mut r = Reader::new(body, "snapshot");
    if r.take(MAGIC.len())? != MAGIC {
        return Err(bad("not a directkv-raft snapshot".into()));
    }
    let version = r.u32()?;
    if version != VERSION {
        return Err(bad(format!("version {version}, expected {VERSION}")));
    }
    let meta: Meta =
        serde_json::from_slice(r.bytes()?).map_err(|e| bad(format!("metadata: {e}")))?;
    let count = r.u64()?;
    // Each pair takes at least its two lengths: a count past that is a lie.
    if count > (r.remaining() / 8) as u64 {
        return Err(bad(format!(
            "{count} pairs cannot fit in {} bytes",
            r.remaining()
        )));
    }
    let mut pairs = Vec::with_capacity(count as usize);
    for _ in 0..count {
        pairs.push((r.bytes()?, r.bytes()?));
    }
    r.finish()?;
    assert_eq!(pairs.len() as u64, count, "every pair counted is parsed");
    Ok(Parsed { meta, pairs })
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

impl Stored {
    fn chunks(&self) -> u64 {
        self.len.div_ceil(CHUNK_BYTES as u64)
    }
}

/// The stored current snapshot's record, if there is one.
pub(crate) fn record(r: &directkv::ReadTxn<'_>) -> Result<Option<Stored>, Error> {
    from_json(r.get(keys::SNAPSHOT)?, "snapshot record")
}

/// Writes `bytes` as the chunks of snapshot `seq` (not yet current: the
/// caller flips the record) and returns its record.
pub(crate) fn write_chunks(db: &Db, meta: &Meta, seq: u64, bytes: &[u8]) -> Result<Stored, Error> {
    let per_txn = (db.batch_bytes / CHUNK_BYTES).max(1);
    let chunks: Vec<&[u8]> = bytes.chunks(CHUNK_BYTES).collect();
    assert_eq!(
        chunks.len() as u64,
        (bytes.len() as u64).div_ceil(CHUNK_BYTES as u64),
        "the record's chunk count is the chunks written"
    );
    for (batch_no, batch) in chunks.chunks(per_txn).enumerate() {
        db.write(&lazy(), |w| {
            for (i, c) in batch.iter().enumerate() {
                let n = u32::try_from(batch_no * per_txn + i).expect("under 4 Gi chunks");
                w.put(&keys::chunk(seq, n), c)?;
            }
            Ok(())
        })?;
    }
    Ok(Stored {
        meta: meta.clone(),
        seq,
        len: bytes.len() as u64,
        crc: crc32c::crc32c(bytes),
    })
}

/// Reads a stored snapshot's bytes back and checks them against its
/// record. Each chunk is read in its own read transaction: the caller
/// holds the snapshot store's lock, so the chunks of `stored` neither
/// change nor go while they are read.
pub(crate) fn read(db: &Db, stored: &Stored) -> Result<Vec<u8>, Error> {
    // The length comes from disk: reserve no more than a few chunks ahead.
    let reserve = stored.len.min(64 * CHUNK_BYTES as u64) as usize;
    let mut out = Vec::with_capacity(reserve);
    for n in 0..stored.chunks() {
        let n = u32::try_from(n).map_err(|_| Error::Snapshot("too many chunks".into()))?;
        let key = keys::chunk(stored.seq, n);
        let chunk = crate::store::read(db, |r| Ok(r.get(&key)?))?
            .ok_or_else(|| Error::Snapshot(format!("chunk {n} of {} is missing", stored.seq)))?;
        out.extend_from_slice(&chunk);
    }
    if out.len() as u64 != stored.len || crc32c::crc32c(&out) != stored.crc {
        return Err(Error::Snapshot(format!(
            "stored snapshot {} reads back as {} bytes with another CRC",
            stored.seq,
            out.len()
        )));
    }
    Ok(out)
}

/// Deletes the chunks of every snapshot but `keep`.
pub(crate) fn delete_other_chunks(db: &Db, keep: Option<u64>) -> Result<(), Error> {
    let end = [keys::CHUNK_ANY[0] + 1];
    match keep {
        None => {
            delete_range(db, keys::CHUNK_ANY, &end, false, false)?;
        }
        Some(seq) => {
            delete_range(db, keys::CHUNK_ANY, &keys::chunk_prefix(seq), false, false)?;
            if let Some(next) = seq.checked_add(1) {
                delete_range(db, &keys::chunk_prefix(next), &end, false, false)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = Writer::new(&Meta::default());
        w.pair(b"a", b"1");
        w.pair(b"", &[7; 300]);
        w.finish()
    }

    #[test]
    fn a_snapshot_round_trips() {
        let bytes = sample();
        let p = parse(&bytes).expect("parses");
        assert_eq!(p.meta, Meta::default());
        assert_eq!(
            p.pairs,
            vec![(&b"a"[..], &b"1"[..]), (&b""[..], &[7u8; 300][..])]
        );
    }

    #[test]
    fn any_damage_or_cut_is_refused() {
        let bytes = sample();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            assert!(parse(&b).is_err(), "flip at {i}");
            assert!(parse(&bytes[..i]).is_err(), "cut at {i}");
        }
    }
}
