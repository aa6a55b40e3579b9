//! Active messages and the extended API (`tca::am`), after GASNet's test programs: round trips
//! of every kind and size (testam), flooding (testqueue), put/get against a reference
//! (testcore), vector/indexed/strided against element-by-element references (testvis), large
//! transfers (testlarge), and every bad-input case. Thread ranks.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use proptest::prelude::*;
use tca::am::{Endpoint, MAX_ARGS, MAX_MEDIUM, Mode, STAGE_BYTES, Strided, Table};
use tca::{Comm, ErrorKind, threads};

/// The low byte of `x`: test patterns wrap mod 256 on purpose.
fn low_byte(x: u64) -> u8 {
    x.to_le_bytes()[0]
}

fn pattern(seed: u64, n: usize) -> Vec<u8> {
    (0..n).map(|i| low_byte(seed * 31 + i as u64 * 7)).collect()
}

/// A table with echo handlers for every kind: the request handler checks the payload it got
/// (pattern of args[0]) and replies in kind with pattern(args[0] + 1); the reply handlers
/// record what came back.
/// (kind: 0 Short, 1 Medium, 2 Long; arguments; payload) of each reply.
type Replies = Rc<RefCell<Vec<(u64, Vec<u64>, Vec<u8>)>>>;

struct Echo {
    got: Replies,
}

fn echo_table(seg_half: usize) -> (Table, Echo) {
    let got = Rc::new(RefCell::new(Vec::new()));
    let mut t = Table::new();
    let g = got.clone();
    let short_rep = t.add("short_rep", move |_, m| {
        g.borrow_mut().push((0, m.args.to_vec(), Vec::new()));
        Ok(())
    });
    let g = got.clone();
    let med_rep = t.add("med_rep", move |_, m| {
        g.borrow_mut()
            .push((1, m.args.to_vec(), m.payload.to_vec()));
        Ok(())
    });
    let g = got.clone();
    let long_rep = t.add("long_rep", move |tok, m| {
        let (off, len) = m.long.expect("a Long reply says where it landed");
        let mut b = vec![0u8; len];
        tok.segment().read(off, &mut b)?;
        g.borrow_mut().push((2, m.args.to_vec(), b));
        Ok(())
    });
    t.add("short_req", move |tok, m| {
        let back: Vec<u64> = m.args.iter().map(|a| a + 1).collect();
        tok.reply_short(short_rep, &back)
    });
    t.add("med_req", move |tok, m| {
        assert_eq!(m.payload, &pattern(m.args[0], m.payload.len())[..]);
        tok.reply_medium(med_rep, m.args, &pattern(m.args[0] + 1, m.payload.len()))
    });
    t.add("long_req", move |tok, m| {
        let (off, len) = m.long.expect("a Long request says where it landed");
        let mut b = vec![0u8; len];
        tok.segment().read(off, &mut b)?;
        assert_eq!(b, pattern(m.args[0], len));
        // Reply into the upper half of the requester's segment.
        tok.reply_long(long_rep, m.args, &pattern(m.args[0] + 1, len), seg_half)
    });
    (t, Echo { got })
}

