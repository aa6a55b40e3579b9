//! The simulated transport: determinism, the network model's analytic costs (one put on an
//! idle link, puts sharing a link, a ring of puts around the torus), errors, and a 384-rank
//! timing-only broadcast. The collective, two-sided, active-message and fabric suites run
//! unchanged on it with `TCA_TRANSPORT=sim` (see `.ci/run`).

#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // times of at most seconds, in ps

use tca::sim::{self, Network, Options};
use tca::{Collective, Comm, ErrorKind, Op, SignalOp, SymmetricSegment, World};

fn peach2() -> Options {
    Options::new(Network::load("peach2-2x8").unwrap())
}

/// Picoseconds as the model rounds them.
fn ps(ns: f64) -> u64 {
    (ns * 1000.0).round() as u64
}

fn secs_to_ps(s: f64) -> u64 {
    (s * 1e12).round() as u64
}

/// The timed tests' common start: a symmetric segment of `n` payload bytes after a 64-byte
/// header of signal words, every rank past a barrier with nothing in flight, and the virtual
/// time then (picoseconds).
fn start(w: &World, n: usize) -> tca::Result<(SymmetricSegment, u64)> {
    let seg = w.alloc_symmetric(n + 64)?;
    w.barrier()?;
    w.quiet()?;
    Ok((seg, secs_to_ps(w.wtime())))
}

/// A DMA put of `n` bytes: (sender's issue time, first-hop latency (the hardware's setup and
/// the flight), time on the wire).
fn dma(net: &Network, n: usize) -> (u64, u64, u64) {
    let gbs = net.link.gbs.min(net.link.port_gbs).min(net.dma.read_gbs);
    (
        ps(net.software.put_ns + net.dma.descriptor_ns),
        ps(net.dma.setup_ns) + ps(net.dma.latency_ns),
        ps(n as f64 / gbs),
    )
}

/// Every rank's (time it sent, time it saw its word) for a put of `n` bytes plus a signal,
/// from every rank `r` to `dest(r)` (if any), started together after a barrier and a quiet.
fn timed_puts(
    opts: &Options,
    p: u32,
    n: usize,
    dest: impl Fn(u32) -> Option<u32> + Sync,
) -> Vec<(u64, Option<u64>)> {
    sim::run(opts, p, |w: &World| {
        let from = (0..p).find(|&s| dest(s) == Some(w.rank()));
        let (seg, t0) = start(w, n)?;
        if let Some(d) = dest(w.rank()) {
            let h = *seg.handle(d)?;
            w.put_signal(&h, 64, &vec![7u8; n], &h, 0, SignalOp::Set(1))?;
        }
        let seen = match from {
            Some(_) => {
                w.wait_until(seg.local(), 0, 1)?;
                Some(secs_to_ps(w.wtime()))
            }
            None => None,
        };
        w.barrier()?;
        Ok((t0, seen))
    })
    .unwrap()
    .results
}

#[test]
fn one_put_on_an_idle_link_costs_latency_plus_size_over_bandwidth() {
    let opts = peach2();
    let net = &opts.network;
    for n in [4096usize, 65536, 1 << 20] {
        let t = timed_puts(&opts, 2, n, |r| (r == 0).then_some(1));
        let (issue, lat, wire) = dma(net, n + 8);
        let (sent, _) = t[0];
        let seen = t[1].1.unwrap();
        assert_eq!(seen - sent, issue + lat + wire, "{n} bytes");
    }
    // 8 bytes go by PIO: its latency, the stores at the PIO rate.
    let t = timed_puts(&opts, 2, 8, |r| (r == 0).then_some(1));
    let pio = net.pio.as_ref().unwrap();
    let want = ps(net.software.put_ns + 16.0 / pio.gbs)
        + ps(pio.latency_ns)
        + ps(16.0 / net.link.gbs.min(pio.gbs));
    assert_eq!(t[1].1.unwrap() - t[0].0, want);
}

