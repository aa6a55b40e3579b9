//! Alltoall algorithms (equal blocks).
pub(crate) mod flat;
pub(crate) mod pairwise;
