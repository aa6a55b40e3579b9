//! The simulated transport: ranks as coroutines of one thread on a modelled network, in
//! virtual time (`"sim"`; the user's entry is [`crate::sim`]).
//!
//! It keeps the transport contract ([`crate::transport`]) with one difference in *when*: a
//! put is checked (handle, key, bounds) and its bytes staged at the call, like any put, but
//! it lands in the target's memory only when the network model says it arrives, in virtual
//! time ([`engine`] decides the order of everything; [`network`] prices each message). The
//! segments are the shared-memory transport's regions, so the same checks apply and a test
//! can read what arrived. Waits block in the engine instead of spinning: a rank runs only
//! when it is the earliest thing in virtual time.
//!
//! Computation between tca calls costs virtual time in one of two ways ([`Compute`]):
//! reductions charged from the model's rate (deterministic, the default), or host time
//! measured between calls and scaled (includes everything the program computes, but is as
//! noisy as the host).

pub(crate) mod coroutines;
pub(crate) mod engine;
pub(crate) mod network;

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use self::engine::{Engine, Pieces, Write};
use self::network::{Ps, ps};
use super::shm::Shm;
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::{AtomicOp, Handle, Packet, SignalOp, Strided};
use crate::transport::Region;

pub use self::engine::Stats;
pub use self::network::Network;

/// How computation between tca calls costs virtual time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Compute {
    /// Reductions inside collectives cost their bytes at the model's `compute.reduce_gbs`;
    /// other local work is free. Deterministic.
    Model,
    /// The host time between two tca calls, times `scale` (e.g. how much slower the modelled
    /// node computes than this one). Includes all the program's work, but varies from run to
    /// run as the host's load does.
    Measured {
        /// Virtual seconds per host second.
        scale: f64,
    },
}

impl Compute {
    /// `model`, `measured` (scale 1) or `measured:SCALE` (a positive number).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "model" => Some(Self::Model),
            "measured" => Some(Self::Measured { scale: 1.0 }),
            m => {
                let scale: f64 = m.strip_prefix("measured:")?.trim().parse().ok()?;
                (scale.is_finite() && scale > 0.0 && scale <= 1e6)
                    .then_some(Self::Measured { scale })
            }
        }
    }
}

/// In timing-only mode, messages of at most this many bytes still move whole: control data
/// (algorithm tables, handle exchanges, packet headers) is small, payload is what is large.
const TIMING_WHOLE: usize = 64 << 10;

/// In timing-only mode, the first and last bytes of a larger contiguous message that are still
/// moved (a larger strided put moves none):
/// headers at the front, trailers and same-line signals at the back (the message layers put
/// their control there), so protocols work while payload bytes stay untouched.
const EDGE: usize = 256;

/// Polls a waiter makes before it blocks, each time it wakes: as many as a spinning waiter
/// makes before it would sleep, so layers that look at some of their work on every poll and
/// at all of it every few polls (active messages: every 16th) see all of it. Polls inside a
/// wait cost no virtual time (the wait's own cost is the model's latency); a progress call
/// outside a wait costs `software.poll_ns`.
const POLLS_PER_WAKE: u32 = 16;

/// One rank's handle on the simulation.
#[derive(Debug)]
pub(crate) struct Sim {
    engine: Arc<Engine>,
    rank: u32,
    compute: Compute,
    /// Host time when this rank last left a tca call (for [`Compute::Measured`]).
    last: Cell<Instant>,
    failed: Cell<bool>,
    /// Waits this rank is inside (their polls may wait again).
    waiting: Cell<u32>,
    /// Bytes reduced since the rank last charged its computation.
    reduced: Cell<u64>,
}

impl Sim {
    /// Enters `rank` into the simulation `engine` (waits until every rank has).
    pub(crate) fn enter(engine: Arc<Engine>, rank: u32, compute: Compute) -> Result<Self> {
        let me = Self {
            engine,
            rank,
            compute,
            last: Cell::new(Instant::now()),
            failed: Cell::new(false),
            waiting: Cell::new(0),
            reduced: Cell::new(0),
        };
        me.engine.enter(rank)?;
        me.last.set(Instant::now());
        Ok(me)
    }

    /// Counts `bytes` of reduction, charged at the next operation.
    pub(crate) fn reduced(&self, bytes: usize) {
        self.reduced.set(self.reduced.get() + bytes as u64);
    }

