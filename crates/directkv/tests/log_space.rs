//! The WAL's hard limit: with background checkpoints, the log since the redo
//! point never grows past `WAL_HARD_LIMIT_FACTOR` checkpoint distances plus
//! the transaction that crossed it, however fast transactions come.

mod common;

use directkv::internals::engine::WAL_HARD_LIMIT_FACTOR;
use directkv::{Database, Durability, Error, Options, CHECKPOINT_WAL_BYTES_MIN};

#[test]
fn the_log_since_the_redo_point_stays_under_the_hard_limit() {
    let dir = common::scratch();
    let distance = 1u64 << 20;
    let db = Database::open(
        dir.path(),
        Options {
            cache_bytes: 4 << 20,
            page_bytes: 4096,
            checkpoint_wal_bytes: distance,
            durability: Durability::NoSyncNotDurable,
            // CI reruns this suite on the thread-pool backend through the
            // variable the directkv command honours; the library reads no
            // environment itself.
            async_io: common::env_async_io(),
            ..Options::default()
        },
    )
    .expect("open");
    let value = vec![5u8; 2000];
    let mut largest_txn = 0u64;
    let mut worst = 0u64;
    for round in 0..300u32 {
        let before = db.stats().wal_bytes;
        let mut w = db.begin_write().expect("begin");
        for i in 0..20u32 {
            let key = (round * 7919 + i * 104_729) % 50_000;
            w.put(&key.to_le_bytes(), &value).expect("put");
        }
        w.commit().expect("commit");
        let s = db.stats();
        largest_txn = largest_txn.max(s.wal_bytes - before);
        worst = worst.max(s.wal_since_redo_bytes);
    }
    let s = db.stats();
    assert!(s.checkpoints > 0, "background checkpoints ran");
    assert!(
        worst <= WAL_HARD_LIMIT_FACTOR * distance + largest_txn,
        "log since redo reached {worst} bytes (limit {} + one transaction of {largest_txn})",
        WAL_HARD_LIMIT_FACTOR * distance
    );
    assert_eq!(
        s.stalls.log_space_wait,
        s.stalls.histograms.log_space_wait.count
    );
}

/// A checkpoint distance below the smallest is refused at open: the log a
/// checkpoint itself writes would keep every committer waiting for space
/// no checkpoint frees. The smallest opens and commits.
#[test]
fn a_checkpoint_distance_below_the_smallest_is_refused() {
    let dir = common::scratch();
    let with = |distance| Options {
        checkpoint_wal_bytes: distance,
        ..Options::default()
    };
    for tiny in [0, CHECKPOINT_WAL_BYTES_MIN - 1] {
        match Database::open(dir.path(), with(tiny)) {
            Err(Error::InvalidArgument(why)) => {
                assert!(why.contains("checkpoint_wal_bytes"), "{why}")
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a checkpoint distance of {tiny} bytes opened"),
        }
    }
    let db = Database::open(dir.path(), with(CHECKPOINT_WAL_BYTES_MIN)).expect("the smallest");
    for i in 0..200u32 {
        let mut w = db.begin_write().expect("begin");
        w.put(&i.to_le_bytes(), &[1u8; 1000]).expect("put");
        w.commit().expect("commit");
    }
    assert!(db.stats().checkpoints > 0, "checkpoints ran");
}
