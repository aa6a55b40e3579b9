//! The cost algebra: [`CostModel`], the parameters that price each count of a [`Work`], and
//! [`Sched`], to which the counting pass (`coll::count`) adds each channel operation an
//! algorithm performs (messages sent and received, exchange rounds, local copies,
//! reductions). A prediction is the dot product `Work · CostModel`; [`CostModel::slowest`] and
//! [`CostModel::paced`] turn the schedules of a rooted collective's ranks into the pace of
//! back-to-back calls (see the [`model`](super) docs for why).

use serde::{Deserialize, Serialize};

use crate::coll::channel::{INLINE, chunk_bytes};
use crate::error::{Error, ErrorKind, Result};

/// Parameters of the cost model (see the [`model`](super) docs): times in microseconds, per
/// unit of each [`Work`] count, all finite and >= 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    /// Per chunk sent or received, us.
    pub alpha: f64,
    /// Per chunk whose payload does not fit its header line, us.
    #[serde(default)]
    pub alpha_spill: f64,
    /// Per byte copied out of a slot by its receiver (past the knee), us.
    pub beta: f64,
    /// Per byte copied into a peer's slot by its sender (past the knee), us.
    pub beta_send: f64,
    /// Per byte of the first `knee` bytes of a chunk, sent or received, us.
    pub beta_small: f64,
    /// Per byte copied within a rank, us.
    pub beta_local: f64,
    /// Per byte combined by a reduction, us.
    pub gamma: f64,
    /// Per synchronising round (exchange step), us.
    pub delta: f64,
    /// Per byte of a message of at least `cache` bytes, on top of its other prices, us.
    #[serde(default)]
    pub beta_far: f64,
    /// Bytes at the start of each chunk priced at `beta_small` (0: none).
    pub knee: f64,
    /// Messages of at least this many bytes pay `beta_far` ([`MAX_CACHE`]: none do).
    #[serde(default = "no_cache_step")]
    pub cache: f64,
    /// Cores the ranks share (0: one each). Not a fitted parameter and not stored per model:
    /// [`Calibration::model`](super::Calibration::model) sets it from the rank count's entry
    /// ([`RankModels::cores`](super::RankModels::cores)).
    #[serde(skip)]
    pub cores: f64,
}

fn no_cache_step() -> f64 {
    MAX_CACHE
}

impl Default for CostModel {
    /// Shared memory on the development machine (2-core AMD EPYC VM, `tca model calibrate`
    /// at 2 ranks, rounded): ~0.065 us per chunk, ~0.13 us per exchange round, ~8.5 GB/s for
    /// the receiving side of a stream and ~18 GB/s for the sending side, ~100 GB/s for f32
    /// sums beside the copies.
    fn default() -> Self {
        Self {
            alpha: 0.065,
            beta: 1.2e-4,
            beta_send: 5.5e-5,
            beta_small: 5.0e-5,
            beta_local: 3.0e-5,
            gamma: 1.0e-5,
            delta: 0.13,
            alpha_spill: 0.015,
            beta_far: 0.0,
            knee: 2048.0,
            cache: MAX_CACHE,
            cores: 0.0,
        }
    }
}

impl CostModel {
    /// A network between the ranks: libfabric's tcp provider between two network namespaces
    /// of the development machine (a veth pair, every byte through the kernel's TCP stack),
    /// `tca model calibrate --np 2 --quick` with one rank in each (2026-11-24, the fit over all
    /// collectives, rounded): ~7.4 us per chunk (a message), ~4.6 us more for a chunk whose
    /// payload does not ride in its header, ~4 GB/s receiving and ~8 GB/s sending past the
    /// first 16 KiB of a chunk, ~3 GB/s before. Reductions are local work, priced as within a
    /// node (the calibration's collectives did not separate them). The models a communicator
    /// that spans nodes chooses with when the calibration has none measured across a network
    /// ([`Calibration::model_on`](super::Calibration::model_on)). Another network (RDMA,
    /// more ranks per node) has other figures: `tca model calibrate` with the ranks spread
    /// over its nodes measures them.
    pub fn network() -> Self {
        Self {
            alpha: 7.4,
            alpha_spill: 4.6,
            beta: 2.5e-4,
            beta_send: 1.25e-4,
            beta_small: 3.3e-4,
            beta_local: 3.8e-5,
            beta_far: 1.7e-5,
            delta: 0.0,
            knee: 16384.0,
            cache: 2097152.0,
            ..Self::default()
        }
    }
}

