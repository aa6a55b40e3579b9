//! Two-sided messages over one-sided writes (seed 003): send and receive with tags and
//! wildcards, non-blocking and persistent requests, probe — MPI's point-to-point semantics on a
//! [`Comm`], built from the fabric's puts and signals only.
//!
//! ```
//! use tca::{Comm, threads, p2p::{ANY_SOURCE, ANY_TAG}};
//!
//! let out = threads::run(2, |world| {
//!     let comm = Comm::world(world)?;
//!     if comm.rank() == 0 {
//!         comm.send(&[1.5f64, 2.5], 1, 7)?;
//!         Ok(0.0)
//!     } else {
//!         let mut buf = [0f64; 2];
//!         let st = comm.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
//!         assert_eq!((st.source, st.tag, st.count::<f64>()), (0, 7, 2));
//!         Ok(buf[0] + buf[1])
//!     }
//! })?;
//! assert_eq!(out[1], 4.0);
//! # Ok::<(), tca::Error>(())
//! ```
//!
//! # Protocols
//! - **Eager** (messages of at most [`Comm::eager_limit`] bytes, [`EAGER_DEFAULT`] unless
//!   `TCA_P2P_EAGER` says otherwise): the payload and its header (tag, kind, type) travel as one
//!   packet of the communicator's p2p ring ([`crate::fabric::ring`]) in the receiver's memory,
//!   with the receiver returning credits. A message of up to 40 bytes is one cache line. A
//!   packet that arrives before its receive is copied to the unexpected queue, freeing its slot.
//!   A send that finds the pair's ring full waits in an out queue (its data copied); when
//!   credit comes back, the small messages (up to 256 bytes; half a packet, 16 KiB at 2
//!   ranks, to a rank across a network, where a packet is a network message) at the queue's
//!   front go together
//!   as one packet, a *bundle*, so a window of `isend`s that outruns the receiver costs one
//!   slot and one credit per bundle instead of per message (`tca bench osu_bw`: 13-15% less
//!   time per 8-byte message, BENCHMARKS.md).
//! - **Rendezvous** (larger messages), as seed 003: the sender writes a request-to-send packet
//!   naming one of its [`RDV_SLOTS`] rendezvous slots; the receiver, once the message matches a
//!   receive, writes its buffer's handle, offset and length into the sender's *remote address
//!   buffer* slot; the sender puts the data once, straight there, and raises the slot's done
//!   word in the receiver's memory (data before signal: the fabric's put_signal). A receive
//!   into a registered segment ([`Comm::irecv_into`]) gets the data in place. A receive into
//!   plain memory of at least [`Comm::cma_min`] bytes (16 MiB by default) whose caller waits on
//!   it (a blocking receive, or the wait of a receive request) posts the buffer's own address
//!   when the sender can reach it by cross-memory attach ([`cross_memory_attach`]; ranks of
//!   one node): the sender writes the data once, straight from its buffer into the
//!   receiver's. A receive the caller waits on into one of the communicator's
//!   [`crate::Buffer`]s (tca's memory) from a rank of this node takes every rendezvous that
//!   way too, as one put, whatever `TCA_CMA` says. Otherwise (a smaller message into plain
//!   memory, a match during another call, a rank across the network, `TCA_CMA=off`) the data
//!   comes through a pooled registered landing buffer and one copy.
//! - **Bound channels** (persistent requests between registered segments,
//!   [`Comm::send_init_from`] and [`Comm::recv_init_into`]; QUDA's ghost zones): matched once,
//!   on their first round, by a binding packet that carries the round number; the receiver
//!   answers by writing its address once into the sender's channel entry. From then on the
//!   receiver's `start` posts its buffer ahead by raising the entry's ready word (`2k` for
//!   round k), and the sender's `start` — or its first progress after the word moves — claims
//!   the round (compare-and-swap to `2k+1`) and starts a prebuilt chain: the data, straight
//!   from its segment into the receiver's, then the receiver's done word. One copy, no packet,
//!   no handshake and no allocation per round. A receiver that closes its end revokes the
//!   ready word by compare-and-swap, so a round is either never written or waited for.
//!   Channels match only channels (as MPI 4's partitioned requests match only each other);
//!   [`CHANNELS`] may be open per ordered pair.
//!
//! # Matching
//! MPI's rules: a receive takes the first message (in arrival order) that matches its source
//! and tag; messages between one pair that both match a receive are not overtaken (each pair's
//! packets are one ordered ring); receives match in the order they were posted. A message
//! longer than its receive buffer is an [`ErrorKind::Truncated`] error naming both lengths
//! (the buffer holds the first part, as in MPI). Element types travel with the message: a
//! typed receive of another type is an error ([`Comm::recv_bytes`] takes anything).
//!
//! # Progress
//! Everything moves inside the calls: a wait, test, probe or blocking call of a communicator
//! drains every peer's ring (matching or queueing what came), answers requests-to-send and
//! puts the data of rendezvous sends whose receivers are ready. A rank inside a collective of
//! the same communicator does the same whenever it owes peers work (queued packets, data
//! for a ready receiver), and a communicator being dropped delivers its orphaned sends while
//! peers take them. A rank that computes for a long time between calls delays its peers'
//! rendezvous until its next call, unless it computes inside [`Comm::overlap`] with
//! `TCA_P2P_PROGRESS=thread` (its thread then polls while the computation runs on another:
//! seed 003's polling thread), or a progress thread owns its world and runs its sends and
//! receives ([`crate::offload::Proxy`]).
//!
//! A blocking receive from one source, with nothing else posted or queued, watches that
//! source's ring and copies a matching eager message straight into the buffer: no request is
//! made (the path a ping-pong takes).
//!
//! # Requests and safety
//! A [`Request`] borrows its buffer. The engine never keeps a pointer to user memory:
//! non-blocking sends copy their data when they start (into the ring, or a pooled stash when
//! the ring is full or the message goes by rendezvous), and a receive matched while another
//! request is being waited on lands in a pooled stash or landing buffer, copied out when its
//! own wait or test runs. Dropping a request is therefore always safe: an unmatched receive is
//! cancelled, a started send still goes out, a matched receive is completed into the pool and
//! discarded. Waiting on a finished request is an error.
//!
//! # Memory per rank and communicator of P ranks
//! [`p2p_bytes`]`(P) = P*128 + P*8*(128 + CH/2) + 2*P*(8 + 16)*64`, CH the collectives' chunk
//! (the ring has 8 header lines and 8 slots, `2 * fabric::ring::SLOTS`, of half the
//! collectives' chunk and a line, then the rendezvous remote address buffers and done words,
//! then the channels' address entries and done words): 0.5 MiB at P = 2, 2 MiB at P = 8, 8-9
//! MiB from 32 to 512 ranks, P x 20.1 KiB beyond. Plus pooled
//! stash and landing buffers that grow to the largest messages in flight at once and are reused.

