//! The offload engine (`tca::offload`, seed 004): every collective posted to a progress thread
//! against the blocking call's result; a rank that computes without calling tca while its
//! peers' collectives and rendezvous complete through its proxy; many tickets outstanding,
//! waited in random orders; dropped tickets; a full work queue; a peer and a proxy that die.
//! Thread ranks, each with its proxy (`threads::run_offloaded`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tca::offload::{Progress, Proxy, QUEUE_DEPTH, Ticket};
use tca::{Comm, ErrorKind, Op, threads};

mod common;
use common::{input, rng, val};

fn r32(x: usize) -> u32 {
    u32::try_from(x).expect("a rank")
}

/// Runs a job that is meant to fail; the job's error and each rank's own error. Tests of
/// faults check what each rank saw here, after the job: an assertion failing inside a rank
/// would hide behind another rank's error.
fn errors_of(
    n: u32,
    f: impl Fn(&Proxy) -> tca::Result<()> + Sync,
) -> (tca::Error, Vec<Option<tca::Error>>) {
    let seen = std::sync::Mutex::new(vec![None; n as usize]);
    let r = threads::run_offloaded(n, |px| {
        let r = f(px);
        if let Err(e) = &r {
            seen.lock().unwrap()[px.rank() as usize] = Some(e.clone());
        }
        r
    });
    (r.expect_err("the job fails"), seen.into_inner().unwrap())
}

/// Every collective posted to the proxy gives the bytes the blocking call (run on the proxy
/// as a command) gives.
fn same_as_blocking(p: &Proxy, n: usize) -> tca::Result<()> {
    let (size, me) = (p.size() as usize, p.rank() as usize);
    let root = r32(size - 1);
    let is_root = me == root as usize;
    let mine = input(me, n);
    let all: Vec<f64> = (0..size * n).map(|i| val(me, i)).collect();
    let sum = Op::<f64>::Sum;
    let max = Op::<f64>::Max;
    let check = |what: &str, a: &[f64], b: &[f64]| {
        assert_eq!(a, b, "{what} p={size} n={n} rank={me}: posted vs blocking");
    };
    // Blocking results, through the command channel.
    let want = p.scope(|s| {
        s.run(|c| {
            let mut bc = if is_root { mine.clone() } else { vec![0.0; n] };
            c.broadcast(&mut bc, root)?;
            let mut sc = vec![0.0; n];
            c.scatter(if is_root { &all[..] } else { &[] }, &mut sc, root)?;
            let mut ga = vec![0.0; if is_root { size * n } else { 0 }];
            c.gather(&mine, &mut ga, root)?;
            let mut re = vec![0.0; if is_root { n } else { 0 }];
            c.reduce(&mine, &mut re, &max, root)?;
            let mut ag = vec![0.0; size * n];
            c.allgather(&mine, &mut ag)?;
            let mut ar = vec![0.0; n];
            c.allreduce(&mine, &mut ar, &sum)?;
            let mut rs = vec![0.0; n / size];
            c.reduce_scatter(&mine[..n / size * size], &mut rs, &sum)?;
            let mut aa = vec![0.0; size * n];
            c.alltoall(&all, &mut aa)?;
            c.barrier()?;
            Ok([bc, sc, ga, re, ag, ar, rs, aa])
        })
    })?;
    // The same, posted all at once and waited in reverse order.
    let mut bc = if is_root { mine.clone() } else { vec![0.0; n] };
    let mut sc = vec![0.0; n];
    let mut ga = vec![0.0; if is_root { size * n } else { 0 }];
    let mut re = vec![0.0; if is_root { n } else { 0 }];
    let mut ag = vec![0.0; size * n];
    let mut ar = vec![0.0; n];
    let mut rs = vec![0.0; n / size];
    let mut aa = vec![0.0; size * n];
    let mut inplace = mine.clone();
    // Allgatherv: rank r gives r % 3 + n elements.
    let counts: Vec<usize> = (0..size).map(|r| r % 3 + n).collect();
    let displs: Vec<usize> = counts
        .iter()
        .scan(0, |at, &c| {
            *at += c;
            Some(*at - c)
        })
        .collect();
    let mut agv = vec![f64::NAN; counts.iter().sum()];
    agv[displs[me]..][..counts[me]].copy_from_slice(&input(me, counts[me]));
    p.scope(|s| {
        let mut t: Vec<Ticket<'_>> = vec![
            s.ibroadcast(&mut bc, root)?,
            s.iscatter(if is_root { &all[..] } else { &[] }, &mut sc, root)?,
            s.igather(&mine, &mut ga, root)?,
            s.ireduce(&mine, &mut re, &max, root)?,
            s.iallgather(&mine, &mut ag)?,
            s.iallreduce(&mine, &mut ar, &sum)?,
            s.ireduce_scatter(&mine[..n / size * size], &mut rs, &sum)?,
            s.ialltoall(&all, &mut aa)?,
            s.iallreduce_in_place(&mut inplace, &sum)?,
            s.iallgatherv_in_place(&mut agv, &counts, &displs)?,
            s.ibarrier()?,
        ];
        for k in (0..t.len()).rev() {
            t[k].wait()?;
            assert!(!t[k].is_active());
        }
        Ok(())
    })?;
    let names = [
        "broadcast",
        "scatter",
        "gather",
        "reduce",
        "allgather",
        "allreduce",
        "reduce_scatter",
        "alltoall",
    ];
    let got = [&bc, &sc, &ga, &re, &ag, &ar, &rs, &aa];
    for ((name, w), g) in names.iter().zip(&want).zip(got) {
        check(name, w, g);
    }
    check("allreduce_in_place", &want[5], &inplace);
    let every: Vec<f64> = (0..size).flat_map(|r| input(r, counts[r])).collect();
    check("allgatherv_in_place", &every, &agv);
    Ok(())
}

