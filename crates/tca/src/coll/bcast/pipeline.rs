//! Pipelined chain broadcast (seed 002's pipelined Bcast): ranks form a chain from the root
//! (v = 0, 1, ..., p - 1 relative to the root); the message is cut into chunks, and each rank
//! forwards chunk i to the next as soon as it has received it, so all links work at once.
//! Cost: (p - 2 + c)(α + s β) for c chunks of s bytes: about n β + (p - 2) s β for large n.
//! Reuse: channel flow control (at most K chunks in flight per link).

use crate::coll::registry::{CostModel, Work};
use crate::coll::step::{Mode, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], root: usize) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let v = (me + p - root) % p;
    let prev = (me + p - 1) % p;
    let next = (me + 1) % p;
    for i in 0..c.chunks(buf.len()) {
        if v > 0 {
            c.recv_chunk(prev, buf, i, None).await?;
        }
        if v + 1 < p {
            c.send_chunk(next, buf, i).await?;
        }
    }
    Ok(())
}

/// Every link works at once: a middle rank receives and sends every chunk; with two ranks,
/// the busier of the sender and the receiver. In all, p - 1 sends and receives.
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (q, n) = (p.saturating_sub(1) as f64, n as f64);
    let busiest = if p > 2 {
        m.sched(p).recv(1.0, n).send(1.0, n).work()
    } else {
        m.slowest(
            m.sched(p).send(1.0, n).work(),
            m.sched(p).recv(1.0, n).work(),
        )
    };
    m.paced(p, busiest, m.sched(p).send(q, n).recv(q, n).work())
}
