//! [`ProxyBuf`]: a rank's buffer for posted operations, in memory its proxy reaches.
//!
//! The one `unsafe` here makes a slice of a node proxy's arena as this rank maps it. What
//! makes it sound: the mapping is this buffer's own (made for it, unmapped only when it
//! drops), its length is the slice's, its address is page-aligned (so aligned for every
//! element type), memfd memory starts zeroed (a valid value of every `Element`, which are
//! plain old data), and the proxy process (or a peer reading or writing it in place, as a
//! communicator's buffer) touches it only while an operation posted in a scope runs, for which
//! the scope borrows the buffer (shared or exclusive, as the operation reads or writes it) and
//! waits for the proxy's answer before it ends.
#![allow(unsafe_code)]

use std::ops::{Deref, DerefMut};

use super::super::Proxy;
use crate::coll::Element;
use crate::transport::NodeMemory;

/// A buffer of `T` for operations posted to a [`Proxy`] ([`Proxy::alloc`]): memory the node
/// proxy process maps too, or ordinary memory for a progress thread. Derefs to `[T]`; zeroed
/// when made. Dropping it gives the memory back (through the proxy, for an arena).
pub struct ProxyBuf<'p, T: Element> {
    proxy: &'p Proxy,
    held: Held<T>,
}

enum Held<T> {
    Heap(Box<[T]>),
    Arena {
        arena: u32,
        map: NodeMemory,
        n: usize,
    },
}

impl<'p, T: Element> ProxyBuf<'p, T> {
    pub(super) fn heap(proxy: &'p Proxy, n: usize) -> Self {
        Self {
            proxy,
            held: Held::Heap(vec![T::zeroed(); n].into_boxed_slice()),
        }
    }

    /// `n` elements at the start of `map`, arena `arena` of the node proxy.
    pub(super) fn arena(proxy: &'p Proxy, arena: u32, map: NodeMemory, n: usize) -> Self {
        debug_assert!(map.len() >= n * std::mem::size_of::<T>());
        Self {
            proxy,
            held: Held::Arena { arena, map, n },
        }
    }

    /// Whether the node proxy process maps this buffer too (else it is ordinary memory).
    pub fn is_shared(&self) -> bool {
        matches!(self.held, Held::Arena { .. })
    }
}

#[cfg(target_pointer_width = "64")]
impl ProxyBuf<'_, u64> {
    /// The buffer as sizes (counts, displacements: `iallgatherv_in_place`'s through the node
    /// proxy, which must lie in its memory).
    pub fn as_usize(&self) -> &[usize] {
        bytemuck::cast_slice(self)
    }

    /// [`ProxyBuf::as_usize`], to fill.
    pub fn as_usize_mut(&mut self) -> &mut [usize] {
        bytemuck::cast_slice_mut(self)
    }
}

impl<T: Element> Deref for ProxyBuf<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.held {
            Held::Heap(b) => b,
            // SAFETY: module docs: this buffer's own mapping of at least `n` elements,
            // aligned, initialised; shared borrows of it are this buffer's.
            Held::Arena { map, n, .. } => unsafe {
                std::slice::from_raw_parts(map.as_ptr().cast::<T>(), *n)
            },
        }
    }
}

impl<T: Element> DerefMut for ProxyBuf<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.held {
            Held::Heap(b) => b,
            // SAFETY: as `deref`; `&mut self` makes the borrow exclusive in this process, and
            // the proxy touches the memory only for operations whose scope borrows it.
            Held::Arena { map, n, .. } => unsafe {
                std::slice::from_raw_parts_mut(map.as_ptr().cast::<T>(), *n)
            },
        }
    }
}

impl<T: Element> Drop for ProxyBuf<'_, T> {
    fn drop(&mut self) {
        if let Held::Arena { arena, .. } = self.held {
            super::free(self.proxy, arena);
        }
    }
}

impl<T: Element + std::fmt::Debug> std::fmt::Debug for ProxyBuf<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyBuf")
            .field("len", &self.len())
            .field("shared", &self.is_shared())
            .finish()
    }
}
