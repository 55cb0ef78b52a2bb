//! The log archive's setting, kept with the database in its file `ARCHIVE`,
//! so that every open archives as configured whatever options it is given
//! (`directkv check` and `directkv backup` give none): without it, an open
//! that forgot `Options::wal_archive` would recycle segments never
//! archived, and a restore to a point in time would have a hole.
//!
//! Which setting an open takes ([`resolve`], `Options::wal_archive_change`):
//! - `Keep` (the default): the recorded one; `wal_archive` may only name
//!   the recorded directory ([`Error::ArchiveMismatch`] otherwise), or set
//!   one where none is recorded. `archive_timeout`, if given, replaces the
//!   recorded timeout.
//! - `Switch`: `wal_archive` (required) replaces the recorded directory.
//! - `Off`: archiving stops and the record is removed (`wal_archive` must
//!   be unset).
//!
//! The record is bound to its archive and to its database directory:
//! - The archive's root holds `ARCHIVE_ID` ([`IDENTITY_NAME`]): the
//!   database's id and a random instance id, written when a setting naming
//!   the directory is first recorded; `ARCHIVE` keeps the instance id. An
//!   open that does not name the directory (`wal_archive` unset) archives
//!   only into a root that exists and holds that identity: a missing root
//!   is [`Error::ArchiveMissing`] and is never created by it (an unmounted
//!   file system would otherwise take the segments on the local disk); a
//!   root without the identity, or with another, is
//!   [`Error::ArchiveForeign`]. Naming the directory creates it if missing
//!   and adopts the identity found there if it is this database's.
//! - `ARCHIVE` keeps the device and inode of the database directory it was
//!   written in. A copy of the directory (`cp -r`) has other ones: `Keep`
//!   refuses it ([`Error::ArchiveForeign`]), so a copy never archives into
//!   the original's line of history; `Switch` or `Off` binds it anew. The
//!   simulated disk has no inodes (all 0): there no copy is recognised.
//!
//! The file (little-endian, [`SETTING_BYTES_MAX`] at most):
//! ```text
//!  0  magic "DKVARCHS"            8 bytes
//!  8  version (1)                 u32
//! 12  directory's length          u32, 1..=ARCHIVE_PATH_BYTES_MAX
//! 16  archive_timeout in ms       u64, 0 for none
//! 24  the archive's instance id   u64 (as in its ARCHIVE_ID)
//! 32  database directory's dev    u64
//! 40  database directory's inode  u64
//! 48  directory (absolute path)   `length` bytes
//! ..  CRC32C of all bytes before  u32
//! ```
//!
//! `ARCHIVE_ID`, in the archive's root (44 bytes):
//! ```text
//!  0  magic "DKVARCID"            8 bytes
//!  8  version (1)                 u32
//! 12  zero                        u32
//! 16  database id                 16 bytes
//! 32  instance id                 u64
//! 40  CRC32C of all bytes before  u32
//! ```
//!
//! Invariants:
//! - `ARCHIVE` is only ever replaced whole: written as `ARCHIVE.tmp`
//!   (created exclusively, synced), renamed, the directory synced, before
//!   the open that wrote it archives or recycles anything.
//! - Open takes `ARCHIVE` only if it decodes exactly (magic, version,
//!   lengths, CRC); anything else at the name is refused, named, never
//!   overwritten. `ARCHIVE.tmp` is removed only if it has the shape an
//!   interrupted write leaves (empty, zeros, or the magic first).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::format::{le, DbId};
use crate::io::{Permissions, Storage};
use crate::sched::crc_files as files;
use crate::sched::{IoClass, Scheduler};

