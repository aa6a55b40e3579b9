//! Seed 002's estimate formulas: the time of PingPong, Bcast, Allreduce and Allgather on the
//! K computer's Tofu network derived from the algorithms (sec. 4, eqs. 9-34), and the
//! effective peak B', latency t_L and half-performance length M_1/2 they imply (Table 1's
//! "estimate" rows).
//!
//! One file per operation ([`pingpong`], [`bcast`], [`allreduce`], [`allgather`]), each a
//! struct of the paper's parameters with typed fields; [`AnalyticModel`] wraps them so that a caller
//! (the `tca model` command) can build any of them from a [`Params`] set, and [`presets`]
//! holds the parameter sets of the paper's Tables 3-7 with the Table 1 cells they give.
//!
//! # The parameters (paper symbols)
//!
//! | symbol | meaning | unit |
//! |---|---|---|
//! | np, np1 x np2 x np3 | node shape (1, 2 or 3 dimensions) | nodes |
//! | B | bandwidth of all directions in use together | MB/s |
//! | m_B, m_R | pipeline segment of the broadcast / of the reduction | bytes |
//! | t_O | overhead of the algorithm decision (a one-element allreduce) | us |
//! | t_S | exchange of buffer addresses | us |
//! | L_S, L_H | software / hardware part of the MPI latency (L_S + L_H = 1.6 us) | us |
//! | T_C | reduction throughput of the CPU | MB/s |
//! | t_ctl | PingPong's control messages before a rendezvous transfer (Table 2) | us |
//!
//! MB/s is 10^6 bytes per second, i.e. bytes per microsecond, so `m / B` is in us.
//!
//! # Linear forms and regimes
//!
//! Every formula is piecewise linear in the message size M: inside one regime
//! `t(M) = t_L + volume · M / B'`, where `volume` is the data seed 002 counts per message
//! byte (1, 2 for Allreduce, np for Allgather) and M_1/2 = B' t_L / volume, in message
//! bytes (eqs. 4, 27; for the Allgather Table 1's M_1/2 is B' t_L / np). An [`Estimate`] is
//! that linear form for one [`Regime`], with the terms of the formula's max() that are in
//! force. `time_us` evaluates the full formula at any size.

pub mod allgather;
pub mod allreduce;
pub mod bcast;
pub mod pingpong;
mod presets;

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

pub use allgather::Allgather;
pub use allreduce::Allreduce;
pub use bcast::Bcast;
pub use pingpong::PingPong;
pub use presets::{Cells, Preset, preset, presets};

use crate::hockney::Hockney;

/// The operations seed 002 estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// IMB PingPong between neighbouring nodes (sec. 4.1).
    PingPong,
    /// Pipelined broadcast, Trinaryx3 (secs. 4.2.1-4.2.3, eqs. 9-19).
    Bcast,
    /// Reduce then broadcast, both pipelined (sec. 4.2.4, eqs. 20-27).
    Allreduce,
    /// 3D-multiring allgather (sec. 4.2.5, eqs. 29-34).
    Allgather,
}

