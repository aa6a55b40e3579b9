//! Rings: ordered, flow-controlled packet streams between every pair of a group of ranks,
//! built only from puts and signals. The one ring-with-credits of tca: the collectives'
//! channels (`coll::channel`) and two-sided messages (`p2p`) are framings over it.
//!
//! # Layout of a rank's ring area (at the start of a segment, allocated once per group)
//! ```text
//! 0                     credit words, one 128-byte block per peer q: how many of my packets
//!                       q has consumed                              writer: q
//! P*128 + q*K*S         the K slots in which peer q sends to me; slot s at + s*S:
//!   +0   payload of small packets (<= 40 bytes)
//!   +40  meta (8 bytes, the framing's: a tag, a kind ...)
//!   +48  packet length (u32), aux (u32, the framing's: a message length ...)
//!   +56  sequence word (u64)                                        writer: q
//!   +64  payload of larger packets (up to CH bytes)
//! ```
//! with S = 64 + CH. A packet of at most [`INLINE`] bytes travels in one cache line with its
//! sequence word (the layout of [`fabric::line`](super::line)), so a small message costs one
//! line transfer; a larger one is one put into the slot, then the header line.
//!
//! # Flow control
//! Packet n (counting from 1) from q to me goes in slot (n - 1) mod K and raises the slot's
//! sequence word to n. I consume packets in order and, after each, set q's credit word for me
//! to n. q writes packet n only when that credit word is at least n - K, so a slot is never
//! overwritten before its reader has consumed it: back-to-back operations, with ranks at any
//! speed, cannot corrupt each other (the rule of `SHM.md`, "Reuse without overwriting").
//! Credits are returned every [`ACK_EVERY`] packets: a sender blocked at packet n has sent every
//! packet before n, and the receiver, consuming them, acknowledges at least n - ACK_EVERY >=
//! n - K, so the sender always gets going again.
//!
//! # Credits off the critical path
//! Writing a credit is a store into the sender's memory that must complete before anything
//! else is ordered after it (a locked store: one cache-line transfer of stall), and in a
//! ping-pong it would sit between taking a message and answering it. So consuming only notes
//! the credit owed; it is written when this rank sends its next packet (after the packet),
//! before it blocks in any wait, or when the next interval's credit comes due first (a
//! stream: the sender must not run dry). Liveness is unchanged: a rank that waits has paid, and a
//! sender can only be stuck on a receiver that waits (or has left, and needs nothing more).
//!
//! # Memory
//! Per rank and group of P ranks: `P*128 + P*K*(64 + CH)` bytes, with K = 4 slots and
//! CH = clamp(8 MiB / (P*K), 4 KiB, 64 KiB) rounded to 64 bytes: 0.5 MiB at P = 2, 2 MiB at
//! P = 8, about 9 MiB up to P = 512 and P x 16.4 KiB beyond. It does not depend on message
//! size: larger messages stream through the slots (or, for two-sided messages, go by
//! rendezvous).

use std::cell::RefCell;

use crate::error::{Error, ErrorKind, Result};
use crate::fabric::line::{LINE, SIGNAL};
use crate::fabric::{Handle, Segment, SignalOp, World};
use crate::transport::Patience;

/// Slots per ordered pair of ranks (the collectives' rings).
pub const SLOTS: usize = 4;
/// A receiver returns credits after every `ACK_EVERY`-th packet, not every packet: each credit
/// write moves a cache line to the sender, and halving them takes one line transfer off every
/// other small message. Safe for any `ACK_EVERY <= SLOTS` (see "Flow control").
pub const ACK_EVERY: u64 = 2;

/// A ring's dimensions: slots per pair, how often credits go back, packet capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub slots: usize,
    pub ack_every: u64,
    pub chunk: usize,
}

impl Shape {
    /// The collectives' rings: [`SLOTS`] slots of [`chunk_bytes`].
    pub(crate) fn collectives(p: usize) -> Self {
        Self {
            slots: SLOTS,
            ack_every: ACK_EVERY,
            chunk: chunk_bytes(p),
        }
    }

