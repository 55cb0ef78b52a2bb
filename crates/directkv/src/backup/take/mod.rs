//! Taking an online backup of the open database (docs/backup.md): a fuzzy
//! copy of the data file's pages plus the log from a checkpoint's redo
//! point to past the last page copied, as `pg_basebackup` does.
//!
//! The steps:
//! 1. A checkpoint runs (paced like a background one, or at full speed with
//!    `BackupOptions::fast_checkpoint`); with its lock still held, the log
//!    is pinned at its redo point R, so no later checkpoint recycles a
//!    segment the backup needs.
//! 2. `CONTROL` is written into the backup first, naming that checkpoint
//!    and flagged [`FLAG_BACKUP`]: an interrupted backup is recognisably
//!    one, and open refuses it without the completion marker.
//! 3. Pages 1 to the checkpoint's page count are read in 1 MiB direct reads
//!    in the scheduler's `Backup` class (below every other), each checked
//!    (checksum, identity, node structure, LSN not past the durable log).
//!    A page that fails is read again under its frame's shared latch (a
//!    write-back holds the exclusive one for its whole write, so a torn
//!    read cannot repeat); still failing, it is accepted only if the pool
//!    holds it changed since R (its first change since R logged a full
//!    image, which replay installs without reading the page); it is then
//!    copied as zeros and listed in the manifest. Otherwise the backup
//!    fails, naming the page.
//! 4. The log is flushed, and its durable end E taken. Segments from R's to
//!    E's are copied, everything at and after E zeroed: bytes before E are
//!    never rewritten (a flush ends on an I/O-unit boundary), so the copy
//!    ends in a clean end of log exactly at E.
//! 5. Page 0, the data file's head, is written last with `flushed_through`
//!    R and `log_reached` E: open then refuses the backup unless its log
//!    reaches E, the point where the fuzzy pages are consistent.
//! 6. Every file and directory is synced; the manifest, then the
//!    completion marker, are written and synced.
//!
//! The database is reached only through [`Engine`] (its checkpoint and
//! log pin, `CONTROL`, summaries, pool and archive); `pages.rs` reads and
//! checks the pages.
//!
//! Invariants:
//! - R ≤ the checkpoint record's end ≤ E, and every page copied has an LSN
//!   at most E.
//! - While a backup runs, no log segment from R's on is recycled.

pub(crate) mod pages;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use self::pages::{Pace, PageCopy, PageCounts, PagesOut, Take};
use crate::backup::engine::{ChangedPages, Checkpointed, Engine, Progress};
use crate::backup::increment::chain::{find_chain, ChainPages};
use crate::backup::increment::EntryWriter;

use crate::backup::manifest::{self, Manifest, ManifestFile, MANIFEST_FORMAT};
use crate::backup::{BackupOptions, BackupReport, WAL_DIR_NAME};
use crate::error::{Error, Result};
use crate::format::control::{Control, FLAG_BACKUP};
use crate::format::{data_head, page, PageId};
use crate::io::{AlignedBuf, Permissions, Storage};
use crate::lsn::Lsn;
use crate::sched::crc_files::{self as files, Sink, ALIGN_BYTES, CHUNK_BYTES};
use crate::sched::{IoClass, ScheduledFile};
use crate::wal::format::{segment_file_name, Layout};

/// Holds the log from an LSN on while it lives.
struct LogPin<'a, E: Engine> {
    e: &'a E,
    lsn: Lsn,
}

impl<E: Engine> Drop for LogPin<'_, E> {
    fn drop(&mut self) {
        self.e.unpin_log(self.lsn);
    }
}

/// Counts a running backup in `stats().backup` while it lives.
struct Running<'a, E: Engine>(&'a E);

impl<'a, E: Engine> Running<'a, E> {
    fn start(e: &'a E, pages: u64) -> Running<'a, E> {
        e.progress(Progress::Started { pages });
        Running(e)
    }
}

impl<E: Engine> Drop for Running<'_, E> {
    fn drop(&mut self) {
        self.0.progress(Progress::Ended);
    }
}

