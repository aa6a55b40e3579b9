//! The proxy thread: owns the rank's world and communicator, starts what is posted, polls what
//! is in flight, answers through the completion queue.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

use super::NAP;
use crate::coll::Comm;
use crate::coll::nb::Scope;
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::World;
use crate::p2p::{Request, Status};

/// Starts an operation on the proxy's scope.
pub(crate) type Start =
    Box<dyn for<'r, 'x, 'c> FnOnce(&'r Scope<'x, 'c>) -> Result<Request<'r>> + Send>;

/// A command, run on the proxy with the rank's communicator; its status is the answer's (a
/// control request's reply length in `bytes`).
pub(crate) type Command = Box<dyn for<'c> FnOnce(&Comm<'c>) -> Result<Status> + Send>;

/// A communicator of the rank's proxy, by index: [`WORLD`] the world's, then those the rank
/// created ([`Work::Split`]). A freed one's index is given to the next one made.
pub(crate) type CommId = u16;

/// The world's communicator.
pub(crate) const WORLD: CommId = 0;

/// Communicators a rank may hold at its proxy at once, the world's included: a burst opens a
/// scope on each (nested), so their number bounds its stack and its cost.
pub(crate) const MAX_COMMS: usize = 64;

/// A split's answer (`source`) for a rank that took no part (no color).
pub(crate) const NO_COMM: u32 = u32::MAX;

/// A work-queue entry.
pub(crate) enum Work {
    /// Start an operation on communicator `.1`.
    Start(u64, CommId, Start),
    /// Run a command with communicator `.1`.
    Run(u64, CommId, Command),
    /// Split communicator `parent` (collective over its members), as [`Comm::split`]: answered
    /// with the new communicator's index in `source` ([`NO_COMM`] for a rank without a
    /// color), the rank's place in it in `tag` and its size in `bytes`. Runs once nothing of
    /// the rank is in flight.
    Split {
        id: u64,
        parent: CommId,
        color: Option<u32>,
        key: i64,
    },
    /// Communicator `.1` is no longer the rank's: dropped once nothing is in flight, its
    /// index free for the next split.
    Free(u64, CommId),
    /// The ticket of this operation was dropped unclaimed: a send or receive still in flight
    /// is cancelled (as dropping its request does), a collective runs to its end.
    Cancel(u64),
    Stop(Leave),
}

/// What the rank and its proxy share besides the queues.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// The rank is asleep waiting for an answer (the proxy's stall clock runs only then, as
    /// a blocking call's timeout does).
    pub waiting: AtomicBool,
}

/// The message of a cancelled operation's answer (its ticket is gone; the scope ignores it).
pub(crate) const CANCELLED: &str = "cancelled: its ticket was dropped unclaimed";

/// How the proxy leaves the job when stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leave {
    /// After a barrier with every rank ([`World::finalize`]).
    Finalize,
    /// At once (the world dropped).
    Drop,
    /// Marked failed: every peer's wait fails naming this rank.
    Fail,
}

/// A completion-queue entry: the operation and how it ended.
pub(crate) struct Done {
    pub id: u64,
    pub result: Result<Status>,
}

