//! Flat reduce-scatter (latency): every rank writes block q of its buffer to rank q in one
//! step; each rank combines the p - 1 blocks it receives into its own.
//! Cost: α + (p - 1) n (β + γ) for blocks of n bytes. Reuse: channel flow control.

use crate::coll::Reducer;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    recv: &mut [u8],
    red: &Reducer<'_>,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let b = recv.len();
    c.copy(recv, &buf[me * b..(me + 1) * b]);
    for i in 0..c.chunks(b) {
        for k in 1..p {
            let q = (me + k) % p;
            c.send_chunk(q, &buf[q * b..(q + 1) * b], i).await?;
        }
        for k in 1..p {
            c.recv_chunk((me + p - k) % p, recv, i, Some(red)).await?;
        }
    }
    Ok(())
}
