//! The write-ahead log against real files: records round-trip across flushes and
//! segment boundaries under every sync method; a log cut at any byte recovers
//! exactly the records wholly before the cut and can be appended to again; a bit
//! flip anywhere is never returned as data; an invalid record followed by a later
//! flush is reported as corruption with its segment and offset; a failing write
//! or sync poisons the log (outcome unknown for the commits in the failed flush,
//! `Poisoned` after) and wakes every committer waiting for it; concurrent
//! committers are group-committed, and the time the flushes took is within
//! the time that passed (they run one at a time); segments are recycled; a
//! segment of another database is refused.

mod common;

use std::path::Path;
use std::sync::Arc;

use directkv::internals::io::{FaultOp, FaultyStorage, OsStorage, Storage};
use directkv::internals::wal::{Record, Wal, WalOptions, WalReader};
use directkv::{Error, Lsn};
use directkv::{SyncMethod, SyncVariant};

const SEGMENT: u64 = 256 * 1024;
const DB: [u8; 16] = *b"directkv-test-db";

fn options(dir: &Path) -> WalOptions {
    let mut o = WalOptions::new(dir.join("wal"), DB);
    o.segment_bytes = SEGMENT;
    o.spare_segments = 1;
    o.recycle_segments_max = 4;
    o
}

fn payload(i: usize) -> Vec<u8> {
    // Sizes from 0 to a few KiB, so records straddle blocks and segments.
    let len = (i * 37) % 3000;
    (0..len).map(|j| (i * 7 + j) as u8).collect()
}

fn open<S: Storage>(storage: S, opts: WalOptions) -> (Wal<S>, Vec<Record>, Lsn) {
    let mut seen = Vec::new();
    let (wal, end) = Wal::open(storage, opts, Lsn::ZERO, |r| {
        seen.push(r);
        Ok(())
    })
    .expect("open");
    (wal, seen, end)
}

fn read_all(dir: &Path) -> directkv::Result<Vec<Record>> {
    let mut r = WalReader::new(
        OsStorage::default(),
        &dir.join("wal"),
        SEGMENT,
        Some(DB),
        Lsn::ZERO,
    );
    let mut out = Vec::new();
    while let Some(rec) = r.next_user_record()? {
        out.push(rec);
    }
    Ok(out)
}

/// Writes `n` records, flushing every `per_flush`; returns their (payload, end).
fn write_log(dir: &Path, n: usize, per_flush: usize, sync: SyncVariant) -> Vec<(Vec<u8>, Lsn)> {
    let mut o = options(dir);
    o.sync = sync;
    let (wal, seen, _) = open(OsStorage::default(), o);
    assert!(seen.is_empty());
    let mut out = Vec::new();
    for i in 0..n {
        let p = payload(i);
        let lsn = wal.append(16 + (i % 200) as u8, &p).expect("append");
        out.push((p, lsn));
        if (i + 1) % per_flush == 0 {
            wal.flush(lsn).expect("flush");
        }
    }
    // Stopped as a crash right after the last flush stops it: without the
    // seal `close` would write, so that flush is the log's unproven end
    // (docs/wal_format.md, "Seals") and the cuts below model its tearing.
    if let Some(&(_, end)) = out.last() {
        wal.flush(end).expect("flush");
    }
    drop(wal);
    out
}

#[test]
fn records_round_trip_under_every_sync_method() {
    for method in SyncMethod::ALL {
        for direct in [false, true] {
            let dir = common::scratch();
            let sync = SyncVariant { method, direct };
            let written = write_log(dir.path(), 300, 7, sync);
            let (wal, seen, end) = open(OsStorage::default(), {
                let mut o = options(dir.path());
                o.sync = sync;
                o
            });
            assert_eq!(seen.len(), written.len(), "{sync}");
            for (rec, (p, lsn)) in seen.iter().zip(&written) {
                assert_eq!(&rec.payload, p, "{sync}");
                assert_eq!(rec.end(), *lsn, "{sync}");
            }
            assert_eq!(
                end,
                written
                    .last()
                    .expect("records")
                    .1
                    .next_multiple_of(8)
                    .max(end)
            );
            assert!(wal.durable_lsn() >= written.last().expect("records").1);
            // The records fill two segments; a third file, the spare, is
            // prepared in the background and may not exist yet.
            assert!(written.last().expect("records").1.get() > SEGMENT);
            assert!(
                std::fs::read_dir(dir.path().join("wal"))
                    .expect("dir")
                    .count()
                    >= 2,
                "the log spans several segments"
            );
        }
    }
}

