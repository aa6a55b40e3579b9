//! Offload (seed 004): a rank posts its communication to a work queue and polls a completion
//! queue; a proxy — a thread of the rank's own process (`TCA_PROGRESS=thread`), or the node's
//! proxy process that `tca run --offload` starts (`TCA_PROGRESS=proxy`, module `node`) — owns
//! the rank's [`World`], executes the posted operations and progresses them while the rank
//! computes, so a rank that does not call tca for a long time still completes its peers'
//! collectives and rendezvous (seed 003's polling thread and seed 004's host proxy, on one
//! design: both run the same serving loop, `serve`, over their own queues).
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
//! - **communicators** ([`Proxy::split`], [`ProxyComm`]): made by the proxy on the rank's
//!   behalf (collective, as [`Comm::split`]) and kept until the rank drops its end; a scope of
//!   a [`ProxyComm`] posts operations on it. The proxy opens a scope on each of the rank's
//!   communicators for a burst of work, so operations on several are in flight together; a
//!   split or a free runs between bursts, with nothing in flight (a split is refused while
//!   the rank has operations in flight: a peer waiting for one of them would wait for ever).
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
//! # The node proxy
//! With [`Proxy::connect`] the proxy is another process (module `node`): the queues are
//! fixed-size entries in a shared memfd, buffers come from [`Proxy::alloc`] (arenas the proxy
//! allocates and both map), reductions are the built-in ones, and commands are text
//! ([`Proxy::control`]). One-sided puts go through it as the seeds' chained DMA descriptors:
//! [`Proxy::window`] is memory peers put into (reached by copies, never by reference, since a
//! peer may write it at any time), [`Proxy::chain`] has the proxy build and keep a chain of
//! puts from the rank's windows with a final signal, and [`ProxyScope::istart`] posts one
//! start of it (complete when answered). The rank's side (scopes, tickets, back-pressure, faults) is this
//! module's, for both kinds of proxy.
//!
//! # Which work the proxy takes (measured; BENCHMARKS.md, "The node proxy")
//! All of it, as the seed's host proxy took the heavy operations: a rank of an offloaded job
//! has no world to do anything itself. What that costs is a post and two wake-ups per
//! operation, 3-4 us at 8 bytes against the caller's 0.2 us; a program that wants both keeps
//! its world and uses a progress thread only while it computes ([`Comm::overlap`]).

mod comm;
pub mod control;
pub(crate) mod node;
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

pub use comm::ProxyComm;
pub use node::{ProxyBuf, ProxyChain, ProxyChainBuilder, ProxyWindow, serve_node};
pub use overlap::MAX_NAP;
pub use scope::{ProxyScope, Ticket};

use crate::coll::Element;
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

/// Where communication progresses: in the caller's tca calls, in a progress thread, or in
/// the node's proxy process. Read from `TCA_PROGRESS` by [`Progress::from_env`] (the thread is
/// a [`Proxy`] that owns the world; `proxy` is set by `tca run --offload`), and from
/// `TCA_P2P_PROGRESS` for a communicator's [`Comm::overlap`] (the thread is the rank's own,
/// polling while the computation runs on another; `caller` or `thread` only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Progress {
    /// In the caller's calls only (tests, waits, blocking calls).
    #[default]
    Caller,
    /// In a thread of the rank's process: a proxy that owns the world, or the rank's own
    /// thread during [`Comm::overlap`].
    Thread,
    /// In the node's proxy process, which holds every local rank's world
    /// ([`Proxy::connect`]).
    Proxy,
}

impl Progress {
    /// Parses `caller`, `thread` or `proxy`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim() {
            "caller" => Ok(Self::Caller),
            "thread" => Ok(Self::Thread),
            "proxy" => Ok(Self::Proxy),
            other => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("progress mode must be `caller`, `thread` or `proxy`, got `{other}`"),
            )),
        }
    }

    /// `TCA_PROGRESS`, [`Progress::Caller`] when unset.
    pub fn from_env() -> Result<Self> {
        Self::from_var(crate::env::PROGRESS)
    }

    /// The environment variable `name` (`TCA_PROGRESS`, `TCA_P2P_PROGRESS`), [`Progress::Caller`]
    /// when unset; a bad value is an error naming the variable. (A communicator's own
    /// progress, `TCA_P2P_PROGRESS`, has no proxy process: `proxy` is refused there.)
    pub fn from_var(name: &str) -> Result<Self> {
        let bad = |m: &str| Error::new(ErrorKind::InvalidArgument, format!("{name}: {m}"));
        match std::env::var(name) {
            Ok(v) => match Self::parse(&v) {
                Ok(Self::Proxy) if name == crate::env::P2P_PROGRESS => Err(bad(
                    "`proxy` is the node proxy of `tca run --offload` (TCA_PROGRESS); a \
                     communicator's own progress is `caller` or `thread`",
                )),
                Ok(p) => Ok(p),
                Err(e) => Err(bad(e.message())),
            },
            Err(_) => Ok(Self::Caller),
        }
    }
}

