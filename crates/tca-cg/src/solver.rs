//! The Conjugate Gradient iteration of seed 000, Fig. 13, on any [`Backend`].
//!
//! ```text
//!  1: x := Allgather(x_l)                        (x0 = 0)
//!  2: r_l := b_l - A_l x
//!  3: d_t := r_l·r_l
//!  4: norm0 := sqrt(AllreduceSum(d_t))
//!  5: for k := 1, 2, ... do
//!  6:   ρ_t := r_l·r_l
//!  7:   ρ := AllreduceSum(ρ_t)
//!  8:   if k = 1 then
//!  9:     p_l := r_l
//! 10:   else
//! 11:     β := ρ / ρ_prev
//! 12:     p_l := β p_l + r_l
//! 13:   end if
//! 14:   p := Allgather(p_l)
//! 15:   q_l := A_l p
//! 16:   α_t := p_l·q_l
//! 17:   α := ρ / AllreduceSum(α_t)
//! 18:   x_l := α p_l + x_l
//! 19:   r_l := -α q_l + r_l
//! 20:   d_t := r_l·r_l
//! 21:   norm := sqrt(AllreduceSum(d_t))
//! 22:   if norm / norm0 < ε then break
//! 25:   ρ_prev := ρ
//! 26: end for
//! ```
//! With `--precond jacobi` (Jacobi-preconditioned CG, not in the paper, whose runs are
//! unpreconditioned): z_l := D_l⁻¹ r_l, D the diagonal of A, and lines 6, 9 and 12 use z
//! where they use r (ρ_t := r_l·z_l, p_l := z_l, p_l := β p_l + z_l); lines 20-22 still test
//! the true residual norm ||r||, so both forms stop on the same criterion. The same
//! collectives in the same order, one more vector product per iteration (timed with the DOT
//! it feeds), and for matrices whose rows are scaled very differently (the stiffness
//! matrices bcsstk*, condition numbers 1e10-1e12) a fraction of the iterations. The diagonal
//! is checked positive on every rank and the verdict allreduced, so a bad one is an error
//! every rank returns together.
//!
//! With `--schedule overlap` (not in the paper either) lines 14-15 become: start the
//! Allgather of p, compute the SpMV's entries in this rank's own columns (A_l,own · p_l, which
//! needs nothing from the other ranks) while it runs, wait for it, then add the entries in the
//! other columns (A_l,other · p). The split is made once, before the clock starts
//! ([`crate::matrix::Csr::split`]). Each row's sum is then formed in two parts, so the iterates
//! differ from the paper schedule's in rounding only. What the overlap hides is up to the
//! library: MPI's and tca's collective algorithms move data only while called, so there it
//! hides what the start does at once and the waiting for a late peer; tca's gathered vector
//! is written by the peers' own puts (on shared memory, and RDMA writes where a network's
//! provider does them), so a peer's block is in place whatever the rank does meanwhile
//! (BENCHMARKS.md, "CG: the one-copy Allgather, the overlapped schedule and the SpMV kernel").
//!
//! Per iteration: one Allgather of p (N doubles in all), one SpMV, three DOTs each followed
//! by an 8-byte AllreduceSum, three AXPYs. Lines 16-17 are written as the paper means them:
//! the *local dot* is reduced and ρ divided by the sum (the Japanese text's line 16 reads
//! "α_t := ρ/(p_l·q_l)", which would sum quotients). The dot of line 6 equals the one of
//! line 20 of the previous iteration; it is kept, as the paper counts three DOTs and three
//! Allreduces per iteration and this is a benchmark of exactly that schedule.
//!
//! Memory: p is the backend's gathered vector ([`Backend::gathered`]): with tca, a vector
//! in tca's memory that every peer writes its block straight into (one copy,
//! [`tca::Comm::allgatherv_init`]; on a simulated network a plain vector and the collective
//! algorithms the simulation models), with MPI a plain vector and `MPI_Allgatherv`. p_l is a
//! vector of its own: line 12 updates it and writes the result into p's block in the same
//! pass, and lines 16-18 read it. Every vector is allocated before the clock starts; the loop
//! does no allocation and no system call besides the clock reads below, except where a
//! library's non-blocking Allgather allocates its request's state (MPI's libnbc schedule; tca
//! on a simulated network).
//!
//! Stopping: `Stop::Fixed` runs exactly K iterations (the paper's timing mode, 1,000) unless
//! the residual falls below [`VANISHED`] of its start. The recursively updated residual of
//! line 19 keeps shrinking long after the true residual has stagnated at rounding level, by
//! a constant factor per iteration: a well-conditioned matrix (fv1, cond 9: a factor 2 per
//! iteration) gets to 1e-150 in about 500 iterations. A few dozen iterations later ρ = r·r
//! would underflow: the scalars and then the vectors turn subnormal (tens of times slower
//! on x86, so the timing would lie) and β = 0/0 makes everything NaN. The run stops there
//! and says so; times per iteration stay valid over the iterations done. 1e-150 leaves ρ
//! (1e-300 ||r0||²) a normal number for any ||r0|| above 1e-4. `Stop::Tolerance` stops on
//! ||r|| / ||r0|| < ε or after K iterations.
//! Breakdown is an error on every rank together (decided on allreduced values): p·Ap ≤ 0 means
//! the matrix is not positive definite (or, for p·Ap = 0, that it underflowed); a NaN or
//! infinite value means the solve diverged.
//!
//! Timing (`timed`): the phase clock reads the backend's clock ([`Backend::wtime`]:
//! `Instant`-based, `MPI_Wtime`, or virtual time on a simulated network) at each phase boundary, 11
//! reads per iteration, 13 with the overlap (about 20 ns each with the vDSO clock: a quarter
//! of a microsecond per
//! iteration, under 1% of an iteration of the paper's smallest matrix on two ranks; the
//! report gives the measured share). The paper did the same with gettimeofday (0.04 us per
//! call, under 0.5% of the nasa2910 run). Untimed runs compile the clock away (a const
//! generic), so the totals without `--breakdown` carry no clock cost at all.

