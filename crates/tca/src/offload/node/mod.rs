//! The node proxy (seed 004's host proxy on today's machines): one process per node, started
//! by the launcher (`tca run --offload`; across hosts one per host, through the launcher's
//! agent), holds the world of every rank of the node and serves their queues in shared
//! memory. A rank posts entries to its work queue and takes answers
//! from its completion queue ([`Proxy::connect`]); it has no world of its own, so a rank that
//! only computes still completes its collectives: the proxy runs them.
//!
//! # Shape
//! - The **channel** ([`channel`]): one memfd that the launcher makes (across hosts: the
//!   proxy) and both sides open, a slot per rank with its work queue and completion queue
//!   (fixed-size entries, a doorbell word each, never waiting on the other side except when
//!   full), stamped with the entries' protocol version.
//! - The **proxy process** ([`serve_node`]): a serving thread per rank, each joining the job
//!   as that rank and running the same serving loop as a progress thread
//!   (`offload::serve`), with the rank's queues decoded from shared memory.
//! - **Buffers** cannot be pointers into another process, so a rank's buffers come from
//!   **arenas**: segments of the rank's world that the proxy allocates on the rank's behalf
//!   through the queues (the seed's command channel: [`Proxy::alloc`]) and both map (the rank
//!   their data only, not the segment's header). They are registered as buffers of the rank's
//!   communicator, as [`crate::Comm::buffer`]'s are, so its large collectives read them in
//!   place (one copy per byte). An operation names its buffers
//!   as places in the rank's arenas ([`entry::Place`]); the proxy checks every place against
//!   its own record of the arenas before it touches a byte, and refuses an operation whose
//!   send and receive buffers overlap. That no two operations in flight share a buffer one of
//!   them writes is the rank's borrow checker's guarantee (scopes borrow what they post), as
//!   for a progress thread; a process that wrote its queue by hand could break it, as unsafe
//!   code could.
//! - **Reductions** cross as the code of a built-in operation; a program's own function
//!   stays with a progress thread.
//! - **Communicators** other than the world's are made by the proxy (`Kind::Split`) and named
//!   by their index in each entry.
//! - **One-sided puts** (module `window`): windows are arenas that peers put into, which this
//!   process reaches by copies only; a chain is a list of [`entry::Descriptor`]s the rank
//!   writes into an arena (the seed's descriptors in memory), which the proxy checks and
//!   builds into a chain of the rank's world once (`Kind::Chain`) and starts whenever the
//!   rank posts `What::StartChain`. An allocation's answer carries the arena's handle.
//!
//! # Faults
//! The launcher writes each rank's pid into its slot (across hosts the rank's claim of its
//! slot carries it); a serving thread whose rank is gone
//! cancels the rank's sends and receives and leaves the job for it (dropped; the launcher has
//! already aborted the job if the rank failed, so its peers' waits fail naming it). A serving
//! thread that ends for any reason (stopped, or an error of its own such as `TCA_TIMEOUT`)
//! sends a last answer ([`END`]) that fails whatever its rank still waits for, with that
//! reason. A rank waiting for its proxy looks at the proxy's pidfd at every sleep slice; a
//! proxy that died fails every pending operation with an error naming it, and the launcher
//! stops the job. Each slot is claimed by one connection: a second is refused.

mod buf;
mod channel;
mod entry;
mod serve;
mod window;

use std::cell::{Cell, RefCell};
use std::time::Duration;

pub use buf::ProxyBuf;
pub(crate) use channel::{Channel, Queue};
pub(crate) use entry::{ANY, END, Entry, Kind, What, op_code};
pub(crate) use serve::READY;
pub use serve::serve_node;
pub(crate) use window::thread_has_world;
pub use window::{ProxyChain, ProxyChainBuilder, ProxyWindow};

use super::serve::{CommId, Done, Leave};
use super::{Link, Msg, Proxy};
use crate::coll::Element;
use crate::env;
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::Handle;
use crate::transport::NodeMemory;
use entry::{Answer, CQ_ENTRY, Place};

/// How long a rank or a serving thread sleeps on its queue before looking whether the other
/// side is still alive.
pub(crate) const SLICE: Duration = Duration::from_millis(10);

/// Whether this process is a rank of a job with a node proxy (`tca run --offload`).
pub(crate) fn offloaded() -> bool {
    std::env::var_os(env::PROXY_FD).is_some()
}

/// The error for a rank of an offloaded job that asks for a world of its own.
pub(crate) fn no_world_here() -> Error {
    Error::new(
        ErrorKind::Bootstrap,
        "this rank was started by `tca run --offload`: its world lives in the node's proxy \
         process; connect to it with `tca::offload::Proxy::connect()` (or \
         `Proxy::from_env()`), or run without --offload",
    )
}