/// Bytes at most in [`CostModel::knee`].
pub const MAX_KNEE: f64 = (1u64 << 30) as f64;
/// [`CostModel::cache`] of a model without a cache step (and its largest value).
pub const MAX_CACHE: f64 = (1u64 << 62) as f64;

impl CostModel {
    /// The parameter names in the order of [`CostModel::params`] and [`Work::coefficients`].
    pub const PARAMS: [&'static str; 9] = [
        "delta",
        "alpha",
        "alpha_spill",
        "beta",
        "beta_send",
        "beta_small",
        "beta_local",
        "gamma",
        "beta_far",
    ];

    /// Units of [`CostModel::PARAMS`], for printing.
    pub const UNITS: [&'static str; 9] = [
        "us", "us", "us", "us/B", "us/B", "us/B", "us/B", "us/B", "us/B",
    ];

    /// The fitted parameters, in the order of [`CostModel::PARAMS`] (`knee` and `cache` are not
    /// among them: they are chosen, not fitted).
    pub fn params(&self) -> [f64; 9] {
        [
            self.delta,
            self.alpha,
            self.alpha_spill,
            self.beta,
            self.beta_send,
            self.beta_small,
            self.beta_local,
            self.gamma,
            self.beta_far,
        ]
    }

    /// A model from parameters in the order of [`CostModel::PARAMS`], a knee and a cache step;
    /// checked.
    pub fn from_params(p: &[f64], knee: f64, cache: f64) -> Result<CostModel> {
        if p.len() != Self::PARAMS.len() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "a cost model has {} parameters ({}), got {}",
                    Self::PARAMS.len(),
                    Self::PARAMS.join(", "),
                    p.len()
                ),
            ));
        }
        let m = CostModel {
            delta: p[0],
            alpha: p[1],
            alpha_spill: p[2],
            beta: p[3],
            beta_send: p[4],
            beta_small: p[5],
            beta_local: p[6],
            gamma: p[7],
            beta_far: p[8],
            knee,
            cache,
            cores: 0.0,
        };
        m.validate()?;
        Ok(m)
    }

    /// Checks that every parameter is a finite number >= 0, the knee is at most 1 GiB and the
    /// cache step at least 1 byte.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in Self::PARAMS.iter().zip(self.params()) {
            if !v.is_finite() || v < 0.0 {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "cost model parameter {name} is {v}: every parameter must be a finite \
                         number >= 0"
                    ),
                ));
            }
        }
        if !self.knee.is_finite() || self.knee < 0.0 || self.knee > MAX_KNEE {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "cost model knee is {}: it must be a number of bytes from 0 to 1 GiB",
                    self.knee
                ),
            ));
        }
        if !(self.cache >= 1.0 && self.cache <= MAX_CACHE) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "cost model cache step is {}: it must be a number of bytes from 1 to 2^62 \
                     (2^62: no step)",
                    self.cache
                ),
            ));
        }
        Ok(())
    }

    /// The predicted time of `w`, us.
    pub fn time(&self, w: &Work) -> f64 {
        w.coefficients()
            .iter()
            .zip(self.params())
            .map(|(c, p)| c * p)
            .sum()
    }

    /// Of two schedules running side by side (two ranks of one collective), the one that
    /// takes longer at these parameters.
    pub fn slowest(&self, a: Work, b: Work) -> Work {
        if self.time(&b) > self.time(&a) { b } else { a }
    }

    /// How many ranks share each core on `p` ranks (1 when every rank has a core).
    fn crowding(&self, p: usize) -> f64 {
        if self.cores > 0.0 && p as f64 > self.cores {
            p as f64 / self.cores
        } else {
            1.0
        }
    }

    /// The pace of back-to-back calls of a collective on `p` ranks whose busiest rank does
    /// `busiest` and whose ranks do `total` together: `busiest` when every rank has a core;
    /// with more ranks than cores, the cores themselves are shared, so the total over the
    /// cores if that takes longer (see the [`model`](super) docs).
    pub fn paced(&self, p: usize, busiest: Work, total: Work) -> Work {
        let c = self.crowding(p);
        if c > 1.0 {
            self.slowest(busiest, total.scaled(c / p as f64))
        } else {
            busiest
        }
    }

    /// An empty schedule for `p` ranks, to describe an algorithm's work with.
    pub(crate) fn sched(&self, p: usize) -> Sched {
        Sched {
            chunk: chunk_bytes(p) as f64,
            knee: self.knee,
            cache: self.cache,
            w: Work::default(),
        }
    }
}

