//! The [`World`]: this rank's view of the job, and the one-sided operations.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use crate::bootstrap::JobEnv;
use crate::env;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::{NetTransfers, Path, Patience, Shm, Transport, Via};

use super::segment::{Handle, Region, Segment, SymmetricSegment, out_of_bounds};

/// Largest payload of [`World::put_inline`].
///
/// Chosen from measurement on a 2-core AMD EPYC (BENCHMARKS.md): the put_signal ping-pong half
/// round trip is flat from 0 to 256 bytes and rises beyond, so up to 256 bytes a small write
/// costs what an 8-byte one does. On shared memory the store loop of an inline put is no
/// faster than `memcpy` at any size (`cargo run --release -p tca --example hotpath`: within
/// 10-20% and never ahead), so [`World::put`] always uses `memcpy`; `put_inline` exists for
/// transports where plain stores avoid a copy engine (the papers' PIO), and keeps the limit
/// that such transports (and libfabric's inject size) impose.
pub const INLINE_MAX: usize = 256;
/// Most parts (copy engines) one [`World::put_parts`] splits a put into.
pub const MAX_PARTS: usize = 8;

/// How a signal word changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    /// Store the value (the word's single writer hands out growing sequence numbers).
    Set(u64),
    /// Add to the word (several writers count arrivals).
    Add(u64),
}

/// An operation on a remote 64-bit word ([`World::atomic`]). Every operation that changes the
/// word wakes the ranks waiting on it, as a signal does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Read the word.
    Load,
    /// Store a value.
    Store(u64),
    /// Store a value; returns the old one.
    Swap(u64),
    /// Add; returns the old value.
    FetchAdd(u64),
    /// Store `new` if the word holds `current`; returns the value found (equal to `current`
    /// on success).
    CompareExchange {
        /// The value expected.
        current: u64,
        /// The value stored on success.
        new: u64,
    },
}

/// A ring packet as [`World::put_packet`] writes it into one segment (`fabric::ring`): its
/// body, its header line, the credit owed to its receiver, its sequence word. Offsets are
/// in the destination segment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Packet<'a> {
    /// The payload not in the header line (a packet over `ring::INLINE` bytes), written first.
    pub body: Option<(usize, &'a [u8])>,
    /// The header line (with the payload of a small packet), written after the body.
    pub line: (usize, &'a [u8]),
    /// A credit word and the value it is set to: the credit this rank owes the receiver,
    /// riding with the packet.
    pub credit: Option<(usize, u64)>,
    /// The sequence word and the value it is set to, last: a reader that sees it sees the
    /// body and the line.
    pub seq: (usize, u64),
}

/// A strided transfer: `count` blocks of `block` bytes, block i read at `i * src_stride` in
/// the source and written at `dst_off + i * dst_stride` in the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strided {
    /// Number of blocks.
    pub count: usize,
    /// Bytes per block.
    pub block: usize,
    /// Distance between block starts in the source.
    pub src_stride: usize,
    /// Distance between block starts in the target.
    pub dst_stride: usize,
}

impl Strided {
    /// Bytes spanned from the first block's start to the last block's end with `stride`.
    pub(crate) fn span(&self, stride: usize) -> Option<usize> {
        if self.count == 0 {
            return Some(0);
        }
        (self.count - 1)
            .checked_mul(stride)?
            .checked_add(self.block)
    }
}

/// Which transports a job may use (`TCA_TRANSPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Shared memory within a node, the network between nodes.
    Auto,
    /// Shared memory only (one node).
    Shm,
    /// The network between every pair of ranks.
    Ofi,
    /// A simulated network (thread mode: `threads::run` hands the ranks to `crate::sim`).
    Sim,
}

impl Mode {
    fn from_env() -> Result<Self> {
        match std::env::var(env::TRANSPORT).ok().as_deref().map(str::trim) {
            None | Some("" | "auto") => Ok(Self::Auto),
            Some("shm") => Ok(Self::Shm),
            Some("ofi") => Ok(Self::Ofi),
            Some("sim") => Ok(Self::Sim),
            Some(other) => Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "{}={other:?}: expected auto, shm, ofi or sim",
                    env::TRANSPORT
                ),
            )),
        }
    }
}

/// This rank's view of the job: rank, size, peers, and the one-sided operations.
///
/// A `World` belongs to one thread at a time (`Send`, not `Sync`): the papers' model is one
/// rank, one stream of puts. Create it with [`crate::init`] (under `tca run`, Slurm or mpirun)
/// or [`crate::threads::run`] (ranks as threads of one process).
///
/// Every operation goes to the transport that reaches its target rank — shared memory inside
/// the node, libfabric between nodes (see [`crate::transport`] for the contract they all
/// keep); [`World::transport`] names them.
#[derive(Debug)]
pub struct World {
    rank: u32,
    size: u32,
    job: u64,
    source: &'static str,
    shm: Shm,
    /// Which transport reaches each rank: `true` for the network.
    remote: Vec<bool>,
    /// Ranks sharing this rank's node (memory).
    node: Vec<u32>,
    #[cfg(feature = "ofi")]
    net: Option<crate::transport::ofi::Ofi>,
    /// The simulated network, when this rank runs on one ([`crate::sim`]).
    sim: Option<crate::transport::SimRank>,
    /// Whether some rank is reached through a network (real or simulated): `remote` decides.
    networked: bool,
    /// The rendezvous connection of a job spanning nodes: the job monitor.
    kv: Option<crate::bootstrap::kv::KvClient>,
    /// The monitor's verdict, watched from the moment the network is being set up.
    watch: Option<crate::bootstrap::kv::Watch>,
    /// Keeps the rendezvous served while this rank lives (rank 0 under Slurm and mpirun).
    _kv_server: Option<crate::bootstrap::kv::KvServer>,
    name: &'static str,
    /// Whether every other rank is reached through the network (set when it starts): a
    /// wait that names no raiser then sleeps on it (`World::sleeps_on_network`).
    #[cfg(feature = "ofi")]
    all_remote: bool,
    /// Every rank's control segment (barrier words, exchange inbox; see `control`).
    pub(crate) ctrl: Vec<Handle>,
    /// This rank's own control segment.
    pub(crate) own_ctrl: Arc<Region>,
    pub(crate) barrier_epoch: Cell<u64>,
    pub(crate) xchg_epoch: Cell<u64>,
    /// Sleep turns of this rank's waits on the network ([`World::network_sleeps`]).
    net_sleeps: Cell<u64>,
    /// Where [`World::put_region`] copies a segment's bytes that go through a copy (reused;
    /// as long as the longest such put).
    copy_out: std::cell::RefCell<Vec<u8>>,
}

