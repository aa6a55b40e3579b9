//! Barrier algorithms.
pub(crate) mod dissemination;
