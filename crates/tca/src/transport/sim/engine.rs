//! The discrete-event core of the simulated transport: virtual clocks, one baton, one queue.
//!
//! Every rank is a coroutine on one thread ([`super::coroutines`]), and **only the rank holding
//! the baton runs**; the others are suspended until the baton word names them. The baton always
//! goes to whatever is earliest in virtual time: the next event (a message arriving, an atomic
//! applied, a timer) or the ready rank whose clock is lowest (events first on a tie, then
//! lower rank, then the order things were queued). So the whole run is one sequence fixed by virtual
//! times, ranks and queue order alone — never by host timing, load or thread scheduling —
//! and the same job prints the same virtual times on every run and every machine
//! (floating-point work is only the model's pricing, done in the same order each time).
//!
//! A rank gives the baton back at every operation of the transport (after its clock has
//! advanced by the operation's cost) and whenever it waits: a wait whose word is not yet
//! high enough *blocks* the rank until something is delivered into its memory, then looks
//! again. Causality holds because a rank runs only while nothing earlier is pending: every
//! message that could arrive before its clock has been applied to its memory.
//!
//! Deadlock (every rank blocked, nothing in flight) and the failure of a rank turn into
//! errors in the waits of the others, as on the real transports.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::network::{Network, Ps, Resource, hold, ps};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::{AtomicOp, SignalOp};
use crate::transport::Region;

/// Where a message's staged bytes go in the target's mapping (offsets checked when sent).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pieces {
    /// `len` bytes at `at`.
    Contiguous { at: usize, len: usize },
    /// `count` blocks of `block` bytes, `stride` apart from `at`.
    Strided {
        at: usize,
        count: usize,
        block: usize,
        stride: usize,
    },
}

/// What a delivered message does: write its staged bytes into a region, then maybe apply a
/// signal.
#[derive(Debug)]
pub(crate) struct Write {
    /// The rank whose memory it changes.
    pub(crate) to: u32,
    pub(crate) data: Option<(Arc<Region>, Pieces)>,
    /// The bytes to write, in piece order (empty when no payload is moved).
    pub(crate) bytes: Vec<u8>,
    pub(crate) signal: Option<(Arc<Region>, usize, SignalOp)>,
}

impl Write {
    fn land(&self) {
        let Some((region, pieces)) = &self.data else {
            return;
        };
        if self.bytes.is_empty() {
            return;
        }
        // The pieces were checked against the region when the message was sent, so the
        // copies cannot fail (see `Region::range`).
        match *pieces {
            Pieces::Contiguous { at, len } => {
                let _ = region.map.write(at, &self.bytes[..len]);
            }
            Pieces::Strided {
                at,
                count,
                block,
                stride,
            } => {
                for (i, b) in self.bytes.chunks(block).take(count).enumerate() {
                    let _ = region.map.write(at + i * stride, b);
                }
            }
        }
    }
}

#[derive(Debug)]
enum Event {
    /// A message lands in `to`'s memory.
    Deliver(Write),
    /// An atomic reaches its word; the old value travels back to `from` over `back`.
    Atomic {
        from: u32,
        to: u32,
        word: (Arc<Region>, usize),
        op: AtomicOp,
        back: Ps,
    },
    /// A timed wait of `rank` ends (if it is still the wait `token`).
    Timer { rank: u32, token: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Not yet in the simulation (still joining).
    Outside,
    /// Holding the baton.
    Running,
    /// Waiting for the baton at its clock.
    Ready,
    /// Waiting for a delivery (or a timer).
    Blocked,
    /// Waiting for the reply of an atomic.
    Atomic,
    /// Left the job.
    Done,
}

#[derive(Debug)]
struct RankState {
    clock: Ps,
    status: Status,
    /// When its last message arrives (what `quiet` waits for).
    last_arrival: Ps,
    /// The value an atomic returned.
    atomic: Option<u64>,
    /// The token of its current timed wait; a timer with another token is stale.
    token: u64,
    /// Why its wait must fail (deadlock, a failed peer).
    error: Option<Error>,
}

/// Counters of one simulation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Events applied (deliveries, atomics, timers).
    pub events: u64,
    /// Messages sent.
    pub messages: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Times the baton moved from a running rank to another.
    pub switches: u64,
}

