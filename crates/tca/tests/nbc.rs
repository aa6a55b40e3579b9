//! Non-blocking collectives (`Comm::scope`): every collective x algorithm against the blocking
//! call's result at 1 to 9 ranks; many outstanding at once, waited in random orders; 10,000
//! mixed blocking and non-blocking calls with random delays; dropped requests; bad input.
//! Thread ranks.

use std::time::Duration;

use tca::coll::{ALGORITHMS, Algorithm};
use tca::p2p::{self, Request};
use tca::{Collective, Comm, ErrorKind, Op, threads};

mod common;
use common::{input, rng, val};

/// A random number below `n` out of `x`.
fn pick(x: u64, n: usize) -> usize {
    usize::try_from(x % n as u64).expect("below n")
}

fn r32(x: usize) -> u32 {
    u32::try_from(x).expect("a rank")
}

/// Finishes `r` by testing it until it is done: the non-blocking steps, not the blocking
/// ones a `wait` would switch to.
fn finish(mut r: Request<'_>) -> tca::Result<()> {
    while r.test()?.is_none() {
        std::thread::yield_now();
    }
    Ok(())
}

/// Runs `alg`'s collective on `n` elements per block, blocking and then non-blocking, and
/// checks that both give this rank the same bytes.
fn same_as_blocking(c: &Comm<'_>, alg: &Algorithm, n: usize, root: u32) -> tca::Result<()> {
    let (p, me) = (c.size() as usize, c.rank() as usize);
    let tag = format!(
        "{} {} p={p} n={n} root={root} rank={me}",
        alg.collective.name(),
        alg.name
    );
    c.force(alg.collective, Some(alg.name))?;
    let mine = input(me, n);
    let all: Vec<f64> = (0..p * n).map(|i| val(me, i)).collect();
    let is_root = me == root as usize;
    // (blocking, non-blocking) results of this rank.
    let (b, nb): (Vec<f64>, Vec<f64>) = match alg.collective {
        Collective::Broadcast => {
            let fresh = || if is_root { mine.clone() } else { vec![0.0; n] };
            let (mut x, mut y) = (fresh(), fresh());
            c.broadcast(&mut x, root)?;
            c.scope(|s| finish(s.ibroadcast(&mut y, root)?))?;
            (x, y)
        }
        Collective::Scatter => {
            let send = if is_root { all.clone() } else { Vec::new() };
            let (mut x, mut y) = (vec![0.0; n], vec![0.0; n]);
            c.scatter(&send, &mut x, root)?;
            c.scope(|s| finish(s.iscatter(&send, &mut y, root)?))?;
            (x, y)
        }
        Collective::Gather => {
            let m = if is_root { p * n } else { 0 };
            let (mut x, mut y) = (vec![0.0; m], vec![0.0; m]);
            c.gather(&mine, &mut x, root)?;
            c.scope(|s| finish(s.igather(&mine, &mut y, root)?))?;
            (x, y)
        }
        Collective::Reduce => {
            let (mut x, mut y) = (vec![0.0; n], vec![0.0; n]);
            c.reduce(&mine, &mut x, &Op::Sum, root)?;
            c.scope(|s| finish(s.ireduce(&mine, &mut y, &Op::Sum, root)?))?;
            (x, y)
        }
        Collective::Allgather => {
            let (mut x, mut y) = (vec![0.0; p * n], vec![0.0; p * n]);
            c.allgather(&mine, &mut x)?;
            c.scope(|s| finish(s.iallgather(&mine, &mut y)?))?;
            (x, y)
        }
        Collective::Allreduce => {
            let (mut x, mut y) = (vec![0.0; n], vec![0.0; n]);
            c.allreduce(&mine, &mut x, &Op::Sum)?;
            c.scope(|s| finish(s.iallreduce(&mine, &mut y, &Op::Sum)?))?;
            (x, y)
        }
        Collective::Barrier => {
            c.barrier()?;
            c.scope(|s| finish(s.ibarrier()?))?;
            (Vec::new(), Vec::new())
        }
        Collective::ReduceScatter => {
            let (mut x, mut y) = (vec![0.0; n], vec![0.0; n]);
            c.reduce_scatter(&all, &mut x, &Op::Sum)?;
            c.scope(|s| finish(s.ireduce_scatter(&all, &mut y, &Op::Sum)?))?;
            (x, y)
        }
        Collective::Alltoall => {
            let (mut x, mut y) = (vec![0.0; p * n], vec![0.0; p * n]);
            c.alltoall(&all, &mut x)?;
            c.scope(|s| finish(s.ialltoall(&all, &mut y)?))?;
            (x, y)
        }
    };
    assert_eq!(
        bytemuck::cast_slice::<f64, u8>(&b),
        bytemuck::cast_slice::<f64, u8>(&nb),
        "{tag}"
    );
    Ok(())
}

