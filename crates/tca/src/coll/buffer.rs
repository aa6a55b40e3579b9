//! Buffers in tca's memory ([`Comm::buffer`]): ordinary slices to the program, and memory the
//! communicator's peers on this node can read where it lies. A large collective whose
//! buffers come from here moves each byte once, straight from the buffer it lies in into the
//! buffer it is meant for (`coll::direct`), where a collective over ordinary memory copies it
//! twice (into a channel slot, out of it). OpenSHMEM's `shmem_malloc`, MPI's
//! `MPI_Alloc_mem` and Open MPI's XPMEM single copy are the same idea; on TCA's hardware only
//! registered memory can be reached by a peer at all.
//!
//! # Why the views are sound
//! A buffer is a segment whose handle is never given out: no peer can put into it. Its
//! handle travels only inside the collectives of the communicator that allocated it
//! (`coll::direct`), where peers *read* it, and only while this rank is inside that call with
//! the slice borrowed by the call; the call returns only when every reader has said it is
//! done. So the program's `&mut [T]` (from [`DerefMut`]) never coexists with a reader, and a
//! `&[T]` only with readers. A broadcast's root passes its buffer as `&mut [T]` and is read
//! meanwhile: it writes nothing during the call, and with ranks in separate processes (how
//! `tca run` starts them) a peer's read is another process's access, outside this program's
//! aliasing model.

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
/// starts (`Comm::buffer` adds, [`Buffer`]'s drop removes). A mutex, taken once per large
/// collective, because a buffer may be dropped on another thread than its communicator's.
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

    fn add(&self, e: Entry) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(e);
    }

    fn remove(&self, addr: usize) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|e| e.addr != addr);
    }
}

/// `len` elements of `T` in tca's memory, zeroed: a slice to the program ([`Deref`] and
/// [`DerefMut`] to `[T]`), read in place by the peers of the communicator that allocated it
/// ([`Comm::buffer`](super::Comm::buffer)) in its large collectives on this node: see the
/// module doc.
#[derive(Debug)]
pub struct Buffer<T: Element> {
    seg: Segment,
    len: usize,
    registry: Registry,
    _t: PhantomData<T>,
}

impl<T: Element> Buffer<T> {
    /// Wraps `seg` (at least `len` elements of `T`) and registers it with `registry`.
    pub(crate) fn new(seg: Segment, len: usize, registry: &Registry) -> Self {
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
        // SAFETY: no writer while the slice lives: no peer holds the handle outside a
        // collective that reads only, and this rank writes only through `DerefMut`, which
        // needs `&mut self` (module doc). In range and aligned: the segment holds `len`
        // elements from its page-aligned start (checked inside; empty on a failure that
        // cannot happen).
        unsafe { self.seg.view::<T>(0, self.len) }.unwrap_or(&[])
    }
}

impl<T: Element> DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: exclusive while the slice lives: peers read the buffer only inside a
        // collective this rank is in, with the buffer borrowed by that call, and the call
        // returns after the last read (module doc); `&mut self` excludes every other view.
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
    /// Allocates `len` zeroed elements of `T` in tca's memory: a slice to this program, and a
    /// buffer that this communicator's large collectives on one node read in place, one copy
    /// per byte (see `coll::direct`; `TCA_DIRECT` sets from which size). Collective: every
    /// member calls it, each with the length it needs, before the collectives that should use
    /// such buffers (it switches them to offering theirs, on every member alike). Buffers of
    /// ordinary memory keep working as before, also mixed with these.
    pub fn buffer<T: Element>(&self, len: usize) -> crate::Result<Buffer<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            crate::Error::new(
                crate::ErrorKind::InvalidArgument,
                format!("a buffer of {len} elements overflows the address space"),
            )
        })?;
        let seg = self.world.alloc(bytes)?;
        self.direct.set(true);
        Ok(Buffer::new(seg, len, &self.buffers))
    }
}