/// The setting's file in the database directory.
pub(crate) const SETTING_NAME: &str = "ARCHIVE";
/// Its copy while it is written.
const SETTING_TMP_NAME: &str = "ARCHIVE.tmp";
const MAGIC: [u8; 8] = *b"DKVARCHS";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 48;
/// The archive's identity, in its root.
pub(crate) const IDENTITY_NAME: &str = "ARCHIVE_ID";
/// Its copy while it is written.
const IDENTITY_TMP_NAME: &str = "ARCHIVE_ID.tmp";
const IDENTITY_MAGIC: [u8; 8] = *b"DKVARCID";
const IDENTITY_BYTES: usize = 44;
/// The longest archive directory recorded (Linux's `PATH_MAX`).
pub(crate) const ARCHIVE_PATH_BYTES_MAX: usize = 4096;
/// The largest `ARCHIVE` file.
pub(crate) const SETTING_BYTES_MAX: usize = HEADER_BYTES + ARCHIVE_PATH_BYTES_MAX + 4;
const _: () = assert!(SETTING_BYTES_MAX < 8192 && HEADER_BYTES % 8 == 0);

/// How an open treats the archive setting recorded with the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArchiveChange {
    /// Archive as recorded. `Options::wal_archive` may set a directory
    /// where none is recorded, or name the recorded one; another directory
    /// is [`Error::ArchiveMismatch`].
    #[default]
    Keep,
    /// Archive from now on into `Options::wal_archive` (which must be
    /// set), recorded in place of the directory recorded before.
    Switch,
    /// Stop archiving and remove the record (`Options::wal_archive` must
    /// be unset): checkpoints recycle segments without archiving them.
    Off,
}

/// Where and how the log is archived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArchiveSetting {
    /// The archive's root, absolute.
    pub(crate) dir: PathBuf,
    /// `archive_timeout`: a partial segment is archived once it holds
    /// commits this long unarchived; `None`, only whole segments.
    pub(crate) timeout: Option<Duration>,
}

/// A setting as recorded: bound to its archive's identity and to the
/// database directory it was written in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// Where and how.
    pub(crate) setting: ArchiveSetting,
    /// The instance id of the archive's `ARCHIVE_ID`.
    pub(crate) instance: u64,
    /// The database directory's device and inode.
    pub(crate) bound_to: DirId,
}

/// A directory's device and inode numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirId {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

/// What an open asks of the archive: `Options::wal_archive`,
/// `Options::wal_archive_change` and `Options::archive_timeout`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Requested<'a> {
    /// The archive directory given, if any.
    pub(crate) dir: Option<&'a Path>,
    /// How to treat the recorded setting.
    pub(crate) change: ArchiveChange,
    /// `archive_timeout` given, if any (zero: none from now on).
    pub(crate) timeout: Option<Duration>,
}

/// The setting this open archives with, from the one `recorded` and the
/// options; `None` for no archiving.
///
/// # Errors
/// [`Error::ArchiveMismatch`] for `Keep` with another directory than the
/// recorded one; [`Error::InvalidArgument`] for `Switch` without a
/// directory, `Off` with one, `archive_timeout` with no archive (none
/// recorded or given, or `Off`), a directory path too long to record, or a
/// relative one when the working directory cannot be read.
pub(crate) fn resolve(
    recorded: Option<&ArchiveSetting>,
    opts: Requested<'_>,
) -> Result<Option<ArchiveSetting>> {
    let given = opts.dir.map(absolute).transpose()?;
    let archiving = opts.change != ArchiveChange::Off && (recorded.is_some() || given.is_some());
    if let (Some(t), false) = (opts.timeout, archiving) {
        return Err(Error::InvalidArgument(format!(
            "archive_timeout ({t:?}) is set, but the log is not archived (no wal_archive is \
             given or recorded, or wal_archive_change is Off): unset it"
        )));
    }
    let timeout = |was: Option<Duration>| match opts.timeout {
        Some(t) if t.is_zero() => None,
        Some(t) => Some(t),
        None => was,
    };
    let dir = match (opts.change, recorded, given) {
        (ArchiveChange::Off, _, None) => return Ok(None),
        (ArchiveChange::Off, _, Some(g)) => {
            return Err(Error::InvalidArgument(format!(
                "wal_archive_change Off turns archiving off, but wal_archive names {}",
                g.display()
            )))
        }
        (ArchiveChange::Switch, _, None) => {
            return Err(Error::InvalidArgument(
                "wal_archive_change Switch needs wal_archive, the directory to switch to".into(),
            ))
        }
        (ArchiveChange::Keep, None, None) => return Ok(None),
        (ArchiveChange::Keep, Some(r), Some(g)) if r.dir != g => {
            return Err(Error::ArchiveMismatch {
                recorded: r.dir.clone(),
                given: g,
            })
        }
        (ArchiveChange::Keep, Some(r), None) => r.dir.clone(),
        (ArchiveChange::Keep | ArchiveChange::Switch, _, Some(g)) => g,
    };
    if path_bytes(&dir).len() > ARCHIVE_PATH_BYTES_MAX || path_bytes(&dir).is_empty() {
        return Err(Error::InvalidArgument(format!(
            "the log archive's path {} is longer than {ARCHIVE_PATH_BYTES_MAX} bytes",
            dir.display()
        )));
    }
    assert!(dir.is_absolute(), "a non-empty path is made absolute");
    let was = recorded.and_then(|r| r.timeout);
    Ok(Some(ArchiveSetting {
        dir,
        timeout: timeout(was),
    }))
}

