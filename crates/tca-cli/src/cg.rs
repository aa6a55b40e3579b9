//! `tca cg ...`: parsing and printing; the solver, its processes and its reports are in
//! `tca-cg`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use tca_cg::job;
use tca_cg::{
    MatrixSource, Options, Outcome, Output, PartitionBy, Precond, Problem, Rhs, Schedule, Stop,
};
use tca_mpi::Role;

/// Iterations of fixed mode when neither --iters nor --tol is given (the paper's count).
const DEFAULT_ITERS: u64 = 1000;
/// Tolerance mode's iteration limit when --max-iters is not given.
const DEFAULT_MAX_ITERS: u64 = 20_000;

const AFTER_HELP: &str = "\
MATRICES
  FILE            a Matrix Market file, plain or gzip-compressed: coordinate or array;
                  real, integer or pattern; general or symmetric (lower triangle stored).
                  It must be square, symmetric (values within a relative 1e-8), with a
                  positive diagonal and no NaN. A pattern matrix gets the values of its
                  graph Laplacian plus the identity (SPD, same structure).
  poisson3d:M     the 3-D Poisson 7-point matrix on an M x M x M grid (M^3 rows).
  banded:N:K      N rows, K nonzeros per row (K odd), SPD; the paper's nd24k is about
                  banded:72000:399. Every rank generates its own rows.

RIGHT-HAND SIDES
  ones, random[:SEED], manufactured[:SEED] (b = A x* for a random x*: the solution's
  error ||x - x*|| / ||x*|| is reported), a-ones (b = A 1, the solution all ones, as the
  SuiteSparse checks and scipy's examples use), or a Matrix Market vector file (file:PATH
  or PATH).