#[test]
fn two_puts_sharing_a_link_take_twice_the_serialisation() {
    // Rank 0 puts to rank 1, then through rank 1 to rank 2: both need rank 0's one port
    // and the link 0 -> 1, so the second starts when the first has crossed.
    let opts = peach2();
    let net = &opts.network;
    let n = 1 << 20;
    let t = sim::run(&opts, 3, |w: &World| {
        let (seg, t0) = start(w, n)?;
        if w.rank() == 0 {
            let data = vec![1u8; n];
            for d in [1, 2] {
                let h = *seg.handle(d)?;
                w.put_signal(&h, 64, &data, &h, 0, SignalOp::Set(1))?;
            }
            Ok((t0, 0))
        } else {
            w.wait_until(seg.local(), 0, 1)?;
            Ok((0, secs_to_ps(w.wtime())))
        }
    })
    .unwrap()
    .results;
    let (issue, lat, wire) = dma(net, n + 8);
    let sent = t[0].0;
    assert_eq!(t[1].1 - sent, issue + lat + wire);
    assert_eq!(
        t[2].1 - sent,
        issue + wire + lat + ps(net.link.hop_ns) + wire,
        "the second put waits for the shared link, then crosses one more hop"
    );
}

#[test]
fn a_messages_hardware_setup_holds_its_link() {
    // On Tofu a message's hardware setup (seed 002's L_H, `dma.setup_ns`) holds its sending
    // port and link: two puts from rank 0 to its x+ neighbour land a setup and a time on the
    // wire apart, not only the time on the wire (as they would if L_H were flight the next
    // message could overlap): eq. 9's segment of L_H + m_B/B.
    let opts = Options::new(Network::load("tofu-8x6x8").unwrap());
    let net = &opts.network;
    assert!(net.dma.setup_ns > 0.0);
    let n = 1 << 16;
    let t = sim::run(&opts, 2, |w: &World| {
        let (seg, t0) = start(w, n)?;
        if w.rank() == 0 {
            let h = *seg.handle(1)?;
            let data = vec![1u8; n];
            w.put_signal(&h, 64, &data, &h, 0, SignalOp::Set(1))?;
            w.put_signal(&h, 64, &data, &h, 8, SignalOp::Set(1))?;
            Ok((t0, 0, 0))
        } else {
            w.wait_until(seg.local(), 0, 1)?;
            let first = secs_to_ps(w.wtime());
            w.wait_until(seg.local(), 8, 1)?;
            Ok((0, first, secs_to_ps(w.wtime())))
        }
    })
    .unwrap()
    .results;
    let (issue, lat, wire) = dma(net, n + 8);
    assert_eq!(t[1].1 - t[0].0, issue + lat + wire);
    assert_eq!(t[1].2 - t[1].1, ps(net.dma.setup_ns) + wire);
}

#[test]
fn a_message_waiting_for_its_link_leaves_the_other_ports_free() {
    // On Tofu (4 ports a node) rank 0 puts to its x+ neighbour, then a small message to the
    // same neighbour, which waits on the link for the first; then to its y+, y- and z+
    // neighbours. The waiting message takes a port only from when it goes, so the three
    // others each find a port free and start as soon as they are issued: the last arrives
    // after five issues, one latency and its own time on the wire (not after the first
    // put's, as when the waiting message held a port from its issue on).
    let opts = Options::new(Network::load("tofu-8x6x8").unwrap());
    let net = &opts.network;
    let n = 1 << 20;
    let (x, y_up, y_down, z) = (1u32, 8u32, 40u32, 48u32);
    let t = sim::run(&opts, 49, |w: &World| {
        let (seg, t0) = start(w, n)?;
        let data = vec![1u8; n];
        match w.rank() {
            0 => {
                let hx = *seg.handle(x)?;
                w.put(&hx, 64, &data)?;
                w.put_signal(&hx, 64, &data[..8], &hx, 0, SignalOp::Set(1))?;
                for d in [y_up, y_down, z] {
                    let h = *seg.handle(d)?;
                    w.put_signal(&h, 64, &data, &h, 0, SignalOp::Set(1))?;
                }
                Ok(t0)
            }
            r if [x, y_up, y_down, z].contains(&r) => {
                w.wait_until(seg.local(), 0, 1)?;
                Ok(secs_to_ps(w.wtime()))
            }
            _ => Ok(0),
        }
    })
    .unwrap()
    .results;
    let (issue, lat, wire) = dma(net, n + 8);
    let sent = t[0];
    assert_eq!(t[z as usize] - sent, 5 * issue + lat + wire);
    assert_eq!(t[y_up as usize] - sent, 3 * issue + lat + wire);
}

