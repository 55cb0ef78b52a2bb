//! Restoring a backup, or a chain of backups (a full one and the
//! incremental ones on top of it, oldest first), into a new database
//! directory. Each backup passes every check verify makes short of opening
//! a copy (nothing unlisted, each file's length and CRC32C, `CONTROL`,
//! every page, the log reaching the end), so restore refuses what verify
//! refuses, with the same error. Everything is built in `DEST.restore-tmp`,
//! each file's CRC32C checked as it is copied, synced, and the directory
//! renamed to `DEST` last, so a restore that fails or is killed never
//! leaves a `DEST` that looks whole. One full backup is read once: its
//! files are checked as they are copied, the rest of the checks read the
//! copy before the rename (`verify::check_copy`). The backups of a chain
//! are checked where they are first (`verify::check_contents`, which reads
//! each file twice), then read again by the build.
//! The directory holds no backup manifest or marker but the record of the
//! restore (`backup::RESTORED_NAME`): it is a database to be, which verify,
//! restore and incremental backups refuse as a backup.
//!
//! A chain is combined as `pg_combinebackup` does: the full backup's data
//! file, then each increment's pages written over it in chain order (the
//! newest holder of a page wins), then `CONTROL` and the log of the last
//! backup. The result is a backup of the last one's state, with a manifest
//! of its own: its first open replays that log, and its first checkpoint
//! makes it a database.
//!
//! Invariants:
//! - `DEST` appears only by the final rename, after every file and the
//!   directory are synced; on an error the scratch directory is removed.
//! - Every byte written was checked against a manifest's CRC32C, and every
//!   page taken from an increment against the number its run gives it.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::checks::{self, Contents};
use super::pitr::{self, RestoreTarget, RolledForward};
use crate::backup::dir;
use crate::backup::increment;
use crate::backup::layout::{DATA_NAME, ENTRIES, INCREMENT_NAME, WAL_DIR_NAME};
use crate::backup::manifest::{Manifest, MANIFEST_NAME};
use crate::error::{Error, Result};
use crate::format::PageId;
use crate::io::{AlignedBuf, DirectIo, FileOptions, OsStorage, Permissions, Storage, StorageFile};
use crate::sched::crc_files::{self as files, Sink, ALIGN_BYTES, CHUNK_BYTES};
use crate::sched::{IoClass, ScheduledFile, Scheduler};

/// What [`restore_backup`] or [`restore_backup_chain`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreReport {
    /// The backup whose state was restored (the chain's last).
    pub backup_id: String,
    /// Backups combined.
    pub backups: usize,
    /// Pages written from incremental backups over the full one's.
    pub pages_from_increments: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Where the log was carried forward to from an archive
    /// ([`restore_backup_chain_to`]); `None` for a restore of the backups
    /// alone.
    pub rolled_forward: Option<RolledForward>,
}

/// Restores the complete full backup in `backup` into `dest`, which must not
/// exist (see the module docs).
///
/// # Errors
/// As [`restore_backup_chain`]; an incremental backup needs its chain.
pub fn restore_backup(backup: impl AsRef<Path>, dest: impl AsRef<Path>) -> Result<RestoreReport> {
    restore_backup_chain(&[backup.as_ref()], dest)
}

/// Restores a chain of complete backups (a full one, then the incremental
/// ones on top of it in order) into `dest`, which must not exist, as the
/// state of the last.
///
/// # Errors
/// [`Error::IncompleteBackup`] for a backup never completed;
/// [`Error::BackupChain`] naming the link that does not fit (an increment
/// first, a missing link, another database, the wrong order);
/// [`Error::Corruption`] naming a file missing, damaged or unlisted, or
/// the first damage [`verify_backup`](super::verify_backup) finds in a
/// backup (its error);
/// [`Error::InvalidArgument`] for an empty chain, a directory a restore
/// made (a database, no backup) in it, or when `dest` (or its scratch
/// name) exists; I/O errors. On an error nothing is left at `dest`.
pub fn restore_backup_chain<P: AsRef<Path>>(
    chain: &[P],
    dest: impl AsRef<Path>,
) -> Result<RestoreReport> {
    restore_chain(chain, dest.as_ref(), None)
}