/// A rank's proxy: the thread that owns its world ([`Proxy::start`]), or the node's proxy
/// process that holds it ([`Proxy::connect`], under `tca run --offload`), and the rank's ends
/// of the queues. Not `Sync`: one thread of the rank posts and polls.
pub struct Proxy {
    rank: u32,
    size: u32,
    link: Link,
    next: Cell<u64>,
    /// Posted, not yet answered.
    pending: RefCell<HashSet<u64>>,
    /// Answered, not yet claimed by a ticket or a scope.
    done: RefCell<HashMap<u64, Result<Status>>>,
    /// Why the proxy ended, once it has.
    ended: RefCell<Option<Error>>,
    /// Communicators this rank holds at the proxy, the world's included.
    comms: Cell<usize>,
}

/// How a rank reaches its proxy.
enum Link {
    /// A thread of this process: channels, and the thread to join.
    Thread {
        wq: SyncSender<Work>,
        cq: Receiver<Done>,
        shared: Arc<Shared>,
        thread: RefCell<Option<JoinHandle<Result<()>>>>,
    },
    /// The node's proxy process: queues in shared memory.
    Node(node::Client),
}

/// What a rank posts: a work item for a thread, an entry for the node proxy.
pub(crate) enum Msg {
    Work(Work),
    Entry(node::Entry),
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field(
                "link",
                &match self.link {
                    Link::Thread { .. } => "thread",
                    Link::Node(_) => "node",
                },
            )
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
            .spawn(move || {
                serve::serve(
                    world,
                    &serve::Channels {
                        work,
                        answer,
                        shared: theirs,
                    },
                )
            })
            .map_err(|e| {
                Error::os(
                    ErrorKind::Launch,
                    format!("starting rank {rank}'s progress thread"),
                    e,
                )
            })?;
        Self::ready(
            rank,
            size,
            Link::Thread {
                wq,
                cq,
                shared,
                thread: RefCell::new(Some(thread)),
            },
        )
    }

    /// Connects this rank to its node's proxy process, which holds the rank's world: the rank
    /// of a job started by `tca run --offload` (`TCA_PROGRESS=proxy`). Waits until the proxy
    /// has built the rank's communicator. The rank's buffers for posted operations come from
    /// [`Proxy::alloc`] (memory the proxy maps too); a rank of such a job has no world of its
    /// own ([`crate::init`] refuses).
    pub fn connect() -> Result<Proxy> {
        let (client, rank, size) = node::Client::connect()?;
        Self::ready(rank, size, Link::Node(client))
    }

    /// The proxy of this rank as the environment says: [`Proxy::connect`] in a job of
    /// `tca run --offload` (`TCA_PROGRESS=proxy`), otherwise a progress thread
    /// ([`Proxy::start`]) on the world [`crate::init`] joins.
    pub fn from_env() -> Result<Proxy> {
        if node::offloaded() || Progress::from_env()? == Progress::Proxy {
            Self::connect()
        } else {
            Self::start(crate::init()?)
        }
    }

    /// A proxy on `link`, once it has answered id 0: its communicator exists (or the error
    /// that prevented it).
    fn ready(rank: u32, size: u32, link: Link) -> Result<Proxy> {
        let p = Proxy {
            rank,
            size,
            link,
            next: Cell::new(1),
            pending: RefCell::new(HashSet::with_capacity(QUEUE_DEPTH)),
            done: RefCell::new(HashMap::with_capacity(QUEUE_DEPTH)),
            ended: RefCell::new(None),
            comms: Cell::new(1),
        };
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

    /// Whether the proxy is the node's proxy process (else a thread of this process).
    pub fn is_node_proxy(&self) -> bool {
        matches!(self.link, Link::Node(_))
    }

    /// Runs `f` with a scope in which operations are posted to the proxy; every one posted is
    /// finished before this returns (also when `f` panics). Returns `f`'s error, else the
    /// error of an operation whose ticket was dropped unclaimed.
    pub fn scope<'s, R>(
        &self,
        f: impl for<'p> FnOnce(&'p ProxyScope<'p, 's>) -> Result<R>,
    ) -> Result<R> {
        scope::run(self, serve::WORLD, f)
    }

    /// Splits the job's ranks, as [`Comm::split`] (collective over every rank): ranks with
    /// the same `color` get a communicator of the proxy, ordered by `key` then by rank;
    /// `None` takes no part and gets `None`. The proxy makes the communicator on this rank's
    /// behalf (the seed's command channel) and keeps it until the [`ProxyComm`] drops.
    /// Refused while this rank has operations in flight (the proxy makes it with nothing in
    /// flight, so a peer waiting for one of them would wait for ever), and beyond 64
    /// communicators held at once, the world's included.
    pub fn split(&self, color: Option<u32>, key: i64) -> Result<Option<ProxyComm<'_>>> {
        comm::split(self, serve::WORLD, color, key)
    }

    /// A buffer of `n` zeroed elements for operations posted to this proxy: memory that the
    /// node's proxy process maps too (allocated by it on this rank's behalf, the seed's
    /// command channel), or ordinary memory for a progress thread. Buffers of a node proxy
    /// must come from here; a thread's may be any.
    pub fn alloc<T: Element>(&self, n: usize) -> Result<ProxyBuf<'_, T>> {
        node::alloc(self, n)
    }

    /// Memory of `bytes` zeroed bytes that peers put into, through the node proxy (an arena
    /// it makes on this rank's behalf): its [`ProxyWindow::handle`] is what their chains
    /// name. Node proxy only (a progress thread's rank reaches its world in
    /// [`ProxyScope::run`]).
    pub fn window(&self, bytes: usize) -> Result<ProxyWindow<'_>> {
        node::window(self, bytes)
    }

    /// Starts building a chain of puts from this rank's windows, with a final signal, that
    /// the node proxy holds and starts whenever [`ProxyScope::istart`] posts it. Node proxy
    /// only.
    pub fn chain(&self) -> ProxyChainBuilder<'_> {
        ProxyChainBuilder::new(self)
    }

    /// Runs a control request on the proxy with this rank's communicator and returns the
    /// reply ([`control`]: `transport`, `force COLLECTIVE NAME|auto`, `algorithm COLLECTIVE
    /// BYTES`, `single-copy-calls`). Like a blocking call, it waits for the answer. As with
    /// [`Comm::force`], every rank forces the same algorithm.
    pub fn control(&self, request: &str) -> Result<String> {
        self.control_on(serve::WORLD, request)
    }

    /// [`Proxy::control`] with communicator `comm`.
    pub(crate) fn control_on(&self, comm: serve::CommId, request: &str) -> Result<String> {
        match &self.link {
            Link::Thread { .. } => scope::run(self, comm, |s| s.run(|c| control::run(c, request))),
            Link::Node(_) => node::control(self, comm, request),
        }
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
        match &self.link {
            Link::Thread { wq, thread, .. } => {
                let Some(t) = thread.borrow_mut().take() else {
                    return self.ended();
                };
                // A proxy that already ended has dropped its end of the queue: nothing to
                // tell it.
                let _ = wq.send(Work::Stop(how));
                join(self.rank, t)
            }
            Link::Node(c) => {
                if !c.stop_once() {
                    return self.ended();
                }
                // Answered once the proxy's world has left (after the barrier, to finish).
                let id = self.post(|id| Msg::Entry(node::Entry::stop(id, how)))?;
                let r = self.wait_for(id).map(drop);
                self.ended.borrow_mut().get_or_insert_with(|| c.stopped());
                r
            }
        }
    }

    /// Posts `msg` and waits for its answer: a request of the command channel, whose result
    /// the rank needs before it goes on.
    pub(crate) fn request(&self, msg: impl FnOnce(u64) -> Msg) -> Result<Status> {
        let id = self.post(msg)?;
        self.wait_for(id)
    }

    /// Posts `msg` under a new id; waits for room while the queue is full.
    fn post(&self, msg: impl FnOnce(u64) -> Msg) -> Result<u64> {
        self.ended()?;
        let id = self.next.get();
        self.next.set(id + 1);
        self.send(msg(id))?;
        self.pending.borrow_mut().insert(id);
        Ok(id)
    }

    /// Hands `m` to the proxy, waiting for room while the queue is full (collecting answers
    /// meanwhile, so the completion queue stays short).
    fn send(&self, mut m: Msg) -> Result<()> {
        loop {
            let back = match (&self.link, m) {
                (Link::Thread { wq, .. }, Msg::Work(w)) => match wq.try_send(w) {
                    Ok(()) => return Ok(()),
                    Err(TrySendError::Full(back)) => Msg::Work(back),
                    Err(TrySendError::Disconnected(_)) => {
                        self.reap();
                        return self.ended().and(Err(self.gone()));
                    }
                },
                (Link::Node(c), Msg::Entry(e)) => {
                    if c.try_push(&e)? {
                        return Ok(());
                    }
                    if !c.proxy_alive() {
                        self.lost()?;
                        return self.ended().and(Err(self.gone()));
                    }
                    Msg::Entry(e)
                }
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        "this proxy cannot take that kind of work",
                    ));
                }
            };
            m = back;
            self.collect(false)?;
            // An answer may have said that the proxy has ended (it takes nothing more).
            self.ended()?;
            std::thread::yield_now();
        }
    }

    /// Asks the proxy to cancel `id` if it is a send or receive still in flight.
    fn cancel(&self, id: u64) {
        // An ended proxy answers nothing more: its pending ids fail in `wait_for`.
        let m = match self.link {
            Link::Thread { .. } => Msg::Work(Work::Cancel(id)),
            Link::Node(_) => Msg::Entry(node::Entry::cancel(id)),
        };
        let _ = self.send(m);
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
                match &self.link {
                    Link::Thread { shared, .. } => {
                        shared.waiting.store(true, Ordering::Release);
                        let r = self.collect(true);
                        shared.waiting.store(false, Ordering::Release);
                        r?;
                    }
                    Link::Node(c) => {
                        c.set_waiting(true);
                        let r = self.collect(true);
                        c.set_waiting(false);
                        r?;
                    }
                }
            }
        }
    }

    /// Moves the proxy's answers into `done`; with `block`, sleeps until at least one came.
    /// Whether any came. An ended proxy fails every pending operation.
    fn collect(&self, block: bool) -> Result<bool> {
        match &self.link {
            Link::Thread { cq, .. } => {
                let mut got = false;
                let mut first = if block {
                    match cq.recv() {
                        Ok(d) => Some(d),
                        Err(_) => return self.lost(),
                    }
                } else {
                    None
                };
                loop {
                    let d = match first.take() {
                        Some(d) => d,
                        None => match cq.try_recv() {
                            Ok(d) => d,
                            Err(TryRecvError::Empty) => return Ok(got),
                            Err(TryRecvError::Disconnected) => return self.lost(),
                        },
                    };
                    got = true;
                    self.record(d);
                }
            }
            Link::Node(c) => loop {
                let mut got = false;
                while let Some(d) = c.try_take()? {
                    got = true;
                    self.record(d);
                }
                if got || !block {
                    return Ok(got);
                }
                if !c.proxy_alive() {
                    return self.lost();
                }
                c.sleep();
            },
        }
    }

    fn record(&self, d: Done) {
        if let (Link::Node(c), node::END) = (&self.link, d.id) {
            // The proxy's serving of this rank has ended (its last answer): what is pending
            // fails with its reason.
            let why = match d.result {
                Err(e) => e,
                Ok(_) if c.stopping() => c.stopped(),
                Ok(_) => c.gone(),
            };
            self.ended.borrow_mut().get_or_insert(why);
            let _ = self.lost();
            return;
        }
        self.pending.borrow_mut().remove(&d.id);
        self.done.borrow_mut().insert(d.id, d.result);
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

    /// Joins an ended proxy thread and keeps its reason; notes that a node proxy has ended.
    fn reap(&self) {
        match &self.link {
            Link::Thread { thread, .. } => {
                if let Some(t) = thread.borrow_mut().take() {
                    let r = join(self.rank, t);
                    *self.ended.borrow_mut() = Some(r.err().unwrap_or_else(|| self.gone()));
                }
            }
            Link::Node(_) => {
                if self.ended.borrow().is_none() {
                    *self.ended.borrow_mut() = Some(self.gone());
                }
            }
        }
    }

    fn ended(&self) -> Result<()> {
        match &*self.ended.borrow() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn gone(&self) -> Error {
        match &self.link {
            Link::Thread { .. } => Error::peer(
                ErrorKind::Aborted,
                self.rank,
                format!("rank {}'s progress thread has ended", self.rank),
            ),
            Link::Node(c) => c.gone(),
        }
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
