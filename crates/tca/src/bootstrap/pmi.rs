//! The launcher's key-value directory: how rank 0 of a job that spans nodes tells the other
//! ranks where its start-up rendezvous ([`super::kv`]) listens, and which job id they share.
//!
//! MPI launchers give the processes they start a small key-value store shared by the job
//! (the "PMI"): a process puts a key, all meet at a barrier (a fence), then any process
//! reads any key. tca uses it once per world, at start-up, the way NCCL passes its unique id:
//! 1. rank 0 starts the rendezvous on a port the kernel picks (or `TCA_KV`'s), on every
//!    interface (IPv6 and IPv4 where the node has IPv6, else IPv4);
//! 2. it puts `tca-kv-N` (N counts the worlds this process made) = its node's id, its job
//!    id and the addresses it listens at: `TCA_KV`'s if given, else `TCA_KV_HOST` if that is
//!    an address of rank 0's node, else every address of its interfaces but loopback and
//!    link-local ones (within PMI-1's 1,024-byte values);
//! 3. every rank meets the others at the fence, and the others read the value and take rank
//!    0's job id (Hydra gives the nodes no common job name to derive one from);
//! 4. each rank connects to the rendezvous: at loopback if it shares rank 0's node, else at
//!    rank 0's addresses that are not also its own (a bridge such as docker0 has the same
//!    address on every host), in turn, until one answers or start-up times out.
//!
//! Two directories:
//! - **PMI-1** over the descriptor `PMI_FD` (MPICH's Hydra, `mpiexec`), the "simple PMI"
//!   wire protocol: lines of `cmd=... key=value` over a socket to the launcher's proxy. Pure
//!   Rust, always built. Under Hydra it also carries the job id when `TCA_KV` names the
//!   address.
//! - **PMIx** (Open MPI's `mpirun`) through the system client library, behind the cargo
//!   feature `pmix` (crate `tca-pmix`).
//!
//! # Leaving, and living beside an MPI in the same program
//! - A process that used PMI-1 must send `finalize` before it exits: Hydra's proxy kills the
//!   other processes of its node (and the job fails) when one closes its connection without
//!   (checked: `mpiexec.hydra -n 2` and a C program), and closes the connection once it has.
//!   So the connection is the process's, not a world's: opened by the first world that needs
//!   it, kept for the worlds after it (a process may make several in turn), and finalized when
//!   the process exits (an `atexit` handler, as MPICH's own client finalizes in
//!   `MPI_Finalize`). In a program that also uses MPICH, MPICH's `MPI_Finalize` (before
//!   `main` returns) says it first, and the word at exit finds the connection closed and is
//!   ignored (reasoned from the protocol; not tried beside MPICH). MPICH's `MPI_Init` before
//!   or after tca's start-up both worked with a C program that speaks the wire protocol
//!   beside MPICH 4.0. tca never changes the shared socket's
//!   options (it waits for answers with `poll`), so MPICH's own client reads it as before.
//! - PMIx likewise: initialised by the first world, kept, finalized at exit. (Finalized after
//!   each world's start-up and initialised again for the next, OpenPMIx 4.2's fence timed out
//!   on one node's processes under `mpirun`: the netns test's two worlds in turn, in CI.)
//!   Open MPI 4.1's `MPI_Init` fails in a process that initialised PMIx before it
//!   (`orte_init`: "getting local rank failed"), and works when it came first (both checked
//!   with C programs): a program that uses both calls `MPI_Init` before it joins a tca world
//!   that spans nodes, or sets `TCA_KV`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

/// The key rank 0 puts its rendezvous under (with the world's number in this process).
pub const KEY: &str = "tca-kv";

/// Worlds this process has met its job through a directory for: every rank makes its worlds
/// in the same order, so the N-th world of each uses key `tca-kv-N` (a directory may refuse
/// a key put twice).
static WORLDS: AtomicU32 = AtomicU32::new(0);

/// The longest value rank 0 puts: Hydra's PMI-1 values hold 1,024 bytes.
const VALUE_MAX: usize = 1000;

/// A launcher's key-value directory, as start-up found it in the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directory {
    /// PMI-1's wire protocol over descriptor `fd` (`PMI_FD`).
    Pmi1 {
        /// The descriptor the launcher opened for this process.
        fd: i32,
    },
    /// PMIx (needs the `pmix` feature to be opened).
    Pmix,
}

impl Directory {
    /// How errors name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pmi1 { .. } => "PMI-1 (PMI_FD)",
            Self::Pmix => "PMIx",
        }
    }
}

