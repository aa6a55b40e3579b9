//! The node proxy's channel: one sealed memfd, made by the launcher and inherited by the
//! proxy and every rank (across hosts: made by the proxy and opened by its ranks through
//! `/proc`), with one slot per rank of the job: the rank's pid (written by the launcher; across
//! hosts only the rank's claim carries it), its work queue (the rank produces, the proxy
//! consumes) and its completion queue (the other way).
//!
//! # Layout of a slot
//! ```text
//! 0     rank pid (u64)                                       writer: the launcher
//! 8     owner: the pid of the process connected as the rank  writer: the rank (once)
//! 16    protocol: [`PROTOCOL`], checked by both sides         writer: the channel's maker
//! 64    waiting: the rank waits for an answer                writer: the rank
//! 128   work queue:  tail +0 (producer), head +64 (consumer), sleeping +128 (consumer)
//! 320   completion queue: the same three words
//! 512   work entries, QUEUE_DEPTH x 64 bytes
//! ...   completion entries, QUEUE_DEPTH x 256 bytes
//! ```
//! Each queue is single-producer single-consumer. Entry n goes to `n mod QUEUE_DEPTH`; the
//! producer writes it, then raises `tail` to n + 1; the consumer reads it, then raises `head`.
//! The producer never waits for the consumer unless `tail - head` is the depth (full).
//!
//! # The doorbell
//! A consumer with nothing to take sleeps on the low half of `tail` (a shared futex):
//! ```text
//! consumer                                 producer
//! sleeping.store(1, SeqCst)                tail.store(n + 1, SeqCst)
//! t = tail.load(SeqCst)                    if sleeping.load(SeqCst) != 0 {
//! if t == head { futex_wait(tail, t) }         futex_wake(tail)
//! sleeping.store(0)                        }
//! ```
//! The four marked operations are in one total order: either the producer sees the flag and
//! wakes, or the consumer sees the new tail and does not sleep (and `futex_wait` refuses to
//! sleep once the low half moved). Sleeps last at most a slice, so a consumer also looks at
//! whether its producer is still alive.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::entry::{CQ_ENTRY, WQ_ENTRY};
use crate::error::{Error, ErrorKind, Result};
use crate::offload::QUEUE_DEPTH;
use crate::transport::{NodeMemory, sleep_on, wake_all};

const RANK_PID: usize = 0;
const OWNER: usize = 8;
const VERSION: usize = 16;
/// The version of the entries' and the slots' layout: a rank and a proxy of different tca
/// builds that disagree on it refuse each other instead of misreading entries.
pub(crate) const PROTOCOL: u64 = 2;
const WAITING: usize = 64;
const WQ_CTL: usize = 128;
const CQ_CTL: usize = 320;
const TAIL: usize = 0;
const HEAD: usize = 64;
const SLEEPING: usize = 128;
const WQ_BASE: usize = 512;
const CQ_BASE: usize = WQ_BASE + QUEUE_DEPTH * WQ_ENTRY;
/// Bytes of one rank's slot.
const SLOT: usize = CQ_BASE + QUEUE_DEPTH * CQ_ENTRY;

/// The channel of a node's ranks and their proxy.
#[derive(Debug)]
pub(crate) struct Channel {
    map: NodeMemory,
    /// Ranks it has a slot for.
    ranks: u32,
}

/// Which of a rank's queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queue {
    /// The rank posts, the proxy takes.
    Work,
    /// The proxy answers, the rank takes.
    Completion,
}

impl Channel {
    /// A new channel for `ranks` ranks, and its descriptor (for the launcher's children).
    pub(crate) fn create(ranks: u32) -> Result<(OwnedFd, Self)> {
        let (fd, map) = NodeMemory::create("proxy-channel", Self::bytes(ranks)?)?;
        let c = Self { map, ranks };
        for r in 0..ranks {
            c.word(r, VERSION)?.store(PROTOCOL, Ordering::Release);
        }
        Ok((fd, c))
    }

