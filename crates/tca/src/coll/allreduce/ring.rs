//! Ring allreduce: a ring reduce-scatter (p - 1 steps, rank r ends with block r + 1 fully
//! combined) then a ring allgather of the blocks (p - 1 steps). Bandwidth-optimal: each rank
//! sends and receives 2 (p - 1)/p n bytes, any p.
//! Cost: 2 (p - 1) α + 2 (p - 1)/p n β + (p - 1)/p n γ. Reuse: channel flow control.

use crate::coll::reduce::reduce_scatter_gather::ring_reduce_scatter;
use crate::coll::registry::Model;
use crate::coll::{Comm, Reducer, block, split2};
use crate::error::Result;

pub(crate) fn run(c: &Comm<'_>, buf: &mut [u8], red: &Reducer<'_>) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let n = buf.len();
    ring_reduce_scatter(c, buf, red, 0)?;
    let (right, left) = ((me + 1) % p, (me + p - 1) % p);
    for s in 0..p - 1 {
        let out = block(n, red.elem, p, (me + 1 + p - s) % p);
        let inn = block(n, red.elem, p, (me + p - s) % p);
        let (msg, dst) = split2(buf, out, inn);
        c.sendrecv(right, msg, left, dst, None)?;
    }
    Ok(())
}

pub(crate) fn cost(m: &Model, p: usize, n: usize) -> f64 {
    let (pf, nf) = (p as f64, n as f64);
    2.0 * (pf - 1.0) * m.alpha
        + 2.0 * (pf - 1.0) / pf * nf * m.beta
        + (pf - 1.0) / pf * nf * m.gamma
}