/// What rank 0 publishes: the id of its node, its job id, then where it listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Published {
    /// [`super::hash`] of rank 0's node name (`fabric::world::node_name`).
    pub node: u64,
    /// Rank 0's job id, which every rank takes.
    pub job: u64,
    /// Rank 0's addresses other nodes may reach, with the rendezvous's port (empty: none).
    pub addrs: Vec<SocketAddr>,
    /// The rendezvous's port, for ranks of rank 0's node (loopback).
    pub port: u16,
}

impl Published {
    /// `NODE@JOB@PORT@A:P,B:P`: no spaces, `=` or `;` (PMI-1 splits on them).
    fn encode(&self) -> String {
        let addrs: Vec<String> = self.addrs.iter().map(ToString::to_string).collect();
        format!(
            "{:016x}@{:016x}@{}@{}",
            self.node,
            self.job,
            self.port,
            addrs.join(",")
        )
    }

    fn decode(s: &str) -> Option<Self> {
        let mut it = s.trim().splitn(4, '@');
        let (node, job, port, addrs) = (it.next()?, it.next()?, it.next()?, it.next()?);
        let node = u64::from_str_radix(node, 16).ok()?;
        let job = u64::from_str_radix(job, 16).ok()?;
        let port = port.parse().ok()?;
        let addrs: Vec<SocketAddr> = if addrs.is_empty() {
            Vec::new()
        } else {
            addrs
                .split(',')
                .map(str::parse)
                .collect::<std::result::Result<_, _>>()
                .ok()?
        };
        Some(Self {
            node,
            job,
            addrs,
            port,
        })
    }

    /// The addresses a rank on node `mine` (its [`super::hash`]), whose own interfaces have
    /// `own` addresses, tries, in order: loopback on rank 0's node; elsewhere rank 0's
    /// addresses but loopback and those that are this host's too (all of those if every one
    /// is). Empty when rank 0 gave none another node can use.
    pub(crate) fn candidates(&self, mine: u64, own: &[IpAddr]) -> Vec<SocketAddr> {
        if mine == self.node {
            return vec![SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))];
        }
        let usable: Vec<SocketAddr> = self
            .addrs
            .iter()
            .copied()
            .filter(|a| !a.ip().is_loopback())
            .collect();
        let theirs: Vec<SocketAddr> = usable
            .iter()
            .copied()
            .filter(|a| !own.contains(&a.ip()))
            .collect();
        if theirs.is_empty() { usable } else { theirs }
    }
}