mod engine;
mod ready;
mod request;

pub(crate) use engine::Engine;
pub use engine::{CHANNELS, RDV_SLOTS, p2p_bytes};
pub use request::{Persistent, Request, test_all, wait_all, wait_any};

use crate::Comm;
use crate::coll::Element;
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::Segment;
use engine::{Dest, Hand};

/// Default eager limit in bytes, capped by the ring's packet capacity (32 KiB up to 32 ranks).
/// Measured on shared memory (BENCHMARKS.md, "Two-sided messages"): eager beat rendezvous at
/// every size up to that capacity (4 KiB 0.58 against 0.85 us, 32 KiB 4.74 against 4.85-4.93),
/// so the crossover lies beyond it and the limit is the capacity.
pub const EAGER_DEFAULT: usize = 32 << 10;

/// Whether the kernel lets ranks of this node write into each other's plain memory by
/// cross-memory attach (`process_vm_writev`, as Open MPI's and MPICH's shared-memory
/// transports do). Which messages go that way: [`Comm::cma_min`].
pub fn cross_memory_attach() -> bool {
    crate::fabric::World::cma_permitted()
}

/// Default of [`Comm::cma_min`]: the smallest rendezvous message written straight into a
/// plain receive buffer by cross-memory attach. Measured on the development machine
/// (BENCHMARKS.md, "Single-copy rendezvous"): the kernel's copy runs at ~13 GB/s there, while
/// the landing buffer's two user-space copies run at 40-47 GB/s each as long as the pooled
/// buffer stays in the last-level cache. Two processes' blocking ping-pong, cross-memory
/// attach / landing buffer: 0.64-0.74 at 64-256 KiB, 1.1-1.8 at 512 KiB-1 MiB, about 1 at
/// 4 MiB, 0.66-1.25 at 16-64 MiB (medians 0.99-1.02). From 16 MiB on it is as fast within
/// noise, and it saves a landing buffer of the message's size; `TCA_CMA=0` takes every
/// rendezvous that way.
pub const CMA_DEFAULT: usize = 16 << 20;