impl Kind {
    /// Every kind, in the paper's order.
    pub const ALL: [Kind; 4] = [
        Kind::PingPong,
        Kind::Bcast,
        Kind::Allreduce,
        Kind::Allgather,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::PingPong => "pingpong",
            Kind::Bcast => "bcast",
            Kind::Allreduce => "allreduce",
            Kind::Allgather => "allgather",
        }
    }

    /// IMB's name of the benchmark that measures it.
    pub fn benchmark(self) -> &'static str {
        match self {
            Kind::PingPong => "PingPong",
            Kind::Bcast => "Bcast",
            Kind::Allreduce => "Allreduce",
            Kind::Allgather => "Allgather",
        }
    }

    /// The parameters its formula uses.
    pub fn params(self) -> &'static [Param] {
        use Param::*;
        match self {
            Kind::PingPong => &[Bandwidth, LS, LH, TCtl, Rendezvous],
            Kind::Bcast => &[Shape, Bandwidth, Segment, TO, TS, LS, LH],
            Kind::Allreduce => &[Shape, Bandwidth, Segment, ReduceSegment, TC, TO, TS, LS, LH],
            Kind::Allgather => &[Shape, Bandwidth, TO, TS, LS, LH],
        }
    }

    /// Its regimes, the one Table 1 reports first.
    pub fn regimes(self) -> &'static [Regime] {
        match self {
            Kind::PingPong => &[Regime::Rendezvous, Regime::Eager],
            Kind::Bcast | Kind::Allreduce => &[Regime::Pipelined, Regime::SingleSegment],
            Kind::Allgather => &[Regime::Long, Regime::Short],
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = EstimateError;
    fn from_str(s: &str) -> Result<Kind, EstimateError> {
        match s.to_ascii_lowercase().as_str() {
            "pingpong" => Ok(Kind::PingPong),
            "bcast" | "broadcast" => Ok(Kind::Bcast),
            "allreduce" => Ok(Kind::Allreduce),
            "allgather" => Ok(Kind::Allgather),
            _ => Err(EstimateError::UnknownName {
                what: "kind",
                name: s.to_string(),
                valid: Kind::ALL.iter().map(|k| k.name()).collect(),
            }),
        }
    }
}

/// Which piece of a piecewise-linear formula is in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Regime {
    /// PingPong below the rendezvous threshold: data sent at once, no control messages.
    Eager,
    /// PingPong from the rendezvous threshold (13 KiB on K): control messages first
    /// (Table 1's row).
    Rendezvous,
    /// Bcast/Allreduce with less than one segment per direction: nothing to pipeline (an
    /// extension of the paper's formulas, which start at one full segment).
    SingleSegment,
    /// Bcast/Allreduce with whole segments in the pipeline (Table 1's rows).
    Pipelined,
    /// Allgather below M = B (4 L_S - L_H): software latency paces the rings (eq. 30).
    Short,
    /// Allgather from M = B (4 L_S - L_H): transfers pace the rings (eq. 32).
    Long,
}

impl Regime {
    /// Every regime.
    pub const ALL: [Regime; 6] = [
        Regime::Eager,
        Regime::Rendezvous,
        Regime::SingleSegment,
        Regime::Pipelined,
        Regime::Short,
        Regime::Long,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Regime::Eager => "eager",
            Regime::Rendezvous => "rendezvous",
            Regime::SingleSegment => "single-segment",
            Regime::Pipelined => "pipelined",
            Regime::Short => "short",
            Regime::Long => "long",
        }
    }
}

impl fmt::Display for Regime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Regime {
    type Err = EstimateError;
    fn from_str(s: &str) -> Result<Regime, EstimateError> {
        let l = s.to_ascii_lowercase();
        Regime::ALL
            .into_iter()
            .find(|r| r.name() == l || (l == "single" && *r == Regime::SingleSegment))
            .ok_or_else(|| EstimateError::UnknownName {
                what: "regime",
                name: s.to_string(),
                valid: Regime::ALL.iter().map(|r| r.name()).collect(),
            })
    }
}

/// A node shape: np (1-D), np1 x np2 (2-D) or np1 x np2 x np3 (3-D), written `384`,
/// `64x6`, `8x6x8`.
///
/// A 1-D shape has at least 2 nodes; in 2-D and 3-D every dimension has at least 2 (a
/// dimension of 1 is a lower-dimensional shape, and the step counts of eqs. 12 and 16 assume
/// np_i > 1, eqs. 15 and 19).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    dims: Vec<u32>,
}