impl World {
    /// Joins the job described by `env`: meet the other ranks, attach every peer.
    pub(crate) fn join(mut env: JobEnv) -> Result<Self> {
        let (rank, size, job, source) = (env.rank, env.size, env.job, env.source);
        env.check(crate::env::max_ranks())?;
        let mode = Mode::from_env()?;
        if mode == Mode::Sim && source != "threads" {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "{}=sim simulates ranks as threads of one process (tca::threads::run, \
                     tca::sim, `tca bench --network`); a job of processes ({source}) cannot \
                     join it",
                    env::TRANSPORT
                ),
            ));
        }
        let Some(rv) = env.kv.take() else {
            // Every rank on this node: meet on the node's board.
            let all: Vec<u32> = (0..size).collect();
            let (shm, ctrl) = Shm::join(env, &all)?;
            let remote = vec![false; size as usize];
            let mut w = Self::on_node((rank, size, job, source), shm, ctrl, all, remote, None);
            if mode == Mode::Ofi && size > 1 {
                w.start_network(None, true, Instant::now() + Duration::from_secs(60))?;
            }
            return Ok(w);
        };
        Self::join_nodes(env, rv, mode)
    }

    /// A world whose node is joined (`ctrl`: the control handles of the node's ranks; the
    /// others are filled in when the network starts). Network routes and the monitor follow.
    fn on_node(
        (rank, size, job, source): (u32, u32, u64, &'static str),
        shm: Shm,
        ctrl: Vec<Option<Handle>>,
        node: Vec<u32>,
        remote: Vec<bool>,
        server: Option<crate::bootstrap::kv::KvServer>,
    ) -> Self {
        let own_ctrl = shm.own_ctrl();
        Self {
            rank,
            size,
            job,
            source,
            shm,
            remote,
            node,
            #[cfg(feature = "ofi")]
            net: None,
            sim: None,
            networked: false,
            kv: None,
            watch: None,
            _kv_server: server,
            name: "shm",
            #[cfg(feature = "ofi")]
            all_remote: false,
            ctrl: ctrl
                .into_iter()
                .map(|c| c.unwrap_or(Handle::new(job, 0, 0, u32::MAX, 0)))
                .collect(),
            own_ctrl,
            barrier_epoch: Cell::new(0),
            xchg_epoch: Cell::new(0),
            net_sleeps: Cell::new(0),
            copy_out: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// Start-up of a job that spans nodes: meet at the rendezvous, learn who shares this
    /// node, make or open the node's board, then exchange network addresses.
    fn join_nodes(mut env: JobEnv, rv: crate::bootstrap::Rendezvous, mode: Mode) -> Result<Self> {
        use crate::bootstrap::Meet;
        use crate::bootstrap::kv::{KvClient, KvServer, resolve};
        let (rank, size, mut job, source) = (env.rank, env.size, env.job, env.source);
        let deadline = env.boot_deadline;
        let owner_name = match rv.owner {
            Some(r) => format!("rank {r}"),
            None => "the launcher".to_string(),
        };
        let given = rv.at.addr().map(resolve).transpose()?;
        let published = matches!(rv.at, Meet::Published { .. });
        let (server, v6) = if rv.serve {
            // On the given address's port, or one the kernel picks when rank 0 publishes it
            // (then on IPv6 too where the node has it).
            let port = given.map_or(0, |a| a.port());
            let dual = (published && given.is_none())
                .then(|| KvServer::start((std::net::Ipv6Addr::UNSPECIFIED, 0).into(), job, size))
                .and_then(std::result::Result::ok);
            match dual {
                Some(s) => (Some(s), true),
                None => (
                    Some(KvServer::start(([0, 0, 0, 0], port).into(), job, size)?),
                    false,
                ),
            }
        } else {
            (None, false)
        };
        let addrs = match (&rv.at, given) {
            (Meet::Published { dir, .. }, _) => {
                let listen = server.as_ref().map(|s| crate::bootstrap::pmi::Listening {
                    port: s.addr().port(),
                    v6,
                    at: given,
                });
                let (addrs, job0) =
                    crate::bootstrap::pmi::meet(*dir, (rank, job), &node_name(), listen, deadline)?;
                // Rank 0's job id is the job's (see `pmi::Published::job`).
                job = job0;
                env.job = job0;
                addrs
            }
            (Meet::Addr(_), given) => given.into_iter().collect(),
        };
        let mut kv = KvClient::connect(&addrs, job, rank, size, (rv.owner, owner_name), deadline)?;
        // Round 1: which node is each rank on?
        let names = kv.allgather(node_name().as_bytes(), deadline)?;
        let mine = &names[rank as usize];
        let node: Vec<u32> = (0..size).filter(|&r| &names[r as usize] == mine).collect();
        let nodes = {
            let mut n = names.clone();
            n.sort();
            n.dedup();
            n.len()
        };
        if mode == Mode::Shm && nodes > 1 {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "{}=shm, but this job spans {nodes} nodes: shared memory cannot reach them",
                    env::TRANSPORT
                ),
            ));
        }
        if !cfg!(feature = "ofi") && (nodes > 1 || mode == Mode::Ofi) {
            // Every rank decides this from the same records: all fail alike, none waits.
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "this job spans {nodes} nodes and needs the network transport, but tca was \
                     built without it: rebuild with `--features ofi` (needs libfabric, Debian: \
                     libfabric-dev)"
                ),
            ));
        }
        // Round 2: each node's first rank makes the board and says where it is.
        let leader = node[0] == rank;
        let mut made = None;
        let here = if leader {
            let (fd, _b) = crate::transport::NodeBoard::create(size, job, None)?;
            let at = format!(
                "{} {}",
                std::process::id(),
                std::os::fd::AsRawFd::as_raw_fd(&fd)
            );
            made = Some(fd);
            at
        } else {
            String::new()
        };
        let boards = kv.allgather(here.as_bytes(), deadline)?;
        let fd = match made {
            Some(fd) => fd,
            None => {
                let text = String::from_utf8_lossy(&boards[node[0] as usize]).into_owned();
                let mut it = text.split_whitespace().map(str::parse::<u32>);
                let (Some(Ok(pid)), Some(Ok(fd))) = (it.next(), it.next()) else {
                    return Err(Error::peer(
                        ErrorKind::Bootstrap,
                        node[0],
                        format!("rank {} announced no node board", node[0]),
                    ));
                };
                crate::transport::open_inherited(pid, fd).map_err(|e| {
                    Error::peer(
                        ErrorKind::Bootstrap,
                        node[0],
                        format!(
                            "cannot open the node board of rank {} (pid {pid}): {e}",
                            node[0]
                        ),
                    )
                })?
            }
        };
        env.board = crate::bootstrap::BoardSource::Fd(fd);
        let (shm, ctrl) = Shm::join(env, &node)?;
        let remote: Vec<bool> = (0..size)
            .map(|r| r != rank && (mode == Mode::Ofi || !node.contains(&r)))
            .collect();
        let mut w = Self::on_node((rank, size, job, source), shm, ctrl, node, remote, server);
        if w.remote.iter().any(|&r| r) {
            w.start_network(Some(&mut kv), mode == Mode::Ofi, deadline)?;
        } else {
            // Every rank turned out to share this node: only the control handles to share.
            let all = kv.allgather(&w.own_ctrl.handle.to_bytes(), deadline)?;
            w.ctrl = all
                .iter()
                .map(|b| Handle::from_bytes(b))
                .collect::<Result<_>>()?;
        }
        kv.watch()?;
        w.watch = Some(kv.watcher());
        w.kv = Some(kv);
        Ok(w)
    }

    /// Opens the network transport and makes it the route to every rank marked remote (all
    /// others with `all`). Endpoint names and control handles travel through the rendezvous
    /// `kv`, or, on one node, through the fabric's own exchange over shared memory.
    #[cfg(feature = "ofi")]
    fn start_network(
        &mut self,
        kv: Option<&mut crate::bootstrap::kv::KvClient>,
        all: bool,
        deadline: Instant,
    ) -> Result<()> {
        use crate::transport::ofi::Ofi;
        let provider = std::env::var(env::OFI_PROVIDER)
            .ok()
            .filter(|p| !p.is_empty());
        let (mut net, name) = Ofi::open(provider.as_deref(), self.rank, self.size, self.job)?;
        let mut record = self.own_ctrl.handle.to_bytes().to_vec();
        record.extend_from_slice(&name);
        let records = match kv {
            Some(kv) => {
                let r = kv.allgather(&record, deadline)?;
                // From here on a rank that fails is reported by the monitor, also while the
                // others wait in the barrier below.
                kv.watch()?;
                net.set_watch(kv.watcher());
                self.watch = Some(kv.watcher());
                r
            }
            None => self.exchange(&record)?,
        };
        let mut names = Vec::with_capacity(records.len());
        for (r, rec) in records.iter().enumerate() {
            if rec.len() < Handle::BYTES {
                return Err(Error::peer(
                    ErrorKind::Bootstrap,
                    crate::cast::rank_u32(r),
                    format!("rank {r} sent a malformed start-up record"),
                ));
            }
            self.ctrl[r] = Handle::from_bytes(&rec[..Handle::BYTES])?;
            names.push(rec[Handle::BYTES..].to_vec());
        }
        net.connect(&names)?;
        net.register(&self.own_ctrl)?;
        if all {
            for r in 0..self.size {
                self.remote[r as usize] = r != self.rank;
            }
        }
        self.all_remote = self
            .remote
            .iter()
            .enumerate()
            .all(|(r, &x)| x || r == self.rank as usize);
        self.name = if self.all_remote { "ofi" } else { "shm+ofi" };
        self.net = Some(net);
        self.networked = true;
        // Nobody writes into a peer before that peer's endpoint is ready.
        self.barrier()
    }

    #[cfg(not(feature = "ofi"))]
    fn start_network(
        &mut self,
        _kv: Option<&mut crate::bootstrap::kv::KvClient>,
        _all: bool,
        _deadline: Instant,
    ) -> Result<()> {
        Err(Error::new(
            ErrorKind::Bootstrap,
            format!(
                "this job needs the network transport ({}={}, or ranks on several nodes), but tca \
                 was built without it: rebuild with `--features ofi` (needs libfabric, Debian: \
                 libfabric-dev)",
                env::TRANSPORT,
                std::env::var(env::TRANSPORT).unwrap_or_else(|_| "auto".into())
            ),
        ))
    }

    /// This rank, in `0..size()`.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks in the world.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The job id (every handle carries it).
    pub fn job_id(&self) -> u64 {
        self.job
    }

    /// Ranks that share memory with this one (this rank's node), in order.
    pub fn node_ranks(&self) -> &[u32] {
        &self.node
    }

    /// Whether `rank` shares this rank's node (and so its memory).
    pub fn is_local(&self, rank: u32) -> bool {
        self.shm.reaches(rank)
    }

    /// Where rank and size came from: "tca run", "Slurm", "Open MPI", "PMI", "threads",
    /// "singleton".
    pub fn launched_by(&self) -> &'static str {
        self.source
    }

    /// The transport(s) this world runs on, as reports print it: `"shm"` (shared memory, one
    /// node), `"ofi"` (libfabric to every other rank) or `"shm+ofi"` (both: shared memory
    /// within the node, libfabric between nodes).
    pub fn transport(&self) -> &'static str {
        self.name
    }

    /// For measurement: makes this rank's signals into node-local memory plain stores (`true`),
    /// which a waiter about to sleep orders with `membarrier` (`TCA_SIGNAL_FENCE=asymmetric`),
    /// or returns them to the process's setting (`false`; by default a SeqCst store, a locked
    /// instruction each, plain where `TCA_SIGNAL_FENCE=asymmetric`). Returns whether they are
    /// now plain (after `true`, `false` where the process could not register for
    /// `membarrier`). The first `true` registers the process for good: from then on every
    /// waiter's fence on the node interrupts the CPUs running it. The plain form can delay a
    /// wake-up by up to one sleep slice (10 ms) where the kernel's `membarrier` misses a CPU:
    /// one where another thread of the writer's process has just ended, or where the process
    /// ran before it registered (reproduced on Linux 6.18; the shared-memory transport's wait
    /// module gives the mechanism); `tca bench PingPong` alternates the two forms to state
    /// what the fence costs.
    pub fn set_plain_signals(&self, on: bool) -> Result<bool> {
        self.shm.set_plain_signals(on)
    }

    /// For a rank about to sleep after a last look at memory others signal into: orders
    /// every signal store of this node's ranks before that look, as a SeqCst store would
    /// (signals into node-local memory may be plain stores; see
    /// [`World::set_plain_signals`]). `false` if it could not be done; the caller's sleep must
    /// then be bounded.
    pub(crate) fn fence_writers(&self) -> bool {
        self.shm.fence_writers()
    }

    /// The libfabric provider carrying this rank's network traffic, if any.
    pub fn network_provider(&self) -> Option<&str> {
        #[cfg(feature = "ofi")]
        if let Some(n) = &self.net {
            return Some(n.provider());
        }
        None
    }

    /// How waits spin before they sleep: (spin iterations, yields), adapted to ranks per core.
    pub fn wait_policy(&self) -> (u32, u32) {
        let p = self.shm.policy();
        (p.spins, p.yields)
    }

    /// Process id of `rank` (ranks on this node).
    pub fn pid_of(&self, rank: u32) -> Result<u32> {
        self.check_rank(rank)?;
        self.shm.pid_of(rank).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidRank,
                format!("rank {rank} runs on another node: its pid means nothing here"),
            )
        })
    }

    /// Runs `f` on every joined world (by rank) as a rank of the simulated job `engine`, the
    /// ranks taking turns as coroutines of this thread (the simulated transport's scheduler:
    /// handing the turn over is a stack switch, not a thread switch). A rank that failed to
    /// join leaves the job failed. Each rank's result, or the panic or stall that ended it as
    /// an error naming it; fails only if a rank's stack cannot be made.
    pub(crate) fn run_simulated<T>(
        joined: Vec<Result<World>>,
        engine: &Arc<crate::transport::SimEngine>,
        compute: crate::transport::Compute,
        f: &(impl Fn(World) -> Result<T> + Sync),
    ) -> Result<Vec<Result<T>>> {
        let mut early: Vec<Option<Error>> = Vec::with_capacity(joined.len());
        let mut bodies = Vec::with_capacity(joined.len());
        for (rank, w) in (0u32..).zip(joined) {
            match w {
                Err(e) => {
                    engine.leave(rank, true);
                    early.push(Some(e));
                    bodies.push(None);
                }
                Ok(mut w) => {
                    let body = move || {
                        w.start_sim(engine.clone(), compute)
                            .inspect_err(|_| engine.leave(rank, true))?;
                        f(w)
                    };
                    early.push(None);
                    bodies.push(Some(
                        Box::new(body) as crate::transport::SimBody<'_, Result<T>>
                    ));
                }
            }
        }
        let outcomes = crate::transport::run_sim_ranks(bodies, || engine.baton())?;
        Ok((0u32..)
            .zip(early.into_iter().zip(outcomes))
            .map(|(rank, (early, outcome))| match (early, outcome) {
                (Some(e), _) => Err(e),
                (None, Some(Ok(r))) => r,
                (None, Some(Err(p))) => Err(Error::peer(
                    ErrorKind::PeerDied,
                    rank,
                    format!("rank {rank} panicked: {}", crate::error::panic_message(&*p)),
                )),
                (None, None) => Err(Error::new(
                    ErrorKind::Aborted,
                    format!(
                        "simulated rank {rank} never got its turn back (the simulation stalled)"
                    ),
                )),
            })
            .collect())
    }

    /// Makes this rank one of a simulated job (every other rank is reached through the
    /// simulated network) and waits until every rank has joined it.
    fn start_sim(
        &mut self,
        engine: std::sync::Arc<crate::transport::SimEngine>,
        compute: crate::transport::Compute,
    ) -> Result<()> {
        for r in 0..self.size {
            self.remote[r as usize] = r != self.rank;
        }
        self.networked = true;
        self.name = "sim";
        self.sim = Some(crate::transport::SimRank::enter(
            engine, self.rank, compute,
        )?);
        Ok(())
    }

    /// The network model this rank is simulated on (`None`: a real transport).
    pub fn simulated(&self) -> Option<&str> {
        self.sim.as_ref().map(|s| s.network())
    }

    /// Whether payload moves: false only on a simulated network in timing-only mode, where a
    /// put above 64 KiB moves only its first and last 256 bytes and a collective's message
    /// above 64 KiB (which travels in chunks the simulation moves) is neither copied out nor
    /// reduced into its destination, so a program may leave its large buffers unwritten and
    /// their pages are never touched.
    pub fn moves_payload(&self) -> bool {
        self.sim.as_ref().is_none_or(|s| s.payload())
    }

    /// Whether a message of `len` bytes is priced but not moved (see
    /// [`World::moves_payload`]): the collectives then skip copying it out as well.
    #[inline]
    pub(crate) fn only_timed(&self, len: usize) -> bool {
        self.sim.as_ref().is_some_and(|s| s.only_timed(len))
    }

    /// On a simulated network, the collectives' cost model of its parameters: what Auto
    /// chooses with there, whatever machine runs the simulation.
    pub(crate) fn sim_cost_model(&self) -> Option<crate::coll::model::CostModel> {
        self.sim.as_ref().map(|s| s.cost_model())
    }

    /// The torus this job's ranks fill, rank r on node r (x fastest), where the transport
    /// knows it: a simulated torus the job covers whole. The topology-aware algorithms (seed
    /// 002's pipelines over 2 and 3 directions, the 3-D ring allgather) lay their grid out on
    /// it; elsewhere they choose a balanced grid.
    pub fn torus(&self) -> Option<Vec<usize>> {
        self.sim.as_ref().and_then(|s| s.torus())
    }

    /// Counts `bytes` of reduction the collectives are about to do on this rank: on a
    /// simulated network they cost virtual time at the model's rate (nothing elsewhere: the
    /// host's own clock sees the work).
    #[inline]
    pub(crate) fn computed(&self, bytes: usize) {
        if let Some(s) = &self.sim {
            s.reduced(bytes);
        }
    }

    /// The collectives' chunk size this job sets (a simulated network's [`crate::sim::Options`]
    /// `chunk`), if any; otherwise it follows the rank count ([`crate::coll::chunk_bytes`]).
    pub(crate) fn collective_chunk(&self) -> Option<usize> {
        self.sim.as_ref().and_then(|s| s.chunk())
    }

    /// Seconds on this rank's clock: virtual time on a simulated network, else host time
    /// since an arbitrary start. What benchmarks time with, so that they measure the
    /// simulated network when they run on one.
    pub fn wtime(&self) -> f64 {
        match &self.sim {
            Some(s) => s.now(),
            None => epoch().elapsed().as_secs_f64(),
        }
    }

    /// Sends `bytes` to `rank`, across the network, as one message of the network transport,
    /// whatever they are: what a confused or hostile peer can send. For the fuzz test of the
    /// receiving side (`crates/tca-tests`, scenario `net-garbage`); not for programs.
    #[cfg(all(feature = "ofi", feature = "fuzzing"))]
    #[doc(hidden)]
    pub fn fuzz_send_raw(&self, rank: u32, bytes: &[u8]) -> Result<()> {
        match (&self.net, self.is_remote(rank)) {
            (Some(n), true) => n.send_raw(&self.shm, rank, bytes),
            _ => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("rank {rank} is not reached through the network"),
            )),
        }
    }

    /// The transport that reaches `rank` (checked to be in the world).
    #[inline]
    fn via(&self, rank: u32) -> Via<'_> {
        if let Some(s) = &self.sim {
            if rank != self.rank {
                return Via::Sim(s, &self.shm);
            }
        }
        #[cfg(feature = "ofi")]
        if self.remote[rank as usize] {
            if let Some(n) = &self.net {
                return Via::Net(n, &self.shm);
            }
        }
        let _ = rank;
        Via::Shm(&self.shm)
    }

    /// The transport for an operation touching ranks `a` and `b`: the network if either is
    /// reached through it.
    #[inline]
    fn via2(&self, a: u32, b: u32) -> Via<'_> {
        if self.is_remote(b) {
            return self.via(b);
        }
        self.via(a)
    }

    #[inline]
    fn check_rank(&self, rank: u32) -> Result<()> {
        if rank >= self.size {
            return Err(Error::new(
                ErrorKind::InvalidRank,
                format!("rank {rank} is not in this {}-rank world", self.size),
            ));
        }
        Ok(())
    }

    /// Checks that `h` belongs to this job and names a rank of it.
    #[inline]
    fn check_handle(&self, h: &Handle) -> Result<()> {
        if h.job() != self.job {
            return Err(Error::new(
                ErrorKind::InvalidHandle,
                format!(
                    "handle belongs to job {:016x}, this is job {:016x}",
                    h.job(),
                    self.job
                ),
            ));
        }
        self.check_rank(h.rank())
    }

    // ---- segments -------------------------------------------------------------------------

    /// Registers a new segment of `len` bytes (zeroed) on this rank only. Give its
    /// [`Segment::handle`] to the peers that should write into it.
    pub fn alloc(&self, len: usize) -> Result<Segment> {
        let region = self.shm.alloc(len)?;
        #[cfg(feature = "ofi")]
        if let Some(n) = &self.net {
            n.sweep_freed(&self.shm)?;
            n.register(&region)?;
        }
        Ok(Segment { region })
    }

    /// Checks a word of a segment reached through the network as a mapped word is checked:
    /// the handle (its owner describes it), the bounds, the alignment.
    pub(crate) fn check_remote_word(&self, h: &Handle, off: usize) -> Result<()> {
        self.attach(h)?;
        if off.checked_add(8).is_none_or(|e| e > h.len()) {
            return Err(out_of_bounds(h, off, 8));
        }
        if off % 8 != 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("signal offset {off} is not a multiple of 8"),
            ));
        }
        Ok(())
    }

    /// Whether operations on `rank` go through the network transport.
    #[inline]
    pub(crate) fn is_remote(&self, rank: u32) -> bool {
        self.networked && self.remote.get(rank as usize).copied().unwrap_or(false)
    }

    /// Whether this rank can write into `rank`'s plain memory by cross-memory attach
    /// (`transport::shm::cma`): a rank of this node reached through shared memory (not the
    /// network, not a simulation, whose time the copy would bypass), with the kernel's
    /// permission. (Which messages go that way is the two-sided layer's `cma_min`.)
    pub(crate) fn cma_reaches(&self, rank: u32) -> bool {
        self.sim.is_none()
            && !self.is_remote(rank)
            && self.shm.pid_of(rank).is_some()
            && Self::cma_permitted()
    }

    /// Whether the kernel lets this process write into other processes' plain memory by
    /// cross-memory attach at all (asked once per process).
    pub(crate) fn cma_permitted() -> bool {
        crate::transport::shm::cma::available()
    }

    /// Lets the ranks of this node write into this process by cross-memory attach (the
    /// kernel's ptrace check, Yama): before this rank gives any of them an address.
    pub(crate) fn allow_cma_writers(&self) {
        crate::transport::shm::cma::allow_peers();
    }

    /// Whether `rank`, a rank of this node in another process, has exited: it will write
    /// nothing more into this rank's memory. Never true of a rank of this process (a thread
    /// rank), nor of one that only left the job or aborted: its process may still be running.
    pub(crate) fn peer_exited(&self, rank: u32) -> bool {
        self.shm.exited(rank)
    }

    /// Writes `src` into `rank`'s memory at address `addr` (a buffer `rank` posted and waits
    /// on) by cross-memory attach: one copy, by the kernel, which checks the range against
    /// `rank`'s mappings. Errors name the rank.
    pub(crate) fn cma_write(&self, rank: u32, addr: u64, src: &[u8]) -> Result<()> {
        let pid = self.pid_of(rank)?;
        crate::transport::shm::cma::write(pid, addr, src).map_err(|e| {
            let kind = if e.raw_os_error() == Some(libc::ESRCH) {
                ErrorKind::PeerDied
            } else {
                ErrorKind::Transport
            };
            Error::peer(
                kind,
                rank,
                format!(
                    "writing {} bytes into rank {rank}'s buffer at {addr:#x} by cross-memory \
                     attach (pid {pid}): {e}{}",
                    src.len(),
                    if e.raw_os_error() == Some(libc::EPERM) {
                        " (the kernel's ptrace check refused it; TCA_CMA=off sends through \
                         landing buffers instead)"
                    } else {
                        ""
                    }
                ),
            )
        })
    }

    /// Allocates a segment of `len` bytes on every rank (collective: every rank calls it with
    /// the same length) and exchanges the handles.
    pub fn alloc_symmetric(&self, len: usize) -> Result<SymmetricSegment> {
        let local = self.alloc(len)?;
        let handles = self.all_handles(&local)?;
        if let Some(h) = handles.iter().find(|h| h.len() != len) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "symmetric allocation with different lengths: rank {} asked for {len} bytes, rank {} for {}",
                    self.rank,
                    h.rank(),
                    h.len()
                ),
            ));
        }
        Ok(SymmetricSegment { local, handles })
    }

    /// Collective: every rank passes one of its segments; every rank gets all handles.
    pub fn all_handles(&self, seg: &Segment) -> Result<Vec<Handle>> {
        let all = self.exchange(&seg.handle().to_bytes())?;
        all.iter().map(|b| Handle::from_bytes(b)).collect()
    }

    /// Validates `h` and attaches its segment now rather than at the first put.
    pub fn attach(&self, h: &Handle) -> Result<()> {
        self.check_handle(h)?;
        self.via(h.rank()).attach(h)
    }

    /// The attached target of `h`, for chains.
    pub(crate) fn resolve(&self, h: &Handle) -> Result<Arc<Region>> {
        self.check_handle(h)?;
        self.shm.resolve(h)
    }

    /// Number of attached segments (own and peers'), for leak checks.
    pub fn attached_segments(&self) -> usize {
        self.shm.attached_segments()
    }

    // ---- one-sided operations -------------------------------------------------------------

    /// Copies `src` into the segment `dst` at byte offset `off`: one `memcpy` into the peer's
    /// memory on shared memory. Complete at the target on return on shared memory; on a
    /// network, at [`World::quiet`] (or when a later signal to the same rank is seen).
    /// A zero-length put is valid: it checks the handle and offset and writes nothing.
    #[inline]
    pub fn put(&self, dst: &Handle, off: usize, src: &[u8]) -> Result<()> {
        if !self.is_remote(dst.rank()) {
            if let Some(r) = self.shm.put_fast(dst, off, src) {
                return r;
            }
        }
        self.check_handle(dst)?;
        self.via(dst.rank()).put(dst, off, src)
    }

    /// Puts `src` at `off` in `dst` split into parts at `cuts` (part i is
    /// `src[cuts[i]..cuts[i + 1]]`; `cuts` ascending from 0 to `src.len()`), each part copied
    /// by its own copy engine: part 0 by this thread, the others by `engines`' threads, all at
    /// once (seed 001's DMA channels, on shared memory). `secs[i]` gets the time from this
    /// call's start until part i was in place (the hand-over to an engine included; 0 for an
    /// empty part, which no engine is woken for). A failed part is an error, after the other
    /// parts were written (the whole range was checked first, so only the mapping's own
    /// checks can fail one).
    /// Complete on return, like [`World::put`]. On a simulated network the parts go over the
    /// model's DMA channels instead, each its own descriptor, and `secs[i]` is part i's arrival
    /// in virtual time (`sim::Engine::send_parts`). Across a real network part i goes on this
    /// rank's i-th endpoint (a lane: `transport::ofi::lanes`), each an RMA write, and
    /// `secs[i]` is its local completion; complete at the target on [`World::quiet`] there,
    /// and ordered with nothing else this rank sends until then (not even a later signal to
    /// the same rank). Returns `false` (nothing done) where puts are not split (this rank's own
    /// memory on a simulated network, which no network carries; across a network see
    /// `transport::ofi::lanes`): then a plain put is the way.
    pub(crate) fn put_parts(
        &self,
        dst: &Handle,
        off: usize,
        src: &[u8],
        cuts: &[usize],
        engines: &rayon::ThreadPool,
        secs: &mut [f64],
    ) -> Result<bool> {
        let simulated = self.sim.is_some() && dst.rank() != self.rank;
        let networked = self.sim.is_none() && self.is_remote(dst.rank());
        if self.sim.is_some() && !simulated {
            return Ok(false);
        }
        let parts = cuts.len().saturating_sub(1);
        if parts == 0
            || parts > MAX_PARTS
            || secs.len() < parts
            || cuts[0] != 0
            || cuts[parts] != src.len()
            || cuts.windows(2).any(|c| c[0] > c[1])
        {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "cuts {cuts:?} (with {} times) do not split a {}-byte put into 1 to \
                     {MAX_PARTS} parts",
                    secs.len(),
                    src.len()
                ),
            ));
        }
        if let (true, Some(sim)) = (simulated, &self.sim) {
            self.check_handle(dst)?;
            sim.put_parts(&self.shm, dst, off, src, cuts, secs)?;
            return Ok(true);
        }
        if networked {
            #[cfg(feature = "ofi")]
            if let Some(n) = &self.net {
                self.check_handle(dst)?;
                return n.put_lanes(&self.shm, dst, off, src, cuts, secs);
            }
            return Ok(false);
        }
        let (region, at) = self.mapped(dst, off, src.len())?;
        let map = &region.map;
        let t0 = std::time::Instant::now();
        let copy = |i: usize| {
            let r = map.write(at + cuts[i], &src[cuts[i]..cuts[i + 1]]);
            (r, t0.elapsed().as_secs_f64())
        };
        let mut errs: [Option<Error>; MAX_PARTS] = Default::default();
        engines.in_place_scope(|s| {
            let (first_err, other_errs) = errs.split_at_mut(1);
            let (first_sec, other_secs) = secs.split_at_mut(1);
            for (k, (e, t)) in other_errs.iter_mut().zip(other_secs).enumerate() {
                *t = 0.0;
                if k + 1 < parts && cuts[k + 1] < cuts[k + 2] {
                    let copy = &copy;
                    s.spawn(move |_| {
                        let (r, dt) = copy(k + 1);
                        *e = r.err();
                        *t = dt;
                    });
                }
            }
            let (r, dt) = copy(0);
            first_err[0] = r.err();
            first_sec[0] = if cuts[1] > cuts[0] { dt } else { 0.0 };
        });
        match errs.into_iter().flatten().next() {
            Some(e) => Err(e),
            None => Ok(true),
        }
    }

    /// How a put of `src` into a segment of `rank` leaves this rank where it crosses a real
    /// network ([`Path`]: the seed's data modes there); `None` where it does not (within a
    /// node this thread copies it, on a simulated network a DMA channel moves it).
    pub(crate) fn net_put_path(&self, rank: u32, src: &[u8]) -> Option<Path> {
        #[cfg(feature = "ofi")]
        if let (true, Some(n)) = (self.is_remote(rank), &self.net) {
            return Some(n.put_path(src));
        }
        let _ = (rank, src);
        None
    }

    /// Puts `len` bytes at `at` (a mapping offset, as `Region::range` gives it) of `src`, a
    /// segment of this rank, into `dst` at `off` across the network, by an RMA write straight
    /// from the segment (the seed's MtoM: no copy on either side). `false` (nothing done)
    /// where `dst` is not across a real network or a message carries the bytes better: the
    /// caller copies them out and puts the copy.
    pub(crate) fn put_region_net(
        &self,
        dst: &Handle,
        off: usize,
        src: &Region,
        at: usize,
        len: usize,
    ) -> Result<bool> {
        #[cfg(feature = "ofi")]
        if let (true, Some(n)) = (self.sim.is_none() && self.is_remote(dst.rank()), &self.net) {
            self.check_handle(dst)?;
            return n.put_region(&self.shm, dst, off, src, at, len);
        }
        let _ = (dst, off, src, at, len);
        Ok(false)
    }

    /// Puts `len` bytes at `at` (a mapping offset, as `Region::range` gives it) of `src`, a
    /// segment of this rank, into `dst` at `off`, straight from the segment: across a network
    /// an RMA write from it where a message does not carry the bytes better
    /// ([`World::put_region_net`]), within a node one copy from mapping to mapping; otherwise
    /// (a message's worth across a network, a simulated network) through a copy. Completes as
    /// [`World::put`] does.
    pub(crate) fn put_region(
        &self,
        dst: &Handle,
        off: usize,
        src: &Region,
        at: usize,
        len: usize,
    ) -> Result<()> {
        if self.put_region_net(dst, off, src, at, len)? {
            return Ok(());
        }
        if self.sim.is_none() && !self.is_remote(dst.rank()) {
            let (d, d_at) = self.mapped(dst, off, len)?;
            return d.map.copy_from(d_at, &src.map, at, len);
        }
        let mut copy = self.copy_out.borrow_mut();
        if copy.len() < len {
            copy.resize(len, 0);
        }
        src.map.read(at, &mut copy[..len])?;
        self.put(dst, off, &copy[..len])
    }

    /// [`World::net_put_path`] of `len` bytes from a segment of this rank (a chain's put,
    /// [`World::put_region_net`]).
    pub(crate) fn net_put_from_path(&self, rank: u32, len: usize) -> Option<Path> {
        #[cfg(feature = "ofi")]
        if let (true, Some(n)) = (self.is_remote(rank), &self.net) {
            return Some(n.put_from_path(len));
        }
        let _ = (rank, len);
        None
    }

    /// Whether every put across the network from memory outside this rank's registered
    /// segments is staged through registered buffers ([`Path::Staged`]; `TCA_OFI_STAGE`
    /// sets it at start-up), or only where the provider needs local buffers registered.
    pub(crate) fn set_stage_always(&self, on: bool) {
        #[cfg(feature = "ofi")]
        if let Some(n) = &self.net {
            n.set_stage_always(on);
        }
        let _ = on;
    }

    /// Whether [`World::read_peer`] reads `rank`'s segments directly: a rank of this node
    /// reached through shared memory (not the network, not a simulated network).
    pub(crate) fn reads_peer(&self, rank: u32) -> bool {
        self.sim.is_none() && !self.is_remote(rank) && self.shm.reaches(rank)
    }

    /// Reads `dst.len()` bytes at `off` of `src` (a peer's segment) straight from its memory,
    /// when that is memory of this node: one copy, no message, complete on return (GASNet's
    /// within-node get, PSHM's load). Returns `false` (nothing read) when `src` is across the
    /// network or on a simulated network, where only writes exist (the papers' hardware) and
    /// a get is a request whose handler writes the data back (`am`). Bounds and key are
    /// checked as for a put.
    pub(crate) fn read_peer(&self, src: &Handle, off: usize, dst: &mut [u8]) -> Result<bool> {
        if !self.reads_peer(src.rank()) {
            return Ok(false);
        }
        let (region, at) = self.mapped(src, off, dst.len())?;
        region.map.read(at, dst)?;
        Ok(true)
    }

    /// The mapping of `src` (a peer's segment) and the offset in it of `len` bytes at `off`,
    /// when that is memory of this node that this rank reads directly ([`World::read_peer`]);
    /// `None` across a network or on a simulated one. Handle, key and bounds checked.
    pub(crate) fn peer_mapping(
        &self,
        src: &Handle,
        off: usize,
        len: usize,
    ) -> Result<Option<(Arc<crate::transport::Region>, usize)>> {
        if !self.reads_peer(src.rank()) {
            return Ok(None);
        }
        self.mapped(src, off, len).map(Some)
    }

    /// The mapping of `h` (a segment of this node) and the offset in it of `len` bytes at
    /// `off`: handle, key and bounds checked, as for a put.
    fn mapped(
        &self,
        h: &Handle,
        off: usize,
        len: usize,
    ) -> Result<(Arc<crate::transport::Region>, usize)> {
        self.check_handle(h)?;
        let region = self.shm.resolve(h)?;
        let at = region.range(off, len)?;
        Ok((region, at))
    }

    /// A small put done with plain stores (the papers' PIO): at most [`INLINE_MAX`] bytes.
    pub fn put_inline(&self, dst: &Handle, off: usize, src: &[u8]) -> Result<()> {
        if src.len() > INLINE_MAX {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "inline put of {} bytes exceeds the inline limit of {INLINE_MAX} bytes; use put",
                    src.len()
                ),
            ));
        }
        self.check_handle(dst)?;
        if self.is_remote(dst.rank()) {
            // No stores into a peer's memory across a network: the same bytes as a put.
            return self.via(dst.rank()).put(dst, off, src);
        }
        self.shm.put_inline(dst, off, src)
    }

    /// Puts `src` at `off` in `dst`, then applies `op` to the signal word at `sig_off` in
    /// `sig`: a reader that sees the signal sees the data.
    ///
    /// Small messages should put the payload in the same cache line as the signal, payload
    /// first (see [`crate::fabric::line`]): then one line crosses between cores, and the
    /// reader who polls the signal already holds the data.
    #[inline]
    pub fn put_signal(
        &self,
        dst: &Handle,
        off: usize,
        src: &[u8],
        sig: &Handle,
        sig_off: usize,
        op: SignalOp,
    ) -> Result<()> {
        if !self.is_remote(dst.rank()) && !self.is_remote(sig.rank()) {
            if let Some(r) = self.shm.put_signal_fast(dst, off, src, sig, sig_off, op) {
                return r;
            }
        }
        self.check_handle(dst)?;
        self.check_handle(sig)?;
        self.via2(dst.rank(), sig.rank())
            .put_signal(dst, off, src, sig, sig_off, op)
    }

    /// Tells the CPU that this rank will soon write the cache line at `off` in `dst`'s segment,
    /// where `dst` is memory of this node: the line starts moving here now, and the store
    /// that comes later (a ring's next header line, written a packet or more ahead) does not
    /// stall on it. A hint: it changes nothing anyone reads, and does nothing across a network,
    /// on a simulated one (no virtual time is charged for it) or for a handle that is not good.
    #[inline]
    pub(crate) fn prefetch_for_write(&self, dst: &Handle, off: usize) {
        if self.sim.is_none() && !self.is_remote(dst.rank()) {
            self.shm.prefetch_for_write(dst, off);
        }
    }

    /// Writes packet `p` into `dst`'s segment: [`World::put`] of the body, [`World::put_signal`]
    /// of the line with the sequence word, then [`World::signal`] of the credit, except that a
    /// network sends them as one operation: libfabric as one message where it fits an eager
    /// one, the simulated network as one message (a chain of two descriptors where there is
    /// a body: one issue, the second descriptor's cost). The credit word is independent of
    /// the rest: a network sets it before the sequence word, shared memory after; a segment
    /// freed before the credit is set is not an error (the receiver took the packet and left).
    pub(crate) fn put_packet(&self, dst: &Handle, p: &Packet<'_>) -> Result<()> {
        if dst.rank() != self.rank {
            if let Some(s) = &self.sim {
                self.check_handle(dst)?;
                return s.put_packet(&self.shm, dst, p);
            }
            #[cfg(feature = "ofi")]
            if self.is_remote(dst.rank()) {
                if let Some(n) = &self.net {
                    self.check_handle(dst)?;
                    if n.put_packet(&self.shm, dst, p)? {
                        return Ok(());
                    }
                }
            }
        }
        if let Some((off, body)) = p.body {
            self.put(dst, off, body)?;
        }
        let ((off, line), (sig_off, v)) = (p.line, p.seq);
        self.put_signal(dst, off, line, dst, sig_off, SignalOp::Set(v))?;
        let Some((off, v)) = p.credit else {
            return Ok(());
        };
        // A peer that took the packet and then freed its segment needs no credit (as the
        // ring's separate credit writes, `pay_slow`).
        match self.signal(dst, off, SignalOp::Set(v)) {
            Err(e) if e.kind() == ErrorKind::InvalidHandle => Ok(()),
            r => r,
        }
    }

    /// Applies `op` to the signal word at `off` in `sig` (no data).
    pub fn signal(&self, sig: &Handle, off: usize, op: SignalOp) -> Result<()> {
        self.check_handle(sig)?;
        self.via(sig.rank()).signal(sig, off, op)
    }

    /// Strided put: `s.count` blocks of `s.block` bytes from `src` (stride `s.src_stride`)
    /// into `dst` starting at `off` (stride `s.dst_stride`). Both extents are checked before
    /// any byte moves, so a last block that would overrun writes nothing at all.
    pub fn put_strided(&self, dst: &Handle, off: usize, src: &[u8], s: Strided) -> Result<()> {
        let src_span = s.span(s.src_stride).filter(|&n| n <= src.len()).ok_or_else(|| {
            Error::new(
                ErrorKind::OutOfBounds,
                format!(
                    "strided put reads {} blocks of {} bytes with stride {} from a {}-byte source",
                    s.count, s.block, s.src_stride, src.len()
                ),
            )
        })?;
        debug_assert!(src_span <= src.len());
        let dst_span = s
            .span(s.dst_stride)
            .ok_or_else(|| out_of_bounds(dst, off, usize::MAX))?;
        self.check_handle(dst)?;
        self.via(dst.rank()).put_strided(dst, off, src, s, dst_span)
    }

    /// A remote (or local) 64-bit word, checked once (job, key, bounds, alignment), for
    /// custom protocols and atomics: operate on it with [`World::atomic`] or its methods.
    pub fn remote_word(&self, h: &Handle, off: usize) -> Result<RemoteWord> {
        if self.is_remote(h.rank()) {
            self.check_remote_word(h, off)?;
            return Ok(RemoteWord {
                handle: *h,
                off,
                region: None,
            });
        }
        let region = self.resolve(h)?;
        region.word(off)?;
        Ok(RemoteWord {
            handle: *h,
            off,
            region: Some(region),
        })
    }

    /// Applies `op` to a remote word; returns the value it held before (for `Load`, the
    /// value). Every change wakes the ranks waiting on the word, as a signal does.
    pub fn atomic(&self, w: &RemoteWord, op: AtomicOp) -> Result<u64> {
        self.check_handle(&w.handle)?;
        self.via(w.handle.rank()).atomic(&w.handle, w.off, op)
    }

    /// All earlier puts and signals of this rank are complete and visible at their targets.
    /// (On shared memory every put is complete on return; this is a full fence.) Fails if a
    /// network transport reports that one of them could not be delivered.
    pub fn quiet(&self) -> Result<()> {
        Transport::quiet(&self.shm)?;
        if let Some(s) = &self.sim {
            s.quiet()?;
        }
        #[cfg(feature = "ofi")]
        if let Some(n) = &self.net {
            n.quiet(&self.shm)?;
        }
        Ok(())
    }

    /// Orders earlier puts before later ones, without waiting for completion.
    pub fn fence(&self) {
        Transport::fence(&self.shm);
    }

    /// Makes progress on network work (incoming puts, signals and requests) without
    /// waiting; waits do this by themselves. Call it in long computations between tca calls
    /// to let peers' traffic into this rank through.
    pub fn progress(&self) -> Result<()> {
        if let Some(s) = &self.sim {
            s.progress()?;
        }
        #[cfg(feature = "ofi")]
        if let Some(n) = &self.net {
            n.progress(&self.shm)?;
        }
        self.check_monitor()
    }

    /// The job monitor's verdict (a job spanning nodes): an error naming a rank that died on
    /// another node.
    #[inline]
    fn check_monitor(&self) -> Result<()> {
        match &self.watch {
            Some(w) => w.check(),
            None => Ok(()),
        }
    }

    // ---- waiting ----------------------------------------------------------------------------

    /// Waits until the signal word at `off` in this rank's segment `seg` is at least `value`;
    /// returns the value seen. Fails with [`ErrorKind::PeerDied`] naming the rank if a peer
    /// dies meanwhile.
    #[inline]
    pub fn wait_until(&self, seg: &Segment, off: usize, value: u64) -> Result<u64> {
        let word = self.own_word(seg, off)?;
        self.wait_word(word, value, None, None)
    }

    /// [`World::wait_until`] for a word that only rank `by` raises (a ring's packet or credit
    /// word): when `by` is reached through the network, the wait sleeps on the network, which
    /// wakes it when something arrives, rather than on the word's futex, which only ranks
    /// writing through shared memory wake (see `World::sleeps_on_network`).
    #[inline]
    pub(crate) fn wait_raised_by(
        &self,
        seg: &Segment,
        off: usize,
        value: u64,
        by: u32,
    ) -> Result<u64> {
        let word = self.own_word(seg, off)?;
        self.wait_word(word, value, None, Some(by))
    }

    /// How long a blocking wait without a deadline of its own may sleep before it gives up
    /// with [`ErrorKind::Timeout`] naming the culprit: a peer of this node whose process is
    /// stopped, else (every rank on this node) the only other rank not waiting, else the rank
    /// it waited for where the layer knows it (collectives, two-sided messages, active
    /// messages). Set from `TCA_TIMEOUT` at start-up;
    /// `None` (the default): no limit, a dead peer is detected without one.
    pub fn timeout(&self) -> Option<Duration> {
        self.shm.timeout()
    }

    /// Sets [`World::timeout`] for this rank's later waits: a bound on how long a peer that is
    /// alive but stuck (stopped, or computing without calling tca) can hold this rank.
    pub fn set_timeout(&self, timeout: Option<Duration>) {
        self.shm.set_timeout(timeout);
    }

    /// [`World::wait_until`] with a timeout ([`ErrorKind::Timeout`] when it expires).
    pub fn wait_until_timeout(
        &self,
        seg: &Segment,
        off: usize,
        value: u64,
        timeout: Duration,
    ) -> Result<u64> {
        let word = self.own_word(seg, off)?;
        if let Some(s) = &self.sim {
            return s.wait(word, value, Some(timeout), None);
        }
        self.wait_word(word, value, Instant::now().checked_add(timeout), None)
    }

    #[inline]
    fn own_word<'a>(&self, seg: &'a Segment, off: usize) -> Result<&'a AtomicU64> {
        let h = seg.handle();
        if h.job() != self.job || h.rank() != self.rank {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "segment {} belongs to rank {} of job {:016x}, not to this rank",
                    h.segment(),
                    h.rank(),
                    h.job()
                ),
            ));
        }
        seg.region.word(off)
    }

    /// Waits until `word` (in this rank's memory) reaches `value`: the node transport's one
    /// wait loop, polling the network transport (if any) through its progress hook, and
    /// asking the job monitor (a job spanning nodes) after every sleep slice. `by`, if known,
    /// is the one rank that raises the word.
    #[inline]
    pub(crate) fn wait_word(
        &self,
        word: &AtomicU64,
        value: u64,
        deadline: Option<Instant>,
        by: Option<u32>,
    ) -> Result<u64> {
        if let Some(s) = &self.sim {
            // A host deadline means nothing in virtual time: the one caller with a timeout
            // (`wait_until_timeout`) passes it to the simulation itself, in virtual time.
            debug_assert!(deadline.is_none(), "host deadline in a simulated wait");
            return s.wait(word, value, None, None);
        }
        #[cfg(feature = "ofi")]
        if let Some(net) = &self.net {
            return self.wait_with_network(net, word, value, deadline, by);
        }
        #[cfg(not(feature = "ofi"))]
        let _ = by; // only a network sleeps elsewhere than on the word
        self.shm
            .wait_word(word, value, deadline, None, None, |verdict| {
                verdict.and_then(|()| self.check_monitor())
            })
    }

    /// Whether a wait for a word that `by` raises (if known) sleeps on the network rather than
    /// on the word's futex. A word raised through shared memory is raised by its writer, who
    /// wakes the futex at once; one raised through the network lands only when this rank
    /// polls, and a futex sleep would end at its nap. So: the network when the raiser is
    /// reached through it (`World::is_remote`), or, the raiser unknown, when every other rank
    /// is; the futex otherwise. (A word whose raiser is known has one: a ring's packet or
    /// credit word, a barrier's or exchange's step, a two-sided request's hint.)
    #[cfg(feature = "ofi")]
    fn sleeps_on_network(&self, net: &crate::transport::ofi::Ofi, by: Option<u32>) -> bool {
        network_wakes(
            by.map(|r| self.is_remote(r)),
            self.all_remote,
            net.can_block(),
        )
    }

    /// One turn of a wait's sleep on the network ([`Ofi::sleep_turn`]), counted.
    ///
    /// [`Ofi::sleep_turn`]: crate::transport::ofi::Ofi::sleep_turn
    #[cfg(feature = "ofi")]
    fn sleep_on_network(
        &self,
        net: &crate::transport::ofi::Ofi,
        d: Duration,
        turns: &crate::transport::ofi::QuickTurns,
    ) {
        self.net_sleeps.set(self.net_sleeps.get() + 1);
        net.sleep_turn(d, turns);
    }

    /// How many sleep turns this rank's waits for a word (signal, packet, credit, request
    /// hint) have spent on the network rather than on the word's futex: each a poll of the
    /// completion queue's descriptor, or, once a wait's turns look like a descriptor that
    /// never blocks (64 that returned at once over 2 ms with nothing completed, or 4,096 in
    /// all), a 50 us sleep. A diagnostic of where waits sleep: a rank sleeps on the network
    /// when the rank it waits for is reached through it (see `World::sleeps_on_network`). The
    /// network transport's own waits (remote atomics, gets, `quiet`) are not counted. 0
    /// without a network.
    pub fn network_sleeps(&self) -> u64 {
        self.net_sleeps.get()
    }

    /// Bytes this rank has put across the network so far, by the path they took (the seed's
    /// data modes: [`NetTransfers`]); all 0 without a network. Puts of this layer and of
    /// every layer above it (rings, collectives, active messages) count.
    pub fn net_transfers(&self) -> NetTransfers {
        #[cfg(feature = "ofi")]
        if let Some(n) = &self.net {
            return n.transfers();
        }
        NetTransfers::default()
    }

    /// The most sleep turns on the network ([`World::network_sleeps`]) that one wait lasting
    /// `waited` may take, whatever the provider's descriptor does: the turns that may return
    /// at once, one more, and one per 50 us sleep after them. 0 without a network.
    pub fn network_sleeps_bound(&self, waited: Duration) -> u64 {
        #[cfg(feature = "ofi")]
        if self.net.is_some() {
            return crate::transport::ofi::turns_bound(waited);
        }
        let _ = waited;
        0
    }

    #[cfg(feature = "ofi")]
    #[inline(never)]
    fn wait_with_network(
        &self,
        net: &crate::transport::ofi::Ofi,
        word: &AtomicU64,
        value: u64,
        deadline: Option<Instant>,
        by: Option<u32>,
    ) -> Result<u64> {
        use std::sync::atomic::Ordering;
        let poll = || net.progress(&self.shm).map(|()| false);
        let turns = crate::transport::ofi::QuickTurns::default();
        let block = |d: Duration| self.sleep_on_network(net, d, &turns);
        let progress = crate::transport::Progress {
            poll: &poll,
            nap: crate::transport::ofi::NAP,
            block: self
                .sleeps_on_network(net, by)
                .then_some(&block as &dyn Fn(Duration)),
        };
        self.shm
            .wait_word(word, value, deadline, None, Some(&progress), |verdict| {
                if let Err(e) = &verdict {
                    // Ranks that left may have sent what we wait for just before: it is in
                    // our sockets, not yet in our memory. Give it a moment to land.
                    if e.kind() == ErrorKind::Aborted {
                        let end = Instant::now() + Duration::from_millis(200);
                        while Instant::now() < end {
                            net.progress(&self.shm)?;
                            if word.load(Ordering::Acquire) >= value {
                                return Ok(());
                            }
                            std::thread::yield_now();
                        }
                    }
                }
                verdict.and_then(|()| self.check_monitor())
            })
    }

    /// Waits until the signal word at `off` in this rank's segment `seg` reaches `value`, or
    /// until `poll` (run on every spin and yield turn and at least every `nap` while asleep,
    /// after the network's own progress) says the caller's condition holds. The wait loop of
    /// the message engines: they sleep on the word their request most likely raises and make
    /// progress on everything else meanwhile. Returns the word's value when it ended.
    /// `patience` is the blocking operation's `TCA_TIMEOUT` clock: an operation that calls
    /// this in a loop passes the same one each time, so the timeout counts from its first
    /// sleep. `by`, if known, is the rank that raises the word: when it is reached through
    /// the network, the wait sleeps on the network rather than on the word (see
    /// [`World::wait_raised_by`]); the other events `poll` watches for are then seen within a
    /// nap.
    #[allow(clippy::too_many_arguments)] // one wait's full description
    pub(crate) fn wait_polling(
        &self,
        seg: &Segment,
        off: usize,
        value: u64,
        nap: Duration,
        patience: &Patience,
        poll: &dyn Fn() -> Result<bool>,
        by: Option<u32>,
    ) -> Result<u64> {
        let word = self.own_word(seg, off)?;
        if let Some(s) = &self.sim {
            return s.wait(word, value, None, Some(poll));
        }
        // With a network, its progress comes first on every turn, and naps are short enough
        // for it.
        #[cfg(feature = "ofi")]
        let (both, block, turns);
        #[cfg(feature = "ofi")]
        let (poll, nap, block): (_, _, Option<&dyn Fn(Duration)>) = match &self.net {
            Some(net) => {
                both = move || {
                    net.progress(&self.shm)?;
                    poll()
                };
                turns = crate::transport::ofi::QuickTurns::default();
                block = |d: Duration| self.sleep_on_network(net, d, &turns);
                let on_net = self.sleeps_on_network(net, by);
                let nap = nap.min(crate::transport::ofi::NAP);
                (
                    &both as &dyn Fn() -> Result<bool>,
                    nap,
                    on_net.then_some(&block as _),
                )
            }
            None => (poll, nap, None),
        };
        #[cfg(not(feature = "ofi"))]
        let block = {
            let _ = by; // only a network sleeps elsewhere than on the word
            None
        };
        let progress = crate::transport::Progress { poll, nap, block };
        self.shm.wait_word(
            word,
            value,
            None,
            Some(patience),
            Some(&progress),
            |verdict| verdict.and_then(|()| self.check_monitor()),
        )
    }

    /// Fails if the job was aborted, a peer died, or no peer is left that could signal.
    pub fn check_alive(&self) -> Result<()> {
        if let Some(s) = &self.sim {
            // A look at the peers: virtual time passes, and the others run meanwhile.
            s.progress()?;
        }
        self.shm.check_peers(true)?;
        self.check_monitor()
    }

    /// Records that this rank meets a fault of `culprit` found above the transports (a peer
    /// refusing a request for want of its own resources): if this rank fails of it, whoever
    /// aborts the job on its account names `culprit` (the node board's blame).
    pub(crate) fn blame(&self, culprit: u32) {
        self.shm.blame(culprit);
    }

    /// Aborts the whole job: every rank's next wait fails, naming this rank.
    pub fn abort(&self) {
        self.shm.abort();
        if let Some(kv) = &self.kv {
            kv.report(self.rank, &format!("rank {} aborted the job", self.rank));
        }
    }

    /// Aborts the whole job because of `cause`, an error this rank cannot recover from and its
    /// peers would wait on. If it is another rank's doing — its death or failure, its silence
    /// past `TCA_TIMEOUT`, or a segment of its that it freed (or never had) while this rank
    /// still wrote to it, as a rank that leaves in the middle of a collective does — the
    /// abort names that rank, or the first cause of its trouble where it recorded one on its
    /// node's board, so that every rank's error names the root whichever of them notices
    /// first; else this rank ([`World::abort`]).
    pub(crate) fn abort_after(&self, cause: &Error) {
        match (cause.kind(), cause.rank()) {
            (ErrorKind::PeerDied | ErrorKind::InvalidHandle | ErrorKind::Timeout, Some(r))
                if r != self.rank && r < self.size =>
            {
                let root = self.shm.abort_naming(r).unwrap_or(r);
                if let Some(kv) = &self.kv {
                    // The rank at fault: the other nodes' errors name it too.
                    kv.report(
                        root,
                        &format!(
                            "rank {} aborted the job after rank {root} died or failed",
                            self.rank
                        ),
                    );
                }
            }
            _ => self.abort(),
        }
    }

    /// Leaves the job cleanly after a barrier (like `MPI_Finalize`). Dropping the world
    /// without it also leaves cleanly, but without waiting for the others.
    pub fn finalize(self) -> Result<()> {
        // Everything this rank wrote is delivered, then everyone has done the same.
        let r = self.barrier();
        if r.is_err() {
            self.mark_failed();
        }
        r
    }

    pub(crate) fn mark_failed(&self) {
        self.shm.mark_failed();
        if let Some(s) = &self.sim {
            s.mark_failed();
        }
        if let Some(kv) = &self.kv {
            kv.report(
                self.rank,
                &format!("rank {} failed (it returned an error)", self.rank),
            );
        }
    }

    /// Applies `op` to a word of an attached node-local segment and wakes its sleepers.
    #[inline]
    pub(crate) fn raise(&self, word: &AtomicU64, owner: u32, op: SignalOp) {
        self.shm.raise(word, owner, op);
    }
}

