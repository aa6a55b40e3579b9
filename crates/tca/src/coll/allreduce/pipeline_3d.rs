//! Seed 002's 3-D allreduce (the K computer's, eqs. 20-27): a pipelined reduce phase, then a
//! pipelined broadcast phase, both over the three spanning trees of the 3-D broadcast
//! ([`crate::coll::bcast::directions`]; the ranks on a 3-D grid, the most balanced
//! factorisation of p, rank 0 at the origin). The vector is cut into three parts (in whole
//! elements) and part k goes its own tree: in the reduce phase every rank combines what its
//! children in that tree send into its own part and passes the result to its parent; the
//! origin then holds the part's result and broadcasts it down the same tree. So every rank
//! combines, per part, as many partial results as it has children (one on average: seed
//! 002's d L_S + m_R/(T_C/d) per step of d segments; a rank on a sub-root's line has three in
//! that part), each part leaves and reaches the origin through a link of its own, and every
//! rank sends and receives about 2n bytes in all (seed 002: data moved 2M). The broadcast
//! trees share no directed link, but a part's reduce runs up links that another part's
//! broadcast runs down: once the phases overlap, such a link carries two chunks a step. The
//! result is computed once, so every rank gets the same bits.
//!
//! Every rank takes the steps in one order. Let H be at least every tree's height and d_k the
//! rank's depth in part k's tree. At step t the rank takes, for each part k, the reduce of
//! chunk t - (H - d_k) (from its children, combined, then to its parent), then, for each part,
//! the broadcast of chunk t - (H + d_k) (from its parent, then to its children). A child
//! sends each chunk one step before its parent takes it, and a parent one step before its
//! children, so the messages on every ordered pair of ranks are taken in the order they were
//! sent. A receive waits for a message its neighbour sent a step earlier; a send waits for
//! credit, which the neighbour returns as it takes earlier messages, and those it takes in
//! its own steps before this one or, where two ranks meet in several trees, at an earlier
//! place (phase, part) of the same step, receives coming before sends there. So no wait is
//! for anything later in the order: no deadlock. At the origin (depth 0) a chunk's reduce
//! and broadcast fall in the same step, the reduce first.
//! Cost: the busiest rank's sends, receives and combines, as a chain's.
//! Reuse: channel flow control.

use crate::coll::bcast::directions::Place;
use crate::coll::step::{Mode, Site, Steps};
use crate::coll::{Reducer, block};
use crate::error::Result;

const D: usize = 3;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], red: &Reducer<'_>) -> Result<()> {
    let dims = c.grid::<D>();
    let place = Place::<D>::on(dims, c.me());
    let trees: [_; D] = std::array::from_fn(|k| place.tree(k));
    let depth: [usize; D] = std::array::from_fn(|k| place.depth(k));
    // More than every tree's height, which is at most 1 + the sum of n - 1 (one step from the
    // origin to each part's sub-root, every dimension walked at most once from there).
    let height: usize = 1 + dims.iter().sum::<usize>();
    let n = buf.len();
    let parts: [_; D] = std::array::from_fn(|k| block(n, red.elem, D, k));
    let chunks: [usize; D] = std::array::from_fn(|k| c.chunks(parts[k].len()));
    let end = (0..D)
        .map(|k| chunks[k] + height + depth[k])
        .max()
        .unwrap_or(0);
    for t in 0..end {
        for (k, (parent, children)) in trees.iter().enumerate() {
            let Some(i) = (t + depth[k])
                .checked_sub(height)
                .filter(|&i| i < chunks[k])
            else {
                continue;
            };
            let bytes = &mut buf[parts[k].clone()];
            for &q in children.iter().flatten() {
                c.recv_chunk(q, bytes, i, Some(red)).await?;
            }
            if let Some(q) = parent {
                c.send_chunk(*q, bytes, i).await?;
            }
        }
        let together = c.together();
        for (k, (parent, children)) in trees.iter().enumerate() {
            let Some(i) = t.checked_sub(height + depth[k]).filter(|&i| i < chunks[k]) else {
                continue;
            };
            let bytes = &mut buf[parts[k].clone()];
            if let Some(q) = parent {
                c.recv_chunk(*q, bytes, i, None).await?;
            }
            for &q in children.iter().flatten() {
                c.send_chunk(q, bytes, i).await?;
            }
        }
        drop(together);
    }
    Ok(())
}
