//! The state machine's commands and answers, and the binary form a log
//! entry takes in the database.
//!
//! An entry is `version (1) | term (8) | leader node (8) | index (8) | kind
//! (1) | body`, little-endian. The body of a command is its tag and its
//! fields, each byte string as `length (4) | bytes`, each optional one
//! behind a presence byte; a membership change is rare and carried as JSON.
//! A decoder never trusts a length: every read is bounds-checked and a
//! short, long or unknown record is a [`DecodeError`].

use openraft::{CommittedLeaderId, EntryPayload, LogId, Membership};
use serde::{Deserialize, Serialize};

use crate::{NodeId, TypeConfig};

/// A log entry as openraft hands it to the storage.
pub type Entry = openraft::Entry<TypeConfig>;

/// The longest user key a command may carry: short enough for the
/// database's key limit at every page size, with the data key's prefix.
pub const KEY_MAX: usize = 512;

/// The largest value a command may carry. A command travels in one Raft
/// entry, which every node holds in memory while it replicates it.
pub const VALUE_MAX: usize = 1 << 20;

/// The most bytes of keys and values a [`Request::Batch`] may carry.
pub const BATCH_MAX_BYTES: usize = 4 << 20;

/// A command to the replicated key-value state machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: Vec<u8>,
        /// Its new value.
        value: Vec<u8>,
    },
    /// Removes `key`.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// Sets `key` to `new` (`None` removes it) if its value is `expected`
    /// (`None`: if it is absent).
    CompareAndSet {
        /// The key.
        key: Vec<u8>,
        /// The value it must have now.
        expected: Option<Vec<u8>>,
        /// The value it gets, or `None` to remove it.
        new: Option<Vec<u8>>,
    },
    /// Several commands (none a batch), applied in order in one entry,
    /// answered by [`Response::Batch`]: a server gathers the commands that
    /// arrive while an entry is being logged into the next one, so one
    /// durable append carries many.
    Batch(Vec<Request>),
}

/// The state machine's answer to one entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// A blank or membership entry: nothing to answer.
    Nothing,
    /// A put, a delete, or a compare-and-set that matched: done; the value
    /// the key had before.
    Done {
        /// The value before, if the key had one.
        previous: Option<Vec<u8>>,
    },
    /// A compare-and-set whose expected value was not the key's: nothing
    /// changed.
    Mismatch {
        /// The key's value.
        current: Option<Vec<u8>>,
    },
    /// A command over the limits ([`KEY_MAX`], [`VALUE_MAX`],
    /// [`BATCH_MAX_BYTES`], no batch in a batch): nothing changed. Every
    /// replica answers it the same way.
    Rejected {
        /// Why.
        reason: String,
    },
    /// The answers to a [`Request::Batch`], in its order.
    Batch(Vec<Response>),
}

impl Request {
    /// The key the command is about (`None` for a batch).
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            Request::Put { key, .. } | Request::Delete { key } => Some(key),
            Request::CompareAndSet { key, .. } => Some(key),
            Request::Batch(_) => None,
        }
    }

    /// About how many bytes the command carries (keys and values).
    pub fn bytes(&self) -> usize {
        match self {
            Request::Put { key, value } => key.len() + value.len(),
            Request::Delete { key } => key.len(),
            Request::CompareAndSet { key, expected, new } => {
                key.len() + expected.as_ref().map_or(0, Vec::len) + new.as_ref().map_or(0, Vec::len)
            }
            Request::Batch(reqs) => reqs.iter().map(Request::bytes).sum(),
        }
    }

    /// Whether the command is within the limits: `Err` says why not. The
    /// state machine answers a command out of them with
    /// [`Response::Rejected`]; a client checks before proposing.
    ///
    /// # Errors
    /// A key over [`KEY_MAX`] bytes, a value over [`VALUE_MAX`], a batch
    /// over [`BATCH_MAX_BYTES`] or holding a batch.
    pub fn check(&self) -> Result<(), String> {
        let Some(key) = self.key() else {
            return self.check_batch();
        };
        let key = key.len();
        if key > KEY_MAX {
            return Err(format!(
                "key of {key} bytes exceeds the {KEY_MAX}-byte limit"
            ));
        }
        let values: [Option<&Vec<u8>>; 2] = match self {
            Request::Put { value, .. } => [Some(value), None],
            Request::Delete { .. } => [None, None],
            Request::CompareAndSet { expected, new, .. } => [expected.as_ref(), new.as_ref()],
            Request::Batch(_) => unreachable!("a batch has no key and was checked above"),
        };
        match values.into_iter().flatten().map(Vec::len).max() {
            Some(len) if len > VALUE_MAX => Err(format!(
                "value of {len} bytes exceeds the {VALUE_MAX}-byte limit"
            )),
            _ => Ok(()),
        }
    }
}

