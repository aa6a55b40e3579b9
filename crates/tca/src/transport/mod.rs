//! Transports: how bytes and signals reach another rank's memory.
//!
//! The fabric ([`crate::fabric::World`]) is written against the [`Transport`] trait below and
//! against nothing else of a transport: which transport reaches a rank is decided once, at
//! start-up, and every put, signal and atomic is handed to it. Everything a transport owns —
//! start-up records, memory registration, the attach cache, liveness of peers, how a waiter
//! sleeps — stays inside its module and is private to the crate. The transports: shared memory
//! ([`shm`], `"shm"`) between the ranks of one node, libfabric (`ofi`, `"ofi"`, feature
//! `ofi`) between nodes, and a simulated network ([`sim`], `"sim"`: ranks as coroutines on a
//! modelled PEACH2, Tofu or fat-tree network, in virtual time). GPU memory plugs in behind
//! the same trait.
//!
//! # The contract every transport keeps
//!
//! The fabric, the collectives and everything above rely on these rules; a transport that
//! cannot keep one of them is not a tca transport.
//!
//! - **Memory**: a segment is a byte region owned by one rank, described to peers by a
//!   [`Handle`] (rank, segment id, length, key, job). A peer may write into it only after
//!   *attaching*, which validates the job, the segment id, the length and the random key
//!   against what the owner registered. Attaching never trusts what it is told: a handle
//!   that does not match is an [`ErrorKind::InvalidHandle`](crate::ErrorKind) error, never a
//!   write. A freed segment refuses further writes the same way.
//! - **Bounds**: every write is checked against the registered length before any byte moves;
//!   an out-of-bounds put writes nothing at all.
//! - **Ordering**: a put followed by a signal to the same rank is visible in that order: a
//!   reader that observes the signal (Acquire) observes the data. `put_signal` gives the same
//!   guarantee in one call. Signals are 64-bit words that only grow; a wait is "until the
//!   word is at least v".
//! - **Completion**: `quiet` returns when every earlier put, signal and atomic of this rank is
//!   complete (visible at its target), and fails if one of them could not be delivered.
//!   `fence` orders earlier operations before later ones without waiting. On shared memory a
//!   put is complete when the call returns, so `quiet` is a full fence.
//! - **Wake-ups**: every way to change a word — a signal, a put_signal, an atomic — wakes the
//!   ranks waiting on it. No raw store reaches a word others wait on.
//! - **Waiting**: waits spin briefly, then yield, then sleep; they make progress on the
//!   transport's own work (completions, incoming requests) while they wait.
//! - **Errors**: a peer that dies turns every wait that could depend on it into an error naming
//!   that rank, within a bounded time (one 10 ms sleep slice on shared memory).
//! - **Cleanup**: nothing a transport creates outlives the job, however it ends (on shared
//!   memory: memfds, with no name in any filesystem).

#[cfg(test)]
pub(crate) mod model;
mod node_memory;
/// How a put's bytes leave this rank for another's segment: the seed's data modes on a
/// network (`am::Mode` names them for users).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "ofi"), allow(dead_code))] // built by the network transport only
pub(crate) enum Path {
    /// Inside messages (each within the provider's message limit): copied into a registered
    /// send buffer here and out of a receive buffer at the target (BtoB).
    Message,
    /// An RMA write straight from the source, which lies in one of this rank's registered
    /// segments (MtoM).
    Registered,
    /// An RMA write straight from the source, ordinary memory, which the provider reads
    /// where it lies (it needs no local registration; MtoM).
    Direct,
    /// Copied into registered staging buffers, two used alternately, and RMA-written from
    /// there: ordinary memory on a provider that needs local buffers registered, or with
    /// `TCA_OFI_STAGE=always` (BtoM).
    Staged,
}

/// Bytes this rank has put across the network, by the path they took (the seed's data
/// modes, `am::Mode`): what [`World::net_transfers`](crate::fabric::World::net_transfers)
/// reports, for seeing which mode a program's transfers really take. Puts into rings count
/// as puts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetTransfers {
    /// Carried inside messages (BtoB).
    pub message_bytes: u64,
    /// RMA-written straight from ordinary memory the provider reads (MtoM).
    pub direct_bytes: u64,
    /// RMA-written straight from one of this rank's registered segments (MtoM, MtoB).
    pub registered_bytes: u64,
    /// Copied through the staging buffers, then RMA-written (BtoM).
    pub staged_bytes: u64,
    /// RMA-written by this rank's further endpoints, the parts of split puts (channels).
    pub lane_bytes: u64,
}