/// Where a proxy takes its work and leaves its answers: the channels of a progress thread
/// ([`Channels`]), or a rank's queues in the node proxy's shared memory (`node`).
pub(crate) trait Queues {
    /// The next work item, sleeping until one comes (the proxy has nothing in flight), or
    /// after `tick` with nothing ([`Next::Idle`]); [`Next::Gone`] when the rank is gone.
    fn next(&self, tick: Option<Duration>) -> Next;
    /// The next work item if there is one, waiting at most `nap` for it.
    fn poll(&self, nap: Option<Duration>) -> std::result::Result<Work, TryRecvError>;
    /// Hands an answer to the rank (never waits for it).
    fn answer(&self, d: Done);
    /// Whether the rank is asleep waiting for an answer.
    fn rank_waiting(&self) -> bool;
    /// Sees the rank's communicator once it is made, before anything is served.
    fn adopt(&self, _c: &Comm<'_>) {}
}

/// What an idle proxy's wait for work gave.
pub(crate) enum Next {
    Work(Work),
    /// Nothing for a tick.
    Idle,
    /// The rank is gone (or dropped its end).
    Gone,
}

/// How often an idle proxy whose world reaches peers through a network lets their traffic
/// in: a network moves data only while polled, and a peer's put into one of the rank's
/// windows needs nothing of the rank's to be in flight.
const IDLE_TICK: Duration = Duration::from_micros(200);
/// The longest tick, reached when nothing has come for a while.
const IDLE_TICK_MAX: Duration = Duration::from_millis(1);

/// A progress thread's queues: channels of the rank's process.
pub(crate) struct Channels {
    pub work: Receiver<Work>,
    pub answer: Sender<Done>,
    pub shared: Arc<Shared>,
}

impl Queues for Channels {
    fn next(&self, tick: Option<Duration>) -> Next {
        match tick {
            None => self.work.recv().map_or(Next::Gone, Next::Work),
            Some(t) => match self.work.recv_timeout(t) {
                Ok(w) => Next::Work(w),
                Err(RecvTimeoutError::Timeout) => Next::Idle,
                Err(RecvTimeoutError::Disconnected) => Next::Gone,
            },
        }
    }

    fn poll(&self, nap: Option<Duration>) -> std::result::Result<Work, TryRecvError> {
        match nap {
            Some(t) => self.work.recv_timeout(t).map_err(|e| match e {
                RecvTimeoutError::Timeout => TryRecvError::Empty,
                RecvTimeoutError::Disconnected => TryRecvError::Disconnected,
            }),
            None => self.work.try_recv(),
        }
    }

    fn answer(&self, d: Done) {
        // The rank's end is gone only when the rank itself is: nothing left to tell.
        let _ = self.answer.send(d);
    }

    fn rank_waiting(&self) -> bool {
        self.shared.waiting.load(Ordering::Acquire)
    }
}

/// How often a proxy with operations in flight that made no progress looks at its peers.
const LIVENESS_EVERY: Duration = Duration::from_millis(10);

/// The proxy thread's body.
pub(crate) fn serve(world: World, q: &impl Queues) -> Result<()> {
    let rank = world.rank();
    // A rank bound to one CPU by the launcher passed its binding to this thread; the proxy
    // must be free to run beside its rank (on a spare core where there is one), not only
    // when the rank sleeps.
    crate::bootstrap::bind::unbind_helper_thread();
    let served = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let comm = match Comm::world(&world) {
            Ok(c) => c,
            Err(e) => {
                q.answer(Done {
                    id: 0,
                    result: Err(e.clone()),
                });
                return Err(e);
            }
        };
        q.adopt(&comm);
        q.answer(Done {
            id: 0,
            result: Ok(Status::send()),
        });
        let mut comms = Comms {
            list: vec![Some(comm)],
            freed: Vec::new(),
        };
        // Idle: asleep on the work queue (its doorbell). A burst of work runs in a scope of
        // each communicator that closes when nothing is left in flight, so a long-lived proxy
        // keeps no record of the collectives it finished; communicators are made and dropped
        // between bursts, with no scope open.
        let networked = world.network_provider().is_some();
        let mut tick = IDLE_TICK;
        loop {
            let first = match q.next(networked.then_some(tick)) {
                Next::Work(Work::Stop(how)) => return Ok(how),
                Next::Work(Work::Cancel(_)) => continue, // answered already: nothing in flight
                Next::Work(w) => w,
                Next::Idle => {
                    // Longer ticks while nothing comes (back to the shortest on work). An
                    // error of the network here is the rank's only if a peer is gone: the
                    // next operation meets any other.
                    tick = (tick * 2).min(IDLE_TICK_MAX);
                    if world.progress().is_err() {
                        world.check_alive()?;
                    }
                    continue;
                }
                Next::Gone => return Ok(Leave::Drop), // the rank dropped its end, or is gone
            };
            tick = IDLE_TICK;
            let first = match comms.between(first, q) {
                Some(w) => w,
                None => continue,
            };
            let (mut stop, mut first) = (None, Some(first));
            let mut later = Later::default();
            open_scopes(&comms.list, 0, &[], &mut |scopes| {
                stop = Burst::new(&world, scopes, q, &mut later).serve(first.take())?;
                Ok(())
            })?;
            comms.after(later, q);
            if let Some(how) = stop {
                return Ok(how);
            }
        }
    }));
    match served {
        Ok(Ok(Leave::Finalize)) => world.finalize(),
        Ok(Ok(Leave::Drop)) => Ok(()),
        Ok(Ok(Leave::Fail)) => {
            world.mark_failed();
            Ok(())
        }
        Ok(Err(e)) => {
            world.mark_failed();
            Err(e)
        }
        Err(p) => {
            world.mark_failed();
            Err(panicked(rank, &*p))
        }
    }
}

