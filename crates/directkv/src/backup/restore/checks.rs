//! The checks of a backup that do not open it, shared by verify and
//! restore so that restore refuses whatever verify refuses short of the
//! scratch copy's open, with the same error: nothing unlisted, each file's
//! length and CRC32C, `CONTROL`, every page, and the log from the start to
//! past the end.
//!
//! Invariants:
//! - A full backup checked holds exactly its manifest's pages.
//! - An error found in a copy names the backup's file, not the copy's.

use std::path::{Path, PathBuf};

use crate::backup::dir;
use crate::backup::increment;
use crate::backup::layout::{CONTROL_NAME, DATA_NAME, ENTRIES, INCREMENT_NAME, WAL_DIR_NAME};
use crate::backup::manifest::{Manifest, COMPLETE_NAME, MANIFEST_NAME};
use crate::db::ControlFile;
use crate::error::{Error, Result};
use crate::format::{data_head, page, PageId};
use crate::io::{AlignedBuf, DirectIo, Storage, StorageFile};
use crate::sched::crc_files::{self as files, ALIGN_BYTES, CHUNK_BYTES};
use crate::wal::WalReader;

/// What [`check_contents`] read.
pub(super) struct Contents {
    /// Bytes of the files checked against the manifest.
    pub(super) bytes: u64,
    /// Pages checked.
    pub(super) pages: u64,
    /// Log records read from the start to the end of the log.
    pub(super) log_records: u64,
}

/// Every check of the backup in `dir` (whose complete manifest is `m`)
/// that does not open it: nothing unlisted, each file's length and CRC32C,
/// `CONTROL`, every page, and the log from the start to past the end.
/// Verify and restore both run it, so restore refuses whatever verify
/// refuses short of the scratch copy's open, with the same error.
///
/// # Errors
/// [`Error::Corruption`] naming the first damage found; I/O errors.
pub(super) fn check_contents<S: Storage>(
    storage: &S,
    dir: &Path,
    m: &Manifest,
) -> Result<Contents> {
    check_listing(storage, dir, m)?;
    let bytes = dir::check_files(storage, dir, m)?;
    check_control(storage, dir, m)?;
    let pages = check_pages(storage, dir, m)?;
    let log_records = check_log(storage, dir, m)?;
    assert!(
        m.parent_id.is_some() || pages == m.page_count,
        "a full backup checked holds exactly its manifest's pages"
    );
    Ok(Contents {
        bytes,
        pages,
        log_records,
    })
}

/// [`check_contents`] of the full backup in `dir`, short of the listing,
/// run on `copy`: a copy of it whose every file's length and CRC32C were
/// checked against `m` as it was made, so that the backup itself is read
/// once. Its errors name the backup's files, as those of the backup's own
/// check do.
///
/// # Errors
/// As [`check_contents`].
pub(super) fn check_copy<S: Storage>(
    storage: &S,
    copy: &Path,
    dir: &Path,
    m: &Manifest,
) -> Result<Contents> {
    assert!(m.parent_id.is_none(), "a full backup is copied whole");
    assert_ne!(copy, dir, "a copy is another directory");
    let checked = check_control(storage, copy, m).and_then(|()| {
        let pages = check_pages(storage, copy, m)?;
        Ok((pages, check_log(storage, copy, m)?))
    });
    let (pages, log_records) = checked.map_err(|e| named_in(e, copy, dir))?;
    assert_eq!(pages, m.page_count, "check_pages counts the manifest's");
    Ok(Contents {
        bytes: m.files.iter().map(|f| f.len).sum(),
        pages,
        log_records,
    })
}

/// `e`, naming the path it names inside `copy` inside `dir` instead.
fn named_in(e: Error, copy: &Path, dir: &Path) -> Error {
    let rename = |path: PathBuf| match path.strip_prefix(copy) {
        Ok(rest) if rest.as_os_str().is_empty() => dir.to_path_buf(),
        Ok(rest) => dir.join(rest),
        Err(_) => path,
    };
    e.with_path(rename)
}

