//! Collectives over the fabric: broadcast, scatter, gather, reduce, allgather (and
//! allgatherv), allreduce, barrier, reduce_scatter and alltoall, each with several algorithms.
//!
//! Everything here is safe code over the fabric's puts and signals (seed 000: collectives
//! "written only with remote writes and flags"). The pieces:
//! - [`Comm`]: a communicator (the world, or a group made by [`Comm::split`]) with typed
//!   collectives over [`Element`] types and [`Op`] reductions.
//! - `channel`: flow-controlled chunk streams between every pair of ranks, set up once per
//!   communicator; every algorithm is a schedule of chunk sends and receives on them.
//! - [`registry`]: the one table of algorithms (name, collective, function, cost model),
//!   enumerated by selection, `TCA_COLL_<OP>=<name>`, [`Comm::force`], the tests and the docs.
//! - [`model`]: the cost models' parameters, their calibration file, and the decision table
//!   each communicator builds once so that selection costs a lookup per call.
//! - One file per algorithm under `coll/<collective>/`, each opening with the algorithm, its
//!   cost, its source and its reuse rules.
//!
//! Setup once, reuse: a communicator's scratch segment and the peers' handles are set up when
//! it is created; its temporary buffers grow to the largest message seen and are reused. A
//! repeated call does no allocation, system call or handle exchange.

/// The function of the algorithm chosen for a call of `$coll` on `$bytes` bytes: its blocking
/// form (after finishing the non-blocking ones started before it), or with `start`, its
/// non-blocking one ([`nb`]).
macro_rules! kernel {
    ($comm:expr, $coll:ident, $bytes:expr) => {
        kernel!(@form $comm.settle().and_then(|()| $comm.pick(Collective::$coll, $bytes))?,
            $coll, (f, _, _), f)
    };
    (start $comm:expr, $coll:ident, $bytes:expr) => {
        kernel!(@form $comm.pick(Collective::$coll, $bytes)?, $coll, (_, f, _), f)
    };
    (@form $alg:expr, $coll:ident, ($($pat:tt)*), $f:ident) => {
        match $alg.kernel {
            Kernel::$coll($($pat)*) => $f,
            _ => {
                return Err(Error::new(
                    ErrorKind::Transport,
                    concat!("algorithm table entry is not a ", stringify!($coll), " algorithm"),
                ));
            }
        }
    };
}

mod allgather;
mod allreduce;
mod alltoall;
mod barrier;
mod bcast;
pub(crate) mod buffer;
mod channel;
mod count;
mod direct;
mod gather;
mod gathered;
pub mod model;
pub mod nb;
mod op;
mod reduce;
mod reduce_scatter;
pub mod registry;
mod scatter;
mod step;

use std::cell::{Cell, OnceCell, RefCell, RefMut};

pub use buffer::Buffer;
pub(crate) use buffer::Registry;
pub use channel::{chunk_bytes, scratch_bytes};
pub use direct::{
    ALLGATHER_PUSH_MIN, ALLREDUCE_CROWDED_MIN, BCAST_SPLIT_MIN, REDUCE_SPLIT_MIN,
    REDUCE_SPLIT_MIN_CROWDED, SINGLE_COPY_ALLREDUCE_RANKS, SINGLE_COPY_MIN,
    SINGLE_COPY_MIN_CROWDED, SINGLE_COPY_ROOTED_MIN,
};
pub use gathered::Gathered;
pub use op::{BitOp, Element, Op, Reducer};
pub use registry::{ALGORITHMS, Algorithm, Collective};
use step::{Block, Steps, run_blocking};

use crate::cast::rank_u32;
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::ring::{Hook, Progressor};
use crate::fabric::{Handle, World};
use channel::{Channels, Sink};
use registry::Kernel;

impl Drop for Comm<'_> {
    /// Delivers sends whose requests were dropped (see `p2p`, "Requests and safety") while
    /// their receivers keep taking them; says so on stderr if some never were.
    fn drop(&mut self) {
        if let Some(eng) = self.p2p.get() {
            let left = eng.drain(self.world);
            if left > 0 {
                eprintln!(
                    "tca: rank {}: a communicator was dropped with {left} send(s) its peers \
                     never received",
                    self.world.rank()
                );
            }
        }
    }
}

