//! Rings: ordered, flow-controlled packet streams between every pair of a group of ranks,
//! built only from puts and signals. The one ring-with-credits of tca: the collectives'
//! channels (`coll::channel`) and two-sided messages (`p2p`) are framings over it.
//!
//! # Layout of a rank's ring area (at the start of a segment, allocated once per group)
//! ```text
//! 0                     credit words, one 128-byte block per peer q: how many of my packets
//!                       q has consumed                              writer: q
//! P*128 + q*B           peer q's part, B = S + K*(CH + 64) bytes:
//!   +i*64      header line i (of L), for packets n with (n - 1) mod L = i:
//!     +0   payload of small packets (<= 40 bytes)
//!     +40  meta (8 bytes, the framing's: a tag, a kind ...)
//!     +48  packet length (u32), aux (u32, the framing's: a message length ...)
//!     +56  sequence word (u64)                                     writer: q
//!   +S + j*(CH + 64)  payload slot j (of K), for packets with (n - 1) mod K = j: whole for
//!              a packet over PT bytes; line i's part, at + (i / K)*PT, for a smaller one
//!              (PT = CH*K/L rounded down to whole lines; at 2 ranks no parts: always whole)
//!   S = L*64, at 2 ranks 5 KiB (the slots at the page offsets they had with 16 lines)
//! ```
//! A packet of at most [`INLINE`] bytes travels in one cache line with its sequence word (the
//! layout of [`fabric::line`](super::line)), so a small message costs one line transfer; a
//! larger one is one put into its payload slot, then the header line. A sender's header lines
//! lie one after another: a receiver reading a stream of small packets (back-to-back
//! broadcasts, a window of sends) reads consecutive lines, which the hardware's prefetchers
//! fetch ahead, where lines a slot apart each cost a miss of their own (BENCHMARKS.md, "A
//! sender's ring lines one after another"). The payload slots are a chunk and a line apart,
//! so that they do not all begin on the same cache sets, as chunks a power of two apart would.
//! In the collectives' rings lines outnumber slots (L > K; in the two-sided and
//! active-message rings they are as many): a sender runs L packets ahead with packets that fit
//! a line (64 lines), at 64 bytes per extra line, and K ahead with larger ones; where memory
//! cut the slots (from 3 ranks on) also with packets that fit a line's part of a payload (8 KiB
//! parts of 64 KiB chunks at 3-4 ranks, 4 KiB from 5 on). At 2 ranks a payload takes its slot
//! whole, as it did with 16 lines (see [`collective_lines`]). On a network
//! either is one operation (`Memory::put_packet`) where it fits: libfabric sends a payload
//! not in the header line and the line as one two-range message up to its largest message
//! (32 KiB on `net`, 8 KiB on layered providers; beyond, an RMA write and then the line), the
//! simulated network always as chained descriptors.
//!
//! # Flow control
//! Packet n (counting from 1) from q to me goes in line (n - 1) mod L and raises the line's
//! sequence word to n; a payload past its line goes in the payload of slot (n - 1) mod K, its
//! line's part or the whole. I consume packets in order and, after each, set q's credit word for
//! me to n. q writes packet n only when that credit word is at least n - L (which frees the line
//! and the line's part, last written by packet n - L at the latest) and, for a payload, at least
//! the number of the last packet of that slot that wrote what it will write: the last whole
//! payload for a part, the last payload of any size for a whole one (either at most n - K; in a
//! ring without parts, where every payload is whole, simply n - K). So
//! neither a line nor a payload byte is overwritten before its reader has consumed it:
//! back-to-back operations, with ranks at any speed, cannot corrupt each other (the rule of
//! `SHM.md`, "Reuse without overwriting"). Credits are returned every A packets (the shape's
//! `ack_every`: [`ACK_EVERY`], twice that in the two-sided rings and the 2-rank collectives'): a
//! sender blocked at packet n has sent every packet before n, and the receiver, consuming them,
//! acknowledges at least n - A >= n - K >= n - L, so the sender always gets going again. A
//! schedule may count on K - A + 1 packets to a peer beyond those the peer has taken
//! (`Shape::room`: at least 3 in every collectives' ring to 1,024 ranks, a test checks).
//!
//! # Credits off the critical path
//! Writing a credit is a store into the sender's memory (a line moved to the writer, and a
//! locked store where the process writes its signals SeqCst), and in a ping-pong it would sit
//! between taking a message and answering it. So consuming only notes
//! the credit owed; it is written when this rank sends its next packet (after the packet),
//! before it blocks in any wait, or when the next interval's credit comes due first (a
//! stream: the sender must not run dry). Liveness is unchanged: a rank that waits has paid, and a
//! sender can only be stuck on a receiver that waits (or has left, and needs nothing more).
//! A credit owed to the rank a packet goes to rides with that packet instead
//! (`Memory::put_packet`): on shared memory the same stores, on a network one message (the
//! credit set before the packet's sequence word) instead of two (over TCP at 2 ranks, an
//! 8-byte allreduce takes 0.74x the time, a 1 KiB one about half; BENCHMARKS.md, "Across
//! nodes").
//! An algorithm that sends to several members in a row (a turn of a multi-ring allgather, a
//! relay's packets to its children) may mark the sends as going together (`Ring::together`,
//! `Site::together` for the collectives): then no credit is written after their packets, so
//! a credit owed to a member a later send of the group goes to rides with that packet, and
//! the others wait until this rank sends outside a group, waits, or owes the next interval.
//! Across a network a credit of its own is a message (on the simulated Tofu, L_S = 1 us of
//! this rank's software): written after a group's first packet, it would delay the next.
//! Liveness is unchanged: waits still pay first.
//!
//! # A stream's next lines
//! A packet's sequence word is stored SeqCst on shared memory (`transport::shm::wait`): the
//! store waits until the line is this core's, and the line was last read by the receiver,
//! in its cache. A sender streaming small packets to a member (a root's back-to-back 8-byte
//! broadcasts, a gather's leaves, a window of sends) would pay that move on every packet. So
//! after a packet of at most [`INLINE`] bytes, when it has taken no packet from anyone since
//! its last one to that member, it asks the CPU to take the header line of the packet
//! [`prefetch_ahead`] on for writing (`Memory::prefetch_for_write`: `prefetchw` on shared
//! memory, nothing on a network): that line last held the packet lines - ahead before this
//! one, and it moves while this rank does other work. A sender that takes packets from this
//! ring between its sends (a ping-pong, an exchange, a relay) is paced by them and takes
//! nothing ahead; nor does a packet with a payload slot (tried: taking the payload's lines
//! ahead too made 64-256 B packets up to 15% slower). Active messages' requests and replies
//! travel on two rings, so there each direction counts as a stream (AM_Short measured level).
//! `TCA_RING_PREFETCH=off` turns it off for measuring.
//! Measured on the 2-core KVM guest of 2026-11-30 (BENCHMARKS.md, "A stream's next lines"),
//! medians at 8 bytes and 2 ranks: Gather and Scatter 0.71x the time, Reduce 0.78x and Bcast
//! 0.84x where a line moves in about 190 ns; Reduce, Gather and Bcast 0.89-0.90x where it
//! moves in about 22 ns, Scatter level; Bcast at 8 ranks on the 2 cores 0.77x; 64 B and more
//! level.
//!
//! # Memory
//! Per rank and group of P ranks: `P*128 + P*S + P*K*(CH + 64)` bytes, with K = 32 / P rounded down
//! to a power of two within 4..=16 slots ([`collective_slots`]: 16 at P = 2, 8 at P = 3 and 4, 4
//! from P = 5 on), L = 64 lines ([`collective_lines`]), and CH =
//! clamp(8 MiB / (P*4), 4 KiB, 64 KiB) rounded to 64 bytes: 1.27-2.03 MiB from P = 2 to 8, 8.3-10.2
//! MiB from 64 to 512 and P x 20.4 KiB beyond. It does not depend on message size: larger
//! messages stream through the slots (or, for two-sided messages, go by rendezvous).

use std::cell::RefCell;

use crate::error::{Error, ErrorKind, Result};
use crate::fabric::line::{LINE, SIGNAL};
use crate::fabric::{Handle, Packet, Segment, SignalOp, World};
use crate::transport::{Patience, Region};

/// A packet's last part when it lies in a region of this rank: the region, a mapping offset
/// (as `Region::range` gives it), a length.
pub(crate) type Tail<'a> = Option<(&'a Region, usize, usize)>;

