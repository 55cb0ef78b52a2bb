//! Recovery through the public API: committed data survives a reopen without
//! checkpoint (redo from the WAL), after a checkpoint (redo from its redo
//! point), and with torn or rotten data pages repaired from full-page images.
//! Each regression found by the model test is pinned here under its own name.

mod common;

use std::path::Path;

use directkv::{Database, Durability, Options};

fn options() -> Options {
    Options {
        cache_bytes: 16 * 4096,
        page_bytes: 4096,
        wal_sync: common::SIM_SYNC,
        durability: Durability::Sync,
        wal_segment_bytes: 256 * 1024,
        // CI reruns this suite on the thread-pool backend through the
        // variable the directkv command honours; the library reads no
        // environment itself.
        async_io: common::env_async_io(),
        ..Options::default()
    }
}

fn all(db: &Database) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.begin_read()
        .expect("read")
        .range::<std::ops::RangeFull>(..)
        .collect::<Result<_, _>>()
        .expect("scan")
}

/// Regression (model test): a transaction logging a full image and then a
/// delta of the same page lost the delta on replay, because applying the image
/// stamped the page with the commit LSN before the delta was considered.
#[test]
fn regression_two_records_for_one_page_in_one_transaction() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), options()).expect("open");
    let mut w = db.begin_write().expect("begin");
    w.put(b"k000", &[1u8; 41]).expect("put");
    w.put(b"k261", &[2u8; 3000]).expect("put");
    w.commit().expect("commit");
    drop(db);
    let db = Database::open(dir.path(), options()).expect("reopen");
    assert_eq!(
        db.begin_read().expect("r").get(b"k261").expect("get"),
        Some(vec![2u8; 3000])
    );
    assert_eq!(all(&db).len(), 2);
}

fn fill(db: &Database, n: u32, tag: u8) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
        let mut w = db.begin_write().expect("begin");
        for i in chunk {
            w.put(format!("key{i:05}").as_bytes(), &[tag; 200])
                .expect("put");
        }
        w.commit().expect("commit");
    }
}

#[test]
fn redo_after_a_checkpoint_replays_only_what_follows_it() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), options()).expect("open");
    fill(&db, 1000, 1);
    db.checkpoint().expect("checkpoint");
    fill(&db, 500, 2);
    let before = all(&db);
    let stats = db.stats();
    assert!(
        stats.checkpoints >= 1 && stats.full_page_images > 0,
        "{stats:?}"
    );
    drop(db);
    let db = Database::open(dir.path(), options()).expect("reopen");
    assert_eq!(all(&db), before);
}

/// Torn data pages (F4) and bit rot (F7) on pages changed since the last
/// checkpoint are rebuilt from the full-page images the WAL holds for them,
/// LZ4-compressed (the default; these rows compress) or whole.
#[test]
fn torn_pages_are_rebuilt_from_full_page_images() {
    torn_pages_rebuilt(true);
}

#[test]
fn torn_pages_are_rebuilt_from_uncompressed_full_page_images() {
    torn_pages_rebuilt(false);
}

fn torn_pages_rebuilt(compress: bool) {
    use std::os::unix::fs::FileExt;
    let dir = common::scratch();
    let options = || Options {
        compress_page_images: compress,
        ..options()
    };
    let db = Database::open(dir.path(), options()).expect("open");
    fill(&db, 800, 1);
    db.checkpoint().expect("checkpoint");
    // Change every leaf again, then write the pages out without a checkpoint.
    let before = db.stats();
    fill(&db, 800, 2);
    let expect = all(&db);
    let stats = db.stats();
    let images = stats.full_page_images - before.full_page_images;
    let image_bytes = stats.full_page_image_bytes - before.full_page_image_bytes;
    assert!(images > 0, "{stats:?}");
    if compress {
        assert!(
            image_bytes < images * 4096 / 4,
            "{image_bytes} bytes for {images} images"
        );
    } else {
        assert!(
            image_bytes > images * 4096,
            "{image_bytes} bytes for {images} images"
        );
    }
    drop(db);
    let data = dir.path().join("data");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&data)
        .expect("data");
    let pages = f.metadata().expect("meta").len() / 4096;
    // Tear the second half of every other page: old bytes there become garbage.
    for p in (2..pages).step_by(2) {
        f.write_all_at(&[0xEE; 2048], p * 4096 + 2048)
            .expect("tear");
    }
    f.sync_all().expect("sync");
    let db = Database::open(dir.path(), options()).expect("recovery repairs the torn pages");
    assert_eq!(all(&db), expect);
    // Recovery reads images of either kind, whatever the option is now.
    drop(db);
    let db = Database::open(
        dir.path(),
        Options {
            compress_page_images: !compress,
            ..options()
        },
    )
    .expect("reopen with the other setting");
    assert_eq!(all(&db), expect);
}

