//! Fabric tests in thread mode (ranks as threads of this process, on the real shared-memory
//! transport). Multi-process tests through the launcher are in `crates/tca-tests`.

use std::time::Duration;

use proptest::prelude::*;
use tca::{ErrorKind, SignalOp, Strided, threads};

/// The low byte of `x`: test patterns wrap mod 256 on purpose.
fn low_byte(x: u64) -> u8 {
    x.to_le_bytes()[0]
}

/// Runs `body` on `n` thread ranks and unwraps.
fn on<T: Send>(n: u32, body: impl Fn(&tca::World) -> tca::Result<T> + Sync) -> Vec<T> {
    threads::run(n, body).unwrap_or_else(|e| panic!("{n}-rank job failed: {e}"))
}

#[test]
fn ring_put_signal_every_rank_count() {
    for n in [1, 2, 3, 4, 8] {
        let got = on(n, |w| {
            let seg = w.alloc_symmetric(4096)?;
            let next = (w.rank() + 1) % w.size();
            let msg: Vec<u8> = (0..100u64)
                .map(|i| low_byte(i * 3 + u64::from(w.rank())))
                .collect();
            w.put_signal(
                seg.handle(next)?,
                128,
                &msg,
                seg.handle(next)?,
                0,
                SignalOp::Set(1),
            )?;
            w.wait_until(&seg, 0, 1)?;
            let mut back = vec![0u8; 100];
            seg.read(128, &mut back)?;
            Ok(back)
        });
        for (r, back) in got.iter().enumerate() {
            let prev = (u32::try_from(r).unwrap() + n - 1) % n;
            let want: Vec<u8> = (0..100u64)
                .map(|i| low_byte(i * 3 + u64::from(prev)))
                .collect();
            assert_eq!(back, &want, "rank {r} of {n}");
        }
    }
}

#[test]
fn signal_add_counts_every_writer() {
    let got = on(8, |w| {
        let seg = w.alloc_symmetric(64)?;
        for _ in 0..100 {
            w.signal(seg.handle(0)?, 8, SignalOp::Add(1))?;
        }
        if w.rank() == 0 {
            w.wait_until(&seg, 8, 800)?;
        }
        w.barrier()?;
        seg.signal_value(8)
    });
    assert_eq!(got[0], 800);
}

#[test]
fn remote_atomics_count_swap_and_compare() {
    let got = on(6, |w| {
        let seg = w.alloc_symmetric(256)?;
        let counter = w.remote_word(seg.handle(0)?, 8)?;
        let owner = w.remote_word(seg.handle(0)?, 16)?;
        for _ in 0..50 {
            counter.fetch_add(w, 2)?;
        }
        // Exactly one rank wins the compare-exchange from 0; the others see the winner.
        let claim = owner.compare_exchange(w, 0, u64::from(w.rank()) + 1)?;
        // Rank 0 waits on the counter: atomics raise it as signals do.
        if w.rank() == 0 {
            w.wait_until(&seg, 8, 600)?;
        }
        w.barrier()?;
        let total = counter.load(w)?;
        let winner = owner.load(w)?;
        w.barrier()?;
        if w.rank() == 0 {
            assert_eq!(owner.swap(w, 99)?, winner);
            counter.store(w, 7)?;
        }
        w.barrier()?;
        let last = (counter.load(w)?, owner.load(w)?);
        // Nobody frees the segment (by returning) while others still read it.
        w.barrier()?;
        Ok((total, winner, claim, last.0, last.1))
    });
    let winner = got[0].1;
    assert!((1..=6).contains(&winner));
    let wins = got.iter().filter(|g| g.2.is_ok()).count();
    assert_eq!(wins, 1, "exactly one compare-exchange from 0 succeeds");
    for (total, w, claim, after, owner) in &got {
        assert_eq!((*total, *w, *after, *owner), (600, winner, 7, 99));
        if let Err(found) = claim {
            assert_eq!(*found, winner);
        }
    }
}

