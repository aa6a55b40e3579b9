//! Seed 002's multi-directional pipelined broadcast (the K computer's Bcast over 2 and 3 directions
//! of the Tofu torus; its 1-direction form is [`super::pipeline`]). The ranks are laid out on a
//! D-dimensional grid (D = 2 or 3, a balanced factorisation of p, [`grid`]; the root at the origin)
//! and the message is cut into D parts. Part k travels its own spanning tree: along its first
//! dimension from the root, then from every rank reached along its second, then its third — the
//! dimensions taken in a rotated order (k, k+1, ...) and, in two directions, for odd k the other
//! way round each dimension (in three, see below) — so on a torus the node sends and receives
//! in D directions at once (B' = D B in seed 002's estimates, eq. 12 and 16). In two directions the parts share no directed link when every
//! dimension is longer than 2 (a test checks it; along a dimension of 2 one step forwards and one
//! backwards reach the same rank); in three, the part whose tree spreads over a plane of a
//! dimension goes the other way round it, so the parts share only the lines through the root
//! when every dimension is longer than 2 (a test checks it at 384 ranks). Every
//! part is pipelined chunk by chunk, as the 1-D chain is: a rank forwards chunk i of a part to its
//! children as soon as it has it.
//!
//! The parts are interleaved in one order on every rank (chunk i of part 0, of part 1, ...),
//! which is what keeps the exchanges deadlock-free: a rank waits only for chunks earlier in
//! that order, or for credits its children return once they take earlier chunks.
//!
//! On shared memory the directions are not separate links: the root copies each part to up
//! to D children, so this costs more than the chain there and Auto does not choose it; it is
//! here for networks whose nodes drive several links at once (the simulated torus of
//! seed 002, `TCA_COLL_BROADCAST=pipeline_2d|pipeline_3d` anywhere).
//! Cost: the busiest rank's sends and receives (each chunk pipelined as the chain's).
//! Reuse: channel flow control.

use crate::coll::coords;
#[cfg(test)]
use crate::coll::grid;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

/// One rank's place in the trees of the parts.
struct Place<const D: usize> {
    dims: [usize; D],
    /// This rank's coordinates relative to the root.
    at: [usize; D],
}

impl<const D: usize> Place<D> {
    #[cfg(test)]
    fn new(p: usize, v: usize) -> Self {
        Self::on(grid::<D>(p), v)
    }

    /// Relative rank `v` on the grid `dims`.
    fn on(dims: [usize; D], v: usize) -> Self {
        Self {
            dims,
            at: coords(&dims, v),
        }
    }

    /// The relative rank at `at`.
    fn rank(&self, at: &[usize; D]) -> usize {
        at.iter()
            .zip(&self.dims)
            .rev()
            .fold(0, |acc, (&a, &n)| acc * n + a)
    }

    /// Part `k`'s order of dimensions (a rotation), and its direction in each dimension
    /// (`true`: the other way round). In two directions odd parts go the other way round
    /// both dimensions. In three, a part's tree covers a line in its first dimension, a plane
    /// in its second and the whole grid in its third, and each dimension is some part's
    /// first, another's second and the third's last: the part whose plane it is goes the
    /// other way round it, so no plane's links are shared, only the one line through the
    /// root that the first part walks.
    fn order(k: usize) -> ([usize; D], [bool; D]) {
        let mut o = [0; D];
        for (j, x) in o.iter_mut().enumerate() {
            *x = (k + j) % D;
        }
        let mut back = [D == 2 && k % 2 == 1; D];
        if D == 3 {
            back[o[1]] = true;
        }
        (o, back)
    }

    /// The distance from the root along dimension `d` in part `k`'s direction.
    fn step(&self, d: usize, backwards: bool) -> usize {
        let n = self.dims[d];
        if backwards {
            (n - self.at[d]) % n
        } else {
            self.at[d]
        }
    }

    /// This rank's depth in part `k`'s tree: its distance from the root, every dimension
    /// counted in the part's direction.
    fn depth(&self, k: usize) -> usize {
        let back = Self::order(k).1;
        (0..D).map(|d| self.step(d, back[d])).sum()
    }

    /// The coordinates one step further along `d` in the part's direction.
    fn moved(&self, d: usize, backwards: bool) -> [usize; D] {
        let mut c = self.at;
        let n = self.dims[d];
        c[d] = if backwards {
            (c[d] + n - 1) % n
        } else {
            (c[d] + 1) % n
        };
        c
    }

    /// Part `k`'s parent of this rank (`None` at the root) and its children: the tree goes
    /// along the order's first dimension, then the second from every rank reached, and so on;
    /// a rank's parent is one step back along the last dimension (in the order) in which it
    /// is away from the root, and its children are one step on along that dimension and each
    /// later one.
    fn tree(&self, k: usize) -> (Option<usize>, [Option<usize>; D]) {
        let (order, back) = Self::order(k);
        let last = (0..D)
            .rev()
            .find(|&j| self.step(order[j], back[order[j]]) > 0);
        let parent = last.map(|j| {
            let d = order[j];
            let mut c = self.at;
            let n = self.dims[d];
            c[d] = if back[d] {
                (c[d] + 1) % n
            } else {
                (c[d] + n - 1) % n
            };
            self.rank(&c)
        });
        let mut children = [None; D];
        for j in last.unwrap_or(0)..D {
            let d = order[j];
            if self.step(d, back[d]) + 1 < self.dims[d] {
                children[j] = Some(self.rank(&self.moved(d, back[d])));
            }
        }
        (parent, children)
    }
}

