//! A history of client operations as the clients saw them: each
//! operation's invocation and completion stamped with one monotonic clock,
//! and its outcome, for [`crate::lincheck`] to judge.
//!
//! - Stamps are nanoseconds since the history began, taken under the
//!   history's lock and strictly increasing: if one operation completed
//!   before another was invoked, its completion stamp is the smaller.
//! - An invocation is stamped before the request is sent and a completion
//!   after the answer came, so each operation's interval covers the moment
//!   it took effect.
//! - An operation is recorded once, with its final outcome, however many
//!   times the client sent it. One never completed counts as
//!   [`Outcome::Unknown`].

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use directkv_raft::{Request, Response};

use crate::client::{Client, ClientError};

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A linearizable read of a key.
    Read {
        /// The key.
        key: Vec<u8>,
    },
    /// A write: put, delete, compare-and-set or batch.
    Write(Request),
}

/// How an operation ended, as its client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not completed yet (the same as [`Outcome::Unknown`] to a checker).
    Pending,
    /// A read answered with the key's value.
    Read(Option<Vec<u8>>),
    /// A write committed with this answer.
    Written(Response),
    /// No answer that tells: a write may have taken effect at any point
    /// after its invocation, or never; a read tells nothing.
    Unknown,
    /// Refused with nothing done.
    NotDone,
}

/// One operation of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The client (a thread of control: one operation at a time) that ran it.
    pub client: u32,
    /// What it asked for.
    pub op: Op,
    /// When it was invoked, in nanoseconds of the history's clock.
    pub call_ns: u64,
    /// When it completed, if it did.
    pub return_ns: Option<u64>,
    /// How it ended.
    pub outcome: Outcome,
}

impl Record {
    /// Whether its effect is known: a completed operation whose outcome
    /// is neither unknown nor pending.
    pub fn is_known(&self) -> bool {
        !matches!(self.outcome, Outcome::Pending | Outcome::Unknown)
    }
}

/// An operation invoked and not yet completed: hand it back to
/// [`History::complete`].
#[must_use = "an operation invoked is completed with its outcome"]
#[derive(Debug)]
pub struct Call(usize);

/// A history that many tasks record into at once.
#[derive(Debug)]
pub struct History {
    origin: Origin,
    inner: Mutex<Inner>,
}

/// Where a history's clock started.
#[derive(Debug)]
enum Origin {
    /// The machine's monotonic clock.
    Machine(Instant),
    /// tokio's clock, which a runtime with paused time simulates.
    Runtime(tokio::time::Instant),
}

#[derive(Debug, Default)]
struct Inner {
    /// The last stamp handed out.
    last_ns: u64,
    records: Vec<Record>,
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl History {
    /// An empty history whose clock starts now.
    pub fn new() -> Self {
        History {
            origin: Origin::Machine(Instant::now()),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// An empty history stamped by tokio's clock, whose clock starts now:
    /// in a runtime whose time is paused (a simulation), the stamps are
    /// simulated time, the same on every run of the same schedule.
    pub fn with_runtime_clock() -> Self {
        History {
            origin: Origin::Runtime(tokio::time::Instant::now()),
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update is one push or one field set: a panicking holder
        // leaves nothing half-written.
        match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The next stamp: the clock's time, or one past the last stamp.
    fn stamp(&self, inner: &mut Inner) -> u64 {
        let elapsed = match &self.origin {
            Origin::Machine(t) => t.elapsed(),
            Origin::Runtime(t) => t.elapsed(),
        };
        let now = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let stamp = now.max(inner.last_ns + 1);
        assert!(stamp > inner.last_ns, "stamps strictly increase");
        inner.last_ns = stamp;
        stamp
    }

    /// Records that `client` invokes `op` now.
    pub fn invoke(&self, client: u32, op: Op) -> Call {
        let mut inner = self.lock();
        let call_ns = self.stamp(&mut inner);
        inner.records.push(Record {
            client,
            op,
            call_ns,
            return_ns: None,
            outcome: Outcome::Pending,
        });
        Call(inner.records.len() - 1)
    }

    /// Records that the operation `call` completed now with `outcome`
    /// (an unknown outcome is stamped too; a checker ignores its stamp).
    ///
    /// # Panics
    /// With [`Outcome::Pending`]: an operation completes with an outcome.
    pub fn complete(&self, call: Call, outcome: Outcome) {
        assert_ne!(outcome, Outcome::Pending, "a completion has an outcome");
        let mut inner = self.lock();
        let stamp = self.stamp(&mut inner);
        let record = &mut inner.records[call.0];
        assert_eq!(record.outcome, Outcome::Pending, "completed once");
        assert!(record.call_ns < stamp, "completed after it was invoked");
        record.return_ns = Some(stamp);
        record.outcome = outcome;
    }

    /// Every operation so far, in the order invoked.
    pub fn records(&self) -> Vec<Record> {
        self.lock().records.clone()
    }

    /// Writes `req` through `client`, recorded as `id`'s operation.
    ///
    /// # Errors
    /// As [`Client::write`].
    pub async fn write(
        &self,
        id: u32,
        client: &mut Client,
        req: &Request,
    ) -> Result<crate::api::Written, ClientError> {
        let call = self.invoke(id, Op::Write(req.clone()));
        let got = client.write(req).await;
        let outcome = match &got {
            Ok(w) => Outcome::Written(w.response.clone()),
            // Refused before anything was done.
            Err(ClientError::Rejected(_)) => Outcome::NotDone,
            Err(ClientError::Unknown(_) | ClientError::Unavailable(_)) => Outcome::Unknown,
        };
        self.complete(call, outcome);
        got
    }

    /// Reads `key` through `client`, recorded as `id`'s operation.
    ///
    /// # Errors
    /// As [`Client::read`].
    pub async fn read(
        &self,
        id: u32,
        client: &mut Client,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, ClientError> {
        let call = self.invoke(id, Op::Read { key: key.to_vec() });
        let got = client.read(key).await;
        let outcome = match &got {
            Ok(v) => Outcome::Read(v.clone()),
            Err(_) => Outcome::Unknown,
        };
        self.complete(call, outcome);
        got
    }
}
