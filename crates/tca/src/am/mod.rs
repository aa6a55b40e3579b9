//! Active messages and a GASNet-style extended API over one-sided writes (seed 001): handlers
//! run at the target with arguments and a payload, put and get (across a network a get is
//! done in software, by a handler that writes the data back; within a node it reads the
//! target's mapped segment), vector, indexed and strided transfers — GASNet-EX's semantics
//! on a [`Comm`], built from the fabric's puts and signals (and, within a node, loads).
//!
//! ```
//! use std::{cell::Cell, rc::Rc};
//! use tca::{Comm, threads, am::{Endpoint, Table}};
//!
//! let out = threads::run(2, |world| {
//!     let comm = Comm::world(world)?;
//!     let got = Rc::new(Cell::new(0u64));
//!     let mut table = Table::new();
//!     let seen = got.clone();
//!     let pong = table.add("pong", move |_, msg| Ok(seen.set(msg.args[0])));
//!     table.add("ping", move |tok, msg| tok.reply_short(pong, &[msg.args[0] + 1]));
//!     let ep = Endpoint::new(&comm, table, 1 << 16)?;
//!     let ping = ep.index("ping")?;
//!     ep.request_short(1 - comm.rank(), ping, &[41])?;
//!     ep.wait_until(|| got.get() != 0)?;
//!     ep.put(1 - comm.rank(), 0, &[comm.rank() as u8; 8])?;
//!     comm.barrier()?;
//!     let mut peer = [0u8; 8];
//!     ep.get(1 - comm.rank(), 0, &mut peer)?; // what the peer holds: our own put
//!     // Handlers run only while their rank is in a call: stay until every peer is done.
//!     comm.barrier()?;
//!     Ok((got.get(), peer[0]))
//! })?;
//! assert_eq!(out, vec![(42, 0), (42, 1)]);
//! # Ok::<(), tca::Error>(())
//! ```
//!
//! # Active messages
//! A [`Table`] of handlers is built on every rank in the same order (indices, names and count
//! are checked when the endpoint is made). A rank's handlers run only while it is inside a
//! call, so a program ends with a barrier (as GASNet programs do): a rank that leaves while a
//! peer still waits for its handlers makes that peer's wait fail, naming it. A request runs
//! its handler at the target inside
//! the target's polling: [`Endpoint::poll`], [`Endpoint::wait_until`], any wait of this layer
//! and any blocking call of the communicator (a collective, a two-sided wait) — never
//! concurrently with another handler of the rank. Three kinds, as GASNet's:
//! - **Short**: up to [`MAX_ARGS`] 64-bit arguments (up to 5 travel in one cache line).
//! - **Medium**: arguments and a payload of up to [`MAX_MEDIUM`] bytes, handed to the handler
//!   in a temporary buffer (the ring slot itself when it fits one packet: no copy).
//! - **Long**: arguments and a payload put straight into the target's segment at a given
//!   offset before the handler runs (the handler gets the range).
//!
//! A request handler may reply once, to the requester, with a [`Token`]; a reply handler may
//! not reply; neither may send requests or block. Each is checked and is an error. An error a
//! handler returns is kept and returned by this rank's next call of the endpoint (raised where
//! the handler ran, it would cut off whatever send or wait happened to be polling).
//!
//! # Rings and deadlock freedom
//! Requests and replies travel on two rings per ordered pair in the receiver's memory (the
//! one ring-with-credits of `fabric::ring`): the sender writes a packet, then its
//! sequence word; the receiver consumes in order and returns credits, so a full ring makes
//! the sender wait. A rank waiting to send a request runs every handler meanwhile (two ranks
//! flooding each other keep draining each other); a request handler waiting to send its
//! reply runs only reply handlers, which cannot send — so nesting stops at depth two and a
//! reply always gets room, because every rank, whatever it waits for, consumes replies.
//! Payloads larger than a packet go as consecutive packets of the same ring; nothing else of
//! that ring and pair comes between them (the sender is single-threaded and the only nested
//! sends go to the other ring), so the target reassembles them without message ids.
//!
//! A rank waiting in this layer spins on its rings first; if nothing comes, it raises an
//! "asleep" flag and sleeps on a doorbell word that senders within the node ring after their
//! packet while the flag is up (the packet's sequence word is stored before the flag is read,
//! the flag before the sleeper's last look at its rings: one sees the other). A ping-pong of
//! active messages never sleeps and never rings.
//!
//! # Extended API
//! [`Endpoint::put`] writes straight into the target's segment (one copy). [`Endpoint::get`]
//! from a rank of this node reads the target's segment directly (it is mapped here: one copy,
//! no message, as GASNet's shared-memory gets); from a rank across the network — where, as on
//! the papers' hardware, only writes exist — it sends a request whose handler writes the data
//! back: up to a packet in a reply packet, a larger one by one put into a pooled landing
//! segment of the requester (then one copy out). [`Endpoint::get_into`] always asks the
//! target to put straight into this rank's segment (one copy). Each comes blocking, with an explicit handle ([`Event`]) and with implicit handles
//! (`*_nbi`, completed by [`Endpoint::wait_syncnbi_all`] and its siblings).
//!
//! Vector, indexed and strided transfers ([`Strided`] is GASNet-EX's description: element
//! size, counts and byte strides per dimension, both sides) are cut into contiguous pieces,
//! with adjacent dimensions merged when their strides make them contiguous. A put sends
//! pieces of at least [`Endpoint::pack_threshold`] bytes segment to segment (the seed's MtoM:
//! one copy) and packs shorter ones into request packets that the target unpacks (BtoB: two
//! copies, one packet for many pieces). Within a node the threshold is 0: a direct piece is
//! one `memcpy` into the peer's memory, and measured faster than packing at every piece size
//! (8 bytes up); across a network it is [`PACK_DEFAULT`]. A get lists its pieces in one request and receives
//! them in order through reply packets.
//!
//! # Data modes (the seed's names)
//! [`Mode`] names them; [`Endpoint::put_mode`], [`Endpoint::put_from_mode`] and
//! [`Endpoint::medium_from_mode`] say which one a transfer takes, chosen by where its source
//! and destination lie and by size (`tca bench Put Put_from AM_Medium_from` prints them).
//! - **MtoM**, segment to segment, one copy: [`Endpoint::put`] (within a node the put reads
//!   any source directly; across a network an RMA write straight from it, where the provider
//!   reads ordinary memory or the source lies in a registered segment), [`Endpoint::put_from`]
//!   and [`Endpoint::put_strided_from`] (the sender's segment, each description one chain of
//!   puts built once and kept — the seed's descriptor cache — and across a network each
//!   piece an RMA write from the segment, no copy on either side), [`Endpoint::get_into`]
//!   and large gets (the target's chained put into this rank's segment or a landing
//!   segment), and VIS pieces at or above the packing threshold.
//! - **BtoM**, staged: across a network, a put from memory no registration covers on a
//!   provider that needs local buffers registered (verbs, efa), or with
//!   `TCA_OFI_STAGE=always` / [`Endpoint::set_staging`]: copied [`STAGE_BYTES`] at a time
//!   into one of two registered staging buffers while the other's RMA write is in flight.
//!   Within a node no put needs staging (the CPU stores straight into the peer's memory).
//! - **MtoB**, segment to ring: [`Endpoint::request_medium_from`], a Medium payload written
//!   from this rank's segment straight into the target's ring (across a network an RMA
//!   write from the segment for each packet longer than a message carries: on `tcp;ofi_rxm`
//!   packets over 8 KiB; `net` carries a whole 32 KiB packet in one message, which is BtoB).
//! - **BtoB**, through the ring or messages, two copies, any memory: Medium payloads, packed
//!   VIS pieces, software gets of up to a packet (across a network, or with direct gets off),
//!   and across a network every put a message carries (up to its eager size).
//!
//! # Several channels
//! [`Endpoint::set_channels`]: a put of at least [`SPLIT_MIN`] bytes split over N channels,
//! weights tuned per transfer pattern from measured bandwidth and frozen after [`TUNING`]
//! transfers. Within a node a channel is a copy engine (this thread or one of a pool's);
//! across a network an endpoint (this rank's and N - 1 further libfabric endpoints, each
//! part an RMA write; not on providers that need local buffers registered); on a simulated
//! network one of the model's DMA channels.
//!
//! # Memory per rank
//! Two rings of the two-sided messages' shape (`P*128 + P*8*(64 + CH/2)` bytes each, CH the
//! collectives' chunk: 0.5 MiB each at P = 2, 2 MiB at P = 8) and a doorbell line, plus the
//! segment asked for, plus pooled buffers that grow to the largest fragmented payload and
//! reply-packet get in flight, and pooled landing segments of large gets.

