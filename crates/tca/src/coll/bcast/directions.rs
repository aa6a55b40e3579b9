//! Seed 002's multi-directional pipelined broadcast (the K computer's Bcast over 2 and 3 directions
//! of the Tofu torus; its 1-direction form is [`super::pipeline`]). The ranks are laid out on a
//! D-dimensional grid (D = 2 or 3, a balanced factorisation of p, [`grid`]; the root at the origin)
//! and the message is cut into D parts. Part k travels its own spanning tree, the dimensions
//! taken in a rotated order (k, k+1, ...): the root sends the part one step along its first
//! dimension only, to the part's sub-root; from there the tree goes along its second dimension,
//! then from every rank reached along its third, and last along its first, round to the root's
//! plane. So the root injects the message once (each part through its own link), not once per
//! child of every part, and a tree is n0 + n1 + n2 - 2 steps deep (seed 002's eq. 16; in two
//! directions n0 + n1 - 1, eq. 12); on a torus every node sends and receives in D directions at
//! once (B' = D B in seed 002's estimates). In two directions odd parts go the other way round
//! each dimension; in three, the part whose first dimension it is. The parts then share no
//! directed link when every dimension is longer than 2 (tests check it; along a dimension of 2
//! one step forwards and one backwards reach the same rank). Every part is pipelined chunk by
//! chunk, as the 1-D chain is: a rank forwards chunk i of a part to its children as soon as it
//! has it.
//!
//! The parts are interleaved in one order on every rank: chunk i of part k at step i +
//! depth(k), the parts in order within a step. That is what keeps the exchanges
//! deadlock-free: a rank waits only for chunks its parent sent a step earlier, or for
//! credits its children return once they take earlier chunks.
//!
//! On shared memory the directions are not separate links: the ranks of a part's lines and
//! planes copy it to up to D children, so this costs more than the chain there and Auto does
//! not choose it; it is
//! here for networks whose nodes drive several links at once (the simulated torus of
//! seed 002, `TCA_COLL_BROADCAST=pipeline_2d|pipeline_3d` anywhere).
//! Cost: the busiest rank's sends and receives (each chunk pipelined as the chain's).
//! Reuse: channel flow control.

#[cfg(test)]
use crate::coll::grid;
use crate::coll::step::{Mode, Site, Steps};
use crate::coll::{coords, index, rotation};
use crate::error::Result;

/// One rank's place in the trees of the parts (also the 3-D allreduce's trees).
pub(crate) struct Place<const D: usize> {
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
    pub(crate) fn on(dims: [usize; D], v: usize) -> Self {
        Self {
            dims,
            at: coords(&dims, v),
        }
    }

    /// The relative rank at `at`.
    fn rank(&self, at: &[usize; D]) -> usize {
        index(&self.dims, at)
    }

    /// Part `k`'s order of dimensions (a rotation), and its direction in each dimension
    /// (`true`: the other way round). In two directions odd parts go the other way round
    /// both dimensions. In three, each dimension is some part's first (the step from the
    /// root, then the lines that end the tree), another's second (one line) and the third's
    /// plane: the part whose first it is goes the other way round it, and on a torus whose
    /// dimensions are longer than 2 the parts then share no directed link (a test checks it
    /// at 384 ranks).
    fn order(k: usize) -> ([usize; D], [bool; D]) {
        let o = rotation::<D>(k);
        let mut back = [D == 2 && k % 2 == 1; D];
        if D == 3 {
            back[o[0]] = true;
        }
        (o, back)
    }

    /// This rank's distance from the root along each dimension, in the directions `back`.
    fn dist(&self, back: &[bool; D]) -> [usize; D] {
        std::array::from_fn(|d| along(self.dims[d], self.at[d], back[d]))
    }

    /// The relative rank `dist` away from the root in the directions `back`.
    fn at_dist(&self, dist: &[usize; D], back: &[bool; D]) -> usize {
        self.rank(&std::array::from_fn(|d| {
            along(self.dims[d], dist[d], back[d])
        }))
    }

    /// Part `k`'s tree seen from this rank: the part's order of dimensions from its
    /// sub-root (`order` rotated: the first dimension last), the step `shift` from the root
    /// to the sub-root along the first dimension (0 where that dimension is 1 long: the root
    /// is the sub-root), the directions, and this rank's distance from the sub-root.
    fn sub_root_view(&self, k: usize) -> ([usize; D], usize, [bool; D], [usize; D]) {
        let (order, back) = Self::order(k);
        let a = order[0];
        let n = self.dims[a];
        let shift = usize::from(n > 1);
        let mut ds = self.dist(&back);
        ds[a] = (ds[a] + n - shift) % n;
        (rotation::<D>(k + 1), shift, back, ds)
    }

    /// The relative rank at distance `ds` from part `k`'s sub-root.
    fn rank_from_sub(&self, a: usize, shift: usize, back: &[bool; D], ds: &[usize; D]) -> usize {
        let mut d = *ds;
        d[a] = (d[a] + shift) % self.dims[a];
        self.at_dist(&d, back)
    }

