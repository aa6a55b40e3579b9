//! The suite over tca: PingPong and PingPing as `put_signal` into the partner's segment, the
//! collectives through one [`Comm`] built before the first measurement. Every buffer is
//! allocated once for the largest size, so the timed calls allocate nothing.
//!
//! Two extras only tca has, measured in the same run so ratios are honest on a machine whose
//! core placement drifts: the floor (a raw cache-line ping-pong, alternating round by round
//! with the 8-byte PingPong; median of the ratios) and a memory soak (resident memory and
//! mapping count before and after many 8-byte round trips).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use anyhow::Result;
use tca::am::{Endpoint, Table};
use tca::fabric::line;
use tca::p2p::{Persistent, Request};
use tca::{Comm, Handle, Op, Segment, SignalOp, SymmetricSegment, World};

use super::driver::{self, Backend};
use super::halo::{Buffers, Halo};
use super::overlap::Cpu;
use super::{Benchmark, Half, Kind, OSU_WINDOW, Options};
use crate::floor::CacheLine;
use crate::machine::MemStat;

/// A message buffer of the suite: in tca's memory ([`Comm::buffer`], which large
/// collectives on one node read in place) or ordinary memory (`--buffers heap`).
#[derive(Debug)]
enum Mem<T: tca::coll::Element> {
    Tca(tca::Buffer<T>),
    Heap(Vec<T>),
}

impl<T: tca::coll::Element> Mem<T> {
    /// `len` elements set to `v`, in tca's memory if `tca` (collective then).
    fn new(comm: &Comm<'_>, tca: bool, len: usize, v: T) -> Result<Self> {
        Ok(if tca {
            let mut b = comm.buffer::<T>(len)?;
            // Zeroed already: a fill of zeros would only touch every page now.
            if b.first().is_some_and(|&z| z != v) {
                b.fill(v);
            }
            Self::Tca(b)
        } else {
            Self::Heap(vec![v; len])
        })
    }
}

impl<T: tca::coll::Element> std::ops::Deref for Mem<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Self::Tca(b) => b,
            Self::Heap(v) => v,
        }
    }
}

impl<T: tca::coll::Element> std::ops::DerefMut for Mem<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Self::Tca(b) => b,
            Self::Heap(v) => v,
        }
    }
}

/// tca's side of the suite.
#[derive(Debug)]
pub struct TcaBackend<'w> {
    world: &'w World,
    comm: Comm<'w>,
    /// Point-to-point landing zone: data at 0 (or in the signal's line when it fits), the
    /// signal word in the line at `line_at`.
    seg: SymmetricSegment,
    peer: Option<Handle>,
    line_at: usize,
    seq: u64,
    bsend: Mem<u8>,
    brecv: Mem<u8>,
    fsend: Mem<f32>,
    frecv: Mem<f32>,
    /// Receive windows of the OSU bandwidth tests (OSU_WINDOW messages of the largest size).
    bwin: Vec<u8>,
    /// The Halo benchmark's lattice: its faces, their send buffers and ghost buffers, and the
    /// same in registered segments (faces back to back, in the order of `Buffers::faces`).
    halo: Option<(Buffers, Segment, Segment)>,
    cur: (Kind, usize),
    /// Whether the benchmark prepared last is non-blocking (IMB-NBC).
    nonblocking: bool,
    forced: Vec<(usize, String)>,
    two_sided: bool,
    /// The GASNet benchmarks' counters, if any of them runs (the endpoint itself is the
    /// communicator's, found again with `Endpoint::of`).
    am: Option<AmBench>,
}

/// What the active-message benchmarks' handlers count: pings handled (rank 1), pongs and
/// stops received.
#[derive(Debug, Default)]
struct AmBench {
    pings: Rc<Cell<u64>>,
    pongs: Rc<Cell<u64>>,
    stops: Rc<Cell<u64>>,
    /// VIS_Halo: exchanges the partner finished (its faces are in this rank's ghosts).
    dones: Rc<Cell<u64>>,
    /// This rank's N^3 array of VIS_Halo (the faces' source; its ghosts are in the segment).
    cube: Vec<u8>,
    /// Rank 1: pings and stops expected in all, counted from the start (rank 0 may begin a
    /// batch while rank 1 still finishes the barrier before it, and rank 1's handlers run in
    /// that barrier, so counting from the batch's start would miss some).
    expect: [Cell<u64>; 3],
}

