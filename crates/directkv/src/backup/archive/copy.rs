//! Checking and copying one log segment into the archive (steps 2 to 4
//! of the module docs, [`super`]), or a partial copy of the segment being
//! written; and comparing a copy found there with the log's.
//!
//! Invariants:
//! - A copy is written as `NAME.tmp` (created exclusively), synced,
//!   renamed to `NAME`, and the directory synced, before it counts. The
//!   rename takes a name nothing holds (refused, atomically, when a file
//!   appeared there during the copy), or replaces a shorter copy of the
//!   same segment compared just before.
//! - Nothing is copied that failed the log reader's checks, and a file in
//!   the archive is replaced only by a copy that holds all its bytes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::state::{Archive, CHECK_CLASS};
use crate::backup::engine::Engine;
use crate::backup::layout::archive_dir_of;
use crate::backup::manifest;
use crate::error::{Error, Result};
use crate::health;
use crate::io::{AlignedBuf, DirectIo, Storage};
use crate::lsn::Lsn;
use crate::sched::crc_files::{self as files, Sink, ALIGN_BYTES, CHUNK_BYTES};
use crate::sched::{IoClass, ScheduledFile};
use crate::wal::format::{
    segment_file_name, Layout, FORMAT_BLOCK_BYTES, RECORD_HEADER_BYTES, RECORD_PAYLOAD_MAX,
    SEGMENT_HEADER_BYTES,
};
use crate::wal::{read_segment_header, WalReader};

/// The suffix of a segment's copy before it is complete.
const TMP_SUFFIX: &str = ".tmp";

/// The file type of the engine `E`'s storage.
type StorageFileOf<E> = <<E as Engine>::S as Storage>::File;

/// The archiver at work: the engine and the archive's state it holds.
pub(super) struct Archiver<'a, E: Engine> {
    /// The open database.
    pub(super) e: &'a E,
    /// Its archiver's state.
    pub(super) archive: &'a Archive,
    /// The log's segment layout.
    pub(super) layout: Layout,
}

