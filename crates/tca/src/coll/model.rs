//! Cost models of the collective algorithms, their calibration file, and the per-communicator
//! decision table that [`Algorithm`]-selection reads on every call.
//!
//! # What is modelled
//!
//! Every algorithm describes what it does as a [`Work`]: the counts of the things the channel
//! layer (`channel`) spends time on, on the rank that limits the call. [`CostModel`] prices each
//! count, so a prediction is the dot product `Work · CostModel`, linear in the parameters:
//!
//! | count | parameter | what it is on shared memory |
//! |---|---|---|
//! | `rounds` | `delta` (us) | a synchronising round: the rank waits for a message whose sender is waiting for this rank's message (an exchange step); one cache line each way plus the wake-up |
//! | `chunks` | `alpha` (us) | one chunk sent or received: credit check, header line, sequence word |
//! | `spilled` | `alpha_spill` (us) | a chunk whose payload does not ride in its header line (more than `channel::INLINE` bytes): at least one more line transfer, paid in latency because nothing overlaps the first miss |
//! | `recv_bytes` | `beta` (us/B) | a byte copied out of a slot by its receiver, past the first `knee` bytes of its chunk |
//! | `sent_bytes` | `beta_send` (us/B) | a byte copied into a peer's slot by its sender, past the first `knee` bytes |
//! | `small_bytes` | `beta_small` (us/B) | the first `knee` bytes of each chunk, sent or received: small copies stay in the first-level caches and overlap with the line transfers, so they are cheaper per byte than long ones |
//! | `local_bytes` | `beta_local` (us/B) | a byte copied inside the rank (staging buffers, the typed front end's copy of the send buffer) |
//! | `reduced_bytes` | `gamma` (us/B) | a byte combined with the reduction operation |
//! | `far_bytes` | `beta_far` (us/B) | a byte of a message of at least `cache` bytes, sent, received or copied, on top of its other prices: such a message, with its partner's, no longer fits the caches the ranks share, so its bytes come from farther away |
//!
//! Messages longer than a chunk (`chunk_bytes(p)`) stream through the channel's slots, so a
//! message of `x` bytes is `ceil(x / chunk)` chunks and pays `alpha` and the knee per chunk.
//! `knee` and `cache` are not fitted but chosen: calibration fits the linear parameters at
//! each candidate pair and keeps the pair that fits best. The cache step is per message, not
//! per call, because that is what the measurements show: at 2 ranks on the development
//! machine a 4 MiB exchange (recursive-doubling allgather, dissemination allreduce) costs
//! 25-50% more per byte than the same bytes moved as 2 MiB halves (Rabenseifner), while a
//! 4 MiB one-way stream (broadcast) does not slow down; being per collective, the fit finds
//! that threshold for each (and none for broadcast).
//! The `Cost:` line that opens each algorithm's file is the textbook α-β-γ cost; its `work`
//! function is the schedule this model prices.
//!
//! **What time is predicted.** The time per call of back-to-back calls, as IMB and
//! `tca bench` measure it. In an exchange every rank waits for its partners each round, so the
//! rounds add up. In a rooted collective whose data flows one way (broadcast, scatter,
//! gather, reduce) nobody waits for anything that depends on its own message, so consecutive
//! calls overlap up to the channels' credits, and the time per call is the work of the
//! busiest rank: the root, or the rank that receives and forwards the most, whichever is
//! slower at the model's parameters ([`CostModel::slowest`]). That makes those models a maximum
//! of linear forms, linear again once the slower side is known, which is how calibration
//! fits them (`tca_model::linear::fit_piecewise`).
//!
//! **More ranks than cores.** Then the ranks' work competes for the cores, and the pace is
//! the work of all ranks spread over the cores, when that is longer than the busiest rank's
//! ([`CostModel::paced`]): each algorithm states its total as well. For an exchange, where every
//! rank runs the same schedule, that is p/cores times one rank's; for a rooted collective it
//! is what separates the algorithms (at 8 ranks on 2 cores an 8-byte broadcast took 3.5 us,
//! where its busiest rank alone predicts 1.4 us). The cores are those recorded with the
//! rank count's calibration ([`RankModels::cores`]).
//!
//! # Where the parameters come from
//!
//! Built-in defaults ([`CostModel::default`]) measured on the development machine, unless a
//! calibration file exists: `tca model calibrate` measures every algorithm with a short
//! `tca bench` run, fits the parameters per rank count, per collective and over all
//! collectives together (non-negative least squares on relative errors), and writes a
//! [`Calibration`] as JSON to [`default_path`] (`$TCA_MODEL_FILE`, else
//! `$XDG_CONFIG_HOME/tca/model.json`, else `~/.config/tca/model.json`). The library reads it
//! once per process, at the first communicator ([`active`]); a malformed file is reported
//! once on stderr and the defaults are used. `TCA_MODEL_FILE=none` forces the defaults.
//!
//! Parameters are fitted per collective because only algorithms of one collective are ever
//! compared with each other, and what the shared counts cost differs between collectives in
//! ways the counts do not capture (a reduction's f32 kernel against a byte copy, whose buffers
//! stay in cache, which side of a one-way stream is slower); the fit over all collectives is
//! the fallback for a collective the calibration did not measure. Parameters are fitted per
//! rank count because with more ranks than cores every count costs more (the ranks share
//! cores and wait on each other through the scheduler); a communicator uses the rank count
//! measured nearest to its size ([`Calibration::nearest`]).
//!
//! # Selection
//!
//! [`Table`] holds, per collective and per quarter-octave size bucket, the supported
//! algorithm with the lowest predicted time at the bucket's lower edge (exact at powers of
//! two). A communicator builds its table once, for its size, when it is created, and takes
//! rank 0's (one small broadcast), so that members that read different files still agree; a
//! call looks its algorithm up in O(1), so no model is evaluated and no file is read on the
//! hot path. A forced algorithm (`TCA_COLL_<OP>`, `Comm::force`) still comes first.
//!
//! # What the models leave out
//!
//! Contention (flat algorithms' p - 1 streams into one rank), cache capacity beyond the one
//! per-message step, locality, and the latency of one isolated call. So some algorithms are never predicted to win: the ring
//! allgather, the ring reduce_scatter and the pairwise alltoall send the same messages as
//! Bruck's allgather or the one-round flat variants in more rounds; with data flowing one
//! way, a pipeline's middle rank does no more than binomial's busiest rank (a tie that
//! table order gives to binomial). They stay in the table for forcing and for the regimes the
//! models do not describe. With more ranks than cores, the models see the scheduler through
//! the total work over the cores and through parameters fitted at that rank count.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::channel::{INLINE, chunk_bytes};
use super::registry::{ALGORITHMS, Algorithm, Collective};
use super::subtree;
use crate::env;
use crate::error::{Error, ErrorKind, Result};

