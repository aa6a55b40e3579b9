//! Channels: the collectives' framing over the fabric's rings ([`crate::fabric::ring`]):
//! ordered, flow-controlled byte streams between every pair of a communicator's ranks. Every
//! collective algorithm is a schedule of chunk sends and receives on these channels.
//!
//! A message is cut into chunks of the ring's packet capacity; each chunk is one packet whose
//! `aux` field carries the whole message's length, so a receiver whose buffer length differs
//! from the sender's finds out at the first chunk. Layout, flow control and memory are the
//! ring's (see there); a chunk of at most [`INLINE`] bytes travels in one cache line with its
//! sequence word.
//!
//! # Deadlock freedom
//! Algorithms move data in *rounds*: in round i a rank first sends chunk i of every message
//! it sends in that step, then receives chunk i of every message it receives. The slowest
//! rank can always progress: its sends need credits from receivers that are at least as far
//! along, its receives need chunks that senders at least as far along have written. So even
//! two ranks exchanging large messages never wait on each other in a cycle.

use crate::cast::rank_u32;
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::ring::{Hook, Ring, Shape};
pub use crate::fabric::ring::{INLINE, chunk_bytes, ring_bytes as scratch_bytes};
use crate::fabric::{Handle, Segment, World};

/// How a received chunk is used.
pub(crate) enum Sink<'a> {
    /// Copied into the destination.
    Copy,
    /// Combined into the destination: `dst = dst op chunk`.
    Reduce(&'a super::Reducer<'a>),
}

/// A communicator's channels: a ring between every pair of its members.
#[derive(Debug)]
pub(crate) struct Channels {
    ring: Ring,
    ch: usize,
}

impl Channels {
    /// The scratch segment's length for `p` members with chunks of `chunk` bytes (`None`:
    /// [`chunk_bytes`]).
    pub(crate) fn bytes(p: usize, chunk: Option<usize>) -> usize {
        Shape::collectives_with(p, chunk).bytes(p)
    }

    /// Wraps an allocated scratch segment ([`Channels::bytes`] long) and every member's
    /// handle.
    pub(crate) fn new(seg: Segment, handles: Vec<Handle>, me: usize, chunk: Option<usize>) -> Self {
        let p = handles.len();
        let ring = Ring::new(seg, handles, me, Shape::collectives_with(p, chunk));
        let ch = ring.capacity();
        Self { ring, ch }
    }

    /// Number of chunks a message of `n` bytes is sent in (at least one).
    pub(crate) fn chunks(&self, n: usize) -> usize {
        n.div_ceil(self.ch).max(1)
    }

    fn part(&self, msg_len: usize, i: usize) -> std::ops::Range<usize> {
        let a = (i * self.ch).min(msg_len);
        a..((i + 1) * self.ch).min(msg_len)
    }

    /// Sends chunk `i` of `msg` to comm rank `to`: waiting for room if `wait` is given (and
    /// then `true`), or only if the ring has room now (`false`, nothing sent, if not: a step
    /// of a non-blocking collective).
    #[inline(always)]
    pub(crate) fn send_chunk(
        &self,
        w: &World,
        to: usize,
        msg: &[u8],
        i: usize,
        wait: Option<Hook<'_>>,
    ) -> Result<bool> {
        let msg_len = u32::try_from(msg.len()).map_err(|_| {
            Error::new(
                ErrorKind::InvalidArgument,
                "a single collective message must be under 4 GiB",
            )
        })?;
        self.ring
            .send(w, to, &msg[self.part(msg.len(), i)], msg_len, [0; 8], wait)
    }

    /// Receives chunk `i` of a message of `dst.len()` bytes from comm rank `from` into the
    /// matching part of `dst` (copied or reduced): waiting for it if `wait` is given (and then
    /// `true`), or only if it has arrived (`false`, nothing taken, if not).
    #[inline(always)]
    pub(crate) fn recv_chunk(
        &self,
        w: &World,
        from: usize,
        dst: &mut [u8],
        i: usize,
        sink: &Sink<'_>,
        wait: Option<Hook<'_>>,
    ) -> Result<bool> {
        let h = match wait {
            Some(hook) => self.ring.wait(w, from, hook)?,
            None => match self.ring.peek(from)? {
                Some(h) => h,
                None => return Ok(false),
            },
        };
        let range = self.part(dst.len(), i);
        if h.aux as usize != dst.len() || h.len != range.len() {
            return Err(Error::peer(
                ErrorKind::InvalidArgument,
                rank_u32(from),
                format!(
                    "communicator rank {from} sent a message of {} bytes where {} were expected: \
                     buffer lengths differ across ranks",
                    h.aux,
                    dst.len()
                ),
            ));
        }
        match sink {
            // A message the simulation only times (timing-only mode, larger than what it
            // moves whole) came without its bytes: consumed, not copied, so the destination's
            // pages stay untouched (hundreds of simulated ranks' receive buffers fit in
            // memory only so).
            Sink::Copy if w.only_timed(dst.len()) => self.ring.take_with(w, from, &h, |_| ())?,
            Sink::Reduce(_) if w.only_timed(dst.len()) => {
                w.computed(range.len());
                self.ring.take_with(w, from, &h, |_| ())?;
            }
            Sink::Copy => self.ring.take(w, from, &h, &mut dst[range])?,
            // Combine straight out of the slot: one pass over the data instead of a copy into
            // a temporary and a second pass.
            Sink::Reduce(red) => {
                w.computed(range.len());
                self.ring
                    .take_with(w, from, &h, |inc| red.apply(&mut dst[range], inc))??
            }
        }
        Ok(true)
    }

    /// Sends a whole message, waiting for room (the blocking calls' path: one call, no
    /// poll per chunk).
    pub(crate) fn send(&self, w: &World, to: usize, msg: &[u8], hook: Hook<'_>) -> Result<()> {
        for i in 0..self.chunks(msg.len()) {
            self.send_chunk(w, to, msg, i, Some(hook))?;
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
        hook: Hook<'_>,
    ) -> Result<()> {
        for i in 0..self.chunks(dst.len()) {
            self.recv_chunk(w, from, dst, i, sink, Some(hook))?;
        }
        Ok(())
    }

    /// Sends `msg` to `to` while receiving `dst` from `from`, chunk by chunk (deadlock-free
    /// even when both directions carry large messages).
    #[allow(clippy::too_many_arguments)] // the operation's full description, used in one place
    pub(crate) fn sendrecv(
        &self,
        w: &World,
        to: usize,
        msg: &[u8],
        from: usize,
        dst: &mut [u8],
        sink: &Sink<'_>,
        hook: Hook<'_>,
    ) -> Result<()> {
        let (ns, nr) = (self.chunks(msg.len()), self.chunks(dst.len()));
        for i in 0..ns.max(nr) {
            if i < ns {
                self.send_chunk(w, to, msg, i, Some(hook))?;
            }
            if i < nr {
                self.recv_chunk(w, from, dst, i, sink, Some(hook))?;
            }
        }
        Ok(())
    }

    /// Writes back the credits this rank owes its senders (a non-blocking collective that
    /// must wait does, so that its peers never wait on a rank that computes).
    pub(crate) fn pay(&self, w: &World) -> Result<()> {
        self.ring.pay(w)
    }

    /// Opens (`on`) or closes a group of sends going together (`Ring::together`).
    pub(crate) fn together(&self, on: bool) {
        self.ring.together(on);
    }
}