#[derive(Debug)]
struct State {
    ranks: Vec<RankState>,
    /// (time, sequence): the sequence makes ties deterministic (queue order).
    events: BinaryHeap<Reverse<(Ps, u64, usize)>>,
    slab: Vec<Option<Event>>,
    free: Vec<usize>,
    ready: BinaryHeap<Reverse<(Ps, u32, u64)>>,
    seq: u64,
    running: Option<u32>,
    entered: u32,
    /// Virtual time of the last event applied or rank scheduled.
    now: Ps,
    /// When each resource (node port, link) is next free.
    free_at: Vec<Ps>,
    /// The latest arrival from rank a to rank b (`a * size + b`): messages between a pair
    /// land in the order they were sent, whatever their modes' latencies.
    pair_last: Vec<Ps>,
    /// The first rank that failed, and why.
    failed: Option<(u32, String)>,
    stats: Stats,
    /// Staging buffers to reuse.
    buffers: Vec<Vec<u8>>,
}

/// One simulated job: the network model, the clocks and the queue.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) net: Network,
    /// Rank `r` runs on node `nodes[r]`.
    nodes: Vec<u32>,
    /// Move payload bytes (false: timing only, see `Sim::stage`).
    pub(crate) payload: bool,
    /// The collectives' chunk size, if the job sets it.
    pub(crate) chunk: Option<usize>,
    state: Mutex<State>,
    /// The rank holding the baton (`NOBODY_RUNS`: none), also kept in `State::running`: the
    /// word the scheduler reads to know whom to resume, and a suspended rank to know whether
    /// it was resumed for its turn.
    baton: AtomicU32,
}

const NOBODY_RUNS: u32 = u32::MAX;

/// Nobody sleeps on a futex in a simulation: wake-ups go through the engine.
static NOBODY: AtomicU32 = AtomicU32::new(0);

