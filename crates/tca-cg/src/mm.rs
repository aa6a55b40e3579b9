//! Reading Matrix Market files (plain or gzip-compressed) into [`Csr`] matrices and vectors.
//!
//! The parsing is nalgebra-sparse's (`io::load_coo_from_matrix_market_str`, a maintained
//! pest grammar of the NIST format: `coordinate` and `array`, `real`, `integer`, `pattern`
//! and `complex` fields, `general`, `symmetric`, `skew-symmetric` and `hermitian` storage,
//! with symmetric storage expanded to the full matrix and the entry count checked against the
//! size line). This module only
//! - peeks at the banner to pick the scalar type that reader needs (it refuses to read an
//!   `integer` file as `f64`, so each field is read as its own type and converted),
//! - decompresses `.gz` files (recognised by their magic bytes, whatever the name),
//! - gives `pattern` matrices values: the structure alone has none, and ones everywhere
//!   would rarely be positive definite, so a pattern matrix becomes its graph Laplacian plus
//!   the identity (off-diagonal -1, diagonal = 1 + number of off-diagonal entries in the
//!   row): symmetric positive definite for any symmetric pattern, with exactly the pattern's
//!   communication and SpMV cost, which is what a benchmark of the collectives needs (its
//!   rows sum to 1, so b = ones is solved by x = ones in one iteration: solve such a matrix
//!   with a random b),
//! - turns the reader's errors into [`CgError`]s that name the file.
//!
//! Symmetric files must store the lower triangle, as the format requires (a file that stores
//! the upper one is rejected with the entry that breaks the rule). The checks that make a
//! matrix fit for CG (square, finite, positive diagonal, symmetric values) are
//! [`Csr::check_spd_shape`], applied by the caller.

use std::io::Read;
use std::path::Path;

use nalgebra_sparse::CooMatrix;
use nalgebra_sparse::io::{MatrixMarketError, load_coo_from_matrix_market_str};

use crate::error::{CgError, Result};
use crate::matrix::Csr;

/// The `field` of a Matrix Market banner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Field {
    /// Floating-point values.
    Real,
    /// Integer values (converted to `f64`).
    Integer,
    /// Structure only (values made by the graph-Laplacian rule of the module doc).
    Pattern,
}

/// The `symmetry` of a Matrix Market banner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Symmetry {
    /// Every entry stored.
    General,
    /// Lower triangle stored, mirrored on reading.
    Symmetric,
}

/// A matrix as read from a file.
#[derive(Debug, Clone)]
pub struct MatrixFile {
    /// The whole matrix (symmetric storage expanded).
    pub csr: Csr,
    /// Its banner's field.
    pub field: Field,
    /// Its banner's symmetry.
    pub symmetry: Symmetry,
    /// Entries stored in the file.
    pub stored: usize,
}

/// Reads a file as text, decompressing gzip (magic bytes 1f 8b).
pub fn read_text(path: &Path) -> Result<String> {
    let what = path.display().to_string();
    let bytes =
        std::fs::read(path).map_err(|e| CgError::Read(format!("cannot read {what}: {e}")))?;
    decode(bytes, &what)
}

