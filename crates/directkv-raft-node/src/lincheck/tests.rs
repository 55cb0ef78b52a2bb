//! The checker against hand-made histories whose verdict is known: each
//! anomaly a replicated store can show (a stale read, a value from
//! nowhere, a lost acknowledged write, an unknown write seen then unseen,
//! a wrong compare-and-set answer, half a batch, a write applied twice) is
//! refused, and the allowed freedoms (concurrent operations in either
//! order, unknown writes taking effect late or never) are accepted. A
//! property test accepts every history made from a sequential run with
//! random overlap and refuses it once one read is changed to a value it
//! provably cannot have seen.

use directkv_raft::{Request, Response};
use proptest::prelude::*;

use super::{check, Budget, Refusal, Verdict};
use crate::history::{Op, Outcome, Record};

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn ob(s: Option<&str>) -> Option<Vec<u8>> {
    s.map(b)
}

fn record(client: u32, op: Op, (call, ret): (u64, u64), outcome: Outcome) -> Record {
    let known = !matches!(outcome, Outcome::Unknown | Outcome::Pending);
    Record {
        client,
        op,
        call_ns: call,
        return_ns: known.then_some(ret),
        outcome,
    }
}

fn put_req(k: &str, v: &str) -> Request {
    Request::Put {
        key: b(k),
        value: b(v),
    }
}

fn done(previous: Option<&str>) -> Response {
    Response::Done {
        previous: ob(previous),
    }
}

/// A put of `k = v` over `t` that answered "done, was `previous`".
fn put(c: u32, k: &str, v: &str, t: (u64, u64), previous: Option<&str>) -> Record {
    let outcome = Outcome::Written(done(previous));
    record(c, Op::Write(put_req(k, v)), t, outcome)
}

/// A put of `k = v` invoked at `call` whose outcome is unknown.
fn put_unknown(c: u32, k: &str, v: &str, call: u64) -> Record {
    record(c, Op::Write(put_req(k, v)), (call, 0), Outcome::Unknown)
}

fn read(c: u32, k: &str, t: (u64, u64), seen: Option<&str>) -> Record {
    record(c, Op::Read { key: b(k) }, t, Outcome::Read(ob(seen)))
}

fn cas(
    c: u32,
    k: &str,
    (expected, new): (Option<&str>, &str),
    t: (u64, u64),
    r: Response,
) -> Record {
    let req = Request::CompareAndSet {
        key: b(k),
        expected: ob(expected),
        new: Some(b(new)),
    };
    record(c, Op::Write(req), t, Outcome::Written(r))
}

fn verdict(h: &[Record]) -> Verdict {
    check(h, Budget::default()).verdict
}

fn accepted(h: &[Record]) {
    let v = verdict(h);
    assert_eq!(v, Verdict::Linearizable, "{h:#?}");
}

fn refused(h: &[Record]) -> Refusal {
    match verdict(h) {
        Verdict::Refused(r) => r,
        other => panic!("expected a refusal, got {other:?} for {h:#?}"),
    }
}

#[test]
fn a_stale_read_after_a_completed_write_is_refused() {
    let h = [
        put(1, "k", "a", (0, 10), None),
        put(1, "k", "b", (20, 30), Some("a")),
        read(2, "k", (40, 50), Some("a")),
    ];
    let r = refused(&h);
    assert_eq!(r.keys, vec![b("k")]);
    assert_eq!(r.records[0], 2, "the stale read is blamed: {r}");
    assert!(r.explanation.contains("\"k\""), "{r}");
    // The same read while the second put is in flight may see either.
    accepted(&[
        h[0].clone(),
        h[1].clone(),
        read(2, "k", (25, 50), Some("a")),
    ]);
}

#[test]
fn a_read_of_a_value_never_written_is_refused() {
    let h = [
        put(1, "k", "a", (0, 10), None),
        read(2, "k", (5, 50), Some("z")),
    ];
    assert_eq!(refused(&h).records[0], 1);
}

