//! What the PostgreSQL peer watches of its server while pgbench runs: the
//! server's processes (found by parent pid), their proportional memory and
//! their CPU and I/O counters.

use std::collections::HashMap;
use std::fs;

use super::super::sys::{Cpu, IoCounters};
use super::SERVER_PROCESSES_MAX;

/// The parent pid of `pid`, from `/proc/<pid>/stat` (after the command's
/// closing parenthesis: state, then ppid).
pub(super) fn parent_pid(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// The proportional set size of `pid` (shared memory counted once over the
/// processes sharing it), bytes; 0 when it has exited.
pub(super) fn pss_bytes(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

/// One server process's counters, as sampled.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ProcCounters {
    pub(super) io: IoCounters,
    pub(super) cpu: Cpu,
}

pub(super) fn proc_counters(pid: u32) -> Option<ProcCounters> {
    Some(ProcCounters {
        io: IoCounters::of_process(pid)?,
        cpu: Cpu::of_process(pid)?,
    })
}

/// The server's processes over a run, sampled every [`SAMPLE_INTERVAL`](super::SAMPLE_INTERVAL) and
/// once after it: their memory (summed PSS) now and at its peak, and their
/// I/O and CPU since the run started.
///
/// - The kernel adds a process's I/O counters to its parent's when the
///   parent reaps it, so the postmaster's `/proc/<pid>/io` holds every
///   backend that has ended; only processes alive at the last sample are
///   summed besides (counting a reaped one too would count it twice).
/// - CPU (`utime`, `stime`) is each process's own: a backend that ended
///   between two samples loses what it used after the last one (at most
///   one interval's worth).
#[derive(Default)]
pub(super) struct ServerWatch {
    /// Each process's counters when first seen: at the start for those
    /// running then, zero for those started during the run.
    pub(super) first: HashMap<u32, ProcCounters>,
    /// The counters of the processes alive at the last sample.
    pub(super) last: HashMap<u32, ProcCounters>,
    /// CPU of processes seen before but not alive at the last sample.
    pub(super) cpu_ended: Cpu,
    pub(super) pss_peak_bytes: u64,
    pub(super) pss_end_bytes: u64,
}

impl ServerWatch {
    pub(super) fn start(pids: &[u32]) -> ServerWatch {
        let mut watch = ServerWatch::default();
        for &pid in pids {
            if let Some(c) = proc_counters(pid) {
                watch.first.insert(pid, c);
            }
        }
        watch
    }

    pub(super) fn sample(&mut self, pids: &[u32]) {
        assert!(pids.len() <= SERVER_PROCESSES_MAX);
        let mut pss = 0;
        let mut last = HashMap::with_capacity(pids.len());
        for &pid in pids {
            let Some(c) = proc_counters(pid) else {
                continue;
            };
            self.first.entry(pid).or_default();
            last.insert(pid, c);
            pss += pss_bytes(pid);
        }
        for (pid, gone) in &self.last {
            if !last.contains_key(pid) {
                let first = self.first.get(pid).copied().unwrap_or_default();
                self.cpu_ended = self.cpu_ended.plus(gone.cpu.since(first.cpu));
            }
        }
        self.last = last;
        self.pss_end_bytes = pss;
        self.pss_peak_bytes = self.pss_peak_bytes.max(pss);
    }

    /// I/O and CPU of every process seen, since the start.
    pub(super) fn totals(&self) -> (IoCounters, Cpu) {
        let zero = (IoCounters::default(), self.cpu_ended);
        self.last.iter().fold(zero, |(io, cpu), (pid, last)| {
            let first = self.first.get(pid).copied().unwrap_or_default();
            (
                io.plus(last.io.since(first.io)),
                cpu.plus(last.cpu.since(first.cpu)),
            )
        })
    }
}
