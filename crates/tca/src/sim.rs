//! Running tca code on a simulated network, in virtual time.
//!
//! [`run`] starts `n` ranks in this process: they join as threads, exactly as in
//! [`crate::threads::run`], then run as coroutines of the calling thread, one at a time (a
//! rank must therefore wait only through tca, never on a lock or channel another rank would
//! release). Every operation between ranks goes through a modelled network (a PEACH2 2x8
//! torus, Tofu, a fat tree, or a model of your own: [`Network`]) and costs *virtual* time;
//! [`World::wtime`] reads each rank's virtual clock. The collectives, the message layers and
//! anything written on [`World`] run unchanged. The same job gives the same virtual times on
//! every run and every machine (see [`crate::transport`]'s `sim` module for how).
//!
//! ```
//! let net = tca::sim::Network::load("peach2-2x8")?;
//! let opts = tca::sim::Options::new(net);
//! let run = tca::sim::run(&opts, 4, |w| {
//!     let comm = tca::Comm::world(w)?;
//!     let t0 = w.wtime();
//!     let mut x = [w.rank() as f64];
//!     comm.allreduce_in_place(&mut x, &tca::Op::Sum)?;
//!     assert_eq!(x[0], 6.0);
//!     Ok(w.wtime() - t0)
//! })?;
//! // The slowest rank's virtual time for one 8-byte allreduce on 4 nodes of the torus (a
//! // rank that arrives late may find its partners' data already there).
//! let slowest = run.results.iter().copied().fold(0.0, f64::max);
//! assert!(slowest > 1e-6 && slowest < 1e-4, "{slowest}");
//! # Ok::<(), tca::Error>(())
//! ```

use std::sync::Arc;

use crate::error::Result;
use crate::fabric::World;
use crate::transport::SimEngine;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use crate::transport::fuzz_network;
pub use crate::transport::{
    BUILT_IN, Compute, ComputeRates, Dma, Link, Network, Pio, Software, Stats, Topology,
};

/// How to simulate.
#[derive(Debug, Clone)]
pub struct Options {
    /// The network model.
    pub network: Network,
    /// Move payload bytes (`true`, the default) or only time them (`false`): in timing-only
    /// mode messages up to 64 KiB move whole (control data is small), larger ones only their
    /// first and last 256 bytes (where the message layers keep headers and signals), and a
    /// collective's messages larger than 64 KiB are neither copied out nor reduced into the
    /// destination, so data results of large transfers are wrong but every protocol runs,
    /// the times are the same, and hundreds of ranks with large messages cost neither copies
    /// nor touched pages.
    pub payload: bool,
    /// How computation between tca calls costs virtual time.
    pub compute: Compute,
    /// Which node each rank runs on (`None`: rank r on node r).
    pub mapping: Option<Vec<u32>>,
    /// The collectives' chunk (pipeline segment) size in bytes, a multiple of 64 from 1 KiB
    /// to 1 MiB (`None`: tca's default for the rank count, 64 KiB down to 4 KiB). Seed 002's
    /// MPI on K pipelines 16 KiB segments.
    pub chunk: Option<usize>,
}

impl Options {
    /// Payload moved, reductions charged from the model, rank r on node r.
    pub fn new(network: Network) -> Self {
        Self {
            network,
            payload: true,
            compute: Compute::Model,
            mapping: None,
            chunk: None,
        }
    }

    /// The options of `TCA_TRANSPORT=sim` in thread mode: `TCA_SIM_NETWORK` (default
    /// `peach2-2x8`) and `TCA_SIM_COMPUTE` (`model`, or `measured:SCALE`).
    pub fn from_env() -> Result<Self> {
        use crate::env::{SIM_COMPUTE, SIM_NETWORK};
        use crate::error::{Error, ErrorKind};
        let var = |n: &str| std::env::var(n).ok().map(|v| v.trim().to_string());
        let net = var(SIM_NETWORK).filter(|v| !v.is_empty());
        let mut o = Self::new(Network::load(net.as_deref().unwrap_or("peach2-2x8"))?);
        o.compute = match var(SIM_COMPUTE).as_deref() {
            None | Some("" | "model") => Compute::Model,
            Some(m) => Compute::parse(m).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("{SIM_COMPUTE}={m:?}: expected `model` or `measured:SCALE`"),
                )
            })?,
        };
        Ok(o)
    }
}

