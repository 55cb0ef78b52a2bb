//! A history cut into independent partitions, each operation in the
//! compact form the search steps through: keys numbered within their
//! partition, values numbered across the history (0 is "absent").
//!
//! - Operations that cannot affect any other's result are left out: reads
//!   of unknown outcome, writes refused with nothing done (or answered
//!   [`Response::Rejected`], which changes nothing).
//! - Two keys are in one partition when an operation touches both (a
//!   batch): union-find over the keys, so a partition is a connected
//!   component of the keys under "written together".
//! - A completed write's answer has the shape of its request (one answer
//!   per command of a batch); one that does not is a [`Malformed`] history.

use std::collections::HashMap;

use directkv_raft::{Request, Response};

use crate::history::{Op, Outcome, Record};

/// A value's number: 0 for absent, the others index [`Split::values`].
pub(super) type ValueId = u32;

/// The number of "no value".
pub(super) const ABSENT: ValueId = 0;

/// What a command does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Put(ValueId),
    Delete,
    /// Sets `new` (0 removes) if the value is `expected`.
    Cas {
        expected: ValueId,
        new: ValueId,
    },
}

/// One command of a write, on a key of its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cmd {
    pub key: usize,
    pub action: Action,
}

/// The state machine's answer to one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    /// Done; the value before.
    Done(ValueId),
    /// A compare-and-set that did not match; the value.
    Mismatch(ValueId),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    /// A read that saw `seen`.
    Read { key: usize, seen: ValueId },
    /// A write's commands, in order, and their answers if known.
    Write {
        cmds: Vec<Cmd>,
        answers: Option<Vec<Answer>>,
    },
}

/// One operation of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Operation {
    /// Its index in the history.
    pub record: usize,
    pub call_ns: u64,
    /// `None`: of unknown outcome, it may take effect at any point after
    /// its invocation, or never.
    pub return_ns: Option<u64>,
    pub kind: Kind,
}

impl Operation {
    /// The state after this operation takes effect in `state`, or `None`
    /// when its known result is not what it would answer there.
    pub fn step(&self, state: &[ValueId]) -> Option<Vec<ValueId>> {
        match &self.kind {
            Kind::Read { key, seen } => (state[*key] == *seen).then(|| state.to_vec()),
            Kind::Write { cmds, answers } => {
                assert!(
                    answers.as_ref().is_none_or(|a| a.len() == cmds.len()),
                    "one answer per command"
                );
                let mut next = state.to_vec();
                for (i, cmd) in cmds.iter().enumerate() {
                    let answer = apply(&mut next, *cmd);
                    if answers.as_ref().is_some_and(|a| a[i] != answer) {
                        return None;
                    }
                }
                Some(next)
            }
        }
    }
}

/// Runs `cmd` on `state` as the state machine does; its answer.
fn apply(state: &mut [ValueId], cmd: Cmd) -> Answer {
    let current = state[cmd.key];
    match cmd.action {
        Action::Put(v) => {
            assert_ne!(v, ABSENT, "a put sets a value");
            state[cmd.key] = v;
            Answer::Done(current)
        }
        Action::Delete => {
            state[cmd.key] = ABSENT;
            Answer::Done(current)
        }
        Action::Cas { expected, new } if current == expected => {
            state[cmd.key] = new;
            Answer::Done(current)
        }
        Action::Cas { .. } => Answer::Mismatch(current),
    }
}

/// Keys that are written together, and their operations.
#[derive(Debug)]
pub(super) struct Partition {
    /// Its keys; an operation's `key` indexes this.
    pub keys: Vec<Vec<u8>>,
    pub ops: Vec<Operation>,
}

/// A history cut into partitions.
#[derive(Debug)]
pub(super) struct Split {
    pub partitions: Vec<Partition>,
    /// Each value by its number (index 0, "absent", is empty).
    pub values: Vec<Vec<u8>>,
    /// Operations left out: they affect nothing.
    pub skipped: usize,
}

/// A record whose outcome does not fit its operation.
#[derive(Debug)]
pub(super) struct Malformed {
    pub record: usize,
    pub why: String,
}

