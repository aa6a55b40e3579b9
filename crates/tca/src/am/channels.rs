//! Several channels for one put (seed 001): a large put is split across N copy engines so
//! that all parts finish together, with per-channel weights tuned from measured bandwidth.
//!
//! PEACH2 has four DMA channels of unequal speed (PCIe read tags split 32/16/8/8: 2.9, 1.3,
//! 0.7 and 0.7 GB/s), so an equal split leaves the fast channel idle while the slow ones
//! finish. The seed's algorithm, kept here: weights start equal; after each transfer every
//! channel's bandwidth is measured (its bytes over its copy time) and the weights are set
//! proportional to those bandwidths; weights are kept per transfer pattern (target and
//! length), and after [`TUNING`] transfers a pattern is frozen at the split that finished
//! fastest. On shared memory a channel is a copy engine: channel 0 is the caller, the others
//! threads of a pool made when channels are turned on ([`World::put_parts`] runs the parts);
//! across a network an endpoint of the rank (the world's split put, [`World::put_parts`],
//! chooses).
//!
//! Cuts fall on cache lines (64 bytes), so no two engines write one line; a part may be empty
//! (its channel then keeps a small share, [`MIN_SHARE`], so that it is measured again).

use std::cell::RefCell;
use std::collections::HashMap;

use crate::error::{Error, ErrorKind, Result};
use crate::fabric::{Handle, World};

/// Transfers that tune a pattern's weights before they are frozen at the best split seen.
pub const TUNING: u32 = 8;
/// Puts shorter than this are never split (the seed's gains began at 4 KB).
pub const SPLIT_MIN: usize = 4 << 10;
/// Most channels (copy engines) one endpoint uses: the parts one put is split into.
pub const MAX_CHANNELS: usize = crate::fabric::MAX_PARTS;
/// Transfer patterns tuned per endpoint; puts of further patterns are split equally.
pub const MAX_PATTERNS: usize = 1024;
/// The least share of a transfer a channel keeps while its pattern tunes, as a fraction of
/// an equal share: a channel measured slow is still given bytes, so it can be measured again.
pub const MIN_SHARE: f64 = 0.25;
/// Cuts between parts fall on multiples of this many bytes.
const ALIGN: usize = 64;

/// The tuning state of one transfer pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct Tune {
    /// The current weights, summing to 1.
    pub weights: Vec<f64>,
    /// The fastest transfer seen while tuning (its time, in seconds) and its weights.
    best: Option<(f64, Vec<f64>)>,
    /// Transfers recorded so far.
    seen: u32,
}

impl Tune {
    /// Equal weights over `n` channels.
    pub fn new(n: usize) -> Self {
        let n = n.max(1);
        Tune {
            weights: vec![1.0 / n as f64; n],
            best: None,
            seen: 0,
        }
    }

    /// Whether the pattern is done tuning (its weights no longer change).
    pub fn frozen(&self) -> bool {
        self.seen >= TUNING
    }

    /// Records a transfer split by the current weights: channel i had moved `bytes[i]`
    /// `secs[i]` seconds after the transfer began (its hand-over included). The transfer's
    /// time is the slowest channel's. Sets the next weights
    /// proportional to the measured bandwidths (each at least [`MIN_SHARE`] of an equal
    /// share), or, at the [`TUNING`]-th transfer, to the fastest split seen, for good.
    pub fn record(&mut self, bytes: &[usize], secs: &[f64]) {
        let n = self.weights.len();
        if self.frozen() || bytes.len() != n || secs.len() != n {
            return;
        }
        let time = secs.iter().copied().fold(0.0, f64::max);
        if self.best.as_ref().is_none_or(|(t, _)| time < *t) {
            self.best = Some((time, self.weights.clone()));
        }
        self.seen += 1;
        if self.frozen() {
            if let Some((_, w)) = &self.best {
                self.weights.clone_from(w);
            }
            return;
        }
        // Bandwidth of each channel that moved something in measurable time; the others
        // (empty parts, a clock that did not tick) count as the mean of the measured ones.
        let bw: Vec<Option<f64>> = bytes
            .iter()
            .zip(secs)
            .map(|(&b, &t)| (b > 0 && t > 0.0).then(|| b as f64 / t))
            .map(|b| b.filter(|b| b.is_finite()))
            .collect();
        let measured: Vec<f64> = bw.iter().flatten().copied().collect();
        if measured.is_empty() {
            return;
        }
        let mean = measured.iter().sum::<f64>() / measured.len() as f64;
        let raw: Vec<f64> = bw.iter().map(|b| b.unwrap_or(mean)).collect();
        self.weights = normalised(&raw);
    }
}