/// The byte range of part `k` of `D` of an `n`-byte message (the cost model asks for any n).
fn part<const D: usize>(n: usize, k: usize) -> std::ops::Range<usize> {
    let at = |k: usize| usize::try_from(n as u128 * k as u128 / D as u128).expect("at most n");
    at(k)..at(k + 1)
}

async fn run_d<M: Mode, const D: usize>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    root: usize,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let to_rank = |v: usize| (v + root) % p;
    let place = Place::<D>::on(c.grid::<D>(), (me + p - root) % p);
    let trees: [_; D] = std::array::from_fn(|k| place.tree(k));
    let n = buf.len();
    let chunks: [usize; D] = std::array::from_fn(|k| c.chunks(part::<D>(n, k).len()));
    // Chunk i of part k reaches this rank at step i + depth(k) of the pipeline: handle the
    // parts' chunks in that order, so that a part whose tree reaches this rank early is not
    // held up behind one whose tree reaches it late (in chunk order, every part would wait
    // for the deepest at every rank: the 2-D broadcast on 64x6 nodes ran 50x slower).
    // Parent and child walk a shared channel in the same order (the child's steps are the
    // parent's plus one), so messages between a pair stay in order.
    let depth: [usize; D] = std::array::from_fn(|k| place.depth(k));
    let end = (0..D).map(|k| chunks[k] + depth[k]).max().unwrap_or(0);
    for t in 0..end {
        for (k, (parent, children)) in trees.iter().enumerate() {
            let Some(i) = t.checked_sub(depth[k]).filter(|&i| i < chunks[k]) else {
                continue;
            };
            let bytes = &mut buf[part::<D>(n, k)];
            if let Some(q) = parent {
                c.recv_chunk(to_rank(*q), bytes, i, None).await?;
            }
            for &q in children.iter().flatten() {
                c.send_chunk(to_rank(q), bytes, i).await?;
            }
        }
    }
    Ok(())
}

/// Over two directions (seed 002's 2-D Bcast, eq. 12).
pub(crate) mod two {
    use super::*;

    pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], root: usize) -> Result<()> {
        run_d::<M, 2>(c, buf, root).await
    }
}

/// Over three directions (seed 002's 3-D Bcast, eq. 16).
pub(crate) mod three {
    use super::*;

    pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], root: usize) -> Result<()> {
        run_d::<M, 3>(c, buf, root).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_are_balanced() {
        assert_eq!(grid::<2>(384), [24, 16]);
        assert_eq!(grid::<3>(384), [8, 8, 6]);
        assert_eq!(grid::<2>(7), [7, 1]);
        assert_eq!(grid::<3>(12), [3, 2, 2]);
        assert_eq!(grid::<3>(1), [1, 1, 1]);
        for p in 1..200 {
            assert_eq!(grid::<3>(p).iter().product::<usize>(), p);
        }
    }

    /// Every part's tree spans every rank exactly once from the root: each rank but the root
    /// has one parent, is its parent's child, and is reached from the root (no cycles).
    #[test]
    fn every_part_is_a_spanning_tree() {
        fn check<const D: usize>(p: usize) {
            for k in 0..D {
                let tree: Vec<_> = (0..p).map(|v| Place::<D>::new(p, v).tree(k)).collect();
                assert!(tree[0].0.is_none(), "p {p} part {k}: the root has a parent");
                let mut reached = vec![false; p];
                let mut todo = vec![0usize];
                reached[0] = true;
                while let Some(v) = todo.pop() {
                    for &q in tree[v].1.iter().flatten() {
                        assert!(!reached[q], "p {p} part {k}: {q} reached twice");
                        assert_eq!(tree[q].0, Some(v), "p {p} part {k}: {q}'s parent");
                        reached[q] = true;
                        todo.push(q);
                    }
                }
                assert!(reached.iter().all(|&r| r), "p {p} part {k}: not spanning");
            }
        }
        for p in 1..=64 {
            check::<2>(p);
            check::<3>(p);
        }
        check::<3>(384);
    }

    /// In three directions on a torus the parts share directed links only along the lines
    /// through the root (at most one line's links per dimension), never a plane's.
    #[test]
    fn three_parts_share_at_most_the_lines_through_the_root() {
        let p = 384;
        let dims = grid::<3>(p);
        let mut uses = std::collections::HashMap::new();
        for k in 0..3 {
            for v in 0..p {
                for &q in Place::<3>::new(p, v).tree(k).1.iter().flatten() {
                    *uses.entry((v, q)).or_insert(0) += 1;
                }
            }
        }
        let shared = uses.values().filter(|&&n| n > 1).count();
        let lines: usize = dims.iter().map(|n| n - 1).sum();
        assert!(shared <= lines, "{shared} links shared, lines {lines}");
    }

    /// In two directions the parts use opposite directions of each dimension: on a torus no
    /// link carries both.
    #[test]
    fn two_parts_share_no_directed_link() {
        let p = 24;
        let mut links = std::collections::HashSet::new();
        for k in 0..2 {
            for v in 0..p {
                for &q in Place::<2>::new(p, v).tree(k).1.iter().flatten() {
                    assert!(links.insert((v, q)), "link {v} -> {q} used twice");
                }
            }
        }
    }
}