impl Shape {
    /// A shape of the given dimensions, checked.
    pub fn new(dims: Vec<u32>) -> Result<Shape, EstimateError> {
        let bad = |why: &str| EstimateError::Shape {
            input: dims
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join("x"),
            why: why.to_string(),
        };
        match dims.len() {
            0 => return Err(bad("a shape needs at least one dimension")),
            1 if dims[0] < 2 => return Err(bad("a 1-D shape needs at least 2 nodes")),
            1..=3 => {}
            _ => return Err(bad("seed 002's formulas are for 1, 2 or 3 dimensions")),
        }
        if dims.len() > 1 && dims.iter().any(|&n| n < 2) {
            return Err(bad(
                "every dimension of a 2-D or 3-D shape needs at least 2 nodes \
                 (a dimension of 1 is a lower-dimensional shape)",
            ));
        }
        Ok(Shape { dims })
    }

    /// The dimensions, np1 first.
    pub fn dims(&self) -> &[u32] {
        &self.dims
    }

    /// The number of dimensions d: the broadcast splits the message into d parts sent in d
    /// directions at once.
    pub fn d(&self) -> usize {
        self.dims.len()
    }

    /// All nodes, np = np1 np2 np3.
    pub fn nodes(&self) -> u64 {
        self.dims.iter().map(|&n| u64::from(n)).product()
    }

    /// Pipeline steps of the longest path of the (Trinaryx3) broadcast: np - 1 in 1-D
    /// (eq. 9); one ring per dimension then one step to the nodes not yet reached in 2-D and
    /// 3-D: (np1 - 1) + (np2 - 1) + 1 (eq. 12), (np1 - 1) + (np2 - 1) + (np3 - 1) + 1
    /// (eq. 16).
    pub fn bcast_steps(&self) -> u64 {
        let rings: u64 = self.dims.iter().map(|&n| u64::from(n) - 1).sum();
        if self.d() > 1 { rings + 1 } else { rings }
    }

    /// How the step count is written in the paper (`np - 1`, `np1 + np2 - 1`, ...).
    fn steps_expr(&self) -> &'static str {
        match self.d() {
            1 => "np - 1",
            2 => "np1 + np2 - 1",
            _ => "np1 + np2 + np3 - 2",
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s: Vec<String> = self.dims.iter().map(u32::to_string).collect();
        f.write_str(&s.join("x"))
    }
}

impl FromStr for Shape {
    type Err = EstimateError;
    fn from_str(s: &str) -> Result<Shape, EstimateError> {
        let mut dims = Vec::new();
        for part in s.split(['x', 'X', '×']) {
            let n: u32 = part.trim().parse().map_err(|_| EstimateError::Shape {
                input: s.to_string(),
                why: format!(
                    "`{}` is not a node count; write the shape like 384, 64x6 or 8x6x8",
                    part.trim()
                ),
            })?;
            dims.push(n);
        }
        Shape::new(dims).map_err(|e| match e {
            EstimateError::Shape { why, .. } => EstimateError::Shape {
                input: s.to_string(),
                why,
            },
            other => other,
        })
    }
}

impl Serialize for Shape {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A parameter of the formulas: its paper symbol, unit and `tca model estimate` option,
/// defined once here so that errors, help and output all name it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// Node shape.
    Shape,
    /// B.
    Bandwidth,
    /// m_B.
    Segment,
    /// m_R.
    ReduceSegment,
    /// t_O.
    TO,
    /// t_S.
    TS,
    /// L_S.
    LS,
    /// L_H.
    LH,
    /// T_C.
    TC,
    /// t_ctl (Table 2's total).
    TCtl,
    /// PingPong's rendezvous threshold.
    Rendezvous,
}

