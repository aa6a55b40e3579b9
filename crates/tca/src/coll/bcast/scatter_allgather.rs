//! Scatter + allgather broadcast (van de Geijn): the root sends block r of the buffer to rank
//! r, then a ring allgather completes every copy. Each rank moves about 2 n bytes instead of
//! n log p, for large messages on many ranks.
//! Cost: (p - 1) α + n β (scatter) + (p - 1)(α + n/p β) (ring). Reuse: channel flow control.

use crate::coll::allgather::ring;
use crate::coll::block;
use crate::coll::registry::{CostModel, Work};
use crate::coll::step::{Mode, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], root: usize) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let n = buf.len();
    if me == root {
        for k in 1..p {
            let q = (root + k) % p;
            c.ch_send(q, &buf[block(n, 1, p, q)]).await?;
        }
    } else {
        c.ch_recv(root, &mut buf[block(n, 1, p, me)]).await?;
    }
    ring::exchange(c, buf, 0, |b| block(n, 1, p, b)).await
}

/// The scatter (the busier of the root's p - 1 sends of n/p and a receiver), then p - 1 ring
/// exchange rounds of n/p on every rank.
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (q, b) = (p.saturating_sub(1) as f64, n as f64 / p.max(1) as f64);
    let scatter = m.slowest(m.sched(p).send(q, b).work(), m.sched(p).recv(1.0, b).work());
    let ring = m.sched(p).exchange(q, b).work();
    let total = m.sched(p).send(q, b).recv(q, b).then(ring.scaled(p as f64));
    m.paced(p, m.sched(p).then(scatter).then(ring).work(), total.work())
}
