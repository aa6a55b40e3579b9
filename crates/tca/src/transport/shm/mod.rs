//! Shared-memory transport: segments are memfds mapped by every rank of the node.
//!
//! A rank creates a segment as a sealed memfd (`memfd_create`, size fixed by seals so no one
//! can shrink it under a mapping) whose first page is a header and whose remaining pages are
//! the data. Peers attach by opening `/proc/<owner pid>/fd/<segment id>` (the segment id *is*
//! the owner's descriptor number), mapping it, and checking the header against the handle.
//! A put is one `memcpy` into that mapping; a signal is an atomic store on a 64-bit word in
//! it. Nothing has a filesystem name, so nothing can leak (see `SHM.md` in the design notes).
//!
//! All pointer code of the transport lives in [`mapping`], and the one system call that writes
//! into another process's plain memory in [`cma`]; the rest of the crate is safe code.
//! [`node::Shm`] is the transport itself (peers, attach cache, liveness); [`region`] the
//! segment memory with its checked header; [`wait`] the spin-then-sleep protocol.

pub(crate) mod board;
pub(crate) mod cma;
pub(crate) mod mapping;
pub(crate) mod memfd;
pub(crate) mod node;
pub(crate) mod region;
pub(crate) mod wait;

pub(crate) use mapping::Mapping;
pub(crate) use node::Shm;

/// Size of the header page in front of every segment's data.
pub const HEADER_BYTES: usize = 4096;
/// Spacing between words written by different ranks (the fabric's line layout).
pub const PAD: usize = crate::fabric::line::SLOT_STRIDE;

/// Rounds `n` up to a multiple of the page size, or `None` on overflow.
pub fn page_round(n: usize) -> Option<usize> {
    n.checked_add(HEADER_BYTES - 1)
        .map(|v| v & !(HEADER_BYTES - 1))
}
