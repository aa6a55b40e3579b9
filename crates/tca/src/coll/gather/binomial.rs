//! Binomial-tree gather, the mirror of the binomial scatter: relative to the root, rank v
//! collects its children's subtrees (v + 2^j for 2^j below its lowest set bit) after its own
//! block, then sends the whole subtree to its parent. ceil(log2 p) steps into the root.
//! Cost: ceil(log2 p) α + (p - 1) n β. Reuse: channel flow control; staging in the
//! communicator's reusable temporary.

use crate::coll::registry::{Model, Work};
use crate::coll::{Comm, subtree};
use crate::error::Result;

pub(crate) fn run(c: &Comm<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let (p, me) = (c.p(), c.me());
    let b = send.len();
    let v = (me + p - root) % p;
    let (low, size) = subtree(p, v);
    let mut t = c.tmp(1, size * b);
    t[..b].copy_from_slice(send);
    let mut m = 1;
    while m < low {
        if v + m < p {
            let cnt = m.min(p - v - m);
            c.recv((v + m + root) % p, &mut t[m * b..(m + cnt) * b])?;
        }
        m <<= 1;
    }
    if v != 0 {
        return c.send((v - low + root) % p, &t[..size * b]);
    }
    for k in 0..p {
        let q = (root + k) % p;
        recv[q * b..(q + 1) * b].copy_from_slice(&t[k * b..(k + 1) * b]);
    }
    Ok(())
}

/// One way: the busier of the root (one receive per subtree, its block staged, the final copy
/// of p blocks) and its first child (gathering its subtree, sending it up).
pub(crate) fn work(m: &Model, p: usize, n: usize) -> Work {
    let nf = n as f64;
    let mut root = m.sched(p).local((p + 1) as f64 * nf);
    let mut k = 1;
    while k < p {
        root = root.recv(1.0, k.min(p - k) as f64 * nf);
        k <<= 1;
    }
    let mut child = m.sched(p).local(nf);
    if p > 1 {
        let h = 1usize << (usize::BITS - 1 - (p - 1).leading_zeros());
        let mut k = 1;
        while k < h && h + k < p {
            child = child.recv(1.0, k.min(p - h - k) as f64 * nf);
            k <<= 1;
        }
        child = child.send(1.0, h.min(p - h) as f64 * nf);
    }
    // In all: the root's copies, and every other rank's block and subtree message.
    let total = m
        .sched(p)
        .local((p + 1) as f64 * nf)
        .binomial_subtrees(p, nf);
    m.paced(p, m.slowest(root.work(), child.work()), total.work())
}
