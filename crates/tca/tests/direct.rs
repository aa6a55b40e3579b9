//! Single-copy collectives (`tca::coll::direct`): every collective over `Comm::buffer`s, at 1
//! to 6 ranks (thread mode), at slices that do not start at the buffer's start, against a
//! sequential reference; mixed with ordinary memory (every rank falls back alike); mismatched
//! lengths (an error on every rank, no wrong result). Under `TCA_TRANSPORT=sim` the same
//! calls take the channel algorithms (`single_copy()` is false there) and must agree too.
//! Multi-process runs are in `crates/tca-tests` (`coll`).

use tca::coll::{Buffer, SINGLE_COPY_ALLREDUCE_RANKS, SINGLE_COPY_MIN};
use tca::{Comm, ErrorKind, Op, threads};

/// Elements per block: over the default threshold, more than two of the reductions' 64 KiB
/// steps and not a multiple of one.
const N: usize = 16_384 + 389;
/// Where the slices start in their buffers (elements).
const AT: usize = 5;

/// Whether the suite runs on shared memory (not `TCA_TRANSPORT=sim` or `ofi`).
fn on_shm() -> bool {
    std::env::var("TCA_TRANSPORT").map_or(true, |t| matches!(t.trim(), "" | "auto" | "shm"))
}

fn v(rank: usize, i: usize) -> f64 {
    ((rank * 7 + i * 3) % 11) as f64 + 1.0
}

/// A buffer of `len + AT` elements whose slice `AT..` holds `f(i)`.
fn filled(c: &Comm<'_>, len: usize, f: impl Fn(usize) -> f64) -> tca::Result<Buffer<f64>> {
    let mut b = c.buffer::<f64>(len + AT)?;
    for (i, x) in b[AT..].iter_mut().enumerate() {
        *x = f(i);
    }
    Ok(b)
}