impl AmBench {
    /// Makes the communicator's endpoint with testam's handlers: each ping is answered by a
    /// pong of the same kind and size (a Long pong from a buffer of the largest size).
    fn new(comm: &Comm<'_>, max: usize, cube: usize) -> Result<Self> {
        let me = Self {
            cube: (0..cube).map(|i| i as u8).collect(),
            ..Self::default()
        };
        let mut t = Table::new();
        let pong = |t: &mut Table, name: &str, c: &Rc<Cell<u64>>| {
            let c = c.clone();
            t.add(name, move |_, _| {
                c.set(c.get() + 1);
                Ok(())
            })
        };
        let (ps, pm, pl) = (
            pong(&mut t, "pong_short", &me.pongs),
            pong(&mut t, "pong_medium", &me.pongs),
            pong(&mut t, "pong_long", &me.pongs),
        );
        pong(&mut t, "stop", &me.stops);
        pong(&mut t, "halo_done", &me.dones);
        let c = me.pings.clone();
        t.add("ping_short", move |tok, m| {
            c.set(c.get() + 1);
            tok.reply_short(ps, m.args)
        });
        let c = me.pings.clone();
        t.add("ping_medium", move |tok, m| {
            c.set(c.get() + 1);
            tok.reply_medium(pm, &[], m.payload)
        });
        let c = me.pings.clone();
        let back = RefCell::new(vec![0x5au8; max]);
        t.add("ping_long", move |tok, m| {
            c.set(c.get() + 1);
            let n = m.long.map_or(0, |l| l.1);
            tok.reply_long(pl, &[], &back.borrow()[..n], 0)
        });
        // The cube's ghosts: as large as the cube, after it; the cube itself also at the
        // segment's start, for VIS_Halo_MtoM.
        let ep = Endpoint::new(comm, t, max.max(2 * cube).max(8))?;
        ep.segment().write(0, &me.cube)?;
        Ok(me)
    }
}

/// Whether a GASNet benchmark is among the benchmarks (they need the endpoint).
fn gasnet(opts: &Options) -> bool {
    opts.benches().any(|b| b.gasnet())
}

/// Whether a window-based OSU test is among the benchmarks (they need receive windows).
pub(crate) fn osu_windows(opts: &Options) -> bool {
    opts.benches()
        .any(|b| matches!(b.kind, Kind::OsuBw | Kind::OsuBibw | Kind::OsuMbwMr))
}

impl<'w> TcaBackend<'w> {
    /// Collective: the communicator, the segments and buffers for messages up to `max` bytes.
    pub fn new(world: &'w World, opts: &Options) -> Result<Self> {
        let comm = Comm::world(world)?;
        let p = world.size() as usize;
        let max = opts.sizes.iter().copied().max().unwrap_or(0).max(8);
        let line_at = max.next_multiple_of(4096);
        let seg = world.alloc_symmetric(line_at + line::SLOT_STRIDE)?;
        let me = world.rank();
        // Message buffers: one block per rank where a benchmark moves one to or from every
        // rank, else two (Exchange receives from both sides); the reductions' f32 vectors
        // hold one message. (p blocks for every benchmark would be p^2 x max over a job:
        // 2.4 TB for 4 MiB at 384 simulated ranks.)
        let wide = opts.benches().any(|b| {
            matches!(
                b.kind,
                Kind::Scatter | Kind::Gather | Kind::Allgather | Kind::Alltoall
            )
        });
        let blocks = if wide { p.max(2) } else { 2 };
        // In a simulated timing-only run large messages move no bytes: a zeroed buffer
        // is never touched there, so 384 ranks' p blocks cost address space, not memory.
        let fill = if world.moves_payload() { 0xa5 } else { 0 };
        // Buffers in tca's memory where the collectives can read them in place (one node,
        // shared memory); ordinary memory elsewhere, or when asked for.
        let tca_buffers = !opts.heap_buffers && comm.single_copy();
        let peer = if me < 2 && world.size() >= 2 {
            Some(*seg.handle(1 - me)?)
        } else {
            None
        };
        Self {
            world,
            seg,
            peer,
            line_at,
            seq: 0,
            bsend: Mem::new(&comm, tca_buffers, max * blocks, fill)?,
            brecv: Mem::new(&comm, tca_buffers, max * blocks, 0)?,
            fsend: Mem::new(&comm, tca_buffers, max / 4, 1.0)?,
            frecv: Mem::new(&comm, tca_buffers, max / 4, 0.0)?,
            bwin: vec![
                0;
                if osu_windows(opts) {
                    max * OSU_WINDOW
                } else {
                    0
                }
            ],
            halo: None,
            cur: (Kind::Barrier, 0),
            nonblocking: false,
            forced: opts.algos.clone(),
            two_sided: opts.two_sided,
            am: None,
            comm,
        }
        .with_am(opts, max)
    }

    fn with_am(mut self, opts: &Options, max: usize) -> Result<Self> {
        if gasnet(opts) && self.comm.size() >= 2 {
            // VIS_Halo's largest cube, and as much again for the ghosts in the segment.
            let cube = if opts.benches().any(|b| b.grid()) {
                let n = super::VIS_HALO_N[super::VIS_HALO_N.len() - 1];
                n * n * n * 8
            } else {
                0
            };
            self.am = Some(AmBench::new(&self.comm, max, cube)?);
        }
        Ok(self)
    }

