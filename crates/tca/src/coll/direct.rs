//! Single-copy collectives: on one node, a large collective whose buffers lie in tca's memory
//! ([`Comm::buffer`]) reads each peer's data where it lies, straight into the buffer it is
//! meant for, and a reduction combines the inputs where they lie, piece by piece into the
//! result (each piece stays in the cache while every input is combined into it). The
//! channel algorithms copy every byte twice (the sender into a slot of the receiver's ring,
//! the receiver out of it, chunk by chunk); here each byte is copied once, by its reader (or,
//! in a gather, a large reduce and an allreduce, by its writer), and the only messages are a
//! few small ones per pair (seed 003's remote address buffer: where the data is; then: done
//! with it). Open MPI's and MPICH's shared-memory transports do the same
//! with XPMEM or cross-memory attach for ordinary memory; tca's own memory needs neither (and
//! this machine's kernel copy is a quarter of `memcpy`'s speed: BENCHMARKS.md, "Single-copy
//! rendezvous by cross-memory attach").
//!
//! # The protocol
//! 1. *Offers*: every rank whose buffer is read sends each reader an offer through the
//!    channel: the handle of the buffer's segment, the offset and the length of the slice, or
//!    "not in tca's memory". Who offers to whom is fixed by the collective (the root to all in
//!    a broadcast and scatter; all to the root in a small reduce; all to all otherwise). In a
//!    gather and a reduce of [`REDUCE_SPLIT_MIN`] bytes and more the readers are also writers:
//!    the root offers its receive buffer too, and the others write their blocks (a gather) or
//!    fold their parts (a reduce) into it, then say done; where the root's is not in tca's
//!    memory, the root reads the others' buffers instead. Among few ranks with a core each, a
//!    broadcast of [`BCAST_SPLIT_MIN`] bytes and more is offered all to all, and every rank
//!    (the root too) copies its part of the root's buffer into every other rank's; an
//!    allgather's ranks offer their receive buffers and write their blocks into all of them.
//!    An allreduce's ranks offer both buffers, and each folds a part of every rank's vector
//!    and writes it into every rank's receive buffer.
//! 2. *Reads*: a reader with every offer it needs copies (or reduces) from the peers' memory.
//!    Bounds, key and the offered length (against the length this rank expects: a mismatch
//!    between ranks is an error here, not a wrong result) are checked first.
//! 3. *Done*: each reader tells each owner it is done; an owner returns only then, so it
//!    never changes its buffer under a reader.
//!
//! Where an offer says "not in tca's memory", every rank falls back alike, to the
//! communicator's channel algorithm for the call, or where the root can still read every
//! buffer it needs (a gather whose root's receive buffer is ordinary memory, a large reduce
//! whose root's are), to the root reading them; every rank has learnt the same thing: in
//! the all-to-all forms and a large reduce every rank sees every offer; in a broadcast and scatter every reader sees
//! the root's (and in a gather, the root's receive buffer); where a gather's or small
//! reduce's root reads the others' buffers only the root sees their offers, and tells the
//! others which way it goes in the message that would otherwise say "done".
//!
//! # When
//! Only in `broadcast`, `scatter`, `gather`, `reduce`, `allgather`, `alltoall`, `allreduce` and
//! `reduce_scatter`, blocking or started in a scope (`ibroadcast` ...; not the in-place forms,
//! whose one buffer is both read and written), on a communicator that allocated a buffer (the flag
//! is set on every member by the collective [`Comm::buffer`], so every member takes the same branch
//! without a message), whose members are all on this node and reached through shared memory (a
//! simulated or network transport has only writes: the papers' hardware), with no algorithm forced,
//! and from [`SINGLE_COPY_MIN`] bytes on (`TCA_SINGLE_COPY`, `Comm::set_single_copy_min`; a
//! rooted collective by default from [`SINGLE_COPY_ROOTED_MIN`]); an allreduce so only up to
//! [`SINGLE_COPY_ALLREDUCE_RANKS`] ranks, each with a core, and beyond from
//! [`ALLREDUCE_CROWDED_MIN`] bytes. With more ranks than cores the threshold is
//! [`SINGLE_COPY_MIN_CROWDED`]. Rank 0's settings are every member's (sent when the
//! communicator is made). An error in the middle of the protocol aborts the job: the peers
//! wait for this rank's offers or its "done".

#![allow(unsafe_code)] // the views of peers' buffers that reductions read, argued below

use std::cell::RefMut;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::step::{Block, Live, Steps, run_blocking};
use super::{Collective, Comm, Reducer};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::Handle;
use crate::transport::Region;

/// Smallest message (bytes; per rank's block where the collective has blocks) that goes
/// single-copy by default (a rooted collective's, with a core per rank:
/// [`SINGLE_COPY_ROOTED_MIN`]): below it the two small messages per pair cost more than the
/// second copy saves. At 2 ranks single copy measured 0.14-1.64x the channels' time at 4 KiB
/// and 0.08-0.95x at 8 KiB (BENCHMARKS.md, "Single-copy collectives over tca's buffers").
pub const SINGLE_COPY_MIN: usize = 8 * 1024;

/// The same with more ranks than cores: every wait for a peer's message is then a trip
/// through the scheduler, and the protocol's two waits (for the offer, for "done") cost more
/// than the second copy saves at 8 KiB (1.5-3.1x the channels' time for the rooted
/// collectives at 4 and 8 ranks on 2 cores), while from 64 KiB most collectives gained
/// (BENCHMARKS.md, "Single-copy collectives over tca's buffers"; sizes between were not
/// measured).
pub const SINGLE_COPY_MIN_CROWDED: usize = 64 * 1024;

/// Smallest message (bytes; per rank's block in a scatter and gather) that a rooted collective
/// (broadcast, scatter, gather, reduce) sends single-copy by default with a core per rank.
/// Through the channels the root of a stream of calls goes on as soon as its data is in the
/// rings; single copy makes every call wait for its readers' "done". At 2 ranks 8 KiB took
/// 0.59-0.80x single copy's time through the channels with the machine's line round trip at
/// 21-25 ns, 0.66-0.92x at 183-207 ns; from 12-16 KiB single copy was level or faster
/// (BENCHMARKS.md, "Rooted collectives through the channels up to 16 KiB"). With more ranks
/// than cores, and where `TCA_SINGLE_COPY` or [`Comm::set_single_copy_min`] sets the threshold,
/// rooted collectives use the same one as the others.
pub const SINGLE_COPY_ROOTED_MIN: usize = 16 * 1024;

