//! Synthetic symmetric positive definite matrices, for sizes the repository cannot hold.
//!
//! Each rank generates only its own rows (no file, no distribution), so a matrix of the
//! size of the paper's nd24k (72,000 rows, 28.7 million nonzeros) costs each rank only its
//! share of memory and time.
//!
//! - `poisson3d:M`: the 7-point Laplacian on an M x M x M grid with Dirichlet boundaries
//!   (N = M^3 rows, 6 on the diagonal, -1 for each grid neighbour). Condition number about
//!   0.4 (M+1)^2: CG needs O(M) iterations.
//! - `banded:N:K`: N rows, K nonzeros per row away from the edges (K odd: the diagonal and
//!   h = (K-1)/2 neighbours each side), like the ND matrices of the paper (nd24k: N = 72,000,
//!   K ≈ 399). Off-diagonal a_ij = -(1 + ((i + j) mod 7) / 7), the diagonal the sum of the
//!   row's off-diagonal magnitudes plus 1, 2 or 3 (by i mod 3): a weighted graph Laplacian
//!   plus a positive diagonal, so symmetric positive definite, with smallest eigenvalue at
//!   least 1 and a condition number of a few times K. CG converges to 1e-8 in about a hundred iterations, and the fixed-mode
//!   stop of [`crate::solver::VANISHED`] comes well after the paper's 1,000 iterations
//!   (measured: banded:72000:399 converges to 1e-8 in 99 iterations and stops at 2,150;
//!   banded:20000:201 in 76 and at 1,408; poisson3d:31 stops at 1,390).

use std::ops::Range;

use crate::error::{CgError, Result};
use crate::matrix::{Csr, check_cols};

/// A synthetic matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synthetic {
    /// 3-D Poisson, 7-point stencil, on an `m`^3 grid.
    Poisson3d {
        /// Grid points per side.
        m: usize,
    },
    /// Banded, `k` nonzeros per interior row.
    Banded {
        /// Rows.
        n: usize,
        /// Nonzeros per interior row (odd).
        k: usize,
    },
}

/// Largest synthetic matrix accepted (rows), to turn a typo into an error, not an OOM.
pub const MAX_ROWS: usize = 1 << 30;

impl Synthetic {
    /// Parses `poisson3d:M` or `banded:N:K`; `None` if `spec` names neither family (it is
    /// then a file name).
    pub fn parse(spec: &str) -> Option<Result<Synthetic>> {
        let mut it = spec.split(':');
        let family = it.next()?;
        let nums: Vec<&str> = it.collect();
        let num = |s: &str, what: &str| -> Result<usize> {
            s.replace('_', "").parse::<usize>().map_err(|_| {
                CgError::Invalid(format!("--matrix {spec}: {what} `{s}` is not a number"))
            })
        };
        let r = match family {
            "poisson3d" => (|| {
                let [m] = nums[..] else {
                    return Err(CgError::Invalid(format!(
                        "--matrix {spec}: expected poisson3d:M (M^3 rows)"
                    )));
                };
                Synthetic::Poisson3d { m: num(m, "M")? }.validated()
            })(),
            "banded" => (|| {
                let [n, k] = nums[..] else {
                    return Err(CgError::Invalid(format!(
                        "--matrix {spec}: expected banded:N:K (N rows, K nonzeros per row)"
                    )));
                };
                Synthetic::Banded {
                    n: num(n, "N")?,
                    k: num(k, "K")?,
                }
                .validated()
            })(),
            _ => return None,
        };
        Some(r)
    }

    fn validated(self) -> Result<Synthetic> {
        match self {
            Synthetic::Poisson3d { m } => {
                if m == 0 || m.checked_pow(3).is_none_or(|n| n > MAX_ROWS) {
                    return Err(CgError::Invalid(format!(
                        "poisson3d:{m}: M must be 1..={}",
                        (MAX_ROWS as f64).cbrt() as usize
                    )));
                }
            }
            Synthetic::Banded { n, k } => {
                if n == 0 || n > MAX_ROWS {
                    return Err(CgError::Invalid(format!(
                        "banded:{n}:{k}: N must be 1..={MAX_ROWS}"
                    )));
                }
                if k % 2 == 0 {
                    return Err(CgError::Invalid(format!(
                        "banded:{n}:{k}: K (nonzeros per row) must be odd: the diagonal and \
                         (K-1)/2 neighbours on each side"
                    )));
                }
            }
        }
        check_cols(self.n())?;
        Ok(self)
    }