#[test]
fn a_lost_acknowledged_write_is_refused() {
    let h = [
        put(1, "k", "a", (0, 10), None),
        read(2, "k", (20, 30), None),
    ];
    refused(&h);
    // A put whose answer says the key was set before, when nothing set it.
    refused(&[put(1, "k", "a", (0, 10), Some("q"))]);
}

#[test]
fn concurrent_operations_are_accepted_in_either_order() {
    // Two overlapping puts: each order, told by their answers and the read.
    accepted(&[
        put(1, "k", "a", (0, 50), None),
        put(2, "k", "b", (10, 60), Some("a")),
        read(3, "k", (70, 80), Some("b")),
    ]);
    accepted(&[
        put(1, "k", "a", (0, 50), Some("b")),
        put(2, "k", "b", (10, 60), None),
        read(3, "k", (70, 80), Some("a")),
    ]);
    // A read overlapping a put sees the value before or after it.
    for seen in [None, Some("a")] {
        accepted(&[
            put(1, "k", "a", (0, 100), None),
            read(2, "k", (10, 20), seen),
        ]);
    }
    // Ties count as overlap.
    accepted(&[
        put(1, "k", "a", (0, 10), None),
        read(2, "k", (10, 20), None),
    ]);
}

#[test]
fn an_unknown_write_may_take_effect_late_or_never() {
    let unknown = put_unknown(1, "k", "a", 0);
    // Seen long after, after reads that did not see it.
    accepted(&[
        unknown.clone(),
        read(2, "k", (10, 20), None),
        read(2, "k", (30, 40), None),
        read(2, "k", (1000, 1010), Some("a")),
    ]);
    // Never seen.
    accepted(&[unknown.clone(), read(2, "k", (1000, 1010), None)]);
    // A pending one (never completed) is as unknown.
    let mut pending = unknown.clone();
    pending.outcome = Outcome::Pending;
    accepted(&[pending, read(2, "k", (10, 20), Some("a"))]);
    // But never before it was invoked.
    let late = put_unknown(1, "k", "a", 500);
    assert_eq!(
        refused(&[late, read(2, "k", (10, 20), Some("a"))]).records[0],
        1
    );
}

#[test]
fn an_unknown_write_seen_then_unseen_is_refused() {
    let h = [
        put(1, "k", "a", (0, 10), None),
        put_unknown(1, "k", "b", 20),
        read(2, "k", (30, 40), Some("b")),
        read(2, "k", (50, 60), Some("a")),
    ];
    let r = refused(&h);
    assert_eq!(r.records[0], 3, "the read of the old value is blamed: {r}");
}

#[test]
fn compare_and_set_answers_are_checked_against_the_state() {
    let mismatch = |cur: Option<&str>| Response::Mismatch { current: ob(cur) };
    let first = put(1, "k", "a", (0, 10), None);
    // Matched and answered so; its value is then read.
    accepted(&[
        first.clone(),
        cas(2, "k", (Some("a"), "c"), (20, 30), done(Some("a"))),
        read(3, "k", (40, 50), Some("c")),
    ]);
    // Matched, yet a later read sees the old value.
    refused(&[
        first.clone(),
        cas(2, "k", (Some("a"), "c"), (20, 30), done(Some("a"))),
        read(3, "k", (40, 50), Some("a")),
    ]);
    // Answered "done" when the value was not the expected one.
    refused(&[
        first.clone(),
        cas(2, "k", (None, "c"), (20, 30), done(None)),
    ]);
    // Answered "mismatch" when it matched, or with a wrong current value.
    refused(&[
        first.clone(),
        cas(2, "k", (Some("a"), "c"), (20, 30), mismatch(Some("a"))),
    ]);
    refused(&[
        first.clone(),
        cas(2, "k", (None, "c"), (20, 30), mismatch(Some("z"))),
    ]);
    // A mismatch changes nothing.
    accepted(&[
        first,
        cas(2, "k", (None, "c"), (20, 30), mismatch(Some("a"))),
        read(3, "k", (40, 50), Some("a")),
    ]);
}

