//! Ring allreduce: a ring reduce-scatter (p - 1 steps, rank r ends with block r + 1 fully
//! combined) then a ring allgather of the blocks (p - 1 steps). Bandwidth-optimal: each rank
//! sends and receives 2 (p - 1)/p n bytes, any p.
//! Cost: 2 (p - 1) α + 2 (p - 1)/p n β + (p - 1)/p n γ. Reuse: channel flow control.

use crate::coll::allgather::ring;
use crate::coll::reduce::reduce_scatter_gather::ring_reduce_scatter;
use crate::coll::registry::{CostModel, Work};
use crate::coll::step::{Mode, Steps};
use crate::coll::{Reducer, block};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], red: &Reducer<'_>) -> Result<()> {
    ring_reduce_scatter(c, buf, red, 0).await?;
    // Rank r now holds block r + 1 complete: a ring allgather starting from it.
    let n = buf.len();
    ring::exchange(c, buf, 1, |b| block(n, red.elem, c.p(), b)).await
}

/// p - 1 combining exchange rounds of n/p (reduce-scatter), then p - 1 exchange rounds of n/p
/// (allgather); the front end's copy.
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (q, nf) = (p.saturating_sub(1) as f64, n as f64);
    let b = nf / p.max(1) as f64;
    m.sched(p)
        .local(nf)
        .exchange_reduce(q, b)
        .exchange(q, b)
        .symmetric()
}