#[test]
fn remote_word_is_checked_once_and_refuses_bad_offsets() {
    on(2, |w| {
        let seg = w.alloc_symmetric(64)?;
        let h = *seg.handle(1 - w.rank())?;
        assert_eq!(
            w.remote_word(&h, 60).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        assert_eq!(
            w.remote_word(&h, 4).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        let forged = h.forged(None, Some(h.key() ^ 2), None, None);
        assert_eq!(
            w.remote_word(&forged, 0).unwrap_err().kind(),
            ErrorKind::InvalidHandle
        );
        w.barrier()
    });
}

#[test]
fn barrier_many_times_with_uneven_speeds() {
    on(5, |w| {
        let seg = w.alloc_symmetric(8 * 5)?;
        for round in 1..=300u64 {
            if (round + u64::from(w.rank())) % 7 == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
            // Everyone writes round into rank 0's slot; after the barrier all must see it.
            w.put(seg.handle(0)?, 8 * w.rank() as usize, &round.to_le_bytes())?;
            w.barrier()?;
            if w.rank() == 0 {
                let mut v = [0u64; 5];
                seg.read_slice(0, &mut v)?;
                assert!(v.iter().all(|&x| x == round), "round {round}: {v:?}");
            }
            w.barrier()?;
        }
        Ok(())
    });
}

#[test]
fn put_line_carries_payload_with_signal() {
    on(2, |w| {
        let seg = w.alloc_symmetric(4096)?;
        let peer = *seg.handle(1 - w.rank())?;
        for seq in 1..=2000u64 {
            let mut msg = [0u8; 56];
            msg[..8].copy_from_slice(&(seq * 10 + u64::from(w.rank())).to_le_bytes());
            msg[55] = low_byte(seq);
            w.put_line(&peer, 128, &msg, seq)?;
            let mut got = [0u8; 56];
            w.wait_line(&seg, 128, seq, &mut got)?;
            let v = u64::from_le_bytes(got[..8].try_into().unwrap());
            assert_eq!(v, seq * 10 + u64::from(1 - w.rank()));
            assert_eq!(got[55], low_byte(seq));
            w.barrier()?; // the peer has read line `seq` before it is overwritten
        }
        assert_eq!(
            w.put_line(&peer, 100, &[0; 8], 1).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            w.put_line(&peer, 128, &[0; 57], 1).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        Ok(())
    });
}

#[test]
fn strided_put_places_blocks() {
    on(2, |w| {
        let seg = w.alloc_symmetric(1024)?;
        if w.rank() == 0 {
            let src: Vec<u8> = (0..100).collect();
            let s = Strided {
                count: 4,
                block: 3,
                src_stride: 10,
                dst_stride: 16,
            };
            w.put_strided(seg.handle(1)?, 32, &src, s)?;
            w.signal(seg.handle(1)?, 0, SignalOp::Set(1))?;
        } else {
            w.wait_until(&seg, 0, 1)?;
            let mut got = vec![0u8; 100];
            seg.read(32, &mut got)?;
            for i in 0..4 {
                let b = u8::try_from(i * 10).unwrap();
                assert_eq!(&got[i * 16..i * 16 + 3], &[b, b + 1, b + 2]);
                assert!(got[i * 16 + 3..(i + 1) * 16].iter().all(|&b| b == 0) || i == 3);
            }
        }
        Ok(())
    });
}

#[test]
fn strided_put_that_overruns_writes_nothing() {
    on(1, |w| {
        let seg = w.alloc(256)?;
        let src = vec![0xffu8; 256];
        // Last block ends at 200 + 3*20 + 10 = 270 > 256.
        let s = Strided {
            count: 4,
            block: 10,
            src_stride: 10,
            dst_stride: 20,
        };
        let e = w.put_strided(&seg.handle(), 200, &src, s).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfBounds, "{e}");
        // Source too short for the blocks.
        let s = Strided {
            count: 30,
            block: 10,
            src_stride: 10,
            dst_stride: 0,
        };
        assert_eq!(
            w.put_strided(&seg.handle(), 0, &src, s).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        // Overflowing arithmetic is an error, not a wrap-around.
        let s = Strided {
            count: usize::MAX,
            block: 1,
            src_stride: 0,
            dst_stride: usize::MAX,
        };
        assert_eq!(
            w.put_strided(&seg.handle(), 0, &src, s).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        let mut all = vec![0u8; 256];
        seg.read(0, &mut all)?;
        assert!(
            all.iter().all(|&b| b == 0),
            "a refused strided put wrote bytes"
        );
        Ok(())
    });
}

#[test]
fn chain_runs_all_puts_then_signal_and_is_reusable() {
    on(3, |w| {
        let src = w.alloc(4096)?;
        let seg = w.alloc_symmetric(4096)?;
        let me = w.rank();
        if me == 0 {
            let chain = w
                .chain()
                .put(&src, 0, seg.handle(1)?, 100, 1000)
                .put(&src, 1000, seg.handle(2)?, 200, 2000)
                .put(&src, 3000, seg.handle(1)?, 2000, 96)
                .signal(seg.handle(1)?, 0, SignalOp::Add(1))
                .build()?;
            assert_eq!(chain.len(), 3);
            assert_eq!(chain.bytes(), 3096);
            let chain2 = w
                .chain()
                .signal(seg.handle(2)?, 0, SignalOp::Add(1))
                .build()?;
            for k in 1..=50u64 {
                src.write(0, &vec![low_byte(k); 4096])?;
                w.start(&chain)?;
                w.start(&chain2)?;
                // Wait for both to consume before reusing the source.
                w.wait_until(&seg, 8, 2 * k)?;
            }
        } else {
            for k in 1..=50u64 {
                w.wait_until(&seg, 0, k)?;
                let (off, len) = if me == 1 { (100, 1000) } else { (200, 2000) };
                let mut v = vec![0u8; len];
                seg.read_slice(off, &mut v)?;
                assert!(v.iter().all(|&b| b == low_byte(k)), "rank {me} round {k}");
                if me == 1 {
                    let mut tail = [0u8; 96];
                    seg.read_slice(2000, &mut tail)?;
                    assert!(tail.iter().all(|&b| b == low_byte(k)));
                }
                w.signal(seg.handle(0)?, 8, SignalOp::Add(1))?;
            }
        }
        Ok(())
    });
}

#[test]
fn chain_with_bad_step_is_refused_at_build() {
    on(2, |w| {
        let src = w.alloc(64)?;
        let seg = w.alloc_symmetric(64)?;
        let e = w
            .chain()
            .put(&src, 0, seg.handle(1 - w.rank())?, 32, 64)
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfBounds);
        let e = w
            .chain()
            .put(&src, 60, seg.handle(1 - w.rank())?, 0, 8)
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfBounds);
        let e = w
            .chain()
            .signal(seg.handle(0)?, 4, SignalOp::Add(1))
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        w.barrier()
    });
}

#[test]
fn out_of_bounds_put_is_an_error_and_writes_nothing() {
    on(2, |w| {
        let seg = w.alloc_symmetric(100)?;
        let peer = *seg.handle(1 - w.rank())?;
        let big = [0xeeu8; 200];
        for (off, n) in [
            (0, 101),
            (50, 51),
            (100, 1),
            (usize::MAX, 1),
            (usize::MAX - 3, 8),
        ] {
            let e = w.put(&peer, off, &big[..n]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::OutOfBounds, "{off}+{n}: {e}");
            let e = w.put_inline(&peer, off, &big[..n]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::OutOfBounds);
        }
        let e = w
            .put_signal(&peer, 99, &big[..2], &peer, 0, SignalOp::Set(1))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfBounds);
        assert_eq!(
            w.signal(&peer, 96, SignalOp::Set(1)).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        assert_eq!(
            w.signal(&peer, 3, SignalOp::Set(1)).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        w.barrier()?;
        let mut all = vec![0u8; 100];
        seg.read(0, &mut all)?;
        assert!(
            all.iter().all(|&b| b == 0),
            "rank {}: refused puts wrote bytes",
            w.rank()
        );
        w.barrier()?; // everyone has checked before anyone writes again
        // The edge itself is fine.
        w.put(&peer, 0, &big[..100])?;
        w.put(&peer, 100, &[])?;
        w.barrier()
    });
}

#[test]
fn zero_length_put_is_valid_and_writes_nothing() {
    on(2, |w| {
        let seg = w.alloc_symmetric(16)?;
        let peer = *seg.handle(1 - w.rank())?;
        w.put(&peer, 0, &[])?;
        w.put(&peer, 16, &[])?;
        w.put_signal(&peer, 8, &[], &peer, 8, SignalOp::Set(5))?;
        assert_eq!(
            w.put(&peer, 17, &[]).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        w.wait_until(&seg, 8, 5)?;
        assert_eq!(seg.signal_value(0)?, 0);
        // A zero-length put still validates the handle.
        let forged = peer.forged(None, Some(peer.key() ^ 1), None, None);
        assert_eq!(
            w.put(&forged, 0, &[]).unwrap_err().kind(),
            ErrorKind::InvalidHandle
        );
        w.barrier()
    });
}

#[test]
fn inline_put_limit_is_enforced() {
    on(1, |w| {
        let seg = w.alloc(4096)?;
        let big = vec![1u8; tca::fabric::INLINE_MAX + 1];
        let e = w.put_inline(&seg.handle(), 0, &big).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("inline limit"), "{e}");
        w.put_inline(&seg.handle(), 0, &big[..tca::fabric::INLINE_MAX])?;
        let mut v = [0u8; tca::fabric::INLINE_MAX];
        seg.read_slice(0, &mut v)?;
        assert!(v.iter().all(|&b| b == 1));
        Ok(())
    });
}

#[test]
fn forged_handles_are_refused() {
    on(2, |w| {
        let seg = w.alloc_symmetric(64)?;
        let peer = *seg.handle(1 - w.rank())?;
        let cases = [
            (
                "bad key",
                peer.forged(None, Some(peer.key().wrapping_add(2)), None, None),
                ErrorKind::InvalidHandle,
            ),
            (
                "longer than the segment",
                peer.forged(None, None, Some(1 << 20), None),
                ErrorKind::InvalidHandle,
            ),
            (
                "rank out of range",
                peer.forged(Some(7), None, None, None),
                ErrorKind::InvalidRank,
            ),
            (
                "other job",
                peer.forged(None, None, None, Some(w.job_id() ^ 1)),
                ErrorKind::InvalidHandle,
            ),
        ];
        for (what, h, kind) in cases {
            let e = w.put(&h, 0, &[1]).unwrap_err();
            assert_eq!(e.kind(), kind, "{what}: {e}");
        }
        assert_eq!(
            tca::Handle::from_bytes(&[0u8; 31]).unwrap_err().kind(),
            ErrorKind::InvalidHandle
        );
        let round = tca::Handle::from_bytes(&peer.to_bytes())?;
        assert_eq!(round, peer);
        w.barrier()
    });
}

#[test]
fn handle_from_another_job_is_refused() {
    // Job A publishes a handle; job B (another world) tries to use it.
    let h = on(1, |w| Ok(w.alloc(64)?.handle()))[0];
    let _keep = on(1, |w| {
        let e = w
            .put(&h.forged(Some(0), None, None, None), 0, &[1])
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidHandle, "{e}");
        assert!(e.to_string().contains("job"), "{e}");
        Ok(())
    });
}

#[test]
fn stale_handle_is_refused() {
    on(2, |w| {
        let first = w.alloc_symmetric(64)?;
        let old = *first.handle(1 - w.rank())?;
        w.put(&old, 0, &[1])?; // attached and working
        w.barrier()?;
        drop(first);
        w.barrier()?;
        let e = w.put(&old, 0, &[1]).unwrap_err();
        // Refused, naming the owner, who freed it.
        assert_eq!(
            (e.kind(), e.rank()),
            (ErrorKind::InvalidHandle, Some(1 - w.rank())),
            "{e}"
        );
        // A new segment may reuse the id; the old handle is still refused, the new one works.
        let second = w.alloc_symmetric(64)?;
        let new = *second.handle(1 - w.rank())?;
        assert_eq!(
            w.put(&old, 0, &[1]).unwrap_err().kind(),
            ErrorKind::InvalidHandle
        );
        w.put(&new, 0, &[1])?;
        w.barrier()
    });
}

/// A handle to the segment of a rank that has left the job is refused naming that rank: its
/// owner's departure, not the handle, is the news (it named nobody; found by `tca chaos`,
/// fd-limit).
#[test]
fn a_segment_of_a_rank_that_left_names_the_rank() {
    on(2, |w| {
        let seg = w.alloc_symmetric(64)?;
        let first = *seg.handle(0)?;
        w.put(&first, 0, &[1])?; // attached and working
        w.barrier()?;
        if w.rank() == 0 {
            return Ok(()); // leaves: frees its segment, then leaves the job
        }
        // Rank 0 has left once no rank is left to answer a wait; its segment is refused from
        // then on (over a network, once the connection has noticed: tried until refused).
        while w.check_alive().is_ok() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let e = loop {
            match w.put(&first, 0, &[1]) {
                Err(e) => break e,
                Ok(()) => assert!(std::time::Instant::now() < deadline, "never refused"),
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        // Over a network (CI runs this suite over libfabric too) the put is accepted and the
        // refusal is the connection's, PeerDied: it names rank 0 as well.
        assert_eq!(e.rank(), Some(0), "{e}");
        if w.network_provider().is_none() {
            assert_eq!(e.kind(), ErrorKind::InvalidHandle, "{e}");
            assert!(e.to_string().contains("rank 0 has left the job"), "{e}");
        }
        Ok(())
    });
}

#[test]
fn symmetric_alloc_with_different_lengths_is_refused() {
    let r = threads::run(3, |w| {
        w.alloc_symmetric(64 + 64 * (w.rank() as usize % 2))
            .map(|_| ())
    });
    let e = r.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}

#[test]
fn wait_with_timeout_times_out() {
    on(2, |w| {
        let seg = w.alloc_symmetric(64)?;
        let e = w
            .wait_until_timeout(&seg, 0, 1, Duration::from_millis(30))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        w.barrier()
    });
}

#[test]
fn one_rank_waiting_for_itself_gets_an_error_not_a_hang() {
    let e = threads::run(1, |w| {
        let seg = w.alloc(64)?;
        w.wait_until(&seg, 0, 1)
    })
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
}

#[test]
fn typed_copies_round_trip_and_check_bounds() {
    on(1, |w| {
        let seg = w.alloc(64)?;
        seg.write_slice(2, &[1.5f64, -2.0])?;
        let mut back = [0f64; 3];
        seg.read_slice(1, &mut back)?;
        assert_eq!(back, [0.0, 1.5, -2.0]);
        assert_eq!(
            seg.write_slice(7, &[1u64, 2]).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        assert_eq!(
            seg.read_slice(usize::MAX, &mut back).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        Ok(())
    });
}

#[test]
fn rank_that_leaves_while_others_wait_for_it_ends_in_a_deadlock_error() {
    let all = threads::run_each(3, |w| {
        let seg = w.alloc_symmetric(64)?;
        w.barrier()?;
        if w.rank() == 2 {
            return Ok(()); // leaves cleanly without sending what the others wait for
        }
        w.wait_until(&seg, 0, 1).map(|_| ())
    });
    assert!(all[2].is_ok());
    // The first rank to notice reports the deadlock; the other may instead see that rank fail.
    let errs: Vec<_> = [0, 1].map(|r| all[r].as_ref().unwrap_err().clone()).into();
    assert!(
        errs.iter()
            .any(|e| e.kind() == ErrorKind::Aborted && e.to_string().contains("deadlock")),
        "{errs:?}"
    );
    assert!(
        errs.iter()
            .all(|e| matches!(e.kind(), ErrorKind::Aborted | ErrorKind::PeerDied)),
        "{errs:?}"
    );
}

#[test]
fn panicking_peer_is_named() {
    let all = threads::run_each(3, |w| {
        let seg = w.alloc_symmetric(64)?;
        if w.rank() == 2 {
            panic!("rank 2 gives up");
        }
        w.wait_until(&seg, 0, 1)
    });
    for r in [0, 1] {
        let e = all[r].as_ref().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PeerDied, "rank {r}: {e}");
        assert_eq!(e.rank(), Some(2), "rank {r}: {e}");
    }
    assert!(
        all[2]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("gives up")
    );
}

#[test]
fn peer_returning_an_error_is_named() {
    let e = threads::run(4, |w| {
        let seg = w.alloc_symmetric(64)?;
        if w.rank() == 3 {
            return Err(seg.read(1000, &mut [0; 8]).unwrap_err());
        }
        w.barrier()
    })
    .unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::OutOfBounds,
        "root cause is reported: {e}"
    );
}

#[test]
fn rank_limit_is_enforced() {
    let e = threads::run(100_000, |_| Ok(())).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("1..="), "{e}");
    assert!(threads::run(0, |_| Ok(())).is_err());
}

#[test]
fn wait_on_foreign_segment_is_refused() {
    on(2, |w| {
        let seg = w.alloc_symmetric(64)?;
        let mine = w.alloc(64)?;
        let all = w.all_handles(&mine)?;
        assert_eq!(all[w.rank() as usize], mine.handle());
        // Waiting needs a segment of this rank: a SymmetricSegment derefs to the local copy.
        w.signal(seg.handle(w.rank())?, 0, SignalOp::Set(1))?;
        w.wait_until(&seg, 0, 1)?;
        w.barrier()
    });
}

/// 100,000 put_signal round trips with random delays; every byte of every message checked.
#[test]
fn stress_round_trips_with_random_delays() {
    const ROUNDS: u64 = 100_000;
    on(2, |w| {
        let seg = w.alloc_symmetric(8192)?;
        let peer = *seg.handle(1 - w.rank())?;
        let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(w.rank());
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut msg = vec![0u8; 4000];
        let mut got = vec![0u8; 4000];
        for seq in 1..=ROUNDS {
            let len = (next() % 4000) as usize;
            let fill = low_byte(seq).wrapping_mul(31) ^ low_byte(u64::from(w.rank()));
            for (i, b) in msg[..len].iter_mut().enumerate() {
                *b = fill.wrapping_add(low_byte(i as u64));
            }
            let r = next();
            if r % 64 == 0 {
                std::thread::yield_now();
            } else if r % 4096 == 1 {
                std::thread::sleep(Duration::from_micros(r % 300));
            }
            // Length travels in the first 8 bytes, payload after; signal in its own line.
            let mut framed = (len as u64).to_le_bytes().to_vec();
            framed.extend_from_slice(&msg[..len]);
            if w.rank() == 0 {
                w.put_signal(&peer, 64, &framed, &peer, 0, SignalOp::Set(seq))?;
                w.wait_until(&seg, 0, seq)?;
            } else {
                w.wait_until(&seg, 0, seq)?;
            }
            let mut lenb = [0u8; 8];
            seg.read(64, &mut lenb)?;
            let plen = usize::try_from(u64::from_le_bytes(lenb)).unwrap();
            seg.read(72, &mut got[..plen])?;
            let pfill = low_byte(seq).wrapping_mul(31) ^ low_byte(u64::from(1 - w.rank()));
            for (i, &b) in got[..plen].iter().enumerate() {
                assert_eq!(
                    b,
                    pfill.wrapping_add(low_byte(i as u64)),
                    "rank {} seq {seq} byte {i}",
                    w.rank()
                );
            }
            if w.rank() == 1 {
                w.put_signal(&peer, 64, &framed, &peer, 0, SignalOp::Set(seq))?;
            }
        }
        Ok(())
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any put either lands exactly where asked or is refused and writes nothing.
    #[test]
    fn puts_land_exactly_or_not_at_all(ops in proptest::collection::vec((0usize..600, 0usize..300, any::<u8>()), 1..20)) {
        let ok = on(1, |w| {
            let seg = w.alloc(512)?;
            let mut model = vec![0u8; 512];
            for &(off, len, v) in &ops {
                let data = vec![v; len];
                match w.put(&seg.handle(), off, &data) {
                    Ok(()) => model[off..off + len].copy_from_slice(&data),
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::OutOfBounds);
                        assert!(off + len > 512);
                    }
                }
            }
            let mut all = vec![0u8; 512];
            seg.read(0, &mut all)?;
            Ok(all == model)
        });
        prop_assert!(ok[0]);
    }
}

#[test]
fn zero_copy_views_check_range_and_alignment() {
    on(1, |w| {
        let mut seg = w.alloc(64)?;
        seg.write_slice(0, &[1u64, 2, 3, 4, 5, 6, 7, 8])?;
        // SAFETY: one rank, no peer and no other path writes `seg` while the views live.
        unsafe {
            assert_eq!(seg.view::<u64>(2, 3)?, &[3, 4, 5]);
            assert_eq!(
                seg.view::<u64>(6, 3).unwrap_err().kind(),
                ErrorKind::OutOfBounds
            );
            assert_eq!(
                seg.view::<u64>(usize::MAX, 1).unwrap_err().kind(),
                ErrorKind::OutOfBounds
            );
            let all = seg.as_mut_slice::<u32>();
            assert_eq!(all.len(), 16);
            all[0] = 9;
        }
        let mut first = [0u64];
        seg.read_slice(0, &mut first)?;
        assert_eq!(first[0] & 0xffff_ffff, 9);
        Ok(())
    });
}
