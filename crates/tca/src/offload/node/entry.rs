//! The node proxy's queue entries: what a rank posts (an [`Entry`], 64 bytes) and what the
//! proxy answers (an [`Answer`], 256 bytes), as plain data in shared memory. Buffers travel as
//! places in the rank's arenas ([`Place`]); a reduction as the code of a built-in operation
//! (a user's function cannot cross to another process).

use bytemuck::{Pod, Zeroable};

use super::super::serve::Leave;
use crate::coll::{Element, Op};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::{Handle, SignalOp};
use crate::p2p::{Source, Status, Tag};

/// Bytes of a work-queue entry.
pub(crate) const WQ_ENTRY: usize = std::mem::size_of::<Entry>();
/// Bytes of a completion-queue entry.
pub(crate) const CQ_ENTRY: usize = std::mem::size_of::<Answer>();

/// What an entry asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// Start an operation ([`What`]).
    Start = 1,
    /// Cancel operation `id` if it is a send or receive still in flight.
    Cancel = 2,
    /// Leave the job (`what`: 0 finalize, 1 drop, 2 fail); answered once the rank's world
    /// has left.
    Stop = 3,
    /// The command channel: a new arena of `send.len` bytes (`what` 1: a window, which
    /// peers put into and which is never lent to an operation), answered with its number (in
    /// `source`), the proxy's descriptor of it (in `tag`) and its handle (the payload).
    Alloc = 4,
    /// The command channel: arena `send.arena()` is no longer the rank's.
    Free = 5,
    /// The command channel: the control request at `send` (text), its reply into `recv`,
    /// its length in the answer's `bytes`.
    Control = 6,
    /// The command channel: split communicator `comm` (`peer`: the color, [`ANY`] for none;
    /// `arg`: the key), answered as `serve::Work::Split` says.
    Split = 7,
    /// The command channel: communicator `comm` is no longer the rank's.
    FreeComm = 8,
    /// The command channel: build a chain of the `peer` [`Descriptor`]s at `send`, answered
    /// with its number in `source`.
    Chain = 9,
    /// The command channel: chain `peer` is no longer the rank's.
    FreeChain = 10,
}

/// The operation an entry of kind [`Kind::Start`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum What {
    Barrier = 1,
    Broadcast = 2,
    Scatter = 3,
    Gather = 4,
    Reduce = 5,
    Allgather = 6,
    Allreduce = 7,
    AllreduceInPlace = 8,
    ReduceScatter = 9,
    Alltoall = 10,
    Send = 11,
    Recv = 12,
    /// Start chain `peer`, its signal's operation replaced where `op` says so
    /// ([`signal_code`]) by one with the value `arg`.
    StartChain = 13,
    /// An allgatherv in place into `recv`: the counts at `send`, the displacements (as many,
    /// `u64` each) at the place whose packed arena and offset are `arg`.
    AllgathervInPlace = 14,
}

impl What {
    pub(crate) fn from_u8(v: u8) -> Option<Self> {
        use What::*;
        [
            Barrier,
            Broadcast,
            Scatter,
            Gather,
            Reduce,
            Allgather,
            Allreduce,
            AllreduceInPlace,
            ReduceScatter,
            Alltoall,
            Send,
            Recv,
            StartChain,
            AllgathervInPlace,
        ]
        .into_iter()
        .find(|w| *w as u8 == v)
    }
}

/// No arena: an empty buffer. (Arena numbers are below it.)
pub(crate) const NO_ARENA: u32 = 0xffff;

/// Bits of a place's offset; the arena's number is above them.
const OFF_BITS: u32 = 48;

/// Where a buffer lies: `len` bytes at an offset in an arena of the posting rank (the arena's
/// number in the top 16 bits of `at`, the offset in the low 48: an entry stays one line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct Place {
    at: u64,
    pub len: u64,
}

impl Place {
    /// An empty buffer.
    pub(crate) const EMPTY: Place = Place {
        at: (NO_ARENA as u64) << OFF_BITS,
        len: 0,
    };

