//! The network transport: libfabric (cargo feature `ofi`), through the `tca-ofi` binding of
//! the system libfabric. Bytes between nodes move only through libfabric.
//!
//! # How the fabric's operations map onto libfabric
//! One reliable-datagram endpoint (`FI_EP_RDM`) per rank, one completion queue, an address
//! vector holding every rank's endpoint name (exchanged once at start-up).
//!
//! - **Messages** carry everything that must be *applied* at the target: a 72-byte header (80
//!   with PUT2, below) and, for puts of at most `Ofi::eager` bytes ([`EAGER_MAX`] on a stream
//!   provider, [`EAGER_LAYERED`] on others), the payload. The target's progress
//!   (inside any wait of that rank) checks the header like untrusted input — segment id, key,
//!   liveness, bounds, alignment, all against what it registered itself — then copies the
//!   payload and applies the signal or atomic with the same code the shared-memory transport
//!   uses, so local sleepers are woken. Why not `fi_writedata` with the signal in its 8 bytes
//!   of remote CQ data (4 on verbs)? Those bytes cannot name a segment, a word and a 64-bit
//!   value; a message carrying the signal costs the same one network operation and keeps every
//!   check at the owner.
//! - **Large puts** are RMA writes (`fi_write`) into the target's registered segment (memory
//!   is registered once, when the segment is allocated), by one of the seed's data modes
//!   ([`Path`]): straight from the source where it lies in one of this rank's registered
//!   segments (MtoM, with that registration's descriptor) or where the provider reads any
//!   memory (tcp, net); otherwise, on a provider that needs local buffers registered (verbs,
//!   efa) or with `TCA_OFI_STAGE=always`, copied through two registered staging buffers of
//!   [`STAGE`] bytes used alternately, one filled while the other is written (BtoM: two
//!   copies, the target's none). A put_signal sends its header after the write. The provider's `FI_ORDER_SAW` (send after
//!   write) makes the target apply the signal after the data has landed; without it the
//!   header waits for the write's completion. The provider checks key and bounds of a write
//!   against the registration; the sender checks them first against the segment's
//!   description, so an out-of-bounds put never leaves the node.
//! - **Attach** is a request: `Describe(segment, key)` answered by the owner with the
//!   registration's remote key, address and length, or refused (wrong key, wrong job, freed).
//! - **Atomics** are requests answered with the old value.
//! - **quiet** waits for every outstanding write, then sends `Quiet` to each rank written to
//!   since the last quiet and waits for the answers: the target answers after applying every
//!   earlier message of ours, so on return everything is visible there. Refusals the targets
//!   sent meanwhile (a put into a segment freed after it was described) are returned by it.
//!
//! # Header (little endian)
//! ```text
//! 0  kind u8, op u8, flags u16, source rank u32
//! 8  payload length u32, destination segment u32
//! 16 destination key u64
//! 24 destination offset u64
//! 32 signal segment u32, second signal offset u32 (flag SET2: the second value is set into
//!    that word of the signal segment before the signal is applied; a ring packet carrying
//!    the credit owed to its receiver)
//! 40 signal key u64
//! 48 signal offset u64
//! 56 value u64 (signal or atomic operand; answers: the result)
//! 64 second value u64 (compare-exchange's new value; requests and answers: request id; a
//!    signal with SET2: the value set into the second word)
//! 72 payload
//! ```
//! With flag PUT2 (a ring packet's body and then its header line, one message) the header
//! is 8 bytes longer and the payload is two ranges of the destination segment, the first at
//! the destination offset and the rest at the second:
//! ```text
//! 72 second destination offset u32, first range's length u32
//! 80 payload
//! ```
//!
//! # Progress
//! The tcp provider progresses data only while its completion queue is read, so waits call
//! [`Ofi::progress`] while they spin and sleep on the queue's file descriptor (see
//! `fabric::World::wait_word`). A rank that computes for a long time without calling tca
//! delays its peers' large writes into it, as with MPI without a progress thread.

#![allow(unsafe_code)] // posting operations to libfabric; each call argued below

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use tca_ofi::{Addr, Completion, Config, Endpoint, MemoryRegion, OpContext};

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::shm::region::{FREED_SEGMENTS, Region};
use super::shm::wait::{self, Progress};
use super::shm::{HEADER_BYTES, Shm};
use super::{NetTransfers, Path, STAGE};
use crate::cast::{rank_u32, usize_sat};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::{AtomicOp, Handle, Packet, SignalOp, Strided};

mod lanes;

/// Header bytes in front of every message.
const HDR: usize = 72;
/// The header of a [`PUT2`] message: [`HDR`] and its two-range extension.
const HDR_MAX: usize = HDR + 8;
/// Largest payload carried inside a message, on a provider that sends every message down
/// one ordered stream (`net`, libfabric's native TCP endpoint; `Ofi::eager`); larger puts
/// are RMA writes. A 32 KiB ring packet (a two-sided message at the eager limit, a full
/// bundle) and its header line, not 8 KiB: a ring packet of 8-16 KiB as one message instead of an RMA
/// write, whose completion the sender waits for, and a message after it: 2-rank Allreduce at
/// 8-16 KiB over TCP in 0.51-0.56x the time, Bcast 0.74-0.91x (BENCHMARKS.md, "Across
/// nodes"). It costs 4 MiB of registered send and receive buffers per rank.
pub(crate) const EAGER_MAX: usize = (32 << 10) + crate::fabric::line::LINE;
/// Largest payload of a message on other providers. Layered ones switch to a rendezvous of
/// their own above some size (`ofi_rxm` at 16 KiB: the receiver reads the data later) and
/// then complete a later small message, the signal, before the earlier large one has
/// landed: tca's messages must stay below that.
const EAGER_LAYERED: usize = 8 << 10;
/// The smallest message a provider must carry: a header and a ring packet's header line, a
/// refusal's text.
const EAGER_MIN: usize = 1 << 10;
const BUF: usize = HDR_MAX + EAGER_MAX;

/// The length of an eager payload (at most [`EAGER_MAX`], 32 KiB) as a header carries it.
#[inline]
#[allow(clippy::cast_possible_truncation)] // at most EAGER_MAX (see above)
fn eager_len(n: usize) -> u32 {
    debug_assert!(n <= EAGER_MAX);
    n as u32
}
/// Send buffers (and their contexts): messages in flight from this rank.
const TX: usize = 64;
/// Posted receive buffers.
const RX: usize = 64;
/// Contexts for RMA writes in flight.
const WR: usize = 16;
const NONE: u32 = u32::MAX;
/// How long a leaving rank keeps polling after its last send completed (see `Ofi::drain`).
const LINGER: std::time::Duration = std::time::Duration::from_millis(10);

/// How long a wait on the network sleeps before it polls again: a provider's completion-queue
/// descriptor need not wake for data that still needs progress to become a completion (the
/// tcp provider's does not always), so a sleeping rank polls every half millisecond.
pub(crate) const NAP: std::time::Duration = std::time::Duration::from_micros(500);
/// Turns that returned at once, with no completion read, after which a wait on the network
/// whose quiet stretch has lasted [`QUICK_FOR`] sleeps [`POLL_SLEEP`] per turn
/// ([`Ofi::sleep_turn`]).
const POLLS_BEFORE_SLEEP: u32 = 64;
/// How long a wait on the network keeps polling a descriptor that returns at once while no
/// completion comes ([`Ofi::sleep_turn`]): a large put into this rank lands only as fast as
/// it polls (libfabric's TCP providers move the bytes in the target's progress, and a write
/// completes nothing at its target), and a 1-4 MiB put over TCP takes 0.5-2 ms here. Sleeping
/// after the first 64 quick turns cost the 1 MiB and 4 MiB PingPong 1.4x their time
/// (BENCHMARKS.md, "A large put into a waiting rank streams").
const QUICK_FOR: std::time::Duration = std::time::Duration::from_millis(2);
/// The most turns that return at once one wait on the network takes before every further
/// turn sleeps [`POLL_SLEEP`], whatever arrives.
const QUICK_MAX: u32 = 4096;
/// A turn's sleep once a wait's turns look like a descriptor that never blocks
/// ([`Ofi::sleep_turn`]), and in the transport's own stalled loops.
const POLL_SLEEP: std::time::Duration = std::time::Duration::from_micros(50);
/// A descriptor poll that returned ready within this long counts as one that did not sleep
/// (one that returns at once takes about 1 us here); as long as [`POLL_SLEEP`], so that every
/// other turn takes at least that.
const AT_ONCE: std::time::Duration = POLL_SLEEP;

/// The most turns one wait lasting `waited` takes in [`Ofi::sleep_turn`]: [`QUICK_MAX`] that
/// return at once, one more, and one per [`POLL_SLEEP`] after them (each of those sleeps at
/// least that long).
pub(crate) fn turns_bound(waited: std::time::Duration) -> u64 {
    let per = POLL_SLEEP.as_micros().max(1);
    let slept = u64::try_from(waited.as_micros() / per).unwrap_or(u64::MAX);
    u64::from(QUICK_MAX) + 1 + slept
}

/// One wait's sleep turns on the network ([`Ofi::sleep_turn`]).
#[derive(Debug, Default)]
pub(crate) struct QuickTurns {
    /// Turns that returned at once in all.
    total: Cell<u32>,
    /// Those since a completion was last read.
    quiet: Cell<u32>,
    /// When the stretch without completions began.
    since: Cell<Option<std::time::Instant>>,
    /// The transport's completion count when last looked at.
    seen: Cell<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Put = 1,
    Signal = 2,
    Atomic = 3,
    Describe = 4,
    Quiet = 5,
    Answer = 6,
    Refuse = 7,
    Revoke = 8,
}