#[test]
fn a_packet_past_its_header_line_is_one_message() {
    // A broadcast of one packet between two ranks: one that rides in its header line and
    // one whose payload does not (its payload and header chained, as PEACH2 chains DMA
    // descriptors) are the same number of network messages.
    let job = |bytes: usize| {
        sim::run(&peach2(), 2, move |w: &World| {
            let c = Comm::world(w)?;
            c.barrier()?;
            let mut b = vec![1u8; bytes];
            c.broadcast(&mut b, 0)?;
            c.barrier()?;
            Ok(())
        })
        .unwrap()
        .stats
        .messages
    };
    assert_eq!(job(1024), job(8));
}

#[test]
fn credits_ride_on_the_packets_going_back() {
    // Two ranks exchanging packets (allreduces: one exchange each): every fourth packet a
    // rank takes is a credit it owes, and it travels with the next packet to that rank, so
    // 100 more allreduces are 200 more messages, not 300: small packets (8 bytes, in the
    // header line) and larger ones (1 KiB: body, header line and credit chained) alike.
    let job = |calls: usize, n: usize| {
        sim::run(&peach2(), 2, move |w: &World| {
            let c = Comm::world(w)?;
            for _ in 0..calls {
                let mut x = vec![1.0f64; n];
                c.allreduce_in_place(&mut x, &Op::Sum)?;
                assert_eq!(x[n - 1], 2.0);
            }
            c.barrier()?;
            Ok(())
        })
        .unwrap()
        .stats
        .messages
    };
    assert_eq!(job(200, 1) - job(100, 1), 200);
    assert_eq!(job(200, 128) - job(100, 128), 200);
}

#[test]
fn a_credit_owed_in_a_turn_of_sends_rides_with_one() {
    // K's multi-ring allgather on a line of 3: every turn a rank sends a packet each way
    // round, and takes one from each side; it owes a credit for every second packet from
    // each side, 4 a call. A turn's sends go together, so a credit owed to the left-hand
    // neighbour is not written after the packet to the right (a message of its own on a
    // network): it rides with the packet to the left. Only one a call travels alone, paid
    // before the rank waits for its last packet (written after every packet, two did: 3,000
    // messages). So 100 more allgathers are their packets (3 ranks x 4 parts x 2 steps each)
    // and 3 credits.
    let job = |calls: usize| {
        sim::run(
            &Options::new(Network::load("tofu-8x6x8").unwrap()),
            3,
            move |w: &World| {
                let c = Comm::world(w)?;
                c.force(Collective::Allgather, Some("multiring"))?;
                let me = w.rank() as u8;
                let mut all = [0u8; 24];
                for _ in 0..calls {
                    c.allgather(&[me; 8], &mut all)?;
                    assert_eq!(all[23], 2);
                }
                c.barrier()?;
                Ok(())
            },
        )
        .unwrap()
        .stats
        .messages
    };
    assert_eq!(job(200) - job(100), 100 * (3 * 4 * 2 + 3));
}

#[test]
fn a_ring_of_puts_around_the_torus_shares_no_link() {
    // Ranks 0..7 form the torus's first ring of 8: each puts to its right-hand neighbour,
    // one hop on its own link, so every put costs what a put on an idle link costs.
    let opts = peach2();
    let n = 1 << 16;
    let (issue, lat, wire) = dma(&opts.network, n + 8);
    let t = timed_puts(&opts, 8, n, |r| Some((r + 1) % 8));
    for r in 0..8usize {
        let from = (r + 7) % 8;
        assert_eq!(
            t[r].1.unwrap() - t[from].0,
            issue + lat + wire,
            "rank {from} -> {r}"
        );
    }
    // Four hops to the right instead: the routes overlap on every link, so the puts
    // queue behind each other and arrive later than latency + hops + size/bandwidth.
    let t = timed_puts(&opts, 8, n, |r| Some((r + 4) % 8));
    let alone = issue + lat + 3 * ps(opts.network.link.hop_ns) + wire;
    let worst = (0..8usize)
        .map(|r| t[r].1.unwrap() - t[(r + 4) % 8].0)
        .max()
        .unwrap();
    // Four messages share each link: the last waits for three (less the skew of the
    // ranks' start times after the barrier).
    assert!(worst >= alone + 2 * wire, "{worst} vs {alone} alone");
}

