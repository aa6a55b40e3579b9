//! Flat alltoall (latency): every rank writes each of its p - 1 outgoing blocks in one step,
//! chunk i to every rank, then takes chunk i from every rank. One step deep.
//! Cost: α + (p - 1) n β. Reuse: channel flow control.

use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let b = send.len() / p;
    c.copy(&mut recv[me * b..(me + 1) * b], &send[me * b..(me + 1) * b]);
    for i in 0..c.chunks(b) {
        for k in 1..p {
            let q = (me + k) % p;
            c.send_chunk(q, &send[q * b..(q + 1) * b], i).await?;
        }
        for k in 1..p {
            let q = (me + p - k) % p;
            c.recv_chunk(q, &mut recv[q * b..(q + 1) * b], i, None)
                .await?;
        }
    }
    Ok(())
}