fn restore_chain<P: AsRef<Path>>(
    chain: &[P],
    dest: &Path,
    to: Option<(&Path, RestoreTarget)>,
) -> Result<RestoreReport> {
    restore_chain_with(&OsStorage::default(), chain, dest, to, |tmp| {
        let _ = std::fs::remove_dir_all(tmp);
    })
}

/// Restores a chain of complete backups as [`restore_backup_chain`] does,
/// then carries its log forward from the log archive `archive` (see
/// [`Options::wal_archive`](crate::Options::wal_archive)) to `target`: the
/// restored database holds exactly the commits up to the target.
///
/// # Errors
/// As [`restore_backup_chain`]; [`Error::InvalidArgument`] for a target
/// before the last backup's end or beyond what the archive holds;
/// [`Error::Corruption`] naming an archived segment that is damaged or of
/// another database or history. On an error nothing is left at `dest`.
pub fn restore_backup_chain_to<P: AsRef<Path>>(
    chain: &[P],
    archive: impl AsRef<Path>,
    target: RestoreTarget,
    dest: impl AsRef<Path>,
) -> Result<RestoreReport> {
    restore_chain(chain, dest.as_ref(), Some((archive.as_ref(), target)))
}

/// [`restore_backup_chain`] (`to` = `None`) or [`restore_backup_chain_to`]
/// on `storage`; `remove_tree` removes the scratch directory of a restore
/// that failed.
///
/// # Errors
/// As [`restore_backup_chain_to`].
pub fn restore_chain_with<S: Storage, P: AsRef<Path>>(
    storage: &S,
    chain: &[P],
    dest: &Path,
    to: Option<(&Path, RestoreTarget)>,
    remove_tree: impl FnOnce(&Path),
) -> Result<RestoreReport> {
    let chain: Vec<&Path> = chain.iter().map(AsRef::as_ref).collect();
    let ms = dir::check_chain(storage, &chain)?;
    check_destination(storage, &chain, dest)?;
    // Everything verify checks short of opening a copy: a backup verify
    // refuses is refused with the same error. One full backup is checked
    // as it is copied and then on the copy, before the rename (`build`),
    // so it is read once; the links of a chain are checked where they are
    // first, since the build does not copy each whole.
    for (dir, m) in chain.iter().zip(&ms) {
        if chain.len() == 1 {
            checks::check_listing(storage, dir, m)?;
        } else {
            checks::check_contents(storage, dir, m)?;
        }
    }
    restore_checked(storage, &chain, &ms, dest, to, remove_tree).map(|(report, _)| report)
}

/// Refuses a destination inside one of the backups of `chain`, one that
/// exists, and one whose scratch directory exists.
fn check_destination<S: Storage>(storage: &S, chain: &[&Path], dest: &Path) -> Result<()> {
    let tmp = scratch_of(dest);
    let d = crate::io::resolve(dest);
    if let Some(inside) = chain.iter().find(|b| d.starts_with(crate::io::resolve(b))) {
        return Err(Error::InvalidArgument(format!(
            "restore destination {} is inside the backup {}",
            dest.display(),
            inside.display()
        )));
    }
    if storage.exists(dest) {
        return Err(Error::InvalidArgument(format!(
            "restore destination {} exists; restore makes a new directory",
            dest.display()
        )));
    }
    if storage.exists(&tmp) {
        return Err(Error::InvalidArgument(format!(
            "{} exists: a restore into {} was interrupted; remove it and restore again",
            tmp.display(),
            dest.display()
        )));
    }
    Ok(())
}

