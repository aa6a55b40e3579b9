//! # tca-cg — the distributed Conjugate Gradient solver of seed 000
//!
//! Seed 000 (section 5, Fig. 13 to 15) solves A x = b, A an N x N sparse symmetric positive
//! definite matrix in CSR, split by rows over p ranks (n = floor(N/p) rows each, the last rank
//! takes the rest; beyond the paper, `--partition nnz` gives blocks of equal work), with
//! unpreconditioned CG (and, beyond the paper, Jacobi-preconditioned CG, `--precond jacobi`).
//! Each iteration does one Allgather of the direction vector, one SpMV, three local dot
//! products each followed by an 8-byte AllreduceSum, and three AXPYs. Its point is
//! communication: the Allgather (kilobytes to
//! megabytes) and the three 8-byte Allreduces are latency-bound for small matrices, where
//! TCA beat MPI/InfiniBand up to 36,000 rows, and the per-phase breakdown (Fig. 15) shows
//! why. This crate is that solver on tca's collectives, and with the `mpi` feature the same
//! solver on MPI, run side by side by `tca cg --compare mpi`.
//!
//! ## Vocabulary
//! - **row block**: a rank's rows of A and its blocks of x, r, b ([`Partition`]).
//! - **phase**: SpMV, DOT, AXPY, Allgather, Allreduce, timed separately ([`Phases`]).
//! - **fixed mode** / **tolerance mode**: K iterations for timing, or until ||r||/||r0|| < ε
//!   ([`Stop`]).
//! - **transport**: who does the two collectives: a `tca::Comm` or MPI
//!   (`tca_mpi::MpiComm`), behind the tools' one trait ([`tca_mpi::Backend`]).
//!
//! ## Contents
//! - [`solver`]: the iteration of Fig. 13, written once, generic over [`tca_mpi::Backend`];
//!   its module doc has the algorithm, the memory plan, the stopping rules and the timing
//!   cost.
//! - [`partition`]: the row [`Partition`]: the paper's (equal blocks, the remainder on the last
//!   rank) or blocks of equal work ([`PartitionBy`]).
//! - `mpi` (feature `mpi`): the MPI half (MPI's start-up around the same run).
//! - [`problem`]: the input (matrix file or generator, right-hand side) and how it reaches
//!   the ranks: rank 0 reads, checks and scatters; why is in its module doc.
//! - [`mm`]: Matrix Market files (via nalgebra-sparse), gzip, pattern matrices.
//! - [`matrix`]: [`Csr`], the SPD checks, SpMV. [`synth`]: generated matrices.
//! - [`run`]: one rank's whole run and its [`Report`]; [`report`]: reports, JSON, text.
//! - [`job`]: processes: the command that starts its ranks, the ranks that answer it.
//! - [`error`]: [`CgError`]; bad input and breakdown are errors every rank reaches together.
//!
//! ## Example (ranks as threads)
//! ```
//! use tca_cg::{MatrixSource, Options, PartitionBy, Precond, Problem, Rhs, Schedule, Stop};
//!
//! let opts = Options {
//!     problem: Problem {
//!         matrix: MatrixSource::parse("poisson3d:6").unwrap(),
//!         rhs: Rhs::Manufactured { seed: 1 },
//!         partition: PartitionBy::Nnz,
//!     },
//!     stop: Stop::Tolerance { tol: 1e-10, max_iters: 1000 },
//!     precond: Precond::None,
//!     schedule: Schedule::Overlap,
//!     breakdown: true,
//!     progress: false,
//! };
//! let reports = tca::threads::run(3, |world| {
//!     let mut comm = tca::Comm::world(world)?;
//!     Ok(tca_cg::run_rank(&mut comm, &opts).expect("solves"))
//! })?;
//! let r = reports[0].as_ref().unwrap();
//! assert!(r.true_relative_residual < 1e-9);
//! assert!(r.solution_error.unwrap() < 1e-8);
//! # Ok::<(), tca::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod job;
pub mod matrix;
pub mod mm;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod partition;
pub mod problem;
pub mod report;
pub mod run;
pub mod solver;
pub mod synth;

pub use error::CgError;
pub use matrix::Csr;
pub use partition::{Partition, PartitionBy};
pub use problem::{LocalProblem, MatrixInfo, MatrixSource, Problem, Rhs, setup};
pub use report::{Output, Report};
pub use run::{Options, run_rank};
pub use solver::{Outcome, Phases, Precond, Schedule, Solution, Stop, solve};