/// Refuses a file in the backup that its manifest does not list.
pub(super) fn check_listing<S: Storage>(storage: &S, dir: &Path, m: &Manifest) -> Result<()> {
    let listed = |p: &str| m.files.iter().any(|f| f.path == p);
    let unlisted = |path: PathBuf| Error::Corruption {
        path,
        offset: 0,
        page: None,
        detail: "the backup holds a file its manifest does not list".into(),
    };
    for name in storage.list_dir(dir)? {
        // `LOCK` is what an open of the backup, refused, leaves.
        let known = [MANIFEST_NAME, COMPLETE_NAME, WAL_DIR_NAME, "LOCK"].contains(&name.as_str());
        if !known && !listed(&name) {
            return Err(unlisted(dir.join(name)));
        }
    }
    let wal = dir.join(WAL_DIR_NAME);
    for name in storage.list_dir(&wal)? {
        if !listed(&format!("{WAL_DIR_NAME}/{name}")) {
            return Err(unlisted(wal.join(name)));
        }
    }
    Ok(())
}

/// `CONTROL` is a backup's, of the manifest's database, naming its start.
fn check_control<S: Storage>(storage: &S, dir: &Path, m: &Manifest) -> Result<()> {
    let path = dir.join(CONTROL_NAME);
    let c = ControlFile::read(storage, &path)?;
    let problem = if !c.is_backup() {
        Some(
            "CONTROL is not flagged as a backup's: the directory was opened as a database since"
                .to_string(),
        )
    } else if crate::backup::manifest::hex(&c.db_id) != m.db_id {
        Some("CONTROL names another database than the manifest".to_string())
    } else if c.redo_lsn != m.start() || c.checkpoint_lsn.get() != m.checkpoint_lsn {
        Some(format!(
            "CONTROL's checkpoint (redo {}, record end {}) is not the manifest's ({}, {})",
            c.redo_lsn, c.checkpoint_lsn, m.start_lsn, m.checkpoint_lsn
        ))
    } else {
        None
    };
    match problem {
        Some(detail) => Err(Error::Corruption {
            path,
            offset: 0,
            page: None,
            detail,
        }),
        None => Ok(()),
    }
}

/// Every page verifies (checksum, identity, node structure); page 0 names
/// the manifest's start and end. Returns the pages checked. An incremental
/// backup's pages are numbered by its manifest.
fn check_pages<S: Storage>(storage: &S, dir: &Path, m: &Manifest) -> Result<u64> {
    if m.increment_format == ENTRIES {
        return check_entries(storage, dir, m);
    }
    let incremental = m.parent_id.is_some();
    let path = dir.join(if incremental {
        INCREMENT_NAME
    } else {
        DATA_NAME
    });
    let mut numbers = crate::backup::manifest::pages_of(&m.incremental_pages);
    let file = storage.open(&path, &files::read_options(DirectIo::Auto))?;
    let mut buf = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
    // Decoding checked the page size and the id.
    let pb = m.page_bytes as usize;
    assert!(CHUNK_BYTES % pb == 0, "a chunk holds whole pages");
    let db_id = m.db_id_bytes().expect("decoding checked the id");
    let mut pages = 0u64;
    files::read_chunks(&file, &mut buf, |at, bytes| {
        for (i, p) in bytes.chunks(pb).enumerate() {
            let at_no = at / pb as u64 + i as u64;
            let no = if incremental {
                numbers.next().unwrap_or(u64::MAX)
            } else {
                at_no
            };
            check_backup_page(p, PageId::new(no), &db_id, m).map_err(|detail| {
                Error::Corruption {
                    path: path.clone(),
                    offset: at + (i * pb) as u64,
                    page: Some(no),
                    detail,
                }
            })?;
            pages += 1;
        }
        Ok(())
    })?;
    let want = if incremental {
        m.incremental_pages.iter().map(|r| r[1]).sum()
    } else {
        m.page_count
    };
    if pages != want {
        return Err(Error::Corruption {
            path,
            offset: pages * pb as u64,
            page: None,
            detail: format!("{pages} pages, but the manifest says {want}"),
        });
    }
    Ok(pages)
}

