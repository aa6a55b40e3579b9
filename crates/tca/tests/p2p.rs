//! Two-sided messages (`tca::p2p`): matching order under random schedules, both protocols and
//! their boundary, wildcards and fairness, many mixed messages, persistent requests, and every
//! bad-input case. Thread ranks (processes and the network transport run the fabric suite).

use proptest::prelude::*;
use tca::p2p::{ANY_SOURCE, ANY_TAG, Persistent, Source, Tag, test_all, wait_all, wait_any};
use tca::{Comm, ErrorKind, threads};

/// The low byte of `x`: test patterns wrap mod 256 on purpose.
fn low_byte(x: u64) -> u8 {
    x.to_le_bytes()[0]
}

fn pattern(seed: usize, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| low_byte((seed * 31 + i * 7) as u64))
        .collect()
}

/// A small index as a message tag.
fn tag(i: usize) -> i32 {
    i32::try_from(i).unwrap()
}

#[test]
fn blocking_both_protocols_and_the_boundary() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let e = c.eager_limit();
        let sizes = [0, 1, 8, 40, 41, 64, 4096, e - 1, e, e + 1, 200_000, 3 << 20];
        for (i, &n) in sizes.iter().enumerate() {
            if c.rank() == 0 {
                c.send_bytes(&pattern(i, n), 1, tag(i))?;
                let mut back = vec![0u8; n];
                let st = c.recv_bytes(&mut back, 1, tag(i))?;
                assert_eq!(st.bytes, n);
                assert_eq!(back, pattern(i + 1, n), "size {n}");
            } else {
                let mut got = vec![0u8; n];
                let st = c.recv_bytes(&mut got, 0, ANY_TAG)?;
                assert_eq!((st.source, st.tag, st.bytes), (0, tag(i), n));
                assert_eq!(got, pattern(i, n), "size {n}");
                c.send_bytes(&pattern(i + 1, n), 0, tag(i))?;
            }
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn typed_and_sendrecv_ring() {
    for p in [1u32, 3, 8] {
        threads::run(p, |w| {
            let c = Comm::world(w)?;
            let (me, p) = (c.rank(), c.size());
            let right = (me + 1) % p;
            let left = (me + p - 1) % p;
            for n in [1usize, 1000, 100_000] {
                let send: Vec<f64> = (0..n).map(|i| (me as usize * n + i) as f64).collect();
                let mut recv = vec![0f64; n];
                let st = c.sendrecv(&send, right, 5, &mut recv, left, 5)?;
                assert_eq!((st.source, st.count::<f64>()), (left, n));
                assert!(
                    recv.iter()
                        .enumerate()
                        .all(|(i, &v)| v == (left as usize * n + i) as f64)
                );
                let mut buf = send.clone();
                c.sendrecv_replace(&mut buf, right, 6, left, 6)?;
                assert_eq!(buf, recv);
            }
            Ok(())
        })
        .unwrap();
    }
}

#[test]
fn non_overtaking_with_wildcards_and_unexpected() {
    threads::run(3, |w| {
        let c = Comm::world(w)?;
        let e = c.eager_limit();
        if c.rank() < 2 {
            // Mixed sizes (eager and rendezvous), tags alternating; sent before anyone posts.
            let mut reqs = Vec::new();
            for i in 0..40usize {
                let n = if i % 5 == 0 { e + 100 } else { i * 3 };
                let mut v = pattern(i + 100 * c.rank() as usize, n);
                if n >= 8 {
                    v[..8].copy_from_slice(&(i as u64).to_le_bytes());
                }
                reqs.push(c.isend(&v, 2, tag(i % 2))?);
            }
            wait_all(&mut reqs)?;
        } else {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let mut last = [[None::<u64>; 2]; 2];
            let mut buf = vec![0u8; e + 100];
            for _ in 0..80 {
                let st = c.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
                let (s, t) = (st.source as usize, usize::try_from(st.tag).unwrap());
                if st.bytes >= 8 {
                    let i = u64::from_le_bytes(buf[..8].try_into().unwrap());
                    assert_eq!((i % 2) as usize, t);
                    if let Some(prev) = last[s][t] {
                        assert!(i > prev, "message {i} from {s} tag {t} overtook {prev}");
                    }
                    last[s][t] = Some(i);
                }
            }
        }
        Ok(())
    })
    .unwrap();
}

/// A window of small sends that outruns the receiver's ring: what queues behind the full ring
/// goes in bundles (several messages in one packet, each of at most 256 bytes on shared
/// memory, half a packet less 16 bytes across a network, 16,368 at 2 ranks: the edges of the
/// run's transport are among the sizes) — with larger eager
/// messages and rendezvous between them, which go alone — and every message still arrives whole, with its
/// own tag and length, in the order it was sent; received by blocking receives and by
/// windows of requests waited together.
#[test]
fn a_window_of_small_sends_arrives_whole_and_in_order() {
    const NET_BUNDLE: usize = (16 << 10) - 16;
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let e = c.eager_limit();
        let most = e.max(NET_BUNDLE + 1);
        let size = |i: usize| match i % 11 {
            0 => 0,
            3 => 256,
            4 if i % 22 == 4 => NET_BUNDLE,
            5 => 257,
            6 if i % 22 == 6 => NET_BUNDLE + 1,
            7 => 1000,
            10 if i % 33 == 10 => e + 1,
            k => k * 9 + i % 7,
        };
        let count = 600;
        if c.rank() == 0 {
            let msgs: Vec<Vec<u8>> = (0..count).map(|i| pattern(i, size(i))).collect();
            let mut reqs = msgs
                .iter()
                .enumerate()
                .map(|(i, m)| c.isend(m, 1, tag(i % 3)))
                .collect::<tca::Result<Vec<_>>>()?;
            wait_all(&mut reqs)?;
        } else {
            // Late: the sender's ring fills and the rest of its window queues.
            std::thread::sleep(std::time::Duration::from_millis(30));
            let check = |i: usize, st: tca::p2p::Status, got: &[u8]| {
                assert_eq!(
                    (st.source, st.tag, st.bytes),
                    (0, tag(i % 3), size(i)),
                    "{i}"
                );
                assert_eq!(got[..size(i)], pattern(i, size(i))[..], "message {i}");
            };
            let mut buf = vec![0u8; most + 1];
            for i in 0..count / 2 {
                let st = c.recv_bytes(&mut buf, 0, ANY_TAG)?;
                check(i, st, &buf);
            }
            let mut bufs = vec![vec![0u8; most + 1]; 50];
            for first in (count / 2..count).step_by(50) {
                let mut reqs = bufs
                    .iter_mut()
                    .map(|b| c.irecv(b, 0, ANY_TAG))
                    .collect::<tca::Result<Vec<_>>>()?;
                wait_all(&mut reqs)?;
                let sts: Vec<_> = reqs.iter().map(|r| r.status().unwrap()).collect();
                drop(reqs);
                for (k, st) in sts.into_iter().enumerate() {
                    check(first + k, st, &bufs[k]);
                }
            }
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn irecv_posted_before_send_and_wait_any() {
    threads::run(4, |w| {
        let c = Comm::world(w)?;
        let e = c.eager_limit();
        if c.rank() == 0 {
            let mut bufs: Vec<Vec<u8>> = (1..4).map(|_| vec![0u8; 2 * e]).collect();
            let mut reqs = bufs
                .iter_mut()
                .zip(1u32..)
                .map(|(b, q)| c.irecv(b, q, 9))
                .collect::<tca::Result<Vec<_>>>()?;
            c.barrier()?;
            let mut seen = [false; 3];
            for _ in 0..3 {
                let (i, st) = wait_any(&mut reqs)?;
                assert_eq!(st.source as usize, i + 1);
                assert!(!seen[i]);
                seen[i] = true;
            }
            assert!(wait_any(&mut reqs).is_err(), "no request left");
            drop(reqs);
            for (q, b) in bufs.iter().enumerate() {
                let n = if q % 2 == 0 { 10 } else { 2 * e };
                assert_eq!(&b[..n], &pattern(q + 1, n)[..]);
            }
        } else {
            c.barrier()?;
            let q = c.rank() as usize;
            let n = if (q - 1) % 2 == 0 { 10 } else { 2 * e };
            c.send_bytes(&pattern(q, n), 0, 9)?;
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn probe_then_receive_the_size_it_says() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        if c.rank() == 0 {
            c.send(&[7u32; 1000], 1, 3)?;
            c.send(&[1u32; 10], 1, 4)?;
        } else {
            let st = c.probe(0, 4)?;
            assert_eq!((st.tag, st.count::<u32>()), (4, 10));
            assert!(c.iprobe(0, 99)?.is_none());
            let st = c.probe(ANY_SOURCE, ANY_TAG)?;
            assert_eq!(st.tag, 3, "probe sees the earlier message first");
            let mut v = vec![0u32; st.count::<u32>()];
            c.recv(&mut v, 0, 3)?;
            assert!(v.iter().all(|&x| x == 7));
            let mut v = [0u32; 10];
            c.recv(&mut v, 0, 4)?;
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn persistent_requests_reused_ten_thousand_times() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let peer = 1 - c.rank();
        let small = vec![c.rank() as u64; 4];
        let big = vec![c.rank() as u64 + 10; 10_000];
        let mut rs = vec![0u64; 4];
        let mut rb = vec![0u64; 10_000];
        let mut ops = vec![
            c.recv_init(&mut rs, peer, 1)?,
            c.recv_init(&mut rb, peer, 2)?,
            c.send_init(&small, peer, 1)?,
            c.send_init(&big, peer, 2)?,
        ];
        for it in 0..10_000 {
            Persistent::start_all(&mut ops)?;
            Persistent::wait_all(&mut ops)?;
            if it == 0 {
                // One more small round, checking that an active request cannot start again.
                ops[0].start()?;
                ops[2].start()?;
                assert!(ops[2].start().is_err(), "started twice");
                ops[2].wait()?;
                ops[0].wait()?;
                assert!(ops[0].wait().is_err(), "waited while not started");
            }
        }
        let fp = c.p2p_footprint();
        drop(ops);
        assert!(rs.iter().all(|&v| v == peer as u64));
        assert!(rb.iter().all(|&v| v == peer as u64 + 10));
        Ok(fp)
    })
    .unwrap();
}

#[test]
fn many_mixed_messages_between_eight_ranks() {
    // 100,000 messages: every rank sends to every other in rounds, sizes mixed, tags by
    // round; receivers check content and order per (source, tag).
    const ROUNDS: usize = 1786; // 8 ranks * 7 peers * 1786 rounds = 100,016 messages
    threads::run(8, |w| {
        let c = Comm::world(w)?;
        let (me, p) = (c.rank() as usize, c.size() as usize);
        let e = c.eager_limit();
        let size = |r: usize, s: usize| match (r + s) % 97 {
            0 => e + 64,
            k if k % 3 == 0 => 200,
            k => k % 40,
        };
        let mut rb: Vec<Vec<u8>> = (0..p).map(|_| vec![0u8; e + 64]).collect();
        for r in 0..ROUNDS {
            let mut reqs = Vec::with_capacity(p);
            for (q, b) in rb.iter_mut().enumerate() {
                if q != me {
                    reqs.push(c.irecv(b, u32::try_from(q).unwrap(), tag(r % 4))?);
                }
            }
            for q in (0..p).filter(|&q| q != me) {
                let n = size(r, me);
                let mut v = vec![low_byte((r + me) as u64); n];
                if let Some(x) = v.first_mut() {
                    *x = low_byte(q as u64);
                }
                c.send_bytes(&v, u32::try_from(q).unwrap(), tag(r % 4))?;
            }
            wait_all(&mut reqs)?;
            for (k, q) in (0..p).filter(|&q| q != me).enumerate() {
                let st = reqs[k].status().unwrap();
                let n = size(r, q);
                assert_eq!((st.source as usize, st.bytes), (q, n));
            }
            drop(reqs);
            for (q, b) in rb.iter().enumerate().filter(|&(q, _)| q != me) {
                let n = size(r, q);
                if n > 0 {
                    assert_eq!(b[0], low_byte(me as u64));
                    assert!(
                        b[1..n].iter().all(|&x| x == low_byte((r + q) as u64)),
                        "round {r} from {q}"
                    );
                }
            }
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn any_source_is_fair() {
    // Two senders each fill their ring to rank 0 (4 packets: no credit needed), then everyone
    // meets; rank 0 then takes 8 messages from ANY_SOURCE. Whatever the schedule, a source
    // can win at most a ring's worth in a row, so both appear among the first five. Repeated.
    threads::run(3, |w| {
        let c = Comm::world(w)?;
        for round in 0..50 {
            if c.rank() == 0 {
                c.barrier()?;
                let mut order = Vec::new();
                for _ in 0..8 {
                    let mut b = [0u8; 8];
                    order.push(c.recv(&mut b, ANY_SOURCE, round)?.source);
                }
                assert!(
                    order[..5].contains(&1) && order[..5].contains(&2),
                    "{order:?}"
                );
                assert_eq!(order.iter().filter(|&&s| s == 1).count(), 4);
            } else {
                let mut reqs = (0..4)
                    .map(|_| c.isend(&[1u8; 8], 0, round))
                    .collect::<tca::Result<Vec<_>>>()?;
                wait_all(&mut reqs)?;
                c.barrier()?;
            }
            c.barrier()?;
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn receive_into_a_registered_segment() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let n = 1 << 20;
        if c.rank() == 0 {
            c.send_bytes(&pattern(3, n), 1, 0)?;
            c.send_bytes(&pattern(4, 100), 1, 0)?;
        } else {
            let seg = w.alloc(n + 4096)?;
            let mut r = c.irecv_into(&seg, 4096, n, 0, 0)?;
            assert_eq!(r.wait()?.bytes, n);
            let mut got = vec![0u8; n];
            seg.read(4096, &mut got)?;
            assert_eq!(got, pattern(3, n));
            let mut r = c.irecv_into(&seg, 0, 100, 0, 0)?;
            r.wait()?;
            let mut got = vec![0u8; 100];
            seg.read(0, &mut got)?;
            assert_eq!(got, pattern(4, 100));
            let other = w.alloc(64)?;
            assert!(c.irecv_into(&other, 32, 64, 0, 0).is_err(), "out of bounds");
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn bad_input_is_a_clear_error() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let e = c.eager_limit();
        assert_eq!(
            c.send(&[1u8], 2, 0).unwrap_err().kind(),
            ErrorKind::InvalidRank
        );
        assert_eq!(
            c.recv(&mut [0u8], 5, 0).unwrap_err().kind(),
            ErrorKind::InvalidRank
        );
        assert_eq!(
            c.send(&[1u8], 0, -1).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert!(c.irecv(&mut [0u8; 1], Source::Any, Tag::Is(-3)).is_err());
        if c.rank() == 0 {
            // Truncation, both protocols: the error names both lengths.
            c.send_bytes(&[1u8; 100], 1, 1)?;
            c.send_bytes(&vec![2u8; e + 10], 1, 2)?;
            // Type mismatch.
            c.send(&[1.0f64; 4], 1, 3)?;
            // A request waited twice, a dropped receive, a dropped in-flight send.
            let mut r = c.isend(&[5u8; 8], 1, 4)?;
            r.wait()?;
            assert_eq!(r.wait().unwrap_err().kind(), ErrorKind::InvalidArgument);
            let big = vec![6u8; 3 * e];
            drop(c.isend(&big, 1, 5)?);
            drop(big);
            c.send(&[7u8; 8], 1, 6)?;
            // After rank 1 cancelled a receive of tag 8 (it says so), tag 8 goes to its next
            // receive.
            c.recv(&mut [0u8; 1], 1, 0)?;
            c.send(&[8u8; 8], 1, 8)?;
        } else {
            let mut small = [0u8; 10];
            let err = c.recv_bytes(&mut small, 0, 1).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Truncated);
            assert!(
                err.to_string().contains("100") && err.to_string().contains("10-byte"),
                "{err}"
            );
            assert_eq!(small, [1u8; 10]);
            let mut small = vec![0u8; e];
            let err = c.recv_bytes(&mut small, 0, 2).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Truncated);
            assert!(err.to_string().contains(&format!("{}", e + 10)), "{err}");
            let mut ints = [0i32; 8];
            let err = c.recv(&mut ints, 0, 3).unwrap_err();
            assert!(
                err.to_string().contains("f64") && err.to_string().contains("i32"),
                "{err}"
            );
            let mut b = [0u8; 8];
            c.recv(&mut b, 0, 4)?;
            let mut big = vec![0u8; 3 * e];
            c.recv(&mut big, 0, 5)?;
            assert!(
                big.iter().all(|&x| x == 6),
                "a dropped isend still delivers its data"
            );
            c.recv(&mut b, 0, 6)?;
            assert_eq!(b, [7u8; 8]);
            // A receive posted and dropped unmatched is cancelled: the next message of its
            // tag goes to the next receive.
            {
                let mut lost = [0u8; 8];
                let r = c.irecv(&mut lost, 0, 8)?;
                drop(r);
            }
            c.send(&[0u8; 1], 0, 0)?;
            c.recv(&mut b, 0, 8)?;
            assert_eq!(b, [8u8; 8]);
        }
        // Nothing left over: both sides agree.
        c.barrier()?;
        assert!(c.iprobe(ANY_SOURCE, ANY_TAG)?.is_none());
        Ok(())
    })
    .unwrap();
}

#[test]
fn a_dead_peer_is_an_error_naming_it() {
    let r = threads::run_each(2, |w| {
        let c = Comm::world(w)?;
        if c.rank() == 1 {
            // Leaves without sending what rank 0 waits for.
            return Ok(());
        }
        let mut b = [0u8; 8];
        c.recv(&mut b, 1, 0).map(|_| ())
    });
    let e = r[0].as_ref().unwrap_err();
    assert_eq!(e.rank(), Some(1), "{e}");
}

#[derive(Debug, Clone)]
struct Msg {
    from: u32,
    tag: i32,
    len: usize,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Random senders, tags, sizes (both protocols), delays and wildcard receives: every
    /// message arrives once, intact, and messages of one sender and tag arrive in order.
    #[test]
    fn matching_order_under_random_schedules(
        msgs in prop::collection::vec((1u32..4, 0i32..3, prop_oneof![0usize..64, 16_000usize..20_000]), 1..40),
        wild in any::<u64>(),
        delays in prop::collection::vec(0u64..300, 4),
    ) {
        let msgs: Vec<Msg> = msgs.into_iter().map(|(from, tag, len)| Msg { from, tag, len }).collect();
        threads::run(4, |w| {
            let c = Comm::world(w)?;
            std::thread::sleep(std::time::Duration::from_micros(delays[c.rank() as usize]));
            if c.rank() > 0 {
                let mut reqs = Vec::new();
                for (i, m) in msgs.iter().enumerate().filter(|(_, m)| m.from == c.rank()) {
                    let mut v = pattern(i, m.len.max(8));
                    v[..8].copy_from_slice(&(i as u64).to_le_bytes());
                    reqs.push(c.isend(&v, 0, m.tag)?);
                }
                wait_all(&mut reqs)?;
            } else {
                let mut got = vec![false; msgs.len()];
                let mut last = std::collections::HashMap::new();
                let mut buf = vec![0u8; 20_008];
                for k in 0..msgs.len() {
                    let src = if wild >> (k % 64) & 1 == 1 { ANY_SOURCE } else { Source::Rank(msgs.iter().enumerate().find(|(i, _)| !got[*i]).unwrap().1.from) };
                    let st = c.recv_bytes(&mut buf, src, ANY_TAG)?;
                    let i = usize::try_from(u64::from_le_bytes(buf[..8].try_into().unwrap())).unwrap();
                    let m = &msgs[i];
                    assert!(!got[i], "message {i} twice");
                    got[i] = true;
                    assert_eq!((st.source, st.tag, st.bytes), (m.from, m.tag, m.len.max(8)));
                    assert_eq!(&buf[8..st.bytes], &pattern(i, st.bytes)[8..]);
                    if let Some(prev) = last.insert((m.from, m.tag), i) {
                        assert!(i > prev, "{i} overtook {prev}");
                    }
                }
                assert!(got.iter().all(|&g| g));
            }
            Ok(())
        }).unwrap();
    }
}

#[test]
fn test_all_finishes_everything_eventually() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let peer = 1 - c.rank();
        let mut bufs = [[0u8; 16]; 8];
        let mut reqs = bufs
            .iter_mut()
            .map(|b| c.irecv(b, peer, 0))
            .collect::<tca::Result<Vec<_>>>()?;
        for i in 0..8u8 {
            c.send(&[i; 16], peer, 0)?;
        }
        while !test_all(&mut reqs)? {}
        drop(reqs);
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(b, &[u8::try_from(i).unwrap(); 16]);
        }
        Ok(())
    })
    .unwrap();
}

/// Bound channels (`send_init_from` / `recv_init_into`): rounds reused many times with fresh
/// data each round, both directions, three sizes (empty, eager-sized, 1 MiB), ordinary
/// messages of the same tags interleaved (they never match a channel), and a binding that
/// arrives before its receive is posted.
#[test]
fn bound_channels_reused_beside_ordinary_messages() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let (me, peer) = (c.rank(), 1 - c.rank());
        let sizes = [0usize, 24, 1 << 20];
        let at = |k: usize| k * (2 << 20);
        let out = w.alloc(at(sizes.len()))?;
        let inn = w.alloc(at(sizes.len()))?;
        if me == 0 {
            // Let rank 0's bindings arrive before rank 1 posts its receives.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut ops = Vec::new();
        for (k, &n) in sizes.iter().enumerate() {
            ops.push(c.recv_init_into(&inn, at(k), n, peer, tag(k))?);
        }
        for (k, &n) in sizes.iter().enumerate() {
            ops.push(c.send_init_from(&out, at(k), n, peer, tag(k))?);
        }
        let rounds = 300;
        for round in 0..rounds {
            for (k, &n) in sizes.iter().enumerate() {
                out.write(at(k), &pattern(round * 10 + k + me as usize, n))?;
            }
            Persistent::start_all(&mut ops)?;
            // An ordinary message with a channel's tag, each way: matched as MPI says.
            c.send(&[round as u64], peer, 1)?;
            let mut x = [0u64];
            c.recv(&mut x, peer, 1)?;
            assert_eq!(x[0], round as u64);
            for (k, op) in ops.iter_mut().enumerate().take(sizes.len()) {
                let st = op.wait()?;
                assert_eq!((st.source, st.tag, st.bytes), (peer, tag(k), sizes[k]));
            }
            Persistent::wait_all(&mut ops)?;
            for (k, &n) in sizes.iter().enumerate() {
                let mut got = vec![0u8; n];
                inn.read(at(k), &mut got)?;
                assert_eq!(
                    got,
                    pattern(round * 10 + k + peer as usize, n),
                    "round {round}"
                );
            }
        }
        Ok(())
    })
    .unwrap();
}

/// Bound channels' errors and closing: truncation every round, foreign or out-of-range
/// segments, a receiver that closes (the sender's next round says so), a sender dropped with
/// a round under way (it still goes out), and slots reused after both ends closed.
#[test]
fn bound_channel_errors_and_closing() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let (me, peer) = (c.rank(), 1 - c.rank());
        let seg = w.alloc(4096)?;
        let other = w.alloc(64)?;
        assert!(
            c.send_init_from(&seg, 4000, 200, peer, 0).is_err(),
            "out of range"
        );
        assert!(
            c.recv_init_into(&other, 0, 65, peer, 0).is_err(),
            "out of range"
        );
        assert!(c.send_init_from(&seg, 0, 8, 7, 0).is_err(), "no rank 7");
        assert!(
            c.recv_init_into(&seg, 0, 8, peer, -1).is_err(),
            "negative tag"
        );
        // Truncation: 100 bytes into 64, every round.
        if me == 0 {
            let mut s = c.send_init_from(&seg, 0, 100, 1, 9)?;
            for _ in 0..3 {
                s.start()?;
                s.wait()?;
            }
        } else {
            let mut r = c.recv_init_into(&seg, 0, 64, 0, 9)?;
            for _ in 0..3 {
                r.start()?;
                let e = r.wait().unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Truncated, "{e}");
            }
        }
        c.barrier()?;
        // The receiver closes after one round; the sender's next round is an error naming it.
        if me == 0 {
            let mut s = c.send_init_from(&seg, 0, 8, 1, 3)?;
            s.start()?;
            s.wait()?;
            c.barrier()?;
            s.start()?;
            let e = s.wait().unwrap_err();
            assert!(e.to_string().contains("closed"), "{e}");
        } else {
            let mut r = c.recv_init_into(&seg, 0, 8, 0, 3)?;
            r.start()?;
            r.wait()?;
            drop(r);
            c.barrier()?;
        }
        c.barrier()?;
        // A sender dropped with its round under way: the round still arrives.
        if me == 0 {
            seg.write(0, &[42u8; 8])?;
            let mut s = c.send_init_from(&seg, 0, 8, 1, 4)?;
            s.start()?;
            drop(s);
            c.barrier()?;
        } else {
            c.barrier()?;
            let mut r = c.recv_init_into(&seg, 100, 8, 0, 4)?;
            r.start()?;
            r.wait()?;
            let mut got = [0u8; 8];
            seg.read(100, &mut got)?;
            assert_eq!(got, [42u8; 8]);
        }
        c.barrier()?;
        // Open and close more channels than a pair has slots: closed slots are reused.
        for k in 0..(2 * i32::try_from(tca::p2p::CHANNELS).unwrap()) {
            if me == 0 {
                let mut s = c.send_init_from(&seg, 0, 8, 1, 100 + k)?;
                s.start()?;
                s.wait()?;
            } else {
                let mut r = c.recv_init_into(&seg, 0, 8, 0, 100 + k)?;
                r.start()?;
                r.wait()?;
            }
            c.barrier()?;
        }
        Ok(())
    })
    .unwrap();
}