    /// Whether payload bytes move (false in timing-only mode).
    pub(crate) fn payload(&self) -> bool {
        self.engine.payload
    }

    /// Whether a message of `len` bytes is only timed, not moved, in this job: timing-only
    /// mode and larger than [`TIMING_WHOLE`].
    pub(crate) fn only_timed(&self, len: usize) -> bool {
        !self.engine.payload && len > TIMING_WHOLE
    }

    /// The model's name.
    pub(crate) fn network(&self) -> &str {
        &self.engine.net.name
    }

    /// The collectives' cost model of the simulated network ([`Network::cost_model`]).
    pub(crate) fn cost_model(&self) -> crate::coll::model::CostModel {
        self.engine.net.cost_model()
    }

    /// The collectives' chunk size of the job, if it sets one.
    pub(crate) fn chunk(&self) -> Option<usize> {
        self.engine.chunk
    }

    /// The torus the job fills, rank r on node r, if it does: its dimensions.
    pub(crate) fn torus(&self) -> Option<Vec<usize>> {
        self.engine.torus()
    }

    /// Charges the computation since the last call to the clock.
    fn charge(&self) {
        let mut dt: Ps = 0;
        let reduced = self.reduced.replace(0);
        if reduced > 0 {
            dt += self.engine.net.reduce_time(reduced);
        }
        if let Compute::Measured { scale } = self.compute {
            dt += ps(self.last.get().elapsed().as_secs_f64() * 1e9 * scale);
        }
        if dt > 0 {
            // The computation ends later in virtual time: whatever is due before then
            // happens first (links are booked in time order). A failure here (a peer that
            // failed) shows in the operation that follows.
            let _ = self.engine.advance(self.rank, dt);
        }
    }

    /// Runs one operation: computation charged first, host clock restarted after. Refused
    /// (before anything changes in the engine) outside this rank's turn as a coroutine, and
    /// while the rank unwinds a panic: a panicking rank must keep its turn until it leaves,
    /// since every rank shares the thread, and with it `std::thread::panicking()`, which
    /// would make the others leave as failed too.
    fn op<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if std::thread::panicking() {
            return Err(Error::new(
                ErrorKind::Aborted,
                format!("simulated rank {} is unwinding a panic", self.rank),
            ));
        }
        coroutines::inside()?;
        self.charge();
        let r = f();
        self.last.set(Instant::now());
        r
    }

    /// This rank's virtual time in seconds.
    pub(crate) fn now(&self) -> f64 {
        if std::thread::panicking() || coroutines::inside().is_err() {
            return self.engine.clock(self.rank) as f64 / 1e12;
        }
        self.charge();
        self.last.set(Instant::now());
        self.engine.clock(self.rank) as f64 / 1e12
    }

    /// A progress call: one look at memory, then everything earlier runs.
    pub(crate) fn progress(&self) -> Result<()> {
        let cost = if self.waiting.get() > 0 {
            0
        } else {
            ps(self.engine.net.software.poll_ns)
        };
        self.op(|| self.engine.advance(self.rank, cost))
    }

    /// Waits until `word` (this rank's memory) is at least `value`, or `poll` says the
    /// caller's condition holds; `timeout` is virtual time.
    pub(crate) fn wait(
        &self,
        word: &AtomicU64,
        value: u64,
        timeout: Option<Duration>,
        poll: Option<&dyn Fn() -> Result<bool>>,
    ) -> Result<u64> {
        let mut left = timeout.map(|t| ps(t.as_secs_f64() * 1e9));
        self.waiting.set(self.waiting.get() + 1);
        let r = self.op(|| {
            // Everything due before this rank's clock lands before it looks.
            self.engine.advance(self.rank, 0)?;
            loop {
                let v = word.load(Ordering::Acquire);
                if v >= value {
                    return Ok(v);
                }
                if let Some(p) = poll {
                    for _ in 0..POLLS_PER_WAKE {
                        if p()? {
                            return Ok(word.load(Ordering::Acquire));
                        }
                        if word.load(Ordering::Acquire) >= value {
                            break;
                        }
                    }
                    let v = word.load(Ordering::Acquire);
                    if v >= value {
                        return Ok(v);
                    }
                }
                let before = self.engine.clock(self.rank);
                if !self.engine.block(self.rank, left)? {
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "wait for a signal timed out after {:?} of virtual time",
                            timeout.unwrap_or_default()
                        ),
                    ));
                }
                if let Some(l) = &mut left {
                    *l = l.saturating_sub(self.engine.clock(self.rank) - before);
                }
            }
        });
        self.waiting.set(self.waiting.get() - 1);
        r
    }

    /// Marks this rank failed: the others' waits fail naming it when it leaves.
    pub(crate) fn mark_failed(&self) {
        self.failed.set(true);
    }

    /// Stages `src` for a message (all of it, or in timing-only mode its edges, laid out as
    /// the pieces that will receive them).
    fn stage(&self, at: usize, src: &[u8]) -> (Vec<u8>, Pieces) {
        let len = src.len();
        let whole = self.engine.payload || len <= TIMING_WHOLE;
        let mut b = self.engine.buffer(if whole { len } else { 2 * EDGE });
        if whole {
            b.extend_from_slice(src);
            (b, Pieces::Contiguous { at, len })
        } else {
            b.extend_from_slice(&src[..EDGE]);
            b.extend_from_slice(&src[len - EDGE..]);
            let pieces = Pieces::Strided {
                at,
                count: 2,
                block: EDGE,
                stride: len - EDGE,
            };
            (b, pieces)
        }
    }

    fn send(&self, to: u32, n: usize, w: Write) -> Result<()> {
        self.op(|| self.engine.send(self.rank, to, n, w))
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.engine
            .leave(self.rank, self.failed.get() || std::thread::panicking());
    }
}