/// A mixed job: collectives, two-sided messages and active messages on 8 ranks; returns
/// every rank's virtual times.
fn mixed_job(opts: &Options) -> (Vec<Vec<u64>>, sim::Stats) {
    let run = sim::run(opts, 8, |w: &World| {
        let c = Comm::world(w)?;
        let mut times = Vec::new();
        let mut x = vec![f64::from(w.rank()); 1000];
        c.allreduce_in_place(&mut x, &Op::Sum)?;
        assert_eq!(x[999], 28.0);
        times.push(secs_to_ps(w.wtime()));
        let mut b = vec![0u32; 50_000];
        if w.rank() == 3 {
            b.iter_mut().enumerate().for_each(|(i, v)| *v = i as u32);
        }
        c.broadcast(&mut b, 3)?;
        assert_eq!(b[49_999], 49_999);
        times.push(secs_to_ps(w.wtime()));
        let right = (w.rank() + 1) % 8;
        let left = (w.rank() + 7) % 8;
        let mut got = [0u8; 100];
        c.sendrecv(&[w.rank() as u8; 100], right, 1, &mut got, left, 1)?;
        assert_eq!(got[99], left as u8);
        times.push(secs_to_ps(w.wtime()));
        let mut all = vec![0u64; 8 * 300];
        c.allgather(&[u64::from(w.rank()); 300], &mut all)?;
        times.push(secs_to_ps(w.wtime()));
        c.barrier()?;
        times.push(secs_to_ps(w.wtime()));
        Ok(times)
    })
    .unwrap();
    (run.results, run.stats)
}

#[test]
fn the_same_job_gives_the_same_virtual_times() {
    let opts = peach2();
    let (a, sa) = mixed_job(&opts);
    // Load the host meanwhile: virtual times must not notice.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (b, sb) = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::black_box((0..10_000u64).sum::<u64>());
            }
        });
        let r = mixed_job(&opts);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    });
    assert_eq!(a, b);
    assert_eq!(sa, sb, "counters of two runs");
    assert!(sa.messages > 100, "{sa:?}");
    // Every phase took virtual time, in order.
    for t in &a {
        assert!(t.windows(2).all(|w| w[0] < w[1]), "{t:?}");
    }
}

#[test]
fn timing_only_mode_times_the_same_without_moving_payload() {
    let mut opts = peach2();
    let n = 1 << 20;
    let job = |opts: &Options| {
        sim::run(opts, 2, |w: &World| {
            let seg = w.alloc_symmetric(n + 64)?;
            w.barrier()?;
            let t0 = w.wtime();
            if w.rank() == 0 {
                let h = *seg.handle(1)?;
                w.put_signal(&h, 64, &vec![5u8; n], &h, 0, SignalOp::Set(1))?;
                w.quiet()?;
            } else {
                w.wait_until(seg.local(), 0, 1)?;
            }
            let t = secs_to_ps(w.wtime() - t0);
            let mut edges = [0u8; 3];
            for (e, off) in edges.iter_mut().zip([64, 64 + n / 2, 64 + n - 1]) {
                let mut b = [0u8];
                seg.local().read(off, &mut b)?;
                *e = b[0];
            }
            w.barrier()?;
            Ok((t, edges))
        })
        .unwrap()
        .results
    };
    let full = job(&opts);
    assert_eq!(full[1].1, [5, 5, 5]);
    opts.payload = false;
    let timing = job(&opts);
    assert_eq!(full[0].0, timing[0].0);
    assert_eq!(full[1].0, timing[1].0);
    // The first and last bytes moved (headers, trailers), the middle did not.
    assert_eq!(timing[1].1, [5, 0, 5]);
    // A collective's control data is small and moves whole: it still works.
    sim::run(&opts, 4, |w: &World| {
        let c = Comm::world(w)?;
        let mut x = [1.0f64];
        c.allreduce_in_place(&mut x, &Op::Sum)?;
        assert_eq!(x[0], 4.0);
        Ok(())
    })
    .unwrap();
}

