//! Start-up across nodes: a small key-value rendezvous at one address, and the job monitor
//! that keeps running on the same connections.
//!
//! Ranks on different nodes cannot meet through shared memory, so they meet at one TCP
//! address: the launcher's (`tca run --hosts`) or rank 0's (under Slurm and other launchers),
//! passed in `TCA_KV=host:port` as NCCL passes its unique id. Only start-up records travel
//! here (node ids, libfabric endpoint names, control segment handles), a few hundred bytes per
//! rank; every byte of data moves through libfabric.
//!
//! # Protocol
//! Frames are `[length u32 LE][type u8][payload]`. A rank connects and says `Hello(job, rank,
//! size)`; the server refuses another job, a rank out of range or a rank that already came.
//! Then rounds of `Put(bytes)`: when every rank has put its record of round k, the server sends
//! `All(records by rank)` to everyone (put / fence / get in one step, an allgather).
//!
//! # The monitor
//! The connections stay open for the job's life. Both ends send `Beat` every
//! [`BEAT`]; a rank that leaves cleanly says `Done`. When a connection ends without `Done`, or
//! stays silent for [`silence`] (its node unreachable: a cable, a deleted network namespace),
//! the server sends `Abort(rank, why)` to every rank, and every wait there fails with an error
//! naming that rank. A rank that sees a local peer die says `Abort` itself; a rank that loses
//! the server treats the server's owner as dead.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::cast::rank_u32;
use crate::error::{Error, ErrorKind, Result};

/// How often both ends say they are alive.
pub const BEAT: Duration = Duration::from_millis(250);

/// How long a silent connection is trusted (`TCA_KV_SILENCE` seconds, default 5).
pub fn silence() -> Duration {
    let s = crate::env::parse::<f64>(crate::env::KV_SILENCE)
        .ok()
        .flatten()
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(5.0);
    Duration::from_secs_f64(s)
}

const HELLO: u8 = 1;
const PUT: u8 = 2;
const ALL: u8 = 3;
const BEAT_F: u8 = 4;
const DONE: u8 = 5;
const ABORT: u8 = 6;
const REFUSED: u8 = 7;
const LEFT: u8 = 8;
/// Largest frame accepted (a round's records of every rank, with room).
const FRAME_MAX: usize = 64 << 20;
/// Largest record one rank may put in a round.
pub const RECORD_MAX: usize = 64 << 10;

fn io_err(what: impl std::fmt::Display, e: std::io::Error) -> Error {
    Error::os(ErrorKind::Bootstrap, what.to_string(), e)
}

fn write_frame(s: &mut impl Write, ty: u8, payload: &[u8]) -> std::io::Result<()> {
    let n = u32::try_from(payload.len() + 1)
        .ok()
        .filter(|&n| n as usize <= FRAME_MAX)
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "rendezvous frame too large",
            )
        })?;
    let mut f = Vec::with_capacity(5 + payload.len());
    f.extend_from_slice(&n.to_le_bytes());
    f.push(ty);
    f.extend_from_slice(payload);
    s.write_all(&f)
}

/// Reads exactly `buf.len()` bytes. A read timeout before the first byte is returned as
/// such (the caller may treat it as "nothing yet"); once a byte has arrived the rest is read
/// to the end, however long the gaps between segments, so a frame is never cut in two.
fn read_full(s: &mut impl Read, buf: &mut [u8], first: bool) -> std::io::Result<bool> {
    let mut at = 0;
    while at < buf.len() {
        match s.read(&mut buf[at..]) {
            Ok(0) => {
                return if at == 0 && first {
                    Ok(false)
                } else {
                    Err(std::io::ErrorKind::UnexpectedEof.into())
                };
            }
            Ok(n) => at += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) && (at > 0 || !first) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Reads one frame of at most `max` bytes; `Ok(None)` at a clean end of stream. A length
/// over `max` (or zero) is an error: nothing that large is allocated for an unknown peer.
fn read_frame(s: &mut impl Read, max: usize) -> std::io::Result<Option<(u8, Vec<u8>)>> {
    let mut len = [0u8; 4];
    if !read_full(s, &mut len, true)? {
        return Ok(None);
    }
    let n = u32::from_le_bytes(len) as usize;
    if n == 0 || n > max.min(FRAME_MAX) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("bad rendezvous frame of {n} bytes (not a tca peer?)"),
        ));
    }
    let mut b = vec![0u8; n];
    read_full(s, &mut b, false)?;
    let ty = b.remove(0);
    Ok(Some((ty, b)))
}

