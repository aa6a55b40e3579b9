//! Compressed Sparse Row storage (the paper's CRS), the checks that make a matrix fit for CG,
//! and the local SpMV.
//!
//! Column indices are `u32`: SpMV streams 12 bytes per nonzero instead of 16, and every
//! matrix this solver can hold in one node's memory has fewer than 2^32 columns (checked).
//! Rows are sorted by column and hold no duplicates (duplicates in a file are summed, as
//! the Matrix Market convention and SuiteSparse do).

use std::ops::Range;

use crate::error::{CgError, Result};

/// Relative tolerance of the symmetry check: `|a_ij - a_ji| <= SYM_RTOL * max(|a_ij|, |a_ji|)`.
/// Loose enough for a file whose two triangles were printed with 9 or more significant
/// digits, tight enough that an asymmetry that matters to CG is reported.
pub const SYM_RTOL: f64 = 1e-8;

/// Matrices with at least this many entries per row on average have their rows summed in four
/// parts ([`Csr::spmv`]): measured at one rank (`tca cg --np 1 --breakdown`, SpMV phase), four
/// sums on every row took 0.68-0.90x the time of one on matrices of 22-51 entries per row
/// (nasa4704, bcsstk38, s1rmq4m1) and 1.02-1.30x on 4-9 (1138_bus, bodyy5, fv1); chosen by
/// this threshold, 0.73-1.00x and 0.96-0.98x (BENCHMARKS.md).
pub const LONG_ROW: usize = 16;

/// A sparse matrix, or a block of rows of one, in CSR form.
#[derive(Debug, Clone, PartialEq)]
pub struct Csr {
    /// Rows held here.
    pub n_rows: usize,
    /// Columns of the whole matrix (indices in `col` are global).
    pub n_cols: usize,
    /// Row `i`'s entries are `row_ptr[i]..row_ptr[i + 1]` of `col` and `val`.
    pub row_ptr: Vec<usize>,
    /// Column of each entry, sorted within a row.
    pub col: Vec<u32>,
    /// Value of each entry.
    pub val: Vec<f64>,
}

