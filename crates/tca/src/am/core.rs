//! The active-message engine of one communicator: two rings per ordered pair (requests and
//! replies), the handler table, fragment reassembly, and the operations in flight (gets,
//! packed puts). Lives inside the communicator's message engine so that every wait of the
//! communicator runs its handlers (the one progress hook).

use std::cell::{Cell, RefCell};
use std::time::Duration;

use crate::cast::{rank_u32, usize_sat};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::ring::{Head, Ring, Tail};
use crate::fabric::{Handle, Segment, World};
use crate::p2p::Engine;
use crate::transport::Patience;

use super::bell;
use super::{Handler, Index, MAX_ARGS, MAX_MEDIUM, Msg, Token};

/// A message's payload: bytes, or `len` bytes at `at` of this rank's segment, written from
/// there straight into the target's ring (the seed's MtoB).
#[derive(Debug, Clone, Copy)]
pub(super) enum Payload<'a> {
    Bytes(&'a [u8]),
    Segment { at: usize, len: usize },
}

impl Payload<'_> {
    fn len(&self) -> usize {
        match *self {
            Payload::Bytes(b) => b.len(),
            Payload::Segment { len, .. } => len,
        }
    }
}

/// Packet kinds (the first byte of a packet's meta).
pub(super) const SHORT: u8 = 1;
pub(super) const MEDIUM: u8 = 2;
pub(super) const LONG: u8 = 3;
/// The rest of a payload that did not fit its first packet.
const CONT: u8 = 4;
/// Get into the requester's memory: args [op, 0], payload (offset, length) pairs; answered
/// by GET_DATA replies carrying the bytes in order.
pub(super) const GET: u8 = 8;
const GET_DATA: u8 = 9;
/// Get into the requester's segment: args [op, offset, length, destination offset]; the
/// target puts straight there and answers GET_DONE [op, length].
pub(super) const GET_SEG: u8 = 10;
const GET_DONE: u8 = 11;
/// Get into a landing segment of the requester: args [op, offset, length], payload the
/// landing's handle; the target puts straight there and answers GET_DONE.
pub(super) const GET_LAND: u8 = 15;
/// A get or packed put the target refused: args [op, offset, length, segment length, put?,
/// bytes owed, the reason's kind ([`kind_code`])], payload the reason's text.
const REFUSED: u8 = 12;
/// Packed pieces of a put: args [op], payload records (offset u64, length u64, bytes).
pub(super) const PUT_PACKED: u8 = 13;
const PUT_ACK: u8 = 14;

const NAP: Duration = Duration::from_micros(200);
/// Descriptions the descriptor cache holds at most.
const CHAINS: usize = 256;
/// Passes of an active-message wait between two passes of the communicator's whole progress.
const FULL_EVERY: u32 = 16;
/// Bytes after the request ring: the doorbell word (peers add to it after a packet when
/// the owner sleeps), then, a line further, the owner's "asleep" flag.
pub(super) const BELL_BYTES: usize = 128;

/// Which of a pair's two rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Net {
    Request,
    Reply,
}

/// An operation in flight: a get (bytes still to come, landing in `stash` when its
/// destination is ordinary memory) or a packed put (acknowledgements still to come).
#[derive(Debug, Default)]
pub(super) struct Op {
    epoch: u32,
    pub(super) bytes_left: usize,
    pub(super) acks_left: usize,
    pub(super) stash: Vec<u8>,
    /// A large get into memory lands here (registered), then one copy to the caller.
    land: Option<Segment>,
    pub(super) err: Option<Error>,
    /// Its handle was dropped: free the slot when the last reply comes.
    orphan: bool,
    live: bool,
    peer: usize,
}

/// The implicit-handle operations (`*_nbi`): fixed slots that are never freed.
pub(super) const NBI_GETS: u32 = 0;
pub(super) const NBI_PUTS: u32 = 1;

#[derive(Debug, Default)]
struct Asm {
    kind: u8,
    nargs: usize,
    handler: u16,
    need: usize,
    buf: Vec<u8>,
}

#[derive(Debug, Default)]
struct State {
    ops: Vec<Op>,
    free: Vec<u32>,
    /// Reassembly per ring and source (None: no fragmented payload under way).
    asm: [Vec<Option<Asm>>; 2],
    pool: Vec<Vec<u8>>,
    /// Registered landing segments of large gets, reused.
    landing: crate::fabric::SegmentPool,
    /// The descriptor cache: chains of segment-to-segment strided puts, by description.
    chains: std::collections::HashMap<Vec<u64>, std::rc::Rc<crate::fabric::Chain>>,
    scratch: Vec<u8>,
    rr: usize,
}

/// One communicator's active-message engine.
pub(crate) struct Core {
    pub(super) req: Ring,
    pub(super) rep: Ring,
    pub(super) seg: Segment,
    pub(super) segs: Vec<Handle>,
    pub(super) me: usize,
    pub(super) p: usize,
    world: Vec<u32>,
    names: Vec<String>,
    handlers: Vec<RefCell<Box<Handler>>>,
    /// Handlers running now (nested: a request handler waiting to send its reply runs reply
    /// handlers).
    pub(super) depth: Cell<u32>,
    /// The first error a user handler returned, kept for this rank's next call of the
    /// endpoint: raised where it happened, it would cut off whatever send or wait was polling.
    failed: RefCell<Option<Error>>,
    /// Whether this rank ever sent itself a message (else polls skip its own rings).
    loopback: Cell<bool>,
    /// Packing threshold per peer (see `Endpoint::pack_threshold`).
    pub(super) pack: Vec<Cell<usize>>,
    /// Offset of the doorbell word in the request ring's segment (the flag is a line after).
    bell: usize,
    /// Every member's "asleep" flag, where it is memory of this node (a sender reads it after
    /// each packet and rings the doorbell if set); `None` across a network.
    flags: Vec<Option<crate::fabric::RemoteWord>>,
    /// The copy engines of puts split over several channels, once turned on
    /// (`Endpoint::set_channels`).
    pub(super) channels: RefCell<Option<super::channels::Channels>>,
    /// Whether gets from ranks of this node read their segment directly (else, as across a
    /// network, a request whose handler writes the data back).
    pub(super) direct_gets: Cell<bool>,
    st: RefCell<State>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("am::Core")
            .field("me", &self.me)
            .field("p", &self.p)
            .field("handlers", &self.handlers.len())
            .finish_non_exhaustive()
    }
}

