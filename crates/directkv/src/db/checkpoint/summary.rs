//! Changed-page summaries: which pages the log between two checkpoints
//! changed, kept beside the database as PostgreSQL 17 keeps WAL summaries,
//! so an incremental backup reads only the pages changed since its parent
//! instead of every page of the data file.
//!
//! - Every commit adds the pages it changed to an in-memory set, in the
//!   serial commit section; recovery adds the pages of every commit it
//!   replays.
//! - Each checkpoint, under the tree lock that fixes its start S, takes the
//!   set (the changes of `[from, S)`) and starts a new one from S. It
//!   writes the set to `summaries/{from}-{S}.sum` (tmp, sync, rename,
//!   directory sync) before it writes any page, so a summary exists before
//!   `CONTROL` names the checkpoint.
//! - A summary records a superset of the pages changed in its range:
//!   after a crash, replay starts from the last completed checkpoint and
//!   re-adds its pages, so the next summary may overlap one written before
//!   the crash. Overlaps are harmless (a page copied that did not change);
//!   a gap (a summary that could not be written) makes an incremental
//!   backup spanning it fall back to reading every page.
//! - At most [`SUMMARIES_KEPT`] files are kept: beyond that the two oldest
//!   are merged into one covering both ranges when the ranges touch, and
//!   the oldest is dropped when they do not (a merge never bridges a gap).
//! - At open, summaries reaching past the redo point are removed: a
//!   checkpoint that never completed wrote them, over log a crash may have
//!   cut back.
//!
//! File: `DKVSUM01`, from LSN u64, to LSN u64, bits u64, then the bitmap
//! (`ceil(bits / 64)` little-endian u64 words, bit `p` set for page `p`),
//! then the CRC32C of everything before it (u32).
//!
//! Invariants:
//! - The summaries that cover `[a, b)` without a gap hold every page whose
//!   content a commit logged in `[a, b)` changed.
//! - A file read back is checked (magic, sizes, CRC) before it is trusted;
//!   a damaged one counts as a gap.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::format::PageId;
use crate::health;
use crate::io::{Permissions, Storage};
use crate::lsn::Lsn;
use crate::sched::crc_files as files;
use crate::sched::{IoClass, Scheduler};

/// The directory of the summaries, inside the database directory.
pub(crate) const SUMMARY_DIR_NAME: &str = "summaries";
/// Summary files kept at most (a few KiB to a few MiB each).
pub(crate) const SUMMARIES_KEPT: usize = 64;
const MAGIC: &[u8; 8] = b"DKVSUM01";
const HEADER_BYTES: usize = 32;
/// Files are written in whole sectors of this size.
const SECTOR_BYTES: usize = 512;
/// The largest page number a summary can hold (a 2^40-page file).
const PAGES_MAX: u64 = 1 << 40;

/// A set of page numbers as a bitmap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PageSet {
    words: Vec<u64>,
}

impl PageSet {
    /// Adds page `page`.
    pub(crate) fn insert(&mut self, page: PageId) {
        let p = page.get();
        assert!(p < PAGES_MAX, "page {p} is beyond any data file");
        let w = (p / 64) as usize;
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << (p % 64);
    }

    /// Adds every page of `other`.
    pub(crate) fn union(&mut self, other: &PageSet) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    /// The pages, ascending.
    pub(crate) fn pages(&self) -> impl Iterator<Item = PageId> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            (0..64)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| PageId::new(i as u64 * 64 + b))
        })
    }

    /// How many pages.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }
}

/// The summary being gathered, and where finished ones go.
pub(crate) struct Summaries {
    dir: PathBuf,
    /// The database's scheduler: a summary's write and the reads that
    /// merge them are `Urgent` requests (a checkpoint waits for them).
    sched: Arc<Scheduler>,
    /// Changes since `.0`.
    current: Mutex<(Lsn, PageSet)>,
}

impl Summaries {
    /// Gathering from `from` (the redo point replay started at), with the
    /// pages replay found changed. Summaries that reach past `from` are
    /// removed: they were written by a checkpoint that never completed,
    /// over log a crash may have cut back, and whose LSNs the log reuses.
    /// The summary gathered now covers their range again.
    ///
    /// # Errors
    /// I/O errors of listing and removing them.
    pub(crate) fn open<S: Storage>(
        storage: &S,
        db_dir: &Path,
        from: Lsn,
        replayed: PageSet,
        sched: Arc<Scheduler>,
    ) -> Result<Summaries> {
        let dir = db_dir.join(SUMMARY_DIR_NAME);
        if storage.exists(&dir) {
            let stale: Vec<_> = list(storage, &dir)?
                .into_iter()
                .filter(|r| r.1 > from)
                .collect();
            for &r in &stale {
                storage.remove_file(&dir.join(file_name(r)))?;
            }
            if !stale.is_empty() {
                storage.sync_dir(&dir)?;
            }
        }
        Ok(Summaries {
            dir,
            sched,
            current: Mutex::new((from, replayed)),
        })
    }

    /// Notes the pages one commit changed (in the commit section).
    pub(crate) fn note(&self, pages: &[PageId]) {
        let mut cur = health::lock_even_poisoned(&self.current);
        for &p in pages {
            cur.1.insert(p);
        }
    }

