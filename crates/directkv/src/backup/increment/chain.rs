//! The chain of backups an incremental backup builds on: finding it
//! among the parent's siblings ([`find_chain`]) and reading pages as it
//! holds them ([`ChainPages`]), the bases an increment's deltas are made
//! against.

use super::*;
use crate::backup::dir;

/// Finds the chain of complete backups that ends with the one in `parent`:
/// each earlier link among `parent`'s sibling directories, by the backup id
/// its child names. Only backups `unopened` says were not yet opened count
/// (a copy opened as a database has other bytes under the same id: the
/// database, which reads `CONTROL`, decides), and no hidden or
/// restore-scratch directory. Returns `None`, and the backup then stores
/// whole pages, when a link is not there (the backups were moved apart),
/// the links do not hold, the ids cycle, or the chain is longer than
/// [`DELTA_CHAIN_LINKS_MAX`].
///
/// # Errors
/// The parent's own manifest's errors (it was checked before).
pub fn find_chain<S: Storage>(
    storage: &S,
    parent: &Path,
    unopened: impl Fn(&Path) -> bool,
) -> Result<Option<Vec<PathBuf>>> {
    let mut chain = vec![parent.to_path_buf()];
    let mut m = dir::complete_manifest(storage, parent)?;
    let root = match parent.parent() {
        Some(r) if r.as_os_str().is_empty() => Path::new("."),
        Some(r) => r,
        None => return Ok(m.parent_id.is_none().then_some(chain)),
    };
    let mut seen = std::collections::HashSet::from([m.backup_id.clone()]);
    let mut siblings: Option<Vec<PathBuf>> = None;
    while let Some(want) = m.parent_id.clone() {
        if !seen.insert(want.clone()) || chain.len() >= DELTA_CHAIN_LINKS_MAX {
            return Ok(None);
        }
        let names = match &siblings {
            Some(s) => s,
            None => match storage.list_dir(root) {
                Ok(names) => siblings.insert(
                    names
                        .into_iter()
                        .filter(|n| !n.starts_with('.') && !n.ends_with(".restore-tmp"))
                        .map(|n| root.join(n))
                        .collect(),
                ),
                Err(_) => return Ok(None),
            },
        };
        let found = names.iter().find_map(|dir| {
            let mm = dir::complete_manifest(storage, dir).ok()?;
            (mm.backup_id == want && unopened(dir)).then(|| (dir.clone(), mm))
        });
        let Some((dir, mm)) = found else {
            return Ok(None);
        };
        chain.push(dir);
        m = mm;
    }
    assert!(chain.len() <= DELTA_CHAIN_LINKS_MAX, "the chain is bounded");
    chain.reverse();
    let links: Vec<&Path> = chain.iter().map(PathBuf::as_path).collect();
    Ok(dir::check_chain(storage, &links).ok().map(|_| chain))
}

/// The pages as the chain of backups holds them, read in ascending page
/// order: the full backup's page with each increment's entry for it
/// applied in turn, without log replay.
pub struct ChainPages<S: Storage> {
    page_bytes: usize,
    db_id: crate::format::DbId,
    full: S::File,
    full_pages: u64,
    /// A run of the full backup's pages read ahead: its first page, count.
    ahead: (u64, u64),
    ahead_buf: AlignedBuf,
    increments: Vec<(EntryReader<S::File>, Option<Entry>)>,
    /// The last page asked for.
    last: Option<PageId>,
    /// Bytes read from the full backup's data file.
    full_bytes_read: u64,
}

/// Pages the first read-ahead of the full backup takes after a jump; each
/// read that continues the last doubles it, up to a chunk.
const AHEAD_PAGES_MIN: u64 = 4;