impl Param {
    /// The paper's symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            Param::Shape => "shape",
            Param::Bandwidth => "B",
            Param::Segment => "m_B",
            Param::ReduceSegment => "m_R",
            Param::TO => "t_O",
            Param::TS => "t_S",
            Param::LS => "L_S",
            Param::LH => "L_H",
            Param::TC => "T_C",
            Param::TCtl => "t_ctl",
            Param::Rendezvous => "rendezvous",
        }
    }

    /// The `tca model estimate` option that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Param::Shape => "--shape",
            Param::Bandwidth => "--bandwidth",
            Param::Segment => "--segment",
            Param::ReduceSegment => "--reduce-segment",
            Param::TO => "--t-o",
            Param::TS => "--t-s",
            Param::LS => "--l-s",
            Param::LH => "--l-h",
            Param::TC => "--t-c",
            Param::TCtl => "--t-ctl",
            Param::Rendezvous => "--rendezvous",
        }
    }

    /// Its unit.
    pub fn unit(self) -> &'static str {
        match self {
            Param::Shape => "nodes",
            Param::Bandwidth | Param::TC => "MB/s",
            Param::Segment | Param::ReduceSegment | Param::Rendezvous => "bytes",
            Param::TO | Param::TS | Param::LS | Param::LH | Param::TCtl => "us",
        }
    }
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.symbol(), self.flag())
    }
}

/// A set of parameter values, any of which may be unset: a preset, a user's overrides, or
/// both merged with [`Params::or`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Params {
    /// Node shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<Shape>,
    /// B, MB/s: the bandwidth of all directions in use together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b_mb_s: Option<f64>,
    /// m_B, bytes: broadcast pipeline segment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub m_b_bytes: Option<u64>,
    /// m_R, bytes: reduction pipeline segment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub m_r_bytes: Option<u64>,
    /// t_O, us: algorithm decision overhead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_o_us: Option<f64>,
    /// t_S, us: address exchange.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_s_us: Option<f64>,
    /// L_S, us: software part of the MPI latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub l_s_us: Option<f64>,
    /// L_H, us: hardware part of the MPI latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub l_h_us: Option<f64>,
    /// T_C, MB/s: reduction throughput.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_c_mb_s: Option<f64>,
    /// t_ctl, us: PingPong control messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_ctl_us: Option<f64>,
    /// PingPong rendezvous threshold, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rendezvous_bytes: Option<u64>,
}

impl Params {
    /// These values where set, `base`'s elsewhere (a user's overrides over a preset).
    pub fn or(&self, base: &Params) -> Params {
        Params {
            shape: self.shape.clone().or_else(|| base.shape.clone()),
            b_mb_s: self.b_mb_s.or(base.b_mb_s),
            m_b_bytes: self.m_b_bytes.or(base.m_b_bytes),
            m_r_bytes: self.m_r_bytes.or(base.m_r_bytes),
            t_o_us: self.t_o_us.or(base.t_o_us),
            t_s_us: self.t_s_us.or(base.t_s_us),
            l_s_us: self.l_s_us.or(base.l_s_us),
            l_h_us: self.l_h_us.or(base.l_h_us),
            t_c_mb_s: self.t_c_mb_s.or(base.t_c_mb_s),
            t_ctl_us: self.t_ctl_us.or(base.t_ctl_us),
            rendezvous_bytes: self.rendezvous_bytes.or(base.rendezvous_bytes),
        }
    }

    /// The value of `p` as text (`5000`, `8x6x8`), if set.
    pub fn get(&self, p: Param) -> Option<String> {
        match p {
            Param::Shape => self.shape.as_ref().map(Shape::to_string),
            Param::Bandwidth => self.b_mb_s.map(|v| v.to_string()),
            Param::Segment => self.m_b_bytes.map(|v| v.to_string()),
            Param::ReduceSegment => self.m_r_bytes.map(|v| v.to_string()),
            Param::TO => self.t_o_us.map(|v| v.to_string()),
            Param::TS => self.t_s_us.map(|v| v.to_string()),
            Param::LS => self.l_s_us.map(|v| v.to_string()),
            Param::LH => self.l_h_us.map(|v| v.to_string()),
            Param::TC => self.t_c_mb_s.map(|v| v.to_string()),
            Param::TCtl => self.t_ctl_us.map(|v| v.to_string()),
            Param::Rendezvous => self.rendezvous_bytes.map(|v| v.to_string()),
        }
    }
}