/// Slots per ordered pair of ranks: the fewest the collectives' rings have (from 5 ranks
/// on; see [`collective_slots`]), and half the two-sided rings'.
pub const SLOTS: usize = 4;
/// The most slots per ordered pair a collectives' ring has (at 2 ranks).
pub const MAX_SLOTS: usize = 16;
/// A receiver returns credits after every `ACK_EVERY`-th packet (or a multiple: a shape's
/// `ack_every`), not every packet: each credit write moves a cache line to the sender, and
/// halving them takes one line transfer off every other small message. Safe for any shape whose
/// `ack_every` is at most its slots (see "Flow control").
pub const ACK_EVERY: u64 = 2;

/// Header lines per ordered pair of the collectives' rings, at every rank count (see
/// [`collective_lines`]).
pub const LINES: usize = 64;

/// The most packets ahead a streaming sender takes a header line ([`prefetch_ahead`]).
pub const PREFETCH_AHEAD: usize = 4;

/// A ring's dimensions: header lines and payload slots per pair, how often credits go back,
/// packet capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Header lines per ordered pair: packets in flight (a power of two, at least `slots`).
    pub lines: usize,
    /// Payload slots per ordered pair: packets too large for a line's part of a payload in
    /// flight (where `lines == slots` or the shape has no parts, every packet over [`INLINE`]
    /// bytes).
    pub slots: usize,
    pub ack_every: u64,
    pub chunk: usize,
    /// Where lines outnumber slots: whether a payload that fits a line's part of its slot goes
    /// there (from 3 ranks on, where memory cut the slots, so that packets up to a part run a
    /// line's depth ahead), or every payload takes its slot whole (2 ranks: 64 lines over 16
    /// slots, so that small packets run 64 ahead while larger ones stay where they were).
    pub parts: bool,
}

impl Shape {
    /// The collectives' rings: [`collective_slots`] slots of [`chunk_bytes`],
    /// [`collective_lines`] lines.
    pub(crate) fn collectives(p: usize) -> Self {
        Self::collectives_with(p, None)
    }

    /// The collectives' rings with chunks of `chunk` bytes where the job sets them (a
    /// simulated network: seed 002's segment size), else [`chunk_bytes`]. Credits every quarter
    /// of the slots, at least every [`ACK_EVERY`] packets (every 4 at 2 ranks' 16 slots, else
    /// every 2: room for 13, 7 or 3 packets past the receiver's): a root streaming 8-byte
    /// broadcasts to one peer at 2 ranks pays a credit line once per four calls
    /// (0.040-0.042 us a call against 0.043-0.045, BENCHMARKS.md, "Credits at 2 ranks").
    pub(crate) fn collectives_with(p: usize, chunk: Option<usize>) -> Self {
        let slots = collective_slots(p);
        Self {
            lines: collective_lines(p),
            slots,
            ack_every: (slots as u64 / 4).max(ACK_EVERY),
            chunk: chunk.unwrap_or_else(|| chunk_bytes(p)),
            parts: slots < MAX_SLOTS,
        }
    }

    /// Two-sided messages' rings: twice [`SLOTS`] slots of half the size (the memory of the
    /// collectives' rings from 5 ranks on), and
    /// credits every fourth packet: a stream of small messages (a ping-pong, a window of
    /// sends) pays a credit line once per four messages instead of two.
    pub(crate) fn messages(p: usize) -> Self {
        Self {
            lines: 2 * SLOTS,
            slots: 2 * SLOTS,
            ack_every: 2 * ACK_EVERY,
            chunk: (chunk_bytes(p) / 2).max(LINE) / LINE * LINE,
            parts: true,
        }
    }

    /// Packets a sender may have written to a peer beyond those the peer has taken and
    /// still find room without the peer's next credit: slots - ack_every + 1 (credits come
    /// every `ack_every` packets). What the collectives' schedules count on (at least 3: a
    /// test checks every rank count to 1,024).
    #[cfg(test)]
    fn room(&self) -> u64 {
        self.slots as u64 + 1 - self.ack_every
    }

    /// Bytes from one payload slot to the next: a chunk and a line, so that the slots'
    /// payloads do not all begin on the same cache sets, as chunks a power of two apart would.
    fn pitch(&self) -> usize {
        self.chunk + LINE
    }

    /// Bytes from the start of a sender's part of the ring to its first payload slot: its
    /// header lines and, where every payload takes its slot whole and the lines fill whole
    /// 4 KiB pages (64 lines at 2 ranks), 1 KiB more. The slots then lie at the page offsets
    /// they had with 16 lines: slots right after 64 lines began a few lines past a page
    /// boundary, just behind a page-aligned source in 4 KiB terms (the aliasing `tca bench
    /// floor`'s memcpy avoids), and 8 KiB broadcasts and reduces took 1.03-1.04x the time.
    fn slots_at(&self) -> usize {
        let lines = self.lines * LINE;
        if self.parts || lines % 4096 != 0 {
            lines
        } else {
            lines + 1024
        }
    }

    /// Bytes of one sender's part of the ring: its header lines, then its payload slots.
    fn block(&self) -> usize {
        self.slots_at() + self.slots * self.pitch()
    }

    /// Bytes of ring area one rank registers for a group of `p` ranks.
    pub(crate) fn bytes(&self, p: usize) -> usize {
        p * CREDIT + p * self.block()
    }
}
/// Payload bytes that travel in the header line.
pub const INLINE: usize = 40;
const META: usize = 40;
const LEN: usize = 48;
const CREDIT: usize = 128;

/// Packets ahead of the one it has just written that a sender streaming small packets to a
/// member takes the header line of ("A stream's next lines"): a quarter of the lines, at most
/// [`PREFETCH_AHEAD`] (4 in the collectives' rings, of 64 lines; 2 in the two-sided and
/// active-message rings, of 8).
pub(crate) fn prefetch_ahead(lines: usize) -> u64 {
    (lines / 4).clamp(1, PREFETCH_AHEAD) as u64
}

/// Slots per ordered pair of the collectives' rings in a group of `p` ranks: as many as keep the
/// ring area near 2 MiB with full 64 KiB chunks, a power of two — 16 at 2 ranks, 8 at 3 and 4,
/// [`SLOTS`] from 5 on. More slots let a sender run further ahead of its receiver: at 2 ranks 1 MiB
/// broadcasts, reduces and allreduces take 0.3-0.7x the time of 4 slots, and back-to-back rooted
/// collectives of oversubscribed ranks less; at 8 ranks on 2 cores 16 slots made large messages up
/// to 2x slower (8 ranks' 16 slots of 64 KiB are 64 MiB of rings, far past the caches), so the ring
/// area is held where 4 slots at 8 ranks had it (BENCHMARKS.md, "Ring slots by rank count").
pub fn collective_slots(p: usize) -> usize {
    // 2 MiB / (p x 64 KiB), a power of two, as the ring's sequence arithmetic needs.
    let k = (32 / p.max(1)).clamp(SLOTS, MAX_SLOTS);
    1 << k.ilog2()
}

/// Header lines per ordered pair of the collectives' rings in a group of `p` ranks: how many
/// packets a sender may have in flight to one receiver when they ride in their line: [`LINES`]
/// (64) at every rank count, more than the payload slots (a line costs 64 bytes where a slot
/// costs a chunk).
/// - With more ranks than cores, a root streaming small broadcasts (or children streaming small
///   gathers and reduces to it) runs 64 calls ahead of a descheduled peer instead of 8 or 4: at 8
///   ranks on 2 cores an 8-byte broadcast took 0.2x the time of 4 lines, and 16 lines 0.4x
///   (BENCHMARKS.md, "Deeper lines for small packets").
/// - At 2 ranks, with a core each, 8-byte rooted collectives took 0.53-0.58x the time of 16
///   lines where a line moves between the cores in about 200 ns, and 0.88-1.0x where it moves in
///   about 25 ns (medians; BENCHMARKS.md, "Small packets in a stream"). A scratch program's raw
///   stream with SeqCst stores (two threads, 25 ns line) took 26 ns a message through 16 lines,
///   18-20 ns through 64. There every payload takes its slot whole (`Shape::parts`) and the
///   slots lie where they did with 16 lines: a first build with 64 lines, whose payloads went
///   in lines' parts and whose slots began right after the lines, took 1.17-1.24x the time for
///   1 KiB broadcasts (which of the two made it slower was not measured).
pub fn collective_lines(_p: usize) -> usize {
    LINES
}

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
    /// Packets taken from all members together.
    taken: u64,
    /// Per member, `taken` when this rank last sent it a packet: unchanged at the next send
    /// means a stream to it (see "A stream's next lines").
    taken_at_send: Vec<u64>,
    credit: Vec<u64>,
    /// Credits consumed but not yet written back (0: none), see "Credits off the critical
    /// path".
    owed: Vec<u64>,
    owing: bool,
    /// Groups of sends going together now ([`Ring::together`]; a count, so that a group
    /// opened inside another closes without closing it): while any is open, no credit is
    /// written after a packet. Closing one pays nothing: what is owed goes with the next
    /// packet outside a group or before the next wait.
    together: u32,
    /// Per member and slot, the number of the last packet that put a payload there: the
    /// credit that frees the whole payload (for a packet over `Protocol::part` bytes).
    slot_seq: Vec<u64>,
    /// Per member and slot, the number of the last packet over `Protocol::part` bytes there:
    /// the credit that frees a line's part of the payload.
    whole_seq: Vec<u64>,
}

