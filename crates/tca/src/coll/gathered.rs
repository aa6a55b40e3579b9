//! A persistent Allgatherv in one copy: [`Comm::allgatherv_init`] sets up a vector in tca's own
//! memory that the same Allgatherv fills again and again (a CG solver's direction vector, a
//! halo of every rank's boundary), and each round every rank writes its block straight into
//! every peer's vector, then adds one to the peer's arrival count (seed 000's collectives:
//! remote writes and flags only). No chunking, no ring slot, no copy out: one copy per byte
//! and peer, where an Allgatherv into ordinary memory copies twice (into the peer's ring,
//! out of it). MPI 4's `MPI_Allgatherv_init` is the same idea for a user's buffer, OpenSHMEM's
//! `fcollect` for symmetric memory.
//!
//! # Rounds and buffers
//! The vector is kept twice. Round k gathers into buffer k mod 2 on every rank: a rank writes
//! its block there with [`Gathered::block_mut`] (all of it, every round), runs the round
//! ([`Gathered::run`], or [`Gathered::run_overlapped`], which computes while the peers'
//! blocks arrive: this rank's puts are done before its computation starts), and reads the
//! whole vector with [`Gathered::vector`] until its next round. A round is one call that puts,
//! lets the caller compute, and waits: no handle to a half-done round exists, so none can be
//! leaked and a round cannot start before the last one is complete. Why peers never write
//! what a rank is reading:
//! - a peer writes round k+1 into buffer (k+1) mod 2, the buffer of round k-1, and only once it
//!   has finished round k itself, which needs this rank's block of round k, which this rank
//!   puts when its round k starts, after which it no longer reads round k-1's vector (the
//!   borrow checker sees to it: a round takes the vector mutably);
//! - a peer writes only its own block, and every rank checked at set-up that all ranks gave
//!   the same counts and displacements, so this rank's block (which `block_mut` hands out
//!   while peers may be writing theirs) is never written by anyone else;
//! - after an error (a dead peer, a timeout, a panic in the computation of a round) the
//!   rounds' bookkeeping no longer says where peers write: the vector refuses further rounds
//!   and reads, and the job is aborted (the peers would wait for this rank's next block).
//!
//! Arrivals are counted per buffer: each put carries an add of one to the counter of the
//! buffer it wrote (a reader that sees the count sees the data), and round k, the (k div 2 +
//! 1)-th use of buffer k mod 2, is complete when that counter reaches (k div 2 + 1)(p - 1). One
//! counter for both buffers would not do from three ranks on: a fast peer may finish round k
//! and put its block of round k+1 before a slow peer's block of round k has reached this rank,
//! and that arrival would complete the count early (the test
//! `gathered_vector_holds_every_rounds_blocks` fails so). No peer gets two rounds ahead (it
//! would need this rank's block of the next round), so a counter per buffer counts one round's
//! arrivals only. Waiting is the fabric's wait (spin, then sleep; a dead peer is an error
//! naming it).
//!
//! On shared memory a put is the sender's copy into the receiver's vector: a peer's block is
//! in place whatever the receiver does meanwhile. Across a network the puts are RDMA writes
//! where the provider does them; an eager write is completed by the receiver's progress (its
//! waits). On a simulated network the puts are priced as any others.

#![allow(unsafe_code)] // the views of the vector, each argued from the rounds' protocol

use std::marker::PhantomData;

use super::{Comm, Element, Op};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::{Handle, Segment, SignalOp};

/// Bytes of a cache line: each buffer's arrival counter has one to itself.
const LINE: usize = 64;
/// Bytes before the buffers: the two arrival counters.
const HEAD: usize = 2 * LINE;

/// A vector gathered by the same Allgatherv round after round, in tca's memory (see the
/// module doc). Built by [`Comm::allgatherv_init`]; used with the communicator it was built
/// on (checked).
#[derive(Debug)]
pub struct Gathered<T: Element> {
    seg: Segment,
    /// Every member's segment, by communicator rank.
    handles: Vec<Handle>,
    /// Elements in the vector.
    len: usize,
    /// This rank's place in the communicator.
    me: usize,
    /// This rank's block: elements `lo..hi`.
    lo: usize,
    hi: usize,
    /// Byte distance between the two buffers (the vector's length rounded up to a line).
    stride: usize,
    /// Rounds completed.
    rounds: u64,
    /// The world rank and job this plan belongs to (the check that a call passes its comm).
    world_rank: u32,
    job: u64,
    /// Set by an error: the rounds' bookkeeping no longer matches the peers'.
    broken: bool,
    _t: PhantomData<T>,
}

