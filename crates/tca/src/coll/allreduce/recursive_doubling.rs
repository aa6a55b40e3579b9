//! Recursive-doubling allreduce with the usual fix-up for non-powers of two: fold onto
//! p' = 2^floor(log2 p) ranks, then in step k rank v and v xor 2^k exchange their whole
//! buffers and both combine, then unfold. Both partners compute a op b and b op a, which are
//! bit-identical for commutative operations, so every rank ends with the same bits.
//! Cost: (log2 p' + 2)(α + n β) + log2 p' n γ. Reuse: channel flow control; the exchange works
//! in place (chunk i is sent before the partner's chunk i is combined into it).

use super::{fold, unfold, unfolded};
use crate::coll::Reducer;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], red: &Reducer<'_>) -> Result<()> {
    let p = c.p();
    if let Some(v) = fold(c, buf, red).await? {
        let pp = 1 << (usize::BITS - 1 - p.leading_zeros());
        let mut mask = 1;
        while mask < pp {
            let partner = unfolded(p, v ^ mask);
            c.sendrecv_in_place(partner, partner, buf, Some(red))
                .await?;
            mask <<= 1;
        }
    }
    unfold(c, buf).await
}
