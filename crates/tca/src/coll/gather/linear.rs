//! Linear gather (seed 000: "each rank writes its piece to the root"): every rank sends its
//! block to the root, which takes chunk i from every rank in turn, so all senders progress
//! together. Cost: α + (p - 1) n β. Reuse: channel flow control.

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
    let b = send.len();
    if me != root {
        return c.ch_send(root, send).await;
    }
    for i in 0..c.chunks(b) {
        for k in 1..p {
            let q = (root + k) % p;
            c.recv_chunk(q, &mut recv[q * b..(q + 1) * b], i, None)
                .await?;
        }
    }
    recv[me * b..(me + 1) * b].copy_from_slice(send);
    Ok(())
}

/// One way: the busier of the root (p - 1 receives of n, and its own block) and a sender.
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (q, n) = (p.saturating_sub(1) as f64, n as f64);
    let busiest = m.slowest(
        m.sched(p).local(n).recv(q, n).work(),
        m.sched(p).send(1.0, n).work(),
    );
    m.paced(p, busiest, m.sched(p).local(n).recv(q, n).send(q, n).work())
}
