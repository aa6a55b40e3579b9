//! The [`World`]: this rank's view of the job, and the one-sided operations.

use std::cell::{Cell, RefCell};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::bootstrap::board::{AbortReason, Board, Entry, RankState};
use crate::bootstrap::{BoardSource, JobEnv};
use crate::env;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::shm::HEADER_BYTES;
use crate::transport::shm::wait::{self, SpinPolicy};

use super::control::{CTRL_BYTES, SLEEPERS};
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

/// How a signal word changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    /// Store the value (the word's single writer hands out growing sequence numbers).
    Set(u64),
    /// Add to the word (several writers count arrivals).
    Add(u64),
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
    fn span(&self, stride: usize) -> Option<usize> {
        if self.count == 0 {
            return Some(0);
        }
        (self.count - 1)
            .checked_mul(stride)?
            .checked_add(self.block)
    }
}

#[derive(Debug)]
pub(crate) struct Peer {
    pub(crate) pid: u32,
    pub(crate) ctrl: Arc<Region>,
    pidfd: Option<OwnedFd>,
}

type Cache = Vec<Vec<Option<Arc<Region>>>>;

/// This rank's view of the job: rank, size, peers, and the one-sided operations.
///
/// A `World` belongs to one thread at a time (`Send`, not `Sync`): the papers' model is one
/// rank, one stream of puts. Create it with [`crate::init`] (under `tca run`, Slurm or mpirun)
/// or [`crate::threads::run`] (ranks as threads of one process).
#[derive(Debug)]
pub struct World {
    rank: u32,
    size: u32,
    job: u64,
    source: &'static str,
    board: Board,
    _board_fd: Option<OwnedFd>,
    pub(crate) peers: Vec<Peer>,
    cache: RefCell<Cache>,
    policy: SpinPolicy,
    launcher: Option<(u32, OwnedFd)>,
    pub(crate) barrier_epoch: Cell<u64>,
    pub(crate) xchg_epoch: Cell<u64>,
    left: Cell<bool>,
    /// Whether this rank has marked itself asleep on the board during the current wait.
    asleep: Cell<bool>,
    /// Consecutive sleep slices in which every other rank in the job was asleep too, and the
    /// other ranks' finished-sleep counts at the last slice (any change is progress).
    stuck: Cell<u32>,
    others_wakes: Cell<u64>,
}

/// Sleep slices (10 ms each) with every rank of the job asleep and no progress before a wait
/// gives up as a deadlock.
const DEADLOCK_SLICES: u32 = 100;

