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
//! backwards, their chunks interleaved, so each direction of each link carries half the bytes.
//! Blocks of one size and more than one chunk (an allgather's long messages) go as K's
//! 3D-multiring does ([`run_parts`], seed 002's long-message regime): each block in four parts
//! that take the stages at once, one way round their lines, each pair of parts in its own
//! rotated order of the dimensions, so a node drives four directed links, one per port of the
//! modelled Tofu. On the simulated 384-node Tofu that is faster from 32 KiB blocks (two
//! chunks) on than the groups (1,721 against 2,256 us at 32 KiB; at 16 KiB the groups take
//! 1,142 us and K's parts 1,591), and than the three parts both ways round that it replaced
//! (six links for four ports: 8,337 against 9,201 us at 256 KiB; BENCHMARKS.md, "K's
//! multi-ring").
//! Cost: (n0 + n1 + n2 - 3) ring steps, each exchanging a group of the earlier dimensions'
//! blocks (as one message, or two halves of as many chunks in all): p - 1 blocks sent and
//! received; for blocks of more than a chunk, p - 1 steps of four quarters of a block.
//! Reuse: channel flow control.

#[cfg(test)]
use crate::coll::grid;
use crate::coll::step::{Mode, Site, Steps};
use crate::coll::{coords, disjoint_mut, index, rotation, split2};
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

