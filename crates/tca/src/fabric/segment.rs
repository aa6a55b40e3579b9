//! Segments (memory registered for remote writes) and their handles.
//!
//! A segment's memory is a region of this node (see `transport::Region`: a sealed memfd
//! with a checked header); a handle names it to peers, whatever transport carries their writes.

#![allow(unsafe_code)] // the zero-copy views, each with its contract

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytemuck::{Pod, Zeroable};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
pub(crate) use crate::transport::{Region, out_of_bounds};

/// What a peer needs to write into a segment: owner rank, segment id, length, key and job.
///
/// Handles are plain data (32 bytes, [`Pod`]): send them to peers any way you like (a put, a
/// file, serde). A handle is only a claim: the owner's header is checked against it when a
/// peer attaches, so a forged, foreign or stale handle is refused before any byte is written.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Pod, Zeroable, Serialize, Deserialize)]
pub struct Handle {
    job: u64,
    key: u64,
    len: u64,
    rank: u32,
    segment: u32,
}

impl Handle {
    /// Size of a handle in bytes (see [`Handle::to_bytes`]).
    pub const BYTES: usize = 32;

    /// Rank that owns the segment.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Segment id, unique among the owner's live segments.
    pub fn segment(&self) -> u32 {
        self.segment
    }

    /// Length of the segment's data in bytes.
    pub fn len(&self) -> usize {
        // A peer's handle may claim any length: past usize::MAX (32-bit targets) it
        // saturates, and the segment it names then fails its length check when attached.
        crate::cast::usize_sat(self.len)
    }

    /// Whether the segment has no data bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The random key that proves the handle came from the owner.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The job the segment belongs to.
    pub fn job(&self) -> u64 {
        self.job
    }

    /// The handle as 32 bytes, to send to a peer.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        bytemuck::cast(*self)
    }

    /// A handle from 32 bytes (checked when used, not here).
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        bytemuck::try_pod_read_unaligned(b).map_err(|_| {
            Error::new(
                ErrorKind::InvalidHandle,
                format!("a handle is {} bytes, got {}", Self::BYTES, b.len()),
            )
        })
    }

    pub(crate) fn new(job: u64, key: u64, len: usize, rank: u32, segment: u32) -> Self {
        Self {
            job,
            key,
            len: len as u64,
            rank,
            segment,
        }
    }

    /// The same handle with fields changed, for tests of the checks (forged handles).
    #[doc(hidden)]
    pub fn forged(
        mut self,
        rank: Option<u32>,
        key: Option<u64>,
        len: Option<usize>,
        job: Option<u64>,
    ) -> Self {
        if let Some(r) = rank {
            self.rank = r;
        }
        if let Some(k) = key {
            self.key = k;
        }
        if let Some(l) = len {
            self.len = l as u64;
        }
        if let Some(j) = job {
            self.job = j;
        }
        self
    }
}

/// Memory this rank registered: peers write into it through its [`Handle`].
///
/// Reads and writes through the segment are local copies (typed with [`Segment::read_slice`]
/// and [`Segment::write_slice`]); zero-copy typed views are `unsafe`, because shared memory
/// cannot promise Rust's aliasing rules (see [`Segment::view`]). Remote writes can land at any time the protocol allows, so read
/// after waiting on the signal that says the data is there. Dropping the segment frees it:
/// peers that still hold its handle get [`ErrorKind::InvalidHandle`] on their next put.
#[derive(Debug)]
pub struct Segment {
    pub(crate) region: Arc<Region>,
}

impl Segment {
    /// The handle to give to peers.
    pub fn handle(&self) -> Handle {
        self.region.handle
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.region.handle.len()
    }