fn word(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}

/// The metadata word of a message: its kind, argument count and handler index. `nargs` is at
/// most [`MAX_ARGS`]: user messages are checked before they are sent, internal ones carry
/// fewer.
fn meta(kind: u8, nargs: usize, handler: u16) -> [u8; 8] {
    debug_assert!(nargs <= MAX_ARGS);
    let mut m = [0u8; 8];
    m[0] = kind;
    #[allow(clippy::cast_possible_truncation)] // nargs <= MAX_ARGS = 16 (see above)
    let nargs = nargs as u8;
    m[1] = nargs;
    m[2..4].copy_from_slice(&handler.to_le_bytes());
    m
}

/// Arguments each internal kind carries at least (user kinds: any number).
fn args_needed(kind: u8) -> usize {
    match kind {
        GET | GET_DATA | GET_DONE => 2,
        GET_LAND => 3,
        GET_SEG => 4,
        PUT_PACKED | PUT_ACK => 1,
        REFUSED => 7,
        _ => 0,
    }
}

/// The error kinds a refusal can carry, by their code on the wire (an index here).
const REFUSAL_KINDS: [ErrorKind; 6] = [
    ErrorKind::OutOfBounds,
    ErrorKind::InvalidHandle,
    ErrorKind::Transport,
    ErrorKind::PeerDied,
    ErrorKind::Aborted,
    ErrorKind::InvalidArgument,
];

/// `k`'s code in a refusal (a kind not in [`REFUSAL_KINDS`] travels as `Transport`).
fn kind_code(k: ErrorKind) -> u64 {
    let at = |k| REFUSAL_KINDS.iter().position(|&x| x == k);
    let i = at(k).or_else(|| at(ErrorKind::Transport));
    i.expect("Transport is a refusal kind") as u64
}

/// The kind of a refusal's code (an unknown code, from a corrupt packet, is `Transport`).
fn code_kind(c: u64) -> ErrorKind {
    usize::try_from(c)
        .ok()
        .and_then(|i| REFUSAL_KINDS.get(i).copied())
        .unwrap_or(ErrorKind::Transport)
}

pub(super) fn op_id(idx: u32, epoch: u32) -> u64 {
    u64::from(idx) | (u64::from(epoch) << 32)
}

/// The operation index of an id of [`op_id`]: its low half (the high half is the epoch).
pub(super) fn op_index(id: u64) -> u32 {
    crate::cast::low_u32(id)
}

impl Core {
    #[allow(clippy::too_many_arguments)] // assembled once, by Endpoint::new
    pub(super) fn new(
        req: Ring,
        rep: Ring,
        seg: Segment,
        segs: Vec<Handle>,
        me: usize,
        world: Vec<u32>,
        handlers: Vec<(String, Box<Handler>)>,
        pack: Vec<Cell<usize>>,
        (bell, flags): (usize, Vec<Option<crate::fabric::RemoteWord>>),
    ) -> Self {
        let p = segs.len();
        let mut st = State {
            asm: [
                (0..p).map(|_| None).collect(),
                (0..p).map(|_| None).collect(),
            ],
            ..State::default()
        };
        for _ in [NBI_GETS, NBI_PUTS] {
            st.ops.push(Op {
                live: true,
                ..Op::default()
            });
        }
        Self {
            req,
            rep,
            seg,
            segs,
            me,
            p,
            world,
            names: handlers.iter().map(|(n, _)| n.clone()).collect(),
            handlers: handlers.into_iter().map(|(_, h)| RefCell::new(h)).collect(),
            depth: Cell::new(0),
            failed: RefCell::new(None),
            loopback: Cell::new(false),
            pack,
            bell,
            flags,
            channels: RefCell::new(None),
            direct_gets: Cell::new(true),
            st: RefCell::new(st),
        }
    }

    pub(super) fn names(&self) -> &[String] {
        &self.names
    }

    fn ring(&self, net: Net) -> &Ring {
        match net {
            Net::Request => &self.req,
            Net::Reply => &self.rep,
        }
    }

    pub(super) fn peer_err(&self, kind: ErrorKind, q: usize, msg: String) -> Error {
        Error::peer(kind, self.world[q], msg)
    }

    /// The largest payload one packet carries besides `nargs` arguments.
    pub(super) fn room(&self, nargs: usize) -> usize {
        self.req.capacity() - 8 * nargs
    }

    // ---- sending ----------------------------------------------------------------------------