    /// Two-sided messages' rings: twice the slots of half the size (the same memory), and
    /// credits every fourth packet: a stream of small messages (a ping-pong, a window of
    /// sends) pays a credit line once per four messages instead of two.
    pub(crate) fn messages(p: usize) -> Self {
        Self {
            slots: 2 * SLOTS,
            ack_every: 2 * ACK_EVERY,
            chunk: (chunk_bytes(p) / 2).max(LINE) / LINE * LINE,
        }
    }

    /// Bytes of ring area one rank registers for a group of `p` ranks.
    pub(crate) fn bytes(&self, p: usize) -> usize {
        p * CREDIT + p * self.slots * (LINE + self.chunk)
    }
}
/// Payload bytes that travel in the header line.
pub const INLINE: usize = 40;
const META: usize = 40;
const LEN: usize = 48;
const CREDIT: usize = 128;

/// The packet capacity (largest payload) for a group of `p` ranks.
pub fn chunk_bytes(p: usize) -> usize {
    let ch = (8usize << 20) / (p.max(1) * SLOTS);
    ch.clamp(4 << 10, 64 << 10) / 64 * 64
}

/// Bytes of the collectives' ring area one rank registers for a group of `p` ranks.
pub fn ring_bytes(p: usize) -> usize {
    Shape::collectives(p).bytes(p)
}

/// Other work that may need progress while a ring operation waits (the two-sided engine of
/// the same communicator). Asked only when a wait does not end at once, so a ring operation
/// whose data is already there pays nothing for it.
pub(crate) trait Progressor {
    /// Whether this rank owes peers work that only its progress moves.
    fn busy(&self) -> bool;
    /// One pass of that progress.
    fn poll(&self, w: &World) -> Result<()>;
}

/// The progressor a ring wait runs, if any.
pub(crate) type Hook<'a> = Option<&'a dyn Progressor>;
const HOOK_NAP: std::time::Duration = std::time::Duration::from_micros(200);

/// What a packet's header line says besides its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Head {
    /// Payload bytes.
    pub len: usize,
    /// The framing's 32-bit field.
    pub aux: u32,
    /// The framing's 8 bytes.
    pub meta: [u8; 8],
}

#[derive(Debug)]
struct Counters {
    sent: Vec<u64>,
    recvd: Vec<u64>,
    credit: Vec<u64>,
    /// Credits consumed but not yet written back (0: none), see "Credits off the critical
    /// path".
    owed: Vec<u64>,
    owing: bool,
}

/// A group's rings: this rank's ring segment, the peers' handles, and the counters.
#[derive(Debug)]
pub(crate) struct Ring {
    seg: Segment,
    handles: Vec<Handle>,
    me: usize,
    p: usize,
    ch: usize,
    slot: usize,
    slots: usize,
    ack_every: u64,
    c: RefCell<Counters>,
}

impl Ring {
    /// Wraps an allocated segment (at least `shape.bytes(p)` long; the ring uses its start) and
    /// every member's handle of the same segment.
    pub(crate) fn new(seg: Segment, handles: Vec<Handle>, me: usize, shape: Shape) -> Self {
        let p = handles.len();
        let ch = shape.chunk;
        assert!(
            shape.slots.is_power_of_two()
                && shape.ack_every.is_power_of_two()
                && shape.ack_every <= shape.slots as u64,
            "ring shape {shape:?}: slots and ack interval are powers of two, ack <= slots"
        );
        Self {
            seg,
            handles,
            me,
            p,
            ch,
            slot: LINE + ch,
            slots: shape.slots,
            ack_every: shape.ack_every,
            c: RefCell::new(Counters {
                sent: vec![0; p],
                recvd: vec![0; p],
                credit: vec![0; p],
                owed: vec![0; p],
                owing: false,
            }),
        }
    }

    /// The largest payload of one packet.
    pub(crate) fn capacity(&self) -> usize {
        self.ch
    }

