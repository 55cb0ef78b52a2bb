//! Claiming a database directory at open: looking at what it holds before
//! writing anything (a database, nothing, or what an interrupted creation
//! leaves, recognised by content), taking it, and creating a new database
//! in it. Split from [`super`] (open and recovery), a child module sharing
//! its names.

use super::*;

/// Looks at `path` before writing anything (a refused open leaves no
/// trace), creates the directory if it may, holds it open from then on
/// (every file in it is reached through that handle: [`Storage::anchor`]),
/// refuses one others may write, takes `LOCK`, creates the database if there
/// is none yet, and removes the scratch files a killed sync probe left.
/// Returns the storage holding the directory.
pub(super) fn claim<S: Storage>(
    storage: &S,
    path: &Path,
    opts: &Options,
    sched: &Arc<Scheduler>,
) -> Result<(S, S::Lock, Audit)> {
    if look(storage, path, opts, sched)? == Found::Creatable {
        crate::io::create_dir_synced(storage, path, opts.permissions)?;
    }
    let storage = storage.anchor(path)?;
    // The WAL directory too, if it is there, before anything in it is
    // looked at: a symlink at the default `wal/` is refused here, before
    // the audit or the removal of leftovers could reach through it.
    let wal = access::wal_dir(path, opts);
    let storage = if storage.exists(&wal) {
        storage.anchor(&wal)?
    } else {
        storage
    };
    let audit = access::audit(&storage, path, opts)?;
    let lock = storage.lock_exclusive(&path.join(LOCK_NAME), opts.permissions)?;
    // Again under the lock: another opener may have created it meanwhile.
    if look(&storage, path, opts, sched)? == Found::Creatable {
        create(&storage, path, opts, sched)?;
    }
    if storage.exists(&wal) {
        crate::io::profile::remove_scratch_leftovers(&storage, &wal)?;
    }
    crate::io::profile::remove_scratch_leftovers(&storage, path)?;
    assert!(!audit.entries.is_empty(), "the directory was looked at");
    Ok((storage, lock, audit))
}

/// What open finds at the database path before it writes anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// A database: `CONTROL` is there.
    Database,
    /// Nothing yet, or what an interrupted creation leaves, and creation is
    /// allowed.
    Creatable,
}

/// Looks at `path` without changing anything. A directory without
/// `CONTROL` may hold only what an interrupted creation leaves (it writes
/// `CONTROL` last), each recognised by its content, not its name
/// ([`left_shape`]): `LOCK` naming its holder, `data` starting with a page
/// of this engine or zero, `CONTROL.tmp` whose slots are each zero or start
/// with the control magic, or any of them empty; and the alignment probe's
/// file. Anything else is someone else's, and open refuses, naming it.
fn look<S: Storage>(
    storage: &S,
    path: &Path,
    opts: &Options,
    sched: &Arc<Scheduler>,
) -> Result<Found> {
    let refuse = |detail: String| Error::NotADatabase {
        path: path.to_path_buf(),
        detail,
    };
    if !storage.exists(path) {
        if !opts.create_if_missing {
            return Err(refuse(
                "no such directory, and create_if_missing is off".into(),
            ));
        }
        return Ok(Found::Creatable);
    }
    if storage.exists(&path.join(CONTROL_NAME)) {
        return Ok(Found::Database);
    }
    for name in storage.list_dir(path)? {
        // A probe's file, of a concurrent opener or of one killed before it
        // removed it (removed after the creation, in `claim`).
        if crate::io::profile::is_align_probe_file(storage, path, &name) {
            continue;
        }
        if !left_by_creation(storage, path, &name, sched)? {
            return Err(refuse(format!(
                "the directory has no CONTROL file and holds {name:?}, which this engine did \
                 not write; refusing to create a database over it"
            )));
        }
    }
    if !opts.create_if_missing {
        return Err(refuse(
            "no database here (no CONTROL file) and create_if_missing is off".into(),
        ));
    }
    Ok(Found::Creatable)
}

/// What an interrupted creation may leave in a file of one name: the file
/// is at most `max_len` bytes, and each `block`-byte block of its first
/// `checked` bytes is zero or carries `magic` at `at`.
struct LeftShape {
    at: usize,
    magic: &'static [u8],
    max_len: u64,
    checked: u64,
    block: usize,
}

/// The most a creation writes to `data`: two pages of the largest size.
const DATA_CREATED_BYTES: usize = 2 * page::PAGE_SIZES[page::PAGE_SIZES.len() - 1] as usize;
const _: () = {
    let mut i = 0;
    while i < page::PAGE_SIZES.len() {
        assert!(2 * page::PAGE_SIZES[i] as usize <= DATA_CREATED_BYTES);
        i += 1;
    }
};