trait NextMultiple {
    fn next_multiple_of(self, n: u64) -> Lsn;
}

impl NextMultiple for Lsn {
    fn next_multiple_of(self, n: u64) -> Lsn {
        Lsn::new(self.get().next_multiple_of(n))
    }
}

/// Byte positions of the log in the segment files: (file name, offset) of an LSN.
fn locate(lsn: Lsn) -> (String, usize) {
    let payload = SEGMENT - 4096;
    let seg = lsn.get() / payload;
    (
        format!("{seg:016X}.seg"),
        (4096 + lsn.get() % payload) as usize,
    )
}

/// The segment files of a log, in memory, to damage and write back.
#[derive(Clone)]
struct Image(std::collections::BTreeMap<String, Vec<u8>>);

impl Image {
    fn load(dir: &Path) -> Image {
        let mut files = std::collections::BTreeMap::new();
        for e in std::fs::read_dir(dir.join("wal")).expect("dir") {
            let e = e.expect("entry");
            let name = e.file_name().to_string_lossy().into_owned();
            files.insert(name, std::fs::read(e.path()).expect("read"));
        }
        Image(files)
    }

    fn byte(&mut self, lsn: Lsn) -> &mut u8 {
        let (name, off) = locate(lsn);
        &mut self.0.get_mut(&name).expect("segment")[off]
    }

    fn get(&self, lsn: Lsn) -> u8 {
        let (name, off) = locate(lsn);
        self.0[&name][off]
    }

    fn store(&self, dir: &Path) {
        std::fs::create_dir_all(dir.join("wal")).expect("mkdir");
        for (name, bytes) in &self.0 {
            std::fs::write(dir.join("wal").join(name), bytes).expect("write");
        }
    }
}

fn poke(dir: &Path, lsn: Lsn, f: impl FnOnce(&mut u8)) {
    let mut img = Image::load(dir);
    f(img.byte(lsn));
    img.store(dir);
}

#[test]
fn a_cut_at_any_byte_recovers_exactly_the_records_before_it() {
    let base_dir = common::scratch();
    // Everything in one flush, so the cut models the last, interrupted write.
    let written = write_log(base_dir.path(), 40, usize::MAX, SyncVariant::SAFE_DEFAULT);
    let base = Image::load(base_dir.path());
    let first = written.first().expect("records").1;
    let first_start = Lsn::new(first.get() - payload(0).len() as u64 - 16);
    let last = written.last().expect("records").1;
    let mut cut = Lsn::new(first.get().saturating_sub(64));
    let mut checked = 0;
    while cut < last {
        // From the cut to the end of the written region: zeros (a dropped
        // write), garbage (a torn sector), or an older generation of records
        // (what a recycled segment holds: the log's own valid records from
        // two blocks earlier, valid only at their own LSNs), in turn.
        let mode = checked % 3;
        let mut img = base.clone();
        for x in cut.get()..last.get() + 64 {
            *img.byte(Lsn::new(x)) = match mode {
                0 => 0,
                1 => !base.get(Lsn::new(x)),
                _ => base.get(Lsn::new(x.saturating_sub(1024).max(first_start.get()))),
            };
        }
        let dir = common::scratch();
        img.store(dir.path());
        let got = read_all(dir.path()).expect("a torn tail is not corruption");
        // A record survives when none of its bytes (or the gap before it)
        // changed; zeroing bytes that were zero changes nothing.
        let intact = |from: Lsn, to: Lsn| {
            (from.get()..to.get()).all(|x| img.get(Lsn::new(x)) == base.get(Lsn::new(x)))
        };
        let mut expect = Vec::new();
        let mut start = first_start;
        for (p, end) in &written {
            if !intact(start, *end) {
                break;
            }
            expect.push((p, *end));
            start = *end;
        }
        assert_eq!(got.len(), expect.len(), "cut at {cut}, fill mode {mode}");
        for (g, (p, end)) in got.iter().zip(expect) {
            assert_eq!(&g.payload, p);
            assert_eq!(g.end(), end);
        }
        // The log resumes after the cut, and the new records follow the old prefix.
        if checked % 97 == 0 || (mode == 2 && checked % 31 == 2) {
            let (wal, seen, _) = open(OsStorage::default(), options(dir.path()));
            assert_eq!(seen.len(), got.len());
            let lsn = wal.append(99, b"after the cut").expect("append");
            wal.flush(lsn).expect("flush");
            wal.close().expect("close");
            let again = read_all(dir.path()).expect("no corruption after resuming");
            assert_eq!(again.len(), got.len() + 1, "cut at {cut}");
            assert_eq!(again.last().expect("record").payload, b"after the cut");
        }
        checked += 1;
        // Every byte of the last two blocks, every 61st before them.
        cut = Lsn::new(
            cut.get()
                + if cut.get() + 1024 >= last.get() {
                    1
                } else {
                    61
                },
        );
    }
    assert!(checked > 1024, "{checked} cuts");
}