use std::time::Instant;

use indicatif::ProgressBar;

use crate::error::{CgError, Result};
use crate::matrix::Split;
use crate::problem::LocalProblem;
use tca_mpi::{Backend, GatheredVector};

/// The preconditioner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precond {
    /// None: the paper's CG.
    #[default]
    None,
    /// Jacobi: z = D⁻¹ r with D the diagonal of A (see the module doc).
    Jacobi,
}

impl Precond {
    /// `none` or `jacobi`.
    pub fn parse(s: &str) -> Result<Precond> {
        match s {
            "none" => Ok(Precond::None),
            "jacobi" => Ok(Precond::Jacobi),
            _ => Err(CgError::Invalid(format!(
                "--precond {s}: expected `none` or `jacobi`"
            ))),
        }
    }
}

impl std::fmt::Display for Precond {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precond::None => "none",
            Precond::Jacobi => "jacobi",
        })
    }
}

/// The order of lines 14-15 (the Allgather of p and the SpMV).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// The paper's: the Allgather, then the whole SpMV.
    #[default]
    Paper,
    /// The Allgather started, the SpMV's part in this rank's own columns done meanwhile, the
    /// rest after it (see the module doc).
    Overlap,
}

impl Schedule {
    /// `paper` or `overlap`.
    pub fn parse(s: &str) -> Result<Schedule> {
        match s {
            "paper" => Ok(Schedule::Paper),
            "overlap" => Ok(Schedule::Overlap),
            _ => Err(CgError::Invalid(format!(
                "--schedule {s}: expected `paper` or `overlap`"
            ))),
        }
    }
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Schedule::Paper => "paper",
            Schedule::Overlap => "overlap",
        })
    }
}

/// How the iteration stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// Exactly `iters` iterations (the paper's timing mode), barring [`VANISHED`].
    Fixed {
        /// Iterations.
        iters: u64,
    },
    /// Until ||r|| / ||r0|| < `tol`, at most `max_iters` iterations.
    Tolerance {
        /// ε.
        tol: f64,
        /// Iteration limit.
        max_iters: u64,
    },
}

/// Relative residual below which a run stops even in fixed mode (see the module doc).
pub const VANISHED: f64 = 1e-150;

/// Relative residual above which the solve counts as diverged: CG on a symmetric positive
/// definite matrix keeps ||r_k|| / ||r_0|| below 2 sqrt(cond(A)), and no double-precision
/// matrix has a condition number near 1e30.
pub const DIVERGED: f64 = 1e15;

