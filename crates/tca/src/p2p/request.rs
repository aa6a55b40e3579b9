//! Requests: non-blocking and persistent operations, and waiting on several at once.

use super::engine::{Bound, Dest, Hand, Id};
use super::{Source, Status, Tag};
use crate::Comm;
use crate::cast::rank_u32;
use crate::coll::nb::Drive;
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::Segment;

enum Buf<'a> {
    None,
    Recv(&'a mut [u8]),
    RecvSeg(&'a Segment, usize, usize),
}

impl Buf<'_> {
    fn hand(&mut self) -> Hand<'_> {
        match self {
            Buf::None => Hand::None,
            Buf::Recv(b) => Hand::Recv(b),
            Buf::RecvSeg(s, o, l) => Hand::RecvSeg(s, *o, *l),
        }
    }
}

/// A started non-blocking operation (`MPI_Request`): a send or receive, or a non-blocking
/// collective started in a scope (`Comm::scope`, `s.iallreduce(..)`) — one type, so
/// [`wait_all`], [`wait_any`] and [`test_all`] take both kinds at once. Complete it with
/// [`Request::wait`] or [`Request::test`]; dropping it unfinished is safe (see the module doc;
/// a collective's scope finishes it).
pub struct Request<'a> {
    comm: &'a Comm<'a>,
    /// The engine's request; `None` once finished (or for a send that completed at once).
    id: Option<Id>,
    buf: Buf<'a>,
    /// The result of a request that completed when it started, not yet waited for.
    early: Option<Status>,
    status: Option<Status>,
    /// A started collective: its scope's started collectives and its place among them;
    /// `None` once completed (and for point-to-point requests).
    coll: Option<(&'a dyn Drive, usize)>,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Request");
        d.field("active", &self.is_active())
            .field("status", &self.status);
        if let Some((ops, i)) = self.coll {
            d.field("collective", &i)
                .field("finished", &ops.finished(i));
        }
        d.finish_non_exhaustive()
    }
}

fn finished() -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        "request already completed: it was waited for or tested to completion before",
    )
}

impl<'a> Request<'a> {
    pub(super) fn send(comm: &'a Comm<'a>, id: Option<Id>) -> Self {
        Self {
            comm,
            early: id.is_none().then(Status::send),
            id,
            buf: Buf::None,
            status: None,
            coll: None,
        }
    }

    pub(super) fn recv(comm: &'a Comm<'a>, id: Id, buf: &'a mut [u8]) -> Self {
        Self {
            comm,
            id: Some(id),
            buf: Buf::Recv(buf),
            early: None,
            status: None,
            coll: None,
        }
    }

    /// The request of collective `i` of a scope's started collectives `ops`.
    pub(crate) fn collective(comm: &'a Comm<'a>, ops: &'a dyn Drive, i: usize) -> Self {
        Self {
            comm,
            id: None,
            buf: Buf::None,
            early: None,
            status: None,
            coll: Some((ops, i)),
        }
    }

    pub(super) fn recv_seg(
        comm: &'a Comm<'a>,
        id: Id,
        seg: &'a Segment,
        off: usize,
        len: usize,
    ) -> Self {
        Self {
            comm,
            id: Some(id),
            buf: Buf::RecvSeg(seg, off, len),
            early: None,
            status: None,
            coll: None,
        }
    }

    /// Whether the request has not been completed by a wait or test yet.
    pub fn is_active(&self) -> bool {
        self.id.is_some() || self.early.is_some() || self.coll.is_some()
    }

    /// Whether it is a non-blocking collective's.
    pub fn is_collective(&self) -> bool {
        self.coll.is_some()
    }

    /// The status of the completed request (`None` while active). A collective's status is
    /// empty (source 0, tag 0, 0 bytes: MPI leaves it undefined).
    pub fn status(&self) -> Option<Status> {
        self.status
    }

