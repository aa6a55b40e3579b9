//! Binomial-tree broadcast (seed 000, "Broadcast: binomial tree, log2 p steps").
//!
//! With ranks renumbered relative to the root (v = (r - root) mod p), rank v receives the
//! whole buffer from v - 2^k, where 2^k is its lowest set bit, then sends it to v + 2^j for
//! every smaller j with v + 2^j < p. ceil(log2 p) rounds, any p, any root.
//! Cost: ceil(log2 p) (α + n β). Reuse: channel flow control (see `channel`).

use crate::coll::registry::{CostModel, Work, log2c};
use crate::coll::step::{Mode, Steps};
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

/// Data flows one way, so back-to-back calls overlap and the busier rank sets the pace: the
/// root, which sends the buffer ceil(log2 p) times, or its first child, which receives it and
/// sends it on to up to ceil(log2 p) - 1 children. In all, p - 1 sends and receives.
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (l, q, n) = (log2c(p), p.saturating_sub(1) as f64, n as f64);
    let busiest = m.slowest(
        m.sched(p).send(l, n).work(),
        m.sched(p).recv(1.0, n).send(l - 1.0, n).work(),
    );
    m.paced(p, busiest, m.sched(p).send(q, n).recv(q, n).work())
}