/// Runs every collective once over `Buffer`s (rank `heap` uses ordinary memory for the
/// buffers peers would read, if any) and returns what differs from the reference, and how
/// many calls went single-copy.
fn every_collective(c: &Comm<'_>, heap: Option<usize>) -> tca::Result<(Vec<String>, u64)> {
    let (p, me) = (c.size() as usize, c.rank() as usize);
    let before = c.single_copy_calls();
    let mut wrong = Vec::new();
    let mut expect = |what: &str, ok: bool| {
        if !ok {
            wrong.push(format!("p={p} rank {me}: {what}"));
        }
    };
    // The buffers peers read: in tca's memory, or (on rank `heap`) ordinary copies of them.
    let source = |len: usize, f: &dyn Fn(usize) -> f64| -> tca::Result<(Buffer<f64>, Vec<f64>)> {
        let b = filled(c, len, f)?;
        let v = b[AT..].to_vec();
        Ok((b, v))
    };
    let ours = heap == Some(me);
    let sum = |len: usize, from: usize| -> Vec<f64> {
        (0..len)
            .map(|i| (0..p).map(|r| v(r, from + i)).sum())
            .collect()
    };

    for root in [0, p - 1] {
        let rt = u32::try_from(root).expect("few ranks");
        // Broadcast.
        let mut b = filled(c, N, |i| if me == root { v(root, i) } else { 0.0 })?;
        let mut h = b[AT..].to_vec();
        if ours {
            c.broadcast(&mut h, rt)?;
        } else {
            c.broadcast(&mut b[AT..], rt)?;
            h.copy_from_slice(&b[AT..]);
        }
        expect(
            "broadcast",
            h == (0..N).map(|i| v(root, i)).collect::<Vec<_>>(),
        );

        // Scatter.
        let s = source(p * N, &|i| v(9, i))?;
        let mut r = c.buffer::<f64>(N)?;
        if ours {
            c.scatter(&s.1, &mut r, rt)?;
        } else {
            c.scatter(&s.0[AT..], &mut r, rt)?;
        }
        expect("scatter", r[..] == s.1[me * N..(me + 1) * N]);

        // Gather (on rank `heap` into ordinary memory too: a root's receive buffer there
        // makes the others offer theirs instead of writing into it).
        let s = source(N, &|i| v(me, i))?;
        let mut r = c.buffer::<f64>(p * N)?;
        let mut hr = vec![0.0; p * N];
        if ours {
            c.gather(&s.1, &mut hr, rt)?;
            r.copy_from_slice(&hr);
        } else {
            c.gather(&s.0[AT..], &mut r, rt)?;
        }
        let all: Vec<f64> = (0..p).flat_map(|q| (0..N).map(move |i| v(q, i))).collect();
        expect("gather", me != root || r[..] == all[..]);

        // Reduce, by a sum and by a maximum.
        let mut r = c.buffer::<f64>(N)?;
        let max: Vec<f64> = (0..N)
            .map(|i| (0..p).map(|q| v(q, i)).fold(0.0, f64::max))
            .collect();
        let mut hr = vec![0.0; N];
        for (op, want) in [(&Op::Sum, sum(N, 0)), (&Op::Max, max)] {
            if ours {
                // Both buffers in ordinary memory: a root folds alone from the others'.
                c.reduce(&s.1, &mut hr, op, rt)?;
                r.copy_from_slice(&hr);
            } else {
                c.reduce(&s.0[AT..], &mut r, op, rt)?;
            }
            expect("reduce", me != root || r[..] == want[..]);
        }
    }

    // Allgather, allreduce, reduce-scatter, alltoall: every rank's buffer is read.
    let s = source(N, &|i| v(me, i))?;
    let mut r = c.buffer::<f64>(p * N)?;
    if ours {
        c.allgather(&s.1, &mut r)?;
    } else {
        c.allgather(&s.0[AT..], &mut r)?;
    }
    let all: Vec<f64> = (0..p).flat_map(|q| (0..N).map(move |i| v(q, i))).collect();
    expect("allgather", r[..] == all[..]);

    let mut r = c.buffer::<f64>(N)?;
    if ours {
        c.allreduce(&s.1, &mut r, &Op::Sum)?;
    } else {
        c.allreduce(&s.0[AT..], &mut r, &Op::Sum)?;
    }
    expect("allreduce", r[..] == sum(N, 0)[..]);

    let s = source(p * N, &|i| v(me, i))?;
    let mut r = c.buffer::<f64>(N)?;
    if ours {
        c.reduce_scatter(&s.1, &mut r, &Op::Sum)?;
    } else {
        c.reduce_scatter(&s.0[AT..], &mut r, &Op::Sum)?;
    }
    expect("reduce_scatter", r[..] == sum(N, me * N)[..]);

    let s = source(p * N, &|i| (me * 100_000 + i) as f64)?;
    let mut r = c.buffer::<f64>(p * N)?;
    if ours {
        c.alltoall(&s.1, &mut r)?;
    } else {
        c.alltoall(&s.0[AT..], &mut r)?;
    }
    expect(
        "alltoall",
        (0..p).all(|j| (0..N).all(|i| r[j * N + i] == (j * 100_000 + me * N + i) as f64)),
    );
    Ok((wrong, c.single_copy_calls() - before))
}

/// Calls of `every_collective` that go single-copy when every buffer is in tca's memory:
/// broadcast, scatter, gather and two reduces per root, then four, the allreduce only up to
/// `SINGLE_COPY_ALLREDUCE_RANKS` ranks or from `ALLREDUCE_CROWDED_MIN` bytes.
fn direct_count(p: usize) -> u64 {
    if p == 1 {
        return 0;
    }
    2 * 5 + 3 + u64::from(allreduce_direct(p))
}

/// Whether an allreduce of `N` f64s goes single-copy on `p` ranks.
fn allreduce_direct(p: usize) -> bool {
    allreduce_too(p) || N * 8 >= tca::coll::ALLREDUCE_CROWDED_MIN
}

/// Whether a single-copy allreduce runs on `p` ranks, and an allgather's blocks are pushed:
/// few ranks, each with a core.
fn allreduce_too(p: usize) -> bool {
    p <= SINGLE_COPY_ALLREDUCE_RANKS && p <= tca::bootstrap::job_cpus() as usize
}

