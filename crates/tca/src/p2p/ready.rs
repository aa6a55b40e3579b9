//! The ready word of a bound persistent channel (see `engine`'s layout): the one word two
//! ranks race on. It lives in the sender's segment; the receiver writes `2k` there when its
//! buffer is free for round k, the sender claims the round by compare-and-swap to `2k + 1`
//! before it puts any byte, and a receiver that closes its end revokes the word by
//! compare-and-swap from `2k` to [`REVOKED`]. Exactly one of the two swaps wins, so a round is
//! either never written (the revoke won: the receiver may free its buffer at once) or claimed
//! (the receiver waits for the round's done word before it lets the buffer go).
//!
//! The decisions are written once, over [`ReadyWord`], and run in three places: the sender
//! on its own word (`engine`'s `serve_chans`), the receiver through the fabric's remote
//! atomic (`chan_recv_close`), and the loom model below, which races a claim against a
//! revoke with the data and done word around them.

use crate::error::Result;

/// The ready word once its receiver closed the channel.
pub(crate) const REVOKED: u64 = u64::MAX;

/// A ready word as one side reaches it.
pub(crate) trait ReadyWord {
    /// Its value (Acquire).
    fn load(&self) -> Result<u64>;
    /// Sets it to `new` if it holds `current` (AcqRel); returns the value it held.
    fn compare_exchange(&self, current: u64, new: u64) -> Result<u64>;
}

/// What the sender found when it tried to claim a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The round is this sender's to put: the receiver cannot revoke it any more.
    Claimed,
    /// The receiver has not posted its buffer for the round yet.
    NotYet,
    /// The receiver closed its end: nothing may be written.
    Revoked,
}

/// The sender's claim of round `round`.
pub(crate) fn claim(w: &impl ReadyWord, round: u64) -> Result<Claim> {
    let want = 2 * round;
    let v = w.load()?;
    if v == REVOKED {
        return Ok(Claim::Revoked);
    }
    if v < want {
        return Ok(Claim::NotYet);
    }
    // Only the sender's claim and the receiver's revoke write a posted word.
    Ok(match w.compare_exchange(want, want + 1)? {
        old if old == want => Claim::Claimed,
        REVOKED => Claim::Revoked,
        _ => Claim::NotYet,
    })
}

/// The receiver's revoke of its posted round `round`: `true` if it won (nothing will be
/// written), `false` if the sender claimed the round first (its data is on the way).
pub(crate) fn revoke(w: &impl ReadyWord, round: u64) -> Result<bool> {
    Ok(w.compare_exchange(2 * round, REVOKED)? == 2 * round)
}

/// The sender's own word, in its segment.
impl ReadyWord for std::sync::atomic::AtomicU64 {
    fn load(&self) -> Result<u64> {
        Ok(std::sync::atomic::AtomicU64::load(
            self,
            std::sync::atomic::Ordering::Acquire,
        ))
    }

    fn compare_exchange(&self, current: u64, new: u64) -> Result<u64> {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        Ok(
            std::sync::atomic::AtomicU64::compare_exchange(self, current, new, AcqRel, Acquire)
                .unwrap_or_else(|old| old),
        )
    }
}

/// The receiver's view: the word in the sender's segment, through the fabric's atomics
/// (which wake whoever sleeps on it).
impl ReadyWord for (&crate::fabric::World, &crate::fabric::RemoteWord) {
    fn load(&self) -> Result<u64> {
        self.0.atomic(self.1, crate::fabric::AtomicOp::Load)
    }

    fn compare_exchange(&self, current: u64, new: u64) -> Result<u64> {
        self.0.atomic(
            self.1,
            crate::fabric::AtomicOp::CompareExchange { current, new },
        )
    }
}

#[cfg(test)]
mod model {
    use super::*;
    use crate::transport::model::{self, ModelCount, ModelWord, explore, failure};
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    impl ReadyWord for ModelWord {
        fn load(&self) -> Result<u64> {
            Ok(self.value())
        }

        fn compare_exchange(&self, current: u64, new: u64) -> Result<u64> {
            Ok(self.cas(current, new))
        }
    }

