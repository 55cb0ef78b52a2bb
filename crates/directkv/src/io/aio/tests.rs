//! One suite, run on both asynchronous backends (io_uring and the thread
//! pool): many requests in flight, vectored requests, concurrent batches
//! writing disjoint regions of one file, end of file, failures and poisoning,
//! alignment checks, and the buffered fallback.

use std::sync::Arc;

use super::{Aio, AioBackend, AioOptions, BatchOp};
use crate::error::{Error, Result};
use crate::io::{AlignedArena, AlignedBuf, DirectFile, DirectIo, FileOptions};

const PAGE: usize = 4096;

fn backends() -> Vec<Arc<Aio>> {
    let mut v = Vec::new();
    for backend in [AioBackend::Uring, AioBackend::Threads] {
        let opts = AioOptions {
            backend,
            queue_depth: 32,
            threads: 8,
        };
        match Aio::new(&opts) {
            Ok(aio) => v.push(aio),
            // Only io_uring may be missing (a kernel or sandbox without it).
            Err(e) => {
                assert_eq!(backend, AioBackend::Uring, "threads always start: {e}");
                println!("skipping io_uring: {e}");
            }
        }
    }
    v
}

fn open(dir: &std::path::Path, name: &str, direct: DirectIo) -> DirectFile {
    DirectFile::open(
        dir.join(name),
        &FileOptions {
            create: true,
            direct_io: direct,
            ..FileOptions::default()
        },
    )
    .expect("open")
}

fn fill(buf: &mut [u8], page: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (page as usize * 31 + i * 7) as u8;
    }
}

fn all_ok(results: Vec<Result<()>>) {
    for (i, r) in results.into_iter().enumerate() {
        if let Err(e) = r {
            panic!("request {i} failed: {e}");
        }
    }
}

/// 128 pages written in one batch at scattered offsets, with a registered
/// arena, then read back in one batch: all in flight together, all correct.
#[test]
fn many_requests_in_flight_round_trip() {
    for aio in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = open(dir.path(), "data", DirectIo::Auto);
        file.attach_aio(&aio).expect("attach");
        let n = 128usize;
        let arena = AlignedArena::new(PAGE, n, 4096).expect("arena");
        let registered = aio.register_arena(&arena);
        let mut bufs: Vec<_> = (0..n).map(|_| arena.acquire().expect("slot")).collect();
        // A permutation of page numbers, so offsets are not in order.
        let pages: Vec<u64> = (0..n as u64).map(|i| (i * 37) % n as u64).collect();
        for (b, &p) in bufs.iter_mut().zip(&pages) {
            fill(b.as_mut_slice(), p);
        }
        let ops = bufs
            .iter()
            .zip(&pages)
            .map(|(b, &p)| BatchOp::Write {
                bufs: vec![b.io_all()],
                offset: p * PAGE as u64,
            })
            .collect();
        all_ok(file.run_batch(ops));
        for b in bufs.iter_mut() {
            b.as_mut_slice().fill(0);
        }
        let ops = bufs
            .iter_mut()
            .zip(&pages)
            .map(|(b, &p)| BatchOp::Read {
                bufs: vec![b.io_all_mut()],
                offset: p * PAGE as u64,
            })
            .collect();
        all_ok(file.run_batch(ops));
        let mut want = vec![0u8; PAGE];
        for (b, &p) in bufs.iter().zip(&pages) {
            fill(&mut want, p);
            assert_eq!(b.as_slice(), &want[..], "{}: page {p}", aio.backend());
        }
        let s = aio.stats();
        assert_eq!(s.requests, 2 * n as u64);
        assert!(s.max_in_flight > 1, "{}: {s:?}", aio.backend());
        println!("{}: registered {registered}, {s:?}", aio.backend());
        if aio.backend() == AioBackend::Uring && file.is_direct() && registered {
            assert_eq!(s.fixed_buffer_requests, 2 * n as u64, "{s:?}");
        }
    }
}

