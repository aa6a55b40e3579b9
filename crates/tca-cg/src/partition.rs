//! The row split of Fig. 13 (or, with `--partition nnz`, blocks of equal work:
//! [`PartitionBy`]), and how the solver's data maps onto the collectives of
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

/// How the rows are split over the ranks (`--partition`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PartitionBy {
    /// The paper's: floor(N / p) rows per rank, the last rank takes the rest.
    #[default]
    Rows,
    /// Contiguous blocks of about equal work, a row weighing its nonzeros plus one (the SpMV's
    /// products and the row's share of the vector updates): on a matrix whose rows differ in
    /// length the SpMV of the heaviest rank, which every iteration waits for, is shorter.
    Nnz,
}

impl PartitionBy {
    /// `rows` or `nnz`.
    pub fn parse(s: &str) -> Result<PartitionBy> {
        match s {
            "rows" => Ok(PartitionBy::Rows),
            "nnz" => Ok(PartitionBy::Nnz),
            _ => Err(CgError::Invalid(format!(
                "--partition {s}: expected rows (the paper's) or nnz"
            ))),
        }
    }
}

impl std::fmt::Display for PartitionBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PartitionBy::Rows => "rows",
            PartitionBy::Nnz => "nnz",
        })
    }
}

/// A split of the rows into one contiguous block per rank; by default the row split of
/// Fig. 13 (n = floor(N / p) rows per rank, the last rank takes the rest).
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

    /// The split of the rows whose entries start at `row_ptr` (CSR, `n + 1` offsets) into
    /// `p` contiguous blocks of about equal work ([`PartitionBy::Nnz`]): rank r's block
    /// starts at the row boundary nearest r/p of the total weight, every rank keeping at
    /// least one row. An error if a rank would get no row.
    pub fn by_nnz(row_ptr: &[usize], p: usize) -> Result<Partition> {
        let n = row_ptr.len().saturating_sub(1);
        Self::new(n, p)?;
        // Weight of rows 0..i: their entries plus one per row.
        let before = |i: usize| (row_ptr[i] - row_ptr[0] + i) as u128;
        let total = before(n);
        let mut displs = vec![0usize; p];
        for r in 1..p {
            let target = total * r as u128 / p as u128;
            // The first boundary at or past the target, or the one before it if nearer.
            let (mut i, mut hi) = (0, n);
            while i < hi {
                let mid = (i + hi) / 2;
                if before(mid) < target {
                    i = mid + 1;
                } else {
                    hi = mid;
                }
            }
            if i > 0 && target - before(i - 1) < before(i).saturating_sub(target) {
                i -= 1;
            }
            displs[r] = i.clamp(displs[r - 1] + 1, n - (p - r));
        }
        Self::from_displs(n, displs)
    }

    /// The split whose blocks start at `displs` (rank 0's at 0, strictly increasing, each
    /// below `n`): how the ranks other than 0 learn a split rank 0 computed.
    pub fn from_displs(n: usize, displs: Vec<usize>) -> Result<Partition> {
        let p = displs.len();
        let ok =
            p > 0 && displs[0] == 0 && displs.windows(2).all(|w| w[0] < w[1]) && displs[p - 1] < n;
        if !ok {
            return Err(CgError::Invalid(format!(
                "a row split of {n} rows must start at 0 and rise to below {n}, got {displs:?}"
            )));
        }
        let counts = (0..p)
            .map(|r| displs.get(r + 1).copied().unwrap_or(n) - displs[r])
            .collect();
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
