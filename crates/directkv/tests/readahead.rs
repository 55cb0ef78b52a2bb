//! The engine's own readahead: a sequential scan reads the following leaves
//! ahead of itself, point reads and short scans never trigger it, and it can
//! be turned off. Counted through `stats()`, never timed.

// Big-endian keys: byte order is numeric order.
#![allow(clippy::big_endian_bytes)]

mod common;

use directkv::{Database, Durability, Options};

const KEYS: u32 = 40_000;

fn options(readahead_pages: usize) -> Options {
    Options {
        cache_bytes: 2 << 20,
        page_bytes: 4096,
        durability: Durability::NoSyncNotDurable,
        readahead_pages,
        // CI reruns this suite on the thread-pool backend through the
        // variable the directkv command honours; the library reads no
        // environment itself.
        async_io: common::env_async_io(),
        ..Options::default()
    }
}

fn build(dir: &std::path::Path) {
    let db = Database::open(dir, options(0)).expect("open");
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(1000) {
        let mut w = db.begin_write().expect("begin");
        for k in chunk {
            w.put(&k.to_be_bytes(), &[3u8; 100]).expect("put");
        }
        w.commit().expect("commit");
    }
    db.close().expect("close");
}

#[test]
fn a_sequential_scan_reads_ahead_and_point_reads_do_not() {
    let dir = common::scratch();
    build(dir.path());
    let db = Database::open(dir.path(), options(32)).expect("open");

    // Point reads at random: no readahead.
    let r = db.begin_read().expect("read");
    for i in 0..2000u32 {
        let k = (i.wrapping_mul(2_654_435_761) % KEYS).to_be_bytes();
        assert!(r.get(&k).expect("get").is_some());
    }
    // A short scan inside one leaf: none either.
    assert_eq!(r.range(&b""[..]..&3u32.to_be_bytes()[..]).count(), 3);
    assert_eq!(db.stats().readahead_reads, 0);

    // A full scan (the data is 2x the cache) reads ahead, and returns every
    // key in order.
    let mut n = 0u32;
    for kv in r.range::<std::ops::RangeFull>(..) {
        let (k, _) = kv.expect("entry");
        assert_eq!(k, n.to_be_bytes());
        n += 1;
    }
    assert_eq!(n, KEYS);
    let s = db.stats();
    assert!(
        s.readahead_reads > 50,
        "a full scan of ~1,100 leaves read {} ahead",
        s.readahead_reads
    );
}

#[test]
fn readahead_can_be_turned_off() {
    let dir = common::scratch();
    build(dir.path());
    let db = Database::open(dir.path(), options(0)).expect("open");
    let n = db
        .begin_read()
        .expect("read")
        .range::<std::ops::RangeFull>(..)
        .count();
    assert_eq!(n, KEYS as usize);
    assert_eq!(db.stats().readahead_reads, 0);
}