/// Which sender a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Any member (`MPI_ANY_SOURCE`).
    Any,
    /// This communicator rank only.
    Rank(u32),
}

/// Which tag a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    /// Any tag (`MPI_ANY_TAG`).
    Any,
    /// This tag only.
    Is(i32),
}

/// A receive from any source.
pub const ANY_SOURCE: Source = Source::Any;
/// A receive of any tag.
pub const ANY_TAG: Tag = Tag::Any;

impl From<u32> for Source {
    fn from(r: u32) -> Self {
        Source::Rank(r)
    }
}

impl From<i32> for Tag {
    fn from(t: i32) -> Self {
        Tag::Is(t)
    }
}

/// What a completed operation reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The sender's communicator rank (for a send: this rank's peer is not reported; 0).
    pub source: u32,
    /// The message's tag.
    pub tag: i32,
    /// The message's length in bytes.
    pub bytes: usize,
}

impl Status {
    pub(crate) fn send() -> Self {
        Self {
            source: 0,
            tag: 0,
            bytes: 0,
        }
    }

    /// The message's length in elements of `T` (`MPI_Get_count`).
    pub fn count<T: Element>(&self) -> usize {
        self.bytes / std::mem::size_of::<T>()
    }
}

fn bad_tag(t: i32) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("tag {t} is negative: tags are 0..={}", i32::MAX),
    )
}

impl<'w> Comm<'w> {
    fn peer(&self, r: u32) -> Result<usize> {
        if r >= self.size() {
            return Err(Error::new(
                ErrorKind::InvalidRank,
                format!(
                    "rank {r} is not in this communicator of {} ranks",
                    self.size()
                ),
            ));
        }
        Ok(r as usize)
    }

    /// Checks what a receive or probe accepts: a member (or any) and a tag (or any).
    fn selector(&self, src: Source, tag: Tag) -> Result<(Source, Tag)> {
        if let Source::Rank(r) = src {
            self.peer(r)?;
        }
        match tag {
            Tag::Is(v) if v < 0 => Err(bad_tag(v)),
            t => Ok((src, t)),
        }
    }

    fn send_tag(t: i32) -> Result<i32> {
        if t < 0 { Err(bad_tag(t)) } else { Ok(t) }
    }

    /// Messages of at most this many bytes go eagerly; larger ones by rendezvous.
    pub fn eager_limit(&self) -> usize {
        self.engine().eager_limit()
    }

    /// Bytes this rank holds for two-sided messages on this communicator: the registered
    /// segment (rings, remote address buffers, done words) and the pooled stash and landing
    /// buffers.
    pub fn p2p_footprint(&self) -> (usize, usize) {
        self.engine().footprint()
    }

    /// The smallest rendezvous message that this rank, receiving into plain memory, takes by
    /// cross-memory attach — written once by its sender, straight into the receive buffer —
    /// or `None` if none does (`TCA_CMA=off`, a simulated network, or the kernel forbids it:
    /// see [`cross_memory_attach`]). Default [`CMA_DEFAULT`], or `TCA_CMA` in bytes. Senders
    /// across the network are never asked to.
    pub fn cma_min(&self) -> Option<usize> {
        // On a simulated network every peer is across it.
        self.engine()
            .cma_min()
            .filter(|_| self.world_ref().simulated().is_none())
    }

    /// Whether a rendezvous from member `src` of at least [`Comm::cma_min`] bytes into this
    /// rank's plain memory is written by cross-memory attach: `src` is a rank of this node
    /// reached through shared memory, and `cma_min` is not `None`.
    pub fn cma_reaches(&self, src: u32) -> Result<bool> {
        self.peer(src)?;
        let r = self.world_rank(src).expect("a member has a world rank");
        Ok(self.cma_min().is_some() && self.world_ref().cma_reaches(r))
    }

    /// Sets [`Comm::cma_min`] for this rank's receives on this communicator (`None`: never).
    pub fn set_cma_min(&self, bytes: Option<usize>) {
        self.engine().set_cma_min(bytes);
    }