/// Parameters of the cost model (see the module docs): times in microseconds, per unit of
/// each [`Work`] count, all finite and >= 0.
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
    /// [`Calibration::model`] sets it from the rank count's entry ([`RankModels::cores`]).
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

    /// Of two schedules running side by side (the root and the busiest other rank of a
    /// rooted collective), the one that takes longer at these parameters.
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
    /// cores if that takes longer (see the module docs).
    pub fn paced(&self, p: usize, busiest: Work, total: Work) -> Work {
        let c = self.crowding(p);
        if c > 1.0 {
            self.slowest(busiest, total.scaled(c / p as f64))
        } else {
            busiest
        }
    }

    /// A binomial scatter (`outward`: blocks flow from the root) or gather (the mirror) of
    /// `n`-byte blocks on `p` ranks. Data flows one way: the busier of the root (its p + 1
    /// staging copies, one message per subtree) and its first child (its block, its subtree's
    /// message from or to the root, one per subtree of its own); in all, the root's copies and
    /// every other rank v's block and subtree message (min(lowest set bit of v, p - v)
    /// blocks), sent once and received once.
    pub(crate) fn binomial_blocks(&self, p: usize, n: usize, outward: bool) -> Work {
        let nf = n as f64;
        // The message to or from relative rank v: its subtree's blocks.
        let msg = |v: usize| subtree(p, v).1 as f64 * nf;
        let mut root = self.sched(p).local((p + 1) as f64 * nf);
        let mut k = 1;
        while k < p {
            root = root.message(outward, msg(k));
            k <<= 1;
        }
        let mut child = self.sched(p).local(nf);
        if p > 1 {
            // The root's last child, the one with the largest subtree.
            let h = 1usize << (usize::BITS - 1 - (p - 1).leading_zeros());
            child = child.message(!outward, msg(h));
            let mut k = 1;
            while k < h && h + k < p {
                child = child.message(outward, msg(h + k));
                k <<= 1;
            }
        }
        let mut total = self.sched(p).local((p + 1) as f64 * nf);
        for v in 1..p {
            total = total.local(nf).send(1.0, msg(v)).recv(1.0, msg(v));
        }
        self.paced(p, self.slowest(root.work(), child.work()), total.work())
    }

    /// An empty schedule for `p` ranks, to describe an algorithm's work with.
    pub(crate) fn sched(&self, p: usize) -> Sched {
        Sched {
            chunk: chunk_bytes(p) as f64,
            knee: self.knee,
            cache: self.cache,
            crowding: self.crowding(p),
            w: Work::default(),
        }
    }
}