/// A collective's large messages in timing-only mode: the same virtual time as with payload,
/// the receive buffer left as it was (not written, so its pages stay untouched: what lets 384
/// simulated ranks' Allgather buffers fit in memory), and `moves_payload` says which mode runs.
#[test]
fn timing_only_collectives_leave_large_receive_buffers_unwritten() {
    let n = 256 << 10;
    let job = |payload: bool| {
        let mut opts = Options::new(Network::load("tofu-8x6x8").unwrap());
        opts.payload = payload;
        sim::run(&opts, 4, |w: &World| {
            let c = Comm::world(w)?;
            c.force(Collective::Allgather, Some("ring"))?;
            let mine = vec![w.rank() as u8 + 1; n];
            let mut all = vec![0u8; 4 * n];
            let t0 = w.wtime();
            c.allgather(&mine, &mut all)?;
            let t = w.wtime() - t0;
            let others = (0..4u8)
                .filter(|&r| u32::from(r) != w.rank())
                .map(|r| all[usize::from(r) * n + n / 2])
                .collect::<Vec<_>>();
            // A reduction: combined with payload, left as it was when only timed; the same
            // virtual time (the reduction's charge is the same).
            c.force(Collective::Allreduce, Some("ring"))?;
            let mut sum = vec![1.0f32; n];
            let t0 = w.wtime();
            c.allreduce_in_place(&mut sum, &Op::Sum)?;
            let tr = w.wtime() - t0;
            Ok((
                w.moves_payload(),
                (secs_to_ps(t), secs_to_ps(tr)),
                (others, sum[n / 2]),
            ))
        })
        .unwrap()
        .results
    };
    let full = job(true);
    let timed = job(false);
    for r in 0..4u8 {
        let (fm, ft, (fo, fs)) = &full[usize::from(r)];
        let (tm, tt, (to, ts)) = &timed[usize::from(r)];
        assert!(*fm && !*tm);
        assert_eq!(ft, tt, "rank {r}: the same virtual times");
        let want: Vec<u8> = (0..4u8).filter(|&q| q != r).map(|q| q + 1).collect();
        assert_eq!(fo, &want, "rank {r}: with payload every block arrives");
        assert!(
            to.iter().all(|&b| b == 0),
            "rank {r}: timing only writes none"
        );
        assert_eq!((*fs, *ts), (4.0, 1.0), "rank {r}: reduced, or left alone");
    }
}

#[test]
fn a_384_rank_timing_only_broadcast_completes() {
    let mut opts = Options::new(Network::load("tofu-8x6x8").unwrap());
    opts.payload = false;
    let n = 1 << 20;
    let run = sim::run(&opts, 384, |w: &World| {
        let c = Comm::world(w)?;
        c.force(Collective::Broadcast, Some("pipeline_3d"))?;
        let mut b = vec![0u8; n];
        let t0 = w.wtime();
        c.broadcast(&mut b, 0)?;
        Ok(w.wtime() - t0)
    })
    .unwrap();
    let slowest = run.results.iter().copied().fold(0.0, f64::max);
    // At least the time to stream 1 MiB through one 5 GB/s link, at most 100x it.
    let stream = n as f64 / 5e9;
    assert!(slowest > stream && slowest < 100.0 * stream, "{slowest}");
    eprintln!(
        "384 ranks, 1 MiB pipelined 3-D broadcast: {:.1} us virtual, {:.2} s host, {} events",
        slowest * 1e6,
        run.host_s,
        run.stats.events
    );
}

#[test]
fn a_wait_no_rank_will_satisfy_is_a_deadlock_error() {
    let e = sim::run(&peach2(), 3, |w: &World| {
        let seg = w.alloc_symmetric(64)?;
        if w.rank() == 1 {
            w.wait_until(seg.local(), 0, 1)?;
        }
        Ok(())
    })
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    assert!(e.to_string().contains("simulated deadlock"), "{e}");
    assert!(e.to_string().contains("[1]"), "{e}");
}