#[test]
fn a_bit_flip_is_never_returned_as_data() {
    let base_dir = common::scratch();
    let written = write_log(base_dir.path(), 30, 5, SyncVariant::SAFE_DEFAULT);
    let base = Image::load(base_dir.path());
    let last = written.last().expect("records").1;
    let mut at = Lsn::new(0);
    let mut corruption = 0;
    while at < last {
        let mut img = base.clone();
        *img.byte(at) ^= 1 << (at.get() % 8);
        let dir = common::scratch();
        img.store(dir.path());
        match read_all(dir.path()) {
            Ok(got) => {
                // A prefix of what was written, never altered bytes.
                assert!(got.len() < written.len(), "flip at {at} went unnoticed");
                for (g, (p, end)) in got.iter().zip(&written) {
                    assert_eq!(&g.payload, p, "flip at {at}");
                    assert_eq!(g.end(), *end);
                }
            }
            Err(Error::Corruption { .. }) => corruption += 1,
            Err(e) => panic!("flip at {at}: unexpected {e}"),
        }
        at = Lsn::new(at.get() + 7);
    }
    assert!(
        corruption > 0,
        "flips before the last flush are reported as corruption"
    );
}

#[test]
fn a_bad_record_followed_by_later_flushes_is_corruption() {
    let dir = common::scratch();
    let written = write_log(dir.path(), 50, 5, SyncVariant::SAFE_DEFAULT);
    // A record in the second flush; later flushes prove it had been synced.
    let (_, end) = written[7];
    let start = Lsn::new(end.get() - payload(7).len() as u64 - 16);
    poke(dir.path(), Lsn::new(start.get() + 20), |b| *b ^= 0x10);
    assert_eq!(locate(start).0, "0000000000000000.seg");
    match read_all(dir.path()) {
        Err(Error::Corruption {
            path,
            offset,
            page: None,
            detail,
        }) => {
            assert!(path.ends_with("0000000000000000.seg"), "{path:?}");
            assert_eq!(offset, 4096 + start.get(), "{detail}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    let err = Wal::open(OsStorage::default(), options(dir.path()), Lsn::ZERO, |_| {
        Ok(())
    })
    .err()
    .expect("open refuses a corrupt log");
    assert!(matches!(err, Error::Corruption { .. }), "{err}");
}

/// A log on storage that fails on command. Spare segments are prepared on
/// the caller's thread, so an injected fault meets a flush and not a
/// background segment fill.
fn open_faulty(dir: &Path) -> (Wal<FaultyStorage<OsStorage>>, FaultyStorage<OsStorage>) {
    let storage = FaultyStorage::new(OsStorage::default());
    let mut opts = options(dir);
    opts.background_prepare = false;
    let (wal, _, _) = open(storage.clone(), opts);
    (wal, storage)
}

/// A panic in a flush (a bug in the I/O path) ends that flush as failed:
/// the leader's thread panics, and every later flush and append gets an
/// error at once instead of waiting for a flush that never ends.
#[test]
fn a_panicking_flush_fails_the_log_instead_of_hanging_it() {
    let dir = common::scratch();
    let (wal, storage) = open_faulty(dir.path());
    let ok = wal.append(20, b"durable").expect("append");
    wal.flush(ok).expect("first flush");
    storage.panic_after(FaultOp::Write, 0);
    let lost = wal.append(20, b"unknown").expect("append");
    let led = std::thread::scope(|s| s.spawn(|| wal.flush(lost)).join());
    assert!(led.is_err(), "the flush's leader panicked");
    // Asked from a thread of its own, with a bound: a log left mid-flush
    // would make it wait forever.
    let wal = Arc::new(wal);
    let (tx, rx) = std::sync::mpsc::channel();
    let w = Arc::clone(&wal);
    std::thread::spawn(move || tx.send(w.flush(lost)));
    let later = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a flush after the panic returns");
    assert!(
        matches!(later, Err(Error::CommitOutcomeUnknown { .. })),
        "{later:?}"
    );
    assert!(matches!(
        wal.append(20, b"after"),
        Err(Error::Poisoned { .. })
    ));
}

#[test]
fn a_failed_write_poisons_the_log() {
    for op in [FaultOp::Write, FaultOp::Sync] {
        let dir = common::scratch();
        let (wal, storage) = open_faulty(dir.path());
        let ok = wal.append(20, b"durable").expect("append");
        wal.flush(ok).expect("first flush");
        storage.fail_after(op, 0, true);
        let lost = wal.append(20, b"unknown").expect("append");
        let err = wal.flush(lost).expect_err("the flush fails");
        assert!(
            matches!(err, Error::CommitOutcomeUnknown { .. }),
            "{op:?}: {err}"
        );
        storage.heal();
        assert!(matches!(
            wal.append(20, b"later"),
            Err(Error::Poisoned { .. })
        ));
        assert!(matches!(
            wal.flush(Lsn::new(lost.get() + 1000)),
            Err(Error::Poisoned { .. })
        ));
        // Nothing is retried into a success.
        assert!(matches!(
            wal.flush(lost),
            Err(Error::CommitOutcomeUnknown { .. })
        ));
        assert!(wal.durable_lsn() < lost);
        drop(wal);
        // Reopening recovers: the acknowledged record is there.
        let (_, seen, _) = open(OsStorage::default(), options(dir.path()));
        assert_eq!(seen[0].payload, b"durable");
    }
}

#[test]
fn concurrent_committers_share_flushes() {
    const THREADS: usize = 16;
    const COMMITS: usize = 40;
    let dir = common::scratch();
    let (wal, _, _) = open(OsStorage::default(), options(dir.path()));
    let wal = Arc::new(wal);
    let started = std::time::Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let wal = Arc::clone(&wal);
            std::thread::spawn(move || {
                for i in 0..COMMITS {
                    let p = format!("{t}:{i}");
                    let lsn = wal.append(30, p.as_bytes()).expect("append");
                    wal.flush(lsn).expect("flush");
                    assert!(wal.durable_lsn() >= lsn);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("committer");
    }
    let stats = wal.stats();
    let elapsed_us = started.elapsed().as_micros() as u64;
    assert_eq!(stats.records, (THREADS * COMMITS) as u64);
    assert!(stats.flushes <= stats.records);
    // A thread appends its next record only once the last is durable, so
    // each of its commits needed a flush of its own.
    assert!(stats.flushes >= COMMITS as u64, "{stats:?}");
    // Flushes run one at a time: their time is a share of the time that
    // passed (what the bench reports as the log's busy share).
    assert!(
        stats.flush_us > 0 && stats.flush_us <= elapsed_us,
        "{} µs flushing in {elapsed_us} µs",
        stats.flush_us
    );
    Arc::into_inner(wal)
        .expect("last handle")
        .close()
        .expect("close");
    let got = read_all(dir.path()).expect("read");
    assert_eq!(got.len(), THREADS * COMMITS);
    let mut names: Vec<_> = got.iter().map(|r| r.payload.clone()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), THREADS * COMMITS, "every commit exactly once");
}

/// Committers waiting for a flush that fails all wake with an error and
/// none hangs; every commit acknowledged before is in the log after reopen.
#[test]
fn a_failed_flush_wakes_every_waiting_committer() {
    const THREADS: usize = 12;
    for op in [FaultOp::Write, FaultOp::Sync] {
        let dir = common::scratch();
        let (wal, storage) = open_faulty(dir.path());
        storage.fail_after(op, 40, false);
        let wal = Arc::new(wal);
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let wal = Arc::clone(&wal);
                std::thread::spawn(move || {
                    let mut acked = Vec::new();
                    for i in 0.. {
                        let p = format!("{t}:{i}");
                        let r = wal.append(30, p.as_bytes()).and_then(|lsn| wal.flush(lsn));
                        match r {
                            Ok(()) => acked.push(p.into_bytes()),
                            Err(e) => return (acked, e),
                        }
                    }
                    unreachable!("the loop ends with an error")
                })
            })
            .collect();
        let mut acked = Vec::new();
        for h in handles {
            let (mine, err) = h.join().expect("committer");
            assert!(
                matches!(
                    err,
                    Error::CommitOutcomeUnknown { .. } | Error::Poisoned { .. }
                ),
                "{op:?}: {err}"
            );
            acked.extend(mine);
        }
        assert!(!acked.is_empty(), "{op:?}: commits before the fault");
        drop(wal);
        storage.heal();
        let (_, seen, _) = open(OsStorage::default(), options(dir.path()));
        let seen: std::collections::HashSet<_> = seen.into_iter().map(|r| r.payload).collect();
        for p in &acked {
            assert!(seen.contains(p), "{op:?}: acknowledged commit lost");
        }
    }
}

