//! Binomial-tree gather, the mirror of the binomial scatter: relative to the root, rank v
//! collects its children's subtrees (v + 2^j for 2^j below its lowest set bit) after its own
//! block, then sends the whole subtree to its parent. ceil(log2 p) steps into the root.
//! Cost: ceil(log2 p) α + (p - 1) n β. Reuse: channel flow control; staging in the
//! communicator's reusable temporary.

use crate::coll::step::{Mode, Site, Steps};
use crate::coll::subtree;
use crate::error::Result;

// The scratch buffer is this run's alone while it runs: see `step`, "Scratch".
#[allow(clippy::await_holding_refcell_ref)]
pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
    root: usize,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let b = send.len();
    let v = (me + p - root) % p;
    let (low, size) = subtree(p, v);
    let mut t = c.tmp(1, size * b);
    c.copy(&mut t[..b], send);
    let mut m = 1;
    while m < low {
        if v + m < p {
            let cnt = m.min(p - v - m);
            c.ch_recv((v + m + root) % p, &mut t[m * b..(m + cnt) * b])
                .await?;
        }
        m <<= 1;
    }
    if v != 0 {
        return c.ch_send((v - low + root) % p, &t[..size * b]).await;
    }
    for k in 0..p {
        let q = (root + k) % p;
        c.copy(&mut recv[q * b..(q + 1) * b], &t[k * b..(k + 1) * b]);
    }
    Ok(())
}