/// `raw` scaled to sum to 1, each share at least [`MIN_SHARE`] of an equal one: shares below
/// that are raised to it and the others scaled down in proportion (repeated until none falls
/// below), so shares above the floor keep their ratios.
fn normalised(raw: &[f64]) -> Vec<f64> {
    let n = raw.len();
    let floor = MIN_SHARE / n as f64;
    // Scaled by the largest first, so that the sum cannot overflow.
    let top = raw.iter().copied().fold(0.0, f64::max);
    let raw: Vec<f64> = raw.iter().map(|&r| r / top).collect();
    let sum: f64 = raw.iter().sum();
    let mut w: Vec<f64> = raw.iter().map(|&r| r / sum).collect();
    let mut low = vec![false; n];
    for _ in 0..n {
        let mut changed = false;
        for (x, l) in w.iter().zip(low.iter_mut()) {
            if !*l && *x < floor {
                *l = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
        let lows = low.iter().filter(|&&l| l).count() as f64;
        let rest: f64 = w
            .iter()
            .zip(&low)
            .filter(|(_, l)| !**l)
            .map(|(x, _)| x)
            .sum();
        let scale = (1.0 - lows * floor) / rest;
        for (x, &l) in w.iter_mut().zip(&low) {
            *x = if l { floor } else { *x * scale };
        }
    }
    w
}

/// The cut points that split `len` bytes by `weights` into `n` parts (`n` = the number of
/// weights, at least 1): `cuts[0] = 0`, `cuts[n] = len`, ascending, interior cuts on multiples of 64 bytes (or at `len`). Part i is
/// `cuts[i]..cuts[i + 1]`: every byte is in exactly one part, whatever the weights (negative,
/// zero or non-finite weights count as zero; all zero splits equally).
pub fn split(len: usize, weights: &[f64], cuts: &mut Vec<usize>) {
    cuts.clear();
    cuts.push(0);
    let n = weights.len().max(1);
    let clean = |w: f64| if w.is_finite() && w > 0.0 { w } else { 0.0 };
    let sum: f64 = weights.iter().copied().map(clean).sum();
    let mut acc = 0.0;
    for &wt in weights.iter().take(n - 1) {
        acc += if sum > 0.0 {
            clean(wt) / sum
        } else {
            1.0 / n as f64
        };
        // Round to a cache line, never back past the previous cut nor past the end.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        // acc is in [0, 1]: a finite value in [0, len / 64], which a usize holds.
        let at = ((acc * len as f64 / ALIGN as f64).round() as usize).saturating_mul(ALIGN);
        let prev = *cuts.last().expect("starts with 0");
        cuts.push(at.clamp(prev, len));
    }
    cuts.push(len);
}

/// What one split put reuses from the last.
#[derive(Debug, Default)]
struct Scratch {
    cuts: Vec<usize>,
    secs: Vec<f64>,
    bytes: Vec<usize>,
    equal: Vec<f64>,
}

/// An endpoint's channels: the copy engines and the tuning state per transfer pattern.
#[derive(Debug)]
pub(crate) struct Channels {
    n: usize,
    engines: rayon::ThreadPool,
    tunes: RefCell<HashMap<(usize, usize), Tune>>,
    /// Reused cut points, times, part lengths and equal weights (rayon still allocates a job
    /// per part handed to an engine, and a tuning transfer's `record` a few small vectors).
    scratch: RefCell<Scratch>,
}

impl Channels {
    /// `n` channels (2 to [`MAX_CHANNELS`]): the caller and `n - 1` copy-engine threads.
    pub(crate) fn new(n: usize) -> Result<Self> {
        if !(2..=MAX_CHANNELS).contains(&n) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("{n} channels: a split put uses 2 to {MAX_CHANNELS} (1: no split)"),
            ));
        }
        let engines = rayon::ThreadPoolBuilder::new()
            .num_threads(n - 1)
            .thread_name(|i| format!("tca-copy-{}", i + 1))
            .build()
            .map_err(|e| Error::new(ErrorKind::Transport, format!("copy engines: {e}")))?;
        Ok(Channels {
            n,
            engines,
            tunes: RefCell::new(HashMap::new()),
            scratch: RefCell::new(Scratch {
                equal: vec![1.0 / n as f64; n],
                ..Scratch::default()
            }),
        })
    }

    pub(crate) fn count(&self) -> usize {
        self.n
    }

    /// Puts `src` at `off` in `dst` (member `q`'s segment) over the channels, when it is long
    /// enough and split puts reach `dst` ([`World::put_parts`]: memory of this node, another
    /// rank of a simulated network, a rank across a network whose provider allows it); tunes
    /// the pattern's weights from the parts' times. Returns `false` (nothing done) otherwise.
    pub(crate) fn put(
        &self,
        w: &World,
        q: usize,
        dst: &Handle,
        off: usize,
        src: &[u8],
    ) -> Result<bool> {
        if src.len() < SPLIT_MIN {
            return Ok(false);
        }
        let key = (q, src.len());
        let mut tunes = self.tunes.borrow_mut();
        let mut scratch = self.scratch.borrow_mut();
        let Scratch {
            cuts,
            secs,
            bytes,
            equal,
        } = &mut *scratch;
        split(
            src.len(),
            tunes.get(&key).map_or(&equal[..], |t| &t.weights),
            cuts,
        );
        secs.clear();
        secs.resize(self.n, 0.0);
        if !w.put_parts(dst, off, src, cuts, &self.engines, secs)? {
            return Ok(false);
        }
        // A pattern is tuned from its first split put on, while the table has room.
        if !tunes.contains_key(&key) && tunes.len() >= MAX_PATTERNS {
            return Ok(true);
        }
        let tune = tunes.entry(key).or_insert_with(|| Tune::new(self.n));
        if !tune.frozen() {
            bytes.clear();
            bytes.extend(cuts.windows(2).map(|c| c[1] - c[0]));
            tune.record(bytes, secs);
        }
        Ok(true)
    }

    /// Puts `src` at `off` in `dst` split at `weights` (one per channel), outside any tuning;
    /// each channel's time until its part was in place (across a network: until its write
    /// completed here), or `None` when `dst` is not reached by split puts (this rank's own
    /// segment on a simulated network; a network provider that does not allow them).
    pub(crate) fn put_weighted(
        &self,
        w: &World,
        dst: &Handle,
        off: usize,
        src: &[u8],
        weights: &[f64],
    ) -> Result<Option<Vec<f64>>> {
        if weights.len() != self.n {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("{} weights for {} channels", weights.len(), self.n),
            ));
        }
        let mut cuts = Vec::with_capacity(self.n + 1);
        split(src.len(), weights, &mut cuts);
        let mut secs = vec![0.0; self.n];
        Ok(w.put_parts(dst, off, src, &cuts, &self.engines, &mut secs)?
            .then_some(secs))
    }

    /// The weights of the pattern (target `q`, `len` bytes) and whether they are frozen.
    pub(crate) fn weights(&self, q: usize, len: usize) -> Option<(Vec<f64>, bool)> {
        self.tunes
            .borrow()
            .get(&(q, len))
            .map(|t| (t.weights.clone(), t.frozen()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the weights, the parts cover every byte once, in order, cut on lines.
        #[test]
        fn every_byte_in_exactly_one_part(
            len in 0usize..1_000_000,
            weights in prop::collection::vec(prop_oneof![
                -1.0f64..10.0, Just(0.0), Just(f64::NAN), Just(f64::INFINITY)], 1..9),
        ) {
            let mut cuts = Vec::new();
            split(len, &weights, &mut cuts);
            prop_assert_eq!(cuts.len(), weights.len() + 1);
            prop_assert_eq!(cuts[0], 0);
            prop_assert_eq!(*cuts.last().unwrap(), len);
            for c in cuts.windows(2) {
                prop_assert!(c[0] <= c[1]);
            }
            for &c in &cuts[1..cuts.len() - 1] {
                prop_assert!(c % ALIGN == 0 || c == len, "cut {} of {}", c, len);
            }
        }
    }

    #[test]
    fn weights_follow_bandwidth_then_freeze_at_the_best_split() {
        // Channel 0 copies 3 GB/s, channel 1 1 GB/s (as seed 001's unequal DMA channels).
        let rate = [3e9, 1e9];
        let len = 1 << 20;
        let mut t = Tune::new(2);
        let mut cuts = Vec::new();
        let mut times = Vec::new();
        for _ in 0..TUNING {
            assert!(!t.frozen());
            split(len, &t.weights, &mut cuts);
            let bytes: Vec<usize> = cuts.windows(2).map(|c| c[1] - c[0]).collect();
            let secs: Vec<f64> = bytes.iter().zip(rate).map(|(&b, r)| b as f64 / r).collect();
            times.push(secs.iter().copied().fold(0.0, f64::max));
            t.record(&bytes, &secs);
        }
        assert!(t.frozen());
        // Proportional to bandwidth after the first transfer: 3:1.
        assert!((t.weights[0] - 0.75).abs() < 1e-3, "{:?}", t.weights);
        // The equal split (first transfer) took the slow channel's half: 524 us; the tuned
        // one a quarter of the bytes at 1 GB/s: 262 us, the best seen.
        assert!(times[0] > 1.9 * times[1], "{times:?}");
        let frozen = t.weights.clone();
        t.record(&[len, 0], &[1.0, 0.0]);
        assert_eq!(t.weights, frozen, "frozen weights do not move");
    }

    #[test]
    fn a_channel_that_moved_nothing_keeps_a_share() {
        let mut t = Tune::new(4);
        t.record(&[1000, 0, 1000, 1000], &[1e-6, 0.0, 1e-6, 1e-3]);
        let floor = MIN_SHARE / 4.0;
        assert!(
            t.weights.iter().all(|&w| w >= floor * 0.999),
            "{:?}",
            t.weights
        );
        assert!((t.weights.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        // The channel measured 1000x slower gets the least.
        assert!(t.weights[3] < t.weights[0]);
    }

    #[test]
    fn the_fastest_split_seen_is_kept_not_the_last() {
        let mut t = Tune::new(2);
        let mut best = None;
        for k in 0..TUNING {
            let w = t.weights.clone();
            // A noisy machine: the third transfer is the fastest whatever its split.
            let time = if k == 2 { 1e-4 } else { 1e-3 };
            if k == 2 {
                best = Some(w);
            }
            t.record(&[600, 400], &[time, time * (0.5 + f64::from(k) * 0.1)]);
        }
        assert_eq!(Some(t.weights), best);
    }
}
