//! Collectives: every algorithm of the registry at 1 to 9 ranks (thread mode), several roots,
//! sizes and element types, against a sequential reference; property tests; back-to-back
//! stress; bad input. Multi-process runs are in `crates/tca-tests`.

use std::time::Duration;

use proptest::prelude::*;
use tca::coll::{ALGORITHMS, Algorithm, Element};
use tca::{Collective, Comm, ErrorKind, Op, threads};

const SIZES: [usize; 4] = [0, 1, 7, 4096];

/// Whether the suite runs on the simulated network (`TCA_TRANSPORT=sim`).
fn simulated() -> bool {
    std::env::var("TCA_TRANSPORT").is_ok_and(|t| t.trim() == "sim")
}
/// About 1 MiB of f64.
const BIG: usize = 1 << 17;

fn val<T: Element + FromI>(rank: usize, i: usize) -> T {
    T::from_small(u8::try_from((rank * 7 + i * 3) % 11).unwrap() + 1)
}

/// Element types built from the small test values (1 to 11), losslessly.
trait FromI {
    fn from_small(v: u8) -> Self;
}
macro_rules! from_small {
    ($($t:ty),*) => {$(
        impl FromI for $t {
            fn from_small(v: u8) -> Self {
                <$t>::from(v)
            }
        }
    )*};
}
from_small!(f64, f32, i64, i32, u64, u32, u8);

fn input<T: Element + FromI>(rank: usize, n: usize) -> Vec<T> {
    (0..n).map(|i| val(rank, i)).collect()
}

fn reduced<T: Element + FromI>(p: usize, n: usize, op: &Op<T>) -> Vec<T> {
    let mut acc = input::<T>(0, n);
    for r in 1..p {
        let x = input::<T>(r, n);
        for (a, b) in acc.iter_mut().zip(x) {
            *a = apply(op, *a, b);
        }
    }
    acc
}

fn apply<T: Element>(op: &Op<T>, a: T, b: T) -> T {
    let mut x = [a];
    op_combine(op, &mut x, &[b]);
    x[0]
}

/// The reference uses the same element-wise definitions through a one-rank allreduce-free
/// path: a tiny sequential implementation of each op.
fn op_combine<T: Element>(op: &Op<T>, acc: &mut [T], inc: &[T]) {
    for (a, &b) in acc.iter_mut().zip(inc) {
        *a = match op {
            Op::Sum => T::add(*a, b),
            Op::Prod => T::mul(*a, b),
            Op::Min => {
                if b < *a {
                    b
                } else {
                    *a
                }
            }
            Op::Max => {
                if b > *a {
                    b
                } else {
                    *a
                }
            }
            Op::BitAnd => T::bits(*a, b, tca::coll::BitOp::And).unwrap(),
            Op::BitOr => T::bits(*a, b, tca::coll::BitOp::Or).unwrap(),
            Op::BitXor => T::bits(*a, b, tca::coll::BitOp::Xor).unwrap(),
            Op::Custom(f) => f(*a, b),
        };
    }
}