/// `path` made absolute against the working directory, as recorded.
///
/// # Errors
/// [`Error::InvalidArgument`] for an empty path, or a relative one when
/// the working directory cannot be read (removed, or not searchable).
pub(crate) fn absolute(path: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(path).map_err(|e| {
        Error::InvalidArgument(format!(
            "cannot make the path {:?} absolute ({e}): give an absolute path",
            path.display()
        ))
    })?;
    assert!(abs.is_absolute(), "std::path::absolute succeeded");
    Ok(abs)
}

fn path_bytes(path: &Path) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes()
}

/// The bytes of `ARCHIVE` holding `r`.
fn encode(r: &Recorded) -> Vec<u8> {
    let s = &r.setting;
    let path = path_bytes(&s.dir);
    assert!(!path.is_empty() && path.len() <= ARCHIVE_PATH_BYTES_MAX);
    let ms = s.timeout.map_or(0, |t| (t.as_millis() as u64).max(1));
    let mut b = vec![0u8; HEADER_BYTES + path.len() + 4];
    b[..8].copy_from_slice(&MAGIC);
    le::put_u32(&mut b, 8, VERSION);
    le::put_u32(&mut b, 12, path.len() as u32);
    le::put_u64(&mut b, 16, ms);
    le::put_u64(&mut b, 24, r.instance);
    le::put_u64(&mut b, 32, r.bound_to.dev);
    le::put_u64(&mut b, 40, r.bound_to.ino);
    b[HEADER_BYTES..HEADER_BYTES + path.len()].copy_from_slice(path);
    let crc = crc32c::crc32c(&b[..HEADER_BYTES + path.len()]);
    le::put_u32(&mut b, HEADER_BYTES + path.len(), crc);
    assert!(b.len() <= SETTING_BYTES_MAX);
    b
}

/// The setting `bytes` (read from `path`) hold.
///
/// # Errors
/// [`Error::NotADatabase`] naming `path` for anything but what [`encode`]
/// writes.
fn decode(bytes: &[u8], path: &Path) -> Result<Recorded> {
    let bad = |detail: &str| Error::NotADatabase {
        path: path.to_path_buf(),
        detail: format!(
            "not a log archive setting this engine wrote ({detail}); refusing to guess where \
             the log is archived"
        ),
    };
    if bytes.get(..8) != Some(&MAGIC[..]) {
        return Err(bad("no magic"));
    }
    if le::get_u32(bytes, 8) != Some(VERSION) {
        return Err(bad("unknown version"));
    }
    let len = le::get_u32(bytes, 12).ok_or_else(|| bad("short"))? as usize;
    if len == 0 || len > ARCHIVE_PATH_BYTES_MAX || bytes.len() != HEADER_BYTES + len + 4 {
        return Err(bad("inconsistent length"));
    }
    let crc = le::get_u32(bytes, HEADER_BYTES + len).ok_or_else(|| bad("short"))?;
    if crc != crc32c::crc32c(&bytes[..HEADER_BYTES + len]) {
        return Err(bad("checksum mismatch"));
    }
    let ms = le::get_u64(bytes, 16).ok_or_else(|| bad("short"))?;
    let u64_at = |at| le::get_u64(bytes, at).ok_or_else(|| bad("short"));
    let (instance, dev, ino) = (u64_at(24)?, u64_at(32)?, u64_at(40)?);
    let dir = {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(
            &bytes[HEADER_BYTES..HEADER_BYTES + len],
        ))
    };
    if !dir.is_absolute() {
        return Err(bad("a relative directory"));
    }
    let r = Recorded {
        setting: ArchiveSetting {
            dir,
            timeout: (ms > 0).then(|| Duration::from_millis(ms)),
        },
        instance,
        bound_to: DirId { dev, ino },
    };
    assert_eq!(
        encode(&r),
        bytes,
        "a setting decodes only from its encoding"
    );
    Ok(r)
}

