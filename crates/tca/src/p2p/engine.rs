//! The message engine of one communicator: matching, the unexpected queue, the eager and
//! rendezvous protocols and their progress. Safe code over the fabric's ring, puts and signals.
//!
//! # Memory layout (one segment per rank and communicator, after the ring area)
//! ```text
//! 0                             the ring (crate::fabric::ring, `Shape::messages`): eager
//!                               packets and requests-to-send; R0 = its bytes
//! R0 + r*R*64 + s*64            remote address buffer: slot s of my rendezvous sends to r;
//!                               r writes [handle 32 | offset | length | 0 | epoch]; for a
//!                               transfer r may revoke (into the buffer its wait holds):
//!                               cross-memory attach [address | BY_ADDRESS | length | claim |
//!                               epoch], or one of its Buffers [handle 32 | offset | length |
//!                               claim | epoch]; claim = 2e: posted; 2e+1: I claimed it;
//!                               REVOKED: r gave the transfer up          writers: r, me
//! R0 + P*R*64 + q*R*64 + s*64   done words: q raised it to epoch when it finished putting the
//!                               data of its rendezvous slot s into my buffer     writer: q
//! C0 + r*C*64 + c*64            channel address: where r wants the data of my persistent
//!                               channel c to it [handle 32 | offset | length | - | ready]
//!                               ready = 2k: its buffer is free for round k; 2k+1: I claimed
//!                               round k; REVOKED: r closed its receive      writers: r, me
//! C0 + P*C*64 + q*C*64 + c*64   channel done word: q raised it to k when round k of its
//!                               channel c to me was in my segment                writer: q
//! ```
//! R = [`RDV_SLOTS`] rendezvous transfers may be in flight per ordered pair; C =
//! [`CHANNELS`] bound persistent channels may be open per ordered pair.
//!
//! # Why no pointer to user memory is ever kept
//! The engine holds metadata only; a user buffer is touched only while the call that borrows
//! it runs (the request being waited on is "in hand"). An eager message matched while its
//! receive is not in hand waits in a pooled stash; a rendezvous into plain memory lands in a
//! pooled registered landing buffer; non-blocking sends copy their data at `isend` (into the
//! ring, or into a pooled stash when the ring is full or the message goes by rendezvous). So a
//! request that is dropped, or leaked, can never make the engine write into freed memory.
//!
//! # Cross-memory attach and `Buffer`s: the exceptions, bounded by a wait
//! A rendezvous of at least `cma_min` bytes whose receive is matched while its caller waits
//! on it (a blocking receive, or the wait of a receive request: [`Dest::Direct`]), from a
//! sender that can write into this process by cross-memory attach (`World::cma_reaches`; a
//! rank of this node), posts the user buffer's *address*: the sender claims the transfer by compare-and-swap on the claim
//! word (the protocol of `ready`, round = epoch), writes the data once with
//! `process_vm_writev`, straight from its own buffer into the user's, then raises the done
//! word. The wait does not return before the transfer is settled: done, or revoked by the
//! receiver's own compare-and-swap (a wait that fails: a timeout, another peer's death), or
//! the sender's process has exited. A claimed transfer is waited for however long it takes,
//! even if its sender has aborted the job (an aborted rank's process may still be writing).
//! So the address is never used after its owner returned. A revoked transfer, or a write the
//! kernel refused, fails the send request, never the unrelated call whose progress found it.
//!
//! A receive in hand into one of the communicator's [`crate::coll::Buffer`]s (tca's memory)
//! from a rank of this node takes the same protocol with a put instead of the kernel's copy,
//! at any rendezvous size: the clear-to-send carries the buffer's handle and offset and the
//! claim word, the sender claims, puts, raises the done word; the receiver's wait settles it
//! as above. One copy, where plain memory below `cma_min` takes two (the landing buffer).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use super::ready::{self, Claim, REVOKED};
use super::{Source, Status, Tag};
use crate::cast::{rank_u32, usize_sat};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::ring::{Head, Ring, Shape};
use crate::fabric::{Chain, Handle, Segment, SignalOp, World};
use crate::transport::{Patience, Region};

/// Rendezvous transfers in flight per ordered pair of ranks.
pub const RDV_SLOTS: usize = 8;
const RSLOT: usize = 64;
/// Bound persistent channels (`send_init_from` / `recv_init_into`) per ordered pair.
pub const CHANNELS: usize = 16;
const EAGER: u8 = 1;
const RTS: u8 = 2;
/// A persistent channel's first round: binds a `send_init_from` to a `recv_init_into`.
const BIND: u8 = 3;
/// Several eager messages in one packet: what waited in a pair's out queue for credit, sent
/// together when credit came (see [`Engine::flush`]). Each is a [`SUB`]-byte header (the
/// metadata word of a lone packet, then the length) and its payload padded to 8 bytes.
const BUNDLE: u8 = 4;
/// The largest message that goes in a bundle: beyond it the copy into the bundle costs more
/// than the packet it saves (`tca bench osu_bw`, BENCHMARKS.md, "Bundled small messages").
const BUNDLE_MAX: usize = 256;
/// Bytes of a bundled message's header.
const SUB: usize = 16;
/// Raised into a done word instead of the generation alone when the sender gave the transfer
/// up (its blocking send failed before the receiver's address came).
const ABANDONED: u64 = 1 << 63;
/// Raised into a done word with the generation when the sender's write straight into the
/// receiver's buffer (cross-memory attach, or a put into a `Buffer`) failed.
const DIRECT_FAILED: u64 = 1 << 62;
/// The flags of a done word.
const DONE_FLAGS: u64 = ABANDONED | DIRECT_FAILED;
/// The offset word of a claimed clear-to-send whose first word is a plain address (cross-memory
/// attach) rather than a handle (a put into one of the receiver's `Buffer`s): no segment is
/// that long.
const BY_ADDRESS: u64 = u64::MAX;
/// Longest sleep of a waiter before it polls every peer again.
const NAP: Duration = Duration::from_micros(200);
/// While a wait spins, one turn in this many runs a full progress pass.
const POLL_EVERY: u32 = 16;

/// A word a waiter sleeps on in its own ring segment, the value that ends the sleep, and the
/// member that raises it (which decides whether the sleep is on the word or on the network).
type Hint = (usize, u64, usize);

/// How long a communicator being dropped waits for its undelivered sends to move.
pub(crate) const DRAIN_PATIENCE: Duration = Duration::from_secs(2);
/// How often such a wait asks whether every peer is still alive (a poll of their pidfds): a
/// dead peer takes nothing more, and the program's error must not wait `DRAIN_PATIENCE`.
const LIVENESS_EVERY: Duration = Duration::from_millis(10);

/// Bytes of the p2p segment of one rank in a communicator of `p` ranks.
pub fn p2p_bytes(p: usize) -> usize {
    Shape::messages(p).bytes(p) + 2 * p * (RDV_SLOTS + CHANNELS) * RSLOT
}

/// Where a matched rendezvous receive wants its data.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dest {
    /// Plain memory: through a landing buffer.
    Plain,
    /// Plain memory of a receive whose caller stays in the engine until the receive is
    /// settled (a blocking receive, the wait of a receive request): a rendezvous from a rank
    /// of this node is written straight into it, by a put if it lies in one of the
    /// communicator's `Buffer`s, else by cross-memory attach from `cma_min` bytes (see the
    /// module docs); otherwise as `Plain`.
    Direct,
    /// A registered segment of this rank: straight in.
    Seg(Handle, usize),
    /// A persistent channel's receive (its first round): matches only a channel's send.
    Bound(Handle, usize),
}

/// Where a claimed rendezvous writes: the buffer the receiver holds in its wait.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// Plain memory, by cross-memory attach.
    Addr(u64),
    /// One of its communicator's `Buffer`s, by a put.
    Seg(Handle, usize),
}

/// What was received, before it reaches the user's buffer.
#[derive(Debug)]
enum Data {
    /// Already where it belongs.
    Placed,
    Stash(Vec<u8>),
    Landing(Segment),
}

#[derive(Debug, Clone, Copy)]
struct Envelope {
    src: usize,
    tag: i32,
    len: usize,
    ty: u8,
}

#[derive(Debug)]
enum St {
    Free,
    /// An eager send or an RTS waiting in `to`'s out queue for credit or a rendezvous slot.
    SendQueued {
        to: usize,
        data: Option<Vec<u8>>,
    },
    /// RTS sent; waiting for the receiver's address (clear to send).
    SendCts {
        to: usize,
        slot: usize,
        epoch: u64,
        data: Option<Vec<u8>>,
    },
    SendDone(Option<Error>),
    RecvPosted {
        src: Source,
        tag: Tag,
        cap: usize,
        ty: u8,
        dest: Dest,
    },
    RecvRdv {
        env: Envelope,
        slot: usize,
        epoch: u64,
        landing: Option<Segment>,
        /// The sender writes into the user's buffer (cross-memory attach, or a put into a
        /// `Buffer`) under the claim protocol: the wait in hand must settle it before it
        /// returns.
        direct: bool,
        err: Option<Error>,
    },
    RecvDone {
        env: Envelope,
        data: Data,
        err: Option<Error>,
    },
    /// A channel's first round: address given, waiting for the done word to reach `round`.
    RecvBound {
        env: Envelope,
        chan: usize,
        round: u64,
        err: Option<Error>,
    },
}

#[derive(Debug)]
struct Req {
    epoch: u32,
    st: St,
    /// Its `Request` is gone: free the slot when the engine is done with it.
    orphan: bool,
    /// A channel receive once bound: (sender, channel, first round).
    chan: Option<Bound>,
}

/// A bound channel as its receiver knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bound {
    /// The sender (member index).
    pub q: usize,
    /// The sender's channel slot.
    pub chan: usize,
    /// The round of the binding message.
    pub round: u64,
    /// The sender's message length and tag.
    pub len: usize,
    /// See `len`.
    pub tag: i32,
}

#[derive(Debug)]
enum Body {
    Eager(Vec<u8>),
    Rts(usize),
    /// A channel's binding: its slot and first round.
    Bind(usize, u64),
}

