//! Offload (seed 004): a rank posts its communication to a work queue and polls a completion
//! queue; a proxy — here a thread of the rank's own process (`TCA_PROGRESS=thread`) — owns the
//! rank's [`World`], executes the posted operations and progresses them while the rank
//! computes, so a rank that does not call tca for a long time still completes its peers'
//! collectives and rendezvous (seed 003's polling thread and seed 004's host proxy, on one
//! design).
//!
//! # Shape
//! [`Proxy::start`] moves the world into the proxy thread, which builds the world's
//! communicator there (collective, like [`Comm::world`]) and then serves:
//! - the **work queue**: fixed capacity ([`QUEUE_DEPTH`] entries). A post never waits for the
//!   proxy unless the queue is full (back-pressure, never loss). An idle proxy sleeps on the
//!   queue (its doorbell) and wakes when work is posted.
//! - the **completion queue**: the proxy's answer per posted operation (its id and its
//!   status or error); the rank drains it in [`Ticket::test`] and [`Ticket::wait`], which
//!   sleeps on it.
//! - **commands** ([`ProxyScope::run`]): work that is not a started operation — a blocking
//!   collective, a new segment, a model query — executed on the proxy between its polls with
//!   the rank's communicator, the result handed back through the completion queue (the seed's
//!   command channel for what the rank should not do itself).
//!
//! The operations are the communicator's own non-blocking collectives (`Scope::iallreduce`,
//! ...: one algorithm source, polled by the proxy instead of the caller) and two-sided sends
//! and receives. While any is in flight the proxy polls them all; when none moved for the
//! wait policy's spins and yields it naps ([`NAP`]) on the work queue, so new work wakes it at
//! once and a computing rank keeps most of its core.
//!
//! # Buffers
//! As [`Comm::scope`]: operations are posted in a [`Proxy::scope`], their buffers borrowed for
//! the scope's lifetime (the borrow checker keeps them alive and untouched while the proxy may
//! write or read them), and the scope waits for every operation it posted before it returns,
//! also when its closure panics, so the proxy never writes into freed memory.
//!
//! # Faults
//! An operation's error comes back through its ticket. A proxy thread that ends (an error of
//! its own, a panic) marks the rank failed, so every peer's wait fails naming this rank, and
//! every later ticket of this rank fails naming the proxy. While operations are in flight the
//! proxy checks its peers' liveness at every nap, so a dead peer fails them with an error
//! naming it; the world's timeout (`TCA_TIMEOUT`) bounds how long they may make no progress.
//!
//! The proxy thread runs on any CPU of the process's cgroup, not on its rank's one CPU (a
//! bound rank's threads inherit its binding): beside its rank where a core is spare.
//!
//! # A plain communicator's progress thread
//! [`Comm::overlap`] (`TCA_P2P_PROGRESS=thread`) is the same service without handing the world
//! over: the rank's own thread polls its communicator while the computation runs on a scoped
//! thread (module `overlap`).
//!
//! # Not here
//! The seed's node proxy — one process per node serving every rank's queues in shared
//! memory (`tca run --offload`) — is not built; a thread per rank is the proxy.
//! [`crate::threads::run_offloaded`] runs thread-mode ranks each with its proxy.

mod overlap;
mod scope;
mod serve;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::thread::JoinHandle;
use std::time::Duration;

pub use overlap::MAX_NAP;
pub use scope::{ProxyScope, Ticket};

use crate::error::{Error, ErrorKind, Result};
use crate::fabric::World;
use crate::p2p::Status;
use serve::{Done, Leave, Shared, Work};

#[cfg(doc)]
use crate::Comm;

/// Entries of a rank's work queue: how many operations may wait for the proxy before a post
/// waits for room.
pub const QUEUE_DEPTH: usize = 256;

/// How long an idle proxy with operations in flight sleeps on its work queue between polls.
pub const NAP: Duration = Duration::from_micros(50);

/// Where communication progresses: in the caller's tca calls, or in a progress thread. Read
/// from `TCA_PROGRESS` by [`Progress::from_env`] (the thread is a [`Proxy`] that owns the
/// world), and from `TCA_P2P_PROGRESS` for a communicator's [`Comm::overlap`] (the thread is
/// the rank's own, polling while the computation runs on another).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Progress {
    /// In the caller's calls only (tests, waits, blocking calls).
    #[default]
    Caller,
    /// In a thread of the rank's process: a proxy that owns the world, or the rank's own
    /// thread during [`Comm::overlap`].
    Thread,
}

