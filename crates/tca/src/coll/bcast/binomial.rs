//! Binomial-tree broadcast (seed 000, "Broadcast: binomial tree, log2 p steps").
//!
//! With ranks renumbered relative to the root (v = (r - root) mod p), rank v receives the
//! whole buffer from v - 2^k, where 2^k is its lowest set bit, then sends it to v + 2^j for
//! every smaller j with v + 2^j < p. ceil(log2 p) rounds, any p, any root.
//! Cost: ceil(log2 p) (α + n β). Reuse: channel flow control (see `channel`).

use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], root: usize) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let v = (me + p - root) % p;
    let mut mask = 1;
    while mask < p {
        if v & mask != 0 {
            c.ch_recv((v - mask + root) % p, buf).await?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if v + mask < p {
            c.ch_send((v + mask + root) % p, buf).await?;
        }
        mask >>= 1;
    }
    Ok(())
}
