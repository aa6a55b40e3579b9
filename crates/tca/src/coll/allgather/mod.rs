//! Allgather algorithms. Every algorithm takes per-rank byte counts and displacements
//! (allgatherv), with this rank's block already in place.
pub(crate) mod bruck;
pub(crate) mod flat;
pub(crate) mod multiring;
pub(crate) mod recursive_doubling;
pub(crate) mod ring;
pub(crate) mod ring_3d;
