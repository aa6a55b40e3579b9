//! The solver's collectives on MPI (rsmpi), for `tca cg --compare mpi`: the same
//! [`run_rank`] as the tca half, with `MPI_Allgatherv` and an 8-byte `MPI_Allreduce`.
//!
//! One difference from the tca half, inside MPI's Allgather time: rsmpi offers no
//! `MPI_IN_PLACE` for `all_gather_varcount_into`, so this rank's block of p is first copied
//! to a send buffer (n doubles; for nasa2910 on two ranks 1,455 doubles, 11.6 KB, a fraction
//! of a microsecond). MPI copies its own block into the receive buffer in any case.

use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use tca_mpi::mpi;

use crate::coll::{Collectives, Partition};
use crate::error::{CgError, Result};
use crate::report::Report;
use crate::run::{Options, run_rank};

/// The solver's collectives on an MPI communicator.
pub struct MpiColl<'a> {
    world: &'a SimpleCommunicator,
    counts: Vec<i32>,
    displs: Vec<i32>,
    send: Vec<f64>,
}

impl std::fmt::Debug for MpiColl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiColl")
            .field("rank", &self.world.rank())
            .finish()
    }
}

impl<'a> MpiColl<'a> {
    /// Uses `world`.
    pub fn new(world: &'a SimpleCommunicator) -> Self {
        Self {
            world,
            counts: Vec::new(),
            displs: Vec::new(),
            send: Vec::new(),
        }
    }

    fn fit(&mut self, part: &Partition) -> Result<()> {
        let me = self.rank();
        let too_big = || CgError::Mpi(format!("{} rows exceed MPI's 32-bit counts", part.n));
        self.counts = part
            .counts
            .iter()
            .map(|&c| i32::try_from(c).map_err(|_| too_big()))
            .collect::<Result<_>>()?;
        self.displs = part
            .displs
            .iter()
            .map(|&c| i32::try_from(c).map_err(|_| too_big()))
            .collect::<Result<_>>()?;
        self.send = vec![0.0; part.counts[me]];
        Ok(())
    }
}

impl Collectives for MpiColl<'_> {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }
    fn size(&self) -> usize {
        self.world.size() as usize
    }
    fn label(&self) -> String {
        "MPI".into()
    }
    fn prepare(&mut self, part: &Partition) -> Result<()> {
        self.fit(part)
    }
    #[inline]
    fn allgatherv(&mut self, x: &mut [f64], part: &Partition) -> Result<()> {
        let me = self.rank();
        if self.counts.len() != part.p() || self.send.len() != part.counts[me] {
            self.fit(part)?;
        }
        self.send.copy_from_slice(&x[part.range(me)]);
        let mut recv = PartitionMut::new(x, &self.counts[..], &self.displs[..]);
        self.world
            .all_gather_varcount_into(&self.send[..], &mut recv);
        Ok(())
    }
    #[inline]
    fn allreduce_sum(&mut self, v: f64) -> Result<f64> {
        let mut out = 0.0f64;
        self.world
            .all_reduce_into(&v, &mut out, SystemOperation::sum());
        Ok(out)
    }
    fn barrier(&mut self) -> Result<()> {
        self.world.barrier();
        Ok(())
    }
    fn broadcast_u64(&mut self, buf: &mut [u64]) -> Result<()> {
        self.world.process_at_rank(0).broadcast_into(buf);
        Ok(())
    }
    fn scatter_u64(&mut self, send: &[u64], recv: &mut [u64]) -> Result<()> {
        scatter_from_0(self.world, send, recv);
        Ok(())
    }
    fn scatter_f64(&mut self, send: &[f64], recv: &mut [f64]) -> Result<()> {
        scatter_from_0(self.world, send, recv);
        Ok(())
    }
    fn gather_f64(&mut self, send: &[f64], recv: &mut [f64]) -> Result<()> {
        let root = self.world.process_at_rank(0);
        if self.world.rank() == 0 {
            root.gather_into_root(send, recv);
        } else {
            root.gather_into(send);
        }
        Ok(())
    }
}

/// `MPI_Scatter` from rank 0: the root's `send` (read there only) to every rank's `recv`.
fn scatter_from_0<T: Equivalence>(world: &SimpleCommunicator, send: &[T], recv: &mut [T]) {
    let root = world.process_at_rank(0);
    if world.rank() == 0 {
        root.scatter_into_root(send, recv);
    } else {
        root.scatter_into(recv);
    }
}

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
    let mut c = MpiColl::new(&world);
    let r = run_rank(&mut c, opts);
    world.barrier();
    r
}
