//! Flat alltoall (latency): every rank writes each of its p - 1 outgoing blocks in one step,
//! chunk i to every rank, then takes chunk i from every rank. One step deep.
//! Cost: α + (p - 1) n β. Reuse: channel flow control.

use crate::coll::registry::{CostModel, Work};
use crate::coll::step::{Mode, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let b = send.len() / p;
    recv[me * b..(me + 1) * b].copy_from_slice(&send[me * b..(me + 1) * b]);
    for i in 0..c.chunks(b) {
        for k in 1..p {
            let q = (me + k) % p;
            c.send_chunk(q, &send[q * b..(q + 1) * b], i).await?;
        }
        for k in 1..p {
            let q = (me + p - k) % p;
            c.recv_chunk(q, &mut recv[q * b..(q + 1) * b], i, None)
                .await?;
        }
    }
    Ok(())
}

/// One round: p - 1 blocks of n sent and received; this rank's own block copied.
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (q, n) = (p.saturating_sub(1) as f64, n as f64);
    m.sched(p)
        .local(n)
        .rounds(1.0)
        .send(q, n)
        .recv(q, n)
        .symmetric()
}