/// What an algorithm does on the rank that limits it, in the units [`CostModel`] prices (see the
/// module docs). Counts are real numbers: a block of n/p bytes need not be whole.
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
    crowding: f64,
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

    /// `k` exchange rounds of `x` bytes each way (send and receive with a partner).
    pub(crate) fn exchange(self, k: f64, x: f64) -> Self {
        self.rounds(k).send(k, x).recv(k, x)
    }

    /// [`Sched::exchange`] with the received bytes combined.
    pub(crate) fn exchange_reduce(self, k: f64, x: f64) -> Self {
        self.rounds(k).send(k, x).recv_reduce(k, x)
    }

    /// `x` bytes copied within the rank.
    pub(crate) fn local(mut self, x: f64) -> Self {
        self.w.local_bytes += x.max(0.0);
        self.far(1.0, x.max(0.0));
        self
    }

    /// One message of `x` bytes, sent if `out`, else received.
    fn message(self, out: bool, x: f64) -> Self {
        if out {
            self.send(1.0, x)
        } else {
            self.recv(1.0, x)
        }
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

    /// The pace of a collective whose every rank runs this schedule ([`CostModel::paced`] with
    /// p times these counts as the total).
    pub(crate) fn symmetric(self) -> Work {
        self.w.scaled(self.crowding)
    }
}

// ---- the calibration file ---------------------------------------------------------------------

/// `format` of a calibration file.
pub const FORMAT: &str = "tca cost model";
/// `version` of the calibration files this tca writes and reads.
pub const VERSION: u32 = 1;

/// How well a fitted model reproduces its measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quality {
    /// Measurements fitted.
    pub points: usize,
    /// Root mean square of the relative errors.
    pub rms_rel_err: f64,
    /// Largest relative error (signed).
    pub worst_rel_err: f64,
    /// Where the largest error is: "algorithm at bytes".
    pub worst_at: String,
}

/// A fitted model and its fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fitted {
    /// The parameters.
    pub model: CostModel,
    /// How well they fit (absent in hand-written files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<Quality>,
}

/// The models of one rank count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankModels {
    /// The communicator size they were measured at.
    pub ranks: u32,
    /// Cores of the machine when measured (more ranks than cores: oversubscribed).
    #[serde(default)]
    pub cores: u32,
    /// Fitted over every collective: the model of a collective not in `collectives`.
    pub all: Fitted,
    /// Fitted per collective, by [`Collective::name`].
    #[serde(default)]
    pub collectives: BTreeMap<String, Fitted>,
}

