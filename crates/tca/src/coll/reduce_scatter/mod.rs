//! Reduce-scatter algorithms (equal blocks, `MPI_Reduce_scatter_block`).
pub(crate) mod flat;
pub(crate) mod ring;
