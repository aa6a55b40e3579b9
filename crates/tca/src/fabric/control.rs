//! Each rank's control segment, and the two collective primitives the fabric itself needs:
//! the barrier and a small all-to-all byte exchange (used to swap handles at setup).
//!
//! # Layout of the control segment's data (offsets in bytes)
//! ```text
//! 0                 sleeper count (u32)     writers: waiters on any word in this rank's memory
//! 128               exchange sequence (u64) writer: owner; readers: every peer
//! 256 + 128 k       barrier word of round k (u64), k < 32   writer: rank (me - 2^k) mod n
//! 4352              exchange buffers, two of 2048 bytes alternating by call parity:
//!                   [len: u64][bytes...]      writer: owner; readers: every peer
//! ```
//! Each word written by a different rank has its own 128-byte block. Memory per rank: one
//! control segment of [`CTRL_BYTES`] data bytes + a 4 KiB header, mapped by every rank of
//! the node.
//!
//! # Barrier: dissemination
//! In round k (of ceil(log2 n)) rank r sets word k of rank (r + 2^k) mod n to the barrier's
//! epoch and waits until its own word k reaches it. Epochs only grow, so nothing is reset and a
//! fast rank that already entered the next barrier cannot confuse a slow one.
//!
//! # Exchange: publish, then read everyone
//! Call e writes this rank's bytes into its own buffer e mod 2, publishes e in its exchange
//! sequence, then waits for each peer's sequence to reach e and copies the peer's buffer. A
//! rank cannot write buffer e mod 2 again (call e + 2) before every peer has published e + 1,
//! which each does only after it finished reading call e: two buffers suffice.

use std::sync::atomic::Ordering;

use crate::error::{Error, ErrorKind, Result};

use super::world::World;

pub(crate) const SLEEPERS: usize = 0;
const XCHG_SEQ: usize = 128;
const BARRIER: usize = 256;
/// Rounds a dissemination barrier can have: enough for 2^32 ranks.
const MAX_ROUNDS: usize = 32;
const XCHG_BUF: usize = BARRIER + 128 * MAX_ROUNDS;
const XCHG_SLOT: usize = 2048;
/// Largest byte string one rank can contribute to an exchange.
pub const EXCHANGE_MAX: usize = XCHG_SLOT - 8;
/// Data bytes of a control segment.
pub const CTRL_BYTES: usize = XCHG_BUF + 2 * XCHG_SLOT;

impl World {
    /// Blocks until every rank of the world has entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        let n = self.size();
        if n == 1 {
            return Ok(());
        }
        let epoch = self.barrier_epoch.get() + 1;
        self.barrier_epoch.set(epoch);
        let me = self.rank();
        let mut k = 0;
        while (1u64 << k) < u64::from(n) {
            let to = ((u64::from(me) + (1u64 << k)) % u64::from(n)) as u32;
            let off = BARRIER + 128 * k;
            let word = self.ctrl_of(to).word(off)?;
            word.store(epoch, Ordering::SeqCst);
            crate::transport::shm::wait::notify(word, self.sleepers_of(to));
            self.wait_word(self.ctrl_of(me).word(off)?, me, epoch, None)?;
            k += 1;
        }
        Ok(())
    }

    /// Every rank contributes up to [`EXCHANGE_MAX`] bytes; every rank gets all contributions,
    /// indexed by rank. Collective; meant for setup (handles), not for data.
    pub fn exchange(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        if mine.len() > EXCHANGE_MAX {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "exchange contribution of {} bytes exceeds {EXCHANGE_MAX}",
                    mine.len()
                ),
            ));
        }
        let epoch = self.xchg_epoch.get() + 1;
        self.xchg_epoch.set(epoch);
        let buf = XCHG_BUF + XCHG_SLOT * (epoch % 2) as usize;
        let me = self.rank();
        let ctrl = self.ctrl_of(me);
        ctrl.map
            .write(ctrl.range(buf, 8)?, &(mine.len() as u64).to_le_bytes());
        ctrl.map.write(ctrl.range(buf + 8, mine.len())?, mine);
        let seq = ctrl.word(XCHG_SEQ)?;
        seq.store(epoch, Ordering::SeqCst);
        crate::transport::shm::wait::notify(seq, self.sleepers_of(me));
        let mut all = Vec::with_capacity(self.size() as usize);
        for r in 0..self.size() {
            let c = self.ctrl_of(r);
            self.wait_word(c.word(XCHG_SEQ)?, r, epoch, None)?;
            let mut len = [0u8; 8];
            c.map.read(c.range(buf, 8)?, &mut len);
            let len = usize::try_from(u64::from_le_bytes(len)).unwrap_or(usize::MAX);
            if len > EXCHANGE_MAX {
                return Err(Error::peer(
                    ErrorKind::Transport,
                    r,
                    format!("rank {r} published a corrupt exchange record ({len} bytes)"),
                ));
            }
            let mut v = vec![0u8; len];
            c.map.read(c.range(buf + 8, len)?, &mut v);
            all.push(v);
        }
        Ok(all)
    }
}
