//! Parsers of the benches' numeric options: each accepts only values that
//! mean something and says what it accepts otherwise.

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

/// A count of at least 1 (an element of a list option such as `--threads`).
pub fn parse_count(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{text:?} is not a count of at least 1")),
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
        assert_eq!(parse_count("4"), Ok(4));
        assert!(parse_count("0").is_err());
        assert!(parse_count("").is_err());
        assert_eq!(parse_positive_bytes("8k"), Ok(8192));
        assert!(parse_positive_bytes("0").is_err());
        assert!(parse_ratio("0").is_err());
        assert!(non_empty::<u8>("--threads", &[]).is_err());
    }
}