    /// Waits for completion (`MPI_Wait`). A collective's wait first finishes the collectives
    /// its scope started before it (they progress in the order they were started).
    pub fn wait(&mut self) -> Result<Status> {
        if let Some((ops, i)) = self.coll {
            ops.drive(self.comm, i, true)?;
            return self.settle_coll(ops.take(i).unwrap_or(Ok(())));
        }
        if let Some(s) = self.early.take() {
            self.status = Some(s);
            return Ok(s);
        }
        let id = self.id.ok_or_else(finished)?;
        let (comm, eng) = (self.comm, self.comm.engine());
        let r = eng.wait_with(comm.world_ref(), id, &mut self.buf.hand(), || {
            comm.progress_scope()
        });
        self.settle(id, r)
    }

    /// Completes the request if it can without waiting (`MPI_Test`): makes progress, and
    /// returns the status once completed (then the request is spent: a later wait or test is
    /// an error, as for every request).
    pub fn test(&mut self) -> Result<Option<Status>> {
        if let Some((ops, i)) = self.coll {
            ops.drive(self.comm, i, false)?;
            return match ops.take(i) {
                Some(r) => self.settle_coll(r).map(Some),
                None => Ok(None),
            };
        }
        if let Some(s) = self.early.take() {
            self.status = Some(s);
            return Ok(Some(s));
        }
        let id = self.id.ok_or_else(finished)?;
        let eng = self.comm.engine();
        match eng.test(self.comm.world_ref(), id, &mut self.buf.hand()) {
            Ok(None) => Ok(None),
            Ok(Some(s)) => self.settle(id, Ok(s)).map(Some),
            Err(e) => self.settle(id, Err(e)).map(Some),
        }
    }

    /// A collective's outcome, taken from its scope: the request is spent.
    fn settle_coll(&mut self, r: Result<()>) -> Result<Status> {
        self.coll = None;
        r.map(|()| {
            let s = Status::send();
            self.status = Some(s);
            s
        })
    }

    fn settle(&mut self, id: Id, r: Result<Status>) -> Result<Status> {
        self.id = None;
        match r {
            Ok(s) => {
                self.status = Some(s);
                Ok(s)
            }
            Err(e) => {
                // The engine may still hold it (a transport error mid-wait): let it go.
                let eng = self.comm.engine();
                if eng.live(id) {
                    eng.drop_req(id);
                }
                Err(e)
            }
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.comm.engine().drop_req(id);
        }
    }
}

