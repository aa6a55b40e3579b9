//! Binomial-tree reduce: relative to the root, in round k rank v with bit k set sends its
//! partial result to v - 2^k and drops out; the others combine what v + 2^k sends into
//! theirs. ceil(log2 p) rounds; the root ends with the result.
//! Cost: ceil(log2 p)(α + n β + n γ). Reuse: channel flow control.

use crate::coll::Reducer;
use crate::coll::registry::{CostModel, Work, log2c};
use crate::coll::step::{Mode, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    red: &Reducer<'_>,
    root: usize,
) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let v = (me + p - root) % p;
    let mut m = 1;
    while m < p {
        if v & m != 0 {
            return c.ch_send((v - m + root) % p, buf).await;
        }
        if v + m < p {
            c.recv_reduce((v + m + root) % p, buf, red).await?;
        }
        m <<= 1;
    }
    Ok(())
}

/// One way: the busier of the root (ceil(log2 p) combining receives, and the front end's
/// copies in and out) and its first child (combining its children's, sending up).
pub(crate) fn work(m: &CostModel, p: usize, n: usize) -> Work {
    let nf = n as f64;
    let root = m.sched(p).local(2.0 * nf).recv_reduce(log2c(p), nf);
    let mut child = m.sched(p).local(nf).send(1.0, nf);
    if p > 1 {
        let h = 1usize << (usize::BITS - 1 - (p - 1).leading_zeros());
        let mut k = 1;
        while k < h && h + k < p {
            child = child.recv_reduce(1.0, nf);
            k <<= 1;
        }
    }
    // In all: the root's work, and p - 1 ranks that copy their input and send it up, each
    // combined once by its parent.
    let q = p.saturating_sub(1) as f64;
    let total = m.sched(p).then(root.work()).local(q * nf).send(q, nf);
    let total = total.recv_reduce(q - log2c(p), nf);
    m.paced(p, m.slowest(root.work(), child.work()), total.work())
}
