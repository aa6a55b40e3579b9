//! Flat allgather (latency): every rank writes its block to every other rank in one step,
//! chunk i to every rank, then takes chunk i of every other block. One step deep: where ranks
//! outnumber cores each dependent step is a trip through the scheduler, and the log-step and
//! ring algorithms pay 3-7 of them at 8 ranks. Blocks go straight to their places (per-rank
//! counts and displacements, as every allgather here).
//! Cost: α + (p - 1) n β for blocks of n bytes. Reuse: channel flow control.

use crate::coll::registry::{CostModel, Work};
use crate::coll::step::{Mode, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    counts: &[usize],
    displs: &[usize],
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let block = |q: usize| displs[q]..displs[q] + counts[q];
    // A block of any length is at least one chunk (an empty one a packet saying so), and
    // blocks may differ in length: chunk round i carries the blocks that still have one.
    let rounds = (0..p).map(|q| c.chunks(counts[q])).max().unwrap_or(0);
    let mine = c.chunks(counts[me]);
    for i in 0..rounds {
        if i < mine {
            for k in 1..p {
                c.send_chunk((me + k) % p, &buf[block(me)], i).await?;
            }
        }
        for k in 1..p {
            let q = (me + p - k) % p;
            if i < c.chunks(counts[q]) {
                c.recv_chunk(q, &mut buf[block(q)], i, None).await?;
            }
        }
    }
    Ok(())
}

/// This rank's block into place, then one round that sends its block to p - 1 ranks and
/// receives p - 1 blocks of n.
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (q, n) = (p.saturating_sub(1) as f64, n as f64);
    m.sched(p)
        .local(n)
        .rounds(1.0)
        .send(q, n)
        .recv(q, n)
        .symmetric()
}
