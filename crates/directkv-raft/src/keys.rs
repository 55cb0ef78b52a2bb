//! Where each record lives in the database. One byte names the family;
//! numbers inside keys are big-endian so that the tree's order is theirs.
//!
//! | key                                  | value                                   |
//! |--------------------------------------|-----------------------------------------|
//! | `v`                                  | the vote (JSON)                         |
//! | `c`                                  | the committed log id (JSON)             |
//! | `p`                                  | the last purged log id (JSON)           |
//! | `l` index                            | a log entry ([`crate::codec`])          |
//! | `a`                                  | the applied state (JSON: [`Applied`])   |
//! | `d` generation user-key              | a user value                            |
//! | `s`                                  | the current snapshot's record (JSON)    |
//! | `t` snapshot-sequence chunk-number   | one chunk of a stored snapshot          |
//!
//! [`Applied`]: crate::state_machine::Applied

// Ordered keys: their numbers must sort as the numbers do.
#![allow(clippy::big_endian_bytes)]

/// The vote.
pub const VOTE: &[u8] = b"v";
/// The committed log id.
pub const COMMITTED: &[u8] = b"c";
/// The last purged log id.
pub const PURGED: &[u8] = b"p";
/// The applied state: last applied log id, membership, data generation.
pub const APPLIED: &[u8] = b"a";
/// The current snapshot's record.
pub const SNAPSHOT: &[u8] = b"s";

const LOG: u8 = b'l';
const DATA: u8 = b'd';
const CHUNK: u8 = b't';

/// Bytes a data key adds before the user's key.
pub const DATA_PREFIX_BYTES: usize = 9;

/// The key of log entry `index`.
pub fn log(index: u64) -> [u8; 9] {
    let mut k = [LOG; 9];
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

/// The first key past every log entry.
pub fn log_end() -> [u8; 1] {
    [LOG + 1]
}

/// The index a log key names, or `None` for a key that is not one.
pub fn log_index(key: &[u8]) -> Option<u64> {
    match key {
        [LOG, rest @ ..] => Some(u64::from_be_bytes(rest.try_into().ok()?)),
        _ => None,
    }
}

/// The prefix of every user key of data generation `generation`.
pub fn data_prefix(generation: u64) -> [u8; DATA_PREFIX_BYTES] {
    let mut k = [DATA; DATA_PREFIX_BYTES];
    k[1..].copy_from_slice(&generation.to_be_bytes());
    k
}

/// The key of `user_key` in data generation `generation`.
pub fn data(generation: u64, user_key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(DATA_PREFIX_BYTES + user_key.len());
    k.extend_from_slice(&data_prefix(generation));
    k.extend_from_slice(user_key);
    k
}

/// The prefix of every data key, of every generation.
pub const DATA_ANY: &[u8] = &[DATA];

/// The prefix of every chunk of stored snapshot `seq`.
pub fn chunk_prefix(seq: u64) -> [u8; 9] {
    let mut k = [CHUNK; 9];
    k[1..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// The key of chunk `n` of stored snapshot `seq`.
pub fn chunk(seq: u64, n: u32) -> [u8; 13] {
    let mut k = [CHUNK; 13];
    k[1..9].copy_from_slice(&seq.to_be_bytes());
    k[9..].copy_from_slice(&n.to_be_bytes());
    k
}

/// The prefix of every chunk of every stored snapshot.
pub const CHUNK_ANY: &[u8] = &[CHUNK];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_keys_sort_as_their_indexes_and_round_trip() {
        let idx = [0u64, 1, 255, 256, 1 << 40, u64::MAX];
        for w in idx.windows(2) {
            assert!(log(w[0]) < log(w[1]));
            assert!(log(w[1]).as_slice() < log_end().as_slice());
        }
        for i in idx {
            assert_eq!(log_index(&log(i)), Some(i));
        }
        assert_eq!(log_index(b"l123"), None);
        assert_eq!(log_index(VOTE), None);
    }

    #[test]
    fn generations_and_snapshots_occupy_disjoint_ordered_ranges() {
        assert!(data(7, b"\xff\xff") < data(8, b"").to_vec());
        assert!(data(7, b"k").starts_with(&data_prefix(7)));
        assert!(chunk(3, u32::MAX).as_slice() < chunk_prefix(4).as_slice());
        assert!(chunk(3, 1) < chunk(3, 2));
        assert!(chunk(3, 0).starts_with(&chunk_prefix(3)));
    }
}