impl Request {
    fn check_batch(&self) -> Result<(), String> {
        let Request::Batch(reqs) = self else {
            unreachable!("only a batch has no key");
        };
        if reqs.iter().any(|r| matches!(r, Request::Batch(_))) {
            return Err("a batch holds a batch".into());
        }
        let bytes = self.bytes();
        if bytes > BATCH_MAX_BYTES {
            return Err(format!(
                "batch of {bytes} bytes exceeds the {BATCH_MAX_BYTES}-byte limit"
            ));
        }
        reqs.iter().try_for_each(Request::check)
    }
}

/// A stored record the decoder refuses.
#[derive(Debug, thiserror::Error)]
#[error("undecodable {what}: {why}")]
pub struct DecodeError {
    /// The kind of record.
    pub what: &'static str,
    /// What is wrong with it.
    pub why: String,
}

const ENTRY_VERSION: u8 = 1;
/// Version, term, node, index and kind.
const ENTRY_HEADER_BYTES: usize = 1 + 8 + 8 + 8 + 1;
const KIND_BLANK: u8 = 0;
const KIND_NORMAL: u8 = 1;
const KIND_MEMBERSHIP: u8 = 2;
const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;
const TAG_CAS: u8 = 3;
const TAG_BATCH: u8 = 4;

/// The bytes an entry is stored as.
pub fn encode_entry(entry: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(ENTRY_VERSION);
    put_log_id(&mut out, &entry.log_id);
    assert_eq!(out.len(), ENTRY_HEADER_BYTES - 1, "version and log id");
    match &entry.payload {
        EntryPayload::Blank => out.push(KIND_BLANK),
        EntryPayload::Normal(req) => {
            out.push(KIND_NORMAL);
            encode_request(&mut out, req);
        }
        EntryPayload::Membership(m) => {
            out.push(KIND_MEMBERSHIP);
            // A membership serializes: its maps have plain keys.
            let json = serde_json::to_vec(m).expect("a membership serializes");
            put_bytes(&mut out, &json);
        }
    }
    out
}

/// The entry stored as `bytes`.
///
/// # Errors
/// A record that is short, long, of an unknown version or kind.
pub fn decode_entry(bytes: &[u8]) -> Result<Entry, DecodeError> {
    let mut r = Reader::new(bytes, "log entry");
    let version = r.u8()?;
    if version != ENTRY_VERSION {
        return Err(r.error(format!("version {version}, expected {ENTRY_VERSION}")));
    }
    let log_id = r.log_id()?;
    let payload = match r.u8()? {
        KIND_BLANK => EntryPayload::Blank,
        KIND_NORMAL => EntryPayload::Normal(decode_request(&mut r)?),
        KIND_MEMBERSHIP => {
            let json = r.bytes()?;
            let m: Membership<NodeId, openraft::BasicNode> =
                serde_json::from_slice(json).map_err(|e| r.error(e.to_string()))?;
            EntryPayload::Membership(m)
        }
        k => return Err(r.error(format!("unknown kind {k}"))),
    };
    r.finish()?;
    assert!(
        bytes.len() >= ENTRY_HEADER_BYTES,
        "a decoded entry has its header"
    );
    Ok(Entry { log_id, payload })
}

/// The log id at the head of a stored entry, without decoding the rest.
///
/// # Errors
/// As [`decode_entry`].
pub fn entry_log_id(bytes: &[u8]) -> Result<LogId<NodeId>, DecodeError> {
    let mut r = Reader::new(bytes, "log entry");
    match r.u8()? {
        ENTRY_VERSION => r.log_id(),
        v => Err(r.error(format!("version {v}, expected {ENTRY_VERSION}"))),
    }
}

fn encode_request(out: &mut Vec<u8>, req: &Request) {
    match req {
        Request::Put { key, value } => {
            out.push(TAG_PUT);
            put_bytes(out, key);
            put_bytes(out, value);
        }
        Request::Delete { key } => {
            out.push(TAG_DELETE);
            put_bytes(out, key);
        }
        Request::CompareAndSet { key, expected, new } => {
            out.push(TAG_CAS);
            put_bytes(out, key);
            put_option(out, expected.as_deref());
            put_option(out, new.as_deref());
        }
        Request::Batch(reqs) => {
            out.push(TAG_BATCH);
            let n = u32::try_from(reqs.len()).expect("a batch holds under 4 Gi commands");
            out.extend_from_slice(&n.to_le_bytes());
            for r in reqs {
                encode_request(out, r);
            }
        }
    }
}