/// [`restore_chain_with`] of a chain whose links are checked, all but one
/// full backup's contents, which the build checks: `ms` are the links'
/// manifests. Returns what that check read, for one full backup.
pub(super) fn restore_checked<S: Storage>(
    storage: &S,
    chain: &[&Path],
    ms: &[Manifest],
    dest: &Path,
    to: Option<(&Path, RestoreTarget)>,
    remove_tree: impl FnOnce(&Path),
) -> Result<(RestoreReport, Option<Contents>)> {
    assert_eq!(chain.len(), ms.len(), "a manifest per backup");
    assert!(!ms.is_empty(), "check_chain refuses an empty chain");
    check_destination(storage, chain, dest)?;
    let tmp = scratch_of(dest);
    let last = ms.last().expect("a chain has a backup");
    let parent = dest.parent().filter(|p| !p.as_os_str().is_empty());
    // Levels above the destination that the build makes: their entries
    // are synced with the destination's own.
    let made = parent.map_or_else(Vec::new, |p| crate::io::missing_levels(storage, p));
    let built = build(storage, chain, ms, &tmp).and_then(|done| {
        let rolled = match to {
            Some((archive, target)) => {
                Some(pitr::roll_forward(storage, &tmp, last, archive, target)?)
            }
            None => None,
        };
        Ok((done, rolled))
    });
    let ((bytes, pages_from_increments, contents), rolled_forward) = match built {
        Ok(done) => done,
        Err(e) => {
            remove_tree(&tmp);
            return Err(e);
        }
    };
    assert_eq!(
        contents.is_some(),
        ms.len() == 1,
        "exactly a lone full backup's copy is checked as it is built"
    );
    assert!(
        ms.len() > 1 || pages_from_increments == 0,
        "a full backup alone takes no page from an increment"
    );
    if let Err(e) = storage.rename(&tmp, dest) {
        // Something appeared at `dest` since the look above: the restored
        // copy goes, so that a retry is not refused for it.
        remove_tree(&tmp);
        return Err(e);
    }
    crate::io::sync_levels(storage, &made)?;
    storage.sync_dir(parent.unwrap_or(Path::new(".")))?;
    let report = RestoreReport {
        backup_id: last.backup_id.clone(),
        backups: ms.len(),
        pages_from_increments,
        bytes,
        rolled_forward,
    };
    Ok((report, contents))
}

/// Where a restore into `dest` builds it: beside it, named after its last
/// component (the text of `new/` with the suffix appended would put it
/// inside the destination, and the final rename would fail).
fn scratch_of(dest: &Path) -> PathBuf {
    let tmp = match (dest.parent(), dest.file_name()) {
        (Some(parent), Some(name)) => {
            let mut name = name.to_owned();
            name.push(".restore-tmp");
            parent.join(name)
        }
        _ => {
            let mut name = dest.as_os_str().to_owned();
            name.push(".restore-tmp");
            PathBuf::from(name)
        }
    };
    assert!(
        tmp != dest && !tmp.starts_with(dest),
        "the scratch directory is beside the destination, never it or inside it"
    );
    tmp
}

/// Builds the restored directory at `to` from the chain; returns the bytes
/// written, the pages taken from increments and, for one full backup,
/// what the check of its copy read: its contents are checked there.
fn build<S: Storage>(
    storage: &S,
    chain: &[&Path],
    ms: &[Manifest],
    to: &Path,
) -> Result<(u64, u64, Option<Contents>)> {
    assert_eq!(chain.len(), ms.len(), "a manifest per backup");
    assert!(
        ms[0].parent_id.is_none() && ms[1..].iter().all(|m| m.parent_id.is_some()),
        "check_chain made the chain one full backup, then increments"
    );
    storage.create_dirs(to, Permissions::Private)?;
    storage.create_dirs(&to.join(WAL_DIR_NAME), Permissions::Private)?;
    let mut buf = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
    let (first, last) = (&ms[0], ms.last().expect("a chain has a backup"));
    let mut bytes = copy_listed(storage, chain[0], to, first, DATA_NAME, &mut buf)?;
    let mut from_increments = 0;
    for (dir, m) in chain.iter().zip(ms).skip(1) {
        from_increments += apply_increment(storage, dir, m, &to.join(DATA_NAME), &mut buf)?;
    }
    let data = storage.open(&to.join(DATA_NAME), &files::read_options(DirectIo::Auto))?;
    let want = last.page_count * u64::from(last.page_bytes);
    if data.len()? < want {
        return Err(Error::Corruption {
            path: to.join(DATA_NAME),
            offset: data.len()?,
            page: None,
            detail: format!(
                "the combined data file is shorter than the {want} bytes of the last backup's \
                 pages"
            ),
        });
    }
    drop(data);
    let last_dir = chain[chain.len() - 1];
    for f in last
        .files
        .iter()
        .filter(|f| f.path != DATA_NAME && f.path != INCREMENT_NAME)
    {
        bytes += copy_listed(storage, last_dir, to, last, &f.path, &mut buf)?;
    }
    // Every file was checked against its CRC32C as it was copied: the
    // rest of verify's checks read the copy, not the backup again.
    let contents = match ms.len() {
        1 => Some(checks::check_copy(storage, to, chain[0], last)?),
        _ => None,
    };
    storage.sync_dir(&to.join(WAL_DIR_NAME))?;
    storage.sync_dir(to)?;
    let record = if ms.len() == 1 {
        // One full backup: its own manifest, listing the same files, marked
        // as a restore's.
        Manifest {
            restored: true,
            ..last.clone()
        }
    } else {
        dir::combined_manifest(storage, to, last, &mut buf)?
    };
    // No backup manifest or marker: the directory is a database to be,
    // which nothing takes for a backup, wherever it is moved.
    dir::write_restored(storage, to, &record)?;
    Ok((bytes, from_increments, contents))
}

