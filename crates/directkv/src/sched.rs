//! The I/O scheduler: every disk request of the engine asks it for a permit,
//! tagged with its class (DESIGN.md invariant 9), and holds the permit while
//! the request runs.
//!
//! Classes, highest first: [`IoClass::Wal`] (a committer waits),
//! [`IoClass::Read`] (a reader waits), [`IoClass::Urgent`] (flushing a
//! foreground wait depends on), [`IoClass::Background`] (the cleaner and
//! checkpoints). The policy is the one database operators ask of a system:
//! logs and reads are never starved, so the first three are admitted at once;
//! background writing is capped by bytes in flight and by a rate, and goes
//! one request at a time while foreground requests are in flight, except that
//! it always gets a minimum share of the requests so it drains. The caps rise with the
//! pressure the engine reports (WAL distance from the redo point, shortage of
//! clean frames); at full pressure background writing runs uncapped. A
//! backup's copy is lower still: one request at a time; while the
//! foreground is busy (a request of the first three classes in flight or
//! admitted in the last [`BUSY_WINDOW`]) it gets a share of the device's
//! time (`SchedOptions::backup_busy_share`: after a request that took `t`,
//! the next waits `t·(1/share − 1)`), and on an idle device it runs back to
//! back. Pressure never lifts that.
//!
//! In [`SchedMode::Fifo`] every request is admitted at once, in arrival
//! order, and background checkpoints are not paced: the behaviour without a
//! scheduler, for comparison.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

pub(crate) mod crc_files;
mod file;

pub use file::{Admitted, ScheduledFile};

/// What a disk request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum IoClass {
    /// A WAL write or sync a committer waits for.
    Wal = 0,
    /// A page read a reader (or a writer's read) waits for.
    Read = 1,
    /// A page write a foreground wait depends on (an eviction, an explicit
    /// checkpoint or close).
    Urgent = 2,
    /// The page cleaner's and background checkpoints' writes.
    Background = 3,
    /// An online backup's reads and writes: the lowest class.
    Backup = 4,
}

const CLASSES: usize = 5;

/// The foreground counts as busy this long after its last request was
/// admitted (a committer between two syncs is still busy).
pub const BUSY_WINDOW: Duration = Duration::from_millis(20);
/// A Backup request's bytes on an idle device
/// ([`Scheduler::backup_request_bytes`]).
pub const BACKUP_IDLE_BYTES: u64 = 1 << 20;
/// A Backup request's bytes while the foreground is busy.
pub const BACKUP_BUSY_BYTES: u64 = 256 << 10;
const _: () = assert!(BACKUP_BUSY_BYTES <= BACKUP_IDLE_BYTES && BACKUP_BUSY_BYTES % 4096 == 0);

/// Whether the scheduler applies its policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum SchedMode {
    /// Classes, priorities, caps and pacing (the default).
    #[default]
    Classes,
    /// Admit every request at once, in arrival order, and write background
    /// checkpoints at full speed (no classes, no pacing).
    Fifo,
}

/// The scheduler's knobs. The defaults work on an ordinary SSD or virtual
/// disk without tuning.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SchedOptions {
    /// Policy or plain FIFO.
    pub mode: SchedMode,
    /// The share of requests Background gets even while foreground requests
    /// keep the device busy.
    pub background_min_share: f64,
    /// Background bytes in flight at no pressure ("write N MiB, wait for it
    /// to complete"); the cap grows to 4x at full pressure.
    pub background_inflight_bytes: u64,
    /// Background bytes per second at no pressure; grows to 8x with pressure
    /// and is lifted at full pressure.
    pub background_rate_bytes: u64,
    /// The share of the device's time a backup gets while the foreground is
    /// busy (0 to 1; on an idle device a backup runs back to back).
    pub backup_busy_share: f64,
}

