//! Linear scatter (seed 000: "the root writes each rank's m/p piece in turn, one chained
//! DMA"). On shared memory a chain is a run of memcpys, so the root issues every piece back
//! to back, chunk by chunk across ranks, and each rank copies its piece out of its slots.
//! Cost: α + (p - 1) n β (n = one rank's piece). Reuse: channel flow control.

use crate::coll::registry::{CostModel, Work};
use crate::coll::step::{Mode, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
    root: usize,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let b = recv.len();
    if me != root {
        return c.ch_recv(root, recv).await;
    }
    for i in 0..c.chunks(b) {
        for k in 1..p {
            let q = (root + k) % p;
            c.send_chunk(q, &send[q * b..(q + 1) * b], i).await?;
        }
    }
    recv.copy_from_slice(&send[me * b..(me + 1) * b]);
    Ok(())
}

/// One way: the busier of the root (p - 1 sends of n, and its own block) and a receiver.
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (q, n) = (p.saturating_sub(1) as f64, n as f64);
    let busiest = m.slowest(
        m.sched(p).local(n).send(q, n).work(),
        m.sched(p).recv(1.0, n).work(),
    );
    m.paced(p, busiest, m.sched(p).local(n).send(q, n).recv(q, n).work())
}