    /// This rank's segment (the ring at its start; a framing may keep more after
    /// its shape's bytes).
    pub(crate) fn seg(&self) -> &Segment {
        &self.seg
    }

    /// Member `q`'s handle of its segment.
    pub(crate) fn handle(&self, q: usize) -> &Handle {
        &self.handles[q]
    }

    fn slot_off(&self, sender: usize, seq: u64) -> usize {
        // Only the bits below `slots` (a usize) survive the mask: truncation loses nothing.
        #[allow(clippy::cast_possible_truncation)]
        let slot = (seq - 1) as usize & (self.slots - 1);
        self.p * CREDIT + sender * self.slots * self.slot + slot * self.slot
    }

    /// Whether packet `seq` to `to` fits the slots `to` has handed back, re-reading the
    /// credit word when the cached credit says no.
    #[inline]
    fn has_credit(&self, c: &mut Counters, to: usize, seq: u64) -> Result<bool> {
        if seq <= c.credit[to] + self.slots as u64 {
            return Ok(true);
        }
        c.credit[to] = self.seg.signal_value(to * CREDIT)?;
        Ok(seq <= c.credit[to] + self.slots as u64)
    }

    /// Sends one packet to member `to` if its slots have room now; `false` (nothing sent) if
    /// not. The message engines' send: they queue what does not fit rather than block.
    #[inline]
    pub(crate) fn try_send(
        &self,
        w: &World,
        to: usize,
        data: &[u8],
        aux: u32,
        meta: [u8; 8],
    ) -> Result<bool> {
        self.try_send_parts(w, to, &[data], aux, meta)
    }

    /// [`Ring::try_send`] of a payload given in pieces (a header and a body), written
    /// back to back into the slot: no staging copy to join them.
    #[inline]
    pub(crate) fn try_send_parts(
        &self,
        w: &World,
        to: usize,
        parts: &[&[u8]],
        aux: u32,
        meta: [u8; 8],
    ) -> Result<bool> {
        {
            let mut c = self.c.borrow_mut();
            let seq = c.sent[to] + 1;
            if !self.has_credit(&mut c, to, seq)? {
                return Ok(false);
            }
            self.put_packet(w, &mut c, to, seq, parts, aux, meta)?;
        }
        self.pay(w)?;
        Ok(true)
    }

    /// The credit word a sender blocked on member `to` sleeps on, and the value that lets
    /// its next packet go: what a waiter that cannot send sleeps on.
    pub(crate) fn credit_word(&self, to: usize) -> (usize, u64) {
        let seq = self.c.borrow().sent[to] + 1;
        (to * CREDIT, seq.saturating_sub(self.slots as u64))
    }

    /// Sends one packet (`data.len() <= capacity()`) to member `to`, waiting for credit if its
    /// slots are full (running `hook` meanwhile, if given).
    #[inline]
    pub(crate) fn send(
        &self,
        w: &World,
        to: usize,
        data: &[u8],
        aux: u32,
        meta: [u8; 8],
        hook: Hook<'_>,
    ) -> Result<()> {
        while !self.try_send(w, to, data, aux, meta)? {
            let (off, v) = self.credit_word(to);
            let seen = self
                .wait_word(w, off, v, hook)
                .map_err(|e| self.waited_for(e, to, "a free slot"))?;
            self.c.borrow_mut().credit[to] = seen;
        }
        Ok(())
    }

