//! The node proxy process: a serving thread per rank of the node, each the rank's world and
//! the serving loop of a progress thread over the rank's queues in shared memory.
//!
//! The `unsafe` here lends a rank's arena memory to an operation ([`Arenas::lend`]). What
//! makes that sound: every place is checked against this process's own record of the arena
//! (live, inside, aligned, whole elements); a freed arena stays mapped until no operation is
//! in flight; the rank's library posts only places its scope borrows for the operation
//! (shared or exclusive, as the operation reads or writes them) and waits for the answer
//! before the borrow ends, so nothing else in the rank touches them meanwhile; and an
//! operation whose send and receive places overlap is refused. The `Lent`/`LentMut` made
//! here is the owner's borrow for the operation; peers (other serving threads of this process,
//! or other processes) read or write a buffer arena in place only inside such an operation,
//! as for any buffer of a communicator (`coll::buffer`, "Why the views are sound"). A window
//! arena, which peers put into at any time, is never lent (`span` refuses it): only a chain
//! reads it, by copies.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::mpsc::TryRecvError;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::super::NAP;
use super::super::scope::{Lent, LentMut};
use super::super::serve::{self as served, Command, Done, Next, Queues, Start, WORLD, Work};
use super::channel::{Channel, Queue, Ring};
use super::entry::{
    ANY, Answer, Builtin, Descriptor, END, Entry, Kind, NO_ARENA, Place, WQ_ENTRY, What, leave_of,
    signal_of,
};
use super::{SLICE, var_u32};
use crate::bootstrap::{BoardSource, JobEnv, Meet, Rendezvous};
use crate::coll::Comm;
use crate::coll::Element;
use crate::coll::buffer::Registry;
use crate::env;
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::{Chain, Handle, Segment, World};
use crate::p2p::Status;

/// The body of the node proxy process that `tca run --offload` starts (`tca node-proxy`):
/// joins the job as every rank of the node, one serving thread each, and serves the ranks'
/// queues until every rank has stopped or gone. Its environment is the launcher's: on one
/// node `TCA_SIZE`, `TCA_JOB_ID`, `TCA_BOARD_FD`, `TCA_LAUNCHER_PID` and `TCA_PROXY_FD` (the
/// launcher's channel); across hosts `TCA_SIZE`, `TCA_JOB_ID`, `TCA_KV` (the rendezvous the
/// ranks' worlds meet at) and `TCA_PROXY_RANKS` (the ranks of this node), and then the proxy
/// makes the channel itself and says where it is on its standard output ([`READY`], its pid
/// and descriptor) before it joins. Returns the first error of a rank's serving (its rank was
/// marked failed: its peers' waits fail naming it).
pub fn serve_node() -> Result<()> {
    let size = var_u32(env::SIZE)?;
    let job = std::env::var(env::JOB_ID)
        .ok()
        .and_then(|j| u64::from_str_radix(j.trim(), 16).ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                format!("{} is not set to a job id", env::JOB_ID),
            )
        })?;
    let boot = crate::bootstrap::boot_deadline(&crate::env::Process)?;
    // Every rank's arenas are descriptors of this one process.
    raise_descriptor_limit();
    let (channel, ranks, join, _held) = match std::env::var(env::KV) {
        Ok(kv) => {
            // The launcher closes this proxy's standard input once every rank has ended
            // (through a remote shell too): a rank that never connected is then gone.
            std::thread::Builder::new()
                .name("tca-node-proxy-stdin".into())
                .spawn(|| {
                    let mut buf = [0u8; 64];
                    let mut stdin = std::io::stdin();
                    while matches!(std::io::Read::read(&mut stdin, &mut buf), Ok(n) if n > 0) {}
                    ENDED.store(true, std::sync::atomic::Ordering::Relaxed);
                })
                .map_err(|e| Error::os(ErrorKind::Launch, "watching standard input", e))?;
            let ranks = served_ranks(size)?;
            let (fd, channel) = Channel::create(size)?;
            // Where the ranks of this node find the channel: this process's descriptor.
            let mut out = std::io::stdout().lock();
            writeln!(out, "{READY} {} {}", std::process::id(), fd.as_raw_fd())
                .and_then(|()| out.flush())
                .map_err(|e| {
                    Error::os(
                        ErrorKind::Launch,
                        "telling the launcher where the channel is",
                        e,
                    )
                })?;
            (channel, ranks, Join::Kv(kv), Some(fd))
        }
        Err(_) => {
            let launcher = var_u32(env::LAUNCHER_PID)?;
            let board = var_u32(env::BOARD_FD)?;
            let channel = Channel::open(launcher, var_u32(env::PROXY_FD)?, size)?;
            (
                channel,
                (0..size).collect(),
                Join::Board(launcher, board),
                None,
            )
        }
    };
    let (channel, join) = (&channel, &join);
    let all = crate::threads::on_rank_threads(&ranks, "tca-node-proxy", |rank| {
        serve_rank(channel, rank, size, job, join, boot)
    });
    crate::threads::root_error(all).map(drop)
}

