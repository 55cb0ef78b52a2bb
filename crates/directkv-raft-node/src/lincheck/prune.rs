//! Leaves out writes of unknown outcome that no result can tell took
//! effect: they may as well never have. Left in, each stays open to the
//! end of the history, and the search may try it at every point after its
//! invocation; the few dozen of a run with kills left the fault test's
//! shared-key partition undecided after 10 million steps.
//!
//! An unknown write `U` is left out when
//! 1. each of its commands is a put or a compare-and-set of a value (none
//!    removes a key: "absent" is seen all the time);
//! 2. no value it writes appears in any known result (a read's value, an
//!    answer's value before or current value) or as any compare-and-set's
//!    expected value;
//! 3. no unknown write of several commands compares-and-sets a key `U`
//!    writes (more than the argument below needs: kept conservative).
//!
//! Why that keeps every verdict: take a linearization with `U` in it, `U`
//! writing `v` to key `k` at some instant. Until `k` is next put or
//! deleted, it holds `v`: no compare-and-set matches `v` (by 2), and any
//! operation of known result on `k` would show `v` (by 2), so only unknown
//! ones touch `k` there. Take `U` out of the order: until that put or
//! delete, `k` may hold other values (an unknown compare-and-set may match
//! now), seen only by those unknown operations, whose results are not
//! checked and whose compare-and-sets change only `k`; from that put or
//! delete on, every key holds what it held before. No known result
//! changes, so the history with `U` is linearizable exactly when the one
//! without is, and the same holds for every such write at once
//! (conditions 1-3 only get easier as writes are left out).

use std::collections::HashSet;

use super::partition::{Action, Answer, Kind, Operation, Partition, ValueId, ABSENT};

/// Values in known results, and values expected by compare-and-sets.
fn seen_values(parts: &[Partition]) -> HashSet<ValueId> {
    let mut seen = HashSet::new();
    for op in parts.iter().flat_map(|p| &p.ops) {
        match &op.kind {
            Kind::Read { seen: v, .. } => {
                seen.insert(*v);
            }
            Kind::Write { cmds, answers } => {
                for c in cmds {
                    if let Action::Cas { expected, .. } = c.action {
                        seen.insert(expected);
                    }
                }
                for a in answers.iter().flatten() {
                    let (Answer::Done(v) | Answer::Mismatch(v)) = *a;
                    seen.insert(v);
                }
            }
        }
    }
    seen
}

/// Whether unknown write `op` may be left out (conditions 1 and 2);
/// condition 3 is for the caller, which knows the partition.
fn unseen(op: &Operation, seen: &HashSet<ValueId>) -> Option<Vec<usize>> {
    let Kind::Write { cmds, answers } = &op.kind else {
        return None;
    };
    if op.return_ns.is_some() || answers.is_some() {
        return None;
    }
    let mut keys = Vec::with_capacity(cmds.len());
    for c in cmds {
        let written = match c.action {
            Action::Put(v) | Action::Cas { new: v, .. } => v,
            Action::Delete => return None,
        };
        if written == ABSENT || seen.contains(&written) {
            return None;
        }
        keys.push(c.key);
    }
    Some(keys)
}

/// Keys of `p` compared-and-set by an unknown write of several commands.
fn cas_in_unknown_batches(p: &Partition) -> HashSet<usize> {
    let mut keys = HashSet::new();
    for op in p.ops.iter().filter(|o| o.return_ns.is_none()) {
        if let Kind::Write { cmds, .. } = &op.kind {
            if cmds.len() > 1 {
                let cas = cmds
                    .iter()
                    .filter(|c| matches!(c.action, Action::Cas { .. }));
                keys.extend(cas.map(|c| c.key));
            }
        }
    }
    keys
}

/// Leaves out every unknown write the module's rule allows; how many.
pub(super) fn prune(parts: &mut [Partition]) -> usize {
    let seen = seen_values(parts);
    let mut left_out = 0;
    for p in parts.iter_mut() {
        let guarded = cas_in_unknown_batches(p);
        let before = p.ops.len();
        p.ops.retain(|op| {
            let Some(keys) = unseen(op, &seen) else {
                return true;
            };
            // An unknown batch's own compare-and-set guards its key from
            // itself too: conservative, it is kept.
            keys.iter().any(|k| guarded.contains(k))
        });
        assert!(p.ops.len() <= before, "pruning only removes");
        left_out += before - p.ops.len();
    }
    left_out
}
