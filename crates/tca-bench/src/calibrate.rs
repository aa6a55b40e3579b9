//! Calibration of tca's collective cost models (`tca model calibrate`): measure every
//! algorithm on this machine with the suite, fit the parameters of
//! [`tca::coll::model::CostModel`] per rank count and per collective, and produce the
//! [`Calibration`] the library selects algorithms with. The command line only parses and
//! prints; the engine is here, beside the suite it drives.
//!
//! **Measuring.** For each rank count a job of that size runs the suite several times, each
//! run forcing one algorithm per collective benchmark (`sets`: run k forces each
//! collective's k-th algorithm that supports the rank count), `rounds` times over, each size
//! timed [`REPEAT`] times; the fastest time of each algorithm and size is kept
//! (`points`). The rounds are minutes apart, so a burst of other load rarely spoils every
//! one.
//!
//! **Fitting.** The cost model is linear in its parameters once `knee` and `cache` are
//! fixed, so `fit` tries every pair of [`KNEES`] x [`CACHES`] and keeps the one whose
//! non-negative least squares on relative errors fits best. Rooted collectives are a maximum
//! of two linear forms (root or forwarding rank, whichever is slower); the fit chooses the
//! slower side at the current parameters and refits, [`PIECEWISE_ROUNDS`] times
//! (`tca_model::linear::fit_piecewise`). Each collective gets its own fit, and the fit over
//! all collectives is the fallback for one that could not be fitted.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use tca::Collective;
use tca::coll::Algorithm;
use tca::coll::model::{Calibration, CostModel, Fitted, MAX_CACHE, Quality, RankModels};
use tca_model::linear;
use tca_model::record::Row;
use tca_mpi::Role;

use crate::suite::{self, BENCHMARKS, Half, Iters, Options};

/// Knees tried: the one that fits best is kept (0: no cheaper first bytes).
pub const KNEES: [f64; 6] = [0.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];
/// Cache steps tried, with the knees (`MAX_CACHE`: none).
pub const CACHES: [f64; 8] = [
    (64 << 10) as f64,
    (128 << 10) as f64,
    (256 << 10) as f64,
    (512 << 10) as f64,
    (1 << 20) as f64,
    (2 << 20) as f64,
    (4 << 20) as f64,
    MAX_CACHE,
];
/// Timed runs of each size within a round (the fastest kept, as `tca bench --repeat`).
pub const REPEAT: u32 = 2;
/// Rounds of choosing the slower side of rooted collectives and refitting.
pub const PIECEWISE_ROUNDS: usize = 12;

/// What to calibrate.
#[derive(Debug, Clone)]
pub struct Request {
    /// Rank counts, each measured by a job of that size.
    pub np: Vec<u32>,
    /// Message sizes measured.
    pub sizes: Vec<usize>,
    /// Times each algorithm is measured.
    pub rounds: u32,
    /// Cores of the machine the measurements come from (None: this machine's).
    pub cores: Option<u32>,
    /// Fit this result file (tca CSV or JSON of runs with forced algorithms) instead of
    /// measuring.
    pub from: Option<PathBuf>,
    /// Also write the measurements here (CSV), to refit them later with `from`.
    pub rows: Option<PathBuf>,
    /// The measurements of `from` crossed a network ([`RankModels::network`]); a measuring
    /// run tells from its transport.
    pub network: bool,
    /// The command line to record in the calibration.
    pub command: String,
}

/// One measured time and what the model needs to predict it.
#[derive(Debug)]
struct Point {
    alg: &'static Algorithm,
    p: usize,
    n: usize,
    bytes: u64,
    t: f64,
}

/// A measurement beside its fitted prediction.
#[derive(Debug, Clone)]
pub struct Residual {
    /// The collective.
    pub collective: &'static str,
    /// The algorithm.
    pub algorithm: &'static str,
    /// Message size as the benchmark counts it.
    pub bytes: u64,
    /// The fastest measured time, us.
    pub measured_us: f64,
    /// The model's time, us.
    pub model_us: f64,
}

