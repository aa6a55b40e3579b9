//! Broadcast algorithms.
pub(crate) mod binomial;
pub(crate) mod directions;
pub(crate) mod flat;
pub(crate) mod pipeline;
pub(crate) mod scatter_allgather;
