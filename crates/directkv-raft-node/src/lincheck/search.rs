//! The Wing–Gong–Lowe search for one partition.
//!
//! The partition's invocations and completions form one list in time
//! order (an invocation before a completion at the same instant: ties
//! count as concurrent). The search walks the list from its head: at an
//! invocation it tries to let that operation take effect now (the model
//! accepts its result in the current state); if so, the operation is
//! taken out of the list ("lifted": its invocation and completion) and
//! pushed on a stack with the state before it, and the walk starts again
//! at the head. At a completion, that operation had to take effect
//! before now and did not: the walk backtracks, putting the last lifted
//! operation back and moving on past its invocation.
//!
//! - An operation of unknown outcome has no completion in the list: it may
//!   be lifted at any point after its invocation, or never. The history
//!   linearizes once every operation of known outcome is lifted.
//! - Memoisation: a (set of lifted operations, state) pair met before led
//!   nowhere, so it is not explored again. A set is kept as a 128-bit
//!   fingerprint (two independent 64-bit sums of per-operation random
//!   words). Two sets sharing one could only prune a path not yet tried,
//!   so a collision (odds about steps² / 2^128) could refuse wrongly but
//!   never accept wrongly: acceptance is always a linearization found.
//! - Each step (one invocation tried, or one backtrack) counts against the
//!   budget; at the budget the answer is "undecided", never "linearizable".

use std::collections::HashSet;

use super::partition::{Operation, Partition, ValueId, ABSENT};

/// Where the search got furthest before failing: what to show a reader.
#[derive(Debug, Clone)]
pub(super) struct Blame {
    /// Operations lifted when it failed there (the longest prefix found).
    pub prefix: Vec<usize>,
    /// The state after that prefix.
    pub state: Vec<ValueId>,
    /// The operation that completed without having taken effect.
    pub blocked: usize,
    /// Operations invoked before that completion and not in the prefix:
    /// every one was tried before it and none led on.
    pub candidates: Vec<usize>,
}

/// A search's answer.
#[derive(Debug)]
pub(super) enum Found {
    Linearizable { steps: u64 },
    Refused { steps: u64, blame: Blame },
    Undecided { steps: u64 },
}

/// The entry list's head (a sentinel; its tail is one past the last entry).
const HEAD: usize = 0;

/// Candidates a blame lists at most.
const CANDIDATES_MAX: usize = 8;

/// The invocations and completions of a partition, as a doubly linked
/// list whose entries can be taken out and put back (in reverse order).
struct Entries {
    /// The operation of each entry (unused for the sentinels).
    op: Vec<usize>,
    /// For an invocation, the entry of its completion, if known.
    completion: Vec<Option<usize>>,
    is_call: Vec<bool>,
    next: Vec<usize>,
    prev: Vec<usize>,
}

impl Entries {
    fn new(ops: &[Operation]) -> Self {
        // (time, 0 invocation / 1 completion, operation)
        let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * ops.len());
        for (i, op) in ops.iter().enumerate() {
            events.push((op.call_ns, 0, i));
            if let Some(ret) = op.return_ns {
                assert!(ret >= op.call_ns, "completed after invoked");
                events.push((ret, 1, i));
            }
        }
        events.sort_unstable();
        let n = events.len();
        let tail = n + 1;
        let mut e = Entries {
            op: vec![usize::MAX; n + 2],
            completion: vec![None; n + 2],
            is_call: vec![false; n + 2],
            next: (1..=n + 2).collect(),
            prev: (0..n + 2).map(|i| i.saturating_sub(1)).collect(),
        };
        assert_eq!(e.next[n], tail, "the last entry leads to the tail");
        let mut call_at = vec![usize::MAX; ops.len()];
        for (at, &(_, kind, op)) in events.iter().enumerate() {
            let entry = at + 1;
            e.op[entry] = op;
            e.is_call[entry] = kind == 0;
            if kind == 0 {
                call_at[op] = entry;
            } else {
                assert!(call_at[op] < entry, "an invocation precedes its completion");
                e.completion[call_at[op]] = Some(entry);
            }
        }
        e
    }

    fn unlink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        self.next[p] = n;
        self.prev[n] = p;
    }

    fn relink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        assert!(self.next[p] == n && self.prev[n] == p, "put back in order");
        self.next[p] = x;
        self.prev[n] = x;
    }

    /// Takes invocation `call` and its completion out of the list.
    fn lift(&mut self, call: usize) {
        assert!(self.is_call[call], "only an invocation is lifted");
        self.unlink(call);
        if let Some(ret) = self.completion[call] {
            self.unlink(ret);
        }
    }

    /// Puts back what [`lift`](Self::lift) took out, last lifted first.
    fn unlift(&mut self, call: usize) {
        if let Some(ret) = self.completion[call] {
            self.relink(ret);
        }
        self.relink(call);
    }
}

