//! Snapshots that stream: a state many chunks long is built into chunks,
//! sent in pieces that do not line up with them (one piece sent twice, as
//! openraft's transport does after a lost answer), installed on a second
//! store and compared whole; a stored chunk damaged after it was received
//! is refused with nothing changed; and a process that dies part way
//! through an install (after a chosen number of the install's commits)
//! reopens with the old state or the new, whole, never a mix, and no other
//! generation or snapshot left; an install drops the old generation's
//! table in its commit and the engine then frees its pages; and the next
//! generation's table left by an install that failed (its cleanup failed
//! too) is replaced by the next install, not in its way.

use std::io::{BufRead, BufReader, SeekFrom};
use std::path::Path;
use std::process::{Command, Stdio};

mod common;

use common::{options, scratch, table_rows, tables};
use directkv_raft::{Entry, Request, SnapshotBytes, StateMachine};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftSnapshotBuilder};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

/// Bytes of one stored chunk (`snapshot::CHUNK_BYTES`).
const CHUNK: usize = 1 << 20;

/// Pieces the tests send a snapshot in: not a divisor of a chunk.
const PIECE: usize = 700_000;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().expect("runtime")
}

fn id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 0), index)
}

/// `n` puts from index `from`, each of a `value_bytes` value tagged `tag`.
fn puts(from: u64, n: u64, value_bytes: usize, tag: u8) -> Vec<Entry> {
    (from..from + n)
        .map(|i| Entry {
            log_id: id(i),
            payload: EntryPayload::Normal(Request::Put {
                key: format!("key{i:06}").into_bytes(),
                value: vec![tag ^ (i as u8); value_bytes],
            }),
        })
        .collect()
}

/// A leader state of 512 values of 32 KiB (16 MiB, 16 chunks), applied.
fn big_state(rt: &tokio::runtime::Runtime, sm: &mut StateMachine) {
    rt.block_on(sm.apply(puts(1, 512, 32 << 10, 7)))
        .expect("apply");
}

/// `data` sent into a snapshot `to` receives, the way openraft's chunked
/// transport does: the sender seeks to each piece's offset and reads it,
/// the receiver seeks there and writes it. Piece `resend` goes twice.
fn send(
    rt: &tokio::runtime::Runtime,
    data: &mut SnapshotBytes,
    to: &mut SnapshotBytes,
    resend: u64,
) {
    rt.block_on(async {
        let end = data.seek(SeekFrom::End(0)).await?;
        let (mut offset, mut piece_no, mut buf) = (0u64, 0u64, vec![0u8; PIECE]);
        while offset < end {
            data.seek(SeekFrom::Start(offset)).await?;
            let mut n = 0;
            while n < PIECE {
                match data.read(&mut buf[n..]).await? {
                    0 => break,
                    k => n += k,
                }
            }
            to.seek(SeekFrom::Start(offset)).await?;
            to.write_all(&buf[..n]).await?;
            if piece_no == resend {
                to.seek(SeekFrom::Start(offset)).await?;
                to.write_all(&buf[..n]).await?;
            }
            offset += n as u64;
            piece_no += 1;
        }
        to.shutdown().await
    })
    .expect("send the snapshot");
}

