//! The single-line message layout for small put_signal.
//!
//! A cache line moving between two cores is the unit cost of shared memory (~60-70 ns on the
//! machines we measure). A small message sent as "data, then a separate flag" moves two lines;
//! placing the payload and the signal word in one 64-byte line moves one: the reader who polls
//! the signal pulls in the payload with it. NCCL's LL protocols and Open MPI's shared-memory
//! collectives use the same trick.
//!
//! ```text
//! line (64 bytes, 64-aligned):  [ payload: up to 56 bytes ........ | signal word: u64 ]
//!                                 offset 0                            offset 56
//! ```
//! The writer copies the payload with plain stores, then stores the sequence number SeqCst
//! (ordering the payload before it, and its look for sleepers after it; a locked store on x86,
//! or a plain one where `TCA_SIGNAL_FENCE=asymmetric`: see `transport::shm::wait` for how a
//! sleeping reader is woken either way); the reader Acquire-loads the sequence word and
//! reads the payload from the line it now holds. Slots written by different
//! ranks should be [`SLOT_STRIDE`] apart, so that adjacent-line prefetch does not couple them.
//!
//! Use [`World::put_line`](crate::World::put_line) and
//! [`World::wait_line`](crate::World::wait_line), or lay out `put_signal` the same way.

use crate::error::{Error, ErrorKind, Result};
use crate::fabric::{Handle, Segment, SignalOp, World};

/// Bytes of one line: the cache line size assumed for layout (x86-64 and most AArch64 parts).
pub const LINE: usize = 64;
/// Largest payload that shares a line with its signal word.
pub const PAYLOAD_MAX: usize = LINE - 8;
/// Offset of the signal word within a line.
pub const SIGNAL: usize = LINE - 8;
/// Recommended distance between slots written by different ranks (adjacent-line prefetch
/// pulls pairs of lines).
pub const SLOT_STRIDE: usize = 128;

fn check(line_off: usize, n: usize) -> Result<()> {
    if line_off % LINE != 0 {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("line offset {line_off} is not a multiple of {LINE}"),
        ));
    }
    if n > PAYLOAD_MAX {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("a line carries at most {PAYLOAD_MAX} payload bytes, got {n}"),
        ));
    }
    Ok(())
}

impl World {
    /// Writes `payload` (at most [`PAYLOAD_MAX`] bytes) at the start of the line at `line_off`
    /// in `dst`, then sets the line's signal word to `seq`: one cache line crosses.
    #[inline]
    pub fn put_line(&self, dst: &Handle, line_off: usize, payload: &[u8], seq: u64) -> Result<()> {
        check(line_off, payload.len())?;
        self.put_signal(
            dst,
            line_off,
            payload,
            dst,
            line_off + SIGNAL,
            SignalOp::Set(seq),
        )
    }

    /// Waits until the line at `line_off` in `seg` carries sequence `seq` or later, then copies
    /// its first `out.len()` payload bytes into `out`. Returns the sequence seen.
    #[inline]
    pub fn wait_line(
        &self,
        seg: &Segment,
        line_off: usize,
        seq: u64,
        out: &mut [u8],
    ) -> Result<u64> {
        check(line_off, out.len())?;
        let v = self.wait_until(seg, line_off + SIGNAL, seq)?;
        seg.read(line_off, out)?;
        Ok(v)
    }
}
