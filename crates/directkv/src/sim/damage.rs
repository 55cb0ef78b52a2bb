//! The file × damage classes of the corruption campaign: any file of a
//! closed database (`data`, `CONTROL`, each WAL segment, the WAL directory,
//! `LOCK`) deleted, truncated, zero-filled, flipped or replaced by an older
//! copy of itself, or a data page copied over another (a misdirected
//! write); and what a reopen may then give back.
//!
//! A reopen must give back every acknowledged commit or a typed error. Two
//! other outcomes are allowed, each with its reason:
//! - `Torn`: damage in the log's last flush after a crash reads as a torn
//!   write of it, so the last commit is dropped, and recovery reports the
//!   discarded tail;
//! - `Limit`: the log replaced at its newest end by an older copy (of the
//!   directory or of a segment) after a crash: nothing durable after the
//!   copy's end says the log went on. The state must still be that after a
//!   commit at or past when the copy was taken.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::disk::{SimStorage, SIM_SECTOR_BYTES};
use super::rng::Rng;
use crate::db::Database;
use crate::error::{Error, Result};
use crate::io::Storage;

/// Every file under a database directory, with its bytes: the older copies.
pub(super) struct Snapshot {
    files: BTreeMap<PathBuf, Vec<u8>>,
}

impl Snapshot {
    /// Copies every file under `root` on `disk`.
    pub(super) fn take(disk: &SimStorage, root: &Path) -> Snapshot {
        let files = paths(disk, root)
            .into_iter()
            .filter_map(|p| disk.file_bytes(&p).map(|b| (p, b)))
            .collect();
        Snapshot { files }
    }
}

/// The files under `root` (one level of subdirectories: `wal/`).
fn paths(disk: &SimStorage, root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for name in disk.list_dir(root).unwrap_or_default() {
        let p = root.join(&name);
        if disk.file_len(&p).is_some() {
            out.push(p);
        } else {
            out.extend(
                disk.list_dir(&p)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|n| p.join(n)),
            );
        }
    }
    out
}

/// One damage: what it did, and whether its cell is a `Limit` one.
pub(super) struct Damaged {
    pub(super) what: String,
    pub(super) limit: bool,
}

/// Damages one file (or the WAL directory) of the closed database at
/// `root` one way `rng` picks. `None` when the pick does not apply (no
/// older copy of a file made after the copy was taken).
pub(super) fn damage(
    disk: &SimStorage,
    root: &Path,
    old: &Snapshot,
    page: usize,
    rng: &mut Rng,
) -> Option<Damaged> {
    assert!(
        page.is_power_of_two() && page >= SIM_SECTOR_BYTES,
        "a page is a power of two of whole sectors"
    );
    let wal = root.join("wal");
    let mut targets = paths(disk, root);
    targets.push(wal.clone());
    let target = targets[rng.range(0, targets.len() as u64) as usize].clone();
    let name = target
        .strip_prefix(root)
        .unwrap_or(&target)
        .display()
        .to_string();
    let len = disk.file_len(&target).unwrap_or(0);
    let done = |what: String, limit: bool| Some(Damaged { what, limit });
    if target == wal {
        return damage_wal_dir(disk, &wal, old, rng.chance(1, 2));
    }
    let mut bytes = disk.file_bytes(&target)?;
    let what = match rng.range(0, 7) {
        0 => {
            disk.remove_tree(&target);
            return done(format!("{name} deleted"), false);
        }
        1 => {
            let to = [0, 4096.min(len), len / 2, len.saturating_sub(512)][rng.range(0, 4) as usize];
            assert!(to <= len, "a truncation only shortens");
            bytes.truncate(to);
            format!("{name} truncated to {to}")
        }
        2 => {
            bytes.fill(0);
            format!("{name} zero-filled")
        }
        3 if name == "data" && len >= 3 * page => copy_page(&mut bytes, page, rng),
        6 => {
            let older = old.files.get(&target)?;
            bytes.clone_from(older);
            let limit = target.starts_with(&wal);
            disk.set_file_bytes(&target, bytes);
            return done(format!("{name} replaced by its older copy"), limit);
        }
        _ => {
            if bytes.is_empty() {
                return None;
            }
            let at = rng.range(0, bytes.len() as u64) as usize;
            bytes[at] ^= 1 << rng.range(0, 8);
            format!("bit flip in {name} at {at}")
        }
    };
    disk.set_file_bytes(&target, bytes);
    done(what, false)
}

