//! Linear scatter (seed 000: "the root writes each rank's m/p piece in turn, one chained
//! DMA"). On shared memory a chain is a run of memcpys, so the root issues every piece back
//! to back, chunk by chunk across ranks, and each rank copies its piece out of its slots.
//! Cost: α + (p - 1) n β (n = one rank's piece). Reuse: channel flow control.

use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
    root: usize,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let b = recv.len();
    if me != root {
        return c.ch_recv(root, recv).await;
    }
    for i in 0..c.chunks(b) {
        for k in 1..p {
            let q = (root + k) % p;
            c.send_chunk(q, &send[q * b..(q + 1) * b], i).await?;
        }
    }
    c.copy(recv, &send[me * b..(me + 1) * b]);
    Ok(())
}