impl Kind {
    fn from(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::Put,
            2 => Self::Signal,
            3 => Self::Atomic,
            4 => Self::Describe,
            5 => Self::Quiet,
            6 => Self::Answer,
            7 => Self::Refuse,
            8 => Self::Revoke,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Header {
    kind: u8,
    op: u8,
    flags: u16,
    src: u32,
    len: u32,
    dst_seg: u32,
    dst_key: u64,
    dst_off: u64,
    sig_seg: u32,
    /// With [`SET2`]: the word of the signal segment that `value2` is set into.
    sig_off2: u32,
    sig_key: u64,
    sig_off: u64,
    value: u64,
    value2: u64,
    /// With [`PUT2`]: where the payload's second range goes.
    dst_off2: u32,
    /// With [`PUT2`]: the length of the payload's first range.
    len1: u32,
}

/// A signal message's flag: `value2` is also set into the word at `sig_off2` of the signal
/// segment, before the signal (`World::put_packet`: the credit a ring packet carries).
const SET2: u16 = 1;
/// A put or signal message's flag: the payload is two ranges of the destination segment, its
/// first `len1` bytes at `dst_off` and the rest at `dst_off2`, written in that order (before
/// the signal: `World::put_packet`, a ring packet's body and its header line).
const PUT2: u16 = 2;

impl Header {
    fn encode(&self, b: &mut [u8]) {
        b[0] = self.kind;
        b[1] = self.op;
        b[2..4].copy_from_slice(&self.flags.to_le_bytes());
        b[4..8].copy_from_slice(&self.src.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..16].copy_from_slice(&self.dst_seg.to_le_bytes());
        b[16..24].copy_from_slice(&self.dst_key.to_le_bytes());
        b[24..32].copy_from_slice(&self.dst_off.to_le_bytes());
        b[32..36].copy_from_slice(&self.sig_seg.to_le_bytes());
        b[36..40].copy_from_slice(&self.sig_off2.to_le_bytes());
        b[40..48].copy_from_slice(&self.sig_key.to_le_bytes());
        b[48..56].copy_from_slice(&self.sig_off.to_le_bytes());
        b[56..64].copy_from_slice(&self.value.to_le_bytes());
        b[64..72].copy_from_slice(&self.value2.to_le_bytes());
        if self.flags & PUT2 != 0 {
            b[72..76].copy_from_slice(&self.dst_off2.to_le_bytes());
            b[76..80].copy_from_slice(&self.len1.to_le_bytes());
        }
    }

    /// Its bytes on the wire: [`HDR`], or [`HDR_MAX`] with the [`PUT2`] extension.
    fn size(&self) -> usize {
        if self.flags & PUT2 != 0 { HDR_MAX } else { HDR }
    }

    /// Parses a received message: `None` unless it is a whole, well-formed header whose
    /// payload length matches what arrived.
    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < HDR {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let mut h = Self {
            kind: b[0],
            op: b[1],
            flags: u16::from_le_bytes([b[2], b[3]]),
            src: u32_at(4),
            len: u32_at(8),
            dst_seg: u32_at(12),
            dst_key: u64_at(16),
            dst_off: u64_at(24),
            sig_seg: u32_at(32),
            sig_off2: u32_at(36),
            sig_key: u64_at(40),
            sig_off: u64_at(48),
            value: u64_at(56),
            value2: u64_at(64),
            dst_off2: 0,
            len1: 0,
        };
        if h.flags & PUT2 != 0 && b.len() >= HDR_MAX {
            h.dst_off2 = u32_at(72);
            h.len1 = u32_at(76);
        }
        let whole = b.len().checked_sub(h.size()) == Some(h.len as usize);
        (Kind::from(h.kind).is_some() && whole).then_some(h)
    }
}

/// Operation codes of `op` (signals and atomics share them).
mod op {
    pub const SET: u8 = 1;
    pub const ADD: u8 = 2;
    pub const LOAD: u8 = 3;
    pub const SWAP: u8 = 4;
    pub const CAS: u8 = 5;
}

fn encode_signal(op: SignalOp) -> (u8, u64) {
    match op {
        SignalOp::Set(v) => (op::SET, v),
        SignalOp::Add(v) => (op::ADD, v),
    }
}

/// What the owner told us about one of its segments.
#[derive(Debug, Clone, Copy)]
struct Remote {
    key: u64,
    len: usize,
    rkey: u64,
    addr: u64,
}

/// One of this rank's segments as registered for RMA: the memory, its registration, and the
/// ranks that asked for its description.
type Registered = (Arc<Region>, MemoryRegion, Vec<u32>);

/// An answer to one of our requests.
#[derive(Debug, Clone)]
enum Reply {
    Value(Header),
    Refused(String),
}

/// The two staging buffers of [`Path::Staged`] writes, [`STAGE`] bytes each, and their
/// registration.
struct Stage {
    mr: MemoryRegion,
    region: Region,
}

/// `TCA_OFI_STAGE`: `auto` (or unset) stages only where the provider needs it, `always`
/// stages every write from unregistered memory.
fn stage_always_from_env() -> Result<bool> {
    match std::env::var(crate::env::OFI_STAGE)
        .ok()
        .as_deref()
        .map(str::trim)
    {
        None | Some("" | "auto") => Ok(false),
        Some("always") => Ok(true),
        Some(other) => Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "{}={other:?}: expected auto or always",
                crate::env::OFI_STAGE
            ),
        )),
    }
}

/// The libfabric transport of one rank.
///
/// Field order is drop order: the endpoint (which closes every registration made on it)
/// goes before the memory it registered and before the operation contexts it may still hold.
pub(crate) struct Ofi {
    ep: Endpoint,
    /// This rank's segments registered for RMA, by segment id, with the ranks that asked
    /// for their description (told when the segment is freed).
    regs: RefCell<HashMap<u32, Registered>>,
    /// `FREED_SEGMENTS` when the registrations were last swept.
    swept: Cell<u64>,
    /// Where each send buffer and write context went (for errors naming the peer).
    dest: RefCell<Vec<u32>>,
    pool_mr: MemoryRegion,
    /// Send and receive buffers, registered once: TX send buffers then RX receive buffers.
    /// A mapping, not a Rust object: the provider writes into it behind our back, and all
    /// access goes through its copying accessors.
    pool: Region,
    /// Op contexts: TX sends, RX receives, WR writes (stable addresses until completion).
    ctx: Box<[OpContext]>,
    rank: u32,
    addrs: Vec<Addr>,
    eager_inject: usize,
    /// Largest payload in a message: [`EAGER_MAX`] on a stream provider, else
    /// [`EAGER_LAYERED`]; less where the provider's largest message is smaller.
    eager: usize,
    order_saw: bool,
    local_mr: bool,
    /// Where a received message is copied before it is handled.
    scratch: RefCell<Vec<u8>>,
    tx_free: RefCell<Vec<usize>>,
    wr_free: RefCell<Vec<usize>>,
    /// Descriptions of peers' segments, by (rank, segment id).
    remote: RefCell<HashMap<(u32, u32), Remote>>,
    replies: RefCell<HashMap<u64, Reply>>,
    next_req: Cell<u64>,
    /// The request in flight (requests go one at a time) and the rank it went to: the only
    /// answer or refusal taken, and only the first. Any other, from a confused peer (or a
    /// hostile one that does not forge the rank in its header), is dropped; it could
    /// otherwise complete a later request with a wrong value or none.
    asked: Cell<Option<(u32, u64)>>,
    /// Completions read from the queue so far (whether a wait's polls find anything:
    /// [`Ofi::sleep_turn`]).
    completions: Cell<u64>,
    /// The highest request id answered (or refused): what `request` waits on.
    answered: AtomicU64,
    /// Sleeper count of that wait (nobody else raises the counter: it stays 0 or 1).
    answer_sleepers: AtomicU32,
    /// Ranks written to since the last quiet.
    touched: RefCell<Vec<bool>>,
    /// Answers to send once the completion queue has been drained (a handler never sends).
    deferred: RefCell<Vec<(u32, Header, Vec<u8>)>>,
    /// Refusals of fire-and-forget messages, reported by the next quiet.
    refused: RefCell<Option<Error>>,
    in_progress: Cell<bool>,
    /// Requested keys of registrations (providers that choose keys ignore them).
    next_key: Cell<u64>,
    /// The job monitor's verdict, checked while waiting for answers.
    watch: RefCell<Option<crate::bootstrap::kv::Watch>>,
    /// The staging buffers, made on the first staged write (after `ep`: dropped after it).
    stage: RefCell<Option<Stage>>,
    /// Whether every write from memory no registration covers is staged ([`Path::Staged`]).
    stage_always: Cell<bool>,
    job: u64,
    /// Every rank's endpoint address, as exchanged at start-up (for lanes to connect).
    names: Vec<Vec<u8>>,
    /// This rank's further endpoints, the channels of split puts (`lanes`).
    lanes: RefCell<Vec<lanes::Lane>>,
    /// The quiet requests sent through lanes and not answered yet: (lane, rank, request id).
    lane_asked: RefCell<Vec<(usize, u32, u64)>>,
    /// Answers to lanes' quiet requests so far (what their quiet waits on).
    lane_answered: AtomicU64,
    /// Sleeper count of that wait.
    lane_sleepers: AtomicU32,
    /// Bytes put by each path so far.
    transfers: Cell<NetTransfers>,
}

impl std::fmt::Debug for Ofi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ofi")
            .field("provider", &self.ep.provider())
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}

fn ofi_err(e: tca_ofi::Error, provider: &str, peer: Option<u32>) -> Error {
    let text = format!(
        "libfabric {} failed ({}) on provider {provider}{}",
        e.call,
        e.text,
        peer.map(|r| format!(", peer rank {r}")).unwrap_or_default()
    );
    match peer {
        Some(r) => Error::peer(ErrorKind::Transport, r, text),
        None => Error::new(ErrorKind::Transport, text),
    }
}

