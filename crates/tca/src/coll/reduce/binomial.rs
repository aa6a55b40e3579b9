//! Binomial-tree reduce: relative to the root, in round k rank v with bit k set sends its
//! partial result to v - 2^k and drops out; the others combine what v + 2^k sends into
//! theirs. ceil(log2 p) rounds; the root ends with the result.
//! Cost: ceil(log2 p)(α + n β + n γ). Reuse: channel flow control.

use crate::coll::Reducer;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    red: &Reducer<'_>,
    root: usize,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let v = (me + p - root) % p;
    let mut m = 1;
    while m < p {
        if v & m != 0 {
            return c.ch_send((v - m + root) % p, buf).await;
        }
        if v + m < p {
            c.recv_reduce((v + m + root) % p, buf, red).await?;
        }
        m <<= 1;
    }
    Ok(())
}