/// Most ranks among which an allreduce goes single-copy from [`SINGLE_COPY_MIN`] bytes, each
/// with a core; beyond, from [`ALLREDUCE_CROWDED_MIN`] bytes. Set for an earlier form in which
/// every rank folded all p vectors, and not measured again beyond 2 ranks with a core each
/// (this machine has two).
pub const SINGLE_COPY_ALLREDUCE_RANKS: usize = 4;

/// This rank's single-copy settings for a communicator of `p` ranks: the smallest message
/// (`TCA_SINGLE_COPY`, else [`SINGLE_COPY_MIN`], or [`SINGLE_COPY_MIN_CROWDED`] with more
/// ranks than cores), the same for the rooted collectives (by default
/// [`SINGLE_COPY_ROOTED_MIN`] with a core per rank), and whether the ranks are few, each
/// with a core (an allreduce goes single-copy from the smallest message, a large broadcast
/// splits its copies, an allgather pushes its blocks). Rank 0's are every member's.
pub(super) fn settings(p: usize) -> Result<(usize, usize, bool)> {
    let crowded = p > crate::bootstrap::job_cpus() as usize;
    let (min, rooted) = match std::env::var(crate::env::SINGLE_COPY) {
        Ok(v) if matches!(v.trim(), "off" | "no" | "false") => (usize::MAX, usize::MAX),
        Ok(_) => {
            let b = crate::env::parse::<usize>(crate::env::SINGLE_COPY)?.unwrap_or(SINGLE_COPY_MIN);
            (b, b)
        }
        Err(_) if crowded => (SINGLE_COPY_MIN_CROWDED, SINGLE_COPY_MIN_CROWDED),
        Err(_) => (SINGLE_COPY_MIN, SINGLE_COPY_ROOTED_MIN),
    };
    Ok((min, rooted, p <= SINGLE_COPY_ALLREDUCE_RANKS && !crowded))
}

/// Bytes of a reduction's step: the accumulator's piece stays in the cache while every
/// input's piece is combined into it.
const CHUNK: usize = 64 * 1024;

/// An offer: tag (1: in tca's memory; 0: not), handle, offset, length.
const OFFER: usize = 8 + Handle::BYTES + 16;

/// Whether an offer says its buffer is in tca's memory.
fn offered(o: &[u8; OFFER]) -> bool {
    o[..8] == 1u64.to_le_bytes()
}

/// The answer of a reader: done reading (or, from a gather's or reduce's root, "done" or
/// "fall back").
const DONE: u64 = 1;
const FALLBACK: u64 = 2;

/// A peer's slice, resolved: its segment's mapping, where the slice starts in it, its length.
#[derive(Debug)]
pub(super) struct Peer {
    region: Arc<Region>,
    at: usize,
    len: usize,
}

impl Peer {
    /// Copies `dst.len()` bytes at byte `from` of the peer's slice into `dst`.
    fn read(&self, from: usize, dst: &mut [u8]) -> Result<()> {
        self.check(from, dst.len())?;
        self.region.map.read(self.at + from, dst)
    }

    /// Calls `f` with `len` bytes at byte `from` of the peer's slice, in place.
    fn with<R>(&self, from: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.check(from, len)?;
        // SAFETY: in range (checked above and by the view), and mapped for as long as the view
        // lives (`region` holds this rank's mapping, whatever the owner does with its
        // buffer). No writer while the view lives: the slice is a peer's `Buffer`, whose
        // handle no one holds outside the collectives of its communicator, and its owner is
        // inside this collective and changes nothing until this rank says it is done (module
        // doc, step 3), which it does after `f` (a started collective borrows the owner's
        // buffer for its scope, and its run ends only after that "done", also when its
        // request was dropped: the scope finishes it). The one exception is an owner that
        // fails inside the protocol after its offer (an error there, or a scope unwound by a
        // panic): it aborts the job, and a reader may then combine values its owner is
        // changing, in a job that ends in an error on every rank.
        let v = unsafe { self.region.map.view::<u8>(self.at + from, len) };
        v.map(f)
            .ok_or_else(|| Error::new(ErrorKind::OutOfBounds, "a peer's buffer is not mapped here"))
    }

    /// Writes `src` at byte `from` of the peer's slice (a gather's root's receive buffer, a
    /// split broadcast's reader's buffer, a pushed allgather's or an allreduce's receive
    /// buffer, which its owner holds as a `&mut [u8]` for the call but does not touch outside
    /// its own block or part until every writer says it is done).
    fn write(&self, from: usize, src: &[u8]) -> Result<()> {
        self.check(from, src.len())?;
        self.region.map.write(self.at + from, src)
    }

    /// Calls `f` with `len` bytes at byte `from` of the peer's slice, in place and writable:
    /// a split reduce's part of its root's receive buffer.
    fn with_mut<R>(&self, from: usize, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        self.check(from, len)?;
        // SAFETY: in range (checked above and by the view), and mapped for as long as the view
        // lives (`region` holds this rank's mapping). No one else reads or writes these bytes
        // while the view lives: they are this rank's part of a reduce's result in its root's
        // `Buffer`, whose other parts the other ranks write (the parts are cut from the byte
        // length alone, which every rank checked against every offer, so they do not overlap);
        // the root, which holds the buffer as a `&mut [u8]` for the call, touches only its own
        // part until every rank has said it is done, which this rank does after `f`. The
        // exception is a root that fails inside the protocol (see `with`): the job then ends
        // in an error on every rank.
        let v = unsafe { self.region.map.view_mut::<u8>(self.at + from, len) };
        v.map(f)
            .ok_or_else(|| Error::new(ErrorKind::OutOfBounds, "a peer's buffer is not mapped here"))
    }

    fn check(&self, from: usize, len: usize) -> Result<()> {
        if from.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(Error::new(
                ErrorKind::OutOfBounds,
                format!("{len} bytes at {from} of a {}-byte peer buffer", self.len),
            ));
        }
        Ok(())
    }
}