/// Set when the launcher closed this proxy's standard input (across hosts): every rank has
/// ended.
static ENDED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The first line a node proxy across hosts writes, then its pid and its descriptor of the
/// channel.
pub(crate) const READY: &str = "tca-node-proxy-ready";

/// How a serving thread's world meets the others.
enum Join {
    /// The launcher's board (pid, descriptor): one node.
    Board(u32, u32),
    /// The rendezvous at this address: a job across hosts.
    Kv(String),
}

/// `TCA_PROXY_RANKS`: the ranks this proxy serves.
fn served_ranks(size: u32) -> Result<Vec<u32>> {
    let bad = |m: String| Error::new(ErrorKind::Bootstrap, format!("{}: {m}", env::PROXY_RANKS));
    let list = std::env::var(env::PROXY_RANKS).map_err(|_| bad("not set".into()))?;
    let ranks = list
        .split(',')
        .map(|r| {
            r.trim()
                .parse::<u32>()
                .ok()
                .filter(|&r| r < size)
                .ok_or_else(|| bad(format!("`{r}` is not a rank below {size}")))
        })
        .collect::<Result<Vec<u32>>>()?;
    if ranks.is_empty() {
        return Err(bad("no ranks".into()));
    }
    Ok(ranks)
}

/// Joins the job as `rank` and serves its queues.
fn serve_rank(
    channel: &Channel,
    rank: u32,
    size: u32,
    job: u64,
    join: &Join,
    boot_deadline: Instant,
) -> Result<()> {
    let q = Served::new(channel, rank)?;
    let world = match join {
        Join::Board(launcher, board) => crate::transport::open_inherited(*launcher, *board)
            .and_then(|fd| {
                World::join(JobEnv {
                    rank,
                    size,
                    job,
                    board: BoardSource::Fd(fd),
                    source: "tca run --offload",
                    boot_deadline,
                    kv: None,
                })
            }),
        Join::Kv(addr) => World::join(JobEnv {
            rank,
            size,
            job,
            board: BoardSource::Node,
            source: "tca run --offload --hosts",
            boot_deadline,
            kv: Some(Rendezvous {
                at: Meet::Addr(addr.clone()),
                serve: false,
                owner: None,
            }),
        }),
    };
    let world = match world {
        Ok(w) => w,
        Err(e) => {
            q.answer(Done {
                id: 0,
                result: Err(e.clone()),
            });
            let e = Err(e);
            q.end(&e);
            return e;
        }
    };
    let r = served::serve(world, &q);
    // The stop's answer: the rank's world has left (or how it failed).
    if let Some(id) = q.stop.get() {
        q.answer(Done {
            id,
            result: r.clone().map(|()| Status::send()),
        });
    }
    q.end(&r);
    r
}

/// Raises this process's soft limit of open descriptors to its hard limit.
fn raise_descriptor_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    if l.current != l.maximum {
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
}

