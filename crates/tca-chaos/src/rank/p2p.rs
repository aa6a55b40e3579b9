//! A two-sided step: one of three message patterns, every payload checked byte by byte.
//!
//! - **ring**: each rank `sendrecv`s with its neighbours (the blocking pair MPI programs
//!   use for halos);
//! - **all pairs**: every rank posts a receive from every other, then sends to every other,
//!   non-blocking, and waits for all (the pattern that fills rings and queues unexpected
//!   messages);
//! - **wildcard gather**: every rank sends to one root, which receives them with
//!   `ANY_SOURCE` in whatever order they come and tells the senders apart by the status.
//!
//! A quarter of the steps use lengths past the eager limit (16 KiB to 316 KiB: the
//! rendezvous protocol, with its landing buffers); the rest eager lengths (0 to 2 KiB).
//! Each message's length and bytes are a function of (round, sender, receiver), so a
//! receiver knows what must arrive, and a message of another round or pair is wrong.

use tca::Comm;
use tca::p2p::{ANY_SOURCE, wait_all};

use super::{Fail, Step, check};
use crate::rng::{Rng, mix, pattern};

/// Length of the message from `src` to `dst` in `round`.
fn len(round: u64, src: usize, dst: usize, big: bool) -> usize {
    let h = mix(&[round, src as u64, dst as u64, 1]);
    let n = if big {
        (16 << 10) + h % (300 << 10)
    } else {
        h % 2049
    };
    usize::try_from(n).unwrap_or(0)
}

/// The message from `src` to `dst` in `round`.
fn payload(round: u64, src: usize, dst: usize, big: bool) -> Vec<u8> {
    pattern(
        mix(&[round, src as u64, dst as u64, 2]),
        len(round, src, dst, big),
    )
}

fn tag(round: u64) -> i32 {
    i32::try_from(round % 30_000).unwrap_or(0)
}

/// One two-sided step (every rank of the communicator takes part).
pub(crate) fn step(c: &Comm, round: u64, r: &mut Rng) -> Step {
    let big = r.one_in(4);
    match r.below(3) {
        0 => ring(c, round, big),
        1 => all_pairs(c, round, big),
        _ => {
            let root = usize::try_from(r.below(u64::from(c.size()))).unwrap_or(0);
            gather_any(c, round, big, root)
        }
    }
}

fn ring(c: &Comm, round: u64, big: bool) -> Step {
    let (p, me) = (c.size() as usize, c.rank() as usize);
    let (to, from) = ((me + 1) % p, (me + p - 1) % p);
    let send = payload(round, me, to, big);
    let mut got = vec![0u8; len(round, from, me, big)];
    let st = c.sendrecv(
        &send,
        rank(to),
        tag(round),
        &mut got,
        rank(from),
        tag(round),
    )?;
    check(
        st.source == rank(from) && st.bytes == got.len() && got == payload(round, from, me, big),
        || format!("ring sendrecv round {round}: message from rank {from} differs ({st:?})"),
    )
}

fn all_pairs(c: &Comm, round: u64, big: bool) -> Step {
    let (p, me) = (c.size() as usize, c.rank() as usize);
    let mut bufs: Vec<Vec<u8>> = (0..p)
        .map(|q| vec![0u8; if q == me { 0 } else { len(round, q, me, big) }])
        .collect();
    {
        let mut reqs = Vec::with_capacity(2 * p);
        for (q, b) in bufs.iter_mut().enumerate().filter(|(q, _)| *q != me) {
            reqs.push(c.irecv(b.as_mut_slice(), rank(q), tag(round))?);
        }
        for q in (0..p).filter(|&q| q != me) {
            reqs.push(c.isend(&payload(round, me, q, big), rank(q), tag(round))?);
        }
        wait_all(&mut reqs)?;
    }
    for (q, b) in bufs.iter().enumerate().filter(|(q, _)| *q != me) {
        check(*b == payload(round, q, me, big), || {
            format!("all-pairs round {round}: message from rank {q} differs")
        })?;
    }
    Ok(())
}

fn gather_any(c: &Comm, round: u64, big: bool, root: usize) -> Step {
    let (p, me) = (c.size() as usize, c.rank() as usize);
    if me != root {
        c.send_bytes(&payload(round, me, root, big), rank(root), tag(round))?;
        return Ok(());
    }
    let most = (0..p).map(|q| len(round, q, me, big)).max().unwrap_or(0);
    let mut seen = vec![false; p];
    let mut buf = vec![0u8; most];
    for _ in 1..p {
        let st = c.recv_bytes(&mut buf, ANY_SOURCE, tag(round))?;
        let q = st.source as usize;
        if q >= p || q == me || seen[q] {
            return Err(Fail::Wrong(format!(
                "wildcard gather round {round}: a message claims to come from rank {q} \
                 (seen so far: {seen:?})"
            )));
        }
        seen[q] = true;
        check(
            buf.get(..st.bytes) == Some(&payload(round, q, me, big)[..]),
            || format!("wildcard gather round {round}: message from rank {q} differs"),
        )?;
    }
    Ok(())
}

fn rank(r: usize) -> u32 {
    u32::try_from(r).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_verifies_on_thread_ranks() {
        super::super::on_thread_ranks(9, 30, |_| (), |(), c, round, r| step(c, round, r));
    }
}
