//! The node proxy process: a serving thread per rank of the node, each the rank's world and
//! the serving loop of a progress thread over the rank's queues in shared memory.
//!
//! The `unsafe` here lends a rank's arena memory to an operation ([`Arenas::lend`]). What
//! makes that sound: every place is checked against this process's own record of the arena
//! (live, inside, aligned, whole elements); a freed arena stays mapped until no operation is
//! in flight; the rank's library posts only places its scope borrows for the operation
//! (shared or exclusive, as the operation reads or writes them) and waits for the answer
//! before the borrow ends, so nothing else in the rank touches them meanwhile; and an
//! operation whose send and receive places overlap is refused.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::mpsc::TryRecvError;
use std::time::{Duration, Instant};

use super::super::NAP;
use super::super::scope::{Lent, LentMut};
use super::super::serve::{self as served, Command, Done, Queues, Start, Work};
use super::channel::{Channel, Queue, Ring};
use super::entry::{Answer, Builtin, END, Entry, Kind, NO_ARENA, Place, WQ_ENTRY, What, leave_of};
use super::{SLICE, var_u32};
use crate::bootstrap::{BoardSource, JobEnv};
use crate::coll::Element;
use crate::env;
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::World;
use crate::p2p::Status;
use crate::transport::shm::mapping::Mapping;
use crate::transport::shm::memfd;

/// The body of the node proxy process that `tca run --offload` starts (`tca node-proxy`):
/// joins the job as every rank of the node, one serving thread each, and serves the ranks'
/// queues until every rank has stopped or gone. Its environment is the launcher's
/// (`TCA_SIZE`, `TCA_JOB_ID`, `TCA_BOARD_FD`, `TCA_LAUNCHER_PID`, `TCA_PROXY_FD`). Returns
/// the first error of a rank's serving (its rank was marked failed: its peers' waits fail
/// naming it).
pub fn serve_node() -> Result<()> {
    let size = var_u32(env::SIZE)?;
    let launcher = var_u32(env::LAUNCHER_PID)?;
    let board = var_u32(env::BOARD_FD)?;
    let job = std::env::var(env::JOB_ID)
        .ok()
        .and_then(|j| u64::from_str_radix(j.trim(), 16).ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                format!("{} is not set to a job id", env::JOB_ID),
            )
        })?;
    let channel = Channel::open(launcher, var_u32(env::PROXY_FD)?, size)?;
    let boot = crate::bootstrap::boot_deadline(&crate::env::Process)?;
    // Every rank's arenas are descriptors of this one process.
    raise_descriptor_limit();
    let channel = &channel;
    let all: Vec<Result<()>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..size)
            .map(|rank| {
                std::thread::Builder::new()
                    .name(format!("tca-node-proxy-{rank}"))
                    .spawn_scoped(s, move || {
                        serve_rank(channel, rank, size, job, (launcher, board), boot)
                    })
            })
            .collect();
        threads
            .into_iter()
            .enumerate()
            .map(|(rank, t)| match t {
                Err(e) => Err(Error::os(
                    ErrorKind::Launch,
                    format!("starting the node proxy's thread for rank {rank}"),
                    e,
                )),
                Ok(t) => t
                    .join()
                    .unwrap_or_else(|p| Err(served::panicked(crate::cast::rank_u32(rank), &*p))),
            })
            .collect()
    });
    crate::threads::root_error(all).map(drop)
}

/// Joins the job as `rank` and serves its queues.
fn serve_rank(
    channel: &Channel,
    rank: u32,
    size: u32,
    job: u64,
    (launcher, board): (u32, u32),
    boot_deadline: Instant,
) -> Result<()> {
    let q = Served::new(channel, rank)?;
    let world = crate::transport::open_inherited(launcher, board).and_then(|fd| {
        World::join(JobEnv {
            rank,
            size,
            job,
            board: BoardSource::Fd(fd),
            source: "tca run --offload",
            boot_deadline,
            kv: None,
        })
    });
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
    arenas: RefCell<Arenas>,
    /// Answers waiting for room in the completion queue (the proxy never waits for its rank).
    overflow: RefCell<VecDeque<Answer>>,
    /// The id of the rank's stop, once posted.
    stop: Cell<Option<u64>>,
    /// When the rank's liveness was last looked at.
    looked: Cell<Instant>,
    /// The rank's process, watched through its pidfd once the launcher has written its pid.
    proc: RefCell<Option<crate::process::Proc>>,
}

impl<'a> Served<'a> {
    fn new(channel: &'a Channel, rank: u32) -> Result<Self> {
        Ok(Self {
            rank,
            channel,
            wq: channel.queue(rank, Queue::Work)?,
            cq: channel.queue(rank, Queue::Completion)?,
            arenas: RefCell::new(Arenas::default()),
            overflow: RefCell::new(VecDeque::new()),
            stop: Cell::new(None),
            looked: Cell::new(Instant::now()),
            proc: RefCell::new(None),
        })
    }