impl Ofi {
    /// Opens this rank's endpoint (`provider`: a libfabric provider name, or the best the node
    /// offers) and returns it with its address, to be exchanged.
    pub(crate) fn open(
        provider: Option<&str>,
        rank: u32,
        size: u32,
        job: u64,
    ) -> Result<(Self, Vec<u8>)> {
        let cfg = Config {
            provider: provider.map(str::to_string),
            domain: std::env::var(crate::env::OFI_DOMAIN)
                .ok()
                .filter(|d| !d.is_empty()),
        };
        let ep = Endpoint::open(&cfg).map_err(|e| {
            let offered = tca_ofi::providers()
                .map(|p| p.join(", "))
                .unwrap_or_else(|_| "none".into());
            Error::new(
                ErrorKind::Transport,
                format!(
                    "cannot open a libfabric endpoint{}: {} failed ({}); providers offered here: {offered}",
                    provider.map(|p| format!(" on provider {p}")).unwrap_or_default(),
                    e.call,
                    e.text
                ),
            )
        })?;
        let caps = ep.caps();
        if !caps.order_sas {
            // Signals after eager puts, answers to quiet after earlier messages: everything
            // here assumes messages between two ranks arrive in order.
            return Err(Error::new(
                ErrorKind::Transport,
                format!(
                    "libfabric provider {} does not keep messages in order (FI_ORDER_SAS); \
                     choose another with {}",
                    ep.provider(),
                    crate::env::OFI_PROVIDER
                ),
            ));
        }
        let stream = matches!(ep.provider(), "net" | "tcp");
        let eager = if stream { EAGER_MAX } else { EAGER_LAYERED };
        // A provider that states no limit (0) carries any size.
        let eager = match caps.max_msg_size {
            0 => eager,
            n => eager.min(n.saturating_sub(HDR_MAX)),
        };
        if eager < EAGER_MIN {
            return Err(Error::new(
                ErrorKind::Transport,
                format!(
                    "libfabric provider {} carries messages of at most {} bytes; tca needs {}; \
                     choose another with {}",
                    ep.provider(),
                    caps.max_msg_size,
                    HDR_MAX + EAGER_MIN,
                    crate::env::OFI_PROVIDER
                ),
            ));
        }
        let name = ep.name().map_err(|e| ofi_err(e, ep.provider(), None))?;
        let pool = Region::create(rank, job, (TX + RX) * BUF, "ofi-pool")?;
        let (base, len) = pool.data_ptr();
        // SAFETY: the pool mapping is owned by the transport beside the endpoint and outlives
        // the registration: the endpoint, declared first, is dropped (closing it) first.
        let pool_mr = unsafe { ep.register(base, len, 1, false) }
            .map_err(|e| ofi_err(e, ep.provider(), None))?;
        let ctx: Box<[OpContext]> = (0..TX + RX + WR)
            .map(|i| OpContext::new(i as u64))
            .collect();
        let me = Self {
            rank,
            addrs: Vec::new(),
            eager_inject: caps.inject_size,
            eager,
            order_saw: caps.order_saw,
            local_mr: caps.needs_local_mr,
            pool,
            pool_mr,
            scratch: RefCell::new(vec![0; BUF]),
            ctx,
            tx_free: RefCell::new((0..TX).rev().collect()),
            wr_free: RefCell::new((TX + RX..TX + RX + WR).rev().collect()),
            regs: RefCell::new(HashMap::new()),
            remote: RefCell::new(HashMap::new()),
            replies: RefCell::new(HashMap::new()),
            next_req: Cell::new(1),
            asked: Cell::new(None),
            completions: Cell::new(0),
            answered: AtomicU64::new(0),
            answer_sleepers: AtomicU32::new(0),
            touched: RefCell::new(vec![false; size as usize]),
            deferred: RefCell::new(Vec::new()),
            refused: RefCell::new(None),
            in_progress: Cell::new(false),
            swept: Cell::new(FREED_SEGMENTS.load(Ordering::Acquire)),
            dest: RefCell::new(vec![u32::MAX; TX + RX + WR]),
            next_key: Cell::new(2),
            watch: RefCell::new(None),
            stage: RefCell::new(None),
            stage_always: Cell::new(stage_always_from_env()?),
            job,
            names: Vec::new(),
            lanes: RefCell::new(Vec::new()),
            lane_asked: RefCell::new(Vec::new()),
            lane_answered: AtomicU64::new(0),
            lane_sleepers: AtomicU32::new(0),
            transfers: Cell::new(NetTransfers::default()),
            ep,
        };
        for i in 0..RX {
            me.post_first(i)?;
        }
        Ok((me, name))
    }

    /// The provider in use, such as `tcp;ofi_rxm`.
    pub(crate) fn provider(&self) -> &str {
        self.ep.provider()
    }

    /// Inserts every rank's endpoint address (indexed by rank).
    pub(crate) fn connect(&mut self, names: &[Vec<u8>]) -> Result<()> {
        let refs: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
        self.names = names.to_vec();
        self.addrs = self
            .ep
            .insert(&refs)
            .map_err(|e| ofi_err(e, self.ep.provider(), None))?;
        Ok(())
    }

    /// Registers one of this rank's segments for remote writes.
    pub(crate) fn register(&self, region: &Arc<Region>) -> Result<()> {
        let (ptr, len) = region.data_ptr();
        let key = self.next_key.get();
        self.next_key.set(key + 1);
        // SAFETY: the region's data area stays mapped while the `Arc` kept beside the
        // registration lives; `sweep_freed` deregisters before dropping the entry, and the
        // endpoint (dropped before `regs`) closes whatever registrations remain.
        let mr = unsafe { self.ep.register(ptr, len.max(1), key, true) }
            .map_err(|e| ofi_err(e, self.ep.provider(), None))?;
        self.regs
            .borrow_mut()
            .insert(region.handle.segment(), (region.clone(), mr, Vec::new()));
        Ok(())
    }

    /// Deregisters segments this rank has freed and tells the ranks that described them, so
    /// that their next write with the old handle fails at once instead of vanishing. Costs
    /// one load unless a segment was freed since the last sweep; runs before every message
    /// this rank sends, so a revocation reaches a peer before anything sent after the free.
    pub(crate) fn sweep_freed(&self, shm: &Shm) -> Result<()> {
        let now = FREED_SEGMENTS.load(Ordering::Acquire);
        if self.swept.replace(now) == now {
            return Ok(());
        }
        let mut revoke = Vec::new();
        {
            let mut regs = self.regs.borrow_mut();
            let freed: Vec<u32> = regs
                .iter()
                .filter(|(_, (r, _, _))| !r.is_live())
                .map(|(&k, _)| k)
                .collect();
            for k in freed {
                if let Some((r, mr, who)) = regs.remove(&k) {
                    // A failed close leaves the registration to the endpoint's teardown.
                    let _ = self.ep.deregister(mr);
                    for to in who {
                        revoke.push((to, r.handle));
                    }
                }
            }
        }
        for (to, h) in revoke {
            let m = Header {
                kind: Kind::Revoke as u8,
                src: self.rank,
                dst_seg: h.segment(),
                dst_key: h.key(),
                ..Header::default()
            };
            self.send(shm, to, &m, &[])?;
        }
        Ok(())
    }

    /// Before this rank leaves: sends what is queued and waits (a bounded time) until the
    /// provider has taken every send and write, so peers still get them.
    pub(crate) fn drain(&self, shm: &Shm) {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
        // No revocations for segments freed last: this rank's endpoint closes with it, so no
        // peer can write into them any more, and a peer that left first would never take the
        // message (the send would stall until its give-up time).
        // Transmit completion means the provider holds the bytes, not that they left: keep
        // polling for LINGER after the last completion so that the provider writes them out
        // and this rank reads what peers still send it (closing a TCP connection with unread
        // input resets it, and the reset can discard what the peer had not read yet).
        let mut idle_since: Option<std::time::Instant> = None;
        while std::time::Instant::now() < end {
            if self.progress(shm).is_err() {
                return;
            }
            let idle = self.tx_free.borrow().len() == TX
                && self.wr_free.borrow().len() == WR
                && self.deferred.borrow().is_empty();
            match (idle, idle_since) {
                (false, _) => idle_since = None,
                (true, None) => idle_since = Some(std::time::Instant::now()),
                (true, Some(t)) if t.elapsed() >= LINGER => return,
                (true, Some(_)) => {}
            }
            std::thread::yield_now();
        }
    }

    /// Buffer `i` of the pool, as the provider is given it.
    fn buf(&self, i: usize) -> *mut u8 {
        debug_assert!(i < TX + RX);
        self.pool.data_ptr().0.wrapping_add(i * BUF)
    }

    /// Posts receive buffer `slot` at start-up (nothing can be pending yet).
    fn post_first(&self, slot: usize) -> Result<()> {
        let i = TX + slot;
        // SAFETY: as in `post_recv`.
        unsafe {
            self.ep.recv(
                self.buf(i),
                BUF,
                self.pool_mr.desc(),
                std::ptr::from_ref(&self.ctx[i]).cast_mut(),
            )
        }
        .map_err(|e| ofi_err(e, self.ep.provider(), None))
    }

    fn post_recv(&self, shm: &Shm, slot: usize) -> Result<()> {
        let i = TX + slot;
        let mut turns = 0;
        loop {
            // SAFETY: receive buffer `slot` lies inside the registered pool and is not used by
            // anyone else until its completion is read; its context is `ctx[i]`, also stable.
            let r = unsafe {
                self.ep.recv(
                    self.buf(i),
                    BUF,
                    self.pool_mr.desc(),
                    std::ptr::from_ref(&self.ctx[i]).cast_mut(),
                )
            };
            match r {
                Ok(()) => return Ok(()),
                Err(e) if e.is_again() => {
                    self.poll_cq(shm)?;
                    self.stalled(shm, &mut turns)?;
                }
                Err(e) => return Err(ofi_err(e, self.ep.provider(), None)),
            }
        }
    }

    // ---- sending --------------------------------------------------------------------------

    /// Sends a message: header then payload, through a send buffer.
    fn send(&self, shm: &Shm, to: u32, h: &Header, payload: &[u8]) -> Result<()> {
        self.send2(shm, to, h, payload, &[])
    }

