//! Flat reduce: every rank writes its buffer to the root, which combines chunk i of every
//! rank in turn. One step deep; the root does all p - 1 combinations (shared memory, few
//! ranks, small messages). Cost: α + (p - 1) n (β + γ). Reuse: channel flow control.

use crate::coll::Reducer;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    red: &Reducer<'_>,
    root: usize,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    if me != root {
        return c.ch_send(root, buf).await;
    }
    for i in 0..c.chunks(buf.len()) {
        for k in 1..p {
            c.recv_chunk((root + k) % p, buf, i, Some(red)).await?;
        }
    }
    Ok(())
}
