//! Dissemination allreduce (seed 000, after Bruck and Hensgen): ceil(log2 p) rounds; in round
//! k rank r sends to r + 2^k... here in its all-rank-counts form: the rounds disseminate the
//! contributions themselves (a Bruck allgather, so any p works, not only powers of two as in
//! the paper), then every rank combines the p contributions in rank order. Latency-optimal
//! for small messages, and the results are bit-identical on every rank.
//! Cost: ceil(log2 p) α + (p - 1) n (β + γ). Reuse: channel flow control; contributions are
//! staged in the communicator's reusable temporary.

use super::flat::combine_in_order;
use crate::coll::Reducer;
use crate::coll::allgather::bruck;
use crate::coll::registry::{CostModel, Work, log2c};
use crate::coll::step::{Mode, Steps};
use crate::error::Result;

// The scratch buffer is this run's alone while it runs: see `step`, "Scratch".
#[allow(clippy::await_holding_refcell_ref)]
pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], red: &Reducer<'_>) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let n = buf.len();
    let mut all = c.tmp(1, p * n);
    all[me * n..(me + 1) * n].copy_from_slice(buf);
    bruck::exchange(c, &mut all, |b| b * n..(b + 1) * n).await?;
    combine_in_order(&all, buf, p, red)
}

/// A Bruck allgather of the contributions (ceil(log2 p) rounds, p - 1 sends and receives of n
/// in all), then the combination in order; three local copies of n with the front end's.
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (q, n) = (p.saturating_sub(1) as f64, n as f64);
    m.sched(p)
        .local(3.0 * n)
        .rounds(log2c(p))
        .send(q, n)
        .recv(q, n)
        .reduce(q * n)
        .symmetric()
}
