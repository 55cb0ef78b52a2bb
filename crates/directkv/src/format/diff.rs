//! The byte ranges in which two images of one page differ: what a WAL page
//! record and an incremental backup's delta carry instead of the page.

/// The byte ranges `(offset, length)` in which `after` differs from `before`
/// (equal lengths). Differences fewer than 16 equal bytes apart share a
/// range, since a range's 4-byte header costs about as much as the equal
/// bytes it would skip.
pub fn diff(before: &[u8], after: &[u8]) -> Vec<(usize, usize)> {
    assert_eq!(
        before.len(),
        after.len(),
        "a diff compares two images of one page"
    );
    let n = before.len().min(after.len());
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while let Some(start) = first_difference(before, after, i, n) {
        let last = last_of_run(before, after, start, n);
        assert!(last >= start && last < n, "a run ends inside the page");
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

/// Differing bytes fewer than this many equal bytes apart share a range.
const GAP: usize = 16;

/// The last differing byte of the run that starts with the differing byte
/// at `start`: the first one followed by more than [`GAP`] equal bytes (or
/// by the end of the page). Eight bytes at a time: every differing byte of
/// a word lies fewer than eight (< `GAP`) from the one before it, so a word
/// joins the run whole when its first differing byte does.
fn last_of_run(a: &[u8], b: &[u8], start: usize, n: usize) -> usize {
    let mut last = start;
    let mut j = start + 1;
    while j < n && j - last <= GAP {
        if j + 8 > n {
            if a[j] != b[j] {
                last = j;
            }
            j += 1;
            continue;
        }
        let x = word(a, j) ^ word(b, j);
        if x != 0 {
            // Little-endian: the lowest set byte is the first in memory.
            let first = j + (x.trailing_zeros() / 8) as usize;
            if first - last > GAP {
                break;
            }
            last = j + 7 - (x.leading_zeros() / 8) as usize;
        }
        j += 8;
    }
    last
}

/// The eight bytes of `s` at `at`, little-endian.
fn word(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().expect("eight bytes"))
}

/// The first index in `from..n` where `a` and `b` differ, comparing eight
/// bytes at a time.
fn first_difference(a: &[u8], b: &[u8], from: usize, n: usize) -> Option<usize> {
    let mut i = from;
    while i + 8 <= n {
        if word(a, i) != word(b, i) {
            break;
        }
        i += 8;
    }
    (i..n).find(|&k| a[k] != b[k])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-at-a-time definition the word-wise scan must match.
    fn reference(before: &[u8], after: &[u8]) -> Vec<(usize, usize)> {
        let n = before.len();
        let mut out: Vec<(usize, usize)> = Vec::new();
        let mut i = 0;
        while let Some(start) = (i..n).find(|&k| before[k] != after[k]) {
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
        out
    }

    /// Random pages changed in random places, densely and sparsely, with
    /// gaps around the boundary of [`GAP`]: the same ranges as the
    /// byte-at-a-time definition, which cover every difference.
    #[test]
    fn word_wise_ranges_match_the_byte_wise_definition() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..3000 {
            let n = [4096, 100, 17, 8, 1][round % 5];
            let before: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            let mut after = before.clone();
            let changes = (next() % 12) as usize;
            for _ in 0..changes {
                let at = (next() as usize) % n;
                let len = [1, 2, 7, 15, 16, 17, 40][(next() % 7) as usize].min(n - at);
                let step = [1, 1, 3, 16, 17][(next() % 5) as usize];
                for k in (at..at + len).step_by(step) {
                    after[k] = after[k].wrapping_add(1 + (next() % 255) as u8);
                }
            }
            let got = diff(&before, &after);
            assert_eq!(got, reference(&before, &after), "round {round}");
            let covered = |k: usize| got.iter().any(|&(o, l)| (o..o + l).contains(&k));
            assert!((0..n).filter(|&k| before[k] != after[k]).all(covered));
        }
    }
}
