//! Memory that processes of one node share outside any world — the node proxy's channel and
//! its ranks' views of their arenas (segments the proxy's world allocated for them) — and the
//! doorbell a queue in it rings. Code above the transports reaches shared memory through this
//! door only; what it is made of (sealed memfds opened through `/proc`, the segments' header
//! page, the futex on a word's low half) stays in `shm`.

use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use super::shm::mapping::Mapping;
use super::shm::wait::Word;
use super::shm::{HEADER_BYTES, memfd};
use crate::error::Result;

/// A mapping of node-shared memory: read, written and waited on in place.
#[derive(Debug)]
pub(crate) struct NodeMemory {
    map: Mapping,
}

impl NodeMemory {
    /// New memory of `bytes` zeroed bytes (named `what` for `/proc`), and its descriptor for
    /// the processes this one starts.
    pub(crate) fn create(what: &str, bytes: usize) -> Result<(OwnedFd, Self)> {
        let fd = memfd::create(what, bytes)?;
        let map = Mapping::map(&fd, bytes)?;
        Ok((fd, Self { map }))
    }

    /// The first `bytes` bytes of the memory that process `pid` holds as descriptor `fd`.
    pub(crate) fn open(pid: u32, fd: u32, bytes: usize) -> Result<Self> {
        let f = memfd::open_peer(pid, fd)?;
        Ok(Self {
            map: Mapping::map(&f, bytes)?,
        })
    }

    /// The data of a segment of this node that process `pid` holds as descriptor `fd`
    /// ([`crate::fabric::Segment::node_view`]), `bytes` long: the segment's own bytes, not the
    /// header that guards it.
    pub(crate) fn open_segment_data(pid: u32, fd: u32, bytes: usize) -> Result<Self> {
        let f = memfd::open_peer(pid, fd)?;
        Ok(Self {
            map: Mapping::map_from(&f, HEADER_BYTES, bytes)?,
        })
    }

    /// The first byte (making the pointer is safe; whoever dereferences it answers for the
    /// bounds).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// Bytes mapped.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Address of the first byte, for identity and containment only.
    pub(crate) fn addr(&self) -> usize {
        self.map.addr()
    }

    /// The 8-byte word at `off` (aligned, inside), if it is one.
    pub(crate) fn word(&self, off: usize) -> Option<&AtomicU64> {
        self.map.atomic_u64(off)
    }

    /// Copies `src` to `off` (bounds-checked).
    pub(crate) fn write(&self, off: usize, src: &[u8]) -> Result<()> {
        self.map.write(off, src)
    }

    /// Copies from `off` into `dst` (bounds-checked).
    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        self.map.read(off, dst)
    }
}

/// Sleeps while the low 32 bits of `word` are `seen`, at most `slice`; returns at once if
/// they moved (the fabric's futex wait on a signal word).
pub(crate) fn sleep_on(word: &AtomicU64, seen: u32, slice: Duration) {
    let _ = Word::sleep(word, seen, slice);
}

/// Wakes every process sleeping on `word` ([`sleep_on`]).
pub(crate) fn wake_all(word: &AtomicU64) {
    Word::wake(word);
}
