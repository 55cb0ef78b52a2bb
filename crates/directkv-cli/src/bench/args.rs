//! Parsers of the benches' numeric options: each accepts only values that
//! mean something and says what it accepts otherwise. Command-line parsing
//! runs them, so a value out of range stops the bench before it creates or
//! loads anything; the error names the option (clap adds it) and the range.

/// Client or writer threads at most: far past any core count a bench
/// means, and a bound on the threads one run starts.
pub const THREADS_MAX: u64 = 4096;
/// Rounds at most.
pub const ROUNDS_MAX: u64 = 1000;
/// Records at most (ycsb, read, scan, fill, updates): the load sorts them
/// in memory.
pub const KEYS_MAX: u64 = 10_000_000_000;
/// Bytes per value at least: every value starts with an 8-byte counter
/// (a TPC-B row's balance), so a shorter one would be padded silently.
pub const VALUE_SIZE_MIN: u64 = 8;
/// Bytes per value at most: the engine's largest value.
pub const VALUE_SIZE_MAX: u64 = directkv::VALUE_MAX as u64;
/// TPC-B scale at most: 100,000 accounts per unit of scale, and the
/// account ids fit in 32 bits.
pub const SCALE_MAX: u64 = u32::MAX as u64 / 100_000;
/// Keys per fill batch, and keys per scan, at most.
pub const BATCH_MAX: u64 = 1_000_000;
/// Bytes per WAL bench record at most: the log's largest record payload.
pub const RECORD_BYTES_MAX: u64 = directkv::internals::wal::RECORD_PAYLOAD_MAX as u64;
/// Seconds a recovery bench waits for its crash point at most (a day).
pub const TIMEOUT_SECONDS_MAX: u64 = 86_400;

/// A parser of a whole number from `min` to `max` inclusive, for an option
/// whose values outside that range mean nothing.
pub fn whole_in<T: TryFrom<u64>>(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
    assert!(min <= max, "a range of at least one value");
    move |text: &str| {
        let n = text.trim().parse::<u64>().ok();
        match n.filter(|n| (min..=max).contains(n)).map(T::try_from) {
            Some(Ok(n)) => Ok(n),
            _ => Err(format!(
                "{text:?} is out of range: a whole number at least {min} and at most {max}"
            )),
        }
    }
}

/// A share of a distance: a finite number above 0 and at most 2 (`0.9`).
pub fn parse_share(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 2.0 => Ok(r),
        _ => Err(format!(
            "{text:?} is out of range: a number above 0 and at most 2 (try 0.9)"
        )),
    }
}

/// Seconds: a finite number above 0 (`0.5`, `20`).
pub fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        // A time a `Duration` holds, to the nanosecond.
        Ok(s) if s > 0.0 && std::time::Duration::try_from_secs_f64(s).is_ok() => Ok(s),
        _ => Err(format!(
            "{text:?} is not a number of seconds above 0 (try 0.5 or 20)"
        )),
    }
}

/// A byte size above 0 (`8192`, `8k`, `64M`).
pub fn parse_positive_bytes(text: &str) -> Result<u64, String> {
    match crate::size::parse_bytes(text)? {
        0 => Err(format!(
            "{text:?}: the size must be above 0 (try 8k or 64M)"
        )),
        n => Ok(n),
    }
}

/// A ratio: a finite number above 0 (`4`, `0.5`).
pub fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!("{text:?} is not a number above 0 (try 4 or 0.5)")),
    }
}

/// Fails unless the list option `name` has at least one element.
pub fn non_empty<T>(name: &str, list: &[T]) -> anyhow::Result<()> {
    if list.is_empty() {
        anyhow::bail!("{name} needs at least one value");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonsense_is_refused() {
        assert_eq!(parse_seconds("0.5"), Ok(0.5));
        for bad in ["0", "-1", "nan", "inf", "x", ""] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_positive_bytes("8k"), Ok(8192));
        assert!(parse_positive_bytes("0").is_err());
        assert!(parse_ratio("0").is_err());
        assert!(non_empty::<u8>("--threads", &[]).is_err());
        let threads = whole_in::<usize>(1, THREADS_MAX);
        assert_eq!(threads("4"), Ok(4));
        assert_eq!(threads("4096"), Ok(4096));
        for bad in ["0", "4097", "-1", "x", ""] {
            let e = threads(bad).expect_err(bad);
            assert!(e.contains("at least 1 and at most 4096"), "{e}");
        }
        assert_eq!(parse_share("0.9"), Ok(0.9));
        for bad in ["0", "2.5", "nan", "-1"] {
            assert!(parse_share(bad).is_err(), "{bad}");
        }
    }
}