/// Bytes of each of the two staging buffers of a staged write ([`Path::Staged`]): large
/// enough that a write's fixed cost is small beside its bytes, small enough that copying
/// one while the other is written overlaps most of a large put.
pub(crate) const STAGE: usize = 256 << 10;

#[cfg(feature = "ofi")]
pub(crate) mod ofi;
pub(crate) mod shm;
pub(crate) mod sim;

use crate::error::Result;
use crate::fabric::{AtomicOp, Handle, SignalOp, Strided};

// ---- start-up: what the launcher, thread mode and the rendezvous ask of the node -----------

/// The node's job board: where the ranks of one node meet, publish their control segments,
/// and learn of a peer's death or the job's abort (the shared-memory transport's, see
/// `shm::board`). Whoever starts the node's ranks makes it (`tca run`, thread mode, the
/// node's first rank of a job spanning nodes) and hands its descriptor on.
pub(crate) use shm::board::{AbortReason, Board as NodeBoard};

#[cfg_attr(not(feature = "ofi"), allow(unused_imports))]
pub(crate) use shm::wait::{Patience, Progress};

// ---- what the fabric holds of the node --------------------------------------------------

/// One rank's part of a simulated job (the `World` holds it as it holds the other transports).
pub(crate) use sim::Sim as SimRank;
/// Runs a simulated job's ranks as coroutines of the calling thread.
pub(crate) use sim::coroutines::{Body as SimBody, run as run_sim_ranks};
/// One simulated job's engine (what `World::run_simulated` runs the ranks in).
pub(crate) use sim::engine::Engine as SimEngine;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use sim::network::fuzz_network;
/// The simulated network's models and settings, for `crate::sim` (the user's entry): what a
/// simulated job is made of, without reaching into the transport's modules.
pub use sim::network::{BUILT_IN, ComputeRates, Dma, Link, Pio, Software, Topology};
pub use sim::{Compute, Network, Stats};

/// Memory the processes of a node share outside any world, and its doorbells (the node
/// proxy's channel and arenas).
pub(crate) use node_memory::{NodeMemory, sleep_on, wake_all};
/// The node's transport (shared memory); it also applies, with every check, what network
/// peers ask of this rank's memory.
pub(crate) use shm::Shm;
/// A segment's memory on this node (a sealed memfd with a checked header), whatever
/// transport carries the writes of remote peers into it.
pub(crate) use shm::region::{Region, out_of_bounds};

/// Attaching to a segment file built from `data` (the fuzz targets' entry: a peer's memory
/// is untrusted input; see `shm::region::fuzz_attach` for the layout). Panics if attach
/// accepts a segment that does not match its handle; returns whether it attached. Not part
/// of the API (feature `fuzzing`).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_attach(data: &[u8]) -> bool {
    shm::region::fuzz_attach(data)
}

/// Opening a node's start-up board built from `data` (the fuzz targets' entry: see
/// `shm::board::fuzz_board` for the layout); returns whether it was accepted. Not part of the
/// API (feature `fuzzing`).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_board(data: &[u8]) -> bool {
    shm::board::fuzz_board(data)
}

/// tca's entries in `/dev/shm` now (the names that start as every shared-memory object tca
/// names does). Segments and launcher boards are memfds, which have no name there and cannot
/// outlive their last user; only jobs started without the launcher make a named board there,
/// and unlink it. So an entry that a job leaves behind is a leak: what tests and the fault
/// campaign compare before and after.
pub fn shm_entries() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(shm::memfd::NAME_PREFIX))
                .collect()
        })
        .unwrap_or_default()
}

/// Opens descriptor `fd` of process `pid`: how a rank reaches the node board its launcher,
/// its thread-mode parent or its node's first rank made.
pub(crate) fn open_inherited(pid: u32, fd: u32) -> Result<std::os::fd::OwnedFd> {
    shm::memfd::open_peer(pid, fd)
}

/// The operations the fabric needs from a transport, for one rank's traffic to the ranks the
/// transport reaches. Handles are checked for job and rank by the fabric before they get
/// here; everything else (key, liveness, bounds) is the transport's to check.
pub(crate) trait Transport {
    /// Validates `h` and prepares writes into it.
    fn attach(&self, h: &Handle) -> Result<()>;
    /// Copies `src` to `off` in `dst`.
    fn put(&self, dst: &Handle, off: usize, src: &[u8]) -> Result<()>;
    /// Copies `src` to `off` in `dst`, then applies `op` to the word at `sig_off` in `sig`.
    fn put_signal(
        &self,
        dst: &Handle,
        off: usize,
        src: &[u8],
        sig: &Handle,
        sig_off: usize,
        op: SignalOp,
    ) -> Result<()>;
    /// Applies `op` to the word at `off` in `sig`.
    fn signal(&self, sig: &Handle, off: usize, op: SignalOp) -> Result<()>;
    /// `s.count` blocks of `src` into `dst` from `off`; `dst_span` is the checked extent.
    fn put_strided(
        &self,
        dst: &Handle,
        off: usize,
        src: &[u8],
        s: Strided,
        dst_span: usize,
    ) -> Result<()>;
    /// Applies `op` to the word at `off` in `h`; returns the old value.
    fn atomic(&self, h: &Handle, off: usize, op: AtomicOp) -> Result<u64>;
    /// Every earlier operation is complete at its target.
    fn quiet(&self) -> Result<()>;
    /// Earlier operations are ordered before later ones.
    fn fence(&self);
}