impl Comm<'_> {
    /// Whether a blocking call of `c` on `bytes` bytes goes single-copy (see the module doc);
    /// its buffers are looked at by the call itself.
    pub(super) fn direct_on(&self, c: Collective, bytes: usize) -> Result<bool> {
        if !self.single_copy_for(c, bytes) {
            return Ok(false);
        }
        self.settle()?;
        self.usable()?;
        Ok(true)
    }

    /// Whether a started (non-blocking) call of `c` on `bytes` bytes goes single-copy: as
    /// [`Comm::direct_on`], but the collectives started before it are not finished first (it
    /// runs after them, in its scope's order).
    pub(super) fn direct_started(&self, c: Collective, bytes: usize) -> Result<bool> {
        if !self.single_copy_for(c, bytes) {
            return Ok(false);
        }
        self.usable()?;
        Ok(true)
    }

    /// Whether a blocking call of `c` on `bytes` bytes (per rank's block where the collective
    /// has blocks, as [`Comm::algorithm`]) goes single-copy when its buffers are
    /// [`Buffer`](super::Buffer)s of this communicator: every member on this node through
    /// shared memory, a buffer allocated ([`Comm::buffer`]), no algorithm forced, from
    /// [`Comm::single_copy_min`] bytes on (a rooted collective from
    /// [`Comm::single_copy_min_rooted`]), and for an allreduce few ranks with a core each
    /// ([`SINGLE_COPY_ALLREDUCE_RANKS`]) or [`ALLREDUCE_CROWDED_MIN`] bytes. A barrier never
    /// does.
    pub fn single_copy_for(&self, c: Collective, bytes: usize) -> bool {
        let min = if c.rooted() {
            self.direct_min_rooted.get()
        } else {
            self.direct_min.get()
        };
        self.direct.get()
            && self.readable
            && bytes >= min
            && self.forced.borrow()[c as usize].is_none()
            && match c {
                Collective::Barrier => false,
                Collective::Allreduce => self.direct_few || bytes >= ALLREDUCE_CROWDED_MIN,
                _ => true,
            }
    }

    /// How a call of `c` on `bytes` bytes goes single-copy when every buffer it passes is one
    /// of this communicator's [`Buffer`](super::Buffer)s, in words (a tool's algorithm
    /// column), or `None` where it does not ([`Comm::single_copy_for`]).
    pub fn single_copy_path(&self, c: Collective, bytes: usize) -> Option<&'static str> {
        if !self.single_copy_for(c, bytes) {
            return None;
        }
        Some(match c {
            Collective::Gather => "single copy (blocks written into the root's buffer)",
            Collective::Reduce
                if bytes >= REDUCE_SPLIT_MIN
                    && (self.direct_few || bytes >= REDUCE_SPLIT_MIN_CROWDED) =>
            {
                "single copy (every rank folds a part into the root's buffer)"
            }
            Collective::Broadcast if self.direct_few && bytes >= BCAST_SPLIT_MIN => {
                "single copy (every rank copies a part into every buffer)"
            }
            Collective::Allgather if self.direct_few && bytes >= ALLGATHER_PUSH_MIN => {
                "single copy (blocks written into every buffer)"
            }
            Collective::Allreduce => {
                "single copy (a part folded per rank, written into every buffer)"
            }
            _ => "single copy (peers' buffers read in place)",
        })
    }

    /// How many collectives on this communicator went single-copy so far (read in place
    /// from [`Buffer`](super::Buffer)s): whether a program's buffers are used as it hopes.
    pub fn single_copy_calls(&self) -> u64 {
        self.direct_calls.get()
    }

    /// The smallest message (bytes; per rank's block where the collective has blocks) that
    /// goes single-copy on this communicator, for the collectives without a root (the rooted
    /// ones: [`Comm::single_copy_min_rooted`]); `None`: never (`TCA_SINGLE_COPY=off`).
    pub fn single_copy_min(&self) -> Option<usize> {
        Some(self.direct_min.get()).filter(|&b| b != usize::MAX)
    }

    /// The same for the rooted collectives (broadcast, scatter, gather, reduce): by default
    /// [`SINGLE_COPY_ROOTED_MIN`] with a core per rank, else [`Comm::single_copy_min`].
    pub fn single_copy_min_rooted(&self) -> Option<usize> {
        Some(self.direct_min_rooted.get()).filter(|&b| b != usize::MAX)
    }

    /// Sets [`Comm::single_copy_min`] and [`Comm::single_copy_min_rooted`] (`None`: never).
    /// Every member must set the same: the members of a call must all take the single-copy
    /// protocol or all the channels.
    pub fn set_single_copy_min(&self, bytes: Option<usize>) {
        let b = bytes.unwrap_or(usize::MAX);
        self.direct_min.set(b);
        self.direct_min_rooted.set(b);
    }

    /// Ends a single-copy call: an error leaves peers waiting for this rank's offers or its
    /// "done", so it aborts the job (they get an error naming this rank).
    pub(super) fn direct_end(&self, r: Result<bool>) -> Result<bool> {
        match r {
            Ok(b) => {
                self.direct_calls
                    .set(self.direct_calls.get() + u64::from(b));
                Ok(b)
            }
            Err(e) => self.fail(e).map(|()| false),
        }
    }

    // ---- the protocol's messages ----------------------------------------------------------

    /// This rank's offer of `buf`: its length, and where it lies if in one of this
    /// communicator's buffers.
    fn offer(&self, buf: &[u8]) -> [u8; OFFER] {
        let mut o = [0u8; OFFER];
        if let Some((h, off)) = self.buffers.find(buf) {
            o[..8].copy_from_slice(&1u64.to_le_bytes());
            o[8..8 + Handle::BYTES].copy_from_slice(&h.to_bytes());
            o[8 + Handle::BYTES..OFFER - 8].copy_from_slice(&(off as u64).to_le_bytes());
        }
        o[OFFER - 8..].copy_from_slice(&(buf.len() as u64).to_le_bytes());
        o
    }

    /// Resolves `from`'s offer `o`, expecting `len` bytes: `None` if its buffer is not in
    /// tca's memory. Another length is an error either way: ranks whose lengths differ may
    /// have taken different paths by them, and must fail rather than wait for each other.
    fn resolve(&self, from: usize, len: usize, o: &[u8; OFFER]) -> Result<Option<Peer>> {
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        let n = usize::try_from(word(&o[OFFER - 8..])).unwrap_or(usize::MAX);
        let rank = self.ranks[from];
        let tagged = match word(&o[..8]) {
            0 => false,
            1 => true,
            x => return Err(self.confused(from, &format!("an offer tagged {x:#x}"))),
        };
        if !tagged {
            if n != len {
                return Err(Error::peer(
                    ErrorKind::InvalidArgument,
                    rank,
                    format!(
                        "rank {rank} offered {n} bytes where {len} were expected (mismatched \
                         collective arguments?)"
                    ),
                ));
            }
            return Ok(None);
        }
        let h = Handle::from_bytes(&o[8..8 + Handle::BYTES])?;
        let off = usize::try_from(word(&o[8 + Handle::BYTES..OFFER - 8])).unwrap_or(usize::MAX);
        if h.rank() != rank || n != len {
            return Err(Error::peer(
                ErrorKind::InvalidArgument,
                rank,
                format!(
                    "rank {rank} offered {n} bytes of a segment of rank {} where {len} bytes of its \
                     own were expected (mismatched collective arguments?)",
                    h.rank()
                ),
            ));
        }
        let (region, at) = self.world.peer_mapping(&h, off, n)?.ok_or_else(|| {
            Error::peer(
                ErrorKind::Transport,
                rank,
                format!("rank {rank}'s memory cannot be read from this rank"),
            )
        })?;
        Ok(Some(Peer { region, at, len: n }))
    }

    /// The error for a protocol message that makes no sense: the members are not running the
    /// same collective with the same arguments.
    fn confused(&self, from: usize, what: &str) -> Error {
        let rank = self.ranks[from];
        Error::peer(
            ErrorKind::InvalidArgument,
            rank,
            format!(
                "single-copy collective: rank {rank} sent {what} (do all members call the same \
                 collectives with matching arguments?)"
            ),
        )
    }

    /// `out` = the fold, in rank order, of bytes `from..from + out.len()` of every rank's
    /// slice (this rank's is `own`): the same order on every rank, so every rank of an
    /// allreduce gets the same bits.
    fn fold(
        &self,
        peers: &[Option<Peer>],
        own: &[u8],
        from: usize,
        out: &mut [u8],
        red: &Reducer<'_>,
    ) -> Result<()> {
        self.fold_then(peers, own, from, out, red, |_, _| Ok(()))
    }

    /// [`Comm::fold`], calling `then(at, piece)` with each finished piece of `out` (`at`: its
    /// byte in the slices) while it is still in the cache.
    fn fold_then(
        &self,
        peers: &[Option<Peer>],
        own: &[u8],
        from: usize,
        out: &mut [u8],
        red: &Reducer<'_>,
        mut then: impl FnMut(usize, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut start = 0;
        while start < out.len() {
            let end = (start + CHUNK).min(out.len());
            let acc = &mut out[start..end];
            let at = from + start;
            for (q, peer) in peers.iter().enumerate() {
                match peer {
                    None if q == 0 => acc.copy_from_slice(&own[at..at + acc.len()]),
                    None => red.apply(acc, &own[at..at + acc.len()])?,
                    Some(x) if q == 0 => x.read(at, acc)?,
                    Some(x) => x.with(at, acc.len(), |v| red.apply(acc, v))??,
                }
            }
            then(at, acc)?;
            start = end;
        }
        Ok(())
    }

    // ---- the blocking calls ---------------------------------------------------------------

    /// Broadcast, blocking ([`broadcast`]).
    pub(super) fn direct_broadcast(&self, buf: &mut [u8], root: usize) -> Result<bool> {
        run_blocking(broadcast(Steps::<Block>::new(self), buf, root))
    }

    /// Scatter, blocking ([`scatter`]).
    pub(super) fn direct_scatter(&self, send: &[u8], recv: &mut [u8], root: usize) -> Result<bool> {
        run_blocking(scatter(Steps::<Block>::new(self), send, recv, root))
    }

    /// Gather, blocking ([`gather`]).
    pub(super) fn direct_gather(&self, send: &[u8], recv: &mut [u8], root: usize) -> Result<bool> {
        run_blocking(gather(Steps::<Block>::new(self), send, recv, root))
    }

    /// Reduce, blocking ([`reduce`]).
    pub(super) fn direct_reduce(
        &self,
        send: &[u8],
        recv: &mut [u8],
        red: &Reducer<'_>,
        root: usize,
    ) -> Result<bool> {
        run_blocking(reduce(Steps::<Block>::new(self), send, recv, red, root))
    }

    /// Allgather, blocking ([`allgather`]).
    pub(super) fn direct_allgather(&self, send: &[u8], recv: &mut [u8]) -> Result<bool> {
        run_blocking(allgather(Steps::<Block>::new(self), send, recv))
    }

    /// Alltoall, blocking ([`alltoall`]).
    pub(super) fn direct_alltoall(&self, send: &[u8], recv: &mut [u8]) -> Result<bool> {
        run_blocking(alltoall(Steps::<Block>::new(self), send, recv))
    }

    /// Allreduce, blocking ([`allreduce`]).
    pub(super) fn direct_allreduce(
        &self,
        send: &[u8],
        recv: &mut [u8],
        red: &Reducer<'_>,
    ) -> Result<bool> {
        run_blocking(allreduce(Steps::<Block>::new(self), send, recv, red))
    }

    /// Reduce-scatter, blocking ([`reduce_scatter`]).
    pub(super) fn direct_reduce_scatter(
        &self,
        send: &[u8],
        recv: &mut [u8],
        red: &Reducer<'_>,
    ) -> Result<bool> {
        run_blocking(reduce_scatter(Steps::<Block>::new(self), send, recv, red))
    }
}

