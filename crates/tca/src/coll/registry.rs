//! The one table of collective algorithms.
//!
//! Each entry: name, collective, function (one `async` description in three forms: blocking,
//! started, counted) and the rank counts it supports. Its cost model is counted from the
//! description ([`Algorithm::work`]: what it does, as a [`Work`], priced by a [`CostModel`];
//! see [`model`](super::model) and `count`). Selection, `TCA_COLL_<OP>=<name>`,
//! [`Comm::force`](super::Comm::force), the tests and the benchmarks all enumerate this table,
//! so an algorithm added here is everywhere at once.
//!
//! [`auto`] picks the supported algorithm with the lowest predicted time under the models the
//! library loaded (a calibration file, or the defaults); a communicator precomputes those
//! choices per size bucket when it is created ([`model::Table`](super::model::Table)).

use super::{Comm, Reducer};
use super::{
    allgather, allreduce, alltoall, barrier, bcast, gather, reduce, reduce_scatter, scatter,
};
use std::pin::Pin;

use super::count::{Count, Tally};
use super::step::{Block, Start, Steps, run_blocking};

use crate::error::{Error, ErrorKind, Result};

/// The collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collective {
    /// One root's buffer to everyone.
    Broadcast,
    /// Root's blocks, one to each rank.
    Scatter,
    /// Everyone's block to the root.
    Gather,
    /// Everyone's buffer combined at the root.
    Reduce,
    /// Everyone's block to everyone.
    Allgather,
    /// Everyone's buffer combined, result everywhere.
    Allreduce,
    /// Synchronisation.
    Barrier,
    /// Combined buffer, block r to rank r.
    ReduceScatter,
    /// Block j of rank i to block i of rank j.
    Alltoall,
}

impl Collective {
    /// Every collective, in table order.
    pub const ALL: [Collective; 9] = [
        Self::Broadcast,
        Self::Scatter,
        Self::Gather,
        Self::Reduce,
        Self::Allgather,
        Self::Allreduce,
        Self::Barrier,
        Self::ReduceScatter,
        Self::Alltoall,
    ];

    /// Lower-case name, as in `TCA_COLL_<NAME>` (upper-cased) and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Self::Broadcast => "broadcast",
            Self::Scatter => "scatter",
            Self::Gather => "gather",
            Self::Reduce => "reduce",
            Self::Allgather => "allgather",
            Self::Allreduce => "allreduce",
            Self::Barrier => "barrier",
            Self::ReduceScatter => "reduce_scatter",
            Self::Alltoall => "alltoall",
        }
    }

    /// Whether one rank, the root, is the source or the destination of the data: broadcast,
    /// scatter, gather and reduce.
    pub fn rooted(self) -> bool {
        matches!(
            self,
            Self::Broadcast | Self::Scatter | Self::Gather | Self::Reduce
        )
    }

    /// The environment variable that forces this collective's algorithm.
    pub fn env_var(self) -> String {
        format!("TCA_COLL_{}", self.name().to_uppercase())
    }

    /// The collective called `name` ([`Collective::name`]).
    pub fn from_name(name: &str) -> Option<Collective> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The algorithms registered for this collective.
    pub fn algorithms(self) -> impl Iterator<Item = &'static Algorithm> {
        ALGORITHMS.iter().filter(move |a| a.collective == self)
    }
}

pub use super::model::{CostModel, Work};

/// A started run of an algorithm that has not finished: what a non-blocking collective
/// holds and its scope drives ([`super::nb`]).
pub(crate) type Run<'a> = Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