/// The world's communicator, with the single-copy threshold at its default for ranks with a
/// core each (with more ranks than cores it is higher; the tests' blocks sit just above it).
fn comm(w: &tca::World) -> tca::Result<Comm<'_>> {
    let c = Comm::world(w)?;
    c.set_single_copy_min(Some(SINGLE_COPY_MIN));
    Ok(c)
}

/// The same with rank `heap`'s buffers in ordinary memory: per root, the broadcast and the
/// scatter still go single-copy unless the heap rank is the root (its buffer is the one
/// read), both reduces only if it is (the root then folds alone from the others' buffers),
/// the gather always (the others write into the root's receive buffer, or, where that is the
/// heap rank's, the root reads theirs); of the all-to-all forms only the allgather, where
/// few ranks with a core each push their blocks into every receive buffer (all in tca's
/// memory: only the heap rank's sources are not).
fn mixed_count(p: usize) -> u64 {
    [0, p - 1].iter().map(|_| 3).sum::<u64>() + u64::from(allreduce_too(p))
}

#[test]
fn every_collective_in_one_copy_matches_the_reference() {
    for p in 1..=6u32 {
        let got = threads::run(p, |w| {
            let c = comm(w)?;
            let r = every_collective(&c, None)?;
            Ok((r, c.single_copy()))
        })
        .unwrap();
        for ((wrong, calls), single) in got {
            assert!(wrong.is_empty(), "{wrong:#?}");
            assert_eq!(
                single,
                on_shm() && p > 1,
                "p={p}: single copy where memory is shared"
            );
            let want = if single { direct_count(p as usize) } else { 0 };
            assert_eq!(calls, want, "p={p}: single-copy calls");
        }
    }
}

#[test]
fn ordinary_memory_on_one_rank_falls_back_on_every_rank() {
    for p in [2u32, 3, 5] {
        for heap in [0, p as usize - 1] {
            let got = threads::run(p, |w| {
                let c = comm(w)?;
                let r = every_collective(&c, Some(heap))?;
                Ok((r, c.single_copy()))
            })
            .unwrap();
            for (r, ((wrong, calls), single)) in got.into_iter().enumerate() {
                assert!(wrong.is_empty(), "{wrong:#?}");
                let want = if single { mixed_count(p as usize) } else { 0 };
                assert_eq!(calls, want, "p={p} heap={heap} rank {r}: single-copy calls");
            }
        }
    }
}

#[test]
fn below_the_threshold_and_when_forced_the_channels_run() {
    let got = threads::run(2, |w| {
        let c = comm(w)?;
        let s = filled(&c, 64, |i| v(0, i))?;
        let mut r = c.buffer::<f64>(64)?;
        c.allreduce(&s[AT..], &mut r, &Op::Sum)?;
        let small = c.single_copy_calls();
        let s = filled(&c, N, |i| v(0, i))?;
        let mut r = c.buffer::<f64>(N)?;
        c.force(tca::Collective::Allreduce, Some("ring"))?;
        c.allreduce(&s[AT..], &mut r, &Op::Sum)?;
        let forced = c.single_copy_calls();
        c.force(tca::Collective::Allreduce, None)?;
        c.set_single_copy_min(None);
        c.allreduce(&s[AT..], &mut r, &Op::Sum)?;
        let off = c.single_copy_calls();
        c.set_single_copy_min(Some(SINGLE_COPY_MIN));
        c.allreduce(&s[AT..], &mut r, &Op::Sum)?;
        Ok((
            small,
            forced,
            off,
            c.single_copy_calls(),
            c.single_copy(),
            r[0],
        ))
    })
    .unwrap();
    for (small, forced, off, on, single, x) in got {
        assert_eq!((small, forced, off), (0, 0, 0));
        assert_eq!(on, u64::from(single && allreduce_direct(2)));
        assert_eq!(x, 2.0 * v(0, 0));
    }
}

