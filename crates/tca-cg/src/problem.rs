//! The system to solve, and how it reaches the ranks.
//!
//! **Rank 0 reads the matrix and distributes the row blocks** (rather than every rank reading
//! the file and keeping its rows):
//! - the file is parsed and checked once. Parsing is the slow part of setting up (text to
//!   binary at tens of MB/s, a symmetric file expanded and sorted); with p ranks of one node
//!   sharing its cores, p readers would cost about p times the time and p times the memory
//!   of the whole matrix for nothing;
//! - the checks that need the whole matrix (symmetry pairs rows that live on different
//!   ranks) happen where the whole matrix is, before anything is sent, and their verdict is
//!   broadcast: a bad file ends every rank in order with one message, instead of one rank
//!   failing while the others wait for it in a collective;
//! - distribution uses the same collectives layer as the solve (a broadcast of sizes, then
//!   scatters of the padded row blocks), so the MPI half distributes through MPI likewise.
//!
//! The row split is the paper's by default, which every rank computes from N alone; with
//! `--partition nnz` ([`PartitionBy::Nnz`]) rank 0 weighs the rows (a file's, or a
//! generator's row lengths) and broadcasts where each rank's block starts, after the sizes.
//!
//! Synthetic matrices are not distributed at all: each rank generates its own rows. The
//! right-hand side b is generated per row (`ones`, `random`, `manufactured`), so any rank
//! count sees the same b; a file b is read by rank 0 and scattered like the matrix.

use std::fmt;
use std::path::PathBuf;

use tca_mpi::Backend;

use crate::error::{CgError, Result};
use crate::matrix::Csr;
use crate::mm::{self, Field, Symmetry};
use crate::partition::{Partition, PartitionBy};
use crate::synth::Synthetic;

/// Where the matrix comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum MatrixSource {
    /// A Matrix Market file (`.mtx`, or gzip-compressed).
    File(PathBuf),
    /// A generated matrix (`poisson3d:M`, `banded:N:K`).
    Synthetic(Synthetic),
}

impl MatrixSource {
    /// `poisson3d:M`, `banded:N:K`, or else a file path.
    pub fn parse(spec: &str) -> Result<MatrixSource> {
        match Synthetic::parse(spec) {
            Some(s) => Ok(MatrixSource::Synthetic(s?)),
            None => Ok(MatrixSource::File(PathBuf::from(spec))),
        }
    }

    /// The name shown in reports: the file name, or the synthetic spec.
    pub fn label(&self) -> String {
        match self {
            MatrixSource::File(p) => p
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string()),
            MatrixSource::Synthetic(s) => s.label(),
        }
    }
}

/// The right-hand side b.
#[derive(Debug, Clone, PartialEq)]
pub enum Rhs {
    /// b = (1, ..., 1).
    Ones,
    /// b_i uniform in [-1, 1), a function of (seed, i) only.
    Random {
        /// Seed.
        seed: u64,
    },
    /// b = A x* for x*_i uniform in [-1, 1) (a function of (seed, i)); the report then gives
    /// the solution's error ||x - x*|| / ||x*||.
    Manufactured {
        /// Seed.
        seed: u64,
    },
    /// b = A 1: the solution is all ones (the SuiteSparse checks' and scipy's convention),
    /// and the report gives the solution's error as for `Manufactured`.
    AOnes,
    /// A Matrix Market vector (N x 1, `array` or `coordinate`).
    File(PathBuf),
}

/// The seed `random` and `manufactured` use when none is given.
pub const DEFAULT_SEED: u64 = 1;

impl Rhs {
    /// `ones`, `random[:SEED]`, `manufactured[:SEED]`, `a-ones`, `file:PATH` or a path.
    pub fn parse(spec: &str) -> Result<Rhs> {
        let seed = |s: Option<&str>| -> Result<u64> {
            s.map_or(Ok(DEFAULT_SEED), |s| {
                s.parse()
                    .map_err(|_| CgError::Invalid(format!("--rhs {spec}: bad seed `{s}`")))
            })
        };
        let (head, tail) = match spec.split_once(':') {
            Some((h, t)) => (h, Some(t)),
            None => (spec, None),
        };
        Ok(match head {
            "ones" if tail.is_none() => Rhs::Ones,
            "a-ones" if tail.is_none() => Rhs::AOnes,
            "random" => Rhs::Random { seed: seed(tail)? },
            "manufactured" => Rhs::Manufactured { seed: seed(tail)? },
            "file" => Rhs::File(PathBuf::from(tail.unwrap_or_default())),
            _ => Rhs::File(PathBuf::from(spec)),
        })
    }
}

impl fmt::Display for Rhs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rhs::Ones => f.write_str("ones"),
            Rhs::AOnes => f.write_str("a-ones"),
            Rhs::Random { seed } => write!(f, "random:{seed}"),
            Rhs::Manufactured { seed } => write!(f, "manufactured:{seed}"),
            Rhs::File(p) => write!(f, "file:{}", p.display()),
        }
    }
}