#[test]
fn round_trips_of_every_kind_and_size() {
    for p in [2u32, 3] {
        threads::run(p, |w| {
            let c = Comm::world(w)?;
            let half = 1 << 20;
            let (t, echo) = echo_table(half);
            // Above the two halves peers' Long payloads land in: Medium payloads sent from
            // this rank's segment.
            let ep = Endpoint::new(&c, t, 2 * half + MAX_MEDIUM)?;
            let net = w.transport().contains("ofi");
            assert_eq!(ep.max_args(), MAX_ARGS);
            assert!(ep.max_request_medium() >= 64 << 10);
            let me = c.rank();
            let to = (me + 1) % p;
            let pk = ep.packet_bytes();
            let mut expect = 0;
            // Short: 0..=16 arguments.
            let sreq = ep.index("short_req")?;
            for n in 0..=MAX_ARGS {
                let args: Vec<u64> = (0..n as u64).map(|i| i * 1000 + u64::from(me)).collect();
                ep.request_short(to, sreq, &args)?;
                expect += 1;
                ep.wait_until(|| echo.got.borrow().len() == expect)?;
                let (k, a, _) = echo.got.borrow().last().cloned().unwrap();
                assert_eq!(k, 0);
                assert_eq!(a, args.iter().map(|x| x + 1).collect::<Vec<_>>());
            }
            // Medium: inline, one packet, several packets, the maximum.
            let mreq = ep.index("med_req")?;
            for (i, n) in [
                0,
                1,
                40,
                41,
                pk - 24,
                pk - 23,
                pk,
                pk + 1,
                pk + pk / 2,
                MAX_MEDIUM,
            ]
            .into_iter()
            .enumerate()
            {
                let seed = 100 + i as u64;
                ep.request_medium(to, mreq, &[seed, 7, 8], &pattern(seed, n))?;
                expect += 1;
                ep.wait_until(|| echo.got.borrow().len() == expect)?;
                let (k, a, b) = echo.got.borrow().last().cloned().unwrap();
                assert_eq!((k, a.as_slice()), (1, &[seed, 7, 8][..]));
                assert_eq!(b, pattern(seed + 1, n), "medium of {n} bytes");
                // The same from this rank's segment (MtoB: no copy here).
                let seed = seed + 50;
                ep.segment().write(2 * half, &pattern(seed, n))?;
                let mode = ep.medium_from_mode(to, n)?;
                assert!(mode == Mode::MtoB || (net && mode == Mode::BtoB), "{mode}");
                let before = w.net_transfers().registered_bytes;
                ep.request_medium_from(to, mreq, &[seed, 7, 8], 2 * half, n)?;
                // Across a network, MtoB writes packets straight from the segment.
                let rma = w.net_transfers().registered_bytes - before;
                assert_eq!(
                    rma > 0,
                    net && mode == Mode::MtoB,
                    "{mode}, {rma} bytes of {n}"
                );
                expect += 1;
                ep.wait_until(|| echo.got.borrow().len() == expect)?;
                let (k, a, b) = echo.got.borrow().last().cloned().unwrap();
                assert_eq!((k, a.as_slice()), (1, &[seed, 7, 8][..]));
                assert_eq!(
                    b,
                    pattern(seed + 1, n),
                    "medium of {n} bytes from the segment"
                );
            }
            // Long: up to the half segment, landing at the offset asked.
            let lreq = ep.index("long_req")?;
            for (i, n) in [0, 1, 64, 4096, pk + 5, 300_000, half]
                .into_iter()
                .enumerate()
            {
                let seed = 200 + i as u64;
                ep.request_long(to, lreq, &[seed], &pattern(seed, n), 0)?;
                expect += 1;
                ep.wait_until(|| echo.got.borrow().len() == expect)?;
                let (k, a, b) = echo.got.borrow().last().cloned().unwrap();
                assert_eq!((k, a.as_slice()), (2, &[seed][..]));
                assert_eq!(b, pattern(seed + 1, n), "long of {n} bytes");
                // Both ends are done with the Long areas before the next round reuses them.
                c.barrier()?;
            }
            c.barrier()?;
            Ok(())
        })
        .unwrap();
    }
}

#[test]
fn flooding_every_rank_with_replies_does_not_deadlock() {
    // testqueue: every rank floods every other with requests whose handlers reply, all at
    // once, 8 ranks on 2 cores.
    let n: u64 = 100_000;
    threads::run(8, |w| {
        let c = Comm::world(w)?;
        let p = u64::from(c.size());
        let replies = Rc::new(Cell::new(0u64));
        let handled = Rc::new(Cell::new(0u64));
        let sum = Rc::new(Cell::new(0u64));
        let mut t = Table::new();
        let (r, s) = (replies.clone(), sum.clone());
        let rep = t.add("rep", move |_, m| {
            r.set(r.get() + 1);
            s.set(s.get() + m.args[0]);
            Ok(())
        });
        let h = handled.clone();
        let req = t.add("req", move |tok, m| {
            h.set(h.get() + 1);
            tok.reply_short(rep, &[m.args[0] * 2])
        });
        let ep = Endpoint::new(&c, t, 64)?;
        let me = u64::from(c.rank());
        for i in 0..n {
            for k in 1..p {
                let to = u32::try_from((me + k) % p).unwrap();
                ep.request_short(to, req, &[i])?;
            }
        }
        let want = n * (p - 1);
        ep.wait_until(|| replies.get() == want)?;
        // Peers still need this rank's handlers until they have all their replies.
        c.barrier()?;
        assert_eq!(handled.get(), want);
        assert_eq!(sum.get(), (p - 1) * n * (n - 1));
        Ok(())
    })
    .unwrap();
}

#[test]
fn put_get_in_every_form() {
    put_get_forms(true);
}

/// The same with the software get (a request whose handler writes the data back), which
/// ranks across a network always use.
#[test]
fn put_get_in_every_form_software_get() {
    put_get_forms(false);
}