    /// `len` bytes at `off` in arena `arena`.
    pub(crate) fn new(arena: u32, off: u64, len: u64) -> Result<Self> {
        if arena >= NO_ARENA || off >= 1 << OFF_BITS {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("no place for {len} bytes at {off} of arena {arena}"),
            ));
        }
        Ok(Self {
            at: (u64::from(arena) << OFF_BITS) | off,
            len,
        })
    }

    /// The arena's number ([`NO_ARENA`] for none).
    pub(crate) fn arena(self) -> u32 {
        // 16 bits.
        u32::try_from(self.at >> OFF_BITS).unwrap_or(NO_ARENA)
    }

    /// The offset in the arena.
    pub(crate) fn off(self) -> u64 {
        self.at & ((1 << OFF_BITS) - 1)
    }

    /// Its arena and offset as one word (an entry's `arg`).
    pub(crate) fn packed(self) -> u64 {
        self.at
    }

    /// `len` bytes at the arena and offset of [`Place::packed`].
    pub(crate) fn unpacked(at: u64, len: u64) -> Self {
        Self { at, len }
    }
}

/// A work-queue entry.
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct Entry {
    pub id: u64,
    pub kind: u8,
    pub what: u8,
    /// [`Element::CODE`] of the buffers' type.
    pub dtype: u8,
    /// [`op_code`].
    pub op: u8,
    /// A collective's root, a send's destination, a receive's source ([`ANY`]); a split's
    /// color ([`ANY`]: none); a chain's number; a chain's step count when it is built.
    pub peer: u32,
    /// A send's or receive's tag.
    pub tag: i32,
    /// A receive of any tag (1) or of `tag` (0).
    pub any_tag: u16,
    /// The communicator (`serve::CommId`): 0 the world's.
    pub comm: u16,
    pub send: Place,
    pub recv: Place,
    /// A split's key (its bits), a chain start's signal value.
    pub arg: u64,
}

/// A receive from any source.
pub(crate) const ANY: u32 = u32::MAX;

impl Entry {
    /// An entry of `kind` with nothing else set.
    pub(crate) fn new(kind: Kind) -> Self {
        Self {
            id: 0,
            kind: kind as u8,
            what: 0,
            dtype: 0,
            op: 0,
            peer: 0,
            tag: 0,
            any_tag: 0,
            comm: 0,
            send: Place::EMPTY,
            recv: Place::EMPTY,
            arg: 0,
        }
    }

    /// The start of `what` on buffers of `T`.
    pub(crate) fn start<T: Element>(what: What) -> Self {
        Self {
            what: what as u8,
            dtype: T::CODE,
            ..Self::new(Kind::Start)
        }
    }

    pub(crate) fn kind(&self) -> Option<Kind> {
        use Kind::*;
        [
            Start, Cancel, Stop, Alloc, Free, Control, Split, FreeComm, Chain, FreeChain,
        ]
        .into_iter()
        .find(|k| *k as u8 == self.kind)
    }

    pub(crate) fn source(&self) -> Source {
        if self.peer == ANY {
            Source::Any
        } else {
            Source::Rank(self.peer)
        }
    }

    pub(crate) fn tag(&self) -> Tag {
        if self.any_tag != 0 {
            Tag::Any
        } else {
            Tag::Is(self.tag)
        }
    }
}

/// How a stop asks the rank's world to leave, as an entry's `what`.
pub(crate) fn leave_code(how: Leave) -> u8 {
    match how {
        Leave::Finalize => 0,
        Leave::Drop => 1,
        Leave::Fail => 2,
    }
}

/// [`leave_code`] read back (an unknown code fails the rank: the safe side).
pub(crate) fn leave_of(code: u8) -> Leave {
    match code {
        0 => Leave::Finalize,
        1 => Leave::Drop,
        _ => Leave::Fail,
    }
}

/// The id of the last answer of a rank's serving thread, sent when it ends whatever the
/// reason: the rank's pending operations fail with its result.
pub(crate) const END: u64 = u64::MAX;