/// A persistent channel as its sender holds it: the source (kept alive by the engine, so a
/// round can go out from any progress pass, after the user's borrow ended), the round last
/// started, and once the receiver's address is known, the chain that moves a round.
#[derive(Debug)]
struct SendChan {
    src: Arc<Region>,
    src_off: usize,
    len: usize,
    round: u64,
    pending: bool,
    chain: Option<Chain>,
    closed: bool,
    err: Option<Error>,
}

#[derive(Debug)]
struct Unexpected {
    env: Envelope,
    body: Body,
}

#[derive(Debug)]
struct Out {
    id: u32,
    tag: i32,
    ty: u8,
    len: usize,
    /// Eager payload (`None`: an RTS).
    eager: Option<Vec<u8>>,
    /// A channel binding: its slot (the payload is its first round).
    bind: Option<usize>,
}

#[derive(Debug)]
struct State {
    reqs: Vec<Req>,
    free: Vec<u32>,
    posted: VecDeque<u32>,
    unexpected: VecDeque<Unexpected>,
    out: Vec<VecDeque<Out>>,
    queued: usize,
    slot_free: Vec<u32>,
    sgen: Vec<[u64; RDV_SLOTS]>,
    rgen: Vec<[u64; RDV_SLOTS]>,
    cts_wait: Vec<u32>,
    inflight: Vec<u32>,
    stash: Vec<Vec<u8>>,
    landing: crate::fabric::SegmentPool,
    rr: usize,
    /// Persistent channels this rank sends on, per destination.
    chans: Vec<Vec<Option<SendChan>>>,
    /// Channels with a started round not yet put: (destination, slot).
    chan_pending: Vec<(usize, usize)>,
    /// Where a bundle is put together before it goes (reused).
    bundle: Vec<u8>,
    /// Bundles sent (tests check that a window outrunning its receiver is bundled).
    #[cfg(test)]
    bundles: u64,
}

/// A request's identity in the engine: slab index and generation (a stale `Request` never
/// reaches a reused slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Id {
    pub idx: u32,
    pub epoch: u32,
}