/// The shape of `name`, if an interrupted creation can leave it.
/// - `LOCK` names its holder (its first block does; the rest is not read).
/// - `data` is written whole (two pages) and synced before `CONTROL.tmp`
///   exists; a crash before that sync may leave it sized but zero.
/// - `CONTROL.tmp` is allocated zero-filled, then slot 1 and slot 0 are
///   written, each synced ([`ControlFile::create_with`]).
fn left_shape(name: &str) -> Option<LeftShape> {
    use crate::format::control::{CONTROL_MAGIC, SLOT_BYTES};
    Some(match name {
        LOCK_NAME => LeftShape {
            at: 0,
            magic: crate::io::LOCK_HOLDER_PREFIX.as_bytes(),
            max_len: u64::MAX,
            checked: HEAD_BYTES as u64,
            block: HEAD_BYTES,
        },
        DATA_NAME => LeftShape {
            at: 4,
            magic: &page::PAGE_MAGIC,
            max_len: DATA_CREATED_BYTES as u64,
            checked: DATA_CREATED_BYTES as u64,
            block: DATA_CREATED_BYTES,
        },
        CONTROL_TMP_NAME => LeftShape {
            at: 0,
            magic: &CONTROL_MAGIC,
            max_len: 2 * SLOT_BYTES as u64,
            checked: 2 * SLOT_BYTES as u64,
            block: SLOT_BYTES,
        },
        _ => return None,
    })
}

/// Whether `name` in `path` is a file an interrupted creation of this
/// engine leaves (see [`look`] and [`left_shape`]).
fn left_by_creation<S: Storage>(
    storage: &S,
    path: &Path,
    name: &str,
    sched: &Arc<Scheduler>,
) -> Result<bool> {
    let Some(shape) = left_shape(name) else {
        return Ok(false);
    };
    let file = ScheduledFile::new(
        storage.open(
            &path.join(name),
            &FileOptions {
                read_only: true,
                direct_io: DirectIo::Off,
                ..FileOptions::default()
            },
        )?,
        Arc::clone(sched),
    );
    let len = file.len()?;
    if len > shape.max_len {
        return Ok(false);
    }
    let mut buf = crate::io::AlignedBuf::new(shape.block, HEAD_BYTES as u32)?;
    for offset in (0..len.min(shape.checked)).step_by(shape.block) {
        let n = file.read_at(IoClass::Read, buf.io_all_mut(), offset)?;
        assert!(n <= shape.block, "a read fills at most its buffer");
        let got = &buf.as_slice()[..n];
        let marked = got.get(shape.at..shape.at + shape.magic.len()) == Some(shape.magic);
        if !(marked || got.iter().all(|&b| b == 0)) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The alignment of [`left_by_creation`]'s buffer, and the block of `LOCK`
/// it reads.
const HEAD_BYTES: usize = 512;

/// A new database's first two pages, sealed: page 0 is reserved (the
/// data file's head), page 1 the empty root leaf.
fn first_pages(page_bytes: u32, unit: u32, db_id: &DbId) -> Result<crate::io::AlignedBuf> {
    assert!(
        page::PAGE_SIZES.contains(&page_bytes),
        "open checked the page size"
    );
    let mut buf = crate::io::AlignedBuf::new(2 * page_bytes as usize, unit)?;
    let pb = page_bytes as usize;
    for no in 0..2u64 {
        let p = &mut buf.as_mut_slice()[no as usize * pb..(no as usize + 1) * pb];
        if no == 0 {
            crate::btree::tree::init_free(p, PageId::ZERO);
        } else {
            node::init_leaf(p);
        }
        page::seal_in_place(p, PageId::new(no), db_id);
    }
    Ok(buf)
}

fn create<S: Storage>(
    storage: &S,
    path: &Path,
    opts: &Options,
    sched: &Arc<Scheduler>,
) -> Result<()> {
    let db_id = crate::io::random_id();
    let data_path = path.join(DATA_NAME);
    // What `look` let through is an interrupted creation's `data`.
    if storage.exists(&data_path) {
        storage.remove_file(&data_path)?;
    }
    let data = ScheduledFile::new(
        storage.open(
            &data_path,
            &FileOptions {
                create: true,
                exclusive: true,
                permissions: opts.permissions,
                direct_io: opts.direct_io,
                sync: SyncMethod::Fsync,
                ..FileOptions::default()
            },
        )?,
        Arc::clone(sched),
    );
    let buf = first_pages(opts.page_bytes, data.alignment().io_unit_bytes(), &db_id)?;
    let io = data.admit(IoClass::Urgent, buf.len() as u64);
    io.write_all_at(buf.io_all(), 0)?;
    io.sync_all()?;
    drop(io);
    let tmp = path.join(CONTROL_TMP_NAME);
    if storage.exists(&tmp) {
        storage.remove_file(&tmp)?;
    }
    ControlFile::create_with(
        storage,
        &tmp,
        opts.permissions,
        Control {
            page_bytes: opts.page_bytes,
            generation: 0,
            db_id,
            checkpoint_lsn: Lsn::ZERO,
            redo_lsn: Lsn::ZERO,
            root_page: PageId::new(1),
            catalog: PageId::ZERO,
            page_count: 2,
            freelist_head: PageId::ZERO,
            free_pages: Some(0),
            compaction: None,
            flags: crate::format::control::FLAG_HISTORY,
            // The line it is created on; a copy opened from a backup
            // starts another.
            history: crate::format::control::HISTORY_ZERO,
            history_lost: false,
        },
        Arc::clone(sched),
    )?;
    storage.rename(&tmp, &path.join(CONTROL_NAME))?;
    storage.sync_dir(path)?;
    assert!(
        storage.exists(&path.join(CONTROL_NAME)),
        "a creation ends with CONTROL"
    );
    Ok(())
}