/// A rank's queues as the proxy sees them, and its arenas.
struct Served<'a> {
    rank: u32,
    channel: &'a Channel,
    wq: Ring<'a>,
    cq: Ring<'a>,
    /// Shared with the allocations the serving loop runs as commands (with the communicator).
    arenas: Arc<Mutex<Arenas>>,
    /// Answers waiting for room in the completion queue (the proxy never waits for its rank).
    overflow: RefCell<VecDeque<Answer>>,
    /// The id of the rank's stop, once posted.
    stop: Cell<Option<u64>>,
    /// When the rank's liveness was last looked at.
    looked: Cell<Instant>,
    /// The rank's process, watched through its pidfd once the launcher has written its pid.
    proc: RefCell<Option<crate::process::Proc>>,
    /// How long an idle thread sleeps while it holds answers the rank has not made room for.
    held_nap: Cell<Duration>,
    /// The allocation being served (its answer carries the arena's handle).
    alloc_id: Cell<Option<u64>>,
    /// The rank's chains, by number.
    chains: Arc<Mutex<Vec<Option<Held>>>>,
}

/// A chain the proxy holds for a rank, and its sources (arena, handle), which must still be
/// the rank's windows when it starts.
type Held = (Chain, Vec<(u32, [u8; Handle::BYTES])>);

impl<'a> Served<'a> {
    fn new(channel: &'a Channel, rank: u32) -> Result<Self> {
        Ok(Self {
            rank,
            channel,
            wq: channel.queue(rank, Queue::Work)?,
            cq: channel.queue(rank, Queue::Completion)?,
            arenas: Arc::default(),
            overflow: RefCell::new(VecDeque::new()),
            stop: Cell::new(None),
            looked: Cell::new(Instant::now()),
            proc: RefCell::new(None),
            held_nap: Cell::new(NAP),
            alloc_id: Cell::new(None),
            chains: Arc::default(),
        })
    }

    /// Whether the rank's process is still there (not yet started, as far as we know: yes).
    fn rank_alive(&self) -> bool {
        let mut proc = self.proc.borrow_mut();
        if proc.is_none() {
            // The launcher writes the pid on one node; across hosts the rank's claim is all
            // there is.
            let pid = self.channel.rank_pid(self.rank).and_then(|p| {
                if p == 0 {
                    self.channel.owner(self.rank)
                } else {
                    Ok(p)
                }
            });
            match pid {
                // Not connected (yet): alive unless the launcher said its ranks have ended.
                Ok(0) => return !ENDED.load(std::sync::atomic::Ordering::Relaxed),
                Ok(pid) => match crate::process::Proc::open(pid) {
                    Ok(p) => *proc = Some(p),
                    // No pidfd (descriptors short, say): asked without one, and the pidfd
                    // tried again next time.
                    Err(_) => return crate::process::exists(pid),
                },
                Err(_) => return false,
            }
        }
        proc.as_ref().is_some_and(|p| !p.gone())
    }

    /// `rank_alive`, looked at no more often than every slice.
    fn rank_gone(&self) -> bool {
        if self.looked.get().elapsed() < SLICE {
            return false;
        }
        self.looked.set(Instant::now());
        !self.rank_alive()
    }

    /// Moves what overflowed into the completion queue while there is room.
    fn flush(&self) {
        let mut o = self.overflow.borrow_mut();
        while let Some(a) = o.front() {
            match self.cq.push(bytemuck::bytes_of(a)) {
                Ok(true) => {
                    o.pop_front();
                }
                _ => break,
            }
        }
    }