fn decode_request(r: &mut Reader<'_>) -> Result<Request, DecodeError> {
    decode_request_in(r, false)
}

fn decode_request_in(r: &mut Reader<'_>, in_batch: bool) -> Result<Request, DecodeError> {
    Ok(match r.u8()? {
        TAG_BATCH if in_batch => skip_nested_batch(r)?,
        TAG_BATCH => {
            let n = batch_len(r)?;
            let mut reqs = Vec::with_capacity(n);
            for _ in 0..n {
                reqs.push(decode_request_in(r, true)?);
            }
            Request::Batch(reqs)
        }
        TAG_PUT => Request::Put {
            key: r.bytes()?.to_vec(),
            value: r.bytes()?.to_vec(),
        },
        TAG_DELETE => Request::Delete {
            key: r.bytes()?.to_vec(),
        },
        TAG_CAS => Request::CompareAndSet {
            key: r.bytes()?.to_vec(),
            expected: r.option()?,
            new: r.option()?,
        },
        t => return Err(r.error(format!("unknown command tag {t}"))),
    })
}

/// The command count of a batch (its tag read).
fn batch_len(r: &mut Reader<'_>) -> Result<usize, DecodeError> {
    let n = r.u32()? as usize;
    // Each command takes at least a tag and a length.
    if n > r.remaining() / 5 {
        return Err(r.error(format!("{n} commands cannot fit")));
    }
    Ok(n)
}

/// Reads past a batch inside a batch (its tag read), which any caller of
/// `Raft::client_write` can propose and the log then holds: it decodes,
/// as an empty batch, so that every replica reads the entry alike and
/// [`Request::check`] refuses the batch holding it the same way on each,
/// instead of every read of the entry failing and stopping the node. Read
/// without recursion: a crafted entry's nesting costs no stack.
fn skip_nested_batch(r: &mut Reader<'_>) -> Result<Request, DecodeError> {
    let mut left = vec![batch_len(r)?];
    while let Some(n) = left.last_mut() {
        if *n == 0 {
            left.pop();
            continue;
        }
        *n -= 1;
        match r.u8()? {
            TAG_BATCH => left.push(batch_len(r)?),
            TAG_PUT => {
                r.bytes()?;
                r.bytes()?;
            }
            TAG_DELETE => {
                r.bytes()?;
            }
            TAG_CAS => {
                r.bytes()?;
                r.option()?;
                r.option()?;
            }
            t => return Err(r.error(format!("unknown command tag {t}"))),
        }
    }
    Ok(Request::Batch(Vec::new()))
}

fn put_log_id(out: &mut Vec<u8>, id: &LogId<NodeId>) {
    out.extend_from_slice(&id.leader_id.term.to_le_bytes());
    out.extend_from_slice(&id.leader_id.node_id.to_le_bytes());
    out.extend_from_slice(&id.index.to_le_bytes());
}

/// Appends `len (4) | bytes`.
pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    let len = u32::try_from(b.len()).expect("a stored byte string is under 4 GiB");
    let before = out.len();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(b);
    assert_eq!(out.len(), before + 4 + b.len(), "length and bytes");
}

fn put_option(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            put_bytes(out, b);
        }
    }
}

