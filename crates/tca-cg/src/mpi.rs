//! The MPI half of `tca cg --compare mpi`: the same [`run_rank`] as the tca half, on
//! [`tca_mpi::MpiComm`] (`MPI_Allgatherv` and an 8-byte `MPI_Allreduce`; its docs say where
//! MPI's Allgatherv does one small copy more than tca's).

use tca_mpi::mpi;
use tca_mpi::mpi::traits::*;

use crate::error::{CgError, Result};
use crate::report::Report;
use crate::run::{Options, run_rank};

thread_local! {
    static ROOT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this MPI rank is rank 0 (valid after [`run`]).
pub fn is_root() -> bool {
    ROOT.with(|r| r.get())
}

/// Initialises MPI, runs the job on `MPI_COMM_WORLD`, finalises MPI.
pub fn run(opts: &Options) -> Result<Option<Report>> {
    let universe = mpi::initialize()
        .ok_or_else(|| CgError::Mpi("MPI was already initialised in this process".into()))?;
    let world = universe.world();
    ROOT.with(|r| r.set(world.rank() == 0));
    let mut c = tca_mpi::MpiComm::new(world);
    let r = run_rank(&mut c, opts);
    c.world().barrier();
    r
}