/// A rendezvous into plain memory, blocking or through a waited request, arrives intact; with
/// cross-memory attach it is written straight into the buffer, so no landing buffer is ever
/// pooled (the receiver's pooled bytes stay below one message).
#[test]
fn rendezvous_into_plain_memory_is_written_once() {
    let n = 1 << 20;
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        // Every rendezvous by cross-memory attach where the kernel allows it (the default
        // takes only messages past the caches that way).
        c.set_cma_min(Some(0));
        for round in 0..4 {
            if c.rank() == 0 {
                c.send_bytes(&pattern(round, n), 1, tag(round))?;
                // Acknowledged, so that the next round's RTS may arrive before its receive.
                c.recv_bytes(&mut [0u8; 1], 1, 99)?;
            } else {
                let mut got = vec![0u8; n];
                if round % 2 == 0 {
                    c.recv_bytes(&mut got, 0, tag(round))?;
                } else {
                    let st = c.irecv(&mut got, 0, tag(round))?.wait()?;
                    assert_eq!(st.bytes, n);
                }
                assert!(got == pattern(round, n), "round {round}");
                c.send_bytes(&[1], 0, 99)?;
            }
        }
        if c.rank() == 1 && c.cma_reaches(0)? {
            let (_, pooled) = c.p2p_footprint();
            assert!(
                pooled < n,
                "{pooled} bytes pooled: a landing buffer was used"
            );
        }
        Ok(())
    })
    .unwrap();
}