/// A group of ranks that run collectives together: the world, or a part of it made by
/// [`Comm::split`]. Creating one is collective over its members; it keeps its scratch
/// segment, the members' handles and its buffers for its whole life.
///
/// # Errors and consistency
/// As in MPI, every member must call the same collectives in the same order with matching
/// counts, root and operation. Argument errors that every rank sees alike (a root out of
/// range, a bitwise op on floats, an unsupported algorithm) return an error before anything
/// is sent, and the communicator stays usable. A buffer error found on one rank only, lengths
/// that differ between ranks (detected when the data arrives), or a panicking user operation
/// abort the job: that rank gets the error, the others an error naming it, and no one hangs.
/// One mismatch is not detected: a rank passing zero elements where the others pass more
/// skips the call entirely; the others then wait for data that never comes (the deadlock
/// detector ends that wait once every rank is stuck) or, if that rank's next call sends a
/// message of the same length, take it instead. Keep counts consistent.
#[derive(Debug)]
pub struct Comm<'w> {
    world: &'w World,
    ranks: Vec<u32>,
    me: usize,
    ch: Channels,
    forced: RefCell<[Option<&'static Algorithm>; Collective::ALL.len()]>,
    table: model::Table,
    tmp: [RefCell<Vec<u64>>; 3],
    sizes: RefCell<(Vec<usize>, Vec<usize>)>,
    broken: Cell<bool>,
    /// Whether the algorithm being polled runs non-blocking (its steps try and yield) rather
    /// than blocking (its steps wait): set by a [`nb::Scope`] around its polls.
    nb: Cell<bool>,
    /// Steps of non-blocking collectives that went through (a chunk sent or taken, a peer's
    /// signal seen), for pollers that must tell a collective that moves from one that waits
    /// ([`Comm::steps_taken`]).
    steps: Cell<u64>,
    /// The scope of non-blocking collectives open on this communicator, if any.
    scope: Cell<Option<nb::OpenScope>>,
    /// Two-sided messages ([`crate::p2p`]): set up with the communicator.
    p2p: OnceCell<crate::p2p::Engine>,
    /// The live [`Buffer`]s allocated through this communicator, by address.
    buffers: buffer::Registry,
    /// Whether a [`Buffer`] was ever allocated through this communicator (on every member
    /// alike: [`Comm::buffer`] is collective): large collectives then try single copy.
    direct: Cell<bool>,
    /// Smallest message that goes single-copy (module `direct`).
    direct_min: Cell<usize>,
    /// The same for the rooted collectives.
    direct_min_rooted: Cell<usize>,
    /// Few ranks, a core each ([`SINGLE_COPY_ALLREDUCE_RANKS`]): an allreduce goes single-copy
    /// from the common threshold, a large broadcast splits its copies between the ranks, and
    /// an allgather's ranks push their blocks (module `direct`).
    direct_few: bool,
    /// Collectives that went single-copy so far.
    direct_calls: Cell<u64>,
    /// Whether every member's memory is mapped here (one node, shared memory).
    readable: bool,
    /// The resolved offers of a single-copy call (kept empty between calls).
    peers: RefCell<Vec<Option<direct::Peer>>>,
    /// Where communication progresses while the rank computes in [`Comm::overlap`].
    pub(crate) progress: Cell<crate::offload::Progress>,
}

/// Whether some of `ranks` are reached from this rank through a real network (a simulated
/// one chooses with its own model: [`World::sim_cost_model`]).
fn spans_network(world: &World, ranks: &[u32]) -> bool {
    world.simulated().is_none() && ranks.iter().any(|&r| world.is_remote(r))
}

impl<'w> Comm<'w> {
    /// Whether this communicator's members talk through a network (some are on other nodes):
    /// Auto then chooses its algorithms with the network's cost models
    /// ([`model::Calibration::model_on`]). False on a simulated network, whose own
    /// parameters make the model Auto chooses with there.
    pub fn spans_network(&self) -> bool {
        spans_network(self.world, &self.ranks)
    }

    /// Whether this communicator's large collectives can read its members' [`Buffer`]s in
    /// place (single copy, see [`Comm::buffer`]): every member is on this node, reached
    /// through shared memory (not a network, not a simulated one). False for one rank (no
    /// peers), so no single-copy call ever runs on one rank.
    pub fn single_copy(&self) -> bool {
        self.readable
    }

    /// The communicator of every rank of the world. Collective over the world.
    pub fn world(world: &'w World) -> Result<Self> {
        let p = world.size() as usize;
        let seg = world.alloc(Channels::bytes(p, world.collective_chunk()))?;
        let handles = world.all_handles(&seg)?;
        Self::assemble(
            world,
            (0..world.size()).collect(),
            world.rank() as usize,
            seg,
            handles,
        )
    }