/// The communicator's list of resolved peers, borrowed for one call and emptied when it ends:
/// no allocation per call, and no reference to a peer's mapping held past the call (the
/// attach cache keeps it until the peer frees the buffer and this rank next allocates).
struct Peers<'a>(RefMut<'a, Vec<Option<Peer>>>);

impl<'a> Peers<'a> {
    /// The list, empty. A call runs to its end before the next starts (blocking calls finish
    /// the started ones first; started ones run in order), so it is free unless a reduction
    /// operation calls a collective of this communicator.
    fn take(c: &'a Comm<'_>) -> Result<Self> {
        let mut v = c.peers.try_borrow_mut().map_err(|_| {
            Error::new(
                ErrorKind::InvalidArgument,
                "a collective was called from inside a reduction operation of the same communicator",
            )
        })?;
        v.clear();
        Ok(Self(v))
    }
}

impl Drop for Peers<'_> {
    fn drop(&mut self) {
        self.0.clear();
    }
}

impl Deref for Peers<'_> {
    type Target = Vec<Option<Peer>>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Peers<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

// ---- the protocol's steps, in either mode (`step`): the blocking calls above and the
// started ones (`nb`) run these same functions ----------------------------------------------

/// Receives `from`'s offer and resolves it, expecting `len` bytes: `None` if its buffer is not
/// in tca's memory.
async fn take_offer<M: Live>(c: Steps<'_, M>, from: usize, len: usize) -> Result<Option<Peer>> {
    let mut o = [0u8; OFFER];
    c.ch_recv(from, &mut o).await?;
    c.resolve(from, len, &o)
}