    /// The serving thread ends with `r`: its last answer ([`END`]) tells the rank, and every
    /// answer still held goes into the queue while the rank is alive to take them.
    fn end(&self, r: &Result<()>) {
        self.reply(Answer::of(END, &r.clone().map(|()| Status::send())));
        loop {
            self.flush();
            if self.overflow.borrow().is_empty() || !self.rank_alive() {
                return;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    fn reply(&self, a: Answer) {
        let mut o = self.overflow.borrow_mut();
        if o.is_empty() && matches!(self.cq.push(bytemuck::bytes_of(&a)), Ok(true)) {
            return;
        }
        o.push_back(a);
    }

    /// The next work item of the queue, serving the command channel's entries on the way.
    fn take(&self) -> Option<Work> {
        let mut raw = [0u8; WQ_ENTRY];
        loop {
            if !matches!(self.wq.pop(&mut raw), Ok(true)) {
                return None;
            }
            let e: Entry = bytemuck::pod_read_unaligned(&raw);
            match e.kind() {
                Some(Kind::Start) if e.what == What::StartChain as u8 => {
                    match self.chain_start(&e) {
                        Ok(f) => return Some(Work::Run(e.id, WORLD, f)),
                        Err(err) => self.answer(Done {
                            id: e.id,
                            result: Err(err),
                        }),
                    }
                }
                Some(Kind::Start) => match self.start_of(&e) {
                    Ok(f) => return Some(Work::Start(e.id, e.comm, f)),
                    Err(err) => self.answer(Done {
                        id: e.id,
                        result: Err(err),
                    }),
                },
                Some(Kind::Cancel) => return Some(Work::Cancel(e.id)),
                Some(Kind::Stop) => {
                    self.stop.set(Some(e.id));
                    return Some(Work::Stop(leave_of(e.what)));
                }
                Some(Kind::Alloc) => {
                    // A segment of the rank's world, so it needs the communicator: a command.
                    let (arenas, len, window) = (self.arenas.clone(), e.send.len, e.what == 1);
                    self.alloc_id.set(Some(e.id));
                    return Some(Work::Run(
                        e.id,
                        WORLD,
                        Box::new(move |c| locked(&arenas).alloc(c, len, window)),
                    ));
                }
                Some(Kind::Control) => match self.control_of(&e) {
                    Ok(f) => return Some(Work::Run(e.id, e.comm, f)),
                    Err(err) => self.answer(Done {
                        id: e.id,
                        result: Err(err),
                    }),
                },
                Some(Kind::Split) => {
                    return Some(Work::Split {
                        id: e.id,
                        parent: e.comm,
                        color: (e.peer != ANY).then_some(e.peer),
                        key: i64::from_le_bytes(e.arg.to_le_bytes()),
                    });
                }
                Some(Kind::FreeComm) => return Some(Work::Free(e.id, e.comm)),
                Some(Kind::Chain) => match self.chain_build(&e) {
                    Ok(f) => return Some(Work::Run(e.id, WORLD, f)),
                    Err(err) => self.answer(Done {
                        id: e.id,
                        result: Err(err),
                    }),
                },
                Some(Kind::FreeChain) => {
                    let r = locked(&self.chains)
                        .get_mut(e.peer as usize)
                        .and_then(Option::take)
                        .map(|_| Status::send())
                        .ok_or_else(|| no_chain(e.peer));
                    self.answer(Done {
                        id: e.id,
                        result: r,
                    });
                }
                Some(Kind::Free) => {
                    let r = locked(&self.arenas).free(e.send.arena());
                    self.answer(Done {
                        id: e.id,
                        result: r.map(|()| Status::send()),
                    });
                }
                None => self.answer(Done {
                    id: e.id,
                    result: Err(Error::new(
                        ErrorKind::InvalidArgument,
                        format!("the node proxy got an entry of unknown kind {}", e.kind),
                    )),
                }),
            }
        }
    }

    /// The control request `e` carries, run with the rank's communicator between polls.
    fn control_of(&self, e: &Entry) -> Result<Command> {
        let arenas = locked(&self.arenas);
        disjoint(e.send, e.recv)?;
        let request = arenas.lend::<u8>(e.send)?;
        let reply = arenas.lend_mut::<u8>(e.recv)?;
        Ok(Box::new(move |c| {
            let text = String::from_utf8_lossy(request.get()).into_owned();
            let out = crate::offload::control::run(c, &text)?;
            let reply = reply.get();
            let n = out.len().min(reply.len());
            reply[..n].copy_from_slice(&out.as_bytes()[..n]);
            Ok(Status {
                source: 0,
                tag: 0,
                bytes: n,
            })
        }))
    }

    /// The building of the chain `e` describes: its descriptors, copied out of the rank's
    /// arena now, become a chain of the rank's world (every range and handle checked there)
    /// with the rank's arenas as sources.
    fn chain_build(&self, e: &Entry) -> Result<Command> {
        let bytes = locked(&self.arenas).lend::<u8>(e.send)?.get().to_vec();
        let n = e.peer as usize;
        let size = std::mem::size_of::<Descriptor>();
        if bytes.len() != n.saturating_mul(size) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "a chain of {n} steps is {} bytes of descriptors, got {}",
                    n.saturating_mul(size),
                    bytes.len()
                ),
            ));
        }
        let steps: Vec<Descriptor> = bytes
            .chunks_exact(size)
            .map(bytemuck::pod_read_unaligned)
            .collect();
        let (arenas, chains) = (self.arenas.clone(), self.chains.clone());
        Ok(Box::new(move |c| {
            let chain = locked(&arenas).chain(c.world_ref(), &steps)?;
            let sources = steps
                .iter()
                .filter(|d| d.signal == 0)
                .map(|d| (d.src_arena, d.src))
                .collect();
            let mut chains = locked(&chains);
            let k = match chains.iter().position(Option::is_none) {
                Some(k) => k,
                None => {
                    chains.push(None);
                    chains.len() - 1
                }
            };
            chains[k] = Some((chain, sources));
            Ok(Status {
                source: crate::cast::rank_u32(k),
                tag: 0,
                bytes: 0,
            })
        }))
    }

    /// The start of chain `e.peer` (complete when answered: its puts are in their
    /// destinations).
    fn chain_start(&self, e: &Entry) -> Result<Command> {
        let op = signal_of(e.op, e.arg)?;
        let (chains, arenas, k) = (self.chains.clone(), self.arenas.clone(), e.peer);
        Ok(Box::new(move |c| {
            let world = c.world_ref();
            let chains = locked(&chains);
            let (chain, sources) = chains
                .get(k as usize)
                .and_then(Option::as_ref)
                .ok_or_else(|| no_chain(k))?;
            // Its sources are still the rank's windows (the chain keeps a freed one's memory
            // mapped, but what it would read is no longer the rank's).
            let arenas = locked(&arenas);
            if let Some((a, _)) = sources.iter().find(|(a, h)| !arenas.is_window(*a, h)) {
                return Err(Error::new(
                    ErrorKind::InvalidHandle,
                    format!("chain {k} reads arena {a}, a window the rank has dropped"),
                ));
            }
            world.start_with(chain, op)?;
            world.quiet()?;
            Ok(Status::send())
        }))
    }

    /// The start of the operation `e` describes, its buffers checked against the arenas.
    fn start_of(&self, e: &Entry) -> Result<Start> {
        let what = What::from_u8(e.what).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("the node proxy got an operation of unknown code {}", e.what),
            )
        })?;
        let arenas = locked(&self.arenas);
        macro_rules! typed {
            ($($t:ty),*) => {$(
                if e.dtype == <$t as Element>::CODE {
                    return typed::<$t>(what, e, &arenas);
                }
            )*};
        }
        typed!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);
        Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "the node proxy got buffers of unknown type code {}",
                e.dtype
            ),
        ))
    }
}