/// A receiver whose wait fails while its buffer's address is posted (here: a timeout, the
/// sender not serving its rendezvous) revokes the transfer: its error comes back, the sender's
/// send fails naming it, and nothing is ever written into the buffer afterwards. Both ways a
/// receive waits: a blocking receive, and the wait of a receive request.
#[test]
fn a_receive_given_up_is_never_written() {
    use std::sync::atomic::{AtomicU32, Ordering};
    if !tca::p2p::cross_memory_attach() {
        eprintln!("cross-memory attach is not permitted here; nothing to test");
        return;
    }
    // Rounds rank 1 has given up (rank 0 makes no tca call until then).
    static GIVEN_UP: AtomicU32 = AtomicU32::new(0);
    // Rounds whose send rank 0 has started (its request-to-send is in rank 1's ring).
    static SENT: AtomicU32 = AtomicU32::new(0);
    GIVEN_UP.store(0, Ordering::SeqCst);
    SENT.store(0, Ordering::SeqCst);
    let n = 256 << 10;
    let r = threads::run_each(2, |w| {
        let c = Comm::world(w)?;
        c.set_cma_min(Some(0));
        // Only between ranks of one node on shared memory (not across a network, nor on a
        // simulated one, whose waits do not count host time either). Symmetric: both agree.
        if !c.cma_reaches(1 - c.rank())? {
            return Ok(());
        }
        for round in 0..2u32 {
            let tag = 5 + tag(round as usize);
            if c.rank() == 0 {
                let mut req = if round == 0 {
                    let req = c.isend(&pattern(1, n), 1, tag)?;
                    // Behind the request-to-send in the pair's ordered ring: when rank 1 has
                    // this, the request is queued there. Eager, into an empty ring: no
                    // progress is made.
                    c.send_bytes(&[1], 1, 96)?;
                    req
                } else {
                    // Rank 1's receive request is posted: the request-to-send reaches it in
                    // its wait.
                    c.recv_bytes(&mut [0u8; 1], 1, 96)?;
                    c.isend(&pattern(1, n), 1, tag)?
                };
                SENT.store(round + 1, Ordering::SeqCst);
                refused(&c, w, &mut req, || GIVEN_UP.load(Ordering::SeqCst) > round)?;
            } else {
                let mut buf = vec![0u8; n];
                let e = if round == 0 {
                    c.recv_bytes(&mut [0u8; 1], 0, 96)?;
                    w.set_timeout(Some(std::time::Duration::from_millis(300)));
                    c.recv_bytes(&mut buf, 0, tag).unwrap_err()
                } else {
                    let mut req = c.irecv(&mut buf, 0, tag)?;
                    c.send_bytes(&[1], 0, 96)?;
                    // Until rank 0's request-to-send is here (a timeout before it arrived
                    // would cancel the receive and leave that send unmatched).
                    sleep_until(|| SENT.load(Ordering::SeqCst) > round);
                    w.set_timeout(Some(std::time::Duration::from_millis(300)));
                    req.wait().unwrap_err()
                };
                given_up(&c, w, &e, &mut buf, || {
                    GIVEN_UP.store(round + 1, Ordering::SeqCst);
                })?;
            }
        }
        Ok(())
    });
    for x in r {
        x.unwrap();
    }
}