/// What an algorithm does (on one rank, on the busiest, or on all together), in the units
/// [`CostModel`] prices (see the [`model`](super) docs). Counts are real numbers: totals
/// scaled by the cores' share need not be whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Work {
    /// Synchronising rounds.
    pub rounds: f64,
    /// Chunks sent or received.
    pub chunks: f64,
    /// Chunks sent or received whose payload does not ride in the header line.
    pub spilled: f64,
    /// Bytes received, past the knee of each chunk.
    pub recv_bytes: f64,
    /// Bytes sent, past the knee of each chunk.
    pub sent_bytes: f64,
    /// Bytes sent or received within the knee of their chunk.
    pub small_bytes: f64,
    /// Bytes copied within the rank.
    pub local_bytes: f64,
    /// Bytes combined by the reduction.
    pub reduced_bytes: f64,
    /// Bytes sent, received or copied in messages of at least the cache step.
    pub far_bytes: f64,
}

impl Work {
    /// Every count times `f`.
    pub fn scaled(self, f: f64) -> Work {
        Work {
            rounds: self.rounds * f,
            chunks: self.chunks * f,
            spilled: self.spilled * f,
            recv_bytes: self.recv_bytes * f,
            sent_bytes: self.sent_bytes * f,
            small_bytes: self.small_bytes * f,
            local_bytes: self.local_bytes * f,
            reduced_bytes: self.reduced_bytes * f,
            far_bytes: self.far_bytes * f,
        }
    }

    /// The counts in the order of [`CostModel::PARAMS`]: the coefficients of a linear fit.
    pub fn coefficients(&self) -> [f64; 9] {
        [
            self.rounds,
            self.chunks,
            self.spilled,
            self.recv_bytes,
            self.sent_bytes,
            self.small_bytes,
            self.local_bytes,
            self.reduced_bytes,
            self.far_bytes,
        ]
    }
}

/// Builds a [`Work`] out of the channel operations an algorithm performs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sched {
    chunk: f64,
    knee: f64,
    cache: f64,
    w: Work,
}

impl Sched {
    fn chunks(&self, x: f64) -> f64 {
        (x / self.chunk).ceil().max(1.0)
    }

    /// `count` messages of `x` bytes, priced past the cache step if they are that long.
    fn far(&mut self, count: f64, x: f64) {
        if x >= self.cache {
            self.w.far_bytes += count * x;
        }
    }

    /// `count` messages of `x` bytes through the channels, in one direction.
    fn bytes(&mut self, count: f64, x: f64) -> f64 {
        let (count, x) = (count.max(0.0), x.max(0.0));
        let chunks = self.chunks(x);
        let small = x.min(self.knee * chunks);
        self.w.chunks += count * chunks;
        // Every chunk but the last is full; the last holds the rest.
        let last = x - (chunks - 1.0) * self.chunk;
        let inline = INLINE as f64;
        let spilled = (chunks - 1.0) * f64::from(u8::from(self.chunk > inline))
            + f64::from(u8::from(last > inline));
        self.w.spilled += count * spilled;
        self.w.small_bytes += count * small;
        self.far(count, x);
        count * (x - small)
    }

    /// `count` messages of `x` bytes received (copied out of the slots).
    pub(crate) fn recv(mut self, count: f64, x: f64) -> Self {
        let big = self.bytes(count, x);
        self.w.recv_bytes += big;
        self
    }

    /// `count` messages of `x` bytes received and combined into the destination.
    pub(crate) fn recv_reduce(self, count: f64, x: f64) -> Self {
        self.recv(count, x).reduce(count.max(0.0) * x)
    }

    /// `count` messages of `x` bytes sent (copied into a peer's slots).
    pub(crate) fn send(mut self, count: f64, x: f64) -> Self {
        let big = self.bytes(count, x);
        self.w.sent_bytes += big;
        self
    }