/// A calibration file: the models of one machine, per rank count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`] when written by this tca.
    pub version: u32,
    /// The machine it was measured on.
    #[serde(default)]
    pub machine: String,
    /// When (RFC 3339).
    #[serde(default)]
    pub date: String,
    /// How it was measured (the command line).
    #[serde(default)]
    pub command: String,
    /// The models, one entry per rank count.
    pub ranks: Vec<RankModels>,
}

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, msg)
}

impl Calibration {
    /// The built-in models: [`CostModel::default`] for every collective and rank count.
    pub fn builtin() -> Calibration {
        Calibration {
            format: FORMAT.into(),
            version: VERSION,
            machine: String::new(),
            date: String::new(),
            command: "built-in defaults".into(),
            ranks: vec![RankModels {
                ranks: 2,
                cores: 0,
                all: Fitted {
                    model: CostModel::default(),
                    fit: None,
                },
                collectives: BTreeMap::new(),
            }],
        }
    }

    /// Checks the format, the version and every parameter; the error says where.
    pub fn validate(&self) -> Result<()> {
        if self.format != FORMAT {
            return Err(invalid(format!(
                "format is {:?}, not {FORMAT:?}: not a tca cost model file",
                self.format
            )));
        }
        if self.version != VERSION {
            return Err(invalid(format!(
                "version {} is not the version this tca reads ({VERSION}); recalibrate with \
                 `tca model calibrate`",
                self.version
            )));
        }
        if self.ranks.is_empty() {
            return Err(invalid("no rank counts: the file holds no models".into()));
        }
        for (i, r) in self.ranks.iter().enumerate() {
            if r.ranks == 0 {
                return Err(invalid(format!(
                    "entry {i} has ranks = 0: a rank count must be at least 1"
                )));
            }
            if self.ranks[..i].iter().any(|q| q.ranks == r.ranks) {
                return Err(invalid(format!("rank count {} appears twice", r.ranks)));
            }
            r.all
                .model
                .validate()
                .map_err(|e| invalid(format!("ranks {}, all collectives: {e}", r.ranks)))?;
            for (name, f) in &r.collectives {
                if Collective::from_name(name).is_none() {
                    let valid: Vec<&str> = Collective::ALL.iter().map(|c| c.name()).collect();
                    return Err(invalid(format!(
                        "ranks {}: unknown collective {name:?} (valid: {})",
                        r.ranks,
                        valid.join(", ")
                    )));
                }
                f.model
                    .validate()
                    .map_err(|e| invalid(format!("ranks {}, {name}: {e}", r.ranks)))?;
            }
        }
        Ok(())
    }

    /// Parses and validates the JSON text of a calibration file.
    pub fn from_json(text: &str) -> Result<Calibration> {
        let c: Calibration = serde_json::from_str(text)
            .map_err(|e| invalid(format!("not a valid cost model file: {e}")))?;
        c.validate()?;
        Ok(c)
    }

