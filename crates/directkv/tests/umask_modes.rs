//! A new database is readable only by its owner under any umask (issue 19):
//! every directory the engine creates is `0700` and every file `0600`
//! (`0750`/`0640` with `Permissions::GroupReadable`), less whatever the umask
//! takes away, and nothing is ever more open than that.
//!
//! The umask belongs to the whole process, so this binary holds one test,
//! which sets it, creates databases (through the sync probe and device
//! profile of a first open, with stats published), checks the mode of every
//! path under them while open and after close, and restores it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use directkv::{Database, Options, Permissions};

/// Sets the process umask; returns the old one.
fn set_umask(mask: u32) -> u32 {
    // SAFETY: umask(2) only swaps an integer in the process; it cannot fail.
    let old = unsafe { libc::umask(mask as libc::mode_t) };
    old as u32
}

/// Every path under `root` (not following symlinks), with its `lstat`.
fn walk(root: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).expect("lstat");
        if meta.is_dir() {
            for e in std::fs::read_dir(&p).expect("read_dir") {
                stack.push(e.expect("entry").path());
            }
        }
        out.push((p, meta));
    }
    out
}

/// Checks every path under `root` against the modes `permissions` and `umask`
/// give; the device profile and probe files are private in either mode.
fn assert_modes(root: &Path, permissions: Permissions, umask: u32, when: &str) {
    let paths = walk(root);
    assert!(paths.len() >= 5, "{when}: the database's files are there");
    for (path, meta) in paths {
        let name = path.file_name().expect("name").to_string_lossy();
        let private_always = name.starts_with(".directkv-");
        let want = match (meta.is_dir(), private_always) {
            (true, _) => permissions.dir_mode(),
            (false, true) => Permissions::Private.file_mode(),
            (false, false) => permissions.file_mode(),
        } & !umask;
        assert!(
            meta.is_dir() || meta.is_file(),
            "{}: no links",
            path.display()
        );
        assert_eq!(
            meta.permissions().mode() & 0o7777,
            want,
            "{when}: {} under umask {umask:04o}",
            path.display()
        );
        assert_eq!(meta.uid(), euid(), "{}", path.display());
    }
}

/// The effective user id: the owner of every file this process creates.
fn euid() -> u32 {
    // SAFETY: geteuid(2) takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

fn create_and_check(umask: u32, permissions: Permissions) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("parent");
    let path = root.join("db");
    let opts = Options {
        cache_bytes: 4 << 20,
        permissions,
        publish_stats: true,
        ..Options::default()
    };
    let db = Database::open(&path, opts.clone()).expect("create");
    let mut w = db.begin_write().expect("begin");
    w.put(b"key", b"value").expect("put");
    w.commit().expect("commit");
    db.checkpoint().expect("checkpoint");
    assert_modes(&root, permissions, umask, "open");
    db.close().expect("close");
    assert_modes(&root, permissions, umask, "closed");
    let db = Database::open(&path, opts).expect("reopen");
    assert!(db.stats().readable_by_others.is_empty());
    db.close().expect("close");
}

#[test]
fn issue19_modes_after_create_under_permissive_and_strict_umasks() {
    let old = set_umask(0o000);
    for umask in [0o000, 0o077, 0o027] {
        set_umask(umask);
        create_and_check(umask, Permissions::Private);
        create_and_check(umask, Permissions::GroupReadable);
    }
    set_umask(old);
}