impl Progress {
    /// Parses `caller` or `thread`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim() {
            "caller" => Ok(Self::Caller),
            "thread" => Ok(Self::Thread),
            other => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("progress mode must be `caller` or `thread`, got `{other}`"),
            )),
        }
    }

    /// `TCA_PROGRESS`, [`Progress::Caller`] when unset.
    pub fn from_env() -> Result<Self> {
        Self::from_var(crate::env::PROGRESS)
    }

    /// The environment variable `name` (`TCA_PROGRESS`, `TCA_P2P_PROGRESS`), [`Progress::Caller`]
    /// when unset; a bad value is an error naming the variable.
    pub fn from_var(name: &str) -> Result<Self> {
        match std::env::var(name) {
            Ok(v) => Self::parse(&v).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("{name}: {}", e.message()),
                )
            }),
            Err(_) => Ok(Self::Caller),
        }
    }
}

/// A rank's proxy: the thread that owns its world, and the rank's ends of the queues. Not
/// `Sync`: one thread of the rank posts and polls.
pub struct Proxy {
    rank: u32,
    size: u32,
    wq: SyncSender<Work>,
    cq: Receiver<Done>,
    shared: Arc<Shared>,
    next: Cell<u64>,
    /// Posted, not yet answered.
    pending: RefCell<HashSet<u64>>,
    /// Answered, not yet claimed by a ticket or a scope.
    done: RefCell<HashMap<u64, Result<Status>>>,
    thread: RefCell<Option<JoinHandle<Result<()>>>>,
    /// Why the proxy ended, once it has.
    ended: RefCell<Option<Error>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("pending", &self.pending.borrow().len())
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Moves `world` into a new progress thread, which builds the world's communicator
    /// (collective: every rank starts its proxy) and serves this rank's posts. Fails on a
    /// simulated network, whose ranks run in a virtual-time schedule that a second thread
    /// would step outside of.
    pub fn start(world: World) -> Result<Proxy> {
        if let Some(net) = world.simulated() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "a progress thread cannot serve a rank of the simulated network {net}: \
                     its ranks run in one virtual-time schedule"
                ),
            ));
        }
        let (rank, size) = (world.rank(), world.size());
        let (wq, work) = mpsc::sync_channel(QUEUE_DEPTH);
        let (answer, cq) = mpsc::channel();
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        // (If the thread cannot be started, the world is dropped unfailed with it: the peers
        // see this rank leave, and this rank gets the error.)
        let thread = std::thread::Builder::new()
            .name(format!("tca-proxy-{rank}"))
            .spawn(move || serve::serve(world, work, answer, theirs))
            .map_err(|e| {
                Error::os(
                    ErrorKind::Launch,
                    format!("starting rank {rank}'s progress thread"),
                    e,
                )
            })?;
        let p = Proxy {
            rank,
            size,
            wq,
            cq,
            shared,
            next: Cell::new(1),
            pending: RefCell::new(HashSet::with_capacity(QUEUE_DEPTH)),
            done: RefCell::new(HashMap::with_capacity(QUEUE_DEPTH)),
            thread: RefCell::new(Some(thread)),
            ended: RefCell::new(None),
        };
        // The proxy answers id 0 once its communicator exists (or with the error that
        // prevented it).
        p.pending.borrow_mut().insert(0);
        p.wait_for(0)?;
        Ok(p)
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Ranks in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Runs `f` with a scope in which operations are posted to the proxy; every one posted is
    /// finished before this returns (also when `f` panics). Returns `f`'s error, else the
    /// error of an operation whose ticket was dropped unclaimed.
    pub fn scope<'s, R>(
        &self,
        f: impl for<'p> FnOnce(&'p ProxyScope<'p, 's>) -> Result<R>,
    ) -> Result<R> {
        scope::run(self, f)
    }

    /// Operations posted and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.pending.borrow().len()
    }

    /// Stops the proxy: it leaves the job cleanly after a barrier with the other ranks (as
    /// [`World::finalize`]) and ends. Returns the proxy's error, if it had one. Dropping the
    /// proxy instead leaves without the barrier (as dropping a world does).
    pub fn finish(self) -> Result<()> {
        self.stop(Leave::Finalize)
    }

    /// Stops the proxy after an error of the rank's own: the rank is marked failed, so every
    /// peer's wait fails naming it (what the thread-mode runner does with a rank's error).
    pub fn fail(self) -> Result<()> {
        self.stop(Leave::Fail)
    }

    fn stop(&self, how: Leave) -> Result<()> {
        let Some(t) = self.thread.borrow_mut().take() else {
            return self.ended();
        };
        // A proxy that already ended has dropped its end of the queue: nothing to tell it.
        let _ = self.wq.send(Work::Stop(how));
        join(self.rank, t)
    }

    /// Posts `work` under a new id; waits for room while the queue is full.
    fn post(&self, work: impl FnOnce(u64) -> Work) -> Result<u64> {
        self.ended()?;
        let id = self.next.get();
        self.next.set(id + 1);
        let mut w = work(id);
        loop {
            match self.wq.try_send(w) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) => {
                    // The proxy drains the queue as fast as it starts operations: answers
                    // are collected meanwhile so its completion queue stays short.
                    w = back;
                    self.collect(false)?;
                    std::thread::yield_now();
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.reap();
                    return self.ended().and(Err(self.gone()));
                }
            }
        }
        self.pending.borrow_mut().insert(id);
        Ok(id)
    }

    /// Asks the proxy to cancel `id` if it is a send or receive still in flight.
    fn cancel(&self, id: u64) {
        // An ended proxy answers nothing more: its pending ids fail in `wait_for`.
        let _ = self.wq.send(Work::Cancel(id));
    }

    /// The answer for `id`, if it has come.
    fn try_claim(&self, id: u64) -> Result<Option<Result<Status>>> {
        if let Some(r) = self.done.borrow_mut().remove(&id) {
            return Ok(Some(r));
        }
        self.collect(false)?;
        Ok(self.done.borrow_mut().remove(&id))
    }

    /// Waits for the answer for `id` (posted, unclaimed): looks once, then sleeps on the
    /// completion queue. (Spinning first, as the fabric's waits do, measured 2-3x slower here:
    /// a rank and its proxy are two threads, and the spinning one held the core the proxy
    /// needed; BENCHMARKS.md, "Progress threads".)
    fn wait_for(&self, id: u64) -> Result<Status> {
        loop {
            if let Some(r) = self.done.borrow_mut().remove(&id) {
                return r;
            }
            if !self.pending.borrow().contains(&id) {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("offloaded operation {id} was already claimed"),
                ));
            }
            if !self.collect(false)? {
                self.shared.waiting.store(true, Ordering::Release);
                let r = self.collect(true);
                self.shared.waiting.store(false, Ordering::Release);
                r?;
            }
        }
    }

    /// Moves the proxy's answers into `done`; with `block`, sleeps until at least one came.
    /// Whether any came. An ended proxy fails every pending operation.
    fn collect(&self, block: bool) -> Result<bool> {
        let mut got = false;
        let mut first = if block {
            match self.cq.recv() {
                Ok(d) => Some(d),
                Err(_) => return self.lost(),
            }
        } else {
            None
        };
        loop {
            let d = match first.take() {
                Some(d) => d,
                None => match self.cq.try_recv() {
                    Ok(d) => d,
                    Err(TryRecvError::Empty) => return Ok(got),
                    Err(TryRecvError::Disconnected) => return self.lost(),
                },
            };
            got = true;
            self.pending.borrow_mut().remove(&d.id);
            self.done.borrow_mut().insert(d.id, d.result);
        }
    }

    /// The proxy ended with operations pending: each gets the reason.
    fn lost(&self) -> Result<bool> {
        self.reap();
        let why = self.ended().err().unwrap_or_else(|| self.gone());
        let ids: Vec<u64> = self.pending.borrow_mut().drain().collect();
        let mut done = self.done.borrow_mut();
        for id in ids {
            done.insert(id, Err(why.clone()));
        }
        Ok(true)
    }

    /// Joins an ended proxy thread and keeps its reason.
    fn reap(&self) {
        if let Some(t) = self.thread.borrow_mut().take() {
            let r = join(self.rank, t);
            *self.ended.borrow_mut() = Some(r.err().unwrap_or_else(|| self.gone()));
        }
    }

    fn ended(&self) -> Result<()> {
        match &*self.ended.borrow() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn gone(&self) -> Error {
        Error::peer(
            ErrorKind::Aborted,
            self.rank,
            format!("rank {}'s progress thread has ended", self.rank),
        )
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Leaves as a dropped world does, or, when the rank is unwinding from a panic, marks
        // it failed (the world is dropped on the proxy thread, which is not panicking: it
        // would look like a clean exit, and peers waiting for this rank would wait on). An
        // error of the proxy has marked the rank failed already.
        let how = if std::thread::panicking() {
            Leave::Fail
        } else {
            Leave::Drop
        };
        let _ = self.stop(how);
    }
}

/// Joins the proxy thread: its result, or its panic (one outside its own catch: leaving the
/// job) as an error naming the rank.
fn join(rank: u32, t: JoinHandle<Result<()>>) -> Result<()> {
    t.join().unwrap_or_else(|p| Err(serve::panicked(rank, &*p)))
}
