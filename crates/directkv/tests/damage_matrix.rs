//! Every file of a database × every kind of damage (issue 17): open must
//! give back every acknowledged commit or a typed error, never a stale or
//! wrong value.
//!
//! Two databases are built on real files: one closed cleanly and one whose
//! process stopped after its last acknowledged commit (the handle dropped
//! without a checkpoint). Each took 150 transactions, a checkpoint (when an
//! older copy of every file is taken), then 250 more transactions that
//! update the same keys; half of the keys are in a named table, the rest in
//! the default keyspace, so every transaction writes both trees and the
//! catalog's root rides in every commit record. For every file (`data`, `CONTROL` and each of its
//! two slots, each WAL segment, the WAL directory, `LOCK`) and every damage
//! (deleted, truncated to each interesting length, zero-filled, one byte
//! flipped at seeded random places, replaced by its older copy), a copy of
//! the database is damaged, opened and read back in full.
//!
//! Beside whole files, one target is the last commit's record alone: the
//! drop sealed the flush holding it (a crash after the seal leaves the same
//! files), so damage there is refused after the crash as after the close
//! (issue 43), and the test fails on any other outcome of those rows.
//!
//! Outcomes: `whole` (every acknowledged value), `refused` (a typed error
//! at open or on the reads that met the damage, and no wrong value),
//! `torn` (damage in an unsealed last flush reads as a torn write of it, so
//! the last commit is dropped, and recovery reports the discarded tail),
//! and `stale`, the failure. The WAL directory replaced by
//! its older copy is refused: the data file's head names how far the log
//! had reached. What no check can see is the segment holding the crashed
//! log's end rolled back within itself, after the head last named it: that
//! cell (when the older copy has the segment) is `limit` and must still
//! read a state the database really had at some commit, per key
//! (docs/fault_coverage.md).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use directkv::{Database, Error, Options};

const KEYS: u32 = 600;
const SEGMENT_BYTES: u64 = 256 << 10;
/// Bytes of a `CONTROL` slot its CRC covers (with the CRC): where a flip matters.
const SLOT_USED: u64 = 92;

fn opts() -> Options {
    common::quiet(1 << 20, SEGMENT_BYTES)
}

/// The named table half of the keys are in.
const TABLE: &str = "half";