    /// `n` calls of the prepared collective, non-blocking: each started in a scope of its own
    /// (`Comm::scope`), then `work` run (computation of `us` microseconds with `tests` tests
    /// of the request, see [`Cpu::run`]; none if `None`), then waited for. Returns the
    /// microseconds spent computing.
    fn nonblocking(&mut self, n: u64, work: Option<(&Cpu, f64, u32)>) -> Result<f64> {
        let (kind, bytes) = self.cur;
        let p = self.comm.size() as usize;
        let c = &self.comm;
        let sum = Op::<f32>::Sum;
        if !kind.collective() {
            anyhow::bail!("{kind:?} has no non-blocking form");
        }
        let (bs, br, fs, fr) = (
            &mut self.bsend,
            &mut self.brecv,
            &self.fsend,
            &mut self.frecv,
        );
        let mut spent = 0.0;
        for _ in 0..n {
            spent += c.scope(|s| {
                let mut r = start_collective!(s, kind, bytes, p, (bs, br, fs, fr), &sum);
                // A test that completes the request spends it: later ones and the wait skip it.
                let t = match work {
                    Some((cpu, us, tests)) => cpu.run(us, tests, || {
                        if r.is_active() {
                            r.test().map(drop)
                        } else {
                            Ok(())
                        }
                    })?,
                    None => 0.0,
                };
                if r.is_active() {
                    r.wait()?;
                }
                Ok(t)
            })?;
        }
        Ok(spent)
    }

    /// `n` VIS_Halo exchanges: each rank puts the three low faces of its cube (x = 0:
    /// strided, one element per piece; y = 0: block-stride, a row per piece; z = 0:
    /// contiguous) into the partner's ghost cube at the same place, waits until they are
    /// complete there, and tells the partner, then waits for the partner's word. The cube is
    /// ordinary memory (VIS_Halo) or the lower half of the sender's segment (VIS_Halo_MtoM).
    fn vis_halo(&mut self, n: u64, from_segment: bool) -> Result<()> {
        let (Some(am), Some(ep)) = (&self.am, Endpoint::of(&self.comm)) else {
            anyhow::bail!("the GASNet benchmarks' endpoint was not made");
        };
        let me = self.comm.rank();
        if me > 1 {
            return Ok(());
        }
        let peer = 1 - me;
        let e = (self.cur.1 / 24).isqrt();
        let (row, plane) = (8 * e, 8 * e * e);
        let ghost = plane * e;
        // The partner's ghost cube: the upper half of its segment, whatever N (the lower
        // half holds the cube VIS_Halo_MtoM sends from).
        let at = am.cube.len();
        let faces = [
            ([e, e], [row, plane]), // x = 0: strided
            ([e, e], [8, plane]),   // y = 0: block-stride
            ([e * e, 1], [8, 8]),   // z = 0: contiguous
        ];
        let done = ep.index("halo_done")?;
        let src = &am.cube[..ghost];
        for _ in 0..n {
            for (count, strides) in &faces {
                let s = tca::am::Strided {
                    elem: 8,
                    count,
                    remote_strides: strides,
                    local_strides: strides,
                };
                if from_segment {
                    ep.put_strided_from_nbi(peer, at, &s, 0)?;
                } else {
                    ep.put_strided_nbi(peer, at, &s, src)?;
                }
            }
            ep.wait_syncnbi_puts()?;
            ep.request_short(peer, done, &[])?;
            let want = am.expect[2].get() + 1;
            am.expect[2].set(want);
            ep.wait_until(|| am.dones.get() >= want)?;
        }
        Ok(())
    }

    /// `n` calls of a GASNet benchmark between ranks 0 and 1: rank 0 sends and waits for
    /// each answer; rank 1 serves until it has handled `n` pings (or, for Get, rank 0's stop
    /// after its `n` gets, whose handlers are internal); Put needs nothing of rank 1.
    fn gasnet(&mut self, kind: Kind, n: u64) -> Result<()> {
        let (Some(am), Some(ep)) = (&self.am, Endpoint::of(&self.comm)) else {
            anyhow::bail!("the GASNet benchmarks' endpoint was not made");
        };
        let bytes = self.cur.1;
        if self.comm.rank() == 1 {
            let (count, expect, more) = match kind {
                Kind::Get | Kind::GetNbi => (&am.stops, &am.expect[1], 1),
                Kind::Put | Kind::PutFrom | Kind::PutNbi => return Ok(()),
                _ => (&am.pings, &am.expect[0], n),
            };
            let want = expect.get() + more;
            expect.set(want);
            ep.wait_until(|| count.get() >= want)?;
            return Ok(());
        }
        let args = [7u64; tca::am::MAX_ARGS];
        let name = match kind {
            Kind::AmShort => "ping_short",
            Kind::AmMedium | Kind::AmMediumFrom => "ping_medium",
            Kind::AmLong => "ping_long",
            _ => "stop",
        };
        let h = ep.index(name)?;
        let (bs, br) = (&self.bsend[..bytes], &mut self.brecv[..bytes]);
        for _ in 0..n {
            let want = am.pongs.get() + 1;
            match kind {
                Kind::AmShort => ep.request_short(1, h, &args[..bytes / 8])?,
                Kind::AmMedium => ep.request_medium(1, h, &[], bs)?,
                Kind::AmMediumFrom => ep.request_medium_from(1, h, &[], 0, bytes)?,
                Kind::AmLong => ep.request_long(1, h, &[], bs, 0)?,
                Kind::Get => {
                    ep.get(1, 0, br)?;
                    continue;
                }
                Kind::Put => {
                    ep.put(1, 0, bs)?;
                    continue;
                }
                Kind::PutFrom => {
                    ep.put_from(1, 0, 0, bytes)?;
                    continue;
                }
                Kind::PutNbi => {
                    for _ in 0..OSU_WINDOW {
                        ep.put_nbi(1, 0, bs)?;
                    }
                    ep.wait_syncnbi_puts()?;
                    continue;
                }
                Kind::GetNbi => {
                    for _ in 0..OSU_WINDOW {
                        ep.get_nbi_into(0, 1, 0, bytes)?;
                    }
                    ep.wait_syncnbi_gets()?;
                    continue;
                }
                _ => unreachable!("GASNet kinds only"),
            }
            ep.wait_until(|| am.pongs.get() >= want)?;
        }
        if matches!(kind, Kind::Get | Kind::GetNbi) {
            ep.request_short(1, h, &[])?;
        }
        Ok(())
    }

