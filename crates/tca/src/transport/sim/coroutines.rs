//! Simulated ranks as coroutines of one thread: handing the baton over is a stack switch.
//!
//! Only the rank holding the engine's baton runs ([`super::engine`]), so nothing is gained by
//! giving each rank a thread of its own, and much is lost: a hand-over between two threads is a
//! wake-up and a sleep in the kernel (about 35 us on this project's 2-core virtual machine,
//! BENCHMARKS.md, "The simulator itself"), which made the machine's thread switch the
//! simulator's speed. Here every rank is a coroutine (its own stack, `corosensei`) on the thread
//! that runs the job: a rank that waits [`suspend`]s back to [`run`]'s loop, which resumes
//! whichever rank the baton names.
//!
//! Consequences for code run on the simulated network: a rank must not block on anything but
//! tca (a `std::sync::Barrier` or channel between ranks would wait for a rank that cannot run);
//! the ranks share the thread's thread-locals, and `std::thread::panicking()` (so a rank that
//! panics keeps its turn until it has left: `Sim::op`); Rust's panic message names the job's
//! thread, not the rank (the rank's error names it); a rank that overflows its stack stops the
//! process with a segmentation fault (`stack_bytes`).

#![allow(unsafe_code)] // the coroutines' borrowed bodies and the running one's yielder

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};

use crate::error::{Error, ErrorKind, Result};

type Baton = Yielder<(), ()>;

/// Stack of each rank's coroutine (address space; pages are touched only as used): twice a
/// spawned thread's default (a rank used to be one), or `RUST_MIN_STACK` if larger. A rank
/// that overflows it hits the guard page below it (a segmentation fault, without the message
/// Rust prints for a thread's overflow).
fn stack_bytes() -> usize {
    let asked = std::env::var("RUST_MIN_STACK")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    asked.clamp(4 << 20, 1 << 30)
}

thread_local! {
    /// The yielder of the coroutine running on this thread, null outside one.
    static CURRENT: Cell<*const Baton> = const { Cell::new(std::ptr::null()) };
}

/// A rank's body, run to its end in its coroutine; a panic is caught there and returned.
pub(crate) type Body<'a, R> = Box<dyn FnOnce() -> R + 'a>;

/// What became of a rank's body: its result, its panic, or `None` if it never ended (the
/// baton stopped at nobody while it waited: a scheduling fault, reported, never a hang).
pub(crate) type Outcome<R> = Option<std::thread::Result<R>>;

/// Fails outside a rank's coroutine (where [`suspend`] could not wait for a turn).
pub(crate) fn inside() -> Result<()> {
    if CURRENT.get().is_null() {
        return Err(Error::new(
            ErrorKind::Transport,
            "a simulated rank's operation outside the simulation's scheduler",
        ));
    }
    Ok(())
}

/// Gives the thread back to [`run`]'s loop; returns when this rank is resumed. Fails outside a
/// rank's coroutine.
pub(crate) fn suspend() -> Result<()> {
    inside()?;
    let y = CURRENT.get();
    // SAFETY: CURRENT is non-null only while the coroutine whose yielder it holds runs on this
    // thread: each coroutine sets it to its own yielder when it starts and again whenever it is
    // resumed (below), and `run` clears it whenever a coroutine gives the thread back. The
    // yielder lives on that coroutine's stack for the whole of its body, which is running.
    unsafe { &*y }.suspend(());
    CURRENT.set(y);
    Ok(())
}

/// Runs every body as a coroutine on this thread: first each in index order up to its first
/// [`suspend`], then always the one `baton` names, until it names nobody. A `None` body is a
/// rank that is not in the run. Returns each body's outcome by index.
pub(crate) fn run<R>(
    bodies: Vec<Option<Body<'_, R>>>,
    baton: impl Fn() -> Option<u32>,
) -> Result<Vec<Outcome<R>>> {
    type Co<R> = Coroutine<(), (), std::thread::Result<R>, DefaultStack>;
    let n = bodies.len();
    // A rank's body may itself run a simulation: its yielder comes back after this one,
    // however this one ends (never left pointing into a dropped coroutine's stack), and only
    // after every coroutine of this run is gone (declared before them, dropped after).
    struct Restore(*const Baton);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.set(self.0);
        }
    }
    let _restore = Restore(CURRENT.get());
    let mut cos: Vec<Option<Co<R>>> = Vec::with_capacity(n);
    let bytes = stack_bytes();
    for (rank, body) in bodies.into_iter().enumerate() {
        let Some(body) = body else {
            cos.push(None);
            continue;
        };
        let stack = DefaultStack::new(bytes).map_err(|e| {
            Error::os(
                ErrorKind::Launch,
                format!("a {bytes}-byte stack for simulated rank {rank}"),
                e,
            )
        })?;
        let co_body = move |y: &Baton, ()| {
            CURRENT.set(y);
            catch_unwind(AssertUnwindSafe(body))
        };
        // SAFETY: the body borrows data that outlives this call; every coroutine lives in
        // `cos`, which is dropped (each coroutine run to its end or unwound) before this
        // returns or unwinds, and none is ever forgotten.
        cos.push(Some(unsafe { Co::with_stack_unchecked(stack, co_body) }));
    }
    let mut out: Vec<Outcome<R>> = (0..n).map(|_| None).collect();
    CURRENT.set(std::ptr::null());
    let mut next_new = 0;
    loop {
        let (r, starting) = if next_new < n {
            next_new += 1;
            (next_new - 1, true)
        } else {
            match baton() {
                Some(r) if (r as usize) < n => (r as usize, false),
                _ => break,
            }
        };
        let Some(co) = cos[r].as_mut() else {
            if starting {
                continue;
            }
            // The baton names a rank that has ended: nothing more can run.
            break;
        };
        let step = co.resume(());
        CURRENT.set(std::ptr::null());
        if let CoroutineResult::Return(res) = step {
            out[r] = Some(res);
            cos[r] = None;
        }
    }
    // CURRENT is null here (cleared after every resume): a stalled coroutine unwound by the
    // drop finds no turn to wait for.
    drop(cos);
    Ok(out)
}
