//! Binomial-tree broadcast (seed 000, "Broadcast: binomial tree, log2 p steps").
//!
//! With ranks renumbered relative to the root (v = (r - root) mod p), rank v receives the
//! whole buffer from v - 2^k, where 2^k is its lowest set bit, then sends it to v + 2^j for
//! every smaller j with v + 2^j < p. ceil(log2 p) rounds, any p, any root.
//! Cost: ceil(log2 p) (α + n β). Reuse: channel flow control (see `channel`).

use crate::coll::Comm;
use crate::coll::registry::{Model, log2c};
use crate::error::Result;

pub(crate) fn run(c: &Comm<'_>, buf: &mut [u8], root: usize) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let v = (me + p - root) % p;
    let mut mask = 1;
    while mask < p {
        if v & mask != 0 {
            c.recv((v - mask + root) % p, buf)?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if v + mask < p {
            c.send((v + mask + root) % p, buf)?;
        }
        mask >>= 1;
    }
    Ok(())
}

pub(crate) fn cost(m: &Model, p: usize, n: usize) -> f64 {
    log2c(p) * (m.alpha + n as f64 * m.beta)
}