mod bell;
mod channels;
mod core;
mod vis;

pub(crate) use self::core::Core;
pub use channels::{MAX_CHANNELS, MAX_PATTERNS, MIN_SHARE, SPLIT_MIN, TUNING, Tune, split};
pub use vis::Strided;

use std::cell::Cell;

use self::core::{GET, GET_LAND, GET_SEG, MEDIUM, NBI_GETS, NBI_PUTS, Net, SHORT, op_index};
use crate::Comm;
use crate::cast::rank_u32;
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::ring::{Ring, Shape};
use crate::fabric::{Handle, NetPath, Segment, World};
use crate::p2p::Engine;

/// Most 64-bit arguments one active message carries (GASNet's `gex_AM_MaxArgs`).
pub const MAX_ARGS: usize = 16;
/// Largest Medium payload, request or reply (`gex_AM_MaxRequestMedium`).
pub const MAX_MEDIUM: usize = 64 << 10;
/// Bytes of each of the two staging buffers of [`Mode::BtoM`] puts: a staged put goes in
/// pieces of this size, one copied while the one before is written.
pub const STAGE_BYTES: usize = crate::fabric::STAGE_BYTES;
/// Default packing threshold of vector, indexed and strided puts to a peer across a network
/// (see [`Endpoint::pack_threshold`]); within a node nothing is packed by default.
pub const PACK_DEFAULT: usize = 2 << 10;

/// Seed 001's data modes: how a transfer's bytes travel, by where its source and its
/// destination lie (a segment, registered for the network, or ordinary memory) and by size.
/// [`Endpoint::put_mode`] and [`Endpoint::put_from_mode`] say which one a put takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Buffer to buffer: inside messages or packets, copied into a send buffer or ring here
    /// and out of a receive buffer or ring at the target (two copies, any memory). Small
    /// puts across a network, Medium payloads, packed vector/strided pieces.
    BtoB,
    /// Memory to memory: one copy straight into the destination segment — by this thread's
    /// stores within a node, by an RMA write from the source where it lies across a network
    /// (the source in this rank's segment, or ordinary memory where the provider reads it).
    MtoM,
    /// Buffer to memory: across a network from memory no registration covers, on a provider
    /// that needs local buffers registered (or with `TCA_OFI_STAGE=always`), the source is
    /// copied into one of two registered staging buffers while the other is written (RMA)
    /// into the destination segment.
    BtoM,
    /// Memory to buffer: a source in this rank's segment written straight into the
    /// receiver's ring, which the target copies out of.
    MtoB,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl Mode {
    /// The mode of a put by the transport's path across a network.
    fn of_path(p: NetPath) -> Self {
        match p {
            NetPath::Message => Mode::BtoB,
            NetPath::Registered | NetPath::Direct => Mode::MtoM,
            NetPath::Staged => Mode::BtoM,
        }
    }
}