/// How a solve ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Fixed mode: all the iterations asked for were done.
    Completed,
    /// Tolerance mode: ||r|| / ||r0|| < ε.
    Converged,
    /// Tolerance mode: the iteration limit came first.
    IterationLimit,
    /// The residual fell below [`VANISHED`] of its start; stopped early.
    ResidualVanished,
    /// b - A x0 = 0: x0 = 0 is the solution, nothing to iterate.
    ZeroResidual,
}

/// Seconds spent in each phase of the iteration.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Phases {
    /// Sparse matrix-vector products (lines 2, 15).
    pub spmv: f64,
    /// Local dot products (lines 3, 6, 16, 20).
    pub dot: f64,
    /// Vector updates (lines 2, 9/12, 18, 19).
    pub axpy: f64,
    /// Allgathers (lines 1, 14).
    pub allgather: f64,
    /// 8-byte AllreduceSums (lines 4, 7, 17, 21).
    pub allreduce: f64,
}

/// Clock reads per iteration when timed: one start and ten laps, two laps more with the
/// overlap (the Allgather's start and the SpMV's own part are timed apart).
pub fn clock_reads_per_iteration(schedule: Schedule) -> u32 {
    match schedule {
        Schedule::Paper => 11,
        Schedule::Overlap => 13,
    }
}

/// What a solve did, on this rank.
#[derive(Debug, Clone, PartialEq)]
pub struct SolveStats {
    /// Iterations done.
    pub iterations: u64,
    /// ||r|| / ||r0|| at the end (the recursively updated residual of line 19).
    pub rel_residual: f64,
    /// ||r0|| = ||b|| (x0 = 0).
    pub norm0: f64,
    /// How it ended.
    pub outcome: Outcome,
    /// Seconds from line 1 to the end of the loop (after a barrier).
    pub total_s: f64,
    /// Per-phase seconds, when timed.
    pub phases: Option<Phases>,
}

/// This rank's block of the solution and the statistics.
#[derive(Debug, Clone)]
pub struct Solution {
    /// x_l.
    pub x: Vec<f64>,
    /// Statistics.
    pub stats: SolveStats,
}

/// Solves the system of `lp` (collective) with `precond`, lines 14-15 in the order
/// `schedule`. `timed` turns on the per-phase clock; `progress`, on rank 0, is advanced from
/// time to time outside the timed phases.
pub fn solve<C: Backend>(
    c: &mut C,
    lp: &LocalProblem,
    stop: Stop,
    precond: Precond,
    schedule: Schedule,
    timed: bool,
    progress: Option<&ProgressBar>,
) -> Result<Solution> {
    let dinv = match precond {
        Precond::None => None,
        Precond::Jacobi => Some(inverse_diagonal(c, lp)?),
    };
    let split = match schedule {
        Schedule::Paper => None,
        Schedule::Overlap => Some(lp.a.split(lp.part.range(c.rank()))),
    };
    let how = How {
        stop,
        dinv: dinv.as_deref(),
        split: split.as_ref(),
        progress,
    };
    if timed {
        run::<C, true>(c, lp, how)
    } else {
        run::<C, false>(c, lp, how)
    }
}

/// What [`run`] is to do besides the paper's iteration.
struct How<'a> {
    stop: Stop,
    /// D⁻¹, with Jacobi.
    dinv: Option<&'a [f64]>,
    /// The rows split by column, with [`Schedule::Overlap`].
    split: Option<&'a Split>,
    progress: Option<&'a ProgressBar>,
}

/// This rank's block of D⁻¹ (collective): an error on every rank if any rank's diagonal has
/// an entry that is missing, not positive or not finite.
fn inverse_diagonal<C: Backend>(c: &mut C, lp: &LocalProblem) -> Result<Vec<f64>> {
    let lo = lp.part.range(c.rank()).start;
    let d: Vec<f64> = (0..lp.a.n_rows)
        .map(|i| lp.a.get(i, lo + i).unwrap_or(0.0))
        .collect();
    let bad = d.iter().filter(|&&x| !(x > 0.0 && x.is_finite())).count();
    // Counts below 2^53 are exact in an f64 sum.
    let all_bad = c.allreduce_sum_f64(bad as f64)?;
    if all_bad > 0.0 {
        return Err(CgError::Diagonal(format!(
            "--precond jacobi: {all_bad} diagonal entries are missing, not positive or not \
             finite; Jacobi needs a positive diagonal"
        )));
    }
    Ok(d.iter().map(|x| 1.0 / x).collect())
}