/// The setting recorded in the database directory `db`, if any; removes
/// what an interrupted write of it left.
///
/// # Errors
/// [`Error::NotADatabase`] naming `ARCHIVE` or `ARCHIVE.tmp` when it is not
/// a file this engine wrote; I/O errors.
pub(crate) fn read<S: Storage>(
    storage: &S,
    db: &Path,
    sched: &Arc<Scheduler>,
) -> Result<Option<Recorded>> {
    let io = (sched, IoClass::Read);
    let tmp = db.join(SETTING_TMP_NAME);
    if storage.exists(&tmp) {
        let left = files::read_small_admitted(storage, &tmp, SETTING_BYTES_MAX as u64, io)
            .map_err(|_| not_ours(&tmp))?;
        let interrupted = left.iter().all(|&b| b == 0) || left.starts_with(&MAGIC);
        if !interrupted {
            return Err(not_ours(&tmp));
        }
        storage.remove_file(&tmp)?;
        storage.sync_dir(db)?;
    }
    let path = db.join(SETTING_NAME);
    if !storage.exists(&path) {
        return Ok(None);
    }
    let bytes =
        files::read_small_admitted(storage, &path, SETTING_BYTES_MAX as u64, io).map_err(|e| {
            match e {
                Error::Corruption { .. } => not_ours(&path),
                e => e,
            }
        })?;
    decode(&bytes, &path).map(Some)
}

fn not_ours(path: &Path) -> Error {
    Error::NotADatabase {
        path: path.to_path_buf(),
        detail: "not a file this engine wrote; refusing to remove or replace it".into(),
    }
}

/// Records `s` in the database directory `db`, replacing what was there.
///
/// # Errors
/// I/O errors; on one, the record is the old one or the new one, whole.
pub(crate) fn write<S: Storage>(
    storage: &S,
    db: &Path,
    s: &Recorded,
    permissions: Permissions,
    sched: &Arc<Scheduler>,
) -> Result<()> {
    let (path, tmp) = (db.join(SETTING_NAME), db.join(SETTING_TMP_NAME));
    assert!(!storage.exists(&tmp), "read() removed a leftover");
    let io = (sched, IoClass::Background);
    files::write_small_admitted(storage, &tmp, &encode(s), permissions, io)?;
    storage.rename(&tmp, &path)?;
    storage.sync_dir(db)?;
    assert!(!storage.exists(&tmp) && storage.exists(&path), "renamed");
    Ok(())
}

/// Removes the record from the database directory `db` (durably).
///
/// # Errors
/// I/O errors.
pub(crate) fn remove<S: Storage>(storage: &S, db: &Path) -> Result<()> {
    let path = db.join(SETTING_NAME);
    if storage.exists(&path) {
        storage.remove_file(&path)?;
        storage.sync_dir(db)?;
    }
    Ok(())
}

/// The device and inode of the database directory `db`.
///
/// # Errors
/// I/O errors of its `stat`.
pub(crate) fn dir_id<S: Storage>(storage: &S, db: &Path) -> Result<DirId> {
    let m = storage.stat(db)?;
    Ok(DirId {
        dev: m.dev,
        ino: m.ino,
    })
}