/// The code of a built-in reduction; a user's function has none.
pub(crate) fn op_code<T: Element>(op: &Op<T>) -> Result<u8> {
    Ok(match op {
        Op::Sum => 0,
        Op::Prod => 1,
        Op::Min => 2,
        Op::Max => 3,
        Op::BitAnd => 4,
        Op::BitOr => 5,
        Op::BitXor => 6,
        Op::Custom(_) => {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a reduction by the program's own function cannot be sent to the node proxy \
                 (another process): use Op::Sum, Prod, Min, Max or a bitwise operation, or a \
                 progress thread (TCA_PROGRESS=thread)",
            ));
        }
    })
}

/// The built-in reductions of each element type, by [`op_code`], for the proxy (which holds
/// them for as long as any operation may use them).
pub(crate) trait Builtin: Element {
    fn builtin(code: u8) -> Result<&'static Op<Self>>;
}

macro_rules! builtin {
    ($($t:ty),*) => {$(
        impl Builtin for $t {
            fn builtin(code: u8) -> Result<&'static Op<$t>> {
                static OPS: [Op<$t>; 7] = [
                    Op::Sum, Op::Prod, Op::Min, Op::Max, Op::BitAnd, Op::BitOr, Op::BitXor,
                ];
                OPS.get(usize::from(code)).ok_or_else(|| {
                    Error::new(ErrorKind::InvalidArgument, format!("unknown reduction code {code}"))
                })
            }
        }
    )*};
}
builtin!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// A signal operation's code in an entry or a descriptor: 0 none (or the chain's own), 1
/// set, 2 add; its value beside it.
pub(crate) fn signal_code(op: Option<SignalOp>) -> (u8, u64) {
    match op {
        None => (0, 0),
        Some(SignalOp::Set(v)) => (1, v),
        Some(SignalOp::Add(v)) => (2, v),
    }
}

/// [`signal_code`] read back.
pub(crate) fn signal_of(code: u8, value: u64) -> Result<Option<SignalOp>> {
    match code {
        0 => Ok(None),
        1 => Ok(Some(SignalOp::Set(value))),
        2 => Ok(Some(SignalOp::Add(value))),
        c => Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("unknown signal operation code {c}"),
        )),
    }
}

/// One step of a chain as the rank describes it to the node proxy (the seed's DMA
/// descriptor, written into an arena): a put of `len` bytes at `src_off` of the rank's
/// arena `src_arena` to `off` of the segment `handle` names, or (`signal` set) the chain's
/// final signal on the word at `off` of `handle`.
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct Descriptor {
    pub handle: [u8; Handle::BYTES],
    /// The source window's handle (checked against the arena's).
    pub src: [u8; Handle::BYTES],
    pub src_off: u64,
    pub len: u64,
    pub off: u64,
    pub value: u64,
    pub src_arena: u32,
    /// 0: a put; otherwise the signal's [`signal_code`].
    pub signal: u8,
    pub _pad: [u8; 3],
}

/// Bytes of an answer's message (a longer one is cut at a character boundary).
const MESSAGE: usize = 192;

/// A completion-queue entry. (An allocation's answer carries the arena's number in `source`,
/// the proxy's descriptor of it in `tag` and its handle as the payload, in the message's
/// place: [`Answer::with_payload`].)
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct Answer {
    pub id: u64,
    /// 0: done; otherwise the error's [`ErrorKind`] code.
    pub error: u32,
    /// The rank an error names, or [`ANY`].
    pub rank: u32,
    pub source: u32,
    pub tag: i32,
    pub bytes: u64,
    /// Bytes of the message.
    pub len: u32,
    pub _pad: u32,
    pub _pad2: [u64; 3],
    message: [u64; MESSAGE / 8],
}

impl Answer {
    /// The answer to `id`: its result.
    pub(crate) fn of(id: u64, result: &Result<Status>) -> Self {
        let mut a = Self::zeroed();
        a.id = id;
        a.rank = ANY;
        match result {
            Ok(s) => {
                a.source = s.source;
                a.tag = s.tag;
                a.bytes = s.bytes as u64;
            }
            Err(e) => {
                a.error = e.kind().code();
                a.rank = e.rank().unwrap_or(ANY);
                let m = e.message();
                let mut cut = m.len().min(MESSAGE);
                while !m.is_char_boundary(cut) {
                    cut -= 1;
                }
                bytemuck::bytes_of_mut(&mut a.message)[..cut].copy_from_slice(&m.as_bytes()[..cut]);
                a.len = u32::try_from(cut).unwrap_or(0);
            }
        }
        a
    }