/// Waits for every active request (`MPI_Waitall`); each one's status is then in
/// [`Request::status`]. Every request is waited for even if one fails; the first error is
/// returned. Collectives' requests are waited for first: their waits move sends and
/// receives on, while a send's or receive's wait moves collectives only between naps.
pub fn wait_all(reqs: &mut [Request<'_>]) -> Result<()> {
    let first = wait_every(reqs, |r| r.is_collective(), Request::wait);
    let rest = wait_every(reqs, Request::is_active, Request::wait);
    first.and(rest)
}

/// Waits for every active request of either kind; the first error after all were waited for.
fn wait_every<R>(
    reqs: &mut [R],
    active: impl Fn(&R) -> bool,
    mut wait: impl FnMut(&mut R) -> Result<Status>,
) -> Result<()> {
    let mut first = None;
    for r in reqs.iter_mut().filter(|r| active(r)) {
        if let Err(e) = wait(r) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Completes every active request that can complete now; `true` when none is left active
/// (`MPI_Testall`, except that requests which finished are finished even when others are not).
pub fn test_all(reqs: &mut [Request<'_>]) -> Result<bool> {
    let mut all = true;
    for r in reqs.iter_mut().filter(|r| r.is_active()) {
        all &= r.test()?.is_some();
    }
    Ok(all)
}

/// Waits until one active request completes and returns its index and status
/// (`MPI_Waitany`). Fails if no request is active.
///
/// The collectives of one scope complete in the order they were started, so when only
/// collectives are active, this waits for the oldest of the first one's scope: the first of
/// that scope to complete (one that will complete is all `MPI_Waitany` promises). With sends or
/// receives active, it sleeps on those between passes and moves the collectives on after
/// every nap (0.2 ms at most).
pub fn wait_any(reqs: &mut [Request<'_>]) -> Result<(usize, Status)> {
    if !reqs.iter().any(Request::is_active) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "wait_any: no active request",
        ));
    }
    if !reqs.iter().any(|r| r.id.is_some() || r.early.is_some()) {
        // Only collectives: a scope finishes its runs in the order they started, so the
        // oldest one is the first to complete. (Testing them in turn could finish an older
        // and a younger run in the younger one's test and hand the younger back first.)
        let Some((ops, _)) = reqs.iter().find_map(|r| r.coll) else {
            unreachable!("an active request, and every active one is a collective");
        };
        let oldest = (0..reqs.len())
            .filter_map(|k| {
                let (o, i) = reqs[k].coll?;
                std::ptr::addr_eq(o, ops).then_some((i, k))
            })
            .min()
            .map(|(_, k)| k)
            .expect("the first collective's own scope");
        return Ok((oldest, reqs[oldest].wait()?));
    }
    let n = reqs.len();
    let mut turn = 0usize;
    let patience = crate::transport::Patience::default();
    loop {
        // Start each pass at another request, so a busy one cannot starve the others.
        for k in 0..n {
            let i = (turn + k) % n;
            if reqs[i].is_active()
                && let Some(s) = reqs[i].test()?
            {
                return Ok((i, s));
            }
        }
        turn = turn.wrapping_add(1);
        // Sleep in the engine's wait loop until one of them may have completed (requests
        // that completed when they started never get here: their test above returned).
        let Some(first) = reqs.iter().find(|r| r.id.is_some()) else {
            continue;
        };
        let (comm, id) = (first.comm, first.id.expect("found above"));
        // The collectives move on in the sleep's passes (this engine's progress does not
        // move them); an error of that progress ends the sleep and is returned.
        let failed = std::cell::Cell::new(None);
        let done = || {
            for r in reqs.iter().filter(|r| r.is_active()) {
                if let Err(e) = r.comm.progress_scope() {
                    failed.set(Some(e));
                    return true;
                }
            }
            reqs.iter().any(|r| {
                r.id.is_some_and(|id| r.comm.engine().is_done(id))
                    || r.coll.is_some_and(|(ops, i)| ops.finished(i))
            })
        };
        comm.engine()
            .wait_some(comm.world_ref(), id, &patience, done)?;
        if let Some(e) = failed.take() {
            return Err(e);
        }
    }
}

enum Kind<'a> {
    Send {
        buf: &'a [u8],
        to: usize,
        tag: i32,
        ty: u8,
    },
    Recv {
        buf: &'a mut [u8],
        src: Source,
        tag: Tag,
        ty: u8,
    },
    /// A channel send (`Comm::send_init_from`): its slot once opened.
    ChanSend {
        seg: &'a Segment,
        off: usize,
        len: usize,
        to: usize,
        tag: i32,
        slot: Option<usize>,
    },
    /// A channel receive (`Comm::recv_init_into`): bound after its first round; `round` is
    /// the round last started; `err` the binding's error (a truncation), repeated each round.
    ChanRecv {
        seg: &'a Segment,
        off: usize,
        len: usize,
        src: usize,
        tag: i32,
        bound: Option<Bound>,
        round: u64,
        err: Option<Error>,
    },
}

impl Kind<'_> {
    /// The buffer a wait or test holds: a receive's (a send's data was copied at start).
    fn hand(&mut self) -> Hand<'_> {
        match self {
            Kind::Recv { buf, .. } => Hand::Recv(buf),
            Kind::ChanRecv { seg, off, len, .. } => Hand::RecvSeg(seg, *off, *len),
            Kind::Send { .. } | Kind::ChanSend { .. } => Hand::None,
        }
    }
}

/// A persistent operation (`MPI_Send_init` / `MPI_Recv_init`): arguments checked once,
/// started and completed any number of times. Repeated use allocates nothing after the
/// first round (stash and landing buffers come back to the communicator's pools and are
/// reused).
///
/// Made by [`Comm::send_init_from`] and [`Comm::recv_init_into`] it is one end of a *bound
/// channel* (see the module doc): matched once, on the first round, then every round is one
/// put from segment to segment, with the receiver's address posted ahead.
pub struct Persistent<'a> {
    comm: &'a Comm<'a>,
    kind: Kind<'a>,
    active: Option<Id>,
    /// A round that needs no engine request is under way (an eager send that went at once,
    /// or a round of a channel).
    early: bool,
}

