//! Linear gather (seed 000: "each rank writes its piece to the root"): every rank sends its
//! block to the root, which takes chunk i from every rank in turn, so all senders progress
//! together. Cost: α + (p - 1) n β. Reuse: channel flow control.

use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
    root: usize,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let b = send.len();
    if me != root {
        return c.ch_send(root, send).await;
    }
    for i in 0..c.chunks(b) {
        for k in 1..p {
            let q = (root + k) % p;
            c.recv_chunk(q, &mut recv[q * b..(q + 1) * b], i, None)
                .await?;
        }
    }
    c.copy(&mut recv[me * b..(me + 1) * b], send);
    Ok(())
}