    fn assemble(
        world: &'w World,
        ranks: Vec<u32>,
        me: usize,
        seg: crate::Segment,
        handles: Vec<Handle>,
    ) -> Result<Self> {
        // Attach every member's scratch now, so that no collective call ever does. A member
        // may already have finished and left (it only had to send to us): that is not an
        // error here; writing to it later would be, and would say so.
        for h in &handles {
            let _ = world.attach(h);
        }
        let mut forced = [None; Collective::ALL.len()];
        for (i, c) in Collective::ALL.iter().enumerate() {
            forced[i] = registry::from_env(*c)?;
        }
        // Members on other nodes: price the algorithms with the network's models (a message
        // costs microseconds there, not tens of nanoseconds, which changes the choice).
        // Rank 0's view decides, as its table is the one every member takes below.
        // On a simulated network, the network's own model (deterministic on any host).
        // The others only wait for it: pricing every algorithm at every size is the larger part
        // of a communicator's creation (a tenth of a 384-rank simulation's host time when every
        // member built its own).
        let network = spans_network(world, &ranks);
        let table = match world.sim_cost_model() {
            _ if me != 0 => model::Table::unset(),
            Some(m) => model::Table::new(&model::Calibration::single(m, true), ranks.len(), true),
            None => model::Table::new(&model::active().calibration, ranks.len(), network),
        };
        if me == 0 {
            model::warn_once();
        }
        let readable = ranks.len() > 1
            && ranks
                .iter()
                .all(|&r| r == world.rank() || world.reads_peer(r));
        let (direct_min, direct_min_rooted, direct_few) = direct::settings(ranks.len())?;
        let mut comm = Self {
            world,
            ranks,
            me,
            ch: Channels::new(seg, handles, me, world.collective_chunk()),
            forced: RefCell::new(forced),
            table,
            tmp: Default::default(),
            sizes: RefCell::new((Vec::new(), Vec::new())),
            broken: Cell::new(false),
            nb: Cell::new(false),
            steps: Cell::new(0),
            scope: Cell::new(None),
            p2p: OnceCell::new(),
            buffers: buffer::Registry::default(),
            direct: Cell::new(false),
            direct_min: Cell::new(direct_min),
            direct_min_rooted: Cell::new(direct_min_rooted),
            direct_few,
            direct_calls: Cell::new(0),
            readable,
            peers: RefCell::new(Vec::new()),
            progress: Cell::new(crate::offload::Progress::from_var(
                crate::env::P2P_PROGRESS,
            )?),
        };
        // Every member uses rank 0's choices, even if the ranks read different model files
        // (TCA_MODEL_FILE differs, or a calibration was written while the job started): two
        // members running different algorithms of one collective would never meet. One small
        // broadcast, with an algorithm fixed here, not chosen by the table it carries.
        if comm.p() > 1 {
            let mut table = comm.table.clone();
            run_blocking(bcast::flat::run(
                Steps::<Block>::new(&comm),
                table.bytes_mut(),
                0,
            ))?;
            table.check()?;
            comm.table = table;
            // And rank 0's single-copy settings: a member that took the other branch of a
            // collective would read an offer as data.
            let mut d = [
                comm.direct_min.get() as u64,
                comm.direct_min_rooted.get() as u64,
                u64::from(comm.direct_few),
                u64::from(comm.readable),
            ];
            run_blocking(bcast::flat::run(
                Steps::<Block>::new(&comm),
                bytemuck::cast_slice_mut(&mut d),
                0,
            ))?;
            let bytes = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
            comm.direct_min.set(bytes(d[0]));
            comm.direct_min_rooted.set(bytes(d[1]));
            comm.direct_few = d[2] == 1;
            comm.readable = d[3] == 1;
        }
        // Two-sided messages get a segment of their own (their rings must never carry a
        // collective's chunks); its handles travel through the new communicator itself.
        let seg = world.alloc(crate::p2p::p2p_bytes(comm.p()))?;
        let mine = seg.handle().to_bytes();
        let mut all = vec![0u8; Handle::BYTES * comm.p()];
        comm.allgather(&mine, &mut all)?;
        let handles = all
            .chunks(Handle::BYTES)
            .map(Handle::from_bytes)
            .collect::<Result<Vec<_>>>()?;
        for h in &handles {
            let _ = world.attach(h);
        }
        let engine = crate::p2p::Engine::new(
            seg,
            handles,
            comm.me,
            comm.ranks.clone(),
            comm.buffers.clone(),
        )?;
        comm.p2p.set(engine).expect("set once, here");
        // No member leaves before every member has attached: over a network an attach asks
        // the segment's owner, who answers only while it makes progress, and a member that
        // went on to compute would leave a slower one waiting (for ever, without a timeout).
        // Members wait here, progressing, until the last one's attaches are done.
        comm.barrier()?;
        Ok(comm)
    }

    /// This rank's number in the communicator.
    pub fn rank(&self) -> u32 {
        rank_u32(self.me)
    }

    /// Number of ranks in the communicator.
    pub fn size(&self) -> u32 {
        rank_u32(self.ranks.len())
    }

    /// The world rank of communicator rank `r`.
    pub fn world_rank(&self, r: u32) -> Option<u32> {
        self.ranks.get(r as usize).copied()
    }