    /// `n` exchanges between ranks 0 and 1: PingPong (rank 0 sends first, rank 1 answers) or
    /// PingPing (both send, then both wait).
    fn point_to_point(&mut self, n: u64, both_send: bool) -> Result<()> {
        let Some(peer) = self.peer else {
            return Ok(());
        };
        let bytes = self.cur.1;
        let sig = self.line_at + line::SIGNAL;
        let dst = if bytes <= line::PAYLOAD_MAX {
            self.line_at
        } else {
            0
        };
        let msg = &self.bsend[..bytes];
        let first = self.world.rank() == 0 || both_send;
        for _ in 0..n {
            self.seq += 1;
            let s = self.seq;
            if first {
                self.world
                    .put_signal(&peer, dst, msg, &peer, sig, SignalOp::Set(s))?;
                self.world.wait_until(&self.seg, sig, s)?;
            } else {
                self.world.wait_until(&self.seg, sig, s)?;
                self.world
                    .put_signal(&peer, dst, msg, &peer, sig, SignalOp::Set(s))?;
            }
        }
        Ok(())
    }

    /// `n` two-sided PingPongs or PingPings between ranks 0 and 1 (`tca::p2p`), or calls of
    /// Sendrecv or Exchange on every rank.
    fn two_sided(&mut self, kind: Kind, n: u64) -> Result<()> {
        let c = &self.comm;
        let bytes = self.cur.1;
        let (me, p) = (c.rank(), c.size());
        let (right, left) = ((me + 1) % p, (me + p - 1) % p);
        let (bs, br) = (&self.bsend[..bytes], &mut self.brecv[..2 * bytes]);
        for _ in 0..n {
            match kind {
                Kind::PingPong if me == 0 => {
                    c.send(bs, 1, 0)?;
                    c.recv(&mut br[..bytes], 1, 0)?;
                }
                Kind::PingPong => {
                    c.recv(&mut br[..bytes], 0, 0)?;
                    c.send(bs, 0, 0)?;
                }
                Kind::PingPing => {
                    let mut r = c.isend(bs, 1 - me, 0)?;
                    c.recv(&mut br[..bytes], 1 - me, 0)?;
                    r.wait()?;
                }
                Kind::Sendrecv => {
                    c.sendrecv(bs, right, 0, &mut br[..bytes], left, 0)?;
                }
                Kind::Exchange => {
                    let (a, b) = br.split_at_mut(bytes);
                    let mut rs = [c.irecv(a, left, 0)?, c.irecv(b, right, 0)?];
                    c.send(bs, left, 0)?;
                    c.send(bs, right, 0)?;
                    tca::p2p::wait_all(&mut rs)?;
                }
                _ => unreachable!("two-sided kinds only"),
            }
        }
        Ok(())
    }