/// The transport that reaches one rank, chosen per operation by the fabric: static dispatch
/// (a match the branch predictor learns), so shared memory pays no virtual call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Via<'a> {
    /// Shared memory: the rank is on this node.
    Shm(&'a shm::Shm),
    /// libfabric (with this node's shared memory, where incoming requests are applied).
    #[cfg(feature = "ofi")]
    Net(&'a ofi::Ofi, &'a shm::Shm),
    /// The simulated network (with the shared-memory regions it delivers into).
    Sim(&'a sim::Sim, &'a shm::Shm),
}

impl Transport for Via<'_> {
    fn attach(&self, h: &Handle) -> Result<()> {
        match self {
            Via::Shm(t) => t.attach(h),
            #[cfg(feature = "ofi")]
            Via::Net(n, s) => n.attach(s, h),
            Via::Sim(t, s) => t.attach(s, h),
        }
    }

    #[inline]
    fn put(&self, dst: &Handle, off: usize, src: &[u8]) -> Result<()> {
        match self {
            Via::Shm(t) => t.put(dst, off, src),
            #[cfg(feature = "ofi")]
            Via::Net(n, s) => n.put(s, dst, off, src),
            Via::Sim(t, s) => t.put(s, dst, off, src),
        }
    }

    #[inline]
    fn put_signal(
        &self,
        dst: &Handle,
        off: usize,
        src: &[u8],
        sig: &Handle,
        sig_off: usize,
        op: SignalOp,
    ) -> Result<()> {
        match self {
            Via::Shm(t) => t.put_signal(dst, off, src, sig, sig_off, op),
            #[cfg(feature = "ofi")]
            Via::Net(n, s) => n.put_signal(s, dst, off, src, sig, sig_off, op),
            Via::Sim(t, s) => t.put_signal(s, dst, off, src, sig, sig_off, op),
        }
    }

    fn signal(&self, sig: &Handle, off: usize, op: SignalOp) -> Result<()> {
        match self {
            Via::Shm(t) => t.signal(sig, off, op),
            #[cfg(feature = "ofi")]
            Via::Net(n, s) => n.signal(s, sig, off, op),
            Via::Sim(t, s) => t.signal(s, sig, off, op),
        }
    }

    fn put_strided(
        &self,
        dst: &Handle,
        off: usize,
        src: &[u8],
        st: Strided,
        dst_span: usize,
    ) -> Result<()> {
        match self {
            Via::Shm(t) => t.put_strided(dst, off, src, st, dst_span),
            #[cfg(feature = "ofi")]
            Via::Net(n, s) => n.put_strided(s, dst, off, src, st, dst_span),
            Via::Sim(t, s) => t.put_strided(s, dst, off, src, st, dst_span),
        }
    }

    fn atomic(&self, h: &Handle, off: usize, op: AtomicOp) -> Result<u64> {
        match self {
            Via::Shm(t) => t.atomic(h, off, op),
            #[cfg(feature = "ofi")]
            Via::Net(n, s) => n.atomic(s, h, off, op),
            Via::Sim(t, s) => t.atomic(s, h, off, op),
        }
    }

    fn quiet(&self) -> Result<()> {
        match self {
            Via::Shm(t) => t.quiet(),
            #[cfg(feature = "ofi")]
            Via::Net(n, s) => n.quiet(s),
            Via::Sim(t, _) => t.quiet(),
        }
    }

    fn fence(&self) {
        match self {
            Via::Shm(t) => t.fence(),
            // Messages and writes to one rank are applied in order (FI_ORDER_SAW / WAW, or
            // a wait for completion where the provider lacks them): nothing to do.
            #[cfg(feature = "ofi")]
            Via::Net(..) => std::sync::atomic::fence(std::sync::atomic::Ordering::Release),
            // Messages between a pair land in the order they were sent (see `sim::engine`).
            Via::Sim(..) => {}
        }
    }
}