    /// The world this communicator lives in.
    pub fn world_ref(&self) -> &'w World {
        self.world
    }

    /// Splits the communicator, as `MPI_Comm_split`: ranks with the same `color` form a new
    /// communicator, ordered by `key` then by their rank here; `None` takes no part and gets
    /// `None`. Collective over this communicator.
    pub fn split(&self, color: Option<u32>, key: i64) -> Result<Option<Comm<'w>>> {
        let p = self.ranks.len();
        let mut mine = [0u8; 16];
        mine[..4].copy_from_slice(&color.map_or(u32::MAX, |c| c).to_le_bytes());
        mine[4..8].copy_from_slice(&u32::from(color.is_some()).to_le_bytes());
        mine[8..].copy_from_slice(&key.to_le_bytes());
        let mut all = vec![0u8; 16 * p];
        self.allgather(&mine, &mut all)?;
        let mut group: Vec<(i64, usize)> = (0..p)
            .filter_map(|r| {
                let e = &all[16 * r..16 * r + 16];
                let c = u32::from_le_bytes(e[..4].try_into().ok()?);
                let has = u32::from_le_bytes(e[4..8].try_into().ok()?) == 1;
                let k = i64::from_le_bytes(e[8..].try_into().ok()?);
                (has && Some(c) == color).then_some((k, r))
            })
            .collect();
        group.sort();
        // Members allocate their scratch; handles travel through this communicator.
        let seg = match color {
            Some(_) => Some(
                self.world
                    .alloc(Channels::bytes(group.len(), self.world.collective_chunk()))?,
            ),
            None => None,
        };
        let mut hb = [0u8; Handle::BYTES];
        if let Some(s) = &seg {
            hb = s.handle().to_bytes();
        }
        let mut hall = vec![0u8; Handle::BYTES * p];
        self.allgather(&hb, &mut hall)?;
        let Some(seg) = seg else { return Ok(None) };
        let handles = group
            .iter()
            .map(|&(_, r)| Handle::from_bytes(&hall[Handle::BYTES * r..Handle::BYTES * (r + 1)]))
            .collect::<Result<Vec<_>>>()?;
        let me = group
            .iter()
            .position(|&(_, r)| r == self.me)
            .expect("this rank is in its own group");
        let ranks = group.iter().map(|&(_, r)| self.ranks[r]).collect();
        Self::assemble(self.world, ranks, me, seg, handles).map(Some)
    }

    /// How many steps of this communicator's non-blocking collectives have gone through so
    /// far: a poller (the offload proxy) that sees it grow knows its collectives move, though
    /// none has completed.
    pub(crate) fn steps_taken(&self) -> u64 {
        self.steps.get()
    }

    /// Counts one step of a non-blocking collective that went through.
    pub(crate) fn step_taken(&self) {
        self.steps.set(self.steps.get().wrapping_add(1));
    }

    /// Forces `collective` to use the algorithm called `name` (`None`: back to automatic
    /// selection). An unknown name is an error listing the valid ones.
    pub fn force(&self, collective: Collective, name: Option<&str>) -> Result<()> {
        let alg = match name {
            Some(n) => Some(registry::find(collective, n)?),
            None => None,
        };
        self.forced.borrow_mut()[collective as usize] = alg;
        Ok(())
    }

    /// The algorithm a call of `collective` on `bytes` bytes would use now: the forced one,
    /// else the one with the lowest predicted time ([`model`]; looked up, not computed). A call
    /// over [`Buffer`]s that goes single-copy ([`Comm::single_copy_for`]) uses none of them.
    pub fn algorithm(&self, collective: Collective, bytes: usize) -> &'static Algorithm {
        self.forced.borrow()[collective as usize]
            .unwrap_or_else(|| self.table.get(collective, bytes))
    }

    fn pick(&self, collective: Collective, bytes: usize) -> Result<&'static Algorithm> {
        self.usable()?;
        let a = self.algorithm(collective, bytes);
        if !(a.supports)(self.ranks.len()) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "{} algorithm `{}` does not support {} ranks ({})",
                    collective.name(),
                    a.name,
                    self.ranks.len(),
                    a.note
                ),
            ));
        }
        Ok(a)
    }

    /// Refuses a communicator left inconsistent by an earlier error.
    fn usable(&self) -> Result<()> {
        if self.broken.get() {
            return Err(Error::new(
                ErrorKind::Aborted,
                "this communicator was left inconsistent by an earlier error; create a new one",
            ));
        }
        Ok(())
    }

    /// Runs a kernel; an error that leaves peers waiting on us aborts the job so that no one
    /// hangs (a panicking user op, mismatched lengths).
    fn run(&self, r: Result<()>) -> Result<()> {
        if let Err(e) = &r {
            self.broken.set(true);
            if e.kind() == ErrorKind::InvalidArgument {
                self.world.abort();
            }
        }
        r
    }

    /// A buffer error found on this rank only: the others may already be waiting for this
    /// rank's data, so the job is aborted (they get an error naming this rank) and the
    /// communicator is marked unusable, rather than leaving anyone hanging or desynchronised.
    fn fail(&self, e: Error) -> Result<()> {
        self.broken.set(true);
        self.world.abort_after(&e);
        Err(e)
    }

    /// [`Comm::check_root`], and on the root, that its `what` (scatter's send, gather's
    /// receive buffer) holds `want` elements: the check of the rooted block collectives,
    /// blocking and non-blocking.
    fn check_rooted(&self, root: u32, what: &str, want: usize, got: usize) -> Result<usize> {
        let root = self.check_root(root)?;
        if self.me == root && got != want {
            self.fail(len_error(what, want, got))?;
        }
        Ok(root)
    }

    fn check_root(&self, root: u32) -> Result<usize> {
        if root as usize >= self.ranks.len() {
            return Err(Error::new(
                ErrorKind::InvalidRank,
                format!(
                    "root {root} is not in this {}-rank communicator",
                    self.ranks.len()
                ),
            ));
        }
        Ok(root as usize)
    }

    // ---- plumbing used by the algorithms ---------------------------------------------------

    /// The two-sided message engine.
    pub(crate) fn engine(&self) -> &crate::p2p::Engine {
        self.p2p
            .get()
            .expect("set up when the communicator is assembled")
    }

    pub(crate) fn p(&self) -> usize {
        self.ranks.len()
    }

    pub(crate) fn me(&self) -> usize {
        self.me
    }

    pub(crate) fn chunks(&self, n: usize) -> usize {
        self.ch.chunks(n)
    }

    /// The two-sided engine as the channels' wait hook: a rank inside a collective still
    /// completes its earlier non-blocking sends (MPI's progress rule). The engine is asked
    /// only when a wait does not end at once (see `fabric::ring::Progressor`).
    #[inline]
    fn hook(&self) -> Hook<'_> {
        self.p2p.get().map(|e| e as &dyn Progressor)
    }

    pub(crate) fn ch_send(&self, to: usize, msg: &[u8]) -> Result<()> {
        self.ch.send(self.world, to, msg, self.hook())
    }

    pub(crate) fn ch_recv(&self, from: usize, dst: &mut [u8]) -> Result<()> {
        self.ch
            .recv(self.world, from, dst, &Sink::Copy, self.hook())
    }

    pub(crate) fn recv_reduce(&self, from: usize, acc: &mut [u8], red: &Reducer<'_>) -> Result<()> {
        self.ch
            .recv(self.world, from, acc, &Sink::Reduce(red), self.hook())
    }

    /// Sends chunk `i` of `msg` to `to`: waiting for room (`wait`), or only if there is room
    /// now (`false` if not). The blocking and the non-blocking collectives' chunk steps both
    /// come here: one compiled path.
    pub(crate) fn send_chunk(&self, to: usize, msg: &[u8], i: usize, wait: bool) -> Result<bool> {
        self.ch
            .send_chunk(self.world, to, msg, i, wait.then(|| self.hook()))
    }

    /// Receives chunk `i` of a `dst.len()`-byte message from `from`, copied or combined with
    /// `red`: waiting for it (`wait`), or only if it has arrived (`false` if not).
    pub(crate) fn recv_chunk(
        &self,
        from: usize,
        dst: &mut [u8],
        i: usize,
        red: Option<&Reducer<'_>>,
        wait: bool,
    ) -> Result<bool> {
        let h = wait.then(|| self.hook());
        match red {
            Some(r) => self
                .ch
                .recv_chunk(self.world, from, dst, i, &Sink::Reduce(r), h),
            None => self.ch.recv_chunk(self.world, from, dst, i, &Sink::Copy, h),
        }
    }

    pub(crate) fn ch_sendrecv(
        &self,
        to: usize,
        msg: &[u8],
        from: usize,
        dst: &mut [u8],
        red: Option<&Reducer<'_>>,
    ) -> Result<()> {
        let h = self.hook();
        match red {
            Some(r) => self
                .ch
                .sendrecv(self.world, to, msg, from, dst, &Sink::Reduce(r), h),
            None => self
                .ch
                .sendrecv(self.world, to, msg, from, dst, &Sink::Copy, h),
        }
    }

    /// Sends `buf` to `to` and receives a message of the same length from `from` into `buf`
    /// itself, chunk by chunk: chunk i is sent before the incoming chunk i overwrites (or is
    /// reduced into) it, so no copy of `buf` is needed.
    pub(crate) fn sendrecv_in_place(
        &self,
        to: usize,
        from: usize,
        buf: &mut [u8],
        red: Option<&Reducer<'_>>,
    ) -> Result<()> {
        for i in 0..self.chunks(buf.len()) {
            self.send_chunk(to, buf, i, true)?;
            self.recv_chunk(from, buf, i, red, true)?;
        }
        Ok(())
    }

    /// Temporary buffer `i` (1 or 2; 0 belongs to the typed front end), at least `n` bytes,
    /// 8-aligned, grown on demand and reused.
    pub(crate) fn tmp(&self, i: usize, n: usize) -> RefMut<'_, [u8]> {
        let mut v = self.tmp[i].borrow_mut();
        if v.len() * 8 < n {
            v.resize(n.div_ceil(8), 0);
        }
        RefMut::map(v, |v| &mut bytemuck::cast_slice_mut::<u64, u8>(v)[..n])
    }

    // ---- the collectives ---------------------------------------------------------------------

    /// Broadcasts `buf` from `root` to every rank (in place).
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: u32) -> Result<()> {
        let root = self.check_root(root)?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        if bytes.is_empty() || self.p() == 1 {
            return Ok(());
        }
        if self.direct_on(Collective::Broadcast, bytes.len())?
            && self.direct_broadcast(bytes, root)?
        {
            return Ok(());
        }
        let f = kernel!(self, Broadcast, bytes.len());
        self.run(f(self, bytes, root))
    }

    /// Root's `send` (`size() * recv.len()` elements) is cut in blocks; rank r receives block
    /// r in `recv`. `send` is read on the root only.
    pub fn scatter<T: Element>(&self, send: &[T], recv: &mut [T], root: u32) -> Result<()> {
        let root = self.check_rooted(
            root,
            "scatter send buffer",
            recv.len() * self.p(),
            send.len(),
        )?;
        let (s, r): (&[u8], &mut [u8]) =
            (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        if r.is_empty() {
            return Ok(());
        }
        if self.p() == 1 {
            r.copy_from_slice(s);
            return Ok(());
        }
        if self.direct_on(Collective::Scatter, r.len())? && self.direct_scatter(s, r, root)? {
            return Ok(());
        }
        let f = kernel!(self, Scatter, r.len());
        self.run(f(self, s, r, root))
    }

    /// Every rank's `send` lands as block r of root's `recv` (`size() * send.len()`
    /// elements). `recv` is written on the root only.
    pub fn gather<T: Element>(&self, send: &[T], recv: &mut [T], root: u32) -> Result<()> {
        let root = self.check_rooted(
            root,
            "gather receive buffer",
            send.len() * self.p(),
            recv.len(),
        )?;
        let (s, r): (&[u8], &mut [u8]) =
            (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        if s.is_empty() {
            return Ok(());
        }
        if self.p() == 1 {
            r.copy_from_slice(s);
            return Ok(());
        }
        if self.direct_on(Collective::Gather, s.len())? && self.direct_gather(s, r, root)? {
            return Ok(());
        }
        let f = kernel!(self, Gather, s.len());
        self.run(f(self, s, r, root))
    }

    /// Reduces every rank's `send` with `op` into root's `recv` (same length; ignored
    /// elsewhere).
    pub fn reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: &Op<T>,
        root: u32,
    ) -> Result<()> {
        let root = self.check_root(root)?;
        op.check()?;
        if self.me == root && recv.len() != send.len() {
            return self.fail(len_error("reduce receive buffer", send.len(), recv.len()));
        }
        let s: &[u8] = bytemuck::cast_slice(send);
        if s.is_empty() {
            return Ok(());
        }
        if self.p() == 1 {
            recv.copy_from_slice(send);
            return Ok(());
        }
        let comb = op::byte_combiner(op);
        let red = Reducer::new(std::mem::size_of::<T>(), &comb);
        if self.direct_on(Collective::Reduce, s.len())?
            && self.direct_reduce(s, bytemuck::cast_slice_mut(recv), &red, root)?
        {
            return Ok(());
        }
        let f = kernel!(self, Reduce, s.len());
        let mut work = self.tmp(0, s.len());
        work.copy_from_slice(s);
        let r = f(self, &mut work, &red, root);
        if r.is_ok() && self.me == root {
            bytemuck::cast_slice_mut::<T, u8>(recv).copy_from_slice(&work);
        }
        self.run(r)
    }

    /// [`Comm::reduce`] in place: `buf` is this rank's contribution, and on the root the result.
    pub fn reduce_in_place<T: Element>(&self, buf: &mut [T], op: &Op<T>, root: u32) -> Result<()> {
        let root_u = self.check_root(root)?;
        op.check()?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        if bytes.is_empty() || self.p() == 1 {
            return Ok(());
        }
        let f = kernel!(self, Reduce, bytes.len());
        let comb = op::byte_combiner(op);
        let red = Reducer::new(std::mem::size_of::<T>(), &comb);
        if self.me == root_u {
            return self.run(f(self, bytes, &red, root_u));
        }
        let mut work = self.tmp(0, bytes.len());
        work.copy_from_slice(bytes);
        self.run(f(self, &mut work, &red, root_u))
    }

    /// Every rank's `send` (same length everywhere) lands as block r of every rank's `recv`.
    pub fn allgather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        if recv.len() != send.len() * self.p() {
            return self.fail(len_error(
                "allgather receive buffer",
                send.len() * self.p(),
                recv.len(),
            ));
        }
        let n = send.len();
        let block = std::mem::size_of_val(send);
        // The single-copy path places this rank's own block itself (it may write it with
        // the copies to the peers), also where it then falls back to the channels.
        if block > 0 && self.direct_on(Collective::Allgather, block)? {
            if self.direct_allgather(bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv))? {
                return Ok(());
            }
        } else {
            let at = self.me * n;
            recv[at..at + n].copy_from_slice(send);
        }
        let mut sizes = self.sizes.borrow_mut();
        let (counts, displs) = &mut *sizes;
        let sz = std::mem::size_of::<T>();
        counts.clear();
        displs.clear();
        counts.extend(std::iter::repeat_n(std::mem::size_of_val(send), self.p()));
        displs.extend((0..self.p()).map(|r| r * n * sz));
        self.allgather_bytes(bytemuck::cast_slice_mut(recv), counts, displs)
    }

    /// [`Comm::allgather`] with per-rank counts: rank r contributes `counts[r]` elements,
    /// placed at `displs[r]` in `recv` (every rank passes the same `counts` and `displs`).
    /// This rank's contribution must already be in place at `recv[displs[me]..]`.
    pub fn allgatherv_in_place<T: Element>(
        &self,
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        self.check_v(recv.len(), counts, displs)?;
        let sz = std::mem::size_of::<T>();
        let mut sizes = self.sizes.borrow_mut();
        let (c, d) = &mut *sizes;
        c.clear();
        d.clear();
        c.extend(counts.iter().map(|x| x * sz));
        d.extend(displs.iter().map(|x| x * sz));
        self.allgather_bytes(bytemuck::cast_slice_mut(recv), c, d)
    }

    /// Checks allgatherv's counts and displacements against a buffer of `len` elements.
    fn check_v(&self, len: usize, counts: &[usize], displs: &[usize]) -> Result<()> {
        let p = self.p();
        if counts.len() != p || displs.len() != p {
            return self.fail(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "allgatherv needs {p} counts and displacements, got {} and {}",
                    counts.len(),
                    displs.len()
                ),
            ));
        }
        for r in 0..p {
            if counts[r].checked_add(displs[r]).is_none_or(|e| e > len) {
                return self.fail(Error::new(
                    ErrorKind::OutOfBounds,
                    format!(
                        "allgatherv block of rank {r} ({} at {}) overruns the {}-element buffer",
                        counts[r], displs[r], len
                    ),
                ));
            }
        }
        // Non-empty blocks must not overlap (each is written by one rank's data).
        for r in 0..p {
            for q in r + 1..p {
                let (a, b) = (
                    displs[r]..displs[r] + counts[r],
                    displs[q]..displs[q] + counts[q],
                );
                if !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end {
                    return self.fail(Error::new(
                        ErrorKind::InvalidArgument,
                        format!("allgatherv blocks of ranks {r} ({a:?}) and {q} ({b:?}) overlap"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks alltoall's buffer lengths (in elements).
    fn check_alltoall(&self, send: usize, recv: usize) -> Result<()> {
        if send != recv || send % self.p() != 0 {
            return self.fail(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "alltoall needs send and receive buffers of the same length, a multiple of {} (got {} and {})",
                    self.p(),
                    send,
                    recv
                ),
            ));
        }
        Ok(())
    }

    fn allgather_bytes(&self, recv: &mut [u8], counts: &[usize], displs: &[usize]) -> Result<()> {
        let total: usize = counts.iter().sum();
        if total == 0 || self.p() == 1 {
            return Ok(());
        }
        let f = kernel!(self, Allgather, total / self.p());
        self.run(f(self, recv, counts, displs))
    }

    /// Reduces every rank's `send` with `op`; every rank gets the result in `recv`.
    pub fn allreduce<T: Element>(&self, send: &[T], recv: &mut [T], op: &Op<T>) -> Result<()> {
        if recv.len() != send.len() {
            return self.fail(len_error(
                "allreduce receive buffer",
                send.len(),
                recv.len(),
            ));
        }
        let bytes = std::mem::size_of_val(send);
        if bytes > 0 && self.direct_on(Collective::Allreduce, bytes)? {
            op.check()?;
            let comb = op::byte_combiner(op);
            let red = Reducer::new(std::mem::size_of::<T>(), &comb);
            let (s, r) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
            if self.direct_allreduce(s, r, &red)? {
                return Ok(());
            }
        }
        recv.copy_from_slice(send);
        self.allreduce_in_place(recv, op)
    }

    /// [`Comm::allreduce`] in place.
    pub fn allreduce_in_place<T: Element>(&self, buf: &mut [T], op: &Op<T>) -> Result<()> {
        op.check()?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        if bytes.is_empty() || self.p() == 1 {
            return Ok(());
        }
        let f = kernel!(self, Allreduce, bytes.len());
        let comb = op::byte_combiner(op);
        let red = Reducer::new(std::mem::size_of::<T>(), &comb);
        self.run(f(self, bytes, &red))
    }

    /// Blocks until every rank of the communicator has entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        if self.p() == 1 {
            return Ok(());
        }
        let f = kernel!(self, Barrier, 0);
        self.run(f(self))
    }

    /// Reduces every rank's `send` (`size() * recv.len()` elements) with `op`; rank r gets
    /// block r of the result in `recv` (`MPI_Reduce_scatter_block`).
    pub fn reduce_scatter<T: Element>(&self, send: &[T], recv: &mut [T], op: &Op<T>) -> Result<()> {
        op.check()?;
        if send.len() != recv.len() * self.p() {
            return self.fail(len_error(
                "reduce_scatter send buffer",
                recv.len() * self.p(),
                send.len(),
            ));
        }
        let s: &[u8] = bytemuck::cast_slice(send);
        let r: &mut [u8] = bytemuck::cast_slice_mut(recv);
        if r.is_empty() {
            return Ok(());
        }
        if self.p() == 1 {
            r.copy_from_slice(s);
            return Ok(());
        }
        let comb = op::byte_combiner(op);
        let red = Reducer::new(std::mem::size_of::<T>(), &comb);
        if self.direct_on(Collective::ReduceScatter, r.len())?
            && self.direct_reduce_scatter(s, r, &red)?
        {
            return Ok(());
        }
        let f = kernel!(self, ReduceScatter, r.len());
        let mut work = self.tmp(0, s.len());
        work.copy_from_slice(s);
        self.run(f(self, &mut work, r, &red))
    }

    /// Block j of rank i's `send` lands as block i of rank j's `recv` (blocks of
    /// `send.len() / size()` elements).
    pub fn alltoall<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.check_alltoall(send.len(), recv.len())?;
        let (s, r): (&[u8], &mut [u8]) =
            (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        if s.is_empty() {
            return Ok(());
        }
        if self.p() == 1 {
            r.copy_from_slice(s);
            return Ok(());
        }
        if self.direct_on(Collective::Alltoall, s.len() / self.p())?
            && self.direct_alltoall(s, r)?
        {
            return Ok(());
        }
        let f = kernel!(self, Alltoall, s.len() / self.p());
        self.run(f(self, s, r))
    }
}

fn len_error(what: &str, want: usize, got: usize) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("{what} has {got} elements, {want} are needed"),
    )
}