/// The fit of one rank count.
#[derive(Debug, Clone)]
pub struct RankFit {
    /// The models, as the calibration file holds them.
    pub models: RankModels,
    /// Collectives measured but not fitted, and why (the fit over all stands in).
    pub unfitted: Vec<(&'static str, String)>,
    /// Every measurement beside its prediction, by collective.
    pub residuals: Vec<Residual>,
}

/// A calibration and the fits it came from.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What the library will read.
    pub calibration: Calibration,
    /// Per rank count, in increasing order.
    pub fits: Vec<RankFit>,
}

/// Runs a calibration as whichever process this is: the parent measures (starting a job per
/// rank count) or reads `from`, fits, and returns the outcome; a rank of a measuring job
/// measures, sends its rows to the parent and returns `None`.
pub fn run(req: &Request) -> Result<Option<Outcome>> {
    if req.np.is_empty() || req.np.contains(&0) {
        bail!("--np: rank counts must be at least 1");
    }
    if req.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    match tca_mpi::role() {
        Role::TcaRank => {
            rank(&req.sizes, req.rounds)?;
            return Ok(None);
        }
        Role::MpiRank => bail!("tca model calibrate measures tca only; not under mpirun"),
        Role::Parent => {}
    }
    // The machine's cores: with more ranks than that, the models share them out.
    let cores = req.cores.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(0, |n| u32::try_from(n.get()).unwrap_or(0))
    });
    let mut by_np: BTreeMap<u32, Vec<Row>> = BTreeMap::new();
    // Per rank count: whether its job crossed a network (`--from` files: as `req` says).
    let mut network: BTreeMap<u32, bool> = BTreeMap::new();
    match &req.from {
        Some(path) => {
            let rows = tca_model::record::read_file(path).map_err(|e| anyhow::anyhow!("{e}"))?;
            for r in rows.into_iter().filter(|r| r.implementation == "tca") {
                by_np.entry(r.ranks).or_default().push(r);
            }
            if by_np.is_empty() {
                bail!("{}: no tca rows to fit", path.display());
            }
        }
        None => {
            let mut transport = String::new();
            for &np in &req.np {
                let runs = sets(np as usize).len() * req.rounds as usize;
                eprintln!(
                    "tca model calibrate: {np} ranks, {runs} runs of the suite ({} sizes each), \
                     the fastest of {} kept",
                    req.sizes.len(),
                    req.rounds
                );
                let halves: Vec<Half> = tca_mpi::launch_tca(np)?;
                if let Some(h) = halves.first() {
                    transport.clone_from(&h.transport);
                    network.insert(np, req.network || crosses_network(&h.transport));
                }
                by_np.insert(np, halves.into_iter().flat_map(|h| h.rows).collect());
            }
            if let Some(path) = &req.rows {
                let run = tca_model::record::Run {
                    machine: crate::machine::Machine::here().line(),
                    date: crate::machine::rfc3339_now(),
                    transport,
                    rows: by_np.values().flatten().cloned().collect(),
                };
                std::fs::write(path, run.to_csv())
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
    }
    let mut calibration = Calibration::new(
        crate::machine::Machine::here().line(),
        crate::machine::rfc3339_now(),
        req.command.clone(),
    );
    let mut fits = Vec::new();
    for (np, rows) in &by_np {
        let mut f = fit_rank_count(*np, rows, cores)?;
        f.models.network = network.get(np).copied().unwrap_or(req.network);
        calibration.ranks.push(f.models.clone());
        fits.push(f);
    }
    Ok(Some(Outcome { calibration, fits }))
}

/// Whether a job's transport (as `tca bench` reports it: `shm`, `ofi`, `shm+ofi`,
/// `sim:NAME`) moved data through a real network.
pub(crate) fn crosses_network(transport: &str) -> bool {
    transport.split('+').any(|t| t == "ofi")
}

/// The runs of the suite, each forcing one algorithm per collective benchmark: run k forces
/// each collective's k-th algorithm that supports `p` ranks and that Auto considers (the
/// models price those; algorithms run only when forced, such as seed 002's torus ones, would
/// pull the fits toward a topology they do not describe).
fn sets(p: usize) -> Vec<Vec<(usize, String)>> {
    let mut sets: Vec<Vec<(usize, String)>> = Vec::new();
    for (i, b) in BENCHMARKS.iter().enumerate() {
        let Some(c) = b.collective else { continue };
        for (k, alg) in c
            .algorithms()
            .filter(|a| a.auto && (a.supports)(p))
            .enumerate()
        {
            if sets.len() <= k {
                sets.push(Vec::new());
            }
            sets[k].push((i, alg.name.to_string()));
        }
    }
    sets
}

/// A rank of the measuring job: every set, `rounds` times; rank 0 sends the rows back.
fn rank(sizes: &[usize], rounds: u32) -> Result<()> {
    let world = tca::init()?;
    let p = world.size() as usize;
    let mut halves = Vec::new();
    for _ in 0..rounds {
        for set in sets(p) {
            let opts = Options {
                benchmarks: set.iter().map(|(i, _)| *i).collect(),
                sizes: sizes.to_vec(),
                iters: Iters::Auto,
                warmup: None,
                repeat: REPEAT,
                algos: set,
                soak: 0,
                two_sided: false,
                lattices: Vec::new(),
                test_calls: 0,
                progress: tca::offload::Progress::Caller,
                // The models describe the channel algorithms, over ordinary memory.
                heap_buffers: true,
            };
            if let Some(h) = suite::tca::run(&world, &opts)? {
                halves.push(h);
            }
        }
    }
    if world.rank() == 0 && !tca_mpi::write_result(&halves)? {
        bail!(
            "tca model calibrate starts its own ranks (--np); run it directly, not under a \
             launcher"
        );
    }
    world.finalize()?;
    Ok(())
}

/// The points of `rows` (the fastest time of each algorithm and size), by collective.
fn points(rows: &[Row]) -> BTreeMap<&'static str, Vec<Point>> {
    let mut best: BTreeMap<(String, String, u64), (f64, &Row)> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.t_avg_us > 0.0 && r.t_avg_us.is_finite())
    {
        let key = (r.benchmark.clone(), r.algorithm.clone(), r.bytes);
        let e = best.entry(key).or_insert((r.t_avg_us, r));
        if r.t_avg_us < e.0 {
            *e = (r.t_avg_us, r);
        }
    }
    let mut out: BTreeMap<&'static str, Vec<Point>> = BTreeMap::new();
    for (t, r) in best.into_values() {
        let Some((alg, p, n)) = suite::model_input(r) else {
            continue;
        };
        // Past its Auto limit an algorithm meets what the models leave out (the flat
        // allgather's incast), and a point the counting pass cannot count has no model.
        if n > alg.auto_max || alg.work(&CostModel::default(), p, n).is_err() {
            continue;
        }
        out.entry(alg.collective.name()).or_default().push(Point {
            alg,
            p,
            n,
            bytes: r.bytes,
            t,
        });
    }
    out
}