    /// Sends a message on `net` to `to`: the arguments and as much of `data` as fits in the
    /// first packet, the rest in continuation packets (never interleaved with other packets
    /// of the same ring and pair: see the module's "Deadlock freedom").
    #[allow(clippy::too_many_arguments)] // one message's full description
    pub(super) fn send(
        &self,
        w: &World,
        eng: &Engine,
        net: Net,
        to: usize,
        kind: u8,
        handler: u16,
        args: &[u64],
        data: &[u8],
    ) -> Result<()> {
        self.send_payload(w, eng, net, to, (kind, handler), args, Payload::Bytes(data))
    }

    /// [`Core::send`] of a payload given as bytes or as a range of this rank's segment.
    #[allow(clippy::too_many_arguments)] // one message's full description
    pub(super) fn send_payload(
        &self,
        w: &World,
        eng: &Engine,
        net: Net,
        to: usize,
        (kind, handler): (u8, u16),
        args: &[u64],
        data: Payload<'_>,
    ) -> Result<()> {
        if to == self.me {
            self.loopback.set(true);
        }
        let len = data.len();
        let total = u32::try_from(len).map_err(|_| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("{len} bytes in one active message: at most {}", u32::MAX),
            )
        })?;
        // The bytes of `data` from `at`, `n` long: a slice, or a range of the segment.
        let piece = |at: usize, n: usize| -> Result<(&[u8], Tail<'_>)> {
            match data {
                Payload::Bytes(b) => Ok((&b[at..at + n], None)),
                Payload::Segment { at: base, .. } => {
                    let region = &*self.seg.region;
                    let from = region.range(base + at, n)?;
                    Ok((&[], Some((region, from, n))))
                }
            }
        };
        let argb: &[u8] = bytemuck::cast_slice(args);
        let first = len.min(self.room(args.len()));
        let r = piece(0, first)
            .and_then(|(bytes, tail)| {
                self.push(
                    w,
                    eng,
                    net,
                    to,
                    (&[argb, bytes], tail),
                    total,
                    meta(kind, args.len(), handler),
                )
            })
            .and_then(|()| {
                for at in (first..len).step_by(self.req.capacity()) {
                    let (bytes, tail) = piece(at, self.req.capacity().min(len - at))?;
                    self.push(w, eng, net, to, (&[bytes], tail), 0, meta(CONT, 0, 0))?;
                }
                Ok(())
            });
        match r {
            // An answer to a requester that has left the job: nobody waits for it (a rank
            // leaves only with the handles of its operations dropped), so it goes nowhere, as
            // the bytes of a dropped get do. Its rings and landings went with it.
            Err(e) if net == Net::Reply && self.left(&e, to) => Ok(()),
            r => r,
        }
    }

    /// Whether `e` is the refusal of a segment of `q` because `q` has left the job.
    fn left(&self, e: &Error, q: usize) -> bool {
        e.kind() == ErrorKind::InvalidHandle && e.rank() == Some(self.world[q])
    }

    #[allow(clippy::too_many_arguments)] // one packet's full description
    fn push(
        &self,
        w: &World,
        eng: &Engine,
        net: Net,
        to: usize,
        (parts, tail): (&[&[u8]], Tail<'_>),
        aux: u32,
        m: [u8; 8],
    ) -> Result<()> {
        let ring = self.ring(net);
        let patience = Patience::default();
        loop {
            if ring.try_send_from(w, to, parts, tail, aux, m)? {
                return self.ring_bell(w, to);
            }
            // No room: sleep on the credit word, running handlers meanwhile. A request waits
            // with everything's progress; a reply (sent from a request handler) runs only
            // reply handlers, which cannot send, so the nesting stops there.
            let (off, v) = ring.credit_word(to);
            let poll = || -> Result<bool> {
                match net {
                    Net::Request => eng.poke(w)?,
                    Net::Reply => {
                        w.progress()?;
                        self.poll(w, eng, true)?;
                    }
                }
                Ok(false)
            };
            self.pay(w)?;
            let by = Some(ring.member_rank(to));
            w.wait_polling(ring.seg(), off, v, NAP, &patience, &poll, by)
                .map_err(|e| self.name(e, to, "room in the ring of"))?;
        }
    }

    /// Wakes `to` if it sleeps in a wait of this layer: its sleep is on its doorbell, not on
    /// the ring word this packet raised. The packet's sequence word was stored before the
    /// flag is read (SeqCst, or plain and ordered by the sleeper's `membarrier`), and the
    /// sleeper sets the flag before its last look at the rings: one of the two sees the other
    /// (`bell`, model-checked there with SeqCst stores).
    fn ring_bell(&self, w: &World, to: usize) -> Result<()> {
        let Some(flag) = self.flags[to].as_ref().and_then(|f| f.node_local()) else {
            return Ok(());
        };
        bell::ring_if_asleep(flag, || {
            w.signal(
                self.req.handle(to),
                self.bell,
                crate::fabric::SignalOp::Add(1),
            )
        })
    }

    fn set_asleep_flag(&self, on: bool) {
        if let Some(f) = self.flags[self.me].as_ref().and_then(|f| f.node_local()) {
            f.store(u64::from(on), std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn pay(&self, w: &World) -> Result<()> {
        self.req.pay(w)?;
        self.rep.pay(w)
    }

    fn name(&self, e: Error, q: usize, what: &str) -> Error {
        e.waiting_for(self.world[q], format_args!("{what} communicator rank {q}"))
    }

    // ---- polling and dispatch ---------------------------------------------------------------

    /// One pass over every peer's reply ring, then (unless `replies_only` or inside a
    /// handler) its request ring, running handlers. Returns how many messages ran.
    pub(crate) fn poll(&self, w: &World, eng: &Engine, replies_only: bool) -> Result<usize> {
        self.pay(w)?;
        let start = {
            let mut st = self.st.borrow_mut();
            st.rr = (st.rr + 1) % self.p;
            st.rr
        };
        let mut ran = 0;
        let nets: &[Net] = if replies_only || self.depth.get() > 0 {
            &[Net::Reply]
        } else {
            &[Net::Reply, Net::Request]
        };
        let me = (!self.loopback.get()).then_some(self.me);
        for &net in nets {
            let ring = self.ring(net);
            for k in 0..self.p {
                let q = (start + k) % self.p;
                if Some(q) == me {
                    continue; // this rank never sent itself anything
                }
                // A bounded batch per peer and pass: a peer that floods cannot starve the
                // others (or this rank's own caller).
                for _ in 0..16 {
                    let Some(h) = ring.peek(q)? else { break };
                    ran += self.on_packet(w, eng, net, q, &h)?;
                }
            }
        }
        Ok(ran)
    }

    fn on_packet(&self, w: &World, eng: &Engine, net: Net, q: usize, h: &Head) -> Result<usize> {
        let ring = self.ring(net);
        let kind = h.meta[0];
        let slot = net as usize;
        // A packet that breaks the protocol is consumed before the error goes up: left in
        // its slot it would fail every later poll.
        let malformed = |what: String| -> Result<usize> {
            ring.take(w, q, h, &mut [])?;
            Err(self.peer_err(
                ErrorKind::Transport,
                q,
                format!("malformed active message from communicator rank {q}: {what}"),
            ))
        };
        let open = self.st.borrow_mut().asm[slot][q].take();
        if kind == CONT {
            let Some(mut a) = open else {
                return malformed("a continuation packet with nothing to continue".into());
            };
            let at = a.buf.len();
            a.buf.resize(at + h.len, 0);
            ring.take(w, q, h, &mut a.buf[at..])?;
            if a.buf.len() < a.need {
                self.st.borrow_mut().asm[slot][q] = Some(a);
                return Ok(0);
            }
            let r = self.dispatch(w, eng, net, q, a.kind, a.nargs, a.handler, &a.buf);
            self.st.borrow_mut().pool.push(a.buf);
            return r.map(|()| 1);
        }
        let nargs = h.meta[1] as usize;
        let handler = u16::from_le_bytes([h.meta[2], h.meta[3]]);
        let need = 8 * nargs + h.aux as usize;
        if open.is_some() {
            return malformed("a new message before the last one's continuation".into());
        }
        if nargs > MAX_ARGS || need < h.len || nargs < args_needed(kind) {
            return malformed(format!(
                "kind {kind}, {nargs} arguments, {} payload bytes in a {}-byte packet",
                h.aux, h.len
            ));
        }
        if need > h.len {
            // The first of several packets: gather the payload, run the handler at the end.
            let mut buf = {
                let mut st = self.st.borrow_mut();
                st.pool.pop().unwrap_or_default()
            };
            buf.clear();
            buf.reserve(need);
            buf.resize(h.len, 0);
            ring.take(w, q, h, &mut buf)?;
            self.st.borrow_mut().asm[slot][q] = Some(Asm {
                kind,
                nargs,
                handler,
                need,
                buf,
            });
            return Ok(0);
        }
        // SAFETY contract of take_with (the slot stays put until the closure returns).
        ring.take_with(w, q, h, |bytes| {
            self.dispatch(w, eng, net, q, kind, nargs, handler, bytes)
        })??;
        Ok(1)
    }

    #[allow(clippy::too_many_arguments)] // one message's full description
    fn dispatch(
        &self,
        w: &World,
        eng: &Engine,
        net: Net,
        q: usize,
        kind: u8,
        nargs: usize,
        handler: u16,
        bytes: &[u8],
    ) -> Result<()> {
        let mut args = [0u64; MAX_ARGS];
        for (i, a) in args.iter_mut().enumerate().take(nargs) {
            *a = word(bytes, i);
        }
        let args = &args[..nargs];
        let data = &bytes[8 * nargs..];
        match kind {
            SHORT | MEDIUM | LONG => self.run_user(w, eng, net, q, kind, handler, args, data),
            GET => self.serve_get(w, eng, q, args, data),
            GET_SEG => self.serve_get_seg(w, eng, q, args, None),
            GET_LAND => {
                // The landing must be the requester's own segment; anything else (or a
                // landing that cannot be attached) is refused, not written.
                let h = Handle::from_bytes(data)
                    .and_then(|h| {
                        if h.rank() == self.world[q] {
                            Ok(h)
                        } else {
                            Err(Error::new(
                                ErrorKind::InvalidHandle,
                                "the landing named is not the requester's own segment",
                            ))
                        }
                    })
                    .and_then(|h| w.attach(&h).map(|_| h));
                match h {
                    Ok(h) => {
                        self.serve_get_seg(w, eng, q, &[args[0], args[1], args[2], 0], Some(&h))
                    }
                    Err(e) => {
                        let what = [args[0], args[1], args[2]];
                        self.refuse(w, eng, q, what, false, args[2], &e)
                    }
                }
            }
            PUT_PACKED => self.serve_put_packed(w, eng, q, args, data),
            GET_DATA => {
                let at = usize_sat(args[1]);
                self.on_op(args[0], |op| {
                    // A corrupt offset finds no room (and overflows nothing).
                    if let Some(dst) = op.stash.get_mut(at..).and_then(|s| s.get_mut(..data.len()))
                    {
                        dst.copy_from_slice(data);
                    }
                    op.bytes_left = op.bytes_left.saturating_sub(data.len());
                });
                Ok(())
            }
            GET_DONE => {
                self.on_op(args[0], |op| {
                    op.bytes_left = op.bytes_left.saturating_sub(usize_sat(args[1]))
                });
                Ok(())
            }
            PUT_ACK => {
                self.on_op(args[0], |op| op.acks_left = op.acks_left.saturating_sub(1));
                Ok(())
            }
            REFUSED => {
                // The target's own reason: its kind and its words. Its own resources running
                // out (`Transport`: a segment it could not attach, a put that failed on its
                // side) are its fault: if this rank fails of it, the job's abort names the
                // target (the board's blame). A malformed request is refused with another
                // kind.
                let (off, len) = (args[1], args[2]);
                let why = String::from_utf8_lossy(data);
                if code_kind(args[6]) == ErrorKind::Transport {
                    w.blame(self.world[q]);
                }
                let e = self.peer_err(
                    code_kind(args[6]),
                    q,
                    format!("communicator rank {q} refused {len} bytes at offset {off}: {why}"),
                );
                self.on_op(args[0], |op| {
                    op.err.get_or_insert(e);
                    if args[4] == 1 {
                        op.acks_left = op.acks_left.saturating_sub(1);
                    } else {
                        op.bytes_left = op.bytes_left.saturating_sub(usize_sat(args[5]));
                    }
                });
                Ok(())
            }
            _ => Err(self.peer_err(
                ErrorKind::Transport,
                q,
                format!("unknown active-message kind {kind} from communicator rank {q}"),
            )),
        }
    }

    #[allow(clippy::too_many_arguments)] // one message's full description
    fn run_user(
        &self,
        w: &World,
        eng: &Engine,
        net: Net,
        q: usize,
        kind: u8,
        handler: u16,
        args: &[u64],
        data: &[u8],
    ) -> Result<()> {
        let f = self.handlers.get(handler as usize).ok_or_else(|| {
            self.peer_err(
                ErrorKind::InvalidArgument,
                q,
                format!(
                    "active message from communicator rank {q} for handler {handler}, but \
                     only {} are registered",
                    self.handlers.len()
                ),
            )
        })?;
        let (payload, long) = if kind == LONG {
            if data.len() < 16 {
                return Err(self.peer_err(
                    ErrorKind::Transport,
                    q,
                    format!("malformed Long message from communicator rank {q}"),
                ));
            }
            let (off, len) = (usize_sat(word(data, 0)), usize_sat(word(data, 1)));
            (&[][..], Some((off, len)))
        } else {
            (data, None)
        };
        let mut f = f.try_borrow_mut().map_err(|_| {
            let name = &self.names[handler as usize];
            Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "handler {handler} ({name}) received a reply while it runs: register \
                     separate request and reply handlers"
                ),
            )
        })?;
        let msg = Msg {
            source: rank_u32(q),
            args,
            payload,
            long,
        };
        let mut tok = Token {
            core: self,
            w,
            eng,
            src: q,
            request: net == Net::Request,
            replied: false,
        };
        self.depth.set(self.depth.get() + 1);
        let r = f(&mut tok, &msg);
        self.depth.set(self.depth.get() - 1);
        if let Err(e) = r {
            self.failed.borrow_mut().get_or_insert(e);
        }
        Ok(())
    }

    /// The error a handler returned since the last call, if any.
    pub(super) fn take_failure(&self) -> Option<Error> {
        self.failed.borrow_mut().take()
    }

    /// Whether a handler of this rank is running (its waits poll no requests, and the
    /// communicator's progress leaves this layer alone).
    pub(crate) fn in_handler(&self) -> bool {
        self.depth.get() > 0
    }

    /// Checks that `len` bytes at `off` lie in this rank's segment.
    fn fits(&self, off: u64, len: u64) -> bool {
        off.checked_add(len)
            .is_some_and(|e| e <= self.seg.len() as u64)
    }

    /// Answers a get or packed put that this rank cannot serve (`what`: operation, offset,
    /// length) with the reason `why` (its kind and message travel; the requester's error
    /// carries both); `owed`: the bytes the requester still counts on for it.
    #[allow(clippy::too_many_arguments)] // one refusal's full description
    fn refuse(
        &self,
        w: &World,
        eng: &Engine,
        q: usize,
        [op, off, len]: [u64; 3],
        put: bool,
        owed: u64,
        why: &Error,
    ) -> Result<()> {
        let args = [
            op,
            off,
            len,
            self.seg.len() as u64,
            u64::from(put),
            owed,
            kind_code(why.kind()),
        ];
        // The reason's words, cut (at a character) to what one packet carries.
        let text = why.message();
        let mut end = text.len().min(self.room(args.len()));
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.depth.set(self.depth.get() + 1);
        let r = self.send(
            w,
            eng,
            Net::Reply,
            q,
            REFUSED,
            0,
            &args,
            &text.as_bytes()[..end],
        );
        self.depth.set(self.depth.get() - 1);
        r
    }

    /// Why `len` bytes at `off` cannot be served: outside this rank's segment.
    fn outside(&self, off: u64, len: u64) -> Error {
        Error::new(
            ErrorKind::OutOfBounds,
            format!(
                "{len} bytes at offset {off} lie outside its active-message segment of {} bytes",
                self.seg.len()
            ),
        )
    }

    /// A get into the requester's memory: the pieces' bytes, in order, in reply packets.
    fn serve_get(
        &self,
        w: &World,
        eng: &Engine,
        q: usize,
        args: &[u64],
        list: &[u8],
    ) -> Result<()> {
        let op = args[0];
        let n = list.len() / 16;
        let mut total = 0u64;
        for i in 0..n {
            let (off, len) = (word(list, 2 * i), word(list, 2 * i + 1));
            if !self.fits(off, len) {
                let all = (0..n).map(|k| word(list, 2 * k + 1)).sum();
                let why = self.outside(off, len);
                return self.refuse(w, eng, q, [op, off, len], false, all, &why);
            }
            total += len;
        }
        let chunk = self.room(2);
        let mut buf = self.take_scratch();
        if buf.len() < chunk {
            buf.resize(chunk, 0); // once: the scratch keeps its length between gets
        }
        let (mut fill, mut sent) = (0, 0u64);
        self.depth.set(self.depth.get() + 1);
        let r = (|| {
            // One reply packet of the bytes gathered so far: [op, their offset in the get].
            let mut flush = |buf: &[u8], fill: &mut usize| -> Result<()> {
                let args = [op, sent];
                self.send(w, eng, Net::Reply, q, GET_DATA, 0, &args, &buf[..*fill])?;
                (sent, *fill) = (sent + *fill as u64, 0);
                Ok(())
            };
            for i in 0..n {
                // In range of the segment (checked above), so they fit a usize.
                let (mut off, mut len) = (
                    usize_sat(word(list, 2 * i)),
                    usize_sat(word(list, 2 * i + 1)),
                );
                while len > 0 {
                    let k = len.min(chunk - fill);
                    self.seg.read(off, &mut buf[fill..fill + k])?;
                    (off, len, fill) = (off + k, len - k, fill + k);
                    if fill == chunk {
                        flush(&buf, &mut fill)?;
                    }
                }
            }
            if fill > 0 {
                flush(&buf, &mut fill)?;
            }
            debug_assert_eq!(sent, total);
            Ok(())
        })();
        self.depth.set(self.depth.get() - 1);
        self.give_scratch(buf);
        r
    }

    /// A get into the requester's segment: one put straight there, then the answer.
    fn serve_get_seg(
        &self,
        w: &World,
        eng: &Engine,
        q: usize,
        args: &[u64],
        into: Option<&Handle>,
    ) -> Result<()> {
        let [op, off, len, dst] = args[..4]
            .try_into()
            .map_err(|_| self.peer_err(ErrorKind::Transport, q, "short get request".to_string()))?;
        if !self.fits(off, len) {
            let why = self.outside(off, len);
            return self.refuse(w, eng, q, [op, off, len], false, len, &why);
        }
        if len > 0 {
            let to = into.unwrap_or(&self.segs[q]);
            // `off` and `len` lie in the segment (checked above); the chain checks `dst`.
            let (o, d, n) = (usize_sat(off), usize_sat(dst), usize_sat(len));
            let put = w.chain().put(&self.seg, o, to, d, n).build();
            if let Err(e) = put.and_then(|chain| w.start(&chain)) {
                // The destination is outside the requester's segment or landing, or the put
                // failed: refused, with the put's own reason.
                return self.refuse(w, eng, q, [op, dst, len], false, len, &e);
            }
        }
        self.depth.set(self.depth.get() + 1);
        let r = self.send(w, eng, Net::Reply, q, GET_DONE, 0, &[op, len], &[]);
        self.depth.set(self.depth.get() - 1);
        r
    }

    /// Packed pieces of a put: every record checked before any is written.
    fn serve_put_packed(
        &self,
        w: &World,
        eng: &Engine,
        q: usize,
        args: &[u64],
        recs: &[u8],
    ) -> Result<()> {
        let op = args[0];
        let mut at = 0;
        while at + 16 <= recs.len() {
            let (off, len) = (word(&recs[at..], 0), word(&recs[at..], 1));
            let n = usize_sat(len);
            if !self.fits(off, len) || recs.len() - at - 16 < n {
                let why = if self.fits(off, len) {
                    Error::new(
                        ErrorKind::InvalidArgument,
                        format!("a packed piece of {len} bytes runs past the end of its packet"),
                    )
                } else {
                    self.outside(off, len)
                };
                return self.refuse(w, eng, q, [op, off, len], true, 0, &why);
            }
            at += 16 + n;
        }
        at = 0;
        while at + 16 <= recs.len() {
            // Checked by the first pass: in the segment and in `recs`.
            let (off, len) = (
                usize_sat(word(&recs[at..], 0)),
                usize_sat(word(&recs[at..], 1)),
            );
            self.seg.write(off, &recs[at + 16..at + 16 + len])?;
            at += 16 + len;
        }
        self.depth.set(self.depth.get() + 1);
        let r = self.send(w, eng, Net::Reply, q, PUT_ACK, 0, &[op], &[]);
        self.depth.set(self.depth.get() - 1);
        r
    }

    // ---- operations in flight ---------------------------------------------------------------

    pub(super) fn op_alloc(&self, peer: usize, bytes: usize, stash: usize) -> u64 {
        let mut st = self.st.borrow_mut();
        let idx = match st.free.pop() {
            Some(i) => i,
            None => {
                st.ops.push(Op::default());
                // An id holds the index in its low half (`op_id`): 2^32 operations in flight
                // would take terabytes of stashes first.
                u32::try_from(st.ops.len() - 1).expect("fewer than 2^32 operations in flight")
            }
        };
        let mut buf = std::mem::take(&mut st.ops[idx as usize].stash);
        if buf.capacity() < stash {
            if let Some(i) = st.pool.iter().position(|v| v.capacity() >= stash) {
                buf = st.pool.swap_remove(i);
            }
        }
        if buf.len() < stash {
            buf.resize(stash, 0); // grows only: a reused stash is not cleared again
        }
        let op = &mut st.ops[idx as usize];
        op.epoch = op.epoch.wrapping_add(1);
        op.bytes_left = bytes;
        op.acks_left = 0;
        op.stash = buf;
        op.land = None;
        op.err = None;
        op.orphan = false;
        op.live = true;
        op.peer = peer;
        op_id(idx, op.epoch)
    }

    /// Applies `f` to a live operation (replies for a stale one are dropped), freeing it if
    /// it was orphaned and is now done.
    fn on_op(&self, id: u64, f: impl FnOnce(&mut Op)) {
        let mut st = self.st.borrow_mut();
        let idx = op_index(id);
        let Some(op) = st.ops.get_mut(idx as usize) else {
            return;
        };
        if !op.live || (idx > NBI_PUTS && u64::from(op.epoch) != id >> 32) {
            return;
        }
        f(op);
        if op.orphan && op.bytes_left == 0 && op.acks_left == 0 {
            op.live = false;
            let land = op.land.take();
            st.free.push(idx);
            if let Some(l) = land {
                st.landing.put(l);
            }
        }
    }

    pub(super) fn with_op<R>(&self, idx: u32, f: impl FnOnce(&mut Op) -> R) -> R {
        f(&mut self.st.borrow_mut().ops[idx as usize])
    }

    pub(super) fn op_done(&self, idx: u32) -> bool {
        let st = self.st.borrow();
        let op = &st.ops[idx as usize];
        op.bytes_left == 0 && op.acks_left == 0
    }

    /// Ends an explicit operation: its error, if any; its stash (and landing segment, if it
    /// has one) is handed to `f` first.
    pub(super) fn op_finish(
        &self,
        idx: u32,
        f: impl FnOnce(&[u8], Option<&Segment>) -> Result<()>,
    ) -> Result<()> {
        let (land, placed, err) = {
            let mut st = self.st.borrow_mut();
            let op = &mut st.ops[idx as usize];
            let land = op.land.take();
            let placed = f(&op.stash, land.as_ref());
            op.live = false;
            let err = op.err.take();
            st.free.push(idx);
            (land, placed, err)
        };
        if let Some(l) = land {
            self.st.borrow_mut().landing.put(l);
        }
        err.map_or(placed, Err)
    }

    /// A registered landing segment of at least `n` bytes (the smallest pooled one that
    /// fits, else a new one), attached to operation `idx`; its handle for the request.
    pub(super) fn land(&self, w: &World, idx: u32, n: usize) -> Result<Handle> {
        let mut st = self.st.borrow_mut();
        let seg = st.landing.take(w, n)?;
        let h = seg.handle();
        st.ops[idx as usize].land = Some(seg);
        Ok(h)
    }

    /// A dropped handle: freed now if done, else when its last reply comes.
    pub(super) fn op_drop(&self, idx: u32) {
        let mut st = self.st.borrow_mut();
        let op = &mut st.ops[idx as usize];
        if !op.live {
            return;
        }
        if op.bytes_left == 0 && op.acks_left == 0 {
            op.live = false;
            st.free.push(idx);
        } else {
            op.orphan = true;
        }
    }

    /// Takes the error an implicit-handle slot collected.
    pub(super) fn take_err(&self, idx: u32) -> Option<Error> {
        self.st.borrow_mut().ops[idx as usize].err.take()
    }

    /// Waits until operation `idx` is done (its answers ring this rank's doorbell like any
    /// packet of this layer), naming its peer if the wait fails.
    pub(super) fn wait_op(&self, w: &World, eng: &Engine, idx: u32) -> Result<()> {
        let peer = self.st.borrow().ops[idx as usize].peer;
        self.wait_until(w, eng, &|| self.op_done(idx))
            .map_err(|e| self.name(e, peer, "the answer of"))
    }

    /// One pass of a wait of this layer: this layer's rings every time, the communicator's
    /// whole progress (the network, two-sided messages) every [`FULL_EVERY`]-th pass — a
    /// ping-pong of active messages pays for looking at one engine, not two. Whether this
    /// layer's rings had packets.
    fn progress(&self, w: &World, eng: &Engine, turn: &Cell<u32>) -> Result<bool> {
        let k = turn.get().wrapping_add(1);
        turn.set(k);
        if k % FULL_EVERY == 0 {
            eng.poke(w).map(|()| false)
        } else {
            self.poll(w, eng, false).map(|ran| ran > 0)
        }
    }

    /// Waits until `done` holds, running everything's progress (GASNet's BLOCKUNTIL). Sleeps
    /// on this rank's doorbell, which senders of this layer ring while the flag says so.
    pub(super) fn wait_until(
        &self,
        w: &World,
        eng: &Engine,
        done: &dyn Fn() -> bool,
    ) -> Result<()> {
        let turn = Cell::new(0u32);
        let ran = Cell::new(false);
        let poll = || -> Result<bool> {
            ran.set(self.progress(w, eng, &turn)?);
            Ok(done())
        };
        let patience = Patience::default();
        let dozer = Dozer {
            core: self,
            w,
            patience: &patience,
            poll: &poll,
        };
        let mut spins = w.wait_policy().0;
        // On a simulated network, as before: one spin at the start, then a doze whenever
        // nothing is done (spinning there costs host time, and the doze lets virtual time run).
        let simulated = w.simulated().is_some();
        loop {
            // Spin with the flag down, the count starting again whenever packets came: a peer
            // answering at once (a ping-pong), or a stream of requests to a rank that serves
            // them, pays no doorbell and no dozing's fence of the writers (a `membarrier`:
            // ~15 us on a 2-core VM where processes registered for the plain-store form, about
            // 0.5 us where none did; paid per request, it made AM_Short's round trip 17 us).
            let mut idle = 0u32;
            loop {
                if poll()? {
                    return Ok(());
                }
                idle = if ran.get() && !simulated { 0 } else { idle + 1 };
                if idle >= spins {
                    break;
                }
                std::hint::spin_loop();
            }
            bell::doze(&dozer, poll)?;
            if simulated {
                spins = 0;
            }
        }
    }

    /// The cached chain for `key`, built by `build` on the first use. The cache holds at
    /// most [`CHAINS`] descriptions (emptied when full: patterns of a program are few).
    pub(super) fn chain(
        &self,
        key: &[u64],
        build: impl FnOnce() -> Result<crate::fabric::Chain>,
    ) -> Result<std::rc::Rc<crate::fabric::Chain>> {
        if let Some(c) = self.st.borrow().chains.get(key) {
            return Ok(c.clone());
        }
        let c = std::rc::Rc::new(build()?);
        let mut st = self.st.borrow_mut();
        if st.chains.len() >= CHAINS {
            st.chains.clear();
        }
        st.chains.insert(key.to_vec(), c.clone());
        Ok(c)
    }

    /// Chains in the descriptor cache now.
    pub(super) fn cached_chains(&self) -> usize {
        self.st.borrow().chains.len()
    }

    /// Lends the endpoint's scratch buffer (packed puts, get lists, get replies), contents
    /// and length as the last user left them; [`Core::give_scratch`] takes it back. A user
    /// nested inside another (a handler run while a send waits) gets an empty one.
    pub(super) fn take_scratch(&self) -> Vec<u8> {
        std::mem::take(&mut self.st.borrow_mut().scratch)
    }

    pub(super) fn give_scratch(&self, b: Vec<u8>) {
        let mut st = self.st.borrow_mut();
        if b.capacity() >= st.scratch.capacity() {
            st.scratch = b;
        }
    }

    /// Checks a user message's handler index and argument count.
    pub(super) fn check_user(&self, idx: Index, nargs: usize) -> Result<()> {
        if idx.0 as usize >= self.handlers.len() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "handler index {} is not registered ({} handlers)",
                    idx.0,
                    self.handlers.len()
                ),
            ));
        }
        if nargs > MAX_ARGS {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("an active message carries at most {MAX_ARGS} arguments, got {nargs}"),
            ));
        }
        Ok(())
    }

    /// Checks a Medium payload's size.
    pub(super) fn check_medium(&self, n: usize) -> Result<()> {
        if n > MAX_MEDIUM {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("a Medium payload is at most {MAX_MEDIUM} bytes, got {n}"),
            ));
        }
        Ok(())
    }

    /// Checks that `len` bytes at `off` fit member `q`'s segment.
    pub(super) fn check_range(&self, q: usize, off: usize, len: usize) -> Result<()> {
        let cap = self.segs[q].len();
        if off.checked_add(len).is_none_or(|e| e > cap) {
            return Err(Error::new(
                ErrorKind::OutOfBounds,
                format!(
                    "{len} bytes at offset {off} fall outside communicator rank {q}'s \
                     active-message segment of {cap} bytes"
                ),
            ));
        }
        Ok(())
    }

    /// A Long message or reply: the payload straight into `to`'s segment, then the header.
    #[allow(clippy::too_many_arguments)] // one message's full description
    pub(super) fn send_long(
        &self,
        w: &World,
        eng: &Engine,
        net: Net,
        to: usize,
        idx: Index,
        args: &[u64],
        payload: &[u8],
        off: usize,
    ) -> Result<()> {
        self.check_user(idx, args.len())?;
        self.check_range(to, off, payload.len())?;
        w.put(&self.segs[to], off, payload)?;
        let mut tail = [0u8; 16];
        tail[..8].copy_from_slice(&(off as u64).to_le_bytes());
        tail[8..].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        self.send(w, eng, net, to, LONG, idx.0, args, &tail)
    }
}