/// Every page changed since the redo point starts in the log with a full
/// image, and replay installs it without reading the data file: with every
/// such page garbage on disk, the database still recovers, and no page is read.
#[test]
fn replay_installs_full_images_without_reading_the_data_file() {
    use std::os::unix::fs::FileExt;
    let dir = common::scratch();
    let options = || Options {
        cache_bytes: 1024 * 4096,
        ..options()
    };
    let db = Database::open(dir.path(), options()).expect("open");
    fill(&db, 800, 1);
    db.checkpoint().expect("checkpoint");
    let at_checkpoint = std::fs::read(dir.path().join("data")).expect("read");
    fill(&db, 800, 2);
    let expect = all(&db);
    drop(db);
    // The pages the replay will change: those a checkpointed copy of this
    // state holds differently from the checkpoint.
    let crashed = common::scratch();
    common::copy_tree(dir.path(), crashed.path());
    Database::open(dir.path(), options())
        .expect("recover")
        .close()
        .expect("close");
    let closed = std::fs::read(dir.path().join("data")).expect("read");
    let changed: Vec<u64> = (1..(closed.len() / 4096) as u64)
        .filter(|&p| {
            let r = (p * 4096) as usize..((p + 1) * 4096) as usize;
            at_checkpoint.get(r.clone()) != closed.get(r)
        })
        .collect();
    assert!(changed.len() > 10, "{changed:?}");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(crashed.path().join("data"))
        .expect("data");
    for &p in &changed {
        f.write_all_at(&[0xA5; 4096], p * 4096).expect("garble");
    }
    f.sync_all().expect("sync");
    drop(f);
    let db = Database::open(crashed.path(), options()).expect("replay from images alone");
    let r = db.stats().recovery;
    assert_eq!(r.transactions, 16, "{r:?}");
    assert!(
        r.wal_bytes > 0 && r.page_records >= r.pages_from_images,
        "{r:?}"
    );
    assert_eq!(r.pages_from_images, changed.len() as u64, "{r:?}");
    assert_eq!(r.pages_read, 0, "{r:?}");
    assert_eq!(all(&db), expect);
    // The end-of-recovery checkpoint wrote what replay changed: the next
    // open replays nothing.
    drop(db);
    let db = Database::open(crashed.path(), options()).expect("reopen after replay");
    assert_eq!(db.stats().recovery.transactions, 0);
    assert_eq!(all(&db), expect);
    // A clean close leaves nothing to replay.
    db.close().expect("close");
    let db = Database::open(crashed.path(), options()).expect("reopen");
    let r = db.stats().recovery;
    assert_eq!((r.transactions, r.page_records), (0, 0), "{r:?}");
    assert_eq!(all(&db), expect);
}

/// Replay through a cache far smaller than the pages it changes: it writes
/// the coldest dirty pages out in batches as it goes, reads back the pages it
/// evicted and meets again (those in its lookahead ahead of time, in batches
/// in flight together), and ends with every commit in place.
#[test]
fn replay_through_a_small_cache_cleans_as_it_goes() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), options()).expect("open");
    fill(&db, 2000, 1);
    db.checkpoint().expect("checkpoint");
    // Many small transactions that come back to pages after others.
    for round in 0..3u32 {
        for i in (0..2000u32).step_by(7) {
            let mut w = db.begin_write().expect("begin");
            w.put(format!("key{i:05}").as_bytes(), &[10 + round as u8; 200])
                .expect("put");
            w.commit().expect("commit");
        }
    }
    let expect = all(&db);
    drop(db);
    let db = Database::open(dir.path(), options()).expect("reopen");
    let r = db.stats().recovery;
    assert_eq!(r.transactions, 3 * 286, "{r:?}");
    assert!(
        r.pages_from_images > 16,
        "more pages than the cache holds: {r:?}"
    );
    assert!(r.pages_read > 0, "evicted pages met again are read: {r:?}");
    assert_eq!(all(&db), expect);
}

/// Pages replay evicted and meets again in the deltas of commits still in
/// its lookahead are read ahead of their apply, many in one batch in flight
/// together, and the replay ends in the state that was committed.
#[test]
fn replay_reads_ahead_many_pages_at_once() {
    let dir = common::scratch();
    let o = Options {
        cache_bytes: 256 * 4096,
        ..options()
    };
    let db = Database::open(dir.path(), o.clone()).expect("open");
    fill(&db, 20_000, 1);
    db.checkpoint().expect("checkpoint");
    // Two rounds over every leaf, two leaves a commit (a round is more
    // commits than the lookahead holds): the first logs each leaf's image,
    // the second a delta of a leaf replay has long evicted.
    for round in 0..2u8 {
        let keys: Vec<u32> = (0..20_000u32).step_by(18).collect();
        for chunk in keys.chunks(2) {
            let mut w = db.begin_write().expect("begin");
            for i in chunk {
                w.put(format!("key{i:05}").as_bytes(), &[20 + round; 200])
                    .expect("put");
            }
            w.commit().expect("commit");
        }
    }
    let expect = all(&db);
    drop(db);
    let db = Database::open(dir.path(), o).expect("reopen");
    let r = db.stats().recovery;
    assert!(
        r.pages_from_images > 256,
        "more leaves than the cache holds: {r:?}"
    );
    assert!(r.read_ahead_batch_max > 1, "reads went out together: {r:?}");
    assert!(r.read_ahead_pages >= r.read_ahead_batch_max, "{r:?}");
    assert_eq!(all(&db), expect);
}

