//! A plain communicator's progress thread (seed 003's polling thread, `TCA_P2P_PROGRESS=thread`):
//! [`Comm::overlap`] runs the caller's computation on a thread of its own while the calling
//! thread, which owns the communicator, keeps its communication moving — two-sided sends and
//! receives (rendezvous answered, data put, credits returned, eager packets drained into the
//! unexpected queue), active-message handlers, the network's completions and the collectives
//! started in an open scope.
//!
//! # Why this shape
//! A communicator is used from one thread (`Comm` is not `Sync`: its engine's state lives in
//! cells, unlocked, which is what keeps the 8-byte path at the floor). A progress thread that
//! shared it with the caller would need a lock on every call, and one that could outlive the
//! call (a thread kept in the communicator) could be left running over a communicator that
//! was forgotten rather than dropped. Here the roles are turned round: the computation — which
//! must be `Send`, so it cannot hold the communicator — moves to a scoped thread, and the
//! communicator never leaves its thread. The compiler, not the documentation, keeps the two
//! apart, and the thread is joined before `overlap` returns, also when the computation panics.
//!
//! # Cost
//! One thread started and joined per call (tens of microseconds: `cargo run --release -p tca
//! --example p2p_overlap` prints it), so the form is for computations of a millisecond and
//! more. The computation's thread gets an 8 MiB stack (a main thread's usual size; more if
//! `RUST_MIN_STACK` asks). When nothing moved for the wait policy's spins the loop yields (on
//! a shared core: the computation runs out its slice) and then naps, from [`NAP`] growing to
//! [`MAX_NAP`] while
//! nothing arrives (the computation's end wakes it at once; a collective started in an open
//! scope keeps them at [`NAP`] while it is in flight), so when all is quiet it takes
//! the computation's core about once a millisecond or a slice, and a message after a long
//! quiet waits about that long for it. Measured with 2 bound ranks on the development
//! machine (the example above; BENCHMARKS.md, "A plain communicator's progress thread"):
//! the computing rank's whole call within -8% to +3% of the caller's progress at 10 and 100
//! ms of work, a peer's send that starts 5 ms into the work done in 1.4-1.7 ms. Without the
//! yields (naps alone) the work took up to 7.6% longer; with naps of a fixed 50 us, 26-34%
//! longer.
//!
//! The loop and the computation share the rank's CPU where `tca run` bound the rank to one
//! (the computation's thread inherits the binding). Measured on the development machine (2
//! cores, 2 bound ranks, the example above; BENCHMARKS.md, "A plain communicator's progress
//! thread"): a peer's flood of eager messages and its 64 KiB rendezvous finished 30x sooner
//! with the loop bound beside the computation than with it free to run on any CPU as the
//! offload proxy is (about 0.1 against 3 ms). A loop that wakes on the computation's core is
//! run at once by the scheduler; one that wakes elsewhere waits for a core that the other
//! rank is spinning on.
//!
//! With [`Progress::Caller`] (the default, as MPICH's `MPICH_ASYNC_PROGRESS` is off unless
//! asked for) `overlap` runs the computation inline and nothing progresses meanwhile: peers'
//! rendezvous with this rank wait for its next call. On a simulated network it always runs
//! inline: simulated ranks are steps of one virtual-time schedule, and a loop polling in real
//! time beside them would step outside it.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Thread;
use std::time::Duration;

use super::{NAP, Progress};
use crate::coll::Comm;
use crate::error::{Error, ErrorKind, Result};

/// The longest nap of the progress loop while nothing arrives: a message that comes after a
/// long quiet waits for the loop about this long. Each nap costs the computation sharing
/// its core two context switches and a pass; at a fixed [`NAP`] of 50 us that took 26-34% of
/// a bound rank's computation on the development machine (BENCHMARKS.md, "A plain
/// communicator's progress thread").
pub const MAX_NAP: Duration = Duration::from_millis(1);

/// Stack of the computation's thread: a process's main thread usually has 8 MiB, and work
/// that runs there with the caller's progress must not overflow with the thread's (address
/// space only until touched; `std`'s default for new threads is 2 MiB).
const COMPUTE_STACK: usize = 8 << 20;

/// [`COMPUTE_STACK`], or `RUST_MIN_STACK` where that asks for more (read once: the
/// environment is read under a process-wide lock).
fn compute_stack() -> usize {
    static STACK: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *STACK.get_or_init(|| {
        std::env::var("RUST_MIN_STACK")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(COMPUTE_STACK, |n| n.max(COMPUTE_STACK))
    })
}

/// Raises the computation's end for the progress loop, however the computation ends.
struct Finished<'a> {
    flag: &'a AtomicBool,
    waiter: Thread,
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.flag.store(true, Ordering::Release);
        self.waiter.unpark();
    }
}