    /// The channel for `ranks` ranks made by the launcher `pid` as its descriptor `fd`.
    pub(crate) fn open(pid: u32, fd: u32, ranks: u32) -> Result<Self> {
        let map = NodeMemory::open(pid, fd, Self::bytes(ranks)?).map_err(|e| {
            Error::new(
                ErrorKind::Bootstrap,
                format!("cannot open the node proxy's channel: {}", e.message()),
            )
        })?;
        let c = Self { map, ranks };
        for r in 0..ranks {
            let v = c.word(r, VERSION)?.load(Ordering::Acquire);
            if v != PROTOCOL {
                return Err(Error::new(
                    ErrorKind::Bootstrap,
                    format!(
                        "the node proxy's channel speaks protocol {v}, this tca build {PROTOCOL}: \
                         run the ranks and `tca node-proxy` from the same tca version"
                    ),
                ));
            }
        }
        Ok(c)
    }

    fn bytes(ranks: u32) -> Result<usize> {
        (ranks as usize)
            .checked_mul(SLOT)
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("no node proxy channel for {ranks} ranks"),
                )
            })
    }

    fn word(&self, rank: u32, off: usize) -> Result<&AtomicU64> {
        if rank >= self.ranks {
            return Err(Error::new(
                ErrorKind::InvalidRank,
                format!(
                    "rank {rank} has no slot in a channel of {} ranks",
                    self.ranks
                ),
            ));
        }
        self.map
            .word(rank as usize * SLOT + off)
            .ok_or_else(|| Error::new(ErrorKind::Transport, "proxy channel word out of range"))
    }

    /// Records rank `rank`'s pid (the launcher, once it started the rank).
    pub(crate) fn set_rank_pid(&self, rank: u32, pid: u32) -> Result<()> {
        self.word(rank, RANK_PID)?
            .store(u64::from(pid), Ordering::Release);
        Ok(())
    }

    /// Rank `rank`'s pid, 0 until the launcher has written it.
    pub(crate) fn rank_pid(&self, rank: u32) -> Result<u32> {
        Ok(u32::try_from(self.word(rank, RANK_PID)?.load(Ordering::Acquire)).unwrap_or(0))
    }

    /// The process that claimed rank `rank`'s slot, 0 before it connected.
    pub(crate) fn owner(&self, rank: u32) -> Result<u32> {
        Ok(u32::try_from(self.word(rank, OWNER)?.load(Ordering::Acquire)).unwrap_or(0))
    }

    /// Claims rank `rank`'s slot for process `pid`: one connection per rank (a second would
    /// be a second producer on a single-producer queue).
    pub(crate) fn claim(&self, rank: u32, pid: u32) -> Result<()> {
        match self.word(rank, OWNER)?.compare_exchange(
            0,
            u64::from(pid),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Ok(()),
            Err(owner) => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "rank {rank} is connected to its node proxy already (by process {owner}): \
                     one Proxy::connect per rank, for the rank's lifetime"
                ),
            )),
        }
    }

    /// Says whether rank `rank` waits for an answer (the proxy's stall clock runs only then).
    pub(crate) fn set_waiting(&self, rank: u32, on: bool) -> Result<()> {
        self.word(rank, WAITING)?
            .store(u64::from(on), Ordering::Release);
        Ok(())
    }

    /// Whether rank `rank` waits for an answer.
    pub(crate) fn waiting(&self, rank: u32) -> bool {
        self.word(rank, WAITING)
            .is_ok_and(|w| w.load(Ordering::Acquire) != 0)
    }

    /// One of rank `rank`'s queues.
    pub(crate) fn queue(&self, rank: u32, q: Queue) -> Result<Ring<'_>> {
        let (ctl, base, entry) = match q {
            Queue::Work => (WQ_CTL, WQ_BASE, WQ_ENTRY),
            Queue::Completion => (CQ_CTL, CQ_BASE, CQ_ENTRY),
        };
        Ok(Ring {
            map: &self.map,
            tail: self.word(rank, ctl + TAIL)?,
            head: self.word(rank, ctl + HEAD)?,
            sleeping: self.word(rank, ctl + SLEEPING)?,
            base: rank as usize * SLOT + base,
            entry,
        })
    }
}

/// One queue of a slot (see the module docs).
#[derive(Debug)]
pub(crate) struct Ring<'a> {
    map: &'a NodeMemory,
    tail: &'a AtomicU64,
    head: &'a AtomicU64,
    sleeping: &'a AtomicU64,
    base: usize,
    entry: usize,
}