impl Comm<'_> {
    /// Sets up a persistent Allgatherv of `T`s (collective): a vector of `len` elements in
    /// tca's memory, rank r's block `displs[r]..displs[r] + counts[r]`, every rank passing the
    /// same `len`, `counts` and `displs` (checked: ranks that differ get an error on every
    /// rank). Each round costs each rank one put of its block per peer; see [`Gathered`].
    pub fn allgatherv_init<T: Element>(
        &self,
        len: usize,
        counts: &[usize],
        displs: &[usize],
    ) -> Result<Gathered<T>> {
        self.check_v(len, counts, displs)?;
        let p = self.p();
        // Every rank's description (element type and size included: the same numbers of
        // another type put other bytes), compared through its maximum and minimum over the
        // ranks: O(p) memory, exact.
        let mine: Vec<u64> = [len, std::mem::size_of::<T>(), usize::from(T::CODE)]
            .into_iter()
            .chain(counts.iter().copied())
            .chain(displs.iter().copied())
            .map(|x| x as u64)
            .collect();
        let (mut hi, mut lo) = (mine.clone(), mine);
        self.allreduce_in_place(&mut hi, &Op::Max)?;
        self.allreduce_in_place(&mut lo, &Op::Min)?;
        if let Some(i) = (0..hi.len()).find(|&i| hi[i] != lo[i]) {
            let what = match i {
                0 => "vector length".to_string(),
                1 | 2 => "element type".to_string(),
                i if i < 3 + p => format!("count of rank {}", i - 3),
                i => format!("displacement of rank {}", i - 3 - p),
            };
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "allgatherv_init: ranks passed different descriptions (the {what} ranges \
                     from {} to {}); every rank must describe the same vector",
                    lo[i], hi[i]
                ),
            ));
        }
        // The same on every rank (the description agreed): an error here is every rank's.
        let sz = std::mem::size_of::<T>();
        let stride = len
            .checked_mul(sz)
            .and_then(|b| b.checked_next_multiple_of(LINE));
        let total = stride.and_then(|s| s.checked_mul(2)?.checked_add(HEAD));
        let (Some(stride), Some(total)) = (stride, total) else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("allgatherv_init: two vectors of {len} elements of {sz} bytes overflow"),
            ));
        };
        // A failure here is this rank's alone, and the others are on their way into the
        // exchange of handles: abort rather than leave them waiting.
        let seg = match self.world.alloc(total) {
            Ok(s) => s,
            Err(e) => {
                self.fail(e.clone())?;
                return Err(e);
            }
        };
        let mut hall = vec![0u8; Handle::BYTES * p];
        self.allgather(&seg.handle().to_bytes(), &mut hall)?;
        let handles = hall
            .chunks_exact(Handle::BYTES)
            .map(Handle::from_bytes)
            .collect::<Result<Vec<_>>>()?;
        let (lo, hi) = (displs[self.me], displs[self.me] + counts[self.me]);
        Ok(Gathered {
            seg,
            handles,
            len,
            me: self.me,
            lo,
            hi,
            stride,
            rounds: 0,
            world_rank: self.world.rank(),
            job: self.world.job_id(),
            broken: false,
            _t: PhantomData,
        })
    }
}

impl<T: Element> Gathered<T> {
    /// Elements in the vector.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the vector has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// This rank's block (element range).
    pub fn block(&self) -> std::ops::Range<usize> {
        self.lo..self.hi
    }

    /// Rounds completed.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// The buffer round `k` gathers into: 0 or 1.
    fn buffer(k: u64) -> usize {
        usize::from(k % 2 == 1)
    }

    /// First element of buffer `b` (0 or 1), as an element index into the segment (the head
    /// and the stride are whole lines, and every element type's size divides a line).
    fn base(&self, b: usize) -> usize {
        (HEAD + b * self.stride) / std::mem::size_of::<T>()
    }

    /// This rank's block in the buffer the next round gathers into: write all of it, then
    /// run the round ([`Gathered::run`], [`Gathered::run_overlapped`]). The two buffers
    /// alternate, so before it is written it holds this rank's block of two rounds ago (zeros
    /// at first), not the last round's: a rank that sends the same block again writes it
    /// again. Peers may be writing their own blocks of that buffer meanwhile (never this one).
    pub fn block_mut(&mut self) -> &mut [T] {
        let at = self.base(Self::buffer(self.rounds)) + self.lo;
        // SAFETY: only this rank writes its block (counts and displacements were checked to
        // be the same on every rank and the blocks not to overlap, so no peer's put reaches
        // these elements), and this rank's own paths to it (`vector`, the puts of a round in
        // `put_block`) need `&self` or `&mut self`, which the returned borrow excludes.
        let v = unsafe { self.seg.view_mut::<T>(at, self.hi - self.lo) };
        v.expect("the block lies inside the segment (sized for it at set-up)")
    }

    /// The vector the last round gathered (every rank's block); all zeros before the first.
    /// An error after a round failed (module doc).
    pub fn vector(&self) -> Result<&[T]> {
        self.usable()?;
        // Before the first round, buffer 1 (never written until round 1 completes here).
        let b = Self::buffer(self.rounds + 1);
        // SAFETY: peers write this buffer again in round `rounds + 1` only, which they enter
        // after finishing round `rounds`, which needs this rank's block of that round, put in
        // a round, which takes `&mut self` and so cannot run while this borrow lives (module
        // doc, "Rounds and buffers"); a failed round made the vector unusable (checked
        // above). Before the first round nobody writes buffer 1: a peer writes it in round 1,
        // after finishing round 0, which needs this rank's round 0.
        let v = unsafe { self.seg.view::<T>(self.base(b), self.len) };
        Ok(v.expect("the vector lies inside the segment (sized for it at set-up)"))
    }