impl std::fmt::Debug for Persistent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persistent")
            .field("active", &self.is_active())
            .finish_non_exhaustive()
    }
}

impl<'a> Persistent<'a> {
    pub(super) fn send(comm: &'a Comm<'a>, buf: &'a [u8], to: usize, tag: i32, ty: u8) -> Self {
        Self::new(comm, Kind::Send { buf, to, tag, ty })
    }

    pub(super) fn recv(
        comm: &'a Comm<'a>,
        buf: &'a mut [u8],
        src: Source,
        tag: Tag,
        ty: u8,
    ) -> Self {
        Self::new(comm, Kind::Recv { buf, src, tag, ty })
    }

    pub(super) fn chan_send(
        comm: &'a Comm<'a>,
        seg: &'a Segment,
        (off, len): (usize, usize),
        to: usize,
        tag: i32,
    ) -> Self {
        let kind = Kind::ChanSend {
            seg,
            off,
            len,
            to,
            tag,
            slot: None,
        };
        Self::new(comm, kind)
    }

    pub(super) fn chan_recv(
        comm: &'a Comm<'a>,
        seg: &'a Segment,
        (off, len): (usize, usize),
        src: usize,
        tag: i32,
    ) -> Self {
        let kind = Kind::ChanRecv {
            seg,
            off,
            len,
            src,
            tag,
            bound: None,
            round: 0,
            err: None,
        };
        Self::new(comm, kind)
    }

    fn new(comm: &'a Comm<'a>, kind: Kind<'a>) -> Self {
        Self {
            comm,
            kind,
            active: None,
            early: false,
        }
    }

    /// Whether it was started and not completed yet.
    pub fn is_active(&self) -> bool {
        self.active.is_some() || self.early
    }

