//! The writer's state under its mutex: the fill buffer records are copied
//! into, the spare buffer, the durable end, and the phase machine
//! `Open → Flushing → Open | Failed` (see the parent module's states).
//!
//! Invariants:
//! - exactly one of the fill and spare buffers is out while `Flushing` (the
//!   leader writes it); both are here otherwise;
//! - records are put in LSN order, each inside the fill buffer;
//! - `Failed` is final.

use std::time::Instant;

use super::super::format::{RecordHeader, RECORD_HEADER_BYTES, RECORD_PAYLOAD_MAX};
use crate::error::Error;
use crate::io::AlignedBuf;
use crate::lsn::Lsn;

pub(super) struct Buffer {
    pub(super) buf: AlignedBuf,
    pub(super) start: Lsn,
    pub(super) used: usize,
}

impl Buffer {
    pub(super) fn end(&self) -> Lsn {
        Lsn::new(self.start.get() + self.used as u64)
    }

    /// Writes a record at `at` (≥ the current end); returns its end.
    pub(super) fn put(&mut self, at: Lsn, kind: u8, payload: &[u8]) -> Lsn {
        assert!(at >= self.end(), "records are put in LSN order");
        assert!(
            payload.len() <= RECORD_PAYLOAD_MAX,
            "the caller bounded the payload"
        );
        let rel = (at.get() - self.start.get()) as usize;
        assert!(
            rel + RECORD_HEADER_BYTES as usize + payload.len() <= self.buf.len(),
            "the caller made room for the record"
        );
        let bytes = self.buf.as_mut_slice();
        // Bytes skipped before a record (block tails) must read as zeros.
        bytes[self.used..rel].fill(0);
        let header = RecordHeader {
            payload_len: payload.len() as u32,
            payload_crc: crc32c::crc32c(payload),
            kind,
        };
        let h = RECORD_HEADER_BYTES as usize;
        bytes[rel..rel + h].copy_from_slice(&header.encode(at));
        bytes[rel + h..rel + h + payload.len()].copy_from_slice(payload);
        self.used = rel + h + payload.len();
        Lsn::new(at.get() + (h + payload.len()) as u64)
    }
}

/// How a flush failed.
pub(super) enum FlushError {
    /// Before any byte was written: the records are definitely not durable.
    NothingWritten(Error),
    /// During the write or sync: they may or may not be.
    MaybeWritten(Error),
}

pub(in crate::wal) struct Failure {
    /// The log could not get space for a segment; nothing of the failed flush
    /// was written.
    pub(super) disk_full: bool,
    pub(super) cause: String,
    /// Commits up to this LSN may or may not be durable.
    pub(super) unknown_until: Lsn,
}

/// The writer's phase. `Open → Flushing` when a committer leads a flush
/// ([`State::begin_flush`]); `Flushing → Open` when it succeeds, `Flushing →
/// Failed` when it does not ([`State::end_flush`]). `Failed` is final: every
/// later append and flush returns an error, and nothing is written again.
pub(super) enum Phase {
    /// No flush under way; the spare buffer is at hand.
    Open,
    /// One committer writes and syncs the previous fill buffer, without the
    /// lock; the spare buffer is the fill buffer meanwhile.
    Flushing,
    /// A flush failed (see [`Failure`]).
    Failed(Failure),
}

pub(in crate::wal) struct State {
    pub(super) fill: Buffer,
    pub(super) spare: Option<AlignedBuf>,
    pub(super) durable: Lsn,
    pub(super) phase: Phase,
    /// Flushes begun; while `Flushing`, the number of the one under way.
    pub(in crate::wal) generation: u64,
    /// While `Flushing`, the end of the log the flush under way covers.
    pub(super) flushing_to: Lsn,
    /// The last flush that completed held records, and no flush has begun
    /// since: nothing durable proves it complete yet.
    pub(in crate::wal) unsealed: bool,
    /// The sealer sleeps until a flush leaves the log unsealed.
    pub(in crate::wal) sealer_parked: bool,
    /// When the last flush ended (or the log opened): with no flush under
    /// way, the log has been idle since.
    pub(in crate::wal) idle_since: Instant,
}

impl State {
    /// An open writer whose next flush starts at `resume_at` (unit-aligned,
    /// at or past `durable`, the end of the log found).
    pub(super) fn new(fill: AlignedBuf, spare: AlignedBuf, resume_at: Lsn, durable: Lsn) -> Self {
        assert!(resume_at >= durable, "the next flush starts past the log");
        State {
            fill: Buffer {
                buf: fill,
                start: resume_at,
                used: 0,
            },
            spare: Some(spare),
            durable,
            phase: Phase::Open,
            generation: 0,
            flushing_to: durable,
            unsealed: false,
            sealer_parked: false,
            idle_since: Instant::now(),
        }
    }

    pub(in crate::wal) fn is_flushing(&self) -> bool {
        matches!(self.phase, Phase::Flushing)
    }

    pub(in crate::wal) fn failure(&self) -> Option<&Failure> {
        match &self.phase {
            Phase::Failed(f) => Some(f),
            Phase::Open | Phase::Flushing => None,
        }
    }

    /// `Open → Flushing`: the leader took the spare buffer and flushes the
    /// log up to `to`.
    pub(super) fn begin_flush(&mut self, to: Lsn) {
        assert!(
            matches!(self.phase, Phase::Open),
            "a flush starts only when open"
        );
        assert!(self.spare.is_none(), "the leader took the spare buffer");
        assert!(to >= self.durable, "a flush covers the durable log");
        self.phase = Phase::Flushing;
        self.generation += 1;
        self.flushing_to = to;
    }

    /// The flush a waiter for `lsn` sleeps until, while one is under way:
    /// that one if it covers `lsn`, else the next.
    pub(super) fn flush_needed(&self, lsn: Lsn) -> u64 {
        assert!(self.is_flushing(), "waiting for a flush under way");
        if lsn <= self.flushing_to {
            self.generation
        } else {
            self.generation + 1
        }
    }

    /// `Flushing → Open`, or `→ Failed` with `failure`; the written buffer is
    /// the spare again. `held_records`: the flush held caller records, so it
    /// is unsealed until the next one begins.
    pub(super) fn end_flush(
        &mut self,
        written: AlignedBuf,
        failure: Option<Failure>,
        held_records: bool,
    ) {
        assert!(self.is_flushing(), "only a flush under way ends");
        assert!(self.spare.is_none(), "one spare buffer");
        self.spare = Some(written);
        self.unsealed = held_records && failure.is_none();
        self.idle_since = Instant::now();
        self.phase = match failure {
            Some(f) => Phase::Failed(f),
            None => Phase::Open,
        };
    }
}