const SPMV: usize = 0;
const DOT: usize = 1;
const AXPY: usize = 2;
const ALLGATHER: usize = 3;
const ALLREDUCE: usize = 4;

/// The phase clock (the backend's: virtual time on a simulated network); with `ON = false`
/// every method is empty and compiles away.
struct Clock<const ON: bool> {
    last: f64,
    acc: [f64; 5],
}

impl<const ON: bool> Clock<ON> {
    fn new() -> Self {
        Self {
            last: 0.0,
            acc: [0.0; 5],
        }
    }
    #[inline(always)]
    fn start<C: Backend>(&mut self, c: &C) {
        if ON {
            self.last = c.wtime();
        }
    }
    #[inline(always)]
    fn lap<C: Backend>(&mut self, c: &C, phase: usize) {
        if ON {
            let now = c.wtime();
            self.acc[phase] += now - self.last;
            self.last = now;
        }
    }
    fn phases(&self) -> Option<Phases> {
        ON.then(|| Phases {
            spmv: self.acc[SPMV],
            dot: self.acc[DOT],
            axpy: self.acc[AXPY],
            allgather: self.acc[ALLGATHER],
            allreduce: self.acc[ALLREDUCE],
        })
    }
}

fn run<C: Backend, const TIMED: bool>(
    c: &mut C,
    lp: &LocalProblem,
    how: How<'_>,
) -> Result<Solution> {
    let How {
        stop,
        dinv,
        split,
        progress,
    } = how;
    let part = &lp.part;
    let mine = part.range(c.rank());
    let (a, b) = (&lp.a, &lp.b[..]);
    let (max_iters, tol) = match stop {
        Stop::Fixed { iters } => (iters, None),
        Stop::Tolerance { tol, max_iters } => (max_iters, Some(tol)),
    };
    let mut x = vec![0.0; mine.len()];
    let mut r = vec![0.0; mine.len()];
    let mut q = vec![0.0; mine.len()];
    // z = D⁻¹ r with Jacobi; without, r stands in for z.
    let mut z = vec![0.0; if dinv.is_some() { mine.len() } else { 0 }];
    // p (and x, for line 1): N entries where the library gathers them fastest (module doc,
    // "Memory"); this rank's p_l is `pl`, written into p's block for each Allgather.
    let mut p = c.gathered(part.n, &part.counts, &part.displs)?;
    let mut pl = vec![0.0; mine.len()];
    let every = (max_iters / 200).max(1);
    let mut clk = Clock::<TIMED>::new();

    c.barrier()?;
    let t0 = c.wtime();
    clk.start(c);
    // Lines 1-4.
    p.block_mut().copy_from_slice(&x);
    c.allgatherv_into(&mut p)?;
    clk.lap(c, ALLGATHER);
    a.spmv(p.vector()?, &mut q);
    clk.lap(c, SPMV);
    for ((ri, &bi), &qi) in r.iter_mut().zip(b).zip(&q) {
        *ri = bi - qi;
    }
    clk.lap(c, AXPY);
    let d = dot(&r, &r);
    clk.lap(c, DOT);
    let norm0 = c.allreduce_sum_f64(d)?.sqrt();
    clk.lap(c, ALLREDUCE);
    if !norm0.is_finite() {
        return Err(CgError::Breakdown(format!(
            "the solve diverged at the start: ||b - A x0|| overflows to {norm0}"
        )));
    }

    let mut k = 0u64;
    let mut rel = if norm0 == 0.0 { 0.0 } else { 1.0 };
    let mut rho_prev = 0.0;
    let outcome = loop {
        if norm0 == 0.0 {
            break Outcome::ZeroResidual;
        }
        if k == max_iters {
            break if tol.is_some() {
                Outcome::IterationLimit
            } else {
                Outcome::Completed
            };
        }
        k += 1;
        clk.start(c);
        // Lines 6-7 (with Jacobi: z := D⁻¹ r, ρ_t := r·z).
        let zs: &[f64] = match dinv {
            Some(d) => {
                for ((zi, &ri), &di) in z.iter_mut().zip(&r).zip(d) {
                    *zi = ri * di;
                }
                &z
            }
            None => &r,
        };
        let rho_t = dot(&r, zs);
        clk.lap(c, DOT);
        let rho = c.allreduce_sum_f64(rho_t)?;
        clk.lap(c, ALLREDUCE);
        // Lines 8-13.
        let beta = (k > 1).then(|| rho / rho_prev);
        direction(&mut pl, beta, zs, p.block_mut());
        clk.lap(c, AXPY);
        // Lines 14-15.
        match split {
            None => {
                c.allgatherv_into(&mut p)?;
                clk.lap(c, ALLGATHER);
                a.spmv(p.vector()?, &mut q);
            }
            Some(sp) => {
                c.allgatherv_into_overlapped(&mut p, |c| {
                    clk.lap(c, ALLGATHER);
                    sp.spmv_own(&pl, &mut q);
                    clk.lap(c, SPMV);
                })?;
                clk.lap(c, ALLGATHER);
                sp.spmv_other_add(p.vector()?, &mut q);
            }
        }
        clk.lap(c, SPMV);
        // Lines 16-17.
        let alpha_t = dot(&pl, &q);
        clk.lap(c, DOT);
        let pap = c.allreduce_sum_f64(alpha_t)?;
        clk.lap(c, ALLREDUCE);
        if !(pap > 0.0 && pap.is_finite()) {
            return Err(breakdown(pap, k));
        }
        let alpha = rho / pap;
        // Lines 18-19.
        axpy(&mut x, alpha, &pl);
        axpy(&mut r, -alpha, &q);
        clk.lap(c, AXPY);
        // Lines 20-21.
        let d = dot(&r, &r);
        clk.lap(c, DOT);
        let norm = c.allreduce_sum_f64(d)?.sqrt();
        clk.lap(c, ALLREDUCE);
        rel = norm / norm0;
        if !rel.is_finite() || rel > DIVERGED {
            return Err(CgError::Breakdown(format!(
                "the solve diverged: ||r|| / ||r0|| = {rel:e} at iteration {k}"
            )));
        }
        // Line 22.
        if tol.is_some_and(|t| rel < t) {
            break Outcome::Converged;
        }
        if rel < VANISHED {
            break Outcome::ResidualVanished;
        }
        rho_prev = rho;
        if k % every == 0 {
            if let Some(bar) = progress {
                bar.set_position(k);
            }
        }
    };
    let total_s = c.wtime() - t0;
    Ok(Solution {
        x,
        stats: SolveStats {
            iterations: k,
            rel_residual: rel,
            norm0,
            outcome,
            total_s,
            phases: clk.phases(),
        },
    })
}

