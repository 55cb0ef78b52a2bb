//! Tests of [`super`]: the unit tests of `versions.rs`, kept beside it.

use super::*;

/// Stages, publishes and collects commit `csn`, as the commit path does.
fn commit(vs: &VersionStore, csn: u64, versions: CommitVersions) -> Result<()> {
    vs.stage(csn, versions)?;
    vs.publish(csn)?;
    vs.collect()
}

/// `key` of the default keyspace, as the store keys it.
fn q(key: &[u8]) -> Vec<u8> {
    tables::qualify(tables::DEFAULT, key)
}

fn some(v: &[u8]) -> Before {
    Some(v.to_vec())
}

/// Publishing drops nothing: the versions a commit leaves behind go when
/// a committer collects, once no snapshot needs them.
#[test]
fn publishing_keeps_versions_until_a_committer_collects() {
    let vs = VersionStore::new(1 << 20);
    let reader = Snapshot::take(&vs).expect("registers");
    vs.stage(1, vec![(q(b"a"), None)]).expect("stage");
    vs.publish(1).expect("publish");
    assert_eq!(vs.visible(), 1);
    vs.collect().expect("collect");
    assert_eq!(vs.stats().versions, 1, "the reader at 0 needs it");
    drop(reader);
    vs.stage(2, vec![(q(b"a"), some(b"1"))]).expect("stage");
    vs.publish(2).expect("publish");
    assert_eq!(vs.stats().versions, 2, "publishing drops nothing");
    vs.collect().expect("collect");
    assert_eq!(vs.stats().versions, 0, "no snapshot is left");
}

/// A collection beside a commit being applied: the staged versions
/// count against the cap, but a snapshot of the published commit does
/// not need them and is not given up for them (a new snapshot is then
/// never too old). Once that commit publishes, it does need them.
#[test]
fn a_staged_commit_over_the_cap_gives_up_no_snapshot_of_the_published_one() {
    let vs = VersionStore::new(1000);
    commit(&vs, 1, vec![(q(b"k"), None)]).expect("commit");
    let older = Snapshot::take(&vs).expect("registers");
    commit(&vs, 2, vec![(q(b"j"), some(b"x"))]).expect("commit");
    let newest = Snapshot::take(&vs).expect("registers");
    vs.stage(3, vec![(q(b"k"), some(&[0; 2000]))])
        .expect("stage");
    vs.collect().expect("another committer collects");
    assert!(
        vs.check_live(older.csn()).is_err(),
        "its end freed a version"
    );
    vs.check_live(newest.csn())
        .expect("a snapshot of the published commit");
    let again = Snapshot::take(&vs).expect("a new snapshot is never too old");
    assert_eq!(again.csn(), 2);
    assert_eq!(vs.stats().snapshots_too_old, 1);
    vs.publish(3).expect("publish");
    vs.collect().expect("collect");
    assert!(
        vs.check_live(newest.csn()).is_err(),
        "now over the cap for it"
    );
    assert_eq!(vs.stats().snapshots_too_old, 3);
    assert_eq!(vs.stats().versions, 0);
    drop((older, newest, again));
    assert!(Snapshot::take(&vs).is_ok());
}

/// A snapshot reads the before-image of the oldest newer version; newer
/// snapshots read newer ones; versions go once no snapshot needs them.
#[test]
fn reads_at_a_snapshot_and_collects_behind_the_oldest() {
    let vs = VersionStore::new(1 << 20);
    let s0 = Snapshot::take(&vs).expect("registers");
    commit(&vs, 1, vec![(q(b"a"), None)]).expect("publish");
    let s1 = Snapshot::take(&vs).expect("registers");
    commit(&vs, 2, vec![(q(b"a"), some(b"1"))]).expect("publish");
    // The tree now holds a = 2.
    let latest = some(b"2");
    assert_eq!(
        vs.read_at(s0.csn(), 0, b"a", latest.clone())
            .expect("reads"),
        None
    );
    assert_eq!(
        vs.read_at(s1.csn(), 0, b"a", latest.clone())
            .expect("reads"),
        some(b"1")
    );
    assert_eq!(
        vs.read_at(2, 0, b"a", latest.clone()).expect("reads"),
        some(b"2")
    );
    assert_eq!(vs.stats().versions, 2);
    drop(s0);
    commit(&vs, 3, vec![]).expect("publish");
    assert_eq!(vs.stats().versions, 1, "the version only s0 needed is gone");
    assert_eq!(
        vs.read_at(s1.csn(), 0, b"a", latest).expect("reads"),
        some(b"1")
    );
    drop(s1);
    commit(&vs, 4, vec![]).expect("publish");
    let st = vs.stats();
    assert_eq!(
        (st.versions, st.version_store_bytes, st.active_snapshots),
        (0, 0, 0)
    );
}