/// This rank's ring area as the ring protocol reads it: words, bytes, bytes in place. A
/// [`Segment`] is one; so is the model checks' loom memory (`mod model` below).
pub(crate) trait Area {
    /// The signal word at `off` (Acquire).
    fn value(&self, off: usize) -> Result<u64>;
    /// Copies bytes from `off`.
    fn read(&self, off: usize, dst: &mut [u8]) -> Result<()>;
    /// Hands `len` bytes at `off` to `f` in place.
    ///
    /// # Safety
    /// Nothing may write those bytes until `f` returns.
    #[allow(unsafe_code)] // a view in place: the caller keeps writers away (take_with)
    unsafe fn look<R>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R>;
}

impl Area for Segment {
    #[inline]
    fn value(&self, off: usize) -> Result<u64> {
        self.signal_value(off)
    }

    #[inline]
    fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        Segment::read(self, off, dst)
    }

    #[inline]
    #[allow(unsafe_code)]
    unsafe fn look<R>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        // SAFETY: the caller guarantees that nothing writes these bytes while `f` holds them;
        // `view` checks the range.
        Ok(f(unsafe { self.view::<u8>(off, len)? }))
    }
}

/// What the ring protocol needs of the fabric: its own rank's ring area, a wait on it, and
/// writes into the other members' areas (members counted from 0). The fabric's segments and
/// puts provide it ([`Fabric`]); the model checks provide it with loom's memory (`mod model`
/// below), so they run the protocol's own code.
pub(crate) trait Memory: Area {
    /// Copies `src` to `off` in member `q`'s area.
    fn put(&self, q: usize, off: usize, src: &[u8]) -> Result<()>;
    /// Copies `src` to `off` in member `q`'s area, then sets its word at `sig` to `v`.
    fn put_set(&self, q: usize, off: usize, src: &[u8], sig: usize, v: u64) -> Result<()>;
    /// Writes packet `p` into member `q`'s area: its body, its line with the sequence word,
    /// then the credit it carries; a network sends them as one message.
    fn put_packet(&self, q: usize, p: &Packet<'_>) -> Result<()> {
        if let Some((off, body)) = p.body {
            self.put(q, off, body)?;
        }
        self.put_set(q, p.line.0, p.line.1, p.seq.0, p.seq.1)?;
        match p.credit {
            Some((off, v)) => self.set(q, off, v),
            None => Ok(()),
        }
    }
    /// Copies `len` bytes at `at` (a mapping offset) of `src`, a region of this rank, to
    /// `off` in member `q`'s area: what a packet's body from a segment needs (the seed's
    /// MtoB). By default through a copy; the fabric writes straight from the region.
    fn put_from(&self, q: usize, off: usize, src: &Region, at: usize, len: usize) -> Result<()> {
        let mut b = vec![0; len];
        src.map.read(at, &mut b)?;
        self.put(q, off, &b)
    }
    /// Sets the word at `off` in member `q`'s area to `v`.
    fn set(&self, q: usize, off: usize, v: u64) -> Result<()>;
    /// Hints that this rank will soon write the line at `off` in member `q`'s area (see
    /// "A stream's next lines"); changes nothing anyone reads. By default nothing.
    fn prefetch_for_write(&self, _q: usize, _off: usize) {}
    /// Waits until this rank's word at `off` is at least `v`, running `hook` meanwhile; member
    /// `by` is the one rank that raises that word (a packet's sender, a credit's receiver).
    fn wait(&self, off: usize, v: u64, by: usize, hook: Hook<'_>) -> Result<u64>;
    /// Member `q`'s world rank, to name it in errors.
    fn rank(&self, q: usize) -> u32;
}

/// The fabric as one rank's ring sees it: its segment, the members' handles, the world's
/// puts and waits.
#[derive(Clone, Copy)]
struct Fabric<'a> {
    w: &'a World,
    seg: &'a Segment,
    handles: &'a [Handle],
}

impl Area for Fabric<'_> {
    // The fabric's ring area is its segment's.
    #[inline]
    fn value(&self, off: usize) -> Result<u64> {
        Area::value(self.seg, off)
    }

    #[inline]
    fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        Area::read(self.seg, off, dst)
    }

    #[inline]
    #[allow(unsafe_code)]
    unsafe fn look<R>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        // SAFETY: passed on from our caller.
        unsafe { self.seg.look(off, len, f) }
    }
}

impl Memory for Fabric<'_> {
    #[inline]
    fn put(&self, q: usize, off: usize, src: &[u8]) -> Result<()> {
        self.w.put(&self.handles[q], off, src)
    }

    #[inline(always)]
    fn put_set(&self, q: usize, off: usize, src: &[u8], sig: usize, v: u64) -> Result<()> {
        let h = &self.handles[q];
        self.w.put_signal(h, off, src, h, sig, SignalOp::Set(v))
    }

    #[inline]
    fn put_packet(&self, q: usize, p: &Packet<'_>) -> Result<()> {
        self.w.put_packet(&self.handles[q], p)
    }

    fn put_from(&self, q: usize, off: usize, src: &Region, at: usize, len: usize) -> Result<()> {
        self.w.put_region(&self.handles[q], off, src, at, len)
    }

    #[inline]
    fn set(&self, q: usize, off: usize, v: u64) -> Result<()> {
        self.w.signal(&self.handles[q], off, SignalOp::Set(v))
    }

    #[inline]
    fn prefetch_for_write(&self, q: usize, off: usize) {
        self.w.prefetch_for_write(&self.handles[q], off);
    }

    fn wait(&self, off: usize, v: u64, by: usize, hook: Hook<'_>) -> Result<u64> {
        let by = self.rank(by);
        match hook {
            // Asked only if the word is not there yet.
            Some(h) if h.busy() => {
                let poll = || h.poll(self.w).map(|()| false);
                let patience = Patience::default();
                loop {
                    let seen = self.w.wait_polling(
                        self.seg,
                        off,
                        v,
                        HOOK_NAP,
                        &patience,
                        &poll,
                        Some(by),
                    )?;
                    if seen >= v {
                        return Ok(seen);
                    }
                }
            }
            _ => self.w.wait_raised_by(self.seg, off, v, by),
        }
    }

    fn rank(&self, q: usize) -> u32 {
        self.handles[q].rank()
    }
}

/// A group's rings: this rank's ring segment, the peers' handles, and the protocol's state.
#[derive(Debug)]
pub(crate) struct Ring {
    seg: Segment,
    handles: Vec<Handle>,
    proto: Protocol,
}

impl Ring {
    /// Wraps an allocated segment (at least `shape.bytes(p)` long; the ring uses its start) and
    /// every member's handle of the same segment.
    pub(crate) fn new(seg: Segment, handles: Vec<Handle>, me: usize, shape: Shape) -> Self {
        let proto = Protocol::new(handles.len(), me, shape);
        Self {
            seg,
            handles,
            proto,
        }
    }

    #[inline(always)]
    fn mem<'a>(&'a self, w: &'a World) -> Fabric<'a> {
        Fabric {
            w,
            seg: &self.seg,
            handles: &self.handles,
        }
    }

    /// The largest payload of one packet.
    pub(crate) fn capacity(&self) -> usize {
        self.proto.ch
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
        self.proto
            .try_send_parts(&self.mem(w), to, &[data], aux, meta)
    }

