//! The collectives the solver uses, as a small trait, so that the CG of Fig. 13 is written
//! once and runs on tca ([`TcaColl`]) or on MPI (`mpi_coll::MpiColl`, with the `mpi`
//! feature) unchanged.
//!
//! Two of them are in the iteration, and are what the paper measures: an Allgather of the
//! direction vector ([`Collectives::allgatherv`], DMA in the paper) and an 8-byte AllreduceSum
//! ([`Collectives::allreduce_sum`], PIO in the paper). The rest run once, to distribute the
//! matrix and to collect the timings.
//!
//! Contract, as for MPI: every rank calls the same collectives in the same order with
//! matching counts; [`Collectives::allreduce_sum`] gives the same bits on every rank (tca
//! promises it for every allreduce algorithm; MPI libraries do it for commutative
//! operations), which the solver relies on to take its branches (stop, breakdown) together.

use std::ops::Range;

use crate::error::{CgError, Result};

/// The row split of Fig. 13: n = floor(N / p) rows per rank, the last rank takes the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Rows of the whole matrix.
    pub n: usize,
    /// Rows of each rank.
    pub counts: Vec<usize>,
    /// First row of each rank.
    pub displs: Vec<usize>,
}

impl Partition {
    /// The split of `n` rows over `p` ranks; an error if a rank would get no row.
    pub fn new(n: usize, p: usize) -> Result<Partition> {
        if p == 0 || n < p {
            return Err(CgError::TooFewRows(format!(
                "the matrix has {n} row{} but there are {p} ranks: every rank needs at least \
                 one row (use --np {} or fewer)",
                if n == 1 { "" } else { "s" },
                n.max(1)
            )));
        }
        let each = n / p;
        let mut counts = vec![each; p];
        counts[p - 1] = n - (p - 1) * each;
        let displs = (0..p).map(|r| r * each).collect();
        Ok(Partition { n, counts, displs })
    }

    /// Ranks.
    pub fn p(&self) -> usize {
        self.counts.len()
    }

    /// Rank `r`'s rows.
    pub fn range(&self, r: usize) -> Range<usize> {
        self.displs[r]..self.displs[r] + self.counts[r]
    }
}

/// What the solver needs from a communication library. Root is always rank 0.
pub trait Collectives {
    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// A label for reports ("tca", "MPI").
    fn label(&self) -> String;
    /// Called once before the solve with the split it will use, so that the iteration
    /// allocates nothing.
    fn prepare(&mut self, _part: &Partition) -> Result<()> {
        Ok(())
    }
    /// Fig. 13 lines 1 and 14: `x[part.range(me)]` holds this rank's block; afterwards
    /// `x` (N entries) holds every rank's block.
    fn allgatherv(&mut self, x: &mut [f64], part: &Partition) -> Result<()>;
    /// Fig. 13 lines 4, 7, 17 and 21: the sum of `v` over all ranks, the same bits on all.
    fn allreduce_sum(&mut self, v: f64) -> Result<f64>;
    /// All ranks wait for each other.
    fn barrier(&mut self) -> Result<()>;
    /// Rank 0's `buf` to every rank.
    fn broadcast_u64(&mut self, buf: &mut [u64]) -> Result<()>;
    /// Rank 0's `send` (size() x recv.len(), read on rank 0 only) cut in equal blocks; block
    /// r to rank r's `recv`.
    fn scatter_u64(&mut self, send: &[u64], recv: &mut [u64]) -> Result<()>;
    /// As [`Collectives::scatter_u64`], for `f64`.
    fn scatter_f64(&mut self, send: &[f64], recv: &mut [f64]) -> Result<()>;
    /// Every rank's `send` (same length) to block r of rank 0's `recv` (written on rank 0
    /// only).
    fn gather_f64(&mut self, send: &[f64], recv: &mut [f64]) -> Result<()>;
}

/// The solver's collectives on a tca communicator.
#[derive(Debug)]
pub struct TcaColl<'c, 'w> {
    comm: &'c tca::Comm<'w>,
    sum: tca::Op<f64>,
}

impl<'c, 'w> TcaColl<'c, 'w> {
    /// Uses `comm` (built once with [`tca::Comm::world`]; it holds its scratch and its peers'
    /// handles for its whole life, so no call below allocates or exchanges handles).
    pub fn new(comm: &'c tca::Comm<'w>) -> Self {
        Self {
            comm,
            sum: tca::Op::Sum,
        }
    }
}

impl Collectives for TcaColl<'_, '_> {
    fn rank(&self) -> usize {
        self.comm.rank() as usize
    }
    fn size(&self) -> usize {
        self.comm.size() as usize
    }
    fn label(&self) -> String {
        "tca".into()
    }
    #[inline]
    fn allgatherv(&mut self, x: &mut [f64], part: &Partition) -> Result<()> {
        Ok(self
            .comm
            .allgatherv_in_place(x, &part.counts, &part.displs)?)
    }
    #[inline]
    fn allreduce_sum(&mut self, v: f64) -> Result<f64> {
        let mut b = [v];
        self.comm.allreduce_in_place(&mut b, &self.sum)?;
        Ok(b[0])
    }
    fn barrier(&mut self) -> Result<()> {
        Ok(self.comm.barrier()?)
    }
    fn broadcast_u64(&mut self, buf: &mut [u64]) -> Result<()> {
        Ok(self.comm.broadcast(buf, 0)?)
    }
    fn scatter_u64(&mut self, send: &[u64], recv: &mut [u64]) -> Result<()> {
        Ok(self.comm.scatter(send, recv, 0)?)
    }
    fn scatter_f64(&mut self, send: &[f64], recv: &mut [f64]) -> Result<()> {
        Ok(self.comm.scatter(send, recv, 0)?)
    }
    fn gather_f64(&mut self, send: &[f64], recv: &mut [f64]) -> Result<()> {
        Ok(self.comm.gather(send, recv, 0)?)
    }
}
