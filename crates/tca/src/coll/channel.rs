//! Channels: ordered, flow-controlled byte streams between every pair of a communicator's
//! ranks, built only from puts and signals. Every collective algorithm is a schedule of
//! chunk sends and receives on these channels.
//!
//! # Layout of a rank's scratch segment (allocated once per communicator, on first use)
//! ```text
//! 0                     credit words, one 128-byte block per peer q: how many of my chunks
//!                       q has consumed                              writer: q
//! P*128 + q*K*S         the K slots in which peer q sends to me; slot s at + s*S:
//!   +0   payload of small chunks (<= 48 bytes)
//!   +48  chunk length (u32), message length (u32)
//!   +56  sequence word (u64)                                        writer: q
//!   +64  payload of larger chunks (up to CH bytes)
//! ```
//! with S = 64 + CH. A chunk of at most 48 bytes travels in one cache line with its sequence
//! word, so a small message costs one line transfer; a larger chunk is one `memcpy` into the
//! slot, then the header line.
//!
//! # Flow control
//! Chunk n (counting from 1) from q to me goes in slot (n - 1) mod K and raises the slot's
//! sequence word to n. I consume chunks in order and, after each, set q's credit word for me
//! to n. q writes chunk n only when that credit word is at least n - K, so a slot is never
//! overwritten before its reader has consumed it: back-to-back collectives, with ranks at any
//! speed, cannot corrupt each other (the rule of `SHM.md`, "Reuse without overwriting").
//! Credits are returned every [`ACK_EVERY`] chunks: a sender blocked at chunk n has sent every
//! chunk before n, and the receiver, consuming them, acknowledges at least n - ACK_EVERY >=
//! n - K, so the sender always gets going again.
//!
//! # Deadlock freedom
//! Algorithms move data in *rounds*: in round i a rank first sends chunk i of every message
//! it sends in that step, then receives chunk i of every message it receives. The slowest
//! rank can always progress: its sends need credits from receivers that are at least as far
//! along, its receives need chunks that senders at least as far along have written. So even
//! two ranks exchanging large messages never wait on each other in a cycle.
//!
//! # Memory
//! Per rank and communicator of P ranks: `P*128 + P*K*(64 + CH)` bytes plus a 4 KiB header,
//! with K = 4 slots and CH = clamp(8 MiB / (P*K), 4 KiB, 64 KiB) rounded to 64 bytes: 0.5 MiB at
//! P = 2, 2 MiB at P = 8, about 9 MiB up to P = 512 and P x 16.4 KiB beyond (O(P^2) over a
//! node). It does not depend on message size: larger messages stream through the slots.

use std::cell::RefCell;

use crate::error::{Error, ErrorKind, Result};
use crate::fabric::{Handle, Segment, SignalOp, World};

/// Slots per ordered pair of ranks.
pub const SLOTS: usize = 4;
/// A receiver returns credits after every `ACK_EVERY`-th chunk, not every chunk: each credit
/// write moves a cache line to the sender, and halving them takes one line transfer off every
/// other small message. Safe for any `ACK_EVERY <= SLOTS` (see "Flow control").
pub const ACK_EVERY: u64 = 2;
/// Payload bytes that travel in the header line.
pub const INLINE: usize = 48;
const HEADER: usize = 64;
const CREDIT: usize = 128;

/// The chunk size for a communicator of `p` ranks.
pub fn chunk_bytes(p: usize) -> usize {
    let ch = (8usize << 20) / (p.max(1) * SLOTS);
    ch.clamp(4 << 10, 64 << 10) / 64 * 64
}

/// Bytes of scratch one rank registers for a communicator of `p` ranks.
pub fn scratch_bytes(p: usize) -> usize {
    p * CREDIT + p * SLOTS * (HEADER + chunk_bytes(p))
}

/// How a received chunk is used.
pub(crate) enum Sink<'a> {
    /// Copied into the destination.
    Copy,
    /// Combined into the destination: `dst = dst op chunk`.
    Reduce(&'a super::Reducer<'a>),
}

#[derive(Debug)]
struct Counters {
    sent: Vec<u64>,
    recvd: Vec<u64>,
    credit: Vec<u64>,
}

/// A communicator's channels: its scratch segment, the peers' handles, and the counters.
#[derive(Debug)]
pub(crate) struct Channels {
    seg: Segment,
    handles: Vec<Handle>,
    me: usize,
    p: usize,
    ch: usize,
    slot: usize,
    c: RefCell<Counters>,
}

impl Channels {
    /// Wraps an allocated scratch segment (`scratch_bytes(p)` long) and every member's handle.
    pub(crate) fn new(seg: Segment, handles: Vec<Handle>, me: usize) -> Self {
        let p = handles.len();
        let ch = chunk_bytes(p);
        Self {
            seg,
            handles,
            me,
            p,
            ch,
            slot: HEADER + ch,
            c: RefCell::new(Counters {
                sent: vec![0; p],
                recvd: vec![0; p],
                credit: vec![0; p],
            }),
        }
    }

    /// Number of chunks a message of `n` bytes is sent in (at least one).
    pub(crate) fn chunks(&self, n: usize) -> usize {
        n.div_ceil(self.ch).max(1)
    }

    fn slot_off(&self, sender: usize, receiver_view_seq: u64) -> usize {
        self.p * CREDIT
            + sender * SLOTS * self.slot
            + ((receiver_view_seq - 1) as usize % SLOTS) * self.slot
    }