/// One round's records, one per rank (`size` of them, a u32), each at most [`RECORD_MAX`]
/// bytes (the server reads no longer one), each prefixed by its length.
fn encode_all(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&rank_u32(records.len()).to_le_bytes());
    for r in records {
        debug_assert!(r.len() <= RECORD_MAX);
        #[allow(clippy::cast_possible_truncation)] // at most RECORD_MAX (64 KiB), see above
        let n = r.len() as u32;
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(r);
    }
    out
}

fn decode_all(b: &[u8], size: u32) -> Option<Vec<Vec<u8>>> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = b.get(at..at.checked_add(n)?)?;
        at += n;
        Some(s)
    };
    let n = u32::from_le_bytes(take(4)?.try_into().ok()?);
    if n != size {
        return None;
    }
    let mut v = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let l = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        v.push(take(l)?.to_vec());
    }
    Some(v)
}

fn encode_abort(rank: u32, why: &str) -> Vec<u8> {
    let mut p = rank.to_le_bytes().to_vec();
    p.extend_from_slice(why.as_bytes());
    p
}

fn decode_abort(p: &[u8]) -> (Option<u32>, String) {
    if p.len() < 4 {
        return (None, "aborted".into());
    }
    let r = u32::from_le_bytes(p[..4].try_into().expect("4 bytes"));
    (
        (r != u32::MAX).then_some(r),
        String::from_utf8_lossy(&p[4..]).into_owned(),
    )
}

// ---- server ---------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct State {
    conns: Vec<Option<TcpStream>>,
    rounds: Vec<Vec<Option<Vec<u8>>>>,
    done: Vec<bool>,
    last_seen: Vec<Option<Instant>>,
    /// Ranks whose monitor runs (they beat): only those can be silent. Before, a rank is in
    /// start-up, bounded by its own deadline, and may be quiet for a while (slow set-up).
    beating: Vec<bool>,
    aborted: Option<(Option<u32>, String)>,
    arrived: u32,
}

#[derive(Debug)]
struct Shared {
    job: u64,
    size: u32,
    state: Mutex<State>,
    cv: Condvar,
    stop: AtomicBool,
}

impl Shared {
    /// Records the first abort and tells every rank still connected.
    fn abort(&self, rank: Option<u32>, why: &str) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.aborted.is_some() {
            return;
        }
        st.aborted = Some((rank, why.to_string()));
        let p = encode_abort(rank.unwrap_or(u32::MAX), why);
        for c in st.conns.iter_mut().flatten() {
            let _ = write_frame(c, ABORT, &p);
        }
        self.cv.notify_all();
    }
}

/// A listening socket on `bind`, as `TcpListener::bind` makes it (address reuse, close on
/// exec), and dual-stack when `bind` is the IPv6 wildcard.
fn listen(bind: SocketAddr) -> std::io::Result<TcpListener> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, sockopt};
    let family = if bind.is_ipv6() {
        AddressFamily::INET6
    } else {
        AddressFamily::INET
    };
    let fd = rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    if bind.is_ipv6() && bind.ip().is_unspecified() {
        sockopt::set_ipv6_v6only(&fd, false)?;
    }
    rustix::net::bind(&fd, &bind)?;
    // Every rank connects at once: the kernel's largest backlog (Linux caps -1 at somaxconn).
    rustix::net::listen(&fd, -1)?;
    Ok(TcpListener::from(fd))
}