/// An archive's identity (`ARCHIVE_ID` in its root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    db_id: DbId,
    instance: u64,
}

fn encode_identity(id: &Identity) -> Vec<u8> {
    let mut b = vec![0u8; IDENTITY_BYTES];
    b[..8].copy_from_slice(&IDENTITY_MAGIC);
    le::put_u32(&mut b, 8, VERSION);
    b[16..32].copy_from_slice(&id.db_id);
    le::put_u64(&mut b, 32, id.instance);
    let crc = crc32c::crc32c(&b[..IDENTITY_BYTES - 4]);
    le::put_u32(&mut b, IDENTITY_BYTES - 4, crc);
    b
}

fn decode_identity(b: &[u8]) -> Option<Identity> {
    let crc = le::get_u32(b, IDENTITY_BYTES - 4)?;
    let whole = b.len() == IDENTITY_BYTES && b[..8] == IDENTITY_MAGIC;
    let header = le::get_u32(b, 8)? == VERSION && le::get_u32(b, 12)? == 0;
    if !whole || !header || crc != crc32c::crc32c(&b[..IDENTITY_BYTES - 4]) {
        return None;
    }
    let id = Identity {
        db_id: b[16..32].try_into().ok()?,
        instance: le::get_u64(b, 32)?,
    };
    assert_eq!(encode_identity(&id), b, "decodes only from its encoding");
    Some(id)
}