impl Drop for World {
    fn drop(&mut self) {
        #[cfg(feature = "ofi")]
        if let Some(n) = &self.net {
            if !std::thread::panicking() {
                n.drain(&self.shm);
            }
        }
        if let Some(kv) = &self.kv {
            if std::thread::panicking() {
                kv.report(self.rank, &format!("rank {} panicked", self.rank));
            } else {
                kv.leave();
                if let Some(server) = &self._kv_server {
                    server.wait_done(Duration::from_secs(30));
                }
            }
        }
    }
}

/// The start of [`World::wtime`]'s host clock: the first time any rank of this process asks.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The node this process runs on: `TCA_NODE`, else the host name and the network namespace
/// (two namespaces of one host are two nodes to tca: what crosses between them is a network).
fn node_name() -> String {
    if let Ok(n) = std::env::var(env::NODE) {
        if !n.is_empty() {
            return n;
        }
    }
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let ns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{host}/{ns}")
}

/// A 64-bit word in some rank's segment, checked once, for remote atomics
/// ([`World::atomic`]).
#[derive(Debug, Clone)]
pub struct RemoteWord {
    handle: Handle,
    off: usize,
    /// The mapping, when the word is in memory of this node.
    region: Option<Arc<Region>>,
}

impl RemoteWord {
    /// The segment the word lies in.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The word's byte offset in that segment.
    pub fn offset(&self) -> usize {
        self.off
    }