impl<S: Storage> ChainPages<S> {
    /// Opens the backups of `chain` (a checked chain, full backup first).
    ///
    /// # Errors
    /// I/O errors; a link that is not complete.
    pub fn open(storage: &S, chain: &[PathBuf]) -> Result<ChainPages<S>> {
        assert!(
            !chain.is_empty() && chain.len() <= DELTA_CHAIN_LINKS_MAX,
            "a chain has a full backup and is bounded"
        );
        let opts = files::read_options(DirectIo::Auto);
        let first = dir::complete_manifest(storage, &chain[0])?;
        assert!(
            first.parent_id.is_none(),
            "a chain starts with a full backup"
        );
        let mut increments = Vec::new();
        for dir in &chain[1..] {
            let m = dir::complete_manifest(storage, dir)?;
            let path = dir.join(INCREMENT_NAME);
            let file = storage.open(&path, &opts)?;
            let mut reader = EntryReader::new(file, &path, &m)?;
            let next = reader.next_entry()?;
            increments.push((reader, next));
        }
        Ok(ChainPages {
            page_bytes: first.page_bytes as usize,
            db_id: first.db_id_bytes().expect("decoding checked the id"),
            full: storage.open(&chain[0].join(DATA_NAME), &opts)?,
            full_pages: first.page_count,
            ahead: (0, 0),
            ahead_buf: AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?,
            increments,
            last: None,
            full_bytes_read: 0,
        })
    }

    /// Page `no` as the chain holds it, into `out`; `false` when no backup
    /// of the chain holds it (it is newer) or what they hold does not pass
    /// the page's check (a page left to the log as zeros): a page to
    /// store whole. Pages are asked for in ascending order.
    ///
    /// # Errors
    /// I/O errors; [`Error::Corruption`] for an entry that does not make
    /// its page, or a delta with nothing under it.
    pub fn page(&mut self, no: PageId, out: &mut [u8]) -> Result<bool> {
        assert!(self.last.is_none_or(|l| l < no), "pages are asked in order");
        assert_eq!(out.len(), self.page_bytes, "a page");
        self.last = Some(no);
        let mut held = no.get() < self.full_pages;
        if held {
            self.read_full(no, out)?;
        }
        for (reader, next) in &mut self.increments {
            while next.is_some_and(|e| e.page < no) {
                *next = reader.next_entry()?;
            }
            let Some(e) = next.filter(|e| e.page == no) else {
                continue;
            };
            if e.kind == Kind::Delta && !held {
                return Err(damaged(
                    &reader.path,
                    e.offset,
                    format!("page {no} is a delta, but no earlier backup of the chain holds it"),
                ));
            }
            reader.make_page(&e, out)?;
            held = true;
            *next = reader.next_entry()?;
        }
        Ok(held && crate::format::page::verify(out, no, &self.db_id).is_ok())
    }

    /// Bytes read from the chain's files so far.
    pub fn bytes_read(&self) -> u64 {
        let increments: u64 = self.increments.iter().map(|(r, _)| r.bytes_read()).sum();
        self.full_bytes_read + increments
    }

    /// The full backup's page `no` into `out`, through the read-ahead.
    fn read_full(&mut self, page: PageId, out: &mut [u8]) -> Result<()> {
        let pb = self.page_bytes;
        let no = page.get();
        let (first, count) = self.ahead;
        if !(first..first + count).contains(&no) {
            let most = (self.ahead_buf.len() / pb) as u64;
            // Sequential (within a window of the last): grow; else start small.
            let k = match no < first + 2 * count.max(1) {
                true => (2 * count).clamp(AHEAD_PAGES_MIN, most),
                false => AHEAD_PAGES_MIN.min(most),
            };
            let k = k.min(self.full_pages - no);
            let n = k as usize * pb;
            self.full
                .read_exact_at(self.ahead_buf.io_mut(0..n)?, no * pb as u64)?;
            self.full_bytes_read += n as u64;
            self.ahead = (no, k);
        }
        let at = (no - self.ahead.0) as usize * pb;
        assert!(at + pb <= self.ahead.1 as usize * pb, "the page was read");
        out.copy_from_slice(&self.ahead_buf.as_slice()[at..at + pb]);
        Ok(())
    }
}
