//! Reduce algorithms.
pub(crate) mod binomial;
pub(crate) mod flat;
pub(crate) mod reduce_scatter_gather;