/// A bounds-checked cursor over a stored record.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    pub(crate) fn error(&self, why: String) -> DecodeError {
        DecodeError {
            what: self.what,
            why: format!("{why} (at byte {} of {})", self.pos, self.buf.len()),
        }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| self.error(format!("{n} bytes needed, the record ends first")))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        assert!(self.pos <= self.buf.len(), "the cursor stays in its record");
        assert_eq!(s.len(), n, "a take is whole");
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes(b.try_into().expect("four bytes taken")))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("eight bytes taken")))
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    fn option(&mut self) -> Result<Option<Vec<u8>>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.bytes()?.to_vec())),
            b => Err(self.error(format!("presence byte {b}"))),
        }
    }

    fn log_id(&mut self) -> Result<LogId<NodeId>, DecodeError> {
        let term = self.u64()?;
        let node = self.u64()?;
        let index = self.u64()?;
        Ok(LogId::new(CommittedLeaderId::new(term, node), index))
    }

    /// How many bytes are left.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Refuses bytes left over.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(self.error(format!("{n} bytes past its end"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn id(term: u64, node: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, node), index)
    }

    fn entries() -> Vec<Entry> {
        let cas = Request::CompareAndSet {
            key: b"k".to_vec(),
            expected: None,
            new: Some(vec![0xff; 3]),
        };
        let members = Membership::new(vec![BTreeSet::from([1, 2, 3])], None);
        vec![
            Entry {
                log_id: id(1, 2, 3),
                payload: EntryPayload::Blank,
            },
            Entry {
                log_id: id(4, 5, 6),
                payload: EntryPayload::Normal(Request::Put {
                    key: b"key".to_vec(),
                    value: vec![],
                }),
            },
            Entry {
                log_id: id(u64::MAX, 0, 7),
                payload: EntryPayload::Normal(Request::Delete { key: vec![] }),
            },
            Entry {
                log_id: id(2, 2, 8),
                payload: EntryPayload::Normal(cas.clone()),
            },
            Entry {
                log_id: id(2, 2, 10),
                payload: EntryPayload::Normal(Request::Batch(vec![
                    cas,
                    Request::Delete { key: b"d".to_vec() },
                ])),
            },
            Entry {
                log_id: id(3, 1, 9),
                payload: EntryPayload::Membership(members),
            },
        ]
    }

    #[test]
    fn every_kind_of_entry_round_trips() {
        for e in entries() {
            let bytes = encode_entry(&e);
            let back = decode_entry(&bytes).expect("decodes");
            assert_eq!(back.log_id, e.log_id);
            assert_eq!(format!("{:?}", back.payload), format!("{:?}", e.payload));
            assert_eq!(entry_log_id(&bytes).expect("id"), e.log_id);
        }
    }

    /// A batch inside a batch reaches the log (nothing stops a caller of
    /// `client_write` proposing one): its entry decodes, however deep, to
    /// a batch `check` refuses, never an error that stops the node.
    #[test]
    fn a_nested_batch_decodes_to_one_every_replica_refuses() {
        let put = Request::Put {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
        };
        let mut deep = Request::Batch(vec![put.clone()]);
        for _ in 0..1000 {
            deep = Request::Batch(vec![put.clone(), deep]);
        }
        for nested in [
            Request::Batch(vec![put.clone(), Request::Batch(vec![put])]),
            deep,
        ] {
            let e = Entry {
                log_id: id(1, 1, 1),
                payload: EntryPayload::Normal(nested),
            };
            let back = decode_entry(&encode_entry(&e)).expect("decodes");
            let EntryPayload::Normal(req) = back.payload else {
                panic!("a normal entry");
            };
            assert!(req.check().is_err(), "refused at apply");
        }
    }

    #[test]
    fn every_cut_or_extension_of_an_entry_is_an_error_not_a_panic() {
        for e in entries() {
            let bytes = encode_entry(&e);
            for cut in 0..bytes.len() {
                assert!(decode_entry(&bytes[..cut]).is_err(), "cut at {cut}");
            }
            let mut long = bytes.clone();
            long.push(0);
            assert!(decode_entry(&long).is_err());
            for i in 0..bytes.len() {
                let mut flipped = bytes.clone();
                flipped[i] ^= 0xff;
                // Any result but a panic: a flipped term is still an entry.
                let _ = decode_entry(&flipped);
            }
        }
    }

    #[test]
    fn limits_are_checked_and_fit_the_database_at_every_page_size() {
        let long_key = Request::Delete {
            key: vec![0; KEY_MAX + 1],
        };
        assert!(long_key.check().is_err());
        let big = Request::CompareAndSet {
            key: vec![],
            expected: None,
            new: Some(vec![0; VALUE_MAX + 1]),
        };
        assert!(big.check().is_err());
        let ok = Request::Put {
            key: vec![0; KEY_MAX],
            value: vec![0; VALUE_MAX],
        };
        assert!(ok.check().is_ok());
        let nested = Request::Batch(vec![Request::Batch(vec![])]);
        assert!(nested.check().is_err());
        let heavy = Request::Batch(vec![ok.clone(); 5]);
        assert!(heavy.check().is_err(), "5 MiB is over the batch limit");
        let inner_bad = Request::Batch(vec![ok, long_key]);
        assert!(inner_bad.check().is_err());
    }
}