/// Whether key `k` is in [`TABLE`] (else in the default keyspace): those
/// whose last digit is odd.
fn in_table(k: &[u8]) -> bool {
    k.last().is_some_and(|d| d % 2 == 1)
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Every value each key had at some commit from the older copy on.
type History = BTreeMap<Vec<u8>, Vec<Vec<u8>>>;

struct Template {
    dir: tempfile::TempDir,
    old: tempfile::TempDir,
    model: Model,
    before_last: Model,
    history: History,
    crashed: bool,
}

fn build(crashed: bool) -> Template {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = tempfile::tempdir().expect("tempdir");
    let db = Database::open(
        dir.path(),
        Options {
            create_if_missing: true,
            ..opts()
        },
    )
    .expect("create");
    let mut w = db.begin_write().expect("begin_write");
    let table = w.create_table(TABLE).expect("create_table");
    w.commit().expect("commit");
    let mut model = Model::new();
    let mut history = History::new();
    let mut before_last = Model::new();
    for t in 0..400u32 {
        if t == 150 {
            db.checkpoint().expect("checkpoint");
            common::copy_tree(dir.path(), old.path());
            history = model
                .iter()
                .map(|(k, v)| (k.clone(), vec![v.clone()]))
                .collect();
        }
        if t == 399 {
            before_last = model.clone();
        }
        let mut w = db.begin_write().expect("begin_write");
        for j in 0..8u32 {
            let k = format!("key{:04}", (t * 37 + j * 101) % KEYS).into_bytes();
            let v = format!("t{t}j{j}{}", "v".repeat(40 + (t % 50) as usize)).into_bytes();
            match in_table(&k) {
                true => w.table(&table).put(&k, &v).expect("put"),
                false => w.put(&k, &v).expect("put"),
            }
            if t >= 150 {
                history.entry(k.clone()).or_default().push(v.clone());
            }
            model.insert(k, v);
        }
        w.commit().expect("commit");
    }
    if crashed {
        drop(db);
    } else {
        db.close().expect("close");
    }
    Template {
        dir,
        old,
        model,
        before_last,
        history,
        crashed,
    }
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    Deleted,
    Truncated(Length),
    ZeroFilled,
    Flipped(u64),
    OlderCopy,
}

#[derive(Debug, Clone, Copy)]
enum Length {
    Zero,
    OneBlock,
    Half,
    AllButASector,
}

/// What is damaged: a file (or directory) by its path in the database, or
/// one byte range of `CONTROL` (a slot).
#[derive(Debug, Clone)]
struct Target {
    rel: PathBuf,
    range: Option<(u64, u64)>,
}

fn targets(dir: &Path) -> Vec<Target> {
    let whole = |rel: &str| Target {
        rel: PathBuf::from(rel),
        range: None,
    };
    let mut out = vec![
        whole("data"),
        whole("CONTROL"),
        Target {
            rel: "CONTROL".into(),
            range: Some((0, SLOT_USED)),
        },
        Target {
            rel: "CONTROL".into(),
            range: Some((4096, 4096 + SLOT_USED)),
        },
        whole("wal"),
        whole("LOCK"),
    ];
    let mut segments: Vec<String> = std::fs::read_dir(dir.join("wal"))
        .expect("wal")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    segments.sort();
    out.extend(segments.iter().map(|n| whole(&format!("wal/{n}"))));
    out.push(last_commit(dir));
    out
}

/// The bytes of the log's last commit record, in its segment: damage there
/// must be refused after a crash too, since the drop sealed the flush that
/// holds it (issue 43).
fn last_commit(dir: &Path) -> Target {
    use directkv::internals::wal::Layout;
    let mut reader = common::log_reader(dir, SEGMENT_BYTES);
    let mut last = None;
    while let Some(rec) = reader.next_user_record().expect("read the log") {
        last = Some((rec.lsn, rec.payload.len() as u64));
    }
    let (lsn, len) = last.expect("the log holds commits");
    let layout = Layout {
        segment_bytes: SEGMENT_BYTES,
    };
    let lo = layout.file_offset(lsn);
    Target {
        rel: common::segment_rel_path(SEGMENT_BYTES, lsn),
        range: Some((lo, (lo + 16 + len).min(SEGMENT_BYTES))),
    }
}

fn damages(t: &Target, is_dir: bool) -> Vec<Damage> {
    if is_dir {
        return vec![Damage::Deleted, Damage::OlderCopy];
    }
    let flips = (1..=4).map(Damage::Flipped);
    if t.range.is_some() {
        return std::iter::once(Damage::ZeroFilled).chain(flips).collect();
    }
    let mut v = vec![
        Damage::Deleted,
        Damage::Truncated(Length::Zero),
        Damage::Truncated(Length::OneBlock),
        Damage::Truncated(Length::Half),
        Damage::Truncated(Length::AllButASector),
        Damage::ZeroFilled,
        Damage::OlderCopy,
    ];
    v.extend(flips);
    v
}

/// A small deterministic generator (SplitMix64).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Applies `d` to `t` in the database at `dir`; `false` when it does not
/// apply (no older copy of a file made after the copy was taken).
fn apply(dir: &Path, old: &Path, t: &Target, d: Damage) -> bool {
    let path = dir.join(&t.rel);
    let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let (lo, hi) = t.range.unwrap_or((0, len));
    match d {
        Damage::Deleted if path.is_dir() => std::fs::remove_dir_all(&path).expect("rm -r"),
        Damage::Deleted => std::fs::remove_file(&path).expect("rm"),
        Damage::Truncated(l) => {
            let to = match l {
                Length::Zero => 0,
                Length::OneBlock => 4096.min(len),
                Length::Half => len / 2,
                Length::AllButASector => len.saturating_sub(512),
            };
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .expect("open");
            f.set_len(to).expect("truncate");
        }
        Damage::ZeroFilled => write_at(&path, lo, &vec![0u8; (hi - lo) as usize]),
        Damage::Flipped(seed) => {
            if hi == lo {
                return false;
            }
            let at = lo + mix(seed ^ len) % (hi - lo);
            let mut b = [0u8; 1];
            read_at(&path, at, &mut b);
            write_at(&path, at, &[b[0] ^ (1 << (mix(seed) % 8))]);
        }
        Damage::OlderCopy => {
            let from = old.join(&t.rel);
            if !from.exists() {
                return false;
            }
            if path.is_dir() {
                std::fs::remove_dir_all(&path).expect("rm -r");
                common::copy_tree(&from, &path);
            } else {
                std::fs::copy(&from, &path).expect("copy");
            }
        }
    }
    true
}

fn read_at(path: &Path, at: u64, buf: &mut [u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).expect("open");
    f.read_exact_at(buf, at).expect("read");
}

fn write_at(path: &Path, at: u64, buf: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open");
    f.write_all_at(buf, at).expect("write");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Whole,
    Refused,
    Torn,
    Limit,
    Stale,
}

/// Opens the damaged database and reads every key; classifies the result.
fn outcome(dir: &Path, tpl: &Template, limit_cell: bool) -> (Outcome, String) {
    let db = match Database::open(dir, opts()) {
        Ok(db) => db,
        Err(e) => return (Outcome::Refused, kind(&e)),
    };
    let torn_reported = db.stats().recovery.torn_tail_lsn.is_some();
    let read = db.begin_read();
    let Ok(r) = read else {
        return (Outcome::Refused, "begin_read".into());
    };
    let (mut whole, mut before_last, mut in_history, mut errors) = (true, true, true, 0);
    let mut first_wrong = String::new();
    // A table that does not open is refused, read by read.
    let table = r.open_table(TABLE).ok();
    for (k, v) in &tpl.model {
        let got = match (in_table(k), &table) {
            (false, _) => r.get(k),
            (true, Some(t)) => r.table(t).get(k),
            (true, None) => Err(Error::TableNotFound { name: TABLE.into() }),
        };
        match got {
            Err(_) => errors += 1,
            Ok(got) => {
                let got = got.unwrap_or_default();
                whole &= &got == v;
                before_last &= tpl.before_last.get(k) == Some(&got);
                let known = tpl.history.get(k).is_some_and(|h| h.contains(&got));
                in_history &= known;
                if &got != v && first_wrong.is_empty() {
                    first_wrong = format!("{} read {:?}", String::from_utf8_lossy(k), got.len());
                }
            }
        }
    }
    if whole {
        let what = if errors > 0 {
            format!("{errors} reads refused")
        } else {
            String::new()
        };
        return (
            if errors > 0 {
                Outcome::Refused
            } else {
                Outcome::Whole
            },
            what,
        );
    }
    if tpl.crashed && before_last && errors == 0 && torn_reported {
        return (Outcome::Torn, "last commit dropped, reported".into());
    }
    if limit_cell && in_history {
        return (Outcome::Limit, first_wrong);
    }
    (Outcome::Stale, first_wrong)
}

fn kind(e: &Error) -> String {
    let s = format!("{e:?}");
    s.split([' ', '{', '(']).next().unwrap_or("").to_string()
}

fn run_matrix(crashed: bool) {
    let tpl = build(crashed);
    let end_segment = newest_used_segment(tpl.dir.path());
    let last = last_commit(tpl.dir.path());
    let mut counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    let mut stale = Vec::new();
    let mut not_refused = Vec::new();
    let mut table = String::new();
    for t in targets(tpl.dir.path()) {
        let is_dir = tpl.dir.path().join(&t.rel).is_dir();
        for d in damages(&t, is_dir) {
            let work = tempfile::tempdir().expect("tempdir");
            common::copy_tree(tpl.dir.path(), work.path());
            if !apply(work.path(), tpl.old.path(), &t, d) {
                continue;
            }
            let limit_cell =
                crashed && matches!(d, Damage::OlderCopy) && Some(&t.rel) == end_segment.as_ref();
            let (o, why) = outcome(work.path(), &tpl, limit_cell);
            *counts.entry(o).or_default() += 1;
            let cell = format!("{:?}{} × {d:?}", t.rel, slot(&t));
            table.push_str(&format!("{cell:<50} {o:?} {why}\n"));
            if o == Outcome::Stale {
                stale.push(format!("{cell}: {why}"));
            }
            if t.rel == last.rel && t.range == last.range && o != Outcome::Refused {
                not_refused.push(format!("{cell}: {o:?} {why}"));
            }
        }
    }
    println!(
        "{} database:\n{table}{counts:?}",
        if crashed { "crashed" } else { "closed" }
    );
    assert!(stale.is_empty(), "stale reads:\n{}", stale.join("\n"));
    assert!(
        not_refused.is_empty(),
        "damage in the sealed last commit must be refused:\n{}",
        not_refused.join("\n")
    );
    assert!(
        counts.get(&Outcome::Refused).copied().unwrap_or(0) > 10,
        "the matrix damages what matters: {counts:?}"
    );
}

fn slot(t: &Target) -> String {
    t.range
        .map(|(lo, _)| format!(" slot {}", lo / 4096))
        .unwrap_or_default()
}

/// The segment holding the log's newest record, read from `CONTROL`'s
/// redo point.
fn newest_used_segment(dir: &Path) -> Option<PathBuf> {
    let mut reader = common::log_reader(dir, SEGMENT_BYTES);
    let mut last = None;
    while let Some(rec) = reader.next_record().expect("read the log") {
        last = Some(rec.lsn);
    }
    last.map(|l| common::segment_rel_path(SEGMENT_BYTES, l))
}

#[test]
fn every_file_times_every_damage_after_a_clean_close() {
    run_matrix(false);
}

#[test]
fn every_file_times_every_damage_after_a_crash() {
    run_matrix(true);
}