/// The system A x = b.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// A.
    pub matrix: MatrixSource,
    /// b.
    pub rhs: Rhs,
    /// How the rows are split over the ranks (`--partition`; the paper's by default).
    pub partition: PartitionBy,
}

/// What every rank knows about the matrix.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MatrixInfo {
    /// File name or synthetic spec.
    pub source: String,
    /// Rows (= columns).
    pub rows: u64,
    /// Nonzeros of the whole matrix (symmetric storage expanded; explicit zeros counted).
    pub nnz: u64,
}

/// One rank's share of the system, ready to solve.
#[derive(Debug, Clone)]
pub struct LocalProblem {
    /// The row split.
    pub part: Partition,
    /// This rank's rows of A (global column indices).
    pub a: Csr,
    /// This rank's block of b.
    pub b: Vec<f64>,
    /// This rank's block of the manufactured solution, for `Rhs::Manufactured`.
    pub x_star: Option<Vec<f64>>,
    /// The matrix.
    pub info: MatrixInfo,
    /// What rank 0 found reading the input (empty elsewhere).
    pub notes: Vec<String>,
}

/// A uniform value in [-1, 1) from (seed, i): splitmix64 of their mix.
pub fn uniform(seed: u64, i: u64) -> f64 {
    let mut z = seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(i.wrapping_mul(0xbf58_476d_1ce4_e5b9))
        .wrapping_add(0x94d0_49bb_1331_11eb);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 * (2.0 / (1u64 << 53) as f64) - 1.0
}

/// What rank 0 prepares before telling the others the sizes.
struct RootInput {
    n: usize,
    nnz: usize,
    part: Partition,
    matrix: Option<Csr>,
    b: Option<Vec<f64>>,
    notes: Vec<String>,
}

fn root_input(prob: &Problem, p: usize) -> Result<RootInput> {
    let mut notes = Vec::new();
    let (n, nnz, matrix) = match &prob.matrix {
        MatrixSource::File(path) => {
            let f = mm::read_matrix(path)?;
            let what = path.display().to_string();
            f.csr.check_spd_shape(&what)?;
            let field = match f.field {
                Field::Real => "real",
                Field::Integer => "integer",
                Field::Pattern => "pattern",
            };
            let sym = match f.symmetry {
                Symmetry::General => "general",
                Symmetry::Symmetric => "symmetric",
            };
            notes.push(format!(
                "read {what}: {field} {sym}, {} stored entries, {} nonzeros",
                tca_model::format::thousands(f.stored as u64),
                tca_model::format::thousands(f.csr.nnz() as u64)
            ));
            if f.field == Field::Pattern {
                notes.push(
                    "pattern matrix: values set to its graph Laplacian plus the identity \
                     (off-diagonal -1, diagonal 1 + off-diagonal count); A·1 = 1, so with \
                     --rhs ones x = 1 in one iteration: use --rhs random for a real solve"
                        .into(),
                );
            }
            (f.csr.n_rows, f.csr.nnz(), Some(f.csr))
        }
        MatrixSource::Synthetic(s) => (s.n(), s.nnz(), None),
    };
    let part = match (prob.partition, &matrix, &prob.matrix) {
        (PartitionBy::Nnz, Some(a), _) => Partition::by_nnz(&a.row_ptr, p)?,
        (PartitionBy::Nnz, None, MatrixSource::Synthetic(s)) => {
            Partition::by_nnz(&synthetic_row_ptr(s), p)?
        }
        // (A file's matrix is read above: `matrix` is `Some` for it.)
        _ => Partition::new(n, p)?,
    };
    let b = match &prob.rhs {
        Rhs::File(path) => Some(mm::read_vector(path, n)?),
        _ => None,
    };
    Ok(RootInput {
        n,
        nnz,
        part,
        matrix,
        b,
        notes,
    })
}

/// The row offsets of a generated matrix, from its row lengths (its entries are never built
/// here: a generated matrix can be larger than one rank's memory).
fn synthetic_row_ptr(s: &Synthetic) -> Vec<usize> {
    let mut row_ptr = Vec::with_capacity(s.n() + 1);
    row_ptr.push(0);
    for i in 0..s.n() {
        row_ptr.push(row_ptr[i] + s.row_len(i));
    }
    row_ptr
}

/// Header words rank 0 broadcasts: status, N, nnz, u64 block, f64 block.
const HEADER: usize = 5;