/// A file's bytes as text: gzip (recognised by its magic bytes 1f 8b) decompressed, then
/// UTF-8 checked. `what` names the input in errors.
pub fn decode(bytes: Vec<u8>, what: &str) -> Result<String> {
    let bytes = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&bytes[..])
            .read_to_end(&mut out)
            .map_err(|e| CgError::Read(format!("{what}: gzip data is corrupt: {e}")))?;
        out
    } else {
        bytes
    };
    String::from_utf8(bytes).map_err(|e| {
        CgError::Read(format!(
            "{what}: not a Matrix Market file (not text: invalid UTF-8 at byte {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Reads a Matrix Market matrix file.
pub fn read_matrix(path: &Path) -> Result<MatrixFile> {
    parse_matrix(&read_text(path)?, &path.display().to_string())
}

/// The banner's field and symmetry words, lowercased; an error unless the text starts (after
/// blank lines) with a `%%MatrixMarket matrix` banner.
fn banner(text: &str, what: &str) -> Result<(String, String, String)> {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let words: Vec<String> = first
        .split_whitespace()
        .map(|w| w.to_ascii_lowercase())
        .collect();
    if words.first().map(String::as_str) != Some("%%matrixmarket") {
        let shown: String = first.chars().take(60).collect();
        return Err(CgError::Read(format!(
            "{what}: not a Matrix Market file: the first line should be a banner such as \
             `%%MatrixMarket matrix coordinate real symmetric`, found `{shown}`"
        )));
    }
    if words.len() != 5 || words[1] != "matrix" {
        return Err(CgError::Read(format!(
            "{what}: unsupported Matrix Market banner `{}`: expected `%%MatrixMarket matrix \
             FORMAT FIELD SYMMETRY`",
            first.trim()
        )));
    }
    Ok((words[2].clone(), words[3].clone(), words[4].clone()))
}

/// Parses Matrix Market text (`what` names it in messages).
pub fn parse_matrix(text: &str, what: &str) -> Result<MatrixFile> {
    let (format, field, symmetry) = banner(text, what)?;
    let symmetry = match symmetry.as_str() {
        "general" => Symmetry::General,
        "symmetric" => Symmetry::Symmetric,
        "skew-symmetric" => {
            return Err(CgError::NotSymmetric(format!(
                "{what}: the matrix is skew-symmetric (A^T = -A), so not symmetric positive \
                 definite"
            )));
        }
        "hermitian" => {
            return Err(CgError::Read(format!(
                "{what}: hermitian (complex) matrices are not supported: this CG solves real \
                 symmetric positive definite systems"
            )));
        }
        s => {
            return Err(CgError::Read(format!(
                "{what}: unknown Matrix Market symmetry `{s}` (general, symmetric, \
                 skew-symmetric or hermitian)"
            )));
        }
    };
    let (field, triplets, rows, cols, stored) = match field.as_str() {
        "real" => {
            let coo = load::<f64>(text, what, &format)?;
            let t = triplets(&coo, |v| *v);
            (Field::Real, t, coo.nrows(), coo.ncols(), coo.nnz())
        }
        "integer" => {
            let coo = load::<i64>(text, what, &format)?;
            let t = triplets(&coo, |v| *v as f64);
            (Field::Integer, t, coo.nrows(), coo.ncols(), coo.nnz())
        }
        "pattern" => {
            let coo = load::<()>(text, what, &format)?;
            let t = triplets(&coo, |_| 0.0);
            (Field::Pattern, t, coo.nrows(), coo.ncols(), coo.nnz())
        }
        "complex" => {
            return Err(CgError::Read(format!(
                "{what}: complex matrices are not supported: this CG solves real symmetric \
                 positive definite systems"
            )));
        }
        f => {
            return Err(CgError::Read(format!(
                "{what}: unknown Matrix Market field `{f}` (real, integer, pattern or complex)"
            )));
        }
    };
    let mut csr = Csr::from_triplets(rows, cols, &triplets)
        .map_err(|e| CgError::Read(format!("{what}: {e}")))?;
    if field == Field::Pattern {
        laplacian_plus_identity(&mut csr, what)?;
    }
    let stored = if symmetry == Symmetry::Symmetric {
        // The reader mirrored every off-diagonal entry.
        let diag = triplets.iter().filter(|t| t.0 == t.1).count();
        (stored + diag) / 2
    } else {
        stored
    };
    Ok(MatrixFile {
        csr,
        field,
        symmetry,
        stored,
    })
}

fn triplets<T>(coo: &CooMatrix<T>, f: impl Fn(&T) -> f64) -> Vec<(usize, usize, f64)> {
    coo.triplet_iter().map(|(i, j, v)| (i, j, f(v))).collect()
}

/// The reader unwraps its parse of every size and index into `usize` and multiplies an
/// entry's row and column, so a number too large would panic (or, without overflow checks,
/// wrap) inside it: refuse such files first. Rows, columns and indices must fit a `u32` (the
/// CSR's column type; their product then fits a `usize`), the entry count 18 digits. An
/// index is the leading digits of an entry's first two words (the reader's grammar also
/// takes `9 97777.5` as column 97777 and value .5), and a line ends at `\n` or `\r`, as in
/// that grammar.
fn check_index_lengths(text: &str, what: &str, format: &str) -> Result<()> {
    let leading = |tok: &str| -> usize { tok.bytes().take_while(u8::is_ascii_digit).count() };
    let too_large = |no: usize, tok: &str| {
        CgError::Read(format!(
            "{what}: line {}: the size or index `{tok}` is too large",
            no + 1
        ))
    };
    // Words that do not start with a digit are the reader's to refuse.
    let fits_u32 = |tok: &str| {
        let d = &tok[..leading(tok)];
        d.is_empty() || (d.len() <= 10 && d.parse::<u64>().is_ok_and(|v| v <= u64::from(u32::MAX)))
    };
    let mut size_line = true;
    let lines = text
        .lines()
        .enumerate()
        .flat_map(|(no, l)| l.split('\r').map(move |part| (no, part)));
    for (no, line) in lines {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('%') {
            continue;
        }
        let mut toks = line.split_whitespace();
        if size_line {
            size_line = false;
            for tok in toks.by_ref().take(2) {
                if !fits_u32(tok) {
                    return Err(too_large(no, tok));
                }
            }
            if let Some(tok) = toks.next() {
                if leading(tok) > 18 {
                    return Err(too_large(no, tok));
                }
            }
            if format != "coordinate" {
                // Dense (array) files: every further line is a value, not an index.
                return Ok(());
            }
            continue;
        }
        for tok in toks.take(2) {
            if !fits_u32(tok) {
                return Err(too_large(no, tok));
            }
        }
    }
    Ok(())
}

/// Calls the reader on text whose banner says `format` (whether entry lines hold indices),
/// turning its errors, and any panic inside it, into [`CgError::Read`].
/// (It panics on a few malformed inputs; [`check_index_lengths`] keeps the known ones out,
/// and a panic on bad input must not take the job down in any case.)
///
/// The reader runs on a thread of its own: its parser (pest) measures the native stack it
/// runs on, and on a stack whose bounds it cannot find, a simulated rank's coroutine
/// (`tca cg --network`), it refused every file with "stack limit reached".
fn load<T: nalgebra_sparse::io::MatrixMarketScalar + Send>(
    text: &str,
    what: &str,
    format: &str,
) -> Result<CooMatrix<T>> {
    check_index_lengths(text, what, format)?;
    let read = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("matrix-market".into())
            .spawn_scoped(s, || load_coo_from_matrix_market_str::<T>(text))
            .map(|reader| reader.join())
    })
    .map_err(|e| CgError::Read(format!("{what}: cannot start the reader's thread: {e}")))?;
    match read {
        Ok(Ok(m)) => Ok(m),
        Ok(Err(e)) => Err(reader_error(&e, what)),
        Err(_) => Err(CgError::Read(format!(
            "{what}: not a valid Matrix Market file (the reader rejected it; a number may be \
             too large)"
        ))),
    }
}

fn reader_error(e: &MatrixMarketError, what: &str) -> CgError {
    use nalgebra_sparse::io::MatrixMarketErrorKind as K;
    let msg: String = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    match e.kind() {
        K::NonSquare => CgError::NotSquare(format!("{what}: {msg}")),
        K::NotLowerTriangle => CgError::Read(format!(
            "{what}: a symmetric file must store the lower triangle only: {msg}"
        )),
        K::EntryMismatch => CgError::Read(format!(
            "{what}: the entry count does not match the size line: {msg}"
        )),
        K::ZeroError => CgError::Read(format!(
            "{what}: indices must be 1-based (an entry has index 0)"
        )),
        K::SparseFormatError(_) => {
            CgError::Read(format!("{what}: an entry lies outside the matrix: {msg}"))
        }
        _ => CgError::Read(format!("{what}: not a valid Matrix Market file: {msg}")),
    }
}

/// Replaces the values of a pattern matrix by its graph Laplacian plus the identity.
fn laplacian_plus_identity(csr: &mut Csr, what: &str) -> Result<()> {
    if csr.n_rows != csr.n_cols {
        return Err(CgError::NotSquare(format!(
            "{what}: the pattern is {} x {}, not square",
            csr.n_rows, csr.n_cols
        )));
    }
    let mut trip = Vec::with_capacity(csr.nnz() + csr.n_rows);
    for i in 0..csr.n_rows {
        let (c, _) = csr.row(i);
        let off = c.iter().filter(|&&j| j as usize != i).count();
        for &j in c {
            if j as usize != i {
                trip.push((i, j as usize, -1.0));
            }
        }
        trip.push((i, i, 1.0 + off as f64));
    }
    *csr = Csr::from_triplets(csr.n_rows, csr.n_cols, &trip)?;
    Ok(())
}

/// Reads a vector of `n` entries from a Matrix Market file: `array` (dense, one column) or
/// `coordinate` (missing entries are zero), n x 1 or 1 x n, real or integer.
pub fn read_vector(path: &Path, n: usize) -> Result<Vec<f64>> {
    let what = path.display().to_string();
    let text = read_text(path)?;
    let (format, field, _) = banner(&text, &what)?;
    let (rows, cols, t) = match field.as_str() {
        "real" => {
            let coo = load::<f64>(&text, &what, &format)?;
            (coo.nrows(), coo.ncols(), triplets(&coo, |v| *v))
        }
        "integer" => {
            let coo = load::<i64>(&text, &what, &format)?;
            (coo.nrows(), coo.ncols(), triplets(&coo, |v| *v as f64))
        }
        f => {
            return Err(CgError::Read(format!(
                "{what}: a right-hand side must be a real or integer vector, not `{f}`"
            )));
        }
    };
    if !(rows == n && cols == 1 || rows == 1 && cols == n) {
        return Err(CgError::Invalid(format!(
            "{what}: the right-hand side is {rows} x {cols}; the matrix needs a vector of \
             {n} entries ({n} x 1)"
        )));
    }
    let mut b = vec![0.0; n];
    for (i, j, v) in t {
        b[i.max(j)] += v;
    }
    if let Some((i, v)) = b.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(CgError::NotFinite(format!(
            "{what}: entry {} of the right-hand side is {v}",
            i + 1
        )));
    }
    Ok(b)
}
