//! Ring allreduce: a ring reduce-scatter (p - 1 steps, rank r ends with block r + 1 fully
//! combined) then a ring allgather of the blocks (p - 1 steps). Bandwidth-optimal: each rank
//! sends and receives 2 (p - 1)/p n bytes, any p.
//! Cost: 2 (p - 1) α + 2 (p - 1)/p n β + (p - 1)/p n γ. Reuse: channel flow control.

use crate::coll::allgather::ring;
use crate::coll::reduce::reduce_scatter_gather::ring_reduce_scatter;
use crate::coll::step::{Mode, Site, Steps};
use crate::coll::{Reducer, block};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], red: &Reducer<'_>) -> Result<()> {
    ring_reduce_scatter(c, buf, red, 0).await?;
    // Rank r now holds block r + 1 complete: a ring allgather starting from it.
    let n = buf.len();
    ring::exchange(c, buf, 1, |b| block(n, red.elem, c.p(), b)).await
}