/// A range batch at a snapshot drops keys inserted since, restores keys
/// deleted since and old values of keys changed since, in either order.
#[test]
fn batches_are_rewritten_to_the_snapshot() {
    let vs = VersionStore::new(1 << 20);
    let s = Snapshot::take(&vs).expect("registers");
    commit(
        &vs,
        1,
        vec![
            (q(b"b"), None),       // inserted since
            (q(b"c"), some(b"3")), // deleted since
            (q(b"d"), some(b"4")), // changed since
        ],
    )
    .expect("publish");
    let now = vec![
        (b"a".to_vec(), b"1".to_vec()),
        (b"b".to_vec(), b"2".to_vec()),
        (b"d".to_vec(), b"40".to_vec()),
    ];
    let (lo, hi) = (Bound::Unbounded, Bound::Excluded(b"z".to_vec()));
    let fwd = vs
        .batch_at(s.csn(), 0, (&lo, &hi), now.clone(), false)
        .expect("reads");
    let want = vec![
        (b"a".to_vec(), b"1".to_vec()),
        (b"c".to_vec(), b"3".to_vec()),
        (b"d".to_vec(), b"4".to_vec()),
    ];
    assert_eq!(fwd, want);
    let mut rev_now = now;
    rev_now.reverse();
    let rev = vs
        .batch_at(s.csn(), 0, (&lo, &hi), rev_now, true)
        .expect("reads");
    assert_eq!(rev, want.into_iter().rev().collect::<Vec<_>>());
    // Outside the batch's bounds nothing is added.
    let narrow = vs
        .batch_at(
            s.csn(),
            0,
            (&Bound::Excluded(b"c".to_vec()), &hi),
            vec![],
            false,
        )
        .expect("reads");
    assert_eq!(narrow, vec![(b"d".to_vec(), b"4".to_vec())]);
}

/// Over the cap the oldest snapshot is given up: its reads fail with
/// SnapshotTooOld, a newer one keeps reading, and the store fits again.
#[test]
fn over_the_cap_the_oldest_snapshot_is_given_up() {
    let cap = 4 * (VERSION_OVERHEAD_BYTES + 100);
    let vs = VersionStore::new(cap);
    let old = Snapshot::take(&vs).expect("registers");
    commit(&vs, 1, vec![(q(b"k"), some(&[1; 90]))]).expect("publish");
    let young = Snapshot::take(&vs).expect("registers");
    for csn in 2..20 {
        commit(&vs, csn, vec![(q(b"k"), some(&[csn as u8; 90]))]).expect("publish");
        assert!(vs.stats().version_store_bytes <= cap as u64);
    }
    let err = vs.read_at(old.csn(), 0, b"k", None).expect_err("given up");
    assert!(matches!(err, Error::SnapshotTooOld { .. }), "{err}");
    // The young snapshot was given up too once the store passed the cap
    // for it; a snapshot taken now reads the tree.
    let st = vs.stats();
    assert!(st.snapshots_too_old >= 1);
    let fresh = Snapshot::take(&vs).expect("registers");
    assert_eq!(
        vs.read_at(fresh.csn(), 0, b"k", some(b"x")).expect("reads"),
        some(b"x")
    );
    drop((old, young));
    assert_eq!(vs.stats().active_snapshots, 1);
}

/// Snapshots at random CSNs over a few hot keys: every live snapshot
/// reads, for every key, exactly what a full history of the key says it
/// held at that CSN, and `changed_since` sees every change after it.
#[test]
fn snapshots_read_like_full_histories() {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for _round in 0..20 {
        let cap = 16 * (VERSION_OVERHEAD_BYTES + 8);
        let vs = VersionStore::new(cap);
        // Key -> [(csn, the value that commit wrote)].
        let mut history: BTreeMap<Vec<u8>, Vec<(u64, Before)>> = BTreeMap::new();
        let mut snaps: Vec<Snapshot<'_>> = Vec::new();
        // Reads whose snapshot value differs from the tree's.
        let mut from_versions = 0;
        for csn in 1..400u64 {
            let key = format!("k{}", next(6)).into_bytes();
            let new = (next(4) > 0).then(|| csn.to_le_bytes().to_vec());
            let h = history.entry(key.clone()).or_default();
            let before = h.last().and_then(|v| v.1.clone());
            h.push((csn, new));
            commit(&vs, csn, vec![(q(&key), before)]).expect("publish");
            match next(10) {
                0..=1 => snaps.push(Snapshot::take(&vs).expect("registers")),
                2 if !snaps.is_empty() => {
                    drop(snaps.swap_remove(next(snaps.len() as u64) as usize))
                }
                _ => {}
            }
            for s in &snaps {
                if vs.check_live(s.csn()).is_err() {
                    continue;
                }
                for (k, writes) in &history {
                    let at = |c: u64| {
                        let last = writes.iter().rev().find(|v| v.0 <= c);
                        last.and_then(|v| v.1.clone())
                    };
                    let got = vs.read_at(s.csn(), 0, k, at(csn)).expect("live");
                    assert_eq!(got, at(s.csn()), "key {k:?} at {} now {csn}", s.csn());
                    from_versions += usize::from(at(s.csn()) != at(csn));
                    let changed = writes.iter().any(|v| v.0 > s.csn());
                    let found = vs
                        .changed_since(s.csn(), std::iter::once(q(k).as_slice()), &[])
                        .expect("live");
                    assert_eq!(found.is_some(), changed, "key {k:?} at {}", s.csn());
                }
            }
            assert!(vs.stats().version_store_bytes <= cap as u64);
        }
        assert!(vs.stats().snapshots_too_old > 0, "the rounds pass the cap");
        assert!(from_versions > 100, "live snapshots read old values");
    }
}