#[test]
fn rooted_collectives_stream_through_the_channels_below_their_own_threshold() {
    // By default, with a core per rank, broadcast, scatter, gather and reduce go single-copy
    // from `SINGLE_COPY_ROOTED_MIN` (below, the root streams through the rings), the others
    // from `SINGLE_COPY_MIN`; a threshold set applies to all. Run only where the defaults
    // hold (no `TCA_SINGLE_COPY`, ranks not crowded, shared memory).
    use tca::Collective::{Allgather, Broadcast, Gather, Reduce, Scatter};
    use tca::coll::SINGLE_COPY_ROOTED_MIN;
    if std::env::var("TCA_SINGLE_COPY").is_ok() || tca::bootstrap::job_cpus() < 2 || !on_shm() {
        return;
    }
    let got = threads::run(2, |w| {
        let c = Comm::world(w)?;
        let mins = (c.single_copy_min(), c.single_copy_min_rooted());
        let below = SINGLE_COPY_ROOTED_MIN / 8 - 1;
        let at = SINGLE_COPY_ROOTED_MIN / 8;
        let mut s = filled(&c, 2 * at, |i| v(c.rank() as usize, i))?;
        let mut r = c.buffer::<f64>(2 * at)?;
        let mut calls = Vec::new();
        for n in [below, at] {
            let before = c.single_copy_calls();
            c.broadcast(&mut s[AT..AT + n], 0)?;
            c.scatter(&s[AT..AT + 2 * n], &mut r[..n], 1)?;
            c.gather(&s[AT..AT + n], &mut r[..2 * n], 0)?;
            c.reduce(&s[AT..AT + n], &mut r[..n], &Op::Sum, 1)?;
            calls.push(c.single_copy_calls() - before);
        }
        // The all-to-all forms keep the lower threshold.
        let before = c.single_copy_calls();
        c.allgather(&s[AT..AT + below], &mut r[..2 * below])?;
        calls.push(c.single_copy_calls() - before);
        // A threshold set applies to the rooted collectives too.
        c.set_single_copy_min(Some(SINGLE_COPY_MIN));
        let before = c.single_copy_calls();
        c.broadcast(&mut s[AT..AT + below], 0)?;
        calls.push(c.single_copy_calls() - before);
        let says = [Broadcast, Scatter, Gather, Reduce]
            .map(|k| c.single_copy_for(k, SINGLE_COPY_MIN) && c.single_copy_for(k, below * 8));
        Ok((
            mins,
            calls,
            says,
            c.single_copy_for(Allgather, SINGLE_COPY_MIN),
        ))
    })
    .unwrap();
    for (mins, calls, says, allgather) in got {
        assert_eq!(mins, (Some(SINGLE_COPY_MIN), Some(SINGLE_COPY_ROOTED_MIN)));
        assert_eq!(
            calls,
            [0, 4, 1, 1],
            "below, at the rooted threshold; allgather; set"
        );
        assert_eq!(says, [true; 4]);
        assert!(allgather);
    }
}

#[test]
fn mismatched_lengths_are_an_error_on_every_rank() {
    // Rank 1 broadcasts into a longer buffer than the root's: every rank ends with an error
    // (rank 1 names the mismatch; the root waits for an answer that never comes and learns
    // of the abort), none hangs, and rank 1's buffer is not half overwritten by a wrong
    // length. Only where the call goes single-copy: the channels detect it their own way.
    let got = threads::run_each(2, |w| {
        let c = comm(w)?;
        let n = if c.rank() == 1 { N + 8 } else { N };
        let mut b = filled(&c, n, |_| if c.rank() == 0 { 3.0 } else { 7.0 })?;
        let r = c.broadcast(&mut b[AT..], 0);
        Ok((r.map_err(|e| e.kind()), c.single_copy(), b[AT]))
    });
    let Some(got) = failed_everywhere(got) else {
        return;
    };
    assert_eq!(got[1].2, 7.0, "rank 1's buffer untouched");
}

/// One rank's end of a call: its result, whether the communicator goes single-copy, and what
/// its buffer then held.
type Outcome<T> = (Result<(), ErrorKind>, bool, T);

/// The per-rank results of a call whose arguments rank 1 got wrong: `None` where the call did
/// not go single-copy (the channels detect it their own way), else the results, having
/// checked that every rank failed and rank 1 with `InvalidArgument`.
fn failed_everywhere<T: std::fmt::Debug>(
    got: Vec<tca::Result<Outcome<T>>>,
) -> Option<Vec<Outcome<T>>> {
    let got: Vec<_> = got.into_iter().map(Result::unwrap).collect();
    if !got[0].1 {
        return None;
    }
    assert!(
        got.iter().all(|(r, _, _)| r.is_err()),
        "every rank fails: {got:?}"
    );
    assert_eq!(got[1].0, Err(ErrorKind::InvalidArgument), "{got:?}");
    Some(got)
}

