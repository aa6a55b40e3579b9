//! Scatter + allgather broadcast (van de Geijn): the root sends block r of the buffer to rank
//! r, then a ring allgather completes every copy. Each rank moves about 2 n bytes instead of
//! n log p, for large messages on many ranks.
//! Cost: (p - 1) α + n β (scatter) + (p - 1)(α + n/p β) (ring). Reuse: channel flow control.

use crate::coll::allgather::ring;
use crate::coll::registry::Model;
use crate::coll::{Comm, block};
use crate::error::Result;

pub(crate) fn run(c: &Comm<'_>, buf: &mut [u8], root: usize) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let n = buf.len();
    if me == root {
        for k in 1..p {
            let q = (root + k) % p;
            c.send(q, &buf[block(n, 1, p, q)])?;
        }
    } else {
        c.recv(root, &mut buf[block(n, 1, p, me)])?;
    }
    ring::exchange(c, buf, 0, |b| block(n, 1, p, b))
}

pub(crate) fn cost(m: &Model, p: usize, n: usize) -> f64 {
    let pf = p as f64;
    2.0 * (pf - 1.0) * m.alpha + n as f64 * m.beta + (pf - 1.0) / pf * n as f64 * m.beta
}