/// Runs one collective with algorithm `alg` on `n` elements per block and checks the result.
fn check<T: Element + FromI + std::fmt::Debug>(
    c: &Comm<'_>,
    alg: &Algorithm,
    n: usize,
    root: u32,
    op: &Op<T>,
) -> tca::Result<()> {
    let (p, me) = (c.size() as usize, c.rank() as usize);
    let tag = |what: &str| {
        format!(
            "{} {} p={p} n={n} root={root} rank={me}: {what}",
            alg.collective.name(),
            alg.name
        )
    };
    c.force(alg.collective, Some(alg.name))?;
    match alg.collective {
        Collective::Broadcast => {
            let mut buf = if me == root as usize {
                input::<T>(me, n)
            } else {
                vec![T::zeroed(); n]
            };
            c.broadcast(&mut buf, root)?;
            assert_eq!(buf, input::<T>(root as usize, n), "{}", tag("broadcast"));
        }
        Collective::Scatter => {
            let all: Vec<T> = (0..p * n).map(|i| val(root as usize, i)).collect();
            let send = if me == root as usize {
                all.clone()
            } else {
                Vec::new()
            };
            let mut recv = vec![T::zeroed(); n];
            c.scatter(&send, &mut recv, root)?;
            assert_eq!(recv, all[me * n..(me + 1) * n], "{}", tag("scatter"));
        }
        Collective::Gather => {
            let mut recv = vec![T::zeroed(); if me == root as usize { p * n } else { 0 }];
            c.gather(&input::<T>(me, n), &mut recv, root)?;
            if me == root as usize {
                let want: Vec<T> = (0..p).flat_map(|r| input::<T>(r, n)).collect();
                assert_eq!(recv, want, "{}", tag("gather"));
            }
        }
        Collective::Reduce => {
            let mut recv = vec![T::zeroed(); n];
            c.reduce(&input::<T>(me, n), &mut recv, op, root)?;
            if me == root as usize {
                assert_eq!(recv, reduced(p, n, op), "{}", tag("reduce"));
            }
            let mut inplace = input::<T>(me, n);
            c.reduce_in_place(&mut inplace, op, root)?;
            if me == root as usize {
                assert_eq!(inplace, reduced(p, n, op), "{}", tag("reduce in place"));
            }
        }
        Collective::Allgather => {
            let mut recv = vec![T::zeroed(); p * n];
            c.allgather(&input::<T>(me, n), &mut recv)?;
            let want: Vec<T> = (0..p).flat_map(|r| input::<T>(r, n)).collect();
            assert_eq!(recv, want, "{}", tag("allgather"));
            // Uneven counts, as the CG solver's last block: rank r has n + r elements.
            let counts: Vec<usize> = (0..p).map(|r| n + r).collect();
            let displs: Vec<usize> = counts
                .iter()
                .scan(0, |s, &c| {
                    let d = *s;
                    *s += c;
                    Some(d)
                })
                .collect();
            let total: usize = counts.iter().sum();
            let mut v = vec![T::zeroed(); total];
            v[displs[me]..displs[me] + counts[me]].copy_from_slice(&input::<T>(me, counts[me]));
            c.allgatherv_in_place(&mut v, &counts, &displs)?;
            let want: Vec<T> = (0..p).flat_map(|r| input::<T>(r, counts[r])).collect();
            assert_eq!(v, want, "{}", tag("allgatherv"));
            // The same blocks with a gap of one element after each, which holds what this rank
            // put there (different on every rank) and must keep it: no two blocks adjacent, so
            // none may travel together with what lies between them.
            let gapped: Vec<usize> = (0..p).map(|r| displs[r] + r).collect();
            let fill = input::<T>(p + me, total + p);
            let mut v = fill.clone();
            let mine = gapped[me]..gapped[me] + counts[me];
            v[mine].copy_from_slice(&input::<T>(me, counts[me]));
            c.allgatherv_in_place(&mut v, &counts, &gapped)?;
            for r in 0..p {
                let got = &v[gapped[r]..gapped[r] + counts[r]];
                assert_eq!(
                    got,
                    &input::<T>(r, counts[r])[..],
                    "{}",
                    tag("gapped allgatherv")
                );
                let gap = gapped[r] + counts[r];
                assert_eq!(v[gap], fill[gap], "{}", tag("gap written"));
            }
        }
        Collective::Allreduce => {
            let mut recv = vec![T::zeroed(); n];
            c.allreduce(&input::<T>(me, n), &mut recv, op)?;
            assert_eq!(recv, reduced(p, n, op), "{}", tag("allreduce"));
        }
        Collective::Barrier => {
            // A counter on communicator rank 0, found through the communicator itself.
            let seg = c.world_ref().alloc(64)?;
            c.force(Collective::Allgather, None)?;
            let mut hs = vec![0u8; 32 * p];
            c.allgather(&seg.handle().to_bytes(), &mut hs)?;
            let zero = tca::Handle::from_bytes(&hs[..32])?;
            for round in 1..=5u64 {
                c.world_ref().signal(&zero, 0, tca::SignalOp::Add(1))?;
                c.barrier()?;
                if me == 0 {
                    assert!(
                        seg.signal_value(0)? >= round * p as u64,
                        "{}",
                        tag("barrier passed early")
                    );
                }
                c.barrier()?;
            }
        }
        Collective::ReduceScatter => {
            let mut recv = vec![T::zeroed(); n];
            c.reduce_scatter(&input::<T>(me, p * n), &mut recv, op)?;
            let full = reduced(p, p * n, op);
            assert_eq!(
                recv,
                full[me * n..(me + 1) * n],
                "{}",
                tag("reduce_scatter")
            );
        }
        Collective::Alltoall => {
            let send: Vec<T> = (0..p * n)
                .map(|i| val(me * 100 + i / n.max(1), i))
                .collect();
            let mut recv = vec![T::zeroed(); p * n];
            c.alltoall(&send, &mut recv)?;
            for j in 0..p {
                let theirs: Vec<T> = (0..p * n).map(|i| val(j * 100 + i / n.max(1), i)).collect();
                assert_eq!(
                    recv[j * n..(j + 1) * n],
                    theirs[me * n..(me + 1) * n],
                    "{}",
                    tag("alltoall")
                );
            }
        }
    }
    Ok(())
}