#[test]
fn segments_are_recycled_and_the_log_reads_on() {
    let dir = common::scratch();
    let (wal, _, _) = open(OsStorage::default(), options(dir.path()));
    let big = vec![7u8; 60_000];
    let mut last = Lsn::ZERO;
    for _ in 0..40 {
        last = wal.append(40, &big).expect("append");
        wal.flush(last).expect("flush");
    }
    let before: Vec<_> = std::fs::read_dir(dir.path().join("wal"))
        .expect("dir")
        .collect();
    let recycled = wal.recycle_before(last).expect("recycle");
    assert!(recycled >= 1);
    let after = std::fs::read_dir(dir.path().join("wal"))
        .expect("dir")
        .count();
    assert!(
        after < before.len(),
        "old segments are gone or renamed ahead"
    );
    let redo = wal.append(41, b"after recycling").expect("append");
    wal.flush(redo).expect("flush");
    let segments_created = wal.stats().segments_created;
    wal.close().expect("close");
    // Reading from the last pre-recycling record start sees the new record.
    let mut seen = Vec::new();
    let start = Lsn::new(last.get() - big.len() as u64 - 16);
    let (wal, _) = Wal::open(OsStorage::default(), options(dir.path()), start, |r| {
        seen.push(r);
        Ok(())
    })
    .expect("reopen from the redo point");
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].payload, b"after recycling");
    assert!(segments_created > 0);
    drop(wal);
}