/// A rendezvous received into a `Buffer` (tca's memory) from a rank of this node is one put
/// straight into it, blocking or through a waited request, with cross-memory attach off: no
/// landing buffer is ever pooled, and the data arrives intact at the slice's offset.
#[test]
fn rendezvous_into_a_buffer_is_one_put() {
    let n = 1 << 20;
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        c.set_cma_min(None);
        let mut buf = c.buffer::<u8>(n + 64)?;
        for round in 0..4 {
            if c.rank() == 0 {
                c.send_bytes(&pattern(round, n), 1, tag(round))?;
                c.recv_bytes(&mut [0u8; 1], 1, 99)?;
            } else {
                let got = &mut buf[64..];
                if round % 2 == 0 {
                    c.recv_bytes(got, 0, tag(round))?;
                } else {
                    let st = c.irecv(got, 0, tag(round))?.wait()?;
                    assert_eq!(st.bytes, n);
                }
                assert!(buf[64..] == pattern(round, n)[..], "round {round}");
                c.send_bytes(&[1], 0, 99)?;
            }
        }
        if c.rank() == 1 {
            let (_, pooled) = c.p2p_footprint();
            let straight = c.single_copy();
            assert_eq!(
                pooled < n,
                straight,
                "{pooled} bytes pooled (single copy possible: {straight})"
            );
        }
        Ok(())
    })
    .unwrap();
}