/// A vectored write of three buffers is one request; reading it back split
/// differently gives the same bytes.
#[test]
fn vectored_requests_cover_adjacent_pages() {
    for aio in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = open(dir.path(), "data", DirectIo::Auto);
        file.attach_aio(&aio).expect("attach");
        let arena = AlignedArena::new(PAGE, 6, 4096).expect("arena");
        let mut w: Vec<_> = (0..3).map(|_| arena.acquire().expect("slot")).collect();
        for (i, b) in w.iter_mut().enumerate() {
            fill(b.as_mut_slice(), 10 + i as u64);
        }
        let op = BatchOp::Write {
            bufs: w.iter().map(|b| b.io_all()).collect(),
            offset: 10 * PAGE as u64,
        };
        assert_eq!(op.len(), 3 * PAGE);
        all_ok(file.run_batch(vec![op]));
        let mut r: Vec<_> = (0..3).map(|_| arena.acquire().expect("slot")).collect();
        let (first, rest) = r.split_at_mut(1);
        let ops = vec![
            BatchOp::Read {
                bufs: vec![first[0].io_all_mut()],
                offset: 10 * PAGE as u64,
            },
            BatchOp::Read {
                bufs: rest.iter_mut().map(|b| b.io_all_mut()).collect(),
                offset: 11 * PAGE as u64,
            },
        ];
        all_ok(file.run_batch(ops));
        for (a, b) in w.iter().zip(&r) {
            assert_eq!(a.as_slice(), b.as_slice(), "{}", aio.backend());
        }
        assert_eq!(aio.stats().requests, 3);
    }
}

/// Four threads run batches at once, each writing its own region of one file
/// (invariant 8: positional writes to one file run concurrently); every page
/// ends up as its writer left it.
#[test]
fn concurrent_batches_write_disjoint_regions_of_one_file() {
    for aio in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = Arc::new(open(dir.path(), "data", DirectIo::Auto));
        file.attach_aio(&aio).expect("attach");
        let per = 64u64;
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let file = Arc::clone(&file);
                s.spawn(move || {
                    let arena = AlignedArena::new(PAGE, 16, 4096).expect("arena");
                    for round in 0..per / 16 {
                        let mut bufs: Vec<_> =
                            (0..16).map(|_| arena.acquire().expect("slot")).collect();
                        let first = t * per + round * 16;
                        for (i, b) in bufs.iter_mut().enumerate() {
                            fill(b.as_mut_slice(), first + i as u64);
                        }
                        let ops = bufs
                            .iter()
                            .enumerate()
                            .map(|(i, b)| BatchOp::Write {
                                bufs: vec![b.io_all()],
                                offset: (first + i as u64) * PAGE as u64,
                            })
                            .collect();
                        all_ok(file.run_batch(ops));
                    }
                });
            }
        });
        let mut buf = AlignedBuf::new(PAGE, 4096).expect("buf");
        let mut want = vec![0u8; PAGE];
        for p in 0..4 * per {
            file.read_exact_at(buf.io_all_mut(), p * PAGE as u64)
                .expect("read");
            fill(&mut want, p);
            assert_eq!(buf.as_slice(), &want[..], "{}: page {p}", aio.backend());
        }
        assert_eq!(aio.stats().batches, 4 * per / 16);
    }
}

/// A read past the end fails alone, as `UnexpectedEof` naming what it got;
/// the other reads of the batch succeed.
#[test]
fn reading_past_the_end_fails_that_request_alone() {
    for aio in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = open(dir.path(), "data", DirectIo::Auto);
        file.attach_aio(&aio).expect("attach");
        let mut page = AlignedBuf::new(PAGE, 4096).expect("buf");
        fill(page.as_mut_slice(), 0);
        for p in 0..2 {
            file.write_all_at(page.io_all(), p * PAGE as u64)
                .expect("write");
        }
        let arena = AlignedArena::new(PAGE, 3, 4096).expect("arena");
        let mut bufs: Vec<_> = (0..3).map(|_| arena.acquire().expect("slot")).collect();
        let (a, rest) = bufs.split_at_mut(1);
        let ops = vec![
            BatchOp::Read {
                bufs: vec![a[0].io_all_mut()],
                offset: 0,
            },
            // One page that exists and one past the end.
            BatchOp::Read {
                bufs: rest.iter_mut().map(|b| b.io_all_mut()).collect(),
                offset: PAGE as u64,
            },
        ];
        let results = file.run_batch(ops);
        assert!(results[0].is_ok(), "{}", aio.backend());
        match &results[1] {
            Err(Error::UnexpectedEof { wanted, got, .. }) => {
                assert_eq!((*wanted, *got), (2 * PAGE, PAGE), "{}", aio.backend());
            }
            other => panic!("{}: expected UnexpectedEof, got {other:?}", aio.backend()),
        }
    }
}