/// The archive root `dir` this open archives into, checked, and the
/// instance id of its identity. `named`: the options name `dir` (it may be
/// created, and an identity written or adopted there); otherwise it must
/// exist and hold the identity `expected` (recorded). See the module docs.
///
/// # Errors
/// [`Error::ArchiveMissing`], [`Error::ArchiveForeign`] (nothing is
/// written then); I/O errors.
pub(crate) fn claim<S: Storage>(
    storage: &S,
    (dir, db): (&Path, &Path),
    (db_id, named, expected): (DbId, bool, Option<u64>),
    permissions: Permissions,
    sched: &Arc<Scheduler>,
) -> Result<u64> {
    assert!(
        named || expected.is_some(),
        "an archive is named or recorded"
    );
    let foreign = |detail: &str| Error::ArchiveForeign {
        dir: dir.to_path_buf(),
        database: db.to_path_buf(),
        detail: detail.into(),
    };
    if !storage.exists(dir) {
        if !named {
            return Err(Error::ArchiveMissing {
                dir: dir.to_path_buf(),
            });
        }
        crate::io::create_dir_synced(storage, dir, permissions)?;
    }
    let path = dir.join(IDENTITY_NAME);
    let found = match storage.exists(&path) {
        true => {
            let io = (sched, IoClass::Read);
            let b = files::read_small_admitted(storage, &path, IDENTITY_BYTES as u64, io);
            let id = b.ok().as_deref().and_then(decode_identity);
            Some(id.ok_or_else(|| foreign("its ARCHIVE_ID is not one this engine wrote"))?)
        }
        false => None,
    };
    match (found, expected) {
        (Some(id), _) if id.db_id != db_id => {
            Err(foreign("it holds the log archive of another database"))
        }
        (Some(id), Some(e)) if id.instance != e && !named => Err(foreign(
            "its ARCHIVE_ID is another than the one recorded: another archive is at that path",
        )),
        (Some(id), _) => Ok(id.instance),
        (None, _) if !named => Err(foreign(
            "it holds no ARCHIVE_ID, so it is not the archive recorded (a file system not \
             mounted there?)",
        )),
        (None, _) => {
            let id = Identity {
                db_id,
                instance: u64::from_le_bytes(
                    crate::io::random_id()[..8].try_into().unwrap_or_default(),
                ),
            };
            let tmp = dir.join(IDENTITY_TMP_NAME);
            if storage.exists(&tmp) {
                storage.remove_file(&tmp)?;
            }
            let io = (sched, IoClass::Background);
            files::write_small_admitted(storage, &tmp, &encode_identity(&id), permissions, io)?;
            storage.rename(&tmp, &path)?;
            storage.sync_dir(dir)?;
            Ok(id.instance)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(dir: &str, ms: u64) -> ArchiveSetting {
        ArchiveSetting {
            dir: PathBuf::from(dir),
            timeout: (ms > 0).then(|| Duration::from_millis(ms)),
        }
    }

    #[test]
    fn a_setting_decodes_as_encoded_and_nothing_else_does() {
        let p = Path::new("/db/ARCHIVE");
        for (s, instance) in [
            (setting("/a", 0), 0),
            (setting("/srv/archive/x", 60_000), 7),
        ] {
            let s = Recorded {
                setting: s,
                instance,
                bound_to: DirId { dev: 3, ino: 99 },
            };
            let b = encode(&s);
            assert_eq!(decode(&b, p).expect("decodes"), s);
            for i in 0..b.len() {
                let mut c = b.clone();
                c[i] ^= 0x10;
                assert!(decode(&c, p).is_err(), "a flipped byte {i} is refused");
            }
            assert!(
                decode(&b[..b.len() - 1], p).is_err(),
                "a short file is refused"
            );
        }
        assert!(decode(b"", p).is_err());
        let id = Identity {
            db_id: [5; 16],
            instance: 11,
        };
        let b = encode_identity(&id);
        assert_eq!(decode_identity(&b), Some(id));
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert_eq!(decode_identity(&c), None, "a flipped byte {i} is refused");
        }
        assert_eq!(decode_identity(&b[..b.len() - 1]), None);
    }

    #[test]
    fn keep_refuses_another_directory_and_switch_and_off_are_explicit() {
        let recorded = setting("/arch", 5000);
        let with = |dir: Option<&'static str>, change, timeout| Requested {
            dir: dir.map(Path::new),
            change,
            timeout,
        };
        let kept = resolve(Some(&recorded), with(None, ArchiveChange::Keep, None));
        assert_eq!(kept.expect("keeps"), Some(recorded.clone()));
        let other = resolve(Some(&recorded), with(Some("/b"), ArchiveChange::Keep, None));
        assert!(
            matches!(other, Err(Error::ArchiveMismatch { .. })),
            "{other:?}"
        );
        let switched = resolve(
            Some(&recorded),
            with(Some("/b"), ArchiveChange::Switch, None),
        );
        assert_eq!(switched.expect("switch").map(|s| s.dir), Some("/b".into()));
        let off = resolve(Some(&recorded), with(None, ArchiveChange::Off, None));
        assert_eq!(off.expect("off"), None);
        let no_timeout = with(None, ArchiveChange::Keep, Some(Duration::ZERO));
        let s = resolve(Some(&recorded), no_timeout).expect("resolves");
        assert_eq!(
            s.map(|s| s.timeout),
            Some(None),
            "a zero timeout turns it off"
        );
        assert!(resolve(None, with(None, ArchiveChange::Switch, None)).is_err());
        assert!(resolve(None, with(Some("/b"), ArchiveChange::Off, None)).is_err());
    }

    #[test]
    fn a_timeout_without_an_archive_is_refused_not_ignored() {
        let t = Some(Duration::from_secs(5));
        let with = |dir: Option<&'static str>, change| Requested {
            dir: dir.map(Path::new),
            change,
            timeout: t,
        };
        let recorded = setting("/arch", 0);
        for (rec, opts) in [
            (None, with(None, ArchiveChange::Keep)),
            (None, with(None, ArchiveChange::Off)),
            (Some(&recorded), with(None, ArchiveChange::Off)),
        ] {
            let got = resolve(rec, opts);
            assert!(
                matches!(&got, Err(Error::InvalidArgument(m)) if m.contains("archive_timeout")),
                "{got:?}"
            );
        }
        let kept = resolve(Some(&recorded), with(None, ArchiveChange::Keep));
        assert_eq!(kept.expect("resolves").and_then(|s| s.timeout), t);
        let given = resolve(None, with(Some("/b"), ArchiveChange::Keep));
        assert_eq!(given.expect("resolves").and_then(|s| s.timeout), t);
    }
}