    /// [`Ring::try_send`] of a payload given in pieces (a header and a body), written
    /// back to back into the slot, no staging copy to join them; the last one, `tail`, may
    /// lie in a region of this rank (the region, a mapping offset, a length), written
    /// straight from the region into the slot (the seed's MtoB; across a network an RMA write from it where the packet is
    /// longer than a message carries).
    #[inline]
    pub(crate) fn try_send_from(
        &self,
        w: &World,
        to: usize,
        parts: &[&[u8]],
        tail: Tail<'_>,
        aux: u32,
        meta: [u8; 8],
    ) -> Result<bool> {
        self.proto
            .try_send_with(&self.mem(w), to, parts, tail, aux, meta)
    }

    /// Whether a packet of any size to member `to` would go now (a line and a payload slot
    /// have room).
    #[inline]
    pub(crate) fn can_send(&self, w: &World, to: usize) -> Result<bool> {
        let mut c = self.proto.c.borrow_mut();
        let need = self.proto.needed(&c, to, usize::MAX);
        self.proto.has_credit(&self.mem(w), &mut c, to, need)
    }

    /// The credit word a sender blocked on member `to` sleeps on, and the value that lets
    /// its next packet go, whatever its size: what a waiter that cannot send sleeps on.
    pub(crate) fn credit_word(&self, to: usize) -> (usize, u64) {
        self.proto.credit_word(to)
    }

    /// Sends one packet (`data.len() <= capacity()`) to member `to`. If its slots are full:
    /// with `wait` given, waits for credit (running the hook meanwhile, if any) and returns
    /// `true`; with `None`, returns `false` (nothing sent). One function for both, so that the
    /// blocking collectives and the non-blocking ones' steps share one compiled path.
    #[inline(always)]
    pub(crate) fn send(
        &self,
        w: &World,
        to: usize,
        data: &[u8],
        aux: u32,
        meta: [u8; 8],
        wait: Option<Hook<'_>>,
    ) -> Result<bool> {
        self.proto.send(&self.mem(w), to, data, aux, meta, wait)
    }

    /// The header of the next packet from `from` if it has arrived, without consuming it.
    #[inline]
    pub(crate) fn peek(&self, from: usize) -> Result<Option<Head>> {
        self.proto.peek(&self.seg, from)
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
        self.proto.take_if(&self.mem(w), from, dst, accept)
    }

    /// Waits for the next packet from `from` (running `hook` meanwhile, if given) and returns
    /// its header, without consuming it.
    #[inline(always)]
    pub(crate) fn wait(&self, w: &World, from: usize, hook: Hook<'_>) -> Result<Head> {
        self.proto.wait(&self.mem(w), from, hook)
    }

    /// Member `q`'s world rank.
    pub(crate) fn member_rank(&self, q: usize) -> u32 {
        self.handles[q].rank()
    }

    /// The sequence word the next packet from `from` will raise, and the value it will carry:
    /// what a waiter that expects a packet from `from` sleeps on.
    pub(crate) fn next_word(&self, from: usize) -> (usize, u64) {
        self.proto.next_word(from)
    }

    /// Consumes the next packet from `from` (which must have arrived: [`Ring::peek`] or
    /// [`Ring::wait`] said so), copying its first `dst.len()` payload bytes into `dst`.
    #[inline]
    pub(crate) fn take(&self, w: &World, from: usize, h: &Head, dst: &mut [u8]) -> Result<()> {
        self.proto.take(&self.mem(w), from, h, dst)
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
        self.proto.take_with(&self.mem(w), from, h, f)
    }

    /// Writes back the credits owed (see "Credits off the critical path"). Every way into
    /// a blocking wait calls it first, and every send after its packet has gone (unless
    /// the sends go together).
    #[inline]
    pub(crate) fn pay(&self, w: &World) -> Result<()> {
        self.proto.pay(&self.mem(w))
    }

    /// Opens (`on`) or closes a group of sends going together: while one is open, no credit
    /// is written after a packet (see "Credits off the critical path").
    pub(crate) fn together(&self, on: bool) {
        let mut c = self.proto.c.borrow_mut();
        c.together = if on {
            c.together + 1
        } else {
            c.together.saturating_sub(1)
        };
    }
}

/// The protocol of one rank's rings over any [`Memory`]: the counters, the layout, flow
/// control and credits.
#[derive(Debug)]
struct Protocol {
    me: usize,
    p: usize,
    ch: usize,
    lines: usize,
    slots: usize,
    /// log2(slots): a line's place in its slot is a shift, not a division, on every packet.
    slot_bits: u32,
    /// Bytes of one sender's part ([`Shape::block`]).
    block: usize,
    /// Bytes from one payload slot to the next ([`Shape::pitch`]).
    pitch: usize,
    /// Bytes from a sender's first header line to its first payload slot ([`Shape::slots_at`]).
    slots_at: usize,
    /// Bytes of a line's part of its payload slot (the slot split evenly between the lines
    /// that use it, L / K of them, in whole lines; the whole slot where L = K; none where the
    /// shape has no parts: every payload takes its slot whole).
    part: usize,
    /// Whether payloads go in lines' parts, several to a slot (lines outnumber slots and the
    /// shape has parts): then what each slot's payload last held is kept (`payload_needs`).
    parts: bool,
    ack_every: u64,
    /// How many packets ahead a stream's sender takes its header lines ([`prefetch_ahead`]).
    ahead: u64,
    c: RefCell<Counters>,
}

impl Protocol {
    fn new(p: usize, me: usize, shape: Shape) -> Self {
        let ch = shape.chunk;
        let parts = shape.parts && shape.lines != shape.slots;
        let tracked = if parts { p * shape.slots } else { 0 };
        assert!(
            shape.lines.is_power_of_two()
                && shape.slots.is_power_of_two()
                && shape.ack_every.is_power_of_two()
                && shape.ack_every <= shape.slots as u64
                && shape.slots <= shape.lines
                && ch % LINE == 0,
            "ring shape {shape:?}: lines, slots and ack interval are powers of two, \
             ack <= slots <= lines, chunks whole lines"
        );
        Self {
            me,
            p,
            ch,
            lines: shape.lines,
            slots: shape.slots,
            slot_bits: shape.slots.trailing_zeros(),
            block: shape.block(),
            pitch: shape.pitch(),
            slots_at: shape.slots_at(),
            part: if shape.parts {
                ch / (shape.lines / shape.slots) / LINE * LINE
            } else {
                0
            },
            parts,
            ack_every: shape.ack_every,
            ahead: prefetch_ahead(shape.lines),
            c: RefCell::new(Counters {
                sent: vec![0; p],
                recvd: vec![0; p],
                taken: 0,
                taken_at_send: vec![0; p],
                credit: vec![0; p],
                owed: vec![0; p],
                owing: false,
                together: 0,
                // Kept only where a slot has several lines (`needed`).
                slot_seq: vec![0; tracked],
                whole_seq: vec![0; tracked],
            }),
        }
    }

    /// Line (mod `lines`) of packet `seq`.
    fn line_index(&self, seq: u64) -> usize {
        // Only the bits below `lines` (a usize) survive the mask: truncation loses nothing.
        #[allow(clippy::cast_possible_truncation)]
        let line = (seq - 1) as usize & (self.lines - 1);
        line
    }

    /// The header line of packet `seq` from `sender`: line (seq - 1) mod L of its lines, which
    /// lie one after another, so a stream of small packets reads consecutive lines.
    fn line_off(&self, sender: usize, seq: u64) -> usize {
        self.p * CREDIT + sender * self.block + self.line_index(seq) * LINE
    }

    /// Where the payload of packet `seq`, `len` bytes, its line at `line` (`line_off`), goes if
    /// it does not ride in its line: in payload slot (seq - 1) mod K, its line's part if it
    /// fits one, else the slot from its start.
    fn payload_off(&self, seq: u64, line: usize, len: usize) -> usize {
        let i = self.line_index(seq);
        let sender_start = line - i * LINE;
        let start = sender_start + self.slots_at + (i & (self.slots - 1)) * self.pitch;
        if len <= self.part {
            start + (i >> self.slot_bits) * self.part
        } else {
            start
        }
    }

    /// The credit (packets `to` has consumed) that the next packet of `len` bytes to `to`
    /// needs: its line free and, past [`INLINE`] bytes, the payload it takes: its line's part
    /// (last written by a packet in the same line, or by a whole-payload packet of its slot),
    /// or past [`Protocol::part`] bytes the slot's whole payload. Where a slot has one line, its
    /// line's credit implies the rest; where every payload is whole, the packet K before.
    #[inline(always)]
    fn needed(&self, c: &Counters, to: usize, len: usize) -> u64 {
        let seq = c.sent[to] + 1;
        let line = seq.saturating_sub(self.lines as u64);
        if len <= INLINE || self.lines == self.slots {
            return line;
        }
        if !self.parts {
            // Every payload takes its slot whole: the last packet that can have written slot
            // (seq - 1) mod K is seq - K (its line, seq - L, is older still).
            return seq.saturating_sub(self.slots as u64);
        }
        line.max(self.payload_needs(c, to, seq, len))
    }

