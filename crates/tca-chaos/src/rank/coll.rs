//! A collective step: one collective of random kind, length, root and algorithm (forced by
//! name from the library's one table, or left to the selector), its result checked against
//! the sequential reference every rank computes alone.
//!
//! Inputs are small integers (1 to 1,024) hashed from round, rank and index, so sums are
//! exact in f64 at any rank count, and a stale buffer from an earlier round, or data shifted
//! by any number of elements, does not pass. Lengths run
//! from 0 through the eager sizes to 70,000 elements (560 KB), where the pipelined and
//! bandwidth-optimal algorithms take over. Half the calls left to the selector run over
//! buffers in tca's memory (`Comm::buffer`): on one node, from the single-copy threshold on,
//! peers then read each other's buffers in place (`tca::coll` single copy), and a fault lands
//! in the middle of that protocol.

use std::ops::DerefMut;

use tca::coll::ALGORITHMS;
use tca::{Collective, Comm, Op};

use super::{Step, check};
use crate::rng::{Rng, mix};

fn v(round: u64, rank: usize, i: usize) -> f64 {
    // A hash of (round, rank, index): no period in the round or the index, so data of
    // another round, rank or position does not pass (but for a 1 in 1,024 coincidence per
    // element). 1..=1024: exact in f64, and so are their sums over up to 2^43 ranks.
    let k = mix(&[round, rank as u64, i as u64, 0xc011]) % 1024;
    (k + 1) as f64
}

fn input(round: u64, rank: usize, n: usize) -> Vec<f64> {
    (0..n).map(|i| v(round, rank, i)).collect()
}

fn sum(round: u64, p: usize, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| (0..p).map(|r| v(round, r, i)).sum())
        .collect()
}

/// Element `i` of rank `r`'s Alltoall send buffer: a hash of (round, rank, index), so
/// distinct across ranks, blocks and rounds but for 1 in 2^40.
fn a2a(round: u64, r: usize, i: usize) -> f64 {
    let x = mix(&[round, r as u64, i as u64, 0xa2a]) % (1 << 40);
    // Below 2^53: exact.
    x as f64
}

/// One collective step (collective over the communicator).
pub(crate) fn step(c: &Comm, round: u64, r: &mut Rng) -> Step {
    let p = c.size() as usize;
    let which = *r.pick(&Collective::ALL).unwrap_or(&Collective::Allreduce);
    let algs: Vec<&str> = ALGORITHMS
        .iter()
        .filter(|a| a.collective == which && (a.supports)(p))
        .map(|a| a.name)
        .collect();
    let forced = if r.one_in(4) {
        None
    } else {
        r.pick(&algs).copied()
    };
    let n = match r.below(8) {
        0 => 0,
        1 => 1,
        2..=5 => r.range(2, 4096),
        _ => r.range(4097, 70_000),
    };
    let n = usize::try_from(n).unwrap_or(0);
    let root = u32::try_from(r.below(p as u64)).unwrap_or(0);
    // Every rank draws the same, so all allocate alike (`Comm::buffer` is collective).
    let tca_memory = forced.is_none() && r.one_in(2);
    c.force(which, forced)?;
    let ok = run(c, which, n, root, round, tca_memory);
    // Restoring the selector can only fail as the call did (a dead peer): report the call's.
    let restored = c.force(which, None);
    let ok = ok?;
    restored?;
    check(ok, || {
        format!(
            "{} ({}{}) of {n} elements, root {root}, round {round}: result differs from the \
             reference",
            which.name(),
            forced.unwrap_or("auto"),
            if tca_memory { ", tca memory" } else { "" }
        )
    })
}

/// A buffer holding `v`: in tca's memory (collective) or ordinary memory.
type Mem = Box<dyn DerefMut<Target = [f64]>>;

fn run(
    c: &Comm,
    which: Collective,
    n: usize,
    root: u32,
    round: u64,
    tca_memory: bool,
) -> tca::Result<bool> {
    let (p, me) = (c.size() as usize, c.rank() as usize);
    let is_root = me == root as usize;
    let all = |n| -> Vec<f64> { (0..p).flat_map(|q| input(round, q, n)).collect() };
    let mem = |v: Vec<f64>| -> tca::Result<Mem> {
        Ok(if tca_memory {
            let mut b = c.buffer::<f64>(v.len())?;
            b.copy_from_slice(&v);
            Box::new(b)
        } else {
            Box::new(v)
        })
    };
    Ok(match which {
        Collective::Broadcast => {
            let mut b = mem(if is_root {
                input(round, me, n)
            } else {
                vec![0.0; n]
            })?;
            c.broadcast(&mut b, root)?;
            b[..] == input(round, root as usize, n)[..]
        }
        Collective::Scatter => {
            let everything = mem(if is_root { all(n) } else { Vec::new() })?;
            let mut got = mem(vec![0.0; n])?;
            c.scatter(&everything, &mut got, root)?;
            got[..] == input(round, me, n)[..]
        }
        Collective::Gather => {
            let mut got = mem(vec![0.0; if is_root { p * n } else { 0 }])?;
            c.gather(&mem(input(round, me, n))?, &mut got, root)?;
            !is_root || got[..] == all(n)[..]
        }
        Collective::Reduce => {
            let mut got = mem(vec![0.0; n])?;
            c.reduce(&mem(input(round, me, n))?, &mut got, &Op::Sum, root)?;
            !is_root || got[..] == sum(round, p, n)[..]
        }
        Collective::Allgather => {
            let mut got = mem(vec![0.0; p * n])?;
            c.allgather(&mem(input(round, me, n))?, &mut got)?;
            got[..] == all(n)[..]
        }
        Collective::Allreduce => {
            let mut got = mem(vec![0.0; n])?;
            c.allreduce(&mem(input(round, me, n))?, &mut got, &Op::Sum)?;
            got[..] == sum(round, p, n)[..]
        }
        Collective::Barrier => {
            c.barrier()?;
            true
        }
        Collective::ReduceScatter => {
            let mut got = mem(vec![0.0; n])?;
            c.reduce_scatter(&mem(input(round, me, p * n))?, &mut got, &Op::Sum)?;
            got[..] == sum(round, p, p * n)[me * n..(me + 1) * n]
        }
        Collective::Alltoall => {
            let send = mem((0..p * n).map(|i| a2a(round, me, i)).collect())?;
            let mut got = mem(vec![0.0; p * n])?;
            c.alltoall(&send, &mut got)?;
            (0..p).all(|j| (0..n).all(|i| got[j * n + i] == a2a(round, j, me * n + i)))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_collective_verifies_on_thread_ranks() {
        super::super::on_thread_ranks(5, 40, |_| (), |(), c, round, r| step(c, round, r));
    }

    #[test]
    fn values_are_exact_and_have_no_period() {
        assert_ne!(a2a(3, 2, 5), a2a(4, 2, 5));
        assert!(a2a(3, 2, 5) < (1u64 << 40) as f64);
        // Stale by 11 rounds or shifted by 11 elements (the old period) does not verify.
        let now = input(20, 1, 100);
        assert_ne!(now, input(9, 1, 100));
        assert_ne!(now[11..], input(20, 1, 111)[..89]);
        assert!(
            now.iter()
                .all(|&x| (1.0..=1024.0).contains(&x) && x.fract() == 0.0)
        );
    }
}