PRECONDITIONER
  --precond none (default, the paper's CG) or jacobi: z = D^-1 r with D the diagonal of A.
  Same collectives per iteration, one more vector product; on badly scaled matrices
  (bcsstk13, bcsstk18, bcsstk24, s3rmt3m3: no convergence to 1e-8 in 20,000 iterations
  without) it converges in hundreds to thousands of iterations. Both stop on ||r||/||r0||.

SCHEDULE
  --schedule paper (default): the Allgather of p, then the SpMV, as the paper.
  --schedule overlap: the Allgather is started, the SpMV's entries in the rank's own
  columns are computed while it runs, the others after it. Same arithmetic, rounded in
  another order; with --compare mpi the MPI build overlaps the same way (MPI_Iallgatherv).
  tca's p lives in tca's memory and every rank puts its block straight into every peer's
  copy (one copy per byte, seed 000's remote writes and flags); on a simulated network
  (--network) the collective algorithms gather it, as the simulation models them.

PARTITION
  --partition rows (default, the paper's): floor(N/p) rows per rank, the last rank the rest.
  --partition nnz: contiguous blocks of about equal work (a row weighs its nonzeros plus
  one), so that on a matrix whose rows differ in length the heaviest rank's SpMV, which
  every iteration waits for, is shorter. The same on the MPI build with --compare mpi.

RUNNING
  tca cg starts its own ranks (--np) under tca's launcher; rank 0 reads the matrix and
  scatters the row blocks (see PARTITION). With
  --compare mpi it then runs the same solver with MPI doing the two collectives (build
  with --features mpi), and prints both and the ratio tca/MPI.
  Fixed mode (--iters, default 1000) times the iterations (it stops early, with a
  warning, if the residual falls below 1e-150 of its start, short of floating-point
  underflow); tolerance mode (--tol) stops on ||r||/||r0|| < EPS. --breakdown times each
  phase (11 clock reads per iteration, 13 with the overlap; the cost is reported). Exit status: 0; 1 on an
  error (bad input, a breakdown such as p.Ap <= 0); 2 if --tol was not reached.

EXAMPLES
  tca cg --matrix nasa2910.mtx --np 2 --iters 1000 --breakdown --compare mpi
  tca cg --matrix poisson3d:31 --np 4 --tol 1e-8 --rhs manufactured
  tca cg --matrix bcsstk14.mtx --np 2 --tol 1e-8 --rhs a-ones --precond jacobi
  tca cg --matrix banded:72000:399 --np 2 --iters 100 --format json
  tca cg --matrix nasa2910.mtx --np 16 --iters 100 --breakdown --network peach2-2x8";

/// The distributed CG solver of seed 000 (Fig. 13) on a Matrix Market or synthetic matrix.
#[derive(clap::Args, Debug)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct Args {
    /// The matrix: a Matrix Market file, poisson3d:M or banded:N:K (see --help).
    #[arg(long, value_name = "FILE|poisson3d:M|banded:N:K")]
    matrix: String,
    /// Number of ranks.
    #[arg(long, default_value_t = 2)]
    np: u32,
    /// Fixed mode: exactly K iterations, for timing [default: 1000].
    #[arg(long, value_name = "K", conflicts_with = "tol")]
    iters: Option<u64>,
    /// Tolerance mode: stop when ||r|| / ||r0|| < EPS.
    #[arg(long, value_name = "EPS")]
    tol: Option<f64>,
    /// Tolerance mode's iteration limit [default: 20000].
    #[arg(long, value_name = "K", requires = "tol")]
    max_iters: Option<u64>,
    /// Preconditioner: none (the paper's CG) or jacobi (D⁻¹; for badly scaled matrices).
    #[arg(long, default_value = "none", value_parser = parse_precond, value_name = "none|jacobi")]
    precond: Precond,
    /// Lines 14-15: the paper's order, or the Allgather overlapped with the SpMV's local part.
    #[arg(long, default_value = "paper", value_parser = parse_schedule, value_name = "paper|overlap")]
    schedule: Schedule,
    /// The row split: rows (the paper's, floor(N/p) each) or nnz (blocks of equal work).
    #[arg(long, default_value = "rows", value_parser = parse_partition, value_name = "rows|nnz")]
    partition: PartitionBy,
    /// Right-hand side: ones, random[:SEED], manufactured[:SEED], a-ones or a vector file.
    #[arg(long, default_value = "ones", value_name = "RHS")]
    rhs: String,
    /// Time SpMV, DOT, AXPY, Allgather and Allreduce separately (rank 0 and the maximum).
    #[arg(long)]
    breakdown: bool,
    /// Run the same solver with MPI's collectives too and print both with the ratio.
    #[arg(long, value_name = "mpi", value_parser = ["mpi"])]
    compare: Option<String>,
    /// Run the solve this many times, alternating with MPI's under --compare, and report each
    /// half's median round by time per iteration; the cache-line floor is measured before
    /// each half (also with --compare alone) and noted, flagged where it moved.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// The mpirun for --compare mpi (default: $TCA_MPIRUN, else mpirun on the PATH).
    #[arg(long, value_name = "PATH")]
    mpirun: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// No progress bar (it shows only on a terminal, for solves longer than half a second).
    #[arg(long)]
    no_progress: bool,
    /// Solve on a simulated network instead of this machine, in virtual time: a model name
    /// (`tca sim networks`) or a TOML file. Ranks are threads of this process.
    #[arg(long, value_name = "NAME|FILE", conflicts_with = "compare")]
    network: Option<String>,
    /// With --network: how computation costs virtual time: `model` (only the reductions in
    /// the collectives, at the model's rate: the times are communication) or
    /// `measured:SCALE` (host time of SpMV, DOT, AXPY x SCALE; varies with the host's load).
    #[arg(
        long,
        requires = "network",
        value_name = "model|measured:SCALE",
        default_value = "model"
    )]
    compute: String,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Text,
    Json,
}

/// `--precond`, by the solver's own parser (one list of names).
fn parse_precond(s: &str) -> Result<Precond, String> {
    Precond::parse(s).map_err(|e| e.to_string())
}

/// `--partition`, by the solver's own parser.
fn parse_partition(s: &str) -> Result<PartitionBy, String> {
    PartitionBy::parse(s).map_err(|e| e.to_string())
}