/// The rendezvous server: a thread that accepts the ranks and then watches them.
#[derive(Debug)]
pub struct KvServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl KvServer {
    /// Listens on `bind` (port 0: any free port) for the `size` ranks of job `job`. An IPv6
    /// wildcard `bind` takes IPv4 connections too (as mapped addresses), whatever the
    /// system's default (`net.ipv6.bindv6only`).
    pub fn start(bind: SocketAddr, job: u64, size: u32) -> Result<Self> {
        let listener = listen(bind).map_err(|e| io_err(format!("listening on {bind}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| io_err("reading the rendezvous address", e))?;
        let shared = Arc::new(Shared {
            job,
            size,
            state: Mutex::new(State {
                conns: (0..size).map(|_| None).collect(),
                done: vec![false; size as usize],
                last_seen: vec![None; size as usize],
                beating: vec![false; size as usize],
                ..State::default()
            }),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("tca-kv-accept".into())
            .spawn(move || {
                for s in listener.incoming() {
                    if sh.stop.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(s) = s else { continue };
                    let sh = sh.clone();
                    let _ = std::thread::Builder::new()
                        .name("tca-kv-rank".into())
                        .spawn(move || serve(&sh, s));
                }
            })
            .map_err(|e| io_err("starting the rendezvous thread", e))?;
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("tca-kv-beat".into())
            .spawn(move || beat_server(&sh))
            .map_err(|e| io_err("starting the rendezvous thread", e))?;
        Ok(Self { addr, shared })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Aborts the job on account of `rank` (the launcher saw it fail).
    pub fn abort(&self, rank: Option<u32>, why: &str) {
        self.shared.abort(rank, why);
    }

    /// The abort in force, if any: which rank (if known) and why.
    pub fn aborted(&self) -> Option<(Option<u32>, String)> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .aborted
            .clone()
    }

    /// Waits until every rank that arrived has left cleanly (or the job was aborted, or
    /// `limit` passed): the rank that runs the rendezvous must not take it away while others
    /// still finish, or they would take its end for a death.
    pub fn wait_done(&self, limit: Duration) {
        let end = Instant::now() + limit;
        let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let all = (0..self.shared.size as usize)
                .all(|r| st.done[r] || st.last_seen[r].is_none() || st.conns[r].is_none());
            if all || st.aborted.is_some() {
                return;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            st = self
                .shared
                .cv
                .wait_timeout(st, left.min(BEAT))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Ranks that have not arrived yet.
    pub fn missing(&self) -> Vec<u32> {
        let st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        (0..self.shared.size)
            .filter(|&r| st.last_seen[r as usize].is_none())
            .collect()
    }
}

impl Drop for KvServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
        let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        for c in st.conns.iter_mut().flatten() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

fn refuse(mut s: TcpStream, why: &str) {
    let _ = write_frame(&mut s, REFUSED, why.as_bytes());
}

fn serve(sh: &Shared, mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(Some((HELLO, p))) = read_frame(&mut s, 17) else {
        return; // not a tca rank (a port scan, the wake-up connection): nothing to answer
    };
    if p.len() != 16 {
        return refuse(s, "malformed hello");
    }
    let job = u64::from_le_bytes(p[..8].try_into().expect("8 bytes"));
    let rank = u32::from_le_bytes(p[8..12].try_into().expect("4 bytes"));
    let size = u32::from_le_bytes(p[12..16].try_into().expect("4 bytes"));
    if job != sh.job {
        return refuse(
            s,
            &format!(
                "this rendezvous belongs to job {:016x}, not {job:016x} (a stale TCA_KV?)",
                sh.job
            ),
        );
    }
    if size != sh.size || rank >= size {
        return refuse(
            s,
            &format!(
                "rank {rank} of a {size}-rank job does not fit this {}-rank job",
                sh.size
            ),
        );
    }
    {
        let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.last_seen[rank as usize].is_some() {
            drop(st);
            return refuse(s, &format!("rank {rank} has already joined"));
        }
        let Ok(w) = s.try_clone() else { return };
        // A rank that stops reading must not stall the server (every write happens under
        // the state lock): after this long its write fails and it counts as gone.
        let _ = w.set_write_timeout(Some(silence()));
        st.conns[rank as usize] = Some(w);
        st.last_seen[rank as usize] = Some(Instant::now());
        st.arrived += 1;
        if let Some((r, why)) = st.aborted.clone() {
            if let Some(c) = st.conns[rank as usize].as_mut() {
                let _ = write_frame(c, ABORT, &encode_abort(r.unwrap_or(u32::MAX), &why));
            }
        }
    }
    let _ = s.set_read_timeout(Some(BEAT));
    let mut round = 0usize;
    loop {
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        match read_frame(&mut s, RECORD_MAX + 1) {
            Ok(Some((PUT, rec))) => {
                let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
                st.last_seen[rank as usize] = Some(Instant::now());
                while st.rounds.len() <= round {
                    st.rounds.push(vec![None; sh.size as usize]);
                }
                st.rounds[round][rank as usize] = Some(rec);
                if st.rounds[round].iter().all(Option::is_some) {
                    let all: Vec<Vec<u8>> = st.rounds[round]
                        .iter()
                        .map(|r| r.clone().unwrap_or_default())
                        .collect();
                    let frame = encode_all(&all);
                    for c in st.conns.iter_mut().flatten() {
                        let _ = write_frame(c, ALL, &frame);
                    }
                }
                round += 1;
            }
            Ok(Some((BEAT_F, _))) => {
                let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
                st.last_seen[rank as usize] = Some(Instant::now());
                st.beating[rank as usize] = true;
            }
            Ok(Some((DONE, _))) => {
                let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
                st.done[rank as usize] = true;
                st.conns[rank as usize] = None;
                for c in st.conns.iter_mut().flatten() {
                    let _ = write_frame(c, LEFT, &rank.to_le_bytes());
                }
                sh.cv.notify_all();
                return;
            }
            Ok(Some((ABORT, p))) => {
                let (r, why) = decode_abort(&p);
                sh.abort(r, &why);
            }
            Ok(Some(_)) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Ok(None) | Err(_) => {
                let done = sh.state.lock().unwrap_or_else(|p| p.into_inner()).done[rank as usize];
                if !done {
                    sh.abort(
                        Some(rank),
                        &format!("rank {rank} died (its connection to the rendezvous closed)"),
                    );
                }
                return;
            }
        }
    }
}

fn beat_server(sh: &Shared) {
    let limit = silence();
    while !sh.stop.load(Ordering::Acquire) {
        std::thread::sleep(BEAT);
        let mut silent = None;
        {
            let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
            for c in st.conns.iter_mut().flatten() {
                let _ = write_frame(c, BEAT_F, &[]);
            }
            for r in 0..sh.size as usize {
                if let Some(t) = st.last_seen[r] {
                    if st.beating[r] && !st.done[r] && st.conns[r].is_some() && t.elapsed() > limit
                    {
                        silent = Some((rank_u32(r), t.elapsed()));
                    }
                }
            }
        }
        if let Some((r, t)) = silent {
            sh.abort(
                Some(r),
                &format!(
                    "rank {r} has been silent for {:.1} s: its node is unreachable or it hangs",
                    t.as_secs_f64()
                ),
            );
        }
    }
}

// ---- client ---------------------------------------------------------------------------------

/// Why the job was aborted, as the monitor learned it.
#[derive(Debug, Default)]
struct Abort {
    flag: AtomicBool,
    what: Mutex<Option<(Option<u32>, String)>>,
    /// Ranks that have left the job cleanly, as the rendezvous told us.
    left: Mutex<Vec<u32>>,
    /// Whether `left` holds any: what `Watch::has_left` looks at first, without the lock
    /// (the network transport asks on every operation).
    any_left: AtomicBool,
}

/// A cheap handle on the monitor's verdict, for loops that cannot reach the client.
#[derive(Debug, Clone)]
pub(crate) struct Watch(Arc<Abort>);

impl Watch {
    /// Whether `rank` has left the job cleanly (it will answer nothing more).
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn has_left(&self, rank: u32) -> bool {
        if !self.0.any_left.load(Ordering::Acquire) {
            return false;
        }
        self.0
            .left
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&rank)
    }

    /// The abort the monitor learned of, if any, as an error.
    pub(crate) fn check(&self) -> Result<()> {
        if !self.0.flag.load(Ordering::Acquire) {
            return Ok(());
        }
        let g = self.0.what.lock().unwrap_or_else(|p| p.into_inner());
        let (who, why) = g.clone().unwrap_or((None, "aborted".into()));
        Err(abort_error(who, &why))
    }
}

/// One rank's connection to the rendezvous.
#[derive(Debug)]
pub struct KvClient {
    stream: TcpStream,
    size: u32,
    /// Who runs the server, for errors when it disappears ("rank 0", "the launcher").
    owner: (Option<u32>, String),
    abort: Arc<Abort>,
    left: AtomicBool,
    watching: AtomicBool,
}

/// Parses `host:port` (names resolved).
pub fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .map_err(|e| io_err(format!("resolving the rendezvous address {addr:?}"), e))?
        .next()
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                format!("the rendezvous address {addr:?} resolves to nothing"),
            )
        })
}

/// The largest reply a rank of a job of `size` reads from the rendezvous.
fn reply_max(size: u32) -> usize {
    (size as usize).saturating_mul(RECORD_MAX + 4) + 8
}

/// What a frame from the rendezvous means to a rank waiting for a round's records: `None`
/// to keep waiting (a beat, a frame it does not know), else the records (one per rank) or
/// the error (`owner` names the rendezvous).
fn reply(ty: u8, p: &[u8], size: u32, owner: &str) -> Option<Result<Vec<Vec<u8>>>> {
    match ty {
        ALL => Some(decode_all(p, size).ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                "malformed records from the rendezvous",
            )
        })),
        REFUSED => Some(Err(Error::new(
            ErrorKind::Bootstrap,
            format!(
                "the rendezvous of {owner} refused this rank: {}",
                String::from_utf8_lossy(p)
            ),
        ))),
        ABORT => {
            let (r, why) = decode_abort(p);
            Some(Err(abort_error(r, &why)))
        }
        _ => None,
    }
}