/// A receive into a `Buffer` whose wait fails while the buffer is posted revokes the put, as a
/// receive by cross-memory attach does: the sender's send fails naming the given-up receive,
/// and nothing is written into the buffer afterwards.
#[test]
fn a_receive_into_a_buffer_given_up_is_never_written() {
    use std::sync::atomic::{AtomicBool, Ordering};
    // Rank 1 has given up (rank 0 makes no tca call until then: its progress would serve the
    // rendezvous).
    static GIVEN_UP: AtomicBool = AtomicBool::new(false);
    // Rank 0's request-to-send is in rank 1's ring: rank 1's wait matches it at once (a
    // timeout before it arrived would cancel the receive and leave the send unmatched).
    static SENT: AtomicBool = AtomicBool::new(false);
    GIVEN_UP.store(false, Ordering::SeqCst);
    SENT.store(false, Ordering::SeqCst);
    let n = 256 << 10;
    let r = threads::run_each(2, |w| {
        let c = Comm::world(w)?;
        c.set_cma_min(None);
        let mut buf = c.buffer::<u8>(n)?;
        if !c.single_copy() {
            eprintln!("no rank of this node reached through shared memory; nothing to test");
            return Ok(());
        }
        let tag = 77;
        if c.rank() == 0 {
            // Rank 1's receive is posted: its wait matches the request-to-send and posts the
            // buffer, then gives up before this rank serves it.
            c.recv_bytes(&mut [0u8; 1], 1, 96)?;
            let mut req = c.isend(&pattern(1, n), 1, tag)?;
            SENT.store(true, Ordering::SeqCst);
            refused(&c, w, &mut req, || GIVEN_UP.load(Ordering::SeqCst))?;
        } else {
            let mut req = c.irecv(&mut buf[..], 0, tag)?;
            c.send_bytes(&[1], 0, 96)?;
            sleep_until(|| SENT.load(Ordering::SeqCst));
            w.set_timeout(Some(std::time::Duration::from_millis(300)));
            let e = req.wait().unwrap_err();
            drop(req);
            given_up(&c, w, &e, &mut buf, || {
                GIVEN_UP.store(true, Ordering::SeqCst)
            })?;
        }
        Ok(())
    });
    for x in r {
        x.unwrap();
    }
}