    /// Starts one round (`MPI_Start`). Starting an active request is an error.
    pub fn start(&mut self) -> Result<()> {
        if self.is_active() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "persistent request started again before it completed",
            ));
        }
        let eng = self.comm.engine();
        let w = self.comm.world_ref();
        match &mut self.kind {
            Kind::Send { buf, to, tag, ty } => match eng.send(w, *to, *tag, *ty, buf, false)? {
                Some(id) => self.active = Some(id),
                None => self.early = true,
            },
            Kind::Recv { buf, src, tag, ty } => {
                let cap = buf.len();
                let id = eng.recv(w, *src, *tag, cap, *ty, Dest::Plain, &mut Hand::Recv(buf))?;
                self.active = Some(id);
            }
            Kind::ChanSend {
                seg,
                off,
                len,
                to,
                tag,
                slot,
            } => {
                *slot = Some(eng.chan_send_start(w, *slot, *to, *tag, seg, *off, *len)?);
                self.early = true;
            }
            Kind::ChanRecv {
                seg,
                off,
                len,
                src,
                tag,
                bound,
                round,
                ..
            } => match bound {
                Some(b) => {
                    eng.chan_recv_start(w, b, *round + 1)?;
                    *round += 1;
                    self.early = true;
                }
                None => {
                    let dest = Dest::Bound(seg.handle(), *off);
                    let mut hand = Hand::RecvSeg(seg, *off, *len);
                    let id = eng.recv(
                        w,
                        Source::Rank(rank_u32(*src)),
                        Tag::Is(*tag),
                        *len,
                        0,
                        dest,
                        &mut hand,
                    )?;
                    self.active = Some(id);
                }
            },
        }
        Ok(())
    }

    /// A channel round's outcome (`test`: None while under way).
    fn chan_round(&mut self, block: bool) -> Result<Option<Status>> {
        let eng = self.comm.engine();
        let w = self.comm.world_ref();
        match &mut self.kind {
            Kind::ChanSend { to, slot, .. } => {
                let c = slot.expect("a started channel has a slot");
                if block {
                    eng.chan_send_wait(w, *to, c).map(Some)
                } else {
                    eng.chan_send_test(w, *to, c)
                }
            }
            Kind::ChanRecv {
                bound, round, err, ..
            } => {
                let b = bound.expect("a channel round runs once bound");
                if block {
                    eng.chan_recv_wait(w, &b, *round)?;
                } else if !eng.chan_recv_test(w, &b, *round)? {
                    return Ok(None);
                }
                match err {
                    Some(e) => Err(e.clone()),
                    None => Ok(Some(Status {
                        source: rank_u32(b.q),
                        tag: b.tag,
                        bytes: b.len,
                    })),
                }
            }
            _ => Ok(Some(Status::send())),
        }
    }

    /// After an engine request of this persistent finished: a channel receive is bound now.
    fn on_finished(&mut self, r: &Result<Status>) {
        let bound_now = self.comm.engine().take_last_bound();
        if let Kind::ChanRecv {
            bound, round, err, ..
        } = &mut self.kind
            && bound.is_none()
            && let Some(b) = bound_now
        {
            *bound = Some(b);
            *round = b.round;
            *err = r.as_ref().err().cloned();
        }
    }

    /// Waits for the current round to complete.
    pub fn wait(&mut self) -> Result<Status> {
        if std::mem::take(&mut self.early) {
            return self
                .chan_round(true)
                .map(|s| s.expect("a blocking round ends"));
        }
        let Some(id) = self.active else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "persistent request waited for while not started",
            ));
        };
        let eng = self.comm.engine();
        let r = eng.wait(self.comm.world_ref(), id, &mut self.kind.hand());
        self.active = None;
        self.on_finished(&r);
        if r.is_err() && eng.live(id) {
            eng.drop_req(id);
        }
        r
    }

    /// Completes the current round if it can without waiting.
    pub fn test(&mut self) -> Result<Option<Status>> {
        if self.early {
            let r = self.chan_round(false);
            if !matches!(r, Ok(None)) {
                self.early = false;
            }
            return r;
        }
        let Some(id) = self.active else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "persistent request tested while not started",
            ));
        };
        let eng = self.comm.engine();
        match eng.test(self.comm.world_ref(), id, &mut self.kind.hand()) {
            Ok(None) => Ok(None),
            r => {
                self.active = None;
                let r = r.map(|s| s.expect("tested done"));
                self.on_finished(&r);
                if r.is_err() && eng.live(id) {
                    eng.drop_req(id);
                }
                r.map(Some)
            }
        }
    }

    /// Starts every request (`MPI_Startall`).
    pub fn start_all(reqs: &mut [Persistent<'_>]) -> Result<()> {
        reqs.iter_mut().try_for_each(Persistent::start)
    }

    /// Waits for every active request; the first error is returned after all were waited for.
    pub fn wait_all(reqs: &mut [Persistent<'_>]) -> Result<()> {
        wait_every(reqs, Persistent::is_active, Persistent::wait)
    }
}

impl Drop for Persistent<'_> {
    fn drop(&mut self) {
        let eng = self.comm.engine();
        let w = self.comm.world_ref();
        let early = std::mem::take(&mut self.early);
        let pending = self.active.take();
        // A first round bound while it was waited for by nobody: its channel is known to the
        // engine's request until that is released.
        let bound_in_flight = pending.and_then(|id| eng.chan_of(id));
        if let Some(id) = pending {
            eng.drop_req(id);
        }
        match &self.kind {
            Kind::ChanSend {
                to, slot: Some(c), ..
            } => eng.chan_send_close(*to, *c),
            Kind::ChanRecv {
                bound: Some(b),
                round,
                ..
            } => eng.chan_recv_close(w, b, early.then_some(*round)),
            Kind::ChanRecv { bound: None, .. } => {
                if let Some(b) = bound_in_flight {
                    eng.chan_recv_close(w, &b, Some(b.round));
                }
            }
            _ => {}
        }
    }
}