/// This host's addresses other hosts may reach: IPv4 but loopback and link-local
/// (169.254/16, which every host may have), and with `v6` IPv6 but loopback and link-local
/// (which need an interface to name).
pub(crate) fn own_addrs(v6: bool) -> Vec<IpAddr> {
    if_addrs::get_if_addrs()
        .map(|ifs| {
            ifs.into_iter()
                .map(|i| i.ip())
                .filter(|ip| match ip {
                    IpAddr::V4(a) => !a.is_loopback() && !a.is_link_local(),
                    IpAddr::V6(a) => v6 && !a.is_loopback() && (a.segments()[0] & 0xffc0) != 0xfe80,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What rank 0 listens at, for [`meet`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listening {
    /// The rendezvous's port.
    pub port: u16,
    /// Whether it accepts IPv6 too.
    pub v6: bool,
    /// The one address to publish (`TCA_KV`'s), else this node's.
    pub at: Option<SocketAddr>,
}

/// A directory connection of this process, opened by its first world that needs it, kept
/// for its life and finalized at its exit (see the module doc), and the process that opened
/// it (a forked child inherits it but is not the launcher's process).
struct Opened<T> {
    dir: T,
    pid: u32,
}

/// This process's PMI-1 connection.
static PMI1: Mutex<Option<Opened<Pmi1>>> = Mutex::new(None);
/// This process's PMIx client.
#[cfg(feature = "pmix")]
static PMIX: Mutex<Option<Opened<tca_pmix::Client>>> = Mutex::new(None);
/// Registers [`finalize_at_exit`] once.
static AT_EXIT: Once = Once::new();

/// Finalizes this process's directory connections (PMI-1's, PMIx's) that this process
/// opened; run by the C library when the process exits (returning from `main`, or
/// `std::process::exit` from any thread). A forked child inherits the handler and the
/// connections but is not the launcher's process: it says nothing. Never blocks on another
/// thread (a process may exit while one is inside start-up) and never unwinds into C.
extern "C" fn finalize_at_exit() {
    fn take<T>(m: &Mutex<Option<T>>) -> Option<T> {
        match m.try_lock() {
            Ok(mut g) => g.take(),
            Err(TryLockError::Poisoned(g)) => g.into_inner().take(),
            Err(TryLockError::WouldBlock) => None,
        }
    }
    let _ = std::panic::catch_unwind(|| {
        let me = std::process::id();
        if let Some(mut p) = take(&PMI1).filter(|p| p.pid == me) {
            p.dir.finalize();
        }
        #[cfg(feature = "pmix")]
        if let Some(c) = take(&PMIX) {
            if c.pid == me {
                drop(c); // PMIx_Finalize
            } else {
                std::mem::forget(c); // the parent's, not this child's, to finalize
            }
        }
    });
}

/// Registers [`finalize_at_exit`] with the C library, once per process.
#[allow(unsafe_code)] // atexit
fn finalize_at_exit_once() {
    AT_EXIT.call_once(|| {
        // SAFETY: `atexit` only records the address of a function that takes no arguments
        // and never unwinds (it catches panics). It runs on the thread that exits the process
        // (after `main`, or in `std::process::exit`), takes the connections' locks without
        // waiting, and does nothing in a forked child (which inherits it).
        if unsafe { libc::atexit(finalize_at_exit) } != 0 {
            // Without it, Hydra kills this node's other processes when this one exits, and
            // mpirun reports it as a failure: say so now rather than leave that unexplained.
            eprintln!(
                "tca: cannot register the launcher directory's finalize at exit (atexit \
                 failed): the launcher may stop this node's other ranks when this one exits"
            );
        }
    });
}

/// Through `dir`, for the world of rank `rank` whose job id is `job` on node `node` (its
/// name, as start-up tells nodes apart): rank 0 publishes where it listens (`listen`, `Some`
/// on rank 0 only); every rank meets the others at the fence; returns the addresses this
/// rank tries, in order, and rank 0's job id. Every call to the launcher ends by `deadline`.
pub(crate) fn meet(
    dir: Directory,
    (rank, job): (u32, u64),
    node: &str,
    listen: Option<Listening>,
    deadline: Instant,
) -> Result<(Vec<SocketAddr>, u64)> {
    let key = format!("{KEY}-{}", WORLDS.fetch_add(1, Ordering::Relaxed));
    let me = (rank, job);
    let met = match dir {
        Directory::Pmi1 { fd } => through(
            &PMI1,
            || Pmi1::open(fd, deadline),
            |p| exchange(p, &key, me, node, listen, deadline),
        ),
        Directory::Pmix => meet_pmix(&key, me, node, listen, deadline),
    };
    met.map_err(failing(dir, rank))
}

/// `f` on this process's connection in `held`, opened by `open` if no world has yet.
fn through<T, R>(
    held: &Mutex<Option<Opened<T>>>,
    open: impl FnOnce() -> Result<T>,
    f: impl FnOnce(&mut T) -> Result<R>,
) -> Result<R> {
    let mut held = held.lock().unwrap_or_else(PoisonError::into_inner);
    let opened = match held.take() {
        Some(o) => o,
        None => {
            let dir = open()?;
            finalize_at_exit_once();
            Opened {
                dir,
                pid: std::process::id(),
            }
        }
    };
    f(&mut held.insert(opened).dir)
}

/// How [`meet`]'s errors say what rank `rank` was doing through `dir`.
fn failing(dir: Directory, rank: u32) -> impl Fn(Error) -> Error {
    move |e: Error| {
        let what = if rank == 0 {
            "publishing rank 0's start-up address"
        } else {
            "reading rank 0's start-up address"
        };
        Error::new(
            e.kind(),
            format!(
                "rank {rank}: {what} through the launcher's {}: {e}",
                dir.name()
            ),
        )
    }
}

/// [`meet`] once the directory is open.
fn exchange(
    dir: &mut impl Kv,
    key: &str,
    (rank, job): (u32, u64),
    node: &str,
    listen: Option<Listening>,
    deadline: Instant,
) -> Result<(Vec<SocketAddr>, u64)> {
    if let Some(why) = dir.out_of_step() {
        return Err(Error::new(
            ErrorKind::Bootstrap,
            format!(
                "the connection to the launcher is out of step since an earlier start-up \
                 failed ({why})"
            ),
        ));
    }
    let node = super::hash(node);
    let mine = match listen {
        Some(l) => {
            let p = Published {
                node,
                job,
                addrs: publishable(l),
                port: l.port,
            };
            dir.put(key, &p.encode(), deadline)?;
            Some(p)
        }
        None => None,
    };
    dir.fence(deadline)?;
    let p = match mine {
        Some(p) => p,
        None => {
            let v = dir.get(0, key, deadline)?;
            Published::decode(&v).ok_or_else(|| {
                Error::peer(
                    ErrorKind::Bootstrap,
                    0,
                    format!("rank 0 published {v:?}, which is no rendezvous address"),
                )
            })?
        }
    };
    let addrs = p.candidates(node, &own_addrs(true));
    if addrs.is_empty() {
        return Err(Error::peer(
            ErrorKind::Bootstrap,
            0,
            format!(
                "rank {rank}: rank 0's node has no address another node can reach (only \
                 loopback, or link-local); set {}=HOST:PORT (an address of rank 0's node \
                 and a free port)",
                crate::env::KV
            ),
        ));
    }
    Ok((addrs, p.job))
}

/// The addresses rank 0 publishes (see the module doc), within [`VALUE_MAX`] once encoded.
fn publishable(l: Listening) -> Vec<SocketAddr> {
    if let Some(at) = l.at {
        return vec![at];
    }
    let own = own_addrs(l.v6);
    let named = std::env::var(crate::env::KV_HOST)
        .ok()
        .and_then(|h| super::kv::resolve(&format!("{}:0", h.trim())).ok())
        .map(|a| a.ip())
        .filter(|ip| own.contains(ip));
    let ips = named.map_or(own, |ip| vec![ip]);
    let mut out = Vec::new();
    let mut len = 60;
    for ip in ips {
        let a = SocketAddr::new(ip, l.port);
        len += a.to_string().len() + 1;
        if len > VALUE_MAX {
            break;
        }
        out.push(a);
    }
    out
}

/// An open directory: put, fence, get, each ending by a deadline.
trait Kv {
    /// Why the connection is out of step with the launcher, if it is (no later call can be
    /// trusted).
    fn out_of_step(&self) -> Option<&str> {
        None
    }
    fn put(&mut self, key: &str, value: &str, deadline: Instant) -> Result<()>;
    fn fence(&mut self, deadline: Instant) -> Result<()>;
    fn get(&mut self, rank: u32, key: &str, deadline: Instant) -> Result<String>;
}

/// [`meet`] through PMIx: the process's client, initialised by its first world.
#[cfg(feature = "pmix")]
fn meet_pmix(
    key: &str,
    me: (u32, u64),
    node: &str,
    listen: Option<Listening>,
    deadline: Instant,
) -> Result<(Vec<SocketAddr>, u64)> {
    let open = || tca_pmix::Client::init().map_err(pmix_err);
    through(&PMIX, open, |c| {
        exchange(c, key, me, node, listen, deadline)
    })
}

#[cfg(not(feature = "pmix"))]
fn meet_pmix(
    _key: &str,
    _me: (u32, u64),
    _node: &str,
    _listen: Option<Listening>,
    _deadline: Instant,
) -> Result<(Vec<SocketAddr>, u64)> {
    Err(Error::new(
        ErrorKind::Bootstrap,
        format!(
            "tca was built without PMIx: rebuild with `--features pmix` (Debian: \
             libpmix-dev), or set {}=HOST:PORT (rank 0's node, any free port)",
            crate::env::KV
        ),
    ))
}

#[cfg(feature = "pmix")]
fn pmix_err(e: tca_pmix::Error) -> Error {
    let kind = if e.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Bootstrap
    };
    Error::new(kind, e.to_string())
}

#[cfg(feature = "pmix")]
impl Kv for tca_pmix::Client {
    fn put(&mut self, key: &str, value: &str, _deadline: Instant) -> Result<()> {
        tca_pmix::Client::put(self, key, value).map_err(pmix_err)
    }

    fn fence(&mut self, deadline: Instant) -> Result<()> {
        tca_pmix::Client::fence(self, deadline.saturating_duration_since(Instant::now()))
            .map_err(pmix_err)
    }

    fn get(&mut self, rank: u32, key: &str, deadline: Instant) -> Result<String> {
        let limit = deadline.saturating_duration_since(Instant::now());
        tca_pmix::Client::get(self, rank, key, limit).map_err(pmix_err)
    }
}

impl Kv for Pmi1 {
    fn out_of_step(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    fn put(&mut self, key: &str, value: &str, deadline: Instant) -> Result<()> {
        let cmd = format!("cmd=put kvsname={} key={key} value={value}", self.kvs);
        self.call(&cmd, "put_result", deadline).map(drop)
    }

    fn fence(&mut self, deadline: Instant) -> Result<()> {
        self.call("cmd=barrier_in", "barrier_out", deadline)
            .map(drop)
    }

    fn get(&mut self, _rank: u32, key: &str, deadline: Instant) -> Result<String> {
        // PMI-1's keys are the job's, not a rank's.
        let cmd = format!("cmd=get kvsname={} key={key}", self.kvs);
        let r = self.call(&cmd, "get_result", deadline)?;
        field(&r, "value").map(str::to_string).ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                format!("PMI-1: {cmd:?} answered {r:?}"),
            )
        })
    }
}

/// PMI-1's simple wire protocol on the launcher's descriptor.
#[derive(Debug)]
pub(crate) struct Pmi1 {
    sock: UnixStream,
    /// Bytes read past the last answer's end.
    pending: Vec<u8>,
    kvs: String,
    /// Why a call failed, after which answers may come out of step (a late `barrier_out`,
    /// a `get_result` that names no key): later worlds are refused, `finalize` still said.
    broken: Option<String>,
}

/// Longest line read from the launcher (PMI-1's values are at most 1024 bytes).
const LINE_MAX: usize = 4096;

impl Pmi1 {
    fn open(fd: i32, deadline: Instant) -> Result<Self> {
        let mut p = Self {
            sock: UnixStream::from(dup(fd)?),
            pending: Vec::with_capacity(LINE_MAX),
            kvs: String::new(),
            broken: None,
        };
        p.call(
            "cmd=init pmi_version=1 pmi_subversion=1",
            "response_to_init",
            deadline,
        )?;
        let r = p.call("cmd=get_my_kvsname", "my_kvsname", deadline)?;
        p.kvs = field(&r, "kvsname")
            .ok_or_else(|| Error::new(ErrorKind::Bootstrap, format!("PMI-1 answered {r:?}")))?
            .to_string();
        Ok(p)
    }

    /// Says `finalize` and waits up to 2 s for the acknowledgement. Best effort: after
    /// MPICH's own finalize the launcher has closed the connection.
    fn finalize(&mut self) {
        let soon = Instant::now() + Duration::from_secs(2);
        let _ = self.call("cmd=finalize", "finalize_ack", soon);
    }

    /// Sends `cmd` and reads the answer `want` (`cmd=want ...`), failing on a non-zero `rc`
    /// or silence past `deadline`; after a failure the connection is marked out of step.
    fn call(&mut self, cmd: &str, want: &str, deadline: Instant) -> Result<String> {
        let r = self.call_once(cmd, want, deadline);
        if let Err(e) = &r {
            self.broken.get_or_insert_with(|| e.to_string());
        }
        r
    }

    fn call_once(&mut self, cmd: &str, want: &str, deadline: Instant) -> Result<String> {
        // Not write(2): a launcher that closed the connection must not raise SIGPIPE here.
        let line = format!("{cmd}\n");
        let mut rest = line.as_bytes();
        while !rest.is_empty() {
            let n = rustix::net::send(&self.sock, rest, rustix::net::SendFlags::NOSIGNAL).map_err(
                |e| Error::new(ErrorKind::Bootstrap, format!("PMI-1 write ({cmd:?}): {e}")),
            )?;
            rest = &rest[n..];
        }
        let line = self.read_line(cmd, deadline)?;
        if field(&line, "cmd") != Some(want) {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!("PMI-1: {cmd:?} answered {:?}", line.trim()),
            ));
        }
        match field(&line, "rc") {
            None | Some("0") => Ok(line.trim().to_string()),
            Some(rc) => Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "PMI-1: {cmd:?} failed, rc {rc} {}",
                    field(&line, "msg").unwrap_or("")
                ),
            )),
        }
    }

    /// The next line from the launcher (the answer to `cmd`), waiting with `poll` until
    /// `deadline`: the socket is shared with an MPI's own PMI client in the same process, so
    /// its options (blocking, timeouts) stay as the launcher made them. A line longer than
    /// [`LINE_MAX`] is an error, not a cut: its rest would be read as the next answer.
    fn read_line(&mut self, cmd: &str, deadline: Instant) -> Result<String> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let mut chunk = [0u8; 1024];
        loop {
            let end = self.pending.iter().position(|&b| b == b'\n');
            if end.unwrap_or(self.pending.len()) > LINE_MAX {
                return Err(Error::new(
                    ErrorKind::Bootstrap,
                    format!("PMI-1: the answer to {cmd:?} is longer than {LINE_MAX} bytes"),
                ));
            }
            if let Some(end) = end {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return Ok(String::from_utf8_lossy(&line).into_owned());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "PMI-1: no answer to {cmd:?} before the start-up timeout (a rank that \
                         never arrived? set {} to wait longer)",
                        crate::env::BOOT_TIMEOUT
                    ),
                ));
            }
            let wait = Timespec::try_from(left.min(Duration::from_secs(1))).unwrap_or_default();
            let mut fds = [PollFd::new(&self.sock, PollFlags::IN)];
            match poll(&mut fds, Some(&wait)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => {}
                Err(e) => {
                    return Err(Error::new(
                        ErrorKind::Bootstrap,
                        format!("PMI-1 poll ({cmd:?}): {e}"),
                    ));
                }
            }
            // Not a blocking read: another reader of the shared socket may have taken the data.
            match rustix::net::recv(&self.sock, &mut chunk, rustix::net::RecvFlags::DONTWAIT) {
                Ok((0, _)) => {
                    return Err(Error::new(
                        ErrorKind::Bootstrap,
                        format!("PMI-1: the launcher closed the connection at {cmd:?}"),
                    ));
                }
                Ok((n, _)) => self.pending.extend_from_slice(&chunk[..n.min(chunk.len())]),
                // Readable, then not: poll again.
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                Err(e) => {
                    return Err(Error::new(
                        ErrorKind::Bootstrap,
                        format!("PMI-1 read ({cmd:?}): {e}"),
                    ));
                }
            }
        }
    }
}

