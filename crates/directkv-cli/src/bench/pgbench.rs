//! What PostgreSQL's `pgbench` says about a run: the summary it prints, and
//! the per-transaction log it writes with `-l`.
//!
//! - The log has one line per completed transaction, per client thread one
//!   file (`<prefix>.<pid>`, `<prefix>.<pid>.<thread>`):
//!   `client_id transaction_no time script_no time_epoch time_us`, where
//!   `time` is the transaction's latency in microseconds and `time_epoch`
//!   (seconds) with `time_us` (microseconds within it) is when it ended. A
//!   failed or skipped transaction has `failed`/`skipped` for `time`; it is
//!   not a completed transaction and is not counted.
//! - The log's completed transactions are the ones pgbench counts as
//!   "actually processed" (the caller checks that the two agree).
//!
//! Worked example: `0 7 3134 0 1795542401 468265` is client 0's seventh
//! transaction, 3,134 µs long, ended at 1795542401.468265 s; in a run that
//! started at 1795542399.900000 s it falls in second 1 of the run.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::latency::LatencyHistogram;

/// Most log files one run may write: one per pgbench thread (`-j`).
pub const LOG_FILES_MAX: usize = 1024;

/// The summary pgbench prints at the end of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Printed {
    /// `tps = …` (without initial connection time).
    pub tps: f64,
    /// `number of transactions actually processed: …`.
    pub transactions: u64,
    /// `number of failed transactions: …` (0 where not printed).
    pub failed: u64,
}

/// Parses the summary of `pgbench` from its standard output.
pub fn parse_printed(text: &str) -> Result<Printed> {
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .map(str::trim)
    };
    let leading_number = |s: &str| -> Option<String> {
        let n: String = s
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        (!n.is_empty()).then_some(n)
    };
    let tps = field("tps =")
        .and_then(leading_number)
        .and_then(|n| n.parse::<f64>().ok())
        .with_context(|| format!("no `tps = ` in pgbench's output:\n{text}"))?;
    let transactions = field("number of transactions actually processed:")
        .and_then(leading_number)
        .and_then(|n| n.parse::<u64>().ok())
        .with_context(|| format!("no transaction count in pgbench's output:\n{text}"))?;
    let failed = field("number of failed transactions:")
        .and_then(leading_number)
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(tps >= 0.0 && tps.is_finite(), "tps {tps} is a rate");
    Ok(Printed {
        tps,
        transactions,
        failed,
    })
}

/// One completed transaction of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEntry {
    /// Its latency, microseconds.
    pub latency_us: u64,
    /// When it ended, microseconds since the Unix epoch.
    pub end_us: u64,
}

/// Parses one log line; `None` for a failed or skipped transaction. A line
/// that is neither is an error (the log is not pgbench's).
pub fn parse_log_line(line: &str) -> Result<Option<LogEntry>> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 6 {
        bail!("a pgbench log line has at least 6 fields: {line:?}");
    }
    if fields[2] == "failed" || fields[2] == "skipped" {
        return Ok(None);
    }
    let number = |i: usize| -> Result<u64> {
        fields[i]
            .parse::<u64>()
            .with_context(|| format!("field {} of pgbench log line {line:?}", i + 1))
    };
    let (latency_us, epoch_s, within_us) = (number(2)?, number(4)?, number(5)?);
    if within_us >= 1_000_000 {
        bail!("time_us of {line:?} is not within a second");
    }
    Ok(Some(LogEntry {
        latency_us,
        end_us: epoch_s * 1_000_000 + within_us,
    }))
}

/// The log's figures: every completed transaction's latency, and per second
/// of the run the count and latencies of those that ended in it.
pub struct LogFigures {
    /// Completed transactions (lines of the log, failed ones aside).
    pub transactions: u64,
    /// Their latencies.
    pub latency: LatencyHistogram,
    /// Per second of the run: transactions that ended in it, and theirs.
    pub per_second: Vec<(u64, LatencyHistogram)>,
    /// Log files read.
    pub files: usize,
}