/// [`check_pages`] for an incremental backup of entries: page 0 and every
/// whole page verify, every delta applies inside a page, the entries are
/// the pages the manifest lists, as many deltas as it says. Returns the
/// pages checked, deltas not counted: a delta's page is checked when the
/// chain is restored (its CRC32C is in its entry).
fn check_entries<S: Storage>(storage: &S, dir: &Path, m: &Manifest) -> Result<u64> {
    let path = dir.join(INCREMENT_NAME);
    let file = storage.open(&path, &files::read_options(DirectIo::Auto))?;
    let pb = m.page_bytes as usize;
    let db_id = m.db_id_bytes().expect("decoding checked the id");
    let bad = |offset: u64, no: PageId, detail: String| Error::Corruption {
        path: path.clone(),
        offset,
        page: Some(no.get()),
        detail,
    };
    let mut head = AlignedBuf::new(pb, ALIGN_BYTES)?;
    file.read_exact_at(head.io_all_mut(), 0)?;
    let head_no = data_head::DATA_HEAD_PAGE;
    check_backup_page(head.as_slice(), head_no, &db_id, m).map_err(|d| bad(0, head_no, d))?;
    let mut numbers = crate::backup::manifest::pages_of(&m.incremental_pages)
        .filter(|&p| p != 0)
        .map(PageId::new);
    let mut reader = increment::EntryReader::new(file, &path, m)?;
    let mut page = vec![0u8; pb];
    let (mut pages, mut deltas) = (1u64, 0u64);
    while let Some(e) = reader.next_entry()? {
        let want = numbers.next();
        if want != Some(e.page) {
            let d = format!(
                "an entry where the manifest lists {:?}",
                want.map(PageId::get)
            );
            return Err(bad(e.offset, e.page, d));
        }
        match e.kind {
            increment::Kind::Whole => {
                increment::make_page(&path, &e, &reader.body, &mut page)?;
                check_backup_page(&page, e.page, &db_id, m)
                    .map_err(|d| bad(e.offset, e.page, d))?;
            }
            increment::Kind::Delta => {
                increment::apply_delta(&reader.body, &mut page)
                    .map_err(|d| bad(e.offset, e.page, d))?;
                deltas += 1;
                continue;
            }
        }
        pages += 1;
    }
    if let Some(p) = numbers.next() {
        return Err(bad(
            0,
            p,
            "the manifest lists it, but no entry holds it".into(),
        ));
    }
    if deltas != m.pages_as_deltas {
        return Err(Error::Corruption {
            path,
            offset: 0,
            page: None,
            detail: format!(
                "{deltas} deltas, but the manifest says {}",
                m.pages_as_deltas
            ),
        });
    }
    Ok(pages)
}

fn check_backup_page(
    p: &[u8],
    no: PageId,
    db_id: &[u8; 16],
    m: &Manifest,
) -> std::result::Result<(), String> {
    let header = match page::verify(p, no, db_id) {
        Ok(h) => h,
        // Left to the log's image, as the manifest says.
        Err(page::PageError::NeverWritten) if m.pages_from_log.contains(&no.get()) => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    if no == data_head::DATA_HEAD_PAGE {
        let want = data_head::DataHead {
            flushed_through: m.start(),
            log_reached: m.end(),
        };
        if data_head::decode(p) != Some(want) {
            return Err("the data file's head does not name the backup's start and end".into());
        }
    }
    crate::btree::node::validate(p)?;
    if header.lsn > m.end() {
        return Err(format!(
            "its LSN {} is past the backup's end {}",
            header.lsn,
            m.end()
        ));
    }
    Ok(())
}

/// Reads every log record from the start; the log must reach the end.
/// Returns the records read.
fn check_log<S: Storage>(storage: &S, dir: &Path, m: &Manifest) -> Result<u64> {
    let wal = dir.join(WAL_DIR_NAME);
    let mut reader = WalReader::new(storage.clone(), &wal, m.wal_segment_bytes, None, m.start());
    let mut records = 0u64;
    while reader.next_record()?.is_some() {
        records += 1;
    }
    let end = reader.tail().map_or(m.start(), |t| t.end);
    if end < m.end() {
        return Err(Error::Corruption {
            path: wal,
            offset: 0,
            page: None,
            detail: format!(
                "the log ends at LSN {end}, before the backup's end {}: it is damaged",
                m.end()
            ),
        });
    }
    Ok(records)
}