    /// `n` calls of an OSU two-sided test, as the OSU micro-benchmarks make them: a ping-pong
    /// round trip (osu_latency), or one window of [`OSU_WINDOW`] non-blocking messages
    /// (osu_bw and osu_mbw_mr: sender to receiver, then a 4-byte acknowledgement back;
    /// osu_bibw: both ways at once). Pairs: ranks 0 and 1, or i and i + P/2 (osu_mbw_mr).
    fn osu(&mut self, kind: Kind, n: u64) -> Result<()> {
        let c = &self.comm;
        let bytes = self.cur.1;
        let (me, p) = (c.rank(), c.size());
        let pairs = if kind == Kind::OsuMbwMr { p / 2 } else { 1 };
        if me >= 2 * pairs {
            return Ok(());
        }
        let sender = me < pairs;
        let peer = if sender { me + pairs } else { me - pairs };
        let bs = &self.bsend[..bytes];
        let mut ack = [0u8; 4];
        for _ in 0..n {
            // Every receive of a window gets its own buffer (OSU reuses one; Rust lends a
            // buffer to one receive at a time).
            let win = self.bwin.chunks_mut(bytes.max(1)).map(|b| &mut b[..bytes]);
            match kind {
                Kind::OsuLatency if sender => {
                    c.send(bs, peer, 1)?;
                    c.recv(&mut self.brecv[..bytes], peer, 1)?;
                }
                Kind::OsuLatency => {
                    c.recv(&mut self.brecv[..bytes], peer, 1)?;
                    c.send(bs, peer, 1)?;
                }
                Kind::OsuBw | Kind::OsuMbwMr if sender => {
                    let mut rs: Vec<Request<'_>> = (0..OSU_WINDOW)
                        .map(|_| c.isend(bs, peer, 100))
                        .collect::<tca::Result<_>>()?;
                    tca::p2p::wait_all(&mut rs)?;
                    c.recv(&mut ack, peer, 101)?;
                }
                Kind::OsuBw | Kind::OsuMbwMr => {
                    let mut rs: Vec<Request<'_>> = win
                        .take(OSU_WINDOW)
                        .map(|b| c.irecv(b, peer, 100))
                        .collect::<tca::Result<_>>()?;
                    tca::p2p::wait_all(&mut rs)?;
                    c.send(&ack, peer, 101)?;
                }
                Kind::OsuBibw => {
                    let mut rs: Vec<Request<'_>> = win
                        .take(OSU_WINDOW)
                        .map(|b| c.irecv(b, peer, 100))
                        .collect::<tca::Result<_>>()?;
                    for _ in 0..OSU_WINDOW {
                        rs.push(c.isend(bs, peer, 100)?);
                    }
                    tca::p2p::wait_all(&mut rs)?;
                }
                _ => unreachable!("OSU kinds only"),
            }
        }
        Ok(())
    }

    /// `n` halo exchanges over bound channels, as QUDA's ghost zones in registered memory:
    /// every ghost's `recv_init_into` and every face's `send_init_from`, made once for the
    /// batch, then started and completed together per exchange (QUDA's `MPI_Startall` +
    /// `MPI_Waitall`); after the first exchange each message is one put, addresses posted
    /// ahead. The ghosts are checked after the batch.
    fn halo(&mut self, n: u64) -> Result<()> {
        let c = &self.comm;
        let Some((h, out, inn)) = &mut self.halo else {
            anyhow::bail!("Halo ran before its lattice was prepared");
        };
        let mut reqs: Vec<Persistent<'_>> = Vec::with_capacity(2 * h.faces.len());
        let mut at = 0;
        for f in &h.faces {
            reqs.push(c.recv_init_into(inn, at, f.bytes, f.from, f.tag)?);
            at += f.bytes;
        }
        let mut at = 0;
        for f in &h.faces {
            reqs.push(c.send_init_from(out, at, f.bytes, f.to, f.tag)?);
            at += f.bytes;
        }
        for _ in 0..n {
            Persistent::start_all(&mut reqs)?;
            Persistent::wait_all(&mut reqs)?;
        }
        drop(reqs);
        let mut at = 0;
        for g in &mut h.ghost {
            inn.read(at, g)?;
            at += g.len();
        }
        h.check()
    }

