//! Binomial-tree scatter: relative to the root, rank v receives from its parent (v minus its
//! lowest set bit) the pieces of its whole subtree, keeps its own and passes each child's
//! subtree on. ceil(log2 p) steps instead of p - 1 sends from the root.
//! Cost: ceil(log2 p) α + (p - 1) n β. Reuse: channel flow control; the subtree staging
//! buffer is the communicator's reusable temporary.

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
    let b = recv.len();
    let v = (me + p - root) % p;
    // My subtree: relative ranks v .. v + size, held in `t` in relative order.
    let (low, size) = subtree(p, v);
    let mut t = c.tmp(1, size * b);
    if v == 0 {
        for k in 0..p {
            let q = (root + k) % p;
            c.copy(&mut t[k * b..(k + 1) * b], &send[q * b..(q + 1) * b]);
        }
    } else {
        c.ch_recv((v - low + root) % p, &mut t[..size * b]).await?;
    }
    let mut m = low >> 1;
    while m > 0 {
        if v + m < p {
            let cnt = m.min(p - v - m);
            c.ch_send((v + m + root) % p, &t[m * b..(m + cnt) * b])
                .await?;
        }
        m >>= 1;
    }
    c.copy(recv, &t[..b]);
    Ok(())
}
