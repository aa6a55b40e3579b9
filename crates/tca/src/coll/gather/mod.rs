//! Gather algorithms.
pub(crate) mod binomial;
pub(crate) mod linear;