    /// The floor extra: 7 alternating rounds of the raw cache-line ping-pong and the 8-byte
    /// PingPong between ranks 0 and 1; rank 0 gets the note. Skipped when ranks outnumber
    /// cores (a pure spin cannot share a core).
    fn floor_note(&mut self) -> Result<Option<String>> {
        let w = self.world;
        if w.transport() != "shm" {
            // The floor is a cache line between two cores of one node; over a network the
            // comparison means nothing (the same answer on every rank: "shm" means one node).
            return Ok((w.rank() == 0).then(|| {
                format!(
                    "floor comparison skipped: ranks talk through {} (the floor is a cache line \
                     between two cores)",
                    w.transport()
                )
            }));
        }
        if w.size() < 2 || w.size() > tca::bootstrap::job_cpus() {
            return Ok((w.rank() == 0).then(|| {
                "floor comparison skipped: ranks outnumber cores (a pure spin cannot share a core)"
                    .to_string()
            }));
        }
        let mut line = CacheLine::new(w)?;
        line.round(w, 20_000)?;
        let iters = 50_000;
        // Floor, one-sided put_signal, the same with plain signal stores (what the default
        // SeqCst stores cost, `World::set_plain_signals`) and with --two-sided two-sided
        // send/recv, each round alternating, so the ratios come from one placement of the
        // ranks.
        #[derive(Clone, Copy, PartialEq)]
        enum Form {
            OneSided,
            Plain,
            TwoSided,
        }
        let forms: &[Form] = if self.two_sided {
            &[Form::OneSided, Form::Plain, Form::TwoSided]
        } else {
            &[Form::OneSided, Form::Plain]
        };
        let mut plain = true;
        let mut default_plain = false;
        let mut rounds = Vec::new();
        for _ in 0..7 {
            let f = line.round(w, iters)?;
            let f2 = line.round_two_lines(w, iters)?;
            let mut ts = Vec::new();
            for &form in forms {
                self.cur = (Kind::PingPong, 8);
                let now_plain = w.set_plain_signals(form == Form::Plain)?;
                if form == Form::Plain {
                    plain &= now_plain;
                }
                w.barrier()?;
                let t0 = std::time::Instant::now();
                if w.rank() < 2 {
                    if form == Form::TwoSided {
                        self.two_sided(Kind::PingPong, iters)?;
                    } else {
                        self.point_to_point(iters, false)?;
                    }
                }
                ts.push(t0.elapsed().as_secs_f64() * 1e9 / (2 * iters) as f64);
                w.barrier()?;
            }
            default_plain = w.set_plain_signals(false)?;
            rounds.push((f, f2, ts));
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let to_floor = median(rounds.iter().map(|(f, _, t)| t[0] / f).collect());
        let to_two = median(rounds.iter().map(|(_, f2, t)| t[0] / f2).collect());
        let shown: Vec<String> = rounds
            .iter()
            .map(|(f, f2, t)| {
                let t: Vec<String> = t.iter().map(|x| format!("{x:.0}")).collect();
                format!("{}/{f:.0}/{f2:.0}", t.join("/"))
            })
            .collect();
        let fence = median(rounds.iter().map(|(_, _, t)| t[0] / t[1]).collect());
        Ok((w.rank() == 0).then(|| {
            let (forms, two) = if self.two_sided {
                let two = median(rounds.iter().map(|(_, _, t)| t[2] / t[0]).collect());
                ("/two-sided", format!(", two-sided/one-sided {two:.2}"))
            } else {
                ("", String::new())
            };
            let unplain = if !plain {
                " (no plain form: this process could not register for membarrier, both were SeqCst)"
            } else if default_plain {
                " (TCA_SIGNAL_FENCE=asymmetric: the default form is plain too)"
            } else {
                ""
            };
            format!(
                "8 B PingPong one-sided/one-sided with plain signals{forms}/floor (one cache line)/two-line (raw atomics, a line each way as a put moves), half round trips, 7 alternating rounds, ns: {}; median ratios: one-sided/floor {to_floor:.2}, one-sided/two-line {to_two:.2}, one-sided/plain {fence:.2}{two}{unplain}",
                shown.join(" ")
            )
        }))
    }

    /// The registered-rendezvous extra (with `--two-sided`): at the largest size above the
    /// eager limit, two-sided PingPong whose receives land in registered segments
    /// (`Comm::irecv_into`: the sender's one put is the whole transfer) against the one-sided
    /// put_signal PingPong, 5 alternating rounds; rank 0 gets the note.
    fn registered_note(&mut self, max: usize) -> Result<Option<String>> {
        let w = self.world;
        if !self.two_sided || w.size() < 2 || max <= self.comm.eager_limit() {
            return Ok(None);
        }
        let seg = w.alloc(max)?;
        let iters = (64u64 << 20).div_ceil(max as u64).clamp(5, 2000);
        let mut rounds = Vec::new();
        for _ in 0..5 {
            let mut ts = [0.0f64; 2];
            for (k, t) in ts.iter_mut().enumerate() {
                self.cur = (Kind::PingPong, max);
                w.barrier()?;
                let t0 = std::time::Instant::now();
                if w.rank() < 2 {
                    if k == 0 {
                        self.point_to_point(iters, false)?;
                    } else {
                        let (c, me) = (&self.comm, w.rank());
                        let msg = &self.bsend[..max];
                        for _ in 0..iters {
                            if me == 0 {
                                c.send(msg, 1, 1)?;
                                c.irecv_into(&seg, 0, max, 1, 1)?.wait()?;
                            } else {
                                c.irecv_into(&seg, 0, max, 0, 1)?.wait()?;
                                c.send(msg, 0, 1)?;
                            }
                        }
                    }
                }
                *t = t0.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64;
                w.barrier()?;
            }
            rounds.push(ts);
        }
        let mut ratios: Vec<f64> = rounds.iter().map(|t| t[0] / t[1]).collect();
        ratios.sort_by(f64::total_cmp);
        let shown: Vec<String> = rounds
            .iter()
            .map(|t| format!("{:.1}/{:.1}", t[0], t[1]))
            .collect();
        Ok((w.rank() == 0).then(|| {
            format!(
                "{max} B PingPong one-sided/two-sided into a registered buffer (irecv_into), 5 alternating rounds, us: {}; median bandwidth two-sided/one-sided {:.2}",
                shown.join(" "),
                ratios[ratios.len() / 2]
            )
        }))
    }

    /// The soak extra: `n` 8-byte round trips, rank 0's memory before and after.
    fn soak_note(&mut self, n: u64) -> Result<Option<String>> {
        let before = MemStat::now();
        self.cur = (Kind::PingPong, 8);
        if self.world.rank() < 2 {
            self.point_to_point(n, false)?;
        }
        let after = MemStat::now();
        self.world.barrier()?;
        Ok((self.world.rank() == 0).then(|| {
            format!(
                "soak of {n} 8 B round trips: rank 0 RSS {} -> {} KiB, mappings {} -> {}",
                before.rss_kib, after.rss_kib, before.mappings, after.mappings
            )
        }))
    }
}

impl<'w> Backend for TcaBackend<'w> {
    type Lib = Comm<'w>;

