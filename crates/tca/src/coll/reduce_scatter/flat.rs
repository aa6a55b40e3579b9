//! Flat reduce-scatter (latency): every rank writes block q of its buffer to rank q in one
//! step; each rank combines the p - 1 blocks it receives into its own.
//! Cost: α + (p - 1) n (β + γ) for blocks of n bytes. Reuse: channel flow control.

use crate::coll::Reducer;
use crate::coll::registry::{CostModel, Work};
use crate::coll::step::{Mode, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    recv: &mut [u8],
    red: &Reducer<'_>,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let b = recv.len();
    recv.copy_from_slice(&buf[me * b..(me + 1) * b]);
    for i in 0..c.chunks(b) {
        for k in 1..p {
            let q = (me + k) % p;
            c.send_chunk(q, &buf[q * b..(q + 1) * b], i).await?;
        }
        for k in 1..p {
            c.recv_chunk((me + p - k) % p, recv, i, Some(red)).await?;
        }
    }
    Ok(())
}

/// One round: p - 1 sends of blocks of n, p - 1 combining receives; the front end's copy of
/// the p n input and this rank's block.
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (q, n) = (p.saturating_sub(1) as f64, n as f64);
    m.sched(p)
        .local((q + 2.0) * n)
        .rounds(1.0)
        .send(q, n)
        .recv_reduce(q, n)
        .symmetric()
}
