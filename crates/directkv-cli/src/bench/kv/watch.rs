//! What a key-value run watches while its clients run: the device's
//! figures each second, and the progress bar.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::super::store::Store;
use super::super::sys::{DiskCounters, DiskSampler};
use super::{PerSecond, WATCH_INTERVAL};

/// What the watcher saw, by second of the run.
pub(super) struct Watched {
    /// Seconds in which this engine was checkpointing, for the charts.
    pub(super) checkpointing: Vec<bool>,
    /// The device's mean time per request in each whole second.
    pub(super) device_us: Vec<u64>,
}

/// The device's time per request, second by second, from `/proc/diskstats`.
pub(super) struct DeviceSeries {
    pub(super) disk: Option<DiskSampler>,
    pub(super) at: Option<DiskCounters>,
    pub(super) second: usize,
    pub(super) us: Vec<u64>,
}

impl DeviceSeries {
    pub(super) fn new(data_dir: &Path, secs: usize) -> DeviceSeries {
        let disk = DiskSampler::for_path(data_dir);
        let at = disk.as_ref().and_then(DiskSampler::now);
        DeviceSeries {
            disk,
            at,
            second: 0,
            us: Vec::with_capacity(secs),
        }
    }

    /// At second `now` of the run: the mean over the second just ended.
    pub(super) fn sample(&mut self, now: usize, secs: usize) {
        if now <= self.second || self.us.len() >= secs {
            return;
        }
        if let (Some(d), Some(before)) = (&self.disk, self.at) {
            if let Some(after) = d.now() {
                let n = after.requests.saturating_sub(before.requests);
                let ms = after.ms.saturating_sub(before.ms);
                self.us.push((ms * 1000).checked_div(n).unwrap_or(0));
                self.at = Some(after);
            }
        }
        self.second = now;
    }
}

/// The main thread's watch over a run while its clients work.
pub(super) struct Watch<'a> {
    pub(super) store: &'a dyn Store,
    pub(super) per_second: &'a PerSecond,
    pub(super) bar: &'a ProgressBar,
    pub(super) unit: &'static str,
    pub(super) start: Instant,
    pub(super) deadline: Instant,
}

impl Watch<'_> {
    pub(super) fn run(
        &self,
        mut device: DeviceSeries,
        secs: usize,
        done: &dyn Fn() -> bool,
    ) -> Watched {
        let mut checkpointing = vec![false; secs];
        while Instant::now() < self.deadline && !done() {
            std::thread::sleep(WATCH_INTERVAL);
            let now = self.start.elapsed().as_secs() as usize;
            if self.store.stats()["checkpoint_running"] == serde_json::Value::Bool(true) {
                if let Some(flag) = checkpointing.get_mut(now) {
                    *flag = true;
                }
            }
            device.sample(now, secs);
            self.bar.set_position(now as u64);
            let ps = self.per_second.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((n, _)) = now.checked_sub(1).and_then(|i| ps.get(i)) {
                self.bar.set_message(format!("{n} {}/s", self.unit));
            }
        }
        Watched {
            checkpointing,
            device_us: device.us,
        }
    }
}

pub(super) fn bar(len: u64, prefix: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>28} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix.to_string());
    bar
}