    /// An answer that succeeded carries `payload` (at most a message's bytes) in its
    /// message (an allocation's handle).
    pub(crate) fn with_payload(mut self, payload: &[u8]) -> Self {
        if self.error == 0 && payload.len() <= MESSAGE {
            bytemuck::bytes_of_mut(&mut self.message)[..payload.len()].copy_from_slice(payload);
            self.len = u32::try_from(payload.len()).unwrap_or(0);
        }
        self
    }

    /// What [`Answer::with_payload`] put in a successful answer.
    pub(crate) fn payload(&self) -> &[u8] {
        if self.error != 0 {
            return &[];
        }
        &bytemuck::bytes_of(&self.message)[..(self.len as usize).min(MESSAGE)]
    }

    /// The result it carries.
    pub(crate) fn result(&self) -> Result<Status> {
        if self.error == 0 {
            return Ok(Status {
                source: self.source,
                tag: self.tag,
                bytes: usize::try_from(self.bytes).unwrap_or(usize::MAX),
            });
        }
        let kind = ErrorKind::from_code(self.error);
        let len = (self.len as usize).min(MESSAGE);
        let msg = String::from_utf8_lossy(&bytemuck::bytes_of(&self.message)[..len]).into_owned();
        Err(match self.rank {
            ANY => Error::new(kind, msg),
            r => Error::peer(kind, r, msg),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_fixed() {
        assert_eq!(WQ_ENTRY, 64);
        assert_eq!(CQ_ENTRY, 256);
    }

    #[test]
    fn places_pack_arena_and_offset() {
        let p = Place::new(7, (1 << 40) + 3, 99).unwrap();
        assert_eq!((p.arena(), p.off(), p.len), (7, (1 << 40) + 3, 99));
        assert_eq!(Place::EMPTY.arena(), NO_ARENA);
        assert!(Place::new(NO_ARENA, 0, 1).is_err());
        assert!(Place::new(0, 1 << 48, 1).is_err());
    }

    #[test]
    fn answers_carry_status_and_errors() {
        let s = Status {
            source: 3,
            tag: -7,
            bytes: 4096,
        };
        assert_eq!(Answer::of(9, &Ok(s)).result().unwrap(), s);
        let long = "é".repeat(200);
        let e = Error::peer(ErrorKind::PeerDied, 5, long.clone());
        let back = Answer::of(1, &Err(e)).result().unwrap_err();
        assert_eq!(back.kind(), ErrorKind::PeerDied);
        assert_eq!(back.rank(), Some(5));
        assert!(long.starts_with(back.message()) && back.message().len() >= MESSAGE - 1);
        let e = Error::new(ErrorKind::Timeout, "late");
        let back = Answer::of(1, &Err(e)).result().unwrap_err();
        assert_eq!(
            (back.kind(), back.rank(), back.message()),
            (ErrorKind::Timeout, None, "late")
        );
    }

    #[test]
    fn successful_answers_carry_a_payload_and_signals_round_trip() {
        let a = Answer::of(3, &Ok(Status::send())).with_payload(&[7; 32]);
        assert_eq!(a.payload(), &[7; 32]);
        assert!(a.result().is_ok());
        let e = Answer::of(3, &Err(Error::new(ErrorKind::Timeout, "late"))).with_payload(&[7; 8]);
        assert!(e.payload().is_empty() && e.result().is_err());
        assert_eq!(std::mem::size_of::<Descriptor>(), 104);
        for op in [None, Some(SignalOp::Set(9)), Some(SignalOp::Add(u64::MAX))] {
            let (c, v) = signal_code(op);
            assert_eq!(signal_of(c, v).unwrap(), op);
        }
        assert!(signal_of(3, 0).is_err());
    }

    #[test]
    fn only_builtin_reductions_cross() {
        assert_eq!(op_code(&Op::<f64>::Max).unwrap(), 3);
        assert!(op_code(&Op::<f64>::custom(|a, b| a + b)).is_err());
        assert!(matches!(f64::builtin(3).unwrap(), Op::Max));
        assert!(u8::builtin(7).is_err());
    }
}