impl World {
    /// Joins the job described by `env`: publish, wait for everyone, attach every peer.
    pub(crate) fn join(env: JobEnv) -> Result<Self> {
        let JobEnv {
            rank,
            size,
            job,
            board,
            source,
            boot_deadline,
        } = env;
        let max = env::max_ranks();
        if size == 0 {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                "a job needs at least one rank",
            ));
        }
        if size > max {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "{size} ranks exceed the per-node limit of {max} (set {} to change it)",
                    env::MAX_RANKS
                ),
            ));
        }
        if rank >= size {
            return Err(Error::new(
                ErrorKind::InvalidRank,
                format!("rank {rank} is not in a {size}-rank job"),
            ));
        }
        raise_fd_limit(size);
        let (board, board_fd, named) = match board {
            BoardSource::Fd(fd) => (Board::open(&fd, size)?, Some(fd), None),
            BoardSource::Named(name) => {
                let (fd, b) = Board::open_named(&name, rank, size, job, boot_deadline)?;
                (b, Some(fd), Some(name))
            }
            BoardSource::Private => {
                let (fd, b) = Board::create(1, job, None)?;
                (b, Some(fd), None)
            }
        };
        if board.job() != job {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "job board belongs to job {:016x}, not {job:016x}",
                    board.job()
                ),
            ));
        }
        let my_pid = std::process::id();
        let ctrl = Arc::new(Region::create(rank, job, CTRL_BYTES, "ctrl")?);
        let spin = env::parse::<u32>(env::SPIN)?;
        let policy = SpinPolicy::adaptive(size, SpinPolicy::cpus(), spin);
        let launcher = match board.launcher_pid() {
            Some(pid) => Some((
                pid,
                pidfd(pid).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Aborted,
                        format!("the launcher (pid {pid}) is gone"),
                    )
                })?,
            )),
            None => None,
        };
        board.publish(
            rank,
            Entry {
                pid: my_pid,
                ctrl_segment: ctrl.handle.segment(),
                ctrl_key: ctrl.handle.key(),
            },
        );

        // Wait for everyone; a rank that never comes is named in the error.
        let boot_check = || -> Result<()> {
            if let Some((r, why)) = board.aborted() {
                return Err(abort_error(r, why));
            }
            if let Some(r) = (0..size).find(|&r| board.state(r) == RankState::Failed) {
                return Err(Error::peer(
                    ErrorKind::PeerDied,
                    r,
                    format!("rank {r} failed during start-up"),
                ));
            }
            if let Some((pid, fd)) = &launcher {
                if readable(fd) {
                    return Err(Error::new(
                        ErrorKind::Aborted,
                        format!("the launcher (pid {pid}) died during start-up"),
                    ));
                }
            }
            Ok(())
        };
        let r = wait::wait_ge(
            board.published(),
            board.sleepers(),
            u64::from(size),
            policy,
            Some(boot_deadline),
            boot_check,
        );
        if let Err(e) = r {
            if rank == 0 {
                if let Some(n) = &named {
                    let _ = std::fs::remove_file(std::path::Path::new("/dev/shm").join(n));
                }
            }
            board.set_state(rank, RankState::Failed);
            if e.kind() == ErrorKind::Timeout {
                let missing: Vec<u32> = (0..size)
                    .filter(|&r| board.state(r) == RankState::Empty)
                    .collect();
                return Err(Error::new(
                    ErrorKind::Bootstrap,
                    format!(
                        "ranks {missing:?} of {size} did not start in time ({}; set {})",
                        source,
                        env::BOOT_TIMEOUT
                    ),
                ));
            }
            return Err(e);
        }
        if rank == 0 {
            if let Some(n) = &named {
                // Everyone has the board mapped now: drop its name so nothing can leak.
                let _ = std::fs::remove_file(std::path::Path::new("/dev/shm").join(n));
            }
        }

        let mut peers = Vec::with_capacity(size as usize);
        for r in 0..size {
            if r == rank {
                peers.push(Peer {
                    pid: my_pid,
                    ctrl: ctrl.clone(),
                    pidfd: None,
                });
                continue;
            }
            let e = board.entry(r).ok_or_else(|| {
                Error::peer(
                    ErrorKind::Bootstrap,
                    r,
                    format!("rank {r} counted as published but has no entry"),
                )
            })?;
            let h = Handle::zeroed_for(job, e.ctrl_key, CTRL_BYTES, r, e.ctrl_segment);
            let ctrl = Region::attach(&h, e.pid).map_err(|err| {
                Error::peer(
                    ErrorKind::PeerDied,
                    r,
                    format!("cannot attach rank {r} (pid {}): {err}", e.pid),
                )
            })?;
            let fd = if e.pid == my_pid { None } else { pidfd(e.pid) };
            if e.pid != my_pid && fd.is_none() {
                return Err(Error::peer(
                    ErrorKind::PeerDied,
                    r,
                    format!("rank {r} (pid {}) died during start-up", e.pid),
                ));
            }
            peers.push(Peer {
                pid: e.pid,
                ctrl: Arc::new(ctrl),
                pidfd: fd,
            });
        }
        let mut cache: Cache = vec![Vec::new(); size as usize];
        cache_insert(&mut cache, &ctrl);
        Ok(Self {
            rank,
            size,
            job,
            source,
            board,
            _board_fd: board_fd,
            peers,
            cache: RefCell::new(cache),
            policy,
            launcher,
            barrier_epoch: Cell::new(0),
            xchg_epoch: Cell::new(0),
            left: Cell::new(false),
            asleep: Cell::new(false),
            stuck: Cell::new(0),
            others_wakes: Cell::new(0),
        })
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

    /// Ranks that share memory with this one (today: every rank, one node).
    pub fn node_ranks(&self) -> std::ops::Range<u32> {
        0..self.size
    }

    /// Whether `rank` shares this rank's node (and so its memory).
    pub fn is_local(&self, rank: u32) -> bool {
        rank < self.size
    }

    /// Where rank and size came from: "tca run", "Slurm", "Open MPI", "PMI", "threads",
    /// "singleton".
    pub fn launched_by(&self) -> &'static str {
        self.source
    }

    /// The spin policy waits use (adapted to ranks per core).
    pub fn spin_policy(&self) -> SpinPolicy {
        self.policy
    }

    /// Process id of `rank`.
    pub fn pid_of(&self, rank: u32) -> Result<u32> {
        self.check_rank(rank)?;
        Ok(self.peers[rank as usize].pid)
    }

    pub(crate) fn ctrl_of(&self, rank: u32) -> &Region {
        &self.peers[rank as usize].ctrl
    }

    pub(crate) fn sleepers_of(&self, rank: u32) -> &AtomicU32 {
        self.peers[rank as usize]
            .ctrl
            .map
            .atomic_u32(HEADER_BYTES + SLEEPERS)
            .expect("sleeper word lies in the control segment (layout constant)")
    }

    fn check_rank(&self, rank: u32) -> Result<()> {
        if rank >= self.size {
            return Err(Error::new(
                ErrorKind::InvalidRank,
                format!("rank {rank} is not in this {}-rank world", self.size),
            ));
        }
        Ok(())
    }

    // ---- segments -------------------------------------------------------------------------

    /// Registers a new segment of `len` bytes (zeroed) on this rank only. Give its
    /// [`Segment::handle`] to the peers that should write into it.
    pub fn alloc(&self, len: usize) -> Result<Segment> {
        self.sweep_freed();
        let region = Arc::new(Region::create(self.rank, self.job, len, "seg")?);
        cache_insert(&mut self.cache.borrow_mut(), &region);
        Ok(Segment { region })
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

    /// Drops cached local segments that were freed and that nothing else holds.
    fn sweep_freed(&self) {
        let mut cache = self.cache.borrow_mut();
        for slot in cache[self.rank as usize].iter_mut() {
            if slot
                .as_ref()
                .is_some_and(|r| !r.is_live() && Arc::strong_count(r) == 1)
            {
                *slot = None;
            }
        }
    }

    /// Checks `h` and attaches its segment if it is not attached yet.
    #[inline]
    fn ensure(&self, h: &Handle) -> Result<()> {
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
        self.check_rank(h.rank())?;
        {
            let cache = self.cache.borrow();
            if let Some(r) = probe(&cache, h) {
                if r.is_live() {
                    return Ok(());
                }
            }
        }
        self.attach_slow(h)
    }

    #[cold]
    fn attach_slow(&self, h: &Handle) -> Result<()> {
        let slot = h.segment() as usize;
        let stale = self.cache.borrow()[h.rank() as usize]
            .get(slot)
            .is_some_and(|e| e.is_some());
        if stale {
            // A freed segment, or a handle whose id was reused: forget the old mapping.
            let mut cache = self.cache.borrow_mut();
            if cache[h.rank() as usize][slot]
                .as_ref()
                .is_some_and(|r| !r.is_live() || r.handle != *h)
            {
                cache[h.rank() as usize][slot] = None;
            }
        }
        let region = match Region::attach(h, self.peers[h.rank() as usize].pid) {
            Ok(r) => r,
            Err(e) => {
                // A segment that is gone because its owner died or the job was aborted is
                // reported as that, naming the rank, rather than as a bad handle.
                self.check_peers(false)?;
                return Err(e);
            }
        };
        cache_insert(&mut self.cache.borrow_mut(), &Arc::new(region));
        Ok(())
    }

    /// Validates `h` and attaches its segment now rather than at the first put.
    pub fn attach(&self, h: &Handle) -> Result<()> {
        self.ensure(h)
    }

    fn target<'a>(&self, cache: &'a Cache, h: &Handle) -> Result<&'a Region> {
        probe(cache, h).map(|r| &**r).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidHandle,
                format!(
                    "segment {} of rank {} is not attached",
                    h.segment(),
                    h.rank()
                ),
            )
        })
    }

    // ---- one-sided operations -------------------------------------------------------------

    /// Copies `src` into the segment `dst` at byte offset `off`: one `memcpy` into the peer's
    /// memory. Complete at the target on return.
    /// A zero-length put is valid: it checks the handle and offset and writes nothing.
    #[inline]
    pub fn put(&self, dst: &Handle, off: usize, src: &[u8]) -> Result<()> {
        {
            let cache = self.cache.borrow();
            if let Some(d) = live(&cache, dst) {
                let at = d.range(off, src.len())?;
                copy(d, at, src);
                return Ok(());
            }
        }
        self.ensure(dst)?;
        let cache = self.cache.borrow();
        let d = self.target(&cache, dst)?;
        let at = d.range(off, src.len())?;
        copy(d, at, src);
        Ok(())
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
        self.ensure(dst)?;
        let cache = self.cache.borrow();
        let d = self.target(&cache, dst)?;
        let at = d.range(off, src.len())?;
        d.map.write_inline(at, src);
        Ok(())
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
        {
            // Fast path: both segments attached and live (one probe each, no attach).
            let cache = self.cache.borrow();
            if let (Some(d), Some(s)) = (live(&cache, dst), live(&cache, sig)) {
                return self.put_signal_in(d, off, src, s, sig_off, sig.rank(), op);
            }
        }
        self.ensure(dst)?;
        self.ensure(sig)?;
        let cache = self.cache.borrow();
        let d = self.target(&cache, dst)?;
        let s = self.target(&cache, sig)?;
        self.put_signal_in(d, off, src, s, sig_off, sig.rank(), op)
    }

    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn put_signal_in(
        &self,
        d: &Region,
        off: usize,
        src: &[u8],
        s: &Region,
        sig_off: usize,
        owner: u32,
        op: SignalOp,
    ) -> Result<()> {
        let word = s.word(sig_off)?;
        let at = d.range(off, src.len())?;
        copy(d, at, src);
        self.raise(word, owner, op);
        Ok(())
    }

    /// Applies `op` to the signal word at `off` in `sig` (no data).
    pub fn signal(&self, sig: &Handle, off: usize, op: SignalOp) -> Result<()> {
        self.ensure(sig)?;
        let cache = self.cache.borrow();
        let word = self.target(&cache, sig)?.word(off)?;
        self.raise(word, sig.rank(), op);
        Ok(())
    }

    #[inline]
    pub(crate) fn raise(&self, word: &AtomicU64, owner: u32, op: SignalOp) {
        match op {
            SignalOp::Set(v) => word.store(v, Ordering::SeqCst),
            SignalOp::Add(v) => {
                word.fetch_add(v, Ordering::SeqCst);
            }
        }
        wait::notify(word, self.sleepers_of(owner));
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
        self.ensure(dst)?;
        let cache = self.cache.borrow();
        let d = self.target(&cache, dst)?;
        let at = d.range(off, dst_span)?;
        for i in 0..s.count {
            let from = i * s.src_stride;
            copy(d, at + i * s.dst_stride, &src[from..from + s.block]);
        }
        Ok(())
    }

    /// A remote (or local) 64-bit word as an atomic, for custom protocols and atomics.
    pub fn remote_word(&self, h: &Handle, off: usize) -> Result<RemoteWord> {
        self.ensure(h)?;
        let cache = self.cache.borrow();
        let region = probe(&cache, h)
            .cloned()
            .ok_or_else(|| out_of_bounds(h, off, 8))?;
        region.word(off)?;
        Ok(RemoteWord {
            region,
            at: HEADER_BYTES + off,
        })
    }

    /// All earlier puts and signals of this rank are complete and visible at their targets.
    /// (On shared memory every put is complete on return; this is a full fence.)
    pub fn quiet(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Orders earlier puts before later ones, without waiting for completion.
    pub fn fence(&self) {
        std::sync::atomic::fence(Ordering::Release);
    }

    // ---- waiting ----------------------------------------------------------------------------

    /// Waits until the signal word at `off` in this rank's segment `seg` is at least `value`;
    /// returns the value seen. Fails with [`ErrorKind::PeerDied`] naming the rank if a peer
    /// dies meanwhile.
    #[inline]
    pub fn wait_until(&self, seg: &Segment, off: usize, value: u64) -> Result<u64> {
        let word = self.own_word(seg, off)?;
        self.wait_word(word, self.rank, value, None)
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
        self.wait_word(word, self.rank, value, Instant::now().checked_add(timeout))
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

    /// Waits until `word` (in the memory of rank `owner`) reaches `value`.
    #[inline]
    pub(crate) fn wait_word(
        &self,
        word: &AtomicU64,
        owner: u32,
        value: u64,
        deadline: Option<Instant>,
    ) -> Result<u64> {
        let r = wait::wait_ge(
            word,
            self.sleepers_of(owner),
            value,
            self.policy,
            deadline,
            || self.check_while_asleep(),
        );
        if self.asleep.replace(false) {
            self.board.set_asleep(self.rank, false);
            self.stuck.set(0);
        }
        r
    }

    /// Called by a wait each time a sleep slice ends without its signal: marks this rank
    /// asleep, checks peers, and detects a deadlock (every rank still in the job asleep in a
    /// wait, nobody finishing one, for [`DEADLOCK_SLICES`] slices: no one is left to signal).
    fn check_while_asleep(&self) -> Result<()> {
        if !self.asleep.replace(true) {
            self.board.set_asleep(self.rank, true);
        }
        self.check_alive()?;
        let mut wakes = 0u64;
        let mut all_asleep = true;
        for r in (0..self.size).filter(|&r| r != self.rank) {
            if self.board.state(r) != RankState::Ready {
                continue;
            }
            let (asleep, w) = self.board.sleep_state(r);
            all_asleep &= asleep;
            wakes = wakes.wrapping_add(w);
        }
        if !all_asleep || self.others_wakes.replace(wakes) != wakes {
            self.stuck.set(0);
            return Ok(());
        }
        let n = self.stuck.get() + 1;
        self.stuck.set(n);
        if n >= DEADLOCK_SLICES {
            let sleeping: Vec<u32> = (0..self.size)
                .filter(|&r| r != self.rank && self.board.state(r) == RankState::Ready)
                .collect();
            let left: Vec<u32> = (0..self.size)
                .filter(|&r| self.board.state(r) == RankState::Done)
                .collect();
            return Err(Error::new(
                ErrorKind::Aborted,
                format!(
                    "deadlock: this rank and ranks {sleeping:?} have all been waiting for signals for \
                     over a second and none can arrive{}",
                    if left.is_empty() {
                        String::new()
                    } else {
                        format!(" (ranks {left:?} have left the job)")
                    }
                ),
            ));
        }
        Ok(())
    }

    /// Fails if the job was aborted, a peer died, or no peer is left that could signal.
    pub fn check_alive(&self) -> Result<()> {
        self.check_peers(true)
    }

    /// Fails if the job was aborted or a peer died; with `waiting`, also if no other rank is
    /// left in the job (nobody could send what a wait expects).
    fn check_peers(&self, waiting: bool) -> Result<()> {
        if let Some((r, why)) = self.board.aborted() {
            return Err(abort_error(r, why));
        }
        let mut live = 0;
        for (r, p) in self.peers.iter().enumerate() {
            let r = r as u32;
            if r == self.rank {
                continue;
            }
            match self.board.state(r) {
                RankState::Failed => {
                    self.board.abort(r, AbortReason::PeerDied);
                    return Err(Error::peer(
                        ErrorKind::PeerDied,
                        r,
                        format!("rank {r} failed (it panicked or returned an error)"),
                    ));
                }
                RankState::Done => continue,
                _ => {}
            }
            if p.pidfd.as_ref().is_some_and(readable) {
                if self.board.state(r) == RankState::Done {
                    continue;
                }
                self.board.abort(r, AbortReason::PeerDied);
                return Err(Error::peer(
                    ErrorKind::PeerDied,
                    r,
                    format!("rank {r} (pid {}) died without leaving the job", p.pid),
                ));
            }
            live += 1;
        }
        if let Some((pid, fd)) = &self.launcher {
            if readable(fd) {
                return Err(Error::new(
                    ErrorKind::Aborted,
                    format!("the launcher (pid {pid}) died"),
                ));
            }
        }
        if waiting && live == 0 {
            return Err(Error::new(
                ErrorKind::Aborted,
                if self.size == 1 {
                    "waiting for a signal in a one-rank world: no one else can send it".to_string()
                } else {
                    "waiting for a signal, but every other rank has left the job".to_string()
                },
            ));
        }
        Ok(())
    }

    /// Aborts the whole job: every rank's next wait fails, naming this rank.
    pub fn abort(&self) {
        self.board.set_state(self.rank, RankState::Failed);
        self.board.abort(self.rank, AbortReason::PeerDied);
    }

    /// Leaves the job cleanly after a barrier (like `MPI_Finalize`). Dropping the world
    /// without it also leaves cleanly, but without waiting for the others.
    pub fn finalize(self) -> Result<()> {
        let r = self.barrier();
        if r.is_err() {
            self.board.set_state(self.rank, RankState::Failed);
            self.left.set(true);
        }
        r
    }

    pub(crate) fn mark_failed(&self) {
        self.board.set_state(self.rank, RankState::Failed);
        self.left.set(true);
    }

    pub(crate) fn cached(&self, h: &Handle) -> Option<Arc<Region>> {
        probe(&self.cache.borrow(), h).cloned()
    }

    /// Number of attached segments (own and peers'), for leak checks.
    pub fn attached_segments(&self) -> usize {
        self.cache
            .borrow()
            .iter()
            .map(|v| v.iter().flatten().count())
            .sum()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if !self.left.get() {
            let s = if std::thread::panicking() {
                RankState::Failed
            } else {
                RankState::Done
            };
            self.board.set_state(self.rank, s);
        }
    }
}

/// A 64-bit word in some rank's segment, usable as an atomic (remote atomics on shared memory).
#[derive(Debug, Clone)]
pub struct RemoteWord {
    region: Arc<Region>,
    at: usize,
}

impl RemoteWord {
    /// The word.
    pub fn get(&self) -> &AtomicU64 {
        self.region
            .map
            .atomic_u64(self.at)
            .expect("offset checked when the word was made")
    }
}

fn abort_error(rank: u32, why: AbortReason) -> Error {
    match why {
        AbortReason::PeerDied => Error::peer(
            ErrorKind::PeerDied,
            rank,
            format!("job aborted: rank {rank} died or failed"),
        ),
        AbortReason::RankFailed => Error::peer(
            ErrorKind::PeerDied,
            rank,
            format!("job aborted by the launcher: rank {rank} failed"),
        ),
        AbortReason::Interrupted => Error::new(
            ErrorKind::Aborted,
            "job aborted: the launcher was interrupted",
        ),
    }
}

#[inline]
fn copy(d: &Region, at: usize, src: &[u8]) {
    d.map.write(at, src);
}

/// The attached, live segment of `h`, if any. Matching rank, id and key is enough: bounds
/// come from the attached (checked) header, never from the caller's handle, and a handle of
/// another job or a forged one cannot carry the segment's random key.
#[inline]
fn live<'a>(cache: &'a Cache, h: &Handle) -> Option<&'a Region> {
    match cache.get(h.rank() as usize)?.get(h.segment() as usize)? {
        Some(r) if r.handle.key() == h.key() && r.is_live() => Some(r),
        _ => None,
    }
}

