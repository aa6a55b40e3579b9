//! Pairwise-exchange alltoall (bandwidth): in step k (p - 1 steps) rank r sends its block for
//! r + k and receives the block from r - k, so each step is a permutation and no rank is
//! flooded. Cost: (p - 1)(α + n β). Reuse: channel flow control.

use crate::coll::registry::{CostModel, Work};
use crate::coll::step::{Mode, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let b = send.len() / p;
    recv[me * b..(me + 1) * b].copy_from_slice(&send[me * b..(me + 1) * b]);
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

/// p - 1 exchange rounds of a block of n; this rank's own block copied.
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (q, n) = (p.saturating_sub(1) as f64, n as f64);
    m.sched(p).local(n).exchange(q, n).symmetric()
}
