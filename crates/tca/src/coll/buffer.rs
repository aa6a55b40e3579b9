//! Buffers in tca's memory ([`Comm::buffer`]): ordinary slices to the program, and memory the
//! communicator's peers on this node can read where it lies. A large collective whose
//! buffers come from here moves each byte once, straight from the buffer it lies in into the
//! buffer it is meant for (`coll::direct`), where a collective over ordinary memory copies it
//! twice (into a channel slot, out of it). OpenSHMEM's `shmem_malloc`, MPI's
//! `MPI_Alloc_mem` and Open MPI's XPMEM single copy are the same idea; on TCA's hardware only
//! registered memory can be reached by a peer at all.
//!
//! # Why the views are sound
//! A buffer is a segment whose handle no peer *uses* except inside a call of this rank that
//! borrows the slice (peers may keep it in their attach caches and rendezvous slots after):
//! the collectives of the communicator that allocated it (`coll::direct`), where peers *read*
//! it, and a two-sided receive this rank waits in, where the sender *puts* the message into
//! it once it has claimed the transfer, which the wait revokes or waits for before it returns
//! (`p2p::engine`, "Cross-memory attach and `Buffer`s"). A collective returns only when every
//! reader has said it is done. So the program's `&mut [T]` (from [`DerefMut`]) never
//! coexists with another rank's access outside such a call, and a `&[T]` only with readers.
//! Three cases are weaker:
//! - A broadcast's root passes its buffer as `&mut [T]` and is read meanwhile. It writes
//!   nothing during the call. With ranks in separate processes (how `tca run` starts them) a
//!   peer's read is another process's access, outside this program's aliasing model; with
//!   ranks as threads of one process (`tca::threads`) it is a read by another thread under a
//!   live but unused `&mut`, which no write races with.
//! - A two-sided receive into a buffer is written by the sender's put while the receive holds
//!   the slice as `&mut [T]` (as a receive by cross-memory attach is written by the kernel):
//!   from another process, outside this program's aliasing model; between thread ranks, a
//!   write by another thread into memory under a live `&mut` the receiver does not touch
//!   until the done word says the write is over.
//! - When the protocol fails half way (a dead peer, an abort), the owner returns with the
//!   error while a slower reader may still be copying; the job is aborted then, and a program
//!   that writes the buffer after such an error may race with that last read (a torn value
//!   in the reader, which has failed too).

#![allow(unsafe_code)] // the views of the buffer's segment, argued above

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, PoisonError};

use super::Element;
use crate::fabric::{Handle, Segment};

/// Where a live buffer's bytes lie, for the communicator that allocated it.
#[derive(Debug, Clone, Copy)]
struct Entry {
    addr: usize,
    bytes: usize,
    handle: Handle,
}

/// The live buffers of one communicator: looked up by address when a large collective
/// starts and when a rendezvous receive in hand is matched (`Comm::buffer` adds, [`Buffer`]'s
/// drop removes; the node proxy adds and removes its ranks' arenas, `offload::node`). A mutex, taken once per such call, because a buffer may be dropped on
/// another thread than its communicator's.
#[derive(Debug, Default, Clone)]
pub(crate) struct Registry(Arc<Mutex<Vec<Entry>>>);

impl Registry {
    /// The handle of the buffer holding all of `bytes` (a slice of this process) and the
    /// slice's offset in it, if one does.
    pub(crate) fn find(&self, bytes: &[u8]) -> Option<(Handle, usize)> {
        let (at, n) = (bytes.as_ptr() as usize, bytes.len());
        let list = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        list.iter()
            .find(|e| at >= e.addr && at - e.addr <= e.bytes && n <= e.bytes - (at - e.addr))
            .map(|e| (e.handle, at - e.addr))
    }

    /// Registers `seg`'s data, which lies at `addr` in this process (the node proxy's arenas:
    /// memory of its rank's world that its collectives read in place, as a [`Buffer`]'s).
    pub(crate) fn adopt(&self, seg: &Segment, addr: usize) {
        self.add(Entry {
            addr,
            bytes: seg.len(),
            handle: seg.handle(),
        });
    }

    fn add(&self, e: Entry) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(e);
    }

    pub(crate) fn remove(&self, addr: usize) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|e| e.addr != addr);
    }
}

/// `len` elements of `T` in tca's memory, zeroed: a slice to the program ([`Deref`] and
/// [`DerefMut`] to `[T]`), made by [`Comm::buffer`](super::Comm::buffer).
///
/// On one node, the peers of the communicator that allocated it read it in place in that
/// communicator's large blocking collectives (single copy: each byte copied once, by its
/// reader, after one small message saying where it lies and before one saying it is done),
/// and a sender puts a large two-sided message straight into it when this rank receives into
/// it and waits. Peers touch it only inside such a call of this rank, which returns after
/// their last access; after a failed call (a dead peer, an abort: the job is ending) a slower
/// peer may still be reading. Dropping it unregisters and frees it.
#[derive(Debug)]
pub struct Buffer<T: Element> {
    seg: Segment,
    len: usize,
    registry: Registry,
    _t: PhantomData<T>,
}

impl<T: Element> Buffer<T> {
    /// Wraps `seg` (at least `len` elements of `T`) and registers it with `registry`.
    fn new(seg: Segment, len: usize, registry: &Registry) -> Self {
        let me = Self {
            seg,
            len,
            registry: registry.clone(),
            _t: PhantomData,
        };
        let bytes: &[u8] = bytemuck::cast_slice(&me[..]);
        registry.add(Entry {
            addr: bytes.as_ptr() as usize,
            bytes: bytes.len(),
            handle: me.seg.handle(),
        });
        me
    }
}