#[inline]
fn probe<'a>(cache: &'a Cache, h: &Handle) -> Option<&'a Arc<Region>> {
    match cache.get(h.rank() as usize)?.get(h.segment() as usize)? {
        Some(r) if r.handle == *h => Some(r),
        _ => None,
    }
}

fn cache_insert(cache: &mut Cache, r: &Arc<Region>) {
    let v = &mut cache[r.handle.rank() as usize];
    let i = r.handle.segment() as usize;
    if v.len() <= i {
        v.resize(i + 1, None);
    }
    v[i] = Some(r.clone());
}

fn pidfd(pid: u32) -> Option<OwnedFd> {
    let p = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
}

/// Whether a pidfd says its process has exited (readable), without blocking.
fn readable(fd: &OwnedFd) -> bool {
    use rustix::event::{PollFd, PollFlags, poll};
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
}

fn raise_fd_limit(size: u32) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let want = u64::from(size) * 2 + 256;
    let lim = getrlimit(Resource::Nofile);
    if lim.current.is_some_and(|c| c < want) {
        let new = rustix::process::Rlimit {
            current: lim.maximum.map(|m| m.min(want.max(4096))).or(Some(want)),
            maximum: lim.maximum,
        };
        let _ = setrlimit(Resource::Nofile, new);
    }
}