/// Why an estimate could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EstimateError {
    /// Parameters the formula needs were not given.
    #[error(
        "the {kind} estimate needs {}; give them or start from a preset (--preset)",
        list(params)
    )]
    Missing {
        /// The operation.
        kind: Kind,
        /// What is missing.
        params: Vec<Param>,
    },
    /// A parameter that the formula does not use.
    #[error("{param} does not enter the {kind} estimate (it uses {})", list(kind.params()))]
    Unused {
        /// The operation.
        kind: Kind,
        /// The stray parameter.
        param: Param,
    },
    /// A parameter value outside its domain.
    #[error("{param} = {value}: {why}")]
    Invalid {
        /// The parameter.
        param: Param,
        /// The value given.
        value: String,
        /// What it must be.
        why: &'static str,
    },
    /// A malformed or unusable node shape.
    #[error("shape `{input}`: {why}")]
    Shape {
        /// The shape given.
        input: String,
        /// What is wrong.
        why: String,
    },
    /// A regime the operation does not have.
    #[error("the {kind} estimate has no {regime} regime (it has {})", names(kind.regimes()))]
    NoSuchRegime {
        /// The operation.
        kind: Kind,
        /// The regime asked for.
        regime: Regime,
    },
    /// A message size that is negative or not a number.
    #[error("message size {0} B: must be a finite number of bytes >= 0")]
    BadSize(f64),
    /// A name (kind, regime, preset) that is not known.
    #[error("unknown {what} `{name}`; valid: {}", valid.join(", "))]
    UnknownName {
        /// Kind of name.
        what: &'static str,
        /// The name given.
        name: String,
        /// The names that exist.
        valid: Vec<&'static str>,
    },
}

fn list(ps: &[Param]) -> String {
    let v: Vec<String> = ps.iter().map(Param::to_string).collect();
    v.join(", ")
}

fn names(rs: &[Regime]) -> String {
    let v: Vec<&str> = rs.iter().map(|r| r.name()).collect();
    v.join(", ")
}

/// One term of a formula as it stands for the parameters given: which side of a max() is
/// in force, how many pipeline steps, and the like.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Term {
    /// The expression in the paper's symbols (`max(L_S, L_H + m_B/B)`).
    pub expr: String,
    /// Its value.
    pub value: f64,
    /// Unit of the value (`us`, `steps`, `bytes`, ...).
    pub unit: &'static str,
    /// Which branch is in force, or what the term stands for.
    pub note: String,
}

/// A size at which an operation switches regime: below `bytes` (strictly) `below`, from
/// `bytes` on `above`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Switch {
    /// The message size of the switch, bytes.
    pub bytes: f64,
    /// Regime below it.
    pub below: Regime,
    /// Regime from it on.
    pub above: Regime,
    /// The condition, in the paper's symbols.
    pub rule: String,
}

/// The linear form `t(M) = t_L + volume · M / B'` of one regime, and the Table 1 figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// The operation.
    pub kind: Kind,
    /// The regime this linear form belongs to.
    pub regime: Regime,
    /// Effective peak throughput B', MB/s, counting `volume` x message bytes per call.
    pub b_eff_mb_s: f64,
    /// Half-performance length, in message bytes: B' t_L / volume.
    pub m_half_bytes: f64,
    /// Latency t_L, us.
    pub t_l_us: f64,
    /// Data moved per message byte in seed 002's throughput (1; 2 for Allreduce; np for
    /// Allgather).
    pub volume: f64,
    /// The terms in force.
    pub terms: Vec<Term>,
}

impl Estimate {
    /// From the latency and the time per message byte of a linear form.
    fn linear(kind: Kind, regime: Regime, t_l_us: f64, us_per_byte: f64, volume: f64) -> Self {
        let b_eff_mb_s = volume / us_per_byte;
        Estimate {
            kind,
            regime,
            b_eff_mb_s,
            m_half_bytes: b_eff_mb_s * t_l_us / volume,
            t_l_us,
            volume,
            terms: Vec::new(),
        }
    }