/// Sets the problem up on every rank (collective): rank 0 reads and checks the input and
/// distributes it (see the module doc); the others receive their rows.
pub fn setup<C: Backend>(c: &mut C, prob: &Problem) -> Result<LocalProblem> {
    let (me, p) = (c.rank(), c.size());
    let mut header = [0u64; HEADER];
    let mut root = None;
    let mut root_err = None;
    if me == 0 {
        match root_input(prob, p) {
            Ok(r) => {
                let (mut blk_u, mut blk_f) = (0, 0);
                if let Some(a) = &r.matrix {
                    for q in 0..p {
                        let rg = r.part.range(q);
                        let nz = a.row_ptr[rg.end] - a.row_ptr[rg.start];
                        blk_u = blk_u.max(rg.len() + 1 + nz);
                        blk_f = blk_f.max(nz);
                    }
                }
                header = [0, r.n as u64, r.nnz as u64, blk_u as u64, blk_f as u64];
                root = Some(r);
            }
            Err(e) => {
                header[0] = 1;
                root_err = Some(e);
            }
        }
    }
    c.broadcast_u64(&mut header)?;
    if header[0] != 0 {
        return Err(root_err.unwrap_or(CgError::RootFailed));
    }
    let [_, n, nnz, blk_u, blk_f] = header.map(|w| w as usize);
    let part = match prob.partition {
        PartitionBy::Rows => Partition::new(n, p)?,
        // Rank 0 weighed the rows; the others learn where their blocks start.
        PartitionBy::Nnz => {
            let mut displs: Vec<u64> = match &root {
                Some(r) => r.part.displs.iter().map(|&d| d as u64).collect(),
                None => vec![0; p],
            };
            c.broadcast_u64(&mut displs)?;
            Partition::from_displs(n, displs.into_iter().map(|d| d as usize).collect())?
        }
    };
    let mine = part.range(me);
    let info = MatrixInfo {
        source: prob.matrix.label(),
        rows: n as u64,
        nnz: nnz as u64,
    };

    let a = match &prob.matrix {
        MatrixSource::Synthetic(s) => s.rows(mine.clone()),
        MatrixSource::File(_) => {
            // Rank r's u64 block: its row pointers (from 0), then its columns; padded.
            let mut send_u = Vec::new();
            let mut send_f = Vec::new();
            if let Some(a) = root.as_ref().and_then(|r| r.matrix.as_ref()) {
                send_u = vec![0u64; blk_u * p];
                send_f = vec![0f64; blk_f * p];
                for q in 0..p {
                    let rg = part.range(q);
                    let s = a.row_ptr[rg.start];
                    let nz = a.row_ptr[rg.end] - s;
                    let bu = &mut send_u[q * blk_u..(q + 1) * blk_u];
                    for (k, &o) in a.row_ptr[rg.start..=rg.end].iter().enumerate() {
                        bu[k] = (o - s) as u64;
                    }
                    for (k, &j) in a.col[s..s + nz].iter().enumerate() {
                        bu[rg.len() + 1 + k] = u64::from(j);
                    }
                    send_f[q * blk_f..q * blk_f + nz].copy_from_slice(&a.val[s..s + nz]);
                }
            }
            let mut ru = vec![0u64; blk_u];
            let mut rf = vec![0f64; blk_f];
            c.scatter_u64(&send_u, &mut ru)?;
            c.scatter_f64(&send_f, &mut rf)?;
            drop((send_u, send_f));
            let rows = mine.len();
            let row_ptr: Vec<usize> = ru[..=rows].iter().map(|&o| o as usize).collect();
            let nz = row_ptr[rows];
            Csr {
                n_rows: rows,
                n_cols: n,
                row_ptr,
                col: ru[rows + 1..rows + 1 + nz]
                    .iter()
                    .map(|&j| j as u32)
                    .collect(),
                val: rf[..nz].to_vec(),
            }
        }
    };

    let mut x_star = None;
    let b = match &prob.rhs {
        Rhs::Ones => vec![1.0; mine.len()],
        Rhs::Random { seed } => mine.clone().map(|i| uniform(*seed, i as u64)).collect(),
        Rhs::Manufactured { .. } | Rhs::AOnes => {
            let full: Vec<f64> = match &prob.rhs {
                Rhs::Manufactured { seed } => (0..n).map(|i| uniform(*seed, i as u64)).collect(),
                _ => vec![1.0; n],
            };
            let mut b = vec![0.0; mine.len()];
            a.spmv(&full, &mut b);
            x_star = Some(full[mine.clone()].to_vec());
            b
        }
        Rhs::File(_) => {
            let blk = part.counts.iter().copied().max().unwrap_or(0);
            let mut send = Vec::new();
            if let Some(bf) = root.as_ref().and_then(|r| r.b.as_ref()) {
                send = vec![0.0; blk * p];
                for q in 0..p {
                    let rg = part.range(q);
                    send[q * blk..q * blk + rg.len()].copy_from_slice(&bf[rg]);
                }
            }
            let mut recv = vec![0.0; blk];
            c.scatter_f64(&send, &mut recv)?;
            recv.truncate(mine.len());
            recv
        }
    };
    Ok(LocalProblem {
        part,
        a,
        b,
        x_star,
        info,
        notes: root.map(|r| r.notes).unwrap_or_default(),
    })
}