#[test]
fn a_failing_rank_is_named_in_the_others_errors() {
    let all = sim::run_each(&peach2(), 4, |w: &World| {
        let c = Comm::world(w)?;
        if w.rank() == 2 {
            // An error of its own: no such algorithm.
            c.force(Collective::Broadcast, Some("gives-up"))?;
        }
        c.barrier()
    })
    .unwrap()
    .0;
    assert!(all[2].as_ref().unwrap_err().message().contains("gives-up"));
    for r in [0, 1, 3] {
        let e = all[r].as_ref().unwrap_err();
        assert_eq!(e.rank(), Some(2), "rank {r}: {e}");
    }
}

#[test]
fn a_put_split_over_the_dma_channels_is_priced_per_channel() {
    // PEACH2's four DMA channels reading GPU memory (seed 001): a part on one channel alone
    // costs one descriptor, the latency and its bytes at that channel's rate (at most the
    // port's); four channels tuned by `am`'s seed-001 algorithm share the port, so they
    // never beat it and tuning finds a split about as fast as the fastest channel alone;
    // every byte lands where it should.
    let net = Network::load("peach2-2x8-gpu").unwrap();
    let rates = net.dma.channels_gbs.clone();
    let cap = net.dma.read_gbs;
    let (issue, lat, _) = dma(&net, 0);
    let n = 256 << 10;
    let run = sim::run(&Options::new(net), 2, |w: &World| {
        let c = Comm::world(w)?;
        let ep = tca::am::Endpoint::new(&c, tca::am::Table::new(), n)?;
        let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        // Bad input: channels off, weights for other channels than there are, a put to the
        // rank's own segment (no network carries it, nothing to split).
        let peer = 1 - c.rank();
        let e = ep.put_weighted(peer, 0, &data, &[1.0]).unwrap_err();
        assert!(e.to_string().contains("set_channels"), "{e}");
        ep.set_channels(4)?;
        let e = ep.put_weighted(peer, 0, &data, &[1.0, 1.0]).unwrap_err();
        assert!(e.to_string().contains("2 weights for 4 channels"), "{e}");
        let e = ep.put_weighted(c.rank(), 0, &data, &[1.0; 4]).unwrap_err();
        assert!(e.to_string().contains("own segment"), "{e}");
        c.barrier()?;
        let mut alone = Vec::new();
        let mut tuned = 0.0;
        if c.rank() == 0 {
            for ch in 0..4 {
                let mut wts = [0.0; 4];
                wts[ch] = 1.0;
                alone.push(ep.put_weighted(1, 0, &data, &wts)?[ch]);
            }
            for _ in 0..tca::am::TUNING {
                ep.put(1, 0, &data)?;
            }
            let t0 = w.wtime();
            ep.put(1, 0, &data)?;
            tuned = w.wtime() - t0;
            assert!(ep.channel_weights(1, n)?.expect("tuned").1, "frozen");
        }
        c.barrier()?;
        if c.rank() == 1 {
            let mut got = vec![0u8; n];
            ep.segment().read(0, &mut got)?;
            assert!(got == data);
        }
        c.barrier()?;
        Ok((alone, tuned))
    })
    .unwrap();
    let (alone, tuned) = &run.results[0];
    for (ch, (&t, g)) in alone.iter().zip(&rates).enumerate() {
        let want = issue + lat + ps(n as f64 / g.min(cap));
        assert!(
            secs_to_ps(t).abs_diff(want) <= 2,
            "channel {ch}: {t} s, want {want} ps"
        );
    }
    assert!(
        secs_to_ps(*tuned) >= ps(n as f64 / cap),
        "{tuned} s beats the port"
    );
    assert!(
        *tuned < 1.05 * alone[0] && *tuned < 0.5 * alone[1],
        "tuned {tuned} s against channels 0 and 1 alone {alone:?}"
    );
}

