//! The backup manifest and the completion marker: what a backup holds, and
//! the proof that it was finished.
//!
//! `backup_manifest` is JSON (the fields of [`Manifest`]) followed by one
//! line `crc32c XXXXXXXX\n`, the CRC32C of every byte before that line.
//! `backup_complete` is one line, `directkv-backup-complete ID XXXXXXXX\n`:
//! the backup's id and its manifest's CRC. It is written last, after every
//! file and the manifest are synced, so its presence (matching the
//! manifest) is what makes a backup complete.
//!
//! Invariants:
//! - A manifest that decodes has been checked field by field (LSNs in
//!   order, sizes and a page count a database has, page runs ascending from page 0 below the
//!   page count, only a backup's file names), so readers act on it without
//!   further doubt.

use serde::{Deserialize, Serialize};

use super::layout::{CONTROL_NAME, DATA_NAME, ENTRIES, INCREMENT_NAME, WAL_DIR_NAME, WHOLE_PAGES};
use crate::error::{Error, Result};
use crate::lsn::Lsn;
use crate::wal::format::{
    parse_segment_file_name, SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN, SEGMENT_HEADER_BYTES,
};

/// The manifest's file name inside a backup.
pub const MANIFEST_NAME: &str = "backup_manifest";
/// The completion marker's file name inside a backup.
pub const COMPLETE_NAME: &str = "backup_complete";
/// The manifest format of backups whose files builds before incremental
/// entries read as well (full backups, increments of whole pages).
pub const MANIFEST_FORMAT: u32 = 1;
/// The manifest format of an increment of entries (`increment_format` 1):
/// builds that knew only format 1 refuse it rather than read its entries
/// as whole pages.
pub const MANIFEST_FORMAT_ENTRIES: u32 = 2;
const MARKER_PREFIX: &str = "directkv-backup-complete";

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    /// Its path inside the backup, `/`-separated.
    pub path: String,
    /// Its length in bytes.
    pub len: u64,
    /// The CRC32C of its bytes.
    pub crc32c: u32,
}

impl ManifestFile {
    /// The error for a file whose length and CRC32C (`found`) are not the
    /// ones its manifest lists.
    pub(crate) fn mismatch(&self, path: std::path::PathBuf, found: (u64, u32)) -> Error {
        Error::Corruption {
            path,
            offset: 0,
            page: None,
            detail: format!(
                "{} bytes with CRC32C {:08x}, but the manifest lists {} bytes with {:08x}: the \
                 file is damaged or was replaced",
                found.0, found.1, self.len, self.crc32c
            ),
        }
    }
}