    /// A round: puts this rank's block (as [`Gathered::block_mut`] left it) into every peer's
    /// vector, each put followed by its arrival signal, and waits for every peer's block.
    pub fn run(&mut self, c: &Comm<'_>) -> Result<()> {
        self.run_overlapped(c, |_| ())
    }

    /// A round that computes while the peers' blocks arrive: puts this rank's block, runs
    /// `during` on it (this rank's block of the round, to compute with), then waits for every
    /// peer's block. A round that does not finish (an error, a panic in `during`) leaves the
    /// vector refusing further rounds and reads, and aborts the job: the peers would wait
    /// for this rank's next block forever (they get an error naming this rank instead).
    pub fn run_overlapped<R>(&mut self, c: &Comm<'_>, during: impl FnOnce(&[T]) -> R) -> Result<R> {
        self.check(c)?;
        self.broken = true;
        // A panic in `during` aborts the job in the guard's drop; an error, here.
        let unfinished = Unfinished(c.world);
        let r = self.round(c, during);
        std::mem::forget(unfinished);
        match r {
            Ok(out) => {
                self.broken = false;
                Ok(out)
            }
            Err(e) => {
                c.world.abort_after(&e);
                Err(e)
            }
        }
    }

    fn round<R>(&mut self, c: &Comm<'_>, during: impl FnOnce(&[T]) -> R) -> Result<R> {
        self.put_block(c)?;
        let out = during(self.own_block(Self::buffer(self.rounds)));
        self.finish(c)?;
        Ok(out)
    }

    fn usable(&self) -> Result<()> {
        if self.broken {
            return Err(Error::new(
                ErrorKind::Aborted,
                "this gathered vector was left inconsistent by an earlier error; set up a new one",
            ));
        }
        Ok(())
    }

    /// That `c` is the communicator the vector was set up on: the same world rank, job and
    /// members in the same order. Another one is this rank's mistake alone, and its peers wait
    /// for its block: the job is aborted (as for a collective's bad buffer).
    fn check(&self, c: &Comm<'_>) -> Result<()> {
        self.usable()?;
        let w = c.world;
        let same = w.rank() == self.world_rank
            && w.job_id() == self.job
            && c.me == self.me
            && c.ranks.len() == self.handles.len()
            && c.ranks
                .iter()
                .zip(&self.handles)
                .all(|(&r, h)| r == h.rank());
        if !same {
            c.fail(Error::new(
                ErrorKind::InvalidArgument,
                "a gathered vector used with a communicator other than the one it was set up on",
            ))?;
        }
        Ok(())
    }

    fn put_block(&self, c: &Comm<'_>) -> Result<()> {
        let sz = std::mem::size_of::<T>();
        let b = Self::buffer(self.rounds);
        let off = HEAD + b * self.stride + self.lo * sz;
        let n = (self.hi - self.lo) * sz;
        // The block as bytes, read in place: this rank is its only writer, and nothing writes
        // it while `&self` lives.
        let block = self.own_block(b);
        let bytes: &[u8] = bytemuck::cast_slice(block);
        debug_assert_eq!(bytes.len(), n);
        let p = self.handles.len();
        // Peers in the order me+1, me+2, ...: not everyone writing rank 0 first.
        for i in 1..p {
            let q = (self.me + i) % p;
            let h = &self.handles[q];
            c.world
                .put_signal(h, off, bytes, h, b * LINE, SignalOp::Add(1))?;
        }
        Ok(())
    }

    /// This rank's block of buffer `b`, shared.
    fn own_block(&self, b: usize) -> &[T] {
        // SAFETY: only this rank writes its block (see `block_mut`), and not while `&self`
        // lives.
        let v = unsafe {
            self.seg
                .view::<T>(self.base(b) + self.lo, self.hi - self.lo)
        };
        v.expect("the block lies inside the segment (sized for it at set-up)")
    }

    /// Waits for every peer's block of the round under way. (No `quiet`: the puts' sources
    /// are free when `put_signal` returns, on every transport, and each peer counts the
    /// arrivals it waits for.)
    fn finish(&mut self, c: &Comm<'_>) -> Result<()> {
        let p = self.handles.len() as u64;
        let b = Self::buffer(self.rounds);
        let want = (self.rounds / 2 + 1) * (p - 1);
        c.world.wait_until(&self.seg, b * LINE, want)?;
        self.rounds += 1;
        Ok(())
    }
}

/// Aborts the job when dropped: armed while a round runs, forgotten when it finishes.
struct Unfinished<'w>(&'w crate::fabric::World);

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