/// The coordinates of rank `v` on the grid `dims` (dimension 0 varies fastest: ranks
/// `v` and `v + 1` are neighbours along it).
pub(crate) fn coords<const D: usize>(dims: &[usize; D], v: usize) -> [usize; D] {
    let mut at = [0; D];
    let mut r = v;
    for (a, &n) in at.iter_mut().zip(dims) {
        *a = r % n;
        r /= n;
    }
    at
}

/// The rank at coordinates `at` on the grid `dims` (the inverse of [`coords`]).
pub(crate) fn index<const D: usize>(dims: &[usize; D], at: &[usize; D]) -> usize {
    at.iter()
        .zip(dims)
        .rev()
        .fold(0, |acc, (&a, &n)| acc * n + a)
}

/// The dimensions of a `D`-dimensional grid rotated to start at `k`: (k, k+1, ...) mod D,
/// part k's order in seed 002's multi-directional algorithms.
pub(crate) fn rotation<const D: usize>(k: usize) -> [usize; D] {
    std::array::from_fn(|j| (k + j) % D)
}

impl Comm<'_> {
    /// The grid of `D` dimensions the topology-aware algorithms lay this communicator's ranks
    /// out on: the network's torus when the communicator is the whole world in order and the
    /// world fills a torus of `D` dimensions ([`World::torus`]: seed 002 ran each algorithm
    /// on a node shape of its own dimensions), else [`grid`].
    pub(crate) fn grid<const D: usize>(&self) -> [usize; D] {
        let p = self.size() as usize;
        let w = self.world_ref();
        if let Some(t) = w.torus() {
            let whole =
                w.size() as usize == p && (0..self.size()).all(|r| self.world_rank(r) == Some(r));
            if whole && t.len() == D && t.iter().product::<usize>() == p {
                return std::array::from_fn(|d| t[d]);
            }
        }
        grid::<D>(p)
    }
}

