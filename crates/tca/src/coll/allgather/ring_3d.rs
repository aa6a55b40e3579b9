//! Seed 002's multi-ring allgather (the K computer's Allgather 3-D, eqs. 29-34): the ranks on
//! a 3-D grid (a balanced factorisation of p, [`grid`]), three ring stages, one per
//! dimension. In stage d every line of ranks along dimension d runs a ring allgather whose
//! "blocks" are groups: group g of a line holds the blocks of every rank that shares this
//! rank's coordinates in the later dimensions and has coordinate g in dimension d (the
//! earlier dimensions were gathered by the earlier stages). So stage 0 passes single
//! blocks, stage 1 rows of n0 blocks, stage 2 planes of n0 n1; in all each rank sends and
//! receives p - 1 blocks, in (n0 - 1) + (n1 - 1) + (n2 - 1) ring steps instead of the flat
//! ring's p - 1 (seed 002's short-message regime, where the steps' latency dominates; for
//! long messages both move the same bytes).
//!
//! A group travels as one message where its blocks lie back to back — an allgather's always
//! do, and in a stage where every group's do (every rank passes the same counts and
//! displacements, as `allgatherv_in_place` requires, so every rank cuts the same messages):
//! (n0 - 1) + (n1 - 1) + (n2 - 1) messages each way, where a block per message would be p - 1,
//! each paying the per-message software cost (on the modelled Tofu 383 messages of L_S = 1 us
//! at 384 ranks; seed 002's short-message estimate, t_L = 1,544 us, is about that many steps
//! of 4 L_S). Blocks of an allgatherv may have any sizes and places: in a stage where some
//! group's are not adjacent, every group travels as its blocks, one exchange each, in rank
//! order.
//! Long groups (every group of the stage longer than one chunk) go both ways round a stage's
//! line at once: the first half of every group around the ring forwards, the second half
//! backwards, their chunks interleaved, so each direction of each link carries half the bytes (seed 002's
//! long-message regime drives several links: 2 directions here, where K's multi-ring drove
//! 3-4).
//! Cost: (n0 + n1 + n2 - 3) ring steps, each exchanging a group of the earlier dimensions'
//! blocks (as one message, or two halves of as many chunks in all): p - 1 blocks sent and
//! received.
//! Reuse: channel flow control.

#[cfg(test)]
use crate::coll::grid;
use crate::coll::step::{Mode, Site, Steps};
use crate::coll::{coords, disjoint_mut, split2};
use crate::error::Result;

const D: usize = 3;

/// The ranks of group `g` along dimension `d` for the rank at `at` on the grid `dims`: every
/// coordinate before `d` free, `g` at `d`, this rank's after it; consecutive ranks.
fn group(dims: &[usize; D], at: &[usize; D], d: usize, g: usize) -> std::ops::Range<usize> {
    let inner: usize = dims[..d].iter().product();
    let stride = inner;
    let mut base = g * stride;
    let mut s = stride * dims[d];
    for e in d + 1..D {
        base += at[e] * s;
        s *= dims[e];
    }
    base..base + inner
}