impl Ring<'_> {
    fn at(&self, n: u64) -> usize {
        // Below QUEUE_DEPTH: it fits.
        self.base + usize::try_from(n % QUEUE_DEPTH as u64).unwrap_or(0) * self.entry
    }

    /// The producer's side: appends `e` (one entry's bytes) unless the queue is full.
    pub(crate) fn push(&self, e: &[u8]) -> Result<bool> {
        let t = self.tail.load(Ordering::Relaxed);
        if t.wrapping_sub(self.head.load(Ordering::Acquire)) >= QUEUE_DEPTH as u64 {
            return Ok(false);
        }
        self.map.write(self.at(t), &e[..self.entry.min(e.len())])?;
        self.tail.store(t + 1, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) != 0 {
            wake_all(self.tail);
        }
        Ok(true)
    }

    /// The consumer's side: takes the oldest entry into `e`, if there is one.
    pub(crate) fn pop(&self, e: &mut [u8]) -> Result<bool> {
        let h = self.head.load(Ordering::Relaxed);
        if h == self.tail.load(Ordering::Acquire) {
            return Ok(false);
        }
        let n = self.entry.min(e.len());
        self.map.read(self.at(h), &mut e[..n])?;
        self.head.store(h + 1, Ordering::Release);
        Ok(true)
    }

    /// The consumer's side: sleeps until an entry may have come, at most `slice`.
    pub(crate) fn sleep(&self, slice: Duration) {
        self.sleeping.store(1, Ordering::SeqCst);
        let t = self.tail.load(Ordering::SeqCst);
        if t == self.head.load(Ordering::Relaxed) {
            // A sleep on the low half that refuses to start once it moved (the fabric's).
            sleep_on(self.tail, crate::cast::low_u32(t), slice);
        }
        self.sleeping.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_fills_drains_and_wraps() {
        let (_fd, ch) = Channel::create(2).unwrap();
        let wq = ch.queue(1, Queue::Work).unwrap();
        let mut e = [0u8; WQ_ENTRY];
        for round in 0..3u8 {
            for i in 0..QUEUE_DEPTH {
                e[0] = i.to_le_bytes()[0] ^ round;
                assert!(wq.push(&e).unwrap());
            }
            assert!(!wq.push(&e).unwrap(), "a full queue refuses");
            for i in 0..QUEUE_DEPTH {
                assert!(wq.pop(&mut e).unwrap());
                assert_eq!(e[0], i.to_le_bytes()[0] ^ round);
            }
            assert!(!wq.pop(&mut e).unwrap());
        }
        // Rank 0's queues are apart from rank 1's.
        assert!(!ch.queue(0, Queue::Work).unwrap().pop(&mut e).unwrap());
        assert!(ch.queue(2, Queue::Work).is_err());
    }

    #[test]
    fn a_slot_is_claimed_once() {
        let (_fd, ch) = Channel::create(2).unwrap();
        ch.claim(0, 10).unwrap();
        let e = ch.claim(0, 11).unwrap_err();
        assert!(e.message().contains("process 10"), "{e}");
        ch.claim(1, 11).unwrap();
        assert!(!ch.waiting(1));
        ch.set_waiting(1, true).unwrap();
        assert!(ch.waiting(1) && !ch.waiting(0));
    }

    #[test]
    fn a_sleeping_consumer_is_woken_by_a_push() {
        let (_fd, ch) = Channel::create(1).unwrap();
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                let cq = ch.queue(0, Queue::Completion).unwrap();
                let mut e = [0u8; CQ_ENTRY];
                let start = std::time::Instant::now();
                while !cq.pop(&mut e).unwrap() {
                    // Long slices: only a wake-up ends them early.
                    cq.sleep(Duration::from_secs(30));
                    assert!(start.elapsed() < Duration::from_secs(25), "wake-up lost");
                }
                e[0]
            });
            std::thread::sleep(Duration::from_millis(20));
            let cq = ch.queue(0, Queue::Completion).unwrap();
            assert!(cq.push(&[7u8; CQ_ENTRY]).unwrap());
            assert_eq!(t.join().unwrap(), 7);
        });
    }
}
