//! One rank's whole run, on any [`Backend`]: set up, solve, check the answer, collect the
//! timings on rank 0 and build the [`Report`].

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::{CgError, Result};
use crate::problem::{LocalProblem, Problem, setup};
use crate::report::{Breakdown, PhaseTimes, Report};
use crate::solver::{
    Outcome, Phases, Precond, Schedule, Solution, Stop, VANISHED, clock_cost_ns,
    clock_reads_per_iteration, dot, solve,
};
use tca_model::format::thousands;
use tca_mpi::Backend;

/// Everything a run needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// A x = b.
    pub problem: Problem,
    /// Fixed iterations or a tolerance.
    pub stop: Stop,
    /// The preconditioner (`--precond`; none in the paper).
    pub precond: Precond,
    /// The order of the Allgather and the SpMV (`--schedule`; the paper's by default).
    pub schedule: Schedule,
    /// Time each phase (`--breakdown`).
    pub breakdown: bool,
    /// Rank 0 shows a progress bar when its stderr is a terminal and the solve runs long.
    pub progress: bool,
}

/// The answer's quality, computed from x at the end (collective).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Check {
    /// ||b - A x|| / ||b||.
    pub true_rel_residual: f64,
    /// ||x - x*|| / ||x*||, for a manufactured b.
    pub solution_error: Option<f64>,
}

/// Recomputes the residual from x (one more Allgather and SpMV, untimed) and, for a
/// manufactured problem, the error against x*.
pub fn check<C: Backend>(c: &mut C, lp: &LocalProblem, x: &[f64]) -> Result<Check> {
    let mine = lp.part.range(c.rank());
    let mut full = vec![0.0; lp.part.n];
    full[mine].copy_from_slice(x);
    c.allgatherv_f64(&mut full, &lp.part.counts, &lp.part.displs)?;
    let mut ax = vec![0.0; x.len()];
    lp.a.spmv(&full, &mut ax);
    let rr: f64 = lp.b.iter().zip(&ax).map(|(b, a)| (b - a) * (b - a)).sum();
    let rr = c.allreduce_sum_f64(rr)?;
    let bb = c.allreduce_sum_f64(dot(&lp.b, &lp.b))?;
    let true_rel_residual = if bb > 0.0 {
        (rr / bb).sqrt()
    } else {
        rr.sqrt()
    };
    let solution_error = match &lp.x_star {
        Some(xs) => {
            let ee: f64 = x.iter().zip(xs).map(|(a, b)| (a - b) * (a - b)).sum();
            let ee = c.allreduce_sum_f64(ee)?;
            let ss = c.allreduce_sum_f64(dot(xs, xs))?;
            Some(if ss > 0.0 {
                (ee / ss).sqrt()
            } else {
                ee.sqrt()
            })
        }
        None => None,
    };
    Ok(Check {
        true_rel_residual,
        solution_error,
    })
}

/// A progress bar that stays hidden for the first half second (short runs never show one).
/// Rank 0 advances it every K/200 iterations, outside the timed phases; a visible bar redraws
/// at most 20 times a second, a few tens of microseconds each, so it adds about 0.1% to rank
/// 0's total (`--no-progress` removes even that).
struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn new(len: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("cg {bar:40} {pos}/{len} iterations, eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Progress { bar }
    }
}

