//! MPI one-sided communication for the comparison of tca's puts and gets (`tca bench Put Get
//! --compare mpi`): a window allocated by `MPI_Win_allocate` on every rank, one passive-target
//! epoch to all ranks (`MPI_Win_lock_all`) for the window's life, and the blocking forms of
//! put and get that tca's `Endpoint::put`/`get` are: `MPI_Put`/`MPI_Get` followed by
//! `MPI_Win_flush`, which returns once the operation is complete at the target (the put's data
//! is there, the get's data is here). rsmpi 0.8 has no one-sided API, so this module calls the
//! C functions it binds (`mpi::ffi`); it is the only unsafe code of this crate. MPI reports
//! errors by aborting the job (its default error handler).
#![allow(unsafe_code)] // the MPI C calls, each with its contract

use std::os::raw::c_int;

use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;

/// A window of `len` bytes on every rank of a communicator, open for passive-target access.
/// Made and freed collectively: every rank creates it together and drops it together.
#[derive(Debug)]
pub struct Window {
    win: ffi::MPI_Win,
    len: usize,
}

impl Window {
    /// Allocates a window of `len` bytes on every rank of `comm` (collective) and opens a
    /// passive-target access epoch to every rank.
    ///
    /// Panics (on every rank alike, before any MPI call) if `len` is over 2 GiB: a put or get
    /// counts its bytes in a C `int`.
    pub fn allocate(comm: &SimpleCommunicator, len: usize) -> Window {
        assert!(
            c_int::try_from(len).is_ok(),
            "an MPI window of {len} bytes: at most 2 GiB (a C int of bytes per operation)"
        );
        let size = ffi::MPI_Aint::try_from(len).expect("a window fits an MPI_Aint");
        let mut base: *mut u8 = std::ptr::null_mut();
        // SAFETY: reading an MPI handle constant that MPI_Init set up.
        let mut win = unsafe { ffi::RSMPI_WIN_NULL };
        // SAFETY: `base` and `win` are valid out-parameters for the call; MPI allocates the
        // memory and keeps it until MPI_Win_free. The communicator is live (borrowed).
        unsafe {
            ffi::MPI_Win_allocate(
                size,
                1,
                ffi::RSMPI_INFO_NULL,
                comm.as_raw(),
                (&raw mut base).cast(),
                &raw mut win,
            );
            ffi::MPI_Win_lock_all(0, win);
        }
        Window { win, len }
    }

    /// One operation on `n` bytes at byte `disp` of `target`'s window, then its completion
    /// at both ends (`MPI_Win_flush`): checks the range, and calls `op(count, disp, bytes)`
    /// with the C arguments of the transfer (count and displacement, `MPI_UINT8_T`).
    fn flushed(
        &self,
        target: i32,
        disp: usize,
        n: usize,
        op: impl FnOnce(c_int, ffi::MPI_Aint, ffi::MPI_Datatype),
    ) {
        assert!(
            disp.checked_add(n).is_some_and(|e| e <= self.len),
            "{n} bytes at {disp} do not fit a {}-byte window",
            self.len
        );
        let count = c_int::try_from(n).expect("at most 2 GiB per operation");
        let at = ffi::MPI_Aint::try_from(disp).expect("within a window of at most 2 GiB");
        // SAFETY: reading an MPI handle constant that MPI_Init set up.
        op(count, at, unsafe { ffi::RSMPI_UINT8_T });
        // SAFETY: the window is allocated and locked for all ranks (`allocate`).
        unsafe { ffi::MPI_Win_flush(target, self.win) };
    }

    /// Puts `src` at byte `disp` of `target`'s window and returns once it is complete there.
    pub fn put(&self, src: &[u8], target: i32, disp: usize) {
        self.flushed(target, disp, src.len(), |n, at, bytes| {
            // SAFETY: `src` is valid for reads of `n` bytes for the call, and the flush that
            // follows completes the put (MPI reads `src` no more) before `put` returns; the
            // target range was checked against the window's length, the same on every rank.
            unsafe {
                ffi::MPI_Put(
                    src.as_ptr().cast(),
                    n,
                    bytes,
                    target,
                    at,
                    n,
                    bytes,
                    self.win,
                )
            };
        });
    }

    /// Gets `dst.len()` bytes at byte `disp` of `target`'s window into `dst`, complete on
    /// return.
    pub fn get(&self, dst: &mut [u8], target: i32, disp: usize) {
        let n = dst.len();
        self.flushed(target, disp, n, |n, at, bytes| {
            // SAFETY: `dst` is valid for writes of `n` bytes and borrowed mutably for the
            // call; the flush that follows completes the get (MPI writes `dst` no more)
            // before `get` returns.
            unsafe {
                ffi::MPI_Get(
                    dst.as_mut_ptr().cast(),
                    n,
                    bytes,
                    target,
                    at,
                    n,
                    bytes,
                    self.win,
                )
            };
        });
    }
}

impl Drop for Window {
    /// Closes the epoch and frees the window: collective, like its allocation.
    fn drop(&mut self) {
        // SAFETY: the window was allocated and locked by `allocate`, and is freed once.
        unsafe {
            ffi::MPI_Win_unlock_all(self.win);
            ffi::MPI_Win_free(&raw mut self.win);
        }
    }
}
