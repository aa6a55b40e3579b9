//! Single-copy collectives: on one node, a large collective whose buffers lie in tca's memory
//! ([`Comm::buffer`]) reads each peer's data where it lies, straight into the buffer it is
//! meant for, and a reduction combines the inputs where they lie, piece by piece into the
//! result (each piece stays in the cache while every input is combined into it). The
//! channel algorithms copy every byte twice (the sender into a slot of the receiver's ring,
//! the receiver out of it, chunk by chunk); here each byte is copied once, by its reader, and
//! the only messages are two small ones per pair (seed 003's remote address buffer: where the
//! data is; then: done with it). Open MPI's and MPICH's shared-memory transports do the same
//! with XPMEM or cross-memory attach for ordinary memory; tca's own memory needs neither (and
//! this machine's kernel copy is a quarter of `memcpy`'s speed: BENCHMARKS.md, "Single-copy
//! rendezvous by cross-memory attach").
//!
//! # The protocol
//! 1. *Offers*: every rank whose buffer is read sends each reader an offer through the
//!    channel: the handle of the buffer's segment, the offset and the length of the slice, or
//!    "not in tca's memory". Who offers to whom is fixed by the collective (the root to all in
//!    a broadcast and scatter; all to the root in a gather and reduce; all to all otherwise).
//! 2. *Reads*: a reader with every offer it needs copies (or reduces) from the peers' memory.
//!    Bounds, key and the offered length (against the length this rank expects: a mismatch
//!    between ranks is an error here, not a wrong result) are checked first.
//! 3. *Done*: each reader tells each owner it is done; an owner returns only then, so it
//!    never changes its buffer under a reader.
//!
//! Where an offer says "not in tca's memory", every rank falls back to the communicator's
//! channel algorithm for the call, having learnt the same thing: in the all-to-all forms
//! every rank sees every offer; in a broadcast and scatter every reader sees the root's; in
//! a gather and reduce only the root sees them, and tells the others which way it goes in
//! the message that would otherwise say "done".
//!
//! # When
//! Only in the blocking `broadcast`, `scatter`, `gather`, `reduce`, `allgather`, `alltoall`,
//! `allreduce` and `reduce_scatter` (not the in-place forms, whose one buffer is both read and
//! written), on a communicator that allocated a buffer (the flag is set on every member by the
//! collective [`Comm::buffer`], so every member takes the same branch without a message), whose
//! members are all on this node and reached through shared memory (a simulated or network transport
//! has only writes: the papers' hardware), with no algorithm forced, and from [`SINGLE_COPY_MIN`]
//! bytes on (`TCA_SINGLE_COPY`, `Comm::set_single_copy_min`). An allreduce reads every peer's whole
//! vector on every rank, so only up to [`SINGLE_COPY_ALLREDUCE_RANKS`] ranks, each with a core.
//! With more ranks than cores the threshold is [`SINGLE_COPY_MIN_CROWDED`]. Rank 0's settings are
//! every member's (sent when the communicator is made). An error in the middle of the protocol
//! aborts the job: the peers wait for this rank's offers or its "done".

#![allow(unsafe_code)] // the views of peers' buffers that reductions read, argued below

use std::sync::Arc;

use super::{Collective, Comm, Reducer};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::Handle;
use crate::transport::Region;

/// Smallest message (bytes; per rank's block where the collective has blocks) that goes
/// single-copy by default: below it the two small messages per pair cost more than the
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

/// Most ranks a single-copy allreduce runs on: every rank reduces all p vectors, p times the
/// reads of one vector, which the channel algorithms (about 2 vectors' worth per rank) should
/// beat from a few ranks on. An estimate: measured only at 2 ranks with a core each (0.1-0.5x
/// the channels) and at 4 on 2 cores (1.26-1.71x at 64 KiB, hence none with more ranks than
/// cores).
pub const SINGLE_COPY_ALLREDUCE_RANKS: usize = 4;

