//! # tca — tightly coupled communication
//!
//! Ranks write directly into each other's memory and raise flags that the owner waits on;
//! everything else (collectives, two-sided messages, active messages) is software on top of
//! that one idea, as in the TCA/PEACH2 papers this project realises.
//!
//! ## Vocabulary
//! - **rank**, **world** ([`World`]), **node** (ranks sharing memory), **job**.
//! - **segment** ([`Segment`]): memory registered for remote writes; its **handle**
//!   ([`Handle`]: rank, segment id, length, key, job) is what a peer needs to write into it.
//!   A **symmetric** segment ([`SymmetricSegment`]) is allocated collectively.
//! - **put** ([`World::put`]), **inline put** ([`World::put_inline`], plain stores),
//!   **put_signal** ([`World::put_signal`], data then flag), **strided put**
//!   ([`World::put_strided`]), **chain** ([`Chain`], prebuilt puts started with one call).
//! - **signal**: a 64-bit word that only grows; **wait** ([`World::wait_until`]) blocks until
//!   it reaches a value, spinning briefly, then sleeping on a futex.
//! - **quiet** ([`World::quiet`]), **fence** ([`World::fence`]), **barrier** ([`World::barrier`]).
//!
//! ## Contents
//! - [`coll`]: collectives on communicators ([`Comm`]), several algorithms each.
//! - [`p2p`]: two-sided messages (send/recv, tags, non-blocking and persistent requests).
//! - [`fabric`]: the one-sided core. [`fabric::line`]: the single-line small-message layout.
//! - [`transport`]: the transport contract and the shared-memory transport.
//! - [`bootstrap`]: finding rank and size (launcher, Slurm, mpirun) and the launcher itself.
//! - [`threads`]: ranks as threads of one process.
//! - [`env`](mod@env): every `TCA_*` variable.
//!
//! ## Example
//! ```
//! use tca::{SignalOp, threads};
//!
//! // Two ranks as threads; under `tca run -n 2` use `tca::init()` instead.
//! let out = threads::run(2, |world| {
//!     let seg = world.alloc_symmetric(4096)?;
//!     let peer = 1 - world.rank();
//!     let msg = [world.rank() as u8 + 1; 8];
//!     // Payload at 0, signal word at 56: one cache line (see `tca::fabric::line`).
//!     world.put_signal(seg.handle(peer)?, 0, &msg, seg.handle(peer)?, 56, SignalOp::Set(1))?;
//!     world.wait_until(&seg, 56, 1)?;
//!     let mut got = [0u8; 8];
//!     seg.read(0, &mut got)?;
//!     Ok(got[0])
//! })?;
//! assert_eq!(out, vec![2, 1]);
//! # Ok::<(), tca::Error>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod am;
pub mod bootstrap;
mod cast;
pub mod coll;
pub mod env;
mod error;
pub mod fabric;
pub mod offload;
pub mod p2p;
pub mod process;
mod rand;
pub mod sim;
pub mod threads;
pub mod transport;

pub use coll::{Buffer, Collective, Comm, Op};
pub use error::{Error, ErrorKind, Result};
pub use fabric::{
    AtomicOp, Chain, ChainBuilder, Handle, RemoteWord, Segment, SignalOp, Strided,
    SymmetricSegment, World,
};

/// Joins the job this process was started in: `tca run`, Slurm, Open MPI's or another PMI
/// launcher's `mpirun`, or a one-rank job when started alone. Collective: returns when every
/// rank has arrived.
pub fn init() -> Result<World> {
    env::warn_unknown();
    if offload::node::offloaded() {
        return Err(offload::node::no_world_here());
    }
    // A rank stopped by its launcher must die of the signal, not of a handler that a library
    // linked with libfabric installed before `main` (see `tca_ofi::restore_default_signals`).
    #[cfg(feature = "ofi")]
    tca_ofi::restore_default_signals();
    World::join(bootstrap::detect()?)
}

/// The README's example, compiled and run as a doctest so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