    /// Whether the rank's process is still there (not yet started, as far as we know: yes).
    fn rank_alive(&self) -> bool {
        let mut proc = self.proc.borrow_mut();
        if proc.is_none() {
            match self.channel.rank_pid(self.rank) {
                Ok(0) => return true,
                Ok(pid) => match crate::process::Proc::open(pid) {
                    Ok(p) => *proc = Some(p),
                    Err(_) => return false,
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
                Some(Kind::Start) => match self.start_of(&e) {
                    Ok(f) => return Some(Work::Start(e.id, f)),
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
                    let r = self.arenas.borrow_mut().alloc(self.rank, e.send.len);
                    let mut a = Answer::of(
                        e.id,
                        &r.as_ref().map(|_| Status::send()).map_err(Clone::clone),
                    );
                    if let Ok((arena, fd)) = r {
                        // The arena's number and descriptor, as the answer's status.
                        a.source = arena;
                        a.tag = i32::try_from(fd).unwrap_or(-1);
                    }
                    self.reply(a);
                }
                Some(Kind::Control) => match self.control_of(&e) {
                    Ok(f) => return Some(Work::Run(e.id, f)),
                    Err(err) => self.answer(Done {
                        id: e.id,
                        result: Err(err),
                    }),
                },
                Some(Kind::Free) => {
                    let r = self.arenas.borrow_mut().free(e.send.arena());
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
        let arenas = self.arenas.borrow();
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

    /// The start of the operation `e` describes, its buffers checked against the arenas.
    fn start_of(&self, e: &Entry) -> Result<Start> {
        let what = What::from_u8(e.what).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("the node proxy got an operation of unknown code {}", e.what),
            )
        })?;
        let arenas = self.arenas.borrow();
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
    })
}

impl Queues for Served<'_> {
    fn next(&self) -> Option<Work> {
        // Nothing in flight: what the rank freed meanwhile can go now.
        self.arenas.borrow_mut().retired.clear();
        loop {
            self.flush();
            if let Some(w) = self.take() {
                return Some(w);
            }
            if self.rank_gone() {
                return None;
            }
            // Answers held for room in the completion queue: look again soon (the rank's
            // takes ring no bell here).
            let held = !self.overflow.borrow().is_empty();
            self.wq.sleep(if held { NAP } else { SLICE });
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
        self.reply(Answer::of(d.id, &d.result));
    }

    fn rank_waiting(&self) -> bool {
        self.channel.waiting(self.rank)
    }
}

/// A rank's arenas, as the proxy maps them.
#[derive(Default)]
struct Arenas {
    live: Vec<Option<(OwnedFd, Mapping)>>,
    /// Freed by the rank while operations were in flight: unmapped once none is (an
    /// operation that named it then could not outlive its memory).
    retired: Vec<Mapping>,
}

impl Arenas {
    /// A new arena of `len` bytes for `rank`: its number and this process's descriptor.
    fn alloc(&mut self, rank: u32, len: u64) -> Result<(u32, u32)> {
        let bytes = usize::try_from(len).map_err(|_| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("an arena of {len} bytes does not fit this machine"),
            )
        })?;
        let fd = memfd::create(&format!("arena-{rank}"), bytes)?;
        let map = Mapping::map(&fd, bytes)?;
        let raw = u32::try_from(fd.as_raw_fd())
            .map_err(|_| Error::new(ErrorKind::Transport, "negative descriptor"))?;
        let slot = match self.live.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.live.len() < NO_ARENA as usize => {
                self.live.push(None);
                self.live.len() - 1
            }
            None => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("rank {rank} holds {NO_ARENA} arenas already: free some first"),
                ));
            }
        };
        self.live[slot] = Some((fd, map));
        Ok((crate::cast::rank_u32(slot), raw))
    }

    fn free(&mut self, arena: u32) -> Result<()> {
        let slot = self
            .live
            .get_mut(arena as usize)
            .and_then(Option::take)
            .ok_or_else(|| no_arena(arena))?;
        self.retired.push(slot.1);
        Ok(())
    }

    /// The memory at `p`, checked: its arena is live, the range lies inside it, and it holds
    /// whole, aligned `T`s.
    fn span<T>(&self, p: Place) -> Result<NonNull<[T]>> {
        let size = std::mem::size_of::<T>();
        if p.len == 0 {
            return Ok(NonNull::slice_from_raw_parts(NonNull::dangling(), 0));
        }
        let (arena, off) = (p.arena(), p.off());
        let map = match self.live.get(arena as usize) {
            Some(Some((_, m))) => m,
            _ => return Err(no_arena(arena)),
        };
        let fits = off
            .checked_add(p.len)
            .is_some_and(|end| end <= map.len() as u64);
        let at = usize::try_from(off).unwrap_or(usize::MAX);
        if !fits || at % std::mem::align_of::<T>() != 0 || p.len % size as u64 != 0 {
            return Err(Error::new(
                ErrorKind::OutOfBounds,
                format!(
                    "{} bytes at {off} of arena {arena} (of {} bytes) are not whole elements \
                     inside it",
                    p.len,
                    map.len()
                ),
            ));
        }
        let n = usize::try_from(p.len).unwrap_or(usize::MAX) / size;
        let start = NonNull::new(map.as_ptr().wrapping_add(at).cast::<T>())
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

fn no_arena(arena: u32) -> Error {
    Error::new(
        ErrorKind::InvalidHandle,
        format!("the rank has no arena {arena} at its node proxy"),
    )
}