    /// The time model per message (B = B' / volume), comparable with a fit of IMB times.
    pub fn hockney(&self) -> Hockney {
        Hockney {
            b_mb_s: self.b_eff_mb_s / self.volume,
            m_half_bytes: self.m_half_bytes,
        }
    }

    /// Time of one call by this linear form, us (exact inside the regime).
    pub fn time_us(&self, m_bytes: f64) -> f64 {
        self.hockney().time_us(m_bytes)
    }

    /// Throughput at `m_bytes` by this linear form, MB/s, counting `volume` x M.
    pub fn throughput_mb_s(&self, m_bytes: f64) -> f64 {
        self.hockney().throughput_mb_s(m_bytes) * self.volume
    }
}

/// Any of the four estimates, built from a [`Params`] set.
#[derive(Debug, Clone, PartialEq)]
pub enum AnalyticModel {
    /// PingPong.
    PingPong(PingPong),
    /// Bcast.
    Bcast(Bcast),
    /// Allreduce.
    Allreduce(Allreduce),
    /// Allgather.
    Allgather(Allgather),
}

impl AnalyticModel {
    /// The estimate of `kind` from `params`: every parameter the formula uses must be set,
    /// none that it does not use may be, and all must be in range.
    pub fn from_params(kind: Kind, params: &Params) -> Result<AnalyticModel, EstimateError> {
        let used = kind.params();
        let all = [
            Param::Shape,
            Param::Bandwidth,
            Param::Segment,
            Param::ReduceSegment,
            Param::TO,
            Param::TS,
            Param::LS,
            Param::LH,
            Param::TC,
            Param::TCtl,
            Param::Rendezvous,
        ];
        if let Some(&param) = all
            .iter()
            .find(|p| !used.contains(p) && params.get(**p).is_some())
        {
            return Err(EstimateError::Unused { kind, param });
        }
        let missing: Vec<Param> = used
            .iter()
            .copied()
            .filter(|p| params.get(*p).is_none())
            .collect();
        if !missing.is_empty() {
            return Err(EstimateError::Missing {
                kind,
                params: missing,
            });
        }
        let miss = |p: Param| EstimateError::Missing {
            kind,
            params: vec![p],
        };
        let f = |v: Option<f64>, p: Param| v.ok_or_else(|| miss(p));
        let u = |v: Option<u64>, p: Param| v.ok_or_else(|| miss(p));
        let shape = || params.shape.clone().ok_or_else(|| miss(Param::Shape));
        let m = match kind {
            Kind::PingPong => AnalyticModel::PingPong(PingPong {
                b_mb_s: f(params.b_mb_s, Param::Bandwidth)?,
                l_s_us: f(params.l_s_us, Param::LS)?,
                l_h_us: f(params.l_h_us, Param::LH)?,
                t_ctl_us: f(params.t_ctl_us, Param::TCtl)?,
                rendezvous_bytes: u(params.rendezvous_bytes, Param::Rendezvous)?,
            }),
            Kind::Bcast => AnalyticModel::Bcast(Bcast {
                shape: shape()?,
                b_mb_s: f(params.b_mb_s, Param::Bandwidth)?,
                m_b_bytes: u(params.m_b_bytes, Param::Segment)?,
                t_o_us: f(params.t_o_us, Param::TO)?,
                t_s_us: f(params.t_s_us, Param::TS)?,
                l_s_us: f(params.l_s_us, Param::LS)?,
                l_h_us: f(params.l_h_us, Param::LH)?,
            }),
            Kind::Allreduce => AnalyticModel::Allreduce(Allreduce {
                shape: shape()?,
                b_mb_s: f(params.b_mb_s, Param::Bandwidth)?,
                m_b_bytes: u(params.m_b_bytes, Param::Segment)?,
                m_r_bytes: u(params.m_r_bytes, Param::ReduceSegment)?,
                t_c_mb_s: f(params.t_c_mb_s, Param::TC)?,
                t_o_us: f(params.t_o_us, Param::TO)?,
                t_s_us: f(params.t_s_us, Param::TS)?,
                l_s_us: f(params.l_s_us, Param::LS)?,
                l_h_us: f(params.l_h_us, Param::LH)?,
            }),
            Kind::Allgather => AnalyticModel::Allgather(Allgather {
                shape: shape()?,
                b_mb_s: f(params.b_mb_s, Param::Bandwidth)?,
                t_o_us: f(params.t_o_us, Param::TO)?,
                t_s_us: f(params.t_s_us, Param::TS)?,
                l_s_us: f(params.l_s_us, Param::LS)?,
                l_h_us: f(params.l_h_us, Param::LH)?,
            }),
        };
        m.validate()?;
        Ok(m)
    }