async fn answer<M: Live>(c: Steps<'_, M>, to: usize, what: u64) -> Result<()> {
    let b = what.to_le_bytes();
    c.ch_send(to, &b).await
}

/// Receives `from`'s answer: `DONE`, or where `fallback` allows it `FALLBACK`; anything else
/// means the ranks do not run the same collective.
async fn answer_from<M: Live>(c: Steps<'_, M>, from: usize, fallback: bool) -> Result<u64> {
    let mut b = [0u8; 8];
    c.ch_recv(from, &mut b).await?;
    match u64::from_le_bytes(b) {
        DONE => Ok(DONE),
        FALLBACK if fallback => Ok(FALLBACK),
        x => Err(c.confused(from, &format!("answer {x:#x}"))),
    }
}

/// Most buffers a rank offers to every peer at once ([`offers_all`]).
const MAX_OFFERS: usize = 2;

/// Offers `bufs` (one or two) to every peer in one message, takes every peer's offers of
/// `len` bytes each and appends them to `peers`, p entries per buffer in rank order (this
/// rank's stay `None`): the all-to-all forms' step 1. Returns whether every rank's buffers are
/// all in tca's memory, and whether this rank's are.
async fn offers_all<M: Live>(
    c: Steps<'_, M>,
    bufs: &[&[u8]],
    len: usize,
    peers: &mut Vec<Option<Peer>>,
) -> Result<(bool, bool)> {
    let k = bufs.len();
    assert!(
        (1..=MAX_OFFERS).contains(&k),
        "one or two buffers are offered at once"
    );
    let mut mine = [0u8; MAX_OFFERS * OFFER];
    let mut all_mine = true;
    for (i, b) in bufs.iter().enumerate() {
        let o = c.offer(b);
        all_mine &= offered(&o);
        mine[i * OFFER..(i + 1) * OFFER].copy_from_slice(&o);
    }
    let (p, me) = (c.p(), c.me);
    for j in 1..p {
        c.ch_send((me + j) % p, &mine[..k * OFFER]).await?;
    }
    let base = peers.len();
    peers.resize_with(base + k * p, || None);
    let mut all = all_mine;
    for j in 1..p {
        let q = (me + p - j) % p;
        let mut theirs = [0u8; MAX_OFFERS * OFFER];
        c.ch_recv(q, &mut theirs[..k * OFFER]).await?;
        for i in 0..k {
            let o = theirs[i * OFFER..(i + 1) * OFFER]
                .try_into()
                .expect("an offer's bytes");
            let peer = c.resolve(q, len, o)?;
            all &= peer.is_some();
            peers[base + i * p + q] = peer;
        }
    }
    Ok((all, all_mine))
}

/// Step 3 of the all-to-all forms: done to every peer, then every peer's done.
async fn done_all<M: Live>(c: Steps<'_, M>) -> Result<()> {
    let (p, me) = (c.p(), c.me);
    for k in 1..p {
        answer(c, (me + k) % p, DONE).await?;
    }
    for k in 1..p {
        answer_from(c, (me + p - k) % p, false).await?;
    }
    Ok(())
}

/// The rooted scatters' shape (broadcast, scatter): the root offers `send` (`len` bytes) to
/// every other rank and waits for their "done"; each of those, if the root's buffer is in
/// tca's memory, runs `read` on it and answers "done". False on every rank where it is not.
/// The root runs `read(None)` (its own part of the work) between its offers and the waits, so
/// that it copies while the others read.
async fn out_of_root<M: Live>(
    c: Steps<'_, M>,
    send: &[u8],
    len: usize,
    root: usize,
    read: impl FnOnce(Option<&Peer>) -> Result<()>,
) -> Result<bool> {
    let p = c.p();
    if c.me == root {
        let o = c.offer(send);
        for k in 1..p {
            c.ch_send((root + k) % p, &o).await?;
        }
        if !offered(&o) {
            return Ok(false);
        }
        read(None)?;
        for k in 1..p {
            answer_from(c, (root + k) % p, false).await?;
        }
        return Ok(true);
    }
    let Some(peer) = take_offer(c, root, len).await? else {
        return Ok(false);
    };
    read(Some(&peer))?;
    answer(c, root, DONE).await?;
    Ok(true)
}

/// The rooted gathers' shape (gather, reduce): every other rank offers `send` to the root and
/// waits for its verdict; the root takes the offers and, if all are in tca's memory, runs
/// `read` over them, then answers "done", else "fall back".
async fn to_root<M: Live>(
    c: Steps<'_, M>,
    send: &[u8],
    root: usize,
    read: impl FnOnce(&[Option<Peer>]) -> Result<()>,
) -> Result<bool> {
    let p = c.p();
    if c.me != root {
        let o = c.offer(send);
        c.ch_send(root, &o).await?;
        return Ok(answer_from(c, root, true).await? == DONE);
    }
    // The root's own buffer is not read by anyone: only the others' must be offered.
    let mut peers = Peers::take(&c)?;
    peers.resize_with(p, || None);
    let mut all = true;
    for k in 1..p {
        let q = (root + k) % p;
        peers[q] = take_offer(c, q, send.len()).await?;
        all &= peers[q].is_some();
    }
    if all {
        read(&peers)?;
    }
    drop(peers);
    let verdict = if all { DONE } else { FALLBACK };
    for k in 1..p {
        answer(c, (root + k) % p, verdict).await?;
    }
    Ok(all)
}