/// A gather's senders write into the root's buffer: one whose block is longer than the
/// root expects is refused before it writes a byte (every rank fails, the root's buffer holds
/// only what the root put there).
#[test]
fn a_gather_sender_with_a_longer_block_writes_nothing_into_the_root() {
    let got = threads::run_each(2, |w| {
        let c = comm(w)?;
        let n = if c.rank() == 1 { N + 8 } else { N };
        let s = filled(&c, n, |_| 7.0)?;
        let mut r = c.buffer::<f64>(2 * N)?;
        let res = c.gather(&s[AT..], &mut r, 0);
        Ok((res.map_err(|e| e.kind()), c.single_copy(), r.to_vec()))
    });
    let Some(got) = failed_everywhere(got) else {
        return;
    };
    assert!(
        got[0].2[N..].iter().all(|&x| x == 0.0),
        "nothing written into the root's buffer past its own block"
    );
}

/// A reduce whose ranks pass lengths on either side of the split's threshold (one rank folds
/// alone, the other splits) ends in an error on every rank, whichever is the root: it does
/// not hang with each waiting for a message of the other's protocol.
#[test]
fn a_reduce_with_lengths_across_the_split_fails_everywhere() {
    let small = tca::coll::REDUCE_SPLIT_MIN / 8 - 64;
    let large = tca::coll::REDUCE_SPLIT_MIN / 8 + 64;
    for larger in [0u32, 1] {
        let got = threads::run_each(2, |w| {
            let c = comm(w)?;
            let n = if c.rank() == larger { large } else { small };
            let s = filled(&c, n, |_| 1.0)?;
            let mut r = c.buffer::<f64>(n)?;
            let res = c.reduce(&s[AT..], &mut r[..], &Op::Sum, 0);
            Ok((
                res.map_err(|e| e.kind()),
                c.single_copy_for(tca::Collective::Reduce, 8 * small),
            ))
        });
        straddle_failed_everywhere(got, &format!("rank {larger} larger"));
    }
}

/// Checks the per-rank results of a call whose ranks passed lengths on either side of a
/// threshold (`what` says which case), each with whether the smaller length goes
/// single-copy: where it does, every rank failed and one named the mismatch.
fn straddle_failed_everywhere(got: Vec<tca::Result<(Result<(), ErrorKind>, bool)>>, what: &str) {
    let got: Vec<_> = got.into_iter().map(Result::unwrap).collect();
    if !got[0].1 {
        return;
    }
    assert!(
        got.iter().all(|(r, _)| r.is_err()),
        "{what}: every rank fails: {got:?}"
    );
    assert!(
        got.iter()
            .any(|(r, _)| *r == Err(ErrorKind::InvalidArgument)),
        "{what}: the mismatch is named: {got:?}"
    );
}

#[test]
fn buffers_are_zeroed_slices_and_dropping_one_unregisters_it() {
    threads::run(2, |w| {
        let c = comm(w)?;
        let mut a = c.buffer::<u32>(1000)?;
        assert!(a.iter().all(|&x| x == 0));
        a[999] = 5;
        assert_eq!(a.len(), 1000);
        assert_eq!(a.iter().sum::<u32>(), 5);
        let empty = c.buffer::<u8>(0)?;
        assert!(empty.is_empty());
        drop(a);
        // A new buffer, then a collective over it: nothing of the dropped one is offered.
        let s = filled(&c, N, |i| v(c.rank() as usize, i))?;
        let mut r = c.buffer::<f64>(2 * N)?;
        c.allgather(&s[AT..], &mut r)?;
        assert_eq!(r[N + 1], v(1, 1));
        Ok(())
    })
    .unwrap();
}