/// The rank's communicators in its proxy.
struct Comms<'w> {
    /// By [`CommId`]; `None` where one was freed.
    list: Vec<Option<Comm<'w>>>,
    /// Indices freed, reused first.
    freed: Vec<CommId>,
}

/// What a burst leaves for after it: a split to run, communicators to drop.
#[derive(Default)]
struct Later {
    split: Option<Work>,
    free: Vec<CommId>,
}

impl<'w> Comms<'w> {
    /// Runs `w` if it is a split or a free (with no scope open); otherwise it starts a
    /// burst.
    fn between(&mut self, w: Work, q: &impl Queues) -> Option<Work> {
        match w {
            Work::Split {
                id,
                parent,
                color,
                key,
            } => {
                let r = self.split(parent, color, key);
                q.answer(Done { id, result: r });
                None
            }
            Work::Free(id, c) => {
                let r = self.free(c);
                q.answer(Done { id, result: r });
                None
            }
            w => Some(w),
        }
    }

    /// After a burst: drops what it freed, runs the split it took.
    fn after(&mut self, later: Later, q: &impl Queues) {
        for c in later.free {
            // (Checked when the burst took it.)
            let _ = self.free(c);
        }
        if let Some(w) = later.split {
            let _ = self.between(w, q);
        }
    }

    fn get(&self, c: CommId) -> Result<&Comm<'w>> {
        self.list
            .get(usize::from(c))
            .and_then(Option::as_ref)
            .ok_or_else(|| no_comm(c))
    }

    fn split(&mut self, parent: CommId, color: Option<u32>, key: i64) -> Result<Status> {
        let parent = self.get(parent)?;
        // Refused before taking part (the rank's side refuses first; a rank whose count
        // differs from its peers' leaves them waiting in the split, as MPI's exhausted
        // context ids end a job).
        if self.list.iter().flatten().count() >= MAX_COMMS {
            return Err(too_many(parent.world_ref().rank()));
        }
        let Some(new) = parent.split(color, key)? else {
            return Ok(Status {
                source: NO_COMM,
                tag: 0,
                bytes: 0,
            });
        };
        let at = match self.freed.pop() {
            Some(c) => c,
            None => {
                // Below MAX_COMMS, so it fits a CommId.
                let c = CommId::try_from(self.list.len())
                    .map_err(|_| too_many(new.world_ref().rank()))?;
                self.list.push(None);
                c
            }
        };
        let st = Status {
            source: u32::from(at),
            tag: i32::try_from(new.rank()).unwrap_or(i32::MAX),
            bytes: new.size() as usize,
        };
        self.list[usize::from(at)] = Some(new);
        Ok(st)
    }

    fn free(&mut self, c: CommId) -> Result<Status> {
        not_world(c)?;
        self.get(c)?;
        self.list[usize::from(c)] = None;
        self.freed.push(c);
        Ok(Status::send())
    }
}

