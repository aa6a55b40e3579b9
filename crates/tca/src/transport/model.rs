//! Model checking (tests only): the transport's memory under loom — signal words, sleeper
//! counts, and the transport's own wait and signal on them — so that the lock-free protocols'
//! own code (the transport's wait/sleep/wake protocol, and the protocols above the boundary,
//! such as the rings of `fabric::ring`, through [`wait`] and [`set`]) runs under
//! [loom](https://docs.rs/loom), which runs a model many
//! times, each time with another interleaving of its threads (within a bound on preemptions)
//! and another value each load may return under the C11 memory model. A model fails on a
//! deadlock (every thread blocked: a sleeper that nobody will wake), on a data race on a
//! modelled byte (a slot overwritten while its reader still reads it, or read before its
//! writer is done), and on a failed assertion.
//!
//! Two stand-ins differ from the hardware, deliberately:
//! - **SeqCst accesses.** loom treats a SeqCst load, store or read-modify-write as AcqRel
//!   (loom issue #180: the store-buffering litmus test fails under it); its SeqCst *fences*
//!   are exact. The wait protocol is a store-buffering handshake that relies on the single
//!   total order of SeqCst accesses, so [`ModelWord`] and [`ModelCount`] put a SeqCst fence
//!   after every SeqCst store or read-modify-write and before every SeqCst load — the
//!   guarantee the language gives those accesses, and what x86's locked instructions do.
//!   Acquire and Release accesses are modelled as they are.
//! - **The futex.** A sleep is a loom `Condvar` wait under a `Mutex` that the wake takes too,
//!   and refuses to start (`EAGAIN`) when the word's low half has changed, as the kernel
//!   does. It never times out: where the real sleep ends after a 10 ms slice and looks
//!   again, the model sleeps for ever, so a lost wake-up — a 10 ms stall in a real job — is a
//!   deadlock loom reports.

use std::sync::atomic::Ordering::{self, SeqCst};
use std::time::Duration;

use loom::sync::atomic::{AtomicU32, AtomicU64, fence};
use loom::sync::{Condvar, Mutex};
use rustix::io::Errno;

use super::shm::wait::{Fence, Sleepers, SpinPolicy, Word, raise, wait_ge};
use crate::fabric::SignalOp;

/// A signal word with a model futex.
#[derive(Debug)]
pub(crate) struct ModelWord {
    v: AtomicU64,
    lock: Mutex<()>,
    sleeping: Condvar,
}

impl ModelWord {
    pub(crate) fn new(v: u64) -> Self {
        Self {
            v: AtomicU64::new(v),
            lock: Mutex::new(()),
            sleeping: Condvar::new(),
        }
    }

