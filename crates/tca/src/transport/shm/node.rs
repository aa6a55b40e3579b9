//! [`Shm`]: the shared-memory transport of one rank — its peers on this node, the segments it
//! has attached, the node's start-up board, and everything that tells it a local peer died.
//!
//! What it owns (nothing of it is visible outside the crate):
//! - the node's **board** (see `super::board`): pids, control segments, rank states, the
//!   abort word and the sleep flags that deadlock detection reads;
//! - one **peer** record per rank on this node: pid, pidfd (readable once the process exits,
//!   immune to pid reuse) and the peer's control segment, whose first word is that rank's
//!   sleeper count (see [`super::wait`]);
//! - the **attach cache**: `cache[rank][segment id]` holds the checked mapping of every segment
//!   this rank has written into. The fast path of a put is one probe of this table: rank, id and
//!   key must match, and the segment must still be live.
//!
//! A put is one `memcpy` into the peer's mapping, a signal one store (SeqCst by default;
//! Release where `TCA_SIGNAL_FENCE=asymmetric` lets the sleepers' `membarrier` cover it:
//! `wait`'s module docs) or a SeqCst add,
//! followed by a futex wake when the owner's sleeper count says someone sleeps. Both are
//! complete at the target when the call returns, so `quiet` is a full fence.

use std::cell::{Cell, RefCell};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::HEADER_BYTES;
use super::board::{AbortReason, Board, Entry, RankState};
use super::region::{Region, freed, out_of_bounds};
use super::wait::{self, SpinPolicy};
use crate::bootstrap::{BoardSource, JobEnv};
use crate::cast::rank_u32;
use crate::env;
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::control::{CTRL_BYTES, SLEEPERS};
use crate::fabric::{AtomicOp, Handle, SignalOp, Strided};
use crate::process::Proc;
use crate::transport::Transport;

#[derive(Debug)]
struct Peer {
    pid: u32,
    ctrl: Arc<Region>,
    pidfd: Option<Proc>,
}

type Cache = Vec<Vec<Option<Arc<Region>>>>;

/// Sleep slices (10 ms each) with every rank of the job asleep and no progress before a wait
/// gives up as a deadlock.
const DEADLOCK_SLICES: u32 = 100;

/// Waits between two looks at the clock by a rank whose waits never sleep (see
/// [`Shm::wait_word`]): a power of two, so the count is a mask; a clock read per 1,024 waits
/// costs nothing measurable on the 8-byte path.
const BUSY_CLOCK_EVERY: u32 = 1024;

/// The shared-memory transport of one rank.
#[derive(Debug)]
pub(crate) struct Shm {
    rank: u32,
    size: u32,
    job: u64,
    board: Board,
    _board_fd: Option<OwnedFd>,
    /// Peer records by rank (this rank's own included); `None` for ranks on other nodes.
    peers: Vec<Option<Peer>>,
    /// Whether every rank of the job is on this node (then a node where everyone sleeps in a
    /// wait is a deadlock).
    whole_job: bool,
    cache: RefCell<Cache>,
    policy: SpinPolicy,
    /// How this rank's signals are ordered before it looks for sleepers ([`wait::Fence`]):
    /// the process's ([`wait::writer_fence`]), or plain while a measurement asks
    /// ([`Shm::set_plain_signals`]).
    fence: Cell<wait::Fence>,
    /// Whether a ring's streaming sender takes its next header lines ahead
    /// (`TCA_RING_PREFETCH`, default on, and a CPU with `prefetchw`; see
    /// [`Shm::prefetch_for_write`]).
    prefetch: bool,
    /// `TCA_TIMEOUT` (see [`Shm::timeout`]).
    timeout: Cell<Option<Duration>>,
    launcher: Option<Proc>,
    left: Cell<bool>,
    /// Whether this rank has marked itself asleep on the board during the current wait.
    asleep: Cell<bool>,
    /// Consecutive sleep slices in which every other rank in the job was asleep too, and the
    /// other ranks' finished-sleep counts at the last slice (any change is progress).
    stuck: Cell<u32>,
    others_wakes: Cell<u64>,
    /// Waits so far (wrapping), and when a wait last asked about the job's health: a rank
    /// whose waits never sleep still looks, every [`BUSY_CLOCK_EVERY`] waits once a
    /// [`wait::SLEEP_SLICE`] has passed (see [`Shm::look_while_busy`]).
    waits: Cell<u32>,
    last_look: Cell<Instant>,
}