    /// The file's JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a calibration serialises") + "\n"
    }

    /// Reads and validates a calibration file; errors name the file.
    pub fn load(path: &Path) -> Result<Calibration> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("cannot read cost model file {}: {e}", path.display()),
            )
        })?;
        Self::from_json(&text)
            .map_err(|e| invalid(format!("cost model file {}: {e}", path.display())))
    }

    /// Validates and writes the file (creating its directory), atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.validate()?;
        let io = |doing: String, e: std::io::Error| {
            Error::new(ErrorKind::InvalidArgument, format!("{doing}: {e}"))
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| io(format!("cannot create {}", dir.display()), e))?;
        }
        let tmp = path.with_extension("json.part");
        std::fs::write(&tmp, self.to_json())
            .map_err(|e| io(format!("cannot write {}", tmp.display()), e))?;
        std::fs::rename(&tmp, path).map_err(|e| io(format!("cannot write {}", path.display()), e))
    }

    /// The entry measured nearest to `p` ranks (by ratio; ties go to the smaller count).
    pub fn nearest(&self, p: usize) -> Option<&RankModels> {
        let lp = (p.max(1) as f64).log2();
        self.ranks.iter().min_by(|a, b| {
            let da = ((a.ranks as f64).log2() - lp).abs();
            let db = ((b.ranks as f64).log2() - lp).abs();
            da.total_cmp(&db).then(a.ranks.cmp(&b.ranks))
        })
    }

    /// The model of `collective` on `p` ranks: the nearest rank count's model of that
    /// collective, else its model of all collectives, else the defaults.
    pub fn model(&self, collective: Collective, p: usize) -> CostModel {
        self.nearest(p)
            .map_or_else(CostModel::default, |r| CostModel {
                cores: f64::from(r.cores),
                ..r.collectives
                    .get(collective.name())
                    .map_or(r.all.model, |f| f.model)
            })
    }

    /// The predicted time of `alg` on `p` ranks and `bytes` bytes (its collective's meaning
    /// of bytes, see [`Algorithm::cost`]), us.
    pub fn predict(&self, alg: &Algorithm, p: usize, bytes: usize) -> f64 {
        (alg.cost)(&self.model(alg.collective, p), p, bytes)
    }

    /// The supported algorithm of `collective` with the lowest predicted time on `p` ranks
    /// and `bytes` bytes. Times within a relative 1e-9 (which rounding can tell apart) are
    /// equal; among equals, the one whose busiest rank has the least to do (with more ranks
    /// than cores several one-way broadcasts predict the same total over the cores, and the
    /// shorter critical path is what sets them apart), then the first in table order.
    pub fn choose(&self, collective: Collective, p: usize, bytes: usize) -> &'static Algorithm {
        let m = self.model(collective, p);
        let own_cores = CostModel { cores: 0.0, ..m };
        let below = |a: f64, b: f64| a < b * (1.0 - 1e-9);
        let mut best: Option<(&'static Algorithm, f64, f64)> = None;
        for a in collective.algorithms().filter(|a| (a.supports)(p)) {
            let t = (a.cost)(&m, p, bytes);
            let busiest = (a.cost)(&own_cores, p, bytes);
            if best.is_none_or(|(_, bt, bb)| below(t, bt) || (!below(bt, t) && below(busiest, bb)))
            {
                best = Some((a, t, busiest));
            }
        }
        best.map(|(a, _, _)| a)
            .or_else(|| collective.algorithms().next())
            .expect("every collective has an algorithm")
    }
}

// ---- the active model -------------------------------------------------------------------------

/// Where the active model came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// The built-in defaults: no calibration file.
    Builtin,
    /// The built-in defaults, because `TCA_MODEL_FILE` says so (`none`).
    Disabled,
    /// A calibration file.
    File(PathBuf),
    /// The built-in defaults, because the file could not be used (the warning printed).
    Fallback(PathBuf, String),
}

/// The models the library selects with, and where they came from.
#[derive(Debug, Clone)]
pub struct Active {
    /// The models.
    pub calibration: Calibration,
    /// Their source.
    pub source: Source,
}

impl Active {
    /// One line saying which models are in use.
    pub fn describe(&self) -> String {
        let c = &self.calibration;
        let ranks: Vec<String> = c.ranks.iter().map(|r| r.ranks.to_string()).collect();
        match &self.source {
            Source::Builtin => {
                "built-in default cost model (no calibration file; run `tca model calibrate`)"
                    .into()
            }
            Source::Disabled => format!("built-in default cost model ({}=none)", env::MODEL_FILE),
            Source::File(p) => format!(
                "cost model calibrated {} on {} for {} ranks ({})",
                c.date,
                c.machine,
                ranks.join(", "),
                p.display()
            ),
            Source::Fallback(p, e) => format!(
                "built-in default cost model ({} unusable: {e})",
                p.display()
            ),
        }
    }
}