/// Copies the file `name` that `m` lists from `from` to `to`, checking its
/// length and CRC32C as it goes; returns its length.
fn copy_listed<S: Storage>(
    storage: &S,
    from: &Path,
    to: &Path,
    m: &Manifest,
    name: &str,
    buf: &mut AlignedBuf,
) -> Result<u64> {
    let src_path = from.join(name);
    let Some(f) = m.files.iter().find(|f| f.path == name) else {
        return Err(Error::Corruption {
            path: from.join(MANIFEST_NAME),
            offset: 0,
            page: None,
            detail: format!("the manifest does not list {name}"),
        });
    };
    if !storage.exists(&src_path) {
        return Err(Error::Corruption {
            path: src_path,
            offset: 0,
            page: None,
            detail: "a file the backup's manifest lists is missing".into(),
        });
    }
    let src = storage.open(&src_path, &files::read_options(DirectIo::Auto))?;
    let mut sink = Sink::create(storage, &to.join(name))?;
    let len = files::whole_blocks_len(&src)?;
    let src = ScheduledFile::new(src, Scheduler::fifo());
    files::copy_into((&src, IoClass::Backup), len, &mut sink, buf, |_| ())?;
    let (len, crc) = sink.finish()?;
    if (len, crc) != (f.len, f.crc32c) {
        return Err(f.mismatch(src_path, (len, crc)));
    }
    Ok(len)
}

/// Writes the pages of the incremental backup in `dir` over the data file
/// at `data`, each where its number says; returns how many.
fn apply_increment<S: Storage>(
    storage: &S,
    dir: &Path,
    m: &Manifest,
    data: &Path,
    buf: &mut AlignedBuf,
) -> Result<u64> {
    let pb = u64::from(m.page_bytes);
    let src = storage.open(
        &dir.join(INCREMENT_NAME),
        &files::read_options(DirectIo::Auto),
    )?;
    let out = storage.open(
        data,
        &FileOptions {
            direct_io: DirectIo::Auto,
            ..FileOptions::default()
        },
    )?;
    if m.increment_format == ENTRIES {
        return apply_entries(dir, m, src, &out, buf);
    }
    let listed: u64 = m.incremental_pages.iter().map(|r| r[1]).sum();
    if files::whole_blocks_len(&src)? != listed * pb {
        return Err(Error::Corruption {
            path: dir.join(INCREMENT_NAME),
            offset: 0,
            page: None,
            detail: format!("not the {listed} pages its manifest lists"),
        });
    }
    let per_chunk = buf.len() as u64 / pb;
    let mut at = 0u64;
    for &[first, count] in &m.incremental_pages {
        let mut done = 0;
        while done < count {
            let k = (count - done).min(per_chunk);
            let n = (k * pb) as usize;
            src.read_exact_at(buf.io_mut(0..n)?, at)?;
            // Both sides of the disk: each page is the one its run says.
            for (i, page) in buf.as_slice()[..n].chunks(pb as usize).enumerate() {
                m.page_ok(page, first + done + i as u64)
                    .map_err(|detail| Error::Corruption {
                        path: dir.join(INCREMENT_NAME),
                        offset: at + i as u64 * pb,
                        page: Some(first + done + i as u64),
                        detail,
                    })?;
            }
            out.write_all_at(buf.io(0..n)?, (first + done) * pb)?;
            at += n as u64;
            done += k;
        }
    }
    out.sync_all()?;
    Ok(listed)
}