    /// Ends the summary at `at` (a checkpoint's start, under the tree lock)
    /// and starts the next there. Returns the range's start and its pages.
    pub(crate) fn cut(&self, at: Lsn) -> (Lsn, PageSet) {
        let mut cur = health::lock_even_poisoned(&self.current);
        assert!(cur.0 <= at, "summaries follow the log");
        let from = cur.0;
        let set = std::mem::take(&mut cur.1);
        cur.0 = at;
        (from, set)
    }

    /// Writes the summary of `[from, to)` and merges the oldest files
    /// while more than [`SUMMARIES_KEPT`] exist.
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn write<S: Storage>(
        &self,
        storage: &S,
        permissions: Permissions,
        from: Lsn,
        to: Lsn,
        set: &PageSet,
    ) -> Result<()> {
        crate::io::create_dir_synced(storage, &self.dir, permissions)?;
        let io = (&self.sched, IoClass::Urgent);
        write_file(storage, &self.dir, (permissions, io), from, to, set)?;
        let mut listed = list(storage, &self.dir)?;
        while listed.len() > SUMMARIES_KEPT {
            let (a, b) = (listed[0], listed[1]);
            // Only touching or overlapping ranges merge (a merge never
            // bridges a gap); otherwise, or when one cannot be read, the
            // oldest goes.
            let merged = if a.1 >= b.0 {
                match (
                    read_file(storage, &self.dir, a, io),
                    read_file(storage, &self.dir, b, io),
                ) {
                    (Ok(mut x), Ok(y)) => {
                        x.union(&y);
                        Some(x)
                    }
                    (Err(Error::Corruption { .. }), _) | (_, Err(Error::Corruption { .. })) => None,
                    (Err(e), _) | (_, Err(e)) => return Err(e),
                }
            } else {
                None
            };
            let gone = match merged {
                Some(set) => {
                    let range = (a.0, a.1.max(b.1));
                    let how = (permissions, io);
                    write_file(storage, &self.dir, how, range.0, range.1, &set)?;
                    [a, b].into_iter().filter(|&r| r != range).collect()
                }
                None => vec![a],
            };
            for r in gone {
                storage.remove_file(&self.dir.join(file_name(r)))?;
            }
            storage.sync_dir(&self.dir)?;
            listed = list(storage, &self.dir)?;
        }
        Ok(())
    }
}

