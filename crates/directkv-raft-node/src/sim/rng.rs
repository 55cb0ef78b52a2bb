//! The simulation's one source of randomness: SplitMix64 from the seed,
//! drawn in the order the single-threaded runtime runs its tasks, so a
//! seed fixes every draw.

/// A seeded generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator of `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "a range is not reversed");
        let span = hi - lo;
        if span == u64::MAX {
            return self.next_u64();
        }
        let got = lo + self.next_u64() % (span + 1);
        assert!((lo..=hi).contains(&got), "a draw stays in its range");
        got
    }

    /// True `per_mille` times in a thousand.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        assert!(per_mille <= 1000, "a chance is at most certain");
        self.range(0, 999) < u64::from(per_mille)
    }

    /// A generator of its own for a part of the run, drawn from this one.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}