/// The number in `name`, which the launcher sets.
pub(crate) fn var_u32(name: &str) -> Result<u32> {
    env::parse::<u32>(name)?.ok_or_else(|| {
        Error::new(
            ErrorKind::Bootstrap,
            format!("{name} is not set: this process was not started by `tca run --offload`"),
        )
    })
}

/// A rank's end of the node proxy.
#[derive(Debug)]
pub(crate) struct Client {
    channel: Channel,
    rank: u32,
    proxy_pid: u32,
    /// The proxy process, watched through its pidfd.
    proxy: crate::process::Proc,
    /// This rank's arenas: (number, address, bytes) of each mapping.
    arenas: RefCell<Vec<(u32, usize, usize)>>,
    /// A stop has been posted.
    stopping: Cell<bool>,
    /// The payload of the last answer that carried one (an allocation's handle), by id.
    payload: RefCell<Option<(u64, Vec<u8>)>>,
    /// `TCA_TIMEOUT`: how long a window's wait may last.
    pub(crate) timeout: Option<Duration>,
}

impl Client {
    /// Opens this rank's slot of the channel the launcher made: (client, rank, size).
    pub(crate) fn connect() -> Result<(Self, u32, u32)> {
        let (rank, size) = (var_u32(env::RANK)?, var_u32(env::SIZE)?);
        let (fd, proxy_pid) = (var_u32(env::PROXY_FD)?, var_u32(env::PROXY_PID)?);
        // The channel is the launcher's descriptor on one node, the proxy's across hosts.
        let holder = if std::env::var_os(env::KV).is_some() {
            proxy_pid
        } else {
            var_u32(env::LAUNCHER_PID)?
        };
        if rank >= size {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!("{}={rank} is not below {}={size}", env::RANK, env::SIZE),
            ));
        }
        let channel = Channel::open(holder, fd, size)?;
        let proxy = crate::process::Proc::open(proxy_pid).map_err(|e| {
            let why = if crate::process::exists(proxy_pid) {
                format!(
                    "cannot watch the node proxy (pid {proxy_pid}): {}",
                    e.message()
                )
            } else {
                format!("the node proxy (pid {proxy_pid}) is gone")
            };
            Error::new(ErrorKind::PeerDied, why)
        })?;
        channel.claim(rank, std::process::id())?;
        Ok((
            Self {
                channel,
                rank,
                proxy_pid,
                proxy,
                arenas: RefCell::new(Vec::new()),
                stopping: Cell::new(false),
                payload: RefCell::new(None),
                timeout: env::timeout()?,
            },
            rank,
            size,
        ))
    }

    pub(crate) fn try_push(&self, e: &Entry) -> Result<bool> {
        self.channel
            .queue(self.rank, Queue::Work)?
            .push(bytemuck::bytes_of(e))
    }

    /// The next answer, if one has come.
    pub(crate) fn try_take(&self) -> Result<Option<Done>> {
        let mut a = [0u8; CQ_ENTRY];
        if !self
            .channel
            .queue(self.rank, Queue::Completion)?
            .pop(&mut a)?
        {
            return Ok(None);
        }
        let a: Answer = bytemuck::pod_read_unaligned(&a);
        let p = a.payload();
        if !p.is_empty() {
            *self.payload.borrow_mut() = Some((a.id, p.to_vec()));
        }
        Ok(Some(Done {
            id: a.id,
            result: a.result(),
        }))
    }

    /// Sleeps on the completion queue for at most a slice.
    pub(crate) fn sleep(&self) {
        if let Ok(cq) = self.channel.queue(self.rank, Queue::Completion) {
            cq.sleep(SLICE);
        }
    }

    pub(crate) fn proxy_alive(&self) -> bool {
        !self.proxy.gone()
    }

    /// Tells the proxy whether this rank waits for an answer.
    pub(crate) fn set_waiting(&self, on: bool) {
        let _ = self.channel.set_waiting(self.rank, on);
    }

    /// The first call says yes: post the stop.
    pub(crate) fn stop_once(&self) -> bool {
        !self.stopping.replace(true)
    }

    /// Whether a stop was posted.
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.get()
    }

    /// Why a stopped proxy takes no more work.
    pub(crate) fn stopped(&self) -> Error {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("rank {}'s node proxy was stopped", self.rank),
        )
    }

    pub(crate) fn gone(&self) -> Error {
        Error::new(
            ErrorKind::PeerDied,
            format!(
                "the node proxy (pid {}) serving rank {} has ended",
                self.proxy_pid, self.rank
            ),
        )
    }

    /// Where `s` lies in this rank's arenas.
    pub(crate) fn place<T>(&self, s: &[T]) -> Result<Place> {
        let len = std::mem::size_of_val(s);
        if len == 0 {
            return Ok(Place::EMPTY);
        }
        let at = s.as_ptr() as usize;
        self.arenas
            .borrow()
            .iter()
            .find(|&&(_, a, n)| at >= a && at + len <= a + n)
            .map(|&(arena, a, _)| Place::new(arena, (at - a) as u64, len as u64))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    "a buffer of an operation posted to the node proxy must lie in memory from \
                     `Proxy::alloc` (the proxy is another process: it reaches only that)",
                )
            })?
    }
}

