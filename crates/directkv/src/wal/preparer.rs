//! The background thread that keeps spare segments prepared ahead of the
//! writer, so a commit that crosses into a new segment finds it ready.
//!
//! A panic in it is a bug: it stops the log (every later append and flush
//! is `Poisoned`, and the database that observes that stops too), never
//! leaves the log running without its preparer.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::writer::{lock, Shared};
use crate::io::Storage;

/// How long the preparer sleeps when it finds nothing to do.
const IDLE: Duration = Duration::from_millis(500);

/// Starts the preparer of `shared`'s log; `None` if the operating system
/// refuses the thread (the writer then prepares each segment when it needs
/// it).
pub(super) fn spawn<S: Storage>(shared: Arc<Shared<S>>) -> Option<JoinHandle<()>> {
    spawn_guarded(shared, "directkv-wal-prep", |shared| {
        // A failure (say, no space) is retried later; if the writer needs
        // the segment first, it prepares it itself and reports the error.
        if let Ok(true) = shared.segments.prepare_ahead() {
            return true;
        }
        shared.segments.wait_for_work(IDLE)
    })
}

/// Runs `round` on a thread named `name` until it returns false or the log
/// shuts down; a panic in it stops the log.
pub(super) fn spawn_guarded<S: Storage>(
    shared: Arc<Shared<S>>,
    name: &str,
    mut round: impl FnMut(&Shared<S>) -> bool + Send + 'static,
) -> Option<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            crate::stall::mark_background_thread();
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loop {
                if shared.shutdown.load(Ordering::Acquire) || !round(&shared) {
                    return;
                }
            }));
            if run.is_err() {
                shared.background_panicked.store(true, Ordering::Release);
                // Waiters look again and find the log stopped.
                let st = lock(&shared.state);
                shared.ends.mark_end();
                drop(st);
                shared.ends.wake_everyone();
            }
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::io::OsStorage;
    use crate::lsn::Lsn;
    use crate::wal::{Wal, WalOptions};

    #[test]
    fn a_panicking_log_thread_stops_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut opts = WalOptions::new(dir.path(), [3; 16]);
        opts.segment_bytes = 1 << 20;
        opts.background_prepare = false;
        let (wal, _) = Wal::open(OsStorage::default(), opts, Lsn::ZERO, |_| Ok(())).expect("open");
        let lsn = wal.append(20, b"before").expect("append");
        wal.flush(lsn).expect("flush");
        let mut rounds = 0;
        spawn_guarded(wal.shared_for_test(), "directkv-test", move |_| {
            rounds += 1;
            assert!(rounds < 3, "an invariant broke");
            true
        })
        .expect("the thread starts")
        .join()
        .expect("the panic is caught on the thread");
        for r in [
            wal.append(20, b"after").map(drop),
            wal.flush(Lsn::new(1 << 30)),
        ] {
            match r {
                Err(Error::Poisoned { cause, .. }) => assert!(cause.contains("panicked")),
                other => panic!("expected Poisoned, got {other:?}"),
            }
        }
    }
}
