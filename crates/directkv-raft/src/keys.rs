//! Where each record lives in the database: a named table per family,
//! and the keys inside each. Numbers inside keys are big-endian so that
//! the tree's order is theirs.
//!
//! | table                 | key                  | value                                 |
//! |-----------------------|----------------------|---------------------------------------|
//! | `raft.meta`           | `vote`               | the vote (JSON)                       |
//! | `raft.meta`           | `committed`          | the committed log id (JSON)           |
//! | `raft.meta`           | `purged`             | the last purged log id (JSON)         |
//! | `raft.meta`           | `applied`            | the applied state (JSON: [`Applied`]) |
//! | `raft.meta`           | `snapshot`           | the current snapshot's record (JSON)  |
//! | `raft.log`            | index (u64)          | a log entry ([`crate::codec`])        |
//! | `raft.data.`generation| the user's key       | a user value                          |
//! | `raft.snap.`sequence  | chunk number (u32)   | one chunk of a stored snapshot        |
//! | `raft.upgrade`        | as in `raft.meta`    | the records, during an upgrade        |
//! | (default keyspace)    | `v` `c` `p` `a` `s`  | a fence: not JSON (see below)         |
//!
//! Generations and sequences are written in decimal, without leading
//! zeros: a name has one spelling. `raft.meta` exists only once the layout
//! is complete (see [`crate::upgrade`]). The default keyspace keeps, under
//! the five record keys of the prefix layout, a value a build of that
//! layout cannot decode, so that it refuses the database.
//!
//! [`Applied`]: crate::state_machine::Applied

// Ordered keys: their numbers must sort as the numbers do.
#![allow(clippy::big_endian_bytes)]

/// The table of the vote, the committed and purged ids, the applied state
/// and the snapshot record; its existence marks the layout complete.
pub const META: &str = "raft.meta";
/// The table of the log entries.
pub const LOG: &str = "raft.log";
/// The table the five records wait in while the prefix layout is moved
/// into tables (see [`crate::upgrade`]); dropped when `raft.meta` is made.
pub const UPGRADE: &str = "raft.upgrade";

const DATA_PREFIX: &str = "raft.data.";
const SNAP_PREFIX: &str = "raft.snap.";

/// The vote.
pub const VOTE: &[u8] = b"vote";
/// The committed log id.
pub const COMMITTED: &[u8] = b"committed";
/// The last purged log id.
pub const PURGED: &[u8] = b"purged";
/// The applied state: last applied log id, membership, data generation.
pub const APPLIED: &[u8] = b"applied";
/// The current snapshot's record.
pub const SNAPSHOT: &[u8] = b"snapshot";

/// The table of data generation `generation`.
pub fn data_table(generation: u64) -> String {
    format!("{DATA_PREFIX}{generation}")
}

/// The table of the chunks of stored snapshot `seq`.
pub fn snap_table(seq: u64) -> String {
    format!("{SNAP_PREFIX}{seq}")
}

/// The generation a data table's name names, or `None` for another name.
pub fn data_generation(name: &str) -> Option<u64> {
    number_after(name, DATA_PREFIX)
}

/// The sequence a snapshot table's name names, or `None` for another name.
pub fn snap_seq(name: &str) -> Option<u64> {
    number_after(name, SNAP_PREFIX)
}

/// The number after `prefix` in `name`, spelled as [`data_table`] spells it.
fn number_after(name: &str, prefix: &str) -> Option<u64> {
    let n: u64 = name.strip_prefix(prefix)?.parse().ok()?;
    (name.len() == prefix.len() + n.to_string().len()).then_some(n)
}

/// The key of log entry `index`.
pub fn log(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The index a log key names, or `None` for a key that is not one.
pub fn log_index(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

/// The key of chunk `n` in its snapshot's table.
pub fn chunk(n: u32) -> [u8; 4] {
    n.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_keys_sort_as_their_indexes_and_round_trip() {
        let idx = [0u64, 1, 255, 256, 1 << 40, u64::MAX];
        for w in idx.windows(2) {
            assert!(log(w[0]) < log(w[1]));
        }
        for i in idx {
            assert_eq!(log_index(&log(i)), Some(i));
        }
        assert_eq!(log_index(b"l123"), None);
        assert_eq!(log_index(VOTE), None);
        assert!(chunk(1) < chunk(2) && chunk(255) < chunk(256));
    }

    #[test]
    fn table_names_have_one_spelling() {
        for g in [0, 1, 10, u64::MAX] {
            assert_eq!(data_generation(&data_table(g)), Some(g));
            assert_eq!(snap_seq(&snap_table(g)), Some(g));
            assert_eq!(snap_seq(&data_table(g)), None);
        }
        for bad in [
            "raft.data.",
            "raft.data.07",
            "raft.data.+7",
            "raft.data.x",
            META,
            LOG,
        ] {
            assert_eq!(data_generation(bad), None, "{bad}");
        }
    }
}