/// What a simulated run returns.
#[derive(Debug)]
pub struct Report<T> {
    /// Each rank's result, by rank.
    pub results: Vec<T>,
    /// Counters of the run.
    pub stats: Stats,
    /// The virtual time at which the last thing happened (seconds).
    pub virtual_s: f64,
    /// Host time the run took (seconds).
    pub host_s: f64,
}

/// Runs `f` on `n` simulated ranks and returns every rank's result, or the error that caused
/// the failure (a rank's own error rather than the ones it caused in its peers).
pub fn run<T, F>(opts: &Options, n: u32, f: F) -> Result<Report<T>>
where
    T: Send,
    F: Fn(&World) -> Result<T> + Sync,
{
    let (all, stats, virtual_s, host_s) = run_each(opts, n, f)?;
    Ok(Report {
        results: crate::threads::root_error(all)?,
        stats,
        virtual_s,
        host_s,
    })
}

/// Every rank's result of a simulated run, by rank, with the run's counters, its virtual and
/// its host time. Fails before starting if the model cannot hold `n` ranks.
#[allow(clippy::type_complexity)]
pub fn run_each<T, F>(opts: &Options, n: u32, f: F) -> Result<(Vec<Result<T>>, Stats, f64, f64)>
where
    T: Send,
    F: Fn(&World) -> Result<T> + Sync,
{
    let nodes = place(opts, n)?;
    if let Some(c) = opts.chunk {
        if c % 64 != 0 || !(1024..=1 << 20).contains(&c) {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::InvalidArgument,
                format!("a chunk of {c} bytes: chunks are multiples of 64 from 1 KiB to 1 MiB"),
            ));
        }
    }
    let engine = Arc::new(SimEngine::new(
        opts.network.clone(),
        nodes,
        opts.payload,
        opts.chunk,
    ));
    let compute = opts.compute;
    let t0 = std::time::Instant::now();
    // The ranks join as threads (the node's start-up is a rendezvous of running threads),
    // then the world runs them in the simulation, one at a time.
    let joined = crate::threads::run_ranks(n, |_, joined| joined, Ok);
    let all = World::run_simulated(joined, &engine, compute, &crate::threads::lent(f))?;
    let host_s = t0.elapsed().as_secs_f64();
    let (stats, now) = engine.stats();
    Ok((all, stats, now as f64 / 1e12, host_s))
}

/// Which node each of `n` ranks runs on, checked against the model.
fn place(opts: &Options, n: u32) -> Result<Vec<u32>> {
    use crate::error::{Error, ErrorKind};
    let nodes = opts.network.nodes();
    let map: Vec<u32> = match &opts.mapping {
        Some(m) => {
            if m.len() != n as usize {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("the mapping names {} nodes for {n} ranks", m.len()),
                ));
            }
            m.clone()
        }
        None => (0..n).collect(),
    };
    if n == 0 || n > nodes {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "network {} ({}) has {nodes} nodes: a simulated job needs 1..={nodes} ranks, \
                 one per node, not {n}",
                opts.network.name,
                opts.network.shape()
            ),
        ));
    }
    let mut seen = vec![false; nodes as usize];
    for (r, &node) in map.iter().enumerate() {
        if node >= nodes || std::mem::replace(&mut seen[node as usize], true) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "the mapping puts rank {r} on node {node}: nodes are 0..{nodes}, one rank each"
                ),
            ));
        }
    }
    Ok(map)
}