impl<T: Element> Deref for Buffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: no writer while the slice lives: a peer uses the handle only inside a call
        // of this rank that borrows the slice (a collective, which reads; a receive, which
        // borrows it mutably), and this rank writes only through `DerefMut`, which needs
        // `&mut self` (module doc). In range and aligned: the segment holds `len`
        // elements from its page-aligned start (checked inside; empty on a failure that
        // cannot happen).
        unsafe { self.seg.view::<T>(0, self.len) }.unwrap_or(&[])
    }
}

impl<T: Element> DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: exclusive while the slice lives: peers read or write the buffer only inside
        // a call of this rank that borrows it (a collective, a receive), which returns after
        // their last access (module doc); `&mut self` excludes every other view.
        unsafe { self.seg.view_mut::<T>(0, self.len) }.unwrap_or(&mut [])
    }
}

impl<T: Element> Drop for Buffer<T> {
    fn drop(&mut self) {
        let bytes: &[u8] = bytemuck::cast_slice(&self[..]);
        self.registry.remove(bytes.as_ptr() as usize);
    }
}

impl super::Comm<'_> {
    /// Makes this communicator's large collectives offer registered buffers from now on, as
    /// [`Comm::buffer`](super::Comm::buffer) does, without its barrier: for a caller that does
    /// this on every member before any member's next collective (the node proxy, on each
    /// rank's communicator as it is made). The registry to adopt segments into.
    pub(crate) fn offer_buffers(&self) -> Registry {
        self.direct.set(true);
        self.buffers.clone()
    }

    /// Allocates `len` zeroed elements of `T` in tca's memory: a slice to this program, and a
    /// buffer that this communicator's large blocking collectives on one node read in place,
    /// one copy per byte: `broadcast`, `scatter`, `gather`, `reduce`, `allgather`, `alltoall`,
    /// `allreduce` (up to [`SINGLE_COPY_ALLREDUCE_RANKS`](super::SINGLE_COPY_ALLREDUCE_RANKS)
    /// ranks with a core each, or from
    /// [`ALLREDUCE_CROWDED_MIN`](super::ALLREDUCE_CROWDED_MIN) bytes) and `reduce_scatter`, from
    /// [`single_copy_min`](super::Comm::single_copy_min) bytes on
    /// ([`SINGLE_COPY_MIN`](super::SINGLE_COPY_MIN); the rooted ones from
    /// [`SINGLE_COPY_ROOTED_MIN`](super::SINGLE_COPY_ROOTED_MIN); or
    /// [`SINGLE_COPY_MIN_CROWDED`](super::SINGLE_COPY_MIN_CROWDED) with more ranks than cores;
    /// `TCA_SINGLE_COPY`). A two-sided receive into it that this rank waits in takes a large
    /// message from a rank of this node as one put.
    /// [`Comm::single_copy_calls`](super::Comm::single_copy_calls) counts the collectives
    /// that went single-copy.
    ///
    /// Collective, as OpenSHMEM's `shmem_malloc`: every member calls it, each with the length it
    /// needs (a barrier, after which every member's large collectives offer their buffers: all take
    /// the same branch of each call, so a member that skipped it would stall the others here, not
    /// confuse a later collective). Buffers of ordinary memory keep working, also mixed with these:
    /// a call where a buffer that peers would read is ordinary memory falls back to the channels on
    /// every rank. A rank whose allocation fails gets the error and its communicator stays
    /// consistent. Each buffer is a segment of its own (a memory file, a descriptor, a header page,
    /// whole pages): allocate a few large ones and take slices, rather than many small ones.
    pub fn buffer<T: Element>(&self, len: usize) -> crate::Result<Buffer<T>> {
        self.direct.set(true);
        self.barrier()?;
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            crate::Error::new(
                crate::ErrorKind::InvalidArgument,
                format!("a buffer of {len} elements overflows the address space"),
            )
        })?;
        let seg = self.world.alloc(bytes)?;
        Ok(Buffer::new(seg, len, &self.buffers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(n: u32) -> Handle {
        Handle::new(1, 2, 100, 0, n)
    }

    #[test]
    fn registry_finds_slices_wholly_inside_a_buffer() {
        let r = Registry::default();
        let mem = vec![0u8; 300];
        let (a, b) = mem.split_at(100);
        let e = |s: &[u8], n| Entry {
            addr: s.as_ptr() as usize,
            bytes: s.len(),
            handle: handle(n),
        };
        r.add(e(a, 1));
        r.add(e(&b[..100], 2));
        let seg = |x: Option<(Handle, usize)>| x.map(|(h, off)| (h.segment(), off));
        assert_eq!(seg(r.find(a)), Some((1, 0)));
        assert_eq!(seg(r.find(&a[10..])), Some((1, 10)));
        assert_eq!(
            seg(r.find(&a[100..])),
            Some((1, 100)),
            "empty slice at the end"
        );
        assert_eq!(seg(r.find(&b[50..100])), Some((2, 50)));
        assert_eq!(seg(r.find(&mem[90..110])), None, "across two buffers");
        assert_eq!(seg(r.find(&b[150..])), None, "past the end");
        r.remove(a.as_ptr() as usize);
        assert_eq!(seg(r.find(&a[10..])), None, "removed");
        assert_eq!(seg(r.find(&b[..10])), Some((2, 0)));
    }
}