    /// Reads the word.
    pub fn load(&self, world: &World) -> Result<u64> {
        world.atomic(self, AtomicOp::Load)
    }

    /// Stores `v` (and wakes waiters).
    pub fn store(&self, world: &World, v: u64) -> Result<()> {
        world.atomic(self, AtomicOp::Store(v)).map(|_| ())
    }

    /// Adds `v`; returns the old value.
    pub fn fetch_add(&self, world: &World, v: u64) -> Result<u64> {
        world.atomic(self, AtomicOp::FetchAdd(v))
    }

    /// Stores `v`; returns the old value.
    pub fn swap(&self, world: &World, v: u64) -> Result<u64> {
        world.atomic(self, AtomicOp::Swap(v))
    }

    /// Stores `new` if the word holds `current`: `Ok(current)` on success, `Err(found)` if
    /// it held another value.
    pub fn compare_exchange(
        &self,
        world: &World,
        current: u64,
        new: u64,
    ) -> Result<std::result::Result<u64, u64>> {
        let v = world.atomic(self, AtomicOp::CompareExchange { current, new })?;
        Ok(if v == current { Ok(v) } else { Err(v) })
    }

    /// The word itself, when it lies in memory this rank maps (shared memory on this node);
    /// `None` when it is reached through a network.
    ///
    /// For measuring the machine (`tca bench floor` bounces a cache line through it), not for
    /// signalling: a store through it wakes no sleeping waiter (they notice within one 10 ms
    /// sleep slice). Use [`World::atomic`] to change a word that others wait on.
    pub fn node_local(&self) -> Option<&AtomicU64> {
        self.region.as_ref()?.word(self.off).ok()
    }
}