/// The start of `what` on buffers of `T`.
fn typed<T: Builtin>(what: What, e: &Entry, arenas: &Arenas) -> Result<Start> {
    disjoint(e.send, e.recv)?;
    let send = arenas.lend::<T>(e.send)?;
    let recv = arenas.lend_mut::<T>(e.recv)?;
    let (peer, tag) = (e.peer, e.tag);
    Ok(match what {
        What::Barrier => Box::new(|s| s.ibarrier()),
        What::Broadcast => Box::new(move |s| s.ibroadcast(recv.get(), peer)),
        What::Scatter => Box::new(move |s| s.iscatter(send.get(), recv.get(), peer)),
        What::Gather => Box::new(move |s| s.igather(send.get(), recv.get(), peer)),
        What::Reduce => {
            let op = T::builtin(e.op)?;
            Box::new(move |s| s.ireduce(send.get(), recv.get(), op, peer))
        }
        What::Allgather => Box::new(move |s| s.iallgather(send.get(), recv.get())),
        What::Allreduce => {
            let op = T::builtin(e.op)?;
            Box::new(move |s| s.iallreduce(send.get(), recv.get(), op))
        }
        What::AllreduceInPlace => {
            let op = T::builtin(e.op)?;
            Box::new(move |s| s.iallreduce_in_place(recv.get(), op))
        }
        What::ReduceScatter => {
            let op = T::builtin(e.op)?;
            Box::new(move |s| s.ireduce_scatter(send.get(), recv.get(), op))
        }
        What::Alltoall => Box::new(move |s| s.ialltoall(send.get(), recv.get())),
        What::Send => Box::new(move |s| s.comm().isend(send.get(), peer, tag)),
        What::Recv => {
            let (src, tag) = (e.source(), e.tag());
            Box::new(move |s| s.comm().irecv(recv.get(), src, tag))
        }
        What::AllgathervInPlace => {
            let displs = Place::unpacked(e.arg, e.send.len);
            disjoint(displs, e.recv)?;
            // Read now: the collective takes its own copies when it starts.
            let counts = usizes(arenas.lend::<u64>(e.send)?.get())?;
            let displs = usizes(arenas.lend::<u64>(displs)?.get())?;
            Box::new(move |s| s.iallgatherv_in_place(recv.get(), &counts, &displs))
        }
        What::StartChain => {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a chain's start is not a typed operation",
            ));
        }
    })
}

