//! An active-message step: a Medium request that the neighbour's handler checks and answers,
//! then a put into the neighbour's segment and a get of it back through the extended API.
//!
//! Rank r sends to r+1 and is written by r-1 only, so each segment has one writer per
//! round. The step ends with a barrier, because rank r-1's put of the next round may not
//! land before rank r has checked this round's (and handlers run only while a rank is inside
//! a call: the barrier is also where the last gets are served). Put lengths reach 256 KiB, so
//! gets larger than a packet go through the pooled landing segments.
//!
//! A handler cannot fail a check by returning an error (that is kept for the rank's next
//! call and would read as a library error): it records a mismatch, and the step reports it
//! as a wrong result.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use tca::Comm;
use tca::am::{Endpoint, Index, Table};

use super::{Fail, Step, check};
use crate::rng::{Rng, mix, pattern};

/// Bytes of each rank's active-message segment.
const SEGMENT: usize = 256 << 10;

/// What the handlers saw.
#[derive(Debug, Default)]
struct Seen {
    /// Replies received.
    replies: Cell<u64>,
    /// The last reply's arguments.
    last: RefCell<Vec<u64>>,
    /// A request whose payload was not the pattern its arguments promise.
    bad: RefCell<Option<String>>,
}

/// The endpoint's handler indices and what its handlers saw.
#[derive(Debug)]
pub(crate) struct Am {
    seen: Rc<Seen>,
    echo: Index,
}

fn sum(b: &[u8]) -> u64 {
    b.iter().enumerate().fold(0u64, |s, (i, &x)| {
        s.wrapping_mul(31).wrapping_add(u64::from(x) ^ i as u64)
    })
}

fn medium(round: u64, src: u64) -> Vec<u8> {
    let n = mix(&[round, src, 3]) % 4097;
    pattern(mix(&[round, src, 4]), usize::try_from(n).unwrap_or(0))
}

fn put_data(round: u64, src: usize, n: usize) -> Vec<u8> {
    pattern(mix(&[round, src as u64, 5]), n)
}

impl Am {
    /// Makes the communicator's endpoint (collective).
    pub(crate) fn new(c: &Comm) -> Result<Self, Fail> {
        let seen = Rc::new(Seen::default());
        let mut t = Table::new();
        let s = seen.clone();
        let reply = t.add("chaos-echo-reply", move |_, m| {
            *s.last.borrow_mut() = m.args.to_vec();
            s.replies.set(s.replies.get() + 1);
            Ok(())
        });
        let s = seen.clone();
        let echo = t.add("chaos-echo", move |tok, m| {
            let (round, src) = (
                m.args.first().copied().unwrap_or(0),
                m.args.get(1).copied().unwrap_or(0),
            );
            if m.payload != medium(round, src).as_slice() || u64::from(m.source) != src {
                s.bad.borrow_mut().get_or_insert_with(|| {
                    format!(
                        "active message round {round}: Medium from rank {} (claiming {src}) \
                         carries the wrong {} bytes",
                        m.source,
                        m.payload.len()
                    )
                });
            }
            tok.reply_short(reply, &[round, src, sum(m.payload)])
        });
        Endpoint::new(c, t, SEGMENT)?;
        Ok(Self { seen, echo })
    }

    /// One active-message step (collective).
    pub(crate) fn step(&self, c: &Comm, round: u64, r: &mut Rng) -> Step {
        let ep = Endpoint::of(c).ok_or_else(|| Fail::Other("the endpoint is gone".into()))?;
        let (p, me) = (c.size() as usize, c.rank() as usize);
        let (to, from) = ((me + 1) % p, (me + p - 1) % p);
        let to32 = u32::try_from(to).unwrap_or(0);
        let msg = medium(round, me as u64);
        let before = self.seen.replies.get();
        ep.request_medium(to32, self.echo, &[round, me as u64], &msg)?;
        ep.wait_until(|| self.seen.replies.get() > before)?;
        let want = vec![round, me as u64, sum(&msg)];
        check(*self.seen.last.borrow() == want, || {
            format!(
                "active message round {round}: reply {:?}, expected {want:?}",
                self.seen.last.borrow()
            )
        })?;

        let n = usize::try_from(r.range(1, SEGMENT as u64)).unwrap_or(1);
        ep.put(to32, 0, &put_data(round, me, n))?;
        c.barrier()?;
        let mut own = vec![0u8; n];
        ep.segment().read(0, &mut own)?;
        check(own == put_data(round, from, n), || {
            format!("active-message put round {round}: {n} bytes from rank {from} differ")
        })?;
        let mut got = vec![0u8; n];
        ep.get(to32, 0, &mut got)?;
        check(got == put_data(round, me, n), || {
            format!("active-message get round {round}: {n} bytes from rank {to} differ")
        })?;
        c.barrier()?;
        match self.seen.bad.borrow_mut().take() {
            Some(what) => Err(Fail::Wrong(what)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_verify_on_thread_ranks() {
        super::super::on_thread_ranks(
            11,
            20,
            |c| Am::new(c).expect("endpoint"),
            |am, c, round, r| am.step(c, round, r),
        );
    }
}
