//! The checker's entry point and its answers: [`check`] cuts a history
//! into partitions and searches each; the first partition refused
//! refuses the history, with an explanation naming its keys and
//! operations.

use std::fmt;

use super::partition::{split, Partition, Split, ValueId};
use super::prune::prune;
use super::search::{search, Blame, Found};
use directkv_raft::{Request, Response};

use crate::history::{Op, Outcome, Record};

/// How much search a check may spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Steps (an operation tried, or one backtrack) per partition; a
    /// partition that needs more is undecided.
    pub steps_per_partition_max: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            steps_per_partition_max: 10_000_000,
        }
    }
}

/// What a check found, and what it looked at.
#[derive(Debug, Clone)]
pub struct Report {
    /// The verdict.
    pub verdict: Verdict,
    /// Partitions searched.
    pub partitions: usize,
    /// Operations searched.
    pub operations: usize,
    /// Of those, operations of unknown outcome.
    pub unknown: usize,
    /// Operations left out: they affect nothing (reads of unknown outcome,
    /// writes refused with nothing done).
    pub skipped: usize,
    /// Writes of unknown outcome left out because nothing they wrote was
    /// ever seen (see `prune.rs`: it keeps every verdict).
    pub unseen: usize,
    /// Operations of the largest partition.
    pub largest_partition: usize,
    /// Search steps spent, over every partition.
    pub steps: u64,
}

/// Whether a history is linearizable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every partition has a linearization.
    Linearizable,
    /// A partition has none: the history is not linearizable.
    Refused(Refusal),
    /// The budget ran out before a partition was decided (and no other
    /// was refused): nothing is known.
    Undecided(Undecided),
}

/// Why a history is not linearizable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The keys of the partition refused.
    pub keys: Vec<Vec<u8>>,
    /// The operations involved (indexes into the history): the one that
    /// completed before it could take effect first, then those that could
    /// have gone before it.
    pub records: Vec<usize>,
    /// The explanation, for people.
    pub explanation: String,
}

/// A partition the budget did not decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecided {
    /// Its keys.
    pub keys: Vec<Vec<u8>>,
    /// Its operations.
    pub operations: usize,
    /// The steps spent on it.
    pub steps: u64,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.explanation)
    }
}

impl fmt::Display for Undecided {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "undecided after {} steps: the partition of keys {} ({} operations)",
            self.steps,
            keys_text(&self.keys),
            self.operations
        )
    }
}

/// Checks that `records` is linearizable for a key-value store whose keys
/// all start absent: every operation of known outcome took effect at one
/// instant between its invocation and its completion, and every one of
/// unknown outcome at one instant after its invocation or never, in one
/// order in which each result is what the state machine answers.
pub fn check(records: &[Record], budget: Budget) -> Report {
    let mut split = match split(records) {
        Ok(s) => s,
        Err(bad) => {
            let explanation = format!(
                "a malformed history: {}: {}",
                describe(bad.record, &records[bad.record]),
                bad.why
            );
            let refusal = Refusal {
                keys: Vec::new(),
                records: vec![bad.record],
                explanation,
            };
            return Report {
                verdict: Verdict::Refused(refusal),
                partitions: 0,
                operations: 0,
                unknown: 0,
                skipped: 0,
                unseen: 0,
                largest_partition: 0,
                steps: 0,
            };
        }
    };
    let unseen = prune(&mut split.partitions);
    let mut report = judge(records, &split, budget);
    report.unseen = unseen;
    assert_eq!(
        report.operations + report.skipped + unseen,
        records.len(),
        "every operation searched or left out"
    );
    report
}

fn judge(records: &[Record], split: &Split, budget: Budget) -> Report {
    assert!(budget.steps_per_partition_max > 0, "a search needs steps");
    let parts = &split.partitions;
    let mut report = Report {
        verdict: Verdict::Linearizable,
        partitions: parts.len(),
        operations: parts.iter().map(|p| p.ops.len()).sum(),
        unknown: parts
            .iter()
            .flat_map(|p| &p.ops)
            .filter(|o| o.return_ns.is_none())
            .count(),
        skipped: split.skipped,
        unseen: 0,
        largest_partition: parts.iter().map(|p| p.ops.len()).max().unwrap_or(0),
        steps: 0,
    };
    for p in parts {
        match search(p, budget.steps_per_partition_max) {
            Found::Linearizable { steps } => report.steps += steps,
            Found::Refused { steps, blame } => {
                report.steps += steps;
                let refusal = refusal(records, split, p, &blame);
                report.verdict = Verdict::Refused(refusal);
                return report;
            }
            Found::Undecided { steps } => {
                report.steps += steps;
                if report.verdict == Verdict::Linearizable {
                    report.verdict = Verdict::Undecided(Undecided {
                        keys: p.keys.clone(),
                        operations: p.ops.len(),
                        steps,
                    });
                }
            }
        }
    }
    report
}