/// The user buffer of the request being waited on.
pub(crate) enum Hand<'h> {
    None,
    Recv(&'h mut [u8]),
    RecvSeg(&'h Segment, usize, usize),
    Send(&'h [u8]),
}

/// One communicator's message engine.
#[derive(Debug)]
pub(crate) struct Engine {
    ring: Ring,
    p: usize,
    me: usize,
    /// World rank of each member, for errors.
    world: Vec<u32>,
    rab: usize,
    done: usize,
    chan_addr: usize,
    chan_done: usize,
    eager: usize,
    /// Smallest rendezvous message a [`Dest::Direct`] receive takes by cross-memory attach
    /// (`usize::MAX`: none).
    cma_min: Cell<usize>,
    /// The communicator's [`crate::coll::Buffer`]s: a receive in hand into one of them takes
    /// a rendezvous from a rank of this node as one put (see the module docs).
    buffers: crate::coll::Registry,
    st: RefCell<State>,
    /// The channel of the receive finished last (read by `Persistent` right after its wait).
    last_bound: Cell<Option<Bound>>,
    /// The communicator's active-message endpoint, once made: its handlers run in this
    /// engine's progress, so every wait of the communicator runs them.
    am: std::cell::OnceCell<crate::am::Core>,
}

impl crate::fabric::ring::Progressor for Engine {
    /// Whether this rank owes peers something: packets queued for credit, or rendezvous data
    /// to put once their receivers answer. Collectives' waits make progress while it is so.
    fn busy(&self) -> bool {
        let st = self.st.borrow();
        // With active messages, peers may need this rank's handlers at any time.
        st.queued > 0
            || !st.cts_wait.is_empty()
            || !st.chan_pending.is_empty()
            || self.am.get().is_some()
    }

    fn poll(&self, w: &World) -> Result<()> {
        self.poll_any(w).map(|_| ())
    }
}

fn type_name(code: u8) -> &'static str {
    const NAMES: [&str; 11] = [
        "bytes", "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64",
    ];
    NAMES
        .get(code as usize)
        .copied()
        .unwrap_or("an unknown type")
}

fn type_size(code: u8) -> usize {
    match code {
        0..=2 => 1,
        3 | 4 => 2,
        5 | 6 | 9 => 4,
        _ => 8,
    }
}

fn matches(src: Source, tag: Tag, env: &Envelope) -> bool {
    (match src {
        Source::Any => true,
        Source::Rank(r) => r as usize == env.src,
    }) && (match tag {
        Tag::Any => true,
        Tag::Is(t) => t == env.tag,
    })
}

impl Engine {
    /// Wraps an allocated segment (`p2p_bytes(p)` long) and every member's handle of it.
    pub(crate) fn new(
        seg: Segment,
        handles: Vec<Handle>,
        me: usize,
        world: Vec<u32>,
        buffers: crate::coll::Registry,
    ) -> Result<Self> {
        let p = handles.len();
        let ring = Ring::new(seg, handles, me, Shape::messages(p));
        let eager = match crate::env::parse::<usize>(crate::env::P2P_EAGER)? {
            Some(n) => n.min(ring.capacity()),
            None => super::EAGER_DEFAULT.min(ring.capacity()),
        };
        let cma_min = match std::env::var(crate::env::CMA) {
            Ok(v) if matches!(v.trim(), "off" | "no" | "false") => usize::MAX,
            Ok(_) => crate::env::parse::<usize>(crate::env::CMA)?.unwrap_or(usize::MAX),
            Err(_) => super::CMA_DEFAULT,
        };
        let rab = Shape::messages(p).bytes(p);
        let chan_addr = rab + 2 * p * RDV_SLOTS * RSLOT;
        Ok(Self {
            ring,
            p,
            me,
            world,
            rab,
            done: rab + p * RDV_SLOTS * RSLOT,
            chan_addr,
            chan_done: chan_addr + p * CHANNELS * RSLOT,
            last_bound: Cell::new(None),
            am: std::cell::OnceCell::new(),
            eager,
            cma_min: Cell::new(cma_min),
            buffers,
            st: RefCell::new(State {
                reqs: Vec::new(),
                free: Vec::new(),
                posted: VecDeque::new(),
                unexpected: VecDeque::new(),
                out: (0..p).map(|_| VecDeque::new()).collect(),
                queued: 0,
                slot_free: vec![(1u32 << RDV_SLOTS) - 1; p],
                sgen: vec![[0; RDV_SLOTS]; p],
                rgen: vec![[0; RDV_SLOTS]; p],
                cts_wait: Vec::new(),
                inflight: Vec::new(),
                stash: Vec::new(),
                landing: Default::default(),
                rr: 0,
                chans: (0..p)
                    .map(|_| (0..CHANNELS).map(|_| None).collect())
                    .collect(),
                chan_pending: Vec::new(),
                bundle: Vec::new(),
                #[cfg(test)]
                bundles: 0,
            }),
        })
    }

    /// The active-message endpoint, if one was made.
    pub(crate) fn am(&self) -> Option<&crate::am::Core> {
        self.am.get()
    }

    /// Installs the active-message endpoint (once; the caller checked there was none).
    pub(crate) fn set_am(&self, core: crate::am::Core) {
        self.am.set(core).expect("one endpoint per communicator");
    }

    /// One pass of progress with no request of the caller's in hand.
    pub(crate) fn poke(&self, w: &World) -> Result<()> {
        self.progress(w, &mut Hand::None, None).map(|_| ())
    }

    /// The smallest rendezvous message a [`Dest::Direct`] receive takes by cross-memory
    /// attach; `None` when none does (turned off, or the kernel forbids it).
    pub(crate) fn cma_min(&self) -> Option<usize> {
        let n = self.cma_min.get();
        (n != usize::MAX && World::cma_permitted()).then_some(n)
    }

    pub(crate) fn set_cma_min(&self, n: Option<usize>) {
        self.cma_min.set(n.unwrap_or(usize::MAX));
    }

    /// Messages of at most this many bytes go eagerly.
    pub(crate) fn eager_limit(&self) -> usize {
        self.eager
    }

    fn rab_off(&self, r: usize, slot: usize) -> usize {
        self.rab + (r * RDV_SLOTS + slot) * RSLOT
    }

    fn done_off(&self, q: usize, slot: usize) -> usize {
        self.done + (q * RDV_SLOTS + slot) * RSLOT
    }

    /// In a sender's memory: receiver `r`'s address entry for channel `c`.
    fn chan_addr_off(&self, r: usize, c: usize) -> usize {
        self.chan_addr + (r * CHANNELS + c) * RSLOT
    }

    /// In a receiver's memory: sender `q`'s done word for channel `c`.
    fn chan_done_off(&self, q: usize, c: usize) -> usize {
        self.chan_done + (q * CHANNELS + c) * RSLOT
    }

    fn peer_err(&self, kind: ErrorKind, q: usize, msg: String) -> Error {
        Error::peer(kind, self.world[q], msg)
    }

    // ---- requests ---------------------------------------------------------------------------

    fn alloc(st: &mut State, s: St) -> Id {
        match st.free.pop() {
            Some(i) => {
                let r = &mut st.reqs[i as usize];
                r.epoch = r.epoch.wrapping_add(1);
                r.st = s;
                r.orphan = false;
                r.chan = None;
                Id {
                    idx: i,
                    epoch: r.epoch,
                }
            }
            None => {
                st.reqs.push(Req {
                    epoch: 0,
                    st: s,
                    orphan: false,
                    chan: None,
                });
                Id {
                    // 2^32 requests in flight would take far more memory than a machine has.
                    idx: u32::try_from(st.reqs.len() - 1).expect("fewer than 2^32 requests"),
                    epoch: 0,
                }
            }
        }
    }

    fn release(st: &mut State, idx: u32) {
        let r = &mut st.reqs[idx as usize];
        match std::mem::replace(&mut r.st, St::Free) {
            St::RecvDone { data, .. } => Self::recycle(st, data),
            St::SendDone(_) => {}
            other => {
                // Still in flight: the engine finishes it and frees the slot then.
                r.st = other;
                r.orphan = true;
                return;
            }
        }
        st.free.push(idx);
    }

    fn recycle(st: &mut State, data: Data) {
        match data {
            Data::Stash(v) => st.stash.push(v),
            Data::Landing(s) => st.landing.put(s),
            Data::Placed => {}
        }
    }

    fn stash(st: &mut State, n: usize) -> Vec<u8> {
        let mut v = match st.stash.iter().position(|v| v.capacity() >= n) {
            Some(i) => st.stash.swap_remove(i),
            None => st.stash.pop().unwrap_or_default(),
        };
        v.clear();
        v.resize(n, 0);
        v
    }

    /// Forgets the request (its `Request` was dropped or finished).
    pub(crate) fn drop_req(&self, id: Id) {
        let mut st = self.st.borrow_mut();
        if st
            .reqs
            .get(id.idx as usize)
            .is_some_and(|r| r.epoch == id.epoch)
        {
            if let St::RecvPosted { .. } = st.reqs[id.idx as usize].st {
                // Never matched: cancelled.
                st.posted.retain(|&i| i != id.idx);
                st.reqs[id.idx as usize].st = St::Free;
                st.free.push(id.idx);
                return;
            }
            Self::release(&mut st, id.idx);
        }
    }

    // ---- sends ------------------------------------------------------------------------------

    /// Starts a send of `data` to member `to`. `keep`: the caller holds `data` until the send
    /// completes (a blocking send), so a rendezvous need not copy it. Returns `None` when the
    /// send already completed (an eager message that went straight into the ring).
    pub(crate) fn send(
        &self,
        w: &World,
        to: usize,
        tag: i32,
        ty: u8,
        data: &[u8],
        keep: bool,
    ) -> Result<Option<Id>> {
        let len = data.len();
        if u32::try_from(len).is_err() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("a message of {len} bytes is over the 4 GiB limit of one message"),
            ));
        }
        let mut st = self.st.borrow_mut();
        if len <= self.eager {
            if st.out[to].is_empty()
                && self
                    .ring
                    .try_send(w, to, data, wire_len(len), meta(tag, EAGER, 0, ty))?
            {
                return Ok(None);
            }
            let mut v = Self::stash(&mut st, len);
            v.copy_from_slice(data);
            let id = Self::alloc(&mut st, St::SendQueued { to, data: None });
            Self::enqueue(&mut st, to, id.idx, (tag, ty, len), Some(v), None);
            drop(st);
            self.flush(w)?;
            return Ok(Some(id));
        }
        let staged = (!keep).then(|| {
            let mut v = Self::stash(&mut st, len);
            v.copy_from_slice(data);
            v
        });
        let id = Self::alloc(&mut st, St::SendQueued { to, data: staged });
        Self::enqueue(&mut st, to, id.idx, (tag, ty, len), None, None);
        drop(st);
        self.flush(w)?;
        Ok(Some(id))
    }

    /// Queues a packet for `to` behind what already waits (sent by `flush`, in order):
    /// `(tag, type, message length)`, an eager payload or none (an RTS), a channel binding.
    fn enqueue(
        st: &mut State,
        to: usize,
        id: u32,
        (tag, ty, len): (i32, u8, usize),
        eager: Option<Vec<u8>>,
        bind: Option<usize>,
    ) {
        st.out[to].push_back(Out {
            id,
            tag,
            ty,
            len,
            eager,
            bind,
        });
        st.queued += 1;
    }

    /// Sends what waits in the out queues, in order, while credits and rendezvous slots last.
    /// Two or more eager messages at the front of a queue go as one [`BUNDLE`] packet, as
    /// many as fit one: a stream of small sends that outran the receiver's credits (a
    /// window of `isend`s) takes one slot and one credit per bundle, not per message. A
    /// message that finds its queue empty still goes alone, at once.
    fn flush(&self, w: &World) -> Result<()> {
        let mut st = self.st.borrow_mut();
        if st.queued == 0 {
            return Ok(());
        }
        for to in 0..self.p {
            // Every packet needs a free slot: nothing to look at in the queue without one.
            while !st.out[to].is_empty() && self.ring.can_send(w, to)? {
                // To a peer across a network a packet is a message through the network's
                // software stack (a `sendto` on TCP) and the copy is cheap beside it: messages
                // of up to half a packet (less a bundle header, so that two go together) are
                // bundled. With the 32 KiB messages that carry a whole bundle as one, a window
                // of 1-8 KiB sends got 2.3-4.3x the bandwidth over TCP (`tca bench osu_bw`
                // across two namespaces, BENCHMARKS.md, "Across nodes").
                let max = if w.is_remote(self.world[to]) {
                    (self.ring.capacity() / 2).saturating_sub(SUB)
                } else {
                    BUNDLE_MAX
                };
                let n = self.bundled(&st.out[to], max);
                if n > 1 {
                    let mut buf = std::mem::take(&mut st.bundle);
                    buf.clear();
                    for o in st.out[to].iter().take(n) {
                        let v = o.eager.as_deref().unwrap_or_default();
                        buf.extend_from_slice(&meta(o.tag, EAGER, 0, o.ty));
                        buf.extend_from_slice(&wire_len(o.len).to_le_bytes());
                        buf.extend_from_slice(&[0; 4]);
                        buf.extend_from_slice(v);
                        buf.resize(buf.len().next_multiple_of(8), 0);
                    }
                    let sent =
                        self.ring
                            .try_send(w, to, &buf, wire_len(buf.len()), meta(0, BUNDLE, 0, 0));
                    st.bundle = buf;
                    if !sent? {
                        break;
                    }
                    #[cfg(test)]
                    {
                        st.bundles += 1;
                    }
                    for _ in 0..n {
                        let o = st.out[to].pop_front().expect("bundled from the queue");
                        st.queued -= 1;
                        st.stash.extend(o.eager);
                        self.complete_send(&mut st, o.id, None);
                    }
                    continue;
                }
                let Some(o) = st.out[to].front() else {
                    break;
                };
                let sent = match &o.eager {
                    Some(v) if o.bind.is_some() => self.ring.try_send(
                        w,
                        to,
                        v,
                        wire_len(o.len),
                        meta(o.tag, BIND, channel_u8(o.bind.unwrap_or(0)), o.ty),
                    )?,
                    Some(v) => self.ring.try_send(
                        w,
                        to,
                        v,
                        wire_len(o.len),
                        meta(o.tag, EAGER, 0, o.ty),
                    )?,
                    // An RTS needs a rendezvous slot as well as ring credit.
                    None if st.slot_free[to] == 0 => false,
                    None => {
                        // A bit index of a u32: below 32.
                        #[allow(clippy::cast_possible_truncation)]
                        let slot = st.slot_free[to].trailing_zeros() as u8;
                        self.ring.try_send(
                            w,
                            to,
                            &[],
                            wire_len(o.len),
                            meta(o.tag, RTS, slot, o.ty),
                        )?
                    }
                };
                if !sent {
                    break;
                }
                let o = st.out[to].pop_front().expect("front exists");
                st.queued -= 1;
                match o.eager {
                    Some(v) if o.bind.is_some() => st.stash.push(v),
                    Some(v) => {
                        st.stash.push(v);
                        self.complete_send(&mut st, o.id, None);
                    }
                    None => {
                        let slot = st.slot_free[to].trailing_zeros() as usize;
                        st.slot_free[to] &= !(1 << slot);
                        st.sgen[to][slot] += 1;
                        let epoch = st.sgen[to][slot];
                        let r = &mut st.reqs[o.id as usize];
                        let data = match std::mem::replace(&mut r.st, St::Free) {
                            St::SendQueued { data, .. } => data,
                            _ => None,
                        };
                        r.st = St::SendCts {
                            to,
                            slot,
                            epoch,
                            data,
                        };
                        st.cts_wait.push(o.id);
                    }
                }
            }
        }
        Ok(())
    }

    /// Bundles this engine has sent.
    #[cfg(test)]
    pub(crate) fn bundles_sent(&self) -> u64 {
        self.st.borrow().bundles
    }

    /// How many eager messages at the front of `out` fit one bundle (the ring's packet
    /// capacity, each with its [`SUB`]-byte header and padding).
    fn bundled(&self, out: &VecDeque<Out>, max: usize) -> usize {
        let cap = self.ring.capacity();
        let mut bytes = 0;
        let mut n = 0;
        for o in out {
            if o.eager.is_none() || o.bind.is_some() || o.len > max {
                break;
            }
            bytes += SUB + o.len.next_multiple_of(8);
            if bytes > cap {
                break;
            }
            n += 1;
        }
        n
    }

    fn complete_send(&self, st: &mut State, idx: u32, err: Option<Error>) {
        let r = &mut st.reqs[idx as usize];
        r.st = St::SendDone(err);
        if r.orphan {
            r.st = St::Free;
            st.free.push(idx);
        }
    }

    /// Puts the data of rendezvous sends whose receivers have posted their address.
    fn serve_cts(&self, w: &World, hand: &mut Hand<'_>, hand_id: Option<u32>) -> Result<()> {
        let mut st = self.st.borrow_mut();
        let mut i = 0;
        while i < st.cts_wait.len() {
            let idx = st.cts_wait[i];
            let St::SendCts {
                to, slot, epoch, ..
            } = st.reqs[idx as usize].st
            else {
                st.cts_wait.swap_remove(i);
                continue;
            };
            let at = self.rab_off(to, slot);
            if self.ring.seg().signal_value(at + 56)? < epoch {
                i += 1;
                continue;
            }
            st.cts_wait.swap_remove(i);
            let mut cts = [0u8; 56];
            self.ring.seg().read(at, &mut cts)?;
            let word = |k: usize| u64::from_le_bytes(cts[k..k + 8].try_into().expect("8"));
            // A claim word marks a transfer the receiver may revoke (into the buffer its wait
            // holds): an address for cross-memory attach (offset `BY_ADDRESS`), or a handle of
            // one of its `Buffer`s. Without one, a handle of a segment or landing buffer.
            let claimed = word(48) != 0;
            let target = if !claimed {
                None
            } else if word(32) == BY_ADDRESS {
                Some(Target::Addr(word(0)))
            } else {
                Some(Target::Seg(
                    Handle::from_bytes(&cts[..Handle::BYTES])?,
                    usize_sat(word(32)),
                ))
            };
            // A put can reach any rank's segment: take only the receiver's own.
            if let Some(Target::Seg(h, _)) = target
                && h.rank() != self.world[to]
            {
                return Err(self.peer_err(
                    ErrorKind::Transport,
                    to,
                    format!(
                        "malformed rendezvous address from communicator rank {to}: a segment of \
                         rank {}",
                        h.rank()
                    ),
                ));
            }
            let dst = if claimed {
                None
            } else {
                Some(Handle::from_bytes(&cts[..Handle::BYTES])?)
            };
            // The receiver's word: the put checks them against `dst`.
            let off = usize_sat(word(32));
            let len = usize_sat(word(40));
            let St::SendCts { data, .. } =
                std::mem::replace(&mut st.reqs[idx as usize].st, St::Free)
            else {
                unreachable!("matched above")
            };
            let src: Option<&[u8]> = match (&data, &*hand, hand_id) {
                (Some(v), _, _) => Some(v),
                (None, Hand::Send(s), Some(h)) if h == idx => Some(s),
                _ => None,
            };
            let done = self.ring.handle(to);
            let done_off = self.done_off(self.me, slot);
            let r = match (src, dst) {
                (Some(s), Some(dst)) if len <= s.len() => {
                    w.put_signal(&dst, off, &s[..len], done, done_off, SignalOp::Set(epoch))
                }
                (Some(s), None) if len <= s.len() => {
                    // Its outcome is the send's alone: a receiver that gave up, or a write the
                    // kernel refused, fails that send, not the call that made this progress.
                    let t = target.expect("a claimed transfer has a target");
                    let r = self.write_direct(w, to, at + 48, (t, &s[..len]), epoch, done_off);
                    if let Some(v) = data {
                        st.stash.push(v);
                    }
                    st.slot_free[to] |= 1 << slot;
                    self.complete_send(&mut st, idx, r.err());
                    continue;
                }
                (Some(s), _) => Err(self.peer_err(
                    ErrorKind::InvalidArgument,
                    to,
                    format!(
                        "rank {} asked for {len} bytes of a {}-byte message",
                        self.world[to],
                        s.len()
                    ),
                )),
                (None, _) => w.signal(done, done_off, SignalOp::Set(epoch | ABANDONED)),
            };
            if let Some(v) = data {
                st.stash.push(v);
            }
            st.slot_free[to] |= 1 << slot;
            let err = r.as_ref().err().cloned();
            self.complete_send(&mut st, idx, err);
            r?;
        }
        Ok(())
    }

    /// The data of a rendezvous whose receiver posted the buffer its wait holds (see the module
    /// docs, "Cross-memory attach and `Buffer`s"): claims the transfer on the claim word at
    /// `claim_off` of this rank's segment, writes `src` there once (by cross-memory attach to
    /// an address, or a put into a `Buffer`), then raises the receiver's done word (with
    /// [`DIRECT_FAILED`] if the write failed). A transfer the receiver revoked is not
    /// written and not signalled: the receiver has left its wait.
    fn write_direct(
        &self,
        w: &World,
        to: usize,
        claim_off: usize,
        (target, src): (Target, &[u8]),
        epoch: u64,
        done_off: usize,
    ) -> Result<()> {
        let done = self.ring.handle(to);
        // The receiver revokes through the fabric's atomics; nobody sleeps on the word.
        match ready::claim(self.ring.seg().region.word(claim_off)?, epoch)? {
            Claim::Claimed => {}
            Claim::Revoked => {
                return Err(self.peer_err(
                    ErrorKind::Aborted,
                    to,
                    format!(
                        "communicator rank {to} gave its receive up before the data moved \
                         (its wait failed)"
                    ),
                ));
            }
            Claim::NotYet => {
                return Err(self.peer_err(
                    ErrorKind::Transport,
                    to,
                    format!("malformed rendezvous address from communicator rank {to}"),
                ));
            }
        }
        let wrote = match target {
            Target::Addr(addr) => w.cma_write(self.world[to], addr, src),
            Target::Seg(h, off) => w.put(&h, off, src).map_err(|e| {
                let kind = match e.kind() {
                    ErrorKind::PeerDied => ErrorKind::PeerDied,
                    _ => ErrorKind::Transport,
                };
                self.peer_err(
                    kind,
                    to,
                    format!(
                        "putting {} bytes into communicator rank {to}'s receive buffer: {e}",
                        src.len()
                    ),
                )
            }),
        };
        match wrote {
            Ok(()) => w.signal(done, done_off, SignalOp::Set(epoch)),
            Err(e) => {
                let _ = w.signal(done, done_off, SignalOp::Set(epoch | DIRECT_FAILED));
                Err(e)
            }
        }
    }

    // ---- persistent channels ------------------------------------------------------------------

    /// Starts a round of a channel send of `len` bytes of `src` at `src_off` to `to`: the
    /// first start (`slot` None) opens a channel and sends its binding; later starts only mark
    /// the round, which goes out (one chain: the data, then the done word) as soon as the
    /// receiver's ready word says its buffer is free — in this call if it already is.
    /// Returns the channel's slot.
    #[allow(clippy::too_many_arguments)] // the operation's full description, used in one place
    pub(crate) fn chan_send_start(
        &self,
        w: &World,
        slot: Option<usize>,
        to: usize,
        tag: i32,
        src: &Segment,
        src_off: usize,
        len: usize,
    ) -> Result<usize> {
        let mut st = self.st.borrow_mut();
        let c = match slot {
            Some(c) => {
                let ch = st.chans[to][c].as_mut().expect("an open channel");
                ch.round += 1;
                ch.pending = true;
                c
            }
            None => {
                let free = (0..CHANNELS).find(|&c| match &st.chans[to][c] {
                    None => true,
                    Some(ch) => {
                        ch.closed
                            && !ch.pending
                            && self
                                .ring
                                .seg()
                                .signal_value(self.chan_addr_off(to, c) + 56)
                                .is_ok_and(|v| v == REVOKED)
                    }
                });
                let Some(c) = free else {
                    return Err(self.peer_err(
                        ErrorKind::InvalidArgument,
                        to,
                        format!(
                            "{CHANNELS} persistent channels to communicator rank {to} are open \
                             already (drop one, and its receive, first)"
                        ),
                    ));
                };
                // Rounds keep growing across the channels of a slot, so the receiver's done
                // word never goes back; the ready word is this rank's to reset before binding.
                let round = st.chans[to][c].as_ref().map_or(1, |ch| ch.round + 1);
                let me = self.ring.handle(self.me);
                w.signal(me, self.chan_addr_off(to, c) + 56, SignalOp::Set(0))?;
                st.chans[to][c] = Some(SendChan {
                    src: src.region.clone(),
                    src_off,
                    len,
                    round,
                    pending: true,
                    chain: None,
                    closed: false,
                    err: None,
                });
                let round_bytes = round.to_le_bytes().to_vec();
                Self::enqueue(
                    &mut st,
                    to,
                    u32::MAX,
                    (tag, 0, len),
                    Some(round_bytes),
                    Some(c),
                );
                c
            }
        };
        st.chan_pending.push((to, c));
        drop(st);
        self.flush(w)?;
        self.serve_chans(w)?;
        Ok(c)
    }

    /// Puts the rounds whose receivers are ready: claims the round on the ready word (so a
    /// receiver closing at the same moment either wins, and nothing is written, or waits for
    /// the data), builds the chain on the first round, starts it.
    fn serve_chans(&self, w: &World) -> Result<()> {
        let mut st = self.st.borrow_mut();
        let mut i = 0;
        while i < st.chan_pending.len() {
            let (to, c) = st.chan_pending[i];
            let at = self.chan_addr_off(to, c);
            let ch = st.chans[to][c].as_mut().expect("a pending channel is open");
            // The claim (see `ready`): nobody sleeps on the word but this rank, so a local
            // swap needs no wake-up.
            let claim = ready::claim(self.ring.seg().region.word(at + 56)?, ch.round)?;
            if claim == Claim::Revoked {
                ch.err = Some(self.peer_err(
                    ErrorKind::InvalidArgument,
                    to,
                    format!("communicator rank {to} closed the persistent receive of this channel"),
                ));
            } else if claim == Claim::NotYet {
                i += 1;
                continue;
            } else {
                if ch.chain.is_none() {
                    let mut a = [0u8; 56];
                    self.ring.seg().read(at, &mut a)?;
                    let dst = Handle::from_bytes(&a[..Handle::BYTES])?;
                    // The receiver's word: the put checks them against `dst`.
                    let off = usize_sat(u64::from_le_bytes(a[32..40].try_into().expect("8")));
                    let n = usize_sat(u64::from_le_bytes(a[40..48].try_into().expect("8")));
                    ch.chain = Some(
                        w.chain()
                            .put_region(&ch.src, ch.src_off, &dst, off, n.min(ch.len))
                            .signal(
                                self.ring.handle(to),
                                self.chan_done_off(self.me, c),
                                SignalOp::Set(0),
                            )
                            .build()?,
                    );
                }
                let chain = ch.chain.as_ref().expect("built above");
                if let Err(e) = w.start_with(chain, Some(SignalOp::Set(ch.round))) {
                    ch.err = Some(e);
                }
            }
            ch.pending = false;
            st.chan_pending.swap_remove(i);
        }
        Ok(())
    }

    /// Whether the channel's current round has gone out (its error, if it failed).
    fn chan_sent(&self, to: usize, c: usize) -> Option<Result<Status>> {
        let mut st = self.st.borrow_mut();
        let ch = st.chans[to][c].as_mut().expect("an open channel");
        if ch.pending {
            return None;
        }
        Some(ch.err.take().map_or(Ok(Status::send()), Err))
    }

    /// Tests the current round of a channel send.
    pub(crate) fn chan_send_test(&self, w: &World, to: usize, c: usize) -> Result<Option<Status>> {
        self.progress(w, &mut Hand::None, None)?;
        self.chan_sent(to, c).transpose()
    }

    /// Waits for the current round of a channel send to go out.
    pub(crate) fn chan_send_wait(&self, w: &World, to: usize, c: usize) -> Result<Status> {
        let round = self.st.borrow().chans[to][c]
            .as_ref()
            .map_or(0, |ch| ch.round);
        self.block_on(w, (self.chan_addr_off(to, c) + 56, 2 * round, to), || {
            Ok(self.chan_sent(to, c))
        })
        .map_err(|e| self.chan_err(e, to, "the receive of"))?
    }

    /// Progress until `ready` has an answer, sleeping on `word` between passes (the waits of
    /// bound channels, whose events are one word each, raised by one member).
    fn block_on<T>(
        &self,
        w: &World,
        word: Hint,
        ready: impl Fn() -> Result<Option<T>>,
    ) -> Result<T> {
        let patience = Patience::default();
        loop {
            self.progress(w, &mut Hand::None, None)?;
            if let Some(v) = ready()? {
                return Ok(v);
            }
            self.sleep_on(w, word, &patience, || {
                self.progress(w, &mut Hand::None, None)?;
                ready().map(|r| r.is_some())
            })?;
        }
    }

    /// The send side of a channel is dropped: a started round still goes out (the engine
    /// holds the segment's memory); the slot is reused once the receiver closed too.
    pub(crate) fn chan_send_close(&self, to: usize, c: usize) {
        if let Some(ch) = self.st.borrow_mut().chans[to][c].as_mut() {
            ch.closed = true;
            ch.err = None;
        }
    }

    /// Starts round `round` of a bound channel receive: the buffer is free again.
    pub(crate) fn chan_recv_start(&self, w: &World, b: &Bound, round: u64) -> Result<()> {
        let h = self.ring.handle(b.q);
        w.signal(
            h,
            self.chan_addr_off(self.me, b.chan) + 56,
            SignalOp::Set(2 * round),
        )
    }

    fn chan_arrived(&self, b: &Bound, round: u64) -> Result<bool> {
        Ok(self
            .ring
            .seg()
            .signal_value(self.chan_done_off(b.q, b.chan))?
            >= round)
    }

    /// Tests round `round` of a bound channel receive.
    pub(crate) fn chan_recv_test(&self, w: &World, b: &Bound, round: u64) -> Result<bool> {
        self.progress(w, &mut Hand::None, None)?;
        self.chan_arrived(b, round)
    }

    /// Waits for round `round` of a bound channel receive.
    pub(crate) fn chan_recv_wait(&self, w: &World, b: &Bound, round: u64) -> Result<()> {
        self.block_on(w, (self.chan_done_off(b.q, b.chan), round, b.q), || {
            Ok(self.chan_arrived(b, round)?.then_some(()))
        })
        .map_err(|e| self.chan_err(e, b.q, "the data of"))
    }

    /// The receive side of a channel is dropped: nothing may land in its buffer afterwards.
    /// With round `round` started, the ready word is revoked by compare-and-swap — if the
    /// sender claimed the round first, its data is waited for (it is being put) — then the
    /// channel is marked closed for good.
    pub(crate) fn chan_recv_close(&self, w: &World, b: &Bound, active: Option<u64>) {
        let h = self.ring.handle(b.q);
        let at = self.chan_addr_off(self.me, b.chan) + 56;
        if let Some(round) = active {
            if w.remote_word(h, at)
                .and_then(|word| ready::revoke(&(w, &word), round))
                .unwrap_or(false)
            {
                return;
            }
            // The sender has claimed the round: let its data land, unless it is gone.
            while_moving(w, || match self.chan_recv_test(w, b, round) {
                Ok(false) => Turn::Waiting,
                _ => Turn::Done,
            });
        }
        let _ = w.signal(h, at, SignalOp::Set(REVOKED));
    }

    /// The channel a receive request was bound to, while it lives.
    pub(crate) fn chan_of(&self, id: Id) -> Option<Bound> {
        let st = self.st.borrow();
        st.reqs
            .get(id.idx as usize)
            .filter(|r| r.epoch == id.epoch)
            .and_then(|r| r.chan)
    }

    /// The channel of the receive finished last (set by `finish`).
    pub(crate) fn take_last_bound(&self) -> Option<Bound> {
        self.last_bound.take()
    }

    fn chan_err(&self, e: Error, q: usize, what: &str) -> Error {
        e.waiting_for(
            self.world[q],
            format_args!("{what} a persistent channel with communicator rank {q}"),
        )
    }

    // ---- receives ---------------------------------------------------------------------------

    /// Posts a receive; matches it against the unexpected queue first.
    #[allow(clippy::too_many_arguments)] // the operation's full description, used in one place
    pub(crate) fn recv(
        &self,
        w: &World,
        src: Source,
        tag: Tag,
        cap: usize,
        ty: u8,
        dest: Dest,
        hand: &mut Hand<'_>,
    ) -> Result<Id> {
        let mut st = self.st.borrow_mut();
        let id = Self::alloc(
            &mut st,
            St::RecvPosted {
                src,
                tag,
                cap,
                ty,
                dest,
            },
        );
        let bind = matches!(dest, Dest::Bound(..));
        if let Some(pos) = st
            .unexpected
            .iter()
            .position(|u| matches(src, tag, &u.env) && matches!(u.body, Body::Bind(..)) == bind)
        {
            let u = st.unexpected.remove(pos).expect("position is in range");
            match u.body {
                Body::Bind(chan, round) => self.bind(w, &mut st, id.idx, u.env, chan, round)?,
                Body::Eager(v) => {
                    let err = self.check(&u.env, cap, ty);
                    let data = match hand {
                        Hand::Recv(buf) => {
                            let n = u.env.len.min(buf.len());
                            buf[..n].copy_from_slice(&v[..n]);
                            st.stash.push(v);
                            Data::Placed
                        }
                        _ => Data::Stash(v),
                    };
                    st.reqs[id.idx as usize].st = St::RecvDone {
                        env: u.env,
                        data,
                        err,
                    };
                }
                Body::Rts(slot) => {
                    let buf = match hand {
                        Hand::Recv(b) => Some(&mut **b),
                        _ => None,
                    };
                    self.clear_to_send(w, &mut st, id.idx, u.env, slot, buf)?;
                }
            }
        } else {
            st.posted.push_back(id.idx);
        }
        Ok(id)
    }

    fn check(&self, env: &Envelope, cap: usize, ty: u8) -> Option<Error> {
        let q = env.src;
        if ty != 0 && env.ty != 0 && ty != env.ty {
            return Some(self.peer_err(
                ErrorKind::InvalidArgument,
                q,
                format!(
                    "communicator rank {q} sent {} elements (tag {}), the receive expects {}",
                    type_name(env.ty),
                    env.tag,
                    type_name(ty)
                ),
            ));
        }
        if env.len > cap {
            return Some(self.peer_err(
                ErrorKind::Truncated,
                q,
                format!(
                    "message of {} bytes from communicator rank {q} (tag {}) does not fit the \
                     {cap}-byte receive buffer",
                    env.len, env.tag
                ),
            ));
        }
        if env.len % type_size(ty) != 0 {
            return Some(self.peer_err(
                ErrorKind::InvalidArgument,
                q,
                format!(
                    "message of {} bytes from communicator rank {q} is not a whole number of {}",
                    env.len,
                    type_name(ty)
                ),
            ));
        }
        None
    }

    /// A matched RTS: tell the sender where to put the data. `hand` is the buffer of this
    /// receive when its caller holds it (the buffer a [`Dest::Direct`] receive posts).
    fn clear_to_send(
        &self,
        w: &World,
        st: &mut State,
        idx: u32,
        env: Envelope,
        slot: usize,
        hand: Option<&mut [u8]>,
    ) -> Result<()> {
        let St::RecvPosted { cap, ty, dest, .. } = st.reqs[idx as usize].st else {
            unreachable!("only posted receives are matched")
        };
        let err = self.check(&env, cap, ty);
        let n = env.len.min(cap);
        st.rgen[env.src][slot] += 1;
        let epoch = st.rgen[env.src][slot];
        let mut cts = [0u8; 56];
        let sender = self.world[env.src];
        let direct = match (dest, hand) {
            (Dest::Direct, Some(buf)) if n > 0 && buf.len() >= n => {
                // A buffer in tca's memory and a sender of this node: one put, straight in;
                // plain memory: by cross-memory attach, from `cma_min` bytes. (The registry's
                // lock only for a sender that could put.)
                let seg = w
                    .reads_peer(sender)
                    .then(|| self.buffers.find(&buf[..n]))
                    .flatten();
                match seg {
                    Some((h, off)) => Some(Target::Seg(h, off)),
                    None if n >= self.cma_min.get() && w.cma_reaches(sender) => {
                        Some(Target::Addr(buf.as_mut_ptr() as u64))
                    }
                    None => None,
                }
            }
            _ => None,
        };
        let landing = if let Some(t) = direct {
            match t {
                Target::Addr(addr) => {
                    // The sender's write must pass the kernel's ptrace check (Yama).
                    w.allow_cma_writers();
                    cts[..8].copy_from_slice(&addr.to_le_bytes());
                    cts[32..40].copy_from_slice(&BY_ADDRESS.to_le_bytes());
                }
                Target::Seg(h, off) => {
                    cts[..Handle::BYTES].copy_from_slice(&h.to_bytes());
                    cts[32..40].copy_from_slice(&(off as u64).to_le_bytes());
                }
            }
            cts[48..56].copy_from_slice(&(2 * epoch).to_le_bytes());
            None
        } else {
            let (handle, off, landing) = match dest {
                Dest::Seg(h, off) | Dest::Bound(h, off) => (h, off, None),
                Dest::Plain | Dest::Direct => {
                    let l = st.landing.take(w, n)?;
                    (l.handle(), 0, Some(l))
                }
            };
            cts[..Handle::BYTES].copy_from_slice(&handle.to_bytes());
            cts[32..40].copy_from_slice(&(off as u64).to_le_bytes());
            landing
        };
        cts[40..48].copy_from_slice(&(n as u64).to_le_bytes());
        let h = self.ring.handle(env.src);
        let at = self.rab_off(self.me, slot);
        w.put_signal(h, at, &cts, h, at + 56, SignalOp::Set(epoch))?;
        st.reqs[idx as usize].st = St::RecvRdv {
            env,
            slot,
            epoch,
            landing,
            direct: direct.is_some(),
            err,
        };
        st.inflight.push(idx);
        Ok(())
    }

    /// A matched channel binding: give the sender this receive's address once, with the
    /// ready word of the first round (`2 * round`); the data then comes without a handshake.
    fn bind(
        &self,
        w: &World,
        st: &mut State,
        idx: u32,
        env: Envelope,
        chan: usize,
        round: u64,
    ) -> Result<()> {
        let St::RecvPosted {
            cap,
            ty,
            dest: Dest::Bound(handle, off),
            ..
        } = st.reqs[idx as usize].st
        else {
            unreachable!("a binding matches only a channel receive")
        };
        let err = self.check(&env, cap, ty);
        let mut a = [0u8; 56];
        a[..Handle::BYTES].copy_from_slice(&handle.to_bytes());
        a[32..40].copy_from_slice(&(off as u64).to_le_bytes());
        a[40..48].copy_from_slice(&(env.len.min(cap) as u64).to_le_bytes());
        let h = self.ring.handle(env.src);
        let at = self.chan_addr_off(self.me, chan);
        w.put_signal(h, at, &a, h, at + 56, SignalOp::Set(2 * round))?;
        let r = &mut st.reqs[idx as usize];
        r.st = St::RecvBound {
            env,
            chan,
            round,
            err,
        };
        r.chan = Some(Bound {
            q: env.src,
            chan,
            round,
            len: env.len,
            tag: env.tag,
        });
        st.inflight.push(idx);
        Ok(())
    }

    /// Handles the packet that arrived from `q`.
    fn on_packet(
        &self,
        w: &World,
        st: &mut State,
        q: usize,
        h: &Head,
        hand: &mut Hand<'_>,
        hand_id: Option<u32>,
    ) -> Result<()> {
        let env = Envelope {
            src: q,
            tag: i32::from_le_bytes(h.meta[..4].try_into().expect("4")),
            len: h.aux as usize,
            ty: h.meta[6],
        };
        let kind = h.meta[4];
        let slot = h.meta[5] as usize;
        if !matches!(kind, EAGER | RTS | BIND | BUNDLE)
            || (kind == RTS && slot >= RDV_SLOTS)
            || (kind == BIND && (slot >= CHANNELS || h.len != 8))
            || (matches!(kind, EAGER | BUNDLE)
                && (h.len != env.len || h.len > self.ring.capacity()))
            || (kind == BUNDLE && h.len == 0)
        {
            return Err(self.malformed(q));
        }
        if kind == EAGER {
            return self
                .ring
                .take_with(w, q, h, |b| self.deliver(st, env, b, hand, hand_id))?;
        }
        if kind == BUNDLE {
            return self
                .ring
                .take_with(w, q, h, |b| self.unbundle(st, q, b, hand, hand_id))?;
        }
        let pos = st
            .posted
            .iter()
            .position(|&i| match &st.reqs[i as usize].st {
                St::RecvPosted { src, tag, dest, .. } => {
                    matches(*src, *tag, &env) && matches!(dest, Dest::Bound(..)) == (kind == BIND)
                }
                _ => false,
            });
        let Some(pos) = pos else {
            let body = if kind == BIND {
                let mut b = [0u8; 8];
                self.ring.take(w, q, h, &mut b)?;
                Body::Bind(slot, u64::from_le_bytes(b))
            } else {
                self.ring.take(w, q, h, &mut [])?;
                Body::Rts(slot)
            };
            st.unexpected.push_back(Unexpected { env, body });
            return Ok(());
        };
        let idx = st.posted.remove(pos).expect("position is in range");
        if kind == RTS {
            self.ring.take(w, q, h, &mut [])?;
            let buf = match hand {
                Hand::Recv(b) if hand_id == Some(idx) => Some(&mut **b),
                _ => None,
            };
            return self.clear_to_send(w, st, idx, env, slot, buf);
        }
        let mut b = [0u8; 8];
        self.ring.take(w, q, h, &mut b)?;
        self.bind(w, st, idx, env, slot, u64::from_le_bytes(b))
    }

    fn malformed(&self, q: usize) -> Error {
        self.peer_err(
            ErrorKind::Transport,
            q,
            format!("malformed message header from communicator rank {q}"),
        )
    }

    /// An eager message's payload `data` (in the ring's slot): into the first posted receive
    /// it matches (straight into the buffer in hand if that is the one being waited on, else
    /// a pooled stash), or onto the unexpected queue.
    fn deliver(
        &self,
        st: &mut State,
        env: Envelope,
        data: &[u8],
        hand: &mut Hand<'_>,
        hand_id: Option<u32>,
    ) -> Result<()> {
        let pos = st
            .posted
            .iter()
            .position(|&i| match &st.reqs[i as usize].st {
                St::RecvPosted { src, tag, dest, .. } => {
                    matches(*src, *tag, &env) && !matches!(dest, Dest::Bound(..))
                }
                _ => false,
            });
        let Some(pos) = pos else {
            let mut v = Self::stash(st, env.len);
            v.copy_from_slice(data);
            st.unexpected.push_back(Unexpected {
                env,
                body: Body::Eager(v),
            });
            return Ok(());
        };
        let idx = st.posted.remove(pos).expect("position is in range");
        let St::RecvPosted { cap, ty, .. } = st.reqs[idx as usize].st else {
            unreachable!("posted")
        };
        let err = self.check(&env, cap, ty);
        let data = match hand {
            Hand::Recv(buf) if hand_id == Some(idx) => {
                let n = env.len.min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                Data::Placed
            }
            _ => {
                let mut v = Self::stash(st, env.len);
                v.copy_from_slice(data);
                Data::Stash(v)
            }
        };
        let r = &mut st.reqs[idx as usize];
        r.st = St::RecvDone { env, data, err };
        if r.orphan {
            Self::release(st, idx);
        }
        Ok(())
    }

    /// Delivers every message of a [`BUNDLE`] from `q`, in order; a header that does not
    /// describe its bytes exactly is a malformed packet (nothing after it is delivered).
    fn unbundle(
        &self,
        st: &mut State,
        q: usize,
        mut bytes: &[u8],
        hand: &mut Hand<'_>,
        hand_id: Option<u32>,
    ) -> Result<()> {
        while !bytes.is_empty() {
            let Some((head, rest)) = bytes.split_first_chunk::<SUB>() else {
                return Err(self.malformed(q));
            };
            let len = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
            let padded = len.next_multiple_of(8);
            let reserved = [head[5], head[7], head[12], head[13], head[14], head[15]];
            if head[4] != EAGER || reserved != [0; 6] || padded > rest.len() {
                return Err(self.malformed(q));
            }
            let env = Envelope {
                src: q,
                tag: i32::from_le_bytes([head[0], head[1], head[2], head[3]]),
                len,
                ty: head[6],
            };
            self.deliver(st, env, &rest[..len], hand, hand_id)?;
            bytes = &rest[padded..];
        }
        Ok(())
    }

    /// Completes rendezvous receives whose data has arrived.
    fn check_inflight(&self, st: &mut State) -> Result<()> {
        let mut i = 0;
        while i < st.inflight.len() {
            let idx = st.inflight[i];
            if let St::RecvBound {
                env, chan, round, ..
            } = st.reqs[idx as usize].st
            {
                if self
                    .ring
                    .seg()
                    .signal_value(self.chan_done_off(env.src, chan))?
                    < round
                {
                    i += 1;
                    continue;
                }
                st.inflight.swap_remove(i);
                let St::RecvBound { err, .. } =
                    std::mem::replace(&mut st.reqs[idx as usize].st, St::Free)
                else {
                    unreachable!("matched above")
                };
                let r = &mut st.reqs[idx as usize];
                r.st = St::RecvDone {
                    env,
                    data: Data::Placed,
                    err,
                };
                if r.orphan {
                    Self::release(st, idx);
                }
                continue;
            }
            let St::RecvRdv {
                env, slot, epoch, ..
            } = st.reqs[idx as usize].st
            else {
                st.inflight.swap_remove(i);
                continue;
            };
            let v = self.ring.seg().signal_value(self.done_off(env.src, slot))?;
            // The generation without its flags: a flag of an earlier transfer on the slot
            // must not end this one.
            if v & !DONE_FLAGS < epoch {
                i += 1;
                continue;
            }
            st.inflight.swap_remove(i);
            let St::RecvRdv { landing, err, .. } =
                std::mem::replace(&mut st.reqs[idx as usize].st, St::Free)
            else {
                unreachable!("matched above")
            };
            let err = if v & ABANDONED != 0 {
                Some(self.peer_err(
                    ErrorKind::PeerDied,
                    env.src,
                    format!(
                        "communicator rank {} gave up its send (tag {}) before the data moved",
                        env.src, env.tag
                    ),
                ))
            } else if v & DIRECT_FAILED != 0 {
                Some(self.peer_err(
                    ErrorKind::Transport,
                    env.src,
                    format!(
                        "communicator rank {} could not write its message (tag {}) straight \
                         into this rank's buffer (its send reports why)",
                        env.src, env.tag
                    ),
                ))
            } else {
                err
            };
            let data = match landing {
                Some(l) => Data::Landing(l),
                None => Data::Placed,
            };
            let r = &mut st.reqs[idx as usize];
            r.st = St::RecvDone { env, data, err };
            if r.orphan {
                Self::release(st, idx);
            }
        }
        Ok(())
    }

    // ---- progress and waiting ---------------------------------------------------------------

    /// One pass of progress outside any wait (a collective's wait hook, a progress loop):
    /// whether anything arrived.
    pub(crate) fn poll_any(&self, w: &World) -> Result<bool> {
        self.progress(w, &mut Hand::None, None)
    }

    /// One pass of progress: queued sends, rendezvous addresses and data, and every packet
    /// that has arrived (matched, or queued as unexpected). Returns whether anything arrived.
    pub(crate) fn progress(
        &self,
        w: &World,
        hand: &mut Hand<'_>,
        hand_id: Option<u32>,
    ) -> Result<bool> {
        // The network's own progress (incoming puts and signals land only while it is polled;
        // nothing on shared memory), then credits for what earlier passes consumed (this
        // pass's wait for the next send or pass: the ring's "Credits off the critical path").
        w.progress()?;
        self.ring.pay(w)?;
        self.flush(w)?;
        if !self.st.borrow().cts_wait.is_empty() {
            self.serve_cts(w, hand, hand_id)?;
        }
        if !self.st.borrow().chan_pending.is_empty() {
            self.serve_chans(w)?;
        }
        let mut st = self.st.borrow_mut();
        if !st.inflight.is_empty() {
            self.check_inflight(&mut st)?;
        }
        let mut any = false;
        let start = st.rr;
        st.rr = (st.rr + 1) % self.p;
        for k in 0..self.p {
            let q = (start + k) % self.p;
            while let Some(h) = self.ring.peek(q)? {
                self.on_packet(w, &mut st, q, &h, hand, hand_id)?;
                any = true;
            }
        }
        drop(st);
        // Not from inside a handler (one that calls a blocking communicator operation):
        // its own packet's slot is still being read, and a nested poll would take it again.
        if let Some(am) = self.am.get().filter(|am| !am.in_handler()) {
            any |= am.poll(w, self, false)? > 0;
        }
        Ok(any)
    }

    /// Completes what this rank still owes peers (sends whose requests were dropped) before
    /// the communicator goes away, for as long as they keep making progress: gives up after
    /// [`DRAIN_PATIENCE`] with nothing moving (a receive that was never posted), or when a
    /// peer is gone. Returns how many sends were left undelivered.
    pub(crate) fn drain(&self, w: &World) -> usize {
        let owed = |st: &State| st.queued + st.cts_wait.len() + st.chan_pending.len();
        let mut left = owed(&self.st.borrow());
        if left > 0 {
            while_moving(w, || {
                if self.progress(w, &mut Hand::None, None).is_err() {
                    return Turn::Done;
                }
                let now = owed(&self.st.borrow());
                let moved = now < left;
                left = now;
                match (now, moved) {
                    (0, _) => Turn::Done,
                    (_, true) => Turn::Moved,
                    _ => Turn::Waiting,
                }
            });
        }
        left
    }

    /// Whether the request is complete (without finishing it).
    pub(crate) fn is_done(&self, id: Id) -> bool {
        let st = self.st.borrow();
        matches!(
            st.reqs[id.idx as usize].st,
            St::SendDone(_) | St::RecvDone { .. }
        )
    }

    /// Finishes a completed request: copies stashed or landed data into the hand, frees what
    /// it held, and returns its status (or its error).
    fn finish(&self, id: Id, hand: &mut Hand<'_>) -> Result<Status> {
        let mut st = self.st.borrow_mut();
        let st = &mut *st;
        let r = &mut st.reqs[id.idx as usize];
        self.last_bound.set(r.chan.take());
        let res = match std::mem::replace(&mut r.st, St::Free) {
            St::SendDone(None) => Ok(Status::send()),
            St::SendDone(Some(e)) => Err(e),
            St::RecvDone { env, data, err } => {
                let n = env.len;
                let copied = match (&data, hand) {
                    (Data::Placed, _) => Ok(()),
                    (Data::Stash(v), Hand::Recv(buf)) => {
                        let k = n.min(buf.len());
                        buf[..k].copy_from_slice(&v[..k]);
                        Ok(())
                    }
                    (Data::Stash(v), Hand::RecvSeg(seg, off, cap)) => {
                        seg.write(*off, &v[..n.min(*cap)])
                    }
                    (Data::Landing(l), Hand::Recv(buf)) => {
                        let k = n.min(buf.len());
                        l.read(0, &mut buf[..k])
                    }
                    _ => Ok(()),
                };
                Self::recycle(st, data);
                match (err, copied) {
                    (Some(e), _) | (None, Err(e)) => Err(e),
                    (None, Ok(())) => Ok(Status {
                        source: rank_u32(env.src),
                        tag: env.tag,
                        bytes: n,
                    }),
                }
            }
            other => {
                r.st = other;
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    "request is not complete",
                ));
            }
        };
        st.free.push(id.idx);
        res
    }

    /// Whether `id` names a live request of this engine.
    pub(crate) fn live(&self, id: Id) -> bool {
        let st = self.st.borrow();
        st.reqs
            .get(id.idx as usize)
            .is_some_and(|r| r.epoch == id.epoch && !matches!(r.st, St::Free))
    }

    /// Tests a request once: progress, then its result if complete.
    pub(crate) fn test(&self, w: &World, id: Id, hand: &mut Hand<'_>) -> Result<Option<Status>> {
        self.progress(w, hand, Some(id.idx))?;
        if self.is_done(id) {
            return self.finish(id, hand).map(Some);
        }
        Ok(None)
    }

    /// The word a waiter on `id` sleeps on, the value that ends its sleep, and the member
    /// that raises it.
    fn hint(&self, w: &World, id: Id, turn: usize) -> Result<Hint> {
        let st = self.st.borrow();
        Ok(match st.reqs[id.idx as usize].st {
            St::RecvPosted {
                src: Source::Rank(q),
                ..
            } => self.next_word(q as usize),
            St::RecvRdv {
                env, slot, epoch, ..
            } => {
                let off = self.done_off(env.src, slot);
                // A flag an earlier transfer left on the slot's word already reads as at
                // least `epoch`: sleeping on the word would not sleep.
                match self.ring.seg().signal_value(off) {
                    Ok(v) if v & DONE_FLAGS == 0 => (off, epoch, env.src),
                    _ => self.next_word(env.src),
                }
            }
            St::RecvBound {
                env, chan, round, ..
            } => (self.chan_done_off(env.src, chan), round, env.src),
            St::SendCts {
                to, slot, epoch, ..
            } => (self.rab_off(to, slot) + 56, epoch, to),
            // Queued for credit: the receiver's next credit lets it go. (Queued behind the
            // rendezvous slots instead: they free as transfers finish, seen by progress.)
            St::SendQueued { to, .. } if !self.ring.can_send(w, to)? => {
                let (off, v) = self.ring.credit_word(to);
                (off, v, to)
            }
            _ => self.next_word(turn % self.p),
        })
    }

    /// [`Ring::next_word`] with the member that raises it.
    fn next_word(&self, q: usize) -> Hint {
        let (off, v) = self.ring.next_word(q);
        (off, v, q)
    }

    /// One sleep of a message-engine wait: pays owed credits, then runs the fabric's one wait
    /// loop on `word` (the word the awaited event most likely raises). While spinning, the
    /// loop itself watches that word and a full progress pass (`pass`, which says whether
    /// the caller's condition now holds) runs every [`POLL_EVERY`]-th turn, so the spin stays
    /// a tight load loop; yielding and sleeping turns run it every time (at least every
    /// [`NAP`]). Returns when the word moved or `pass` said yes; dead peers end it.
    fn sleep_on(
        &self,
        w: &World,
        (off, v, q): Hint,
        patience: &Patience,
        pass: impl Fn() -> Result<bool>,
    ) -> Result<()> {
        let spins = w.wait_policy().0;
        let calls = std::cell::Cell::new(0u32);
        let poll = || -> Result<bool> {
            let k = calls.get() + 1;
            calls.set(k);
            if k < spins && k % POLL_EVERY != 0 {
                return Ok(false);
            }
            pass()
        };
        self.ring.pay(w)?;
        let by = Some(self.ring.member_rank(q));
        w.wait_polling(self.ring.seg(), off, v, NAP, patience, &poll, by)
            .map(|_| ())
    }

    /// A blocking receive from one source, the fast way: when nothing is posted and nothing
    /// unexpected waits (so the next packet from `q` is the first candidate under MPI's
    /// rules), watch `q`'s ring directly and copy a matching eager message straight into
    /// `buf` — no request, no queue. Returns `None` (nothing consumed) as soon as anything
    /// else happens: a packet that does not match or is not eager, a pending receive, an
    /// unexpected message queued by progress; the caller then takes the general path.
    pub(crate) fn recv_fast(
        &self,
        w: &World,
        q: usize,
        tag: Tag,
        ty: u8,
        buf: &mut [u8],
    ) -> Result<Option<Status>> {
        let idle = |st: &State| st.posted.is_empty() && st.unexpected.is_empty();
        let patience = Patience::default();
        loop {
            if !idle(&self.st.borrow()) {
                return Ok(None);
            }
            let cap = buf.len();
            let mut arrived = false;
            let took = self.ring.take_if(w, q, buf, |h| {
                arrived = true;
                let env = Envelope {
                    src: q,
                    tag: i32::from_le_bytes(h.meta[..4].try_into().expect("4")),
                    len: h.aux as usize,
                    ty: h.meta[6],
                };
                (h.meta[4] == EAGER
                    && h.len == env.len
                    && matches(Source::Rank(rank_u32(q)), tag, &env)
                    && self.check(&env, cap, ty).is_none())
                .then_some(env.len)
            })?;
            if let Some(h) = took {
                return Ok(Some(Status {
                    source: rank_u32(q),
                    tag: i32::from_le_bytes(h.meta[..4].try_into().expect("4")),
                    bytes: h.len,
                }));
            }
            if arrived {
                return Ok(None);
            }
            self.sleep_on(w, self.next_word(q), &patience, || {
                self.progress(w, &mut Hand::None, None)?;
                Ok(!idle(&self.st.borrow()))
            })
            .map_err(|e| {
                e.waiting_for(
                    self.world[q],
                    format_args!("a message from communicator rank {q}"),
                )
            })?;
        }
    }

    /// Waits for a request: the fabric's one wait loop, sleeping on the word its completion
    /// most likely raises, with this engine's progress as its hook (every peer is polled on
    /// each spin and at least every [`NAP`] while asleep; dead peers end the wait).
    pub(crate) fn wait(&self, w: &World, id: Id, hand: &mut Hand<'_>) -> Result<Status> {
        self.wait_with(w, id, hand, || Ok(()))
    }

    /// [`Engine::wait`], running `also` on every pass of progress (the communicator's
    /// started non-blocking collectives, which this engine's progress does not move; a
    /// no-op, inlined away, for plain waits).
    pub(crate) fn wait_with(
        &self,
        w: &World,
        id: Id,
        hand: &mut Hand<'_>,
        also: impl Fn() -> Result<()>,
    ) -> Result<Status> {
        let _stay = Stay::enter(self, w, id, matches!(hand, Hand::Recv(_)));
        let hand = RefCell::new(hand);
        let mut turn = 0usize;
        let patience = Patience::default();
        loop {
            self.progress(w, &mut hand.borrow_mut(), Some(id.idx))?;
            also()?;
            if self.is_done(id) {
                return self.finish(id, &mut hand.borrow_mut());
            }
            let hint = self.hint(w, id, turn)?;
            turn += 1;
            self.sleep_on(w, hint, &patience, || {
                self.progress(w, &mut hand.borrow_mut(), Some(id.idx))?;
                also()?;
                Ok(self.is_done(id))
            })
            .map_err(|e| self.name_peer(e, id))?;
        }
    }

    /// Settles a direct transfer (cross-memory attach, or a put into a `Buffer`) into the
    /// buffer of request `id`, whose wait is leaving
    /// before the transfer completed (see the module docs): revokes it by compare-and-swap on
    /// the sender's claim word, or, if the sender claimed it first, waits for its done word
    /// until the sender stops. Afterwards nothing writes into the buffer.
    fn settle_direct(&self, w: &World, id: Id) {
        let (q, slot, epoch) = {
            let st = self.st.borrow();
            match st.reqs.get(id.idx as usize) {
                Some(Req {
                    epoch: e,
                    st:
                        St::RecvRdv {
                            env,
                            slot,
                            epoch,
                            direct: true,
                            ..
                        },
                    ..
                }) if *e == id.epoch => (env.src, *slot, *epoch),
                _ => return,
            }
        };
        let h = self.ring.handle(q);
        let claim = self.rab_off(self.me, slot) + 48;
        let revoked = w
            .remote_word(h, claim)
            .and_then(|word| ready::revoke(&(w, &word), epoch))
            .unwrap_or(false);
        if revoked {
            let mut st = self.st.borrow_mut();
            st.inflight.retain(|&i| i != id.idx);
            let r = &mut st.reqs[id.idx as usize];
            if let St::RecvRdv { env, .. } = r.st {
                r.st = St::RecvDone {
                    env,
                    data: Data::Placed,
                    err: Some(self.peer_err(
                        ErrorKind::Aborted,
                        q,
                        format!("the receive from communicator rank {q} was given up"),
                    )),
                };
            }
            return;
        }
        // Claimed: the data is being written (one system call or one put, then the done word). Wait
        // for the done word however long it takes, unless the writer's process has exited; not on
        // the job's board, where a rank that aborted or failed may still be running and writing. (A
        // word that cannot be read counts as not raised.)
        let done = self.done_off(q, slot);
        while !self
            .ring
            .seg()
            .signal_value(done)
            .is_ok_and(|v| v & !DONE_FLAGS >= epoch)
            && !w.peer_exited(self.world[q])
        {
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Sleeps until request `first` or anything `done` watches may be complete (`wait_any`
    /// between its passes of tests, with the `patience` of the whole `wait_any`), polling
    /// every peer meanwhile.
    pub(crate) fn wait_some(
        &self,
        w: &World,
        first: Id,
        patience: &Patience,
        done: impl Fn() -> bool,
    ) -> Result<()> {
        self.sleep_on(w, self.hint(w, first, 0)?, patience, || {
            self.progress(w, &mut Hand::None, None)?;
            Ok(done())
        })
    }

    /// An error that names no rank gets the peer the request waits on, if it has one.
    fn name_peer(&self, e: Error, id: Id) -> Error {
        let st = self.st.borrow();
        let (q, what) = match st.reqs[id.idx as usize].st {
            St::RecvPosted {
                src: Source::Rank(q),
                ..
            } => (q as usize, "a message from"),
            St::RecvRdv { env, .. } => (env.src, "rendezvous data from"),
            St::RecvBound { env, .. } => (env.src, "the first round of the channel from"),
            St::SendCts { to, .. } => (to, "the receive address of"),
            _ => return e,
        };
        e.waiting_for(self.world[q], format_args!("{what} communicator rank {q}"))
    }

    /// The first unexpected message matching `src` and `tag`, after one pass of progress.
    pub(crate) fn iprobe(&self, w: &World, src: Source, tag: Tag) -> Result<Option<Status>> {
        self.progress(w, &mut Hand::None, None)?;
        Ok(self.find(src, tag))
    }

    /// Waits until a message matching `src` and `tag` has arrived.
    pub(crate) fn probe(&self, w: &World, src: Source, tag: Tag) -> Result<Status> {
        let mut turn = 0usize;
        let patience = Patience::default();
        loop {
            if let Some(s) = self.iprobe(w, src, tag)? {
                return Ok(s);
            }
            let hint = match src {
                Source::Rank(q) => self.next_word(q as usize),
                Source::Any => self.next_word(turn % self.p),
            };
            turn += 1;
            self.sleep_on(w, hint, &patience, || {
                self.progress(w, &mut Hand::None, None)?;
                Ok(self.find(src, tag).is_some())
            })?;
        }
    }

    fn find(&self, src: Source, tag: Tag) -> Option<Status> {
        let st = self.st.borrow();
        st.unexpected
            .iter()
            .find(|u| matches(src, tag, &u.env) && !matches!(u.body, Body::Bind(..)))
            .map(|u| Status {
                source: rank_u32(u.env.src),
                tag: u.env.tag,
                bytes: u.env.len,
            })
    }

    /// Memory this rank holds for the engine now: the segment and the pooled buffers.
    pub(crate) fn footprint(&self) -> (usize, usize) {
        let st = self.st.borrow();
        let pooled = st.stash.iter().map(Vec::capacity).sum::<usize>() + st.landing.bytes();
        (p2p_bytes(self.p), pooled)
    }
}

/// A message length as the ring's `aux` word carries it: a send ([`Engine::send`]) and a
/// persistent channel (`Comm::send_init_from`) check that their length fits a u32 before they start.
#[inline]
#[allow(clippy::cast_possible_truncation)] // checked when the send starts (see above)
fn wire_len(len: usize) -> u32 {
    debug_assert!(u32::try_from(len).is_ok());
    len as u32
}

/// A channel index (below [`CHANNELS`]) as the byte of the metadata word that carries it.
#[inline]
#[allow(clippy::cast_possible_truncation)] // below CHANNELS, a handful
fn channel_u8(c: usize) -> u8 {
    debug_assert!(c < CHANNELS);
    c as u8
}

fn meta(tag: i32, kind: u8, slot: u8, ty: u8) -> [u8; 8] {
    let mut m = [0u8; 8];
    m[..4].copy_from_slice(&tag.to_le_bytes());
    m[4] = kind;
    m[5] = slot;
    m[6] = ty;
    m
}

/// A wait on a request, for as long as it runs: a plain receive waited on becomes
/// [`Dest::Direct`] (its buffer is in hand and stays so until the wait returns), and a wait
/// that leaves with a direct transfer still in flight settles it first — on every way
/// out, unwinding included.
struct Stay<'e> {
    eng: &'e Engine,
    w: &'e World,
    id: Id,
    /// A receive with its buffer in hand: the only kind a transfer may write into directly.
    recv: bool,
    upgraded: bool,
}

impl<'e> Stay<'e> {
    fn enter(eng: &'e Engine, w: &'e World, id: Id, recv_in_hand: bool) -> Self {
        let mut upgraded = false;
        if recv_in_hand {
            let mut st = eng.st.borrow_mut();
            if let Some(Req {
                epoch,
                st: St::RecvPosted { dest, .. },
                ..
            }) = st.reqs.get_mut(id.idx as usize)
                && *epoch == id.epoch
                && matches!(dest, Dest::Plain)
            {
                *dest = Dest::Direct;
                upgraded = true;
            }
        }
        Stay {
            eng,
            w,
            id,
            recv: recv_in_hand,
            upgraded,
        }
    }
}

impl Drop for Stay<'_> {
    fn drop(&mut self) {
        if self.upgraded
            && let Ok(mut st) = self.eng.st.try_borrow_mut()
            && let Some(Req {
                epoch,
                st: St::RecvPosted { dest, .. },
                ..
            }) = st.reqs.get_mut(self.id.idx as usize)
            && *epoch == self.id.epoch
        {
            *dest = Dest::Plain;
        }
        if self.recv {
            self.eng.settle_direct(self.w, self.id);
        }
    }
}