impl<'a, E: Engine> Archiver<'a, E> {
    /// The archiver of `e`, if it archives.
    pub(super) fn of(e: &'a E) -> Option<Archiver<'a, E>> {
        let archive = e.archive()?;
        let layout = Layout {
            segment_bytes: e.wal().segment_bytes(),
        };
        assert!(
            layout.segment_bytes > SEGMENT_HEADER_BYTES,
            "a segment holds log"
        );
        Some(Archiver { e, archive, layout })
    }

    /// Checks and copies segment `n` into the archive up to `end` (the
    /// next segment's start for a whole copy, or the durable end inside
    /// `n` for a partial one, zeros after it); returns the bytes copied (0
    /// when an equal copy was there). In a round under way.
    pub(super) fn archive_segment(&self, n: u64, end: Lsn) -> Result<u64> {
        let (archive, layout, storage) = (self.archive, self.layout, self.e.storage());
        assert!(end > layout.segment_start(n) && end <= layout.segment_start(n + 1));
        let name = segment_file_name(n);
        let src_path = self.e.wal().dir().join(&name);
        self.check_segment_records(n, end)?;
        let mut buf = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
        let dir = self.line_dir()?;
        let dest = dir.join(&name);
        // The file offset of `end`: the whole file for a whole copy.
        let upto = SEGMENT_HEADER_BYTES + (end.get() - layout.segment_start(n).get());
        assert!(upto <= layout.segment_bytes);
        let replacing = storage.exists(&dest);
        if replacing {
            // The copy this open made last needs no reading: its bytes are
            // the log's up to where it ended.
            let known = *health::lock(&archive.last_copy)?;
            let found = match known {
                Some((m, was)) if m == n && was == upto => Archived::Same,
                Some((m, was)) if m == n && was < upto => Archived::Shorter,
                _ => self.compare_archived(&dest, &src_path, upto, &mut buf)?,
            };
            match found {
                Archived::Same => {
                    // A copy made before a crash, perhaps renamed but not
                    // yet synced: made durable before it counts.
                    self.open_for_archive(&dest)?
                        .admit(IoClass::Backup, 0)
                        .sync_all()?;
                    storage.sync_dir(&dir)?;
                    *health::lock(&archive.last_copy)? = Some((n, upto));
                    return Ok(0);
                }
                // An earlier partial copy: this one holds it and more.
                Archived::Shorter => {}
                Archived::Differs(offset) => return Err(another_copy(dest, offset, &name)),
            }
        }
        let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
        if storage.exists(&tmp) {
            // A copy interrupted by a crash.
            storage.remove_file(&tmp)?;
        }
        let written = self.copy_segment(&src_path, &tmp, upto, &mut buf)?;
        if replacing {
            // A shorter copy of this segment, compared above.
            storage.rename(&tmp, &dest)?;
        } else if let Err(e) = storage.rename_new(&tmp, &dest) {
            // A file that appeared under the name during the copy is not
            // replaced: the next round compares it.
            storage.remove_file(&tmp)?;
            return Err(e);
        }
        storage.sync_dir(&dir)?;
        *health::lock(&archive.last_copy)? = Some((n, upto));
        Ok(written)
    }

    /// Copies the segment file `src` to the new file `tmp`: its first
    /// `upto` bytes, zeros after them, synced.
    fn copy_segment(
        &self,
        src_path: &Path,
        tmp: &Path,
        upto: u64,
        buf: &mut AlignedBuf,
    ) -> Result<u64> {
        let (layout, storage) = (self.layout, self.e.storage());
        let src = self.open_for_archive(src_path)?;
        let total = src.len()?;
        if total != layout.segment_bytes {
            return Err(Error::Corruption {
                path: src_path.to_path_buf(),
                offset: 0,
                page: None,
                detail: format!(
                    "{total} bytes: not a whole segment of {}",
                    layout.segment_bytes
                ),
            });
        }
        assert!(upto <= total && total % u64::from(ALIGN_BYTES) == 0);
        let mut sink = Sink::create(storage, tmp)?;
        let mut at = 0u64;
        while at < total {
            let k = (total - at).min(buf.len() as u64) as usize;
            let log = upto.saturating_sub(at).min(k as u64) as usize;
            if log > 0 {
                src.read_exact_at(IoClass::Backup, buf.io_mut(0..k)?, at)?;
            }
            buf.as_mut_slice()[log..k].fill(0);
            let _write = self.e.sched().admit(IoClass::Backup, k as u64);
            sink.append(buf, k)?;
            at += k as u64;
        }
        let (written, sink_crc) = sink.finish()?;
        assert_eq!(written, total, "the copy is a whole segment's length");
        debug_assert_eq!(
            files::crc_of(storage, tmp, buf).ok(),
            Some((written, sink_crc)),
            "the copy reads back as written"
        );
        Ok(written)
    }

    /// The directory of the archive that takes the segments of the line of
    /// history the database is on, made (and its entry synced) if missing.
    pub(super) fn line_dir(&self) -> Result<PathBuf> {
        let (root, storage) = (self.archive.dir(), self.e.storage());
        // Read each time: a copy opened from a backup starts a history of
        // its own at its first checkpoint, and archives apart from then on.
        let history = manifest::hex(&self.e.control()?.history);
        let dir = archive_dir_of(root, Some(&history));
        assert!(dir.starts_with(root), "a line's directory is in the root");
        crate::io::create_dir_synced(storage, &dir, self.archive.permissions())?;
        if dir != root {
            // The line's directory may have been made just before a crash
            // that lost the root's sync: its entry is durable before a
            // segment in it lets the log recycle one.
            storage.sync_dir(root)?;
        }
        Ok(dir)
    }

    /// Reads segment `n`'s records up to `to` (where segment `n + 1`
    /// begins, or the durable end inside `n`), each checked as recovery
    /// checks it.
    ///
    /// # Errors
    /// [`Error::Corruption`] naming the segment and offset of damage, or a
    /// log that ends before `to` (which is durable).
    fn check_segment_records(&self, n: u64, to: Lsn) -> Result<()> {
        let layout = self.layout;
        assert!(to > layout.segment_start(n) && to <= layout.segment_start(n + 1));
        let db_id = Some(self.e.control()?.db_id);
        let reader_at = |lsn| {
            WalReader::new(
                self.e.storage().clone(),
                self.e.wal().dir(),
                layout.segment_bytes,
                db_id,
                lsn,
            )
            .scheduled(Arc::clone(self.e.sched()), CHECK_CLASS)
        };
        // A record may run on from the segment before: reading starts at
        // the first record that starts in this one (that record's bytes
        // here were checked with the segment it started in).
        let Some(from) = reader_at(layout.segment_start(n)).first_record_in_segment(n)? else {
            // Only a record longer than the segment's body can leave no
            // record starting in it; past that size a complete segment
            // without one (zeroed, overwritten) is damage.
            // So can a partial copy's end (`to`) inside the bytes where
            // one must start.
            let longest = RECORD_HEADER_BYTES + RECORD_PAYLOAD_MAX as u64;
            let held = to.get() - layout.segment_start(n).get();
            if layout.segment_bytes - SEGMENT_HEADER_BYTES <= longest
                || held <= RECORD_PAYLOAD_MAX as u64 + FORMAT_BLOCK_BYTES
            {
                return Ok(());
            }
            return Err(Error::Corruption {
                path: self.e.wal().dir().join(segment_file_name(n)),
                offset: SEGMENT_HEADER_BYTES,
                page: None,
                detail: format!(
                    "no valid record starts in the segment's first {} bytes, where one must: the \
                     segment is damaged",
                    RECORD_PAYLOAD_MAX as u64 + FORMAT_BLOCK_BYTES
                ),
            });
        };
        if from >= to {
            return Ok(());
        }
        let mut reader = reader_at(from);
        let mut records = 0u64;
        while let Some(rec) = reader.next_record()? {
            if rec.lsn >= to {
                return Ok(());
            }
            records += 1;
        }
        let end = reader.tail().map_or(reader.position(), |t| t.end);
        if end >= to {
            return Ok(());
        }
        Err(Error::Corruption {
            path: self.e.wal().dir().join(segment_file_name(n)),
            offset: layout.file_offset(end.max(from)),
            page: None,
            detail: format!(
                "the log ends at {end} after {records} records, before {to}, which is durable"
            ),
        })
    }
}

/// How the archive's copy of a segment compares with the log's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Archived {
    /// The same: the segment is archived.
    Same,
    /// A partial copy of it: the same bytes up to a point, zeros after.
    Shorter,
    /// Another file, first differing at this offset.
    Differs(u64),
}