impl Default for SchedOptions {
    fn default() -> Self {
        SchedOptions {
            mode: SchedMode::Classes,
            background_min_share: 0.1,
            background_inflight_bytes: 256 << 10,
            background_rate_bytes: 32 << 20,
            backup_busy_share: 0.1,
        }
    }
}

/// Requests per class and how Background was held back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SchedStats {
    /// Permits admitted, by class (Wal, Read, Urgent, Background, Backup);
    /// one permit may cover several requests ([`requests`](Self::requests)).
    pub admitted: [u64; CLASSES],
    /// Bytes admitted, by class.
    pub bytes: [u64; CLASSES],
    /// Calls made to files under the permits (reads, writes, syncs,
    /// allocations; each request of a batch), by class: one permit may
    /// cover several, as a flush's writes and its sync.
    pub requests: [u64; CLASSES],
    /// Background and Backup requests that waited for foreground requests,
    /// the caps or the rate (a background wait, never a foreground stall).
    pub background_waits: u64,
    /// The pressure last reported, in thousandths.
    pub pressure_milli: u64,
}

struct State {
    inflight: [u64; CLASSES],
    inflight_bytes: [u64; CLASSES],
    /// Background's admissions and everyone's, over a sliding window.
    window_background: u64,
    window_total: u64,
    tokens: f64,
    refilled: Instant,
    /// When a foreground request was last admitted.
    foreground_seen: Instant,
    /// While the foreground is busy, no Backup request starts before this.
    backup_free_at: Instant,
}

/// The scheduler. Cheap to share (`Arc`).
pub struct Scheduler {
    opts: SchedOptions,
    state: Mutex<State>,
    wake: Condvar,
    pressure_milli: AtomicU64,
    admitted: [AtomicU64; CLASSES],
    bytes: [AtomicU64; CLASSES],
    requests: [AtomicU64; CLASSES],
    background_waits: AtomicU64,
}

/// Admissions over which the minimum share is measured.
const SHARE_WINDOW: u64 = 256;

impl Scheduler {
    /// A scheduler with `opts`.
    pub fn new(opts: SchedOptions) -> Scheduler {
        Scheduler {
            opts,
            state: Mutex::new(State {
                inflight: [0; CLASSES],
                inflight_bytes: [0; CLASSES],
                window_background: 0,
                window_total: 0,
                tokens: opts.background_rate_bytes as f64 / 10.0,
                refilled: Instant::now(),
                foreground_seen: Instant::now()
                    .checked_sub(BUSY_WINDOW)
                    .unwrap_or_else(Instant::now),
                backup_free_at: Instant::now(),
            }),
            wake: Condvar::new(),
            pressure_milli: AtomicU64::new(0),
            admitted: Default::default(),
            bytes: Default::default(),
            requests: Default::default(),
            background_waits: AtomicU64::new(0),
        }
    }

    /// A scheduler that admits every request at once, in arrival order
    /// ([`SchedMode::Fifo`]), for files no database schedules (tools that
    /// read a log or a backup offline, tests of one layer): their requests
    /// still pass a scheduler and are counted.
    pub fn fifo() -> std::sync::Arc<Scheduler> {
        std::sync::Arc::new(Scheduler::new(SchedOptions {
            mode: SchedMode::Fifo,
            ..SchedOptions::default()
        }))
    }

    /// The options in effect.
    pub fn options(&self) -> SchedOptions {
        self.opts
    }

    /// Reports how urgently background writing must progress, 0 (none) to
    /// 1 (now: caps lifted).
    pub fn set_pressure(&self, pressure: f64) {
        // The engine computes pressure as a share already bounded to 0..=1;
        // anything else (NaN included) is a bug in that computation.
        assert!(
            (0.0..=1.0).contains(&pressure),
            "pressure {pressure} outside 0..=1"
        );
        let milli = (pressure * 1000.0) as u64;
        assert!(milli <= 1000);
        if self.pressure_milli.swap(milli, Ordering::Relaxed) < milli {
            self.wake.notify_all();
        }
    }