impl Csr {
    /// Builds a matrix from (row, column, value) triplets in any order; duplicates are summed.
    /// Indices must be in range (checked).
    pub fn from_triplets(
        n_rows: usize,
        n_cols: usize,
        triplets: &[(usize, usize, f64)],
    ) -> Result<Csr> {
        check_cols(n_cols)?;
        let mut count = vec![0usize; n_rows + 1];
        for &(i, j, _) in triplets {
            if i >= n_rows || j >= n_cols {
                return Err(CgError::Read(format!(
                    "entry ({}, {}) lies outside the {n_rows} x {n_cols} matrix",
                    i + 1,
                    j + 1
                )));
            }
            count[i + 1] += 1;
        }
        for i in 0..n_rows {
            count[i + 1] += count[i];
        }
        let mut next = count.clone();
        let mut ent = vec![(0u32, 0.0f64); triplets.len()];
        for &(i, j, v) in triplets {
            ent[next[i]] = (j as u32, v);
            next[i] += 1;
        }
        let mut row_ptr = Vec::with_capacity(n_rows + 1);
        let mut col = Vec::with_capacity(triplets.len());
        let mut val = Vec::with_capacity(triplets.len());
        row_ptr.push(0);
        for i in 0..n_rows {
            let row = &mut ent[count[i]..count[i + 1]];
            row.sort_unstable_by_key(|e| e.0);
            let start = col.len();
            for &(j, v) in row.iter() {
                if col.len() > start && col.last() == Some(&j) {
                    *val.last_mut().expect("a column was pushed") += v;
                } else {
                    col.push(j);
                    val.push(v);
                }
            }
            row_ptr.push(col.len());
        }
        Ok(Csr {
            n_rows,
            n_cols,
            row_ptr,
            col,
            val,
        })
    }

    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.col.len()
    }

    /// Row `i`'s columns and values.
    pub fn row(&self, i: usize) -> (&[u32], &[f64]) {
        let r = self.row_ptr[i]..self.row_ptr[i + 1];
        (&self.col[r.clone()], &self.val[r])
    }

    /// A copy of rows `rows` (row pointers rebased to 0, columns unchanged).
    pub fn rows(&self, rows: Range<usize>) -> Csr {
        let (s, e) = (self.row_ptr[rows.start], self.row_ptr[rows.end]);
        Csr {
            n_rows: rows.len(),
            n_cols: self.n_cols,
            row_ptr: self.row_ptr[rows.start..=rows.end]
                .iter()
                .map(|&o| o - s)
                .collect(),
            col: self.col[s..e].to_vec(),
            val: self.val[s..e].to_vec(),
        }
    }

    /// The value at (i, j), if stored.
    pub fn get(&self, i: usize, j: usize) -> Option<f64> {
        let (c, v) = self.row(i);
        c.binary_search(&(j as u32)).ok().map(|k| v[k])
    }

    /// Checks everything CG needs that can be checked without solving: finite values, a
    /// square shape, a positive diagonal and symmetry within [`SYM_RTOL`]. (Positive
    /// definiteness itself shows during the solve, as p·Ap ≤ 0.) `what` names the matrix in
    /// messages. Row and column numbers in messages are 1-based, as in the file.
    pub fn check_spd_shape(&self, what: &str) -> Result<()> {
        if self.n_rows == 0 {
            return Err(CgError::Invalid(format!("{what}: the matrix has no rows")));
        }
        if self.n_rows != self.n_cols {
            return Err(CgError::NotSquare(format!(
                "{what}: the matrix is {} x {}, not square; CG solves square symmetric \
                 positive definite systems",
                self.n_rows, self.n_cols
            )));
        }
        let mut bad = 0usize;
        let mut first = None;
        for i in 0..self.n_rows {
            let (c, v) = self.row(i);
            for (&j, &x) in c.iter().zip(v) {
                if !x.is_finite() {
                    bad += 1;
                    first.get_or_insert((i, j as usize, x));
                }
            }
        }
        if let Some((i, j, x)) = first {
            return Err(CgError::NotFinite(format!(
                "{what}: entry ({}, {}) is {x}{}",
                i + 1,
                j + 1,
                others(bad, "non-finite entries")
            )));
        }
        let (mut missing, mut nonpos) = (0usize, 0usize);
        let (mut first_missing, mut first_nonpos) = (None, None);
        for i in 0..self.n_rows {
            match self.get(i, i) {
                None => {
                    missing += 1;
                    first_missing.get_or_insert(i);
                }
                Some(d) if d <= 0.0 => {
                    nonpos += 1;
                    first_nonpos.get_or_insert((i, d));
                }
                Some(_) => {}
            }
        }
        if let Some(i) = first_missing {
            return Err(CgError::Diagonal(format!(
                "{what}: row {} has no diagonal entry{}; a symmetric positive definite \
                 matrix has a positive diagonal",
                i + 1,
                others(missing, "rows without one")
            )));
        }
        if let Some((i, d)) = first_nonpos {
            return Err(CgError::Diagonal(format!(
                "{what}: diagonal entry ({0}, {0}) is {d}, not positive{1}; a symmetric \
                 positive definite matrix has a positive diagonal",
                i + 1,
                others(nonpos, "such entries")
            )));
        }
        let mut asym = 0usize;
        let mut worst: Option<(usize, usize, f64, f64, f64)> = None;
        for i in 0..self.n_rows {
            let (c, v) = self.row(i);
            for (&j, &a) in c.iter().zip(v) {
                let j = j as usize;
                if j <= i {
                    continue;
                }
                let b = self.get(j, i).unwrap_or(0.0);
                let scale = a.abs().max(b.abs());
                let diff = (a - b).abs();
                if diff > SYM_RTOL * scale {
                    asym += 1;
                    let rel = diff / scale;
                    if worst.is_none_or(|w| rel > w.4) {
                        worst = Some((i, j, a, b, rel));
                    }
                }
            }
            // Entries below the diagonal with no partner above were not visited: an
            // upper-triangle entry is zero there.
            for (&j, &a) in c.iter().zip(v) {
                let j = j as usize;
                if j < i && a != 0.0 && self.get(j, i).is_none() {
                    asym += 1;
                    if worst.is_none_or(|w| 1.0 > w.4) {
                        worst = Some((i, j, a, 0.0, 1.0));
                    }
                }
            }
        }
        if let Some((i, j, a, b, rel)) = worst {
            return Err(CgError::NotSymmetric(format!(
                "{what}: the matrix is not symmetric: A({0}, {1}) = {a} but A({1}, {0}) = {b} \
                 (relative difference {rel:.2e}, tolerance {SYM_RTOL:e}; {asym} pair(s) differ)",
                i + 1,
                j + 1
            )));
        }
        Ok(())
    }

    /// `y = A x` for the rows held here (`x` has `n_cols` entries, `y` has `n_rows`). Rows
    /// of [`LONG_ROW`] entries or more on average are summed in four parts, four
    /// multiply-adds in flight instead of one chain of dependent adds; shorter ones in one sum,
    /// which is faster there (chosen once per call, not per row: a test in the row loop cost
    /// the short rows 1.2x). A fixed order either way: deterministic.
    #[inline]
    pub fn spmv(&self, x: &[f64], y: &mut [f64]) {
        debug_assert_eq!(x.len(), self.n_cols);
        debug_assert_eq!(y.len(), self.n_rows);
        if self.nnz() >= LONG_ROW * self.n_rows {
            for (yi, w) in y.iter_mut().zip(self.row_ptr.windows(2)) {
                *yi = self.row_dot4(w[0]..w[1], x);
            }
        } else {
            for (yi, w) in y.iter_mut().zip(self.row_ptr.windows(2)) {
                *yi = self.row_dot(w[0]..w[1], x);
            }
        }
    }

    /// The entries `e` (one row's) times `x`, one sum.
    #[inline(always)]
    fn row_dot(&self, e: Range<usize>, x: &[f64]) -> f64 {
        let (c, v) = (&self.col[e.clone()], &self.val[e]);
        let mut acc = 0.0;
        for (&j, &a) in c.iter().zip(v) {
            acc += a * x[j as usize];
        }
        acc
    }

    /// The entries `e` (one row's) times `x`, four partial sums.
    #[inline(always)]
    fn row_dot4(&self, e: Range<usize>, x: &[f64]) -> f64 {
        let (c, v) = (&self.col[e.clone()], &self.val[e]);
        let (cc, vc) = (c.chunks_exact(4), v.chunks_exact(4));
        let (cr, vr) = (cc.remainder(), vc.remainder());
        let mut s = [0.0f64; 4];
        for (j, a) in cc.zip(vc) {
            for k in 0..4 {
                s[k] += a[k] * x[j[k] as usize];
            }
        }
        let mut acc = (s[0] + s[2]) + (s[1] + s[3]);
        for (&j, &a) in cr.iter().zip(vr) {
            acc += a * x[j as usize];
        }
        acc
    }

    /// Splits these rows by column for an SpMV that overlaps the Allgather of `x`: the
    /// entries in the columns `owned` (this rank's block of `x`, at hand before the Allgather)
    /// and the rest (see [`Split`]).
    pub fn split(&self, owned: Range<usize>) -> Split {
        let (lo, hi) = (owned.start as u32, owned.end as u32);
        let mut own = Csr {
            n_rows: self.n_rows,
            n_cols: owned.len(),
            row_ptr: Vec::with_capacity(self.n_rows + 1),
            col: Vec::new(),
            val: Vec::new(),
        };
        let mut other = Csr {
            n_rows: 0,
            n_cols: self.n_cols,
            row_ptr: vec![0],
            col: Vec::new(),
            val: Vec::new(),
        };
        let mut rows = Vec::new();
        own.row_ptr.push(0);
        for i in 0..self.n_rows {
            let (c, v) = self.row(i);
            let before = other.col.len();
            for (&j, &a) in c.iter().zip(v) {
                if (lo..hi).contains(&j) {
                    own.col.push(j - lo);
                    own.val.push(a);
                } else {
                    other.col.push(j);
                    other.val.push(a);
                }
            }
            own.row_ptr.push(own.col.len());
            if other.col.len() > before {
                rows.push(i as u32);
                other.row_ptr.push(other.col.len());
            }
        }
        other.n_rows = rows.len();
        Split { own, rows, other }
    }
}

