//! The doorbell of an active-message endpoint: how a rank with nothing to do sleeps while any
//! rank of its node may send it a packet.
//!
//! A rank waiting in this layer (`Core::wait_until`) does not know who will write next, so it
//! cannot sleep on one ring's word. It sleeps on one word of its own, its *doorbell*, that
//! senders of its node ring (add 1) after a packet while its *asleep* flag is up. That is a
//! store-buffering handshake, and both halves are here, written once over [`Bell`] and
//! [`Flag`]:
//! - the sender ([`ring_if_asleep`]): its packet's sequence word is stored (SeqCst, by the
//!   ring), then it reads the flag (SeqCst) and rings if the flag is up;
//! - the sleeper ([`doze`]): it reads the bell's count, raises its flag (SeqCst), fences, takes
//!   a last look at its rings, and only if that finds nothing sleeps until the count moves.
//!
//! Within a node the sequence word is a SeqCst store by default; where a process opted into
//! plain stores (`TCA_SIGNAL_FENCE=asymmetric`, `World::set_plain_signals`) the sleeper's
//! fence also fences the writers (`World::fence_writers`, a `membarrier`), which orders a
//! sender's store before its flag read as the SeqCst store does, except on a CPU the kernel's
//! `membarrier` misses (`World::set_plain_signals` says when). The model below checks the
//! SeqCst form (loom has no `membarrier`).
//!
//! In the single total order of the SeqCst accesses either the sender's flag read comes after
//! the flag went up (it rings: the count moves past what the sleeper read), or the sleeper's
//! last look comes after the packet was stored (it sees the packet and does not sleep): no
//! packet is left unanswered while its target sleeps. `core` runs these functions on the
//! fabric's memory; the loom model below runs them on model memory, where a lost wake-up is a
//! deadlock loom reports.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Result;

/// The sleeper's side of a doorbell.
pub(super) trait Bell {
    /// The bell's count (Acquire).
    fn rung(&self) -> Result<u64>;
    /// Raises or lowers this rank's asleep flag (SeqCst).
    fn set_asleep(&self, on: bool);
    /// A SeqCst fence.
    fn fence(&self);
    /// Sleeps until the bell's count reaches `count` (the fabric's wait, which may end
    /// earlier when its own polling finds work).
    fn sleep_until(&self, count: u64) -> Result<()>;
}

/// One doze of a rank with nothing to do: flag up, a last `look` at its rings (`true`: work
/// came, no sleep), else a sleep until the bell rings; the flag down again, whatever
/// happened.
pub(super) fn doze(b: &impl Bell, look: impl FnOnce() -> Result<bool>) -> Result<()> {
    let rung = b.rung()?;
    b.set_asleep(true);
    // The flag before the last look at the rings (the look is an Acquire load).
    b.fence();
    let r = look().and_then(|came| {
        if came {
            Ok(())
        } else {
            b.sleep_until(rung + 1)
        }
    });
    b.set_asleep(false);
    r
}

/// A target's asleep flag as its senders read it.
pub(super) trait Flag {
    /// Whether it is up (SeqCst).
    fn up(&self) -> bool;
}

/// The flag in the memory of a rank of this node.
impl Flag for AtomicU64 {
    fn up(&self) -> bool {
        self.load(Ordering::SeqCst) != 0
    }
}

/// The sender's side, after its packet's sequence word was stored (SeqCst): rings the
/// target's bell (`ring`) if its asleep `flag` is up.
pub(super) fn ring_if_asleep(flag: &impl Flag, ring: impl FnOnce() -> Result<()>) -> Result<()> {
    if flag.up() {
        ring()?;
    }
    Ok(())
}

#[cfg(test)]
mod model {
    use super::*;
    use crate::transport::model::{self, ModelCount, ModelWord, explore};

    /// The flag's SeqCst load, with the model's fences.
    impl Flag for ModelWord {
        fn up(&self) -> bool {
            model::load_seqcst(self) != 0
        }
    }

    /// A receiving rank's memory: its bell, its asleep flag, its sleeper count, and the
    /// sequence words of the rings two senders write packets into.
    struct Rank {
        bell: ModelWord,
        flag: ModelWord,
        sleepers: ModelCount,
        rings: [ModelWord; 2],
    }

    impl Bell for Rank {
        fn rung(&self) -> Result<u64> {
            Ok(self.bell.value())
        }

        fn set_asleep(&self, on: bool) {
            model::store_seqcst(&self.flag, u64::from(on));
        }

        fn fence(&self) {
            loom::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        }

        fn sleep_until(&self, count: u64) -> Result<()> {
            model::wait(&self.bell, &self.sleepers, count);
            Ok(())
        }
    }

    /// How the receiver dozes: the real [`doze`], or a broken one for the test that shows the
    /// model can fail.
    type Doze = fn(&Rank, &dyn Fn() -> bool);

    fn real_doze(r: &Rank, look: &dyn Fn() -> bool) {
        doze(r, || Ok(look())).expect("a model doze");
    }

    /// `senders` ranks each store a packet (their ring's sequence word, SeqCst, as the ring
    /// publishes one) and ring the receiver's bell if its flag is up; the receiver looks at
    /// its rings and dozes until every packet has come. A packet stored while the receiver
    /// sleeps with nobody left to ring is a deadlock loom reports. (The memory is leaked, as
    /// the transport's models do, so that a failing model unwinds without dropping loom
    /// objects.)
    fn packets(senders: usize, doze: Doze) {
        let rank: &'static Rank = Box::leak(Box::new(Rank {
            bell: ModelWord::new(0),
            flag: ModelWord::new(0),
            sleepers: ModelCount::default(),
            rings: [ModelWord::new(0), ModelWord::new(0)],
        }));
        let receiver = loom::thread::spawn(move || {
            let came = || rank.rings[..senders].iter().all(|w| w.value() == 1);
            while !came() {
                doze(rank, &came);
            }
            assert_eq!(rank.flag.value(), 0, "the flag is down after a doze");
        });
        let send = move |s: usize| {
            model::store_seqcst(&rank.rings[s], 1);
            ring_if_asleep(&rank.flag, || {
                model::add(&rank.bell, &rank.sleepers, 1);
                Ok(())
            })
            .expect("a model ring");
        };
        let second = (senders > 1).then(|| loom::thread::spawn(move || send(1)));
        send(0);
        if let Some(t) = second {
            t.join().expect("a sender");
        }
        receiver.join().expect("the receiver");
    }

    #[test]
    fn a_packet_is_never_left_while_its_target_sleeps() {
        assert!(explore(3, || packets(1, real_doze)) > 1);
        assert!(explore(2, || packets(2, real_doze)) > 1);
    }

    /// The model can fail: a sleeper that takes its last look before it raises its flag can
    /// miss a packet stored between the two, and sleep with nobody to ring.
    #[test]
    #[should_panic(expected = "deadlock")]
    fn a_flag_raised_after_the_last_look_is_caught() {
        fn late(r: &Rank, look: &dyn Fn() -> bool) {
            let rung = r.bell.value();
            let came = look();
            r.set_asleep(true);
            if !came {
                model::wait(&r.bell, &r.sleepers, rung + 1);
            }
            r.set_asleep(false);
        }
        explore(3, || packets(1, late));
    }
}
