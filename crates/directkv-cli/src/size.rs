//! Parsing of byte sizes on the command line: `8192`, `8k`, `8KiB`, `16M`, `1G`.

/// Parses a byte size with an optional binary suffix (k, m, g; KiB, MiB, GiB).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (try 8192, 8k, 16MiB)"))?;
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(format!("{text:?}: unknown size suffix {suffix:?}")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// The page sizes the engine supports.
pub const PAGE_SIZES: [u32; 3] = [4096, 8192, 16384];

/// Parses a page size: 4k, 8k or 16k (4096, 8192 or 16384 in any form
/// [`parse_bytes`] reads).
pub fn parse_page_size(text: &str) -> Result<u32, String> {
    let bytes = parse_bytes(text)?;
    PAGE_SIZES
        .into_iter()
        .find(|&p| u64::from(p) == bytes)
        .ok_or_else(|| {
            format!("{text:?} is not a page size: use 4k, 8k or 16k (4096, 8192, 16384)")
        })
}

#[cfg(test)]
mod tests {
    use super::{parse_bytes, parse_page_size};

    #[test]
    fn page_sizes() {
        assert_eq!(parse_page_size("4k"), Ok(4096));
        assert_eq!(parse_page_size("16384"), Ok(16384));
        assert!(parse_page_size("3k").is_err());
        assert!(parse_page_size("0").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("8192"), Ok(8192));
        assert_eq!(parse_bytes("8k"), Ok(8192));
        assert_eq!(parse_bytes("16MiB"), Ok(16 << 20));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert!(parse_bytes("8q").is_err());
        assert!(parse_bytes("").is_err());
    }
}