impl LogFigures {
    /// Empty figures for a run of `secs` seconds.
    pub fn new(secs: usize) -> Result<LogFigures> {
        let per_second = (0..secs)
            .map(|_| Ok((0, LatencyHistogram::coarse()?)))
            .collect::<Result<_>>()?;
        Ok(LogFigures {
            transactions: 0,
            latency: LatencyHistogram::new()?,
            per_second,
            files: 0,
        })
    }

    /// Adds one log file's text; `start_us` is when the run started.
    pub fn add_log(&mut self, text: &str, start_us: u64) -> Result<()> {
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let Some(e) = parse_log_line(line)? else {
                continue;
            };
            self.transactions += 1;
            self.latency.record_us(e.latency_us);
            let sec = (e.end_us.saturating_sub(start_us) / 1_000_000) as usize;
            if let Some((n, h)) = self.per_second.get_mut(sec) {
                *n += 1;
                h.record_us(e.latency_us);
            }
        }
        self.files += 1;
        assert_eq!(self.transactions, self.latency.count(), "one latency each");
        Ok(())
    }
}

/// Reads every log file in `dir` whose name starts with `prefix` (pgbench's
/// `--log-prefix`, file name only) for a run of `secs` seconds that started
/// at `start_us`.
pub fn read_logs(dir: &Path, prefix: &str, start_us: u64, secs: usize) -> Result<LogFigures> {
    let mut figures = LogFigures::new(secs)?;
    let entries = std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("read {}", dir.display()))?
            .path();
        let is_log = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&format!("{prefix}.")));
        if !is_log {
            continue;
        }
        if figures.files >= LOG_FILES_MAX {
            bail!(
                "more than {LOG_FILES_MAX} pgbench log files in {}",
                dir.display()
            );
        }
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        figures.add_log(&text, start_us)?;
    }
    if figures.files == 0 {
        bail!("pgbench wrote no log ({prefix}.*) in {}", dir.display());
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pgbench 15.18's summary of a 2-second run, as printed.
    const PRINTED: &str = "pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: <builtin: TPC-B (sort of)>
scaling factor: 1
query mode: prepared
number of clients: 2
number of threads: 2
maximum number of tries: 1
duration: 2 s
number of transactions actually processed: 874
number of failed transactions: 0 (0.000%)
latency average = 4.602 ms
initial connection time = 6.624 ms
tps = 434.590630 (without initial connection time)
";

    #[test]
    fn the_printed_summary_gives_tps_and_counts() {
        let p = parse_printed(PRINTED).expect("parses");
        assert_eq!(p.transactions, 874);
        assert_eq!(p.failed, 0);
        assert!((p.tps - 434.590630).abs() < 1e-9);
        assert!(parse_printed("pgbench: error: connection failed").is_err());
    }

    #[test]
    fn log_lines_give_latency_and_end_and_skip_failures() {
        let e = parse_log_line("0 7 3134 0 1795542401 468265").expect("valid");
        assert_eq!(
            e,
            Some(LogEntry {
                latency_us: 3134,
                end_us: 1_795_542_401_468_265
            })
        );
        assert_eq!(
            parse_log_line("1 8 failed 0 1795542401 468265").expect("valid"),
            None
        );
        assert!(parse_log_line("0 7 3134").is_err());
        assert!(parse_log_line("0 7 x 0 1 2").is_err());
        assert!(parse_log_line("0 7 1 0 1 1000000").is_err());
    }

    #[test]
    fn a_log_gives_counts_per_second_and_percentiles() {
        let start_us = 1_795_542_399_900_000;
        let log = "0 1 1000 0 1795542399 950000\n\
                   0 2 2000 0 1795542400 100000\n\
                   1 1 9000 0 1795542401 000000\n\
                   1 2 skipped 0 1795542401 100000\n";
        let mut f = LogFigures::new(2).expect("histograms");
        f.add_log(log, start_us).expect("valid log");
        assert_eq!(f.transactions, 3);
        assert_eq!(f.per_second[0].0, 2, "ended within the first second");
        assert_eq!(f.per_second[1].0, 1);
        let l = f.latency.latency();
        assert!(l.latency_us_p50 <= l.latency_us_p99 && l.latency_us_p99 <= l.latency_us_max);
        assert!((8990..=9010).contains(&l.latency_us_max));
    }
}
