//! Dissemination allreduce (seed 000, after Bruck and Hensgen): ceil(log2 p) rounds; in round
//! k rank r sends to r + 2^k... here in its all-rank-counts form: the rounds disseminate the
//! contributions themselves (a Bruck allgather, so any p works, not only powers of two as in
//! the paper), then every rank combines the p contributions in rank order. Latency-optimal
//! for small messages, and the results are bit-identical on every rank.
//! Cost: ceil(log2 p) α + (p - 1) n (β + γ). Reuse: channel flow control; contributions are
//! staged in the communicator's reusable temporary.

use super::flat::combine_in_order;
use crate::coll::allgather::bruck;
use crate::coll::registry::{Model, log2c};
use crate::coll::{Comm, Reducer};
use crate::error::Result;

pub(crate) fn run(c: &Comm<'_>, buf: &mut [u8], red: &Reducer<'_>) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let n = buf.len();
    let mut all = c.tmp(1, p * n);
    all[me * n..(me + 1) * n].copy_from_slice(buf);
    bruck::exchange(c, &mut all, |b| b * n..(b + 1) * n)?;
    combine_in_order(&all, buf, p, red)
}

pub(crate) fn cost(m: &Model, p: usize, n: usize) -> f64 {
    log2c(p) * m.alpha + (p - 1) as f64 * n as f64 * (m.beta + m.gamma)
}
