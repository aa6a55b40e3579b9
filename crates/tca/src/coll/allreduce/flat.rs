//! Flat allreduce (shared memory, small messages): every rank writes its buffer to every
//! other rank in one step, then each combines all p contributions in rank order. One step
//! deep, and every rank computes the same combination in the same order, so results are
//! bit-identical everywhere. Cost: α + (p - 1) n (β + γ). Reuse: channel flow control; the p
//! contributions are staged in the communicator's reusable temporary.

use crate::coll::Reducer;
use crate::coll::registry::{CostModel, Work};
use crate::coll::step::{Mode, Steps};
use crate::error::Result;

// The scratch buffer is this run's alone while it runs: see `step`, "Scratch".
#[allow(clippy::await_holding_refcell_ref)]
pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], red: &Reducer<'_>) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let n = buf.len();
    let mut all = c.tmp(1, p * n);
    all[me * n..(me + 1) * n].copy_from_slice(buf);
    for i in 0..c.chunks(n) {
        for k in 1..p {
            c.send_chunk((me + k) % p, buf, i).await?;
        }
        for k in 1..p {
            let q = (me + p - k) % p;
            c.recv_chunk(q, &mut all[q * n..(q + 1) * n], i, None)
                .await?;
        }
    }
    combine_in_order(c.world_ref(), &all, buf, p, red)
}

/// buf = block 0 op block 1 op ... op block p-1 of `all`.
pub(crate) fn combine_in_order(
    w: &crate::World,
    all: &[u8],
    buf: &mut [u8],
    p: usize,
    red: &Reducer<'_>,
) -> Result<()> {
    let n = buf.len();
    w.computed(n * p.saturating_sub(1));
    buf.copy_from_slice(&all[..n]);
    for q in 1..p {
        red.apply(buf, &all[q * n..(q + 1) * n])?;
    }
    Ok(())
}

/// One round: p - 1 sends and receives of n, the p contributions staged and combined in order
/// (three local copies of n with the front end's).
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (q, n) = (p.saturating_sub(1) as f64, n as f64);
    m.sched(p)
        .local(3.0 * n)
        .rounds(1.0)
        .send(q, n)
        .recv(q, n)
        .reduce(q * n)
        .symmetric()
}