/// The keys `op` touches, or why it is malformed.
fn keys_of(op: &Op) -> Result<Vec<&[u8]>, String> {
    let req = match op {
        Op::Read { key } => return Ok(vec![key]),
        Op::Write(req) => req,
    };
    match req {
        Request::Batch(reqs) => reqs
            .iter()
            .map(|r| r.key().ok_or_else(|| "a batch holds a batch".to_string()))
            .collect(),
        r => Ok(vec![r.key().expect("a command that is no batch has a key")]),
    }
}

/// Whether `record` can affect any result: see the module's list.
fn matters(record: &Record) -> bool {
    match (&record.op, &record.outcome) {
        (_, Outcome::NotDone) => false,
        (Op::Read { .. }, o) => matches!(o, Outcome::Read(_)),
        (Op::Write(_), Outcome::Written(Response::Rejected { .. })) => false,
        (Op::Write(_), _) => true,
    }
}

/// Union-find over key numbers, with path halving.
struct Sets(Vec<usize>);

impl Sets {
    fn root(&mut self, mut k: usize) -> usize {
        let mut hops = 0;
        while self.0[k] != k {
            self.0[k] = self.0[self.0[k]];
            k = self.0[k];
            hops += 1;
            assert!(hops <= self.0.len(), "union-find has no cycle");
        }
        k
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.root(a), self.root(b));
        // The smaller root wins: a deterministic cut.
        let (lo, hi) = (ra.min(rb), ra.max(rb));
        self.0[hi] = lo;
    }
}

/// Numbers byte strings in order of first sight.
#[derive(Default)]
struct Names<'a> {
    ids: HashMap<&'a [u8], usize>,
    names: Vec<&'a [u8]>,
}

impl<'a> Names<'a> {
    fn id(&mut self, name: &'a [u8]) -> usize {
        let next = self.names.len();
        let id = *self.ids.entry(name).or_insert(next);
        if id == next {
            self.names.push(name);
        }
        assert!(id < self.names.len(), "every number names a string");
        id
    }
}

/// A partition being gathered: its keys and its operations (index in the
/// history, its keys' numbers in the partition).
type Group<'a> = (Names<'a>, Vec<(usize, Vec<usize>)>);

/// Cuts `records` into partitions.
///
/// # Errors
/// A record whose outcome does not fit its operation.
pub(super) fn split(records: &[Record]) -> Result<Split, Malformed> {
    let mut keys = Names::default();
    let mut touched: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, r) in records.iter().enumerate().filter(|(_, r)| matters(r)) {
        let names = keys_of(&r.op).map_err(|why| Malformed { record: i, why })?;
        touched.push((i, names.into_iter().map(|k| keys.id(k)).collect()));
    }
    let mut sets = Sets((0..keys.names.len()).collect());
    for (_, ks) in &touched {
        for w in ks.windows(2) {
            sets.union(w[0], w[1]);
        }
    }
    // Partition by root, each numbering its keys in order of first sight.
    let mut by_root: HashMap<usize, usize> = HashMap::new();
    let mut parts: Vec<Group<'_>> = Vec::new();
    let mut values = Values::default();
    for (i, ks) in &touched {
        // An empty batch touches no key: a partition of its own.
        let root = ks.first().map(|&k| sets.root(k));
        let at = match root.and_then(|r| by_root.get(&r)) {
            Some(&at) => at,
            None => {
                parts.push((Names::default(), Vec::new()));
                if let Some(r) = root {
                    by_root.insert(r, parts.len() - 1);
                }
                parts.len() - 1
            }
        };
        let (local, ops) = &mut parts[at];
        let ks = ks.iter().map(|&k| local.id(keys.names[k])).collect();
        ops.push((*i, ks));
    }
    let skipped = records.len() - touched.len();
    let mut partitions = Vec::with_capacity(parts.len());
    for (local, ops) in parts {
        let ops = ops
            .into_iter()
            .map(|(i, ks)| operation(&mut values, i, &records[i], &ks))
            .collect::<Result<Vec<_>, _>>()?;
        let keys = local.names.iter().map(|k| k.to_vec()).collect();
        partitions.push(Partition { keys, ops });
    }
    assert_eq!(
        partitions.iter().map(|p| p.ops.len()).sum::<usize>() + skipped,
        records.len(),
        "every record is in one partition or skipped"
    );
    Ok(Split {
        partitions,
        values: values.names,
        skipped,
    })
}