    fn lib(&mut self) -> &mut Comm<'w> {
        &mut self.comm
    }

    fn prepare(&mut self, bench: &Benchmark, bytes: usize) -> Result<()> {
        self.cur = (bench.kind, bytes);
        self.nonblocking = bench.nonblocking();
        if let Some(coll) = bench.collective {
            let name = super::forced_algorithm(&self.forced, bench);
            self.comm.force(coll, name)?;
        }
        Ok(())
    }

    fn prepare_halo(&mut self, halo: &Halo) -> Result<()> {
        self.cur = (Kind::Halo, halo.bytes_per_exchange());
        self.nonblocking = false;
        // Channels are closed and reopened by every batch; the receiver's close must reach
        // the sender before it opens more (its slots are reused once both ends closed).
        self.halo = None;
        self.comm.barrier()?;
        let b = Buffers::new(halo, self.comm.rank());
        let total: usize = b.faces.iter().map(|f| f.bytes).sum();
        let out = self.world.alloc(total.max(1))?;
        let inn = self.world.alloc(total.max(1))?;
        let mut at = 0;
        for s in &b.send {
            out.write(at, s)?;
            at += s.len();
        }
        self.halo = Some((b, out, inn));
        Ok(())
    }

    fn calls(&mut self, n: u64) -> Result<()> {
        let (kind, bytes) = self.cur;
        let c = &self.comm;
        if self.nonblocking {
            return self.nonblocking(n, None).map(drop);
        }
        match kind {
            Kind::Sendrecv | Kind::Exchange => return self.two_sided(kind, n),
            Kind::PingPong | Kind::PingPing if self.two_sided => return self.two_sided(kind, n),
            Kind::PingPong => return self.point_to_point(n, false),
            Kind::PingPing => return self.point_to_point(n, true),
            Kind::OsuLatency | Kind::OsuBw | Kind::OsuBibw | Kind::OsuMbwMr => {
                return self.osu(kind, n);
            }
            Kind::Halo => return self.halo(n),
            Kind::AmShort
            | Kind::AmMedium
            | Kind::AmMediumFrom
            | Kind::AmLong
            | Kind::Get
            | Kind::Put
            | Kind::PutFrom
            | Kind::PutNbi
            | Kind::GetNbi => {
                return self.gasnet(kind, n);
            }
            Kind::VisHalo => return self.vis_halo(n, false),
            Kind::VisHaloMtoM => return self.vis_halo(n, true),
            _ => {}
        }
        // The buffers' slices are taken once, not on every call: a tca `Buffer`'s slice is a
        // checked view of its segment, as IMB's are plain pointers.
        let (bs, br, fs, fr): (&mut [u8], &mut [u8], &[f32], &mut [f32]) = (
            &mut self.bsend,
            &mut self.brecv,
            &self.fsend,
            &mut self.frecv,
        );
        for _ in 0..n {
            super::collective(c, kind, bytes, (&mut *bs, &mut *br, fs, &mut *fr))?;
        }
        Ok(())
    }

    fn overlapped(&mut self, n: u64, cpu: &Cpu, us: f64, tests: u32) -> Result<f64> {
        self.nonblocking(n, Some((cpu, us, tests)))
    }