#[test]
fn a_segment_of_another_database_is_refused() {
    let dir = common::scratch();
    write_log(dir.path(), 10, 10, SyncVariant::SAFE_DEFAULT);
    let mut o = options(dir.path());
    o.db_id = [1; 16];
    let err = Wal::open(OsStorage::default(), o, Lsn::ZERO, |_| Ok(()))
        .err()
        .expect("foreign log");
    assert!(
        matches!(&err, Error::Corruption { detail, .. } if detail.contains("another database")),
        "{err}"
    );
}

#[test]
fn records_over_the_limit_and_reserved_kinds_are_refused() {
    let dir = common::scratch();
    let (wal, _, _) = open(OsStorage::default(), options(dir.path()));
    let huge = vec![0u8; directkv::internals::wal::RECORD_PAYLOAD_MAX + 1];
    assert!(matches!(
        wal.append(16, &huge),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        wal.append(1, b"x"),
        Err(Error::InvalidArgument(_))
    ));
    let max = vec![1u8; directkv::internals::wal::RECORD_PAYLOAD_MAX];
    let lsn = wal.append(16, &max).expect("the largest record");
    wal.flush(lsn).expect("flush");
}

#[test]
fn a_buffered_reader_sees_the_direct_writers_bytes() {
    use directkv::internals::io::{AlignedBuf, DirectFile, FileOptions};
    use directkv::DirectIo;
    let dir = common::scratch();
    let sync = SyncVariant {
        method: SyncMethod::Fdatasync,
        direct: true,
    };
    write_log(dir.path(), 100, 3, sync);
    let path = dir.path().join("wal").join(locate(Lsn::new(0)).0);
    let buffered = std::fs::read(&path).expect("buffered read");
    let f = DirectFile::open(
        &path,
        &FileOptions {
            read_only: true,
            direct_io: DirectIo::Auto,
            sync: SyncMethod::None,
            ..FileOptions::default()
        },
    )
    .expect("open");
    let mut direct = AlignedBuf::new(SEGMENT as usize, f.alignment().io_unit_bytes()).expect("buf");
    f.read_exact_at(direct.io_all_mut(), 0)
        .expect("direct read");
    assert_eq!(buffered.as_slice(), direct.as_slice());
}