/// Prefix operations an explanation shows, the last ones.
const PREFIX_SHOWN: usize = 6;

fn refusal(records: &[Record], split: &Split, p: &Partition, blame: &Blame) -> Refusal {
    use std::fmt::Write;
    let state: Vec<String> = p
        .keys
        .iter()
        .zip(&blame.state)
        .map(|(k, &v)| format!("{} = {}", text(k), value_text(split, v)))
        .collect();
    let mut s = format!(
        "not linearizable: the partition of keys {} ({} operations). At most {} of them \
         linearize in order; after them the keys hold {{{}}}, and\n  {}\ncompleted before it \
         could take effect: no order of the operations invoked before its completion explains \
         its result. The others invoked before it and not in that order:\n",
        keys_text(&p.keys),
        p.ops.len(),
        blame.prefix.len(),
        state.join(", "),
        describe(blame.blocked, &records[blame.blocked]),
    );
    let others: Vec<usize> = blame
        .candidates
        .iter()
        .copied()
        .filter(|&c| c != blame.blocked)
        .collect();
    if others.is_empty() {
        let _ = writeln!(s, "  (none)");
    }
    for &c in &others {
        let _ = writeln!(s, "  {}", describe(c, &records[c]));
    }
    let shown = blame.prefix.len().saturating_sub(PREFIX_SHOWN);
    let _ = writeln!(s, "The last operations of that order:");
    for &c in &blame.prefix[shown..] {
        let _ = writeln!(s, "  {}", describe(c, &records[c]));
    }
    let mut involved = vec![blame.blocked];
    involved.extend(others);
    assert_eq!(involved[0], blame.blocked, "the blocked operation first");
    Refusal {
        keys: p.keys.clone(),
        records: involved,
        explanation: s,
    }
}

/// Bytes shown of a key or value at most.
const TEXT_MAX: usize = 40;

fn text(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(&bytes[..bytes.len().min(TEXT_MAX)]);
    let more = if bytes.len() > TEXT_MAX { "…" } else { "" };
    format!("{s:?}{more}")
}

fn opt_text(v: &Option<Vec<u8>>) -> String {
    v.as_deref().map_or_else(|| "absent".into(), text)
}

fn value_text(split: &Split, v: ValueId) -> String {
    if v == 0 {
        return "absent".into();
    }
    text(&split.values[v as usize])
}

fn keys_text(keys: &[Vec<u8>]) -> String {
    let shown: Vec<String> = keys.iter().take(8).map(|k| text(k)).collect();
    let more = if keys.len() > 8 { ", …" } else { "" };
    format!("[{}{more}]", shown.join(", "))
}

/// One record for people: its index, client, interval, request, outcome.
pub fn describe(i: usize, r: &Record) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    let end = r
        .return_ns
        .filter(|_| r.is_known())
        .map_or_else(|| "…".into(), |t| format!("{:.3}", ms(t)));
    let op = match &r.op {
        Op::Read { key } => format!("read {}", text(key)),
        Op::Write(req) => request_text(req),
    };
    let outcome = match &r.outcome {
        Outcome::Read(v) => format!("saw {}", opt_text(v)),
        Outcome::Written(resp) => format!("answered {}", response_text(resp)),
        Outcome::Unknown | Outcome::Pending => "outcome unknown".into(),
        Outcome::NotDone => "refused".into(),
    };
    format!(
        "#{i} client {} [{:.3} ms, {end} ms]: {op} -> {outcome}",
        r.client,
        ms(r.call_ns)
    )
}

fn request_text(req: &Request) -> String {
    match req {
        Request::Put { key, value } => format!("put {} = {}", text(key), text(value)),
        Request::Delete { key } => format!("delete {}", text(key)),
        Request::CompareAndSet { key, expected, new } => format!(
            "cas {}: {} -> {}",
            text(key),
            opt_text(expected),
            opt_text(new)
        ),
        Request::Batch(reqs) => {
            let each: Vec<String> = reqs.iter().map(request_text).collect();
            format!("batch [{}]", each.join("; "))
        }
    }
}

fn response_text(resp: &Response) -> String {
    match resp {
        Response::Done { previous } => format!("done (was {})", opt_text(previous)),
        Response::Mismatch { current } => format!("mismatch (is {})", opt_text(current)),
        Response::Batch(resps) => {
            let each: Vec<String> = resps.iter().map(response_text).collect();
            format!("[{}]", each.join("; "))
        }
        other => format!("{other:?}"),
    }
}