/// Runs the whole job on this rank (collective): returns the report on rank 0, `None`
/// elsewhere.
pub fn run_rank<C: Backend>(c: &mut C, opts: &Options) -> Result<Option<Report>> {
    let (me, p) = (c.rank(), c.size());
    let t = Instant::now();
    let lp = setup(c, &opts.problem)?;
    c.barrier()?;
    let setup_s = t.elapsed().as_secs_f64();
    let max_iters = match opts.stop {
        Stop::Fixed { iters } => iters,
        Stop::Tolerance { max_iters, .. } => max_iters,
    };
    let progress = (me == 0 && opts.progress && std::io::stderr().is_terminal())
        .then(|| Progress::new(max_iters));
    if let Some(pr) = &progress {
        // Shown only if the solve is still running after half a second.
        let bar = pr.bar.clone();
        let shown = std::thread::Builder::new()
            .name("cg-progress".into())
            .spawn(move || {
                std::thread::sleep(Duration::from_millis(500));
                if !bar.is_finished() {
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                }
            });
        drop(shown);
    }
    let clock_ns = if opts.breakdown && me == 0 {
        clock_cost_ns()
    } else {
        0.0
    };
    let sol = solve(
        c,
        &lp,
        opts.stop,
        opts.precond,
        opts.schedule,
        opts.breakdown,
        progress.as_ref().map(|p| &p.bar),
    );
    if let Some(pr) = &progress {
        pr.bar.finish_and_clear();
    }
    let Solution { x, stats } = sol?;
    let chk = check(c, &lp, &x)?;
    if !chk.true_rel_residual.is_finite() {
        // Decided on allreduced values: every rank returns this together.
        return Err(CgError::Breakdown(format!(
            "the solve diverged: x overflowed (||b - A x|| / ||b|| is {} after {} iterations)",
            chk.true_rel_residual, stats.iterations
        )));
    }

    // Every rank's [nonzeros, total, five phases] to rank 0.
    let ph = stats.phases.unwrap_or_default();
    let mine = [
        lp.a.nnz() as f64,
        stats.total_s,
        ph.spmv,
        ph.dot,
        ph.axpy,
        ph.allgather,
        ph.allreduce,
    ];
    let mut all = vec![0.0; if me == 0 { mine.len() * p } else { 0 }];
    c.gather_f64(&mine, &mut all)?;
    if me != 0 {
        return Ok(None);
    }
    let per_rank: Vec<PhaseTimes> = all
        .chunks_exact(mine.len())
        .map(|w| {
            PhaseTimes::new(
                w[1],
                Phases {
                    spmv: w[2],
                    dot: w[3],
                    axpy: w[4],
                    allgather: w[5],
                    allreduce: w[6],
                },
            )
        })
        .collect();
    let breakdown = stats.phases.map(|_| {
        let rank0 = per_rank[0];
        let per_iteration = clock_reads_per_iteration(opts.schedule);
        let reads = f64::from(per_iteration) * stats.iterations as f64;
        Breakdown {
            rank0,
            max: PhaseTimes::max_of(&per_rank),
            min: PhaseTimes::min_of(&per_rank),
            per_rank: per_rank.clone(),
            clock_ns,
            clock_reads_per_iteration: per_iteration,
            clock_share: if rank0.total > 0.0 {
                (reads * clock_ns * 1e-9 / rank0.total).min(1.0)
            } else {
                0.0
            },
        }
    });

    let (mode, tol) = match opts.stop {
        Stop::Fixed { .. } => ("fixed", None),
        Stop::Tolerance { tol, .. } => ("tolerance", Some(tol)),
    };
    let mut warnings = Vec::new();
    match stats.outcome {
        Outcome::IterationLimit => warnings.push(format!(
            "did not converge: ||r||/||r0|| = {:.3e} after {} iterations, above --tol {:e}; \
             {}",
            stats.rel_residual,
            thousands(stats.iterations),
            tol.unwrap_or(0.0),
            match opts.precond {
                Precond::None =>
                    "raise --max-iters, or try --precond jacobi (unpreconditioned \
                                  CG needs O(sqrt(cond(A))) iterations)",
                Precond::Jacobi => "raise --max-iters",
            }
        )),
        Outcome::ResidualVanished => warnings.push(format!(
            "stopped after {} of {} iterations: the residual fell below {VANISHED:e} of its \
             start, and further iterations would compute on subnormal numbers (much slower, \
             so the timing would lie) and then divide 0 by 0; times per iteration are over \
             the iterations done",
            thousands(stats.iterations),
            thousands(max_iters)
        )),
        Outcome::ZeroResidual => warnings.push(
            "b - A x0 is zero (b = 0): x = 0 is the solution and nothing was iterated".into(),
        ),
        Outcome::Completed | Outcome::Converged => {}
    }
    if let Some(t) = tol {
        if stats.outcome == Outcome::Converged && chk.true_rel_residual > 10.0 * t {
            warnings.push(format!(
                "the recursive residual converged ({:.3e}) but the true residual \
                 ||b - A x|| / ||b|| is {:.3e}: rounding errors dominate (A is \
                 ill-conditioned); the answer is only that accurate",
                stats.rel_residual, chk.true_rel_residual
            ));
        }
    }
    Ok(Some(Report {
        transport: c.name(),
        matrix: lp.info.clone(),
        rhs: opts.problem.rhs.to_string(),
        ranks: p as u32,
        rows_per_rank: lp.part.counts.iter().map(|&r| r as u64).collect(),
        nnz_per_rank: all.chunks_exact(mine.len()).map(|w| w[0] as u64).collect(),
        mode: mode.into(),
        precond: opts.precond,
        partition: opts.problem.partition,
        schedule: opts.schedule,
        max_iterations: max_iters,
        tol,
        iterations: stats.iterations,
        outcome: stats.outcome,
        relative_residual: stats.rel_residual,
        true_relative_residual: chk.true_rel_residual,
        solution_error: chk.solution_error,
        setup_s,
        total_s: stats.total_s,
        per_iteration_s: if stats.iterations > 0 {
            stats.total_s / stats.iterations as f64
        } else {
            0.0
        },
        breakdown,
        notes: lp.notes.clone(),
        warnings,
    }))
}