    /// The operation.
    pub fn kind(&self) -> Kind {
        match self {
            AnalyticModel::PingPong(_) => Kind::PingPong,
            AnalyticModel::Bcast(_) => Kind::Bcast,
            AnalyticModel::Allreduce(_) => Kind::Allreduce,
            AnalyticModel::Allgather(_) => Kind::Allgather,
        }
    }

    /// Checks every parameter's range.
    pub fn validate(&self) -> Result<(), EstimateError> {
        match self {
            AnalyticModel::PingPong(m) => m.validate(),
            AnalyticModel::Bcast(m) => m.validate(),
            AnalyticModel::Allreduce(m) => m.validate(),
            AnalyticModel::Allgather(m) => m.validate(),
        }
    }

    /// Time of one call with a message of `m_bytes`, us, by the full formula.
    pub fn time_us(&self, m_bytes: f64) -> Result<f64, EstimateError> {
        match self {
            AnalyticModel::PingPong(m) => m.time_us(m_bytes),
            AnalyticModel::Bcast(m) => m.time_us(m_bytes),
            AnalyticModel::Allreduce(m) => m.time_us(m_bytes),
            AnalyticModel::Allgather(m) => m.time_us(m_bytes),
        }
    }

    /// The regime in force at `m_bytes`.
    pub fn regime_at(&self, m_bytes: f64) -> Result<Regime, EstimateError> {
        match self {
            AnalyticModel::PingPong(m) => m.regime_at(m_bytes),
            AnalyticModel::Bcast(m) => m.regime_at(m_bytes),
            AnalyticModel::Allreduce(m) => m.regime_at(m_bytes),
            AnalyticModel::Allgather(m) => m.regime_at(m_bytes),
        }
    }

    /// The linear form of `regime`.
    pub fn estimate(&self, regime: Regime) -> Result<Estimate, EstimateError> {
        match self {
            AnalyticModel::PingPong(m) => m.estimate(regime),
            AnalyticModel::Bcast(m) => m.estimate(regime),
            AnalyticModel::Allreduce(m) => m.estimate(regime),
            AnalyticModel::Allgather(m) => m.estimate(regime),
        }
    }

    /// The linear form in force at `m_bytes` (for an Allreduce whose two segment sizes
    /// differ, between them the phases are in different regimes, and this is exact there
    /// while [`AnalyticModel::estimate`] of either regime is not).
    pub fn estimate_at(&self, m_bytes: f64) -> Result<Estimate, EstimateError> {
        match self {
            AnalyticModel::Allreduce(m) => m.estimate_at(m_bytes),
            _ => self.estimate(self.regime_at(m_bytes)?),
        }
    }

    /// The sizes at which the regime changes, smallest first.
    pub fn switches(&self) -> Result<Vec<Switch>, EstimateError> {
        match self {
            AnalyticModel::PingPong(m) => m.switches(),
            AnalyticModel::Bcast(m) => m.switches(),
            AnalyticModel::Allreduce(m) => m.switches(),
            AnalyticModel::Allgather(m) => m.switches(),
        }
    }

