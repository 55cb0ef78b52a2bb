//! The background thread that proves the log's last flush complete once the
//! log goes idle.
//!
//! A flush is written only after the one before it synced, so a valid flush
//! header proves every flush before it complete: damage found before one is
//! corruption, never a torn tail (`docs/wal_format.md`, "End of log"). The
//! last flush has no such witness. Under load the next commit's flush is
//! its witness within microseconds; when the log goes idle instead, this
//! thread writes a *seal*, a flush that holds no record, once the log has
//! been idle `seal_delay` since the last flush ended (counted in
//! [`WalStats::seals`]). It runs only over durable syncs: without them a
//! later flush proves nothing about an earlier one.
//!
//! States (under the writer's `state` lock):
//! - **Parked** (`sealer_parked`): the last flush is sealed or none has
//!   run; the thread sleeps until a flush that held records ends (the flush
//!   wakes it) or the log shuts down.
//! - **Watching**: a flush is under way; the thread looks again after
//!   `seal_delay` (at most one wake-up per delay under any load).
//! - **Timing**: an unsealed flush ended and none runs; the thread sleeps
//!   until `seal_delay` after its end and, if no flush began meanwhile
//!   (`idle_since` unchanged), leads the seal itself.
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

/// One round: park until a flush leaves the log unsealed; while a flush
/// runs, look again after `delay`; once the log has been idle `delay`
/// since the last flush ended, seal. False once the log shut down or
/// failed.
fn round<S: Storage>(sh: &Shared<S>, delay: Duration) -> bool {
    let mut st = lock(&sh.state);
    if stopped(sh, &st) {
        return false;
    }
    if st.is_flushing() {
        // The flush under way is the witness of the one before it, or
        // the last flush to seal once it ends.
        drop(wait(sh, st, Some(delay)));
        return true;
    }
    if !st.unsealed {
        st.sealer_parked = true;
        st = wait(sh, st, None);
        st.sealer_parked = false;
        return true;
    }
    // No flush under way and none began since the last ended (a later one
    // would have moved `idle_since`): idle since then.
    let now = Instant::now();
    let due = st.idle_since.checked_add(delay).unwrap_or(now);
    if now < due {
        drop(wait(sh, st, Some(due - now)));
        return true;
    }
    assert!(
        st.unsealed && !st.is_flushing(),
        "sealing an idle, unsealed log"
    );
    assert!(now >= st.idle_since, "the log went idle before now");
    let st = sh.lead_flush(st);
    // Counted once written, so a reader of the counters sees the seal's
    // flush with it.
    if st.failure().is_none() {
        sh.counters.seals.fetch_add(1, Ordering::Relaxed);
    }
    true
}

fn stopped<S: Storage>(sh: &Shared<S>, st: &State) -> bool {
    sh.shutdown.load(Ordering::Acquire)
        || sh.background_panicked.load(Ordering::Acquire)
        || st.failure().is_some()
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
    fn a_zero_or_endless_delay_is_refused() {
        for delay in [
            Duration::ZERO,
            crate::wal::writer::SEAL_DELAY_MAX * 2,
            Duration::MAX,
        ] {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut opts = WalOptions::new(dir.path(), [5; 16]);
            opts.seal_delay = Some(delay);
            match Wal::open(OsStorage::default(), opts, Lsn::ZERO, |_| Ok(())) {
                Err(crate::Error::InvalidArgument(m)) => assert!(m.contains("seal delay"), "{m}"),
                other => panic!("expected InvalidArgument, got {:?}", other.map(|_| ())),
            }
        }
    }

    /// Without durable syncs a seal would prove nothing: no thread writes
    /// one (close still does, for a log that is read back in this boot).
    #[test]
    fn no_background_seal_without_durable_syncs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut opts = WalOptions::new(dir.path(), [5; 16]);
        opts.segment_bytes = 1 << 20;
        opts.seal_delay = Some(Duration::from_millis(1));
        opts.sync = crate::io::SyncVariant {
            method: crate::io::SyncMethod::None,
            direct: false,
        };
        let wal = Wal::open(OsStorage::default(), opts, Lsn::ZERO, |_| Ok(()))
            .expect("open")
            .0;
        let lsn = wal.append(20, b"not durable").expect("append");
        wal.flush(lsn).expect("flush");
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!((wal.stats().seals, wal.stats().sealed), (0, false));
        wal.close().expect("close");
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
