//! Recursive-doubling allgather (seed 000; power-of-two rank counts): in step k rank r and
//! r xor 2^k swap everything each holds (the aligned group of 2^k blocks around r), so the
//! data held doubles every step. Each step forwards what the last one received, which is why
//! the paper could not use a prebuilt chain for it.
//! Cost: log2 p α + (p - 1) n β. Reuse: channel flow control.

use crate::coll::split2;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    counts: &[usize],
    displs: &[usize],
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let range = |b: usize| displs[b]..displs[b] + counts[b];
    let mut mask = 1;
    while mask < p {
        let partner = me ^ mask;
        let (mine, theirs) = (me & !(mask - 1), partner & !(mask - 1));
        for j in 0..mask {
            let (msg, dst) = split2(buf, range(mine + j), range(theirs + j));
            c.ch_sendrecv(partner, msg, partner, dst, None).await?;
        }
        mask <<= 1;
    }
    Ok(())
}