/// A rank of this layer dozing on its doorbell in `Core::wait_until` (see `bell`).
struct Dozer<'a> {
    core: &'a Core,
    w: &'a World,
    patience: &'a Patience,
    /// Everything's progress, and whether the wait is over.
    poll: &'a dyn Fn() -> Result<bool>,
}

impl bell::Bell for Dozer<'_> {
    fn rung(&self) -> Result<u64> {
        self.core.req.seg().signal_value(self.core.bell)
    }

    fn set_asleep(&self, on: bool) {
        self.core.set_asleep_flag(on);
    }

    fn fence(&self) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        // Senders may store their packets' sequence words without a fence where they opted in
        // (`World::set_plain_signals`): this orders them before the last look too. Where it
        // cannot be done, the sleep is still bounded by NAP.
        self.w.fence_writers();
    }

    fn sleep_until(&self, count: u64) -> Result<()> {
        self.core.pay(self.w)?;
        // Any rank may ring the doorbell: no one raiser.
        self.w
            .wait_polling(
                self.core.req.seg(),
                self.core.bell,
                count,
                NAP,
                self.patience,
                self.poll,
                None,
            )
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_kinds_travel_and_unknown_codes_are_transport() {
        for k in REFUSAL_KINDS {
            assert_eq!(code_kind(kind_code(k)), k);
        }
        assert_eq!(
            code_kind(kind_code(ErrorKind::Timeout)),
            ErrorKind::Transport
        );
        assert_eq!(code_kind(99), ErrorKind::Transport);
        assert_eq!(code_kind(u64::MAX), ErrorKind::Transport);
    }
}
