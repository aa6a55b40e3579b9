//! The fabric: segments, handles, put / put_signal / inline and strided puts, chains,
//! signals and waits, quiet, fence and barrier. Everything else in tca is built on this.

mod chain;
pub(crate) mod control;
pub mod line;
pub(crate) mod ring;
mod segment;
mod world;

pub use crate::transport::NetTransfers;
/// How a put leaves this rank across a network, as [`World`] reports it (the seed's data modes).
pub(crate) use crate::transport::Path as NetPath;
/// Bytes of each of the two staging buffers of a staged put across a network.
pub(crate) use crate::transport::STAGE as STAGE_BYTES;
pub use chain::{Chain, ChainBuilder};
pub use control::EXCHANGE_MAX;
pub(crate) use segment::SegmentPool;
pub use segment::{Handle, Segment, SymmetricSegment};
pub(crate) use world::Packet;
pub use world::{AtomicOp, INLINE_MAX, MAX_PARTS, RemoteWord, SignalOp, Strided, World};