impl Entry {
    pub(crate) fn stop(id: u64, how: Leave) -> Self {
        Self {
            id,
            what: entry::leave_code(how),
            ..Self::new(Kind::Stop)
        }
    }

    pub(crate) fn cancel(id: u64) -> Self {
        Self {
            id,
            ..Self::new(Kind::Cancel)
        }
    }
}

/// [`Proxy::alloc`].
pub(super) fn alloc<T: Element>(proxy: &Proxy, n: usize) -> Result<ProxyBuf<'_, T>> {
    let bytes = n.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("{n} elements of {} overflow the address space", T::NAME),
        )
    })?;
    if !matches!(proxy.link, Link::Node(_)) || bytes == 0 {
        return Ok(ProxyBuf::heap(proxy, n));
    }
    let (arena, map, _) = arena(proxy, bytes, false)?;
    Ok(ProxyBuf::arena(proxy, arena, map, n))
}

/// [`Proxy::window`].
pub(super) fn window(proxy: &Proxy, bytes: usize) -> Result<ProxyWindow<'_>> {
    if !matches!(proxy.link, Link::Node(_)) {
        return Err(thread_has_world("a window"));
    }
    if bytes == 0 {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "a window of 0 bytes takes no puts",
        ));
    }
    let (arena, map, handle) = arena(proxy, bytes, true)?;
    let Some(handle) = handle else {
        free(proxy, arena);
        return Err(Error::new(
            ErrorKind::Transport,
            "the node proxy answered a window's allocation without its handle",
        ));
    };
    Ok(ProxyWindow::new(proxy, arena, map, handle))
}

/// A new arena of `bytes` bytes (more than 0; a window or a buffer) made by the node proxy:
/// its number, this process's mapping of its data, its handle.
fn arena(proxy: &Proxy, bytes: usize, window: bool) -> Result<(u32, NodeMemory, Option<Handle>)> {
    let Link::Node(c) = &proxy.link else {
        return Err(thread_has_world("an arena"));
    };
    let id = proxy.post(|id| {
        let mut e = Entry::new(Kind::Alloc);
        e.id = id;
        e.what = u8::from(window);
        e.send.len = bytes as u64;
        Msg::Entry(e)
    })?;
    // The answer: the arena's number, the proxy's descriptor of it, its handle.
    let st = proxy.wait_for(id)?;
    let arena = st.source;
    let handle = match c.payload.borrow_mut().take() {
        Some((i, p)) if i == id => Handle::from_bytes(&p).ok(),
        _ => None,
    };
    // A segment of the rank's world in the proxy: its data.
    let mapped = u32::try_from(st.tag)
        .map_err(|_| Error::new(ErrorKind::Transport, "the node proxy sent no descriptor"))
        .and_then(|fd| NodeMemory::open_segment_data(c.proxy_pid, fd, bytes))
        .map(|m| (m, handle));
    let (map, h) = match mapped {
        Ok(m) => m,
        Err(e) => {
            free(proxy, arena);
            return Err(e);
        }
    };
    c.arenas.borrow_mut().push((arena, map.addr(), bytes));
    Ok((arena, map, h))
}

/// [`Proxy::control`] through the node proxy: the request and the reply in arenas.
pub(super) fn control(proxy: &Proxy, comm: CommId, request: &str) -> Result<String> {
    let mut req = alloc::<u8>(proxy, request.len())?;
    req.copy_from_slice(request.as_bytes());
    let reply = alloc::<u8>(proxy, super::control::REPLY_MAX)?;
    let Link::Node(c) = &proxy.link else {
        return Err(Error::new(ErrorKind::InvalidArgument, "not a node proxy"));
    };
    let (send, recv) = (c.place(&req)?, c.place(&reply)?);
    let st = proxy.request(|id| {
        let mut e = Entry::new(Kind::Control);
        (e.id, e.comm, e.send, e.recv) = (id, comm, send, recv);
        Msg::Entry(e)
    })?;
    let n = st.bytes.min(reply.len());
    Ok(String::from_utf8_lossy(&reply[..n]).into_owned())
}

/// Gives arena `arena` back to the proxy (its buffer is gone).
pub(super) fn free(proxy: &Proxy, arena: u32) {
    let Link::Node(c) = &proxy.link else { return };
    c.arenas.borrow_mut().retain(|&(a, ..)| a != arena);
    // An ended proxy has let go of everything already.
    let _ = proxy.request(|id| {
        let mut e = Entry::new(Kind::Free);
        e.id = id;
        e.send = Place::new(arena, 0, 0).unwrap_or(Place::EMPTY);
        Msg::Entry(e)
    });
}
