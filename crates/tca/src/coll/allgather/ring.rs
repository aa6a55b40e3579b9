//! Ring allgather: in step s (p - 1 steps) rank r passes block (r - s) mod p to its right
//! neighbour and receives block (r - s - 1) mod p from its left. Every link busy every step,
//! each rank moves (p - 1) blocks once: bandwidth-optimal for large blocks.
//! Cost: (p - 1)(α + n β) for blocks of n bytes. Reuse: channel flow control.

use crate::coll::split2;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

/// The ring itself, over any block layout: this rank starts by passing block `me + shift`
/// (the one it holds complete) and ends with every block.
pub(crate) async fn exchange<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    shift: usize,
    range: impl Fn(usize) -> std::ops::Range<usize>,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let (right, left) = ((me + 1) % p, (me + p - 1) % p);
    for s in 0..p - 1 {
        let (msg, dst) = split2(
            buf,
            range((me + shift + p - s) % p),
            range((me + shift + 2 * p - s - 1) % p),
        );
        c.ch_sendrecv(right, msg, left, dst, None).await?;
    }
    Ok(())
}

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    counts: &[usize],
    displs: &[usize],
) -> Result<()> {
    exchange(c, buf, 0, |b| displs[b]..displs[b] + counts[b]).await
}