    /// The parameters, all set.
    pub fn params(&self) -> Params {
        match self {
            AnalyticModel::PingPong(m) => Params {
                b_mb_s: Some(m.b_mb_s),
                l_s_us: Some(m.l_s_us),
                l_h_us: Some(m.l_h_us),
                t_ctl_us: Some(m.t_ctl_us),
                rendezvous_bytes: Some(m.rendezvous_bytes),
                ..Params::default()
            },
            AnalyticModel::Bcast(m) => Params {
                shape: Some(m.shape.clone()),
                b_mb_s: Some(m.b_mb_s),
                m_b_bytes: Some(m.m_b_bytes),
                t_o_us: Some(m.t_o_us),
                t_s_us: Some(m.t_s_us),
                l_s_us: Some(m.l_s_us),
                l_h_us: Some(m.l_h_us),
                ..Params::default()
            },
            AnalyticModel::Allreduce(m) => Params {
                shape: Some(m.shape.clone()),
                b_mb_s: Some(m.b_mb_s),
                m_b_bytes: Some(m.m_b_bytes),
                m_r_bytes: Some(m.m_r_bytes),
                t_c_mb_s: Some(m.t_c_mb_s),
                t_o_us: Some(m.t_o_us),
                t_s_us: Some(m.t_s_us),
                l_s_us: Some(m.l_s_us),
                l_h_us: Some(m.l_h_us),
                ..Params::default()
            },
            AnalyticModel::Allgather(m) => Params {
                shape: Some(m.shape.clone()),
                b_mb_s: Some(m.b_mb_s),
                t_o_us: Some(m.t_o_us),
                t_s_us: Some(m.t_s_us),
                l_s_us: Some(m.l_s_us),
                l_h_us: Some(m.l_h_us),
                ..Params::default()
            },
        }
    }
}

// Checks shared by the four operations.

/// A bandwidth: finite and positive.
fn check_rate(param: Param, v: f64) -> Result<(), EstimateError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(EstimateError::Invalid {
            param,
            value: v.to_string(),
            why: "must be a positive number of MB/s",
        })
    }
}

/// A time: finite and not negative.
fn check_time(param: Param, v: f64) -> Result<(), EstimateError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(EstimateError::Invalid {
            param,
            value: v.to_string(),
            why: "must be a number of microseconds >= 0",
        })
    }
}

/// The four software and link times every network estimate takes (t_O, t_S, L_S, L_H).
fn check_link_times(t_o: f64, t_s: f64, l_s: f64, l_h: f64) -> Result<(), EstimateError> {
    check_time(Param::TO, t_o)?;
    check_time(Param::TS, t_s)?;
    check_time(Param::LS, l_s)?;
    check_time(Param::LH, l_h)
}

/// A segment: at least one byte.
fn check_segment(param: Param, v: u64) -> Result<(), EstimateError> {
    if v > 0 {
        Ok(())
    } else {
        Err(EstimateError::Invalid {
            param,
            value: v.to_string(),
            why: "a pipeline segment must be at least 1 byte",
        })
    }
}

/// A message size: finite and not negative.
fn check_size(m: f64) -> Result<(), EstimateError> {
    if m.is_finite() && m >= 0.0 {
        Ok(())
    } else {
        Err(EstimateError::BadSize(m))
    }
}

/// `L_S` in 1-D, `2L_S` in 2-D, ...: the software latency paid once per direction.
fn times(d: usize, sym: &str) -> String {
    if d == 1 {
        sym.to_string()
    } else {
        format!("{d}{sym}")
    }
}

/// `B` in 1-D, `(B/2)` in 2-D, ...: the bandwidth of one direction.
fn per_dir(d: usize, sym: &str) -> String {
    if d == 1 {
        sym.to_string()
    } else {
        format!("({sym}/{d})")
    }
}

#[cfg(test)]
mod tests;