    /// The two ranks' memory: the ready word (the sender's), the receiver's buffer and the
    /// round's done word (the receiver's).
    struct Pair {
        ready: ModelWord,
        buffer: UnsafeCell<u64>,
        done: ModelWord,
        receiver_sleepers: ModelCount,
    }

    #[allow(unsafe_code)]
    // SAFETY: shared between the model's threads on purpose: the buffer is a loom
    // `UnsafeCell`, which fails the model on any access not ordered after a conflicting one —
    // the property under test (the receiver takes its buffer back once its close returns).
    unsafe impl Sync for Pair {}

    /// A receiver's revoke: the real one, or a broken one for the test that shows the model
    /// can fail.
    type Revoke = fn(&ModelWord, u64) -> bool;

    fn real_revoke(w: &ModelWord, round: u64) -> bool {
        revoke(w, round).expect("a model revoke")
    }

    /// Round `round` posted (or posted by the receiver while the sender looks: `post_first`
    /// false); the sender tries to claim it (twice: a claim that finds the round not posted
    /// yet tries again, as its progress does) and, if it wins, writes the receiver's buffer
    /// and raises the done word; meanwhile the receiver closes its end with `revoke` and, if
    /// the sender won, waits for the done word. Then the receiver takes its buffer back (reads
    /// and writes it): a sender write not ordered before that is a race loom reports. Exactly
    /// one side wins, and the data is there exactly when the sender won.
    fn race(round: u64, post_first: bool, revoke: Revoke) {
        let pair = Arc::new(Pair {
            ready: ModelWord::new(if post_first { 2 * round } else { 2 * round - 2 }),
            buffer: UnsafeCell::new(0),
            done: ModelWord::new(round - 1),
            receiver_sleepers: ModelCount::default(),
        });
        let s = pair.clone();
        let sender = loom::thread::spawn(move || {
            for _ in 0..2 {
                match claim(&s.ready, round).expect("a model claim") {
                    Claim::Claimed => {
                        #[allow(unsafe_code)]
                        // SAFETY: a loom cell: a racing access fails the model.
                        s.buffer.with_mut(|b| unsafe { *b = round });
                        model::set(&s.done, &s.receiver_sleepers, round);
                        return true;
                    }
                    Claim::Revoked => return false,
                    Claim::NotYet => {}
                }
            }
            false
        });
        if !post_first {
            model::set(&pair.ready, &ModelCount::default(), 2 * round);
        }
        let revoked = revoke(&pair.ready, round);
        if !revoked {
            model::wait(&pair.done, &pair.receiver_sleepers, round);
        }
        #[allow(unsafe_code)]
        // SAFETY: a loom cell: a racing access fails the model.
        let seen = pair
            .buffer
            .with_mut(|b| unsafe { std::mem::replace(&mut *b, 0) });
        let claimed = sender.join().expect("the sender");
        assert_ne!(
            revoked, claimed,
            "exactly one of the claim and the revoke wins"
        );
        assert_eq!(seen == round, claimed, "the data came exactly when claimed");
        let last = if claimed { 2 * round + 1 } else { REVOKED };
        assert_eq!(pair.ready.value(), last);
    }

    #[test]
    fn a_claim_and_a_revoke_never_both_win() {
        assert!(explore(3, || race(1, true, real_revoke)) > 1);
        assert!(explore(3, || race(5, false, real_revoke)) > 1);
    }

    /// The model can fail: a revoke written as a plain store that assumes it won lets the
    /// sender claim the same round and write into a buffer the receiver has taken back.
    #[test]
    fn a_revoke_by_store_is_caught() {
        fn stored(w: &ModelWord, _round: u64) -> bool {
            model::set(w, &ModelCount::default(), REVOKED);
            true
        }
        // Caught as both sides winning the round (the race on the buffer itself may be
        // hidden: loom orders SeqCst fences, which the model words use, more strongly than
        // the language does).
        let e = failure(|| race(1, true, stored));
        assert!(
            e.contains("exactly one") || e.contains("Causality violation"),
            "{e}"
        );
    }
}