/// What a backup holds (see the module docs for the file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The manifest format (this build writes 1).
    pub format: u32,
    /// This backup's identity (32 hex digits).
    pub backup_id: String,
    /// The database's identity (32 hex digits).
    pub db_id: String,
    /// The database's page size.
    pub page_bytes: u32,
    /// The backup this one is an increment of; `None` for a full backup.
    pub parent_id: Option<String>,
    /// Where the log replay of this backup starts: the redo point of the
    /// checkpoint that began it.
    pub start_lsn: u64,
    /// The end of that checkpoint's record.
    pub checkpoint_lsn: u64,
    /// The log the backup carries ends here; opening it recovers to this
    /// point at least.
    pub end_lsn: u64,
    /// Pages of the data file at the start.
    pub page_count: u64,
    /// The log's segment size.
    pub wal_segment_bytes: u64,
    /// When the backup began and ended, in milliseconds since the epoch.
    pub started_unix_ms: u64,
    /// See `started_unix_ms`.
    pub finished_unix_ms: u64,
    /// Every file the backup holds besides the manifest and the marker.
    pub files: Vec<ManifestFile>,
    /// An incremental backup's parent's start: pages changed after it are
    /// in this backup.
    #[serde(default)]
    pub parent_start_lsn: Option<u64>,
    /// An incremental backup's pages, in the order `data.incr` holds them,
    /// as runs `[first, count]`.
    #[serde(default)]
    pub incremental_pages: Vec<[u64; 2]>,
    /// How an incremental backup found its pages (`page-lsn-scan`: every
    /// page read, those with an LSN past the parent's start kept).
    #[serde(default)]
    pub changed_pages_method: Option<String>,
    /// Pages read and checked to make the backup.
    #[serde(default)]
    pub pages_scanned: u64,
    /// The time of the last commit before the backup's start (µs since the
    /// epoch, 0 for none): a restore to an earlier time is refused.
    #[serde(default)]
    pub start_commit_time_us: Option<u64>,
    /// Pages copied as zeros because they failed their check while being
    /// written, and the log the backup carries holds their image.
    #[serde(default)]
    pub pages_from_log: Vec<u64>,
    /// How an incremental backup's `data.incr` holds its pages: 0, whole
    /// pages (backups of older builds); 1, entries, each a whole page or a
    /// delta against the chain's page (see `increment_format` in
    /// docs/file_format.md).
    #[serde(default)]
    pub increment_format: u32,
    /// An incremental backup's pages held as deltas.
    #[serde(default)]
    pub pages_as_deltas: u64,
    /// The line of the database's history the backup was taken on (32 hex
    /// digits; `None` in backups of older builds). A copy restored from a
    /// backup starts a history of its own when first opened.
    #[serde(default)]
    pub history_id: Option<String>,
    /// Set only in the record a restore leaves in the directory it makes
    /// (`restored_from_backup`, in place of a manifest and marker): a
    /// database to be, which every command opens (its first open replays
    /// its log and makes it one), and never a backup.
    #[serde(default)]
    pub restored: bool,
}

impl Manifest {
    /// The start LSN.
    pub fn start(&self) -> Lsn {
        Lsn::new(self.start_lsn)
    }

    /// The end LSN.
    pub fn end(&self) -> Lsn {
        Lsn::new(self.end_lsn)
    }

    /// The line of history the backup was taken on; a backup of a build
    /// that recorded none was taken from a `CONTROL` that held none, which
    /// reads as the line the database was created on.
    pub fn history(&self) -> String {
        self.history_id.clone().unwrap_or_else(|| "0".repeat(32))
    }