    fn algorithm(&self, bench: &Benchmark, bytes: usize) -> String {
        let p = self.comm.size() as usize;
        let two_sided = |b: usize| {
            let proto = if b <= self.comm.eager_limit() {
                "eager"
            } else if matches!(self.brecv, Mem::Tca(_)) && self.comm.single_copy() {
                "rendezvous, one put into the receiver's Buffer"
            } else {
                "rendezvous"
            };
            format!("send/recv {proto}")
        };
        let packet = Endpoint::of(&self.comm).map_or(1, |e| e.packet_bytes());
        let packets = |b: usize| b.div_ceil(packet).max(1);
        match bench.collective {
            None if bench.gasnet() => match bench.kind {
                Kind::AmShort => "AM Short".into(),
                Kind::AmMedium => format!("AM Medium, {} packet(s)", packets(bytes)),
                Kind::AmMediumFrom => format!(
                    "AM Medium from the segment, {} packet(s), {}",
                    packets(bytes),
                    Endpoint::of(&self.comm)
                        .and_then(|e| e.medium_from_mode(1, bytes).ok())
                        .map_or_else(|| "-".into(), |m| m.to_string())
                ),
                Kind::AmLong => "AM Long: put + header".into(),
                Kind::Get
                    if Endpoint::of(&self.comm)
                        .is_some_and(|e| e.gets_directly(1).unwrap_or(false)) =>
                {
                    "direct read of the target's segment (same node)".into()
                }
                Kind::Get if bytes > packet => "AM get, put into a landing segment".into(),
                Kind::Get => "AM get, one reply packet".into(),
                Kind::VisHaloMtoM => format!(
                    "N={}: each face one cached chain, segment to segment",
                    (bytes / 24).isqrt()
                ),
                Kind::VisHalo => {
                    let e = (bytes / 24).isqrt();
                    let pack = Endpoint::of(&self.comm)
                        .and_then(|e| e.pack_threshold(1).ok())
                        .unwrap_or(0);
                    let how = |piece: usize| if piece < pack { "packed" } else { "direct" };
                    format!(
                        "N={e}: x face {}, y face {}, z face {} (pack < {pack} B)",
                        how(8),
                        how(8 * e),
                        how(8 * e * e)
                    )
                }
                Kind::Put => Endpoint::of(&self.comm)
                    .and_then(|e| e.put_mode(1, &self.bsend[..bytes]).ok())
                    .map_or_else(|| "put".into(), |m| format!("put, {m}")),
                Kind::PutNbi => Endpoint::of(&self.comm)
                    .and_then(|e| e.put_mode(1, &self.bsend[..bytes]).ok())
                    .map_or_else(
                        || "put_nbi window".into(),
                        |m| format!("put_nbi window, {m}"),
                    ),
                Kind::GetNbi => "get_nbi_into window: the target puts into this segment".into(),
                Kind::PutFrom => Endpoint::of(&self.comm)
                    .and_then(|e| e.put_from_mode(1, bytes).ok())
                    .map_or_else(
                        || "put from the segment".into(),
                        |m| format!("put from the segment, {m}"),
                    ),
                _ => "put".into(),
            },
            None if bench.kind == Kind::Halo => match &self.halo {
                Some((h, ..)) => format!("{}, bound channels", h.halo.describe()),
                None => "-".into(),
            },
            None if bench.family != super::Family::Imb
                || matches!(bench.kind, Kind::Sendrecv | Kind::Exchange)
                || self.two_sided =>
            {
                two_sided(bytes)
            }
            None => "put_signal".into(),
            Some(coll) => {
                let b = bench.selection_bytes(bytes, p);
                // IMB's blocking collectives over tca's buffers, from the threshold on.
                match self.comm.single_copy_path(coll, b) {
                    Some(path)
                        if matches!(self.bsend, Mem::Tca(_))
                            && bench.family == super::Family::Imb =>
                    {
                        path.into()
                    }
                    _ => self.comm.algorithm(coll, b).name.into(),
                }
            }
        }
    }
}

/// Runs the suite on this rank; rank 0 returns the result with tca's extras.
pub fn run(world: &World, opts: &Options) -> Result<Option<Half>> {
    let mut b = TcaBackend::new(world, opts)?;
    let total: usize = opts.benches().count() * opts.sizes.len();
    let bar = crate::progress::bar(total as u64, world.rank() == 0);
    let half = driver::run(&mut b, opts, |name, bytes| {
        bar.set_message(format!("{name} {bytes} B"));
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    let mut notes = Vec::new();
    let max = opts.sizes.iter().copied().max().unwrap_or(0);
    // Host-time figures (registered buffers, memcpy) mean nothing beside virtual times.
    let host = world.simulated().is_none();
    if host
        && opts.benches().any(|bench| bench.kind == Kind::PingPong)
        && let Some(n) = b.registered_note(max)?
    {
        notes.push(n);
    }
    if opts.soak > 0
        && let Some(n) = b.soak_note(opts.soak)?
    {
        notes.push(n);
    }
    // The floor note last, printed first: its plain-store rounds register this process for
    // `membarrier` for good (`World::set_plain_signals`), which the notes above should not run
    // under.
    if opts.benches().any(|bench| bench.kind == Kind::PingPong)
        && let Some(n) = b.floor_note()?
    {
        notes.insert(0, n);
    }
    if world.rank() == 0 {
        let max = opts.sizes.iter().copied().max().unwrap_or(0);
        if max > 0 && host {
            notes.push(format!(
                "memcpy at {max} bytes (one thread, this run): {:.2} GB/s",
                crate::floor::memcpy_bandwidth(max)
            ));
        }
        let (seg, pooled) = b.comm.p2p_footprint();
        notes.push(format!(
            "two-sided messages per rank: {} KiB registered (rings, remote address buffers) + {} KiB pooled; eager limit {} B",
            seg / 1024,
            pooled / 1024,
            b.comm.eager_limit()
        ));
        let provider = world
            .network_provider()
            .map(|p| format!(" (libfabric provider {p})"))
            .unwrap_or_default();
        notes.push(format!(
            "collective scratch per rank: {} KiB; transport: {}{provider}; wait policy: {} spins, {} yields, then sleep",
            tca::coll::scratch_bytes(world.size() as usize) / 1024,
            world.transport(),
            world.wait_policy().0,
            world.wait_policy().1
        ));
    }
    Ok(half.map(|mut h| {
        h.notes = notes;
        h
    }))
}