/// Copies one page of the data file's `bytes` over another (a misdirected
/// write), neither of them the head page; says which.
fn copy_page(bytes: &mut [u8], page: usize, rng: &mut Rng) -> String {
    let pages = (bytes.len() / page) as u64;
    let (a, b) = (rng.range(1, pages), rng.range(1, pages));
    let (a, b) = (a as usize * page, b as usize * page);
    assert!(
        a.max(b) + page <= bytes.len(),
        "both pages lie inside the file"
    );
    bytes.copy_within(a..a + page, b);
    format!("data page {} copied over page {}", a / page, b / page)
}

/// Deletes the WAL directory, or replaces it with its older copy.
fn damage_wal_dir(disk: &SimStorage, wal: &Path, old: &Snapshot, delete: bool) -> Option<Damaged> {
    disk.remove_tree(wal);
    if delete {
        return Some(Damaged {
            what: "wal/ deleted".into(),
            limit: false,
        });
    }
    for (p, b) in old.files.iter().filter(|(p, _)| p.starts_with(wal)) {
        disk.set_file_bytes(p, b.clone());
    }
    disk.create_dir_all(wal).ok()?;
    Some(Damaged {
        what: "wal/ replaced by its older copy".into(),
        limit: true,
    })
}

/// What a reopen of a damaged database gave back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Every acknowledged commit.
    Whole,
    /// A typed error, at open or on a read.
    Detected,
    /// The last commit dropped as a torn tail, and reported.
    Torn,
    /// A state from at or past the older copy (see the module docs).
    Limit,
}

/// Classifies the reopen of a damaged database against `log`, of which
/// `acked` commits were acknowledged and `copied` were in when the older
/// copies were taken.
///
/// # Errors
/// What was wrong when the outcome is none of the allowed ones.
pub(super) fn classify<S: Storage>(
    opened: Result<Database<S>>,
    expect: impl Fn(u64) -> BTreeMap<Vec<u8>, Vec<u8>>,
    acked: u64,
    copied: u64,
    limit: bool,
) -> Result<Outcome, String> {
    assert!(
        copied <= acked,
        "the older copies were taken before the last acknowledged commit"
    );
    let db = match opened {
        Ok(db) => db,
        Err(Error::Poisoned { .. } | Error::InvalidArgument(_)) => {
            return Err("open failed with an error that names no damage".into())
        }
        Err(_) => return Ok(Outcome::Detected),
    };
    let Ok(r) = db.begin_read() else {
        return Ok(Outcome::Detected);
    };
    let next = match r.get(b"next") {
        Err(_) => return Ok(Outcome::Detected),
        Ok(v) => v
            .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
            .map_or(0, u64::from_le_bytes),
    };
    let Ok(got) = super::run::tables::read_all(&r) else {
        return Ok(Outcome::Detected);
    };
    if next > acked || got != expect(next) {
        return Err(format!(
            "the state is not the one after commit {next} ({acked} acknowledged)"
        ));
    }
    if db.check().is_err() {
        return Ok(Outcome::Detected);
    }
    let torn = db.stats().recovery.torn_tail_lsn.is_some();
    match next {
        n if n == acked => Ok(Outcome::Whole),
        n if n + 1 == acked && torn => Ok(Outcome::Torn),
        n if limit && n >= copied => Ok(Outcome::Limit),
        n => Err(format!(
            "stale: the state after commit {n}, but {acked} were acknowledged{}",
            if torn {
                " (a torn tail was reported)"
            } else {
                ""
            }
        )),
    }
}