    fn pressure(&self) -> f64 {
        let milli = self.pressure_milli.load(Ordering::Relaxed);
        assert!(
            milli <= 1000,
            "pressure is stored within 0..=1000 thousandths"
        );
        milli as f64 / 1000.0
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // See crate::error::lock_even_poisoned: a poisoned lock here means the database has
        // failed already.
        crate::error::lock_even_poisoned(&self.state)
    }

    /// The bytes a batch of `class` should carry at once: Background's
    /// in-flight cap at the present pressure; four times the base cap for
    /// the other classes.
    pub fn batch_bytes(&self, class: IoClass) -> u64 {
        let base = self.opts.background_inflight_bytes;
        match class {
            IoClass::Background => (base as f64 * (1.0 + 3.0 * self.pressure())) as u64,
            _ => base.saturating_mul(4),
        }
    }

    /// The most bytes a Backup request should move now: [`BACKUP_IDLE_BYTES`]
    /// on an idle device, where large requests run at the disk's sequential
    /// speed; [`BACKUP_BUSY_BYTES`] while the foreground is busy, so a
    /// foreground request that arrives behind one waits for less (the
    /// share of device time the class gets is the same either way).
    pub fn backup_request_bytes(&self) -> u64 {
        let busy = self.opts.mode == SchedMode::Classes
            && Self::foreground_busy(&self.lock(), Instant::now());
        match busy {
            true => BACKUP_BUSY_BYTES,
            false => BACKUP_IDLE_BYTES,
        }
    }

    /// Waits until a request of `class` moving `bytes` may run, and returns
    /// the permit it holds while it runs.
    pub fn admit(&self, class: IoClass, bytes: u64) -> Permit<'_> {
        let c = class as usize;
        let mut st = self.lock();
        let held_back = matches!(class, IoClass::Background | IoClass::Backup);
        if held_back && self.opts.mode == SchedMode::Classes {
            let mut waited = false;
            loop {
                let (ok, retry_in) = if class == IoClass::Backup {
                    Self::backup_may_run(&st, Instant::now())
                } else {
                    self.background_may_run(&mut st, bytes)
                };
                if ok {
                    break;
                }
                waited = true;
                st = self
                    .wake
                    .wait_timeout(st, retry_in)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            if waited {
                self.background_waits.fetch_add(1, Ordering::Relaxed);
            }
        }
        st.inflight[c] += 1;
        st.inflight_bytes[c] += bytes;
        let since = if (class as usize) < IoClass::Background as usize {
            st.foreground_seen = Instant::now();
            st.foreground_seen
        } else if class == IoClass::Backup {
            Instant::now()
        } else {
            st.refilled
        };
        assert!(st.window_background <= st.window_total);
        if st.window_total >= SHARE_WINDOW {
            // Halve the window: the share follows recent traffic.
            st.window_total /= 2;
            st.window_background /= 2;
        }
        st.window_total += 1;
        if class == IoClass::Background {
            st.window_background += 1;
        }
        assert!(st.window_total <= SHARE_WINDOW && st.window_background <= st.window_total);
        drop(st);
        self.admitted[c].fetch_add(1, Ordering::Relaxed);
        self.bytes[c].fetch_add(bytes, Ordering::Relaxed);
        Permit {
            sched: self,
            class,
            bytes,
            since,
        }
    }