    /// Writes packet `seq` (credit checked by the caller) into `to`'s slot: payload (the
    /// `parts` back to back), header, then the sequence word.
    #[inline]
    #[allow(clippy::too_many_arguments)] // one packet's full description
    fn put_packet(
        &self,
        w: &World,
        c: &mut Counters,
        to: usize,
        seq: u64,
        parts: &[&[u8]],
        aux: u32,
        meta: [u8; 8],
    ) -> Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        debug_assert!(len <= self.ch);
        let h = &self.handles[to];
        let off = self.slot_off(self.me, seq);
        let mut line = [0u8; SIGNAL];
        line[META..LEN].copy_from_slice(&meta);
        // At most a chunk, and no shape has chunks over 64 KiB (`chunk_bytes`).
        #[allow(clippy::cast_possible_truncation)]
        let len32 = len as u32;
        line[LEN..LEN + 4].copy_from_slice(&len32.to_le_bytes());
        line[LEN + 4..SIGNAL].copy_from_slice(&aux.to_le_bytes());
        if len <= INLINE {
            let mut at = 0;
            for p in parts {
                line[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            w.put_signal(h, off, &line, h, off + SIGNAL, SignalOp::Set(seq))?;
        } else {
            let mut at = off + LINE;
            for p in parts {
                w.put(h, at, p)?;
                at += p.len();
            }
            w.put_signal(
                h,
                off + META,
                &line[META..],
                h,
                off + SIGNAL,
                SignalOp::Set(seq),
            )?;
        }
        c.sent[to] = seq;
        Ok(())
    }

    fn head_at(&self, off: usize) -> Result<Head> {
        let mut b = [0u8; SIGNAL - META];
        self.seg.read(off + META, &mut b)?;
        let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Ok(Head {
            meta: b[..8].try_into().expect("8 bytes"),
            len: word(8) as usize,
            aux: word(12),
        })
    }

    /// The header of the next packet from `from` if it has arrived, without consuming it.
    #[inline]
    pub(crate) fn peek(&self, from: usize) -> Result<Option<Head>> {
        let seq = self.c.borrow().recvd[from] + 1;
        let off = self.slot_off(from, seq);
        if self.seg.signal_value(off + SIGNAL)? < seq {
            return Ok(None);
        }
        self.head_at(off).map(Some)
    }

    /// Consumes the next packet from `from` if it has arrived and `accept` takes its header
    /// (returning how many payload bytes to copy into `dst`): one look at the slot instead of
    /// a peek and a take. `None`: nothing arrived, or `accept` declined (nothing consumed).
    #[inline]
    pub(crate) fn take_if(
        &self,
        w: &World,
        from: usize,
        dst: &mut [u8],
        accept: impl FnOnce(&Head) -> Option<usize>,
    ) -> Result<Option<Head>> {
        let seq = self.c.borrow().recvd[from] + 1;
        let off = self.slot_off(from, seq);
        if self.seg.signal_value(off + SIGNAL)? < seq {
            return Ok(None);
        }
        let h = self.head_at(off)?;
        let Some(n) = accept(&h) else {
            return Ok(None);
        };
        let n = n.min(h.len).min(dst.len());
        self.seg.read(Self::data_off(off, h.len), &mut dst[..n])?;
        self.consumed(w, from, seq)?;
        Ok(Some(h))
    }

    /// Waits for the next packet from `from` (running `hook` meanwhile, if given) and returns
    /// its header, without consuming it.
    #[inline]
    pub(crate) fn wait(&self, w: &World, from: usize, hook: Hook<'_>) -> Result<Head> {
        let seq = self.c.borrow().recvd[from] + 1;
        let off = self.slot_off(from, seq);
        self.wait_word(w, off + SIGNAL, seq, hook)
            .map_err(|e| self.waited_for(e, from, "a packet"))?;
        self.head_at(off)
    }

    /// A failed wait's error, naming member `q` (by its world rank) if it names nobody yet.
    #[cold]
    fn waited_for(&self, e: Error, q: usize, what: &str) -> Error {
        let rank = self.handles[q].rank();
        e.waiting_for(rank, format_args!("{what} from rank {rank}"))
    }

    #[inline]
    fn wait_word(&self, w: &World, off: usize, v: u64, hook: Hook<'_>) -> Result<u64> {
        let seen = self.seg.signal_value(off)?;
        if seen >= v {
            return Ok(seen);
        }
        self.pay(w)?;
        match hook {
            // Asked only if the word is not there yet.
            Some(h) if h.busy() => {
                let poll = || h.poll(w).map(|()| false);
                let patience = Patience::default();
                loop {
                    let seen = w.wait_polling(&self.seg, off, v, HOOK_NAP, &patience, &poll)?;
                    if seen >= v {
                        return Ok(seen);
                    }
                }
            }
            _ => w.wait_until(&self.seg, off, v),
        }
    }

    /// The sequence word the next packet from `from` will raise, and the value it will carry:
    /// what a waiter that expects a packet from `from` sleeps on.
    pub(crate) fn next_word(&self, from: usize) -> (usize, u64) {
        let seq = self.c.borrow().recvd[from] + 1;
        (self.slot_off(from, seq) + SIGNAL, seq)
    }

    /// Consumes the next packet from `from` (which must have arrived: [`Ring::peek`] or
    /// [`Ring::wait`] said so), copying its first `dst.len()` payload bytes into `dst`.
    #[inline]
    pub(crate) fn take(&self, w: &World, from: usize, h: &Head, dst: &mut [u8]) -> Result<()> {
        let seq = self.c.borrow().recvd[from] + 1;
        let off = self.slot_off(from, seq);
        let n = dst.len().min(h.len);
        self.seg.read(Self::data_off(off, h.len), &mut dst[..n])?;
        self.consumed(w, from, seq)
    }

    /// Consumes the next packet from `from` (which must have arrived), handing its payload to
    /// `f` in place: no copy (a reduction combines straight out of the slot).
    #[inline]
    pub(crate) fn take_with<R>(
        &self,
        w: &World,
        from: usize,
        h: &Head,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let seq = self.c.borrow().recvd[from] + 1;
        let off = self.slot_off(from, seq);
        #[allow(unsafe_code)]
        // SAFETY: the sender wrote this slot completely before raising its sequence word to
        // `seq` (the caller saw it arrive), and writes it again only for packet seq + slots,
        // which it sends only once our credit word says we consumed packet `seq` ("Flow
        // control" above). That credit is written by `consumed` below, after the view and `f`
        // are done with it, so nothing writes these bytes while the view lives.
        let r = f(unsafe { self.seg.view::<u8>(Self::data_off(off, h.len), h.len)? });
        self.consumed(w, from, seq)?;
        Ok(r)
    }

    fn data_off(off: usize, len: usize) -> usize {
        if len <= INLINE { off } else { off + LINE }
    }

    #[inline]
    fn consumed(&self, w: &World, from: usize, seq: u64) -> Result<()> {
        let mut c = self.c.borrow_mut();
        c.recvd[from] = seq;
        if seq & (self.ack_every - 1) != 0 {
            return Ok(());
        }
        // A credit still owed from the previous interval means a stream, not a ping-pong:
        // pay now, or the sender would run out of slots waiting for it.
        let behind = c.owed[from] != 0;
        c.owed[from] = seq;
        c.owing = true;
        drop(c);
        if behind { self.pay_slow(w) } else { Ok(()) }
    }

    /// Writes back the credits owed (see "Credits off the critical path"). Every way into
    /// a blocking wait calls it first, and every send after its packet has gone.
    #[inline]
    pub(crate) fn pay(&self, w: &World) -> Result<()> {
        if !self.c.borrow().owing {
            return Ok(());
        }
        self.pay_slow(w)
    }

    #[inline(never)]
    fn pay_slow(&self, w: &World) -> Result<()> {
        let mut c = self.c.borrow_mut();
        c.owing = false;
        for q in 0..self.p {
            let seq = std::mem::take(&mut c.owed[q]);
            if seq == 0 {
                continue;
            }
            // Hand the slots back: the sender may now reuse them. A sender that has already
            // released its group (it finished, and this was its last packet to us) needs no
            // credit.
            match w.signal(&self.handles[q], self.me * CREDIT, SignalOp::Set(seq)) {
                Err(e) if e.kind() == ErrorKind::InvalidHandle => {}
                r => r?,
            }
        }
        Ok(())
    }
}