/// Whether every group of stage `d` (the runs of `inner` consecutive ranks, the product of
/// the earlier dimensions) has its blocks back to back in rank order, so each can travel as
/// one message. The same answer on every rank: counts and displacements are every rank's.
fn groups_adjacent(inner: usize, counts: &[usize], displs: &[usize]) -> bool {
    (0..counts.len().saturating_sub(1))
        .filter(|r| (r + 1) % inner != 0)
        .all(|r| displs[r] + counts[r] == displs[r + 1])
}

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    counts: &[usize],
    displs: &[usize],
) -> Result<()> {
    let me = c.me();
    let dims = c.grid::<D>();
    let at = coords(&dims, me);
    let range = |b: usize| displs[b]..displs[b] + counts[b];
    let mut stride = 1;
    for d in 0..D {
        let n = dims[d];
        let rank_at = |g: usize| me - at[d] * stride + g * stride;
        let (right, left) = (rank_at((at[d] + 1) % n), rank_at((at[d] + n - 1) % n));
        let whole = groups_adjacent(stride, counts, displs);
        // A group's bytes, where its blocks are adjacent.
        let span =
            |g: std::ops::Range<usize>| displs[g.start]..displs[g.end - 1] + counts[g.end - 1];
        // Long groups go both ways round the line at once (seed 002's long-message regime
        // drives several links): the first half of every group around the forward ring, the
        // second half around the backward ring, chunk by chunk interleaved. Every rank of the
        // line decides alike (from the same groups' sizes): when every group is longer than
        // one chunk.
        let both = whole
            && (0..n)
                .map(|g| span(group(&dims, &at, d, g)).len())
                .min()
                .is_some_and(|m| c.spans_chunks(m));
        for s in 0..n.saturating_sub(1) {
            let out = group(&dims, &at, d, (at[d] + n - s) % n);
            let inn = group(&dims, &at, d, (at[d] + 2 * n - s - 1) % n);
            if both {
                // Backward: this rank sends to its left what it took from its right a step
                // ago, starting with its own group.
                let back_out = group(&dims, &at, d, (at[d] + s) % n);
                let back_in = group(&dims, &at, d, (at[d] + s + 1) % n);
                let lo = |r: std::ops::Range<usize>| r.start..r.start + r.len() / 2;
                let hi = |r: std::ops::Range<usize>| r.start + r.len() / 2..r.end;
                let ranges = [
                    lo(span(out)),
                    hi(span(back_out)),
                    lo(span(inn)),
                    hi(span(back_in)),
                ];
                // Distinct groups, or the two halves of one: never overlapping.
                let [fo, bo, fi, bi] = disjoint_mut(buf, ranges.clone()).ok_or_else(|| {
                    crate::error::Error::new(
                        crate::error::ErrorKind::InvalidArgument,
                        format!("allgather ring_3d: group halves {ranges:?} overlap"),
                    )
                })?;
                let k = [fo.len(), bo.len(), fi.len(), bi.len()].map(|l| c.chunks(l));
                for i in 0..k.iter().copied().max().unwrap_or(0) {
                    if i < k[0] {
                        c.send_chunk(right, fo, i).await?;
                    }
                    if i < k[1] {
                        c.send_chunk(left, bo, i).await?;
                    }
                    if i < k[2] {
                        c.recv_chunk(left, fi, i, None).await?;
                    }
                    if i < k[3] {
                        c.recv_chunk(right, bi, i, None).await?;
                    }
                }
                continue;
            }
            if whole {
                let (msg, dst) = split2(buf, span(out), span(inn));
                c.ch_sendrecv(right, msg, left, dst, None).await?;
                continue;
            }
            for (a, b) in out.zip(inn) {
                let (msg, dst) = split2(buf, range(a), range(b));
                c.ch_sendrecv(right, msg, left, dst, None).await?;
            }
        }
        stride *= n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With groups going both ways round each line (first halves forwards, second halves
    /// backwards), every rank ends with both halves of every block, and every half it
    /// forwards is one it holds: simulated on the owners of the halves, every rank count to
    /// 64. The first halves alone are the one-direction ring that short groups take.
    #[test]
    #[allow(clippy::needless_range_loop)] // ranks index both the old and the new holdings
    fn both_rings_gather_both_halves_of_every_block() {
        for p in 1..=64usize {
            let dims = grid::<D>(p);
            let coords = |me: usize| coords(&dims, me);
            // has[half][rank][block]
            let mut has: [Vec<Vec<bool>>; 2] = std::array::from_fn(|_| {
                (0..p).map(|me| (0..p).map(|b| b == me).collect()).collect()
            });
            let mut stride = 1;
            for d in 0..D {
                let n = dims[d];
                for s in 0..n.saturating_sub(1) {
                    let mut next = has.clone();
                    for me in 0..p {
                        let at = coords(me);
                        let on = |g: usize| me - at[d] * stride + (g % n) * stride;
                        // (half, sender, the sender's group, this rank's group)
                        let (left, right) = (on(at[d] + n - 1), on(at[d] + 1));
                        let (lat, rat) = (coords(left), coords(right));
                        for (half, from, sent, got) in [
                            (0, left, (lat[d] + n - s) % n, (at[d] + 2 * n - s - 1) % n),
                            (1, right, (rat[d] + s) % n, (at[d] + s + 1) % n),
                        ] {
                            let fa = coords(from);
                            let sent: Vec<usize> = group(&dims, &fa, d, sent).collect();
                            let got: Vec<usize> = group(&dims, &at, d, got).collect();
                            assert_eq!(sent, got, "p {p} stage {d} step {s} half {half}");
                            for &b in &sent {
                                assert!(has[half][from][b], "p {p}: {from} lacks {b}/{half}");
                                next[half][me][b] = true;
                            }
                        }
                    }
                    has = next;
                }
                stride *= n;
            }
            for h in &has {
                assert!(
                    h.iter().all(|r| r.iter().all(|&x| x)),
                    "p {p}: a half missing"
                );
            }
        }
    }
}