/// The rule of `World::sleeps_on_network`: a wait for a word whose raiser is reached through
/// the network (`Some(true)`), through shared memory (`Some(false)`) or is unknown (`None`),
/// on a rank that reaches every other rank through the network (`all_remote`) or not, with a
/// network that can block a sleeper until something arrives (`can_block`: it offers a
/// descriptor) or not. A rank that shares its node sleeps on the network only if that wakes
/// it (else it would spin where it used to nap on the futex); a rank alone on its node (or in
/// `TCA_TRANSPORT=ofi`) has no futex waker, and always did.
#[cfg_attr(not(feature = "ofi"), allow(dead_code))] // the rule is tested in every build
fn network_wakes(raiser_remote: Option<bool>, all_remote: bool, can_block: bool) -> bool {
    let remote = raiser_remote.unwrap_or(all_remote);
    remote && (all_remote || can_block)
}

#[cfg(test)]
mod tests {
    use super::network_wakes;

    #[test]
    fn a_wait_sleeps_where_its_raiser_can_wake_it() {
        // A raiser through the network wakes only the network; one through shared memory, the
        // futex.
        assert!(network_wakes(Some(true), false, true));
        assert!(!network_wakes(Some(false), false, true));
        // Raiser unknown: the futex, unless every other rank is across the network.
        assert!(!network_wakes(None, false, true));
        assert!(network_wakes(None, true, true));
        assert!(network_wakes(Some(true), true, true));
        // A network without a descriptor to sleep on: a rank that shares its node naps on the
        // futex; one that does not has nothing else (it polls, as before).
        assert!(!network_wakes(Some(true), false, false));
        assert!(network_wakes(None, true, false));
    }
}
