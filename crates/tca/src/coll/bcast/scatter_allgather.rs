//! Scatter + allgather broadcast (van de Geijn): the root sends block r of the buffer to rank
//! r, then a ring allgather completes every copy. Each rank moves about 2 n bytes instead of
//! n log p, for large messages on many ranks.
//! Cost: (p - 1) α + n β (scatter) + (p - 1)(α + n/p β) (ring). Reuse: channel flow control.

use crate::coll::allgather::ring;
use crate::coll::block;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], root: usize) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let n = buf.len();
    if me == root {
        for k in 1..p {
            let q = (root + k) % p;
            c.ch_send(q, &buf[block(n, 1, p, q)]).await?;
        }
    } else {
        c.ch_recv(root, &mut buf[block(n, 1, p, me)]).await?;
    }
    ring::exchange(c, buf, 0, |b| block(n, 1, p, b)).await
}
