//! Dissemination allreduce (seed 000, after Bruck and Hensgen): ceil(log2 p) rounds; in round
//! k rank r sends to r - 2^k and receives from r + 2^k, one message each way... here in its
//! all-rank-counts form: the rounds disseminate the contributions themselves (a Bruck
//! allgather in rotated order, so any p works, not only powers of two as in the paper), then
//! every rank combines the p contributions in rank order. Latency-optimal for small
//! messages, and the results are bit-identical on every rank.
//! Cost: ceil(log2 p) α + (p - 1) n (β + γ). Reuse: channel flow control; contributions are
//! staged in the communicator's reusable temporary.

use crate::coll::Reducer;
use crate::coll::step::{Mode, Site, Steps};
use crate::error::Result;

// The scratch buffer is this run's alone while it runs: see `step`, "Scratch".
#[allow(clippy::await_holding_refcell_ref)]
pub(crate) async fn run<M: Mode>(c: Steps<'_, M>, buf: &mut [u8], red: &Reducer<'_>) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let n = buf.len();
    // Rotated: position i holds the contribution of rank (me + i) % p, so that each round
    // sends one contiguous run (positions 0..) and receives one (positions d..): one message
    // per round, as in the paper, whatever p.
    let mut all = c.tmp(1, p * n);
    c.copy(&mut all[..n], buf);
    let mut d = 1;
    while d < p {
        let cnt = d.min(p - d);
        let (to, from) = ((me + p - d) % p, (me + d) % p);
        let (have, rest) = all[..p * n].split_at_mut(d * n);
        c.ch_sendrecv(to, &have[..cnt * n], from, &mut rest[..cnt * n], None)
            .await?;
        d <<= 1;
    }
    // Back to rank order, then the combination in rank order (the same bits everywhere).
    c.rotate_right(&mut all[..p * n], me * n);
    c.combine_in_order(&all, buf, p, red)
}
