//! The background thread that proves the log's last flush complete once the
//! log goes idle.
//!
//! A flush is written only after the one before it synced, so a valid flush
//! header proves every flush before it complete: damage found before one is
//! corruption, never a torn tail (`docs/wal_format.md`, "End of log"). The
//! last flush has no such witness. Under load the next commit's flush is
//! its witness within microseconds; when the log goes idle instead, this
//! thread writes a *seal*, a flush that holds no record, `seal_delay` after
//! the last flush began (counted in [`WalStats::seals`]).
//!
//! States (under the writer's `state` lock):
//! - **Parked** (`sealer_parked`): the last flush is sealed or none has
//!   run; the thread sleeps until a flush that held records ends (the flush
//!   wakes it) or the log shuts down.
//! - **Timing**: an unsealed flush ended; the thread sleeps `seal_delay`
//!   and, if no flush began meanwhile, leads the seal itself.
//!
//! A failed seal fails the log like any flush (the records it carried, if
//! an appender's flush had not run yet, have an unknown outcome). A panic
//! stops the log (see [`super::preparer`]).
//!
//! [`WalStats::seals`]: super::WalStats::seals

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::preparer::spawn_guarded;
use super::writer::{lock, Shared, State};
use crate::io::Storage;

/// Starts the sealer of `shared`'s log; `None` if the operating system
/// refuses the thread (the log is then sealed only on close and drop).
pub(super) fn spawn<S: Storage>(shared: Arc<Shared<S>>) -> Option<JoinHandle<()>> {
    let delay = shared.seal_delay.expect("the sealer runs with a delay");
    assert!(
        delay > Duration::ZERO,
        "a seal waits for the log to go idle"
    );
    spawn_guarded(shared, "directkv-wal-seal", move |shared| {
        round(shared, delay)
    })
}

/// One round: park until a flush leaves the log unsealed, or time the pause
/// after it and seal. False once the log shut down or failed.
fn round<S: Storage>(sh: &Shared<S>, delay: Duration) -> bool {
    let mut st = lock(&sh.state);
    if stopped(sh, &st) {
        return false;
    }
    if !st.unsealed {
        st.sealer_parked = true;
        st = wait(sh, st, None);
        st.sealer_parked = false;
        return true;
    }
    let seen = st.generation;
    let deadline = Instant::now() + delay;
    // Sleeps out the whole delay: a spurious wake-up must not seal early.
    while !stopped(sh, &st) && st.generation == seen {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        if left.is_zero() {
            break;
        }
        st = wait(sh, st, Some(left));
    }
    if stopped(sh, &st) || st.generation != seen || st.is_flushing() || !st.unsealed {
        // A flush began meanwhile: it is the witness (or will be sealed).
        return true;
    }
    assert!(
        st.unsealed && !st.is_flushing(),
        "sealing an idle, unsealed log"
    );
    let st = sh.lead_flush(st);
    // Counted once written, so a reader of the counters sees the seal's
    // flush with it.
    if st.failure().is_none() {
        sh.counters.seals.fetch_add(1, Ordering::Relaxed);
    }
    true
}

fn stopped<S: Storage>(sh: &Shared<S>, st: &State) -> bool {
    sh.shutdown.load(Ordering::Acquire) || st.failure().is_some()
}

/// Sleeps on the sealer's condition variable, `for_at_most` or until woken.
fn wait<'a, S: Storage>(
    sh: &'a Shared<S>,
    st: MutexGuard<'a, State>,
    for_at_most: Option<Duration>,
) -> MutexGuard<'a, State> {
    match for_at_most {
        None => sh.sealer.wait(st).unwrap_or_else(|e| e.into_inner()),
        Some(d) => {
            sh.sealer
                .wait_timeout(st, d)
                .unwrap_or_else(|e| e.into_inner())
                .0
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::io::OsStorage;
    use crate::lsn::Lsn;
    use crate::wal::{Wal, WalOptions};

    fn open(dir: &std::path::Path, seal_delay: Option<Duration>) -> Wal<OsStorage> {
        let mut opts = WalOptions::new(dir, [5; 16]);
        opts.segment_bytes = 1 << 20;
        opts.seal_delay = seal_delay;
        Wal::open(OsStorage::default(), opts, Lsn::ZERO, |_| Ok(()))
            .expect("open")
            .0
    }

    /// Polls `wal`'s seal count until it reaches `n` (the thread's delay is
    /// a millisecond; the cap only bounds a failing run).
    fn seals_reach(wal: &Wal<OsStorage>, n: u64) -> bool {
        let cap = Instant::now() + Duration::from_secs(30);
        while Instant::now() < cap {
            if wal.stats().seals >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    #[test]
    fn an_idle_log_seals_its_last_flush_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = open(dir.path(), Some(Duration::from_millis(1)));
        let lsn = wal.append(20, b"acknowledged").expect("append");
        wal.flush(lsn).expect("flush");
        assert!(seals_reach(&wal, 1), "{:?}", wal.stats());
        let flushes = wal.stats().flushes;
        assert_eq!(flushes, 2, "the commit's flush and its seal");
        // A sealed log stays as it is: the seal held no record, so nothing
        // is left to prove.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(wal.stats().flushes, flushes, "{:?}", wal.stats());
        assert_eq!(wal.stats().seals, 1);
        // The next commit is sealed again.
        let lsn = wal.append(20, b"again").expect("append");
        wal.flush(lsn).expect("flush");
        assert!(seals_reach(&wal, 2), "{:?}", wal.stats());
        wal.close().expect("close");
    }

    #[test]
    fn a_zero_delay_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut opts = WalOptions::new(dir.path(), [5; 16]);
        opts.seal_delay = Some(Duration::ZERO);
        match Wal::open(OsStorage::default(), opts, Lsn::ZERO, |_| Ok(())) {
            Err(crate::Error::InvalidArgument(m)) => assert!(m.contains("seal delay"), "{m}"),
            other => panic!("expected InvalidArgument, got {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn without_the_thread_seal_and_close_prove_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal = open(dir.path(), None);
        wal.seal().expect("nothing to seal");
        assert_eq!(wal.stats().flushes, 0, "an empty log needs no seal");
        let lsn = wal.append(20, b"acknowledged").expect("append");
        wal.flush(lsn).expect("flush");
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(wal.stats().seals, 0, "no thread seals it");
        wal.seal().expect("seal");
        assert_eq!((wal.stats().flushes, wal.stats().seals), (2, 1));
        wal.seal().expect("sealed already");
        assert_eq!(wal.stats().flushes, 2, "a sealed log is not sealed again");
        // Appended but not flushed: sealing flushes it, then seals that.
        wal.append(20, b"pending").expect("append");
        wal.seal().expect("seal");
        assert_eq!((wal.stats().flushes, wal.stats().seals), (4, 2));
        wal.close().expect("close");
    }
}
