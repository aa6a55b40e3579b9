//! Reduce as reduce_scatter + gather (Rabenseifner's reduce): a ring reduce-scatter leaves
//! rank r with block (r + 1) mod p of the result, then every rank sends its block to the
//! root. Each rank moves about 2 n bytes and combines n (p - 1)/p, for large messages.
//! Cost: 2 (p - 1) α + 2 (p - 1)/p n β + (p - 1)/p n γ. Reuse: channel flow control.

use crate::coll::step::{Mode, Site, Steps};
use crate::coll::{Reducer, block, split2};
use crate::error::Result;

/// Ring reduce-scatter in place over `p` element blocks of `buf`: afterwards this rank holds
/// the fully reduced block `(me + 1 + shift) mod p`, where blocks sent first are `me + shift`.
pub(crate) async fn ring_reduce_scatter<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    red: &Reducer<'_>,
    shift: usize,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let n = buf.len();
    let (right, left) = ((me + 1) % p, (me + p - 1) % p);
    for s in 0..p - 1 {
        let out = block(n, red.elem, p, (me + shift + 2 * p - s) % p);
        let inn = block(n, red.elem, p, (me + shift + 2 * p - s - 1) % p);
        let (msg, dst) = split2(buf, out, inn);
        c.ch_sendrecv(right, msg, left, dst, Some(red)).await?;
    }
    Ok(())
}

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    red: &Reducer<'_>,
    root: usize,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let n = buf.len();
    // Shift so that the root ends with block `root`: with shift = p - 1 rank r owns block r.
    ring_reduce_scatter(c, buf, red, p - 1).await?;
    if me != root {
        return c.ch_send(root, &buf[block(n, red.elem, p, me)]).await;
    }
    for k in 1..p {
        let q = (root + k) % p;
        c.ch_recv(q, &mut buf[block(n, red.elem, p, q)]).await?;
    }
    Ok(())
}