/// Refuses to free the world's communicator.
fn not_world(c: CommId) -> Result<()> {
    if c == WORLD {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "the world's communicator cannot be freed",
        ));
    }
    Ok(())
}

fn too_many(rank: u32) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!(
            "rank {rank} holds {MAX_COMMS} communicators at its proxy (the world's included): \
             drop some before making more"
        ),
    )
}

fn no_comm(c: CommId) -> Error {
    Error::new(
        ErrorKind::InvalidHandle,
        format!("the rank has no communicator {c} at its proxy"),
    )
}

/// A communicator's open scope, its lifetimes erased, so that the scopes of several
/// communicators can be held together.
pub(crate) trait Open {
    fn start(&self, f: Start) -> Result<Request<'_>>;
    fn comm(&self) -> &Comm<'_>;
}

impl<'s, 'c: 's> Open for Scope<'s, 'c> {
    fn start(&self, f: Start) -> Result<Request<'_>> {
        f(self)
    }

    fn comm(&self) -> &Comm<'_> {
        Scope::comm(self)
    }
}

/// The open scopes of a burst, by communicator.
type Scopes<'r> = [(CommId, &'r dyn Open)];

/// Opens a scope on each communicator of `list` from index `at` on (nested: a scope ends
/// only once its collectives have), then runs `f` with all of them and `open`'s. One
/// communicator (the usual case) needs no list.
fn open_scopes(
    list: &[Option<Comm<'_>>],
    at: usize,
    open: &Scopes<'_>,
    f: &mut dyn FnMut(&Scopes<'_>) -> Result<()>,
) -> Result<()> {
    let Some((k, c)) = list
        .iter()
        .enumerate()
        .skip(at)
        .find_map(|(k, c)| c.as_ref().map(|c| (k, c)))
    else {
        return f(open);
    };
    let id = CommId::try_from(k).unwrap_or(CommId::MAX);
    c.scope(|s| {
        let last = list[k + 1..].iter().all(Option::is_none);
        if open.is_empty() && last {
            return f(&[(id, s)]);
        }
        let mut v: Vec<(CommId, &dyn Open)> = Vec::with_capacity(open.len() + 1);
        v.extend_from_slice(open);
        v.push((id, s));
        open_scopes(list, k + 1, &v, f)
    })
}

/// The error of rank `rank`'s progress thread that panicked with `payload`.
pub(crate) fn panicked(rank: u32, payload: &(dyn std::any::Any + Send)) -> Error {
    let msg = crate::error::panic_message(payload);
    Error::peer(
        ErrorKind::PeerDied,
        rank,
        format!("rank {rank}'s progress thread panicked: {msg}"),
    )
}

/// The serving loop's state for one burst of work (from a post to nothing in flight).
struct Burst<'a, 'r, Q> {
    world: &'a World,
    scopes: &'a Scopes<'r>,
    q: &'a Q,
    /// Started, not yet answered.
    live: Vec<(u64, Request<'r>)>,
    /// A split or frees taken, for after the burst.
    later: &'a mut Later,
}

impl<'a, 'r, Q: Queues> Burst<'a, 'r, Q> {
    fn new(world: &'a World, scopes: &'a Scopes<'r>, q: &'a Q, later: &'a mut Later) -> Self {
        Self {
            world,
            scopes,
            q,
            // Grown as operations go live (one burst per 8-byte operation when the rank
            // waits for each: no queue-sized allocation per burst).
            live: Vec::new(),
            later,
        }
    }

    fn answer(&self, id: u64, result: Result<Status>) {
        self.q.answer(Done { id, result });
    }

    /// The open scope of communicator `c`, unless the rank freed it.
    fn scope(&self, c: CommId) -> Result<&'r dyn Open> {
        self.scopes
            .iter()
            .find(|(k, _)| *k == c && !self.later.free.contains(&c))
            .map(|&(_, s)| s)
            .ok_or_else(|| no_comm(c))
    }

    /// Steps of collectives that went through, on every communicator.
    fn steps(&self) -> u64 {
        self.scopes
            .iter()
            .map(|(_, s)| s.comm().steps_taken())
            .fold(0, u64::wrapping_add)
    }

    /// Starts, runs or cancels one work item; `Some` to stop.
    fn take(&mut self, w: Work) -> Result<Option<Leave>> {
        match w {
            Work::Stop(how) => {
                self.drain()?;
                return Ok(Some(how));
            }
            Work::Start(id, c, f) => match self.scope(c).and_then(|s| s.start(f)) {
                Ok(r) => self.live.push((id, r)),
                Err(e) => self.answer(id, Err(e)),
            },
            Work::Run(id, c, f) => {
                let r = self.scope(c).and_then(|s| f(s.comm()));
                self.answer(id, r);
            }
            w @ Work::Split { .. } => self.later.split = Some(w),
            Work::Free(id, c) => {
                let r = not_world(c).and_then(|()| self.scope(c)).map(|_| {
                    self.later.free.push(c);
                    Status::send()
                });
                self.answer(id, r);
            }
            Work::Cancel(id) => {
                if let Some(k) = self
                    .live
                    .iter()
                    .position(|(i, r)| *i == id && !r.is_collective())
                {
                    let (_, mut r) = self.live.swap_remove(k);
                    // One that has ended (maybe with an error) is answered as it ended.
                    let res = match r.test() {
                        Ok(Some(s)) => Ok(s),
                        Err(e) => Err(e),
                        Ok(None) => Err(Error::new(ErrorKind::Aborted, CANCELLED)),
                    };
                    drop(r);
                    self.answer(id, res);
                }
            }
        }
        Ok(None)
    }

    /// Serves `first` and what follows until nothing is in flight (`None`) or the proxy is
    /// stopped (how to leave). An error ends the proxy (and fails the rank).
    fn serve(&mut self, first: Option<Work>) -> Result<Option<Leave>> {
        let (spins, yields) = self.world.wait_policy();
        let patience = spins.saturating_add(yields).min(1 << 20);
        let mut idle = 0u32;
        let mut stalled: Option<Instant> = None;
        let mut looked = Instant::now();
        if let Some(w) = first
            && let Some(how) = self.take(w)?
        {
            return Ok(Some(how));
        }
        loop {
            // Everything posted meanwhile, then one poll of all in flight. When what is in
            // flight has not moved for a while, the first look naps on the queue (new work
            // ends the nap at once).
            let mut took = false;
            // After a split, nothing more is taken: it runs once what is in flight is done.
            while self.later.split.is_none() {
                let nap = !took && idle >= patience;
                match self.q.poll(nap.then_some(NAP)) {
                    Ok(w) => {
                        took = true;
                        if let Some(how) = self.take(w)? {
                            return Ok(Some(how));
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        // The rank dropped its proxy without stopping it (it unwound).
                        self.drain()?;
                        return Ok(Some(Leave::Drop));
                    }
                }
            }
            // Progress is a completion, new work, or a step of a collective in flight
            // (a large one moves for a long time before it completes: no nap meanwhile).
            let steps = self.steps();
            let moved = self.poll() || took || self.steps() != steps;
            if self.live.is_empty() {
                return Ok(None);
            }
            if moved {
                idle = 0;
                stalled = None;
                continue;
            }
            idle = idle.saturating_add(1);
            if idle > spins && idle <= patience {
                std::thread::yield_now();
            }
            if idle >= patience && self.later.split.is_some() {
                // No nap on the queue while a split waits: a plain one.
                std::thread::sleep(NAP);
            }
            if idle >= patience {
                // The stall clock runs while the rank waits for an answer, as a blocking
                // call's timeout would.
                if self.q.rank_waiting() {
                    stalled.get_or_insert_with(Instant::now);
                } else {
                    stalled = None;
                }
                if looked.elapsed() >= LIVENESS_EVERY {
                    looked = Instant::now();
                    self.check(stalled)?;
                }
            }
        }
    }

    /// Tests every operation in flight, answers the completed ones. Whether any completed.
    fn poll(&mut self) -> bool {
        let before = self.live.len();
        let q = self.q;
        self.live.retain_mut(|(id, r)| match r.test() {
            Ok(None) => true,
            Ok(Some(s)) => {
                q.answer(Done {
                    id: *id,
                    result: Ok(s),
                });
                false
            }
            Err(e) => {
                q.answer(Done {
                    id: *id,
                    result: Err(e),
                });
                false
            }
        });
        self.live.len() != before
    }

    /// Ends the proxy when a peer died, or when the rank has waited the world's timeout for
    /// operations none of which completed. What is in flight is not answered here: the
    /// communicator's scope finishes (or fails) it first, then the ended proxy fails the
    /// rank's tickets, so a buffer is never handed back while an operation may still write
    /// it.
    fn check(&self, stalled: Option<Instant>) -> Result<()> {
        self.world.check_alive()?;
        match (self.world.timeout(), stalled) {
            (Some(t), Some(since)) if since.elapsed() >= t => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "rank {} waited {:.1} s for its progress thread's {} operation(s) in \
                     flight, none of which completed (a peer alive but not taking part?)",
                    self.world.rank(),
                    t.as_secs_f64(),
                    self.live.len(),
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Completes what is in flight before the proxy stops (a rank stops its proxy only
    /// outside its scopes, so this is empty unless the rank unwound or is gone): sends and
    /// receives not done are cancelled (as dropping their requests does: a receive no one
    /// answers must not hold the proxy), collectives run to their end (the peers wait for
    /// them), all of them polled in turn: waiting for one alone could wait for a peer that
    /// needs this rank's part of another communicator's. A dead peer, or the world's timeout
    /// without progress, ends it with an error.
    fn drain(&mut self) -> Result<()> {
        let q = self.q;
        let mut first: Result<()> = Ok(());
        let mut keep = |id: u64, res: Result<Status>| {
            if first.is_ok()
                && let Err(e) = &res
            {
                first = Err(e.clone());
            }
            q.answer(Done { id, result: res });
        };
        let (mut live, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.live)
            .into_iter()
            .partition(|(_, r)| r.is_collective());
        for (id, mut r) in rest {
            match r.test() {
                Ok(Some(s)) => keep(id, Ok(s)),
                Err(e) => keep(id, Err(e)),
                Ok(None) => {
                    // Cancelled by its drop, before the answer says so (the rank may reuse
                    // the buffer once answered).
                    drop(r);
                    q.answer(Done {
                        id,
                        result: Err(Error::new(ErrorKind::Aborted, CANCELLED)),
                    });
                }
            }
        }
        let (mut idle, mut since, mut looked) = (0u32, Instant::now(), Instant::now());
        while !live.is_empty() {
            let before = live.len();
            live.retain_mut(|(id, r)| match r.test() {
                Ok(None) => true,
                Ok(Some(s)) => {
                    keep(*id, Ok(s));
                    false
                }
                Err(e) => {
                    keep(*id, Err(e));
                    false
                }
            });
            if live.len() != before {
                (idle, since) = (0, Instant::now());
                continue;
            }
            idle = idle.saturating_add(1);
            if idle < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(NAP);
            }
            if looked.elapsed() >= LIVENESS_EVERY {
                looked = Instant::now();
                self.world.check_alive()?;
                if let Some(t) = self.world.timeout()
                    && since.elapsed() >= t
                {
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "rank {}'s proxy waited {:.1} s for {} collective(s) to finish \
                             before stopping, none of which moved",
                            self.world.rank(),
                            t.as_secs_f64(),
                            live.len()
                        ),
                    ));
                }
            }
        }
        first
    }
}