    /// Whether a Background request of `bytes` may start now; if not, how
    /// long until it is worth asking again.
    fn background_may_run(&self, st: &mut State, bytes: u64) -> (bool, Duration) {
        let p = self.pressure();
        assert!((0.0..=1.0).contains(&p));
        let bg = IoClass::Background as usize;
        // The in-flight cap: at least one request always fits.
        let cap = (self.opts.background_inflight_bytes as f64 * (1.0 + 3.0 * p)) as u64;
        if st.inflight[bg] > 0 && st.inflight_bytes[bg] + bytes > cap {
            return (false, Duration::from_millis(5));
        }
        // The rate, lifted at full pressure.
        if p < 1.0 {
            let rate = self.opts.background_rate_bytes as f64 * (1.0 + 7.0 * p);
            let now = Instant::now();
            let dt = now.duration_since(st.refilled).as_secs_f64();
            st.refilled = now;
            // At most a tenth of a second of tokens accumulates.
            // (Or one request's worth, so a request larger than that passes.)
            st.tokens = (st.tokens + dt * rate).min((rate / 10.0).max(bytes as f64));
            if st.tokens < bytes as f64 {
                let need = (bytes as f64 - st.tokens) / rate;
                return (false, Duration::from_secs_f64(need.clamp(0.0005, 0.05)));
            }
        }
        // Foreground first: while foreground requests are in flight,
        // Background goes one request at a time, unless it has fallen below
        // its minimum share.
        let foreground: u64 = st.inflight[..bg].iter().sum();
        let starved =
            (st.window_background as f64) < self.opts.background_min_share * st.window_total as f64;
        if foreground > 0 && st.inflight[bg] > 0 && !starved && p < 1.0 {
            return (false, Duration::from_millis(2));
        }
        if p < 1.0 {
            st.tokens -= bytes as f64;
            assert!(st.tokens >= 0.0, "a request runs only on tokens it has");
        }
        (true, Duration::ZERO)
    }

    /// Whether a Backup request may start at `now`; if not, how long until
    /// it is worth asking again (see the module docs).
    fn backup_may_run(st: &State, now: Instant) -> (bool, Duration) {
        if st.inflight[IoClass::Backup as usize] > 0 {
            return (false, Duration::from_millis(1));
        }
        if Self::foreground_busy(st, now) && now < st.backup_free_at {
            return (
                false,
                (st.backup_free_at - now).min(Duration::from_millis(50)),
            );
        }
        (true, Duration::ZERO)
    }

    /// Whether a foreground request is in flight or was admitted within
    /// [`BUSY_WINDOW`] of `now`.
    fn foreground_busy(st: &State, now: Instant) -> bool {
        let inflight: u64 = st.inflight[..IoClass::Background as usize].iter().sum();
        inflight > 0 || now.saturating_duration_since(st.foreground_seen) < BUSY_WINDOW
    }

    fn release(&self, class: IoClass, bytes: u64, since: Instant) {
        let c = class as usize;
        let mut st = self.lock();
        // Every permit was counted in by `admit`: an underflow is a permit
        // released twice or released by the wrong class.
        assert!(
            st.inflight[c] > 0,
            "{class:?} permit released with none in flight"
        );
        assert!(
            st.inflight_bytes[c] >= bytes,
            "{class:?} releases more bytes than admitted"
        );
        st.inflight[c] -= 1;
        st.inflight_bytes[c] -= bytes;
        if class == IoClass::Backup && self.opts.mode == SchedMode::Classes {
            // The device time this request took buys the foreground its
            // share before the next one.
            let now = Instant::now();
            let share = self.opts.backup_busy_share.clamp(0.01, 1.0);
            let rest = now
                .saturating_duration_since(since)
                .mul_f64(1.0 / share - 1.0);
            st.backup_free_at = now + rest;
        }
        assert!(
            st.inflight[c] > 0 || st.inflight_bytes[c] == 0,
            "bytes left with no request"
        );
        let idle_foreground = st.inflight[..IoClass::Background as usize]
            .iter()
            .all(|&n| n == 0);
        drop(st);
        if matches!(class, IoClass::Background | IoClass::Backup) || idle_foreground {
            self.wake.notify_all();
        }
    }