fn put_get_forms(direct: bool) {
    threads::run(3, |w| {
        let c = Comm::world(w)?;
        let ep = Endpoint::new(&c, Table::new(), 1 << 20)?;
        ep.set_direct_gets(direct);
        let me = c.rank();
        let (right, left) = ((me + 1) % 3, (me + 2) % 3);
        // Blocking put into the right neighbour; then everyone reads its left neighbour's
        // segment back, in every form.
        for (i, n) in [0usize, 1, 8, 100, 5000, 70_000, 400_000]
            .into_iter()
            .enumerate()
        {
            let off = 64 * i;
            ep.put(right, off, &pattern(u64::from(me) + 10 * i as u64, n))?;
            c.barrier()?;
            let want = pattern(u64::from(left) + 10 * i as u64, n);
            let mut mine = vec![0u8; n];
            ep.segment().read(off, &mut mine)?;
            assert_eq!(mine, want, "put of {n}");
            // get from the right neighbour what this rank put there
            let mine_there = pattern(u64::from(me) + 10 * i as u64, n);
            let mut b = vec![0u8; n];
            ep.get(right, off, &mut b)?;
            assert_eq!(b, mine_there, "get of {n}");
            let mut b2 = vec![0u8; n];
            let mut ev = ep.get_nb(right, off, &mut b2)?;
            while !ev.test()? {}
            drop(ev);
            assert_eq!(b2, mine_there, "get_nb of {n}");
            // into the segment, above the area peers write
            let at = 512 << 10;
            ep.get_into(at, right, off, n)?;
            let mut b3 = vec![0u8; n];
            ep.segment().read(at, &mut b3)?;
            assert_eq!(b3, mine_there, "get_into of {n}");
            c.barrier()?;
        }
        // Non-blocking forms, many outstanding.
        let mut bufs = vec![vec![0u8; 16]; 40];
        let evs = bufs
            .iter_mut()
            .enumerate()
            .map(|(k, b)| ep.get_nb(right, 16 * k, b))
            .collect::<tca::Result<Vec<_>>>()?;
        for e in evs.into_iter().rev() {
            e.wait()?;
        }
        for (k, b) in bufs.iter().enumerate() {
            let mut want = vec![0u8; 16];
            ep.get(right, 16 * k, &mut want)?;
            assert_eq!(b, &want);
        }
        for k in 0..40 {
            ep.put_nbi(right, 600_000 + 8 * k, &(k as u64).to_le_bytes())?;
            ep.get_nbi_into(700_000 + 8 * k, left, 0, 8)?;
        }
        ep.put_nb(right, 800_000, &[9u8; 8])?.wait()?;
        ep.wait_syncnbi_all()?;
        c.barrier()?;
        let mut v = [0u8; 8];
        for k in 0..40 {
            ep.segment().read(600_000 + 8 * k, &mut v)?;
            assert_eq!(u64::from_le_bytes(v), k as u64);
        }
        ep.segment().read(800_000, &mut v)?;
        assert_eq!(v, [9u8; 8]);
        // A dropped handle: safe, the data goes nowhere.
        let mut lost = vec![0u8; 100_000];
        drop(ep.get_nb(right, 0, &mut lost)?);
        c.barrier()?;
        Ok(())
    })
    .unwrap();
}

