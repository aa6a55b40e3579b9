//! Flat broadcast: the root writes the buffer into every other rank's slots, chunk by chunk
//! to all ranks in turn, so every receiver starts after one chunk. On shared memory the p - 1
//! copies are cheap for small messages and the depth is one step.
//! Cost: α + (p - 1) n β. Reuse: channel flow control.

use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], root: usize) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    if me != root {
        return c.ch_recv(root, buf).await;
    }
    for i in 0..c.chunks(buf.len()) {
        for k in 1..p {
            c.send_chunk((root + k) % p, buf, i).await?;
        }
    }
    Ok(())
}
