//! The engine on each asynchronous backend: a load through a small cache
//! (cleaner, checkpoints, coalesced writes), random updates, a cold scan with
//! readahead, a reopen that finds every value. The library reads no
//! environment: `DIRECTKV_IO_BACKEND` reaches an engine only through
//! `AioOptions::with_env_override`, which the directkv command and the test
//! suites call. One test function, because the variable is process-wide.

use directkv::internals::io::IO_BACKEND_ENV;
use directkv::{AioBackend, AioOptions};
use directkv::{Database, Options};

/// Looks at the data file's length at most this many times for a moment
/// when no extension is under way.
const STABLE_TRIES_MAX: usize = 500;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn value(i: u64, round: u64) -> Vec<u8> {
    let mut v = format!("value {i} round {round} ").into_bytes();
    v.resize(200, b'.');
    v
}

fn options(backend: AioBackend) -> Options {
    Options {
        cache_bytes: 4 << 20,
        checkpoint_wal_bytes: 8 << 20,
        async_io: AioOptions {
            backend,
            queue_depth: 16,
            threads: 4,
        }
        .with_env_override()
        .expect("a valid override"),
        ..Options::default()
    }
}

/// What the engine should be using: the environment wins over `backend`.
fn expected(backend: AioBackend) -> AioBackend {
    match std::env::var(IO_BACKEND_ENV) {
        Ok(v) if !v.trim().is_empty() => v.parse().expect("a valid override"),
        _ => backend,
    }
}

fn exercise(backend: AioBackend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 40_000u64;
    {
        let db = Database::open(dir.path(), options(backend)).expect("open");
        let stats = db.stats();
        assert_eq!(stats.async_io.backend, expected(backend).to_string());
        for chunk in (0..n).collect::<Vec<_>>().chunks(2_000) {
            let mut w = db.begin_write().expect("begin");
            for &i in chunk {
                w.put(&key(i), &value(i, 0)).expect("put");
            }
            w.commit().expect("commit");
        }
        for chunk in (0..n).step_by(7).collect::<Vec<_>>().chunks(500) {
            let mut w = db.begin_write().expect("begin");
            for &i in chunk {
                w.put(&key(i), &value(i, 1)).expect("put");
            }
            w.commit().expect("commit");
        }
        db.checkpoint().expect("checkpoint");
        let s = db.stats();
        assert!(s.pages_written > 0);
        assert!(
            s.write_requests < s.pages_written,
            "adjacent pages of a sequential load are written together: {} requests for {} pages",
            s.write_requests,
            s.pages_written
        );
        // The file grew ahead of use, in zero-filled extents, and at rest it
        // is exactly what the engine allocated. The cleaner may be growing it
        // while we look, so the check waits for a moment when the engine's
        // count is the same before and after the file's length is read.
        assert!(s.data_extensions > 0, "{s:?}");
        let data = dir.path().join("data");
        let settled = (0..STABLE_TRIES_MAX).find_map(|_| {
            let before = db.stats().data_allocated_bytes;
            let file_bytes = std::fs::metadata(&data).expect("data file").len();
            let after = db.stats().data_allocated_bytes;
            if before == after && file_bytes == after {
                return Some(file_bytes);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            None
        });
        assert!(
            settled.is_some(),
            "the data file's length never matched the engine's allocation"
        );
        if expected(backend) != AioBackend::Off {
            assert!(s.async_io.batches > 0, "{:?}", s.async_io);
        }
        db.close().expect("close");
    }
    let db = Database::open(dir.path(), options(backend)).expect("reopen");
    // A cold full scan: readahead batches bring the leaves in.
    let r = db.begin_read().expect("read");
    let mut seen = 0u64;
    for entry in r.range::<std::ops::RangeFull>(..) {
        let (k, v) = entry.expect("entry");
        assert_eq!(k, key(seen));
        let round = u64::from(seen % 7 == 0);
        assert_eq!(v, value(seen, round), "key {seen}");
        seen += 1;
    }
    assert_eq!(seen, n);
    drop(r);
    let s = db.stats();
    assert!(s.readahead_reads > 0, "{s:?}");
    db.check().expect("check");
    db.close().expect("close");
}

#[test]
fn the_engine_runs_on_each_backend_and_the_environment_overrides() {
    if std::env::var(IO_BACKEND_ENV).is_ok() {
        // Under an outside override every run uses that backend.
        exercise(AioBackend::Auto);
        return;
    }
    let uring = directkv::internals::io::Aio::new(&AioOptions {
        backend: AioBackend::Uring,
        ..AioOptions::default()
    });
    if uring.is_ok() {
        exercise(AioBackend::Uring);
    } else {
        println!("skipping io_uring: unavailable here");
    }
    exercise(AioBackend::Threads);
    exercise(AioBackend::Off);
    // The library itself ignores the variable: what the options say is used.
    std::env::set_var(IO_BACKEND_ENV, "off");
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = Options {
        async_io: AioOptions {
            backend: AioBackend::Threads,
            ..AioOptions::default()
        },
        ..Options::default()
    };
    let db = Database::open(dir.path(), plain).expect("open");
    assert_eq!(db.stats().async_io.backend, "threads");
    drop(db);
    // The override is explicit, and a nonsense value is a typed error.
    let over = AioOptions::default()
        .with_env_override()
        .expect("off is valid");
    assert_eq!(over.backend, AioBackend::Off);
    std::env::set_var(IO_BACKEND_ENV, "nonsense");
    let refused = AioOptions::default().with_env_override();
    assert!(matches!(refused, Err(directkv::Error::InvalidArgument(_))));
    std::env::remove_var(IO_BACKEND_ENV);
}
