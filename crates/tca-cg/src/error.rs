//! The solver's errors: one enum whose variant says what was wrong, so that tests and callers
//! can react to a kind rather than parse a message.
//!
//! Every variant but [`CgError::Comm`] and [`CgError::Mpi`] is *collective*: the ranks reach
//! the same verdict together (rank 0 tells the others before anything is distributed, and a
//! numerical breakdown is decided on allreduced values, which are bit-identical on every rank).
//! So a bad input never leaves a rank waiting in a collective for a peer that gave up; rank 0
//! carries the real message and the others get [`CgError::RootFailed`].

/// What went wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CgError {
    /// The file could not be read, or is not a Matrix Market file this solver can use.
    #[error("{0}")]
    Read(String),
    /// The matrix is not square.
    #[error("{0}")]
    NotSquare(String),
    /// The matrix is not symmetric (beyond [`crate::matrix::SYM_RTOL`]).
    #[error("{0}")]
    NotSymmetric(String),
    /// A diagonal entry is missing, zero or negative.
    #[error("{0}")]
    Diagonal(String),
    /// A value in the matrix or the right-hand side is NaN or infinite.
    #[error("{0}")]
    NotFinite(String),
    /// The matrix has fewer rows than there are ranks.
    #[error("{0}")]
    TooFewRows(String),
    /// An option is out of range (a synthetic size, a tolerance, a vector length).
    #[error("{0}")]
    Invalid(String),
    /// The iteration broke down: p·Ap ≤ 0 (the matrix is not positive definite), or a value
    /// became NaN or infinite (the solve diverged).
    #[error("{0}")]
    Breakdown(String),
    /// Rank 0 failed to set the problem up; it reports why.
    #[error("rank 0 could not set the problem up (it reports why)")]
    RootFailed,
    /// The tca runtime failed (a peer died, a timeout).
    #[error("tca: {0}")]
    Comm(#[from] tca::Error),
    /// The MPI half failed.
    #[error("MPI: {0}")]
    Mpi(String),
}

impl CgError {
    /// Whether every rank got this error together (see the module doc), so that the job can
    /// end in order with rank 0 reporting it, rather than as a crash.
    pub fn is_collective(&self) -> bool {
        !matches!(self, CgError::Comm(_) | CgError::Mpi(_))
    }
}

impl From<tca_mpi::CommError> for CgError {
    fn from(e: tca_mpi::CommError) -> Self {
        match e {
            tca_mpi::CommError::Tca(e) => CgError::Comm(e),
            tca_mpi::CommError::Mpi(m) => CgError::Mpi(m),
        }
    }
}

/// `Result` with [`CgError`].
pub type Result<T, E = CgError> = std::result::Result<T, E>;