/// The value of `key` in a PMI-1 line `cmd=x key=value ...`.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
    })
}

/// A duplicate of this process's descriptor `fd` (the launcher's), checked to be a socket.
#[allow(unsafe_code)] // borrowing a descriptor number from the environment
fn dup(fd: i32) -> Result<std::os::fd::OwnedFd> {
    let bad = |why: String| {
        Error::new(
            ErrorKind::Bootstrap,
            format!("PMI_FD={fd} is not the launcher's socket: {why}"),
        )
    };
    if fd < 0 {
        return Err(bad("negative".into()));
    }
    // SAFETY: the descriptor is borrowed only for the two calls below, and tca never closes
    // it (the launcher opened it for this process; a program that closes it concurrently has
    // no PMI either). If `fd` is not open, both calls fail with EBADF and nothing else.
    let b = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let st = rustix::fs::fstat(b).map_err(|e| bad(e.to_string()))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
        return Err(bad("not a socket".into()));
    }
    rustix::io::fcntl_dupfd_cloexec(b, 0).map_err(|e| bad(e.to_string()))
}

/// [`meet`] through PMI-1 on a connection of its own (not the process's, which lives until
/// the process exits), finalized before it returns: for the fuzz target and the tests,
/// which speak to a fake launcher per call.
#[cfg(any(test, feature = "fuzzing"))]
fn meet_once(
    fd: i32,
    (rank, job): (u32, u64),
    node: &str,
    listen: Option<Listening>,
    deadline: Instant,
) -> Result<(Vec<SocketAddr>, u64)> {
    let fail = failing(Directory::Pmi1 { fd }, rank);
    let mut p = Pmi1::open(fd, deadline).map_err(&fail)?;
    let key = format!("{KEY}-0");
    let met = exchange(&mut p, &key, (rank, job), node, listen, deadline).map_err(fail);
    p.finalize();
    met
}

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_replies(data: &[u8]) -> bool {
    use std::io::Write;
    let Some((&first, replies)) = data.split_first() else {
        return false;
    };
    let (ours, mut theirs) = UnixStream::pair().expect("a socket pair");
    let replies = &replies[..replies.len().min(64 << 10)];
    theirs.write_all(replies).expect("room for the replies");
    theirs
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let fd = std::os::fd::AsRawFd::as_raw_fd(&ours);
    let (rank, listen) = if first % 2 == 0 {
        let l = Listening {
            port: 4000,
            v6: false,
            at: None,
        };
        (0, Some(l))
    } else {
        (1, None)
    };
    let soon = Instant::now() + Duration::from_secs(5);
    match meet_once(fd, (rank, 1), "fuzz", listen, soon) {
        Ok((addrs, _job)) => {
            assert!(!addrs.is_empty(), "no address from {replies:?}");
            true
        }
        Err(e) => {
            let m = e.to_string();
            assert!(m.contains("PMI-1") || m.contains("rank 0"), "{e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};

    #[test]
    fn published_addresses_round_trip_and_order_by_node() {
        let p = Published {
            node: 0xabc,
            job: 0x1234,
            addrs: vec![
                "10.0.0.1:4000".parse().unwrap(),
                "172.17.0.1:4000".parse().unwrap(),
                "[fd00::2]:4000".parse().unwrap(),
            ],
            port: 4000,
        };
        let s = p.encode();
        assert!(!s.contains([' ', '=', ';']), "{s}");
        assert_eq!(Published::decode(&s), Some(p.clone()));
        for bad in [
            "",
            "xyz@1@10.0.0.1:1",
            "abc@1@",
            "abc@1@10.0.0.1",
            "abc@10.0.0.1:1",
            "abc",
            "abc@1@x@",
            "abc@1@1@10.0.0.1",
            "abc@1@70000@",
        ] {
            assert_eq!(Published::decode(bad), None, "{bad}");
        }
        // On rank 0's node: loopback.
        assert_eq!(
            p.candidates(0xabc, &[]),
            vec!["127.0.0.1:4000".parse().unwrap()]
        );
        // Elsewhere: not the addresses this host has too (docker0's).
        let own: Vec<IpAddr> = vec!["172.17.0.1".parse().unwrap()];
        assert_eq!(
            p.candidates(1, &own),
            vec![
                "10.0.0.1:4000".parse().unwrap(),
                "[fd00::2]:4000".parse().unwrap()
            ]
        );
        let all: Vec<IpAddr> = p.addrs.iter().map(SocketAddr::ip).collect();
        assert_eq!(p.candidates(1, &all), p.addrs);
        // Nothing another node can use: none (loopback is never offered across nodes).
        let none = Published {
            addrs: vec!["127.0.0.1:4000".parse().unwrap()],
            ..p.clone()
        };
        assert!(none.candidates(1, &[]).is_empty());
        let empty = Published {
            addrs: Vec::new(),
            ..p
        };
        assert_eq!(Published::decode(&empty.encode()), Some(empty.clone()));
        assert!(empty.candidates(1, &[]).is_empty());
    }

    /// A fake launcher on the other end of a socket pair, answering PMI-1 as Hydra does.
    fn launcher(fail_put: bool) -> (i32, std::thread::JoinHandle<Vec<String>>, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&ours);
        let t = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut w = theirs.try_clone().unwrap();
            for line in BufReader::new(theirs).lines() {
                let line = line.unwrap();
                let reply = match field(&line, "cmd").unwrap() {
                    "init" => "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0".into(),
                    "get_my_kvsname" => "cmd=my_kvsname kvsname=kvs_7_0".into(),
                    "put" if fail_put => "cmd=put_result rc=-1 msg=duplicate_key".into(),
                    "put" => "cmd=put_result rc=0 msg=success".into(),
                    "barrier_in" => "cmd=barrier_out".into(),
                    "finalize" => "cmd=finalize_ack".into(),
                    "get" => format!(
                        "cmd=get_result rc=0 msg=success value={}",
                        Published {
                            node: 9,
                            job: 0x77,
                            addrs: vec!["10.1.2.3:555".parse().unwrap()],
                            port: 555,
                        }
                        .encode()
                    ),
                    other => format!("cmd={other}_unknown rc=1"),
                };
                seen.push(line);
                writeln!(w, "{reply}").unwrap();
            }
            seen
        });
        (fd, t, ours)
    }

    fn listen(port: u16) -> Option<Listening> {
        Some(Listening {
            port,
            v6: false,
            at: None,
        })
    }

    #[test]
    fn pmi1_put_fence_get_and_finalize_as_hydra_expects() {
        let soon = Instant::now() + Duration::from_secs(10);
        // Rank 1: reads rank 0's value after the barrier; finalizes at the end.
        let (fd, t, ours) = launcher(false);
        let (addrs, job) = meet_once(fd, (1, 5), "b", None, soon).unwrap();
        assert_eq!(addrs, vec!["10.1.2.3:555".parse().unwrap()]);
        assert_eq!(job, 0x77);
        drop(ours);
        let seen = t.join().unwrap();
        assert_eq!(seen.len(), 5, "{seen:?}");
        assert_eq!(
            seen[..3],
            [
                "cmd=init pmi_version=1 pmi_subversion=1",
                "cmd=get_my_kvsname",
                "cmd=barrier_in",
            ]
        );
        assert!(
            seen[3].starts_with("cmd=get kvsname=kvs_7_0 key=tca-kv-"),
            "{seen:?}"
        );
        assert_eq!(seen[4], "cmd=finalize");
        // Rank 0: puts, then meets the others; on its own node it connects at loopback.
        let (fd, t, ours) = launcher(false);
        let (addrs, job) = meet_once(fd, (0, 0x42), "a", listen(4242), soon).unwrap();
        assert_eq!(addrs, vec!["127.0.0.1:4242".parse().unwrap()]);
        assert_eq!(job, 0x42);
        drop(ours);
        let seen = t.join().unwrap();
        let put = format!(
            "value={:016x}@0000000000000042@4242@",
            super::super::hash("a")
        );
        assert!(
            seen[2].starts_with("cmd=put kvsname=kvs_7_0 key=tca-kv-") && seen[2].contains(&put),
            "{seen:?}"
        );
        assert_eq!(seen[3..], ["cmd=barrier_in", "cmd=finalize"]);
        // A world's TCA_KV address is published as it is.
        let (fd, t, ours) = launcher(false);
        let at = Some("10.9.9.9:7000".parse().unwrap());
        let l = Some(Listening {
            port: 7000,
            v6: false,
            at,
        });
        meet_once(fd, (0, 1), "a", l, soon).unwrap();
        drop(ours);
        let seen = t.join().unwrap();
        assert!(seen[2].ends_with("@7000@10.9.9.9:7000"), "{seen:?}");
    }

    #[test]
    fn pmi1_failures_are_errors_that_say_what_failed() {
        let soon = Instant::now() + Duration::from_secs(10);
        let (fd, t, ours) = launcher(true);
        let e = meet_once(fd, (0, 1), "a", listen(1), soon).unwrap_err();
        drop(ours);
        t.join().unwrap();
        assert!(
            e.to_string().contains("PMI-1 (PMI_FD)") && e.to_string().contains("rc -1"),
            "{e}"
        );
        // Not a socket, not open.
        let f = std::fs::File::open("/dev/null").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let e = meet_once(fd, (1, 5), "b", None, soon).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        let e = meet_once(-3, (1, 1), "b", None, soon).unwrap_err();
        assert!(e.to_string().contains("PMI_FD=-3"), "{e}");
        // A launcher that never lets the barrier out: a timeout, not a hang.
        let (ours, theirs) = UnixStream::pair().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&ours);
        let t = std::thread::spawn(move || {
            let mut w = theirs.try_clone().unwrap();
            for line in BufReader::new(theirs).lines() {
                let line = line.unwrap();
                match field(&line, "cmd").unwrap() {
                    "init" => writeln!(w, "cmd=response_to_init rc=0").unwrap(),
                    "get_my_kvsname" => writeln!(w, "cmd=my_kvsname kvsname=k").unwrap(),
                    _ => {}
                }
            }
        });
        let quick = Instant::now() + Duration::from_millis(300);
        let e = meet_once(fd, (1, 1), "b", None, quick).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        drop(ours);
        t.join().unwrap();
        // An answer longer than a line may be: an error, not a cut (its rest would be read as
        // the next answer).
        let (ours, theirs) = UnixStream::pair().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&ours);
        let t = std::thread::spawn(move || {
            let mut w = theirs.try_clone().unwrap();
            let mut r = BufReader::new(theirs);
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let long = "x".repeat(2 * LINE_MAX);
            let _ = writeln!(w, "cmd=response_to_init rc=0 msg={long}");
        });
        let e = meet_once(fd, (1, 1), "b", None, soon).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
        drop(ours);
        t.join().unwrap();
    }

    /// The process's connection: opened once, kept for the worlds after the first (Hydra
    /// closes it after `finalize`), finalized at exit; the socket's options untouched.
    #[test]
    fn worlds_in_turn_share_the_process_connection_finalized_at_exit() {
        let soon = Instant::now() + Duration::from_secs(10);
        let (fd, t, ours) = launcher(false);
        for _ in 0..2 {
            let (addrs, job) = meet(Directory::Pmi1 { fd }, (1, 5), "b", None, soon).unwrap();
            assert_eq!((addrs.len(), job), (1, 0x77));
        }
        let held = PMI1.lock().unwrap();
        let sock = &held.as_ref().unwrap().dir.sock;
        assert_eq!(sock.read_timeout().unwrap(), None);
        drop(held);
        finalize_at_exit();
        assert!(PMI1.lock().unwrap().is_none());
        drop(ours);
        let seen = t.join().unwrap();
        let cmds: Vec<&str> = seen.iter().map(|l| field(l, "cmd").unwrap()).collect();
        assert_eq!(
            cmds,
            [
                "init",
                "get_my_kvsname",
                "barrier_in",
                "get",
                "barrier_in",
                "get",
                "finalize"
            ]
        );
        assert_ne!(seen[3], seen[5], "a key per world");
        // After a failed call the connection is out of step: later worlds are refused at
        // once, and `finalize` is still said at exit.
        let (fd, t, ours) = launcher(true);
        let e = meet(Directory::Pmi1 { fd }, (0, 1), "a", listen(1), soon).unwrap_err();
        assert!(e.to_string().contains("rc -1"), "{e}");
        let e = meet(Directory::Pmi1 { fd }, (0, 1), "a", listen(1), soon).unwrap_err();
        assert!(e.to_string().contains("out of step"), "{e}");
        finalize_at_exit();
        drop(ours);
        let seen = t.join().unwrap();
        let cmds: Vec<&str> = seen.iter().map(|l| field(l, "cmd").unwrap()).collect();
        assert_eq!(cmds, ["init", "get_my_kvsname", "put", "finalize"]);
    }
}