/// The best model for `pts` over the knees and cache steps tried (a step no point reaches
/// is tried once, as no step).
fn fit(pts: &[&Point], cores: u32) -> Result<Fitted> {
    let measured: Vec<f64> = pts.iter().map(|q| q.t).collect();
    let largest = pts.iter().map(|q| q.bytes).max().unwrap_or(0) as f64;
    let start = CostModel::default().params();
    let mut best: Option<(linear::LinearFit, f64, f64)> = None;
    let caches = CACHES
        .iter()
        .copied()
        .filter(|&c| c <= largest || c == MAX_CACHE);
    for cache in caches {
        for knee in KNEES {
            // Choosing pieces and refitting can settle on the wrong pieces; starting again
            // from the best parameters so far (another knee or step) often finds the right.
            let mut starts = vec![start.to_vec()];
            if let Some((b, _, _)) = &best {
                starts.push(b.params.clone());
            }
            for s in &starts {
                let f = linear::fit_piecewise(&measured, s, PIECEWISE_ROUNDS, |params, i| {
                    let m = CostModel {
                        cores: f64::from(cores),
                        ..CostModel::from_params(params, knee, cache).unwrap_or_default()
                    };
                    let q = pts[i];
                    q.alg.work(&m, q.p, q.n).map_or_else(
                        |_| vec![f64::INFINITY; CostModel::PARAMS.len()],
                        |w| w.coefficients().to_vec(),
                    )
                })?;
                if best
                    .as_ref()
                    .is_none_or(|(b, _, _)| f.rms_rel_err < b.rms_rel_err)
                {
                    best = Some((f, knee, cache));
                }
            }
        }
    }
    let (f, knee, cache) = best.context("no knee tried")?;
    let model = CostModel::from_params(&f.params, knee, cache)?;
    let w = pts[f.worst_point];
    Ok(Fitted {
        model,
        fit: Some(Quality {
            points: f.points,
            rms_rel_err: f.rms_rel_err,
            worst_rel_err: f.worst_rel_err,
            worst_at: format!("{} at {} B", w.alg.name, w.bytes),
        }),
    })
}