pub(crate) type BcastFn = fn(&Comm<'_>, &mut [u8], usize) -> Result<()>;
pub(crate) type ScatterFn = fn(&Comm<'_>, &[u8], &mut [u8], usize) -> Result<()>;
pub(crate) type GatherFn = fn(&Comm<'_>, &[u8], &mut [u8], usize) -> Result<()>;
pub(crate) type ReduceFn = fn(&Comm<'_>, &mut [u8], &Reducer<'_>, usize) -> Result<()>;
pub(crate) type AllgatherFn = fn(&Comm<'_>, &mut [u8], &[usize], &[usize]) -> Result<()>;
pub(crate) type AllreduceFn = fn(&Comm<'_>, &mut [u8], &Reducer<'_>) -> Result<()>;
pub(crate) type BarrierFn = fn(&Comm<'_>) -> Result<()>;
pub(crate) type ReduceScatterFn = fn(&Comm<'_>, &mut [u8], &mut [u8], &Reducer<'_>) -> Result<()>;
pub(crate) type AlltoallFn = fn(&Comm<'_>, &[u8], &mut [u8]) -> Result<()>;

pub(crate) type BcastStart = for<'a> fn(&'a Comm<'a>, &'a mut [u8], usize) -> Run<'a>;
pub(crate) type ScatterStart = for<'a> fn(&'a Comm<'a>, &'a [u8], &'a mut [u8], usize) -> Run<'a>;
pub(crate) type GatherStart = ScatterStart;
pub(crate) type ReduceStart =
    for<'a> fn(&'a Comm<'a>, &'a mut [u8], &'a Reducer<'a>, usize) -> Run<'a>;
pub(crate) type AllgatherStart =
    for<'a> fn(&'a Comm<'a>, &'a mut [u8], &'a [usize], &'a [usize]) -> Run<'a>;
pub(crate) type AllreduceStart = for<'a> fn(&'a Comm<'a>, &'a mut [u8], &'a Reducer<'a>) -> Run<'a>;
pub(crate) type BarrierStart = for<'a> fn(&'a Comm<'a>) -> Run<'a>;
pub(crate) type ReduceScatterStart =
    for<'a> fn(&'a Comm<'a>, &'a mut [u8], &'a mut [u8], &'a Reducer<'a>) -> Run<'a>;
pub(crate) type AlltoallStart = for<'a> fn(&'a Comm<'a>, &'a [u8], &'a mut [u8]) -> Run<'a>;

pub(crate) type BcastCount = fn(&Tally, &mut [u8], usize) -> Result<()>;
pub(crate) type ScatterCount = fn(&Tally, &[u8], &mut [u8], usize) -> Result<()>;
pub(crate) type GatherCount = ScatterCount;
pub(crate) type ReduceCount = fn(&Tally, &mut [u8], &Reducer<'_>, usize) -> Result<()>;
pub(crate) type AllgatherCount = fn(&Tally, &mut [u8], &[usize], &[usize]) -> Result<()>;
pub(crate) type AllreduceCount = fn(&Tally, &mut [u8], &Reducer<'_>) -> Result<()>;
pub(crate) type BarrierCount = fn(&Tally) -> Result<()>;
pub(crate) type ReduceScatterCount = fn(&Tally, &mut [u8], &mut [u8], &Reducer<'_>) -> Result<()>;
pub(crate) type AlltoallCount = fn(&Tally, &[u8], &mut [u8]) -> Result<()>;

/// The function of an algorithm, by collective: one `async` description, run to its end on
/// the caller's thread (the blocking call), started and boxed (the non-blocking one), or
/// counted (its cost model: [`super::count`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kernel {
    Broadcast(BcastFn, BcastStart, BcastCount),
    Scatter(ScatterFn, ScatterStart, ScatterCount),
    Gather(GatherFn, GatherStart, GatherCount),
    Reduce(ReduceFn, ReduceStart, ReduceCount),
    Allgather(AllgatherFn, AllgatherStart, AllgatherCount),
    Allreduce(AllreduceFn, AllreduceStart, AllreduceCount),
    Barrier(BarrierFn, BarrierStart, BarrierCount),
    ReduceScatter(ReduceScatterFn, ReduceScatterStart, ReduceScatterCount),
    Alltoall(AlltoallFn, AlltoallStart, AlltoallCount),
}

/// One registered algorithm.
#[derive(Debug)]
pub struct Algorithm {
    /// Its name (`TCA_COLL_ALLREDUCE=ring`).
    pub name: &'static str,
    /// The collective it implements.
    pub collective: Collective,
    pub(crate) kernel: Kernel,
    /// Whether it runs on `p` ranks.
    pub supports: fn(usize) -> bool,
    /// What it needs, when `supports` is not "any p".
    pub note: &'static str,
    /// Whether Auto considers it (and `tca model calibrate` measures it). False for algorithms
    /// written for a topology that the cost models do not describe: seed 002's broadcasts
    /// over 2 and 3 directions, 3-D allreduce and multi-ring allgather, for a torus whose
    /// nodes drive several links at once (on shared memory they tie with or lose to the
    /// others). They run when forced (`TCA_COLL_<OP>`, [`Comm::force`](super::Comm::force)).
    pub auto: bool,
    /// The largest size for which Auto considers it (bytes, in the units of
    /// [`Algorithm::work`]): past it the algorithm meets what the cost models leave out.
    pub auto_max: usize,
}

impl Algorithm {
    /// What it does for `p` ranks and `bytes` bytes (per rank's block for scatter, gather,
    /// allgather, reduce_scatter and alltoall; whole buffer otherwise), as the pace of
    /// back-to-back calls: the busiest rank's work, or with more ranks than the model's
    /// cores, all ranks' shared over them ([`CostModel::paced`]). Read off the algorithm's
    /// own description by a counting pass over the ranks, one of each class of ranks that do
    /// alike ([`super::count`]); the model is needed to tell which rank is busiest.
    pub fn work(&self, m: &CostModel, p: usize, bytes: usize) -> Result<Work> {
        let (busiest, total) = self.schedule(m, p, bytes)?;
        Ok(m.paced(p, busiest, total))
    }

    /// The busiest rank's work (by `m`'s prices) and all ranks' together, for `p` ranks and
    /// `bytes` bytes, the root 0: the two counts [`Algorithm::work`] paces, as the counting
    /// pass reads them off the algorithm's description.
    pub fn schedule(&self, m: &CostModel, p: usize, bytes: usize) -> Result<(Work, Work)> {
        super::count::parts(self, m, p, bytes)
    }

    /// Predicted time in microseconds of [`Algorithm::work`] (infinite where it cannot be
    /// counted).
    pub fn cost(&self, m: &CostModel, p: usize, bytes: usize) -> f64 {
        self.work(m, p, bytes).map_or(f64::INFINITY, |w| m.time(&w))
    }
}

fn any(_: usize) -> bool {
    true
}

fn pow2(p: usize) -> bool {
    p.is_power_of_two()
}

/// The three forms of an algorithm's `run`: blocking (polled to its end on the stack, no
/// allocation), started (boxed, for a non-blocking collective) and counted (its cost model).
macro_rules! forms {
    ($coll:ident, $m:ident $(, $a:ident)*) => {
        Kernel::$coll(
            |c $(, $a)*| run_blocking($m::run(Steps::<Block>::new(c) $(, $a)*)),
            |c $(, $a)*| Box::pin($m::run(Steps::<Start>::new(c) $(, $a)*)),
            |t $(, $a)*| run_blocking($m::run(Steps::<Count>::new(t) $(, $a)*)),
        )
    };
}

macro_rules! alg {
    // Auto considers it up to `$max` bytes.
    (upto $max:expr, $name:literal, $coll:ident, $module:path, $supports:expr, $note:literal) => {
        Algorithm {
            auto_max: $max,
            ..alg!($name, $coll, $module, $supports, $note)
        }
    };
    // Run only when forced: Auto never considers it.
    (forced $name:literal, $coll:ident, $module:path, $supports:expr, $note:literal) => {
        Algorithm {
            auto: false,
            ..alg!($name, $coll, $module, $supports, $note)
        }
    };
    ($name:literal, $coll:ident, $module:path, $supports:expr, $note:literal) => {{
        use $module as alg;
        Algorithm {
            name: $name,
            collective: Collective::$coll,
            kernel: alg!(@kernel $coll),
            supports: $supports,
            note: $note,
            auto: true,
            auto_max: usize::MAX,
        }
    }};
    (@kernel Broadcast) => { forms!(Broadcast, alg, b, root) };
    (@kernel Scatter) => { forms!(Scatter, alg, s, r, root) };
    (@kernel Gather) => { forms!(Gather, alg, s, r, root) };
    (@kernel Reduce) => { forms!(Reduce, alg, b, red, root) };
    (@kernel Allgather) => { forms!(Allgather, alg, b, counts, displs) };
    (@kernel Allreduce) => { forms!(Allreduce, alg, b, red) };
    (@kernel Barrier) => { forms!(Barrier, alg) };
    (@kernel ReduceScatter) => { forms!(ReduceScatter, alg, b, r, red) };
    (@kernel Alltoall) => { forms!(Alltoall, alg, s, r) };
}

/// Every algorithm tca has.
pub static ALGORITHMS: &[Algorithm] = &[
    // The pipeline first: where its middle rank does as much as binomial's busiest (a tie
    // in the models) it was the faster at 4-6 ranks (BENCHMARKS.md, "The counting pass").
    alg!("pipeline", Broadcast, bcast::pipeline, any, ""),
    alg!("binomial", Broadcast, bcast::binomial, any, ""),
    alg!("flat", Broadcast, bcast::flat, any, ""),
    alg!(forced "pipeline_2d", Broadcast, bcast::directions::two, any, ""),
    alg!(forced "pipeline_3d", Broadcast, bcast::directions::three, any, ""),
    alg!(
        "scatter_allgather",
        Broadcast,
        bcast::scatter_allgather,
        any,
        ""
    ),
    alg!("linear", Scatter, scatter::linear, any, ""),
    alg!("binomial", Scatter, scatter::binomial, any, ""),
    alg!("linear", Gather, gather::linear, any, ""),
    alg!("binomial", Gather, gather::binomial, any, ""),
    alg!("binomial", Reduce, reduce::binomial, any, ""),
    alg!("flat", Reduce, reduce::flat, any, ""),
    alg!(
        "reduce_scatter_gather",
        Reduce,
        reduce::reduce_scatter_gather,
        any,
        ""
    ),
    alg!(
        "recursive_doubling",
        Allgather,
        allgather::recursive_doubling,
        pow2,
        "a power-of-two rank count"
    ),
    alg!("bruck", Allgather, allgather::bruck, any, ""),
    alg!(upto allgather::flat::AUTO_MAX, "flat", Allgather, allgather::flat, any, ""),
    alg!("ring", Allgather, allgather::ring, any, ""),
    alg!(forced "ring_3d", Allgather, allgather::ring_3d, any, ""),
    alg!(forced "multiring", Allgather, allgather::multiring, any, ""),
    alg!(
        "dissemination",
        Allreduce,
        allreduce::dissemination,
        any,
        ""
    ),
    alg!(
        "recursive_doubling",
        Allreduce,
        allreduce::recursive_doubling,
        any,
        ""
    ),
    alg!("rabenseifner", Allreduce, allreduce::rabenseifner, any, ""),
    alg!("ring", Allreduce, allreduce::ring, any, ""),
    alg!("flat", Allreduce, allreduce::flat, any, ""),
    alg!(forced "pipeline_3d", Allreduce, allreduce::pipeline_3d, any, ""),
    alg!("dissemination", Barrier, barrier::dissemination, any, ""),
    alg!("flat", ReduceScatter, reduce_scatter::flat, any, ""),
    alg!("ring", ReduceScatter, reduce_scatter::ring, any, ""),
    alg!("flat", Alltoall, alltoall::flat, any, ""),
    alg!("pairwise", Alltoall, alltoall::pairwise, any, ""),
];

/// The algorithm of `collective` called `name`, or an error listing the valid names.
pub fn find(collective: Collective, name: &str) -> Result<&'static Algorithm> {
    collective
        .algorithms()
        .find(|a| a.name == name)
        .ok_or_else(|| {
            let valid: Vec<&str> = collective.algorithms().map(|a| a.name).collect();
            Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "unknown {} algorithm `{name}`; valid: {}",
                    collective.name(),
                    valid.join(", ")
                ),
            )
        })
}

/// The algorithm forced for `collective` by its environment variable, if any.
pub(crate) fn from_env(collective: Collective) -> Result<Option<&'static Algorithm>> {
    match std::env::var(collective.env_var()) {
        Ok(v) if v.is_empty() || v == "auto" => Ok(None),
        Ok(v) => find(collective, &v).map(Some).map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("{}: {e}", collective.env_var()),
            )
        }),
        Err(_) => Ok(None),
    }
}

/// Automatic choice for `p` ranks and `bytes` bytes: the supported algorithm with the lowest
/// predicted time under the active models ([`model::active`](super::model::active)).
/// Evaluates every candidate's model: communicators look their choice up in a table instead.
pub fn auto(c: Collective, p: usize, bytes: usize) -> &'static Algorithm {
    super::model::active().calibration.choose(c, p, bytes)
}