fn every_algorithm_at(p: u32, big: bool) {
    threads::run(p, |w| {
        let c = Comm::world(w)?;
        for alg in ALGORITHMS.iter().filter(|a| (a.supports)(p as usize)) {
            for &n in &SIZES {
                for root in [0, p - 1, p / 2] {
                    check::<f64>(&c, alg, n, root, &Op::Sum)?;
                }
            }
            check::<i32>(&c, alg, 7, p / 2, &Op::Sum)?;
            check::<u8>(&c, alg, 33, p - 1, &Op::BitXor)?;
            if big {
                check::<f64>(&c, alg, BIG, p - 1, &Op::Sum)?;
            }
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{p} ranks: {e}"));
}

#[test]
fn every_algorithm_1_to_4_ranks() {
    for p in 1..=4 {
        every_algorithm_at(p, p == 2 || p == 3);
    }
}

#[test]
fn every_algorithm_5_to_7_ranks() {
    for p in 5..=7 {
        every_algorithm_at(p, p == 5);
    }
}

/// 10 to 16 ranks (up to a whole PEACH2 sub-cluster), every algorithm that supports them:
/// on the simulated network (`TCA_TRANSPORT=sim`, as CI runs this suite), where one rank runs
/// at a time and 16 ranks cost what 16 sequential programs do. On shared memory 16 ranks on
/// a 2-core machine would take most of CI's time; there this test does nothing.
#[test]
fn every_algorithm_10_to_16_ranks_simulated() {
    if !simulated() {
        return;
    }
    for p in [10, 12, 16] {
        every_algorithm_at(p, p == 16);
    }
}

#[test]
fn every_algorithm_8_and_9_ranks() {
    for p in 8..=9 {
        every_algorithm_at(p, p == 8);
    }
}

fn builtin<T: Element>(k: usize) -> Op<T> {
    vec![
        Op::Sum,
        Op::Prod,
        Op::Min,
        Op::Max,
        Op::BitAnd,
        Op::BitOr,
        Op::BitXor,
    ]
    .swap_remove(k)
}

#[test]
fn every_op_and_type_on_reductions() {
    threads::run(5, |w| {
        let c = Comm::world(w)?;
        for alg in ALGORITHMS.iter().filter(|a| {
            matches!(
                a.collective,
                Collective::Allreduce | Collective::Reduce | Collective::ReduceScatter
            )
        }) {
            for op in [
                Op::Sum,
                Op::Prod,
                Op::Min,
                Op::Max,
                Op::custom(|a: f64, b: f64| a.max(b) + 0.0),
            ] {
                check::<f64>(&c, alg, 9, 3, &op)?;
            }
            check::<f32>(&c, alg, 9, 1, &Op::Max)?;
            for k in 0..7 {
                check::<i64>(&c, alg, 9, 2, &builtin(k))?;
                check::<u64>(&c, alg, 9, 4, &builtin(k))?;
                check::<u32>(&c, alg, 9, 0, &builtin(k))?;
                check::<u8>(&c, alg, 9, 1, &builtin(k))?;
            }
            check::<i32>(&c, alg, 9, 2, &Op::custom(|a: i32, b: i32| a.min(b)))?;
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn split_makes_working_sub_communicators() {
    threads::run(7, |w| {
        let c = Comm::world(w)?;
        let me = c.rank();
        // Odd and even ranks, reversed order by key; rank 6 takes no part.
        let color = if me == 6 { None } else { Some(me % 2) };
        let sub = c.split(color, -i64::from(me))?;
        if me == 6 {
            assert!(sub.is_none());
            return c.barrier();
        }
        let sub = sub.unwrap();
        let members: Vec<u32> = (0..6).filter(|r| r % 2 == me % 2).rev().collect();
        assert_eq!(sub.size() as usize, members.len());
        assert_eq!(sub.world_rank(sub.rank()), Some(me));
        assert_eq!(sub.world_rank(0), Some(members[0]));
        let mut x = [f64::from(me)];
        sub.allreduce_in_place(&mut x, &Op::Sum)?;
        assert_eq!(x[0], members.iter().map(|&r| f64::from(r)).sum::<f64>());
        for alg in ALGORITHMS
            .iter()
            .filter(|a| (a.supports)(sub.size() as usize))
        {
            check::<f64>(&sub, alg, 5, sub.size() - 1, &Op::Sum)?;
        }
        // A split of a split.
        let subsub = sub.split(Some(0), 0)?.unwrap();
        let mut y = [1u32];
        subsub.allreduce_in_place(&mut y, &Op::Sum)?;
        assert_eq!(y[0], sub.size());
        c.barrier()
    })
    .unwrap();
}

/// 10,000 back-to-back collectives with ranks at different speeds; every result checked.
#[test]
fn back_to_back_stress_with_random_delays() {
    threads::run(4, |w| {
        let c = Comm::world(w)?;
        let me = c.rank() as usize;
        let mut rng = 0x1234_5678_9abc_def1u64 ^ (me as u64 * 0x9e37_79b9);
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for k in 0..10_000u64 {
            let r = next();
            if r % 97 == 0 {
                std::thread::sleep(Duration::from_micros(r % 200));
            } else if r % 7 == 0 {
                std::thread::yield_now();
            }
            match k % 4 {
                0 => {
                    let mut x = [k as f64 + me as f64];
                    c.allreduce_in_place(&mut x, &Op::Sum)?;
                    assert_eq!(x[0], 4.0 * k as f64 + 6.0, "call {k}");
                }
                1 => {
                    let root = (k / 4 % 4) as u32;
                    let mut b = [if me == root as usize { k } else { 0 }; 3];
                    c.broadcast(&mut b, root)?;
                    assert_eq!(b, [k; 3], "call {k}");
                }
                2 => {
                    let mut all = [0u64; 4 * 20];
                    c.allgather(&[k + me as u64; 20], &mut all)?;
                    for r in 0..4 {
                        assert!(
                            all[r * 20..(r + 1) * 20].iter().all(|&v| v == k + r as u64),
                            "call {k}"
                        );
                    }
                }
                _ => {
                    // A large one now and then, through the chunked path.
                    let n = if k % 400 == 3 { 100_000 } else { 100 };
                    let mut v = vec![1i64; n];
                    c.allreduce_in_place(&mut v, &Op::Sum)?;
                    assert!(v.iter().all(|&x| x == 4), "call {k}");
                }
            }
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn repeated_calls_allocate_no_new_segments() {
    threads::run(3, |w| {
        let c = Comm::world(w)?;
        let mut x = vec![1.0f64; 1000];
        c.allreduce_in_place(&mut x, &Op::Sum)?;
        w.barrier()?;
        let before = w.attached_segments();
        for _ in 0..2000 {
            c.allreduce_in_place(&mut x[..10], &Op::Max)?;
            c.barrier()?;
            c.allreduce_in_place(&mut x, &Op::Sum)?;
        }
        w.barrier()?; // every rank's acknowledgements are done, and no rank has left yet
        assert_eq!(w.attached_segments(), before);
        w.barrier()
    })
    .unwrap();
}

#[test]
fn argument_errors_every_rank_sees_leave_the_communicator_usable() {
    threads::run(3, |w| {
        let c = Comm::world(w)?;
        let e = c.broadcast(&mut [1.0f64], 3).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidRank);
        let e = c
            .allreduce_in_place(&mut [1.0f64], &Op::BitXor)
            .unwrap_err();
        assert!(e.to_string().contains("not defined for f64"), "{e}");
        let e = c.force(Collective::Allreduce, Some("fastest")).unwrap_err();
        assert!(
            e.to_string()
                .contains("valid: dissemination, recursive_doubling, rabenseifner, ring, flat"),
            "{e}"
        );
        c.force(Collective::Allgather, Some("recursive_doubling"))?;
        let e = c.allgather(&[1u8], &mut [0; 3]).unwrap_err();
        assert!(e.to_string().contains("power-of-two"), "{e}");
        // No communication happened: the communicator still works.
        c.force(Collective::Allgather, None)?;
        let mut all = [0u8; 3];
        c.allgather(&[u8::try_from(c.rank()).unwrap()], &mut all)?;
        assert_eq!(all, [0, 1, 2]);
        Ok(())
    })
    .unwrap();
}

#[test]
fn buffer_errors_on_one_rank_abort_the_job_instead_of_hanging_it() {
    for case in 0..4 {
        let all = threads::run_each(3, |w| {
            let c = Comm::world(w)?;
            let bad = c.rank() == 1;
            match case {
                0 => c.allreduce(
                    &[1.0f64; 4],
                    &mut vec![0.0; if bad { 3 } else { 4 }],
                    &Op::Sum,
                ),
                1 => c.gather(&[1u8; 4], &mut vec![0; if bad { 5 } else { 12 }], 1),
                2 => c.allgather(&[1u8; 4], &mut vec![0; if bad { 11 } else { 12 }]),
                _ => c.alltoall(&[1i32; 6], &mut vec![0; if bad { 5 } else { 6 }]),
            }
        });
        let e1 = all[1].as_ref().unwrap_err();
        assert_eq!(e1.kind(), ErrorKind::InvalidArgument, "case {case}: {e1}");
        // The others either finished their part (a sender to the root needs nothing back) or
        // got an error naming the job's abort; none hangs.
        for r in [0, 2] {
            if let Err(e) = &all[r] {
                assert!(
                    matches!(e.kind(), ErrorKind::PeerDied | ErrorKind::Aborted),
                    "case {case} rank {r}: {e}"
                );
            }
        }
    }
}

#[test]
fn allgatherv_blocks_may_be_empty_anywhere_but_not_overlap() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        // Rank 1 contributes nothing, with a displacement inside rank 0's block.
        let mut v = [0u32; 4];
        if c.rank() == 0 {
            v = [1, 2, 3, 4];
        }
        c.allgatherv_in_place(&mut v, &[4, 0], &[0, 2])?;
        assert_eq!(v, [1, 2, 3, 4]);
        Ok(())
    })
    .unwrap();
    let all = threads::run_each(2, |w| {
        Comm::world(w)?.allgatherv_in_place(&mut [0u32; 4], &[3, 2], &[0, 2])
    });
    assert!(all.iter().all(|r| {
        r.as_ref()
            .is_err_and(|e| e.to_string().contains("overlap") || e.kind() == ErrorKind::PeerDied)
    }));
}

#[test]
fn min_and_max_give_the_same_bits_on_every_rank() {
    // +0 / -0 and NaN compare equal or unordered; every algorithm must still agree bitwise.
    let vals = [0.0f64, -0.0, f64::NAN, 1.0, -f64::NAN];
    for alg in Collective::Allreduce.algorithms() {
        let out = threads::run(5, |w| {
            let c = Comm::world(w)?;
            c.force(Collective::Allreduce, Some(alg.name))?;
            let me = c.rank() as usize;
            let mut x: Vec<f64> = (0..40).map(|i| vals[(i + me) % 5]).collect();
            let mut y = x.clone();
            c.allreduce_in_place(&mut x, &Op::Min)?;
            c.allreduce_in_place(&mut y, &Op::Max)?;
            Ok(x.iter()
                .chain(&y)
                .map(|v| v.to_bits())
                .collect::<Vec<u64>>())
        })
        .unwrap();
        assert!(
            out.iter().all(|o| *o == out[0]),
            "{} differs across ranks",
            alg.name
        );
    }
}

#[test]
fn mismatched_lengths_across_ranks_end_in_errors_not_hangs() {
    let all = threads::run_each(3, |w| {
        let c = Comm::world(w)?;
        c.force(Collective::Allreduce, Some("ring"))?;
        let n = if c.rank() == 1 { 16 } else { 8 };
        let mut x = vec![1.0f64; n];
        c.allreduce_in_place(&mut x, &Op::Sum)
    });
    assert!(all.iter().all(|r| r.is_err()), "{all:?}");
    assert!(
        all.iter().any(|r| r
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("buffer lengths differ")),
        "{all:?}"
    );
}

#[test]
fn panicking_user_op_is_an_error_everywhere() {
    let all = threads::run_each(4, |w| {
        let c = Comm::world(w)?;
        let op = Op::custom(|a: i64, b: i64| {
            if a == 3 || b == 3 {
                panic!("no threes")
            } else {
                a + b
            }
        });
        let mut x = [c.rank() as i64];
        c.allreduce_in_place(&mut x, &op)
    });
    assert!(all.iter().all(|r| r.is_err()), "{all:?}");
    assert!(
        all.iter()
            .any(|r| r.as_ref().unwrap_err().to_string().contains("panicked")),
        "{all:?}"
    );
}

#[test]
fn environment_forces_an_algorithm() {
    // Each collective's variable is read when a communicator is created.
    assert_eq!(Collective::Allreduce.env_var(), "TCA_COLL_ALLREDUCE");
    for c in Collective::ALL {
        assert!(c.algorithms().count() >= 1, "{c:?}");
        for a in c.algorithms() {
            assert!(
                a.cost(&Default::default(), 4, 1024) > 0.0,
                "{} {}",
                c.name(),
                a.name
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_collectives_match_the_reference(p in 1u32..7, n in 0usize..300, root_seed in 0u32..100, alg_i in 0usize..ALGORITHMS.len()) {
        let alg = &ALGORITHMS[alg_i];
        prop_assume!((alg.supports)(p as usize));
        threads::run(p, |w| {
            let c = Comm::world(w)?;
            check::<f64>(&c, alg, n, root_seed % p, &Op::Sum)?;
            check::<i64>(&c, alg, n, (root_seed + 1) % p, &Op::Max)
        }).unwrap();
    }
}

/// Reductions combine received chunks straight out of the channel slots (no copy first), so a
/// slot reused before its reader finished would corrupt the result. Back-to-back reductions of
/// more chunks than a pair has slots, with values that change every call and a reader that
/// falls behind now and then, through every reduce and allreduce algorithm: each element of
/// each call is checked.
#[test]
fn multi_chunk_reductions_never_read_a_reused_slot() {
    const N: usize = 160_000; // 1.25 MB of f64: 20 chunks of 64 KiB at 3 ranks, over 8 slots
    threads::run(3, |w| {
        let c = Comm::world(w)?;
        let me = c.rank() as u64;
        let algs = tca::coll::ALGORITHMS
            .iter()
            .filter(|a| matches!(a.collective, Collective::Reduce | Collective::Allreduce));
        for alg in algs {
            c.force(alg.collective, Some(alg.name))?;
            for k in 0..12u64 {
                if me == 0 && k % 3 == 1 {
                    std::thread::sleep(Duration::from_micros(300));
                }
                let v: Vec<f64> = (0..N as u64)
                    .map(|i| (k * 7 + me + i % 13) as f64)
                    .collect();
                let mut out = vec![0.0; N];
                let want = |i: usize| (3 * (k * 7 + i as u64 % 13) + 3) as f64;
                if alg.collective == Collective::Reduce {
                    c.reduce(&v, &mut out, &Op::Sum, 0)?;
                    if me != 0 {
                        continue;
                    }
                } else {
                    c.allreduce(&v, &mut out, &Op::Sum)?;
                }
                for (i, &x) in out.iter().enumerate() {
                    assert_eq!(x, want(i), "{} call {k} element {i}", alg.name);
                }
            }
            c.force(alg.collective, None)?;
        }
        Ok(())
    })
    .unwrap();
}

/// A peer that is alive but does not come (stopped, or computing without calling tca) holds
/// a collective for ever unless the job has a timeout (`TCA_TIMEOUT`, or
/// `World::set_timeout`): then the waiting rank gets `ErrorKind::Timeout` naming the rank it
/// waited for, and so does a two-sided receive.
#[test]
fn a_stuck_peer_is_a_timeout_that_names_it() {
    if simulated() {
        // On a simulated network a rank that computes without calling tca holds virtual
        // time still: nobody can time out meanwhile (a wait that can never end is a deadlock
        // error there instead, tests/sim.rs).
        return;
    }
    // Set by rank 0 once it has its three errors: until then rank 1 stays (a rank that left
    // would be another error), however slow a loaded machine makes the waits.
    let done = std::sync::atomic::AtomicBool::new(false);
    let all = threads::run_each(2, |w| {
        let c = Comm::world(w)?;
        if w.rank() == 1 {
            // Alive but stuck: calls nothing until rank 0 is done (or a minute), then leaves.
            let t0 = std::time::Instant::now();
            while !done.load(std::sync::atomic::Ordering::Acquire)
                && t0.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            return Ok(None);
        }
        assert_eq!(w.timeout(), None);
        w.set_timeout(Some(Duration::from_millis(200)));
        assert_eq!(w.timeout(), Some(Duration::from_millis(200)));
        let coll = c
            .allreduce(&[1.0f64; 4], &mut [0.0; 4], &Op::Sum)
            .unwrap_err();
        let mut buf = [0u8; 8];
        let p2p = c.recv(&mut buf, 1, 7).unwrap_err();
        let world = w.barrier().unwrap_err();
        done.store(true, std::sync::atomic::Ordering::Release);
        Ok(Some([coll, p2p, world]))
    });
    let errs = all[0].as_ref().unwrap().as_ref().expect("rank 0's errors");
    for e in errs {
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        assert_eq!(e.rank(), Some(1), "{e}");
        assert!(e.to_string().contains("TCA_TIMEOUT"), "{e}");
    }
    assert!(all[1].is_ok());
}

/// A communicator whose members talk through a network knows it (its algorithms are chosen
/// with the network's cost models); one within a node, or on a simulated network, does not.
#[test]
fn a_communicator_says_whether_it_spans_a_network() {
    threads::run(3, |w| {
        let c = Comm::world(w)?;
        // Over libfabric (the CI's `TCA_TRANSPORT=ofi` run) every peer is across the network.
        let ofi = std::env::var("TCA_TRANSPORT").is_ok_and(|t| t.trim() == "ofi");
        assert_eq!(c.spans_network(), ofi, "{}", w.transport());
        let alone = c.split(Some(c.rank()), 0)?.expect("every rank has a color");
        assert!(!alone.spans_network());
        Ok(())
    })
    .unwrap();
}

// ---- persistent single-copy Allgatherv (Comm::allgatherv_init) --------------------------------

/// Element `i` of rank `r`'s block in round `k`.
fn round_val(r: usize, k: u64, i: usize) -> u64 {
    ((r as u64) << 40) ^ (k << 20) ^ i as u64
}

/// Uneven blocks with gaps between them (rank 1's empty from 3 ranks on); the vector's length.
fn gappy(p: usize) -> (usize, Vec<usize>, Vec<usize>) {
    let counts: Vec<usize> = (0..p)
        .map(|r| if r == 1 && p >= 3 { 0 } else { r % 3 + 5 })
        .collect();
    let mut displs = Vec::new();
    let mut at = 2;
    for &c in &counts {
        displs.push(at);
        at += c + 3;
    }
    (at, counts, displs)
}

/// Every round, every rank's block lands in every vector and nothing else moves: 1 to 8 ranks,
/// 300 rounds, ranks late by turns (so that fast ranks run a round ahead), the block of the
/// round under way readable while the peers' blocks arrive. (With one arrival counter for
/// both buffers instead of one per buffer, this fails from 3 ranks on: checked by sabotage.)
#[test]
fn gathered_vector_holds_every_rounds_blocks() {
    for p in [1usize, 2, 3, 5, 8] {
        threads::run(u32::try_from(p).unwrap(), |w| {
            let c = Comm::world(w)?;
            let me = c.rank() as usize;
            let (len, counts, displs) = gappy(p);
            let mut g = c.allgatherv_init::<u64>(len, &counts, &displs)?;
            assert_eq!(
                (g.len(), g.block()),
                (len, displs[me]..displs[me] + counts[me])
            );
            assert!(
                g.vector()?.iter().all(|&x| x == 0),
                "zeros before the first round"
            );
            for k in 0..300u64 {
                for (i, x) in g.block_mut().iter_mut().enumerate() {
                    *x = round_val(me, k, i);
                }
                if (k + me as u64) % 7 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                if k % 5 == 4 {
                    g.run(&c)?;
                } else {
                    let sum = g.run_overlapped(&c, |block| {
                        assert!(
                            block
                                .iter()
                                .enumerate()
                                .all(|(i, &x)| x == round_val(me, k, i)),
                            "p={p} rank {me} round {k}: the block under way"
                        );
                        block.len()
                    })?;
                    assert_eq!(sum, counts[me]);
                }
                assert_eq!(g.rounds(), k + 1);
                let v = g.vector()?;
                for r in 0..p {
                    for i in 0..counts[r] {
                        assert_eq!(
                            v[displs[r] + i],
                            round_val(r, k, i),
                            "p={p} rank {me} round {k}: element {i} of rank {r}'s block"
                        );
                    }
                }
                // The gaps are nobody's: never written.
                let owned =
                    |j: usize| (0..p).any(|r| (displs[r]..displs[r] + counts[r]).contains(&j));
                assert!((0..len).filter(|&j| !owned(j)).all(|j| v[j] == 0));
            }
            Ok(())
        })
        .unwrap();
    }
}

/// `f64` through `run`, on a split communicator: what the CG solver does.
#[test]
fn gathered_vector_runs_on_a_sub_communicator() {
    threads::run(5, |w| {
        let world = Comm::world(w)?;
        let Some(c) = world.split(Some(world.rank() % 2), 0)? else {
            unreachable!("every rank has a colour")
        };
        let (p, me) = (c.size() as usize, c.rank() as usize);
        let counts = vec![3usize; p];
        let displs: Vec<usize> = (0..p).map(|r| 3 * r).collect();
        let mut g = c.allgatherv_init::<f64>(3 * p, &counts, &displs)?;
        for k in 0..50 {
            g.block_mut().fill((me * 100 + k) as f64);
            g.run(&c)?;
            let want: Vec<f64> = (0..p).flat_map(|r| [(r * 100 + k) as f64; 3]).collect();
            assert_eq!(g.vector()?, &want[..]);
        }
        Ok(())
    })
    .unwrap();
}

/// A communicator other than the vector's, even one with the same members in another order,
/// is refused (and the job aborted: the peers would wait for this rank's block).
#[test]
fn gathered_vector_refuses_another_communicator() {
    for case in ["reversed", "subset"] {
        let all = threads::run_each(4, |w| {
            let world = Comm::world(w)?;
            let other = match case {
                "reversed" => world.split(Some(0), -i64::from(world.rank()))?,
                _ => world.split(Some(world.rank() / 2), 0)?,
            }
            .expect("every rank has a colour");
            let mut g = world.allgatherv_init::<u8>(8, &[2; 4], &[0, 2, 4, 6])?;
            g.run(&world)?;
            Ok(g.run(&other).expect_err("another communicator"))
        });
        for (r, e) in all.iter().enumerate() {
            // Every rank refuses its own call; one whose peer aborted first may see that.
            let kind = match e {
                Ok(e) => e.kind(),
                Err(e) => e.kind(),
            };
            assert!(
                matches!(
                    kind,
                    ErrorKind::InvalidArgument | ErrorKind::Aborted | ErrorKind::PeerDied
                ),
                "{case} rank {r}: {e:?}"
            );
        }
        assert!(
            all.iter().any(|e| e
                .as_ref()
                .is_ok_and(|e| e.kind() == ErrorKind::InvalidArgument)),
            "{case}: {all:?}"
        );
    }
}

/// A panic in a round's computation leaves the vector refusing further rounds and reads (its
/// round was not finished, so where peers write is no longer known) and aborts the job, so
/// the peer does not wait for a block that cannot come.
#[test]
fn gathered_vector_after_a_failed_round_refuses_use() {
    let all = threads::run_each(2, |w| {
        let c = Comm::world(w)?;
        let mut g = c.allgatherv_init::<u64>(4, &[2, 2], &[0, 2])?;
        g.block_mut().fill(7);
        g.run(&c)?;
        g.block_mut().fill(8);
        if c.rank() == 0 {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                g.run_overlapped(&c, |_| panic!("the computation fails"))
            }));
            assert!(r.is_err(), "the panic goes on to the caller");
            assert_eq!(g.vector().unwrap_err().kind(), ErrorKind::Aborted);
            assert_eq!(g.run(&c).unwrap_err().kind(), ErrorKind::Aborted);
            return Ok(());
        }
        // Rank 0 put its block before its computation: this round completes, or ends in
        // the abort; the next one cannot complete and must end in an error, not a hang.
        if g.run(&c).is_ok() {
            assert_eq!(g.vector()?, &[8, 8, 8, 8]);
        }
        Err(g.run(&c).expect_err("rank 0 gave up"))
    });
    assert!(all[0].is_ok(), "{:?}", all[0]);
    let e = all[1].as_ref().unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Aborted | ErrorKind::PeerDied),
        "{e}"
    );
}

/// Ranks that describe different vectors get an error on every rank, none hangs; the
/// communicator stays usable.
#[test]
fn gathered_vector_descriptions_must_agree() {
    let all = threads::run(3, |w| {
        let c = Comm::world(w)?;
        let len = if c.rank() == 2 { 13 } else { 12 };
        let lens = c
            .allgatherv_init::<u32>(len, &[4, 4, 4], &[0, 4, 8])
            .unwrap_err();
        // The same numbers of another element type put other bytes.
        let types = if c.rank() == 1 {
            c.allgatherv_init::<u32>(12, &[4, 4, 4], &[0, 4, 8])
                .map(drop)
        } else {
            c.allgatherv_init::<u64>(12, &[4, 4, 4], &[0, 4, 8])
                .map(drop)
        }
        .unwrap_err();
        let counts = c
            .allgatherv_init::<u8>(12, &[4, 4, c.rank() as usize], &[0, 4, 8])
            .unwrap_err();
        // Too large for the address space: the same error everywhere, nothing allocated.
        let huge = c
            .allgatherv_init::<f64>(usize::MAX / 4, &[0, 0, 0], &[0, 0, 0])
            .unwrap_err();
        c.barrier()?;
        Ok([lens, types, counts, huge])
    })
    .unwrap();
    for (r, es) in all.iter().enumerate() {
        for (e, what) in es.iter().zip([
            "vector length",
            "element type",
            "count of rank 2",
            "overflow",
        ]) {
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "rank {r}: {e}");
            assert!(e.to_string().contains(what), "rank {r}: {e}");
        }
    }
}

/// A rank that leaves in the middle of the rounds: the others' waits end in an error that names
/// it, not a hang.
#[test]
fn gathered_vector_names_a_rank_that_left() {
    let all = threads::run_each(3, |w| {
        let c = Comm::world(w)?;
        let mut g = c.allgatherv_init::<u64>(6, &[2, 2, 2], &[0, 2, 4])?;
        for k in 0..20 {
            if c.rank() == 1 && k == 10 {
                return Err(tca::Error::program("rank 1 gives up"));
            }
            g.run(&c)?;
        }
        Ok(())
    });
    assert!(all[1].is_err());
    for r in [0, 2] {
        let e = all[r]
            .as_ref()
            .expect_err("waits for rank 1's block of round 10");
        assert!(e.to_string().contains("rank 1"), "rank {r}: {e}");
    }
}