    /// Sends a message whose payload is `payload` then `more` (a [`PUT2`] message's two
    /// ranges), copied once into the send buffer.
    fn send2(&self, shm: &Shm, to: u32, h: &Header, payload: &[u8], more: &[u8]) -> Result<()> {
        debug_assert!(payload.len() + more.len() <= EAGER_MAX);
        if h.kind != Kind::Revoke as u8 {
            self.sweep_freed(shm)?;
        }
        let mut head = [0u8; HDR_MAX];
        h.encode(&mut head);
        self.send_bytes(shm, to, &head[..h.size()], payload, more)
    }

    /// Sends `bytes` to `to` as one message, whatever they are: what a confused or hostile
    /// peer can send (the fuzz test of [`Ofi::handle`] through the network). At most a send
    /// buffer's length.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn send_raw(&self, shm: &Shm, to: u32, bytes: &[u8]) -> Result<()> {
        if bytes.len() > BUF || to as usize >= self.addrs.len() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("a raw message of {} bytes to rank {to}", bytes.len()),
            ));
        }
        self.send_bytes(shm, to, bytes, &[], &[])
    }

    /// Sends `head`, `payload` and `more` as one message, copied once into a send buffer.
    fn send_bytes(
        &self,
        shm: &Shm,
        to: u32,
        head: &[u8],
        payload: &[u8],
        more: &[u8],
    ) -> Result<()> {
        let len = payload.len() + more.len();
        let mut turns = 0;
        let slot = loop {
            if let Some(s) = self.tx_free.borrow_mut().pop() {
                break s;
            }
            self.poll_cq(shm)?;
            self.stalled(shm, &mut turns)?;
        };
        let give_back = |e: Error| {
            self.tx_free.borrow_mut().push(slot);
            e
        };
        self.dest.borrow_mut()[slot] = to;
        let hl = head.len();
        let n = hl + len;
        let at = self.pool.range(slot * BUF, n).map_err(give_back)?;
        self.pool
            .map
            .write(at, head)
            .and_then(|()| self.pool.map.write(at + hl, payload))
            .and_then(|()| self.pool.map.write(at + hl + payload.len(), more))
            .map_err(give_back)?;
        let dest = self.addrs[to as usize];
        loop {
            let r = if n <= self.eager_inject && len <= 64 && hl <= HDR_MAX {
                let mut small = [0u8; HDR_MAX + 64];
                small[..hl].copy_from_slice(head);
                small[hl..hl + payload.len()].copy_from_slice(payload);
                small[hl + payload.len()..n].copy_from_slice(more);
                self.ep.inject(&small[..n], dest).map(|()| true)
            } else {
                // SAFETY: send buffer `slot` lies in the registered pool and is ours until its
                // completion returns it to `tx_free`; so is its context.
                unsafe {
                    self.ep.send(
                        self.buf(slot),
                        n,
                        self.pool_mr.desc(),
                        dest,
                        std::ptr::from_ref(&self.ctx[slot]).cast_mut(),
                    )
                }
                .map(|()| false)
            };
            match r {
                Ok(injected) => {
                    if injected {
                        self.tx_free.borrow_mut().push(slot);
                    }
                    return Ok(());
                }
                Err(e) if e.is_again() => {
                    self.poll_cq(shm)
                        .and_then(|()| self.stalled_on(shm, &mut turns, to))
                        .map_err(give_back)?;
                }
                Err(e) => return Err(give_back(ofi_err(e, self.ep.provider(), Some(to)))),
            }
        }
    }

    /// RMA-writes `src` at `off` of rank `to`'s segment `d`, by the path its source allows
    /// ([`Path`]), and waits until the source may be reused.
    fn rma(&self, shm: &Shm, to: u32, d: &Remote, off: usize, src: &[u8]) -> Result<()> {
        match self.path_of(src) {
            (Path::Registered, desc) => self.write(shm, to, d, off, src, desc),
            (Path::Staged, _) => self.write_staged(shm, to, d, off, src),
            _ => self.write(shm, to, d, off, src, std::ptr::null_mut()),
        }
    }

    /// How an RMA write of `src` (longer than a message carries) leaves this rank, with the
    /// local descriptor of the registration it lies in ([`Path::Registered`]).
    fn path_of(&self, src: &[u8]) -> (Path, *mut std::ffi::c_void) {
        let (at, n) = (src.as_ptr() as usize, src.len());
        let regs = self.regs.borrow();
        let holder = regs.values().find(|(r, _, _)| {
            let (base, len) = r.data_ptr();
            let base = base as usize;
            at >= base && at - base <= len && n <= len - (at - base)
        });
        match holder {
            Some((_, mr, _)) => (Path::Registered, mr.desc()),
            None if self.local_mr || self.stage_always.get() => {
                (Path::Staged, std::ptr::null_mut())
            }
            None => (Path::Direct, std::ptr::null_mut()),
        }
    }

    /// Adds `n` bytes to the count of `path` ([`Ofi::transfers`]; lanes: `None`).
    fn count(&self, path: Option<Path>, n: usize) {
        let mut t = self.transfers.get();
        let n = n as u64;
        match path {
            Some(Path::Message) => t.message_bytes += n,
            Some(Path::Direct) => t.direct_bytes += n,
            Some(Path::Registered) => t.registered_bytes += n,
            Some(Path::Staged) => t.staged_bytes += n,
            None => t.lane_bytes += n,
        }
        self.transfers.set(t);
    }

    /// Bytes this rank has put across the network so far, by path.
    pub(crate) fn transfers(&self) -> NetTransfers {
        self.transfers.get()
    }

    /// The path a put of `src` into a segment of another rank takes from this rank.
    pub(crate) fn put_path(&self, src: &[u8]) -> Path {
        if src.len() <= self.eager || !self.order_saw {
            return Path::Message;
        }
        self.path_of(src).0
    }

    /// The path of [`Ofi::put_region`] of `len` bytes (a message carries what fits one).
    pub(crate) fn put_from_path(&self, len: usize) -> Path {
        if len <= self.eager || !self.order_saw {
            Path::Message
        } else {
            Path::Registered
        }
    }

    /// Stages every RMA write whose source lies outside this rank's registered segments
    /// (`true`; `TCA_OFI_STAGE=always`), or only on providers that need local buffers
    /// registered (`false`, the default).
    pub(crate) fn set_stage_always(&self, on: bool) {
        self.stage_always.set(on);
    }

    /// Posts one RMA write of `len` bytes at `src` (registration `desc`, or null) to `raddr`
    /// (key `rkey`) of rank `to` and returns its context slot. On failure it first waits for
    /// the `outstanding` writes (see [`Ofi::settle`]).
    ///
    /// # Safety
    /// `src..src + len` must stay allocated and unchanged until the slot's completion.
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_write(
        &self,
        shm: &Shm,
        to: u32,
        src: *const u8,
        len: usize,
        desc: *mut std::ffi::c_void,
        (raddr, rkey): (u64, u64),
        outstanding: &[usize],
    ) -> Result<usize> {
        let dest = self.addrs[to as usize];
        let mut turns = 0;
        let slot = loop {
            if let Some(s) = self.wr_free.borrow_mut().pop() {
                break s;
            }
            if let Err(e) = self
                .poll_cq(shm)
                .and_then(|()| self.stalled(shm, &mut turns))
            {
                self.settle(outstanding);
                return Err(e);
            }
        };
        loop {
            // SAFETY: the caller keeps the source as the contract says; the context is ours
            // until the completion returns the slot to `wr_free`.
            let r = unsafe {
                self.ep.write(
                    src,
                    len,
                    desc,
                    dest,
                    raddr,
                    rkey,
                    std::ptr::from_ref(&self.ctx[slot]).cast_mut(),
                )
            };
            let failed = match r {
                Ok(()) => break,
                Err(e) if e.is_again() => self
                    .poll_cq(shm)
                    .and_then(|()| self.stalled(shm, &mut turns))
                    .err(),
                Err(e) => Some(ofi_err(e, self.ep.provider(), Some(to))),
            };
            if let Some(e) = failed {
                self.wr_free.borrow_mut().push(slot);
                self.settle(outstanding);
                return Err(e);
            }
        }
        self.dest.borrow_mut()[slot] = to;
        Ok(slot)
    }

    /// Waits for the completions of the writes in `outstanding` (their sources may be
    /// reused then). (A dead peer turns into an error here, but the provider may still read
    /// the sources until the endpoint closes: the job is being torn down then.)
    fn finish_writes(&self, shm: &Shm, outstanding: &[usize]) -> Result<()> {
        let mut turns = 0;
        while outstanding
            .iter()
            .any(|s| !self.wr_free.borrow().contains(s))
        {
            if let Err(e) = self
                .poll_cq(shm)
                .and_then(|()| self.stalled(shm, &mut turns))
            {
                self.settle(outstanding);
                return Err(e);
            }
        }
        Ok(())
    }

    /// RMA-writes `src` (registration `desc`, or null where the provider reads any memory)
    /// at `off` of `d`, straight from where it lies: the seed's MtoM. Waits until the source
    /// may be reused.
    fn write(
        &self,
        shm: &Shm,
        to: u32,
        d: &Remote,
        off: usize,
        src: &[u8],
        desc: *mut std::ffi::c_void,
    ) -> Result<()> {
        // SAFETY: `src` borrows the caller's slice, which outlives this call.
        unsafe { self.write_raw(shm, to, d, off, (src.as_ptr(), src.len()), desc) }
    }

    /// [`Ofi::write`] of `len` bytes at `src`.
    ///
    /// # Safety
    /// `src..src + len` must stay allocated until this returns (it returns only after every
    /// posted write's completion: `finish_writes`, or `settle` on an error).
    unsafe fn write_raw(
        &self,
        shm: &Shm,
        to: u32,
        d: &Remote,
        off: usize,
        (src, len): (*const u8, usize),
        desc: *mut std::ffi::c_void,
    ) -> Result<()> {
        // Counted by what is written: a registration's descriptor or the bytes where they lie.
        let path = if desc.is_null() {
            Path::Direct
        } else {
            Path::Registered
        };
        self.count(Some(path), len);
        let mut outstanding = Vec::new();
        let max = 1usize << 30;
        for at in (0..len).step_by(max) {
            let n = max.min(len - at);
            // SAFETY: within the caller's range, kept as the contract says.
            let slot = unsafe {
                self.post_write(
                    shm,
                    to,
                    src.wrapping_add(at),
                    n,
                    desc,
                    (d.addr + (off + at) as u64, d.rkey),
                    &outstanding,
                )
            }?;
            outstanding.push(slot);
        }
        self.finish_writes(shm, &outstanding)
    }

    /// Puts `len` bytes at `at` (an offset in its mapping, as [`Region::range`] gives it) of
    /// `src`, one of this rank's registered segments, into `dst`
    /// at `off` by an RMA write straight from the segment (MtoM: no copy here, none at the
    /// target); complete at the target on [`Ofi::quiet`], like a put. `false` (nothing done)
    /// where a message carries it better (at most [`Ofi::eager`] bytes, or every put on a
    /// provider without send-after-write ordering) or the segment is not registered here:
    /// then the caller copies it out and puts the copy.
    pub(crate) fn put_region(
        &self,
        shm: &Shm,
        dst: &Handle,
        off: usize,
        src: &Region,
        at: usize,
        len: usize,
    ) -> Result<bool> {
        if len <= self.eager || !self.order_saw {
            return Ok(false);
        }

        // `at` is where the bytes lie in the mapping, as `Region::range` gives it.
        let from = at.checked_sub(HEADER_BYTES).ok_or_else(|| {
            Error::new(
                ErrorKind::OutOfBounds,
                "a put's source offset before its segment's data",
            )
        })?;
        src.range(from, len)?;
        let d = self.describe(shm, dst)?;
        Self::check_range(dst, &d, off, len)?;
        // After `describe`, whose progress may sweep freed segments' registrations.
        let desc = match self.regs.borrow().get(&src.handle.segment()) {
            Some((r, mr, _)) if r.handle == src.handle => mr.desc(),
            _ => return Ok(false),
        };
        self.touched.borrow_mut()[dst.rank() as usize] = true;
        // SAFETY: `src` is mapped while the caller's borrow of it lives, which outlasts this
        // call; `range` checked that the bytes lie inside it. The provider reads them without
        // a Rust reference, as it writes into segments that peers read.
        unsafe {
            self.write_raw(
                shm,
                dst.rank(),
                &d,
                off,
                (src.data_ptr().0.wrapping_add(from), len),
                desc,
            )
        }?;
        Ok(true)
    }

    /// RMA-writes `src`, memory no registration covers, at `off` of `d` through this rank's
    /// two registered staging buffers: [`STAGE`] bytes are copied into one while the other's
    /// write is in flight (the seed's BtoM, its two staging buffers used alternately).
    /// Waits until every write is complete.
    fn write_staged(&self, shm: &Shm, to: u32, d: &Remote, off: usize, src: &[u8]) -> Result<()> {
        self.open_stage()?;
        self.count(Some(Path::Staged), src.len());
        let stage = self.stage.borrow();
        let Some(stage) = stage.as_ref() else {
            unreachable!("open_stage made it")
        };
        let base = stage.region.data_ptr().0;
        let mut busy: [Option<usize>; 2] = [None, None];
        let in_flight = |busy: &[Option<usize>; 2]| -> ([usize; 2], usize) {
            let mut s = [0; 2];
            let mut n = 0;
            for b in busy.iter().flatten() {
                s[n] = *b;
                n += 1;
            }
            (s, n)
        };
        for (k, part) in src.chunks(STAGE).enumerate() {
            let b = k % 2;
            if let Some(slot) = busy[b].take() {
                self.finish_writes(shm, &[slot]).inspect_err(|_| {
                    let (s, n) = in_flight(&busy);
                    self.settle(&s[..n]);
                })?;
            }
            let copied = stage
                .region
                .range(b * STAGE, part.len())
                .and_then(|at| stage.region.map.write(at, part));
            if let Err(e) = copied {
                let (s, n) = in_flight(&busy);
                self.settle(&s[..n]);
                return Err(e);
            }
            let (s, n) = in_flight(&busy);
            // SAFETY: staging buffer `b` is this transport's registered memory, mapped while
            // it lives, and is written again only after this write's completion (`busy[b]`
            // is waited for first, here or below).
            let slot = unsafe {
                self.post_write(
                    shm,
                    to,
                    base.wrapping_add(b * STAGE),
                    part.len(),
                    stage.mr.desc(),
                    (d.addr + (off + k * STAGE) as u64, d.rkey),
                    &s[..n],
                )
            }?;
            busy[b] = Some(slot);
        }
        let (s, n) = in_flight(&busy);
        self.finish_writes(shm, &s[..n])
    }

    /// Makes the staging buffers of [`Ofi::write_staged`] on first use: 2 x [`STAGE`] bytes,
    /// registered once.
    fn open_stage(&self) -> Result<()> {
        if self.stage.borrow().is_some() {
            return Ok(());
        }
        let region = Region::create(self.rank, self.job, 2 * STAGE, "ofi-stage")?;
        let (base, len) = region.data_ptr();
        let key = self.next_key.get();
        self.next_key.set(key + 1);
        // SAFETY: the region is kept beside its registration in `stage`, which is dropped
        // after the endpoint (declared first), whose closing closes the registration.
        let mr = unsafe { self.ep.register(base, len, key, false) }
            .map_err(|e| ofi_err(e, self.ep.provider(), None))?;
        *self.stage.borrow_mut() = Some(Stage { mr, region });
        Ok(())
    }

    /// After a failed write: the provider may still read the caller's buffer for the chunks
    /// already posted, so wait for their completions (error completions count) before the
    /// caller gets its buffer back. If they never come the memory cannot be given back
    /// safely: the process stops rather than let the provider read freed memory.
    fn settle(&self, outstanding: &[usize]) {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut got = [Completion::EMPTY; 16];
        while outstanding
            .iter()
            .any(|s| !self.wr_free.borrow().contains(s))
        {
            if std::time::Instant::now() >= end {
                eprintln!(
                    "tca: libfabric still holds a buffer of a failed write after 10 s; stopping"
                );
                std::process::abort();
            }
            match self.ep.read_cq(&mut got) {
                Ok(n) => {
                    for c in &got[..n] {
                        let _ = self.complete_local(c);
                    }
                }
                Err(e) => {
                    if let Some(id) = e.id.map(usize_sat) {
                        if (TX + RX..TX + RX + WR).contains(&id) {
                            self.wr_free.borrow_mut().push(id);
                        }
                    }
                }
            }
            std::thread::yield_now();
        }
    }

    /// Called on every turn of a loop that waits for the provider (a free buffer, a write's
    /// completion, an answer): after a while it sleeps between turns, and it gives up with
    /// the error that explains the stall — a dead peer, an aborted job.
    fn stalled(&self, shm: &Shm, turns: &mut u32) -> Result<()> {
        *turns += 1;
        // Past that, a descriptor poll that returned at once (see `Ofi::sleep_turn`) is
        // followed by a plain sleep, so a descriptor that never blocks does not spin.
        if *turns > 2048
            && self.sleep(std::time::Duration::from_millis(1))
            && *turns > 2048 + POLLS_BEFORE_SLEEP
        {
            std::thread::sleep(POLL_SLEEP);
        }
        if *turns % 256 == 0 {
            shm.check_peers(false)?;
            if let Some(w) = self.watch.borrow().as_ref() {
                w.check()?;
            }
        }
        Ok(())
    }

    /// [`Ofi::stalled`] for a send to `to` that the provider keeps refusing, which also ends
    /// when `to` has left the job: a provider may refuse sends to a closed endpoint for ever.
    /// (Not for RMA writes: once posted, their sources must outlive the provider's use.)
    fn stalled_on(&self, shm: &Shm, turns: &mut u32, to: u32) -> Result<()> {
        self.stalled(shm, turns)?;
        if *turns % 256 == 0 {
            self.check_left(shm, to)?;
        }
        Ok(())
    }

    /// The error for traffic to a rank that left the job cleanly (by this node's board or the
    /// job monitor): its segments went with it, as a put into a freed segment finds (which
    /// the collectives' credits and active-message answers expect and ignore).
    fn check_left(&self, shm: &Shm, to: u32) -> Result<()> {
        if shm.has_left(to) || self.monitor_says_left(to) {
            return Err(Self::left(to));
        }
        Ok(())
    }

    /// Whether the job monitor says `to` has left cleanly.
    fn monitor_says_left(&self, to: u32) -> bool {
        self.watch.borrow().as_ref().is_some_and(|w| w.has_left(to))
    }

    fn left(to: u32) -> Error {
        Error::peer(
            ErrorKind::InvalidHandle,
            to,
            format!("rank {to} has left the job: its segments are gone"),
        )
    }

    fn next_req(&self) -> u64 {
        let r = self.next_req.get();
        self.next_req.set(r + 1);
        r
    }

    /// Sends a request and makes progress until its answer arrives.
    fn request(
        &self,
        shm: &Shm,
        to: u32,
        mut h: Header,
        deadline: Option<std::time::Instant>,
    ) -> Result<Header> {
        let req = self.next_req();
        // The request id rides in the destination offset (compare-exchange uses both values).
        h.dst_off = req;
        self.asked.set(Some((to, req)));
        let r = self
            .send(shm, to, &h, &[])
            .and_then(|()| self.await_answer(shm, to, req, deadline))
            .map_err(|e| e.waiting_for(to, format_args!("rank {to} to answer a request")));
        self.asked.set(None);
        r
    }

    /// Makes progress until `counter` (with its sleeper count) reaches `target`, failing
    /// when a rank of `peers` leaves the job, a peer dies, or `deadline` passes.
    fn await_count(
        &self,
        shm: &Shm,
        (counter, sleepers): (&AtomicU64, &AtomicU32),
        target: u64,
        peers: &[u32],
        deadline: Option<std::time::Instant>,
    ) -> Result<()> {
        let poll = || self.progress(shm).map(|()| false);
        let turns = QuickTurns::default();
        let block = |d: std::time::Duration| self.sleep_turn(d, &turns);
        let progress = Progress {
            poll: &poll,
            nap: NAP,
            block: Some(&block),
        };
        let patience = wait::Patience::default();
        wait::wait_ge(
            counter,
            sleepers,
            target,
            shm.policy(),
            deadline,
            shm.timeout().map(|t| (t, &patience)),
            Some(&progress),
            || {
                shm.check_peers(false)?;
                if let Some(w) = self.watch.borrow().as_ref() {
                    w.check()?;
                }
                peers.iter().try_for_each(|&to| self.check_left(shm, to))
            },
        )?;
        Ok(())
    }

    /// Makes progress until request `req` to `to` is answered or refused.
    fn await_answer(
        &self,
        shm: &Shm,
        to: u32,
        req: u64,
        deadline: Option<std::time::Instant>,
    ) -> Result<Header> {
        // Requests go one at a time (handlers never send one), so "answered" only grows: the
        // wait is the transports' one wait loop, on that counter, polling this transport.
        self.await_count(
            shm,
            (&self.answered, &self.answer_sleepers),
            req,
            &[to],
            deadline,
        )?;
        let reply = self.replies.borrow_mut().remove(&req);
        if matches!(reply, Some(Reply::Refused(_))) {
            // A refusal by a rank that failed, or after the job was aborted, is a consequence
            // of that: report the cause (the segment asked for may be gone with the rank).
            shm.check_peers(false)?;
        }
        match reply {
            Some(Reply::Value(h)) => Ok(h),
            Some(Reply::Refused(why)) => Err(Error::peer(
                if why.contains("bounds") {
                    ErrorKind::OutOfBounds
                } else {
                    ErrorKind::InvalidHandle
                },
                to,
                format!("rank {to} refused: {why}"),
            )),
            None => Err(Error::peer(
                ErrorKind::Transport,
                to,
                format!("rank {to} answered request {req} twice or not at all"),
            )),
        }
    }

    /// Lets waits for answers notice a job aborted on another node.
    pub(crate) fn set_watch(&self, w: crate::bootstrap::kv::Watch) {
        *self.watch.borrow_mut() = Some(w);
    }

    /// The description of `h` (asking its owner the first time).
    fn describe(&self, shm: &Shm, h: &Handle) -> Result<Remote> {
        // A rank that has finished took its segments: refused here, as shared memory refuses
        // them, not sent into a closed endpoint (which a provider may accept silently). A
        // rank that failed is left to the failure's own report.
        let to = h.rank();
        if shm.is_done(to) || self.monitor_says_left(to) {
            return Err(Self::left(to));
        }
        if let Some(d) = self.remote.borrow().get(&(h.rank(), h.segment())) {
            if d.key == h.key() {
                return Ok(*d);
            }
        }
        let a = self.request(
            shm,
            h.rank(),
            Header {
                kind: Kind::Describe as u8,
                src: self.rank,
                dst_seg: h.segment(),
                dst_key: h.key(),
                value: h.job(),
                sig_off: h.len() as u64,
                ..Header::default()
            },
            None,
        )?;
        let d = Remote {
            key: h.key(),
            len: usize::try_from(a.sig_off).unwrap_or(0),
            rkey: a.sig_key,
            addr: a.value,
        };
        if d.len != h.len() {
            return Err(Error::peer(
                ErrorKind::InvalidHandle,
                h.rank(),
                format!(
                    "handle to segment {} of rank {} claims {} bytes, the segment holds {}",
                    h.segment(),
                    h.rank(),
                    h.len(),
                    d.len
                ),
            ));
        }
        self.remote.borrow_mut().insert((h.rank(), h.segment()), d);
        Ok(d)
    }

    fn check_range(h: &Handle, d: &Remote, off: usize, n: usize) -> Result<()> {
        match off.checked_add(n) {
            Some(end) if end <= d.len => Ok(()),
            _ => Err(super::shm::region::out_of_bounds(h, off, n)),
        }
    }

    fn check_word(h: &Handle, d: &Remote, off: usize) -> Result<()> {
        Self::check_range(h, d, off, 8)?;
        if off % 8 != 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("signal offset {off} is not a multiple of 8"),
            ));
        }
        Ok(())
    }

    pub(crate) fn attach(&self, shm: &Shm, h: &Handle) -> Result<()> {
        self.describe(shm, h).map(|_| ())
    }

    pub(crate) fn put(&self, shm: &Shm, dst: &Handle, off: usize, src: &[u8]) -> Result<()> {
        let d = self.describe(shm, dst)?;
        Self::check_range(dst, &d, off, src.len())?;
        self.touched.borrow_mut()[dst.rank() as usize] = true;
        if src.is_empty() {
            return Ok(());
        }
        if src.len() <= self.eager || !self.order_saw {
            self.count(Some(Path::Message), src.len());
            for (k, part) in src.chunks(self.eager).enumerate() {
                let h = Header {
                    kind: Kind::Put as u8,
                    src: self.rank,
                    len: eager_len(part.len()),
                    dst_seg: dst.segment(),
                    dst_key: dst.key(),
                    dst_off: (off + k * self.eager) as u64,
                    sig_seg: NONE,
                    ..Header::default()
                };
                self.send(shm, dst.rank(), &h, part)?;
            }
            return Ok(());
        }
        self.rma(shm, dst.rank(), &d, off, src)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put_signal(
        &self,
        shm: &Shm,
        dst: &Handle,
        off: usize,
        src: &[u8],
        sig: &Handle,
        sig_off: usize,
        sop: SignalOp,
    ) -> Result<()> {
        let s = self.describe(shm, sig)?;
        Self::check_word(sig, &s, sig_off)?;
        let d = self.describe(shm, dst)?;
        Self::check_range(dst, &d, off, src.len())?;
        if dst.rank() != sig.rank() {
            // Data and signal go to different ranks: the data must be complete first.
            self.put(shm, dst, off, src)?;
            self.quiet(shm)?;
            return self.signal(shm, sig, sig_off, sop);
        }
        // Without send-after-write ordering, data goes as eager messages (ordered among
        // themselves) rather than as RMA.
        let eager = src.len() <= self.eager || !self.order_saw;
        if !eager {
            self.rma(shm, dst.rank(), &d, off, src)?;
            if !self.order_saw {
                self.quiet(shm)?;
            }
        }
        let (o, v) = encode_signal(sop);
        let (seg, key, payload) = if eager && !src.is_empty() {
            (dst.segment(), dst.key(), src)
        } else {
            (NONE, 0, &[][..])
        };
        if eager && src.len() > self.eager {
            // Providers without send-after-write ordering: the data goes as eager chunks first.
            self.put(shm, dst, off, src)?;
            return self.signal(shm, sig, sig_off, sop);
        }
        let h = Header {
            kind: Kind::Signal as u8,
            op: o,
            src: self.rank,
            len: eager_len(payload.len()),
            dst_seg: seg,
            dst_key: key,
            dst_off: off as u64,
            sig_seg: sig.segment(),
            sig_key: sig.key(),
            sig_off: sig_off as u64,
            value: v,
            ..Header::default()
        };
        self.touched.borrow_mut()[dst.rank() as usize] = true;
        self.send(shm, dst.rank(), &h, payload)
    }

    /// Packet `p` into `dst`'s segment as one eager message: the body and the line
    /// ([`PUT2`]), the credit ([`SET2`]), then the sequence word. `false`, nothing sent, where
    /// it does not fit one (more than [`Ofi::eager`] bytes, an offset the header holds in 32
    /// bits past 4 GiB): the caller sends the operations one by one.
    pub(crate) fn put_packet(&self, shm: &Shm, dst: &Handle, p: &Packet<'_>) -> Result<bool> {
        let ((line_off, line), (seq_off, seq)) = (p.line, p.seq);
        // An empty body is no body: a two-range message has bytes in its first range.
        let two = p.body.filter(|b| !b.1.is_empty());
        let (body_off, body) = two.unwrap_or((line_off, &[]));
        let u32_of = |off: Option<usize>| off.map_or(Some(0), |o| u32::try_from(o).ok());
        let (Some(off2), Some(credit_off)) =
            (u32_of(two.map(|_| line_off)), u32_of(p.credit.map(|c| c.0)))
        else {
            return Ok(false);
        };
        if body.len() + line.len() > self.eager {
            return Ok(false);
        }
        let d = self.describe(shm, dst)?;
        Self::check_word(dst, &d, seq_off)?;
        Self::check_range(dst, &d, line_off, line.len())?;
        Self::check_range(dst, &d, body_off, body.len())?;
        if let Some((off, _)) = p.credit {
            Self::check_word(dst, &d, off)?;
        }
        let (first, then) = if two.is_some() {
            (body, line)
        } else {
            (line, &[][..])
        };
        let h = Header {
            kind: Kind::Signal as u8,
            op: op::SET,
            flags: if two.is_some() { PUT2 } else { 0 } | if p.credit.is_some() { SET2 } else { 0 },
            src: self.rank,
            len: eager_len(first.len() + then.len()),
            dst_seg: if first.is_empty() {
                NONE
            } else {
                dst.segment()
            },
            dst_key: dst.key(),
            dst_off: body_off as u64,
            sig_seg: dst.segment(),
            sig_off2: credit_off,
            sig_key: dst.key(),
            sig_off: seq_off as u64,
            value: seq,
            value2: p.credit.map_or(0, |c| c.1),
            dst_off2: off2,
            len1: if two.is_some() {
                eager_len(body.len())
            } else {
                0
            },
        };
        self.touched.borrow_mut()[dst.rank() as usize] = true;
        self.send2(shm, dst.rank(), &h, first, then).map(|()| true)
    }

    pub(crate) fn signal(&self, shm: &Shm, sig: &Handle, off: usize, sop: SignalOp) -> Result<()> {
        let s = self.describe(shm, sig)?;
        Self::check_word(sig, &s, off)?;
        let (o, v) = encode_signal(sop);
        let h = Header {
            kind: Kind::Signal as u8,
            op: o,
            src: self.rank,
            dst_seg: NONE,
            sig_seg: sig.segment(),
            sig_key: sig.key(),
            sig_off: off as u64,
            value: v,
            ..Header::default()
        };
        self.touched.borrow_mut()[sig.rank() as usize] = true;
        self.send(shm, sig.rank(), &h, &[])
    }

    pub(crate) fn put_strided(
        &self,
        shm: &Shm,
        dst: &Handle,
        off: usize,
        src: &[u8],
        s: Strided,
        dst_span: usize,
    ) -> Result<()> {
        let d = self.describe(shm, dst)?;
        Self::check_range(dst, &d, off, dst_span)?;
        for i in 0..s.count {
            let from = i * s.src_stride;
            self.put(shm, dst, off + i * s.dst_stride, &src[from..from + s.block])?;
        }
        Ok(())
    }

    pub(crate) fn atomic(&self, shm: &Shm, h: &Handle, off: usize, aop: AtomicOp) -> Result<u64> {
        let d = self.describe(shm, h)?;
        Self::check_word(h, &d, off)?;
        let (o, v, v2) = match aop {
            AtomicOp::Load => (op::LOAD, 0, 0),
            AtomicOp::Store(v) => (op::SET, v, 0),
            AtomicOp::Swap(v) => (op::SWAP, v, 0),
            AtomicOp::FetchAdd(v) => (op::ADD, v, 0),
            AtomicOp::CompareExchange { current, new } => (op::CAS, current, new),
        };
        let a = self.request(
            shm,
            h.rank(),
            Header {
                kind: Kind::Atomic as u8,
                op: o,
                src: self.rank,
                sig_seg: h.segment(),
                sig_key: h.key(),
                sig_off: off as u64,
                value: v,
                value2: v2,
                ..Header::default()
            },
            None,
        )?;
        Ok(a.value)
    }

    /// Every earlier operation of this rank is complete at its target.
    pub(crate) fn quiet(&self, shm: &Shm) -> Result<()> {
        self.quiet_until(shm, None)
    }

    fn quiet_until(&self, shm: &Shm, deadline: Option<std::time::Instant>) -> Result<()> {
        let mut turns = 0;
        while self.wr_free.borrow().len() < WR {
            self.poll_cq(shm)?;
            self.stalled(shm, &mut turns)?;
        }
        // The lanes' quiet requests go first, so that their round trips overlap this one's.
        let lanes = self.start_lane_quiets(shm)?;
        let ranks: Vec<u32> = {
            let t = self.touched.borrow();
            (0..rank_u32(t.len())).filter(|&r| t[r as usize]).collect()
        };
        let own = ranks.into_iter().try_for_each(|r| {
            self.request(
                shm,
                r,
                Header {
                    kind: Kind::Quiet as u8,
                    src: self.rank,
                    ..Header::default()
                },
                deadline,
            )?;
            // Only a rank that answered is quiet: after an error the rest stay to do.
            self.touched.borrow_mut()[r as usize] = false;
            Ok(())
        });
        if let Err(e) = own {
            self.abandon_lane_quiets();
            return Err(e);
        }
        self.finish_lane_quiets(shm, lanes, deadline)?;
        match self.refused.borrow_mut().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    // ---- progress -------------------------------------------------------------------------

    /// Reads the completion queue once (sends done, writes done, messages arrived) and
    /// sends the answers those messages asked for.
    pub(crate) fn progress(&self, shm: &Shm) -> Result<()> {
        if self.in_progress.replace(true) {
            return Ok(());
        }
        let r = self.progress_inner(shm);
        self.in_progress.set(false);
        r
    }

    fn progress_inner(&self, shm: &Shm) -> Result<()> {
        let mut got = [Completion::EMPTY; 16];
        loop {
            if !self.lanes.borrow().is_empty() {
                self.poll_lanes()?;
            }
            let n = self.read_cq(shm, &mut got)?;
            self.complete_all(shm, &got[..n])?;
            let mut answers = std::mem::take(&mut *self.deferred.borrow_mut());
            while !answers.is_empty() {
                let (to, h, payload) = answers.remove(0);
                if let Err(e) = self.send(shm, to, &h, &payload) {
                    // The rest still owe their askers an answer: keep them for next time.
                    self.deferred.borrow_mut().extend(answers);
                    return Err(e);
                }
            }
            if n < got.len() && self.deferred.borrow().is_empty() {
                return Ok(());
            }
        }
    }

    /// Reads completions once (used while waiting for a free buffer). Messages that arrive
    /// are applied; the answers they ask for wait for the next `progress`.
    fn poll_cq(&self, shm: &Shm) -> Result<()> {
        let mut got = [Completion::EMPTY; 16];
        let n = self.read_cq(shm, &mut got)?;
        self.complete_all(shm, &got[..n])
    }

    /// Handles every completion of a batch (none is dropped) and returns the first error.
    fn complete_all(&self, shm: &Shm, got: &[Completion]) -> Result<()> {
        let mut first = Ok(());
        for c in got {
            let r = self.complete(shm, c);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    fn read_cq(&self, shm: &Shm, out: &mut [Completion]) -> Result<usize> {
        let got = self.ep.read_cq(out);
        if let Ok(n) = got {
            self.completions.set(self.completions.get() + n as u64);
        }
        got.map_err(|e| {
            let id = e.id.map_or(usize::MAX, usize_sat);
            let to = self
                .dest
                .borrow()
                .get(id)
                .copied()
                .filter(|&r| r != u32::MAX);
            if id < TX {
                self.tx_free.borrow_mut().push(id);
            } else if (TX + RX..TX + RX + WR).contains(&id) {
                self.wr_free.borrow_mut().push(id);
            }
            // A local peer that died explains it best (and names it).
            if let Err(dead) = shm.check_peers(false) {
                return dead;
            }
            if let Some(Err(dead)) = self.watch.borrow().as_ref().map(|w| w.check()) {
                return dead;
            }
            match to {
                // Broken pipe, connection reset or refused: the peer's end is gone.
                Some(r)
                    if matches!(e.prov_errno, 32 | 104 | 111)
                        || matches!(e.err, 32 | 104 | 111) =>
                {
                    Error::peer(
                        ErrorKind::PeerDied,
                        r,
                        format!(
                            "the connection to rank {r} broke ({}, provider {}): it died or its \
                             node is unreachable",
                            e.text,
                            self.ep.provider()
                        ),
                    )
                }
                Some(r) => Error::peer(
                    ErrorKind::Transport,
                    r,
                    format!(
                        "libfabric operation to rank {r} failed on provider {}: {} (provider \
                         error {})",
                        self.ep.provider(),
                        e.text,
                        e.prov_errno
                    ),
                ),
                None => Error::new(
                    ErrorKind::Transport,
                    format!(
                        "libfabric operation failed on provider {}: {} (provider error {})",
                        self.ep.provider(),
                        e.text,
                        e.prov_errno
                    ),
                ),
            }
        })
    }

    /// Returns send and write contexts; receive completions are handled by `complete`.
    fn complete_local(&self, c: &Completion) -> Result<bool> {
        let id = usize_sat(c.id);
        if id < TX {
            self.tx_free.borrow_mut().push(id);
            Ok(true)
        } else if (TX + RX..TX + RX + WR).contains(&id) {
            self.wr_free.borrow_mut().push(id);
            Ok(true)
        } else if (TX..TX + RX).contains(&id) {
            Ok(false) // a message: `complete` handles it
        } else {
            Ok(true)
        }
    }

    fn complete(&self, shm: &Shm, c: &Completion) -> Result<()> {
        if self.complete_local(c)? {
            return Ok(());
        }
        let slot = usize_sat(c.id) - TX;
        let len = c.len.min(BUF);
        {
            let mut scratch = self.scratch.borrow_mut();
            let at = self.pool.range((TX + slot) * BUF, len)?;
            self.pool.map.read(at, &mut scratch[..len])?;
            // `handle` never reads the queue (answers are deferred), so nothing re-enters
            // while the scratch buffer is borrowed.
            self.handle(shm, &scratch[..len]);
        }
        self.post_recv(shm, slot)
    }

    /// Applies one message from a peer. Nothing in it is trusted: every field is checked
    /// against this rank's own registrations before a byte is written.
    fn handle(&self, shm: &Shm, msg: &[u8]) {
        let Some(h) = Header::decode(msg) else {
            return; // not a tca message: nothing to answer, nothing written
        };
        let Some(kind) = Kind::from(h.kind) else {
            return;
        };
        if h.src as usize >= self.addrs.len() || h.src == self.rank {
            return; // names no peer: nothing to answer, nothing written
        }
        let payload = &msg[h.size()..];
        let from = h.src;
        let answer = |mut a: Header| {
            a.src = self.rank;
            a.value2 = h.dst_off; // the request id
            self.deferred.borrow_mut().push((from, a, Vec::new()));
        };
        let refuse = |why: String, req: bool| {
            let a = Header {
                kind: Kind::Refuse as u8,
                src: self.rank,
                len: eager_len(why.len().min(EAGER_MIN)),
                value2: if req { h.dst_off } else { 0 },
                ..Header::default()
            };
            let mut text = why.into_bytes();
            text.truncate(EAGER_MIN);
            self.deferred.borrow_mut().push((from, a, text));
        };
        match kind {
            Kind::Put | Kind::Signal => {
                // A write into a segment freed after the sender's last description is lost,
                // as a shared-memory write just before the free would be: not an error.
                let freed = |seg: u32, key: u64| shm.own_freed(seg, key);
                let ranges = if h.flags & PUT2 == 0 {
                    [(h.dst_off, payload), (0, &[][..])]
                } else {
                    let Some((a, b)) = payload.split_at_checked(h.len1 as usize) else {
                        return refuse(
                            "a two-range message's first range is longer than its payload".into(),
                            false,
                        );
                    };
                    [(h.dst_off, a), (u64::from(h.dst_off2), b)]
                };
                if h.dst_seg != NONE {
                    for (off, bytes) in ranges.into_iter().filter(|r| !r.1.is_empty()) {
                        if let Err(e) = shm.write_own(h.dst_seg, h.dst_key, off, bytes) {
                            if freed(h.dst_seg, h.dst_key) {
                                return;
                            }
                            return refuse(e.message().to_string(), false);
                        }
                    }
                }
                if kind == Kind::Signal && h.flags & SET2 != 0 {
                    let off2 = u64::from(h.sig_off2);
                    let set = SignalOp::Set(h.value2);
                    if let Err(e) = shm.signal_own(h.sig_seg, h.sig_key, off2, set) {
                        if freed(h.sig_seg, h.sig_key) {
                            return;
                        }
                        return refuse(e.message().to_string(), false);
                    }
                }
                if kind == Kind::Signal {
                    let sop = match h.op {
                        op::SET => SignalOp::Set(h.value),
                        op::ADD => SignalOp::Add(h.value),
                        _ => return refuse("unknown signal operation".into(), false),
                    };
                    if let Err(e) = shm.signal_own(h.sig_seg, h.sig_key, h.sig_off, sop) {
                        if !freed(h.sig_seg, h.sig_key) {
                            refuse(e.message().to_string(), false);
                        }
                    }
                }
            }
            Kind::Atomic => {
                let aop = match h.op {
                    op::LOAD => AtomicOp::Load,
                    op::SET => AtomicOp::Store(h.value),
                    op::SWAP => AtomicOp::Swap(h.value),
                    op::ADD => AtomicOp::FetchAdd(h.value),
                    op::CAS => AtomicOp::CompareExchange {
                        current: h.value,
                        new: h.value2,
                    },
                    _ => return refuse("unknown atomic operation".into(), true),
                };
                match shm.atomic_own(h.sig_seg, h.sig_key, h.sig_off, aop) {
                    Ok(old) => answer(Header {
                        kind: Kind::Answer as u8,
                        value: old,
                        ..Header::default()
                    }),
                    Err(e) => refuse(e.message().to_string(), true),
                }
            }
            Kind::Describe => {
                let mut regs = self.regs.borrow_mut();
                match regs.get_mut(&h.dst_seg) {
                    Some((r, mr, who))
                        if r.handle.key() == h.dst_key
                            && r.handle.job() == h.value
                            && r.is_live() =>
                    {
                        if !who.contains(&from) {
                            who.push(from);
                        }
                        answer(Header {
                            kind: Kind::Answer as u8,
                            sig_key: mr.key(),
                            value: mr.remote_addr(0),
                            sig_off: r.handle.len() as u64,
                            ..Header::default()
                        });
                    }
                    Some((r, _, _)) if r.handle.key() == h.dst_key && !r.is_live() => {
                        refuse(format!("segment {} has been freed", h.dst_seg), true)
                    }
                    _ => refuse(
                        format!(
                            "handle to segment {} refused: its key, job or id does not match \
                             (stale or forged handle)",
                            h.dst_seg
                        ),
                        true,
                    ),
                }
            }
            Kind::Quiet => answer(Header {
                kind: Kind::Answer as u8,
                ..Header::default()
            }),
            Kind::Answer => {
                if self.asked.get() == Some((from, h.value2)) {
                    self.asked.set(None);
                    self.replies.borrow_mut().insert(h.value2, Reply::Value(h));
                    self.answered.fetch_max(h.value2, Ordering::Release);
                } else {
                    let mut lane_asked = self.lane_asked.borrow_mut();
                    let asked = |&(_, r, req): &(usize, u32, u64)| (r, req) == (from, h.value2);
                    if let Some(i) = lane_asked.iter().position(asked) {
                        lane_asked.swap_remove(i);
                        self.lane_answered.fetch_add(1, Ordering::Release);
                    }
                }
            }
            Kind::Revoke => {
                let mut remote = self.remote.borrow_mut();
                if remote
                    .get(&(from, h.dst_seg))
                    .is_some_and(|d| d.key == h.dst_key)
                {
                    remote.remove(&(from, h.dst_seg));
                }
            }
            Kind::Refuse => {
                let why = String::from_utf8_lossy(payload).into_owned();
                if h.value2 != 0 {
                    if self.asked.get() == Some((from, h.value2)) {
                        self.asked.set(None);
                        self.replies
                            .borrow_mut()
                            .insert(h.value2, Reply::Refused(why));
                        self.answered.fetch_max(h.value2, Ordering::Release);
                    }
                } else if self.touched.borrow().get(from as usize) == Some(&true) {
                    // Only a rank written to since the last quiet can have refused a write.
                    self.refused.borrow_mut().get_or_insert_with(|| {
                        Error::peer(
                            ErrorKind::InvalidHandle,
                            from,
                            format!("rank {from} refused a write: {why}"),
                        )
                    });
                }
            }
        }
    }

    /// Whether [`Ofi::sleep`] can block: the provider offers a descriptor to sleep on.
    pub(crate) fn can_block(&self) -> bool {
        self.ep.wait_fd().is_some()
    }

    /// One turn of a wait's sleep on the network: [`Ofi::sleep`] for `d`, unless this wait's
    /// turns look like a descriptor that never blocks: [`POLLS_BEFORE_SLEEP`] turns that
    /// returned at once (within [`AT_ONCE`]) with no completion read since, over a stretch of
    /// [`QUICK_FOR`], or [`QUICK_MAX`] of them in all; then a plain sleep of [`POLL_SLEEP`] (at
    /// most `d`; the kernel's timer slack makes it about 120 us here). A descriptor that keeps
    /// reading ready while nothing completes (libfabric 1.17's `net` provider's does) would
    /// otherwise make a long wait a busy poll; polling it for 2 ms keeps a large put into this
    /// rank streaming (its bytes complete nothing here), and a descriptor that really blocks
    /// returns at once only when something arrived. So a wait takes at most `QUICK_MAX` turns
    /// that return at once, and one more per `AT_ONCE` after them.
    pub(crate) fn sleep_turn(&self, d: std::time::Duration, turns: &QuickTurns) {
        let now = std::time::Instant::now();
        let done = self.completions.get();
        if turns.since.get().is_none() || turns.seen.get() != done {
            // The first turn, or completions came since the last: a new quiet stretch.
            turns.seen.set(done);
            turns.since.set(Some(now));
            turns.quiet.set(0);
        }
        let since = turns.since.get().unwrap_or(now);
        let (total, quiet) = (turns.total.get(), turns.quiet.get());
        if total >= QUICK_MAX || (quiet >= POLLS_BEFORE_SLEEP && now - since >= QUICK_FOR) {
            std::thread::sleep(d.min(POLL_SLEEP));
        } else if self.sleep(d) {
            turns.total.set(total + 1);
            turns.quiet.set(quiet + 1);
        }
    }

    /// Blocks until the completion queue has something or `timeout` passes (when the
    /// provider offers a file descriptor to sleep on; otherwise yields). Returns whether it
    /// returned at once: the descriptor was ready within [`AT_ONCE`], or the provider said
    /// completions may be pending, or it has no descriptor.
    fn sleep(&self, timeout: std::time::Duration) -> bool {
        use rustix::event::{PollFd, PollFlags, poll};
        match self.ep.wait_fd() {
            Some(fd) if self.ep.trywait() => {
                // SAFETY: the descriptor belongs to the endpoint's completion queue, which
                // lives as long as `self`, beyond this call.
                let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                let ts = crate::cast::timespec(timeout);
                let start = std::time::Instant::now();
                let ready = !matches!(poll(&mut fds, Some(&ts)), Ok(0));
                ready && start.elapsed() < AT_ONCE
            }
            _ => {
                std::thread::yield_now();
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(h: &Header, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; h.size()];
        h.encode(&mut b);
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn a_two_range_header_round_trips_and_is_8_bytes_longer() {
        let h = Header {
            kind: Kind::Signal as u8,
            op: op::SET,
            flags: PUT2 | SET2,
            src: 3,
            len: 20,
            dst_seg: 7,
            dst_key: 0xdead,
            dst_off: 4160,
            sig_seg: 7,
            sig_off2: 128,
            sig_key: 0xdead,
            sig_off: 4152,
            value: 9,
            value2: 8,
            dst_off2: 4136,
            len1: 4,
        };
        let b = message(&h, &[1; 20]);
        assert_eq!(b.len(), HDR_MAX + 20);
        let d = Header::decode(&b).expect("a well-formed message");
        assert_eq!((d.dst_off2, d.len1, d.flags), (4136, 4, PUT2 | SET2));
        assert_eq!(
            (d.sig_off2, d.value2, d.sig_off, d.value),
            (128, 8, 4152, 9)
        );
        // Without the flag the header is the short one and the extension is not read.
        let plain = Header { flags: SET2, ..h };
        let b = message(&plain, &[1; 20]);
        assert_eq!(b.len(), HDR + 20);
        let d = Header::decode(&b).expect("a well-formed message");
        assert_eq!((d.dst_off2, d.len1), (0, 0));
    }

    #[test]
    fn a_two_range_message_cut_short_or_padded_is_not_one() {
        let h = Header {
            kind: Kind::Signal as u8,
            flags: PUT2,
            len: 16,
            len1: 8,
            ..Header::default()
        };
        let b = message(&h, &[0; 16]);
        assert!(Header::decode(&b).is_some());
        assert!(Header::decode(&b[..b.len() - 1]).is_none());
        assert!(Header::decode(&b[..HDR + 4]).is_none());
        let mut longer = b.clone();
        longer.push(0);
        assert!(Header::decode(&longer).is_none());
    }
}
