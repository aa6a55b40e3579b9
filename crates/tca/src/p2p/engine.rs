//! The message engine of one communicator: matching, the unexpected queue, the eager and
//! rendezvous protocols and their progress. Safe code over the fabric's ring, puts and signals.
//!
//! # Memory layout (one segment per rank and communicator, after the ring area)
//! ```text
//! 0                             the ring (crate::fabric::ring, `Shape::messages`): eager
//!                               packets and requests-to-send; R0 = its bytes
//! R0 + r*R*64 + s*64            remote address buffer: slot s of my rendezvous sends to r;
//!                               r writes [handle 32 | offset | length | - | epoch]  writer: r
//! R0 + P*R*64 + q*R*64 + s*64   done words: q raised it to epoch when it finished putting the
//!                               data of its rendezvous slot s into my buffer     writer: q
//! ```
//! R = [`RDV_SLOTS`] rendezvous transfers may be in flight per ordered pair.
//!
//! # Why no pointer to user memory is ever kept
//! The engine holds metadata only; a user buffer is touched only while the call that borrows
//! it runs (the request being waited on is "in hand"). An eager message matched while its
//! receive is not in hand waits in a pooled stash; a rendezvous into plain memory lands in a
//! pooled registered landing buffer; non-blocking sends copy their data at `isend` (into the
//! ring, or into a pooled stash when the ring is full or the message goes by rendezvous). So a
//! request that is dropped, or leaked, can never make the engine write into freed memory.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::time::Duration;

use super::{Source, Status, Tag};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::ring::{Head, Ring, Shape};
use crate::fabric::{Handle, Segment, SignalOp, World};

/// Rendezvous transfers in flight per ordered pair of ranks.
pub const RDV_SLOTS: usize = 8;
const RSLOT: usize = 64;
const EAGER: u8 = 1;
const RTS: u8 = 2;
/// Raised into a done word instead of the generation alone when the sender gave the transfer
/// up (its blocking send failed before the receiver's address came).
const ABANDONED: u64 = 1 << 63;
/// Longest sleep of a waiter before it polls every peer again.
const NAP: Duration = Duration::from_micros(200);
/// While a wait spins, one turn in this many runs a full progress pass.
const POLL_EVERY: u32 = 16;
/// How long a communicator being dropped waits for its undelivered sends to move.
pub(crate) const DRAIN_PATIENCE: Duration = Duration::from_secs(2);
/// Smallest landing buffer (rendezvous into plain memory).
const LANDING_MIN: usize = 64 << 10;

/// Bytes of the p2p segment of one rank in a communicator of `p` ranks.
pub fn p2p_bytes(p: usize) -> usize {
    Shape::messages(p).bytes(p) + 2 * p * RDV_SLOTS * RSLOT
}

/// Where a matched rendezvous receive wants its data.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dest {
    /// Plain memory: through a landing buffer.
    Plain,
    /// A registered segment of this rank: straight in.
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
    /// An eager send or an RTS waiting in the out queue for credit or a rendezvous slot.
    SendQueued {
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
        err: Option<Error>,
    },
    RecvDone {
        env: Envelope,
        data: Data,
        err: Option<Error>,
    },
}

#[derive(Debug)]
struct Req {
    epoch: u32,
    st: St,
    /// Its `Request` is gone: free the slot when the engine is done with it.
    orphan: bool,
}

#[derive(Debug)]
enum Body {
    Eager(Vec<u8>),
    Rts(usize),
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
    landing: Vec<Segment>,
    rr: usize,
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
    eager: usize,
    st: RefCell<State>,
}

impl crate::fabric::ring::Progressor for Engine {
    /// Whether this rank owes peers something: packets queued for credit, or rendezvous data
    /// to put once their receivers answer. Collectives' waits make progress while it is so.
    fn busy(&self) -> bool {
        let st = self.st.borrow();
        st.queued > 0 || !st.cts_wait.is_empty()
    }

