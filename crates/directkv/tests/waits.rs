//! Foreground waits are summed by cause, short ones included, so that an
//! operation's latency can be split into what it waited for: every durable
//! commit waits for the WAL sync once, every commit to enter the commit
//! section once, and every foreground cache miss for its read.

mod common;

use directkv::{Database, Durability, Options};

fn options() -> Options {
    Options {
        cache_bytes: 16 * 4096,
        page_bytes: 4096,
        durability: Durability::Sync,
        ..Options::default()
    }
}

#[test]
fn every_foreground_wait_is_summed_under_its_cause() {
    let dir = common::scratch();
    let value = vec![7u8; 300];
    {
        let db = Database::open(dir.path(), options()).expect("open");
        let before = db.stats().stalls.histograms;
        for t in 0..25u32 {
            let mut w = db.begin_write().expect("begin");
            for i in 0..20u32 {
                w.put(&(t * 20 + i).to_le_bytes(), &value).expect("put");
            }
            w.commit().expect("commit");
        }
        let after = db.stats().stalls.histograms;
        assert_eq!(after.wal_sync_wait.waits - before.wal_sync_wait.waits, 25);
        assert_eq!(after.commit_wait.waits - before.commit_wait.waits, 25);
        // Each commit held the commit section while it applied 20 puts.
        assert!(db.stats().transactions.commit_section_us > 0);
        assert_eq!(
            after.writer_lock_wait.waits, before.writer_lock_wait.waits,
            "no writer lock unless Options::serial_writers"
        );
        // A sync takes time on any disk; the sum is of real waits.
        assert!(after.wal_sync_wait.waited_us > before.wal_sync_wait.waited_us);
        // Stalls are the waits over a millisecond, a subset.
        assert!(after.wal_sync_wait.count <= after.wal_sync_wait.waits);
        db.close().expect("close");
    }
    let db = Database::open(dir.path(), options()).expect("reopen");
    let s0 = db.stats();
    let r = db.begin_read().expect("read");
    for k in 0..500u32 {
        assert_eq!(
            r.get(&k.to_le_bytes()).expect("get").as_deref(),
            Some(&value[..])
        );
    }
    let s1 = db.stats();
    let reads = s1.pages_read - s0.pages_read;
    assert!(reads > 16, "500 keys in a 16-page cache miss: {reads}");
    // Point reads read nothing ahead: every page read was a foreground
    // miss, and each was counted once.
    let misses = s1.stalls.histograms.read_miss.waits - s0.stalls.histograms.read_miss.waits;
    assert_eq!(misses, reads);
}