/// The models of one rank count: one per collective measured, and one over all of them.
pub fn fit_rank_count(np: u32, rows: &[Row], cores: u32) -> Result<RankFit> {
    let by_coll = points(rows);
    if by_coll.is_empty() {
        bail!("{np} ranks: no measurements of tca's collective algorithms to fit");
    }
    let all_pts: Vec<&Point> = by_coll.values().flatten().collect();
    let all = fit(&all_pts, cores).with_context(|| format!("fitting {np} ranks"))?;
    let mut collectives = BTreeMap::new();
    let mut unfitted = Vec::new();
    for c in Collective::ALL {
        let Some(pts) = by_coll.get(c.name()) else {
            continue;
        };
        let pts: Vec<&Point> = pts.iter().collect();
        match fit(&pts, cores) {
            Ok(f) => {
                collectives.insert(c.name().to_string(), f);
            }
            Err(e) => unfitted.push((c.name(), e.to_string())),
        }
    }
    let mut residuals = Vec::new();
    for (name, pts) in &by_coll {
        let m = CostModel {
            cores: f64::from(cores),
            ..collectives
                .get(*name)
                .map_or(all.model, |f: &Fitted| f.model)
        };
        for q in pts {
            residuals.push(Residual {
                collective: name,
                algorithm: q.alg.name,
                bytes: q.bytes,
                measured_us: q.t,
                model_us: q.alg.cost(&m, q.p, q.n),
            });
        }
    }
    Ok(RankFit {
        models: RankModels {
            ranks: np,
            cores,
            network: false,
            all,
            collectives,
        },
        unfitted,
        residuals,
    })
}

/// What selection chooses for one collective at one rank count, over the message sizes
/// 8 B to 4 MiB: runs of sizes `(from, to, algorithm)` with the same choice.
#[derive(Debug, Clone)]
pub struct Choices {
    /// The collective.
    pub collective: Collective,
    /// Inclusive size runs, in increasing order, with the algorithm chosen.
    pub runs: Vec<(usize, usize, &'static str)>,
}

/// What selection will choose with `cal` at `p` ranks, within a node or across a network
/// (`network`), per collective (the barrier has no sizes; one rank has nothing to choose).
pub fn choices(cal: &Calibration, p: usize, network: bool) -> Vec<Choices> {
    let mut out = Vec::new();
    for c in Collective::ALL {
        if c == Collective::Barrier || p < 2 {
            continue;
        }
        let mut runs: Vec<(usize, usize, &'static str)> = Vec::new();
        for k in 3..=22 {
            let bytes = 1usize << k;
            let a = cal.choose_on(c, p, bytes, network).name;
            match runs.last_mut() {
                Some(l) if l.2 == a => l.1 = bytes,
                _ => runs.push((bytes, bytes, a)),
            }
        }
        out.push(Choices {
            collective: c,
            runs,
        });
    }
    out
}
