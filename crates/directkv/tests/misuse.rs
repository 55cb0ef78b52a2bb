//! Misuse of the public API is an error, never a hang. Write transactions
//! run at once, so a thread may hold several; with
//! `Options::serial_writers` (one at a time) a thread that holds the write
//! transaction and asks for another gets `InvalidArgument` at once (it would
//! otherwise wait for itself forever), and the transaction it holds still
//! commits. Pins issue 17, case 7.

mod common;

use std::time::Duration;

use directkv::{Database, Error, Options, WriteOptions};

fn opts() -> Options {
    common::unsynced(4 << 20)
}

#[test]
fn a_thread_may_hold_two_write_transactions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(dir.path(), opts()).expect("open");
    let mut first = db.begin_write().expect("first");
    let mut second = db.begin_write().expect("second, beside it");
    first.put(b"a", b"1").expect("put");
    second.put(b"b", b"2").expect("put");
    second.commit().expect("commit");
    first.commit().expect("commit");
    let r = db.begin_read().expect("read");
    assert_eq!(r.get(b"a").expect("get"), Some(b"1".to_vec()));
    assert_eq!(r.get(b"b").expect("get"), Some(b"2".to_vec()));
}

/// A database of one write transaction at a time (`serial_writers`).
fn open_serial(dir: &std::path::Path) -> Database {
    let serial = Options {
        serial_writers: true,
        ..opts()
    };
    Database::open(dir, serial).expect("open")
}

/// With `serial_writers`, a thread that holds the write transaction but
/// did not begin it (it was moved there) and begins another waits for
/// itself: the lock timeout ends the wait, and the first still commits.
#[test]
fn a_serial_writer_waiting_for_a_transaction_it_holds_times_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open_serial(dir.path());
    let mut first = db.begin_write().expect("first");
    first.put(b"k", b"1").expect("put");
    let brief = WriteOptions {
        lock_timeout: Duration::from_millis(100),
        ..WriteOptions::default()
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let first = first;
            match db.begin_write_with(&brief) {
                Err(Error::LockTimeout { .. }) => {}
                Err(e) => panic!("expected LockTimeout, got {e}"),
                Ok(_) => panic!("a second serial write transaction"),
            }
            first.commit().expect("the first still commits");
        });
    });
    let mut next = db.begin_write_with(&brief).expect("the lock is free");
    next.put(b"k", b"2").expect("put");
    next.commit().expect("commit");
    assert_eq!(
        db.begin_read().expect("read").get(b"k").expect("get"),
        Some(b"2".to_vec())
    );
}

#[test]
fn issue17_second_begin_write_on_one_thread_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = open_serial(dir.path());
    let mut first = db.begin_write().expect("first");
    first.put(b"k", b"1").expect("put");
    match db.begin_write() {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("already holds"), "{msg}"),
        Err(e) => panic!("expected InvalidArgument, got {e}"),
        Ok(_) => panic!("a second write transaction on the same thread"),
    }
    first.commit().expect("the first still commits");
    // Once it ended, the thread may begin another.
    let mut second = db.begin_write().expect("second");
    second.put(b"k", b"2").expect("put");
    second.commit().expect("commit");
    assert_eq!(
        db.begin_read().expect("read").get(b"k").expect("get"),
        Some(b"2".to_vec())
    );
}

#[test]
fn another_thread_waits_for_the_write_transaction_instead_of_failing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(dir.path(), opts()).expect("open");
    let mut w = db.begin_write().expect("begin");
    w.put(b"k", b"main").expect("put");
    std::thread::scope(|s| {
        let other = s.spawn(|| {
            let mut w = db.begin_write().expect("waits, then begins");
            w.put(b"k", b"other").expect("put");
            w.commit().expect("commit");
        });
        w.commit().expect("commit");
        other.join().expect("the other thread");
    });
    assert_eq!(
        db.begin_read().expect("read").get(b"k").expect("get"),
        Some(b"other".to_vec())
    );
}

/// The key limit the docs give (docs/file_format.md: 1024 bytes, 991 with
/// 4 KiB pages) is the one enforced, to the byte (issue 17, case 9).
#[test]
fn issue17_the_key_limit_is_the_documented_one() {
    for (page_bytes, max) in [(4096u32, 991usize), (8192, 1024), (16384, 1024)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Database::open(
            dir.path(),
            Options {
                page_bytes,
                ..opts()
            },
        )
        .expect("open");
        let mut w = db.begin_write().expect("begin");
        w.put(&vec![b'k'; max], b"v").expect("a key at the limit");
        assert!(
            matches!(
                w.put(&vec![b'k'; max + 1], b"v"),
                Err(Error::InvalidArgument(_))
            ),
            "a key one byte over the limit with {page_bytes}-byte pages"
        );
        w.commit().expect("commit");
    }
}
