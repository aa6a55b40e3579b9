//! Pairwise-exchange alltoall (bandwidth): in step k (p - 1 steps) rank r sends its block for
//! r + k and receives the block from r - k, so each step is a permutation and no rank is
//! flooded. Cost: (p - 1)(α + n β). Reuse: channel flow control.

use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let b = send.len() / p;
    c.copy(&mut recv[me * b..(me + 1) * b], &send[me * b..(me + 1) * b]);
    for k in 1..p {
        let (to, from) = ((me + k) % p, (me + p - k) % p);
        c.ch_sendrecv(
            to,
            &send[to * b..(to + 1) * b],
            from,
            &mut recv[from * b..(from + 1) * b],
            None,
        )
        .await?;
    }
    Ok(())
}