    /// This rank's depth in part `k`'s tree: its distance from the root along the tree.
    pub(crate) fn depth(&self, k: usize) -> usize {
        if self.at.iter().all(|&a| a == 0) {
            return 0;
        }
        let (_, shift, _, ds) = self.sub_root_view(k);
        shift + ds.iter().sum::<usize>()
    }

    /// Part `k`'s parent of this rank (`None` at the root) and its children. The root sends
    /// the part one step along the order's first dimension only, to the part's sub-root
    /// (seed 002's trees: each part leaves the root by one link, so the root injects the
    /// message once, not once per child of every part, and a tree is n0 + n1 + n2 - 2
    /// steps deep, eq. 16). From the sub-root the tree goes along the order's second
    /// dimension, then the third from every rank reached, and last along the first, each
    /// such line ending at the root's plane; the root, the last rank of the sub-root's own
    /// line, is left out. A rank's parent is one step back along the last dimension (in the
    /// sub-root's order) in which it is away from the sub-root, and its children are one
    /// step on along that dimension and each later one.
    pub(crate) fn tree(&self, k: usize) -> (Option<usize>, [Option<usize>; D]) {
        let (o, shift, back, ds) = self.sub_root_view(k);
        let a = o[D - 1];
        let mut children = [None; D];
        let root = |x: &[usize; D]| {
            shift == 1 && x[a] + 1 == self.dims[a] && (0..D).all(|d| d == a || x[d] == 0)
        };
        if root(&ds) {
            children[0] = Some(self.rank_from_sub(a, shift, &back, &[0; D]));
            return (None, children);
        }
        let last = (0..D).rev().find(|&j| ds[o[j]] > 0);
        let parent = match last {
            Some(j) => {
                let mut x = ds;
                x[o[j]] -= 1;
                Some(self.rank_from_sub(a, shift, &back, &x))
            }
            // The sub-root: the root's child, or the root itself.
            None => (shift == 1).then_some(0),
        };
        for j in last.unwrap_or(0)..D {
            let d = o[j];
            if ds[d] + 1 < self.dims[d] {
                let mut x = ds;
                x[d] += 1;
                if !root(&x) {
                    children[j] = Some(self.rank_from_sub(a, shift, &back, &x));
                }
            }
        }
        (parent, children)
    }
}

/// A coordinate on a ring of `n` as a distance from 0 the other way round (`back`), or as it
/// is; and back again (the map is its own inverse).
fn along(n: usize, x: usize, back: bool) -> usize {
    if back { (n - x) % n } else { x }
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
    // A relay's packets to its children go together: the credit it owes its parent is
    // written when it waits for the parent's next chunk, not between them.
    let _together = c.together();
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

    /// Where every dimension is longer than 1, the root sends each part to one child only (it
    /// injects the message once), and a part's tree is n0 + n1 + n2 - 2 steps deep (seed
    /// 002's eq. 16; n0 + n1 - 1 in two directions, eq. 12).
    #[test]
    fn the_root_sends_each_part_once_and_trees_are_the_seeds_depth() {
        fn check<const D: usize>(p: usize) {
            let dims = grid::<D>(p);
            for k in 0..D {
                if dims.contains(&1) {
                    continue;
                }
                let root = Place::<D>::new(p, 0).tree(k).1;
                assert_eq!(root.iter().flatten().count(), 1, "p {p} part {k}");
                let deepest = (0..p).map(|v| Place::<D>::new(p, v).depth(k)).max();
                let sum: usize = dims.iter().sum();
                assert_eq!(deepest, Some(sum + 1 - D), "p {p} part {k} dims {dims:?}");
            }
        }
        for p in 1..=64 {
            check::<2>(p);
            check::<3>(p);
        }
        check::<2>(384);
        check::<3>(384);
    }

    /// Over the three parts' trees no rank has more than four children, and at 384 ranks
    /// (8x8x6) 116 have four: a rank with three in one part's tree (on its sub-root's line) has
    /// at most one in the others'. The 3-D allreduce combines a segment per child, so its
    /// busiest ranks combine four a step where seed 002's estimate has three.
    #[test]
    fn no_rank_has_more_than_four_children_over_the_three_trees() {
        let children = |p: usize, v: usize| -> usize {
            let place = Place::<3>::new(p, v);
            (0..3)
                .map(|k| place.tree(k).1.iter().flatten().count())
                .sum()
        };
        for p in (1..=64).chain([384]) {
            let most = (0..p).map(|v| children(p, v)).max().unwrap_or(0);
            assert!(most <= 4, "p {p}: {most}");
        }
        let four = (0..384).filter(|&v| children(384, v) == 4).count();
        assert_eq!(four, 116);
    }

    /// In three directions on a torus whose dimensions are longer than 2 the parts share no
    /// directed link.
    #[test]
    fn three_parts_share_no_directed_link() {
        let p = 384;
        let mut uses = std::collections::HashMap::new();
        for k in 0..3 {
            for v in 0..p {
                for &q in Place::<3>::new(p, v).tree(k).1.iter().flatten() {
                    *uses.entry((v, q)).or_insert(0) += 1;
                }
            }
        }
        let shared = uses.values().filter(|&&n| n > 1).count();
        assert_eq!(shared, 0, "{shared} links shared");
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
