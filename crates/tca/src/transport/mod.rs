//! Transports: how bytes and signals reach another rank's memory.
//!
//! # The contract every transport keeps
//!
//! The fabric ([`crate::fabric`]) is written against these rules; a transport that cannot keep
//! one of them is not a tca transport.
//!
//! - **Memory**: a segment is a byte region owned by one rank, described to peers by a
//!   [`Handle`](crate::Handle) (rank, segment id, length, key, job). A peer may write into it
//!   only after *attaching*, which validates magic, layout version, job id, segment id, length
//!   and key. Attaching never trusts the bytes it reads: a header that does not match is an
//!   [`ErrorKind::InvalidHandle`](crate::ErrorKind) error, never a write.
//! - **Bounds**: every write is checked against the attached length before any byte moves.
//! - **Ordering**: a put followed by a signal to the same rank is visible in that order: a
//!   reader that observes the signal with an Acquire load observes the data. Signals are 64-bit
//!   words that only grow; a wait is "until the word is at least v".
//! - **Completion**: on shared memory every put is complete (visible at the target) when the
//!   call returns, so `quiet` is a full fence and `fence` a release fence. Transports with
//!   asynchronous engines complete at `quiet`.
//! - **Waiting**: waits spin briefly, then yield, then sleep on a futex on the low 32 bits of
//!   the signal word; a writer wakes sleepers only when the owner's sleeper count is non-zero,
//!   so the common case costs no system call. See [`shm::wait`].
//! - **Errors**: a peer that dies turns every wait that could depend on it into an error naming
//!   that rank, within one sleep slice (10 ms) of the death being visible.
//! - **Cleanup**: memory objects are memfds, with no name in any filesystem: the kernel frees
//!   them when the last process that maps them exits, however it exits. The only named object
//!   is the start-up board used without the launcher, unlinked as soon as every rank has it.
//!
//! Only the shared-memory transport exists today; networks (libfabric), a simulated TCA torus
//! and GPU memory are later transports behind the same contract.

pub mod shm;