    /// What a payload needs, for [`Protocol::needed`], out of line: where payloads take their
    /// slots whole (2 ranks, the two-sided rings) no packet comes here, and the send path stays
    /// as small as it was.
    #[inline(never)]
    fn payload_needs(&self, c: &Counters, to: usize, seq: u64, len: usize) -> u64 {
        let at = to * self.slots + (self.line_index(seq) & (self.slots - 1));
        if len <= self.part {
            c.whole_seq[at]
        } else {
            c.slot_seq[at]
        }
    }

    /// Notes that packet `seq` of `len` bytes (over [`INLINE`]) to `to` wrote its slot's
    /// payload, for [`Protocol::payload_needs`].
    #[inline(never)]
    fn wrote_payload(&self, c: &mut Counters, to: usize, seq: u64, len: usize) {
        let at = to * self.slots + (self.line_index(seq) & (self.slots - 1));
        c.slot_seq[at] = seq;
        if len > self.part {
            c.whole_seq[at] = seq;
        }
    }

    /// Whether `to` has consumed `need` packets, re-reading the credit word when the cached
    /// credit says no.
    #[inline(always)]
    fn has_credit(&self, io: &impl Area, c: &mut Counters, to: usize, need: u64) -> Result<bool> {
        if need <= c.credit[to] {
            return Ok(true);
        }
        c.credit[to] = io.value(to * CREDIT)?;
        Ok(need <= c.credit[to])
    }

    #[inline(always)]
    fn try_send_parts(
        &self,
        io: &impl Memory,
        to: usize,
        parts: &[&[u8]],
        aux: u32,
        meta: [u8; 8],
    ) -> Result<bool> {
        self.try_send_with(io, to, parts, None, aux, meta)
    }

    /// [`Protocol::try_send_parts`] with a last part that lies in a region of this rank
    /// (`tail`: the region, a mapping offset, a length).
    #[inline(always)]
    fn try_send_with(
        &self,
        io: &impl Memory,
        to: usize,
        parts: &[&[u8]],
        tail: Tail<'_>,
        aux: u32,
        meta: [u8; 8],
    ) -> Result<bool> {
        {
            let mut c = self.c.borrow_mut();
            let len = parts.iter().map(|p| p.len()).sum::<usize>() + tail.map_or(0, |t| t.2);
            let need = self.needed(&c, to, len);
            if !self.has_credit(io, &mut c, to, need)? {
                return Ok(false);
            }
            self.put_packet(io, &mut c, to, (parts, tail), len, aux, meta)?;
        }
        self.pay_after_send(io)?;
        Ok(true)
    }

    fn credit_word(&self, to: usize) -> (usize, u64) {
        (to * CREDIT, self.needed(&self.c.borrow(), to, usize::MAX))
    }

    #[inline(always)]
    fn send(
        &self,
        io: &impl Memory,
        to: usize,
        data: &[u8],
        aux: u32,
        meta: [u8; 8],
        wait: Option<Hook<'_>>,
    ) -> Result<bool> {
        while !self.try_send_parts(io, to, &[data], aux, meta)? {
            let Some(hook) = wait else {
                return Ok(false);
            };
            let (off, v) = (to * CREDIT, self.needed(&self.c.borrow(), to, data.len()));
            let seen = self
                .wait_word(io, off, v, to, hook)
                .map_err(|e| waited_for(io, e, to, "a free slot"))?;
            self.c.borrow_mut().credit[to] = seen;
        }
        Ok(true)
    }