/// The all-to-all forms' shape (allgather, alltoall, allreduce, reduce-scatter): every rank
/// offers `send` (`len` bytes expected of every peer's) to all; if every rank's buffer is in
/// tca's memory, runs `read` over the peers' (this rank's own is `None`) and then the round of
/// "done".
async fn all_to_all<M: Live>(
    c: Steps<'_, M>,
    send: &[u8],
    read: impl FnOnce(&[Option<Peer>]) -> Result<()>,
) -> Result<bool> {
    let mut peers = Peers::take(&c)?;
    if !offers_all(c, &[send], send.len(), &mut peers).await?.0 {
        return Ok(false);
    }
    read(&peers)?;
    drop(peers);
    done_all(c).await?;
    Ok(true)
}

/// Rank `r`'s part of an `n`-byte buffer split between `p` ranks: whole 64-byte units (every
/// element size divides 64), the last rank to the end. It depends on the byte length alone,
/// which every rank has checked against every other's offer, so the parts never overlap,
/// whatever element type a rank passes, and (in buffers that start on a cache line) no two
/// ranks write one line.
fn part(n: usize, p: usize, r: usize) -> (usize, usize) {
    let units = n / 64;
    let lo = r * units / p * 64;
    let hi = if r == p - 1 {
        n
    } else {
        (r + 1) * units / p * 64
    };
    (lo, hi)
}

/// Smallest broadcast (bytes) whose copies are split between the ranks, where the ranks are
/// few and each has a core: below it the extra offers and "done"s cost more than sharing the
/// copy saves. Measured at 2 ranks (BENCHMARKS.md, "A broadcast copied by every rank").
pub const BCAST_SPLIT_MIN: usize = 20 * 1024;

/// Broadcast: the root offers `buf`, every other rank reads all of it. False on every rank
/// if the root's buffer is not in tca's memory (the caller runs the channel algorithm).
///
/// From [`BCAST_SPLIT_MIN`] bytes, with few ranks each on a core of its own, the copies are
/// split instead: every rank offers its `buf` to every rank, and rank r copies the r-th of p
/// parts of the root's buffer into every other rank's buffer — the root too, which otherwise
/// only waits. Every core copies (p - 1)/p of a buffer at once, where the readers would each
/// copy a whole one while the root's core idles: at 2 ranks two cores copy a half each (on
/// this machine two threads copy 4 MiB 1.3x faster than one). Where only the root's buffer
/// is in tca's memory, the readers read it whole, as below.
pub(super) async fn broadcast<M: Live>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    root: usize,
) -> Result<bool> {
    let n = buf.len();
    if n >= BCAST_SPLIT_MIN && c.direct_few {
        let r = broadcast_split(c, buf, root).await;
        return c.direct_end(r);
    }
    let r = if c.me == root {
        out_of_root(c, buf, n, root, |_| Ok(())).await
    } else {
        out_of_root(c, &[], n, root, |peer| match peer {
            Some(x) => x.read(0, buf),
            None => Ok(()),
        })
        .await
    };
    c.direct_end(r)
}

async fn broadcast_split<M: Live>(c: Steps<'_, M>, buf: &mut [u8], root: usize) -> Result<bool> {
    let (p, me, n) = (c.p(), c.me, buf.len());
    // Every rank's `buf` to every rank: each then knows what every other knows, and a rank
    // that took the other path by a mismatched length meets a message of the wrong kind or
    // length, an error, not a wait.
    let mut peers = Peers::take(&c)?;
    let (all, mine) = offers_all(c, &[buf], n, &mut peers).await?;
    let root_offered = if me == root {
        mine
    } else {
        peers[root].is_some()
    };
    if !root_offered {
        return Ok(false);
    }
    if all {
        let (lo, hi) = part(n, p, me);
        if me == root {
            for k in 1..p {
                let q = (me + k) % p;
                let dst = peers[q].as_ref().expect("every buffer was offered");
                dst.write(lo, &buf[lo..hi])?;
            }
        } else {
            let src = peers[root].as_ref().expect("the root's buffer was offered");
            src.with(lo, hi - lo, |part| -> Result<()> {
                for k in 0..p {
                    let q = (me + k) % p;
                    if q == me {
                        buf[lo..hi].copy_from_slice(part);
                    } else if q != root {
                        let dst = peers[q].as_ref().expect("every buffer was offered");
                        dst.write(lo, part)?;
                    }
                }
                Ok(())
            })??;
        }
    } else if me != root {
        // Some reader's buffer is ordinary memory: every reader reads the root's whole.
        peers[root]
            .as_ref()
            .expect("the root's buffer was offered")
            .read(0, buf)?;
    }
    drop(peers);
    // Each rank's copies are done before it says so, and it leaves only when every rank has
    // said so: its buffer is whole, and (the root) no one reads it any more.
    done_all(c).await?;
    Ok(true)
}

/// Scatter: the root offers `send`, rank r reads block r, and the root copies its own
/// meanwhile (after its offers: copied first, it held the readers back by as long, and a
/// 4 MiB scatter at 2 ranks took two copies' time, 1.05x Open MPI's).
pub(super) async fn scatter<M: Live>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
    root: usize,
) -> Result<bool> {
    let (me, b) = (c.me, recv.len());
    let r = out_of_root(c, send, c.p() * b, root, |peer| match peer {
        Some(x) => x.read(me * b, recv),
        None => {
            recv.copy_from_slice(&send[root * b..(root + 1) * b]);
            Ok(())
        }
    })
    .await;
    c.direct_end(r)
}

/// Gather: the root offers its `recv`, and every other rank writes its block straight into
/// it (rank r's at r x block) while the root copies its own: every rank's core copies at once,
/// where a root reading every block would copy them all alone (at 2 ranks, 1 MiB blocks took
/// 1.13-1.17x Open MPI's time that way; BENCHMARKS.md, "A gather written by its senders").
/// If the root's `recv` is not in tca's memory, the others offer their `send` and the root
/// reads the blocks where they lie.
pub(super) async fn gather<M: Live>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
    root: usize,
) -> Result<bool> {
    let r = gather_steps(c, send, recv, root).await;
    c.direct_end(r)
}