#[test]
fn a_database_is_one_process_and_not_a_random_directory() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), options()).expect("open");
    let again = Database::open(dir.path(), options());
    assert!(matches!(again, Err(directkv::Error::DatabaseLocked { .. })));
    drop(db);
    let other = common::scratch();
    std::fs::write(other.path().join("notes.txt"), b"mine").expect("write");
    match Database::open(other.path(), options()) {
        Err(directkv::Error::NotADatabase { .. }) => {}
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("opened a random directory"),
    }
    assert_eq!(
        std::fs::read(other.path().join("notes.txt")).expect("read"),
        b"mine"
    );
    assert!(
        !other.path().join("CONTROL").exists(),
        "nothing created there"
    );
}

#[test]
fn oversized_input_is_refused_and_changes_nothing() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), options()).expect("open");
    let mut w = db.begin_write().expect("begin");
    w.put(b"ok", b"v").expect("put");
    assert!(
        w.put(&[7u8; 2000], b"v").is_err(),
        "key over the 4 KiB-page limit"
    );
    w.commit().expect("commit");
    // A 16 MiB value through overflow pages, with a cache large enough to hold
    // the pages of its commit.
    drop(db);
    let big = Options {
        cache_bytes: 64 << 20,
        ..options()
    };
    let db = Database::open(dir.path(), big.clone()).expect("open");
    let v: Vec<u8> = (0..16 << 20).map(|i: u32| (i % 251) as u8).collect();
    let mut w = db.begin_write().expect("begin");
    w.put(b"big", &v).expect("put");
    w.commit().expect("commit");
    drop(db);
    let db = Database::open(dir.path(), big).expect("reopen");
    assert_eq!(
        db.begin_read().expect("r").get(b"big").expect("get"),
        Some(v)
    );
    assert_eq!(
        db.begin_read().expect("r").get(b"ok").expect("get"),
        Some(b"v".to_vec())
    );
}

fn _assert_send_sync<T: Send + Sync>() {}
#[test]
fn database_is_send_and_sync() {
    _assert_send_sync::<Database>();
    let _ = Path::new(".");
}

/// A full scan of a data set larger than the cache leaves the hot set's hit
/// ratio within 10% of what it was (the scan's pages never become hot).
#[test]
fn a_full_scan_does_not_evict_the_hot_set() {
    let dir = common::scratch();
    let opts = Options {
        cache_bytes: 256 * 4096,
        durability: Durability::NoSyncNotDurable,
        ..options()
    };
    let db = Database::open(dir.path(), opts).expect("open");
    // About 4x the cache.
    fill(&db, 12_000, 1);
    let hot: Vec<Vec<u8>> = (0..12_000u32)
        .step_by(400)
        .map(|i| format!("key{i:05}").into_bytes())
        .collect();
    let ratio = |db: &Database| {
        let before = db.stats();
        let r = db.begin_read().expect("read");
        for _ in 0..20 {
            for k in &hot {
                assert!(r.get(k).expect("get").is_some());
            }
        }
        let after = db.stats();
        let hits = after.cache_hits - before.cache_hits;
        hits as f64 / (hits + after.cache_misses - before.cache_misses) as f64
    };
    ratio(&db);
    let warm = ratio(&db);
    let scanned = db
        .begin_read()
        .expect("read")
        .range::<std::ops::RangeFull>(..)
        .count();
    assert_eq!(scanned, 12_000);
    let after = ratio(&db);
    assert!(
        after >= warm - 0.10,
        "hit ratio {warm:.3} before the scan, {after:.3} after"
    );
}

/// The WAL may live on another filesystem (here tmpfs, which has no direct
/// I/O, beside a data file that has it); the default sync method is measured
/// once for the WAL directory and saved as its profile.
#[test]
fn wal_on_another_filesystem_with_a_measured_default() {
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("skipped: no /dev/shm");
        return;
    };
    let dir = common::scratch();
    let opts = Options {
        wal_dir: Some(shm.path().join("wal")),
        wal_sync: None,
        ..options()
    };
    let db = Database::open(dir.path(), opts.clone()).expect("open");
    let chosen = db.stats().wal_sync;
    assert!(chosen.method.is_durable());
    assert!(!chosen.direct, "tmpfs gets no direct I/O: {chosen}");
    assert!(shm
        .path()
        .join("wal")
        .join(directkv::internals::io::profile::DeviceProfile::FILE_NAME)
        .exists());
    fill(&db, 300, 4);
    drop(db);
    assert!(
        !dir.path().join("wal").exists(),
        "no WAL in the database directory"
    );
    let db = Database::open(dir.path(), opts).expect("reopen");
    assert_eq!(db.stats().wal_sync, chosen, "the saved profile is used");
    assert_eq!(all(&db).len(), 300);
}