    /// Counters since creation.
    pub fn stats(&self) -> SchedStats {
        SchedStats {
            admitted: std::array::from_fn(|i| self.admitted[i].load(Ordering::Relaxed)),
            bytes: std::array::from_fn(|i| self.bytes[i].load(Ordering::Relaxed)),
            requests: std::array::from_fn(|i| self.requests[i].load(Ordering::Relaxed)),
            background_waits: self.background_waits.load(Ordering::Relaxed),
            pressure_milli: self.pressure_milli.load(Ordering::Relaxed),
        }
    }
}

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler::new(SchedOptions::default())
    }
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("opts", &self.opts)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Held while a request runs; dropping it lets the next one in.
#[must_use = "the permit must be held while the request runs"]
pub struct Permit<'a> {
    sched: &'a Scheduler,
    class: IoClass,
    bytes: u64,
    /// When it was admitted (Backup and the foreground classes).
    since: Instant,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.sched.release(self.class, self.bytes, self.since);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// Foreground threads keep reads in flight without pause while
    /// background threads flood writes; counts, not times, are checked.
    fn flood(opts: SchedOptions, pressure: f64) -> SchedStats {
        let s = Arc::new(Scheduler::new(opts));
        s.set_pressure(pressure);
        let stop = Arc::new(AtomicBool::new(false));
        // Every thread starts at once: a class whose threads a loaded
        // machine started late would show a smaller share for it.
        let start = Arc::new(std::sync::Barrier::new(6 + 3 + 1));
        let mut handles = Vec::new();
        for _ in 0..6 {
            let (s, stop, start) = (Arc::clone(&s), Arc::clone(&stop), Arc::clone(&start));
            handles.push(std::thread::spawn(move || {
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    let _p = s.admit(IoClass::Read, 8192);
                    std::thread::sleep(Duration::from_micros(200));
                }
            }));
        }
        for _ in 0..3 {
            let (s, stop, start) = (Arc::clone(&s), Arc::clone(&stop), Arc::clone(&start));
            handles.push(std::thread::spawn(move || {
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    let _p = s.admit(IoClass::Background, 8192);
                    std::thread::sleep(Duration::from_micros(200));
                }
            }));
        }
        start.wait();
        // Run until enough foreground requests went through.
        while s.stats().admitted[IoClass::Read as usize] < 3000 {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().expect("thread");
        }
        s.stats()
    }

    fn share(st: &SchedStats) -> f64 {
        let bg = st.admitted[IoClass::Background as usize] as f64;
        bg / (bg + st.admitted[IoClass::Read as usize] as f64)
    }

    #[test]
    fn reads_come_first_and_background_keeps_its_minimum_share() {
        let opts = SchedOptions {
            // No rate limit in the way: priority and share alone.
            background_rate_bytes: u64::MAX / 16,
            ..SchedOptions::default()
        };
        let st = flood(opts, 0.0);
        let s = share(&st);
        // Reads were in flight nearly always, so Background went one request
        // at a time beside six readers: about a seventh, never starved below
        // its minimum, never as much as its three threads would take alone.
        assert!(s >= 0.05, "background share {s:.3} fell below its minimum");
        assert!(
            s <= 0.25,
            "background share {s:.3}: reads did not come first"
        );
        assert!(st.background_waits > 0);
    }

    #[test]
    fn fifo_mode_admits_everyone_alike() {
        let opts = SchedOptions {
            mode: SchedMode::Fifo,
            ..SchedOptions::default()
        };
        let st = flood(opts, 0.0);
        let s = share(&st);
        // Three writer threads beside six readers: a third.
        assert!(s > 0.25, "FIFO gave background only {s:.3}");
        assert_eq!(st.background_waits, 0);
    }

    #[test]
    fn full_pressure_lifts_the_caps() {
        let opts = SchedOptions {
            background_rate_bytes: 1,
            ..SchedOptions::default()
        };
        let st = flood(opts, 1.0);
        let s = share(&st);
        assert!(s > 0.25, "at full pressure background got only {s:.3}");
        assert_eq!(st.background_waits, 0, "no cap held background back");
    }

    #[test]
    fn the_rate_caps_background_bytes() {
        // 8 KiB requests at 800 KiB/s: about a hundred a second, whatever
        // the foreground does. Counted against the foreground's own count.
        let opts = SchedOptions {
            background_rate_bytes: 800 << 10,
            background_min_share: 1.0,
            ..SchedOptions::default()
        };
        let st = flood(opts, 0.0);
        let s = share(&st);
        assert!(s < 0.2, "rate-capped background got {s:.3}");
    }

    #[test]
    fn wal_reads_and_urgent_never_wait() {
        let s = Scheduler::new(SchedOptions {
            background_inflight_bytes: 1,
            background_rate_bytes: 1,
            ..SchedOptions::default()
        });
        s.set_pressure(1.0);
        let _bg = s.admit(IoClass::Background, 8192);
        s.set_pressure(0.0);
        // With Background over every cap, the others still go through.
        let _w = s.admit(IoClass::Wal, 4096);
        let _r = s.admit(IoClass::Read, 8192);
        let _u = s.admit(IoClass::Urgent, 8192);
        let st = s.stats();
        assert_eq!(st.admitted, [1, 1, 1, 1, 0]);
    }

    /// Foreground reads keep the device busy while two backup threads ask
    /// for permits: backups run one at a time, and after a backup request
    /// held for `t` the next starts no sooner than `t·(1/share − 1)` later
    /// (a lower bound, which a slow machine only widens). On an idle
    /// device backups never wait.
    #[test]
    fn backup_gets_its_share_of_a_busy_device_and_all_of_an_idle_one() {
        let idle = Scheduler::new(SchedOptions::default());
        for _ in 0..3 {
            drop(idle.admit(IoClass::Backup, 1 << 20));
        }
        assert_eq!(idle.stats().background_waits, 0, "an idle device");

        let s = Arc::new(Scheduler::new(SchedOptions::default()));
        let share = s.options().backup_busy_share;
        let stop = Arc::new(AtomicBool::new(false));
        let mut readers = Vec::new();
        for _ in 0..4 {
            let (s, stop) = (Arc::clone(&s), Arc::clone(&stop));
            readers.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _p = s.admit(IoClass::Read, 4096);
                    std::thread::sleep(Duration::from_micros(300));
                }
            }));
        }
        // The device is busy before the first backup request: the readers
        // run (and from then on hold a permit nearly always).
        while s.stats().admitted[IoClass::Read as usize] < 4 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let inside = Arc::new(AtomicU64::new(0));
        let last_release = Arc::new(Mutex::new(None::<(Instant, Duration)>));
        let backups: Vec<_> = (0..2)
            .map(|_| {
                let (s, inside, last) = (
                    Arc::clone(&s),
                    Arc::clone(&inside),
                    Arc::clone(&last_release),
                );
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        let p = s.admit(IoClass::Backup, 1 << 20);
                        let admitted = Instant::now();
                        if let Some((released, held)) = *last.lock().expect("lock") {
                            let gap = admitted.duration_since(released);
                            assert!(
                                gap >= held.mul_f64(1.0 / share - 1.0),
                                "a backup request {gap:?} after one held {held:?}"
                            );
                        }
                        assert_eq!(inside.fetch_add(1, Ordering::AcqRel), 0, "one at a time");
                        std::thread::sleep(Duration::from_millis(2));
                        inside.fetch_sub(1, Ordering::AcqRel);
                        let mut l = last.lock().expect("lock");
                        *l = Some((Instant::now(), admitted.elapsed()));
                        drop(p);
                        drop(l);
                    }
                })
            })
            .collect();
        for b in backups {
            b.join().expect("backup thread");
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().expect("reader");
        }
        assert_eq!(s.stats().admitted[IoClass::Backup as usize], 20);
    }
}
