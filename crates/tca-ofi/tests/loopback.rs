//! Two endpoints in one process over libfabric's tcp provider (tcp;ofi_rxm) on loopback.
#![cfg(feature = "link")]

use std::ptr;
use std::time::{Duration, Instant};

use tca_ofi::{Completion, Config, CqError, Endpoint, Error, OpContext};

/// Bound on every wait in these tests.
const TIMEOUT: Duration = Duration::from_secs(10);
const MIB: usize = 1 << 20;
/// Bytes after B's registered region that must never change.
const GUARD: usize = 4096;

fn loopback() -> Config {
    Config {
        provider: Some("tcp".into()),
        domain: Some("lo".into()),
    }
}

type Event = Result<Completion, CqError>;

/// Both endpoints and the events read from their CQs so far. With manual progress both
/// sides must read their CQs for any transfer to move, so every wait pumps both.
struct Pair {
    a: Endpoint,
    b: Endpoint,
    ev_a: Vec<Event>,
    ev_b: Vec<Event>,
}

impl Pair {
    fn pump(&mut self) {
        let mut buf = [Completion::EMPTY; 16];
        for (ep, ev) in [(&self.a, &mut self.ev_a), (&self.b, &mut self.ev_b)] {
            match ep.read_cq(&mut buf) {
                Ok(n) => ev.extend(buf[..n].iter().copied().map(Ok)),
                Err(e) => ev.push(Err(e)),
            }
        }
    }

    /// Pumps both CQs until `done` returns Some, for at most TIMEOUT.
    fn wait<T>(&mut self, what: &str, mut done: impl FnMut(&mut Pair) -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            self.pump();
            if let Some(t) = done(self) {
                return t;
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "timed out after {TIMEOUT:?} waiting for {what}; A events {:?}, B events {:?}",
                self.ev_a,
                self.ev_b
            );
            std::thread::yield_now();
        }
    }

    /// Runs a posting call on A, pumping both CQs and retrying while it returns -FI_EAGAIN
    /// (for at most TIMEOUT); returns its other result.
    fn try_post(
        &mut self,
        mut op: impl FnMut(&Endpoint) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let start = Instant::now();
        loop {
            match op(&self.a) {
                Err(e) if e.is_again() && start.elapsed() < TIMEOUT => self.pump(),
                r => return r,
            }
        }
    }

    /// [`try_post`](Pair::try_post) that must succeed.
    fn post(&mut self, what: &str, op: impl FnMut(&Endpoint) -> Result<(), Error>) {
        if let Err(e) = self.try_post(op) {
            panic!("{what}: {e}");
        }
    }
}

/// Removes and returns the first event in `ev` matching `pred`.
fn take(ev: &mut Vec<Event>, pred: impl Fn(&Event) -> bool) -> Option<Event> {
    let i = ev.iter().position(pred)?;
    Some(ev.remove(i))
}

fn completed(id: u64) -> impl Fn(&Event) -> bool {
    move |e| matches!(e, Ok(c) if c.id == id)
}

#[test]
fn version_and_providers() {
    let (major, minor) = tca_ofi::version();
    assert!((major, minor) >= (1, 17), "libfabric {major}.{minor}");
    let provs = tca_ofi::providers().expect("providers");
    eprintln!("libfabric {major}.{minor}, RDM providers: {provs:?}");
    assert!(provs.iter().any(|p| p == "tcp;ofi_rxm"), "{provs:?}");

    let err = Endpoint::open(&Config {
        provider: Some("no-such-provider".into()),
        domain: None,
    })
    .expect_err("unknown provider must fail");
    eprintln!("unknown provider: {err}");
    assert!(
        err.text.contains("tcp;ofi_rxm"),
        "error lists providers: {err}"
    );
}