    fn send_raw(&self, data: &[u8], dst: u32, tag: i32, ty: u8) -> Result<()> {
        let to = self.peer(dst)?;
        let tag = Self::send_tag(tag)?;
        let eng = self.engine();
        let w = self.world_ref();
        let Some(id) = eng.send(w, to, tag, ty, data, true)? else {
            return Ok(());
        };
        let r = eng.wait_with(w, id, &mut Hand::Send(data), || self.progress_scope());
        if r.is_err() {
            eng.drop_req(id);
        }
        r.map(|_| ())
    }

    fn recv_raw(&self, buf: &mut [u8], src: Source, tag: Tag, ty: u8) -> Result<Status> {
        let (src, tag) = self.selector(src, tag)?;
        let eng = self.engine();
        let w = self.world_ref();
        // The fast path watches one ring only: not while started collectives need moving on.
        if let Source::Rank(q) = src
            && !self.scope_pending()
            && let Some(st) = eng.recv_fast(w, q as usize, tag, ty, buf)?
        {
            return Ok(st);
        }
        let mut hand = Hand::Recv(buf);
        let cap = match &hand {
            Hand::Recv(b) => b.len(),
            _ => 0,
        };
        // The call waits right here: a rendezvous may write straight into `buf`.
        let id = eng.recv(w, src, tag, cap, ty, Dest::Direct, &mut hand)?;
        let r = eng.wait_with(w, id, &mut hand, || self.progress_scope());
        if r.is_err() {
            eng.drop_req(id);
        }
        r
    }

    /// Sends `buf` to communicator rank `dst` with `tag` (`MPI_Send`): returns when `buf` may
    /// be reused (eager: at once, if the receiver's ring has room; rendezvous: once the data
    /// is in the receiver's buffer).
    pub fn send<T: Element>(&self, buf: &[T], dst: u32, tag: i32) -> Result<()> {
        self.send_raw(bytemuck::cast_slice(buf), dst, tag, T::CODE)
    }

    /// [`Comm::send`] of raw bytes: any typed or byte receive takes it.
    pub fn send_bytes(&self, buf: &[u8], dst: u32, tag: i32) -> Result<()> {
        self.send_raw(buf, dst, tag, 0)
    }

    /// Receives a message matching `src` and `tag` into `buf` (`MPI_Recv`).
    pub fn recv<T: Element>(
        &self,
        buf: &mut [T],
        src: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Status> {
        self.recv_raw(
            bytemuck::cast_slice_mut(buf),
            src.into(),
            tag.into(),
            T::CODE,
        )
    }

    /// [`Comm::recv`] into raw bytes: takes a message of any element type.
    pub fn recv_bytes(
        &self,
        buf: &mut [u8],
        src: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Status> {
        self.recv_raw(buf, src.into(), tag.into(), 0)
    }

    /// Sends `send` to `dst` and receives into `recv` from `src` at the same time
    /// (`MPI_Sendrecv`): no deadlock when every rank does it at once.
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<T: Element>(
        &self,
        send: &[T],
        dst: u32,
        send_tag: i32,
        recv: &mut [T],
        src: impl Into<Source>,
        recv_tag: impl Into<Tag>,
    ) -> Result<Status> {
        let mut r = self.irecv(recv, src, recv_tag)?;
        self.send(send, dst, send_tag)?;
        r.wait()
    }

    /// [`Comm::sendrecv`] with one buffer: sends `buf`, then receives into it
    /// (`MPI_Sendrecv_replace`).
    pub fn sendrecv_replace<T: Element>(
        &self,
        buf: &mut [T],
        dst: u32,
        send_tag: i32,
        src: impl Into<Source>,
        recv_tag: impl Into<Tag>,
    ) -> Result<Status> {
        let to = self.peer(dst)?;
        let tag = Self::send_tag(send_tag)?;
        let eng = self.engine();
        let w = self.world_ref();
        // The outgoing copy is taken first (isend copies), so receiving into `buf` is safe.
        let sent = eng.send(w, to, tag, T::CODE, bytemuck::cast_slice(buf), false)?;
        let st = self.recv(buf, src, recv_tag);
        if let Some(id) = sent {
            let r = eng.wait(w, id, &mut Hand::None);
            if r.is_err() {
                eng.drop_req(id);
            }
            r?;
        }
        st
    }

    /// Starts a send (`MPI_Isend`). The data is copied when it starts, so `buf` is free at
    /// once; the request completes when the message has left.
    pub fn isend<T: Element>(&self, buf: &[T], dst: u32, tag: i32) -> Result<Request<'_>> {
        let to = self.peer(dst)?;
        let tag = Self::send_tag(tag)?;
        let id = self.engine().send(
            self.world_ref(),
            to,
            tag,
            T::CODE,
            bytemuck::cast_slice(buf),
            false,
        )?;
        Ok(Request::send(self, id))
    }

    /// Starts a receive into `buf` (`MPI_Irecv`); `buf` is borrowed until the request
    /// completes or is dropped.
    pub fn irecv<'a, T: Element>(
        &'a self,
        buf: &'a mut [T],
        src: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Request<'a>> {
        let (src, tag) = self.selector(src.into(), tag.into())?;
        let buf: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let mut hand = Hand::Recv(buf);
        let cap = match &hand {
            Hand::Recv(b) => b.len(),
            _ => 0,
        };
        let id = self.engine().recv(
            self.world_ref(),
            src,
            tag,
            cap,
            T::CODE,
            Dest::Plain,
            &mut hand,
        )?;
        let Hand::Recv(buf) = hand else {
            unreachable!("built above")
        };
        Ok(Request::recv(self, id, buf))
    }