    /// Rows (= columns).
    pub fn n(&self) -> usize {
        match *self {
            Synthetic::Poisson3d { m } => m * m * m,
            Synthetic::Banded { n, .. } => n,
        }
    }

    fn half_band(&self) -> usize {
        match *self {
            Synthetic::Banded { n, k } => ((k - 1) / 2).min(n - 1),
            Synthetic::Poisson3d { .. } => 0,
        }
    }

    /// Nonzeros of the whole matrix.
    pub fn nnz(&self) -> usize {
        match *self {
            Synthetic::Poisson3d { m } => 7 * m * m * m - 6 * m * m,
            Synthetic::Banded { n, .. } => {
                let h = self.half_band();
                n * (2 * h + 1) - h * (h + 1)
            }
        }
    }

    /// Entries of row `i` (`i < n()`), without building it: what [`Synthetic::rows`] puts in
    /// that row.
    pub fn row_len(&self, i: usize) -> usize {
        match *self {
            Synthetic::Poisson3d { m } => {
                let (x, y, z) = (i % m, (i / m) % m, i / (m * m));
                1 + [x, y, z]
                    .into_iter()
                    .map(|c| usize::from(c > 0) + usize::from(c + 1 < m))
                    .sum::<usize>()
            }
            Synthetic::Banded { n, .. } => {
                let h = self.half_band();
                (i + h).min(n - 1) - i.saturating_sub(h) + 1
            }
        }
    }

    /// The name shown in reports.
    pub fn label(&self) -> String {
        match *self {
            Synthetic::Poisson3d { m } => format!("poisson3d:{m}"),
            Synthetic::Banded { n, k } => format!("banded:{n}:{k}"),
        }
    }

    /// Rows `rows` of the matrix (global column indices).
    pub fn rows(&self, rows: Range<usize>) -> Csr {
        let n = self.n();
        let mut row_ptr = Vec::with_capacity(rows.len() + 1);
        let mut col: Vec<u32> = Vec::new();
        let mut val = Vec::new();
        row_ptr.push(0);
        match *self {
            Synthetic::Poisson3d { m } => {
                col.reserve(rows.len() * 7);
                val.reserve(rows.len() * 7);
                for i in rows.clone() {
                    let (x, y, z) = (i % m, (i / m) % m, i / (m * m));
                    // In column order: -z, -y, -x, centre, +x, +y, +z.
                    let mut push = |j: usize, v: f64| {
                        col.push(j as u32);
                        val.push(v);
                    };
                    if z > 0 {
                        push(i - m * m, -1.0);
                    }
                    if y > 0 {
                        push(i - m, -1.0);
                    }
                    if x > 0 {
                        push(i - 1, -1.0);
                    }
                    push(i, 6.0);
                    if x + 1 < m {
                        push(i + 1, -1.0);
                    }
                    if y + 1 < m {
                        push(i + m, -1.0);
                    }
                    if z + 1 < m {
                        push(i + m * m, -1.0);
                    }
                    row_ptr.push(col.len());
                }
            }
            Synthetic::Banded { .. } => {
                let h = self.half_band();
                col.reserve(rows.len() * (2 * h + 1));
                val.reserve(rows.len() * (2 * h + 1));
                for i in rows.clone() {
                    let (lo, hi) = (i.saturating_sub(h), (i + h).min(n - 1));
                    let start = col.len();
                    let mut sum = 0.0;
                    let mut diag_at = 0;
                    for j in lo..=hi {
                        col.push(j as u32);
                        if j == i {
                            diag_at = col.len() - 1;
                            val.push(0.0);
                        } else {
                            let v = banded_offdiag(i, j);
                            sum += v.abs();
                            val.push(v);
                        }
                    }
                    debug_assert!(diag_at >= start);
                    val[diag_at] = banded_margin(i) + sum;
                    row_ptr.push(col.len());
                }
            }
        }
        Csr {
            n_rows: rows.len(),
            n_cols: n,
            row_ptr,
            col,
            val,
        }
    }
}

/// What the banded family's diagonal adds to the row's off-diagonal magnitudes: 1, 2 or 3.
/// Varied, so that b = ones is not an eigenvector (with a constant margin A·1 = 1 and CG
/// would solve b = ones in one iteration).
fn banded_margin(i: usize) -> f64 {
    1.0 + (i % 3) as f64
}

/// The banded family's off-diagonal value: symmetric in (i, j), varied, negative.
fn banded_offdiag(i: usize, j: usize) -> f64 {
    -(1.0 + ((i + j) % 7) as f64 / 7.0)
}
