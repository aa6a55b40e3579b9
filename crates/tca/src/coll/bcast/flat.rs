//! Flat broadcast: the root writes the buffer into every other rank's slots, chunk by chunk
//! to all ranks in turn, so every receiver starts after one chunk. On shared memory the p - 1
//! copies are cheap for small messages and the depth is one step.
//! Cost: α + (p - 1) n β. Reuse: channel flow control.

use crate::coll::registry::{CostModel, Work};
use crate::coll::step::{Mode, Steps};
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

/// One way: the busier of the root (p - 1 sends) and a receiver; p - 1 of each in all.
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let (q, n) = (p.saturating_sub(1) as f64, n as f64);
    let busiest = m.slowest(m.sched(p).send(q, n).work(), m.sched(p).recv(1.0, n).work());
    m.paced(p, busiest, m.sched(p).send(q, n).recv(q, n).work())
}