    /// Starts a receive of `len` bytes into this rank's registered segment `seg` at `off`: a
    /// rendezvous message is put there directly by its sender (one copy in all, as seed 003's
    /// receive buffers in PEACH2-reachable memory).
    pub fn irecv_into<'a>(
        &'a self,
        seg: &'a Segment,
        off: usize,
        len: usize,
        src: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Request<'a>> {
        let (src, tag) = self.selector(src.into(), tag.into())?;
        self.own_range(seg, off, len)?;
        let h = seg.handle();
        let w = self.world_ref();
        let mut hand = Hand::RecvSeg(seg, off, len);
        let id = self
            .engine()
            .recv(w, src, tag, len, 0, Dest::Seg(h, off), &mut hand)?;
        Ok(Request::recv_seg(self, id, seg, off, len))
    }

    /// Waits until a message matching `src` and `tag` can be received, and says what it is
    /// (`MPI_Probe`).
    pub fn probe(&self, src: impl Into<Source>, tag: impl Into<Tag>) -> Result<Status> {
        let (src, tag) = self.selector(src.into(), tag.into())?;
        self.engine().probe(self.world_ref(), src, tag)
    }

    /// [`Comm::probe`] without waiting (`MPI_Iprobe`).
    pub fn iprobe(&self, src: impl Into<Source>, tag: impl Into<Tag>) -> Result<Option<Status>> {
        let (src, tag) = self.selector(src.into(), tag.into())?;
        self.engine().iprobe(self.world_ref(), src, tag)
    }

    /// Checks a registered buffer of this rank: `len` bytes of `seg` at `off`.
    fn own_range(&self, seg: &Segment, off: usize, len: usize) -> Result<()> {
        let h = seg.handle();
        let w = self.world_ref();
        if h.rank() != w.rank() || h.job() != w.job_id() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a message segment must be one of this rank's own segments",
            ));
        }
        if off.checked_add(len).is_none_or(|e| e > seg.len()) {
            return Err(crate::transport::out_of_bounds(&h, off, len));
        }
        Ok(())
    }

    /// One end of a *bound channel*, the sending one: a persistent send of `len` bytes of
    /// this rank's registered segment `seg` at `off` to `dst` with `tag`. Its first start is
    /// matched, once, with a [`Comm::recv_init_into`] of `dst` (source this rank, same tag,
    /// first posted first; channels never match ordinary sends and receives), as MPI 4's
    /// partitioned requests match once at their first start. From then on every round is seed
    /// 003's transfer with the handshake gone: the receiver's start raises a ready word in
    /// this rank's memory (its address was given once), this rank's start — or the first
    /// progress after the ready word moves — puts the data straight from `seg` into the
    /// receiver's segment and raises its done word: one copy, no packet, no allocation.
    ///
    /// `seg` is read when the round goes out, which may be after `start` returns: do not
    /// change those bytes until the round completes (`wait`/`test`), as with any MPI send
    /// buffer. Dropping the request while a round is under way lets the round go out
    /// (the engine keeps the segment's memory alive), and closes the channel.
    ///
    /// ```
    /// use tca::{Comm, threads, p2p::Persistent};
    ///
    /// threads::run(2, |world| {
    ///     let comm = Comm::world(world)?;
    ///     let peer = 1 - comm.rank();
    ///     let (face, ghost) = (world.alloc(4096)?, world.alloc(4096)?);
    ///     let mut ops = [
    ///         comm.recv_init_into(&ghost, 0, 4096, peer, 0)?,
    ///         comm.send_init_from(&face, 0, 4096, peer, 0)?,
    ///     ];
    ///     for step in 0..100u8 {
    ///         face.write(0, &[step; 4096])?; // the face of this step
    ///         Persistent::start_all(&mut ops)?;
    ///         Persistent::wait_all(&mut ops)?;
    ///         let mut got = [0u8; 1];
    ///         ghost.read(4095, &mut got)?;
    ///         assert_eq!(got[0], step);
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), tca::Error>(())
    /// ```
    pub fn send_init_from<'a>(
        &'a self,
        seg: &'a Segment,
        off: usize,
        len: usize,
        dst: u32,
        tag: i32,
    ) -> Result<Persistent<'a>> {
        let to = self.peer(dst)?;
        let tag = Self::send_tag(tag)?;
        self.own_range(seg, off, len)?;
        if u32::try_from(len).is_err() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("a message of {len} bytes is over the 4 GiB limit of one message"),
            ));
        }
        Ok(Persistent::chan_send(self, seg, (off, len), to, tag))
    }

    /// The receiving end of a bound channel (see [`Comm::send_init_from`]): rounds of up to
    /// `len` bytes from `src` with `tag` into this rank's registered segment `seg` at `off`.
    /// A message longer than `len` is a truncation error, every round. Dropping the request
    /// closes the channel: a round under way is revoked, or, if its sender already claimed it,
    /// waited for — nothing lands in `seg` afterwards.
    pub fn recv_init_into<'a>(
        &'a self,
        seg: &'a Segment,
        off: usize,
        len: usize,
        src: u32,
        tag: i32,
    ) -> Result<Persistent<'a>> {
        let from = self.peer(src)?;
        let tag = Self::send_tag(tag)?;
        self.own_range(seg, off, len)?;
        Ok(Persistent::chan_recv(self, seg, (off, len), from, tag))
    }

    /// A persistent send (`MPI_Send_init`): set up once, started with
    /// [`Persistent::start`] each iteration.
    pub fn send_init<'a, T: Element>(
        &'a self,
        buf: &'a [T],
        dst: u32,
        tag: i32,
    ) -> Result<Persistent<'a>> {
        let to = self.peer(dst)?;
        let tag = Self::send_tag(tag)?;
        Ok(Persistent::send(
            self,
            bytemuck::cast_slice(buf),
            to,
            tag,
            T::CODE,
        ))
    }

    /// A persistent receive (`MPI_Recv_init`).
    pub fn recv_init<'a, T: Element>(
        &'a self,
        buf: &'a mut [T],
        src: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Persistent<'a>> {
        let (src, tag) = self.selector(src.into(), tag.into())?;
        Ok(Persistent::recv(
            self,
            bytemuck::cast_slice_mut(buf),
            src,
            tag,
            T::CODE,
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::{Comm, threads};

    /// A window of small sends that outruns its receiver (asleep for its first 30 ms) fills
    /// the ring, and what queues behind it goes in bundles: every message arrives, in order.
    #[test]
    fn a_window_that_outruns_the_receiver_goes_in_bundles() {
        let out = threads::run(2, |w| {
            let c = Comm::world(w)?;
            if c.rank() == 0 {
                let msgs: Vec<[u8; 8]> = (0..200u64).map(u64::to_le_bytes).collect();
                let mut reqs = msgs
                    .iter()
                    .map(|m| c.isend(m, 1, 3))
                    .collect::<crate::Result<Vec<_>>>()?;
                super::wait_all(&mut reqs)?;
                Ok(c.engine().bundles_sent())
            } else {
                std::thread::sleep(std::time::Duration::from_millis(30));
                for i in 0..200u64 {
                    let mut b = [0u8; 8];
                    c.recv(&mut b, 0, 3)?;
                    assert_eq!(u64::from_le_bytes(b), i);
                }
                Ok(c.engine().bundles_sent())
            }
        })
        .unwrap();
        assert!(out[0] > 0, "no bundle sent: {out:?}");
        assert_eq!(out[1], 0);
    }
}
