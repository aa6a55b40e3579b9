//! Pipelined chain broadcast (seed 002's pipelined Bcast): ranks form a chain from the root
//! (v = 0, 1, ..., p - 1 relative to the root); the message is cut into chunks, and each rank
//! forwards chunk i to the next as soon as it has received it, so all links work at once.
//! Cost: (p - 2 + c)(α + s β) for c chunks of s bytes: about n β + (p - 2) s β for large n.
//! Reuse: channel flow control (at most K chunks in flight per link).

use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], root: usize) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let v = (me + p - root) % p;
    let prev = (me + p - 1) % p;
    let next = (me + 1) % p;
    for i in 0..c.chunks(buf.len()) {
        if v > 0 {
            c.recv_chunk(prev, buf, i, None).await?;
        }
        if v + 1 < p {
            c.send_chunk(next, buf, i).await?;
        }
    }
    Ok(())
}