/// The simulated transport's operations; `shm` holds the regions (this process's mappings of
/// every rank's segments, attached and checked as on one node).
impl Sim {
    pub(crate) fn attach(&self, shm: &Shm, h: &Handle) -> Result<()> {
        shm.ensure(h)
    }

    pub(crate) fn put(&self, shm: &Shm, dst: &Handle, off: usize, src: &[u8]) -> Result<()> {
        let region = shm.resolve(dst)?;
        let at = region.range(off, src.len())?;
        let (bytes, pieces) = self.stage(at, src);
        let w = Write {
            to: dst.rank(),
            data: Some((region, pieces)),
            bytes,
            signal: None,
        };
        self.send(dst.rank(), src.len(), w)
    }

    /// A put split at `cuts` (ascending from 0 to `src.len()`, checked by the caller) over the
    /// model's DMA channels, complete on return; `secs[i]` gets part i's arrival after the
    /// call began, in virtual seconds (0 for an empty part).
    pub(crate) fn put_parts(
        &self,
        shm: &Shm,
        dst: &Handle,
        off: usize,
        src: &[u8],
        cuts: &[usize],
        secs: &mut [f64],
    ) -> Result<()> {
        let region = shm.resolve(dst)?;
        let at = region.range(off, src.len())?;
        secs.fill(0.0);
        let mut parts = Vec::with_capacity(cuts.len());
        let mut writes = Vec::with_capacity(cuts.len());
        for c in cuts.windows(2) {
            let part = src.get(c[0]..c[1]).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("cuts {cuts:?} out of order"),
                )
            })?;
            parts.push(part.len());
            if !part.is_empty() {
                let (bytes, pieces) = self.stage(at + c[0], part);
                writes.push(Write {
                    to: dst.rank(),
                    data: Some((region.clone(), pieces)),
                    bytes,
                    signal: None,
                });
            }
        }
        let arrivals = self.op(|| {
            self.engine
                .send_parts(self.rank, dst.rank(), &parts, writes)
        })?;
        for (s, a) in secs.iter_mut().zip(arrivals) {
            *s = a as f64 / 1e12;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put_signal(
        &self,
        shm: &Shm,
        dst: &Handle,
        off: usize,
        src: &[u8],
        sig: &Handle,
        sig_off: usize,
        op: SignalOp,
    ) -> Result<()> {
        let region = shm.resolve(dst)?;
        let at = region.range(off, src.len())?;
        let s = shm.resolve(sig)?;
        s.word(sig_off)?;
        if sig.rank() != dst.rank() {
            // Two targets, both checked above: the data lands (its own memory at once, a
            // peer's when the network delivers it, waited for), then the signal goes.
            if dst.rank() == self.rank {
                region.map.write(at, src)?;
            } else {
                self.put(shm, dst, off, src)?;
                self.quiet()?;
            }
            return self.signal(shm, sig, sig_off, op);
        }
        let (bytes, pieces) = self.stage(at, src);
        let w = Write {
            to: dst.rank(),
            data: Some((region, pieces)),
            bytes,
            signal: Some((s, sig_off, op)),
        };
        self.send(dst.rank(), src.len() + 8, w)
    }

    /// Packet `p` into `dst`'s segment as one message, delivered in order at one arrival:
    /// the body and the credit, then the line and the sequence word. A body costs one more
    /// DMA descriptor (one issue, chained descriptors); a credit 8 bytes more.
    pub(crate) fn put_packet(&self, shm: &Shm, dst: &Handle, p: &Packet<'_>) -> Result<()> {
        let region = shm.resolve(dst)?;
        let ((line_off, line), (seq_off, seq)) = (p.line, p.seq);
        let at = region.range(line_off, line.len())?;
        region.word(seq_off)?;
        let body = match p.body {
            Some((off, b)) => Some((region.range(off, b.len())?, b)),
            None => None,
        };
        if let Some((off, _)) = p.credit {
            region.word(off)?;
        }
        let credit = p.credit.map(|(off, v)| (off, SignalOp::Set(v)));
        let then = self.write(
            dst,
            &region,
            Some((at, line)),
            Some((seq_off, SignalOp::Set(seq))),
        );
        let n = line.len() + 8 + body.map_or(0, |b| b.1.len()) + credit.map_or(0, |_| 8);
        let first =
            (body.is_some() || credit.is_some()).then(|| self.write(dst, &region, body, credit));
        let extra = if body.is_some() {
            self.engine.chained_descriptor(n)
        } else {
            0
        };
        self.send2(dst, n, extra, first, then)
    }

    /// A write into `dst`'s segment (`region`, already checked): `data` (its checked offset
    /// and bytes, staged), then `signal` (a checked word and its operation).
    fn write(
        &self,
        dst: &Handle,
        region: &Arc<Region>,
        data: Option<(usize, &[u8])>,
        signal: Option<(usize, SignalOp)>,
    ) -> Write {
        let (bytes, data) = match data {
            Some((at, src)) => {
                let (bytes, pieces) = self.stage(at, src);
                (bytes, Some((Arc::clone(region), pieces)))
            }
            None => (Vec::new(), None),
        };
        Write {
            to: dst.rank(),
            data,
            bytes,
            signal: signal.map(|(off, op)| (Arc::clone(region), off, op)),
        }
    }

    /// `first` (if any) then `then` to `dst` as one message of `n` bytes, `extra` more issue
    /// time.
    fn send2(
        &self,
        dst: &Handle,
        n: usize,
        extra: Ps,
        first: Option<Write>,
        then: Write,
    ) -> Result<()> {
        self.op(|| {
            self.engine
                .send2(self.rank, dst.rank(), n, extra, first, then)
        })
    }

    pub(crate) fn signal(&self, shm: &Shm, sig: &Handle, off: usize, op: SignalOp) -> Result<()> {
        let s = shm.resolve(sig)?;
        s.word(off)?;
        let w = Write {
            to: sig.rank(),
            data: None,
            bytes: Vec::new(),
            signal: Some((s, off, op)),
        };
        self.send(sig.rank(), 8, w)
    }

    pub(crate) fn put_strided(
        &self,
        shm: &Shm,
        dst: &Handle,
        off: usize,
        src: &[u8],
        st: Strided,
        dst_span: usize,
    ) -> Result<()> {
        let region = shm.resolve(dst)?;
        let at = region.range(off, dst_span)?;
        let n = st.count * st.block;
        let whole = self.engine.payload || n <= TIMING_WHOLE;
        let mut bytes = self.engine.buffer(if whole { n } else { 0 });
        if whole {
            for i in 0..st.count {
                let from = i * st.src_stride;
                bytes.extend_from_slice(&src[from..from + st.block]);
            }
        }
        let pieces = Pieces::Strided {
            at,
            count: st.count,
            block: st.block,
            stride: st.dst_stride,
        };
        let w = Write {
            to: dst.rank(),
            data: Some((region, pieces)),
            bytes,
            signal: None,
        };
        self.send(dst.rank(), n, w)
    }

    pub(crate) fn atomic(&self, shm: &Shm, h: &Handle, off: usize, op: AtomicOp) -> Result<u64> {
        let region = shm.resolve(h)?;
        region.word(off)?;
        self.op(|| self.engine.atomic(self.rank, h.rank(), (region, off), op))
    }

    pub(crate) fn quiet(&self) -> Result<()> {
        self.op(|| self.engine.quiet(self.rank))
    }
}
