//! The one latency histogram every bench records into, and the percentiles
//! every report carries.
//!
//! - Latencies are whole microseconds; an operation that took less than one
//!   counts as one.
//! - A latency above [`LATENCY_US_MAX`] counts as that maximum (saturating),
//!   so a stalled operation never makes recording fail.

use std::time::Duration;

use anyhow::Result;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The slowest latency a histogram tells apart: one hour, in microseconds.
pub const LATENCY_US_MAX: u64 = 3_600_000_000;

/// Percentiles of one operation's latency, microseconds. Flattened into every
/// report row, so the field names are the same in every bench.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Mean.
    pub latency_us_mean: f64,
    /// Median.
    pub latency_us_p50: u64,
    /// 99th percentile.
    pub latency_us_p99: u64,
    /// 99.9th percentile.
    pub latency_us_p999: u64,
    /// Maximum.
    pub latency_us_max: u64,
}

/// An HDR histogram of latencies in microseconds.
#[derive(Debug, Clone)]
pub struct LatencyHistogram(Histogram<u64>);

impl LatencyHistogram {
    /// A histogram precise to three significant digits: for a run's totals.
    pub fn new() -> Result<LatencyHistogram> {
        Self::with_digits(3)
    }

    /// A histogram precise to two significant digits: smaller, for the
    /// series of one per second.
    pub fn coarse() -> Result<LatencyHistogram> {
        Self::with_digits(2)
    }

    fn with_digits(digits: u8) -> Result<LatencyHistogram> {
        assert!(
            (1..=5).contains(&digits),
            "hdrhistogram takes 1 to 5 digits"
        );
        Ok(LatencyHistogram(Histogram::new_with_bounds(
            1,
            LATENCY_US_MAX,
            digits,
        )?))
    }

    /// Records one operation that took `elapsed`.
    pub fn record(&mut self, elapsed: Duration) {
        self.record_us(elapsed.as_micros().min(u128::from(u64::MAX)) as u64);
    }

    /// Records one operation that took `us` microseconds.
    pub fn record_us(&mut self, us: u64) {
        self.0.saturating_record(us.max(1));
    }

    /// Adds every operation of `other`.
    pub fn add(&mut self, other: &LatencyHistogram) -> Result<()> {
        self.0.add(&other.0)?;
        Ok(())
    }

    /// How many operations were recorded.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The latency at quantile `q` (0 to 1), microseconds.
    pub fn quantile_us(&self, q: f64) -> u64 {
        assert!((0.0..=1.0).contains(&q), "quantile {q} outside 0..=1");
        self.0.value_at_quantile(q)
    }

    /// The slowest operation, microseconds.
    pub fn max_us(&self) -> u64 {
        self.0.max()
    }

    /// The percentiles every report carries.
    pub fn latency(&self) -> Latency {
        let l = Latency {
            latency_us_mean: self.0.mean(),
            latency_us_p50: self.quantile_us(0.5),
            latency_us_p99: self.quantile_us(0.99),
            latency_us_p999: self.quantile_us(0.999),
            latency_us_max: self.max_us(),
        };
        assert!(l.latency_us_p50 <= l.latency_us_p99 && l.latency_us_p999 <= l.latency_us_max);
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_ordered_and_sub_microsecond_counts_as_one() {
        let mut h = LatencyHistogram::new().expect("bounds");
        h.record(Duration::from_nanos(10));
        for us in 1..=1000 {
            h.record_us(us);
        }
        let l = h.latency();
        assert_eq!(h.count(), 1001);
        assert!(l.latency_us_p50 <= l.latency_us_p99);
        assert!(l.latency_us_p99 <= l.latency_us_p999);
        assert_eq!(l.latency_us_max, 1000);
        h.record_us(u64::MAX);
        assert!(h.max_us() >= LATENCY_US_MAX);
    }
}