impl Comm<'_> {
    /// Where this communicator's communication progresses while its rank computes in
    /// [`Comm::overlap`]: `TCA_P2P_PROGRESS` when the communicator was made
    /// ([`Progress::Caller`] when unset), or what [`Comm::set_progress`] said since.
    pub fn progress_mode(&self) -> Progress {
        self.progress.get()
    }

    /// Sets [`Comm::progress_mode`] for this rank (a rank's own choice: members may differ).
    /// Only [`Progress::Thread`] progresses during [`Comm::overlap`]; the others run the
    /// computation inline.
    pub fn set_progress(&self, mode: Progress) {
        self.progress.set(mode);
    }

    /// Runs `work` — a computation that does not use tca — and returns its result, while
    /// this rank's communication on this communicator progresses (with
    /// [`Progress::Thread`]; see the module docs for how, and what it costs). A request
    /// started before the call completes meanwhile as far as its peers take part: a peer's
    /// rendezvous send into a posted receive is answered and written, a peer's flood of eager
    /// messages is drained, a started collective does this rank's steps. The requests are
    /// still waited for afterwards as usual (their waits then find them done).
    ///
    /// A panic in `work` resumes in the caller once the progress loop has stopped; the
    /// communicator stays usable. An error of the progress found before `work` starts (a peer
    /// already dead, a call from inside one of this communicator's reductions) is returned
    /// without running it; one found while it runs stops the progress, lets `work` finish and
    /// is returned instead of its result. The requests in flight report it again at their
    /// waits.
    ///
    /// ```
    /// use tca::{Comm, threads, offload::Progress};
    ///
    /// let out = threads::run(2, |world| {
    ///     let comm = Comm::world(world)?;
    ///     comm.set_progress(Progress::Thread);
    ///     let n = 1 << 16; // 512 KiB: a rendezvous
    ///     if comm.rank() == 0 {
    ///         let mut buf = vec![0f64; n];
    ///         let mut r = comm.irecv(&mut buf, 1, 0)?;
    ///         // Rank 1's send can complete during this computation.
    ///         let s = comm.overlap(|| (0..1_000_000u64).map(|i| i % 7).sum::<u64>())?;
    ///         r.wait()?;
    ///         drop(r);
    ///         Ok(s as f64 + buf[n - 1])
    ///     } else {
    ///         comm.send(&vec![2.0f64; n], 0, 0)?;
    ///         Ok(0.0)
    ///     }
    /// })?;
    /// assert_eq!(out[0], 2_999_997.0 + 2.0);
    /// # Ok::<(), tca::Error>(())
    /// ```
    pub fn overlap<R: Send>(&self, work: impl FnOnce() -> R + Send) -> Result<R> {
        if self.progress.get() != Progress::Thread || self.world_ref().simulated().is_some() {
            return Ok(work());
        }
        // One pass first: a communicator that cannot progress here (called from inside one
        // of its own reductions, a failed peer) says so before the work starts.
        self.poll_once()?;
        let done = AtomicBool::new(false);
        let rank = self.world_ref().rank();
        std::thread::scope(|s| {
            let finished = Finished {
                flag: &done,
                waiter: std::thread::current(),
            };
            let computing = std::thread::Builder::new()
                .name(format!("tca-compute-{rank}"))
                .stack_size(compute_stack())
                .spawn_scoped(s, move || {
                    let _finished = finished;
                    work()
                })
                .map_err(|e| {
                    Error::os(
                        ErrorKind::Launch,
                        format!("starting rank {rank}'s computation beside its progress"),
                        e,
                    )
                })?;
            // Both keep the rank's CPU (see the module docs, "Cost").
            let progressed = catch_unwind(AssertUnwindSafe(|| self.progress_until(&done)));
            // Whatever the loop did, the computation is joined before anything is returned.
            let result = computing.join();
            let progressed = match progressed {
                Ok(p) => p,
                Err(panic) => resume_unwind(panic),
            };
            match result {
                Ok(r) => progressed.map(|()| r),
                Err(panic) => resume_unwind(panic),
            }
        })
    }

    /// Progress passes until `done` is raised: back to back while something moves, then the
    /// wait policy's spins and yields, then a nap per pass, from [`NAP`] doubling to
    /// [`MAX_NAP`] while nothing arrives (spins, yields and naps start over when something
    /// does). On a core shared with the computation a yield hands it the core for the rest of
    /// its slice, the cheapest wait there (see the module docs, "Cost"). An error stops the
    /// passes; the loop then only waits for `done`, and returns the error.
    fn progress_until(&self, done: &AtomicBool) -> Result<()> {
        let (spins, yields) = self.world_ref().wait_policy();
        let spins = spins.min(1 << 20);
        let patience = spins.saturating_add(yields.min(1 << 20));
        let mut idle = 0u32;
        let mut nap = NAP;
        let mut failed = None;
        while !done.load(Ordering::Acquire) {
            if failed.is_some() {
                std::thread::park_timeout(MAX_NAP);
                continue;
            }
            match self.poll_once() {
                Ok(true) => {
                    idle = 0;
                    nap = NAP;
                    continue;
                }
                Ok(false) => idle = idle.saturating_add(1),
                Err(e) => {
                    failed = Some(e);
                    continue;
                }
            }
            if idle <= spins {
                std::hint::spin_loop();
            } else if idle <= patience {
                std::thread::yield_now();
            } else {
                std::thread::park_timeout(nap);
                // A started collective moves on with every pass but says nothing of it:
                // while one is in flight the naps stay short.
                if !self.scope_pending() {
                    nap = (nap * 2).min(MAX_NAP);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// One pass of everything this rank's communication does without waiting: the two-sided
    /// engine (which also runs the network's progress and the active-message handlers) and
    /// the started collectives of an open scope. Whether a message arrived.
    fn poll_once(&self) -> Result<bool> {
        let moved = self.engine().poll_any(self.world_ref())?;
        self.progress_scope()?;
        Ok(moved)
    }
}