/// The size of every block, where every rank's block has it and they lie back to back in
/// rank order (an allgather's, not an allgatherv's): the same answer on every rank.
pub(crate) fn uniform(counts: &[usize], displs: &[usize]) -> Option<usize> {
    let b = counts.first().copied().unwrap_or(0);
    counts
        .iter()
        .zip(displs)
        .enumerate()
        .all(|(r, (&n, &at))| n == b && at == r * b)
        .then_some(b)
}

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    counts: &[usize],
    displs: &[usize],
) -> Result<()> {
    // Blocks of one size and more than a chunk: K's parts (decided by size, as the counting
    // pass needs, which counts a block as one chunk).
    if let Some(b) = uniform(counts, displs).filter(|&b| c.spans_chunks(b)) {
        return run_parts(c, buf, b).await;
    }
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

/// Parts of every block in [`run_parts`]: K's four, one per network interface.
const PARTS: usize = 4;

/// Part `k`'s stage and step within it at step `t` of the whole run: every part takes
/// (n0 - 1) + (n1 - 1) + (n2 - 1) steps, its stages in its own order.
fn stage_at(dims: &[usize; D], order: [usize; D], mut t: usize) -> Option<(usize, usize)> {
    for (j, d) in order.into_iter().enumerate() {
        let steps = dims[d].saturating_sub(1);
        if t < steps {
            return Some((j, t));
        }
        t -= steps;
    }
    None
}

/// The gathered buffer seen by the parts: blocks of `b` bytes in rank order on the grid
/// `dims`, each `chunks` chunks long, in [`PARTS`] parts: by chunks where a block has a chunk
/// for every part (the block stays the message both ends name, so a simulated network's
/// timing-only mode leaves large blocks unwritten as it does whole messages), else by bytes,
/// each part a message of one chunk. Parts 2j and 2j + 1 take the dimensions in the rotated
/// order (j, j+1, j+2), the first forwards round its lines and the second backwards.
struct Parts {
    dims: [usize; D],
    b: usize,
    chunks: usize,
}

impl Parts {
    /// Part `k`'s order of the dimensions: a rotation, so that the two pairs of parts start on
    /// different dimensions (and on the 8x6x8 torus stay on different ones).
    fn order(&self, k: usize) -> [usize; D] {
        rotation::<D>(k / 2)
    }

    /// Whether the parts are cut by chunks.
    fn by_chunks(&self) -> bool {
        self.chunks >= PARTS
    }

    /// Part `k`'s first chunk of a block (cut by chunks).
    fn first(&self, k: usize) -> usize {
        self.chunks * k / PARTS
    }

    /// Part `k`'s chunks of a block.
    fn len(&self, k: usize) -> usize {
        if self.by_chunks() {
            self.first(k + 1) - self.first(k)
        } else {
            1
        }
    }

    /// Part `k`'s chunk `i` of rank `r`'s block: the message's bytes in the gathered buffer
    /// and the chunk's index in it.
    fn chunk(&self, k: usize, r: usize, i: usize) -> (std::ops::Range<usize>, usize) {
        let block = r * self.b;
        if self.by_chunks() {
            (block..block + self.b, self.first(k) + i)
        } else {
            // Fewer chunks than parts: every part's bytes fit in one chunk.
            let part = |k: usize| block + self.b * k / PARTS;
            (part(k)..part(k + 1), i)
        }
    }

    /// The rank at place `x` of part `k`'s order of the grid (its first dimension fastest).
    fn rank_at(&self, k: usize, mut x: usize) -> usize {
        let mut at = [0; D];
        for d in self.order(k) {
            at[d] = x % self.dims[d];
            x /= self.dims[d];
        }
        index(&self.dims, &at)
    }
}

/// One direction of one part's ring in one step: the chunks `units` of a group's places laid
/// end to end (each place one rank's part of its block), walked one at a time. Both ends of
/// a ring walk the same chunks in the same order.
struct Walk {
    k: usize,
    /// The group's first place.
    first: usize,
    units: std::ops::Range<usize>,
}

impl Walk {
    /// Every chunk of group `group`'s places in part `k`.
    fn new(g: &Parts, k: usize, group: std::ops::Range<usize>) -> Self {
        Self {
            k,
            first: group.start,
            units: 0..group.len() * g.len(k),
        }
    }

    /// The next chunk: its message's bytes in the gathered buffer and its index there.
    fn next(&mut self, g: &Parts) -> Option<(std::ops::Range<usize>, usize)> {
        let u = self.units.next()?;
        let (place, i) = (u / g.len(self.k), u % g.len(self.k));
        Some(g.chunk(self.k, g.rank_at(self.k, self.first + place), i))
    }
}

/// A chunk sent to this rank in a turn of [`run_parts`], taken in the next: from whom, its
/// message's bytes in the gathered buffer, its index there.
type Landing = (usize, std::ops::Range<usize>, usize);

/// K's 3D-multiring as seed 002 describes it (§4.2.5, eq. 29), for blocks of one size `b`:
/// every block in four parts, each part going the three ring stages in its own order of the
/// dimensions, one way round its lines, all four at once where their links differ (K drives
/// its four network interfaces, the modelled Tofu its four ports). A part's group is the k-th
/// parts of the blocks of the ranks that share this rank's coordinates in the part's later
/// dimensions; they do not lie back to back, so a group travels a chunk at a time, and a part
/// passes p - 1 blocks' parts in all. Every turn sends up to four messages (4 L_S): a quarter
/// of a block each, or a chunk of one where the parts are cut by chunks.
///
/// The rings are pipelined as seed 002's estimate (eq. 29) has them, a step costing the
/// larger of the software's sends and a chunk's flight, not their sum: a chunk sent in one
/// turn is taken in the next, after the next turn's sends, so it flies while the sender
/// goes on.
pub(crate) async fn run_parts<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], b: usize) -> Result<()> {
    let me = c.me();
    let dims = c.grid::<D>();
    let at = coords(&dims, me);
    let g = Parts {
        dims,
        b,
        chunks: c.chunks(b),
    };
    let pdims: [[usize; D]; PARTS] = std::array::from_fn(|k| g.order(k).map(|d| dims[d]));
    let pat: [[usize; D]; PARTS] = std::array::from_fn(|k| g.order(k).map(|d| at[d]));
    let stride = |d: usize| dims[..d].iter().product::<usize>();
    // Part k's step `step`: its dimension, its way round the line (0 forwards, 1 backwards;
    // a line of 2, where both ways are the same link, forwards), the neighbour it sends to
    // and the one it takes from, and the walks of its send and its receive; `None` once the
    // part has taken all its steps.
    let at_step = |k: usize, step: usize| {
        let (j, s) = stage_at(&dims, g.order(k), step)?;
        let d = g.order(k)[j];
        let (n, a) = (dims[d], at[d]);
        let rank = |x: usize| me - a * stride(d) + (x % n) * stride(d);
        let walk = |x: usize| Walk::new(&g, k, group(&pdims[k], &pat[k], j, x % n));
        Some(if n <= 2 || k % 2 == 0 {
            (
                d,
                0,
                [rank(a + 1), rank(a + n - 1)],
                [walk(a + n - s), walk(a + 2 * n - s - 1)],
            )
        } else {
            (
                d,
                1,
                [rank(a + n - 1), rank(a + 1)],
                [walk(a + s), walk(a + s + 1)],
            )
        })
    };
    // Each part goes to its next step as soon as it has taken this one (the parts' stages
    // differ in length, so a step in lockstep would wait for the longest). Every
    // rank walks the same number of chunks per part and step, so every rank takes the same
    // turns and makes the same choices in them. A turn goes through the parts in order and
    // sends the next chunk of each whose link, a dimension and a way round, no earlier part
    // of the turn has taken (a line of 2 goes one way only), so at most one chunk to each
    // neighbour; the neighbour's mirror walk takes
    // the same turns. Then it takes the chunks its neighbours sent in the turn before. A part
    // goes to its next step once it has taken every chunk of this one (the next step forwards
    // them). The messages between two ranks are taken in the order they were sent.
    //
    // No deadlock: take the rank furthest behind, in turn t. If it waits for a chunk of turn
    // t - 1, its neighbour, in turn t at least, has sent it. If it waits for room in a ring,
    // the receiver, in turn t at least, has taken every chunk up to turn t - 2 and, waiting,
    // has returned their credits: two of this rank's chunks at most are untaken, and every
    // collectives' ring has room for three (`Shape::room`, checked at every rank count to
    // 1,024; the shapes do not change beyond).
    let mut steps = [0usize; PARTS];
    let mut walking: [_; PARTS] = std::array::from_fn(|k| at_step(k, 0));
    // The chunks sent to this rank in the last turn, per part.
    let mut landing: [Option<Landing>; PARTS] = Default::default();
    while walking.iter().any(Option::is_some) {
        let mut taken = [[false; 2]; D];
        let mut queued: [Option<Landing>; PARTS] = Default::default();
        // A turn's sends go together: a credit owed to a neighbour rides with the packet
        // this turn sends it (on a line the parts go both ways), not as a message of its own.
        let together = c.together();
        for (k, part) in walking.iter_mut().enumerate() {
            let Some((d, way, [to, from], [send, recv])) = part else {
                continue;
            };
            // A send walk and its mirror receive are as long: a group of this step.
            debug_assert_eq!(send.units.len(), recv.units.len());
            if taken[*d][*way] {
                continue;
            }
            let Some((r, i)) = send.next(&g) else {
                continue;
            };
            taken[*d][*way] = true;
            c.send_chunk(*to, &buf[r], i).await?;
            queued[k] = recv.next(&g).map(|(r, i)| (*from, r, i));
        }
        drop(together);
        for (from, r, i) in landing.into_iter().flatten() {
            c.recv_chunk(from, &mut buf[r], i, None).await?;
        }
        for (k, part) in walking.iter_mut().enumerate() {
            let done = part
                .as_ref()
                .is_some_and(|(.., w)| w.iter().all(|w| w.units.is_empty()));
            if done && queued[k].is_none() {
                steps[k] += 1;
                *part = at_step(k, steps[k]);
            }
        }
        landing = queued;
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