/// `--schedule`, by the solver's own parser.
fn parse_schedule(s: &str) -> Result<Schedule, String> {
    Schedule::parse(s).map_err(|e| e.to_string())
}

fn options(a: &Args) -> Result<Options> {
    if a.np == 0 {
        bail!("--np must be at least 1");
    }
    let stop = match a.tol {
        Some(tol) => {
            if !(tol > 0.0 && tol < 1.0) {
                bail!("--tol {tol}: the tolerance must be in (0, 1)");
            }
            let max_iters = a.max_iters.unwrap_or(DEFAULT_MAX_ITERS);
            if max_iters == 0 {
                bail!("--max-iters must be at least 1");
            }
            Stop::Tolerance { tol, max_iters }
        }
        None => {
            let iters = a.iters.unwrap_or(DEFAULT_ITERS);
            if iters == 0 {
                bail!("--iters must be at least 1");
            }
            Stop::Fixed { iters }
        }
    };
    Ok(Options {
        problem: Problem {
            matrix: MatrixSource::parse(&a.matrix)?,
            rhs: Rhs::parse(&a.rhs)?,
            partition: a.partition,
        },
        stop,
        precond: a.precond,
        schedule: a.schedule,
        breakdown: a.breakdown,
        progress: !a.no_progress,
    })
}

/// Files that cannot even be opened are reported before any rank starts.
fn preflight(o: &Options) -> Result<()> {
    let mut files = Vec::new();
    if let MatrixSource::File(p) = &o.problem.matrix {
        files.push(p);
    }
    if let Rhs::File(p) = &o.problem.rhs {
        files.push(p);
    }
    for p in files {
        std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
    }
    Ok(())
}

fn print(out: &Output, format: Format) {
    match format {
        Format::Text => print!("{}", out.text()),
        Format::Json => println!("{}", out.to_json()),
    }
}

/// 2 when tolerance mode ended without reaching the tolerance.
fn status(out: &Output) -> i32 {
    let unconverged = std::iter::once(&out.tca)
        .chain(out.mpi.as_ref())
        .any(|r| r.outcome == Outcome::IterationLimit);
    if unconverged { 2 } else { 0 }
}

pub(crate) fn run(a: Args) -> Result<i32> {
    let opts = options(&a)?;
    if a.rounds > 1 && a.network.is_some() {
        bail!("--rounds with --network: virtual times are the same in every round");
    }
    if a.rounds > 1
        && tca_mpi::role() == Role::TcaRank
        && std::env::var_os(tca_mpi::TCA_RESULT_ENV).is_none()
    {
        bail!(
            "--rounds alternates whole jobs that `tca cg` starts itself; started by `tca run` \
             or a batch system, run the command once per round"
        );
    }
    if let Some(net) = &a.network {
        let sim = crate::sim::options(net, a.np, false, &a.compute, None)?;
        preflight(&opts)?;
        let report = tca_cg::job::simulate(&opts, a.np, &sim)?;
        if a.format == Format::Text {
            println!(
                "# SIMULATED on {} ({}): virtual time; computation {}",
                sim.network.name,
                sim.network.shape(),
                if a.compute == "model" {
                    "not charged except the collectives' reductions"
                } else {
                    "measured on this host and scaled"
                }
            );
        }
        let out = Output::new(report, None);
        print(&out, a.format);
        return Ok(status(&out));
    }
    let own = |r: Option<tca_cg::Report>| -> i32 {
        match r {
            Some(r) => {
                let out = Output::new(r, None);
                print(&out, a.format);
                status(&out)
            }
            None => 0,
        }
    };
    match tca_mpi::role() {
        Role::TcaRank => Ok(own(job::tca_rank(&opts, a.np)?)),
        Role::MpiRank => Ok(own(job::mpi_rank(&opts)?)),
        Role::Parent => {
            preflight(&opts)?;
            let compare = a.compare.as_ref().map(|_| tca_mpi::MpiRun {
                np: a.np,
                mpirun: a.mpirun.clone(),
            });
            let out = job::launch(a.np, compare, a.rounds)?;
            print(&out, a.format);
            Ok(status(&out))
        }
    }
}