impl Queues for Served<'_> {
    fn next(&self, tick: Option<Duration>) -> Next {
        // Nothing in flight: what the rank freed meanwhile can go now.
        locked(&self.arenas).retired.clear();
        let start = Instant::now();
        loop {
            self.flush();
            if let Some(w) = self.take() {
                return Next::Work(w);
            }
            if self.rank_gone() {
                return Next::Gone;
            }
            if tick.is_some_and(|t| start.elapsed() >= t) {
                return Next::Idle;
            }
            // Answers held for room in the completion queue: look again soon (the rank's
            // takes ring no bell here), less often the longer the rank takes none.
            let held = !self.overflow.borrow().is_empty();
            let nap = if held { self.held_nap.get() } else { SLICE };
            self.wq.sleep(tick.map_or(nap, |t| nap.min(t)));
            let before = self.overflow.borrow().len();
            self.flush();
            self.held_nap.set(if self.overflow.borrow().len() < before {
                NAP
            } else {
                (nap * 2).min(SLICE)
            });
        }
    }

    fn poll(&self, nap: Option<Duration>) -> std::result::Result<Work, TryRecvError> {
        self.flush();
        if let Some(w) = self.take() {
            return Ok(w);
        }
        let Some(t) = nap else {
            return Err(TryRecvError::Empty);
        };
        if self.rank_gone() {
            return Err(TryRecvError::Disconnected);
        }
        self.wq.sleep(t);
        self.take().ok_or(TryRecvError::Empty)
    }

    fn answer(&self, d: Done) {
        let a = Answer::of(d.id, &d.result);
        if self.alloc_id.get() == Some(d.id) {
            self.alloc_id.set(None);
            if let Some(h) = locked(&self.arenas).announce.take() {
                return self.reply(a.with_payload(&h.to_bytes()));
            }
        }
        self.reply(a);
    }

    fn rank_waiting(&self) -> bool {
        self.channel.waiting(self.rank)
    }

    fn adopt(&self, c: &Comm<'_>) {
        // Every member's communicator offers buffers before it serves anything, so all take
        // the same branch of each large collective: the arenas are read in place.
        locked(&self.arenas).registry = Some(c.offer_buffers());
    }
}

/// One arena: a segment of the rank's world, and where its data lies in this process.
struct Arena {
    seg: Segment,
    addr: usize,
    /// A window: peers put into it at any time, so it is never lent to an operation (no
    /// reference is ever made into it); only chains read it, as a source.
    window: bool,
}

