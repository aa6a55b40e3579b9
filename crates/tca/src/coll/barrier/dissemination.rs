//! Dissemination barrier (Hensgen, Finkel and Manber): in round k rank r signals r + 2^k and
//! waits for r - 2^k; after ceil(log2 p) rounds everyone has heard, directly or not, from
//! everyone. Each signal is an empty message: one cache line with its sequence word.
//! Cost: ceil(log2 p) α. Reuse: channel sequence numbers (nothing to reset).

use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(c: Steps<'_, M>) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let mut d = 1;
    while d < p {
        c.ch_sendrecv((me + d) % p, &[], (me + p - d) % p, &mut [], None)
            .await?;
        d <<= 1;
    }
    Ok(())
}