/// ENOSPC (F13): space runs out only when a segment is prepared, never inside
/// a record. The flush that needed the new segment fails with a definite
/// `DiskFull` (nothing of it was written), later appends are refused, and
/// after reopening every acknowledged record is there and the log is clean.
#[test]
fn running_out_of_space_is_a_clear_error_and_tears_nothing() {
    let dir = common::scratch();
    let storage = FaultyStorage::new(OsStorage::default());
    let mut o = options(dir.path());
    o.segment_bytes = 64 * 1024;
    o.spare_segments = 1;
    let (wal, _, _) = open(storage.clone(), o.clone());
    wal.prepare_spares().expect("spares");
    storage.fail_after_with(FaultOp::Allocate, 0, false, libc::ENOSPC);
    let mut acked = Vec::new();
    let err = loop {
        let p = vec![acked.len() as u8; 3000];
        let lsn = wal.append(50, &p).expect("append");
        match wal.flush(lsn) {
            Ok(()) => acked.push(p),
            Err(e) => break e,
        }
        assert!(acked.len() < 200, "space never ran out");
    };
    assert!(matches!(err, Error::DiskFull { .. }), "{err}");
    assert!(err.to_string().contains("no space"), "{err}");
    // Segment 0 is usable; entering segment 1 needs segment 2 made first
    // (a log with records in a segment always has the next one).
    assert!(acked.len() >= 10, "a segment was usable: {}", acked.len());
    assert!(matches!(wal.append(50, b"x"), Err(Error::Poisoned { .. })));
    drop(wal);
    storage.heal();
    let (_, seen, _) = open(OsStorage::default(), o);
    assert_eq!(
        seen.len(),
        acked.len(),
        "every acknowledged record, nothing more"
    );
    for (r, p) in seen.iter().zip(&acked) {
        assert_eq!(&r.payload, p);
    }
}

/// A segment of another format version is `FormatVersion` naming the file,
/// not corruption (issue 17, case 9): its header is whole, only newer.
#[test]
fn issue17_a_segment_of_another_version_is_a_format_version_error() {
    let dir = common::scratch();
    write_log(
        dir.path(),
        10,
        5,
        SyncVariant {
            method: SyncMethod::Fdatasync,
            direct: false,
        },
    );
    let seg = dir.path().join("wal").join(format!("{:016X}.seg", 0));
    let mut bytes = std::fs::read(&seg).expect("segment");
    bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..56]);
    bytes[56..60].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&seg, &bytes).expect("write");
    match Wal::open(OsStorage::default(), options(dir.path()), Lsn::ZERO, |_| {
        Ok(())
    }) {
        Err(Error::FormatVersion { path, found, .. }) => {
            assert_eq!(found, 99);
            assert_eq!(path, seg);
        }
        Err(e) => panic!("expected FormatVersion, got {e}"),
        Ok(_) => panic!("a segment of version 99 was accepted"),
    }
}