/// Seed 001's data modes, each named as the transport takes it and each delivering every
/// byte: puts from ordinary memory (MtoM; BtoM when staged; BtoB when a message carries them
/// across a network) and from this rank's segment (MtoM, no copy). Across a network
/// (`TCA_TRANSPORT=ofi`) staging is forced in the second round, so the BtoM path (two staging
/// buffers used alternately, an odd last piece) runs on a provider that needs none.
#[test]
fn every_data_mode_delivers_every_byte() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let big = 2 * STAGE_BYTES + STAGE_BYTES / 2 + 4097;
        let ep = Endpoint::new(&c, Table::new(), 4 * big)?;
        let (me, peer) = (c.rank(), 1 - c.rank());
        let net = w.transport().contains("ofi");
        for (round, staged) in [false, true].into_iter().enumerate() {
            ep.set_staging(staged);
            let small = pattern(u64::from(me) + 100 * round as u64, 100);
            let large = pattern(u64::from(me) + 7 + 100 * round as u64, big);
            let want_large = match (net, staged) {
                (false, _) => Mode::MtoM,
                (true, false) => Mode::MtoM,
                (true, true) => Mode::BtoM,
            };
            let want_small = if net { Mode::BtoB } else { Mode::MtoM };
            assert_eq!(ep.put_mode(peer, &large)?, want_large, "round {round}");
            assert_eq!(ep.put_mode(peer, &small)?, want_small, "round {round}");
            assert_eq!(ep.put_from_mode(peer, big)?, Mode::MtoM);
            assert_eq!(ep.put_from_mode(peer, 100)?, want_small);
            // Ordinary memory into the peer's first quarter; this rank's own copy of `large`
            // in its third quarter goes segment to segment into the peer's second. Across a
            // network each put's bytes are counted on the path its mode names.
            let moved = |f: &dyn Fn() -> tca::Result<()>| -> tca::Result<[u64; 4]> {
                let (a, _) = (w.net_transfers(), f()?);
                let b = w.net_transfers();
                Ok([
                    b.message_bytes - a.message_bytes,
                    b.direct_bytes - a.direct_bytes,
                    b.registered_bytes - a.registered_bytes,
                    b.staged_bytes - a.staged_bytes,
                ])
            };
            let n = big as u64;
            let by_path = |mode: Mode, bytes: u64| match (net, mode) {
                (false, _) => [0; 4],
                (true, Mode::BtoB) => [bytes, 0, 0, 0],
                (true, Mode::BtoM) => [0, 0, 0, bytes],
                (true, _) => [0, bytes, 0, 0],
            };
            assert_eq!(moved(&|| ep.put(peer, 0, &large))?, by_path(want_large, n));
            assert_eq!(
                moved(&|| ep.put(peer, 3 * big + 8, &small))?,
                by_path(want_small, 100)
            );
            ep.segment().write(2 * big, &large)?;
            let from = moved(&|| ep.put_from(peer, big, 2 * big, big))?;
            assert_eq!(from, if net { [0, 0, n, 0] } else { [0; 4] }, "put_from");
            c.barrier()?;
            let want = pattern(u64::from(peer) + 7 + 100 * round as u64, big);
            for at in [0, big] {
                let mut got = vec![0u8; big];
                ep.segment().read(at, &mut got)?;
                let bad = got.iter().zip(&want).position(|(a, b)| a != b);
                assert_eq!(
                    bad, None,
                    "round {round}, staged {staged}, at {at}: first wrong byte"
                );
            }
            let mut got = vec![0u8; 100];
            ep.segment().read(3 * big + 8, &mut got)?;
            assert_eq!(got, pattern(u64::from(peer) + 100 * round as u64, 100));
            c.barrier()?;
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn answers_to_a_rank_that_left_go_nowhere() {
    // Rank 1 asks rank 0 for bytes (one get answered in reply packets, one put straight into
    // a landing segment), drops both handles and leaves the job. Rank 0 serves them after
    // that: its answers have nowhere to go, which is no error of rank 0's.
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let ep = Endpoint::new(&c, Table::new(), 1 << 20)?;
        if c.rank() == 1 {
            let (mut small, mut large) = (vec![0u8; 100], vec![0u8; 100_000]);
            drop(ep.get_nb(0, 0, &mut small)?);
            drop(ep.get_nb(0, 0, &mut large)?);
            return Ok(());
        }
        // Rank 1 leaves while this rank sleeps; then its two requests are served (by the
        // first poll: any of the communicator's progress runs this layer's handlers).
        std::thread::sleep(std::time::Duration::from_millis(300));
        for _ in 0..100 {
            ep.poll()?;
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(())
    })
    .unwrap();
}

/// Naive strided reference: element by element.
fn strided_ref(s: &Strided<'_>, mut f: impl FnMut(usize, usize)) {
    let d = s.count.len();
    let mut idx = vec![0usize; d];
    if s.count.contains(&0) {
        return;
    }
    loop {
        let r: usize = (0..d).map(|k| idx[k] * s.remote_strides[k]).sum();
        let l: usize = (0..d).map(|k| idx[k] * s.local_strides[k]).sum();
        for b in 0..s.elem {
            f(r + b, l + b);
        }
        let mut k = 0;
        loop {
            if k == d {
                return;
            }
            idx[k] += 1;
            if idx[k] < s.count[k] {
                break;
            }
            idx[k] = 0;
            k += 1;
        }
    }
}

#[derive(Debug, Clone)]
struct Shape {
    elem: usize,
    count: Vec<usize>,
    rgap: Vec<usize>,
    lgap: Vec<usize>,
}

impl Shape {
    /// Strides built from the counts plus gaps, so elements never overlap.
    fn strides(&self, gaps: &[usize]) -> Vec<usize> {
        let mut s = Vec::new();
        let mut span = self.elem;
        for (k, &c) in self.count.iter().enumerate() {
            let st = span + gaps[k];
            s.push(st);
            span = st * c;
        }
        s
    }
}