/// The client's side of the rendezvous against arbitrary replies: the fuzz targets' entry
/// (a server is a process on the network; what it sends is untrusted). `data`: the job's
/// size (its first byte, 1 to 16), then the byte stream a server sends. Frames are read and
/// taken as `allgather` takes them until one ends the round; records it accepts are one per
/// rank, within the frame. Returns how the round ended: records (`Some(true)`), an error
/// (`Some(false)`), or not at all. Not part of the API (feature `fuzzing`).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_client(data: &[u8]) -> Option<bool> {
    let (&first, mut stream) = data.split_first()?;
    let size = u32::from(first % 16) + 1;
    while let Ok(Some((ty, p))) = read_frame(&mut stream, reply_max(size)) {
        match reply(ty, &p, size, "fuzz") {
            Some(Ok(records)) => {
                assert_eq!(records.len(), size as usize);
                assert!(records.iter().map(Vec::len).sum::<usize>() <= p.len());
                return Some(true);
            }
            Some(Err(e)) => {
                assert!(!e.to_string().is_empty());
                return Some(false);
            }
            None => {}
        }
    }
    None
}

impl KvClient {
    /// Connects to the server at one of `addrs` (tried in turn) as `rank` of `size`,
    /// retrying until `deadline`. `owner` names the server's owner in errors.
    pub fn connect(
        addrs: &[SocketAddr],
        job: u64,
        rank: u32,
        size: u32,
        owner: (Option<u32>, String),
        deadline: Instant,
    ) -> Result<Self> {
        let (mut stream, addr) = 'found: loop {
            let mut last = None;
            for &a in addrs {
                match TcpStream::connect_timeout(&a, Duration::from_millis(500)) {
                    Ok(s) => break 'found (s, a),
                    Err(e) => last = Some(e),
                }
            }
            if Instant::now() >= deadline {
                let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
                let why = last.map_or_else(|| "no address to try".to_string(), |e| e.to_string());
                return Err(Error::new(
                    ErrorKind::Bootstrap,
                    format!(
                        "rank {rank}: the rendezvous of {} at {} did not answer before the \
                         start-up timeout ({why}; is it running, is a firewall in the way, is \
                         {} (or {} on rank 0's node) right? set {} to wait longer)",
                        owner.1,
                        list.join(" or "),
                        crate::env::KV,
                        crate::env::KV_HOST,
                        crate::env::BOOT_TIMEOUT
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = stream.set_nodelay(true);
        let mut hello = job.to_le_bytes().to_vec();
        hello.extend_from_slice(&rank.to_le_bytes());
        hello.extend_from_slice(&size.to_le_bytes());
        write_frame(&mut stream, HELLO, &hello)
            .map_err(|e| io_err(format!("greeting the rendezvous at {addr}"), e))?;
        Ok(Self {
            stream,
            size,
            owner,
            abort: Arc::new(Abort::default()),
            left: AtomicBool::new(false),
            watching: AtomicBool::new(false),
        })
    }

    /// Puts this rank's `record` for the next round and returns every rank's, by rank.
    /// Waits until `deadline` for the others; names the ranks that did not come.
    pub fn allgather(&mut self, record: &[u8], deadline: Instant) -> Result<Vec<Vec<u8>>> {
        if record.len() > RECORD_MAX {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "start-up record of {} bytes exceeds {RECORD_MAX}",
                    record.len()
                ),
            ));
        }
        write_frame(&mut self.stream, PUT, record)
            .map_err(|e| self.lost(format!("sending a start-up record: {e}")))?;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::new(
                    ErrorKind::Bootstrap,
                    format!(
                        "not every rank reached the rendezvous of {} before the start-up timeout \
                         (set {})",
                        self.owner.1,
                        crate::env::BOOT_TIMEOUT
                    ),
                ));
            }
            let _ = self.stream.set_read_timeout(Some(left.min(BEAT * 4)));
            match read_frame(&mut self.stream, reply_max(self.size)) {
                Ok(Some((ty, p))) => {
                    if let Some(r) = reply(ty, &p, self.size, &self.owner.1) {
                        return r;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Ok(None) | Err(_) => {
                    return Err(self.lost("the rendezvous closed during start-up".into()));
                }
            }
        }
    }