    /// `k` synchronising rounds.
    pub(crate) fn rounds(mut self, k: f64) -> Self {
        self.w.rounds += k.max(0.0);
        self
    }

    /// `x` bytes copied within the rank.
    pub(crate) fn local(mut self, x: f64) -> Self {
        self.w.local_bytes += x.max(0.0);
        self.far(1.0, x.max(0.0));
        self
    }

    /// `x` bytes combined (already at hand).
    pub(crate) fn reduce(mut self, x: f64) -> Self {
        self.w.reduced_bytes += x.max(0.0);
        self
    }

    /// This schedule followed by `w`.
    pub(crate) fn then(mut self, w: Work) -> Self {
        let a = &mut self.w;
        a.rounds += w.rounds;
        a.chunks += w.chunks;
        a.spilled += w.spilled;
        a.recv_bytes += w.recv_bytes;
        a.sent_bytes += w.sent_bytes;
        a.small_bytes += w.small_bytes;
        a.local_bytes += w.local_bytes;
        a.reduced_bytes += w.reduced_bytes;
        a.far_bytes += w.far_bytes;
        self
    }

    /// The counts.
    pub(crate) fn work(self) -> Work {
        self.w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_count_chunks_and_the_knee() {
        let m = CostModel {
            knee: 4096.0,
            ..CostModel::default()
        };
        let ch = chunk_bytes(2) as f64;
        let w = m.sched(2).recv(1.0, 3.0 * ch).work();
        assert_eq!(w.chunks, 3.0);
        assert_eq!(w.small_bytes, 3.0 * 4096.0);
        assert_eq!(w.recv_bytes, 3.0 * ch - 3.0 * 4096.0);
        let w = m
            .sched(2)
            .rounds(2.0)
            .send(2.0, 100.0)
            .recv_reduce(2.0, 100.0)
            .work();
        assert_eq!(
            (w.rounds, w.chunks, w.small_bytes, w.reduced_bytes),
            (2.0, 4.0, 400.0, 200.0)
        );
        let zero = m.sched(2).send(1.0, 0.0).work();
        assert_eq!(zero.chunks, 1.0, "an empty message is still one chunk");
        assert_eq!(zero.spilled, 0.0);
    }

    #[test]
    fn chunks_past_the_header_line_spill() {
        let m = CostModel::default();
        let ch = chunk_bytes(2) as f64;
        let spilled = |x: f64| m.sched(2).recv(1.0, x).work().spilled;
        assert_eq!(spilled(INLINE as f64), 0.0);
        assert_eq!(spilled(INLINE as f64 + 1.0), 1.0);
        assert_eq!(spilled(ch), 1.0);
        // Two full chunks and a last one that rides in its header line.
        assert_eq!(spilled(2.0 * ch + 8.0), 2.0);
        assert_eq!(spilled(3.0 * ch), 3.0);
        assert_eq!(m.sched(2).send(4.0, 100.0).work().spilled, 4.0);
    }

    #[test]
    fn messages_from_the_cache_step_on_pay_for_every_byte() {
        let m = CostModel {
            cache: 1024.0 * 1024.0,
            ..CostModel::default()
        };
        let far = |w: Work| w.far_bytes;
        let mib = 1024.0 * 1024.0;
        assert_eq!(
            far(m.sched(2).send(1.0, mib / 2.0).recv(1.0, mib / 2.0).work()),
            0.0
        );
        // Sent, received and copied bytes of long messages: all of them, not the excess.
        assert_eq!(
            far(m.sched(2).send(1.0, mib).recv(1.0, mib).work()),
            2.0 * mib
        );
        assert_eq!(far(m.sched(2).local(mib).send(3.0, 8.0).work()), mib);
        let none = CostModel::default();
        assert_eq!(none.cache, MAX_CACHE);
        assert_eq!(
            far(none.sched(2).send(1.0, 1e12).recv(1.0, 1e12).work()),
            0.0
        );
        // The price is added to the others.
        let priced = CostModel {
            beta_far: 1e-3,
            ..m
        };
        let w = m.sched(2).recv(1.0, mib).work();
        assert!((priced.time(&w) - m.time(&w) - 1e-3 * mib).abs() < 1e-6);
    }
}