/// The started (non-blocking) collectives over `Buffer`s: all eight outstanding at once in one
/// scope, waited for last-first, against the reference; they go single-copy as the blocking
/// ones do, and fall back alike where one rank's buffers are ordinary memory (`heap`).
fn started(c: &Comm<'_>, heap: Option<usize>) -> tca::Result<(Vec<String>, u64)> {
    let (p, me) = (c.size() as usize, c.rank() as usize);
    let ours = heap == Some(me);
    let root = p - 1;
    let rt = u32::try_from(root).expect("few ranks");
    let before = c.single_copy_calls();
    // What peers read: in tca's memory, or (on rank `heap`) an ordinary copy.
    let src = |len: usize, f: &dyn Fn(usize) -> f64| -> tca::Result<Vec<f64>> {
        Ok(filled(c, len, f)?[AT..].to_vec())
    };
    let bufs = |len: usize, f: &dyn Fn(usize) -> f64| -> tca::Result<(Buffer<f64>, Vec<f64>)> {
        Ok((filled(c, len, f)?, src(len, f)?))
    };
    let mut b = filled(c, N, |i| if me == 0 { v(0, i) } else { 0.0 })?;
    let mut bh = b[AT..].to_vec();
    let sc = bufs(p * N, &|i| v(9, i))?;
    let mine = bufs(N, &|i| v(me, i))?;
    let big = bufs(p * N, &|i| v(me, i))?;
    let at = bufs(p * N, &|i| (me * 100_000 + i) as f64)?;
    let (mut sr, mut gr, mut rr) = (c.buffer::<f64>(N)?, c.buffer(p * N)?, c.buffer(N)?);
    let (mut ag, mut ar, mut rs) = (c.buffer::<f64>(p * N)?, c.buffer(N)?, c.buffer(N)?);
    let mut ta = c.buffer::<f64>(p * N)?;
    let sum = Op::Sum;
    c.scope(|s| {
        let (sc, mine, big, at): (&[f64], &[f64], &[f64], &[f64]) = if ours {
            (&sc.1, &mine.1, &big.1, &at.1)
        } else {
            (&sc.0[AT..], &mine.0[AT..], &big.0[AT..], &at.0[AT..])
        };
        let bcast: &mut [f64] = if ours && me == 0 {
            &mut bh
        } else {
            &mut b[AT..]
        };
        let mut reqs = vec![
            s.ibroadcast(bcast, 0)?,
            s.iscatter(sc, &mut sr, rt)?,
            s.igather(mine, &mut gr, rt)?,
            s.ireduce(mine, &mut rr, &sum, rt)?,
            s.iallgather(mine, &mut ag)?,
            s.iallreduce(mine, &mut ar, &sum)?,
            s.ireduce_scatter(big, &mut rs, &sum)?,
            s.ialltoall(at, &mut ta)?,
        ];
        while let Some(mut r) = reqs.pop() {
            r.wait()?;
        }
        Ok(())
    })?;
    if !(ours && me == 0) {
        bh.copy_from_slice(&b[AT..]);
    }
    let mut wrong = Vec::new();
    let mut expect = |what: &str, ok: bool| {
        if !ok {
            wrong.push(format!("p={p} rank {me}: started {what}"));
        }
    };
    let sum_at = |len: usize, from: usize| -> Vec<f64> {
        (0..len)
            .map(|i| (0..p).map(|r| v(r, from + i)).sum())
            .collect()
    };
    let all: Vec<f64> = (0..p).flat_map(|q| (0..N).map(move |i| v(q, i))).collect();
    expect(
        "broadcast",
        bh == (0..N).map(|i| v(0, i)).collect::<Vec<_>>(),
    );
    expect("scatter", sr[..] == sc.1[me * N..(me + 1) * N]);
    expect("gather", me != root || gr[..] == all[..]);
    expect("reduce", me != root || rr[..] == sum_at(N, 0)[..]);
    expect("allgather", ag[..] == all[..]);
    expect("allreduce", ar[..] == sum_at(N, 0)[..]);
    expect("reduce_scatter", rs[..] == sum_at(N, me * N)[..]);
    expect(
        "alltoall",
        (0..p).all(|j| (0..N).all(|i| ta[j * N + i] == (j * 100_000 + me * N + i) as f64)),
    );
    Ok((wrong, c.single_copy_calls() - before))
}