/// One turn of a wait at the communicator's end ([`while_moving`]).
enum Turn {
    /// Nothing left to wait for.
    Done,
    /// Something moved: the patience starts again.
    Moved,
    /// Nothing moved this turn.
    Waiting,
}

/// Runs `turn` (yielding the core between turns) until it is done, nothing has moved for
/// [`DRAIN_PATIENCE`], or a peer is dead or the job aborted. A communicator is often dropped
/// because a call failed: a dead peer takes nothing more, and the error must reach the
/// program before the launcher's SIGKILL does (its grace is shorter than the patience), so
/// liveness (a poll of every peer's pidfd) is looked at first and every [`LIVENESS_EVERY`].
fn while_moving(w: &World, mut turn: impl FnMut() -> Turn) {
    let mut moved = std::time::Instant::now();
    let mut checked = moved;
    if w.check_alive().is_err() {
        return;
    }
    while moved.elapsed() < DRAIN_PATIENCE {
        match turn() {
            Turn::Done => return,
            Turn::Moved => moved = std::time::Instant::now(),
            Turn::Waiting => {}
        }
        if checked.elapsed() >= LIVENESS_EVERY {
            if w.check_alive().is_err() {
                return;
            }
            checked = std::time::Instant::now();
        }
        std::thread::yield_now();
    }
}
