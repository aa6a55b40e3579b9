//! Allreduce algorithms. Every one gives bit-identical results on all ranks.
pub(crate) mod dissemination;
pub(crate) mod flat;
pub(crate) mod pipeline_3d;
pub(crate) mod rabenseifner;
pub(crate) mod recursive_doubling;
pub(crate) mod ring;

use crate::coll::Reducer;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

/// Folds a non-power-of-two group onto the largest power of two p' <= p (the usual fix-up):
/// of the first 2 (p - p') ranks, each even one hands its buffer to the odd one above it and
/// sits out. Returns this rank's number among the p' that go on, or `None` if it sits out.
#[inline]
pub(crate) async fn fold<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    red: &Reducer<'_>,
) -> Result<Option<usize>> {
    let (p, me) = (c.p(), c.me());
    let pp = 1 << (usize::BITS - 1 - p.leading_zeros());
    let rem = p - pp;
    if me < 2 * rem {
        if me % 2 == 0 {
            c.ch_send(me + 1, buf).await?;
            return Ok(None);
        }
        c.recv_reduce(me - 1, buf, red).await?;
        return Ok(Some(me / 2));
    }
    Ok(Some(me - rem))
}

/// The communicator rank of folded rank `v`.
pub(crate) fn unfolded(p: usize, v: usize) -> usize {
    let pp = 1 << (usize::BITS - 1 - p.leading_zeros());
    let rem = p - pp;
    if v < rem { 2 * v + 1 } else { v + rem }
}

/// Undoes [`fold`]: each odd rank of the first 2 (p - p') hands the result to the even rank
/// below it.
#[inline]
pub(crate) async fn unfold<M: Mode>(c: Steps<'_, M>, buf: &mut [u8]) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let pp = 1 << (usize::BITS - 1 - p.leading_zeros());
    let rem = p - pp;
    if me < 2 * rem {
        if me % 2 == 0 {
            c.ch_recv(me + 1, buf).await?;
        } else {
            c.ch_send(me - 1, buf).await?;
        }
    }
    Ok(())
}