#[test]
fn every_collective_through_the_proxy_matches_blocking() {
    for p in [1, 2, 3, 5, 8] {
        threads::run_offloaded(p, |px| {
            for n in [1, 24, 3000, 40_000] {
                same_as_blocking(px, n)?;
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{p} ranks: {e}"));
    }
}

/// Ranks whose posted collective and rendezvous receive have completed.
static FINISHED: AtomicU32 = AtomicU32::new(0);

/// A computing rank's job: its allreduce input and zeroed result, the expected sum over `p`
/// ranks, a zeroed receive buffer of `big` f64s and what rank 1 sends into it.
struct Buffers {
    mine: Vec<f64>,
    sum: Vec<f64>,
    want: Vec<f64>,
    big: Vec<f64>,
    src: Vec<f64>,
}

/// Checks a computing rank's results after its job: the sum everywhere, rank 1's data at rank 0.
fn check_job(me: u32, b: &Buffers) {
    assert_eq!(b.sum, b.want, "rank {me}");
    if me == 0 {
        assert_eq!(b.big, b.src);
    }
}

impl Buffers {
    fn new(me: u32, p: u32, big: usize) -> Self {
        Self {
            mine: input(me as usize, 1000),
            sum: vec![0.0; 1000],
            want: (0..1000)
                .map(|i| (0..p as usize).map(|r| val(r, i)).sum())
                .collect(),
            big: vec![0.0; big],
            src: (0..big).map(|i| i as f64).collect(),
        }
    }
}

#[test]
fn a_computing_rank_completes_its_peers_collectives_through_its_proxy() {
    // Rank 0 posts an allreduce and a large receive, then computes without calling tca
    // until every peer saw its allreduce and its send complete. Progress by the caller
    // alone would hold the peers (they need rank 0's part) until the deadline: the test
    // fails then.
    const P: u32 = 4;
    const BIG: usize = 1 << 18; // f64s: 2 MiB, a rendezvous message
    let deadline = Duration::from_secs(30);
    threads::run_offloaded(P, |px| {
        let me = px.rank();
        let mut b = Buffers::new(me, P, BIG);
        px.scope(|s| {
            let mut a = s.iallreduce(&b.mine, &mut b.sum, &Op::Sum)?;
            if me == 0 {
                let mut r = s.irecv(&mut b.big, 1, 7)?;
                let t0 = Instant::now();
                let mut x = 1.0f64;
                while FINISHED.load(Ordering::Acquire) < P - 1 {
                    for _ in 0..1000 {
                        x = std::hint::black_box(x * 0.999_999 + 1e-6);
                    }
                    assert!(
                        t0.elapsed() < deadline,
                        "peers did not finish while rank 0 computed ({} of {})",
                        FINISHED.load(Ordering::Acquire),
                        P - 1
                    );
                }
                // The peers are done: rank 0's proxy did its part while rank 0 computed (its
                // own last steps may still be in flight).
                a.wait()?;
                let st = r.wait()?;
                assert_eq!((st.source, st.tag, st.bytes), (1, 7, BIG * 8));
            } else {
                let mut snd = (me == 1).then(|| s.isend(&b.src, 0, 7)).transpose()?;
                a.wait()?;
                if let Some(t) = snd.as_mut() {
                    t.wait()?;
                }
                FINISHED.fetch_add(1, Ordering::AcqRel);
            }
            Ok(())
        })?;
        check_job(me, &b);
        Ok(())
    })
    .unwrap();
}

#[test]
fn many_tickets_waited_in_random_orders_with_messages_between() {
    threads::run_offloaded(5, |px| {
        let (p, me) = (px.size() as usize, px.rank() as usize);
        let mut next = rng(0x5eed + me as u64);
        for round in 0..20usize {
            let n = 1 + round * 37;
            let mine = input(me + round, n);
            let mut outs = vec![vec![0.0; n]; 12];
            let mut inbox = vec![0.0; n];
            let right = r32((me + 1) % p);
            let left = r32((me + p - 1) % p);
            px.scope(|s| {
                let mut t = Vec::new();
                for o in outs.iter_mut() {
                    t.push(s.iallreduce(&mine, o, &Op::Sum)?);
                }
                t.push(s.irecv(&mut inbox, left, i32::try_from(round).expect("a tag"))?);
                t.push(s.isend(&mine, right, i32::try_from(round).expect("a tag"))?);
                // Waited (or tested, then waited) in a random order.
                while !t.is_empty() {
                    let k = usize::try_from(next() % t.len() as u64).expect("below len");
                    let mut x = t.swap_remove(k);
                    if next() % 2 == 0 {
                        let _ = x.test()?;
                    }
                    x.wait()?;
                }
                Ok(())
            })?;
            let want: Vec<f64> = (0..n)
                .map(|i| (0..p).map(|r| val(r + round, i)).sum())
                .collect();
            for o in &outs {
                assert_eq!(o, &want, "round {round} rank {me}");
            }
            let l = (me + p - 1) % p;
            assert_eq!(inbox, input(l + round, n), "message round {round}");
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn dropped_tickets_finish_at_the_scope_end_and_a_full_queue_pushes_back() {
    // Four times the queue's depth of operations without waiting for any: posts wait for
    // room, none is lost, and the scope finishes the dropped tickets before it returns.
    let posts = 4 * QUEUE_DEPTH;
    threads::run_offloaded(3, |px| {
        let (p, me) = (px.size() as usize, px.rank() as usize);
        let mine = input(me, 16);
        let mut outs = vec![vec![0.0; 16]; posts];
        px.scope(|s| {
            for o in outs.iter_mut() {
                let _unclaimed = s.iallreduce(&mine, o, &Op::Sum)?;
            }
            Ok(())
        })?;
        assert_eq!(px.in_flight(), 0);
        let want: Vec<f64> = (0..16).map(|i| (0..p).map(|r| val(r, i)).sum()).collect();
        for (k, o) in outs.iter().enumerate() {
            assert_eq!(o, &want, "operation {k} of rank {me}");
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn an_unclaimed_receive_is_cancelled_at_the_scope_end() {
    // A receive nobody sends to, its ticket dropped (or the scope left early by an error):
    // the scope cancels it, as dropping a request does, instead of waiting for ever; a
    // message that arrives later is still received by the next receive.
    threads::run_offloaded(2, |px| {
        let me = px.rank();
        let mut never = vec![0.0f64; 8];
        let mut late = vec![0.0f64; 8];
        if me == 0 {
            px.scope(|s| {
                let _unclaimed = s.irecv(&mut never, 1, 99)?;
                Ok(())
            })?;
            let e = px
                .scope(|s| {
                    let _t = s.irecv(&mut never, 1, 99)?;
                    Err::<(), _>(tca::Error::program("left early"))
                })
                .expect_err("the closure's error");
            assert_eq!(e.message(), "left early");
            assert_eq!(px.in_flight(), 0);
            // Rank 1's message (tag 98) is still there for a receive that waits.
            px.scope(|s| s.irecv(&mut late, 1, 98)?.wait().map(drop))?;
            assert_eq!(late, input(1, 8));
        } else {
            let src = input(1, 8);
            px.scope(|s| s.isend(&src, 0, 98)?.wait().map(drop))?;
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn bad_input_comes_back_through_the_ticket() {
    // A receive buffer too short is the collective's error (it aborts the job, as a blocking
    // call's does), returned by the ticket with both lengths.
    let (job, seen) = errors_of(2, |px| {
        let mine = input(0, 8);
        let mut short = vec![0.0; 4];
        if px.rank() == 0 {
            px.scope(|s| s.iallreduce(&mine, &mut short, &Op::Sum)?.wait().map(drop))
        } else {
            // Tickets dropped: the scope returns the oldest operation's error, not the
            // barrier's "left inconsistent" that follows it.
            px.scope(|s| {
                let _a = s.iallreduce(&mine, &mut short, &Op::Sum)?;
                let _b = s.ibarrier()?;
                Ok(())
            })
        }
    });
    assert_eq!(job.kind(), ErrorKind::InvalidArgument, "{job}");
    for (rank, e) in seen.iter().enumerate() {
        let e = e.as_ref().expect("every rank failed");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "rank {rank}: {e}");
        let msg = e.to_string();
        assert!(msg.contains('8') && msg.contains('4'), "rank {rank}: {msg}");
    }
}

#[test]
fn a_peer_that_fails_is_an_error_naming_it() {
    // Rank 1 fails before its part; rank 0's posted allreduce fails naming rank 1 instead of
    // hanging.
    let (_, seen) = errors_of(2, |px| {
        if px.rank() == 1 {
            std::thread::sleep(Duration::from_millis(50));
            return Err(tca::Error::program("rank 1 gives up"));
        }
        let mine = input(0, 64);
        let mut out = vec![0.0; 64];
        px.scope(|s| s.iallreduce(&mine, &mut out, &Op::Sum)?.wait().map(drop))
    });
    let e = seen[0].as_ref().expect("rank 0's allreduce failed");
    assert!(
        matches!(e.kind(), ErrorKind::PeerDied | ErrorKind::Aborted),
        "{e}"
    );
    assert!(e.to_string().contains("rank 1"), "{e}");
}

#[test]
fn a_proxy_that_dies_fails_its_rank_and_names_it_to_the_peers() {
    let again = std::sync::Mutex::new(None);
    let (_, seen) = errors_of(2, |px| {
        let me = px.rank();
        let mine = input(me as usize, 64);
        let mut out = vec![0.0; 64];
        if me == 1 {
            // A command that panics kills rank 1's proxy; every later post fails the same way.
            let e = px.scope(|s| s.run(|_| -> tca::Result<()> { panic!("injected fault") }));
            *again.lock().unwrap() = Some(px.scope(|s| s.ibarrier().map(drop)));
            return e;
        }
        px.scope(|s| s.iallreduce(&mine, &mut out, &Op::Sum)?.wait().map(drop))
    });
    let e1 = seen[1].as_ref().expect("rank 1's proxy died");
    assert_eq!(e1.kind(), ErrorKind::PeerDied, "{e1}");
    assert!(
        e1.to_string().contains("rank 1's progress thread panicked"),
        "{e1}"
    );
    let later = again.into_inner().unwrap().expect("rank 1 posted again");
    assert!(later.is_err_and(|e| e.to_string().contains("rank 1")));
    let e0 = seen[0].as_ref().expect("rank 0's allreduce failed");
    assert!(e0.to_string().contains("rank 1"), "{e0}");
}

#[test]
fn a_rank_that_panics_is_an_error_naming_it_not_a_clean_exit() {
    // Rank 1 panics with its proxy alive: its world is dropped on the proxy thread, which
    // must fail the rank (not leave as if done), so rank 0's posted allreduce fails naming
    // rank 1 instead of waiting for ever.
    let (job, seen) = errors_of(2, |px| {
        if px.rank() == 1 {
            std::thread::sleep(Duration::from_millis(30));
            panic!("injected rank fault");
        }
        let mine = input(0, 64);
        let mut out = vec![0.0; 64];
        px.scope(|s| s.iallreduce(&mine, &mut out, &Op::Sum)?.wait().map(drop))
    });
    assert!(job.to_string().contains("rank 1"), "{job}");
    let e = seen[0].as_ref().expect("rank 0's allreduce failed");
    assert!(e.to_string().contains("rank 1"), "{e}");
}

// ---- a plain communicator's progress thread (`Comm::overlap`, `TCA_P2P_PROGRESS=thread`) ----

/// Rank 0 posts an allreduce and a large receive from rank 1, then computes in
/// `Comm::overlap` without calling tca until every peer has finished (rank 1's rendezvous
/// send, rank 2's flood of more eager messages than its ring holds, everyone's allreduce) or
/// `patience` ran out. Whether the peers finished during the computation.
fn peers_finish_while_rank_0_computes(mode: Progress, patience: Duration) -> bool {
    const P: u32 = 4;
    const BIG: usize = 1 << 18; // f64s: 2 MiB, a rendezvous message
    const FLOOD: u8 = 64; // 1 KiB messages: more than a pair's ring slots
    let finished = AtomicU32::new(0);
    let during = std::sync::atomic::AtomicBool::new(false);
    threads::run(P, |w| {
        let c = Comm::world(w)?;
        c.set_progress(mode);
        let me = c.rank();
        let mut b = Buffers::new(me, P, BIG);
        c.scope(|s| {
            let mut a = s.iallreduce(&b.mine, &mut b.sum, &Op::Sum)?;
            if me == 0 {
                let mut r = c.irecv(&mut b.big, 1, 7)?;
                let all = c.overlap(|| {
                    let t0 = Instant::now();
                    let mut x = 1.0f64;
                    while finished.load(Ordering::Acquire) < P - 1 {
                        if t0.elapsed() >= patience {
                            return false;
                        }
                        for _ in 0..1000 {
                            x = std::hint::black_box(x * 0.999_999 + 1e-6);
                        }
                    }
                    true
                })?;
                during.store(all, Ordering::Release);
                a.wait()?;
                let st = r.wait()?;
                assert_eq!((st.source, st.tag, st.bytes), (1, 7, BIG * 8));
                for k in 0..FLOOD {
                    let mut m = [0u8; 1024];
                    let st = c.recv(&mut m, 2, 9)?;
                    assert_eq!(st.bytes, 1024);
                    assert!(m.iter().all(|&b| b == k), "message {k} in order");
                }
            } else {
                if me == 1 {
                    c.send(&b.src, 0, 7)?;
                }
                if me == 2 {
                    for k in 0..FLOOD {
                        c.send(&[k; 1024], 0, 9)?;
                    }
                }
                a.wait()?;
                finished.fetch_add(1, Ordering::AcqRel);
            }
            Ok(())
        })?;
        check_job(me, &b);
        Ok(())
    })
    .unwrap();
    during.load(Ordering::Acquire)
}

#[test]
fn a_plain_communicator_progresses_while_its_rank_computes_in_overlap() {
    assert!(
        peers_finish_while_rank_0_computes(Progress::Thread, Duration::from_secs(60)),
        "the peers' rendezvous, flood and allreduce did not complete while rank 0 computed"
    );
}

#[test]
fn without_the_progress_thread_the_peers_wait_for_the_computation() {
    // The negative control of the test above: the same job with the caller's progress, which
    // runs the computation inline. Rank 1's rendezvous cannot complete before rank 0 answers
    // it, so the peers cannot finish during the computation, however long it runs.
    assert!(!peers_finish_while_rank_0_computes(
        Progress::Caller,
        Duration::from_millis(300)
    ));
}

#[test]
fn a_panic_in_the_overlapped_work_resumes_in_the_caller_and_the_communicator_goes_on() {
    let out = threads::run(2, |w| {
        let c = Comm::world(w)?;
        c.set_progress(Progress::Thread);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.overlap(|| -> u32 { panic!("the computation failed") })
        }));
        let msg = caught
            .expect_err("the panic reaches the caller")
            .downcast::<&str>()
            .map(|m| m.to_string())
            .unwrap_or_default();
        assert_eq!(msg, "the computation failed");
        // Still usable, and an overlap returns its work's value.
        let mut x = [c.rank() as f64 + 1.0];
        c.allreduce_in_place(&mut x, &Op::Sum)?;
        let k = c.overlap(|| 21 * 2)?;
        Ok(x[0] + f64::from(k))
    })
    .unwrap();
    assert_eq!(out, vec![45.0, 45.0]);
}

#[test]
fn the_progress_mode_parses_and_a_bad_one_is_named() {
    assert_eq!(Progress::parse("thread").unwrap(), Progress::Thread);
    assert_eq!(Progress::parse(" caller ").unwrap(), Progress::Caller);
    assert_eq!(Progress::parse("proxy").unwrap(), Progress::Proxy);
    let e = Progress::parse("process").unwrap_err().to_string();
    assert!(e.contains("process") && e.contains("caller"), "{e}");
}

#[test]
fn control_requests_run_on_the_progress_thread() {
    threads::run_offloaded(3, |proxy| {
        let t = proxy.control("transport")?;
        assert!(["shm", "ofi", "shm+ofi"].contains(&t.as_str()), "{t}");
        proxy.control("force allreduce ring")?;
        assert_eq!(proxy.control("algorithm allreduce 8")?, "ring");
        proxy.control("force allreduce auto")?;
        let e = proxy.control("force allreduce fastest").unwrap_err();
        assert_eq!(e.kind(), tca::ErrorKind::InvalidArgument);
        let e = proxy.control("paint it black").unwrap_err();
        assert!(e.message().contains("unknown control request"), "{e}");
        // Buffers from `alloc` are ordinary memory here, and work as any.
        let mine = proxy.alloc::<f64>(4)?;
        let mut sum = proxy.alloc::<f64>(4)?;
        assert!(!mine.is_shared());
        proxy.scope(|s| s.iallreduce(&mine, &mut sum, &Op::Sum)?.wait().map(drop))?;
        Ok(())
    })
    .unwrap();
}