/// A balanced grid of `D` dimensions with `p` cells, for the algorithms of seed 002 that lay
/// the ranks out on a torus-like grid: sizes in non-increasing order, built by giving each
/// prime factor of p, largest first, to the smallest dimension so far (close to
/// `MPI_Dims_create`, not always as balanced: 72 in two gives 12 x 6 where it gives 9 x 8).
pub(crate) fn grid<const D: usize>(p: usize) -> [usize; D] {
    let mut dims = [1usize; D];
    // Largest prime factors first, each to the dimension that is smallest so far (no
    // allocation: a usize has at most 64 prime factors).
    let mut factors = [0usize; usize::BITS as usize];
    let mut count = 0;
    let (mut n, mut f) = (p.max(1), 2);
    while f * f <= n {
        while n % f == 0 {
            factors[count] = f;
            count += 1;
            n /= f;
        }
        f += 1;
    }
    if n > 1 {
        factors[count] = n;
        count += 1;
    }
    for &f in factors[..count].iter().rev() {
        let i = (0..D).min_by_key(|&i| dims[i]).expect("D > 0");
        dims[i] *= f;
    }
    dims.sort_unstable_by(|a, b| b.cmp(a));
    dims
}

/// For relative rank `v` of a binomial tree over `p` ranks: the lowest set bit of `v` (for the
/// root, the power of two at or above `p`), which is the distance to its parent, and the size
/// of its subtree (relative ranks `v .. v + size`).
pub(crate) fn subtree(p: usize, v: usize) -> (usize, usize) {
    let low = if v == 0 {
        p.next_power_of_two()
    } else {
        v & v.wrapping_neg()
    };
    (low, low.min(p - v))
}

