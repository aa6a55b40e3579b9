//! Rabenseifner's allreduce: reduce-scatter by recursive halving, then allgather by recursive
//! doubling, on p' = 2^floor(log2 p) ranks after the usual fold (and unfold at the end).
//! In halving step k, v and v xor 2^k split their current range of blocks: each keeps one
//! half and combines the partner's copy of it into its own. Then the steps run backwards,
//! each swapping the halves, until every rank holds everything.
//! Cost: 2 log2 p' α + 2 (p' - 1)/p' n β + (p' - 1)/p' n γ (+ 2 (α + n β) to fold).
//! Reuse: channel flow control.

use super::{fold, unfold, unfolded};
use crate::coll::step::{Mode, Site, Steps};
use crate::coll::{Reducer, block, split2};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], red: &Reducer<'_>) -> Result<()> {
    let p = c.p();
    let n = buf.len();
    if let Some(v) = fold(c, buf, red).await? {
        let pp = 1 << (usize::BITS - 1 - p.leading_zeros());
        let bytes = |lo: usize, hi: usize| {
            block(n, red.elem, pp, lo).start..block(n, red.elem, pp, hi - 1).end
        };
        // Halving: [lo, hi) is the range of blocks this rank is responsible for.
        let (mut lo, mut hi) = (0, pp);
        let mut mask = pp >> 1;
        let mut steps = [(0usize, (0usize, 0usize), (0usize, 0usize)); usize::BITS as usize];
        let mut ns = 0;
        while mask > 0 {
            let partner = unfolded(p, v ^ mask);
            let mid = lo + (hi - lo) / 2;
            let (keep, give) = if v & mask == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            let (msg, dst) = split2(buf, bytes(give.0, give.1), bytes(keep.0, keep.1));
            c.ch_sendrecv(partner, msg, partner, dst, Some(red)).await?;
            steps[ns] = (partner, keep, give);
            ns += 1;
            (lo, hi) = keep;
            mask >>= 1;
        }
        // Doubling: undo the halving steps in reverse, swapping the halves.
        for &(partner, keep, give) in steps[..ns].iter().rev() {
            let (msg, dst) = split2(buf, bytes(keep.0, keep.1), bytes(give.0, give.1));
            c.ch_sendrecv(partner, msg, partner, dst, None).await?;
        }
    }
    unfold(c, buf).await
}