    fn lost(&self, what: String) -> Error {
        match self.owner.0 {
            Some(r) => Error::peer(
                ErrorKind::PeerDied,
                r,
                format!(
                    "{} (rank {r}, which runs the rendezvous, died?): {what}",
                    self.owner.1
                ),
            ),
            None => Error::launcher(ErrorKind::Aborted, format!("lost {}: {what}", self.owner.1)),
        }
    }

    /// Starts the monitor: a thread that answers beats and records aborts.
    pub fn watch(&self) -> Result<()> {
        if self.watching.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let mut r = self
            .stream
            .try_clone()
            .map_err(|e| io_err("cloning the rendezvous connection", e))?;
        let mut w = self
            .stream
            .try_clone()
            .map_err(|e| io_err("cloning the rendezvous connection", e))?;
        let abort = self.abort.clone();
        let owner = self.owner.clone();
        let _ = r.set_read_timeout(Some(BEAT));
        let limit = silence();
        std::thread::Builder::new()
            .name("tca-monitor".into())
            .spawn(move || {
                let mut seen = Instant::now();
                let mut sent = Instant::now();
                let set = |who: Option<u32>, why: String| {
                    let mut g = abort.what.lock().unwrap_or_else(|p| p.into_inner());
                    if g.is_none() {
                        *g = Some((who, why));
                    }
                    abort.flag.store(true, Ordering::Release);
                };
                loop {
                    if sent.elapsed() >= BEAT {
                        if write_frame(&mut w, BEAT_F, &[]).is_err() {
                            // Our own side closed (leave) or the server went away; reading
                            // tells which.
                        }
                        sent = Instant::now();
                    }
                    match read_frame(&mut r, 64 << 10) {
                        Ok(Some((ABORT, p))) => {
                            let (who, why) = decode_abort(&p);
                            set(who, why);
                            return;
                        }
                        Ok(Some((LEFT, p))) => {
                            seen = Instant::now();
                            if let Ok(b) = <[u8; 4]>::try_from(p.as_slice()) {
                                abort
                                    .left
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .push(u32::from_le_bytes(b));
                                abort.any_left.store(true, Ordering::Release);
                            }
                        }
                        Ok(Some(_)) => seen = Instant::now(),
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) =>
                        {
                            if seen.elapsed() > limit {
                                set(
                                    owner.0,
                                    format!(
                                        "lost contact with {} for {:.1} s (its node is unreachable)",
                                        owner.1,
                                        seen.elapsed().as_secs_f64()
                                    ),
                                );
                                return;
                            }
                        }
                        Ok(None) | Err(_) => {
                            if !abort.flag.load(Ordering::Acquire) {
                                set(owner.0, format!("{} is gone (its connection closed)", owner.1));
                            }
                            return;
                        }
                    }
                }
            })
            .map_err(|e| io_err("starting the monitor thread", e))?;
        Ok(())
    }

    /// A handle on the monitor's verdict.
    pub(crate) fn watcher(&self) -> Watch {
        Watch(self.abort.clone())
    }

    /// The abort the monitor learned of, as the error every wait returns.
    #[inline]
    pub fn check(&self) -> Result<()> {
        if self.left.load(Ordering::Acquire) {
            return Ok(());
        }
        Watch(self.abort.clone()).check()
    }

    /// Tells every rank that `rank` died or failed (seen here first).
    pub fn report(&self, rank: u32, why: &str) {
        let mut s = &self.stream;
        let _ = write_frame(&mut s, ABORT, &encode_abort(rank, why));
    }

    /// Leaves cleanly: the server stops watching this rank.
    pub fn leave(&self) {
        if self.left.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut s = &self.stream;
        let _ = write_frame(&mut s, DONE, &[]);
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

fn abort_error(who: Option<u32>, why: &str) -> Error {
    match who {
        Some(r) => Error::peer(ErrorKind::PeerDied, r, format!("job aborted: {why}")),
        None => Error::new(ErrorKind::Aborted, format!("job aborted: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(20)
    }

    #[test]
    fn rounds_gather_every_rank() {
        let srv = KvServer::start(local(), 7, 3).unwrap();
        let addr = srv.addr();
        let out: Vec<Vec<Vec<Vec<u8>>>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3u32)
                .map(|r| {
                    s.spawn(move || {
                        let mut c =
                            KvClient::connect(&[addr], 7, r, 3, (None, "test".into()), soon())
                                .unwrap();
                        let a = c.allgather(&[u8::try_from(r).unwrap(); 3], soon()).unwrap();
                        let b = c.allgather(format!("r{r}").as_bytes(), soon()).unwrap();
                        c.leave();
                        vec![a, b]
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for o in out {
            assert_eq!(o[0], vec![vec![0u8; 3], vec![1; 3], vec![2; 3]]);
            assert_eq!(o[1], vec![b"r0".to_vec(), b"r1".to_vec(), b"r2".to_vec()]);
        }
        assert!(srv.aborted().is_none());
    }

    #[test]
    fn wrong_job_and_duplicate_rank_are_refused() {
        let srv = KvServer::start(local(), 7, 2).unwrap();
        let mut c =
            KvClient::connect(&[srv.addr()], 8, 0, 2, (None, "test".into()), soon()).unwrap();
        let e = c.allgather(b"x", soon()).unwrap_err();
        assert!(e.to_string().contains("job"), "{e}");
        let _a = KvClient::connect(&[srv.addr()], 7, 1, 2, (None, "t".into()), soon()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let mut b = KvClient::connect(&[srv.addr()], 7, 1, 2, (None, "t".into()), soon()).unwrap();
        let e = b.allgather(b"x", soon()).unwrap_err();
        assert!(e.to_string().contains("already joined"), "{e}");
    }

    #[test]
    fn a_rank_that_disappears_is_named_to_the_others() {
        let srv = KvServer::start(local(), 9, 2).unwrap();
        let addr = srv.addr();
        let t = std::thread::spawn(move || {
            let mut c = KvClient::connect(&[addr], 9, 1, 2, (None, "t".into()), soon()).unwrap();
            c.allgather(b"b", soon()).unwrap();
            // Dropped without leaving: as if the process died.
        });
        let mut c = KvClient::connect(&[addr], 9, 0, 2, (None, "t".into()), soon()).unwrap();
        c.allgather(b"a", soon()).unwrap();
        c.watch().unwrap();
        t.join().unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        while c.check().is_ok() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        let e = c.check().unwrap_err();
        assert_eq!(e.rank(), Some(1), "{e}");
        assert_eq!(srv.aborted().unwrap().0, Some(1));
    }

    #[test]
    fn nobody_listening_is_a_clear_error() {
        // A port bound but not listening, held for the whole test: a port freed and connected
        // to again may meanwhile be taken by another test's listener (seen once in about 40
        // runs of the library's tests, 2026-11-30).
        let held = rustix::net::socket(
            rustix::net::AddressFamily::INET,
            rustix::net::SocketType::STREAM,
            None,
        )
        .unwrap();
        rustix::net::bind(&held, &local()).unwrap();
        let addr = SocketAddr::try_from(rustix::net::getsockname(&held).unwrap()).unwrap();
        let e = KvClient::connect(
            &[addr],
            1,
            0,
            2,
            (Some(0), "rank 0".into()),
            Instant::now() + Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(e.to_string().contains("did not answer"), "{e}");
    }
}