impl Shm {
    /// Joins the node's board: publish, wait for the node's other ranks (`local`, sorted, this
    /// rank included), attach their control segments. Returns the transport and the control
    /// segment handles of the node's ranks (`None` for ranks elsewhere).
    pub(crate) fn join(env: JobEnv, local: &[u32]) -> Result<(Self, Vec<Option<Handle>>)> {
        let JobEnv {
            rank,
            size,
            job,
            board,
            source,
            boot_deadline,
            ..
        } = env;
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
            BoardSource::Node => {
                return Err(Error::new(
                    ErrorKind::Bootstrap,
                    "the node board is made at the rendezvous; none was announced",
                ));
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
        let timeout = env::timeout()?;
        let policy = SpinPolicy::adaptive(size, crate::bootstrap::job_cpus(), spin);
        let fence = wait::writer_fence()?;
        // Where the CPU has no `prefetchw`, the hint would cost a look-up for nothing.
        let prefetch = env::ring_prefetch()? && super::mapping::has_prefetchw();
        let launcher = match board.launcher_pid() {
            Some(pid) => Some(Proc::open(pid).map_err(|e| {
                e.unless_own(|_| {
                    Error::launcher(
                        ErrorKind::Aborted,
                        format!("the launcher (pid {pid}) is gone"),
                    )
                })
            })?),
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
                return Err(abort_error(r, why, rank));
            }
            if let Some(&r) = local.iter().find(|&&r| board.state(r) == RankState::Failed) {
                return Err(Error::peer(
                    ErrorKind::PeerDied,
                    r,
                    format!("rank {r} failed during start-up"),
                ));
            }
            if let Some(l) = &launcher {
                if l.gone() {
                    board.abort(rank, AbortReason::LauncherDied);
                    return Err(Error::launcher(
                        ErrorKind::Aborted,
                        format!("the launcher (pid {}) died during start-up", l.pid()),
                    ));
                }
            }
            Ok(())
        };
        let r = wait::wait_ge(
            board.published(),
            board.sleepers(),
            local.len() as u64,
            policy,
            Some(boot_deadline),
            None,
            None,
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
                let missing: Vec<u32> = local
                    .iter()
                    .copied()
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

        let mut peers: Vec<Option<Peer>> = (0..size).map(|_| None).collect();
        let mut ctrls = vec![None; size as usize];
        for &r in local {
            if r == rank {
                ctrls[r as usize] = Some(ctrl.handle);
                peers[r as usize] = Some(Peer {
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
            let h = Handle::new(job, e.ctrl_key, CTRL_BYTES, r, e.ctrl_segment);
            let region = Region::attach(&h, e.pid).map_err(|err| {
                err.unless_own(|err| {
                    Error::peer(
                        ErrorKind::PeerDied,
                        r,
                        format!("cannot attach rank {r} (pid {}): {err}", e.pid),
                    )
                })
            })?;
            let fd = if e.pid == my_pid {
                None
            } else {
                Some(Proc::open(e.pid).map_err(|err| {
                    err.unless_own(|_| {
                        Error::peer(
                            ErrorKind::PeerDied,
                            r,
                            format!("rank {r} (pid {}) died during start-up", e.pid),
                        )
                    })
                })?)
            };
            ctrls[r as usize] = Some(h);
            peers[r as usize] = Some(Peer {
                pid: e.pid,
                ctrl: Arc::new(region),
                pidfd: fd,
            });
        }
        let mut cache: Cache = vec![Vec::new(); size as usize];
        for p in peers.iter().flatten() {
            cache_insert(&mut cache, &p.ctrl);
        }
        Ok((
            Self {
                rank,
                size,
                job,
                board,
                _board_fd: board_fd,
                peers,
                whole_job: local.len() == size as usize,
                cache: RefCell::new(cache),
                policy,
                fence: Cell::new(fence),
                prefetch,
                timeout: Cell::new(timeout),
                launcher,
                left: Cell::new(false),
                asleep: Cell::new(false),
                stuck: Cell::new(0),
                others_wakes: Cell::new(0),
                waits: Cell::new(0),
                last_look: Cell::new(Instant::now()),
            },
            ctrls,
        ))
    }

    pub(crate) fn policy(&self) -> SpinPolicy {
        self.policy
    }

    /// How long a wait without a deadline of its own may sleep (`TCA_TIMEOUT`; none: for
    /// ever, as long as its peers live).
    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.timeout.get()
    }

    /// Sets [`Shm::timeout`].
    pub(crate) fn set_timeout(&self, t: Option<Duration>) {
        self.timeout.set(t);
    }

    /// Process id of `rank`, if it is on this node.
    pub(crate) fn pid_of(&self, rank: u32) -> Option<u32> {
        self.peers.get(rank as usize)?.as_ref().map(|p| p.pid)
    }

    /// Whether `rank` is on this node.
    #[inline]
    pub(crate) fn reaches(&self, rank: u32) -> bool {
        self.peers.get(rank as usize).is_some_and(Option::is_some)
    }

    /// This rank's own control segment.
    pub(crate) fn own_ctrl(&self) -> Arc<Region> {
        self.peer(self.rank).ctrl.clone()
    }

    #[inline(always)]
    fn peer(&self, rank: u32) -> &Peer {
        self.peers[rank as usize]
            .as_ref()
            .expect("shared memory reaches only ranks of this node (routes are checked)")
    }

    /// The sleeper count of `rank` (waiters on any word of its memory), for wait loops of
    /// other transports that sleep on this rank's words.
    #[inline(always)]
    pub(crate) fn sleepers_of(&self, rank: u32) -> &AtomicU32 {
        self.peer(rank)
            .ctrl
            .map
            .atomic_u32(HEADER_BYTES + SLEEPERS)
            .expect("sleeper word lies in the control segment (layout constant)")
    }

    // ---- segments -------------------------------------------------------------------------

    /// Creates a local segment of `len` bytes and caches it.
    pub(crate) fn alloc(&self, len: usize) -> Result<Arc<Region>> {
        self.sweep_freed();
        let region = Arc::new(Region::create(self.rank, self.job, len, "seg")?);
        cache_insert(&mut self.cache.borrow_mut(), &region);
        Ok(region)
    }

    /// Drops cached segments, this rank's and its peers', that were freed and that nothing
    /// else holds: a peer's freed segment stays mapped here only until this rank's next
    /// allocation (a program that allocates and drops buffers round after round, which its
    /// peers read in place, would otherwise keep every round's mapping).
    fn sweep_freed(&self) {
        let mut cache = self.cache.borrow_mut();
        for slot in cache.iter_mut().flatten() {
            if slot
                .as_ref()
                .is_some_and(|r| !r.is_live() && Arc::strong_count(r) == 1)
            {
                *slot = None;
            }
        }
    }

    /// [`Shm::ensure`] for a write about to go up to the program: a refusal naming the owner
    /// (it freed the segment, or left the job) is recorded as its fault on the board. Not for
    /// attaches that probe (a refusal there is expected, and handled).
    #[inline]
    fn ensure_to_write(&self, h: &Handle) -> Result<()> {
        self.ensure(h).map_err(|e| self.blamed(e))
    }

    /// Checks `h` (job and rank already checked by the caller) and attaches its segment if it
    /// is not attached yet.
    #[inline]
    pub(crate) fn ensure(&self, h: &Handle) -> Result<()> {
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
        if !self.reaches(h.rank()) {
            return Err(Error::new(
                ErrorKind::InvalidRank,
                format!(
                    "rank {} is on another node: its memory cannot be mapped here",
                    h.rank()
                ),
            ));
        }
        let slot = h.segment() as usize;
        let cached = self.cache.borrow()[h.rank() as usize]
            .get(slot)
            .and_then(|e| e.as_ref().map(|r| (r.handle == *h, r.is_live())));
        if cached == Some((true, false)) {
            // This very segment, attached before, and its owner has freed it since: no need to
            // look again (its descriptor number may already name another file).
            return Err(self.explain_refusal(h, freed(h)));
        }
        if cached.is_some() {
            // A freed segment, or a handle whose id was reused: forget the old mapping.
            let mut cache = self.cache.borrow_mut();
            if cache[h.rank() as usize][slot]
                .as_ref()
                .is_some_and(|r| !r.is_live() || r.handle != *h)
            {
                cache[h.rank() as usize][slot] = None;
            }
        }
        let region = match Region::attach(h, self.peer(h.rank()).pid) {
            Ok(r) => r,
            Err(e) => return Err(self.explain_refusal(h, e)),
        };
        cache_insert(&mut self.cache.borrow_mut(), &Arc::new(region));
        Ok(())
    }

    /// What a refused attach of `h` means. A segment that is gone because its owner died,
    /// failed or the job was aborted is reported as that (the board's and the pidfd's
    /// verdict, naming the rank); one whose owner has left the job as that, naming the
    /// owner; one a peer still in the job has freed (a stale handle, or the peer is on its
    /// way out) names that peer. Other refusals (key, length, job, a descriptor that is not
    /// a segment) name nobody: the handle is at fault. This process's own resources running
    /// out (`Transport`) are reported as they are.
    #[cold]
    fn explain_refusal(&self, h: &Handle, e: Error) -> Error {
        if e.kind() != ErrorKind::InvalidHandle {
            return e;
        }
        if let Err(verdict) = self.check_peers(false) {
            return verdict;
        }
        let r = h.rank();
        if r == self.rank {
            // Its own segment: a refusal names no rank.
            return Error::new(e.kind(), e.message());
        }
        // A rank that left has no segment left, whatever the refusal says (its descriptor
        // numbers may already name others' files). One that left because of another rank's
        // fault (it recorded the blame) says so; an abort on account of `r` names that rank.
        if self.board.state(r) == RankState::Done {
            let root = self.board.root_of(r);
            let after = if root == r {
                String::new()
            } else {
                format!(" after a fault of rank {root}")
            };
            return Error::peer(
                ErrorKind::InvalidHandle,
                r,
                format!("rank {r} has left the job{after}: {}", e.message()),
            );
        }
        e
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

    /// The attached mapping of `h` (attaching it first), for chains.
    pub(crate) fn resolve(&self, h: &Handle) -> Result<Arc<Region>> {
        self.ensure(h)?;
        probe(&self.cache.borrow(), h)
            .cloned()
            .ok_or_else(|| out_of_bounds(h, 0, 0))
    }

    /// Number of attached segments (own and peers').
    pub(crate) fn attached_segments(&self) -> usize {
        self.cache
            .borrow()
            .iter()
            .map(|v| v.iter().flatten().count())
            .sum()
    }

    /// One of this rank's own live segments, if `seg` and `key` name it (requests from a
    /// network peer are checked against this, never trusted).
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    fn own(&self, seg: u32, key: u64) -> Result<Arc<Region>> {
        let cache = self.cache.borrow();
        match cache[self.rank as usize].get(seg as usize) {
            Some(Some(r)) if r.handle.key() == key && r.is_live() => Ok(r.clone()),
            Some(Some(r)) if r.handle.key() == key => Err(Error::new(
                ErrorKind::InvalidHandle,
                format!("segment {seg} of rank {} has been freed", self.rank),
            )),
            _ => Err(Error::new(
                ErrorKind::InvalidHandle,
                format!(
                    "handle to segment {seg} of rank {} refused: its key or id does not match \
                     (stale or forged handle)",
                    self.rank
                ),
            )),
        }
    }

    /// Whether `seg` with `key` is a segment of this rank that has been freed (a write that
    /// raced with the free: lost, as on shared memory, and nobody's mistake).
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn own_freed(&self, seg: u32, key: u64) -> bool {
        let cache = self.cache.borrow();
        matches!(
            cache[self.rank as usize].get(seg as usize),
            Some(Some(r)) if r.handle.key() == key && !r.is_live()
        )
    }

    /// Writes `src` at `off` of this rank's segment `seg` (checked: key, liveness, bounds).
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn write_own(&self, seg: u32, key: u64, off: u64, src: &[u8]) -> Result<()> {
        let r = self.own(seg, key)?;
        let off = usize::try_from(off).unwrap_or(usize::MAX);
        let at = r.range(off, src.len())?;
        r.map.write(at, src)
    }

    /// Applies a signal to a word of this rank's segment `seg` (checked) and wakes sleepers.
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn signal_own(&self, seg: u32, key: u64, off: u64, op: SignalOp) -> Result<()> {
        let r = self.own(seg, key)?;
        let word = r.word(usize::try_from(off).unwrap_or(usize::MAX))?;
        self.raise(word, self.rank, op);
        Ok(())
    }

    /// An atomic on a word of this rank's segment `seg` (checked); returns the old value.
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn atomic_own(&self, seg: u32, key: u64, off: u64, op: AtomicOp) -> Result<u64> {
        let r = self.own(seg, key)?;
        let word = r.word(usize::try_from(off).unwrap_or(usize::MAX))?;
        Ok(self.apply_atomic(word, self.rank, op))
    }

    // ---- data path --------------------------------------------------------------------------
    //
    // Every copy below goes to an offset `Region::range` returned, which fits the mapping, so
    // the copy cannot fail; its `Result` is still passed on (see `Region::range`).

    pub(crate) fn put_inline(&self, dst: &Handle, off: usize, src: &[u8]) -> Result<()> {
        self.ensure(dst)?;
        let cache = self.cache.borrow();
        let d = self.target(&cache, dst)?;
        let at = d.range(off, src.len())?;
        d.map.write_inline(at, src)
    }

    /// The fast path of `put_signal`: `Some` when both segments are attached and live (one
    /// probe each; rank, id and key must match, which no handle of another job can), `None`
    /// when the caller must check the handles and take the slow path.
    #[inline(always)]
    pub(crate) fn put_signal_fast(
        &self,
        dst: &Handle,
        off: usize,
        src: &[u8],
        sig: &Handle,
        sig_off: usize,
        op: SignalOp,
    ) -> Option<Result<()>> {
        let cache = self.cache.borrow();
        let (d, s) = (live(&cache, dst)?, live(&cache, sig)?);
        Some(self.put_signal_in(d, off, src, s, sig_off, sig.rank(), op))
    }

    /// Starts taking the line at `off` in `dst` (a live segment of this node) for writing: a
    /// hint (`Mapping::prefetch_for_write`), nothing where the handle or offset is not good.
    #[inline]
    pub(crate) fn prefetch_for_write(&self, dst: &Handle, off: usize) {
        if !self.prefetch {
            return;
        }
        let cache = self.cache.borrow();
        if let Some(d) = live(&cache, dst) {
            if let Ok(at) = d.range(off, 1) {
                d.map.prefetch_for_write(at);
            }
        }
    }

    /// The fast path of `put` (see [`Shm::put_signal_fast`]).
    #[inline]
    pub(crate) fn put_fast(&self, dst: &Handle, off: usize, src: &[u8]) -> Option<Result<()>> {
        let cache = self.cache.borrow();
        let d = live(&cache, dst)?;
        Some(d.range(off, src.len()).and_then(|at| d.map.write(at, src)))
    }

    #[inline(always)]
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
        d.map.write(at, src)?;
        self.raise(word, owner, op);
        Ok(())
    }

    /// Applies `op` to `word` (in the memory of rank `owner`) and wakes its sleepers.
    #[inline(always)]
    pub(crate) fn raise(&self, word: &AtomicU64, owner: u32, op: SignalOp) {
        wait::raise(word, self.sleepers_of(owner), op, self.fence.get());
    }

    /// A sleeper's fence of the writers that store without one (see [`wait::fence_writers`]).
    pub(crate) fn fence_writers(&self) -> bool {
        wait::fence_writers()
    }

    /// Makes this rank's signal stores plain, ordered by the sleepers' `membarrier` (`true`:
    /// [`wait::Fence::Asymmetric`] where the process can register, else they stay SeqCst), or
    /// returns them to the process's fence (`false`). Every waiter fences the writers before
    /// it sleeps, so either is as safe at any time as the fence itself (`wait`'s module docs).
    /// For measuring what the fence costs in one run; returns whether the stores are plain.
    pub(crate) fn set_plain_signals(&self, on: bool) -> Result<bool> {
        let fence = if on {
            wait::asymmetric_fence()
        } else {
            wait::writer_fence()?
        };
        self.fence.set(fence);
        Ok(fence == wait::Fence::Asymmetric)
    }

    pub(crate) fn apply_atomic(&self, word: &AtomicU64, owner: u32, op: AtomicOp) -> u64 {
        let (old, changed) = wait::apply_atomic(word, op);
        if changed {
            wait::notify(word, self.sleepers_of(owner));
        }
        old
    }

    // ---- waiting and liveness -----------------------------------------------------------------

    /// Waits until `word` (in this rank's memory) reaches `value`; `progress` runs while
    /// spinning and after every sleep slice (network completions, see `fabric::World`).
    #[inline]
    ///
    /// `judge` gets this transport's verdict after every sleep slice (liveness, deadlock) and
    /// may add its own (the job monitor) or soften it (give in-flight network data a moment).
    /// Without a `deadline`, [`Shm::timeout`] bounds the wait, counted by `patience` (the
    /// blocking operation's, shared by all its waits; `None`: this wait alone).
    pub(crate) fn wait_word(
        &self,
        word: &AtomicU64,
        value: u64,
        deadline: Option<Instant>,
        patience: Option<&wait::Patience>,
        progress: Option<&wait::Progress<'_>>,
        mut judge: impl FnMut(Result<()>) -> Result<()>,
    ) -> Result<u64> {
        let alone = wait::Patience::default();
        let r = wait::wait_ge(
            word,
            self.sleepers_of(self.rank),
            value,
            self.policy,
            deadline,
            self.timeout.get().map(|t| (t, patience.unwrap_or(&alone))),
            progress,
            || judge(self.check_while_asleep()),
        );
        // A wait that ran out of its timeout stays marked asleep: the rank is about to fail,
        // and a peer timing out now must not take it for the one rank not waiting.
        let timed_out = r.as_ref().is_err_and(|e| e.kind() == ErrorKind::Timeout);
        if !timed_out && self.asleep.replace(false) {
            self.board.set_asleep(self.rank, false);
            self.stuck.set(0);
            self.last_look.set(Instant::now());
        }
        let n = self.waits.get().wrapping_add(1);
        self.waits.set(n);
        match r {
            Ok(v) if n % BUSY_CLOCK_EVERY == 0 => self.look_while_busy(&mut judge).map(|()| v),
            Err(e) if deadline.is_none() && e.kind() == ErrorKind::Timeout => {
                Err(self.blamed(self.blame_timeout(e)))
            }
            r => r,
        }
    }

    /// Whom a wait that ran out of `TCA_TIMEOUT` should name. The rank it waited for may
    /// itself be waiting (every rank's timeout fires at about the same time), so it asks the
    /// node: a peer whose process is stopped (`SIGSTOP`, a debugger) is the one; else, when
    /// exactly one peer still in the job is not asleep in a wait while this rank timed out,
    /// that busy (or spinning) peer is. Otherwise the error stays unnamed and the message
    /// engines name the rank they waited for.
    #[cold]
    fn blame_timeout(&self, e: Error) -> Error {
        if e.rank().is_some() || e.by_launcher() {
            return e;
        }
        let mut busy = Vec::new();
        for r in self.others_present() {
            let Some(p) = &self.peers[r as usize] else {
                continue;
            };
            if p.pidfd.as_ref().is_some_and(Proc::stopped) {
                return Error::peer(
                    ErrorKind::Timeout,
                    r,
                    format!("{e}: rank {r} (pid {}) is stopped", p.pid),
                );
            }
            if !self.board.sleep_state(r).0 {
                busy.push(r);
            }
        }
        match busy[..] {
            [r] if self.whole_job => Error::peer(
                ErrorKind::Timeout,
                r,
                format!("{e}: rank {r} is the only other rank not waiting (busy or stuck)"),
            ),
            _ => e,
        }
    }

    /// The health check of a rank whose waits end without sleeping (so the check after each
    /// sleep slice never runs): at most once a sleep slice, the abort word, failed peers and
    /// the launcher — what the board and one pidfd tell, no syscall per peer (a dead peer
    /// makes some wait sleep, and sleeping waits look at every pidfd). Its verdict is not the
    /// judge's to soften: the wait itself succeeded. Without it a busy job whose launcher was
    /// killed runs on unsupervised.
    #[cold]
    fn look_while_busy(&self, judge: &mut impl FnMut(Result<()>) -> Result<()>) -> Result<()> {
        let now = Instant::now();
        if now.duration_since(self.last_look.get()) < wait::SLEEP_SLICE {
            return Ok(());
        }
        self.last_look.set(now);
        self.check_board()?;
        self.check_launcher()?;
        judge(Ok(()))
    }

    /// Called by a wait each time a sleep slice ends without its signal: marks this rank
    /// asleep, checks peers, and detects a deadlock (every rank still in the job asleep in a
    /// wait, nobody finishing one, for [`DEADLOCK_SLICES`] slices: no one is left to signal).
    fn check_while_asleep(&self) -> Result<()> {
        if !self.asleep.replace(true) {
            self.board.set_asleep(self.rank, true);
        }
        self.check_peers(true)?;
        if !self.whole_job {
            return Ok(());
        }
        let mut wakes = 0u64;
        let mut all_asleep = true;
        for r in self.others_present() {
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
            let sleeping: Vec<u32> = self.others_present().collect();
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

    /// Fails if the job was aborted or a peer died; with `waiting`, also if no other rank is
    /// left in the job (nobody could send what a wait expects).
    pub(crate) fn check_peers(&self, waiting: bool) -> Result<()> {
        self.check_board()?;
        let mut live = 0;
        for (r, p) in self.peers.iter().enumerate() {
            let r = rank_u32(r);
            let Some(p) = p else {
                live += 1; // on another node: its liveness is the job monitor's to tell
                continue;
            };
            if r == self.rank || self.board.state(r) == RankState::Done {
                continue;
            }
            if p.pidfd.as_ref().is_some_and(Proc::gone) {
                if self.board.state(r) == RankState::Done {
                    continue;
                }
                let why = format!("rank {r} (pid {}) died without leaving the job", p.pid);
                return Err(self.abort_for(r, why));
            }
            live += 1;
        }
        self.check_launcher()?;
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

    /// What the board alone tells, without a syscall: the job's abort, or a peer of this node
    /// that failed.
    fn check_board(&self) -> Result<()> {
        if let Some((r, why)) = self.board.aborted() {
            return Err(self.blamed(abort_error(r, why, self.rank)));
        }
        let failed = (0..self.size).find(|&r| {
            r != self.rank && self.reaches(r) && self.board.state(r) == RankState::Failed
        });
        if let Some(r) = failed {
            let why = format!("rank {r} failed (it panicked or returned an error)");
            return Err(self.abort_for(r, why));
        }
        Ok(())
    }

    /// Aborts the job on account of `r`, a peer of this node that died or failed (`why`), and
    /// returns this rank's error: naming `r`, or the first cause of `r`'s trouble where `r`
    /// blamed one, or an abort already in force (a rank that saw the launcher die, then
    /// exited). Recorded as this rank's blame too.
    #[cold]
    fn abort_for(&self, r: u32, why: String) -> Error {
        self.blamed(match self.board.abort_at_root(r, AbortReason::PeerDied) {
            (a, AbortReason::PeerDied) if a == r => Error::peer(ErrorKind::PeerDied, r, why),
            (a, AbortReason::PeerDied) if a != self.rank && a == self.board.root_of(r) => {
                Error::peer(
                    ErrorKind::PeerDied,
                    a,
                    format!("{why}, after a fault of rank {a}"),
                )
            }
            (a, reason) => abort_error(a, reason, self.rank),
        })
    }

    /// Records on the board that this rank meets a fault of `culprit` (see the board's blame).
    pub(crate) fn blame(&self, culprit: u32) {
        self.board.blame(self.rank, culprit);
    }

    /// Records on the board that this rank meets `e`, a fault of the rank it names (its death
    /// or failure, its leaving, its silence), before the error goes up to the program: whoever
    /// aborts the job on this rank's account later names that rank instead (the board's
    /// blame). Returns `e`.
    #[cold]
    fn blamed(&self, e: Error) -> Error {
        if let (ErrorKind::PeerDied | ErrorKind::Timeout | ErrorKind::InvalidHandle, Some(r)) =
            (e.kind(), e.rank())
        {
            self.board.blame(self.rank, r);
        }
        e
    }

    /// Fails if the launcher that started this rank has died.
    /// The first rank to see it aborts the job saying so, so that every other rank names the
    /// launcher too (not this rank, whose exit they might notice first).
    fn check_launcher(&self) -> Result<()> {
        match &self.launcher {
            Some(l) if l.gone() => {
                self.board.abort(self.rank, AbortReason::LauncherDied);
                Err(Error::launcher(
                    ErrorKind::Aborted,
                    format!("the launcher (pid {}) died", l.pid()),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The other ranks of the job still in it (published and not left), by the board.
    fn others_present(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.size).filter(|&r| r != self.rank && self.board.state(r) == RankState::Ready)
    }

    /// Whether `rank`, of this node, has finished cleanly ([`Shm::has_left`] without the
    /// failed: a failure is reported as itself, not as a missing segment).
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn is_done(&self, rank: u32) -> bool {
        self.reaches(rank) && rank != self.rank && self.board.state(rank) == RankState::Done
    }

    /// Whether `rank`, on this node, has left the job (cleanly or not).
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn has_left(&self, rank: u32) -> bool {
        self.reaches(rank)
            && rank != self.rank
            && matches!(self.board.state(rank), RankState::Done | RankState::Failed)
    }

    /// Whether `rank`'s process, on this node, has exited (its pidfd says so; a rank of
    /// this process has none and never has).
    pub(crate) fn exited(&self, rank: u32) -> bool {
        self.peers
            .get(rank as usize)
            .and_then(Option::as_ref)
            .and_then(|p| p.pidfd.as_ref())
            .is_some_and(Proc::gone)
    }

    /// Aborts the whole job on account of this rank.
    pub(crate) fn abort(&self) {
        self.board.set_state(self.rank, RankState::Failed);
        self.board.abort(self.rank, AbortReason::PeerDied);
    }

    /// Marks this rank failed on account of `rank` (another rank, which it blames on the board
    /// first) and aborts the job naming the first cause (first abort wins). Returns the rank
    /// the abort in force names, when it is about a rank.
    pub(crate) fn abort_naming(&self, rank: u32) -> Option<u32> {
        self.blame(rank);
        self.board.set_state(self.rank, RankState::Failed);
        match self.board.abort_at_root(rank, AbortReason::PeerDied) {
            (r, AbortReason::PeerDied | AbortReason::RankFailed) => Some(r),
            _ => None,
        }
    }

    /// Marks this rank failed (it returned an error) and left.
    pub(crate) fn mark_failed(&self) {
        self.board.set_state(self.rank, RankState::Failed);
        self.left.set(true);
    }
}

/// The shared-memory transport behind the boundary: every put is one `memcpy` into the
/// peer's mapping, complete on return; signals (see the module docs) and atomics are
/// followed by a futex wake when the owner's sleeper count says someone sleeps.
impl Transport for Shm {
    fn attach(&self, h: &Handle) -> Result<()> {
        self.ensure(h)
    }

    #[inline]
    fn put(&self, dst: &Handle, off: usize, src: &[u8]) -> Result<()> {
        {
            let cache = self.cache.borrow();
            if let Some(d) = live(&cache, dst) {
                let at = d.range(off, src.len())?;
                return d.map.write(at, src);
            }
        }
        self.ensure_to_write(dst)?;
        let cache = self.cache.borrow();
        let d = self.target(&cache, dst)?;
        let at = d.range(off, src.len())?;
        d.map.write(at, src)
    }

    #[inline]
    fn put_signal(
        &self,
        dst: &Handle,
        off: usize,
        src: &[u8],
        sig: &Handle,
        sig_off: usize,
        op: SignalOp,
    ) -> Result<()> {
        if let Some(r) = self.put_signal_fast(dst, off, src, sig, sig_off, op) {
            return r;
        }
        self.ensure_to_write(dst)?;
        self.ensure_to_write(sig)?;
        let cache = self.cache.borrow();
        let d = self.target(&cache, dst)?;
        let s = self.target(&cache, sig)?;
        self.put_signal_in(d, off, src, s, sig_off, sig.rank(), op)
    }

    fn signal(&self, sig: &Handle, off: usize, op: SignalOp) -> Result<()> {
        self.ensure_to_write(sig)?;
        let cache = self.cache.borrow();
        let word = self.target(&cache, sig)?.word(off)?;
        self.raise(word, sig.rank(), op);
        Ok(())
    }

    /// A remote atomic: every operation that changes the word wakes its sleepers.
    fn atomic(&self, h: &Handle, off: usize, op: AtomicOp) -> Result<u64> {
        self.ensure_to_write(h)?;
        let cache = self.cache.borrow();
        let word = self.target(&cache, h)?.word(off)?;
        Ok(self.apply_atomic(word, h.rank(), op))
    }

    fn put_strided(
        &self,
        dst: &Handle,
        off: usize,
        src: &[u8],
        s: Strided,
        dst_span: usize,
    ) -> Result<()> {
        self.ensure_to_write(dst)?;
        let cache = self.cache.borrow();
        let d = self.target(&cache, dst)?;
        let at = d.range(off, dst_span)?;
        for i in 0..s.count {
            let from = i * s.src_stride;
            d.map
                .write(at + i * s.dst_stride, &src[from..from + s.block])?;
        }
        Ok(())
    }

    /// Shared memory completes every put on return: a full fence makes it visible in order.
    fn quiet(&self) -> Result<()> {
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }

    fn fence(&self) {
        std::sync::atomic::fence(Ordering::Release);
    }
}

impl Drop for Shm {
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

/// The error of an abort in force, as rank `me` meets it. An abort on `me`'s own account (it
/// is the first cause another rank named) is not news of its own death.
fn abort_error(rank: u32, why: AbortReason, me: u32) -> Error {
    match why {
        AbortReason::PeerDied | AbortReason::RankFailed if rank == me => Error::new(
            ErrorKind::Aborted,
            format!(
                "job aborted on account of this rank (rank {rank}): another rank failed \
                 because of it"
            ),
        ),
        AbortReason::PeerDied => Error::peer(
            ErrorKind::PeerDied,
            rank,
            format!(
                "job aborted: rank {rank} died or failed (or another rank failed because of it)"
            ),
        ),
        AbortReason::RankFailed => Error::peer(
            ErrorKind::PeerDied,
            rank,
            format!(
                "job aborted by the launcher: rank {rank} failed (or another rank failed \
                 because of it)"
            ),
        ),
        AbortReason::Interrupted => Error::launcher(
            ErrorKind::Aborted,
            "job aborted: the launcher was interrupted",
        ),
        AbortReason::LauncherDied => Error::launcher(
            ErrorKind::Aborted,
            format!("job aborted: the launcher died (rank {rank} saw it first)"),
        ),
    }
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