#[test]
fn a_panicking_rank_is_named_in_its_own_and_the_others_errors() {
    // A rank is a coroutine: its panic is caught there, becomes its error, and its peers'
    // waits fail naming it; the run ends (no rank is left suspended).
    let all = sim::run_each(&peach2(), 4, |w: &World| {
        let c = Comm::world(w)?;
        if w.rank() == 1 {
            panic!("rank one gives up");
        }
        c.barrier()
    })
    .unwrap()
    .0;
    let e = all[1].as_ref().unwrap_err();
    assert!(e.message().contains("rank one gives up"), "{e}");
    for r in [0, 2, 3] {
        let e = all[r].as_ref().unwrap_err();
        assert_eq!(e.rank(), Some(1), "rank {r}: {e}");
    }
}

#[test]
fn a_rank_unwinding_a_panic_keeps_its_turn_until_it_leaves() {
    // Ranks share one thread, and with it `std::thread::panicking()`. Rank 1 panics with
    // sends still queued for rank 0 (its communicator tries to deliver them as it drops): it
    // must leave before any other rank runs, so ranks that end well are not taken for
    // failed, and the rank waiting for rank 1 is told it was rank 1 that failed.
    let all = sim::run_each(&peach2(), 4, |w: &World| {
        let c = Comm::world(w)?;
        let mut one = [0u8; 8];
        match w.rank() {
            1 => {
                c.send(&[3u8; 8], 0, 1)?;
                c.send(&[3u8; 8], 3, 1)?;
                for _ in 0..64 {
                    drop(c.isend(&[7u8; 1024], 0, 2)?);
                }
                panic!("rank one gives up");
            }
            2 => {
                c.recv(&mut one, 1, 1)?;
            }
            r => {
                c.recv(&mut one, 1, 1)?;
                // Still here while rank 1 unwinds, if it gave its turn away.
                for _ in 0..100 {
                    w.progress()?;
                }
                let _ = r;
            }
        }
        Ok(())
    })
    .unwrap()
    .0;
    assert!(all[0].is_ok() && all[3].is_ok(), "{all:?}");
    let e = all[2].as_ref().unwrap_err();
    assert_eq!(e.rank(), Some(1), "{e}");
}

#[test]
fn the_ranks_run_on_the_calling_thread() {
    // Ranks take turns as coroutines of the thread that runs the job (a hand-over is a stack
    // switch), and a rank's body may itself run a simulation.
    let me = std::thread::current().id();
    let run = sim::run(&peach2(), 3, |w: &World| {
        let here = std::thread::current().id();
        let inner = if w.rank() == 2 {
            sim::run(&peach2(), 2, |v: &World| {
                Ok(std::thread::current().id() == here && v.barrier().is_ok())
            })?
            .results
        } else {
            vec![true]
        };
        w.barrier()?;
        Ok(here == std::thread::current().id() && inner.iter().all(|&b| b)).map(|ok| (ok, here))
    })
    .unwrap();
    assert!(
        run.results.iter().all(|&(ok, t)| ok && t == me),
        "{:?}",
        run.results
    );
}

#[test]
fn bad_jobs_are_refused_before_they_start() {
    let e = sim::run(&peach2(), 17, |_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("16 nodes"), "{e}");
    let mut o = peach2();
    o.mapping = Some(vec![0, 0]);
    let e = sim::run(&o, 2, |_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("rank 1 on node 0"), "{e}");
    let e = Network::load("/no/such/model.toml").unwrap_err();
    assert!(e.to_string().contains("no network model"), "{e}");
}

#[test]
fn reductions_cost_their_bytes_at_the_models_rate() {
    // The same 2-rank allreduce on two models that differ only in the reduction rate: the
    // slower one takes longer by at least the reduction of one rank's whole vector.
    let n = 1 << 16;
    let time = |gbs: f64| {
        let mut o = peach2();
        o.network.compute.reduce_gbs = gbs;
        sim::run(&o, 2, |w: &World| {
            let c = Comm::world(w)?;
            c.force(Collective::Allreduce, Some("recursive_doubling"))?;
            let mut x = vec![1.0f64; n];
            let t0 = w.wtime();
            c.allreduce_in_place(&mut x, &Op::Sum)?;
            assert_eq!(x[n - 1], 2.0);
            Ok(w.wtime() - t0)
        })
        .unwrap()
        .results[0]
    };
    let (fast, slow) = (time(1000.0), time(1.0));
    let bytes = (8 * n) as f64;
    assert!(
        slow - fast >= 0.99 * (bytes / 1e9 - bytes / 1e12),
        "{fast} {slow}"
    );
}