/// Rank 1's end of a give-up test once its wait failed with `e`: marks its buffer, lets rank
/// 0 try its send (`let_go`), waits until rank 0 has tried (and failed), and checks that
/// nothing was written into the buffer meanwhile.
fn given_up(
    c: &Comm<'_>,
    w: &tca::World,
    e: &tca::Error,
    buf: &mut [u8],
    let_go: impl FnOnce(),
) -> tca::Result<()> {
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    w.set_timeout(None);
    buf.fill(0xAA);
    let_go();
    c.recv_bytes(&mut [0u8; 1], 0, 97)?;
    assert!(
        buf.iter().all(|&b| b == 0xAA),
        "written after it was given up"
    );
    Ok(())
}

/// Rank 0's end of a give-up test: makes no tca call until rank 1 has given up (`given_up`;
/// its progress would serve the rendezvous), then checks that its send fails naming the
/// given-up receive, not hangs, and tells rank 1 it has tried.
fn refused(
    c: &Comm<'_>,
    w: &tca::World,
    req: &mut tca::p2p::Request<'_>,
    given_up: impl Fn() -> bool,
) -> tca::Result<()> {
    sleep_until(given_up);
    w.set_timeout(Some(std::time::Duration::from_secs(10)));
    let e = req.wait().unwrap_err();
    assert!(e.to_string().contains("gave its receive up"), "{e}");
    c.send_bytes(&[1], 1, 97)
}

/// Sleeps in 1 ms steps until `done` holds (a flag set by the other thread rank).
fn sleep_until(done: impl Fn() -> bool) {
    while !done() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
