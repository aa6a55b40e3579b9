//! The proxy thread: owns the rank's world and communicator, starts what is posted, polls what
//! is in flight, answers through the completion queue.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

use super::NAP;
use crate::coll::Comm;
use crate::coll::nb::Scope;
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::World;
use crate::p2p::{Request, Status};

/// Starts an operation on the proxy's scope.
pub(crate) type Start =
    Box<dyn for<'r, 'x, 'c> FnOnce(&'r Scope<'x, 'c>) -> Result<Request<'r>> + Send>;

/// A command, run on the proxy with the rank's communicator.
pub(crate) type Command = Box<dyn for<'c> FnOnce(&Comm<'c>) -> Result<()> + Send>;

/// A work-queue entry.
pub(crate) enum Work {
    Start(u64, Start),
    Run(u64, Command),
    Stop(Leave),
}

/// How the proxy leaves the job when stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leave {
    /// After a barrier with every rank ([`World::finalize`]).
    Finalize,
    /// At once (the world dropped).
    Drop,
    /// Marked failed: every peer's wait fails naming this rank.
    Fail,
}

/// A completion-queue entry: the operation and how it ended.
pub(crate) struct Done {
    pub id: u64,
    pub result: Result<Status>,
}

/// How often a proxy with operations in flight that made no progress looks at its peers.
const LIVENESS_EVERY: Duration = Duration::from_millis(10);

/// The proxy thread's body.
pub(crate) fn serve(world: World, work: Receiver<Work>, answer: Sender<Done>) -> Result<()> {
    let rank = world.rank();
    // A bound rank's thread holds one CPU; its proxy must be free to run beside it (on a
    // spare core where there is one), not only when the rank sleeps.
    crate::bootstrap::bind::unbind_thread();
    let served = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let comm = match Comm::world(&world) {
            Ok(c) => c,
            Err(e) => {
                let _ = answer.send(Done {
                    id: 0,
                    result: Err(e.clone()),
                });
                return Err(e);
            }
        };
        let _ = answer.send(Done {
            id: 0,
            result: Ok(Status::send()),
        });
        let mut leave = Leave::Drop;
        comm.scope(|s| {
            leave = Proxy::new(&world, s, &work, &answer).serve()?;
            Ok(())
        })?;
        Ok(leave)
    }));
    let r = match served {
        Ok(Ok(Leave::Finalize)) => world.finalize(),
        Ok(Ok(Leave::Drop)) => Ok(()),
        Ok(Ok(Leave::Fail)) => {
            world.mark_failed();
            Ok(())
        }
        Ok(Err(e)) => {
            world.mark_failed();
            Err(e)
        }
        Err(p) => {
            world.mark_failed();
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Error::peer(
                ErrorKind::PeerDied,
                rank,
                format!("rank {rank}'s progress thread panicked: {msg}"),
            ))
        }
    };
    // `answer` drops here: the rank's pending tickets learn that the proxy ended.
    r
}

/// The serving loop's state.
struct Proxy<'a, 'r, 'x, 'c> {
    world: &'a World,
    scope: &'r Scope<'x, 'c>,
    work: &'a Receiver<Work>,
    answer: &'a Sender<Done>,
    /// Started, not yet answered.
    live: Vec<(u64, Request<'r>)>,
}

impl<'a, 'r, 'x, 'c> Proxy<'a, 'r, 'x, 'c> {
    fn new(
        world: &'a World,
        scope: &'r Scope<'x, 'c>,
        work: &'a Receiver<Work>,
        answer: &'a Sender<Done>,
    ) -> Self {
        Self {
            world,
            scope,
            work,
            answer,
            live: Vec::with_capacity(super::QUEUE_DEPTH),
        }
    }

    fn answer(&self, id: u64, result: Result<Status>) {
        // The rank's end is gone only when the rank itself is: nothing left to tell.
        let _ = self.answer.send(Done { id, result });
    }

    /// Serves until stopped; how to leave. An error ends the proxy (and fails the rank).
    fn serve(&mut self) -> Result<Leave> {
        let (spins, yields) = self.world.wait_policy();
        let patience = spins.saturating_add(yields);
        let mut idle = 0u32;
        let mut stalled: Option<Instant> = None;
        let mut looked = Instant::now();
        loop {
            // New work: sleep on the queue when nothing is in flight, nap on it when what
            // is in flight has not moved for a while, else only look.
            let next = if self.live.is_empty() {
                self.work.recv().map_err(|_| TryRecvError::Disconnected)
            } else if idle >= patience {
                self.work.recv_timeout(NAP).map_err(|e| match e {
                    RecvTimeoutError::Timeout => TryRecvError::Empty,
                    RecvTimeoutError::Disconnected => TryRecvError::Disconnected,
                })
            } else {
                self.work.try_recv()
            };
            let mut moved = false;
            match next {
                Ok(Work::Stop(how)) => {
                    self.drain()?;
                    return Ok(how);
                }
                Ok(Work::Start(id, f)) => {
                    moved = true;
                    match f(self.scope) {
                        Ok(r) => self.live.push((id, r)),
                        Err(e) => self.answer(id, Err(e)),
                    }
                }
                Ok(Work::Run(id, f)) => {
                    moved = true;
                    let r = f(self.scope.comm()).map(|()| Status::send());
                    self.answer(id, r);
                }
                Err(TryRecvError::Disconnected) => {
                    // The rank dropped its proxy without stopping it (its thread unwound).
                    self.drain()?;
                    return Ok(Leave::Drop);
                }
                Err(TryRecvError::Empty) => {}
            }
            moved |= self.poll();
            if moved {
                idle = 0;
                stalled = None;
                continue;
            }
            idle = idle.saturating_add(1);
            if idle > spins && idle <= patience {
                std::thread::yield_now();
            }
            if idle >= patience && !self.live.is_empty() {
                let since = *stalled.get_or_insert_with(Instant::now);
                if looked.elapsed() >= LIVENESS_EVERY {
                    looked = Instant::now();
                    self.check(since)?;
                }
            }
        }
    }

    /// Tests every operation in flight, answers the completed ones. Whether any completed.
    fn poll(&mut self) -> bool {
        let before = self.live.len();
        let answer = self.answer;
        self.live.retain_mut(|(id, r)| match r.test() {
            Ok(None) => true,
            Ok(Some(s)) => {
                let _ = answer.send(Done {
                    id: *id,
                    result: Ok(s),
                });
                false
            }
            Err(e) => {
                let _ = answer.send(Done {
                    id: *id,
                    result: Err(e),
                });
                false
            }
        });
        self.live.len() != before
    }

    /// Ends the proxy when a peer died, or when nothing moved for the world's timeout. What
    /// is in flight is not answered here: the communicator's scope finishes (or fails) it
    /// first, then the ended proxy fails the rank's tickets, so a buffer is never handed back
    /// while an operation may still write it.
    fn check(&self, since: Instant) -> Result<()> {
        self.world.check_alive()?;
        match self.world.timeout() {
            Some(t) if since.elapsed() >= t => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "rank {}'s progress thread: {} operation(s) made no progress in {:.1} s",
                    self.world.rank(),
                    self.live.len(),
                    t.as_secs_f64()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Completes what is in flight (a rank stops its proxy only outside its scopes, so this
    /// is empty unless the rank unwound).
    fn drain(&mut self) -> Result<()> {
        for (id, mut r) in std::mem::take(&mut self.live) {
            let res = r.wait();
            let failed = res.as_ref().err().cloned();
            self.answer(id, res);
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(())
    }
}
