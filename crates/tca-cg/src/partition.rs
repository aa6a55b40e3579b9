//! The row split of Fig. 13, and how the solver's data maps onto the collectives of
//! [`tca_mpi::Backend`] (the one "tca or MPI" trait of the tools, so that the CG is written
//! once and runs on a `tca::Comm` or on MPI's `tca_mpi::MpiComm` unchanged).
//!
//! Two collectives are in the iteration, and are what the paper measures: an Allgather of the
//! direction vector ([`tca_mpi::Backend::allgatherv_into`] on a vector set up with the
//! partition's counts, [`tca_mpi::Backend::gathered`]; DMA in the paper) and an 8-byte
//! AllreduceSum ([`tca_mpi::Backend::allreduce_sum_f64`], PIO in
//! the paper). The rest run once, to distribute the matrix and to collect the timings. The
//! solver relies on the trait's promise that the allreduce gives the same bits on every rank
//! to take its branches (stop, breakdown) together.

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