impl Engine {
    pub(crate) fn new(net: Network, nodes: Vec<u32>, payload: bool, chunk: Option<usize>) -> Self {
        let n = nodes.len();
        let resources = net.resources();
        Self {
            net,
            nodes,
            payload,
            chunk,
            state: Mutex::new(State {
                ranks: (0..n)
                    .map(|_| RankState {
                        clock: 0,
                        status: Status::Outside,
                        last_arrival: 0,
                        atomic: None,
                        token: 0,
                        error: None,
                    })
                    .collect(),
                events: BinaryHeap::new(),
                slab: Vec::new(),
                free: Vec::new(),
                ready: BinaryHeap::new(),
                seq: 0,
                running: None,
                entered: 0,
                now: 0,
                free_at: vec![0; resources],
                pair_last: vec![0; n * n],
                failed: None,
                stats: Stats::default(),
                buffers: Vec::new(),
            }),
            baton: AtomicU32::new(NOBODY_RUNS),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A rank that panicked while holding the lock leaves consistent state (every
        // update below completes before anything can panic), so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The torus's dimensions if the job fills it with rank r on node r.
    pub(crate) fn torus(&self) -> Option<Vec<usize>> {
        let super::network::Topology::Torus { dims } = &self.net.topology else {
            return None;
        };
        let identity = self.nodes.iter().enumerate().all(|(r, &n)| n as usize == r);
        (identity && self.nodes.len() == self.net.nodes() as usize)
            .then(|| dims.iter().map(|&d| d as usize).collect())
    }

    pub(crate) fn size(&self) -> u32 {
        crate::cast::rank_u32(self.nodes.len())
    }

    /// Enters `rank` into the simulation at time 0 and waits for its first turn (once every
    /// rank has entered).
    pub(crate) fn enter(&self, rank: u32) -> Result<()> {
        let mut st = self.lock();
        st.entered += 1;
        let seq = st.next_seq();
        let r = &mut st.ranks[rank as usize];
        r.status = Status::Ready;
        st.ready.push(Reverse((0, rank, seq)));
        if st.entered == self.size() {
            // The last to enter starts the run.
            return self.switch(st, rank).map(drop);
        }
        self.park(st, rank).map(drop)
    }

    /// This rank's virtual clock.
    pub(crate) fn clock(&self, rank: u32) -> Ps {
        self.lock().ranks[rank as usize].clock
    }

    /// Advances `rank`'s clock by `dt` and lets anything earlier run first.
    pub(crate) fn advance(&self, rank: u32, dt: Ps) -> Result<()> {
        let mut st = self.lock();
        let c = &mut st.ranks[rank as usize].clock;
        *c = c.saturating_add(dt);
        st.requeue(rank);
        self.switch(st, rank).map(drop)
    }

    /// Sends one message of `n` bytes from `from` to `to` (priced by the model, contending
    /// for ports and links), to be applied as `w` when it arrives.
    pub(crate) fn send(&self, from: u32, to: u32, n: usize, w: Write) -> Result<()> {
        self.send2(from, to, n, 0, None, w)
    }

    /// Sends `first` (if any) and `then` from `from` to `to` as one message of `n` bytes,
    /// `extra` of issue time on top of the message's (a chain's second descriptor), delivered
    /// in that order at the same arrival.
    pub(crate) fn send2(
        &self,
        from: u32,
        to: u32,
        n: usize,
        extra: Ps,
        first: Option<Write>,
        then: Write,
    ) -> Result<()> {
        let mut st = self.lock();
        let r = &mut st.ranks[from as usize];
        r.clock = r.clock.saturating_add(extra);
        let arrival = self.price(&mut st, from, to, n);
        let r = &mut st.ranks[from as usize];
        r.last_arrival = r.last_arrival.max(arrival);
        st.stats.bytes += n as u64;
        if let Some(first) = first {
            st.push(arrival, Event::Deliver(first));
        }
        st.push(arrival, Event::Deliver(then));
        st.requeue(from);
        self.switch(st, from).map(drop)
    }

    /// The issue cost of a chain's second descriptor for a message of `n` bytes.
    pub(crate) fn chained_descriptor(&self, n: usize) -> Ps {
        self.net.chained_descriptor(n)
    }

    /// An atomic `op` on `word` (in `to`'s memory): one request there and one reply back,
    /// both priced as 8-byte messages. Returns the value the word held.
    pub(crate) fn atomic(
        &self,
        from: u32,
        to: u32,
        word: (Arc<Region>, usize),
        op: AtomicOp,
    ) -> Result<u64> {
        let mut st = self.lock();
        let arrival = self.price(&mut st, from, to, 8);
        // The reply's route is priced when the request lands: its latency and stream time
        // (the reply is small; it is not queued behind other traffic).
        let mut links = Vec::new();
        let hops = self.net.links(
            self.nodes[to as usize],
            self.nodes[from as usize],
            &mut links,
        );
        let route = self.net.route(8, hops);
        let back = route
            .setup
            .saturating_add(route.latency)
            .saturating_add(hold(8, route.gbs));
        st.push(
            arrival,
            Event::Atomic {
                from,
                to,
                word,
                op,
                back,
            },
        );
        st.ranks[from as usize].status = Status::Atomic;
        st = self.switch(st, from)?;
        if let Some(e) = st.ranks[from as usize].error.take() {
            return Err(e);
        }
        st.ranks[from as usize]
            .atomic
            .take()
            .ok_or_else(|| Error::new(ErrorKind::Transport, "a simulated atomic returned no value"))
    }

    /// Prices a message and reserves its resources; returns its arrival time and advances
    /// the sender's clock by its issue cost.
    fn price(&self, st: &mut State, from: u32, to: u32, n: usize) -> Ps {
        let mut links = Vec::with_capacity(16);
        let hops = self.net.links(
            self.nodes[from as usize],
            self.nodes[to as usize],
            &mut links,
        );
        let route = self.net.route(n, hops);
        let busy = route.setup.saturating_add(hold(n, route.gbs));
        let (start, earliest) = self.reserve(st, from, to, &links, route.issue, busy);
        let arrival = earliest.max(start.saturating_add(busy).saturating_add(route.latency));
        st.pair_last[from as usize * self.nodes.len() + to as usize] = arrival;
        arrival
    }

    /// Puts `parts` (bytes per part; `writes` the non-empty ones' writes, in order) from
    /// `from` to `to` split over the model's DMA channels ([`Network::channel_finishes`]),
    /// one descriptor each, and waits until all have arrived: complete on return, like a
    /// split put on shared memory. Returns each part's arrival after the call began (0 for an
    /// empty part). The parts hold the route's links and ports together, from the first
    /// part's start until the last part is done, as one message would (a slow channel still
    /// sending keeps other traffic off them: the model's choice of simplicity).
    pub(crate) fn send_parts(
        &self,
        from: u32,
        to: u32,
        parts: &[usize],
        writes: Vec<Write>,
    ) -> Result<Vec<Ps>> {
        let mut st = self.lock();
        let t0 = st.ranks[from as usize].clock;
        let mut links = Vec::with_capacity(16);
        let hops = self.net.links(
            self.nodes[from as usize],
            self.nodes[to as usize],
            &mut links,
        );
        let total: usize = parts.iter().sum();
        let setup = ps(self.net.dma.setup_ns);
        let latency = ps(self.net.dma.latency_ns + self.net.link.hop_ns * f64::from(hops));
        let descriptors = parts.iter().filter(|&&n| n > 0).count();
        let issue = ps(self.net.software.put_ns + self.net.dma.descriptor_ns * descriptors as f64);
        let mut finish = Vec::with_capacity(parts.len());
        self.net.channel_finishes(parts, &mut finish);
        let done = finish.iter().copied().max().unwrap_or(0);
        let busy = setup.saturating_add(done);
        let (start, earliest) = self.reserve(&mut st, from, to, &links, issue, busy);
        let arrive = |f: Ps| {
            let end = start.saturating_add(setup).saturating_add(f);
            earliest.max(end.saturating_add(latency))
        };
        let last = arrive(done);
        st.pair_last[from as usize * self.nodes.len() + to as usize] = last;
        st.stats.messages += descriptors.saturating_sub(1) as u64;
        st.stats.bytes += total as u64;
        let mut writes = writes.into_iter();
        for (&n, &f) in parts.iter().zip(&finish) {
            if n > 0 {
                if let Some(w) = writes.next() {
                    st.push(arrive(f), Event::Deliver(w));
                }
            }
        }
        let r = &mut st.ranks[from as usize];
        r.last_arrival = r.last_arrival.max(last);
        r.clock = r.clock.max(last);
        st.requeue(from);
        drop(self.switch(st, from)?);
        Ok(parts
            .iter()
            .zip(&finish)
            .map(|(&n, &f)| if n > 0 { arrive(f) - t0 } else { 0 })
            .collect())
    }

    /// Reserves the links and ports of a message from `from` to `to` that the sender issues
    /// for `issue` (its clock advanced by it) and that then holds them for `busy`. Returns
    /// when it starts on the wire and the earliest it may arrive (after the pair's last
    /// message: messages between a pair land in order); counts it.
    fn reserve(
        &self,
        st: &mut State,
        from: u32,
        to: u32,
        links: &[Resource],
        issue: Ps,
        busy: Ps,
    ) -> (Ps, Ps) {
        let (a, b) = (self.nodes[from as usize], self.nodes[to as usize]);
        let r = &mut st.ranks[from as usize];
        r.clock = r.clock.saturating_add(issue);
        let ready = r.clock;
        // The links decide when the message can go; then a port of each end that is free by
        // then (`port`), or else the one free first.
        let at = links
            .iter()
            .map(|&l| st.free_at[l as usize])
            .fold(ready, Ps::max);
        let inject = self.port(st, self.net.ports(a, true), at);
        let at = at.max(st.free_at[inject as usize]);
        let eject = self.port(st, self.net.ports(b, false), at);
        let start = at.max(st.free_at[eject as usize]);
        let done = start.saturating_add(busy);
        for &l in links.iter().chain([&inject, &eject]) {
            st.free_at[l as usize] = done;
        }
        st.stats.messages += 1;
        (
            start,
            st.pair_last[from as usize * self.nodes.len() + to as usize],
        )
    }

    /// The port of a node's set for a message whose other resources are free at `at`: of the
    /// ports free by then, the one that became free last (best fit: a resource is free from
    /// one time on, so a port given to a message that must wait for its link is taken from
    /// now until that message ends, and ports free earlier stay for messages that can go
    /// sooner: a payload's header line, which waits for its payload on the link, does not
    /// take the port the sender's next payload to another neighbour could use); if none is
    /// free by then, the one free first. The lowest on a tie.
    fn port(&self, st: &State, ports: std::ops::Range<Resource>, at: Ps) -> Resource {
        let free = |p: &Resource| st.free_at[*p as usize];
        ports
            .clone()
            .filter(|p| free(p) <= at)
            .max_by_key(|p| (free(p), std::cmp::Reverse(*p)))
            .or_else(|| ports.min_by_key(|p| (free(p), *p)))
            .unwrap_or(0)
    }

    /// `rank`'s clock reaches the arrival of everything it has sent.
    pub(crate) fn quiet(&self, rank: u32) -> Result<()> {
        let mut st = self.lock();
        let r = &mut st.ranks[rank as usize];
        r.clock = r.clock.max(r.last_arrival);
        st.requeue(rank);
        self.switch(st, rank).map(drop)
    }

    /// Blocks `rank` until a delivery into its memory (or `timeout` of virtual time, after
    /// which it returns `Ok(false)`). Fails if the job deadlocked or a peer failed.
    pub(crate) fn block(&self, rank: u32, timeout: Option<Ps>) -> Result<bool> {
        let mut st = self.lock();
        if let Some((r, why)) = &st.failed {
            return Err(Error::peer(ErrorKind::PeerDied, *r, why.clone()));
        }
        let me = rank as usize;
        st.ranks[me].token += 1;
        let token = st.ranks[me].token;
        if let Some(dt) = timeout {
            let at = st.ranks[me].clock.saturating_add(dt);
            st.push(at, Event::Timer { rank, token });
        }
        st.ranks[me].status = Status::Blocked;
        st = self.switch(st, rank)?;
        if let Some(e) = st.ranks[me].error.take() {
            return Err(e);
        }
        // A timer that fired bumped the token: that is how a timed-out wait tells.
        Ok(st.ranks[me].token == token)
    }

    /// `rank` leaves the simulation (`failed`: with an error, which the waits of the others
    /// report naming it).
    pub(crate) fn leave(&self, rank: u32, failed: bool) {
        let mut st = self.lock();
        let me = rank as usize;
        if st.ranks[me].status == Status::Outside {
            st.entered += 1;
        }
        let was_running = st.running == Some(rank);
        st.ranks[me].status = Status::Done;
        if failed && st.failed.is_none() {
            st.failed = Some((rank, format!("rank {rank} failed (simulated job)")));
            let err = Error::peer(
                ErrorKind::PeerDied,
                rank,
                format!("rank {rank} failed (simulated job)"),
            );
            st.fail_blocked(&err);
        }
        if was_running {
            st.running = None;
            drop(self.switch(st, rank));
        } else if st.entered == self.size() && st.running.is_none() {
            // Every other rank is parked waiting for its first turn.
            drop(self.switch(st, rank));
        }
    }

    /// The run's counters and the latest virtual time.
    pub(crate) fn stats(&self) -> (Stats, Ps) {
        let st = self.lock();
        (st.stats, st.now)
    }

    /// A staging buffer of `n` bytes (reused).
    pub(crate) fn buffer(&self, n: usize) -> Vec<u8> {
        let mut b = self.lock().buffers.pop().unwrap_or_default();
        b.clear();
        b.reserve(n);
        b
    }

    /// Hands the baton on: applies every event due before the earliest ready rank, then runs
    /// that rank. Returns when `me` holds the baton again (or at once if `me` has left).
    fn switch<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        me: u32,
    ) -> Result<MutexGuard<'a, State>> {
        loop {
            let next_event = st.events.peek().map(|Reverse((t, ..))| *t);
            let next_rank = st.ready.peek().map(|Reverse((t, r, _))| (*t, *r));
            match (next_event, next_rank) {
                (Some(_), None) => self.apply(&mut st),
                (Some(te), Some((tr, _))) if te <= tr => self.apply(&mut st),
                (_, Some((t, r))) => {
                    // A hand-over from a running rank (the start, where the last rank to
                    // enter hands out the first turn, depends on host timing: not counted).
                    let handover = st.running == Some(me) && r != me;
                    st.ready.pop();
                    st.now = st.now.max(t);
                    st.ranks[r as usize].status = Status::Running;
                    st.running = Some(r);
                    if r == me {
                        self.baton.store(me, Ordering::Release);
                        return Ok(st);
                    }
                    if handover {
                        st.stats.switches += 1;
                    }
                    let left = st.ranks[me as usize].status == Status::Done;
                    self.baton.store(r, Ordering::Release);
                    drop(st);
                    if !left {
                        self.wait_baton(me)?;
                    }
                    return Ok(self.lock());
                }
                (None, None) => {
                    // Nothing in flight, nobody ready: every rank still here waits forever.
                    let waiting: Vec<u32> = (0..self.size())
                        .filter(|&r| st.ranks[r as usize].status == Status::Blocked)
                        .collect();
                    if waiting.is_empty() {
                        st.running = None;
                        self.baton.store(NOBODY_RUNS, Ordering::Release);
                        return Ok(st);
                    }
                    let err = Error::new(
                        ErrorKind::Aborted,
                        format!(
                            "simulated deadlock at {:.3} us of virtual time: ranks {waiting:?} \
                             wait for words no rank will write",
                            super::network::us(st.now)
                        ),
                    );
                    st.fail_blocked(&err);
                }
            }
        }
    }

    /// Suspends `me` until it holds the baton (at once if it has left).
    fn park<'a>(&'a self, st: MutexGuard<'a, State>, me: u32) -> Result<MutexGuard<'a, State>> {
        if st.running == Some(me) || st.ranks[me as usize].status == Status::Done {
            return Ok(st);
        }
        drop(st);
        self.wait_baton(me)?;
        Ok(self.lock())
    }

    /// Suspends `me`'s coroutine until the baton is `me`'s.
    fn wait_baton(&self, me: u32) -> Result<()> {
        while self.baton.load(Ordering::Acquire) != me {
            super::coroutines::suspend()?;
        }
        Ok(())
    }

    /// The rank holding the baton, `None` when none does (the run is over, or every rank left
    /// is outside it).
    pub(crate) fn baton(&self) -> Option<u32> {
        Some(self.baton.load(Ordering::Acquire)).filter(|&r| r != NOBODY_RUNS)
    }

    /// Applies the earliest event.
    fn apply(&self, st: &mut State) {
        let Some(Reverse((t, _, i))) = st.events.pop() else {
            return;
        };
        let Some(ev) = st.slab[i].take() else {
            return;
        };
        st.free.push(i);
        if let Event::Timer { rank, token } = ev {
            // A timer of a wait that ended before it: nothing happens at its time.
            let r = &st.ranks[rank as usize];
            if r.token != token || r.status != Status::Blocked {
                return;
            }
        }
        st.now = st.now.max(t);
        st.stats.events += 1;
        match ev {
            Event::Deliver(mut w) => {
                w.land();
                if let Some((region, off, op)) = &w.signal {
                    if let Ok(word) = region.word(*off) {
                        crate::transport::shm::wait::raise(
                            word,
                            &NOBODY,
                            *op,
                            crate::transport::shm::wait::Fence::SeqCst,
                        );
                    }
                }
                let bytes = std::mem::take(&mut w.bytes);
                if bytes.capacity() > 0 && st.buffers.len() < 64 {
                    st.buffers.push(bytes);
                }
                st.wake(w.to, t);
            }
            Event::Atomic {
                from,
                to,
                word,
                op,
                back,
            } => {
                let old = word
                    .0
                    .word(word.1)
                    .map(|w| crate::transport::shm::wait::apply_atomic(w, op).0)
                    .unwrap_or(0);
                let r = &mut st.ranks[from as usize];
                r.atomic = Some(old);
                r.clock = r.clock.max(t.saturating_add(back));
                if r.status == Status::Atomic {
                    r.status = Status::Ready;
                    let c = r.clock;
                    let seq = st.next_seq();
                    st.ready.push(Reverse((c, from, seq)));
                }
                st.wake(to, t);
            }
            Event::Timer { rank, token } => {
                let r = &mut st.ranks[rank as usize];
                if r.token == token && r.status == Status::Blocked {
                    r.token += 1;
                    st.wake(rank, t);
                }
            }
        }
    }
}

impl State {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn push(&mut self, at: Ps, ev: Event) {
        let i = match self.free.pop() {
            Some(i) => {
                self.slab[i] = Some(ev);
                i
            }
            None => {
                self.slab.push(Some(ev));
                self.slab.len() - 1
            }
        };
        let seq = self.next_seq();
        self.events.push(Reverse((at, seq, i)));
    }

    /// The running `rank` goes back into the ready queue at its clock.
    fn requeue(&mut self, rank: u32) {
        let seq = self.next_seq();
        let r = &mut self.ranks[rank as usize];
        r.status = Status::Ready;
        let c = r.clock;
        self.ready.push(Reverse((c, rank, seq)));
    }

    /// Something arrived in `rank`'s memory at `t`: a blocked rank becomes ready.
    fn wake(&mut self, rank: u32, t: Ps) {
        let seq = self.next_seq();
        let r = &mut self.ranks[rank as usize];
        if r.status == Status::Blocked {
            r.status = Status::Ready;
            r.clock = r.clock.max(t);
            let c = r.clock;
            self.ready.push(Reverse((c, rank, seq)));
        }
    }

    /// Every blocked rank wakes with `err`.
    fn fail_blocked(&mut self, err: &Error) {
        for rank in 0..self.ranks.len() {
            if self.ranks[rank].status == Status::Blocked {
                self.ranks[rank].error = Some(err.clone());
                let t = self.now;
                self.wake(crate::cast::rank_u32(rank), t);
            }
        }
    }
}