#[test]
fn started_collectives_over_buffers_go_single_copy() {
    for p in 1..=4u32 {
        let got = threads::run(p, |w| {
            let c = comm(w)?;
            let r = started(&c, None)?;
            Ok((r, c.single_copy()))
        })
        .unwrap();
        for ((wrong, calls), single) in got {
            assert!(wrong.is_empty(), "{wrong:#?}");
            // Broadcast, scatter, gather, reduce, allgather, reduce-scatter, alltoall, and
            // the allreduce where it may.
            let want = if single && p > 1 {
                7 + u64::from(allreduce_direct(p as usize))
            } else {
                0
            };
            assert_eq!(calls, want, "p={p}: single-copy calls");
        }
    }
    // Rank 1's buffers in ordinary memory: the broadcast (root 0) and the scatter (root 2)
    // read only their root's buffer and still go single-copy, and so does the gather (rank 1
    // writes into the root's receive buffer); the reduce (which reads rank 1's) and the
    // all-to-all forms fall back, but for the allgather where few ranks with a core each
    // push their blocks (every receive buffer is in tca's memory).
    let got = threads::run(3, |w| {
        let c = comm(w)?;
        let r = started(&c, Some(1))?;
        Ok((r, c.single_copy()))
    })
    .unwrap();
    for ((wrong, calls), single) in got {
        assert!(wrong.is_empty(), "{wrong:#?}");
        assert_eq!(
            calls,
            if single {
                3 + u64::from(allreduce_too(3))
            } else {
                0
            },
            "heap rank 1: single-copy calls"
        );
    }
}

/// A broadcast whose ranks pass lengths on either side of the split's threshold, with either
/// rank the larger, and the root's buffer in tca's memory or in ordinary memory (its offer
/// then carries no segment, only its length): an error on every rank, not a wait for a
/// message of the other protocol. A root that falls back to the channels does not wait for
/// its reader, so it may learn of the failure only in its next call (a barrier here), as
/// with any mismatch the channels find on the receiving side.
#[test]
fn a_broadcast_with_lengths_across_the_split_fails_everywhere() {
    use tca::coll::BCAST_SPLIT_MIN;
    let (small, large) = (BCAST_SPLIT_MIN - 64, BCAST_SPLIT_MIN + 64);
    for larger in [0u32, 1] {
        for heap_root in [false, true] {
            let got = threads::run_each(2, |w| {
                let c = comm(w)?;
                let n = if c.rank() == larger { large } else { small };
                let mut b = c.buffer::<u8>(n)?;
                let mut h = vec![1u8; n];
                let buf: &mut [u8] = if heap_root && c.rank() == 0 {
                    &mut h
                } else {
                    &mut b
                };
                let res = c.broadcast(buf, 0).and_then(|()| c.barrier());
                Ok((
                    res.map_err(|e| e.kind()),
                    c.single_copy_for(tca::Collective::Broadcast, small),
                ))
            });
            straddle_failed_everywhere(
                got,
                &format!("rank {larger} larger, root in ordinary memory {heap_root}"),
            );
        }
    }
}

#[test]
fn a_split_broadcast_fills_every_byte_of_every_buffer() {
    // From `BCAST_SPLIT_MIN` bytes, with few ranks each on a core, every rank copies a part
    // of the root's buffer into every other rank's: lengths on both sides of the threshold
    // and not a whole number of 64-byte units (the last part takes the rest), from either
    // root, with a reader's buffer in ordinary memory (the readers then read it whole).
    use tca::coll::BCAST_SPLIT_MIN;
    let lens = [
        BCAST_SPLIT_MIN - 1,
        BCAST_SPLIT_MIN,
        BCAST_SPLIT_MIN + 63,
        (1 << 20) + 5,
    ];
    let pattern = |root: usize, n: usize, i: usize| {
        u8::try_from((root * 31 + n + i * 7) % 251).expect("under 251")
    };
    let got = threads::run(2, |w| {
        let c = comm(w)?;
        let me = c.rank() as usize;
        let mut wrong = Vec::new();
        for &n in &lens {
            for root in [0usize, 1] {
                for heap in [None, Some(1 - root)] {
                    let mut b = c.buffer::<u8>(n + 3)?;
                    let mut h = vec![0u8; n];
                    let fill = |x: &mut [u8]| {
                        for (i, v) in x.iter_mut().enumerate() {
                            *v = if me == root {
                                pattern(root, n, i)
                            } else {
                                0xEE
                            };
                        }
                    };
                    fill(&mut b[3..]);
                    fill(&mut h);
                    let rt = u32::try_from(root).expect("2 ranks");
                    let mine: &mut [u8] = if heap == Some(me) {
                        &mut h
                    } else {
                        &mut b[3..]
                    };
                    c.broadcast(mine, rt)?;
                    if (0..n).any(|i| mine[i] != pattern(root, n, i)) {
                        wrong.push(format!("n={n} root={root} heap={heap:?} rank {me}"));
                    }
                }
            }
        }
        Ok((wrong, c.single_copy_calls(), c.single_copy()))
    })
    .unwrap();
    for (wrong, calls, single) in got {
        assert!(wrong.is_empty(), "{wrong:#?}");
        // Every call is over the single-copy threshold: each goes single-copy (a reader's
        // buffer in ordinary memory does not stop the root's from being read).
        let want = if single { (lens.len() * 4) as u64 } else { 0 };
        assert_eq!(calls, want);
    }
}