/// A rank's arenas, as the proxy maps them.
#[derive(Default)]
struct Arenas {
    live: Vec<Option<Arena>>,
    /// Freed by the rank while operations were in flight: unmapped once none is (an
    /// operation that named it then could not outlive its memory).
    retired: Vec<Arena>,
    /// The rank's communicator's buffers, where the arenas are registered.
    registry: Option<Registry>,
    /// The handle of the arena just made, for its answer.
    announce: Option<Handle>,
}

/// The arenas or chains, whoever holds them (the serving thread only: the lock is never
/// contended).
fn locked<T>(a: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    a.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Arenas {
    /// A new arena of `len` bytes: a segment of the rank's world, registered as a buffer of
    /// its communicator (so large collectives read it in place). Answered with its number (in
    /// `source`) and this process's descriptor of it (in `tag`).
    fn alloc(&mut self, c: &Comm<'_>, len: u64, window: bool) -> Result<Status> {
        let bytes = usize::try_from(len).map_err(|_| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("an arena of {len} bytes does not fit this machine"),
            )
        })?;
        let slot = match self.live.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.live.len() < NO_ARENA as usize => {
                self.live.push(None);
                self.live.len() - 1
            }
            None => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "rank {} holds {NO_ARENA} arenas already: free some first",
                        c.world_ref().rank()
                    ),
                ));
            }
        };
        let seg = c.world_ref().alloc(bytes)?;
        let (fd, addr) = seg.node_view()?;
        let fd = i32::try_from(fd)
            .map_err(|_| Error::new(ErrorKind::Transport, "descriptor out of range"))?;
        if !window && let Some(r) = &self.registry {
            r.adopt(&seg, addr);
        }
        self.announce = Some(seg.handle());
        self.live[slot] = Some(Arena { seg, addr, window });
        Ok(Status {
            source: crate::cast::rank_u32(slot),
            tag: fd,
            bytes: 0,
        })
    }

    fn free(&mut self, arena: u32) -> Result<()> {
        let a = self
            .live
            .get_mut(arena as usize)
            .and_then(Option::take)
            .ok_or_else(|| no_arena(arena))?;
        if !a.window
            && let Some(r) = &self.registry
        {
            r.remove(a.addr);
        }
        self.retired.push(a);
        Ok(())
    }

    /// Whether `arena` is a live window with handle `h`.
    fn is_window(&self, arena: u32, h: &[u8; Handle::BYTES]) -> bool {
        matches!(self.live.get(arena as usize), Some(Some(a)) if a.window && a.seg.handle().to_bytes() == *h)
    }

    /// A chain of `world` from `steps`, its sources the live arenas they name.
    fn chain(&self, world: &World, steps: &[Descriptor]) -> Result<Chain> {
        let mut b = world.chain();
        for d in steps {
            let h = Handle::from_bytes(&d.handle)?;
            b = match signal_of(d.signal, d.value)? {
                Some(op) => b.signal(&h, as_usize(d.off), op),
                None => {
                    // The source is the window the rank named, still its: its handle matches
                    // (an arena number alone could be a later arena's).
                    let src = match self.live.get(d.src_arena as usize) {
                        Some(Some(a)) if self.is_window(d.src_arena, &d.src) => &a.seg,
                        _ => {
                            return Err(Error::new(
                                ErrorKind::InvalidHandle,
                                format!(
                                    "a chain's source is not a live window of the rank (arena \
                                     {}): was it dropped before the chain was built?",
                                    d.src_arena
                                ),
                            ));
                        }
                    };
                    b.put(
                        src,
                        as_usize(d.src_off),
                        &h,
                        as_usize(d.off),
                        as_usize(d.len),
                    )
                }
            };
        }
        b.build()
    }

    /// The memory at `p`, checked: its arena is live, the range lies inside it, and it holds
    /// whole, aligned `T`s.
    fn span<T>(&self, p: Place) -> Result<NonNull<[T]>> {
        let size = std::mem::size_of::<T>();
        if p.len == 0 {
            return Ok(NonNull::slice_from_raw_parts(NonNull::dangling(), 0));
        }
        let (arena, off) = (p.arena(), p.off());
        let a = match self.live.get(arena as usize) {
            Some(Some(a)) if !a.window => a,
            Some(Some(_)) => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "arena {arena} is a window (peers put into it at any time): it is \
                         reached by copies, never lent to an operation"
                    ),
                ));
            }
            _ => return Err(no_arena(arena)),
        };
        let fits = off
            .checked_add(p.len)
            .is_some_and(|end| end <= a.seg.len() as u64);
        let at = usize::try_from(off).unwrap_or(usize::MAX);
        if !fits || at % std::mem::align_of::<T>() != 0 || p.len % size as u64 != 0 {
            return Err(Error::new(
                ErrorKind::OutOfBounds,
                format!(
                    "{} bytes at {off} of arena {arena} (of {} bytes) are not whole elements \
                     inside it",
                    p.len,
                    a.seg.len()
                ),
            ));
        }
        let n = usize::try_from(p.len).unwrap_or(usize::MAX) / size;
        let start = NonNull::new((a.addr as *mut u8).wrapping_add(at).cast::<T>())
            .ok_or_else(|| no_arena(arena))?;
        Ok(NonNull::slice_from_raw_parts(start, n))
    }

    fn lend<T: Element>(&self, p: Place) -> Result<Lent<[T]>> {
        let span = self.span::<T>(p)?;
        // SAFETY: `span` checked the range lies in a live arena (mapped until no operation is
        // in flight after its free), aligned, whole elements; the rank lent it for the
        // operation's scope and does not write it meanwhile.
        Ok(unsafe { Lent::from_raw(span) })
    }

    fn lend_mut<T: Element>(&self, p: Place) -> Result<LentMut<[T]>> {
        let span = self.span::<T>(p)?;
        // SAFETY: as `lend`; the rank lent it exclusively, and `typed` refused a send buffer
        // that overlaps it.
        Ok(unsafe { LentMut::from_raw(span) })
    }
}