fn shape() -> impl Strategy<Value = Shape> {
    (1usize..4).prop_flat_map(|d| {
        (
            prop_oneof![Just(1usize), Just(8), 1usize..40],
            prop::collection::vec(1usize..7, d),
            prop::collection::vec(prop_oneof![Just(0usize), 0usize..24], d),
            prop::collection::vec(prop_oneof![Just(0usize), 0usize..24], d),
        )
            .prop_map(|(elem, count, rgap, lgap)| Shape {
                elem,
                count,
                rgap,
                lgap,
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn strided_vector_indexed_match_references(
        shapes in prop::collection::vec(shape(), 1..4),
        pack in prop_oneof![Just(0usize), 1usize..200, Just(usize::MAX)],
    ) {
        // Pieces run from 1 byte to several KiB; the threshold sends all of them segment to
        // segment, all packed through the ring, or a mix.
        let shapes = &shapes;
        threads::run(2, move |w| {
            let c = Comm::world(w)?;
            let seg = 1 << 18;
            let ep = Endpoint::new(&c, Table::new(), seg)?;
            let set = ep.set_pack_threshold(pack);
            assert_eq!(ep.pack_threshold(1 - c.rank())?, set);
            let me = c.rank();
            let peer = 1 - me;
            for (i, sh) in shapes.iter().enumerate() {
                let rs = sh.strides(&sh.rgap);
                let ls = sh.strides(&sh.lgap);
                let s = Strided { elem: sh.elem, count: &sh.count, remote_strides: &rs, local_strides: &ls };
                let lext = ls.last().unwrap() * sh.count.last().unwrap();
                let src = pattern(i as u64 + 50 * u64::from(me), lext);
                // Fill the peer's segment with a known background first.
                let off = 8 * i + 3;
                ep.put(peer, 0, &vec![0xEEu8; seg])?;
                c.barrier()?;
                ep.put_strided(peer, off, &s, &src)?;
                c.barrier()?;
                // What the peer should hold now, element by element.
                let mut want = vec![0xEEu8; seg];
                let theirs = pattern(i as u64 + 50 * u64::from(peer), lext);
                strided_ref(&s, |r, l| want[off + r] = theirs[l]);
                let mut got = vec![0u8; seg];
                ep.segment().read(0, &mut got)?;
                assert!(got == want, "strided put {sh:?}");
                // The same from this rank's segment (MtoM through a cached chain), twice.
                let from = seg / 2;
                assert!(off + rs.last().unwrap() * sh.count.last().unwrap() < from);
                ep.segment().write(from, &src)?;
                for _ in 0..2 {
                    c.barrier()?;
                    ep.put(peer, 0, &vec![0xEEu8; from])?;
                    c.barrier()?;
                    ep.put_strided_from(peer, off, &s, from)?;
                    c.barrier()?;
                    ep.segment().read(0, &mut got[..from])?;
                    assert!(got[..from] == want[..from], "strided put from the segment {sh:?}");
                }
                assert!(ep.cached_descriptors() >= 1);
                // Get it back the same way: the local side must equal src where covered.
                let mut back = vec![0x11u8; lext];
                ep.get_strided(peer, off, &s, &mut back)?;
                let mut wantb = vec![0x11u8; lext];
                strided_ref(&s, |_, l| wantb[l] = src[l]);
                assert!(back == wantb, "strided get {sh:?}");
                // The same pieces as a vector and an indexed list, against a reference.
                let pieces: Vec<(usize, usize)> = (0..sh.count[0]).map(|k| (off + k * rs[0], sh.elem)).collect();
                let parts: Vec<Vec<u8>> = (0..sh.count[0]).map(|k| pattern(k as u64 + 7, sh.elem)).collect();
                let refs: Vec<&[u8]> = parts.iter().map(|v| v.as_slice()).collect();
                c.barrier()?;
                ep.put_vector(peer, &pieces, &refs)?;
                let mut outs: Vec<Vec<u8>> = vec![vec![0u8; sh.elem]; sh.count[0]];
                let mut outr: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
                ep.get_vector(peer, &pieces, &mut outr)?;
                assert_eq!(&outs, &parts);
                let offs: Vec<usize> = pieces.iter().map(|p| p.0).collect();
                let joined: Vec<u8> = parts.concat();
                ep.put_indexed(peer, &offs, sh.elem, &[&joined])?;
                let mut one = vec![0u8; joined.len()];
                ep.get_indexed(peer, &offs, sh.elem, &mut [&mut one])?;
                assert_eq!(one, joined);
                c.barrier()?;
            }
            Ok(())
        }).unwrap();
    }

    #[test]
    fn random_puts_and_gets_match_a_reference(
        ops in prop::collection::vec((any::<bool>(), 0usize..60_000, 0usize..5000, any::<u8>()), 1..30),
    ) {
        let ops = &ops;
        threads::run(2, move |w| {
            let c = Comm::world(w)?;
            let seg = 64 << 10;
            let ep = Endpoint::new(&c, Table::new(), seg)?;
            // Rank 0 drives, rank 1's segment is the target; rank 0 keeps the reference.
            if c.rank() == 0 {
                let mut model = vec![0u8; seg];
                for &(put, off, len, v) in ops.iter() {
                    let len = len.min(seg - off);
                    if put {
                        let data: Vec<u8> = (0..len).map(|k| v.wrapping_add(low_byte(k as u64))).collect();
                        ep.put(1, off, &data)?;
                        model[off..off + len].copy_from_slice(&data);
                    } else {
                        let mut b = vec![0u8; len];
                        ep.get(1, off, &mut b)?;
                        assert_eq!(&b[..], &model[off..off + len]);
                    }
                }
            }
            c.barrier()
        }).unwrap();
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let fired = Rc::new(Cell::new(0u32));
        let errs = Rc::new(RefCell::new(Vec::<ErrorKind>::new()));
        let mut t = Table::new();
        let (f, e) = (fired.clone(), errs.clone());
        let rep = t.add("rep", move |tok, _| {
            f.set(f.get() + 1);
            // A reply handler may not reply.
            e.borrow_mut().push(
                tok.reply_short(tca::am::Table::new().add("x", |_, _| Ok(())), &[])
                    .unwrap_err()
                    .kind(),
            );
            Ok(())
        });
        let e2 = errs.clone();
        t.add("req", move |tok, _| {
            tok.reply_short(rep, &[])?;
            // Twice is refused.
            e2.borrow_mut()
                .push(tok.reply_short(rep, &[]).unwrap_err().kind());
            Ok(())
        });
        let ep = Endpoint::new(&c, t, 4096)?;
        let req = ep.index("req")?;
        let peer = 1 - c.rank();
        // A second endpoint on the same communicator.
        assert_eq!(
            Endpoint::new(&c, Table::new(), 64).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        // Unknown names and indices, too many arguments, a bad rank.
        assert!(ep.index("nope").is_err());
        let mut other = Table::new();
        for k in 0..5 {
            other.add(&format!("h{k}"), |_, _| Ok(()));
        }
        let h4 = other.add("h5", |_, _| Ok(()));
        let e = ep.request_short(peer, h4, &[]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("not registered"), "{e}");
        let e = ep.request_short(peer, req, &[0; 17]).unwrap_err();
        assert!(e.message().contains("at most 16"), "{e}");
        assert_eq!(
            ep.request_short(9, req, &[]).unwrap_err().kind(),
            ErrorKind::InvalidRank
        );
        // Medium over the maximum, Long outside the target segment: nothing sent or written.
        let e = ep
            .request_medium(peer, req, &[], &vec![0; MAX_MEDIUM + 1])
            .unwrap_err();
        assert!(e.message().contains("at most"), "{e}");
        let e = ep
            .request_long(peer, req, &[], &[1; 100], 4000)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfBounds);
        assert!(e.message().contains("4096"), "{e}");
        // Put and get outside the segment; strided descriptions that overflow or overrun.
        assert_eq!(
            ep.put(peer, 4090, &[0; 8]).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        assert_eq!(
            ep.get(peer, usize::MAX - 2, &mut [0; 8])
                .unwrap_err()
                .kind(),
            ErrorKind::OutOfBounds
        );
        let s = Strided {
            elem: 8,
            count: &[4, usize::MAX / 2],
            remote_strides: &[8, 64],
            local_strides: &[8, 32],
        };
        assert!(
            ep.put_strided(peer, 0, &s, &[0; 64])
                .unwrap_err()
                .message()
                .contains("overflow")
        );
        let s = Strided {
            elem: 8,
            count: &[4, 100],
            remote_strides: &[8, 64],
            local_strides: &[8, 32],
        };
        assert_eq!(
            ep.put_strided(peer, 0, &s, &[0; 64]).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        let s = Strided {
            elem: 8,
            count: &[4],
            remote_strides: &[8, 64],
            local_strides: &[8],
        };
        assert!(
            ep.put_strided(peer, 0, &s, &[0; 64])
                .unwrap_err()
                .message()
                .contains("strides")
        );
        assert!(
            ep.put_vector(peer, &[(0, 8)], &[&[0u8; 7]])
                .unwrap_err()
                .message()
                .contains("equal")
        );
        // Overlapping strides that would move more than the whole target segment.
        let s = Strided {
            elem: 8,
            count: &[1 << 40],
            remote_strides: &[0],
            local_strides: &[0],
        };
        let e = ep.get_strided(peer, 0, &s, &mut [0u8; 8]).unwrap_err();
        assert!(e.message().contains("overlapping"), "{e}");
        // The checks above wrote nothing: the peer's segment is still zero.
        c.barrier()?;
        let mut z = vec![1u8; 4096];
        ep.segment().read(0, &mut z)?;
        assert!(z.iter().all(|&b| b == 0));
        // A handler that replies twice, and a reply handler that replies: refused, counted.
        ep.request_short(peer, req, &[])?;
        ep.wait_until(|| fired.get() == 1 && errs.borrow().len() == 2)?;
        c.barrier()?;
        assert!(
            errs.borrow()
                .iter()
                .all(|&k| k == ErrorKind::InvalidArgument)
        );
        Ok(())
    })
    .unwrap();
}

#[test]
fn handler_tables_must_agree() {
    let r = threads::run(2, |w| {
        let c = Comm::world(w)?;
        let mut t = Table::new();
        t.add("a", |_, _| Ok(()));
        if c.rank() == 1 {
            t.add("b", |_, _| Ok(()));
        }
        Endpoint::new(&c, t, 64).map(|_| ())
    });
    let e = r.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains("differ"), "{e}");
}

#[test]
fn handlers_run_inside_collectives() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let seen = Rc::new(Cell::new(0u32));
        let mut t = Table::new();
        let s = seen.clone();
        t.add("count", move |_, _| {
            s.set(s.get() + 1);
            Ok(())
        });
        let ep = Endpoint::new(&c, t, 64)?;
        // The software get (a direct read of a rank of this node needs no handler).
        ep.set_direct_gets(false);
        let h = ep.index("count")?;
        // Rank 0 sends, then both enter a barrier: rank 1's handler runs inside it (or after).
        if c.rank() == 0 {
            ep.request_short(1, h, &[])?;
        }
        // A get from rank 1 needs rank 0's handler while rank 0 sits in a collective.
        if c.rank() == 1 {
            let mut b = [0u8; 8];
            ep.get(0, 0, &mut b)?;
        }
        c.barrier()?;
        c.barrier()?;
        if c.rank() == 1 {
            ep.wait_until(|| seen.get() == 1)?;
        }
        assert!(Endpoint::of(&c).is_some());
        Ok(())
    })
    .unwrap();
}

#[test]
fn a_failure_on_one_rank_fails_endpoint_creation_everywhere() {
    // One rank cannot register its segment: every rank gets an error, none waits forever.
    let r = threads::run(3, |w| {
        let c = Comm::world(w)?;
        let bytes = if c.rank() == 2 { usize::MAX / 2 } else { 4096 };
        match Endpoint::new(&c, Table::new(), bytes) {
            Ok(_) => Ok(None),
            Err(e) => Ok(Some((e.kind(), e.rank()))),
        }
    })
    .unwrap();
    assert!(r.iter().all(|e| e.is_some()), "{r:?}");
    // The others name the rank that failed.
    assert_eq!(r[0].unwrap(), (ErrorKind::Aborted, Some(2)));
}

#[test]
fn a_handler_error_reaches_the_next_call_of_its_rank() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let ran = Rc::new(Cell::new(0u32));
        let mut t = Table::new();
        let r = ran.clone();
        t.add("fails", move |_, m| {
            r.set(r.get() + 1);
            if m.args[0] == 1 {
                return Err(tca::Error::handler("boom"));
            }
            Ok(())
        });
        let ep = Endpoint::new(&c, t, 64)?;
        let h = ep.index("fails")?;
        if c.rank() == 0 {
            ep.request_short(1, h, &[1])?;
            ep.request_short(1, h, &[0])?;
        } else {
            let e = ep.wait_until(|| ran.get() == 2).unwrap_err();
            assert_eq!((e.kind(), e.message()), (ErrorKind::Handler, "boom"));
            // Reported once; the endpoint goes on working.
            ep.poll()?;
        }
        c.barrier()
    })
    .unwrap();
}