    /// Writes `to`'s next packet, `len` bytes in `parts` (credit checked by the caller): the
    /// payload (the parts back to back) into its slot, the header into its line, then the
    /// sequence word.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)] // one packet's full description
    fn put_packet(
        &self,
        io: &impl Memory,
        c: &mut Counters,
        to: usize,
        (parts, tail): (&[&[u8]], Tail<'_>),
        len: usize,
        aux: u32,
        meta: [u8; 8],
    ) -> Result<()> {
        debug_assert!(len <= self.ch);
        let seq = c.sent[to] + 1;
        let off = self.line_off(self.me, seq);
        let mut line = [0u8; SIGNAL];
        line[META..LEN].copy_from_slice(&meta);
        // At most a chunk: 64 KiB at most from `chunk_bytes`, 1 MiB from a simulated job.
        #[allow(clippy::cast_possible_truncation)]
        let len32 = len as u32;
        line[LEN..LEN + 4].copy_from_slice(&len32.to_le_bytes());
        line[LEN + 4..SIGNAL].copy_from_slice(&aux.to_le_bytes());
        let body = if len <= INLINE {
            let mut at = 0;
            for p in parts {
                line[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            if let Some((src, from, n)) = tail {
                src.map.read(from, &mut line[at..at + n])?;
            }
            None
        } else if let ([p], None) = (parts, tail) {
            Some((self.payload_off(seq, off, len), *p))
        } else {
            let mut at = self.payload_off(seq, off, len);
            for p in parts {
                io.put(to, at, p)?;
                at += p.len();
            }
            if let Some((src, from, n)) = tail {
                io.put_from(to, at, src, from, n)?;
            }
            None
        };
        // The header line: whole for a small packet, from the meta on for a larger one.
        let from = if len <= INLINE { 0 } else { META };
        // The credit owed to `to` rides along: one message on a network instead of two.
        let owed = std::mem::take(&mut c.owed[to]);
        let r = if body.is_none() && owed == 0 {
            io.put_set(to, off + from, &line[from..], off + SIGNAL, seq)
        } else {
            let p = Packet {
                body,
                line: (off + from, &line[from..]),
                credit: (owed != 0).then_some((self.me * CREDIT, owed)),
                seq: (off + SIGNAL, seq),
            };
            io.put_packet(to, &p)
        };
        if r.is_err() {
            c.owed[to] = owed; // still owed: `pay` tries again
        }
        r?;
        c.sent[to] = seq;
        if len > INLINE && self.parts {
            self.wrote_payload(c, to, seq, len);
        }
        // A small packet in a stream (no packet taken from anyone since the last one to `to`):
        // take the header line of the packet `ahead` on for writing now.
        if len <= INLINE && c.taken == c.taken_at_send[to] {
            io.prefetch_for_write(to, self.line_off(self.me, seq + self.ahead));
        }
        c.taken_at_send[to] = c.taken;
        Ok(())
    }

    fn head_at(&self, io: &impl Area, off: usize) -> Result<Head> {
        let mut b = [0u8; SIGNAL - META];
        io.read(off + META, &mut b)?;
        let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Ok(Head {
            meta: b[..8].try_into().expect("8 bytes"),
            len: word(8) as usize,
            aux: word(12),
        })
    }

    #[inline]
    fn peek(&self, io: &impl Area, from: usize) -> Result<Option<Head>> {
        let seq = self.c.borrow().recvd[from] + 1;
        let off = self.line_off(from, seq);
        if io.value(off + SIGNAL)? < seq {
            return Ok(None);
        }
        self.head_at(io, off).map(Some)
    }

    #[inline]
    fn take_if(
        &self,
        io: &impl Memory,
        from: usize,
        dst: &mut [u8],
        accept: impl FnOnce(&Head) -> Option<usize>,
    ) -> Result<Option<Head>> {
        let seq = self.c.borrow().recvd[from] + 1;
        let off = self.line_off(from, seq);
        if io.value(off + SIGNAL)? < seq {
            return Ok(None);
        }
        let h = self.head_at(io, off)?;
        let Some(n) = accept(&h) else {
            return Ok(None);
        };
        let n = n.min(h.len).min(dst.len());
        io.read(self.data_off(seq, off, h.len), &mut dst[..n])?;
        self.consumed(io, from, seq)?;
        Ok(Some(h))
    }

    #[inline(always)]
    fn wait(&self, io: &impl Memory, from: usize, hook: Hook<'_>) -> Result<Head> {
        let seq = self.c.borrow().recvd[from] + 1;
        let off = self.line_off(from, seq);
        self.wait_word(io, off + SIGNAL, seq, from, hook)
            .map_err(|e| waited_for(io, e, from, "a packet"))?;
        self.head_at(io, off)
    }

    #[inline(always)]
    fn wait_word(
        &self,
        io: &impl Memory,
        off: usize,
        v: u64,
        by: usize,
        hook: Hook<'_>,
    ) -> Result<u64> {
        let seen = io.value(off)?;
        if seen >= v {
            return Ok(seen);
        }
        self.pay(io)?;
        io.wait(off, v, by, hook)
    }

    fn next_word(&self, from: usize) -> (usize, u64) {
        let seq = self.c.borrow().recvd[from] + 1;
        (self.line_off(from, seq) + SIGNAL, seq)
    }

    #[inline]
    fn take(&self, io: &impl Memory, from: usize, h: &Head, dst: &mut [u8]) -> Result<()> {
        let seq = self.c.borrow().recvd[from] + 1;
        let off = self.line_off(from, seq);
        let n = dst.len().min(h.len);
        io.read(self.data_off(seq, off, h.len), &mut dst[..n])?;
        self.consumed(io, from, seq)
    }

    #[inline]
    fn take_with<R>(
        &self,
        io: &impl Memory,
        from: usize,
        h: &Head,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let seq = self.c.borrow().recvd[from] + 1;
        let off = self.line_off(from, seq);
        #[allow(unsafe_code)]
        // SAFETY: the sender wrote this packet's line and payload completely before raising
        // its sequence word to `seq` (the caller saw it arrive), and writes the line again only
        // for packet seq + lines and the payload only for a later packet, both of which it
        // sends only once our credit word says we consumed packet `seq` ("Flow control"
        // above). That credit is written by `consumed` below, after `f` is done with the
        // bytes, so nothing writes them while `f` holds them.
        let r = unsafe { io.look(self.data_off(seq, off, h.len), h.len, f)? };
        self.consumed(io, from, seq)?;
        Ok(r)
    }

    /// Where the payload of packet `seq` from `from` lies, `len` bytes, its line at `off`: in
    /// the line, or in its slot's payload (`payload_off`).
    fn data_off(&self, seq: u64, off: usize, len: usize) -> usize {
        if len <= INLINE {
            off
        } else {
            self.payload_off(seq, off, len)
        }
    }

    #[inline]
    fn consumed(&self, io: &impl Memory, from: usize, seq: u64) -> Result<()> {
        let mut c = self.c.borrow_mut();
        c.recvd[from] = seq;
        c.taken += 1;
        if seq & (self.ack_every - 1) != 0 {
            return Ok(());
        }
        // A credit still owed from the previous interval means a stream, not a ping-pong:
        // pay now, or the sender would run out of slots waiting for it.
        let behind = c.owed[from] != 0;
        c.owed[from] = seq;
        c.owing = true;
        drop(c);
        if behind { self.pay_slow(io) } else { Ok(()) }
    }

    #[inline]
    fn pay(&self, io: &impl Memory) -> Result<()> {
        if !self.c.borrow().owing {
            return Ok(());
        }
        self.pay_slow(io)
    }

    /// [`Protocol::pay`] after a packet, unless the sends go together.
    #[inline]
    fn pay_after_send(&self, io: &impl Memory) -> Result<()> {
        let c = self.c.borrow();
        if !c.owing || c.together != 0 {
            return Ok(());
        }
        drop(c);
        self.pay_slow(io)
    }

    #[inline(never)]
    fn pay_slow(&self, io: &impl Memory) -> Result<()> {
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
            match io.set(q, self.me * CREDIT, seq) {
                Err(e) if e.kind() == ErrorKind::InvalidHandle => {}
                r => r?,
            }
        }
        Ok(())
    }
}

/// A failed wait's error, naming member `q` (by its world rank) if it names nobody yet.
#[cold]
fn waited_for(io: &impl Memory, e: Error, q: usize, what: &str) -> Error {
    let rank = io.rank(q);
    e.waiting_for(rank, format_args!("{what} from rank {rank}"))
}

/// Model checks of the ring protocol (see `transport::model`): two ranks run the real
/// [`Protocol`] over loom's memory — each 8-byte word of a ring area a signal word where the
/// layout has one (with the transport's own wait and signal), else a data word whose
/// every read and write loom checks against the others — so a slot overwritten before its
/// reader is done with it, or read before its writer is, fails the model, whatever the
/// bytes happen to be.
#[cfg(test)]
mod tests {
    use super::*;

    /// The collectives' slots are a power of two from 4 to 16 at every rank count, their lines a
    /// power of two and at least as many, their room for packets past a receiver's at least 3,
    /// and the ring area stays near 2 MiB up to 8 ranks.
    #[test]
    fn slots_by_rank_count() {
        let counts = (0..=1024).chain([usize::MAX / 2, usize::MAX]);
        for p in counts {
            let k = collective_slots(p);
            assert!(
                k.is_power_of_two() && (SLOTS..=MAX_SLOTS).contains(&k),
                "{p}: {k}"
            );
        }
        let want = [(1, 16), (2, 16), (3, 8), (4, 8), (5, 4), (8, 4), (64, 4)];
        for (p, k) in want {
            assert_eq!(collective_slots(p), k, "{p} ranks");
        }
        for p in 0..=1024 {
            let (k, l) = (collective_slots(p), collective_lines(p));
            assert!(l.is_power_of_two() && l >= k, "{p}: {l} lines, {k} slots");
        }
        for p in 0..=1024 {
            let s = Shape::collectives(p);
            assert!(s.ack_every <= s.slots as u64 && s.room() >= 3, "{p}: {s:?}");
        }
        let lines = [(2, 64), (3, 64), (8, 64), (512, 64)];
        for (p, l) in lines {
            assert_eq!(collective_lines(p), l, "{p} ranks");
        }
        // Parts of payloads where memory cut the slots; whole payloads at 2 ranks.
        let parts = [(2, false), (3, true), (4, true), (5, true), (512, true)];
        for (p, want) in parts {
            assert_eq!(Shape::collectives(p).parts, want, "{p} ranks");
        }
        for p in 2..=8 {
            let area = Shape::collectives(p).bytes(p);
            assert!(
                (1 << 20..=(2 << 20) + (64 << 10)).contains(&area),
                "{p}: {area}"
            );
        }
    }

    /// Two ranks' ring areas in plain memory, one thread; every `prefetch_for_write` noted.
    struct Plain {
        areas: std::rc::Rc<Vec<RefCell<Vec<u8>>>>,
        me: usize,
        prefetched: RefCell<Vec<(usize, usize)>>,
    }

    impl Plain {
        fn pair(shape: Shape) -> (Self, Self) {
            let areas: Vec<_> = (0..2)
                .map(|_| RefCell::new(vec![0u8; shape.bytes(2)]))
                .collect();
            let areas = std::rc::Rc::new(areas);
            let at = |me| Self {
                areas: areas.clone(),
                me,
                prefetched: RefCell::new(Vec::new()),
            };
            (at(0), at(1))
        }
    }

    impl Area for Plain {
        fn value(&self, off: usize) -> Result<u64> {
            let a = self.areas[self.me].borrow();
            Ok(u64::from_le_bytes(
                a[off..off + 8].try_into().expect("8 bytes"),
            ))
        }

        fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
            dst.copy_from_slice(&self.areas[self.me].borrow()[off..off + dst.len()]);
            Ok(())
        }

        #[allow(unsafe_code)]
        unsafe fn look<R>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
            Ok(f(&self.areas[self.me].borrow()[off..off + len]))
        }
    }

    impl Memory for Plain {
        fn put(&self, q: usize, off: usize, src: &[u8]) -> Result<()> {
            self.areas[q].borrow_mut()[off..off + src.len()].copy_from_slice(src);
            Ok(())
        }

        fn put_set(&self, q: usize, off: usize, src: &[u8], sig: usize, v: u64) -> Result<()> {
            self.put(q, off, src)?;
            self.set(q, sig, v)
        }

        fn set(&self, q: usize, off: usize, v: u64) -> Result<()> {
            self.put(q, off, &v.to_le_bytes())
        }

        fn wait(&self, off: usize, v: u64, _by: usize, _hook: Hook<'_>) -> Result<u64> {
            let seen = self.value(off)?;
            assert!(
                seen >= v,
                "a wait at {off} for {v} that one thread cannot end"
            );
            Ok(seen)
        }

        fn rank(&self, q: usize) -> u32 {
            crate::cast::rank_u32(q)
        }

        fn prefetch_for_write(&self, q: usize, off: usize) {
            self.prefetched.borrow_mut().push((q, off));
        }
    }