/// Every byte of a snapshot.
fn bytes_of(rt: &tokio::runtime::Runtime, data: &mut SnapshotBytes) -> Vec<u8> {
    rt.block_on(async {
        data.seek(SeekFrom::Start(0)).await?;
        let mut out = Vec::new();
        data.read_to_end(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    })
    .expect("read the snapshot")
}

/// Keys of the data tables, of every generation.
fn raw_data_keys(db: &directkv::Database) -> usize {
    table_rows(db, "raft.data.")
}

/// Two stores, each with its log: a leader holding [`big_state`] and a
/// follower holding 50 small pairs of its own.
struct Pair {
    leader: StateMachine,
    follower: StateMachine,
    rt: tokio::runtime::Runtime,
    // The logs and directories live as long as the stores.
    _logs: (directkv_raft::LogStore, directkv_raft::LogStore),
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

fn leader_and_follower() -> Pair {
    let (d1, d2) = (scratch(), scratch());
    let (l1, mut leader) = directkv_raft::open(d1.path(), options(4096)).expect("open");
    let (l2, mut follower) = directkv_raft::open(d2.path(), options(4096)).expect("open");
    let rt = rt();
    big_state(&rt, &mut leader);
    rt.block_on(follower.apply(puts(1, 50, 100, 9)))
        .expect("apply");
    Pair {
        leader,
        follower,
        rt,
        _logs: (l1, l2),
        _dirs: (d1, d2),
    }
}

#[test]
fn a_snapshot_many_chunks_long_streams_in_pieces_to_a_second_store() {
    // Bound, not `..`: the logs and directories must outlive the stores.
    let Pair {
        mut leader,
        mut follower,
        rt,
        _logs,
        _dirs,
    } = leader_and_follower();
    let mut snap = rt
        .block_on(async { leader.get_snapshot_builder().await.build_snapshot().await })
        .expect("build");
    assert!(
        snap.snapshot.len() > 16 * CHUNK as u64,
        "16 chunks and more"
    );
    let mut to = rt
        .block_on(follower.begin_receiving_snapshot())
        .expect("begin");
    send(&rt, &mut snap.snapshot, &mut to, 5);
    assert_eq!(to.len(), snap.snapshot.len(), "every byte arrived once");
    rt.block_on(follower.install_snapshot(&snap.meta, to))
        .expect("install");
    let expected = leader.reader().all().expect("all");
    assert_eq!(expected.1.len(), 512);
    assert_eq!(follower.reader().all().expect("all"), expected);
    assert_eq!(raw_data_keys(follower.database()), 512, "one generation");
    // The installed snapshot is the follower's current one, byte for byte.
    let mut current = rt
        .block_on(follower.get_current_snapshot())
        .expect("get")
        .expect("some");
    assert_eq!(current.meta, snap.meta);
    assert_eq!(
        bytes_of(&rt, &mut current.snapshot),
        bytes_of(&rt, &mut snap.snapshot)
    );
}

#[test]
fn a_damaged_stored_chunk_is_refused_and_changes_nothing() {
    // Bound, not `..`: the logs and directories must outlive the stores.
    let Pair {
        mut leader,
        mut follower,
        rt,
        _logs,
        _dirs,
    } = leader_and_follower();
    let before = follower.reader().all().expect("all");
    let mut snap = rt
        .block_on(async { leader.get_snapshot_builder().await.build_snapshot().await })
        .expect("build");
    let mut to = rt
        .block_on(follower.begin_receiving_snapshot())
        .expect("begin");
    send(&rt, &mut snap.snapshot, &mut to, u64::MAX);
    // One byte of one stored chunk (in the table of the snapshot just
    // received: the one of the highest sequence) flips on the follower.
    let db = follower.database();
    let seq = |name: &String| {
        name["raft.snap.".len()..]
            .parse::<u64>()
            .expect("a sequence")
    };
    let name = tables(db, "raft.snap.")
        .into_iter()
        .max_by_key(seq)
        .expect("a chunk table");
    let r = db.begin_read().expect("read");
    let table = r.open_table(&name).expect("open");
    let (key, mut chunk) = r
        .table(&table)
        .range(..)
        .nth(9)
        .expect("a tenth chunk")
        .expect("read");
    drop(r);
    chunk[1000] ^= 0x20;
    let mut w = db.begin_write().expect("write");
    w.table(&table).put(&key, &chunk).expect("put");
    w.commit().expect("commit");
    let r = rt.block_on(follower.install_snapshot(&snap.meta, to));
    let e = r.expect_err("a damaged chunk is refused");
    assert!(e.to_string().contains("CRC32C"), "{e}");
    assert_eq!(follower.reader().all().expect("all"), before);
    assert_eq!(
        raw_data_keys(follower.database()),
        50,
        "no pair staged is left"
    );
    assert!(rt
        .block_on(follower.get_current_snapshot())
        .expect("get")
        .is_none());
}

/// The pages of table `name` of `db`, as `directkv check` walks them.
fn table_pages(db: &directkv::Database, name: &str) -> u64 {
    let report = db.check().expect("check");
    let table = report.table_details.iter().find(|t| t.name == name);
    table.expect("the table is there").pages
}

/// Commits a follower makes at most while waiting for the engine to free a
/// dropped table (each commit frees up to 32 of its pages).
const FREE_COMMITS_MAX: u64 = 1000;

#[test]
fn an_install_drops_the_old_generations_table_and_its_pages_return() {
    let rt = rt();
    let (d1, d2) = (scratch(), scratch());
    let (_l1, mut leader) = directkv_raft::open(d1.path(), options(4096)).expect("open");
    // No background threads: each commit runs one step of freeing a dropped
    // table, so the steps are counted in commits, not time.
    let quiet = directkv::Options {
        background_threads: false,
        ..options(4096)
    };
    let (l2, mut follower) = directkv_raft::open(d2.path(), quiet).expect("open");
    rt.block_on(leader.apply(puts(1, 20, 100, 7)))
        .expect("apply");
    rt.block_on(follower.apply(puts(1, 400, 2048, 9)))
        .expect("apply");
    // The log store shares the state machine's database.
    let db = l2.database();
    let old_pages = table_pages(db, "raft.data.0");
    assert!(
        old_pages > 100,
        "the follower's own data spans {old_pages} pages"
    );
    let mut snap = rt
        .block_on(async { leader.get_snapshot_builder().await.build_snapshot().await })
        .expect("build");
    let mut to = rt
        .block_on(follower.begin_receiving_snapshot())
        .expect("begin");
    send(&rt, &mut snap.snapshot, &mut to, u64::MAX);
    rt.block_on(follower.install_snapshot(&snap.meta, to))
        .expect("install");
    assert_eq!(
        tables(db, "raft.data."),
        ["raft.data.1"],
        "the install's commit dropped the old generation's table"
    );
    assert_eq!(raw_data_keys(db), 20);
    let mut next = 21;
    while db.stats().tables.dropped > 0 {
        assert!(next < 21 + FREE_COMMITS_MAX, "the dropped table is freed");
        rt.block_on(follower.apply(puts(next, 1, 10, 1)))
            .expect("apply");
        next += 1;
    }
    let freed = db.stats().tables.dropped_pages_freed;
    assert!(
        freed >= old_pages,
        "its {old_pages} pages returned to the free list ({freed} freed)"
    );
    let report = db.check().expect("check");
    assert!(
        report.table_details.iter().all(|t| !t.dropped),
        "no dropped table is left to free"
    );
}

#[test]
fn a_table_left_by_a_failed_install_is_replaced_by_the_next() {
    let rt = rt();
    let (d1, d2) = (scratch(), scratch());
    let (_l1, mut leader) = directkv_raft::open(d1.path(), options(4096)).expect("open");
    let (l2, mut follower) = directkv_raft::open(d2.path(), options(4096)).expect("open");
    rt.block_on(leader.apply(puts(1, 20, 100, 7)))
        .expect("apply");
    rt.block_on(follower.apply(puts(1, 5, 100, 9)))
        .expect("apply");
    // What an install whose staging and whose cleanup both failed leaves:
    // the next generation's table, with a pair staged in it.
    let db = l2.database();
    let mut w = db.begin_write().expect("write");
    let left = w.create_table("raft.data.1").expect("create");
    w.table(&left).put(b"staged", b"left").expect("put");
    w.commit().expect("commit");
    let mut snap = rt
        .block_on(async { leader.get_snapshot_builder().await.build_snapshot().await })
        .expect("build");
    let mut to = rt
        .block_on(follower.begin_receiving_snapshot())
        .expect("begin");
    send(&rt, &mut snap.snapshot, &mut to, u64::MAX);
    rt.block_on(follower.install_snapshot(&snap.meta, to))
        .expect("install over the table left");
    assert_eq!(
        follower.reader().all().expect("all"),
        leader.reader().all().expect("all")
    );
    assert_eq!(tables(db, "raft.data."), ["raft.data.1"]);
    assert_eq!(raw_data_keys(db), 20, "the pair left is not kept");
}

const CHILD_DIR: &str = "DIRECTKV_RAFT_INSTALL_CHILD";
const CHILD_FROM: &str = "DIRECTKV_RAFT_INSTALL_FROM";
const CHILD_COMMITS: &str = "DIRECTKV_RAFT_INSTALL_COMMITS";

/// The child of the crash test: receives the leader's current snapshot
/// into the follower, then installs it while a thread watches the
/// database's commits and aborts the process (no destructor, no flush)
/// after the install's Nth. Prints `installed` if the install ends first.
#[test]
fn install_child() {
    let (Ok(dir), Ok(from), Ok(commits)) = (
        std::env::var(CHILD_DIR),
        std::env::var(CHILD_FROM),
        std::env::var(CHILD_COMMITS),
    ) else {
        return;
    };
    let commits: u64 = commits.parse().expect("a number");
    let rt = rt();
    let (_ll, mut leader) = directkv_raft::open(&from, options(4096)).expect("open leader");
    let (log, mut sm) = directkv_raft::open(&dir, options(4096)).expect("open");
    let mut snap = rt
        .block_on(leader.get_current_snapshot())
        .expect("get")
        .expect("the leader has a snapshot");
    let mut to = rt.block_on(sm.begin_receiving_snapshot()).expect("begin");
    send(&rt, &mut snap.snapshot, &mut to, u64::MAX);
    // The log store shares the state machine's database.
    let db = log.database();
    let start = db.stats().commits;
    std::thread::scope(|s| {
        s.spawn(|| loop {
            if db.stats().commits >= start.saturating_add(commits) {
                std::process::abort();
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        });
        rt.block_on(sm.install_snapshot(&snap.meta, to))
            .expect("install");
        println!("installed");
        std::process::exit(0);
    });
}

/// Runs the child until it dies or installs; returns whether it installed.
fn run_install_child(dir: &Path, from: &Path, commits: u64) -> bool {
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "install_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir)
        .env(CHILD_FROM, from)
        .env(CHILD_COMMITS, commits.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .expect("run the child");
    BufReader::new(&out.stdout[..])
        .lines()
        // libtest prints the test's name on the line the child prints to.
        .any(|l| l.is_ok_and(|l| l.ends_with("installed")))
}

#[test]
fn an_install_killed_part_way_leaves_the_old_state_or_the_new() {
    let rt = rt();
    let from = scratch();
    let expected = {
        let (_l, mut leader) = directkv_raft::open(from.path(), options(4096)).expect("open");
        big_state(&rt, &mut leader);
        rt.block_on(async { leader.get_snapshot_builder().await.build_snapshot().await })
            .expect("build");
        leader.reader().all().expect("all")
    };
    let mut mid_install = 0;
    // The install stages 16 MiB in transactions of 512 KiB (an 8 MiB
    // cache), then flips: killed after 1, 8 or 20 of its commits it dies
    // part way; with no limit it completes.
    for commits in [1, 8, 20, u64::MAX] {
        let dir = scratch();
        let old = {
            let (_l, mut sm) = directkv_raft::open(dir.path(), options(4096)).expect("open");
            rt.block_on(sm.apply(puts(1, 50, 100, 9))).expect("apply");
            sm.reader().all().expect("all")
        };
        let installed = run_install_child(dir.path(), from.path(), commits);
        assert_eq!(
            installed,
            commits == u64::MAX,
            "killed after {commits} commits"
        );
        // What the crash left, before the reopen cleans up.
        let raw = {
            let db = directkv::Database::open(dir.path(), options(4096)).expect("raw open");
            raw_data_keys(&db)
        };
        let (_l, mut sm) = directkv_raft::open(dir.path(), options(4096)).expect("reopen");
        let now = sm.reader().all().expect("all");
        let current = rt.block_on(sm.get_current_snapshot()).expect("get");
        if now == old {
            assert!(!installed, "an install that returned is kept");
            assert!(current.is_none(), "no snapshot is current before the flip");
            if raw > old.1.len() {
                mid_install += 1;
            }
        } else {
            assert_eq!(now, expected, "after {commits} commits: old or new, no mix");
            let current = current.expect("the installed snapshot is current");
            assert_eq!(current.meta.last_log_id, expected.0);
        }
        assert_eq!(
            raw_data_keys(sm.database()),
            now.1.len(),
            "after {commits} commits: one generation left"
        );
        let chunks = table_rows(sm.database(), "raft.snap.");
        let want = if now == old { 0 } else { 17 };
        assert_eq!(
            chunks, want,
            "after {commits} commits: only the current snapshot's chunks"
        );
    }
    assert!(mid_install > 0, "some kill landed among the staged pairs");
}