/// This rank's single-copy settings for a communicator of `p` ranks: the smallest message
/// (`TCA_SINGLE_COPY`, else [`SINGLE_COPY_MIN`], or [`SINGLE_COPY_MIN_CROWDED`] with more
/// ranks than cores) and whether an allreduce may go single-copy. Rank 0's are every member's.
pub(super) fn settings(p: usize) -> Result<(usize, bool)> {
    let crowded = p > crate::bootstrap::job_cpus() as usize;
    let min = match std::env::var(crate::env::SINGLE_COPY) {
        Ok(v) if matches!(v.trim(), "off" | "no" | "false") => usize::MAX,
        Ok(_) => crate::env::parse::<usize>(crate::env::SINGLE_COPY)?.unwrap_or(SINGLE_COPY_MIN),
        Err(_) if crowded => SINGLE_COPY_MIN_CROWDED,
        Err(_) => SINGLE_COPY_MIN,
    };
    Ok((min, p <= SINGLE_COPY_ALLREDUCE_RANKS && !crowded))
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
        // SAFETY: in range (checked above and by the view); no writer while the view lives:
        // the slice is a peer's `Buffer`, whose handle no one holds outside the collectives
        // of its communicator, and its owner is inside this collective and changes nothing
        // until this rank says it is done (module doc, step 3), which it does after `f`.
        let v = unsafe { self.region.map.view::<u8>(self.at + from, len) };
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

    /// Whether a blocking call of `c` on `bytes` bytes (per rank's block where the collective
    /// has blocks, as [`Comm::algorithm`]) goes single-copy when its buffers are
    /// [`Buffer`](super::Buffer)s of this communicator: every member on this node through
    /// shared memory, a buffer allocated ([`Comm::buffer`]), no algorithm forced, from
    /// [`Comm::single_copy_min`] bytes on, and for an allreduce few ranks with a core each
    /// ([`SINGLE_COPY_ALLREDUCE_RANKS`]). A barrier never does.
    pub fn single_copy_for(&self, c: Collective, bytes: usize) -> bool {
        self.direct.get()
            && self.readable
            && bytes >= self.direct_min.get()
            && self.forced.borrow()[c as usize].is_none()
            && match c {
                Collective::Barrier => false,
                Collective::Allreduce => self.direct_allreduce,
                _ => true,
            }
    }

    /// How many collectives on this communicator went single-copy so far (read in place
    /// from [`Buffer`](super::Buffer)s): whether a program's buffers are used as it hopes.
    pub fn single_copy_calls(&self) -> u64 {
        self.direct_calls.get()
    }

    /// The smallest message (bytes; per rank's block where the collective has blocks) that
    /// goes single-copy on this communicator; `None`: never (`TCA_SINGLE_COPY=off`).
    pub fn single_copy_min(&self) -> Option<usize> {
        Some(self.direct_min.get()).filter(|&b| b != usize::MAX)
    }

    /// Sets [`Comm::single_copy_min`] (`None`: never). Every member must set the same: the
    /// members of a call must all take the single-copy protocol or all the channels.
    pub fn set_single_copy_min(&self, bytes: Option<usize>) {
        self.direct_min.set(bytes.unwrap_or(usize::MAX));
    }

    /// Ends a single-copy call: an error leaves peers waiting for this rank's offers or its
    /// "done", so it aborts the job (they get an error naming this rank).
    fn direct_end(&self, r: Result<bool>) -> Result<bool> {
        match r {
            Ok(b) => {
                self.direct_calls
                    .set(self.direct_calls.get() + u64::from(b));
                Ok(b)
            }
            Err(e) => self.fail(e).map(|()| false),
        }
    }

    /// Runs `f` with the communicator's list of resolved peers (empty; one entry per rank to
    /// fill), emptied again afterwards: no allocation per call, and no reference to a peer's
    /// mapping held past the call (the attach cache keeps it until the peer frees the buffer
    /// and this rank next allocates).
    fn with_peers<R>(&self, f: impl FnOnce(&mut Vec<Option<Peer>>) -> Result<R>) -> Result<R> {
        let mut peers = self.peers.borrow_mut();
        peers.clear();
        let r = f(&mut peers);
        peers.clear();
        r
    }

    // ---- the protocol's messages ----------------------------------------------------------

    /// This rank's offer of `buf`: where it lies, if in one of this communicator's buffers.
    fn offer(&self, buf: &[u8]) -> [u8; OFFER] {
        let mut o = [0u8; OFFER];
        if let Some((h, off)) = self.buffers.find(buf) {
            o[..8].copy_from_slice(&1u64.to_le_bytes());
            o[8..8 + Handle::BYTES].copy_from_slice(&h.to_bytes());
            o[8 + Handle::BYTES..OFFER - 8].copy_from_slice(&(off as u64).to_le_bytes());
            o[OFFER - 8..].copy_from_slice(&(buf.len() as u64).to_le_bytes());
        }
        o
    }

    /// Receives `from`'s offer and resolves it, expecting `len` bytes: `None` if its buffer is
    /// not in tca's memory.
    fn take_offer(&self, from: usize, len: usize) -> Result<Option<Peer>> {
        let mut o = [0u8; OFFER];
        self.ch_recv(from, &mut o)?;
        match u64::from_le_bytes(o[..8].try_into().expect("8 bytes")) {
            0 => return Ok(None),
            1 => {}
            x => return Err(self.confused(from, &format!("an offer tagged {x:#x}"))),
        }
        let h = Handle::from_bytes(&o[8..8 + Handle::BYTES])?;
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        let off = usize::try_from(word(&o[8 + Handle::BYTES..OFFER - 8])).unwrap_or(usize::MAX);
        let n = usize::try_from(word(&o[OFFER - 8..])).unwrap_or(usize::MAX);
        let rank = self.ranks[from];
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

    fn answer(&self, to: usize, what: u64) -> Result<()> {
        self.ch_send(to, &what.to_le_bytes())
    }

    /// Receives `from`'s answer: `DONE`, or where `fallback` allows it `FALLBACK`; anything
    /// else means the ranks do not run the same collective.
    fn answer_from(&self, from: usize, fallback: bool) -> Result<u64> {
        let mut b = [0u8; 8];
        self.ch_recv(from, &mut b)?;
        match u64::from_le_bytes(b) {
            DONE => Ok(DONE),
            FALLBACK if fallback => Ok(FALLBACK),
            x => Err(self.confused(from, &format!("answer {x:#x}"))),
        }
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

    /// Offers `buf` to every peer, takes every peer's offer of `len` bytes (`peers[me]` stays
    /// `None`): the all-to-all forms' step 1. True if every rank's buffer is in tca's memory.
    fn offers_all(&self, buf: &[u8], len: usize, peers: &mut Vec<Option<Peer>>) -> Result<bool> {
        let mine = self.offer(buf);
        let (p, me) = (self.p(), self.me);
        for k in 1..p {
            self.ch_send((me + k) % p, &mine)?;
        }
        peers.resize_with(p, || None);
        let mut all = offered(&mine);
        for k in 1..p {
            let q = (me + p - k) % p;
            peers[q] = self.take_offer(q, len)?;
            all &= peers[q].is_some();
        }
        Ok(all)
    }

    /// Step 3 of the all-to-all forms: done to every peer, then every peer's done.
    fn done_all(&self) -> Result<()> {
        let (p, me) = (self.p(), self.me);
        for k in 1..p {
            self.answer((me + k) % p, DONE)?;
        }
        for k in 1..p {
            let q = (me + p - k) % p;
            self.answer_from(q, false)?;
        }
        Ok(())
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
            start = end;
        }
        Ok(())
    }

    // ---- the collectives ------------------------------------------------------------------

    /// The rooted scatters' shape (broadcast, scatter): the root offers `send` (`len` bytes) to
    /// every other rank and waits for their "done"; each of those, if the root's buffer is in
    /// tca's memory, runs `read` on it and answers "done". False on every rank where it is not.
    fn out_of_root(
        &self,
        send: &[u8],
        len: usize,
        root: usize,
        read: impl FnOnce(&Peer) -> Result<()>,
    ) -> Result<bool> {
        let r = (|| {
            let p = self.p();
            if self.me == root {
                let o = self.offer(send);
                for k in 1..p {
                    self.ch_send((root + k) % p, &o)?;
                }
                if !offered(&o) {
                    return Ok(false);
                }
                for k in 1..p {
                    self.answer_from((root + k) % p, false)?;
                }
                return Ok(true);
            }
            let Some(peer) = self.take_offer(root, len)? else {
                return Ok(false);
            };
            read(&peer)?;
            self.answer(root, DONE)?;
            Ok(true)
        })();
        self.direct_end(r)
    }

    /// Broadcast: the root offers `buf`, every other rank reads all of it.
    pub(super) fn direct_broadcast(&self, buf: &mut [u8], root: usize) -> Result<bool> {
        let n = buf.len();
        if self.me == root {
            return self.out_of_root(buf, n, root, |_| Ok(()));
        }
        self.out_of_root(&[], n, root, |peer| peer.read(0, buf))
    }

    /// Scatter: the root offers `send`, rank r reads block r (the root copies its own).
    pub(super) fn direct_scatter(&self, send: &[u8], recv: &mut [u8], root: usize) -> Result<bool> {
        let (me, b) = (self.me, recv.len());
        if me == root {
            recv.copy_from_slice(&send[root * b..(root + 1) * b]);
        }
        self.out_of_root(send, self.p() * b, root, |peer| peer.read(me * b, recv))
    }

    /// The rooted gathers' shape (gather, reduce): every other rank offers `send` to the root
    /// and waits for its verdict; the root takes the offers and, if all are in tca's memory,
    /// runs `read` over them, then answers "done", else "fall back".
    fn to_root(
        &self,
        send: &[u8],
        root: usize,
        read: impl FnOnce(&[Option<Peer>]) -> Result<()>,
    ) -> Result<bool> {
        let p = self.p();
        if self.me != root {
            self.ch_send(root, &self.offer(send))?;
            return Ok(self.answer_from(root, true)? == DONE);
        }
        // The root's own buffer is not read by anyone: only the others' must be offered.
        let all = self.with_peers(|peers| {
            peers.resize_with(p, || None);
            let mut all = true;
            for k in 1..p {
                let q = (root + k) % p;
                peers[q] = self.take_offer(q, send.len())?;
                all &= peers[q].is_some();
            }
            if all {
                read(peers)?;
            }
            Ok(all)
        })?;
        let verdict = if all { DONE } else { FALLBACK };
        for k in 1..p {
            self.answer((root + k) % p, verdict)?;
        }
        Ok(all)
    }

    /// Gather: every rank offers `send`, the root reads block r from rank r.
    pub(super) fn direct_gather(&self, send: &[u8], recv: &mut [u8], root: usize) -> Result<bool> {
        let b = send.len();
        let r = self.to_root(send, root, |peers| {
            for (q, peer) in peers.iter().enumerate() {
                let dst = &mut recv[q * b..(q + 1) * b];
                match peer {
                    Some(x) => x.read(0, dst)?,
                    None => dst.copy_from_slice(send),
                }
            }
            Ok(())
        });
        self.direct_end(r)
    }

    /// Reduce: every rank offers `send`, the root folds them all into `recv`.
    pub(super) fn direct_reduce(
        &self,
        send: &[u8],
        recv: &mut [u8],
        red: &Reducer<'_>,
        root: usize,
    ) -> Result<bool> {
        let r = self.to_root(send, root, |peers| self.fold(peers, send, 0, recv, red));
        self.direct_end(r)
    }

    /// The all-to-all forms' shape (allgather, alltoall, allreduce, reduce-scatter): every rank
    /// offers `send` (`len` bytes expected of every peer's) to all; if every rank's buffer is
    /// in tca's memory, runs `read` over the peers' (this rank's own is `None`) and then the
    /// round of "done".
    fn all_to_all(
        &self,
        send: &[u8],
        read: impl FnOnce(&[Option<Peer>]) -> Result<()>,
    ) -> Result<bool> {
        let r = self.with_peers(|peers| {
            if !self.offers_all(send, send.len(), peers)? {
                return Ok(false);
            }
            read(peers)?;
            self.done_all()?;
            Ok(true)
        });
        self.direct_end(r)
    }

    /// Allgather: every rank offers its block `send` to all and reads every peer's into its
    /// place in `recv` (this rank's own is already there).
    pub(super) fn direct_allgather(&self, send: &[u8], recv: &mut [u8]) -> Result<bool> {
        let b = send.len();
        self.all_to_all(send, |peers| {
            for (q, peer) in peers.iter().enumerate() {
                if let Some(x) = peer {
                    x.read(0, &mut recv[q * b..(q + 1) * b])?;
                }
            }
            Ok(())
        })
    }

    /// Alltoall: every rank offers `send` to all; rank r reads block r of rank q's into block
    /// q of its `recv`.
    pub(super) fn direct_alltoall(&self, send: &[u8], recv: &mut [u8]) -> Result<bool> {
        let (p, me) = (self.p(), self.me);
        let b = send.len() / p;
        self.all_to_all(send, |peers| {
            for (q, peer) in peers.iter().enumerate() {
                let dst = &mut recv[q * b..(q + 1) * b];
                match peer {
                    Some(x) => x.read(me * b, dst)?,
                    None => dst.copy_from_slice(&send[me * b..(me + 1) * b]),
                }
            }
            Ok(())
        })
    }

    /// Allreduce: every rank offers `send` to all and folds all of them into `recv`.
    pub(super) fn direct_allreduce(
        &self,
        send: &[u8],
        recv: &mut [u8],
        red: &Reducer<'_>,
    ) -> Result<bool> {
        self.all_to_all(send, |peers| self.fold(peers, send, 0, recv, red))
    }

    /// Reduce-scatter: every rank offers `send` to all; rank r folds block r of all of them
    /// into `recv`.
    pub(super) fn direct_reduce_scatter(
        &self,
        send: &[u8],
        recv: &mut [u8],
        red: &Reducer<'_>,
    ) -> Result<bool> {
        let from = self.me * recv.len();
        self.all_to_all(send, |peers| self.fold(peers, send, from, recv, red))
    }
}