    /// The word's value (Acquire), as a waiter's fast path reads it.
    pub(crate) fn value(&self) -> u64 {
        self.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Compare-and-swap (AcqRel; Acquire on failure), with no wake-up: the word it models (a
    /// bound channel's ready word) has no sleeper but the rank that swaps it. Returns the
    /// value the word held.
    pub(crate) fn cas(&self, current: u64, new: u64) -> u64 {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        self.v
            .compare_exchange(current, new, AcqRel, Acquire)
            .unwrap_or_else(|old| old)
    }
}

/// The policy of the model waits: one spin before sleeping. (A yield changes no memory and
/// is a no-op here, see `relax`: in the model a yield turn is one more spin turn, which only
/// multiplies the interleavings explored.)
pub(crate) const POLICY: SpinPolicy = SpinPolicy {
    spins: 1,
    yields: 0,
};

/// The transport's wait until `word` (owned by the rank whose sleeper count is `count`) is
/// at least `target`; returns the value seen.
pub(crate) fn wait(word: &ModelWord, count: &ModelCount, target: u64) -> u64 {
    wait_ge(word, count, target, POLICY, None, None, None, || Ok(())).expect("a model wait")
}

/// The transport's signal: `word` set to `v`, its owner's sleepers woken. The writer with
/// [`Fence::SeqCst`], the default form, whose guarantee is the memory model's alone: loom has
/// no `membarrier`, and the opt-in [`Fence::Asymmetric`] rests on the kernel's, which it does
/// not always keep (`transport::shm::wait`).
pub(crate) fn set(word: &ModelWord, count: &ModelCount, v: u64) {
    raise(word, count, SignalOp::Set(v), Fence::SeqCst);
}

/// The transport's signal: `v` added to `word`, its owner's sleepers woken.
pub(crate) fn add(word: &ModelWord, count: &ModelCount, v: u64) {
    raise(word, count, SignalOp::Add(v), Fence::SeqCst);
}

/// A SeqCst store, as the language orders it (see the module doc), with no wake-up: a word
/// nobody sleeps on.
pub(crate) fn store_seqcst(word: &ModelWord, v: u64) {
    word.store(v, SeqCst);
}

/// A SeqCst load, as the language orders it.
pub(crate) fn load_seqcst(word: &ModelWord) -> u64 {
    word.load(SeqCst)
}

impl Word for ModelWord {
    fn load(&self, order: Ordering) -> u64 {
        if order == SeqCst {
            fence(SeqCst);
        }
        self.v.load(order)
    }

    fn store(&self, v: u64, order: Ordering) {
        self.v.store(v, order);
        if order == SeqCst {
            fence(SeqCst);
        }
    }

    fn fetch_add(&self, v: u64, order: Ordering) -> u64 {
        if order == SeqCst {
            fence(SeqCst);
        }
        let old = self.v.fetch_add(v, order);
        if order == SeqCst {
            fence(SeqCst);
        }
        old
    }

    fn sleep(&self, seen: u32, _slice: Duration) -> Result<(), Errno> {
        let g = self.lock.lock().expect("model futex");
        if crate::cast::low_u32(self.load(SeqCst)) != seen {
            return Err(Errno::AGAIN);
        }
        drop(self.sleeping.wait(g).expect("model futex"));
        Ok(())
    }

    fn wake(&self) {
        let _g = self.lock.lock().expect("model futex");
        self.sleeping.notify_all();
    }

    fn relax() {
        // A yield changes no memory. loom's `yield_now` would tell loom that this thread waits
        // for the others, and it would then not explore this thread going on (to sleep)
        // before them: the interleavings that lose wake-ups.
    }
}

/// A sleeper count.
#[derive(Debug, Default)]
pub(crate) struct ModelCount(AtomicU32);

impl Sleepers for ModelCount {
    fn enter(&self) {
        fence(SeqCst);
        self.0.fetch_add(1, SeqCst);
        fence(SeqCst);
    }

    fn leave(&self) {
        fence(SeqCst);
        self.0.fetch_sub(1, SeqCst);
        fence(SeqCst);
    }

    fn any(&self) -> bool {
        fence(SeqCst);
        self.0.load(SeqCst) != 0
    }
}

/// Runs `model` under loom with at most `preemptions` preemptions per execution (or
/// `LOOM_MAX_PREEMPTIONS` where that is more: a deeper campaign than every test run's);
/// returns how many executions (interleavings and load outcomes) it explored.
pub(crate) fn explore(preemptions: usize, model: impl Fn() + Sync + Send + 'static) -> usize {
    let preemptions = std::env::var("LOOM_MAX_PREEMPTIONS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(preemptions, |v| v.max(preemptions));
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        model();
    });
    let n = runs.load(Ordering::Relaxed);
    eprintln!("loom: {n} executions explored (preemption bound {preemptions})");
    n
}

/// What a model that must fail failed with (the tests that show a model can catch a broken
/// protocol).
pub(crate) fn failure(model: impl Fn() + Sync + Send + 'static) -> String {
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| explore(2, model)))
        .expect_err("the model must fail");
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_default()
}
