//! Bruck (dissemination) allgather, any rank count: in step k (distance d = 2^k) rank r sends
//! the blocks it holds, r .. r + min(d, p - d) - 1 (mod p), to r - d and receives blocks
//! r + d .. from r + d. Blocks go straight to their final places (counts and displacements
//! are known everywhere), so Bruck's final rotation is not needed.
//! Cost: ceil(log2 p) α + (p - 1) n β. Reuse: channel flow control.

use crate::coll::split2;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

/// The exchange itself, over any block layout.
pub(crate) async fn exchange<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    range: impl Fn(usize) -> std::ops::Range<usize>,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let mut d = 1;
    while d < p {
        let to = (me + p - d) % p;
        let from = (me + d) % p;
        for j in 0..d.min(p - d) {
            let (msg, dst) = split2(buf, range((me + j) % p), range((me + d + j) % p));
            c.ch_sendrecv(to, msg, from, dst, None).await?;
        }
        d <<= 1;
    }
    Ok(())
}

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    counts: &[usize],
    displs: &[usize],
) -> Result<()> {
    exchange(c, buf, |b| displs[b]..displs[b] + counts[b]).await
}