/// [`apply_increment`] for a backup of [`ENTRIES`]: page 0, then
/// each entry's page, made over the data file's (a delta), checked and
/// written, a window of up to a chunk of pages at a time.
fn apply_entries<F: StorageFile>(
    dir: &Path,
    m: &Manifest,
    src: F,
    out: &F,
    buf: &mut AlignedBuf,
) -> Result<u64> {
    let pb = m.page_bytes as usize;
    let path = dir.join(INCREMENT_NAME);
    let bad = |offset: u64, detail: String| Error::Corruption {
        path: path.clone(),
        offset,
        page: None,
        detail,
    };
    src.read_exact_at(buf.io_mut(0..pb)?, 0)?;
    m.page_ok(&buf.as_slice()[..pb], 0).map_err(|d| bad(0, d))?;
    out.write_all_at(buf.io(0..pb)?, 0)?;
    let mut numbers = crate::backup::manifest::pages_of(&m.incremental_pages)
        .filter(|&p| p != 0)
        .map(PageId::new);
    let mut reader = increment::EntryReader::new(src, &path, m)?;
    let per_chunk = (buf.len() / pb) as u64;
    let mut window: Vec<(increment::Entry, Vec<u8>)> = Vec::new();
    let mut next = reader.next_entry()?;
    let mut made = 1u64;
    while let Some(first) = next {
        window.clear();
        // Page numbers are checked against the manifest's (below its page
        // count) as they come; the first one before this sum.
        let end = first.page.get().saturating_add(per_chunk);
        while let Some(e) = next.filter(|e| window.is_empty() || e.page.get() < end) {
            let want = numbers.next();
            if want != Some(e.page) {
                let d = format!(
                    "an entry of page {}, where the manifest lists {:?}",
                    e.page,
                    want.map(PageId::get)
                );
                return Err(bad(e.offset, d));
            }
            window.push((e, reader.body.clone()));
            next = reader.next_entry()?;
        }
        make_window(m, &path, out, &window, buf)?;
        made += window.len() as u64;
    }
    if let Some(p) = numbers.next() {
        return Err(bad(
            0,
            format!("no entry for page {p}, which the manifest lists"),
        ));
    }
    out.sync_all()?;
    Ok(made)
}

/// Makes the pages of `window` (entries in page order, at most a chunk
/// apart, read from `path`) over the data file `out`'s, checks them, and
/// writes the window back.
fn make_window<F: StorageFile>(
    m: &Manifest,
    path: &Path,
    out: &F,
    window: &[(increment::Entry, Vec<u8>)],
    buf: &mut AlignedBuf,
) -> Result<()> {
    let pb = m.page_bytes as usize;
    let first = window
        .first()
        .expect("a window holds an entry")
        .0
        .page
        .get();
    let last = window.last().expect("a window holds an entry").0.page.get();
    let span = (last - first + 1) as usize;
    assert!(span * pb <= buf.len(), "a window fits the buffer");
    let in_file = (out.len()? / pb as u64).saturating_sub(first) as usize;
    let have = span.min(in_file);
    if have > 0 {
        out.read_exact_at(buf.io_mut(0..have * pb)?, first * pb as u64)?;
    }
    buf.as_mut_slice()[have * pb..span * pb].fill(0);
    for (e, body) in window {
        let i = (e.page.get() - first) as usize;
        let bad = |detail: String| Error::Corruption {
            path: path.to_path_buf(),
            offset: e.offset,
            page: None,
            detail,
        };
        if e.kind == increment::Kind::Delta && i >= have {
            let d = format!("page {}: a delta, but no earlier backup holds it", e.page);
            return Err(bad(d));
        }
        let page = &mut buf.as_mut_slice()[i * pb..(i + 1) * pb];
        increment::make_page(path, e, body, page)?;
        m.page_ok(page, e.page.get()).map_err(bad)?;
    }
    out.write_all_at(buf.io(0..span * pb)?, first * pb as u64)?;
    Ok(())
}