fn batch(c: u32, puts: &[(&str, &str)], t: (u64, u64), previous: &[Option<&str>]) -> Record {
    let req = Request::Batch(puts.iter().map(|(k, v)| put_req(k, v)).collect());
    let outcome = if previous.is_empty() {
        Outcome::Unknown
    } else {
        Outcome::Written(Response::Batch(previous.iter().map(|p| done(*p)).collect()))
    };
    record(c, Op::Write(req), t, outcome)
}

#[test]
fn a_read_of_half_a_batch_is_refused() {
    let setup = [
        put(1, "x", "x1", (0, 10), None),
        put(1, "y", "y1", (0, 10), None),
    ];
    let both = [("x", "x2"), ("y", "y2")];
    for known in [true, false] {
        let previous: &[Option<&str>] = if known {
            &[Some("x1"), Some("y1")]
        } else {
            &[]
        };
        let mut h = setup.to_vec();
        h.push(batch(2, &both, (20, 100), previous));
        h.push(read(3, "x", (30, 40), Some("x2")));
        h.push(read(3, "y", (50, 60), Some("y1")));
        let r = refused(&h);
        assert_eq!(r.keys.len(), 2, "the batch ties x and y: {r}");
        // Reading y first and then x sees it whole or not at all.
        h[3] = read(3, "y", (30, 40), Some("y1"));
        h[4] = read(3, "x", (50, 60), Some("x2"));
        accepted(&h);
    }
}

#[test]
fn a_put_applied_twice_after_being_overwritten_is_refused() {
    // The put of "a" was sent again and answered late: its first apply was
    // seen by the put of "b", and the key then shows "a" again.
    let h = [
        put(1, "k", "a", (0, 100), None),
        put(2, "k", "b", (10, 20), Some("a")),
        read(3, "k", (60, 70), Some("a")),
    ];
    refused(&h);
    // Applied once, read before the overwrite: fine.
    accepted(&[h[0].clone(), h[1].clone(), read(3, "k", (5, 70), Some("a"))]);
    // The client saw the second apply's answer: the value before was its own.
    let twice = put(1, "k", "a", (0, 100), Some("a"));
    assert_eq!(refused(&[twice]).records[0], 0);
    // A compare-and-set from absent applied, then resent: a mismatch on
    // its own value.
    let mismatch = Response::Mismatch {
        current: ob(Some("c")),
    };
    let cas_twice = cas(1, "k", (None, "c"), (0, 100), mismatch);
    assert_eq!(refused(&[cas_twice]).records[0], 0);
}

#[test]
fn partitions_are_checked_apart_and_a_malformed_answer_is_refused() {
    let h = [
        put(1, "a", "1", (0, 10), None),
        put(1, "b", "2", (0, 10), None),
        read(2, "a", (20, 30), Some("1")),
        read(2, "b", (20, 30), None),
    ];
    let report = check(&h, Budget::default());
    assert_eq!(report.partitions, 2);
    assert_eq!(refused(&h).keys, vec![b("b")]);
    let bad = record(1, Op::Write(put_req("k", "v")), (0, 1), Outcome::Read(None));
    assert_eq!(refused(&[bad]).records, vec![0]);
    let two = Outcome::Written(Response::Batch(vec![done(None), done(None)]));
    let bad = record(1, Op::Write(put_req("k", "v")), (0, 1), two);
    assert!(refused(&[bad]).explanation.contains("malformed"));
}