    /// At 2 ranks every payload takes its slot whole, past the sender's 64 header lines, the
    /// slots starting 1 KiB past a page boundary of the sender's part (as with 16 lines); a
    /// payload packet waits for the packet a lap of slots before it, a small one for the one a
    /// lap of lines before.
    #[test]
    fn two_ranks_take_whole_slots_past_64_lines() {
        let shape = Shape::collectives(2);
        assert_eq!((shape.lines, shape.slots, shape.parts), (64, 16, false));
        let r = Protocol::new(2, 0, shape);
        for from in 0..2 {
            let start = r.line_off(from, 1);
            let lines_end = start + shape.lines * LINE;
            for n in 0..3 * shape.lines {
                let seq = n as u64 + 1;
                let at = r.payload_off(seq, r.line_off(from, seq), 8 << 10) - start;
                let j = n % shape.slots;
                assert_eq!(at, 5 * 1024 + j * shape.pitch(), "packet {seq}");
                assert!(start + at >= lines_end && at + r.ch <= shape.block());
                assert_eq!(r.payload_off(seq, r.line_off(from, seq), 41), start + at);
            }
        }
        let mut c = r.c.borrow_mut();
        c.sent[1] = 100;
        assert_eq!(r.needed(&c, 1, 8), 101 - 64);
        assert_eq!(r.needed(&c, 1, 41), 101 - 16);
        assert_eq!(r.needed(&c, 1, 8 << 10), 101 - 16);
    }

    /// A sender streaming small packets takes the header line `ahead` packets on after each
    /// (wrapping around the lines); one that has taken a packet from its peer since its last
    /// send (a ping-pong, an exchange) does not, nor one sending a packet past its line.
    #[test]
    fn a_streaming_sender_takes_the_lines_ahead() {
        let shape = Shape {
            lines: 16,
            slots: 16,
            ack_every: 4,
            chunk: 1024,
            parts: true,
        };
        let (m0, m1) = Plain::pair(shape);
        let (r0, r1) = (Protocol::new(2, 0, shape), Protocol::new(2, 1, shape));
        assert_eq!(r0.ahead, 4);
        let small = [7u8; INLINE];
        // A stream: 0 sends 14 packets, 1 takes them after.
        for _ in 0..14 {
            assert!(r0.send(&m0, 1, &small, 0, [0; 8], None).unwrap());
        }
        let want: Vec<_> = (1..=14u64)
            .map(|seq| (1, r0.line_off(0, seq + 4)))
            .collect();
        assert_eq!(*m0.prefetched.borrow(), want);
        assert_eq!(
            want[12].1,
            r0.line_off(0, 1),
            "the 13th packet takes line 1 again"
        );
        let mut b = [0u8; INLINE];
        for _ in 0..14 {
            let h = r1.peek(&m1, 0).unwrap().expect("a packet");
            r1.take(&m1, 0, &h, &mut b).unwrap();
            assert_eq!(b, small);
        }
        r1.pay(&m1).unwrap();
        // A ping-pong: after taking 1's answer, 0's next packet takes no line ahead.
        m0.prefetched.borrow_mut().clear();
        for _ in 0..3 {
            assert!(r0.send(&m0, 1, &small, 0, [0; 8], None).unwrap());
            let h = r1.peek(&m1, 0).unwrap().expect("the ping");
            r1.take(&m1, 0, &h, &mut b).unwrap();
            assert!(r1.send(&m1, 0, &small, 0, [0; 8], None).unwrap());
            let h = r0.peek(&m0, 1).unwrap().expect("the pong");
            r0.take(&m0, 1, &h, &mut b).unwrap();
        }
        // The first ping still follows the stream; the other two follow a pong.
        assert_eq!(*m0.prefetched.borrow(), [(1, r0.line_off(0, 15 + 4))]);
        assert!(
            m1.prefetched.borrow().is_empty(),
            "1 answers what it has taken: no stream"
        );
        // A packet past its line streams without taking lines ahead.
        m0.prefetched.borrow_mut().clear();
        for _ in 0..2 {
            assert!(
                r0.send(&m0, 1, &[1u8; INLINE + 1], 0, [0; 8], None)
                    .unwrap()
            );
        }
        assert!(m0.prefetched.borrow().is_empty());
    }
}

#[cfg(test)]
mod model {
    use super::*;
    use crate::transport::model::{self, ModelCount, ModelWord, explore, failure};
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// Two slots of 64 bytes, credits every second packet (the most a shape allows): laps
    /// come round quickly.
    const SHAPE: Shape = Shape {
        lines: 2,
        slots: 2,
        ack_every: 2,
        chunk: 64,
        parts: true,
    };
    /// More lines than slots: small packets run ahead in lines, packets of up to 64 bytes in
    /// their line's half of a slot's 128-byte payload, larger ones take the whole payload.
    const DEEP: Shape = Shape {
        lines: 4,
        chunk: 128,
        ..SHAPE
    };
    /// More lines than slots without parts (the 2-rank collectives' form): small packets run
    /// ahead in lines, every payload takes its slot whole.
    const WHOLE: Shape = Shape {
        parts: false,
        ..DEEP
    };
    /// The same with a credit after every packet.
    const EVERY: Shape = Shape {
        ack_every: 1,
        ..SHAPE
    };
    const P: usize = 2;

    enum Word8 {
        Data(UnsafeCell<u64>),
        Signal(ModelWord),
    }

    /// One rank's ring area.
    struct Words {
        words: Vec<Word8>,
        sleepers: ModelCount,
    }

    #[allow(unsafe_code)]
    // SAFETY: shared between the model's threads on purpose: every access to a data word goes
    // through loom's `UnsafeCell`, which fails the model on any access not ordered after a
    // conflicting one — the property under test.
    unsafe impl Sync for Words {}

    impl Words {
        fn new(shape: Shape) -> Self {
            let layout = Protocol::new(P, 0, shape);
            let mut signal = vec![false; shape.bytes(P) / 8];
            for q in 0..P {
                signal[q * CREDIT / 8] = true;
                for seq in 1..=shape.lines as u64 {
                    signal[(layout.line_off(q, seq) + SIGNAL) / 8] = true;
                }
            }
            Self {
                words: signal
                    .into_iter()
                    .map(|s| {
                        if s {
                            Word8::Signal(ModelWord::new(0))
                        } else {
                            Word8::Data(UnsafeCell::new(0))
                        }
                    })
                    .collect(),
                sleepers: ModelCount::default(),
            }
        }

        fn signal(&self, off: usize) -> &ModelWord {
            match &self.words[off / 8] {
                Word8::Signal(w) if off % 8 == 0 => w,
                _ => panic!("the ring used bytes at {off} as a signal word"),
            }
        }

        /// Calls `f(word, bytes of the word, range of the buffer)` for the words that bytes
        /// `off..off + len` touch.
        fn each(&self, off: usize, len: usize, mut f: impl FnMut(&UnsafeCell<u64>, usize, usize)) {
            let mut at = off;
            while at < off + len {
                let (i, within) = (at / 8, at % 8);
                let n = (8 - within).min(off + len - at);
                match &self.words[i] {
                    Word8::Data(c) => f(c, within, at - off),
                    Word8::Signal(_) => {
                        panic!("the ring wrote bytes over the signal word at {}", i * 8)
                    }
                }
                at += n;
            }
        }

        #[allow(unsafe_code)]
        fn write(&self, off: usize, src: &[u8]) {
            self.each(off, src.len(), |c, within, from| {
                let n = (8 - within).min(src.len() - from);
                // SAFETY: loom checks this write against every other access of the word.
                c.with_mut(|p| unsafe {
                    let mut b = (*p).to_le_bytes();
                    b[within..within + n].copy_from_slice(&src[from..from + n]);
                    *p = u64::from_le_bytes(b);
                });
            });
        }

        #[allow(unsafe_code)]
        fn read(&self, off: usize, dst: &mut [u8]) {
            let len = dst.len();
            self.each(off, len, |c, within, from| {
                let n = (8 - within).min(len - from);
                // SAFETY: loom checks this read against every other access of the word.
                let b = c.with(|p| unsafe { *p }).to_le_bytes();
                dst[from..from + n].copy_from_slice(&b[within..within + n]);
            });
        }
    }

    /// How the model's memory misbehaves, to show that the models catch it.
    #[derive(Clone, Copy, PartialEq)]
    enum Fault {
        None,
        /// A transport that raises the signal before the data lands.
        SignalFirst,
        /// Credit words read one packet ahead of what the receiver handed back.
        CreditAhead,
    }