/// A write that fails (the descriptor is read-only) fails its request,
/// poisons the file, and every later write is refused as poisoned.
#[test]
fn a_failed_write_poisons_the_file() {
    for aio in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(open(dir.path(), "data", DirectIo::Auto));
        let file = DirectFile::open(
            dir.path().join("data"),
            &FileOptions {
                read_only: true,
                ..FileOptions::default()
            },
        )
        .expect("open read-only");
        file.attach_aio(&aio).expect("attach");
        let arena = AlignedArena::new(PAGE, 2, 4096).expect("arena");
        let bufs: Vec<_> = (0..2).map(|_| arena.acquire().expect("slot")).collect();
        let ops = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| BatchOp::Write {
                bufs: vec![b.io_all()],
                offset: (i * PAGE) as u64,
            })
            .collect();
        let results = file.run_batch(ops);
        assert!(results.iter().all(|r| r.is_err()), "{}", aio.backend());
        assert!(file.failure().is_some(), "{}", aio.backend());
        let again = file.run_batch(vec![BatchOp::Write {
            bufs: vec![bufs[0].io_all()],
            offset: 0,
        }]);
        assert!(
            matches!(again[0], Err(Error::Poisoned { .. })),
            "{}: {:?}",
            aio.backend(),
            again[0]
        );
    }
}

/// Under direct I/O a misaligned offset is refused before submission; the
/// rest of the batch runs.
#[test]
fn misaligned_requests_are_refused_before_submission() {
    for aio in backends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = open(dir.path(), "data", DirectIo::Auto);
        if !file.is_direct() {
            println!("no direct I/O under the temp dir; alignment is not checked there");
            return;
        }
        file.attach_aio(&aio).expect("attach");
        let arena = AlignedArena::new(PAGE, 2, 4096).expect("arena");
        let bufs: Vec<_> = (0..2).map(|_| arena.acquire().expect("slot")).collect();
        let ops = vec![
            BatchOp::Write {
                bufs: vec![bufs[0].io_all()],
                offset: 100,
            },
            BatchOp::Write {
                bufs: vec![bufs[1].io_all()],
                offset: 0,
            },
        ];
        let results = file.run_batch(ops);
        assert!(
            matches!(results[0], Err(Error::Unaligned { .. })),
            "{:?}",
            results[0]
        );
        assert!(results[1].is_ok(), "{:?}", results[1]);
        assert!(
            file.failure().is_none(),
            "an unaligned request poisons nothing"
        );
        assert_eq!(aio.stats().requests, 1);
    }
}

/// Where direct I/O is refused (tmpfs), batches run buffered and still
/// round-trip.
#[test]
fn batches_work_on_the_buffered_fallback() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        println!("skipping: no /dev/shm");
        return;
    }
    for aio in backends() {
        let dir = tempfile::tempdir_in(shm).expect("tempdir");
        let file = open(dir.path(), "data", DirectIo::Auto);
        assert!(!file.is_direct());
        file.attach_aio(&aio).expect("attach");
        let arena = AlignedArena::new(PAGE, 8, 4096).expect("arena");
        let mut bufs: Vec<_> = (0..8).map(|_| arena.acquire().expect("slot")).collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            fill(b.as_mut_slice(), i as u64);
        }
        let ops = vec![BatchOp::Write {
            bufs: bufs.iter().map(|b| b.io_all()).collect(),
            offset: 0,
        }];
        all_ok(file.run_batch(ops));
        let mut back = AlignedBuf::new(8 * PAGE, 4096).expect("buf");
        file.read_exact_at(back.io_all_mut(), 0).expect("read");
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(&back.as_slice()[i * PAGE..(i + 1) * PAGE], b.as_slice());
        }
        // Unchecked for alignment here, an offset past the largest is
        // refused: as a signed offset, u64::MAX is -1, "the file's
        // position", and the read would succeed from there.
        let far = vec![BatchOp::Read {
            bufs: vec![back.io_all_mut()],
            offset: u64::MAX,
        }];
        let refused = file.run_batch(far).into_iter().next().expect("one result");
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{refused:?}"
        );
    }
}

/// The environment override names a backend; nonsense is a typed error.
#[test]
fn backend_names_parse_and_bad_ones_are_refused() {
    assert_eq!("uring".parse::<AioBackend>().ok(), Some(AioBackend::Uring));
    assert_eq!(
        "threads".parse::<AioBackend>().ok(),
        Some(AioBackend::Threads)
    );
    assert_eq!("auto".parse::<AioBackend>().ok(), Some(AioBackend::Auto));
    assert!(matches!(
        "fast".parse::<AioBackend>(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(Aio::new(&AioOptions {
        queue_depth: 0,
        ..AioOptions::default()
    })
    .is_err());
}