/// Where the calibration file is looked for: `$TCA_MODEL_FILE` if set (`None` if it is
/// `none` or empty), else `$XDG_CONFIG_HOME/tca/model.json`, else
/// `$HOME/.config/tca/model.json`.
pub fn default_path() -> Option<PathBuf> {
    model_path(
        std::env::var_os(env::MODEL_FILE).as_deref(),
        std::env::var_os("XDG_CONFIG_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
}

/// [`default_path`] from the values of `TCA_MODEL_FILE`, `XDG_CONFIG_HOME` and `HOME`.
pub fn model_path(
    model_file: Option<&std::ffi::OsStr>,
    xdg_config_home: Option<&std::ffi::OsStr>,
    home: Option<&std::ffi::OsStr>,
) -> Option<PathBuf> {
    if let Some(v) = model_file {
        if v.is_empty() || v == "none" {
            return None;
        }
        return Some(PathBuf::from(v));
    }
    let xdg = xdg_config_home.filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = xdg.or_else(|| {
        home.filter(|v| !v.is_empty())
            .map(|h| PathBuf::from(h).join(".config"))
    })?;
    Some(base.join("tca").join("model.json"))
}

/// The models at `path` (or the defaults when there is no file), with where they came from.
/// Never fails: a file that cannot be used gives [`Source::Fallback`] and the defaults.
pub fn load_or_default(path: Option<&Path>) -> Active {
    let Some(path) = path else {
        return Active {
            calibration: Calibration::builtin(),
            source: Source::Disabled,
        };
    };
    if !path.exists() {
        return Active {
            calibration: Calibration::builtin(),
            source: Source::Builtin,
        };
    }
    match Calibration::load(path) {
        Ok(c) => Active {
            calibration: c,
            source: Source::File(path.to_path_buf()),
        },
        Err(e) => Active {
            calibration: Calibration::builtin(),
            source: Source::Fallback(path.to_path_buf(), e.to_string()),
        },
    }
}

/// The models this process selects with, read once at first use (the first communicator):
/// see the module docs. Never fails; see [`warn_once`] for a file that could not be used.
pub fn active() -> &'static Active {
    static ACTIVE: OnceLock<Active> = OnceLock::new();
    ACTIVE.get_or_init(|| match default_path() {
        Some(p) => load_or_default(Some(&p)),
        None if std::env::var_os(env::MODEL_FILE).is_some() => load_or_default(None),
        None => Active {
            calibration: Calibration::builtin(),
            source: Source::Builtin,
        },
    })
}

/// Prints, once per process, why the calibration file in force could not be used (if it
/// could not): communicators call it on their rank 0, so a job reports it once per job rather
/// than once per rank.
pub fn warn_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if let Source::Fallback(_, e) = &active().source {
        ONCE.call_once(|| eprintln!("tca: warning: {e}; using the built-in cost model"));
    }
}

// ---- the decision table -----------------------------------------------------------------------

/// Size buckets per octave.
const SUB: usize = 4;
/// Buckets: 0 bytes, then four per power of two up to 2^64.
const BUCKETS: usize = 1 + 64 * SUB;

/// The bucket of `bytes`: 0 for 0; otherwise the octave (bit length) and the next two bits.
fn bucket(bytes: usize) -> usize {
    let bits = (usize::BITS - bytes.leading_zeros()) as usize;
    if bits == 0 {
        return 0;
    }
    let sub = if bits > 2 {
        (bytes >> (bits - 3)) & (SUB - 1)
    } else {
        // 1, 2 and 3 bytes: their own buckets.
        if bits == 2 { bytes & 1 } else { 0 }
    };
    1 + (bits - 1) * SUB + sub
}

/// The smallest size in bucket `b` (the size the table decides at).
fn bucket_floor(b: usize) -> usize {
    if b == 0 {
        return 0;
    }
    let (octave, sub) = ((b - 1) / SUB, (b - 1) % SUB);
    match octave {
        0 => 1,
        1 => 2 + (sub & 1),
        _ => (1usize << octave) | (sub << (octave - 2)),
    }
}