fn breakdown(pap: f64, k: u64) -> CgError {
    CgError::Breakdown(if pap.is_nan() {
        format!(
            "the solve diverged: p·Ap is NaN at iteration {k} (values overflowed, or the \
             input holds NaN)"
        )
    } else if pap.is_infinite() {
        format!("the solve diverged: p·Ap overflowed to {pap} at iteration {k}")
    } else if pap == 0.0 {
        format!(
            "p·Ap = 0 at iteration {k}: the matrix is singular, or its values are so small \
             that p·Ap underflowed"
        )
    } else {
        format!(
            "the matrix is not positive definite: p·Ap = {pap:e} at iteration {k} (CG needs \
             p·Ap > 0 for every p != 0)"
        )
    })
}

/// a·b, with eight partial sums so that it vectorises (a fixed order: deterministic).
#[inline]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    let mut s = [0.0f64; 8];
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            s[k] += x[k] * y[k];
        }
    }
    let mut t = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (x, y) in ra.iter().zip(rb) {
        t += x * y;
    }
    t
}

/// y := a x + y.
#[inline]
pub fn axpy(y: &mut [f64], a: f64, x: &[f64]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// Lines 8-13: p_l := z_l at the first iteration (`beta` None), else β p_l + z_l; the new
/// p_l also into `block` (p's block for the Allgather), in the same pass.
#[inline]
fn direction(p: &mut [f64], beta: Option<f64>, z: &[f64], block: &mut [f64]) {
    match beta {
        None => {
            p.copy_from_slice(z);
            block.copy_from_slice(z);
        }
        Some(b) => {
            for ((pi, &zi), bi) in p.iter_mut().zip(z).zip(block) {
                *pi = b * *pi + zi;
                *bi = *pi;
            }
        }
    }
}

/// The cost of one `Instant::now()` here, in nanoseconds (the best of a few runs of 4,096).
pub fn clock_cost_ns() -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..4096 {
            std::hint::black_box(Instant::now());
        }
        best = best.min(t.elapsed().as_secs_f64() * 1e9 / 4096.0);
    }
    best
}