/// A handler: runs at the target with a token (to reply) and the message.
pub type Handler = dyn FnMut(&mut Token<'_>, &Msg<'_>) -> Result<()>;

/// A handler's index in the table, the same on every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Index(u16);

impl Index {
    /// The index as a number.
    pub fn get(self) -> u16 {
        self.0
    }
}

/// The handler table, built in the same order on every rank before [`Endpoint::new`].
#[derive(Default)]
pub struct Table {
    entries: Vec<(String, Box<Handler>)>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(n, _)| n))
            .finish()
    }
}

impl Table {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` under `name`; its index is the number of handlers added before.
    pub fn add(
        &mut self,
        name: &str,
        handler: impl FnMut(&mut Token<'_>, &Msg<'_>) -> Result<()> + 'static,
    ) -> Index {
        self.entries.push((name.to_string(), Box::new(handler)));
        // Past u16::MAX handlers the index saturates: `Endpoint::new` refuses such a table.
        Index(u16::try_from(self.entries.len() - 1).unwrap_or(u16::MAX))
    }

    fn fingerprint(&self) -> [u64; 2] {
        // FNV-1a over the names in order, each followed by a 0 byte.
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for (n, _) in &self.entries {
            for b in n.bytes().chain([0]) {
                h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
        }
        [self.entries.len() as u64, h]
    }
}

/// A message as its handler sees it.
#[derive(Debug)]
pub struct Msg<'a> {
    /// Communicator rank of the sender.
    pub source: u32,
    /// The arguments.
    pub args: &'a [u64],
    /// A Medium's payload (empty for Short and Long).
    pub payload: &'a [u8],
    /// A Long's payload: (offset, length) in this rank's segment, already written.
    pub long: Option<(usize, usize)>,
}

/// What a handler may do besides computing: reply once, if it handles a request.
pub struct Token<'a> {
    core: &'a Core,
    w: &'a World,
    eng: &'a Engine,
    src: usize,
    request: bool,
    replied: bool,
}

impl std::fmt::Debug for Token<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("source", &self.src)
            .field("request", &self.request)
            .field("replied", &self.replied)
            .finish()
    }
}

impl Token<'_> {
    /// Communicator rank of the sender.
    pub fn source(&self) -> u32 {
        rank_u32(self.src)
    }

    /// This rank's segment (where Long payloads land).
    pub fn segment(&self) -> &Segment {
        &self.core.seg
    }

    fn may_reply(&mut self) -> Result<()> {
        if !self.request {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a reply handler cannot reply (GASNet's rule: replies only from request handlers)",
            ));
        }
        if self.replied {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a request handler may reply only once",
            ));
        }
        self.replied = true;
        Ok(())
    }

    fn reply(&mut self, kind: u8, h: Index, args: &[u64], payload: &[u8]) -> Result<()> {
        self.core.check_user(h, args.len())?;
        self.core.check_medium(payload.len())?;
        self.may_reply()?;
        let (c, net) = (self.core, Net::Reply);
        c.send(self.w, self.eng, net, self.src, kind, h.0, args, payload)
    }

    /// Replies with a Short message.
    pub fn reply_short(&mut self, h: Index, args: &[u64]) -> Result<()> {
        self.reply(SHORT, h, args, &[])
    }

    /// Replies with a Medium message.
    pub fn reply_medium(&mut self, h: Index, args: &[u64], payload: &[u8]) -> Result<()> {
        self.reply(MEDIUM, h, args, payload)
    }

    /// Replies with a Long message: `payload` lands at `off` in the requester's segment.
    pub fn reply_long(&mut self, h: Index, args: &[u64], payload: &[u8], off: usize) -> Result<()> {
        self.core.check_user(h, args.len())?;
        self.core.check_range(self.src, off, payload.len())?;
        self.may_reply()?;
        let c = self.core;
        c.send_long(
            self.w,
            self.eng,
            Net::Reply,
            self.src,
            h,
            args,
            payload,
            off,
        )
    }
}

/// A communicator's active-message endpoint: its handler table, segment and rings. Cheap to
/// copy; [`Endpoint::of`] finds it again.
#[derive(Clone, Copy)]
pub struct Endpoint<'c, 'w> {
    comm: &'c Comm<'w>,
    core: &'c Core,
    names: &'c [String],
}

impl std::fmt::Debug for Endpoint<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("rank", &self.core.me)
            .field("size", &self.core.p)
            .field("segment", &self.core.seg.len())
            .finish()
    }
}

/// An operation with an explicit handle (GASNet's `gex_Event_t`): complete it with
/// [`Event::wait`] or poll it with [`Event::test`]. A get's handle borrows its buffer, which
/// is filled when the operation completes. Dropping an unfinished handle is safe: the
/// operation still completes, its data is discarded.
pub struct Event<'a> {
    w: &'a World,
    eng: &'a Engine,
    core: &'a Core,
    what: What<'a>,
}

enum What<'a> {
    Put,
    Get { op: u32, buf: &'a mut [u8] },
    Done,
}

impl std::fmt::Debug for Event<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.what {
            What::Put => "put",
            What::Get { .. } => "get",
            What::Done => "done",
        };
        f.debug_struct("Event").field("what", &what).finish()
    }
}

impl Event<'_> {
    /// Whether the operation is complete (finishing it if so; a finished handle then says
    /// `true`). Runs one pass of progress.
    pub fn test(&mut self) -> Result<bool> {
        match &self.what {
            What::Done => return Ok(true),
            What::Put => {}
            What::Get { op, .. } => {
                self.eng.poke(self.w)?;
                if !self.core.op_done(*op) {
                    return Ok(false);
                }
            }
        }
        self.finish()?;
        Ok(true)
    }

    /// Waits until the operation is complete.
    pub fn wait(mut self) -> Result<()> {
        if let What::Get { op, .. } = self.what {
            self.core.wait_op(self.w, self.eng, op)?;
        }
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.what, What::Done) {
            What::Done => Ok(()),
            What::Put => self.w.quiet(),
            What::Get { op, buf } => self.core.op_finish(op, |stash, land| match land {
                Some(l) => l.read(0, buf),
                None => {
                    buf.copy_from_slice(&stash[..buf.len()]);
                    Ok(())
                }
            }),
        }
    }
}

impl Drop for Event<'_> {
    fn drop(&mut self) {
        if let What::Get { op, .. } = self.what {
            self.core.op_drop(op);
        }
    }
}

fn rank(core: &Core, r: u32) -> Result<usize> {
    if (r as usize) < core.p {
        Ok(r as usize)
    } else {
        Err(Error::new(
            ErrorKind::InvalidRank,
            format!("rank {r} is not in this communicator of {} ranks", core.p),
        ))
    }
}

impl<'c, 'w> Endpoint<'c, 'w> {
    /// Makes the communicator's endpoint (collective: every member calls it, with tables of
    /// the same names in the same order): registers a segment of `segment_bytes` for puts,
    /// gets and Long payloads, and the request and reply rings. One per communicator; a
    /// second is refused (use [`Endpoint::of`], or a split of the communicator).
    pub fn new(comm: &'c Comm<'w>, table: Table, segment_bytes: usize) -> Result<Self> {
        let eng = comm.engine();
        let w = comm.world_ref();
        let p = comm.size() as usize;
        let me = comm.rank() as usize;
        let shape = Shape::messages(p);
        let bell = shape.bytes(p);
        // Everything that can fail on one rank alone comes first; then the members agree
        // (one allgather carries each one's verdict with its table's fingerprint), so a
        // failure anywhere is an error everywhere, never a rank left waiting.
        let local = (|| {
            if eng.am().is_some() {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    "this communicator already has an active-message endpoint (Endpoint::of finds it)",
                ));
            }
            if table.entries.len() > usize::from(u16::MAX) {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("{} handlers: at most {}", table.entries.len(), u16::MAX),
                ));
            }
            let env = crate::env::parse::<usize>(crate::env::AM_PACK)?;
            let channels = match crate::env::parse::<usize>(crate::env::AM_CHANNELS)? {
                Some(n) if n > 1 => Some(channels::Channels::new(n)?),
                _ => None,
            };
            let segs = (
                w.alloc(bell + self::core::BELL_BYTES)?,
                w.alloc(shape.bytes(p))?,
                w.alloc(segment_bytes)?,
            );
            Ok((env, channels, segs))
        })();
        let [count, hash] = table.fingerprint();
        let mut prints = vec![0u64; 3 * p];
        comm.allgather(&[u64::from(local.is_ok()), count, hash], &mut prints)?;
        let (env, channels, (req, rep, seg)) = local?;
        if let Some(q) = (0..p).find(|&q| prints[3 * q] == 0) {
            return Err(Error::peer(
                ErrorKind::Aborted,
                comm.world_rank(rank_u32(q)).expect("member"),
                format!("communicator rank {q} could not make its active-message endpoint"),
            ));
        }
        if let Some(q) = (0..p).find(|&q| prints[3 * q + 1..3 * q + 3] != [count, hash]) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "handler tables differ: this rank registered {count} handlers, \
                     communicator rank {q} {} (or their names or order differ); every rank \
                     must add the same handlers in the same order",
                    prints[3 * q + 1]
                ),
            ));
        }
        let mut mine = Vec::with_capacity(3 * Handle::BYTES);
        for s in [&req, &rep, &seg] {
            mine.extend_from_slice(&s.handle().to_bytes());
        }
        let mut all = vec![0u8; 3 * Handle::BYTES * p];
        comm.allgather(&mine, &mut all)?;
        let attached = (|| {
            let hs = all
                .chunks(Handle::BYTES)
                .map(Handle::from_bytes)
                .collect::<Result<Vec<_>>>()?;
            for h in &hs {
                w.attach(h)?;
            }
            let flags = (0..p)
                .map(|q| {
                    let h = hs[3 * q];
                    if w.is_local(h.rank()) {
                        w.remote_word(&h, bell + 64).map(Some)
                    } else {
                        Ok(None)
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            Ok((hs, flags))
        })();
        // The second agreement is also the barrier: nobody sends before every member's rings
        // exist and every member has installed its endpoint... or nobody does.
        let mut oks = vec![0u64; p];
        comm.allgather(&[u64::from(attached.is_ok())], &mut oks)?;
        let (hs, flags) = attached?;
        if let Some(q) = oks.iter().position(|&ok| ok == 0) {
            return Err(Error::peer(
                ErrorKind::Aborted,
                comm.world_rank(rank_u32(q)).expect("member"),
                format!("communicator rank {q} could not attach the active-message segments"),
            ));
        }
        let pick = |k: usize| (0..p).map(|q| hs[3 * q + k]).collect::<Vec<_>>();
        let req = Ring::new(req, pick(0), me, shape);
        let rep = Ring::new(rep, pick(1), me, shape);
        let room = req.capacity() - 8 - 16;
        // Within a node a piece put directly is one memcpy into the peer's memory, faster at
        // every piece size measured than packing it (BENCHMARKS.md, "VIS_Halo"); across a
        // network each direct piece is a network operation.
        let world_ranks: Vec<u32> = (0..rank_u32(p))
            .map(|r| comm.world_rank(r).expect("member"))
            .collect();
        let pack = world_ranks
            .iter()
            .map(|&r| match env {
                Some(n) => n.min(room),
                None if w.is_local(r) => 0,
                None => PACK_DEFAULT.min(room),
            })
            .map(Cell::new)
            .collect();
        let core = Core::new(
            req,
            rep,
            seg,
            pick(2),
            me,
            world_ranks,
            table.entries,
            pack,
            (bell, flags),
        );
        *core.channels.borrow_mut() = channels;
        eng.set_am(core);
        // Peers may send as soon as they return: packets wait in this rank's rings until
        // its first poll.
        Ok(Self::of(comm).expect("set above"))
    }

    /// The communicator's endpoint, if [`Endpoint::new`] made one.
    pub fn of(comm: &'c Comm<'w>) -> Option<Self> {
        let core = comm.engine().am()?;
        Some(Self {
            comm,
            core,
            names: core.names(),
        })
    }

    fn w(&self) -> &'c World {
        self.comm.world_ref()
    }

    fn eng(&self) -> &'c Engine {
        self.comm.engine()
    }

    /// This rank in the communicator.
    pub fn rank(&self) -> u32 {
        rank_u32(self.core.me)
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        rank_u32(self.core.p)
    }

    /// This rank's segment: the target of peers' puts and Long payloads, the source of
    /// their gets.
    pub fn segment(&self) -> &'c Segment {
        &self.core.seg
    }

    /// Length of rank `r`'s segment (the largest Long payload it takes).
    pub fn segment_len(&self, r: u32) -> Result<usize> {
        Ok(self.core.segs[rank(self.core, r)?].len())
    }

    /// The index of the handler registered as `name`.
    pub fn index(&self, name: &str) -> Result<Index> {
        self.names
            .iter()
            .position(|n| n == name)
            // Fits: `Endpoint::new` refuses a table of more than u16::MAX handlers.
            .map(|i| Index(u16::try_from(i).expect("at most u16::MAX handlers")))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("no handler named {name:?} is registered"),
                )
            })
    }

    /// Most arguments per message ([`MAX_ARGS`]).
    pub fn max_args(&self) -> usize {
        MAX_ARGS
    }

    /// Largest Medium request payload ([`MAX_MEDIUM`]; `gex_AM_MaxRequestMedium`).
    pub fn max_request_medium(&self) -> usize {
        MAX_MEDIUM
    }

    /// Largest Medium reply payload ([`MAX_MEDIUM`]).
    pub fn max_reply_medium(&self) -> usize {
        MAX_MEDIUM
    }

    /// Bytes one ring packet carries besides its arguments: Medium payloads up to this size
    /// reach the handler without reassembly.
    pub fn packet_bytes(&self) -> usize {
        self.core.room(0)
    }

    /// Pieces of vector, indexed and strided puts to `rank` shorter than this go packed
    /// through the request ring (two copies, one packet for many pieces: the seed's BtoB);
    /// longer ones segment to segment (one copy: MtoM). `TCA_AM_PACK` sets it for every
    /// peer; by default 0 within a node (never pack) and [`PACK_DEFAULT`] across a network.
    pub fn pack_threshold(&self, rank: u32) -> Result<usize> {
        Ok(self.core.pack[self::rank(self.core, rank)?].get())
    }

    /// Sets the packing threshold for every peer (as `TCA_AM_PACK` does), capped by what
    /// one packet carries; returns the value set.
    pub fn set_pack_threshold(&self, bytes: usize) -> usize {
        let n = bytes.min(self.core.room(1) - 16);
        for c in &self.core.pack {
            c.set(n);
        }
        n
    }

    /// The data mode ([`Mode`]) of [`Endpoint::put`] of `data` to `to`: [`Mode::MtoM`]
    /// within a node and on a simulated network; across a network [`Mode::BtoB`] up to the
    /// transport's message size, then [`Mode::MtoM`], or [`Mode::BtoM`] where `data` must be
    /// staged (see [`Endpoint::set_staging`]).
    pub fn put_mode(&self, to: u32, data: &[u8]) -> Result<Mode> {
        let r = self.world_rank(to)?;
        Ok(self
            .w()
            .net_put_path(r, data)
            .map_or(Mode::MtoM, Mode::of_path))
    }

    /// The data mode of [`Endpoint::put_from`] (and each piece of
    /// [`Endpoint::put_strided_from`]) of `len` bytes to `to`: [`Mode::MtoM`], segment to
    /// segment, but for pieces a message carries better across a network ([`Mode::BtoB`]).
    pub fn put_from_mode(&self, to: u32, len: usize) -> Result<Mode> {
        let r = self.world_rank(to)?;
        Ok(self
            .w()
            .net_put_from_path(r, len)
            .map_or(Mode::MtoM, Mode::of_path))
    }

    /// Member `to`'s rank in the world (checked).
    fn world_rank(&self, to: u32) -> Result<u32> {
        Ok(self.core.segs[rank(self.core, to)?].rank())
    }

    /// The data mode of [`Endpoint::request_medium_from`] of `len` bytes to `to`:
    /// [`Mode::MtoB`], the payload written from this rank's segment into the target's ring,
    /// but across a network where every packet of it is a message's worth
    /// ([`Mode::BtoB`]: a message carries it, copied into a send buffer).
    pub fn medium_from_mode(&self, to: u32, len: usize) -> Result<Mode> {
        let r = self.world_rank(to)?;
        let packet = len.min(self.core.room(0));
        Ok(match self.w().net_put_from_path(r, packet) {
            Some(NetPath::Message) => Mode::BtoB,
            _ => Mode::MtoB,
        })
    }

    /// Whether puts across a network from memory outside this rank's segments are always
    /// staged through two registered buffers ([`Mode::BtoM`], for measuring it; also
    /// `TCA_OFI_STAGE=always`) or only on providers that need local buffers registered
    /// (`false`, the default). No effect within a node or on a simulated network.
    pub fn set_staging(&self, always: bool) {
        self.w().set_stage_always(always);
    }

    /// Refuses calls from inside a handler, and hands over the error a handler of this rank
    /// returned since the last call (GASNet treats it as fatal; here it is the caller's).
    fn outside(&self, what: &str) -> Result<()> {
        if let Some(e) = self.core.take_failure() {
            return Err(e);
        }
        if self.core.depth.get() > 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("{what} from inside a handler: handlers may only reply"),
            ));
        }
        Ok(())
    }

    /// Sends a Short request to `to`.
    pub fn request_short(&self, to: u32, h: Index, args: &[u64]) -> Result<()> {
        self.outside("a request")?;
        let q = rank(self.core, to)?;
        self.core.check_user(h, args.len())?;
        let c = self.core;
        c.send(self.w(), self.eng(), Net::Request, q, SHORT, h.0, args, &[])
    }

    /// Sends a Medium request to `to` (the payload is copied; the buffer is free on return).
    pub fn request_medium(&self, to: u32, h: Index, args: &[u64], payload: &[u8]) -> Result<()> {
        self.outside("a request")?;
        let q = rank(self.core, to)?;
        self.core.check_user(h, args.len())?;
        self.core.check_medium(payload.len())?;
        let c = self.core;
        c.send(
            self.w(),
            self.eng(),
            Net::Request,
            q,
            MEDIUM,
            h.0,
            args,
            payload,
        )
    }

    /// Sends a Medium request to `to` whose payload is `len` bytes of this rank's segment at
    /// `local_off`, written from there straight into the target's ring (the seed's MtoB: no
    /// copy here; across a network an RMA write from the segment for each packet longer than
    /// a message carries, see [`Endpoint::medium_from_mode`]). The handler gets the payload
    /// as from [`Endpoint::request_medium`]. The range must not change until this returns.
    pub fn request_medium_from(
        &self,
        to: u32,
        h: Index,
        args: &[u64],
        local_off: usize,
        len: usize,
    ) -> Result<()> {
        self.outside("a request")?;
        let q = rank(self.core, to)?;
        self.core.check_user(h, args.len())?;
        self.core.check_medium(len)?;
        self.core.seg.region.range(local_off, len)?;
        let payload = self::core::Payload::Segment { at: local_off, len };
        self.core.send_payload(
            self.w(),
            self.eng(),
            Net::Request,
            q,
            (MEDIUM, h.0),
            args,
            payload,
        )
    }

    /// Sends a Long request to `to`: `payload` lands at `off` in its segment, then the
    /// handler runs.
    pub fn request_long(
        &self,
        to: u32,
        h: Index,
        args: &[u64],
        payload: &[u8],
        off: usize,
    ) -> Result<()> {
        self.outside("a request")?;
        let q = rank(self.core, to)?;
        let c = self.core;
        c.send_long(self.w(), self.eng(), Net::Request, q, h, args, payload, off)
    }

    /// Runs the handlers of what has arrived (and the communicator's other progress);
    /// returns how many messages were handled.
    pub fn poll(&self) -> Result<usize> {
        self.outside("poll")?;
        self.w().progress()?;
        self.eng().poke(self.w())?;
        let n = self.core.poll(self.w(), self.eng(), false)?;
        self.core.take_failure().map_or(Ok(n), Err)
    }

    /// Polls until `done` says so (GASNet's `GASNET_BLOCKUNTIL`), sleeping between polls
    /// when nothing arrives.
    pub fn wait_until(&self, done: impl Fn() -> bool) -> Result<()> {
        self.outside("a wait")?;
        self.core.wait_until(self.w(), self.eng(), &done)?;
        self.core.take_failure().map_or(Ok(()), Err)
    }

    // ---- put and get ------------------------------------------------------------------------

    /// Writes `data` at `off` in `to`'s segment and waits until it is there.
    pub fn put(&self, to: u32, off: usize, data: &[u8]) -> Result<()> {
        self.put_nbi(to, off, data)?;
        self.w().quiet()
    }

    /// Starts a put; `data` may be reused at once, the handle says when it is at the target.
    pub fn put_nb(&self, to: u32, off: usize, data: &[u8]) -> Result<Event<'c>> {
        self.put_nbi(to, off, data)?;
        Ok(self.event(What::Put))
    }

    /// Starts a put completed by [`Endpoint::wait_syncnbi_puts`]. With channels on
    /// ([`Endpoint::set_channels`]), a put of at least [`SPLIT_MIN`] bytes to another rank is
    /// split over them (within a node or on a simulated network complete when this returns;
    /// across a network when the put is waited for, as any other: its parts travel on other
    /// endpoints, ordered with nothing else this rank sends until that wait).
    pub fn put_nbi(&self, to: u32, off: usize, data: &[u8]) -> Result<()> {
        self.outside("a put")?;
        let q = rank(self.core, to)?;
        self.core.check_range(q, off, data.len())?;
        if let Some(ch) = &*self.core.channels.borrow()
            && ch.put(self.w(), q, &self.core.segs[q], off, data)?
        {
            return Ok(());
        }
        self.w().put(&self.core.segs[q], off, data)
    }

    /// Splits puts of at least [`SPLIT_MIN`] bytes to another rank over `n` channels (seed
    /// 001's DMA channels), one part each, all at once, with per-channel weights tuned per
    /// transfer pattern (target and length) from each channel's measured bandwidth and frozen
    /// after [`TUNING`] transfers at the fastest split seen (see [`Tune`]). `n` = 1 turns
    /// splitting off; at most [`MAX_CHANNELS`]. `TCA_AM_CHANNELS` sets it when the endpoint
    /// is made. Resets the tuning. What a channel is:
    /// - within a node, a copy engine: this thread and `n - 1` threads of a pool;
    /// - across a network, an endpoint: this rank's own and `n - 1` further libfabric
    ///   endpoints of it (opened on the first split put; on a stream provider each its own
    ///   connection), each part an RMA write. Not on providers that need local buffers
    ///   registered, where puts go whole;
    /// - on a simulated network, one of the model's DMA channels (`channels_gbs`), in virtual
    ///   time.
    pub fn set_channels(&self, n: usize) -> Result<()> {
        self.outside("set_channels")?;
        let ch = if n > 1 {
            Some(channels::Channels::new(n)?)
        } else {
            None
        };
        *self.core.channels.borrow_mut() = ch;
        Ok(())
    }

    /// Puts `data` at `off` in `to`'s segment split over the channels at `weights` (one per
    /// channel, [`split`]'s rules), whatever its length and outside the tuning, and returns
    /// each channel's time from the call until its part was in place (seconds, 0 for an empty
    /// part; virtual time on a simulated network, where the parts go over the model's DMA
    /// channels). For measuring channels, as seed 001 measured each alone (weight 1 on one
    /// channel, 0 on the others). Complete on return. Fails if channels are off, `weights`
    /// has another length, or `to` is not reached by split puts.
    pub fn put_weighted(
        &self,
        to: u32,
        off: usize,
        data: &[u8],
        weights: &[f64],
    ) -> Result<Vec<f64>> {
        self.outside("a put")?;
        let q = rank(self.core, to)?;
        self.core.check_range(q, off, data.len())?;
        let ch = self.core.channels.borrow();
        let ch = ch.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                "put_weighted needs channels: set_channels(2..) first",
            )
        })?;
        ch.put_weighted(self.w(), &self.core.segs[q], off, data, weights)?
            .ok_or_else(|| {
                let why = if self.w().simulated().is_some() {
                    "is this rank: on a simulated network a put to its own segment crosses no \
                     network and is not split"
                } else {
                    "is across a network where puts are not split over channels (a provider \
                     that needs local buffers registered or lacks send-after-write ordering, \
                     every put staged, or a part of 1 GiB or more)"
                };
                Error::new(ErrorKind::InvalidArgument, format!("rank {to} {why}"))
            })
            .and_then(|secs| self.w().quiet().map(|()| secs))
    }

    /// Whether [`Endpoint::get`] and [`Endpoint::get_nb`] from a rank of this node read its
    /// segment directly (`true`, the default: one copy, no message) or, as across a network,
    /// send a request whose handler writes the data back (`false`: the seed's software get,
    /// for measuring it, or for a target whose handlers must see every access). A direct get
    /// is a load, like GASNet's shared-memory gets: it runs no handlers and polls nothing,
    /// and reads a peer's segment whether or not that peer is still running (as a put
    /// writes it), where a software get needs the target's handler.
    pub fn set_direct_gets(&self, on: bool) {
        self.core.direct_gets.set(on);
    }

    /// Whether `rank`'s segment is memory of this node, reached through shared memory (not
    /// across a network, not on a simulated one): then gets from it may read it directly and
    /// puts into it may be split over copy-engine channels (on a simulated network puts are
    /// split over the model's DMA channels instead).
    pub fn on_node(&self, rank: u32) -> Result<bool> {
        let q = self::rank(self.core, rank)?;
        let w = self.w();
        Ok(self
            .comm
            .world_rank(rank_u32(q))
            .is_some_and(|r| w.reads_peer(r)))
    }

    /// Whether a get from `rank` reads its segment directly (see
    /// [`Endpoint::set_direct_gets`]): on, and `rank` is [`on_node`](Endpoint::on_node).
    pub fn gets_directly(&self, rank: u32) -> Result<bool> {
        Ok(self.core.direct_gets.get() && self.on_node(rank)?)
    }

    /// The number of channels puts are split over (1: none).
    pub fn channels(&self) -> usize {
        self.core
            .channels
            .borrow()
            .as_ref()
            .map_or(1, channels::Channels::count)
    }

    /// The split of puts of `len` bytes to `rank` (weights summing to 1, one per channel) and
    /// whether it is frozen; `None` before the first such put with channels on.
    pub fn channel_weights(&self, rank: u32, len: usize) -> Result<Option<(Vec<f64>, bool)>> {
        let q = self::rank(self.core, rank)?;
        Ok(self
            .core
            .channels
            .borrow()
            .as_ref()
            .and_then(|c| c.weights(q, len)))
    }

    fn event<'a>(&self, what: What<'a>) -> Event<'a>
    where
        'c: 'a,
    {
        Event {
            w: self.w(),
            eng: self.eng(),
            core: self.core,
            what,
        }
    }

    /// Reads `buf.len()` bytes at `off` in `from`'s segment into `buf`.
    pub fn get(&self, from: u32, off: usize, buf: &mut [u8]) -> Result<()> {
        self.get_nb(from, off, buf)?.wait()
    }

    /// Starts a get into `buf`, filled when the handle completes.
    pub fn get_nb<'a>(&self, from: u32, off: usize, buf: &'a mut [u8]) -> Result<Event<'a>>
    where
        'c: 'a,
    {
        self.outside("a get")?;
        let q = rank(self.core, from)?;
        self.core.check_range(q, off, buf.len())?;
        // Within a node the target's segment is mapped here: read it (one copy, no message).
        if self.core.direct_gets.get() && self.w().read_peer(&self.core.segs[q], off, buf)? {
            return Ok(self.event(What::Done));
        }
        let n = buf.len();
        // Across a network: up to a packet, the bytes come back in reply packets (copied once more into a
        // pooled stash); beyond, the target puts them straight into a pooled landing
        // segment of this rank, copied out once.
        let large = n > self.core.room(2);
        let id = self.core.op_alloc(q, n, if large { 0 } else { n });
        let op = op_index(id);
        let ev = self.event(What::Get { op, buf });
        if n > 0 {
            let c = self.core;
            let sent = if large {
                c.land(self.w(), op, n).and_then(|h| {
                    let args = [id, off as u64, n as u64];
                    let (w, e) = (self.w(), self.eng());
                    c.send(w, e, Net::Request, q, GET_LAND, 0, &args, &h.to_bytes())
                })
            } else {
                let mut list = [0u8; 16];
                list[..8].copy_from_slice(&(off as u64).to_le_bytes());
                list[8..].copy_from_slice(&(n as u64).to_le_bytes());
                c.send(
                    self.w(),
                    self.eng(),
                    Net::Request,
                    q,
                    GET,
                    0,
                    &[id, 0],
                    &list,
                )
            };
            if let Err(e) = sent {
                // Never sent: nothing will answer it.
                c.with_op(op, |o| o.bytes_left = 0);
                return Err(e);
            }
        }
        Ok(ev)
    }

    /// Reads `len` bytes at `off` in `from`'s segment into this rank's segment at
    /// `local_off`: the target puts them straight there (one copy).
    pub fn get_into(&self, local_off: usize, from: u32, off: usize, len: usize) -> Result<()> {
        let id = self.get_seg(local_off, from, off, len, None)?;
        let op = op_index(id);
        self.core.wait_op(self.w(), self.eng(), op)?;
        self.core.op_finish(op, |_, _| Ok(()))
    }

    /// Starts a get into this rank's segment, completed by [`Endpoint::wait_syncnbi_gets`].
    pub fn get_nbi_into(&self, local_off: usize, from: u32, off: usize, len: usize) -> Result<()> {
        self.get_seg(local_off, from, off, len, Some(NBI_GETS))
            .map(|_| ())
    }

    fn get_seg(
        &self,
        local_off: usize,
        from: u32,
        off: usize,
        len: usize,
        nbi: Option<u32>,
    ) -> Result<u64> {
        self.outside("a get")?;
        let q = rank(self.core, from)?;
        self.core.check_range(q, off, len)?;
        self.core.check_range(self.core.me, local_off, len)?;
        let id = match nbi {
            Some(slot) => self.core.with_op(slot, |op| {
                op.bytes_left += len;
                u64::from(slot)
            }),
            None => self.core.op_alloc(q, len, 0),
        };
        let args = [id, off as u64, len as u64, local_off as u64];
        let c = self.core;
        if let Err(e) = c.send(
            self.w(),
            self.eng(),
            Net::Request,
            q,
            GET_SEG,
            0,
            &args,
            &[],
        ) {
            // Never sent: nothing will answer it.
            match nbi {
                Some(slot) => c.with_op(slot, |op| op.bytes_left -= len),
                None => {
                    c.with_op(op_index(id), |op| op.bytes_left = 0);
                    let _ = c.op_finish(op_index(id), |_, _| Ok(()));
                }
            }
            return Err(e);
        }
        Ok(id)
    }

    /// Waits until every `*_nbi` put of this rank is complete at its target.
    pub fn wait_syncnbi_puts(&self) -> Result<()> {
        self.outside("a wait")?;
        self.wait_slot(NBI_PUTS)?;
        self.w().quiet()
    }

    /// Waits until every `*_nbi` get of this rank has landed.
    pub fn wait_syncnbi_gets(&self) -> Result<()> {
        self.outside("a wait")?;
        self.wait_slot(NBI_GETS)
    }

    /// Both of the above.
    pub fn wait_syncnbi_all(&self) -> Result<()> {
        self.wait_syncnbi_gets()?;
        self.wait_syncnbi_puts()
    }

    fn wait_slot(&self, slot: u32) -> Result<()> {
        let c = self.core;
        c.wait_until(self.w(), self.eng(), &|| c.op_done(slot))?;
        c.take_err(slot).map_or(Ok(()), Err)
    }
}