#[test]
fn a_large_allreduce_goes_single_copy_at_any_rank_count() {
    // From `ALLREDUCE_CROWDED_MIN` bytes an allreduce goes single-copy whatever the rank count,
    // blocking and started; a rank whose send buffer is ordinary memory makes every rank fall
    // back alike, and so does one whose receive buffer is (the others write their parts into
    // it). Lengths that are not a whole number of 64-byte parts per rank.
    use tca::coll::ALLREDUCE_CROWDED_MIN;
    let n = ALLREDUCE_CROWDED_MIN / 8 + 389;
    for p in 2..=6u32 {
        let got = threads::run(p, |w| {
            let c = comm(w)?;
            let (p, me) = (c.size() as usize, c.rank() as usize);
            let want: Vec<f64> = (0..n).map(|i| (0..p).map(|q| v(q, i)).sum()).collect();
            let s = filled(&c, n, |i| v(me, i))?;
            let mut r = c.buffer::<f64>(n + AT)?;
            let mut wrong = Vec::new();
            c.allreduce(&s[AT..], &mut r[AT..], &Op::Sum)?;
            if r[AT..] != want[..] {
                wrong.push("blocking");
            }
            r.fill(0.0);
            c.scope(|sc| {
                sc.iallreduce(&s[AT..], &mut r[AT..], &Op::Sum)?
                    .wait()
                    .map(drop)
            })?;
            if r[AT..] != want[..] {
                wrong.push("started");
            }
            let direct = c.single_copy_calls();
            // Rank p - 1's receive buffer, then its send buffer, in ordinary memory; every
            // result cleared before and checked after each call.
            let mut h = vec![0.0; n];
            let hs = s[AT..].to_vec();
            r.fill(0.0);
            if me == p - 1 {
                c.allreduce(&s[AT..], &mut h, &Op::Sum)?;
            } else {
                c.allreduce(&s[AT..], &mut r[AT..], &Op::Sum)?;
            }
            if (me == p - 1 && h != want) || (me != p - 1 && r[AT..] != want[..]) {
                wrong.push("heap receive buffer");
            }
            r.fill(0.0);
            if me == p - 1 {
                c.allreduce(&hs, &mut r[AT..], &Op::Sum)?;
            } else {
                c.allreduce(&s[AT..], &mut r[AT..], &Op::Sum)?;
            }
            if r[AT..] != want[..] {
                wrong.push("heap send buffer");
            }
            Ok((
                wrong,
                direct,
                c.single_copy_calls() - direct,
                c.single_copy(),
            ))
        })
        .unwrap();
        for (rank, (wrong, direct, mixed, single)) in got.into_iter().enumerate() {
            assert!(wrong.is_empty(), "p={p} rank {rank}: {wrong:?}");
            assert_eq!(
                direct,
                if single { 2 } else { 0 },
                "p={p}: single-copy calls"
            );
            assert_eq!(
                mixed, 0,
                "p={p}: ordinary memory on one rank, calls in one copy"
            );
        }
    }
}