    fn part(&self, msg_len: usize, i: usize) -> std::ops::Range<usize> {
        let a = (i * self.ch).min(msg_len);
        a..((i + 1) * self.ch).min(msg_len)
    }

    /// Sends chunk `i` of `msg` to comm rank `to`.
    pub(crate) fn send_chunk(&self, w: &World, to: usize, msg: &[u8], i: usize) -> Result<()> {
        let msg_len = u32::try_from(msg.len()).map_err(|_| {
            Error::new(
                ErrorKind::InvalidArgument,
                "a single collective message must be under 4 GiB",
            )
        })?;
        let data = &msg[self.part(msg.len(), i)];
        let mut c = self.c.borrow_mut();
        let seq = c.sent[to] + 1;
        if seq > c.credit[to] + SLOTS as u64 {
            c.credit[to] = w.wait_until(&self.seg, to * CREDIT, seq - SLOTS as u64)?;
        }
        let h = &self.handles[to];
        let off = self.slot_off(self.me, seq);
        let mut line = [0u8; 56];
        line[48..52].copy_from_slice(&(data.len() as u32).to_le_bytes());
        line[52..56].copy_from_slice(&msg_len.to_le_bytes());
        if data.len() <= INLINE {
            line[..data.len()].copy_from_slice(data);
            w.put_signal(h, off, &line, h, off + 56, SignalOp::Set(seq))?;
        } else {
            w.put(h, off + HEADER, data)?;
            w.put_signal(h, off + 48, &line[48..], h, off + 56, SignalOp::Set(seq))?;
        }
        c.sent[to] = seq;
        Ok(())
    }

    /// Receives chunk `i` of a message of `dst.len()` bytes from comm rank `from` into the
    /// matching part of `dst` (copied or reduced).
    pub(crate) fn recv_chunk(
        &self,
        w: &World,
        from: usize,
        dst: &mut [u8],
        i: usize,
        sink: &Sink<'_>,
    ) -> Result<()> {
        let mut c = self.c.borrow_mut();
        let seq = c.recvd[from] + 1;
        let off = self.slot_off(from, seq);
        w.wait_until(&self.seg, off + 56, seq)?;
        let mut hdr = [0u8; 8];
        self.seg.read(off + 48, &mut hdr)?;
        let len = u32::from_le_bytes(hdr[..4].try_into().expect("4 bytes")) as usize;
        let msg = u32::from_le_bytes(hdr[4..].try_into().expect("4 bytes")) as usize;
        let range = self.part(dst.len(), i);
        if msg != dst.len() || len != range.len() {
            return Err(Error::peer(
                ErrorKind::InvalidArgument,
                from as u32,
                format!(
                    "communicator rank {from} sent a message of {msg} bytes where {} were expected: \
                     buffer lengths differ across ranks",
                    dst.len()
                ),
            ));
        }
        let data_off = if len <= INLINE { off } else { off + HEADER };
        match sink {
            Sink::Copy => self.seg.read(data_off, &mut dst[range])?,
            Sink::Reduce(red) => {
                // Combine straight out of the slot: one pass over the data instead of a copy
                // into a temporary and a second pass.
                #[allow(unsafe_code)]
                // SAFETY: the sender wrote this slot completely before raising its sequence word
                // to `seq` (waited for above), and writes it again only for chunk seq + SLOTS,
                // which it sends only once our credit word says we consumed chunk `seq`
                // ("Flow control" above). That credit is written below, after the view is
                // dropped, so nothing writes these bytes while the view lives. `dst` is the
                // caller's memory, not the segment, so the two slices do not alias.
                let inc = unsafe { self.seg.view::<u8>(data_off, len)? };
                red.apply(&mut dst[range], inc)?;
            }
        }
        c.recvd[from] = seq;
        drop(c);
        if seq % ACK_EVERY != 0 {
            return Ok(());
        }
        // Hand the slots back: the sender may now reuse them. A sender that has already
        // released its communicator (it finished, and this was its last chunk to us) needs no
        // credit.
        match w.signal(&self.handles[from], self.me * CREDIT, SignalOp::Set(seq)) {
            Err(e) if e.kind() == ErrorKind::InvalidHandle => Ok(()),
            r => r,
        }
    }

    /// Sends a whole message.
    pub(crate) fn send(&self, w: &World, to: usize, msg: &[u8]) -> Result<()> {
        for i in 0..self.chunks(msg.len()) {
            self.send_chunk(w, to, msg, i)?;
        }
        Ok(())
    }

    /// Receives a whole message.
    pub(crate) fn recv(
        &self,
        w: &World,
        from: usize,
        dst: &mut [u8],
        sink: &Sink<'_>,
    ) -> Result<()> {
        for i in 0..self.chunks(dst.len()) {
            self.recv_chunk(w, from, dst, i, sink)?;
        }
        Ok(())
    }

    /// Sends `msg` to `to` while receiving `dst` from `from`, chunk by chunk (deadlock-free
    /// even when both directions carry large messages).
    pub(crate) fn sendrecv(
        &self,
        w: &World,
        to: usize,
        msg: &[u8],
        from: usize,
        dst: &mut [u8],
        sink: &Sink<'_>,
    ) -> Result<()> {
        let (ns, nr) = (self.chunks(msg.len()), self.chunks(dst.len()));
        for i in 0..ns.max(nr) {
            if i < ns {
                self.send_chunk(w, to, msg, i)?;
            }
            if i < nr {
                self.recv_chunk(w, from, dst, i, sink)?;
            }
        }
        Ok(())
    }
}
