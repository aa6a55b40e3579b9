//! The campaign's random numbers: SplitMix64, seeded, the same sequence on every machine.
//!
//! Why not a crate: a campaign must be replayable from its printed seed with any later
//! version of a dependency, and every rank of a job must draw the same sequence of workload
//! steps from the job's seed without talking. SplitMix64 (Steele, Lea and Flood, 2014; the
//! seeder of xoshiro) is ten lines, passes BigCrush, and its output is fixed by its
//! definition. Nothing here is for cryptography.

/// A SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// A generator for item `index` of a stream seeded with `seed`: independent of the items
    /// drawn before it, so job 17 of a campaign is the same whether or not jobs 0 to 16 ran.
    pub fn derive(seed: u64, index: u64) -> Self {
        let mut r = Self(seed ^ index.wrapping_mul(0xd1b5_4a32_d192_ed03));
        r.next_u64();
        Self(r.next_u64())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0), by Lemire's multiply-shift (bias below 2^-32
    /// for the small ranges used here).
    pub fn below(&mut self, n: u64) -> u64 {
        let wide = u128::from(self.next_u64()) * u128::from(n);
        u64::try_from(wide >> 64).unwrap_or(0)
    }

    /// A number in `lo..=hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    /// A `usize` in `0..n`.
    pub fn index(&mut self, n: usize) -> usize {
        // Lossless both ways on 64-bit targets; `below(n) < n` fits wherever `n` does.
        usize::try_from(self.below(n as u64)).unwrap_or(0)
    }

    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// An element of `items` (`None` if it is empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            items.get(self.index(items.len()))
        }
    }
}

/// A 64-bit mix of a few numbers: what a rank computes on its own to know what a peer sent
/// it (lengths, patterns), with no message about it.
pub fn mix(parts: &[u64]) -> u64 {
    let mut r = Rng::new(0x5eed);
    let mut h = 0;
    for &p in parts {
        r = Rng::new(r.next_u64() ^ p);
        h = r.next_u64();
    }
    h
}

/// `n` bytes of a pattern that depends on `key` (and on each byte's position): a payload
/// whose every byte a receiver can check, and that differs from round to round.
pub fn pattern(key: u64, n: usize) -> Vec<u8> {
    let mut r = Rng::new(key);
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        out.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // The first outputs of SplitMix64 seeded with 0 (the reference implementation's).
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn ranges_and_derivation() {
        let mut r = Rng::new(7);
        for _ in 0..1000 {
            let v = r.range(2, 8);
            assert!((2..=8).contains(&v));
            assert!(r.below(3) < 3);
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.range(5, 5), 5);
        assert_eq!(Rng::derive(1, 17).next_u64(), Rng::derive(1, 17).next_u64());
        assert_ne!(Rng::derive(1, 17).next_u64(), Rng::derive(1, 18).next_u64());
        assert_ne!(Rng::derive(1, 17).next_u64(), Rng::derive(2, 17).next_u64());
        assert_eq!(pattern(3, 13), pattern(3, 20)[..13]);
        assert_ne!(pattern(3, 16), pattern(4, 16));
        assert_ne!(mix(&[1, 2]), mix(&[2, 1]));
    }
}
