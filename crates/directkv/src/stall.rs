//! Foreground stalls (DESIGN.md invariant 9): every wait of a foreground
//! thread longer than a millisecond is counted under its cause, in a
//! histogram of powers of two. Every foreground wait, short or long, is also
//! summed under its cause, so the time an operation spends waiting can be
//! split by cause (a cache-miss read, the writer lock, the WAL sync) and set
//! against its whole latency. Threads of the engine's own (checkpointer,
//! cleaner, readahead) mark themselves, and their waits are neither.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

/// Waits up to this long are not stalls.
pub const STALL_THRESHOLD: Duration = Duration::from_millis(1);

/// Histogram buckets: up to 2, 4, 8, … 2048 ms, then longer.
pub const BUCKETS: usize = 12;

thread_local! {
    static BACKGROUND: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as one of the engine's background threads.
pub(crate) fn mark_background_thread() {
    BACKGROUND.with(|b| b.set(true));
}

/// Whether the calling thread is one of the engine's background threads.
pub(crate) fn on_background_thread() -> bool {
    BACKGROUND.with(Cell::get)
}

/// Counts the stalls of one cause.
#[derive(Debug, Default)]
pub(crate) struct StallCounter {
    buckets: [AtomicU64; BUCKETS],
    total_us: AtomicU64,
    max_us: AtomicU64,
    waits: AtomicU64,
    waited_ns: AtomicU64,
}

impl StallCounter {
    /// Sums `waited` if it is a foreground wait, and counts it as a stall if
    /// it is over the threshold.
    pub fn record(&self, waited: Duration) {
        if on_background_thread() {
            return;
        }
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.waited_ns.fetch_add(ns, Ordering::Relaxed);
        if waited <= STALL_THRESHOLD {
            return;
        }
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        // Bucket i holds waits up to 2^(i+1) ms.
        let ms = us.div_ceil(1000).max(1);
        let i = (64 - (ms - 1).leading_zeros()).saturating_sub(1) as usize;
        let i = i.min(BUCKETS - 1);
        assert!(
            StallHistogram::bucket_upper_ms(i).is_none_or(|upper| ms <= upper),
            "{ms} ms over bucket {i}"
        );
        assert!(i == 0 || ms > 1 << i, "{ms} ms belongs below bucket {i}");
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.total_us.fetch_add(us, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> StallHistogram {
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        assert_eq!(buckets.len(), BUCKETS);
        let histogram = StallHistogram {
            count: buckets.iter().sum(),
            total_us: self.total_us.load(Ordering::Relaxed),
            max_us: self.max_us.load(Ordering::Relaxed),
            buckets,
            waits: self.waits.load(Ordering::Relaxed),
            waited_us: self.waited_ns.load(Ordering::Relaxed) / 1000,
        };
        debug_assert_eq!(histogram.count, histogram.buckets.iter().sum::<u64>());
        histogram
    }
}

/// The stalls of one cause.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StallHistogram {
    /// Stalls counted.
    pub count: u64,
    /// Their total length in microseconds.
    pub total_us: u64,
    /// The longest, in microseconds.
    pub max_us: u64,
    /// Counts by length: up to 2 ms, 4 ms, 8 ms, … 2048 ms, then longer.
    pub buckets: Vec<u64>,
    /// Every foreground wait of this cause, stalls or not.
    pub waits: u64,
    /// Their total length in microseconds: divided by the operations done,
    /// how long an operation waited for this cause on average.
    pub waited_us: u64,
}

impl StallHistogram {
    /// The number of buckets in [`buckets`](Self::buckets).
    pub const BUCKETS: usize = BUCKETS;

    /// The upper bound in milliseconds of bucket `i` of
    /// [`buckets`](Self::buckets) (`None` for the last, open one).
    ///
    /// # Panics
    /// When `i` is not below [`BUCKETS`](Self::BUCKETS).
    pub fn bucket_upper_ms(i: usize) -> Option<u64> {
        assert!(i < BUCKETS, "bucket {i} of {BUCKETS}");
        (i + 1 < BUCKETS).then(|| 2u64 << i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_land_in_their_power_of_two_bucket() {
        let c = StallCounter::default();
        c.record(Duration::from_micros(900)); // not a stall
        c.record(Duration::from_micros(1500)); // <= 2 ms
        c.record(Duration::from_millis(2)); // <= 2 ms
        c.record(Duration::from_millis(3)); // <= 4 ms
        c.record(Duration::from_millis(100)); // <= 128 ms
        c.record(Duration::from_secs(60)); // open bucket
        let s = c.snapshot();
        assert_eq!(s.count, 5);
        assert_eq!(s.waits, 6);
        assert_eq!(s.waited_us, 900 + 1500 + 2000 + 3000 + 100_000 + 60_000_000);
        assert_eq!(s.buckets[0], 2);
        assert_eq!(s.buckets[1], 1);
        assert_eq!(s.buckets[6], 1);
        assert_eq!(s.buckets[BUCKETS - 1], 1);
        assert_eq!(s.max_us, 60_000_000);
        assert_eq!(StallHistogram::bucket_upper_ms(0), Some(2));
        assert_eq!(StallHistogram::bucket_upper_ms(6), Some(128));
        assert_eq!(StallHistogram::bucket_upper_ms(BUCKETS - 1), None);
    }

    #[test]
    fn background_threads_do_not_stall() {
        let c = std::sync::Arc::new(StallCounter::default());
        let c2 = std::sync::Arc::clone(&c);
        std::thread::spawn(move || {
            mark_background_thread();
            c2.record(Duration::from_millis(50));
        })
        .join()
        .expect("thread");
        assert_eq!(c.snapshot().count, 0);
        assert_eq!(c.snapshot().waits, 0);
    }
}