    /// How another process of this node reaches this local segment's data: the descriptor
    /// this process holds it by (opened through `/proc`, `transport::NodeMemory::
    /// open_segment_data`), and where the data lies in this process.
    pub(crate) fn node_view(&self) -> Result<(u32, usize)> {
        let fd = self.region.descriptor().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                "a peer's segment has no descriptor here to share",
            )
        })?;
        Ok((fd, self.region.data_ptr().0 as usize))
    }

    /// Whether the segment has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `src` into the segment at `off`.
    pub fn write(&self, off: usize, src: &[u8]) -> Result<()> {
        let at = self.region.range(off, src.len())?;
        self.region.map.write(at, src)
    }

    /// Copies bytes at `off` into `dst`.
    #[inline]
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        let at = self.region.range(off, dst.len())?;
        self.region.map.read(at, dst)
    }

    /// The current value of the signal word at `off` (Acquire).
    #[inline]
    pub fn signal_value(&self, off: usize) -> Result<u64> {
        Ok(self.region.word(off)?.load(Ordering::Acquire))
    }

    /// Copies elements `start..start + out.len()` of the segment, viewed as an array of `T`,
    /// into `out`. The safe way to read typed data (a copy, so a peer's later write cannot
    /// change what the caller holds).
    pub fn read_slice<T: Pod>(&self, start: usize, out: &mut [T]) -> Result<()> {
        let off = start
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| out_of_bounds(&self.handle(), usize::MAX, 0))?;
        self.read(off, bytemuck::cast_slice_mut(out))
    }

    /// Copies `src` into elements `start..start + src.len()` of the segment viewed as `T`s.
    pub fn write_slice<T: Pod>(&self, start: usize, src: &[T]) -> Result<()> {
        let off = start
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| out_of_bounds(&self.handle(), usize::MAX, 0))?;
        self.write(off, bytemuck::cast_slice(src))
    }

    /// Elements `start..start + count` as a borrowed slice of `T`, without copying.
    ///
    /// # Safety
    /// While the returned slice lives, nothing may write those bytes: no peer (their puts,
    /// signals, chains), no other thread, and no write through this rank's own handles,
    /// `RemoteWord`s or `Segment::write`. The usual way to guarantee it is the protocol: wait
    /// for the signal that says the data is complete, and do not signal the writers that they
    /// may write again until the slice is dropped. Use [`Segment::read_slice`] when in doubt.
    pub unsafe fn view<T: Pod>(&self, start: usize, count: usize) -> Result<&[T]> {
        let (at, off, bytes) = self.elements::<T>(start, count)?;
        // SAFETY: range checked (and again inside); the no-writer obligation is the caller's,
        // stated in this function's contract.
        unsafe { self.region.map.view(at, count) }
            .ok_or_else(|| out_of_bounds(&self.handle(), off, bytes))
    }

    /// Where elements `start..start + count` of `T` lie: the mapping offset, the data offset
    /// and the byte count, checked against the segment.
    fn elements<T: Pod>(&self, start: usize, count: usize) -> Result<(usize, usize, usize)> {
        let sz = std::mem::size_of::<T>();
        let off = start
            .checked_mul(sz)
            .ok_or_else(|| out_of_bounds(&self.handle(), usize::MAX, 0))?;
        let bytes = count
            .checked_mul(sz)
            .ok_or_else(|| out_of_bounds(&self.handle(), off, usize::MAX))?;
        Ok((self.region.range(off, bytes)?, off, bytes))
    }

    /// Elements `start..start + count` as a mutable slice of `T`, without copying.
    ///
    /// # Safety
    /// As for [`Segment::as_mut_slice`], for those bytes: while the slice lives nothing else
    /// may read or write them (no peer, no handle, no other thread).
    #[allow(clippy::mut_from_ref)] // exclusivity is the documented obligation of the caller
    pub(crate) unsafe fn view_mut<T: Pod>(&self, start: usize, count: usize) -> Result<&mut [T]> {
        let (at, off, bytes) = self.elements::<T>(start, count)?;
        // SAFETY: range checked (and again inside); exclusivity is the caller's obligation,
        // stated in this function's contract.
        unsafe { self.region.map.view_mut(at, count) }
            .ok_or_else(|| out_of_bounds(&self.handle(), off, bytes))
    }

    /// The whole segment as a mutable slice of `T`, without copying.
    ///
    /// # Safety
    /// As for [`Segment::view`], and in addition nothing may *read* those bytes through
    /// another path (a peer, a handle, a chain) while the slice lives: `&mut` promises
    /// exclusive access, which shared memory cannot enforce.
    pub unsafe fn as_mut_slice<T: Pod>(&mut self) -> &mut [T] {
        let n = self.len() / std::mem::size_of::<T>().max(1);
        let Ok(at) = self.region.range(0, n * std::mem::size_of::<T>()) else {
            return &mut [];
        };
        // SAFETY: in range (checked just above: `n` elements fit the data area); exclusivity
        // is the caller's obligation, stated in this function's contract.
        unsafe { self.region.map.view_mut(at, n) }.unwrap_or(&mut [])
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.region.mark_freed();
    }
}

/// A segment allocated collectively: same length on every rank, with every rank's handle.
#[derive(Debug)]
pub struct SymmetricSegment {
    pub(crate) local: Segment,
    pub(crate) handles: Vec<Handle>,
}

impl SymmetricSegment {
    /// The handle of `rank`'s copy.
    pub fn handle(&self, rank: u32) -> Result<&Handle> {
        self.handles.get(rank as usize).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidRank,
                format!(
                    "rank {rank} is not in this {}-rank world",
                    self.handles.len()
                ),
            )
        })
    }

    /// All ranks' handles, indexed by rank.
    pub fn handles(&self) -> &[Handle] {
        &self.handles
    }

    /// This rank's copy.
    pub fn local(&self) -> &Segment {
        &self.local
    }

    /// This rank's copy, mutably (for zero-copy typed views).
    pub fn local_mut(&mut self) -> &mut Segment {
        &mut self.local
    }
}

impl std::ops::Deref for SymmetricSegment {
    type Target = Segment;
    fn deref(&self) -> &Segment {
        &self.local
    }
}

impl std::ops::DerefMut for SymmetricSegment {
    fn deref_mut(&mut self) -> &mut Segment {
        &mut self.local
    }
}

/// Registered buffers kept for reuse (the message engines' landing segments): the smallest
/// that fits is handed out, a new one (a power of two, at least 64 KiB) only when none
/// does, so repeated transfers register nothing.
#[derive(Debug, Default)]
pub(crate) struct SegmentPool(Vec<Segment>);

impl SegmentPool {
    /// The smallest segment worth registering for a landing (64 KiB).
    const MIN: usize = 64 << 10;

    /// A segment of at least `n` bytes.
    pub(crate) fn take(&mut self, w: &super::World, n: usize) -> Result<Segment> {
        let best = self
            .0
            .iter()
            .enumerate()
            .filter(|(_, s)| s.len() >= n)
            .min_by_key(|(_, s)| s.len())
            .map(|(i, _)| i);
        match best {
            Some(i) => Ok(self.0.swap_remove(i)),
            None => w.alloc(n.next_power_of_two().max(Self::MIN)),
        }
    }

    /// Gives a segment back for reuse.
    pub(crate) fn put(&mut self, s: Segment) {
        self.0.push(s);
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.0.iter().map(Segment::len).sum()
    }
}