#[test]
fn loopback_rma_and_messages() {
    let a = Endpoint::open(&loopback()).expect("open A");
    let b = Endpoint::open(&loopback()).expect("open B");
    eprintln!("A: {a:?}\nB: {b:?}");
    assert_eq!(a.provider(), "tcp;ofi_rxm");
    assert_eq!(a.domain_name(), "lo");
    let caps = a.caps();
    eprintln!("caps: {caps:#?}");
    eprintln!("wait_fd {:?}, trywait {}", a.wait_fd(), a.trywait());
    assert!(caps.inject_size >= 40, "{caps:?}");
    assert!(caps.cq_data_size >= 4, "{caps:?}");

    // Exchange names and insert.
    let (na, nb) = (a.name().unwrap(), b.name().unwrap());
    assert!(a.insert(&[&na[..1]]).is_err(), "short address refused");
    let b_at_a = a.insert(&[&nb]).unwrap()[0];
    assert_eq!(b.insert(&[&na, &nb]).unwrap().len(), 2, "one Addr per name");

    // B's target: 1 MiB registered for remote access, followed by unregistered guard bytes.
    let mut target = vec![0u8; MIB + GUARD].into_boxed_slice();
    target[MIB..].fill(0xEE);
    // SAFETY: `target` outlives both endpoints (declared before `pair`, so dropped after).
    let region = unsafe { b.register(target.as_mut_ptr(), MIB, 7, true) }.expect("register B");
    eprintln!("B region key {:#x} desc {:?}", region.key(), region.desc());
    let rkey = region.key();

    // A's source: 1 MiB pattern, registered locally (its desc is required under FI_MR_LOCAL).
    let src: Box<[u8]> = (0..MIB).map(|i| (i * 7 + 3) as u8).collect();
    // SAFETY: `src` outlives `a` (declared before `pair`); local access only.
    let local = unsafe { a.register(src.as_ptr().cast_mut(), MIB, 8, false) }.expect("reg A");
    let desc = local.desc();

    // Operation contexts and receive buffers at stable addresses; declared before `pair`
    // so they outlive the endpoints.
    let mut ctx = OpContext::slab(16);
    let ctxp = ctx.as_mut_ptr();
    let mut rbuf = vec![0u8; 2 * 8192].into_boxed_slice();
    let rbufp = rbuf.as_mut_ptr();
    let tptr = target.as_ptr();
    let view = |off: usize, len: usize| {
        // SAFETY: reads of B's target memory while the provider may be writing other parts
        // of it: byte values only, checked for equality; `off + len <= MIB + GUARD`.
        unsafe { std::slice::from_raw_parts(tptr.add(off), len) }.to_vec()
    };

    let mut pair = Pair {
        a,
        b,
        ev_a: Vec::new(),
        ev_b: Vec::new(),
    };

    // 1. An 8-byte write.
    pair.post("write 8", |a| {
        // SAFETY: src and ctx[1] outlive the endpoint; ctx[1] is not reused before completion.
        unsafe {
            a.write(
                src.as_ptr(),
                8,
                desc,
                b_at_a,
                region.remote_addr(0),
                rkey,
                ctxp.add(1),
            )
        }
    });
    pair.wait("8-byte write", |p| {
        let done = p.ev_a.iter().any(completed(1));
        (done && view(0, 8) == src[..8]).then_some(())
    });
    let c = take(&mut pair.ev_a, completed(1)).unwrap().unwrap();
    assert!(c.is_write && !c.is_send && !c.is_recv, "{c:?}");
    assert_eq!(view(8, 8), [0; 8], "nothing beyond 8 bytes");

    // 2. A 1 MiB write.
    let t = Instant::now();
    pair.post("write 1MiB", |a| {
        // SAFETY: as above, ctx[2].
        unsafe {
            a.write(
                src.as_ptr(),
                MIB,
                desc,
                b_at_a,
                region.remote_addr(0),
                rkey,
                ctxp.add(2),
            )
        }
    });
    pair.wait("1 MiB write", |p| {
        let done = p.ev_a.iter().any(completed(2));
        (done && view(0, MIB) == src[..]).then_some(())
    });
    eprintln!("1 MiB write took {:?}", t.elapsed());
    take(&mut pair.ev_a, completed(2)).unwrap().unwrap();
    assert_eq!(view(MIB, GUARD), vec![0xEE; GUARD], "guard intact");

    // 3. writedata: B sees the CQ data.
    let data = 0x1234_5678_9abc_def0u64 & (u64::MAX >> (64 - 8 * caps.cq_data_size.min(8)));
    let off = 4096;
    pair.post("writedata", |a| {
        // SAFETY: as above, ctx[3].
        unsafe {
            a.writedata(
                src.as_ptr().add(100),
                64,
                desc,
                data,
                b_at_a,
                region.remote_addr(off),
                rkey,
                ctxp.add(3),
            )
        }
    });
    let remote = pair.wait("writedata at B", |p| {
        let at_a = p.ev_a.iter().any(completed(3));
        let at_b = p
            .ev_b
            .iter()
            .position(|e| matches!(e, Ok(c) if c.is_remote_write));
        match at_b {
            Some(k) if at_a => Some(p.ev_b.remove(k)),
            _ => None,
        }
    });
    let remote = remote.unwrap();
    eprintln!("remote writedata completion at B: {remote:?}");
    assert_eq!(remote.data, data);
    assert_eq!(remote.id, u64::MAX, "no context for a remote event");
    assert_eq!(view(off, 64), src[100..164]);
    take(&mut pair.ev_a, completed(3)).unwrap().unwrap();

    // 4. inject_write: no completion at A.
    pair.post("inject_write", |a| {
        a.inject_write(b"injected", b_at_a, region.remote_addr(8192), rkey)
    });
    pair.wait("inject_write", |_| {
        (view(8192, 8) == b"injected").then_some(())
    });
    let too_big = vec![0u8; caps.inject_size + 1];
    let e = pair
        .a
        .inject(&too_big, b_at_a)
        .expect_err("over inject_size");
    assert_eq!(e.code, -90, "{e}"); // -FI_EMSGSIZE

    // 5. Messages: B posts two receives; A injects 40 bytes, then sends 8 KiB.
    for (i, id) in [(0usize, 10usize), (1, 11)] {
        // SAFETY: rbuf halves and ctx[10], ctx[11] outlive the endpoints and are not
        // touched until their completions are read.
        unsafe {
            pair.b
                .recv(rbufp.add(i * 8192), 8192, ptr::null_mut(), ctxp.add(id))
        }
        .expect("recv");
    }
    let small: Vec<u8> = (0..40u8).collect();
    pair.post("inject", |a| a.inject(&small, b_at_a));
    pair.post("send", |a| {
        // SAFETY: src and ctx[4] outlive the endpoint.
        unsafe { a.send(src.as_ptr().add(1000), 8192, desc, b_at_a, ctxp.add(4)) }
    });
    pair.wait("send completion and two receives", |p| {
        let ok = p.ev_a.iter().any(completed(4))
            && p.ev_b.iter().any(completed(10))
            && p.ev_b.iter().any(completed(11));
        ok.then_some(())
    });
    let s = take(&mut pair.ev_a, completed(4)).unwrap().unwrap();
    assert!(s.is_send, "{s:?}");
    let r0 = take(&mut pair.ev_b, completed(10)).unwrap().unwrap();
    let r1 = take(&mut pair.ev_b, completed(11)).unwrap().unwrap();
    assert!(r0.is_recv && r1.is_recv, "{r0:?} {r1:?}");
    assert_eq!(r0.len, 40);
    assert_eq!(r1.len, 8192);
    assert_eq!(&rbuf[..40], &small[..]);
    assert_eq!(&rbuf[8192..], &src[1000..1000 + 8192]);
    assert!(
        pair.ev_a.is_empty() && pair.ev_b.is_empty(),
        "{:?} {:?}",
        pair.ev_a,
        pair.ev_b
    );

    // 6. Bad writes (last: a provider may drop the connection after one): a wrong key, then
    // a write running past the end of the region. Each must fail at A, by an Error from the
    // call or a CqError, and leave B's memory alone.
    let before = view(0, MIB + GUARD);
    let cases = [
        (
            "wrong rkey",
            region.remote_addr(0),
            rkey ^ 0x5a5a_0000,
            5u64,
        ),
        ("past the end", region.remote_addr(MIB - 32), rkey, 6u64),
    ];
    for (what, raddr, key, id) in cases {
        let posted = pair.try_post(|a| {
            // SAFETY: as above, ctx[id].
            unsafe {
                a.write(
                    src.as_ptr(),
                    64,
                    desc,
                    b_at_a,
                    raddr,
                    key,
                    ctxp.add(id as usize),
                )
            }
        });
        match posted {
            Err(e) => eprintln!("{what}: refused by the call: {e}"),
            Ok(()) => {
                let ev = pair.wait(what, |p| {
                    take(&mut p.ev_a, |e| match e {
                        Ok(c) => c.id == id,
                        Err(e) => e.id == Some(id) || e.id.is_none(),
                    })
                });
                // With transmit-complete semantics (tcp;ofi_rxm) the initiator may see a
                // successful completion: the target then drops the write.
                match ev {
                    Err(e) => eprintln!("{what}: CqError at A: {e} / {e:?}"),
                    Ok(c) => eprintln!("{what}: completed at A without error: {c:?}"),
                }
            }
        }
        // Give a misbehaving target a moment to write anything, then compare.
        let until = Instant::now() + Duration::from_millis(200);
        pair.wait("settle", |_| (Instant::now() > until).then_some(()));
        assert!(view(0, MIB + GUARD) == before, "{what}: B's memory changed");
    }
    eprintln!(
        "events after bad writes: A {:?} B {:?}",
        pair.ev_a, pair.ev_b
    );
    // Informational: is the connection still usable after the target rejected writes?
    let raddr = region.remote_addr(MIB - 8);
    let again = pair.try_post(|a| {
        // SAFETY: as above, ctx[7].
        unsafe { a.write(src.as_ptr(), 8, desc, b_at_a, raddr, rkey, ctxp.add(7)) }
    });
    match again {
        Err(e) => eprintln!("good write after bad ones: refused: {e}"),
        Ok(()) => {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(2)
                && !pair.ev_a.iter().any(|e| match e {
                    Ok(c) => c.id == 7,
                    Err(e) => e.id == Some(7),
                })
            {
                pair.pump();
            }
            eprintln!(
                "good write after bad ones: A {:?}, landed: {}",
                pair.ev_a,
                view(MIB - 8, 8) == src[..8]
            );
        }
    }
    assert_eq!(view(MIB, GUARD), vec![0xEE; GUARD], "guard intact");

    pair.a.deregister(local).expect("deregister A");
    pair.b.deregister(region).expect("deregister B");
    drop(pair);
    drop((ctx, rbuf, src, target));
}
