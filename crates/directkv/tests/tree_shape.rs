//! The shape of the tree a load leaves: appends in key order fill leaves
//! completely, other inserts split pages in half, and updates of a packed
//! page in place keep it packed.

// Big-endian keys: byte order is numeric order, so 0..n is an append.
#![allow(clippy::big_endian_bytes)]

mod common;

use directkv::{Database, Durability, Options};

fn options() -> Options {
    Options {
        cache_bytes: 4 << 20,
        page_bytes: 4096,
        durability: Durability::NoSyncNotDurable,
        // CI reruns this suite on the thread-pool backend through the
        // variable the directkv command honours; the library reads no
        // environment itself.
        async_io: common::env_async_io(),
        ..Options::default()
    }
}

fn load(db: &Database, keys: impl Iterator<Item = u32>) {
    let value = [7u8; 100];
    let keys: Vec<u32> = keys.collect();
    for chunk in keys.chunks(500) {
        let mut w = db.begin_write().expect("begin");
        for k in chunk {
            w.put(&k.to_be_bytes(), &value).expect("put");
        }
        w.commit().expect("commit");
    }
}

const KEYS: u32 = 20_000;

/// Leaf pages needed if every page were packed: cell = 4-byte key, 100-byte
/// value, a few bytes of header and slot each.
fn packed_pages() -> f64 {
    f64::from(KEYS) * 112.0 / 4000.0
}

#[test]
fn appends_in_key_order_pack_leaves() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), options()).expect("open");
    load(&db, 0..KEYS);
    let r = db.check().expect("check");
    assert_eq!(r.keys, u64::from(KEYS));
    let ratio = r.tree_pages as f64 / packed_pages();
    assert!(
        ratio < 1.15,
        "sequential load used {ratio:.2}x the packed pages"
    );

    // Same-size updates in place do not split the packed pages.
    let before = r.tree_pages;
    let mut w = db.begin_write().expect("begin");
    for k in (0..KEYS).step_by(7) {
        w.put(&k.to_be_bytes(), &[9u8; 100]).expect("put");
    }
    w.commit().expect("commit");
    assert_eq!(db.check().expect("check").tree_pages, before);
}

#[test]
fn inserts_in_random_order_split_in_half() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), options()).expect("open");
    // A bijection of 0..KEYS (KEYS is not a multiple of 7919).
    load(
        &db,
        (0..KEYS).map(|i| (u64::from(i) * 7919 % u64::from(KEYS)) as u32),
    );
    let r = db.check().expect("check");
    assert_eq!(r.keys, u64::from(KEYS));
    let ratio = r.tree_pages as f64 / packed_pages();
    assert!(
        (1.2..2.1).contains(&ratio),
        "random load used {ratio:.2}x the packed pages"
    );
    // Appending past the end of a tree built at random still packs.
    let before = r.tree_pages;
    load(&db, KEYS..2 * KEYS);
    let grown = db.check().expect("check").tree_pages - before;
    assert!(
        (grown as f64) < packed_pages() * 1.15,
        "append grew {grown} pages"
    );
}

#[test]
fn prefetch_brings_the_pages_of_keys_into_the_cache() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), options()).expect("open");
    load(&db, 0..KEYS);
    db.close().expect("close");
    let db = Database::open(dir.path(), options()).expect("reopen");
    let keys: Vec<[u8; 4]> = (0..KEYS).step_by(997).map(u32::to_be_bytes).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    db.prefetch(&refs).expect("prefetch");
    let before = db.stats();
    assert!(before.cache_misses > 0, "a cold cache misses");
    let r = db.begin_read().expect("read");
    for k in &keys {
        assert!(r.get(k).expect("get").is_some());
    }
    let after = db.stats();
    assert_eq!(after.cache_misses, before.cache_misses, "every read hit");
    // A prefetch of absent keys is harmless and changes nothing.
    db.prefetch(&[b"no such key".as_slice()]).expect("prefetch");
    assert_eq!(db.check().expect("check").keys, u64::from(KEYS));
}
