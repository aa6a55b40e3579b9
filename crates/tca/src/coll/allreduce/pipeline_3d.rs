//! Seed 002's 3-D allreduce (the K computer's, eqs. 20-27): the ranks on a 3-D grid (the most
//! balanced factorisation of p, [`grid`]), a reduce phase, then a broadcast phase, both
//! pipelined chunk by chunk. Reduce: along dimension 0 every line of ranks combines toward
//! its rank at coordinate 0 (a chain: the far end sends, each rank combines what it receives
//! into its own and passes it on), then along dimension 1 on the plane at coordinate 0 of
//! dimension 0, then along dimension 2 to the origin, which then holds the result. Broadcast:
//! the same trees backwards, from the origin along dimension 2, then 1, then 0. Each rank
//! sends and receives about 2n bytes in all (seed 002: data moved 2M), in 2(n0 + n1 + n2 - 3)
//! steps plus one per chunk along the critical path; the result is computed once, so every
//! rank gets the same bits.
//!
//! Every rank takes the steps in one order (at step t: the reduce of chunk t along dimension
//! 0, 1, 2, then the broadcast of chunk t - L along 2, 1, 0, where L = 2 d, d the rank's
//! distance from the origin: the round trip to the origin and back, so each result arrives
//! as the rank looks for it), and each directed ring carries one phase only (reduce toward
//! the origin, broadcast away from it). A rank at distance d waits for reduce chunk t from
//! its further neighbour, sent at that rank's step t, which follows its broadcast receive of
//! chunk t - 1 - 2(d + 1), sent by this rank at its step t - 3; and for broadcast chunk i from
//! its closer neighbour, sent at that rank's step i + 2(d - 1), two steps earlier. Every wait
//! is for an earlier step, or for credits its neighbours return as they take earlier chunks.
//! No deadlock.
//! Cost: the busiest rank's sends, receives and combines, as a chain's.
//! Reuse: channel flow control.

use crate::coll::Reducer;
use crate::coll::coords;
#[cfg(test)]
use crate::coll::grid;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

const D: usize = 3;

/// A rank's neighbours in the phases: for each dimension, whether it takes part in that
/// dimension's chain (its coordinates in the earlier dimensions are 0), the rank one step
/// further from the origin (it sends to this one in the reduce, receives from it in the
/// broadcast) and the one a step closer.
#[derive(Debug, Clone, Copy)]
struct Chain {
    joins: bool,
    further: Option<usize>,
    closer: Option<usize>,
}

/// Rank `me`'s links on the grid `dims`.
fn chains(dims: [usize; D], me: usize) -> [Chain; D] {
    let at = coords(&dims, me);
    let stride = |d: usize| dims[..d].iter().product::<usize>();
    std::array::from_fn(|d| Chain {
        joins: at[..d].iter().all(|&a| a == 0),
        further: (at[d] + 1 < dims[d]).then(|| me + stride(d)),
        closer: (at[d] > 0).then(|| me - stride(d)),
    })
}

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], red: &Reducer<'_>) -> Result<()> {
    let dims = c.grid::<D>();
    let ch = chains(dims, c.me());
    let chunks = c.chunks(buf.len());
    // This rank takes the broadcast of a chunk `lag` steps after its reduce: the round trip
    // from here to the origin and back (2 x its distance, the sum of its coordinates). The
    // origin broadcasts a chunk in the step it completes it, and every rank receives it just
    // as it arrives; a global lag (the far corner's) made each rank wait at every step for
    // the result of the chunk it had just sent, a full round trip per chunk.
    let lag = 2 * coords(&dims, c.me()).iter().sum::<usize>();
    for t in 0..chunks + lag {
        if t < chunks {
            for link in ch.iter().filter(|l| l.joins) {
                if let Some(q) = link.further {
                    c.recv_chunk(q, buf, t, Some(red)).await?;
                }
                if let Some(q) = link.closer {
                    c.send_chunk(q, buf, t).await?;
                }
            }
        }
        if let Some(i) = t.checked_sub(lag) {
            for link in ch.iter().rev().filter(|l| l.joins) {
                if let Some(q) = link.closer {
                    c.recv_chunk(q, buf, i, None).await?;
                }
                if let Some(q) = link.further {
                    c.send_chunk(q, buf, i).await?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chains of each phase reach the origin from every rank exactly once: following
    /// `closer` through the dimensions a rank joins ends at rank 0, and every rank that joins
    /// a dimension's chain is its `closer`'s `further`.
    #[test]
    #[allow(clippy::needless_range_loop)] // the walk moves `at` along each dimension in turn
    fn every_rank_reduces_into_the_origin() {
        for p in 1..=64 {
            let dims = grid::<D>(p);
            let all: Vec<_> = (0..p).map(|me| chains(dims, me)).collect();
            for me in 0..p {
                let mut at = me;
                for d in 0..D {
                    let link = all[at][d];
                    assert!(
                        link.joins,
                        "p {p}: {at} is not in the chain of dimension {d}"
                    );
                    while let Some(q) = all[at][d].closer {
                        assert_eq!(all[q][d].further, Some(at), "p {p} dimension {d}");
                        at = q;
                    }
                }
                assert_eq!(at, 0, "p {p}: rank {me} does not reach the origin");
            }
        }
    }
}
