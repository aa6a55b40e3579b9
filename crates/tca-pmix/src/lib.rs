//! A small, audited binding of the system PMIx client, for tca's start-up.
//!
//! PMIx is how Open MPI's `mpirun` (also Slurm's `srun --mpi=pmix` and PRRTE, which tca's
//! start-up does not use it under) gives the processes it starts a key-value store shared by
//! the whole job: a process puts keys,
//! every process commits and meets at a fence, and then any process gets any other's keys.
//! tca uses it for one thing: rank 0 of a job that spans nodes puts the address of the
//! start-up rendezvous it listens on, and the other ranks get it after the fence — so
//! `mpirun --host a,b ./prog` needs no `TCA_KV` (NCCL's unique id, carried by the launcher).
//!
//! # Why a C shim
//! PMIx's values, process ids and infos are C structs with unions and are built by macros
//! (`PMIX_LOAD_PROCID`, `PMIX_INFO_LOAD`). `csrc/shim.c` wraps the calls used (init, put,
//! commit and fence, get, finalize, and the constants and error strings their results need)
//! in functions over integers and C strings only, so the Rust declarations below are short
//! enough to check by eye, and no bindgen is needed.
//!
//! # Feature `link`
//! Everything here requires the `link` feature (off by default). Without it the crate is an
//! empty library: no native dependency, so the workspace builds and tests on machines
//! without PMIx. With it, build.rs needs `pkg-config pmix` (>= 4; Debian: `libpmix-dev`).
//!
//! # Safety model
//! All `unsafe` code of the binding is in this crate (the calls into the shim), each block
//! with a `SAFETY` comment; the API is safe. PMIx keeps one client state per process, so at
//! most one [`Client`] exists at a time ([`Client::init`] refuses a second).

#[cfg(feature = "link")]
mod pmix;

#[cfg(feature = "link")]
pub use pmix::*;