async fn gather_steps<M: Live>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
    root: usize,
) -> Result<bool> {
    let (b, p, me) = (send.len(), c.p(), c.me);
    if me == root {
        let o = c.offer(recv);
        for k in 1..p {
            c.ch_send((root + k) % p, &o).await?;
        }
        if offered(&o) {
            recv[root * b..(root + 1) * b].copy_from_slice(send);
            for k in 1..p {
                answer_from(c, (root + k) % p, false).await?;
            }
            return Ok(true);
        }
    } else if let Some(peer) = take_offer(c, root, p * b).await? {
        peer.write(me * b, send)?;
        answer(c, root, DONE).await?;
        return Ok(true);
    }
    to_root(c, send, root, |peers| {
        for (q, peer) in peers.iter().enumerate() {
            let dst = &mut recv[q * b..(q + 1) * b];
            match peer {
                Some(x) => x.read(0, dst)?,
                None => dst.copy_from_slice(send),
            }
        }
        Ok(())
    })
    .await
}

/// Smallest reduce (bytes) whose fold is split between the ranks: below it the extra round
/// of offers and "done"s costs more than half a fold saves. At 2 ranks, split / root alone:
/// 8 KiB 0.73-0.79 / 0.59 us, 16 KiB 0.80-0.82 / 0.82-0.87, 32 KiB 1.06-1.11 / 1.71-1.73
/// (BENCHMARKS.md, "A reduce folded by every rank"). Measured at 2 ranks with a core each
/// only: the split's messages grow as p(p - 1), the root's alone as p - 1. By default a
/// reduce goes single-copy only from [`SINGLE_COPY_ROOTED_MIN`] (the same 16 KiB) where the
/// split applies, so the root folds alone only with more than
/// [`SINGLE_COPY_ALLREDUCE_RANKS`] ranks, more ranks than cores, or a threshold set lower.
pub const REDUCE_SPLIT_MIN: usize = 16 * 1024;

/// The smallest reduce whose fold is split (as [`REDUCE_SPLIT_MIN`]) with more ranks than
/// [`SINGLE_COPY_ALLREDUCE_RANKS`] or than cores: the split's p(p - 1) offers and "done"s are
/// then trips through the scheduler. At 8 ranks on
/// 2 cores, split / root alone: 64 KiB 31-61 / 21-24 us, 128 KiB 34-50 / 36-38, 256 KiB
/// 58-65 / 132-159, 1 MiB 256-261 / 534-559; at 4 ranks 128 KiB 12-25 / 25-30
/// (BENCHMARKS.md, "A single-copy allreduce for crowded ranks").
pub const REDUCE_SPLIT_MIN_CROWDED: usize = 128 * 1024;

/// Reduce: every rank offers `send`, the root folds them all into `recv`. From
/// [`REDUCE_SPLIT_MIN`] bytes the fold is split: the root also offers `recv`, every rank offers
/// `send` to every rank, and rank r folds the r-th of p parts of every rank's `send` straight
/// into the root's `recv`, all at once, where the root would fold the whole alone (at 2
/// ranks, 1 MiB took 1.19-1.24x Open MPI's time that way; BENCHMARKS.md, "A reduce folded by
/// every rank"). If some buffer is not in tca's memory, the root folds alone where every other
/// rank's `send` is, else the channels run.
pub(super) async fn reduce<M: Live>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
    red: &Reducer<'_>,
    root: usize,
) -> Result<bool> {
    let (p, me, n) = (c.p(), c.me, send.len());
    if n < REDUCE_SPLIT_MIN || (!c.direct_few && n < REDUCE_SPLIT_MIN_CROWDED) {
        let r = to_root(c, send, root, |peers| c.fold(peers, send, 0, recv, red)).await;
        return c.direct_end(r);
    }
    let r = async {
        // Every rank's `send` to every rank first: a rank that took the small path by its own
        // (mismatched) length then meets an offer of the wrong length, an error, not a wait
        // for a message that never comes. Each rank then knows what every other knows.
        let mut peers = Peers::take(&c)?;
        let (all, mine) = offers_all(c, &[send], n, &mut peers).await?;
        let others = (0..p).all(|q| q == root || if q == me { mine } else { peers[q].is_some() });
        // Then the root's `recv` to every other rank (they fold their parts into it).
        let mut target = None;
        let recv_offered = if me == root {
            let o = c.offer(recv);
            for k in 1..p {
                c.ch_send((root + k) % p, &o).await?;
            }
            offered(&o)
        } else {
            target = take_offer(c, root, n).await?;
            target.is_some()
        };
        if recv_offered && all {
            let (lo, hi) = part(n, p, me);
            if me == root {
                c.fold(&peers, send, lo, &mut recv[lo..hi], red)?;
            } else if let Some(t) = &target {
                t.with_mut(lo, hi - lo, |out| c.fold(&peers, send, lo, out, red))??;
            }
        } else if others {
            if me == root {
                c.fold(&peers, send, 0, recv, red)?;
            }
        } else {
            return Ok(false);
        }
        drop(peers);
        done_all(c).await?;
        Ok(true)
    }
    .await;
    c.direct_end(r)
}

/// Smallest allgather block (bytes) that every rank writes into every rank's receive buffer
/// itself, where the ranks are few and each has a core: the single-copy threshold, since at
/// 2 ranks pushing was as fast or faster than reading from 8 KiB on, the smallest size
/// measured (BENCHMARKS.md, "Every core copies").
pub const ALLGATHER_PUSH_MIN: usize = 8 * 1024;

/// Bytes of a pushed allgather's step: the block's piece is read once, into the cache, and
/// written from there into every rank's receive buffer.
const PUSH_CHUNK: usize = 16 * 1024;