/// Splits `n` elements of `elem` bytes into `p` blocks as evenly as possible; returns the
/// byte range of block `b` (the first `n % p` blocks get one more element).
pub(crate) fn block(n_bytes: usize, elem: usize, p: usize, b: usize) -> std::ops::Range<usize> {
    let n = n_bytes / elem;
    let (q, r) = (n / p, n % p);
    let start = b * q + b.min(r);
    let len = q + usize::from(b < r);
    start * elem..(start + len) * elem
}

/// `N` disjoint parts of one buffer, each exclusive, in the order of `ranges` (which may come
/// in any order of position); `None` if two overlap or one lies outside `buf`. (The slice
/// method that does this needs a newer Rust than the crate's minimum.)
pub(crate) fn disjoint_mut<const N: usize>(
    buf: &mut [u8],
    ranges: [std::ops::Range<usize>; N],
) -> Option<[&mut [u8]; N]> {
    let mut order: [usize; N] = std::array::from_fn(|i| i);
    order.sort_by_key(|&i| (ranges[i].start, ranges[i].end));
    let mut parts: [Option<&mut [u8]>; N] = std::array::from_fn(|_| None);
    let len = buf.len();
    let (mut rest, mut at) = (buf, 0usize);
    for i in order {
        let r = &ranges[i];
        if r.end < r.start {
            return None;
        }
        if r.is_empty() {
            // Overlaps nothing, wherever it points inside the buffer.
            if r.start > len {
                return None;
            }
            parts[i] = Some(&mut []);
            continue;
        }
        if r.start < at {
            return None;
        }
        let tail = std::mem::take(&mut rest);
        let (_, from) = tail.split_at_mut_checked(r.start - at)?;
        let (part, after) = from.split_at_mut_checked(r.end - r.start)?;
        parts[i] = Some(part);
        rest = after;
        at = r.end;
    }
    // Every index was placed above (`order` is a permutation of 0..N).
    Some(parts.map(Option::unwrap_or_default))
}