/// A random word per operation, from SplitMix64.
fn word(seed: u64, op: usize) -> u64 {
    let mut z = seed.wrapping_add((op as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The search's state: the lifted operations and the model's state.
struct Walk<'p> {
    ops: &'p [Operation],
    entries: Entries,
    /// (invocation entry, state before it) of each lifted operation.
    stack: Vec<(usize, Vec<ValueId>)>,
    state: Vec<ValueId>,
    /// The fingerprint of the lifted set.
    print: (u64, u64),
    seen: HashSet<((u64, u64), Vec<ValueId>)>,
    /// Operations of known outcome not lifted.
    known_left: usize,
    blame: Option<Blame>,
}

impl<'p> Walk<'p> {
    fn toggle(&mut self, op: usize) {
        self.print.0 ^= word(0x5EED_0001, op);
        self.print.1 ^= word(0xC0FF_EE02, op);
    }

    /// Lets the operation of invocation `call` take effect now if its
    /// result fits and the state it leads to is new.
    fn try_lift(&mut self, call: usize) -> bool {
        let op = self.entries.op[call];
        let Some(next) = self.ops[op].step(&self.state) else {
            return false;
        };
        self.toggle(op);
        if !self.seen.insert((self.print, next.clone())) {
            self.toggle(op);
            return false;
        }
        let before = std::mem::replace(&mut self.state, next);
        self.stack.push((call, before));
        self.entries.lift(call);
        if self.ops[op].return_ns.is_some() {
            self.known_left -= 1;
        }
        true
    }

    /// Undoes the last lift; the invocation entry it was at, or `None`
    /// with nothing lifted.
    fn backtrack(&mut self) -> Option<usize> {
        let (call, before) = self.stack.pop()?;
        let op = self.entries.op[call];
        self.entries.unlift(call);
        self.state = before;
        self.toggle(op);
        if self.ops[op].return_ns.is_some() {
            self.known_left += 1;
        }
        assert!(
            self.known_left <= self.ops.len(),
            "counted within the partition"
        );
        Some(call)
    }

    /// Remembers where the walk failed if it got further than before.
    fn note_failure(&mut self, completion: usize) {
        let depth = self.stack.len();
        if self.blame.as_ref().is_some_and(|b| b.prefix.len() >= depth) {
            return;
        }
        let mut candidates = Vec::new();
        let mut at = self.entries.next[HEAD];
        while at != completion && candidates.len() < CANDIDATES_MAX {
            assert!(self.entries.is_call[at], "only invocations precede it");
            candidates.push(self.ops[self.entries.op[at]].record);
            at = self.entries.next[at];
        }
        let lifted = self
            .stack
            .iter()
            .map(|(c, _)| self.ops[self.entries.op[*c]].record);
        self.blame = Some(Blame {
            prefix: lifted.collect(),
            state: self.state.clone(),
            blocked: self.ops[self.entries.op[completion]].record,
            candidates,
        });
    }
}

/// Searches `partition` for a linearization, within `steps_max` steps.
pub(super) fn search(partition: &Partition, steps_max: u64) -> Found {
    let ops = &partition.ops;
    let mut walk = Walk {
        ops,
        entries: Entries::new(ops),
        stack: Vec::new(),
        state: vec![ABSENT; partition.keys.len()],
        print: (0, 0),
        seen: HashSet::new(),
        known_left: ops.iter().filter(|o| o.return_ns.is_some()).count(),
        blame: None,
    };
    let mut at = walk.entries.next[HEAD];
    let mut steps = 0u64;
    while walk.known_left > 0 {
        if steps >= steps_max {
            return Found::Undecided { steps };
        }
        steps += 1;
        // A completion of an operation not lifted is still in the list,
        // and the walk never passes one: it is reached before the tail.
        assert!(
            at != HEAD && at < walk.entries.op.len() - 1,
            "the walk stays within the list"
        );
        if walk.entries.is_call[at] {
            if walk.try_lift(at) {
                at = walk.entries.next[HEAD];
            } else {
                at = walk.entries.next[at];
            }
            continue;
        }
        walk.note_failure(at);
        match walk.backtrack() {
            Some(call) => at = walk.entries.next[call],
            None => {
                let blame = walk.blame.expect("a failure was noted");
                return Found::Refused { steps, blame };
            }
        }
    }
    assert!(
        walk.stack.len() <= ops.len(),
        "each operation lifted at most once"
    );
    Found::Linearizable { steps }
}