fn every_algorithm_at(p: u32) {
    threads::run(p, |w| {
        let c = Comm::world(w)?;
        for alg in ALGORITHMS.iter().filter(|a| (a.supports)(p as usize)) {
            for n in [0, 1, 7, 4096] {
                for root in [0, p - 1, p / 2] {
                    same_as_blocking(&c, alg, n, root)?;
                }
            }
            if p == 3 || p == 8 {
                same_as_blocking(&c, alg, 1 << 16, p - 1)?;
            }
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{p} ranks: {e}"));
}

#[test]
fn every_algorithm_1_to_4_ranks() {
    for p in 1..=4 {
        every_algorithm_at(p);
    }
}

#[test]
fn every_algorithm_5_to_9_ranks() {
    for p in 5..=9 {
        every_algorithm_at(p);
    }
}

/// Twenty collectives of three kinds outstanding at once, each rank waiting for them in its
/// own random order (testing some first), every result checked.
#[test]
fn many_outstanding_waited_in_random_orders() {
    threads::run(5, |w| {
        let c = Comm::world(w)?;
        let (p, me) = (c.size() as usize, c.rank() as usize);
        let mut next = rng(0x5eed ^ (me as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mine = [c.rank(); 3];
        for round in 0..20 {
            let n = |k: usize| [1, 8, 300, 5000][(k + round) % 4];
            let mut sums: Vec<Vec<f64>> = (0..20).map(|k| input(me, n(k))).collect();
            let root = |k: usize| k % p;
            let mut bcasts: Vec<Vec<u64>> = (0..20)
                .map(|k| vec![if me == root(k) { k as u64 } else { 0 }; n(k)])
                .collect();
            let mut gath = vec![vec![0u32; 3 * p]; 20];
            c.scope(|s| {
                let mut reqs = Vec::new();
                let bufs = sums.iter_mut().zip(bcasts.iter_mut()).zip(gath.iter_mut());
                for (k, ((sum, bc), g)) in bufs.enumerate() {
                    let r = match k % 3 {
                        0 => s.iallreduce_in_place(sum, &Op::Sum)?,
                        1 => s.ibroadcast(bc, r32(root(k)))?,
                        _ => s.iallgather(&mine, g)?,
                    };
                    reqs.push(Some(r));
                }
                for _ in 0..10 {
                    let k = (next() % 20) as usize;
                    if let Some(r) = reqs[k].as_mut().filter(|r| r.is_active()) {
                        r.test()?;
                    }
                }
                let mut order: Vec<usize> = (0..20).collect();
                for i in (1..20).rev() {
                    order.swap(i, pick(next(), i + 1));
                }
                for k in order {
                    // Those a test completed are spent: nothing to wait for.
                    let mut r = reqs[k].take().unwrap();
                    if r.is_active() {
                        r.wait()?;
                    }
                }
                Ok(())
            })?;
            let gathered: Vec<u32> = (0..c.size()).flat_map(|r| [r; 3]).collect();
            for k in 0..20 {
                let tag = format!("round {round} collective {k}");
                match k % 3 {
                    0 => {
                        let want: Vec<f64> =
                            (0..n(k)).map(|i| (0..p).map(|r| val(r, i)).sum()).collect();
                        assert_eq!(sums[k], want, "{tag}");
                    }
                    1 => assert!(bcasts[k].iter().all(|&v| v == k as u64), "{tag}"),
                    _ => assert_eq!(gath[k], gathered, "{tag}"),
                }
            }
        }
        Ok(())
    })
    .unwrap();
}

/// 10,000 collectives, blocking and non-blocking mixed (some requests dropped, finished by
/// their scope), ranks at different speeds; every result checked.
#[test]
fn mixed_blocking_and_nonblocking_with_random_delays() {
    threads::run(4, |w| {
        let c = Comm::world(w)?;
        let me = c.rank() as usize;
        // The same sequence of kinds on every rank; delays of each rank's own.
        let mut shared = rng(0xc0ffee);
        let mut own = rng(0xdead_beef ^ ((me as u64 + 1) * 0x9e37_79b9));
        let mut k = 0u64;
        while k < 10_000 {
            let batch = 1 + pick(shared(), 6);
            let mut xs = vec![[0f64; 1]; batch];
            let mut bs = vec![vec![0u64; 200]; batch];
            let kinds: Vec<u64> = (0..batch).map(|_| shared() % 4).collect();
            c.scope(|s| {
                let mut reqs = Vec::new();
                for (j, (x, b)) in xs.iter_mut().zip(bs.iter_mut()).enumerate() {
                    let r = own();
                    if r % 97 == 0 {
                        std::thread::sleep(Duration::from_micros(r % 200));
                    } else if r % 7 == 0 {
                        std::thread::yield_now();
                    }
                    let i = k + j as u64;
                    x[0] = i as f64 + me as f64;
                    b.fill(if me == (i % 4) as usize { i } else { 0 });
                    match kinds[j] {
                        0 => reqs.push(s.iallreduce_in_place(x, &Op::Sum)?),
                        1 => reqs.push(s.ibroadcast(b, (i % 4) as u32)?),
                        2 => {
                            // A blocking one between the started ones: it finishes them first.
                            c.allreduce_in_place(x, &Op::Sum)?;
                            c.broadcast(b, (i % 4) as u32)?;
                        }
                        _ => drop(s.ibarrier()?), // dropped: the scope finishes it
                    }
                }
                for mut r in reqs.drain(..) {
                    match own() % 3 {
                        0 => drop(r), // left to the scope
                        1 => finish(r)?,
                        _ => drop(r.wait()?),
                    }
                }
                Ok(())
            })?;
            for j in 0..batch {
                let i = k + j as u64;
                let tag = format!("call {i} kind {}", kinds[j]);
                if kinds[j] != 1 && kinds[j] != 3 {
                    assert_eq!(xs[j][0], 4.0 * i as f64 + 6.0, "{tag}");
                }
                if kinds[j] == 1 || kinds[j] == 2 {
                    assert!(bs[j].iter().all(|&v| v == i), "{tag}");
                }
            }
            k += batch as u64;
        }
        Ok(())
    })
    .unwrap();
}

/// Collectives' requests and sends' and receives' are one type: waited for together with
/// `wait_all`, one at a time with `wait_any` (the collectives in the order they started), or
/// tested with `test_all`; every result checked.
#[test]
fn collectives_and_messages_wait_together() {
    threads::run(3, |w| {
        let c = Comm::world(w)?;
        let (p, me) = (c.size(), c.rank());
        let (right, left) = ((me + 1) % p, (me + p - 1) % p);
        let sum: f64 = (0..p).map(|r| f64::from(r) + 1.0).sum();
        for round in 0..50u32 {
            let mut x = vec![f64::from(me) + 1.0; 1000];
            let mut b = [if me == round % p { round } else { 0 }; 4];
            let out = [me * 100 + round; 300];
            let mut inn = [0u32; 300];
            let mut y = [f64::from(me); 2];
            let mut z = [f64::from(me); 3];
            c.scope(|s| {
                let mut reqs = vec![
                    s.iallreduce_in_place(&mut x, &Op::Sum)?,
                    c.irecv(&mut inn, left, 7)?,
                    s.ibroadcast(&mut b, round % p)?,
                    c.isend(&out, right, 7)?,
                ];
                match round % 3 {
                    0 => p2p::wait_all(&mut reqs)?,
                    1 => {
                        let mut seen = Vec::new();
                        while reqs.iter().any(Request::is_active) {
                            let (i, st) = p2p::wait_any(&mut reqs)?;
                            if i == 1 {
                                assert_eq!((st.source, st.tag, st.bytes), (left, 7, 1200));
                            }
                            seen.push(i);
                        }
                        seen.sort_unstable();
                        assert_eq!(seen, [0, 1, 2, 3]);
                    }
                    _ => while !p2p::test_all(&mut reqs)? {},
                }
                // Only collectives left: wait_any hands them back oldest first.
                let mut two = [
                    s.iallreduce_in_place(&mut y, &Op::Max)?,
                    s.iallreduce_in_place(&mut z, &Op::Min)?,
                ];
                assert_eq!(p2p::wait_any(&mut two)?.0, 0);
                assert_eq!(p2p::wait_any(&mut two)?.0, 1);
                Ok(())
            })?;
            assert_eq!((y, z), ([f64::from(p - 1); 2], [0.0; 3]));
            assert!(x.iter().all(|&v| v == sum), "round {round}");
            assert_eq!(b, [round; 4], "round {round}");
            assert_eq!(inn, [left * 100 + round; 300], "round {round}");
        }
        Ok(())
    })
    .unwrap();
}

/// A send's or receive's wait moves started collectives on: a peer that finishes its part of
/// a collective before it sends is not left waiting for a rank that sleeps in a receive (a
/// valid MPI program; it would deadlock if the receive's wait only watched messages). The
/// collective is large (many chunks, so many steps) and each rank's order is the other's
/// reverse, through `wait_any`, `wait_all`, a blocking receive and a request's wait.
#[test]
fn waits_for_messages_move_collectives_on() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let me = c.rank();
        let other = 1 - me;
        let n = 1 << 17; // 1 MiB of f64
        for form in 0..4 {
            let mut x = vec![f64::from(me) + 1.0; n];
            let mut got = [0u32; 4];
            c.scope(|s| {
                let mut sum = s.iallreduce_in_place(&mut x, &Op::Sum)?;
                if me == 1 {
                    // The collective first, then the message rank 0 is waiting for.
                    sum.wait()?;
                    return c.send(&[form; 4], other, 5);
                }
                match form {
                    0 => {
                        let mut reqs = [sum, c.irecv(&mut got, other, 5)?];
                        while reqs.iter().any(Request::is_active) {
                            p2p::wait_any(&mut reqs)?;
                        }
                    }
                    1 => p2p::wait_all(&mut [c.irecv(&mut got, other, 5)?, sum])?,
                    2 => {
                        c.recv(&mut got, other, 5)?;
                        sum.wait()?;
                    }
                    _ => {
                        c.irecv(&mut got, other, 5)?.wait()?;
                        sum.wait()?;
                    }
                }
                Ok(())
            })?;
            assert!(x.iter().all(|&v| v == 3.0), "form {form}");
            if me == 0 {
                assert_eq!(got, [form; 4], "form {form}");
            }
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn a_collective_done_when_started_does_not_hold_the_next() {
    // An empty allreduce finishes when it starts; started behind a running one it used to
    // stop the scope's progress there, so the alltoall after it never moved (found by the
    // offload tests). Tested, not waited: the trying steps are what stopped.
    threads::run(3, |w| {
        let c = Comm::world(w)?;
        let me = c.rank() as usize;
        let mine = input(me, 5);
        let (mut sum, mut empty, mut back) = (vec![0.0; 5], Vec::<f64>::new(), vec![0.0; 15]);
        let all = input(me, 15);
        c.scope(|s| {
            let mut t = [
                s.iallreduce(&mine, &mut sum, &Op::Sum)?,
                s.iallreduce_in_place(&mut empty, &Op::Sum)?,
                s.ialltoall(&all, &mut back)?,
            ];
            let t0 = std::time::Instant::now();
            while t.iter().any(Request::is_active) {
                for r in t.iter_mut().filter(|r| r.is_active()) {
                    let _ = r.test()?;
                }
                assert!(t0.elapsed() < Duration::from_secs(20), "rank {me}: stuck");
                std::thread::yield_now();
            }
            Ok(())
        })?;
        for (k, x) in back.chunks(5).enumerate() {
            assert_eq!(x, &input(k, 15)[me * 5..me * 5 + 5], "rank {me} from {k}");
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn bad_input_is_a_clear_error() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        // Scopes do not nest on one communicator.
        let e = c.scope(|_| c.scope(|_| Ok(()))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("already open"), "{e}");
        // A root out of range: an error before anything starts; the communicator stays usable.
        let mut b = [0u8; 4];
        let e = c.scope(|s| s.ibroadcast(&mut b, 9).map(drop)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidRank);
        // A request tested to completion is spent, as every request: a later wait says so.
        let mut x = [1.0f64];
        c.scope(|s| {
            let mut r = s.iallreduce_in_place(&mut x, &Op::Sum)?;
            assert!(r.is_active() && r.is_collective());
            while r.test()?.is_none() {}
            assert!(!r.is_active());
            let e = r.wait().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.to_string().contains("already completed"), "{e}");
            Ok(())
        })?;
        assert_eq!(x, [2.0]);
        Ok(())
    })
    .unwrap();
}