/// Refuses a send and a receive place that overlap: the one is lent shared, the other
/// exclusively.
fn disjoint(a: Place, b: Place) -> Result<()> {
    let overlap = a.len != 0
        && b.len != 0
        && a.arena() == b.arena()
        && a.off() < b.off().saturating_add(b.len)
        && b.off() < a.off().saturating_add(a.len);
    if overlap {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "an operation's send and receive buffers overlap (use the in-place form)",
        ));
    }
    Ok(())
}

/// Counts or displacements from the rank, as this machine's sizes.
fn usizes(v: &[u64]) -> Result<Vec<usize>> {
    v.iter()
        .map(|&x| {
            usize::try_from(x).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("{x} elements do not fit this machine"),
                )
            })
        })
        .collect()
}

/// An offset or length from the rank (one beyond this machine is out of every range).
fn as_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

fn no_chain(k: u32) -> Error {
    Error::new(
        ErrorKind::InvalidHandle,
        format!("the rank has no chain {k} at its node proxy"),
    )
}

fn no_arena(arena: u32) -> Error {
    Error::new(
        ErrorKind::InvalidHandle,
        format!("the rank has no arena {arena} at its node proxy"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_send_and_receive_places_are_refused() {
        let p = |arena, off, len| Place::new(arena, off, len).unwrap();
        assert!(disjoint(p(0, 0, 64), p(0, 64, 64)).is_ok());
        assert!(disjoint(p(0, 0, 64), p(1, 0, 64)).is_ok());
        assert!(
            disjoint(p(0, 0, 64), p(0, 32, 0)).is_ok(),
            "an empty place overlaps nothing"
        );
        assert!(disjoint(Place::EMPTY, p(0, 0, 8)).is_ok());
        assert!(disjoint(p(0, 0, 65), p(0, 64, 64)).is_err());
        assert!(disjoint(p(2, 100, 8), p(2, 96, 8)).is_err());
    }
}