#[test]
fn a_search_over_its_budget_is_undecided_never_linearizable() {
    // Unknown deletes: each may or may not have happened, at any point.
    let delete = Op::Write(Request::Delete { key: b("k") });
    let mut h: Vec<Record> = (0..12)
        .map(|i| record(i, delete.clone(), (i.into(), 0), Outcome::Unknown))
        .collect();
    h.push(put(20, "k", "a", (100, 110), None));
    h.push(read(21, "k", (120, 130), Some("a")));
    let small = Budget {
        steps_per_partition_max: 3,
    };
    let report = check(&h, small);
    match report.verdict {
        Verdict::Undecided(u) => assert_eq!((u.keys, u.operations), (vec![b("k")], 14)),
        other => panic!("expected undecided, got {other:?}"),
    }
    assert_eq!(report.unknown, 12);
    accepted(&h);
}

/// One operation of a generated sequential run: its kind, keys and
/// flags, how far its invocation and completion lie from the instant it
/// takes effect, and its fate.
type Planned = (u8, u8, u8, bool, u64, u64, u8);

fn planned() -> impl Strategy<Value = Planned> {
    (
        0..5u8,
        0..3u8,
        0..3u8,
        any::<bool>(),
        0..250u64,
        0..250u64,
        0..10u8,
    )
}

/// The request of planned operation `i` (none for a read) in `state`.
fn planned_request(i: usize, p: &Planned, state: &[Option<Vec<u8>>; 3]) -> Option<Request> {
    let (kind, k1, k2, flag, ..) = *p;
    let key = |k: u8| vec![b'k', b'0' + k];
    let value = |tag: &str| format!("v{i}{tag}").into_bytes();
    Some(match kind {
        0 => return None,
        1 => Request::Put {
            key: key(k1),
            value: value(""),
        },
        2 => Request::Delete { key: key(k1) },
        3 => Request::CompareAndSet {
            key: key(k1),
            // The value now, or one the key never has.
            expected: if flag {
                state[k1 as usize].clone()
            } else {
                Some(b("never"))
            },
            new: Some(value("")),
        },
        _ => Request::Batch(vec![
            Request::Put {
                key: key(k1),
                value: value("a"),
            },
            Request::Put {
                key: key(k2),
                value: value("b"),
            },
        ]),
    })
}

/// Runs `req` on `state` as the state machine does.
fn execute(req: &Request, state: &mut [Option<Vec<u8>>; 3]) -> Response {
    let slot = |key: &[u8]| usize::from(key[1] - b'0');
    match req {
        Request::Put { key, value } => Response::Done {
            previous: state[slot(key)].replace(value.clone()),
        },
        Request::Delete { key } => Response::Done {
            previous: state[slot(key)].take(),
        },
        Request::CompareAndSet { key, expected, new } => {
            let current = state[slot(key)].clone();
            if current == *expected {
                state[slot(key)] = new.clone();
                Response::Done { previous: current }
            } else {
                Response::Mismatch { current }
            }
        }
        Request::Batch(reqs) => Response::Batch(reqs.iter().map(|r| execute(r, state)).collect()),
    }
}

/// A history from running `plan` one operation at a time, operation `i`
/// taking effect at instant `300 (i + 1)` within its interval; fate 8
/// leaves a write's outcome unknown, fate 9 leaves it unknown and not
/// done (and a read's unknown). It ends with a read of every key.
fn history_of(plan: &[Planned]) -> Vec<Record> {
    let mut state: [Option<Vec<u8>>; 3] = Default::default();
    let mut h = Vec::new();
    let finals = (0..3u8).map(|k| (0u8, k, 0u8, false, 0u64, 0u64, 0u8));
    let plan: Vec<Planned> = plan.iter().copied().chain(finals).collect();
    for (i, p) in plan.iter().enumerate() {
        let at = 300 * (i as u64 + 1);
        let t = (at - p.4, at + p.5);
        let client = i as u32;
        let fate = p.6;
        let Some(req) = planned_request(i, p, &state) else {
            let key = vec![b'k', b'0' + p.1];
            let seen = state[usize::from(p.1)].clone();
            let outcome = if fate == 9 {
                Outcome::Unknown
            } else {
                Outcome::Read(seen)
            };
            h.push(record(client, Op::Read { key }, t, outcome));
            continue;
        };
        let outcome = match fate {
            9 => Outcome::Unknown,
            8 => {
                execute(&req, &mut state);
                Outcome::Unknown
            }
            _ => Outcome::Written(execute(&req, &mut state)),
        };
        h.push(record(client, Op::Write(req), t, outcome));
    }
    h
}