    /// The database identity the manifest names, as bytes.
    pub fn db_id_bytes(&self) -> Option<crate::format::DbId> {
        let mut id = [0u8; 16];
        for (i, b) in id.iter_mut().enumerate() {
            *b = u8::from_str_radix(self.db_id.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        (self.db_id.len() == 32).then_some(id)
    }

    /// Whether page `no`, as copied into the backup (`page`), is what the
    /// backup says it is: a page of this database at that number, or zeros
    /// left to the log.
    pub fn page_ok(&self, page: &[u8], no: u64) -> std::result::Result<(), String> {
        let id = self
            .db_id_bytes()
            .ok_or("the database id is not 32 hex digits")?;
        match crate::format::page::verify(page, crate::format::PageId::new(no), &id) {
            Ok(_) => Ok(()),
            Err(crate::format::page::PageError::NeverWritten)
                if self.pages_from_log.contains(&no) =>
            {
                Ok(())
            }
            Err(e) => Err(format!("page {no}: {e}")),
        }
    }

    /// The manifest file's bytes: the JSON, then its CRC line.
    pub fn encode(&self) -> Vec<u8> {
        assert!(
            self.start_lsn <= self.checkpoint_lsn && self.checkpoint_lsn <= self.end_lsn,
            "a backup's checkpoint lies between its start and its end"
        );
        let mut out = serde_json::to_vec_pretty(self).expect("a manifest serializes");
        out.push(b'\n');
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(format!("crc32c {crc:08x}\n").as_bytes());
        debug_assert_eq!(
            Manifest::decode(&out, std::path::Path::new(""))
                .ok()
                .as_ref(),
            Some(&(self.clone(), crc)),
        );
        out
    }

    /// Decodes a manifest file read from `path`; returns it with its CRC.
    ///
    /// # Errors
    /// [`Error::Corruption`] naming what is wrong: a missing or wrong CRC
    /// line (a truncated file has none), JSON that does not parse, another
    /// format, or LSNs out of order.
    pub fn decode(bytes: &[u8], path: &std::path::Path) -> Result<(Manifest, u32)> {
        let bad = |detail: String| Error::Corruption {
            path: path.to_path_buf(),
            offset: 0,
            page: None,
            detail,
        };
        let body_end = bytes[..bytes.len().saturating_sub(1)]
            .iter()
            .rposition(|&b| b == b'\n')
            .map(|i| i + 1)
            .ok_or_else(|| bad("the manifest has no CRC line (truncated?)".into()))?;
        let (body, last) = bytes.split_at(body_end);
        let crc = std::str::from_utf8(last)
            .ok()
            .and_then(|l| l.strip_prefix("crc32c "))
            .and_then(|l| l.strip_suffix('\n'))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| bad("the manifest's last line is not its CRC (truncated?)".into()))?;
        let actual = crc32c::crc32c(body);
        if actual != crc {
            return Err(bad(format!(
                "the manifest's CRC is {actual:08x}, but its last line says {crc:08x}: it is \
                 damaged"
            )));
        }
        let m: Manifest = serde_json::from_slice(body)
            .map_err(|e| bad(format!("the manifest does not parse: {e}")))?;
        if ![MANIFEST_FORMAT, MANIFEST_FORMAT_ENTRIES].contains(&m.format) {
            return Err(bad(format!(
                "manifest format {} (this build reads {MANIFEST_FORMAT} and \
                 {MANIFEST_FORMAT_ENTRIES})",
                m.format
            )));
        }
        m.check().map_err(bad)?;
        Ok((m, crc))
    }

    /// The part of [`check`](Self::check) for the scalars: LSNs in order,
    /// and a page size, a page count and a segment size a database has.
    fn check_sizes(&self) -> std::result::Result<(), String> {
        if !(self.start_lsn <= self.checkpoint_lsn && self.checkpoint_lsn <= self.end_lsn) {
            return Err(format!(
                "LSNs out of order: start {}, checkpoint {}, end {}",
                self.start_lsn, self.checkpoint_lsn, self.end_lsn
            ));
        }
        if !crate::format::page::PAGE_SIZES.contains(&self.page_bytes) {
            return Err(format!(
                "page size {} is not one a database has",
                self.page_bytes
            ));
        }
        use crate::constants::{PAGE_COUNT_MAX, PAGE_COUNT_MIN};
        if !(PAGE_COUNT_MIN..=PAGE_COUNT_MAX).contains(&self.page_count) {
            return Err(format!(
                "page count {} is outside {PAGE_COUNT_MIN}..={PAGE_COUNT_MAX}",
                self.page_count
            ));
        }
        let seg = self.wal_segment_bytes;
        let (min, max) = (SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX);
        if !(min..=max).contains(&seg) || seg % SEGMENT_HEADER_BYTES != 0 {
            return Err(format!("WAL segment size {seg} is not one a log has"));
        }
        Ok(())
    }

    /// Checks every field a reader acts on, so a manifest that decodes can
    /// be used without further doubt: LSNs in order, a page size, a page
    /// count and a segment size a database has, runs of pages that ascend from page 0
    /// below the page count, and file paths that name a backup's files.
    fn check(&self) -> std::result::Result<(), String> {
        self.check_sizes()?;
        let mut next = 0u64;
        for &[first, count] in &self.incremental_pages {
            let end = first.checked_add(count).filter(|&e| e <= self.page_count);
            if first < next || count == 0 || end.is_none() || (next == 0 && first != 0) {
                return Err(format!(
                    "the page runs do not ascend from page 0 below the {} pages",
                    self.page_count
                ));
            }
            next = end.unwrap_or(u64::MAX);
        }
        let full = self.parent_id.is_none();
        let want_format = match self.increment_format {
            ENTRIES => MANIFEST_FORMAT_ENTRIES,
            _ => MANIFEST_FORMAT,
        };
        let ok = match self.increment_format {
            WHOLE_PAGES => self.pages_as_deltas == 0,
            // Page 0 is never a delta.
            ENTRIES => {
                !full && self.pages_as_deltas < self.incremental_pages.iter().map(|r| r[1]).sum()
            }
            _ => false,
        };
        if !ok || self.format != want_format {
            return Err(format!(
                "increment format {} with {} deltas in manifest format {} is not one this \
                 build reads (or this backup is full)",
                self.increment_format, self.pages_as_deltas, self.format
            ));
        }
        let hex32 =
            |h: &str| h.len() == 32 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if self.history_id.as_deref().is_some_and(|h| !hex32(h)) {
            return Err("the history id is not 32 hex digits".into());
        }
        if self.db_id_bytes().is_none() {
            return Err("the database id is not 32 hex digits".into());
        }
        if self
            .pages_from_log
            .iter()
            .any(|&p| p == 0 || p >= self.page_count)
        {
            return Err("a page left to the log is outside the data file".into());
        }
        match self.files.iter().find(|f| !is_backup_file(&f.path)) {
            Some(f) => Err(format!("{:?} is not a file a backup holds", f.path)),
            None => Ok(()),
        }
    }
}

/// Whether `path` names a file a backup holds: `CONTROL`, the data file,
/// the changed pages, or a log segment in `wal/`.
fn is_backup_file(path: &str) -> bool {
    match path.split_once('/') {
        Some((WAL_DIR_NAME, name)) => parse_segment_file_name(name).is_some(),
        Some(_) => false,
        None => [CONTROL_NAME, DATA_NAME, INCREMENT_NAME].contains(&path),
    }
}

/// The changed-page method that reads every page and keeps those whose LSN
/// is past the parent's start.
pub const PAGE_LSN_SCAN: &str = "page-lsn-scan";
/// The changed-page method that reads only the pages the changed-page
/// summaries kept beside the database name (and keeps those whose LSN is
/// past the parent's start).
pub const WAL_SUMMARY: &str = "wal-summary";

/// Page numbers, ascending, as runs `[first, count]`.
pub fn runs(pages: impl IntoIterator<Item = u64>) -> Vec<[u64; 2]> {
    let mut out: Vec<[u64; 2]> = Vec::new();
    for p in pages {
        match out.last_mut() {
            Some([first, count]) if *first + *count == p => *count += 1,
            Some([first, count]) => {
                assert!(p >= *first + *count, "pages ascend");
                out.push([p, 1]);
            }
            None => out.push([p, 1]),
        }
    }
    out
}

/// The page numbers of runs, in order.
pub fn pages_of(runs: &[[u64; 2]]) -> impl Iterator<Item = u64> + '_ {
    runs.iter()
        .flat_map(|&[first, count]| first..first.saturating_add(count))
}

