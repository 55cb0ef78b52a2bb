//! The byte ranges in which two images of one page differ: what a WAL page
//! record and an incremental backup's delta carry instead of the page.

/// The byte ranges `(offset, length)` in which `after` differs from `before`
/// (equal lengths). Differences fewer than 16 equal bytes apart share a
/// range, since a range's 4-byte header costs about as much as the equal
/// bytes it would skip.
pub fn diff(before: &[u8], after: &[u8]) -> Vec<(usize, usize)> {
    const GAP: usize = 16;
    assert_eq!(
        before.len(),
        after.len(),
        "a diff compares two images of one page"
    );
    let n = before.len().min(after.len());
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while let Some(start) = first_difference(before, after, i, n) {
        // The range ends at its last differing byte that is followed by
        // GAP equal bytes (or the end of the page).
        let mut last = start;
        let mut j = start + 1;
        while j < n && j - last <= GAP {
            if before[j] != after[j] {
                last = j;
            }
            j += 1;
        }
        let end = last + 1;
        match out.last_mut() {
            Some(prev) if start - (prev.0 + prev.1) < GAP => prev.1 = end - prev.0,
            _ => out.push((start, end - start)),
        }
        i = end;
    }
    assert!(
        out.last().is_none_or(|&(off, len)| off + len <= n),
        "ranges lie inside the page"
    );
    out
}

/// The first index in `from..n` where `a` and `b` differ, comparing eight
/// bytes at a time.
fn first_difference(a: &[u8], b: &[u8], from: usize, n: usize) -> Option<usize> {
    let mut i = from;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().expect("eight bytes"));
        let y = u64::from_le_bytes(b[i..i + 8].try_into().expect("eight bytes"));
        if x != y {
            break;
        }
        i += 8;
    }
    (i..n).find(|&k| a[k] != b[k])
}
