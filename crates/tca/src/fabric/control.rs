//! Each rank's control segment, and the two collective primitives the fabric itself needs:
//! the barrier and a small all-to-all byte exchange (used to swap handles at setup). Both are
//! written with the fabric's own signals and puts, so they run over any transport.
//!
//! # Layout of the control segment's data (offsets in bytes)
//! ```text
//! 0                 sleeper count (u32)     writers: waiters on any word in this rank's memory
//! 128               exchange sequence (u64): records my left neighbour has put in my inbox
//!                                           writer: rank (me - 1) mod n
//! 256               exchange credit (u64): records my right neighbour has consumed
//!                                           writer: rank (me + 1) mod n
//! 384 + 128 k       barrier word of round k (u64), k < 32   writer: rank (me - 2^k) mod n
//! 4480              exchange inbox, two slots of 2048 bytes alternating by record number:
//!                   [len: u64][bytes...]    writer: rank (me - 1) mod n
//! ```
//! Each word written by a different rank has its own 128-byte block. Memory per rank: one
//! control segment of [`CTRL_BYTES`] data bytes + a 4 KiB header, whatever the rank count.
//!
//! # Barrier: dissemination
//! In round k (of ceil(log2 n)) rank r sets word k of rank (r + 2^k) mod n to the barrier's
//! epoch and waits until its own word k reaches it. Epochs only grow, so nothing is reset and a
//! fast rank that already entered the next barrier cannot confuse a slow one.
//!
//! # Exchange: a ring
//! In step s (1 <= s < n) of a call every rank passes the record it got in step s - 1 (its own
//! in step 1) to its right neighbour and takes the record of rank (me - s) mod n from its left
//! one: n - 1 steps, one message each, no reads of remote memory (networks cannot read; a
//! setup-time exchange need not be fast). Records are numbered across calls; record m goes
//! in inbox slot m mod 2 and is written only once the neighbour has acknowledged record
//! m - 2 in the credit word, so two slots suffice and back-to-back calls cannot overwrite an
//! unread record.
//! (The collectives' channels are the general ring with credits; they cannot carry this one:
//! their handles are exchanged with it.)

use std::sync::atomic::Ordering;

use crate::error::{Error, ErrorKind, Result};

use super::world::{SignalOp, World};

pub(crate) const SLEEPERS: usize = 0;
const XCHG_SEQ: usize = 128;
const XCHG_CREDIT: usize = 256;
const BARRIER: usize = 384;
/// Rounds a dissemination barrier can have: enough for 2^32 ranks.
const MAX_ROUNDS: usize = 32;
const XCHG_BUF: usize = BARRIER + 128 * MAX_ROUNDS;
const XCHG_SLOT: usize = 2048;
/// Largest byte string one rank can contribute to an exchange.
pub const EXCHANGE_MAX: usize = XCHG_SLOT - 8;
/// Data bytes of a control segment.
pub const CTRL_BYTES: usize = XCHG_BUF + 2 * XCHG_SLOT;

impl World {
    /// Blocks until every rank of the world has entered the barrier, each having completed
    /// its earlier puts and signals first ([`World::quiet`]): after the barrier every rank
    /// sees every put made before it, as after OpenSHMEM's `shmem_barrier_all`. (Across a
    /// network a put is complete only at `quiet`, and a barrier's signals need not pass
    /// through the put's target: rank 0 could leave before rank 2's put to it had landed.)
    /// On shared memory the quiet is a fence; across a network it asks only the ranks this
    /// rank put to since its last quiet.
    pub fn barrier(&self) -> Result<()> {
        self.quiet()?;
        let n = self.size();
        if n == 1 {
            return Ok(());
        }
        let epoch = self.barrier_epoch.get() + 1;
        self.barrier_epoch.set(epoch);
        let me = self.rank();
        let own = self.own_ctrl.clone();
        let mut k = 0;
        while (1u64 << k) < u64::from(n) {
            // A remainder of `n`, a u32.
            #[allow(clippy::cast_possible_truncation)]
            let to = ((u64::from(me) + (1u64 << k)) % u64::from(n)) as u32;
            let off = BARRIER + 128 * k;
            self.signal(&self.ctrl[to as usize], off, SignalOp::Set(epoch))?;
            #[allow(clippy::cast_possible_truncation)] // a remainder of `n`, as `to`
            let from =
                ((u64::from(me) + u64::from(n) - (1u64 << k) % u64::from(n)) % u64::from(n)) as u32;
            self.wait_word(own.word(off)?, epoch, None, Some(from))
                .map_err(|e| e.waiting_for(from, format_args!("rank {from} in a barrier")))?;
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
        let n = self.size();
        let me = self.rank();
        let mut all = vec![Vec::new(); n as usize];
        all[me as usize] = mine.to_vec();
        if n == 1 {
            return Ok(all);
        }
        let epoch = self.xchg_epoch.get() + 1;
        self.xchg_epoch.set(epoch);
        let (left, right) = ((me + n - 1) % n, (me + 1) % n);
        let own = self.own_ctrl.clone();
        let steps = u64::from(n - 1);
        let mut out = Vec::with_capacity(XCHG_SLOT);
        for s in 1..=n - 1 {
            let m = (epoch - 1) * steps + u64::from(s);
            // Pass on the record of rank (me - s + 1), which we hold from the previous step.
            let from = ((me + n + 1 - s) % n) as usize;
            if m > 2 {
                self.wait_word(own.word(XCHG_CREDIT)?, m - 2, None, Some(right))
                    .map_err(|e| {
                        e.waiting_for(right, format_args!("rank {right} in an exchange"))
                    })?;
            }
            let slot = XCHG_BUF + XCHG_SLOT * (m % 2) as usize;
            out.clear();
            out.extend_from_slice(&(all[from].len() as u64).to_le_bytes());
            out.extend_from_slice(&all[from]);
            let dst = &self.ctrl[right as usize];
            self.put_signal(dst, slot, &out, dst, XCHG_SEQ, SignalOp::Set(m))?;
            // Take the record of rank (me - s) from the left neighbour.
            self.wait_word(own.word(XCHG_SEQ)?, m, None, Some(left))
                .map_err(|e| e.waiting_for(left, format_args!("rank {left} in an exchange")))?;
            let mut len = [0u8; 8];
            own.map.read(own.range(slot, 8)?, &mut len)?;
            let len = usize::try_from(u64::from_le_bytes(len)).unwrap_or(usize::MAX);
            let src = (me + n - s) % n;
            if len > EXCHANGE_MAX {
                return Err(Error::peer(
                    ErrorKind::Transport,
                    left,
                    format!(
                        "rank {left} passed a corrupt exchange record ({len} bytes) of rank {src}"
                    ),
                ));
            }
            let mut v = vec![0u8; len];
            own.map.read(own.range(slot + 8, len)?, &mut v)?;
            all[src as usize] = v;
            std::sync::atomic::fence(Ordering::Acquire);
            self.signal(&self.ctrl[left as usize], XCHG_CREDIT, SignalOp::Set(m))?;
        }
        Ok(all)
    }
}