    fn poll(&self, w: &World) -> Result<()> {
        self.progress(w, &mut Hand::None, None).map(|_| ())
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
    ) -> Result<Self> {
        let p = handles.len();
        let ring = Ring::new(seg, handles, me, Shape::messages(p));
        let eager = match crate::env::parse::<usize>(crate::env::P2P_EAGER)? {
            Some(n) => n.min(ring.capacity()),
            None => super::EAGER_DEFAULT.min(ring.capacity()),
        };
        let rab = Shape::messages(p).bytes(p);
        Ok(Self {
            ring,
            p,
            me,
            world,
            rab,
            done: rab + p * RDV_SLOTS * RSLOT,
            eager,
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
                landing: Vec::new(),
                rr: 0,
            }),
        })
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
                });
                Id {
                    idx: st.reqs.len() as u32 - 1,
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
            Data::Landing(s) => st.landing.push(s),
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

    fn landing(&self, w: &World, st: &mut State, n: usize) -> Result<Segment> {
        let best = st
            .landing
            .iter()
            .enumerate()
            .filter(|(_, s)| s.len() >= n)
            .min_by_key(|(_, s)| s.len())
            .map(|(i, _)| i);
        match best {
            Some(i) => Ok(st.landing.swap_remove(i)),
            None => w.alloc(n.next_power_of_two().max(LANDING_MIN)),
        }
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
                    .try_send(w, to, data, len as u32, meta(tag, EAGER, 0, ty))?
            {
                return Ok(None);
            }
            let mut v = Self::stash(&mut st, len);
            v.copy_from_slice(data);
            let id = Self::alloc(&mut st, St::SendQueued { data: None });
            st.out[to].push_back(Out {
                id: id.idx,
                tag,
                ty,
                len,
                eager: Some(v),
            });
            st.queued += 1;
            drop(st);
            self.flush(w)?;
            return Ok(Some(id));
        }
        let staged = (!keep).then(|| {
            let mut v = Self::stash(&mut st, len);
            v.copy_from_slice(data);
            v
        });
        let id = Self::alloc(&mut st, St::SendQueued { data: staged });
        st.out[to].push_back(Out {
            id: id.idx,
            tag,
            ty,
            len,
            eager: None,
        });
        st.queued += 1;
        drop(st);
        self.flush(w)?;
        Ok(Some(id))
    }

    /// Sends what waits in the out queues, in order, while credits and rendezvous slots last.
    fn flush(&self, w: &World) -> Result<()> {
        let mut st = self.st.borrow_mut();
        if st.queued == 0 {
            return Ok(());
        }
        for to in 0..self.p {
            while let Some(o) = st.out[to].front() {
                let sent = match &o.eager {
                    Some(v) => {
                        self.ring
                            .try_send(w, to, v, o.len as u32, meta(o.tag, EAGER, 0, o.ty))?
                    }
                    // An RTS needs a rendezvous slot as well as ring credit.
                    None if st.slot_free[to] == 0 => false,
                    None => {
                        let slot = st.slot_free[to].trailing_zeros();
                        self.ring.try_send(
                            w,
                            to,
                            &[],
                            o.len as u32,
                            meta(o.tag, RTS, slot as u8, o.ty),
                        )?
                    }
                };
                if !sent {
                    break;
                }
                let o = st.out[to].pop_front().expect("front exists");
                st.queued -= 1;
                match o.eager {
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
                            St::SendQueued { data } => data,
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
            let dst = Handle::from_bytes(&cts[..Handle::BYTES])?;
            let off = u64::from_le_bytes(cts[32..40].try_into().expect("8")) as usize;
            let len = u64::from_le_bytes(cts[40..48].try_into().expect("8")) as usize;
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
            let r = match src {
                Some(s) if len <= s.len() => {
                    w.put_signal(&dst, off, &s[..len], done, done_off, SignalOp::Set(epoch))
                }
                Some(s) => Err(self.peer_err(
                    ErrorKind::InvalidArgument,
                    to,
                    format!(
                        "rank {} asked for {len} bytes of a {}-byte message",
                        self.world[to],
                        s.len()
                    ),
                )),
                None => w.signal(done, done_off, SignalOp::Set(epoch | ABANDONED)),
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
        if let Some(pos) = st.unexpected.iter().position(|u| matches(src, tag, &u.env)) {
            let u = st.unexpected.remove(pos).expect("position is in range");
            match u.body {
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
                Body::Rts(slot) => self.clear_to_send(w, &mut st, id.idx, u.env, slot)?,
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

    /// A matched RTS: tell the sender where to put the data.
    fn clear_to_send(
        &self,
        w: &World,
        st: &mut State,
        idx: u32,
        env: Envelope,
        slot: usize,
    ) -> Result<()> {
        let St::RecvPosted { cap, ty, dest, .. } = st.reqs[idx as usize].st else {
            unreachable!("only posted receives are matched")
        };
        let err = self.check(&env, cap, ty);
        let n = env.len.min(cap);
        let (handle, off, landing) = match dest {
            Dest::Seg(h, off) => (h, off, None),
            Dest::Plain => {
                let l = self.landing(w, st, n)?;
                (l.handle(), 0, Some(l))
            }
        };
        st.rgen[env.src][slot] += 1;
        let epoch = st.rgen[env.src][slot];
        let mut cts = [0u8; 56];
        cts[..Handle::BYTES].copy_from_slice(&handle.to_bytes());
        cts[32..40].copy_from_slice(&(off as u64).to_le_bytes());
        cts[40..48].copy_from_slice(&(n as u64).to_le_bytes());
        let h = self.ring.handle(env.src);
        let at = self.rab_off(self.me, slot);
        w.put_signal(h, at, &cts, h, at + 56, SignalOp::Set(epoch))?;
        st.reqs[idx as usize].st = St::RecvRdv {
            env,
            slot,
            epoch,
            landing,
            err,
        };
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
        if (kind != EAGER && kind != RTS)
            || slot >= RDV_SLOTS
            || (kind == EAGER && h.len != env.len)
        {
            return Err(self.peer_err(
                ErrorKind::Transport,
                q,
                format!("malformed message header from communicator rank {q}"),
            ));
        }
        let pos = st
            .posted
            .iter()
            .position(|&i| match &st.reqs[i as usize].st {
                St::RecvPosted { src, tag, .. } => matches(*src, *tag, &env),
                _ => false,
            });
        let Some(pos) = pos else {
            let body = if kind == EAGER {
                let mut v = Self::stash(st, env.len);
                self.ring.take(w, q, h, &mut v)?;
                Body::Eager(v)
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
            return self.clear_to_send(w, st, idx, env, slot);
        }
        let St::RecvPosted { cap, ty, .. } = st.reqs[idx as usize].st else {
            unreachable!("posted")
        };
        let err = self.check(&env, cap, ty);
        let data = match hand {
            Hand::Recv(buf) if hand_id == Some(idx) => {
                let n = env.len.min(buf.len());
                self.ring.take(w, q, h, &mut buf[..n])?;
                Data::Placed
            }
            _ => {
                let mut v = Self::stash(st, env.len);
                self.ring.take(w, q, h, &mut v)?;
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

    /// Completes rendezvous receives whose data has arrived.
    fn check_inflight(&self, st: &mut State) -> Result<()> {
        let mut i = 0;
        while i < st.inflight.len() {
            let idx = st.inflight[i];
            let St::RecvRdv {
                env, slot, epoch, ..
            } = st.reqs[idx as usize].st
            else {
                st.inflight.swap_remove(i);
                continue;
            };
            let v = self.ring.seg().signal_value(self.done_off(env.src, slot))?;
            if v < epoch {
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
        Ok(any)
    }

    /// Completes what this rank still owes peers (sends whose requests were dropped) before
    /// the communicator goes away, for as long as they keep making progress: gives up after
    /// [`DRAIN_PATIENCE`] with nothing moving (a receive that was never posted), or when a
    /// peer is gone. Returns how many sends were left undelivered.
    pub(crate) fn drain(&self, w: &World) -> usize {
        let mut last = std::time::Instant::now();
        let owed = |st: &State| st.queued + st.cts_wait.len();
        let mut left = owed(&self.st.borrow());
        while left > 0 && last.elapsed() < DRAIN_PATIENCE {
            if self.progress(w, &mut Hand::None, None).is_err() {
                break;
            }
            let now = owed(&self.st.borrow());
            if now < left {
                last = std::time::Instant::now();
            }
            left = now;
            std::thread::yield_now();
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
                        source: env.src as u32,
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

    /// The word a waiter on `id` sleeps on, and the value that ends its sleep.
    fn hint(&self, id: Id, turn: usize) -> (usize, u64) {
        let st = self.st.borrow();
        match st.reqs[id.idx as usize].st {
            St::RecvPosted {
                src: Source::Rank(q),
                ..
            } => self.ring.next_word(q as usize),
            St::RecvRdv {
                env, slot, epoch, ..
            } => (self.done_off(env.src, slot), epoch),
            St::SendCts {
                to, slot, epoch, ..
            } => (self.rab_off(to, slot) + 56, epoch),
            _ => self.ring.next_word(turn % self.p),
        }
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
        (off, v): (usize, u64),
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
        w.wait_polling(self.ring.seg(), off, v, NAP, &poll)
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
                    && matches(Source::Rank(q as u32), tag, &env)
                    && self.check(&env, cap, ty).is_none())
                .then_some(env.len)
            })?;
            if let Some(h) = took {
                return Ok(Some(Status {
                    source: q as u32,
                    tag: i32::from_le_bytes(h.meta[..4].try_into().expect("4")),
                    bytes: h.len,
                }));
            }
            if arrived {
                return Ok(None);
            }
            self.sleep_on(w, self.ring.next_word(q), || {
                self.progress(w, &mut Hand::None, None)?;
                Ok(!idle(&self.st.borrow()))
            })
            .map_err(|e| {
                if e.rank().is_some() {
                    return e;
                }
                self.peer_err(
                    e.kind(),
                    q,
                    format!("{e} (waiting for a message from communicator rank {q})"),
                )
            })?;
        }
    }

    /// Waits for a request: the fabric's one wait loop, sleeping on the word its completion
    /// most likely raises, with this engine's progress as its hook (every peer is polled on
    /// each spin and at least every [`NAP`] while asleep; dead peers end the wait).
    pub(crate) fn wait(&self, w: &World, id: Id, hand: &mut Hand<'_>) -> Result<Status> {
        let hand = RefCell::new(hand);
        let mut turn = 0usize;
        loop {
            self.progress(w, &mut hand.borrow_mut(), Some(id.idx))?;
            if self.is_done(id) {
                return self.finish(id, &mut hand.borrow_mut());
            }
            let hint = self.hint(id, turn);
            turn += 1;
            self.sleep_on(w, hint, || {
                self.progress(w, &mut hand.borrow_mut(), Some(id.idx))?;
                Ok(self.is_done(id))
            })
            .map_err(|e| self.name_peer(e, id))?;
        }
    }

    /// Sleeps until request `first` or anything `done` watches may be complete (`wait_any`
    /// between its passes of tests), polling every peer meanwhile.
    pub(crate) fn wait_some(&self, w: &World, first: Id, done: impl Fn() -> bool) -> Result<()> {
        self.sleep_on(w, self.hint(first, 0), || {
            self.progress(w, &mut Hand::None, None)?;
            Ok(done())
        })
    }

    /// An error that names no rank gets the peer the request waits on, if it has one.
    fn name_peer(&self, e: Error, id: Id) -> Error {
        if e.rank().is_some() {
            return e;
        }
        let st = self.st.borrow();
        let (q, what) = match st.reqs[id.idx as usize].st {
            St::RecvPosted {
                src: Source::Rank(q),
                ..
            } => (q as usize, "a message from"),
            St::RecvRdv { env, .. } => (env.src, "rendezvous data from"),
            St::SendCts { to, .. } => (to, "the receive address of"),
            _ => return e,
        };
        self.peer_err(
            e.kind(),
            q,
            format!("{e} (waiting for {what} communicator rank {q})"),
        )
    }

    /// The first unexpected message matching `src` and `tag`, after one pass of progress.
    pub(crate) fn iprobe(&self, w: &World, src: Source, tag: Tag) -> Result<Option<Status>> {
        self.progress(w, &mut Hand::None, None)?;
        Ok(self.find(src, tag))
    }

    /// Waits until a message matching `src` and `tag` has arrived.
    pub(crate) fn probe(&self, w: &World, src: Source, tag: Tag) -> Result<Status> {
        let mut turn = 0usize;
        loop {
            if let Some(s) = self.iprobe(w, src, tag)? {
                return Ok(s);
            }
            let hint = match src {
                Source::Rank(q) => self.ring.next_word(q as usize),
                Source::Any => self.ring.next_word(turn % self.p),
            };
            turn += 1;
            self.sleep_on(w, hint, || {
                self.progress(w, &mut Hand::None, None)?;
                Ok(self.find(src, tag).is_some())
            })?;
        }
    }

    fn find(&self, src: Source, tag: Tag) -> Option<Status> {
        let st = self.st.borrow();
        st.unexpected
            .iter()
            .find(|u| matches(src, tag, &u.env))
            .map(|u| Status {
                source: u.env.src as u32,
                tag: u.env.tag,
                bytes: u.env.len,
            })
    }

    /// Memory this rank holds for the engine now: the segment and the pooled buffers.
    pub(crate) fn footprint(&self) -> (usize, usize) {
        let st = self.st.borrow();
        let pooled = st.stash.iter().map(Vec::capacity).sum::<usize>()
            + st.landing.iter().map(Segment::len).sum::<usize>();
        (p2p_bytes(self.p), pooled)
    }
}

fn meta(tag: i32, kind: u8, slot: u8, ty: u8) -> [u8; 8] {
    let mut m = [0u8; 8];
    m[..4].copy_from_slice(&tag.to_le_bytes());
    m[4] = kind;
    m[5] = slot;
    m[6] = ty;
    m
}
