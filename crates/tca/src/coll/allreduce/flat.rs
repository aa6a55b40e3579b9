//! Flat allreduce (shared memory, small messages): every rank writes its buffer to every
//! other rank in one step, then each combines all p contributions in rank order. One step
//! deep, and every rank computes the same combination in the same order, so results are
//! bit-identical everywhere. Cost: α + (p - 1) n (β + γ). Reuse: channel flow control; the p
//! contributions are staged in the communicator's reusable temporary.

use crate::coll::Reducer;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

// The scratch buffer is this run's alone while it runs: see `step`, "Scratch".
#[allow(clippy::await_holding_refcell_ref)]
pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], red: &Reducer<'_>) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let n = buf.len();
    let mut all = c.tmp(1, p * n);
    c.copy(&mut all[me * n..(me + 1) * n], buf);
    for i in 0..c.chunks(n) {
        for k in 1..p {
            c.send_chunk((me + k) % p, buf, i).await?;
        }
        for k in 1..p {
            let q = (me + p - k) % p;
            c.recv_chunk(q, &mut all[q * n..(q + 1) * n], i, None)
                .await?;
        }
    }
    c.combine_in_order(&all, buf, p, red)
}