    /// The ring memory of rank `me`: every rank's area.
    struct Mem {
        areas: Arc<Vec<Words>>,
        me: usize,
        fault: Fault,
    }

    impl Area for Mem {
        fn value(&self, off: usize) -> Result<u64> {
            let v = self.areas[self.me].signal(off).value();
            Ok(if self.fault == Fault::CreditAhead && off < P * CREDIT {
                v + 1
            } else {
                v
            })
        }

        fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
            self.areas[self.me].read(off, dst);
            Ok(())
        }

        #[allow(unsafe_code)]
        unsafe fn look<R>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
            let area = &self.areas[self.me];
            let mut b = vec![0; len];
            area.read(off, &mut b);
            let r = f(&b);
            // A view is held until `f` returns: read the bytes again then, so that a write
            // while it was held (the window `take_with`'s SAFETY argument closes) is an access
            // loom checks against, and a changed byte a failed assertion.
            let mut again = vec![0; len];
            area.read(off, &mut again);
            assert_eq!(b, again, "bytes under a view changed while it was held");
            Ok(r)
        }
    }

    impl Memory for Mem {
        fn put(&self, q: usize, off: usize, src: &[u8]) -> Result<()> {
            self.areas[q].write(off, src);
            Ok(())
        }

        fn put_set(&self, q: usize, off: usize, src: &[u8], sig: usize, v: u64) -> Result<()> {
            if self.fault == Fault::SignalFirst {
                self.set(q, sig, v)?;
                return self.put(q, off, src);
            }
            self.put(q, off, src)?;
            self.set(q, sig, v)
        }

        fn set(&self, q: usize, off: usize, v: u64) -> Result<()> {
            let a = &self.areas[q];
            model::set(a.signal(off), &a.sleepers, v);
            Ok(())
        }

        fn wait(&self, off: usize, v: u64, _by: usize, _hook: Hook<'_>) -> Result<u64> {
            let a = &self.areas[self.me];
            Ok(model::wait(a.signal(off), &a.sleepers, v))
        }

        fn rank(&self, q: usize) -> u32 {
            crate::cast::rank_u32(q)
        }
    }

    /// Packet `i`: inline (8 bytes, every fourth) or in a payload slot (48 bytes), every byte
    /// `i`.
    fn packet(i: u8) -> Vec<u8> {
        vec![i; if i % 4 == 0 { 8 } else { 48 }]
    }

    /// Packet `i` for [`DEEP`]: inline, in a line's part of a payload, or the whole payload,
    /// every byte `i`. Packet 3 (whole) must wait for packet 1 (a part of the same slot) to be
    /// read, and packet 5 (a part) for packet 3, while their lines are free.
    fn mixed(i: u8) -> Vec<u8> {
        vec![
            i;
            match i % 4 {
                0 => 8,
                1 | 2 => 48,
                _ => 100,
            }
        ]
    }

    /// Packet `i` with a payload past its line, every one (48 bytes).
    fn payloads(i: u8) -> Vec<u8> {
        vec![i; 48]
    }

    /// Packet `i` of a stream of small packets only: every one in its line.
    fn small(i: u8) -> Vec<u8> {
        vec![i; 8]
    }

    /// How a test makes packet `i`.
    type Make = fn(u8) -> Vec<u8>;

    /// Receives packet `i` from `from` by one of the three ways of consuming, and checks it.
    fn receive(ring: &Protocol, mem: &Mem, from: usize, i: u8, make: Make) {
        let h = ring.wait(mem, from, None).expect("wait");
        assert_eq!(
            (h.aux, h.meta),
            (u32::from(i), [i; 8]),
            "packet {i}: its header"
        );
        let want = make(i);
        let got = match i % 3 {
            0 => {
                let mut b = vec![0; h.len];
                ring.take(mem, from, &h, &mut b).expect("take");
                b
            }
            1 => ring
                .take_with(mem, from, &h, <[u8]>::to_vec)
                .expect("take_with"),
            _ => {
                let mut b = vec![0; want.len()];
                let t = ring.take_if(mem, from, &mut b, |_| Some(usize::MAX));
                assert_eq!(t.expect("take_if").map(|h| h.len), Some(want.len()));
                b
            }
        };
        assert_eq!(got, want, "packet {i}: its payload");
    }

    fn send(ring: &Protocol, mem: &Mem, to: usize, i: u8, make: Make) {
        let sent = ring.send(mem, to, &make(i), u32::from(i), [i; 8], Some(None));
        assert!(sent.expect("send"), "a waiting send returns when sent");
    }

    fn ranks(shape: Shape, fault: Fault) -> (Mem, Mem) {
        let areas = Arc::new(vec![Words::new(shape), Words::new(shape)]);
        let mem = |me| Mem {
            areas: areas.clone(),
            me,
            fault,
        };
        (mem(0), mem(1))
    }

    /// Rank 0 streams `n` packets made by `make` to rank 1 (two laps of the slots and more):
    /// they arrive whole and in order, and no slot is rewritten while rank 1 reads it.
    fn stream(n: u8, shape: Shape, fault: Fault, make: Make) {
        let (m0, m1) = ranks(shape, fault);
        let receiver = loom::thread::spawn(move || {
            let ring = Protocol::new(P, 1, shape);
            for i in 0..n {
                receive(&ring, &m1, 0, i, make);
            }
        });
        let ring = Protocol::new(P, 0, shape);
        for i in 0..n {
            send(&ring, &m0, 1, i, make);
        }
        receiver.join().unwrap();
    }

    #[test]
    fn a_stream_laps_the_slots_without_overwriting() {
        assert!(explore(2, || stream(5, SHAPE, Fault::None, packet)) > 1);
    }

    /// With more lines than slots: parts and whole payloads take turns in a slot (`mixed`),
    /// and parts of one slot's payload are in flight at once (`packet`: packets 1 and 3).
    #[test]
    fn a_stream_with_more_lines_than_payload_slots() {
        assert!(explore(2, || stream(6, DEEP, Fault::None, mixed)) > 1);
        assert!(explore(2, || stream(5, DEEP, Fault::None, packet)) > 1);
    }

    /// With more lines than slots and every payload whole: small packets run ahead while a
    /// payload waits for the packet a lap of slots before it (`mixed`: packets 1, 2 and 3 each
    /// take a whole slot; packet 3 needs packet 1 read, packet 4 only its line free).
    #[test]
    fn a_stream_with_whole_payloads_only() {
        assert!(explore(2, || stream(6, WHOLE, Fault::None, mixed)) > 1);
        assert!(explore(2, || stream(5, WHOLE, Fault::None, payloads)) > 1);
    }

    #[test]
    fn a_stream_with_a_credit_per_packet() {
        assert!(explore(2, || stream(4, EVERY, Fault::None, packet)) > 1);
    }

    /// Both ranks send and receive in turn (a ping-pong's pattern, where credits travel
    /// late, with the next send): nothing is lost, overwritten or stuck.
    #[test]
    fn both_ways_with_late_credits() {
        let runs = explore(2, || {
            let (m0, m1) = ranks(SHAPE, Fault::None);
            let other = loom::thread::spawn(move || {
                let ring = Protocol::new(P, 1, SHAPE);
                for i in 0..3 {
                    send(&ring, &m1, 0, i, packet);
                    receive(&ring, &m1, 0, i, packet);
                }
            });
            let ring = Protocol::new(P, 0, SHAPE);
            for i in 0..3 {
                send(&ring, &m0, 1, i, packet);
                receive(&ring, &m0, 1, i, packet);
            }
            other.join().unwrap();
        });
        assert!(runs > 1);
    }

    /// The models can fail: a transport that signals before the data is in place lets the
    /// reader at bytes still being written.
    #[test]
    fn a_signal_before_its_data_is_caught() {
        let e = failure(|| stream(3, SHAPE, Fault::SignalFirst, packet));
        assert!(e.contains("Causality violation"), "{e}");
    }

    /// ... and a credit one packet ahead lets the sender overwrite a payload or a line
    /// before it is read (loom sees the racing accesses, or the reader a later packet's
    /// bytes): lines and payloads in step, and small packets running ahead in more lines.
    #[test]
    fn a_credit_ahead_of_the_reader_is_caught() {
        let cases: [(Shape, Make); 3] = [(SHAPE, packet), (DEEP, small), (WHOLE, payloads)];
        for (shape, make) in cases {
            let e = failure(move || stream(6, shape, Fault::CreditAhead, make));
            assert!(
                e.contains("Causality violation") || e.contains(": its"),
                "{shape:?}: {e}"
            );
        }
    }
}
