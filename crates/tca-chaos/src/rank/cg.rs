//! A CG step: a small solve of the distributed CG of `tca_cg` (Allgathers and 8-byte
//! Allreduces, the latency-bound mix of seed 000), on a generated matrix every rank builds
//! its own rows of, with a manufactured right-hand side b = A x*: the answer is checked
//! against x* itself, not only through the residual the solver reports.
//!
//! Matrices: `banded:N:K` (N 300 to 3,000, K 3 to 9) or `poisson3d:M` (M 4 to 12: 64 to
//! 1,728 rows), with or without the Jacobi preconditioner, the paper's row split or blocks of
//! equal work (`PartitionBy`, alternating by round), to 1e-10: tens to a few hundred
//! iterations. Thresholds: true relative residual below 1e-8 and error against x* below
//! 1e-6 (the matrices' condition numbers are at most a few hundred).

use tca::Comm;
use tca_cg::solver::{Outcome, Precond, Schedule, Stop};
use tca_cg::{CgError, MatrixSource, PartitionBy, Problem, Rhs};

use super::{Fail, Step, check};
use crate::rng::Rng;

impl From<CgError> for Fail {
    fn from(e: CgError) -> Self {
        match e {
            CgError::Comm(e) => Fail::Tca(e),
            // The problem is generated, symmetric positive definite and finite: a breakdown
            // or a non-finite value can only come from data the library corrupted.
            e @ (CgError::Breakdown(_) | CgError::NotFinite(_)) => {
                Fail::Wrong(format!("CG on a generated SPD problem: {e}"))
            }
            other => Fail::Other(format!("CG: {other}")),
        }
    }
}

/// One CG step (collective).
pub(crate) fn step(c: &mut Comm, round: u64, r: &mut Rng) -> Step {
    let matrix = if r.one_in(2) {
        let k = [3, 5, 7, 9][r.index(4)];
        format!("banded:{}:{k}", r.range(300, 3000))
    } else {
        format!("poisson3d:{}", r.range(4, 12))
    };
    let precond = if r.one_in(2) {
        Precond::Jacobi
    } else {
        Precond::None
    };
    // From the round, not the generator, so that a seed's later draws stay as they were.
    let partition = if round / 2 % 2 == 1 {
        PartitionBy::Nnz
    } else {
        PartitionBy::Rows
    };
    let problem = Problem {
        matrix: MatrixSource::parse(&matrix)?,
        rhs: Rhs::Manufactured { seed: round },
        partition,
    };
    let lp = tca_cg::setup(c, &problem)?;
    let stop = Stop::Tolerance {
        tol: 1e-10,
        max_iters: 5000,
    };
    let schedule = if round % 2 == 1 {
        Schedule::Overlap
    } else {
        Schedule::Paper
    };
    let sol = tca_cg::solve(c, &lp, stop, precond, schedule, false, None)?;
    let q = tca_cg::run::check(c, &lp, &sol.x)?;
    let err = q.solution_error.unwrap_or(f64::INFINITY);
    check(
        sol.stats.outcome == Outcome::Converged && q.true_rel_residual < 1e-8 && err < 1e-6,
        || {
            format!(
                "CG on {matrix} ({precond:?}, {schedule}, split by {partition}), round {round}: {:?} after {} iterations, true \
                 residual {:.2e}, error {err:.2e}",
                sol.stats.outcome, sol.stats.iterations, q.true_rel_residual
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_verify_on_thread_ranks() {
        super::super::on_thread_ranks(13, 6, |_| (), |(), c, round, r| step(c, round, r));
    }
}