/// The pages the summaries in `db_dir` say changed in `[from, to)`, or
/// `None` when they do not cover that range (a gap, a damaged file). Its
/// reads are `class` requests of `sched`.
///
/// # Errors
/// I/O errors of listing and reading.
pub(crate) fn changed_pages<S: Storage>(
    storage: &S,
    db_dir: &Path,
    (from, to): (Lsn, Lsn),
    io: (&Arc<Scheduler>, IoClass),
) -> Result<Option<PageSet>> {
    assert!(from <= to, "a range runs forward");
    let dir = db_dir.join(SUMMARY_DIR_NAME);
    if !storage.exists(&dir) {
        return Ok(None);
    }
    let mut covered = from;
    let mut set = PageSet::default();
    // Sorted by start: each that overlaps the part not yet covered and
    // starts at or before its beginning extends the cover.
    for r in list(storage, &dir)? {
        if covered >= to {
            break;
        }
        if r.1 <= covered || r.0 >= to {
            continue;
        }
        if r.0 > covered {
            return Ok(None);
        }
        match read_file(storage, &dir, r, io) {
            Ok(s) => set.union(&s),
            Err(Error::Corruption { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
        covered = r.1;
    }
    Ok((covered >= to).then_some(set))
}

fn file_name((from, to): (Lsn, Lsn)) -> String {
    format!("{:016X}-{:016X}.sum", from.get(), to.get())
}

fn parse_name(name: &str) -> Option<(Lsn, Lsn)> {
    let (a, b) = name.strip_suffix(".sum")?.split_once('-')?;
    if a.len() != 16 || b.len() != 16 {
        return None;
    }
    let (a, b) = (
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    );
    (a <= b).then(|| (Lsn::new(a), Lsn::new(b)))
}

/// The summaries' ranges, by start, then end.
fn list<S: Storage>(storage: &S, dir: &Path) -> Result<Vec<(Lsn, Lsn)>> {
    let mut v: Vec<_> = storage
        .list_dir(dir)?
        .iter()
        .filter_map(|n| parse_name(n))
        .collect();
    v.sort_unstable();
    Ok(v)
}

fn encode(from: Lsn, to: Lsn, set: &PageSet) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + set.words.len() * 8 + 4);
    out.extend_from_slice(MAGIC);
    for v in [from.get(), to.get(), set.words.len() as u64 * 64] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    assert_eq!(out.len(), HEADER_BYTES);
    for w in &set.words {
        out.extend_from_slice(&w.to_le_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    // Whole sectors: every request to a file is then aligned.
    out.resize(out.len().next_multiple_of(SECTOR_BYTES), 0);
    out
}

fn decode(bytes: &[u8], path: &Path) -> Result<(Lsn, Lsn, PageSet)> {
    let bad = |detail: &str| Error::Corruption {
        path: path.to_path_buf(),
        offset: 0,
        page: None,
        detail: format!("changed-page summary: {detail}"),
    };
    let u64_at = |at: usize| crate::format::le::get_u64(bytes, at).ok_or_else(|| bad("short"));
    if bytes.len() < HEADER_BYTES + 4 || &bytes[..8] != MAGIC {
        return Err(bad("not a summary"));
    }
    let (from, to, bits) = (u64_at(8)?, u64_at(16)?, u64_at(24)?);
    if bits % 64 != 0 || bits > PAGES_MAX || from > to {
        return Err(bad("inconsistent sizes"));
    }
    let body = HEADER_BYTES + (bits / 8) as usize;
    let crc = crate::format::le::get_u32(bytes, body).ok_or_else(|| bad("short"))?;
    if crc != crc32c::crc32c(&bytes[..body]) || bytes[body + 4..].iter().any(|&b| b != 0) {
        return Err(bad("checksum mismatch"));
    }
    let words = bytes[HEADER_BYTES..body]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("eight bytes")))
        .collect();
    Ok((Lsn::new(from), Lsn::new(to), PageSet { words }))
}

fn write_file<S: Storage>(
    storage: &S,
    dir: &Path,
    (permissions, io): (Permissions, (&Arc<Scheduler>, IoClass)),
    from: Lsn,
    to: Lsn,
    set: &PageSet,
) -> Result<()> {
    let name = file_name((from, to));
    let (path, tmp) = (dir.join(&name), dir.join(format!("{name}.tmp")));
    // A leftover of a crash; `path` itself is replaced by the rename.
    if storage.exists(&tmp) {
        storage.remove_file(&tmp)?;
    }
    files::write_small_admitted(storage, &tmp, &encode(from, to, set), permissions, io)?;
    storage.rename(&tmp, &path)?;
    storage.sync_dir(dir)
}

fn read_file<S: Storage>(
    storage: &S,
    dir: &Path,
    range: (Lsn, Lsn),
    io: (&Arc<Scheduler>, IoClass),
) -> Result<PageSet> {
    let path = dir.join(file_name(range));
    let bytes = files::read_small_admitted(storage, &path, 64 + PAGES_MAX / 8, io)?;
    let (from, to, set) = decode(&bytes, &path)?;
    if (from, to) != range {
        return Err(Error::Corruption {
            path,
            offset: 8,
            page: None,
            detail: "changed-page summary: its range is not its name's".into(),
        });
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::OsStorage;

    fn ids(pages: &[u64]) -> Vec<PageId> {
        pages.iter().copied().map(PageId::new).collect()
    }

    fn set(pages: &[u64]) -> PageSet {
        let mut s = PageSet::default();
        for p in ids(pages) {
            s.insert(p);
        }
        s
    }

    #[test]
    fn summaries_cover_ranges_merge_and_refuse_gaps_and_damage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let st = OsStorage::default();
        let sched = Scheduler::fifo();
        let s = Summaries::open(&st, dir.path(), Lsn::new(0), set(&[1]), Arc::clone(&sched))
            .expect("open");
        let l = Lsn::new;
        s.note(&ids(&[5, 70]));
        let (from, a) = s.cut(l(100));
        assert_eq!(
            (from, a.pages().map(PageId::get).collect::<Vec<_>>()),
            (l(0), vec![1, 5, 70])
        );
        s.write(&st, Permissions::Private, from, l(100), &a)
            .expect("write");
        s.note(&ids(&[2]));
        let (from, b) = s.cut(l(200));
        s.write(&st, Permissions::Private, from, l(200), &b)
            .expect("write");
        let io = (&sched, IoClass::Backup);
        let got = |a, b| changed_pages(&st, dir.path(), (l(a), l(b)), io).expect("read");
        assert_eq!(got(0, 200).map(|s| s.len()), Some(4));
        assert_eq!(
            got(150, 200).map(|s| s.pages().map(PageId::get).collect()),
            Some(vec![2])
        );
        assert_eq!(got(50, 250), None, "past the last summary");
        // Damage is a gap, not an error or a wrong answer.
        let path = dir
            .path()
            .join(SUMMARY_DIR_NAME)
            .join(file_name((l(100), l(200))));
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[HEADER_BYTES] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        assert_eq!(got(0, 200), None);
        assert!(got(0, 100).is_some());
        // Past the limit, the oldest merge: every range stays covered.
        for i in 2..(SUMMARIES_KEPT as u64 + 5) {
            s.note(&ids(&[i]));
            let (from, c) = s.cut(l(100 * (i + 1)));
            s.write(&st, Permissions::Private, from, l(100 * (i + 1)), &c)
                .expect("write");
        }
        let n = list(&st, &dir.path().join(SUMMARY_DIR_NAME))
            .expect("list")
            .len();
        assert_eq!(n, SUMMARIES_KEPT);
        let late = got(1000, 1100).expect("covered");
        assert!(late.pages().any(|p| p.get() == 10), "{late:?}");
    }
}