/// Allgather: every rank's block `send` lands at its place in every rank's `recv`; this
/// rank's own is placed here on every path, also when it returns false (the channels then
/// expect it in place).
///
/// From [`ALLGATHER_PUSH_MIN`] bytes, among few ranks each with a core, every rank offers its
/// `recv` to all and writes its block into all of them, a cache-sized piece at a time: the
/// block is read once and written p times, where readers would read it p times (at 2 ranks,
/// three quarters of the memory traffic). Where some rank's `recv` is not in tca's memory, and
/// below that size, every rank offers its `send` and reads every peer's.
pub(super) async fn allgather<M: Live>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
) -> Result<bool> {
    let r = async {
        if send.len() >= ALLGATHER_PUSH_MIN && c.direct_few && allgather_push(c, send, recv).await?
        {
            return Ok(true);
        }
        allgather_pull(c, send, recv).await
    }
    .await;
    c.direct_end(r)
}

/// The pushed allgather; false (nothing written) where some rank's `recv` is not in tca's
/// memory, on every rank alike.
async fn allgather_push<M: Live>(c: Steps<'_, M>, send: &[u8], recv: &mut [u8]) -> Result<bool> {
    let (p, me, b) = (c.p(), c.me, send.len());
    let mut peers = Peers::take(&c)?;
    if !offers_all(c, &[recv], p * b, &mut peers).await?.0 {
        return Ok(false);
    }
    let mut at = 0;
    while at < b {
        let end = (at + PUSH_CHUNK).min(b);
        let piece = &send[at..end];
        recv[me * b + at..me * b + end].copy_from_slice(piece);
        for k in 1..p {
            let q = (me + k) % p;
            let dst = peers[q].as_ref().expect("every buffer was offered");
            dst.write(me * b + at, piece)?;
        }
        at = end;
    }
    drop(peers);
    // Each rank's writes are done before it says so, and it leaves only when every rank has
    // said so: its `recv` is whole.
    done_all(c).await?;
    Ok(true)
}

/// The allgather read by its receivers: every rank offers `send` to all, places its own and
/// reads every peer's into its place in `recv`.
async fn allgather_pull<M: Live>(c: Steps<'_, M>, send: &[u8], recv: &mut [u8]) -> Result<bool> {
    let (me, b) = (c.me, send.len());
    recv[me * b..(me + 1) * b].copy_from_slice(send);
    all_to_all(c, send, |peers| {
        for (q, peer) in peers.iter().enumerate() {
            if let Some(x) = peer {
                x.read(0, &mut recv[q * b..(q + 1) * b])?;
            }
        }
        Ok(())
    })
    .await
}

/// Alltoall: every rank offers `send` to all; rank r reads block r of rank q's into block q of
/// its `recv`.
pub(super) async fn alltoall<M: Live>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
) -> Result<bool> {
    let (p, me) = (c.p(), c.me);
    let b = send.len() / p;
    let r = all_to_all(c, send, |peers| {
        for (q, peer) in peers.iter().enumerate() {
            let dst = &mut recv[q * b..(q + 1) * b];
            match peer {
                Some(x) => x.read(me * b, dst)?,
                None => dst.copy_from_slice(&send[me * b..(me + 1) * b]),
            }
        }
        Ok(())
    })
    .await;
    c.direct_end(r)
}

/// Smallest allreduce (bytes) that goes single-copy with more ranks than
/// [`SINGLE_COPY_ALLREDUCE_RANKS`] or than cores, as [`SINGLE_COPY_MIN_CROWDED`] is for the
/// other collectives: below it the two rounds of small messages, each a trip through the
/// scheduler when ranks share cores, cost more than the channels' second copy. At 4 and 8
/// ranks on 2 cores, 64 and 96 KiB took 0.22-1.21x the channels' time, 0.58x in the median of
/// 12 alternating rounds (BENCHMARKS.md, "An allreduce folded once and pushed"; 128 KiB for
/// the earlier form with a round more).
pub const ALLREDUCE_CROWDED_MIN: usize = 64 * 1024;

/// Allreduce, folded once and pushed: every rank offers `send` and `recv` to all (one
/// message); rank r folds the r-th of p parts of every rank's `send` into the same part of
/// its own `recv`, and writes each finished piece, while it is still in the cache, into the
/// same place of every other rank's `recv`; one round of "done" ends it (no `send` is read and
/// no `recv` written after it). Every rank reads a vector's worth and writes one, the least
/// any form moves: folding all p vectors on every rank reads p, and folding a part then
/// reading the others' parts from their `recv` reads 2(p - 1)/p + 1 and takes a round more
/// (both measured slower, at 2 ranks and at 4 and 8 on 2 cores: BENCHMARKS.md, "An allreduce
/// folded once and pushed"). False on every rank where some rank's `send` or `recv` is not in
/// tca's memory.
pub(super) async fn allreduce<M: Live>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
    red: &Reducer<'_>,
) -> Result<bool> {
    let r = allreduce_pushed(c, send, recv, red).await;
    c.direct_end(r)
}

async fn allreduce_pushed<M: Live>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
    red: &Reducer<'_>,
) -> Result<bool> {
    let (p, me, n) = (c.p(), c.me, send.len());
    let mut peers = Peers::take(&c)?;
    if !offers_all(c, &[send, &*recv], n, &mut peers).await?.0 {
        return Ok(false);
    }
    let (lo, hi) = part(n, p, me);
    let (sends, recvs) = peers.split_at(p);
    // Each rank writes only its own part of every `recv` (the parts are cut from the byte
    // length alone, which every rank checked against every offer), and reads only `send`s,
    // which no one writes: no byte is read while it is written, and none has two writers.
    c.fold_then(sends, send, lo, &mut recv[lo..hi], red, |at, piece| {
        for k in 1..p {
            let q = (me + k) % p;
            let to = recvs[q].as_ref().expect("every buffer was offered");
            to.write(at, piece)?;
        }
        Ok(())
    })?;
    drop(peers);
    done_all(c).await?;
    Ok(true)
}

/// Reduce-scatter: every rank offers `send` to all; rank r folds block r of all of them into
/// `recv`.
pub(super) async fn reduce_scatter<M: Live>(
    c: Steps<'_, M>,
    send: &[u8],
    recv: &mut [u8],
    red: &Reducer<'_>,
) -> Result<bool> {
    let from = c.me * recv.len();
    let r = all_to_all(c, send, |peers| c.fold(peers, send, from, recv, red)).await;
    c.direct_end(r)
}