/// A rank's rows of A split by column ([`Csr::split`]), so that the SpMV's part that needs
/// only this rank's block of the vector runs while the other blocks travel:
/// `y = own · x_own` before the Allgather finishes, `y += other · x` after.
///
/// A row's sum is then formed in two parts (own columns, then the others) instead of in
/// column order: the same products, rounded in another order.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// The entries in owned columns, numbered from the block's first column.
    pub own: Csr,
    /// The rows (of this block) that have entries in other columns, ascending.
    pub rows: Vec<u32>,
    /// Those rows' other entries, global columns: its row k is row `rows[k]`.
    pub other: Csr,
}

impl Split {
    /// `y = own · x_own` (`x_own`: this rank's block of the vector).
    #[inline]
    pub fn spmv_own(&self, x_own: &[f64], y: &mut [f64]) {
        self.own.spmv(x_own, y);
    }

    /// `y += other · x` (`x`: the whole vector; its owned block is not read).
    #[inline]
    pub fn spmv_other_add(&self, x: &[f64], y: &mut [f64]) {
        debug_assert_eq!(x.len(), self.other.n_cols);
        for (&i, w) in self.rows.iter().zip(self.other.row_ptr.windows(2)) {
            y[i as usize] += self.other.row_dot(w[0]..w[1], x);
        }
    }
}

/// Columns are stored as `u32`.
pub(crate) fn check_cols(n_cols: usize) -> Result<()> {
    if n_cols > u32::MAX as usize {
        return Err(CgError::Invalid(format!(
            "{n_cols} columns: this solver stores column indices in 32 bits (at most {})",
            u32::MAX
        )));
    }
    Ok(())
}

fn others(n: usize, what: &str) -> String {
    if n > 1 {
        format!(" ({n} {what} in all)")
    } else {
        String::new()
    }
}