/// Two disjoint parts of one buffer: a shared `a` and an exclusive `b` (either may be empty,
/// wherever it points). Callers pass ranges that do not overlap (blocks of one layout,
/// validated on entry).
pub(crate) fn split2(
    buf: &mut [u8],
    a: std::ops::Range<usize>,
    b: std::ops::Range<usize>,
) -> (&[u8], &mut [u8]) {
    if a.is_empty() {
        return (&[], &mut buf[b]);
    }
    if b.is_empty() {
        return (&buf[a], &mut []);
    }
    if a.end <= b.start {
        let (x, y) = buf.split_at_mut(b.start);
        (&x[a], &mut y[..b.end - b.start])
    } else {
        debug_assert!(b.end <= a.start, "ranges {a:?} and {b:?} overlap");
        let (x, y) = buf.split_at_mut(a.start);
        (&y[..a.end - a.start], &mut x[b])
    }
}

#[cfg(test)]
mod tests {
    use super::disjoint_mut;

    #[test]
    fn disjoint_parts_come_back_in_the_order_asked() {
        let mut b: Vec<u8> = (0..10).collect();
        let [x, y, z] = disjoint_mut(&mut b, [6..8, 0..2, 3..3]).unwrap();
        assert_eq!((&*x, &*y, z.len()), (&[6u8, 7][..], &[0u8, 1][..], 0));
        x[0] = 60;
        assert_eq!(b[6], 60);
        assert!(disjoint_mut(&mut b, [0..4, 3..5]).is_none(), "overlap");
        assert!(
            disjoint_mut(&mut b, [0..1, 8..11]).is_none(),
            "past the end"
        );
        // Empty ranges overlap nothing; equal starts are told apart by their ends.
        let [e, w] = disjoint_mut(&mut b, [2..2, 0..4]).unwrap();
        assert_eq!((e.len(), w.len()), (0, 4));
        let [e, w] = disjoint_mut(&mut b, [4..4, 4..6]).unwrap();
        assert_eq!((e.len(), &*w), (0, &[4u8, 5][..]));
        assert!(
            disjoint_mut(&mut b, [0..1, 11..11]).is_none(),
            "empty, past the end"
        );
    }
}
