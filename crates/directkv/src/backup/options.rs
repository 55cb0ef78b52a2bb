//! What a caller asks of a backup ([`BackupOptions`]) and what it is told
//! ([`BackupReport`]).
//!
//! Invariants:
//! - A report's LSNs are ordered: `start_lsn <= checkpoint_lsn <= end_lsn`.

use serde::Serialize;

use crate::lsn::Lsn;

/// How [`Database::backup`](crate::Database::backup) runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackupOptions {
    /// At most this many bytes per second read (`None`: as fast
    /// as the I/O scheduler's lowest class goes).
    pub rate_bytes: Option<u64>,
    /// Run the checkpoint that starts the backup at full speed (sooner to
    /// start, harder on commits) instead of paced like a background one
    /// (the default, as `pg_basebackup`'s).
    pub fast_checkpoint: bool,
    /// Make an incremental backup on top of this earlier backup of the
    /// database (full or incremental): only the pages changed since that
    /// backup's start are copied. They are found from the changed-page
    /// summaries the checkpoints keep beside the database, reading only
    /// those pages; where the summaries do not cover the range (a database
    /// restored since, a summary lost), by reading every page's LSN. The
    /// manifest's `changed_pages_method` says which.
    pub incremental_from: Option<std::path::PathBuf>,
}

/// What a backup did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackupReport {
    /// The backup's identity, as its manifest names it.
    pub backup_id: String,
    /// Where its log starts (the redo point of its checkpoint).
    pub start_lsn: Lsn,
    /// The end of its checkpoint's record.
    pub checkpoint_lsn: Lsn,
    /// Where its log ends: the backup opens to this point at least.
    pub end_lsn: Lsn,
    /// Whether it is an incremental backup.
    pub incremental: bool,
    /// Pages of the data file at the start (page 0 included).
    pub pages: u64,
    /// Pages read and checked.
    pub pages_scanned: u64,
    /// Pages copied into the backup (all of them, for a full backup).
    pub pages_copied: u64,
    /// Bytes of the data file copied.
    pub data_bytes: u64,
    /// Bytes of log copied.
    pub wal_bytes: u64,
    /// Pages that failed their check when first read and passed when read
    /// again under their frame's latch (a write was under way).
    pub pages_reread: u64,
    /// Pages that failed both reads but had changed since the start: the
    /// log the backup carries holds their image.
    pub pages_covered_by_log: u64,
    /// An incremental backup's pages stored as the bytes that differ from
    /// the chain's page (the rest are whole).
    pub pages_as_deltas: u64,
    /// The backups an incremental backup's deltas were made against, found
    /// beside its parent: `None` when a link of the chain was not there,
    /// and every page is stored whole.
    pub delta_chain_links: Option<u64>,
    /// How long it took.
    pub micros: u64,
    /// Why the log archive could not be brought up to the backup's end,
    /// where it held a shorter partial copy of the backup's last segment
    /// (`archive_timeout`); also counted in `stats().archive`. The backup
    /// is whole and restores, to a point in time too: its own last
    /// segment is kept where the archive's copy is shorter.
    pub archive_failure: Option<String>,
}