/// A log whose last segment present ends inside a record (the record runs
/// on into a segment not there: an archive whose next segment is not
/// archived yet) ends cleanly before that record, not in torn bytes.
#[test]
fn a_record_running_into_an_absent_segment_ends_the_log_cleanly() {
    let dir = common::scratch();
    let (wal, _, _) = open(OsStorage::default(), options(dir.path()));
    let big = vec![9u8; 60_000];
    let mut ends = Vec::new();
    for _ in 0..6 {
        let end = wal.append(40, &big).expect("append");
        wal.flush(end).expect("flush");
        ends.push(end);
    }
    wal.close().expect("close");
    let mut names: Vec<_> = std::fs::read_dir(dir.path().join("wal"))
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .collect();
    names.sort();
    // The first segment keeps the records that end in it; the first record
    // that does not ends in the second, which goes with every later one.
    let inside = ends.iter().filter(|e| e.get() <= SEGMENT).count();
    assert!(
        inside >= 1 && inside < ends.len(),
        "a record spans the segments"
    );
    for later in &names[1..] {
        std::fs::remove_file(later).expect("remove");
    }
    let mut r = WalReader::new(
        OsStorage::default(),
        &dir.path().join("wal"),
        SEGMENT,
        Some(DB),
        Lsn::ZERO,
    );
    let mut seen = 0;
    while r.next_user_record().expect("no corruption").is_some() {
        seen += 1;
    }
    assert_eq!(seen, inside);
    let tail = r.tail().expect("the log ended");
    assert!(!tail.torn, "an absent segment is an end, not torn bytes");
    assert!(tail.end >= ends[inside - 1] && tail.end < ends[inside]);
}

/// Log bytes a dead process wrote but never synced are still readable
/// when the log reopens on the same running system; open makes them
/// durable before it hands any record to replay, which may write data
/// pages from it. A flush whose sync never reaches the simulated disk (it
/// fails above it, as if the process died first) stays readable, not
/// durable; a power failure at the first record replay sees of it must not
/// take back any record replay was given.
#[test]
fn records_are_durable_before_they_are_replayed() {
    use directkv::internals::sim::SimStorage;
    // At a crash the simulated disk lands each unsynced write whole, not
    // at all or torn, by the seed: every seed must keep what was replayed.
    for seed in 0..16u64 {
        let disk = SimStorage::new();
        let faulty = FaultyStorage::new(disk.clone());
        let mut opts = options(Path::new("/sim"));
        opts.background_prepare = false;
        let (wal, _, _) = open(faulty.clone(), opts.clone());
        let value = vec![3u8; 40_000];
        // Durable records over two segments.
        for _ in 0..8 {
            let end = wal.append(40, &value).expect("append");
            wal.flush(end).expect("flush");
        }
        // Then a flush written and never synced.
        let mut last = Lsn::ZERO;
        for _ in 0..3 {
            last = wal.append(41, &value).expect("append");
        }
        faulty.fail_after(FaultOp::Sync, 0, true);
        assert!(wal.flush(last).is_err(), "the sync never happened");
        drop(wal);
        // Reopen; at the first record of that flush, the power fails.
        let mut cut = false;
        let reopened = Wal::open(disk.clone(), opts.clone(), Lsn::ZERO, |r| {
            if r.kind == 41 && !cut {
                cut = true;
                disk.crash(seed);
            }
            Ok(())
        });
        assert!(cut, "replay met the unsynced flush's records");
        drop(reopened);
        let mut r = WalReader::new(
            disk.clone(),
            Path::new("/sim/wal"),
            SEGMENT,
            Some(DB),
            Lsn::ZERO,
        );
        let mut durable = 0u64;
        while let Ok(Some(_)) = r.next_user_record() {
            durable += 1;
        }
        assert!(
            durable >= 9,
            "seed {seed}: {durable} records survived; replay had been given the 9th"
        );
    }
}
