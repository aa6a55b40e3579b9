//! Inputs shared by the non-blocking and offload suites: the same values, so that their
//! expected results are computed the same way.

/// Element `i` of rank `rank`'s input: small integers (1 to 11), exact in every sum.
pub fn val(rank: usize, i: usize) -> f64 {
    ((rank * 7 + i * 3) % 11 + 1) as f64
}

/// Rank `rank`'s input of `n` elements.
pub fn input(rank: usize, n: usize) -> Vec<f64> {
    (0..n).map(|i| val(rank, i)).collect()
}

/// xorshift: a rank's own random sequence.
pub fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}