/// The values a write in `r` sets.
fn written_values(r: &Record) -> Vec<Vec<u8>> {
    let Op::Write(req) = &r.op else {
        return Vec::new();
    };
    let reqs = match req {
        Request::Batch(reqs) => reqs.clone(),
        one => vec![one.clone()],
    };
    reqs.into_iter()
        .filter_map(|r| match r {
            Request::Put { value, .. } => Some(value),
            Request::CompareAndSet { new, .. } => new,
            _ => None,
        })
        .collect()
}

/// Changes read `which` (of the known reads) to a value it cannot have
/// seen: one set only by writes invoked after the read completed, or one
/// never written. Returns the read's index.
fn spoil_a_read(h: &mut [Record], which: usize) -> usize {
    let reads: Vec<usize> = (0..h.len())
        .filter(|&i| matches!(h[i].outcome, Outcome::Read(_)))
        .collect();
    let at = reads[which % reads.len()];
    let ret = h[at].return_ns.expect("a known read completed");
    let later = h
        .iter()
        .filter(|r| r.call_ns > ret)
        .flat_map(written_values)
        .next();
    h[at].outcome = Outcome::Read(Some(later.unwrap_or_else(|| b("never written"))));
    at
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn sequential_runs_with_overlap_are_accepted_and_a_spoiled_read_refused(
        plan in prop::collection::vec(planned(), 1..40),
        which in any::<usize>(),
    ) {
        let mut h = history_of(&plan);
        let report = check(&h, Budget::default());
        prop_assert_eq!(&report.verdict, &Verdict::Linearizable, "{:#?}", h);
        let at = spoil_a_read(&mut h, which);
        match check(&h, Budget::default()).verdict {
            Verdict::Refused(r) => prop_assert!(!r.records.is_empty(), "{}", r),
            other => prop_assert!(false, "read #{} spoiled, got {:?}", at, other),
        }
    }
}

#[test]
fn unknown_writes_nothing_shows_are_left_out_and_the_verdict_kept() {
    let base = [
        put(1, "k", "a", (0, 10), None),
        put_unknown(2, "k", "u", 20),
        read(3, "k", (100, 110), Some("a")),
    ];
    let report = check(&base, Budget::default());
    assert_eq!((report.verdict, report.unseen), (Verdict::Linearizable, 1));
    // Seen, it stays, and must explain what was seen.
    let mut seen = base.to_vec();
    seen[2] = read(3, "k", (100, 110), Some("u"));
    let report = check(&seen, Budget::default());
    assert_eq!((report.verdict, report.unseen), (Verdict::Linearizable, 0));
    // An unknown compare-and-set from the value before still may match
    // once the unseen put is left out.
    let cas_req = Request::CompareAndSet {
        key: b("k"),
        expected: ob(Some("a")),
        new: ob(Some("c")),
    };
    let mut h = base.to_vec();
    h[2] = record(4, Op::Write(cas_req), (30, 0), Outcome::Unknown);
    h.push(read(3, "k", (100, 110), Some("c")));
    assert_eq!(check(&h, Budget::default()).unseen, 1);
    accepted(&h);
    // Expected by a compare-and-set, it stays.
    h.push(cas(
        5,
        "k",
        (Some("u"), "d"),
        (200, 210),
        Response::Mismatch {
            current: ob(Some("c")),
        },
    ));
    assert_eq!(check(&h, Budget::default()).unseen, 0);
    accepted(&h);
    // An unknown delete is never left out: "absent" is seen everywhere.
    let delete = Op::Write(Request::Delete { key: b("k") });
    let h = [record(1, delete, (0, 0), Outcome::Unknown)];
    assert_eq!(check(&h, Budget::default()).unseen, 0);
}