/// The completion marker's bytes for a backup whose manifest has `crc`.
pub fn encode_marker(backup_id: &str, crc: u32) -> Vec<u8> {
    format!("{MARKER_PREFIX} {backup_id} {crc:08x}\n").into_bytes()
}

/// The backup id and manifest CRC a marker names, or `None` for anything
/// that is not a whole marker.
pub fn decode_marker(bytes: &[u8]) -> Option<(String, u32)> {
    let line = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
    let mut parts = line.split(' ');
    if parts.next()? != MARKER_PREFIX {
        return None;
    }
    let id = parts.next()?.to_string();
    let crc = u32::from_str_radix(parts.next()?, 16).ok()?;
    parts.next().is_none().then_some((id, crc))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT_ENTRIES,
            backup_id: "00".repeat(16),
            db_id: "ab".repeat(16),
            page_bytes: 4096,
            parent_id: Some("cd".repeat(16)),
            start_lsn: 100,
            checkpoint_lsn: 200,
            end_lsn: 300,
            page_count: 10,
            wal_segment_bytes: 1 << 20,
            started_unix_ms: 1,
            finished_unix_ms: 2,
            files: vec![ManifestFile {
                path: "data".into(),
                len: 4096,
                crc32c: 7,
            }],
            pages_from_log: vec![3],
            parent_start_lsn: Some(50),
            incremental_pages: runs([0, 1, 2, 5, 6, 9]),
            changed_pages_method: Some(PAGE_LSN_SCAN.into()),
            pages_scanned: 8,
            start_commit_time_us: Some(5),
            increment_format: ENTRIES,
            pages_as_deltas: 2,
            history_id: Some("12".repeat(16)),
            restored: true,
        }
    }

    #[test]
    fn manifest_round_trips_and_damage_is_named() {
        let m = sample();
        assert_eq!(m.incremental_pages, vec![[0, 3], [5, 2], [9, 1]]);
        assert_eq!(
            pages_of(&m.incremental_pages).collect::<Vec<_>>(),
            [0, 1, 2, 5, 6, 9]
        );
        let bytes = m.encode();
        let (back, crc) = Manifest::decode(&bytes, std::path::Path::new("m")).expect("decodes");
        assert_eq!(back, m);
        let marker = encode_marker(&m.backup_id, crc);
        assert_eq!(decode_marker(&marker), Some((m.backup_id.clone(), crc)));
        assert_eq!(decode_marker(&marker[..marker.len() - 1]), None);
        for cut in [1, 10, bytes.len() / 2, bytes.len() - 1] {
            let err = Manifest::decode(&bytes[..cut], std::path::Path::new("m"))
                .expect_err("a truncated manifest is refused");
            assert!(matches!(err, Error::Corruption { .. }), "{err}");
        }
        for (bad, what) in [
            (
                Manifest {
                    page_bytes: 0,
                    ..sample()
                },
                "page size",
            ),
            (
                Manifest {
                    wal_segment_bytes: 5,
                    ..sample()
                },
                "segment size",
            ),
            (
                Manifest {
                    incremental_pages: vec![[1, 2]],
                    ..sample()
                },
                "page runs",
            ),
            (
                Manifest {
                    incremental_pages: vec![[0, 2], [1, 1]],
                    ..sample()
                },
                "page runs",
            ),
            (
                Manifest {
                    incremental_pages: vec![[0, u64::MAX]],
                    ..sample()
                },
                "page runs",
            ),
            (
                Manifest {
                    page_count: 0,
                    incremental_pages: vec![],
                    pages_as_deltas: 0,
                    increment_format: WHOLE_PAGES,
                    format: MANIFEST_FORMAT,
                    pages_from_log: vec![],
                    ..sample()
                },
                "page count",
            ),
            (
                Manifest {
                    page_count: crate::constants::PAGE_COUNT_MAX + 1,
                    ..sample()
                },
                "page count",
            ),
            (
                Manifest {
                    page_count: u64::MAX,
                    ..sample()
                },
                "page count",
            ),
            (
                Manifest {
                    pages_from_log: vec![10],
                    ..sample()
                },
                "left to the log",
            ),
            (
                Manifest {
                    history_id: Some("../../etc".into()),
                    ..sample()
                },
                "history id",
            ),
            (
                Manifest {
                    increment_format: 7,
                    ..sample()
                },
                "increment format",
            ),
            (
                Manifest {
                    parent_id: None,
                    ..sample()
                },
                "increment format",
            ),
        ] {
            let err = bad.check().expect_err(what);
            assert!(err.contains(what), "{err}");
        }
        for path in ["../x", "/etc/passwd", "wal/../../x", "wal/x.seg", "LOCK"] {
            let mut m = sample();
            m.files[0].path = path.into();
            assert!(m.check().is_err(), "{path}");
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        let err = Manifest::decode(&flipped, std::path::Path::new("m")).expect_err("damage");
        assert!(err.to_string().contains("damaged"), "{err}");
    }
}