/// Takes a backup of the engine `e` into `dest` (see the module docs).
///
/// # Errors
/// As [`Database::backup`](crate::Database::backup).
pub(crate) fn backup<E: Engine>(e: &E, dest: &Path, opts: &BackupOptions) -> Result<BackupReport> {
    Take::new(e).backup(dest, opts)
}

/// What [`Take::copy_files`] wrote.
struct Copied {
    /// The log's end in the backup.
    end: Lsn,
    /// The files, with their lengths and CRCs.
    listed: Vec<ManifestFile>,
    data_bytes: u64,
    wal_bytes: u64,
    counts: PageCounts,
    /// An incremental backup's pages written as deltas.
    deltas: u64,
}

impl<E: Engine> Take<'_, E> {
    /// Whether the backup in `dir` was never opened as a database (its
    /// `CONTROL` still carries the backup flag).
    fn unopened_backup(&self, dir: &Path) -> bool {
        let path = dir.join(crate::backup::CONTROL_NAME);
        self.e.read_control(&path).is_ok_and(|c| c.is_backup())
    }

    /// The pages changed from `since` (an incremental backup's parent's
    /// start) to `redo`, from the summaries when they cover the range;
    /// `None`: every page is read.
    fn changed_since(&self, since: Option<Lsn>, redo: Lsn) -> Result<Option<ChangedPages>> {
        let Some(from) = since else { return Ok(None) };
        self.e.changed_pages(from, redo)
    }

    /// Checks `dest` and makes it, with its log directory, if missing;
    /// returns the directory levels above the log directory it made, or
    /// `dest` alone when it was there (made by the caller, its entry may not
    /// be durable yet). Their entries are synced once the backup is sealed:
    /// until then a power cut may take the directory (the backup is not
    /// done). The log directory
    /// is made with it, so a backup killed at once leaves a directory an
    /// open refuses (it holds what no database creation leaves), not an
    /// empty one an open would make a database in.
    fn make_dest<'a>(&self, dest: &'a Path, parent: Option<&Path>) -> Result<Vec<&'a Path>> {
        self.check_backup_dest(dest, parent)?;
        let mut made = crate::io::missing_levels(self.e.storage(), dest);
        if made.is_empty() {
            made.push(dest);
        }
        self.e
            .storage()
            .create_dirs(&dest.join(WAL_DIR_NAME), Permissions::Private)?;
        Ok(made)
    }

    /// Backs the open database up into `dest` (see the module docs).
    pub(super) fn backup(&self, dest: &Path, opts: &BackupOptions) -> Result<BackupReport> {
        let began = Instant::now();
        let started_unix_ms = unix_ms();
        // An increment on a parent it cannot build on is refused before
        // anything is made.
        let parent = opts
            .incremental_from
            .as_deref()
            .map(|p| self.incremental_parent(p))
            .transpose()?;
        let made = self.make_dest(dest, opts.incremental_from.as_deref())?;
        let (cp, _pin) = self.backup_start(opts)?;
        let _running = Running::start(self.e, cp.meta.page_count - 1);
        let since = parent.as_ref().map(Manifest::start);
        // The backups the parent builds on, for deltas against its pages.
        let chain = match &opts.incremental_from {
            // The chain is found or done without: looking for it fails
            // nothing.
            Some(p) => {
                find_chain(self.e.storage(), p, |dir| self.unopened_backup(dir)).unwrap_or(None)
            }
            None => None,
        };
        let listed = self.changed_since(since, cp.redo)?;
        // The rate counts from the copy's start, not the checkpoint's.
        let storage = self.e.storage();
        let pace = Pace {
            rate: opts.rate_bytes,
            began: Instant::now(),
            moved: 0,
            dest_shares_device: storage.stat(dest)?.dev == storage.stat(self.e.dir())?.dev,
        };
        let mut c = self.copy_files(dest, &cp, since, listed.as_ref(), chain.as_deref(), pace)?;
        let mut m = self.manifest(&cp, c.end, started_unix_ms, std::mem::take(&mut c.listed))?;
        let from_log = c.counts.from_log.len() as u64;
        m.pages_from_log = std::mem::take(&mut c.counts.from_log)
            .into_iter()
            .map(PageId::get)
            .collect();
        if let Some(p) = &parent {
            note_increment(&mut m, p, &c, listed.is_some());
        }
        m.pages_scanned = c.counts.scanned;
        let archive_failure = self.archive_for_backup(c.end);
        crate::backup::seal(self.e.storage(), dest, &m)?;
        crate::io::sync_levels(self.e.storage(), &made)?;
        self.e.progress(Progress::Sealed);
        Ok(BackupReport {
            incremental: parent.is_some(),
            pages_scanned: c.counts.scanned,
            pages_copied: if since.is_some() {
                1 + c.counts.copied.len() as u64
            } else {
                cp.meta.page_count
            },
            backup_id: m.backup_id,
            start_lsn: cp.redo,
            checkpoint_lsn: cp.record_end,
            end_lsn: c.end,
            pages: cp.meta.page_count,
            data_bytes: c.data_bytes,
            wal_bytes: c.wal_bytes,
            pages_reread: c.counts.reread,
            pages_covered_by_log: from_log,
            pages_as_deltas: c.deltas,
            delta_chain_links: chain.map(|c| c.len() as u64),
            micros: began.elapsed().as_micros() as u64,
            archive_failure,
        })
    }

    /// Brings the log archive up to the end of a backup about to be sealed
    /// ([`archive::through`](crate::backup::archive::through)); returns why it could
    /// not. The backup is whole without: its restore keeps its own last
    /// segment where the archive's copy of it is shorter. A failure is
    /// counted in the archive's stats too.
    fn archive_for_backup(&self, end: Lsn) -> Option<String> {
        let failed = crate::backup::archive::through(self.e, end).err();
        assert!(
            failed.is_none() || self.e.archive_dir().is_some(),
            "only with an archive"
        );
        failed.map(|e| e.to_string())
    }

    /// Writes the backup's files into `dest` (see the module docs, steps 2
    /// to 6 but the manifest): `CONTROL`, the pages (all, or those changed
    /// after `since`, as deltas against `chain` where it is given), the log
    /// to its durable end, page 0; synced.
    fn copy_files(
        &self,
        dest: &Path,
        cp: &Checkpointed,
        since: Option<Lsn>,
        listed: Option<&ChangedPages>,
        chain: Option<&[PathBuf]>,
        pace: Pace,
    ) -> Result<Copied> {
        let control_path = self.write_backup_control(dest, cp)?;
        let mut buf = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
        let data_name = match since {
            Some(_) => crate::backup::INCREMENT_NAME,
            None => crate::backup::DATA_NAME,
        };
        let mut run = PageCopy {
            cp,
            since,
            pace,
            counts: PageCounts {
                db_id: self.e.control()?.db_id,
                ..PageCounts::default()
            },
            out: self.pages_out(&dest.join(data_name), since.is_some(), chain)?,
        };
        match listed.filter(|_| since.is_some()) {
            Some(pages) => self.copy_listed_pages(&mut run, pages, &mut buf)?,
            None => self.copy_pages(&mut run)?,
        }
        let PageCopy {
            mut pace,
            counts,
            out,
            ..
        } = run;
        let (data, deltas) = out.finish()?;
        let end = {
            let wal = self.e.wal();
            wal.flush(wal.end_lsn())?;
            wal.durable_lsn()
        };
        assert!(
            cp.redo < cp.record_end && cp.record_end <= end,
            "the backup's log holds its checkpoint"
        );
        let mut listed = vec![file_entry(
            crate::backup::CONTROL_NAME,
            files::crc_of(self.e.storage(), &control_path, &mut buf)?,
        )];
        let (data_bytes, crc) = self.finish_data(data, cp, end)?;
        listed.push(file_entry(data_name, (data_bytes, crc)));
        let wal_dest = dest.join(WAL_DIR_NAME);
        let wal_bytes = self.copy_log(&wal_dest, cp.redo, end, &mut buf, &mut pace, &mut listed)?;
        self.e.storage().sync_dir(&wal_dest)?;
        self.e.storage().sync_dir(dest)?;
        Ok(Copied {
            end,
            listed,
            data_bytes,
            wal_bytes,
            counts,
            deltas,
        })
    }

    /// Writes the backup's `CONTROL` into `dest`; returns its path. It is
    /// the backup's file, not the database's: its 8 KiB take no permit of
    /// the database's scheduler (a FIFO one of its own).
    fn write_backup_control(&self, dest: &Path, cp: &Checkpointed) -> Result<PathBuf> {
        let path = dest.join(crate::backup::CONTROL_NAME);
        let control = self.backup_control(cp)?;
        self.e.create_control(&path, control)?;
        Ok(path)
    }

    /// Where the pages go: a new file at `path`, page 0 left for last,
    /// holding whole pages, or an incremental backup's entries (deltas
    /// against `chain` where it is given).
    fn pages_out(
        &self,
        path: &Path,
        incremental: bool,
        chain: Option<&[PathBuf]>,
    ) -> Result<PagesOut<E::S>> {
        let mut sink = Sink::create(self.e.storage(), path)?;
        sink.skip(self.e.page_bytes());
        if !incremental {
            return Ok(PagesOut::Whole(sink));
        }
        let chain_shares_device = match chain {
            Some(c) => {
                let (theirs, ours) = (
                    self.e.storage().stat(&c[0]),
                    self.e.storage().stat(self.e.dir()),
                );
                matches!((theirs, ours), (Ok(t), Ok(o)) if t.dev == o.dev)
            }
            None => false,
        };
        Ok(PagesOut::Entries {
            writer: EntryWriter::new(sink)?,
            // A chain that does not open is done without (whole pages).
            chain: chain.and_then(|c| ChainPages::open(self.e.storage(), c).ok().map(Box::new)),
            chain_failed: false,
            chain_shares_device,
            base: Vec::new(),
        })
    }

    /// The manifest of a backup that began with `cp` and ends at `end`.
    fn manifest(
        &self,
        cp: &Checkpointed,
        end: Lsn,
        started_unix_ms: u64,
        files: Vec<ManifestFile>,
    ) -> Result<Manifest> {
        assert!(
            cp.redo <= cp.record_end && cp.record_end <= end,
            "a backup's log runs from its redo point past its checkpoint's record"
        );
        assert!(!files.is_empty(), "a backup lists at least its CONTROL");
        Ok(Manifest {
            format: MANIFEST_FORMAT,
            backup_id: manifest::hex(&self.e.new_id()),
            db_id: manifest::hex(&self.e.control()?.db_id),
            page_bytes: self.e.page_bytes() as u32,
            parent_id: None,
            start_lsn: cp.redo.get(),
            checkpoint_lsn: cp.record_end.get(),
            end_lsn: end.get(),
            page_count: cp.meta.page_count,
            wal_segment_bytes: self.e.wal().segment_bytes(),
            started_unix_ms,
            finished_unix_ms: unix_ms(),
            files,
            pages_from_log: Vec::new(),
            parent_start_lsn: None,
            incremental_pages: Vec::new(),
            changed_pages_method: None,
            pages_scanned: 0,
            // 0: no commit yet (or, for a database whose last commit was
            // written by a build whose records carried no time, unknown).
            start_commit_time_us: Some(cp.commit_time_us),
            increment_format: crate::backup::layout::WHOLE_PAGES,
            pages_as_deltas: 0,
            history_id: Some(manifest::hex(&self.e.control()?.history)),
            restored: false,
        })
    }

    /// The manifest of `dir`, the complete backup of this database an
    /// incremental backup is to build on.
    fn incremental_parent(&self, dir: &Path) -> Result<Manifest> {
        let m = crate::backup::complete_manifest(self.e.storage(), dir)?;
        let ours = manifest::hex(&self.e.control()?.db_id);
        let durable = self.e.wal().durable_lsn();
        let control = dir.join(crate::backup::CONTROL_NAME);
        let opened = !self.e.read_control(&control)?.is_backup();
        let history = manifest::hex(&self.e.control()?.history);
        let detail = if opened {
            Some("it was opened as a database since it was taken: it is no longer a backup".into())
        } else if m.db_id != ours {
            Some(format!(
                "it is a backup of database {}, not of this one ({ours})",
                m.db_id
            ))
        } else if m.history() != history {
            Some(format!(
                "it was taken on history {} of this database, and the database is on history \
                 {history} (a copy restored from a backup starts a history of its own): pages \
                 changed on the other line would be missed; take a full backup",
                m.history()
            ))
        } else if m.end() > durable {
            Some(format!(
                "it ends at LSN {}, past this database's log ({durable}): it is not a backup of \
                 this database's past",
                m.end_lsn
            ))
        } else {
            None
        };
        match detail {
            Some(detail) => Err(Error::BackupChain {
                path: dir.to_path_buf(),
                detail,
            }),
            None => Ok(m),
        }
    }

    /// Refuses a destination that overlaps the database's, its log's or its
    /// log archive's directory or the increment's `parent`, or one that
    /// holds anything.
    fn check_backup_dest(&self, dest: &Path, parent: Option<&Path>) -> Result<()> {
        let abs = crate::io::resolve;
        let d = abs(dest);
        let wal = self.e.wal().dir().to_path_buf();
        let archive = self.e.archive_dir();
        let others = [
            ("database", Some(self.e.dir())),
            ("log", Some(wal.as_path())),
            ("log archive", archive.as_deref()),
            ("parent backup", parent),
        ];
        for (what, dir) in others.into_iter().filter_map(|(w, d)| Some((w, d?))) {
            let dir = abs(dir);
            if d.starts_with(&dir) || dir.starts_with(&d) {
                return Err(Error::InvalidArgument(format!(
                    "backup destination {} overlaps the {what} directory {}",
                    dest.display(),
                    dir.display()
                )));
            }
        }
        if self.e.storage().exists(dest) && !self.e.storage().list_dir(dest)?.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "backup destination {} exists and is not empty",
                dest.display()
            )));
        }
        Ok(())
    }

    /// Runs the backup's checkpoint and pins the log at its redo point
    /// before any later checkpoint can recycle it.
    fn backup_start(&self, opts: &BackupOptions) -> Result<(Checkpointed, LogPin<'_, E>)> {
        let cp = self.e.checkpoint_and_pin(opts.fast_checkpoint)?;
        assert!(
            cp.redo < cp.record_end,
            "a checkpoint's record follows its redo point"
        );
        Ok((
            cp,
            LogPin {
                e: self.e,
                lsn: cp.redo,
            },
        ))
    }

    /// The backup's `CONTROL`: the checkpoint that began it, flagged.
    fn backup_control(&self, cp: &Checkpointed) -> Result<Control> {
        let c = self.e.control()?;
        assert!(
            c.redo_lsn >= cp.redo,
            "CONTROL names this checkpoint or a later one"
        );
        Ok(Control {
            generation: 0,
            checkpoint_lsn: cp.record_end,
            redo_lsn: cp.redo,
            root_page: cp.meta.root,
            catalog: cp.meta.catalog,
            page_count: cp.meta.page_count,
            freelist_head: cp.meta.freelist,
            free_pages: cp.meta.free_pages,
            compaction: cp.meta.compaction,
            flags: c.flags | FLAG_BACKUP,
            ..c
        })
    }

    /// Writes the backup's page 0 (the data file's head: flushed through
    /// the redo point, the log reaching `end`) and syncs the file.
    fn finish_data(&self, mut data: Sink<E::S>, cp: &Checkpointed, end: Lsn) -> Result<(u64, u32)> {
        let pb = self.e.page_bytes();
        let mut head = AlignedBuf::new(pb, ALIGN_BYTES)?;
        let p = head.as_mut_slice();
        crate::btree::tree::init_free(p, PageId::ZERO);
        data_head::encode(
            p,
            data_head::DataHead {
                flushed_through: cp.redo,
                log_reached: end,
            },
        );
        page::seal(
            p,
            &page::PageHeader {
                page_type: page::PageType::Free,
                flags: 0,
                tree: 0,
                page_no: data_head::DATA_HEAD_PAGE,
                lsn: cp.redo,
                db_id: self.e.control()?.db_id,
            },
        );
        data.write_first(&head, pb)?;
        data.finish()
    }

    /// Copies the log segments from `from`'s to `end`'s into `dest`, with
    /// everything at and after `end` zeroed, listing each file. Returns the
    /// bytes copied.
    fn copy_log(
        &self,
        dest: &Path,
        from: Lsn,
        end: Lsn,
        buf: &mut AlignedBuf,
        pace: &mut Pace,
        listed: &mut Vec<ManifestFile>,
    ) -> Result<u64> {
        let layout = Layout {
            segment_bytes: self.e.wal().segment_bytes(),
        };
        let (first, last) = (layout.segment_of(from), layout.segment_of(end));
        let mut copied = 0u64;
        for n in first..=last {
            let name = segment_file_name(n);
            let src_path = self.e.wal().dir().join(&name);
            if n == last && !self.e.storage().exists(&src_path) && layout.segment_start(n) == end {
                // The log ends exactly where segment `n` would begin.
                break;
            }
            // Bytes of the segment file that hold log before `end`.
            let keep = if n == last {
                layout.file_offset(end)
            } else {
                layout.segment_bytes
            };
            let src = ScheduledFile::new(
                self.e
                    .storage()
                    .open(&src_path, &crate::wal::reader_options())?,
                Arc::clone(self.e.sched()),
            );
            let dest_path = dest.join(&name);
            let mut sink = Sink::create(self.e.storage(), &dest_path)?;
            let mut at = 0u64;
            while at < layout.segment_bytes {
                let n_bytes = (layout.segment_bytes - at).min(buf.len() as u64) as usize;
                // Past `keep` nothing is read: the rest of the segment is
                // zeros, written but not counted against the rate.
                let read = keep.saturating_sub(at).min(n_bytes as u64) as usize;
                if read > 0 {
                    let whole = read.next_multiple_of(ALIGN_BYTES as usize).min(n_bytes);
                    src.read_exact_at(IoClass::Backup, buf.io_mut(0..whole)?, at)?;
                }
                buf.as_mut_slice()[read..n_bytes].fill(0);
                {
                    let _permit = self.write_permit(pace, n_bytes);
                    sink.append(buf, n_bytes)?;
                }
                pace.moved(read);
                self.e.progress(Progress::Copied {
                    pages: 0,
                    bytes: n_bytes as u64,
                });
                at += n_bytes as u64;
            }
            let (len, crc) = sink.finish()?;
            copied += len;
            listed.push(file_entry(&format!("{WAL_DIR_NAME}/{name}"), (len, crc)));
        }
        Ok(copied)
    }
}

/// Fills in the manifest `m` of an incremental backup of `parent` that
/// wrote `c`, its pages found from the summaries or by a scan.
fn note_increment(m: &mut Manifest, parent: &Manifest, c: &Copied, from_summaries: bool) {
    m.parent_id = Some(parent.backup_id.clone());
    m.parent_start_lsn = Some(parent.start_lsn);
    m.incremental_pages =
        manifest::runs(std::iter::once(0).chain(c.counts.copied.iter().map(|p| p.get())));
    m.increment_format = crate::backup::layout::ENTRIES;
    m.format = manifest::MANIFEST_FORMAT_ENTRIES;
    m.pages_as_deltas = c.deltas;
    let method = match from_summaries {
        true => manifest::WAL_SUMMARY,
        false => manifest::PAGE_LSN_SCAN,
    };
    m.changed_pages_method = Some(method.into());
}

fn file_entry(path: &str, (len, crc32c): (u64, u32)) -> ManifestFile {
    ManifestFile {
        path: path.to_string(),
        len,
        crc32c,
    }
}

/// Milliseconds since the epoch (zero for a clock before it).
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