/// Value numbers, 0 for absent.
struct Values {
    ids: HashMap<Vec<u8>, ValueId>,
    names: Vec<Vec<u8>>,
}

impl Default for Values {
    fn default() -> Self {
        Values {
            ids: HashMap::new(),
            names: vec![Vec::new()],
        }
    }
}

impl Values {
    fn id(&mut self, v: Option<&Vec<u8>>) -> ValueId {
        let Some(v) = v else { return ABSENT };
        let next = ValueId::try_from(self.names.len()).expect("under 2^32 values");
        let id = *self.ids.entry(v.clone()).or_insert(next);
        if id == next {
            self.names.push(v.clone());
        }
        assert_ne!(id, ABSENT, "a value is not absent");
        id
    }
}

/// `record` (index `i`) in compact form; `keys` numbers its keys in order.
fn operation(
    values: &mut Values,
    i: usize,
    record: &Record,
    keys: &[usize],
) -> Result<Operation, Malformed> {
    let bad = |why: &str| Malformed {
        record: i,
        why: why.to_string(),
    };
    let known = record.is_known();
    let kind = match (&record.op, &record.outcome) {
        (Op::Read { .. }, Outcome::Read(v)) => Kind::Read {
            key: keys[0],
            seen: values.id(v.as_ref()),
        },
        (Op::Write(req), outcome) => {
            let reqs = match req {
                Request::Batch(reqs) => reqs.as_slice(),
                one => std::slice::from_ref(one),
            };
            assert_eq!(reqs.len(), keys.len(), "a key per command");
            let cmds = reqs.iter().zip(keys).map(|(r, &k)| cmd(values, r, k));
            let cmds: Vec<Cmd> = cmds.collect();
            let answers = match outcome {
                Outcome::Written(resp) => Some(answers(values, req, resp).map_err(|w| bad(&w))?),
                Outcome::Pending | Outcome::Unknown => None,
                _ => return Err(bad("a write answered as a read")),
            };
            Kind::Write { cmds, answers }
        }
        (Op::Read { .. }, _) => unreachable!("a read that matters has a value"),
    };
    Ok(Operation {
        record: i,
        call_ns: record.call_ns,
        return_ns: if known { record.return_ns } else { None },
        kind,
    })
    .and_then(|op| match op.return_ns {
        Some(ret) if ret < op.call_ns => Err(bad("it completed before it was invoked")),
        None if known => Err(bad("a known outcome without a completion time")),
        _ => Ok(op),
    })
}

fn cmd(values: &mut Values, req: &Request, key: usize) -> Cmd {
    let action = match req {
        Request::Put { value, .. } => Action::Put(values.id(Some(value))),
        Request::Delete { .. } => Action::Delete,
        Request::CompareAndSet { expected, new, .. } => Action::Cas {
            expected: values.id(expected.as_ref()),
            new: values.id(new.as_ref()),
        },
        Request::Batch(_) => unreachable!("batches do not nest: refused by keys_of"),
    };
    Cmd { key, action }
}

/// The answers of `resp` to `req`, one per command.
fn answers(values: &mut Values, req: &Request, resp: &Response) -> Result<Vec<Answer>, String> {
    let one = |values: &mut Values, resp: &Response| match resp {
        Response::Done { previous } => Ok(Answer::Done(values.id(previous.as_ref()))),
        Response::Mismatch { current } => Ok(Answer::Mismatch(values.id(current.as_ref()))),
        other => Err(format!("answer {other:?} to a command")),
    };
    match (req, resp) {
        (Request::Batch(reqs), Response::Batch(resps)) if reqs.len() == resps.len() => {
            resps.iter().map(|r| one(values, r)).collect()
        }
        (Request::Batch(_), other) => Err(format!("answer {other:?} to a batch")),
        (_, resp) => Ok(vec![one(values, resp)?]),
    }
}
