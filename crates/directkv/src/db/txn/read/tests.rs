//! Tests of [`super`]: the unit tests of `txn.rs`, kept beside it.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use crate::btree::tree;
use crate::db::txn::commit::{CommitCtx, PoolPages};
use crate::db::txn::tables;
use crate::{Database, Lsn, Options};

/// A commit holds the commit section's gate and the tree's write lock
/// for as long as it applies; reads of every kind finish meanwhile.
#[test]
fn reads_finish_while_a_commit_holds_the_tree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        cache_bytes: 4 << 20,
        page_bytes: 4096,
        ..Options::default()
    };
    let db = Database::open(dir.path(), opts).expect("open");
    let mut w = db.begin_write().expect("begin");
    for i in 0..2000u32 {
        w.put(format!("k{i:05}").as_bytes(), &[7; 40]).expect("put");
    }
    w.commit().expect("commit");
    let section = db.inner.txns.committer.lock().expect("section");
    let tree = db.inner.txns.tree.write().expect("tree lock");
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let r = db.begin_read().expect("begin_read");
            let got = r.get(b"k01234").expect("get");
            let fwd = r.prefix(b"k0").count();
            let rev = r.range(&b"k01"[..]..&b"k02"[..]).rev().count();
            let mut w = db.begin_write().expect("begin_write");
            let locked = w.get_for_update(b"k00042").expect("get_for_update");
            tx.send((got, fwd, rev, locked)).expect("send");
        });
        let got = rx.recv_timeout(Duration::from_secs(60));
        drop(tree);
        drop(section);
        let (got, fwd, rev, locked) = got.expect("the reads finished beside the commit");
        assert_eq!(got, Some(vec![7; 40]));
        assert_eq!((fwd, rev), (2000, 1000));
        assert_eq!(locked, Some(vec![7; 40]));
    });
}

/// A commit that changes a value and then fails puts the page back
/// inside a structure change, before it retracts its versions: a read
/// that took the changed value from the tree, and would find no
/// version of it after the retraction, sees the sequence moved and runs
/// its descent again, never returning a value that was not committed.
#[test]
fn a_rolled_back_change_moves_the_shape_before_its_versions_go() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(dir.path(), Options::default()).expect("open");
    let mut w = db.begin_write().expect("begin");
    w.put(b"k", b"old").expect("put");
    w.commit().expect("commit");
    let r = db.begin_read().expect("begin_read");
    let inner = &*db.inner;
    let (seq, root) = inner.txns.shape.stable().expect("no change under way");
    let section = inner.txns.committer.lock().expect("section");
    let meta = inner.txns.tree.write().expect("tree lock");
    let horizon = Lsn::new(inner.ckpt.fpi_horizon.load(Ordering::Acquire));
    let mut ctx = CommitCtx::new(
        inner.commit_env(),
        *meta,
        inner.vitals.counters.next_txn(),
        horizon,
    );
    let csn = inner.txns.versions.visible() + 1;
    let before = vec![(
        tables::qualify(tables::DEFAULT, b"k"),
        Some(b"old".to_vec()),
    )];
    inner.txns.versions.stage(csn, before).expect("stage");
    tree::replace(&mut ctx, b"k", b"new").expect("a value-only change");
    let latest = tree::get(&PoolPages { pool: &inner.pool }, root, b"k").expect("get");
    assert_eq!(latest.as_deref(), Some(&b"new"[..]), "the tree's value");
    assert!(
        inner.txns.shape.unchanged(seq),
        "a value change is no structure change"
    );
    ctx.rollback();
    inner.txns.versions.retract(csn);
    assert!(
        !inner.txns.shape.unchanged(seq),
        "a read that took the rolled-back value runs again"
    );
    drop(meta);
    drop(section);
    assert_eq!(r.get(b"k").expect("get").as_deref(), Some(&b"old"[..]));
    assert_eq!(
        db.begin_read()
            .expect("read")
            .get(b"k")
            .expect("get")
            .as_deref(),
        Some(&b"old"[..])
    );
}

/// A trail is valid only while no structure change began since it was
/// taken; one whose leaf was freed since (a misuse the sequence check
/// prevents) is refused as corruption, never followed into a page that
/// is no longer a leaf.
#[test]
fn a_trail_is_valid_until_the_structure_changes_and_checked_when_used() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        page_bytes: 4096,
        ..Options::default()
    };
    let db = Database::open(dir.path(), opts).expect("open");
    let key = |i: u32| format!("k{i:05}").into_bytes();
    let mut w = db.begin_write().expect("begin");
    for i in 0..400 {
        w.put(&key(i), &[3; 60]).expect("put");
    }
    w.commit().expect("commit");
    let inner = &*db.inner;
    let (v, traced) =
        super::get_committed_traced(inner, &tables::Tree::Default, &key(0)).expect("read");
    let traced = traced.expect("the default keyspace has a tree");
    assert_eq!(v, Some(vec![3; 60]));
    let (_, fresh) =
        super::get_committed_traced(inner, &tables::Tree::Default, &key(1)).expect("read");
    assert!(
        fresh.expect("a tree").valid(inner).is_some(),
        "nothing changed since"
    );
    let (_, stale) =
        super::get_committed_traced(inner, &tables::Tree::Default, &key(1)).expect("read");
    // Emptying the first leaf frees it: a structure change.
    let mut w = db.begin_write().expect("begin");
    for i in 0..=200 {
        w.delete(&key(i)).expect("delete");
    }
    w.commit().expect("commit");
    assert!(
        stale.expect("a tree").valid(inner).is_none(),
        "the structure changed"
    );
    let section = inner.txns.committer.lock().expect("section");
    let meta = inner.txns.tree.write().expect("tree lock");
    let horizon = Lsn::new(inner.ckpt.fpi_horizon.load(Ordering::Acquire));
    let mut ctx = CommitCtx::new(
        inner.commit_env(),
        *meta,
        inner.vitals.counters.next_txn(),
        horizon,
    );
    let followed = tree::put_along(&mut ctx, &key(0), b"v", Some(traced.trail));
    assert!(
        matches!(followed, Err(crate::Error::Corruption { .. })),
        "{followed:?}"
    );
    ctx.rollback();
    drop(meta);
    drop(section);
    assert_eq!(
        db.begin_read().expect("read").get(&key(0)).expect("get"),
        None
    );
}
