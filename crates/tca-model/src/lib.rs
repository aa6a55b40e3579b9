//! Communication performance models, with no dependency on the runtime.
//!
//! - [`record`]: one measurement row as `tca bench` writes it (CSV, JSON), and reading any
//!   result file (tca CSV/JSON or IMB text).
//! - [`imb`]: Intel MPI Benchmarks text, written and parsed.
//! - [`hockney`]: Hockney's model t = t_L + M/B, throughput B pipe(M/M_1/2) (seed 002 sec. 3).
//! - [`fit`]: least-squares fits of that throughput curve to measurements (B, M_1/2, t_L).
//! - [`estimate`]: seed 002's estimate formulas for PingPong, Bcast, Allreduce and Allgather
//!   on the K computer, and the parameter sets (presets) that reproduce its Table 1.
//! - [`linear`]: non-negative least squares with relative residuals, which calibrates the
//!   parameters of tca's algorithm cost models (`tca model calibrate`).
//! - [`format`]: numbers as Table 1 prints them; [`size`]: sizes as people type them (64K).
#![forbid(unsafe_code)]

pub mod estimate;
pub mod fit;
pub mod format;
pub mod hockney;
pub mod imb;
pub mod linear;
pub mod record;
pub mod size;
