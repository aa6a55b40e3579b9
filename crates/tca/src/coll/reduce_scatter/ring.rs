//! Ring reduce-scatter (bandwidth): p - 1 steps; in each, every rank passes a partially
//! combined block to its right neighbour and combines the one from its left, arranged so that
//! rank r ends with block r. Cost: (p - 1)(α + n β + n γ) for blocks of n bytes.
//! Reuse: channel flow control.

use crate::coll::Reducer;
use crate::coll::reduce::reduce_scatter_gather::ring_reduce_scatter;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    recv: &mut [u8],
    red: &Reducer<'_>,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let b = recv.len();
    // Equal blocks: the element-wise split of `block` gives exactly b bytes each.
    ring_reduce_scatter(c, buf, red, p - 1).await?;
    c.copy(recv, &buf[me * b..(me + 1) * b]);
    Ok(())
}