/// The failure of finding another segment `name` at `dest`.
fn another_copy(dest: PathBuf, offset: u64, name: &str) -> Error {
    Error::Corruption {
        path: dest,
        offset,
        page: None,
        detail: format!(
            "the archive holds another {name} than the log's (it differs at this offset, and \
             is not a partial copy of it); an archive is never overwritten: give each \
             database its own"
        ),
    }
}

impl<E: Engine> Archiver<'_, E> {
    /// Opens `path` (a segment of the log or of the archive) for the
    /// archiver's reads and syncs, which ask the database's scheduler.
    fn open_for_archive(&self, path: &Path) -> Result<ScheduledFile<StorageFileOf<E>>> {
        Ok(ScheduledFile::new(
            self.e
                .storage()
                .open(path, &files::read_options(DirectIo::Auto))?,
            Arc::clone(self.e.sched()),
        ))
    }

    /// Compares the archive's copy `theirs` with the log's segment `ours`
    /// read as a copy would be made of it now: its first `upto` bytes,
    /// zeros after. Their decoded headers must match; the rest of the
    /// header block is not compared (a recycling that rewrote it, torn by a
    /// crash before the rename, leaves padding that differs).
    fn compare_archived(
        &self,
        theirs: &Path,
        ours: &Path,
        upto: u64,
        buf: &mut AlignedBuf,
    ) -> Result<Archived> {
        let (a, b) = (self.open_for_archive(theirs)?, self.open_for_archive(ours)?);
        let header = |f: &ScheduledFile<StorageFileOf<E>>| {
            read_segment_header(f, CHECK_CLASS)
                .ok()
                .map(|h| (h.segment_no, h.segment_bytes))
        };
        let len = b.len()?;
        if len % u64::from(ALIGN_BYTES) != 0 {
            return Err(files::not_whole_blocks(ours, len));
        }
        if a.len()? != len || header(&a) != header(&b) {
            return Ok(Archived::Differs(0));
        }
        assert!(upto <= len, "a copy is of the segment's bytes");
        let mut mine = AlignedBuf::new(buf.len(), ALIGN_BYTES)?;
        let mut shorter = false;
        let mut at = SEGMENT_HEADER_BYTES.min(len);
        while at < len {
            let k = (len - at).min(buf.len() as u64) as usize;
            a.read_exact_at(CHECK_CLASS, buf.io_mut(0..k)?, at)?;
            let log = upto.saturating_sub(at).min(k as u64) as usize;
            // Past the archive's copy's end only its zeros are checked.
            if log > 0 && !shorter {
                b.read_exact_at(CHECK_CLASS, mine.io_mut(0..k)?, at)?;
            }
            mine.as_mut_slice()[log..k].fill(0);
            let (t, o) = (&buf.as_slice()[..k], &mine.as_slice()[..k]);
            if shorter || t != o {
                // Past the first difference the archive's copy is zeros.
                let from = if shorter { 0 } else { first_difference(t, o) };
                if let Some(i) = t[from..].iter().position(|&x| x != 0) {
                    return Ok(Archived::Differs(at + (from + i) as u64));
                }
                shorter = true;
            }
            at += k as u64;
        }
        Ok(if shorter {
            Archived::Shorter
        } else {
            Archived::Same
        })
    }
}

/// The index of the first byte where `a` and `b` differ (they do).
fn first_difference(a: &[u8], b: &[u8]) -> usize {
    assert_eq!(a.len(), b.len());
    let i = a.iter().zip(b).position(|(x, y)| x != y);
    i.expect("the slices differ")
}
