//! Flat allgather (small blocks): every rank writes its block to every other rank in one step,
//! chunk i to every rank, then takes chunk i of every other block. One step deep: where ranks
//! outnumber cores each dependent step is a trip through the scheduler, and the log-step and
//! ring algorithms pay 3-7 of them at 8 ranks. Blocks go straight to their places (per-rank
//! counts and displacements, as every allgather here).
//! Cost: α + (p - 1) n β for blocks of n bytes, and the contention of p - 1 blocks arriving
//! at once, which the models leave out (hence [`AUTO_MAX`]). Reuse: channel flow control.

use crate::coll::step::{Mode, Site, Steps};
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

/// The largest block for which Auto may take it: every rank then has p - 1 blocks coming in at
/// once, a contention the cost models leave out (on a network, for the links into each node).
/// Up to 1 KiB the one round wins everywhere it was measured: 0.26-0.41x the log-step
/// algorithms' time at 8 ranks on 2 cores, 0.22-0.87x the best other's on the simulated PEACH2
/// and Tofu at 16 ranks; at 2 KiB PEACH2's 16 ranks took 1.6x the ring's time, at 4 KiB 2.8x
/// (BENCHMARKS.md, "A flat allgather"). The registry gives it to Auto as this algorithm's
/// limit ([`Algorithm::auto_max`](crate::coll::Algorithm::auto_max)); forced, it runs at any
/// size.
pub(crate) const AUTO_MAX: usize = 1 << 10;