/// Per collective and size bucket, the index in [`ALGORITHMS`] of the algorithm to use: built
/// once per communicator (see the module docs).
#[derive(Clone)]
pub struct Table {
    /// `choice[c * BUCKETS + b]`: collective `c` (its index in [`Collective::ALL`]), bucket `b`.
    choice: Box<[u8]>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").finish_non_exhaustive()
    }
}

impl Table {
    /// The table of `calibration` for `p` ranks.
    pub fn new(calibration: &Calibration, p: usize) -> Table {
        assert!(
            ALGORITHMS.len() <= u8::MAX as usize,
            "algorithm index fits a byte"
        );
        let mut choice = vec![0u8; Collective::ALL.len() * BUCKETS].into_boxed_slice();
        for c in Collective::ALL {
            for b in 0..BUCKETS {
                let alg = calibration.choose(c, p, bucket_floor(b));
                choice[c as usize * BUCKETS + b] = ALGORITHMS
                    .iter()
                    .position(|a| std::ptr::eq(a, alg))
                    .expect("chosen from the table")
                    as u8;
            }
        }
        Table { choice }
    }

    /// The algorithm for `collective` on `bytes` bytes.
    #[inline]
    pub fn get(&self, collective: Collective, bytes: usize) -> &'static Algorithm {
        &ALGORITHMS[self.choice[collective as usize * BUCKETS + bucket(bytes)] as usize]
    }

    /// The table as bytes, to make every member's table rank 0's (a communicator broadcasts
    /// it when it is created, so that ranks that read different model files still agree).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.choice
    }

    /// Checks a table received from another rank: every entry an algorithm of its row's
    /// collective.
    pub(crate) fn check(&self) -> Result<()> {
        for c in Collective::ALL {
            for b in 0..BUCKETS {
                let i = self.choice[c as usize * BUCKETS + b] as usize;
                if ALGORITHMS.get(i).is_none_or(|a| a.collective != c) {
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        format!(
                            "the algorithm table received from rank 0 names algorithm {i} for \
                             {}: the ranks run different builds of tca",
                            c.name()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_floors_land_in_them() {
        let mut xs: Vec<usize> = (0..5000).collect();
        xs.extend((12..64).flat_map(|k| [(1usize << k) - 1, 1 << k, (1 << k) + 1, 3 << (k - 2)]));
        xs.push(usize::MAX);
        xs.sort_unstable();
        let mut last = 0;
        for x in xs {
            let b = bucket(x);
            assert!(b < BUCKETS && b >= last, "{x}");
            last = b;
            let f = bucket_floor(b);
            assert!(f <= x && bucket(f) == b, "{x}: bucket {b}, floor {f}");
        }
        // Powers of two are bucket floors: the table decides exactly there.
        for k in 0..63 {
            assert_eq!(bucket_floor(bucket(1 << k)), 1 << k);
        }
    }

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
        let w = m.sched(2).exchange_reduce(2.0, 100.0).work();
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
        assert_eq!(far(m.sched(2).exchange(1.0, mib / 2.0).work()), 0.0);
        // Sent, received and copied bytes of long messages: all of them, not the excess.
        assert_eq!(far(m.sched(2).exchange(1.0, mib).work()), 2.0 * mib);
        assert_eq!(far(m.sched(2).local(mib).send(3.0, 8.0).work()), mib);
        let none = CostModel::default();
        assert_eq!(none.cache, MAX_CACHE);
        assert_eq!(far(none.sched(2).exchange(1.0, 1e12).work()), 0.0);
        // The price is added to the others.
        let priced = CostModel {
            beta_far: 1e-3,
            ..m
        };
        let w = m.sched(2).recv(1.0, mib).work();
        assert!((priced.time(&w) - m.time(&w) - 1e-3 * mib).abs() < 1e-6);
    }
}