/// `TCA_TIMEOUT` counts from the start of a blocking operation, not from its latest sleep:
/// rank 0 waits for a get from rank 1, which is stuck, while rank 2 keeps ringing rank 0's
/// doorbell with requests. Each request ends one of rank 0's sleeps; the get still times out,
/// naming rank 1, while rank 2 is still sending (rank 2 stops only when rank 0 has left).
#[test]
fn a_timeout_is_not_renewed_by_other_peers_traffic() {
    if std::env::var("TCA_TRANSPORT").is_ok_and(|t| t.trim() == "sim") {
        // Host-time timeouts of a rank stuck in user code: not a simulated network's notion
        // (a rank that computes holds virtual time; see coll.rs, the stuck peer).
        return;
    }
    let all = threads::run_each(3, |w| {
        let c = Comm::world(w)?;
        let mut t = Table::new();
        let ping = t.add("ping", |_, _| Ok(()));
        let ep = Endpoint::new(&c, t, 4096)?;
        match w.rank() {
            0 => {
                w.set_timeout(Some(std::time::Duration::from_millis(300)));
                // A get into this rank's segment is served by rank 1's handler (a get into
                // ordinary memory from a rank of this node reads its segment directly).
                let e = ep.get_into(0, 1, 0, 8).unwrap_err();
                Ok(Some(e))
            }
            1 => {
                // Stuck: alive, no calls, until rank 0 is gone.
                std::thread::sleep(std::time::Duration::from_secs(3));
                Ok(None)
            }
            _ => {
                // Rings rank 0's doorbell until rank 0 has left (its sends then fail), or gives
                // up after a bound a correct timeout never comes near.
                for _ in 0..6000 {
                    if ep.request_short(0, ping, &[]).is_err() {
                        return Ok(None);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(tca::Error::handler(
                    "rank 0 never left: its timeout was renewed",
                ))
            }
        }
    });
    let e = all[0].as_ref().unwrap().as_ref().expect("rank 0's error");
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert_eq!(e.rank(), Some(1), "{e}");
    assert!(all[2].is_ok(), "{:?}", all[2]);
}

/// A put split over several channels delivers every byte once, at any length and offset
/// (lengths around the split minimum and cut alignment, parts that may be empty), tunes the
/// pattern's weights and freezes them after `TUNING` transfers; bad channel counts are errors.
#[test]
fn puts_split_over_channels_deliver_every_byte() {
    threads::run(2, |w| {
        let c = Comm::world(w)?;
        let ep = Endpoint::new(&c, Table::new(), 1 << 20)?;
        let me = c.rank();
        let peer = 1 - me;
        assert!(ep.set_channels(0).is_ok() && ep.channels() == 1);
        assert!(ep.set_channels(tca::am::MAX_CHANNELS + 1).is_err());
        for n in [2, 3, 4] {
            ep.set_channels(n)?;
            assert_eq!(ep.channels(), n);
            for (i, len) in [
                tca::am::SPLIT_MIN - 1,
                tca::am::SPLIT_MIN,
                4097,
                64 * 65 + 3,
                100_000,
                (1 << 20) - 1000,
            ]
            .into_iter()
            .enumerate()
            {
                let off = (i * 8 + n) % 1000;
                let data = pattern(u64::from(me) * 100 + (n * 10 + i) as u64, len);
                ep.put(peer, off, &data)?;
                c.barrier()?;
                let mut got = vec![0u8; len];
                ep.segment().read(off, &mut got)?;
                let want = pattern(u64::from(peer) * 100 + (n * 10 + i) as u64, len);
                assert!(got == want, "{n} channels, {len} bytes at {off}");
                c.barrier()?;
            }
            // Each channel alone carries a whole put (weight 1 on it, 0 on the others): the
            // caller's copy, a copy engine, a simulated DMA channel, or across a network
            // this rank's endpoint or one of its lanes.
            let len = 3 * tca::am::SPLIT_MIN + 100;
            for k in 0..n {
                let mut wts = vec![0.0; n];
                wts[k] = 1.0;
                let data = pattern(u64::from(me) * 1000 + (n * 10 + k) as u64, len);
                let lanes = w.net_transfers().lane_bytes;
                let secs = ep.put_weighted(peer, 64, &data, &wts)?;
                // Across a network a part on channel k > 0 goes on one of the rank's lanes.
                let on_lanes = w.net_transfers().lane_bytes - lanes;
                let net = w.transport().contains("ofi");
                assert_eq!(on_lanes, if net && k > 0 { len as u64 } else { 0 });
                ep.wait_syncnbi_puts()?;
                assert_eq!(secs.len(), n);
                for (j, t) in secs.iter().enumerate() {
                    assert_eq!(*t > 0.0, j == k, "{n} channels, all on {k}: times {secs:?}");
                }
                c.barrier()?;
                let mut got = vec![0u8; len];
                ep.segment().read(64, &mut got)?;
                let want = pattern(u64::from(peer) * 1000 + (n * 10 + k) as u64, len);
                assert!(got == want, "{n} channels, all on channel {k}");
                c.barrier()?;
            }
            // One pattern, repeated: tuned, then frozen.
            let len = 256 << 10;
            let data = pattern(7, len);
            for k in 0..tca::am::TUNING {
                ep.put(peer, 0, &data)?;
                let (wts, frozen) = ep.channel_weights(peer, len)?.expect("tuned");
                assert_eq!(wts.len(), n);
                assert!((wts.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{wts:?}");
                assert_eq!(frozen, k + 1 == tca::am::TUNING);
            }
            c.barrier()?;
        }
        Ok(())
    })
    .unwrap();
}