#[test]
fn a_signal_to_another_rank_follows_the_data() {
    // put_signal with the data and the signal on different ranks: a rank that sees the
    // signal must find the data already delivered (the transport contract), and a signal to
    // a peer with the data in the sender's own memory goes through the network too.
    let n = 1 << 20;
    let t = sim::run(&peach2(), 3, |w: &World| {
        let seg = w.alloc_symmetric(n + 64)?;
        w.barrier()?;
        match w.rank() {
            0 => {
                let (d, s) = (*seg.handle(1)?, *seg.handle(2)?);
                w.put_signal(&d, 64, &vec![9u8; n], &s, 0, SignalOp::Set(1))?;
                // Data in this rank's own memory, the signal to rank 2.
                let me = *seg.handle(0)?;
                w.put_signal(&me, 64, &[1u8; 8], &s, 0, SignalOp::Set(2))?;
                Ok(0)
            }
            1 => {
                // Watch for the last byte of the data.
                let mut b = [0u8];
                loop {
                    seg.local().read(64 + n - 1, &mut b)?;
                    if b[0] == 9 {
                        return Ok(secs_to_ps(w.wtime()));
                    }
                    w.progress()?;
                }
            }
            _ => {
                w.wait_until(seg.local(), 0, 2)?;
                Ok(secs_to_ps(w.wtime()))
            }
        }
    })
    .unwrap()
    .results;
    assert!(
        t[2] >= t[1],
        "signal seen at {} ps, data at {} ps",
        t[2],
        t[1]
    );
}

#[test]
fn an_overlapped_computation_runs_inline_on_a_simulated_network() {
    // A progress loop polling in real time beside the virtual-time schedule would step
    // outside it: `Comm::overlap` runs its work on the rank's own thread there.
    let r = sim::run(&peach2(), 2, |w: &World| {
        let c = Comm::world(w)?;
        c.set_progress(tca::offload::Progress::Thread);
        let here = std::thread::current().id();
        let same = c.overlap(|| std::thread::current().id() == here)?;
        c.barrier()?;
        Ok(same)
    })
    .unwrap();
    assert_eq!(r.results, vec![true, true]);
}

/// K's 3D-multiring (`multiring`, and `ring_3d` for blocks of more than one chunk: every
/// block in four parts, each going one way round its lines, each pair of parts in its own
/// order of the dimensions) gathers every block on grids with lines of 1, 2 and more ranks,
/// where parts share lines and fall out of step with one another: blocks of no bytes, of fewer
/// bytes than parts (empty parts), of sizes not divisible by four, of fewer chunks than parts
/// (cut by bytes, up to 3 chunks) and of as many or more (cut by chunks, parts of 1, 2 and 3
/// chunks).
#[test]
fn the_multi_ring_allgathers_gather_every_part_of_every_block() {
    let mut opts = Options::new(Network::load("tofu-8x6x8").unwrap());
    opts.chunk = Some(1024);
    for alg in ["multiring", "ring_3d"] {
        for p in [1, 2, 3, 4, 6, 8, 12, 18, 27, 30, 36] {
            for b in [0, 1, 3, 8, 1030, 3 * 1024, 4 * 1024, 9 * 1024 + 40] {
                sim::run(&opts, p, |w: &World| {
                    let c = Comm::world(w)?;
                    c.force(Collective::Allgather, Some(alg))?;
                    let me = w.rank() as usize;
                    let send: Vec<u8> = (0..b).map(|i| (me * 31 + i * 7) as u8).collect();
                    let mut recv = vec![0u8; b * p as usize];
                    c.allgather(&send, &mut recv)?;
                    for (q, block) in recv.chunks(b.max(1)).enumerate() {
                        for (i, &x) in block.iter().enumerate() {
                            assert_eq!(x, (q * 31 + i * 7) as u8, "block {q} byte {i}");
                        }
                    }
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("{alg} p {p} b {b}: {e}"));
            }
        }
    }
}
