//! The rank's side of a proxy scope: buffers lent to the proxy thread for the scope's lifetime,
//! and the tickets that claim the proxy's answers.
//!
//! This is the only place the offload layer uses `unsafe`: a borrow of the caller's buffer
//! crosses to the proxy thread as a pointer ([`Lent`]), and the proxy rebuilds it there. What
//! makes that sound is the scope's contract, the same as `std::thread::scope`'s: [`run`]
//! does not return — not even by unwinding — before the proxy has answered every operation
//! posted in it, and the proxy touches an operation's buffers only until it answers (or has
//! ended: then [`Proxy`] has joined its thread first). The buffers are borrowed for `'s`,
//! which outlives the scope, so nothing else can touch them meanwhile.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::marker::PhantomData;
use std::ptr::NonNull;

use super::node::{self, ANY, Entry, ProxyChain, What, op_code};
use super::serve::{CANCELLED, CommId, Work};
use super::{Link, Msg, Proxy};
use crate::coll::{Comm, Element, Op};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::SignalOp;
use crate::p2p::{Source, Status, Tag};

/// A borrow of the caller's `T` (a buffer, an op) lent to the proxy for a scope.
pub(super) struct Lent<T: ?Sized>(NonNull<T>);

// SAFETY: a `Lent<T>` stands for a `&T` moved to the proxy thread, which is `Send` exactly when
// `T: Sync`.
unsafe impl<T: ?Sized + Sync> Send for Lent<T> {}

impl<T: ?Sized> Lent<T> {
    /// Lends `r`.
    ///
    /// SAFETY (for callers): `r` is borrowed for the scope's lifetime `'s`, and the `Lent`
    /// goes only into work posted in that scope, whose [`Finish`] waits for it: then every
    /// later [`Lent::get`] runs while the borrow lives.
    unsafe fn new(r: &T) -> Self {
        Self(NonNull::from(r))
    }

    /// Lends what `p` points at: memory of the node proxy's arena.
    ///
    /// SAFETY (for callers): `p` is valid for reads of a `T` while the work it goes into
    /// runs, and nothing writes it meanwhile (the rank lent it for the operation's scope).
    pub(super) unsafe fn from_raw(p: NonNull<T>) -> Self {
        Self(p)
    }

    /// The borrow again, on the proxy thread, inside the work it was lent to.
    pub(super) fn get<'a>(&self) -> &'a T {
        // SAFETY: `new`'s contract: the borrow it came from lives while the work runs;
        // shared borrows may coexist, and `Send` needed `T: Sync` to read it from here.
        unsafe { self.0.as_ref() }
    }
}

/// An exclusive borrow of the caller's `T` lent to the proxy for a scope.
pub(super) struct LentMut<T: ?Sized>(NonNull<T>);

// SAFETY: a `LentMut<T>` stands for a `&mut T` moved to the proxy thread, which is `Send`
// exactly when `T: Send`.
unsafe impl<T: ?Sized + Send> Send for LentMut<T> {}

impl<T: ?Sized> LentMut<T> {
    /// Lends `r` exclusively.
    ///
    /// SAFETY (for callers): as [`Lent::new`]; `r`'s lender gave it up for `'s`.
    unsafe fn new(r: &mut T) -> Self {
        Self(NonNull::from(r))
    }

    /// Lends what `p` points at exclusively: memory of the node proxy's arena.
    ///
    /// SAFETY (for callers): `p` is valid for reads and writes of a `T` while the work it
    /// goes into runs, and nothing else reads or writes it meanwhile.
    pub(super) unsafe fn from_raw(p: NonNull<T>) -> Self {
        Self(p)
    }

    /// The exclusive borrow again, on the proxy thread, once (`self` is consumed).
    pub(super) fn get<'a>(mut self) -> &'a mut T {
        // SAFETY: `new`'s contract, and this is the pointer's only use, so the borrow
        // stays unique.
        unsafe { self.0.as_mut() }
    }
}

/// A command and, once run, its result.
type Command<F, T> = (Option<F>, Option<Result<T>>);

/// A pointer to a [`Command`] in the poster's frame, its type forgotten.
struct Erased(NonNull<()>);

// SAFETY: it stands for a `&mut Command<F, T>` with `F: Send` and `T: Send` (checked by
// [`ProxyScope::run`], the only maker), which may move to the proxy thread.
unsafe impl Send for Erased {}

/// Runs the command at `data` (a `Command<F, T>`) on `c` and stores its result there.
///
/// SAFETY (for callers): `data` points at a live `Command<F, T>` that nothing else uses.
unsafe fn call_command<F, T>(data: NonNull<()>, c: &Comm<'_>)
where
    F: FnOnce(&Comm<'_>) -> Result<T>,
{
    // SAFETY: see above.
    let cell = unsafe { data.cast::<Command<F, T>>().as_mut() };
    if let Some(f) = cell.0.take() {
        cell.1 = Some(f(c));
    }
}

/// A scope of posted operations: see [`Proxy::scope`]. Its methods mirror [`crate::coll::nb::Scope`]'s
/// and the communicator's two-sided calls; each returns a [`Ticket`] at once.
pub struct ProxyScope<'p, 's> {
    proxy: &'p Proxy,
    /// The communicator the operations run on.
    comm: CommId,
    /// Operations posted in this scope.
    posted: RefCell<Vec<u64>>,
    /// Invariant in `'s`, as `std::thread::Scope`.
    _s: PhantomData<&'s mut &'s ()>,
}

impl std::fmt::Debug for ProxyScope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyScope")
            .field("posted", &self.posted.borrow().len())
            .finish_non_exhaustive()
    }
}

/// The claim on one posted operation's answer (`MPI_Request` for offloaded work).
#[derive(Debug)]
pub struct Ticket<'p> {
    proxy: &'p Proxy,
    id: u64,
    status: Option<Status>,
    claimed: bool,
}

impl Ticket<'_> {
    /// Waits until the proxy has completed the operation; its status (a receive's source,
    /// tag and length; zeros for a collective or a send), or its error. A ticket is spent by
    /// its first completion: a later wait returns the same status.
    pub fn wait(&mut self) -> Result<Status> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        self.spent()?;
        self.claimed = true;
        let s = self.proxy.wait_for(self.id)?;
        self.status = Some(s);
        Ok(s)
    }

    /// The status if the operation has completed, without waiting.
    pub fn test(&mut self) -> Result<Option<Status>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        self.spent()?;
        match self.proxy.try_claim(self.id)? {
            None => Ok(None),
            Some(r) => {
                self.claimed = true;
                let s = r?;
                self.status = Some(s);
                Ok(Some(s))
            }
        }
    }

    /// Whether the operation may still be running (not yet seen completed).
    pub fn is_active(&self) -> bool {
        !self.claimed
    }

    fn spent(&self) -> Result<()> {
        if self.claimed {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "this offloaded operation failed, and its error was returned already",
            ));
        }
        Ok(())
    }
}

/// Finishes a scope: what its tickets left unclaimed and is still in flight is cancelled if
/// it is a send or a receive (as dropping a request does) and waited for if it is a
/// collective; the first error of an unclaimed operation is returned. Runs on the way out of
/// the scope, also when unwinding.
struct Finish<'a, 'p> {
    proxy: &'p Proxy,
    posted: &'a RefCell<Vec<u64>>,
}

impl Finish<'_, '_> {
    fn finish(&self) -> Result<()> {
        let proxy = self.proxy;
        for &id in self.posted.borrow().iter() {
            if proxy.pending.borrow().contains(&id) {
                proxy.cancel(id);
            }
        }
        let mut first = Ok(());
        // An id leaves the list only once the proxy is done with it, so a finish cut short
        // (by a panic) leaves the rest to the guard's drop.
        loop {
            let last = self.posted.borrow().last().copied();
            let Some(id) = last else { break };
            let r = if proxy.pending.borrow().contains(&id) {
                proxy.wait_for(id).map(drop)
            } else {
                // Answered: claimed by its ticket already (nothing there) or not.
                proxy
                    .done
                    .borrow_mut()
                    .remove(&id)
                    .map_or(Ok(()), |r| r.map(drop))
            };
            self.posted.borrow_mut().pop();
            // Newest first: the last error kept is the oldest operation's (a collective
            // failed after an earlier one says only that the earlier one failed).
            match r {
                Err(e) if e.kind() == ErrorKind::Aborted && e.message() == CANCELLED => {}
                Err(e) => first = Err(e),
                Ok(()) => {}
            }
        }
        first
    }
}

impl Drop for Finish<'_, '_> {
    fn drop(&mut self) {
        // Unwinding out of the scope: the proxy must be done with the lent buffers before
        // their owners' frames go. (`wait_for` returns only once answered or the proxy
        // thread is joined.)
        if !self.posted.borrow().is_empty() {
            let _ = self.finish();
        }
    }
}

/// [`Proxy::scope`].
pub(super) fn run<'s, R>(
    proxy: &Proxy,
    comm: CommId,
    f: impl for<'p> FnOnce(&'p ProxyScope<'p, 's>) -> Result<R>,
) -> Result<R> {
    let s = ProxyScope {
        proxy,
        comm,
        posted: RefCell::new(Vec::new()),
        _s: PhantomData,
    };
    let fin = Finish {
        proxy,
        posted: &s.posted,
    };
    let out = f(&s);
    let rest = fin.finish();
    out.and_then(|r| rest.map(|()| r))
}

impl<'p, 's> ProxyScope<'p, 's> {
    /// The proxy.
    pub fn proxy(&self) -> &'p Proxy {
        self.proxy
    }

    fn post(&self, msg: impl FnOnce(u64) -> Msg) -> Result<Ticket<'p>> {
        let id = self.proxy.post(msg)?;
        self.posted.borrow_mut().push(id);
        Ok(Ticket {
            proxy: self.proxy,
            id,
            status: None,
            claimed: false,
        })
    }

    /// Posts the start of an operation on the proxy's scope.
    fn start(
        &self,
        f: impl for<'r, 'x, 'c> FnOnce(
            &'r crate::coll::nb::Scope<'x, 'c>,
        ) -> Result<crate::p2p::Request<'r>>
        + Send
        + 'static,
    ) -> Result<Ticket<'p>> {
        self.post(|id| Msg::Work(Work::Start(id, self.comm, Box::new(f))))
    }

    /// The node proxy's end of this rank, if that is the proxy.
    fn node(&self) -> Option<&'p node::Client> {
        match &self.proxy.link {
            Link::Node(c) => Some(c),
            Link::Thread { .. } => None,
        }
    }

    /// Posts an operation to the node proxy.
    fn post_entry(&self, e: Entry) -> Result<Ticket<'p>> {
        self.post(|id| {
            Msg::Entry(Entry {
                id,
                comm: self.comm,
                ..e
            })
        })
    }

    /// Runs `f` on the proxy thread with the rank's communicator (the seed's command channel:
    /// a blocking collective, a segment, a model query), between the proxy's polls, and
    /// returns its result. Blocks until it has run. Like every blocking call on the
    /// communicator, it first finishes the collectives posted before it.
    pub fn run<T: Send, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&Comm<'_>) -> Result<T> + Send + 's,
    {
        // The command and its answer stay in this frame; the proxy gets a pointer to them and
        // the one function that knows their type (a plain function pointer: no lifetime).
        let mut cell: Command<F, T> = (Some(f), None);
        let lent = Erased(NonNull::from(&mut cell).cast());
        let call: unsafe fn(NonNull<()>, &Comm<'_>) = call_command::<F, T>;
        if self.node().is_some() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a command (a closure of this process) cannot run on the node proxy, another \
                 process: post the operation instead (ibarrier, iallreduce, ...), or use a \
                 progress thread (TCA_PROGRESS=thread)",
            ));
        }
        let mut t = self.post(|id| {
            Msg::Work(Work::Run(
                id,
                self.comm,
                Box::new(move |c: &Comm<'_>| {
                    let lent = lent;
                    // SAFETY: `lent` points at `cell`, whose frame waits for this work's
                    // answer below; `call` is `call_command` of its own type.
                    unsafe { call(lent.0, c) };
                    Ok(Status::send())
                }),
            ))
        })?;
        t.wait()?;
        cell.1.unwrap_or_else(|| {
            Err(Error::new(
                ErrorKind::Aborted,
                "the proxy answered a command it did not run",
            ))
        })
    }

    /// Posts a start of `chain` (its puts, then its signal): the ticket completes once its
    /// puts are in their destinations and the signal raised. Node proxy only.
    pub fn istart(&self, chain: &'s ProxyChain<'_>) -> Result<Ticket<'p>> {
        self.istart_op(chain, None)
    }

    /// [`ProxyScope::istart`] with the chain's final signal's operation replaced by `op`
    /// (a fresh sequence number per start, say).
    pub fn istart_with(&self, chain: &'s ProxyChain<'_>, op: SignalOp) -> Result<Ticket<'p>> {
        self.istart_op(chain, Some(op))
    }

    fn istart_op(&self, chain: &ProxyChain<'_>, op: Option<SignalOp>) -> Result<Ticket<'p>> {
        if self.node().is_none() {
            return Err(node::thread_has_world("a chain"));
        }
        if self.comm != super::serve::WORLD {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a chain is started in a scope of the proxy (its puts name segments, not \
                 ranks of a communicator)",
            ));
        }
        let e = chain.start_entry(self.proxy, op)?;
        self.post_entry(e)
    }

    /// Posts [`Comm::broadcast`].
    pub fn ibroadcast<T: Element>(&self, buf: &'s mut [T], root: u32) -> Result<Ticket<'p>> {
        if let Some(c) = self.node() {
            return self.post_entry(Entry {
                recv: c.place(buf)?,
                peer: root,
                ..Entry::start::<T>(What::Broadcast)
            });
        }
        // SAFETY: lent for `'s` to work posted in this scope (module docs).
        let buf = unsafe { LentMut::new(buf) };
        self.start(move |s| s.ibroadcast(buf.get(), root))
    }

    /// Posts [`Comm::scatter`].
    pub fn iscatter<T: Element>(
        &self,
        send: &'s [T],
        recv: &'s mut [T],
        root: u32,
    ) -> Result<Ticket<'p>> {
        if let Some(c) = self.node() {
            return self.post_entry(Entry {
                send: c.place(send)?,
                recv: c.place(recv)?,
                peer: root,
                ..Entry::start::<T>(What::Scatter)
            });
        }
        // SAFETY: lent for `'s` to work posted in this scope (module docs).
        let (send, recv) = unsafe { (Lent::new(send), LentMut::new(recv)) };
        self.start(move |s| s.iscatter(send.get(), recv.get(), root))
    }

    /// Posts [`Comm::gather`].
    pub fn igather<T: Element>(
        &self,
        send: &'s [T],
        recv: &'s mut [T],
        root: u32,
    ) -> Result<Ticket<'p>> {
        if let Some(c) = self.node() {
            return self.post_entry(Entry {
                send: c.place(send)?,
                recv: c.place(recv)?,
                peer: root,
                ..Entry::start::<T>(What::Gather)
            });
        }
        // SAFETY: lent for `'s` to work posted in this scope (module docs).
        let (send, recv) = unsafe { (Lent::new(send), LentMut::new(recv)) };
        self.start(move |s| s.igather(send.get(), recv.get(), root))
    }

    /// Posts [`Comm::reduce`].
    pub fn ireduce<T: Element>(
        &self,
        send: &'s [T],
        recv: &'s mut [T],
        op: &'s Op<T>,
        root: u32,
    ) -> Result<Ticket<'p>> {
        if let Some(c) = self.node() {
            return self.post_entry(Entry {
                send: c.place(send)?,
                recv: c.place(recv)?,
                op: op_code(op)?,
                peer: root,
                ..Entry::start::<T>(What::Reduce)
            });
        }
        // SAFETY: lent for `'s` to work posted in this scope (module docs).
        let (send, recv, op) = unsafe { (Lent::new(send), LentMut::new(recv), Lent::new(op)) };
        self.start(move |s| s.ireduce(send.get(), recv.get(), op.get(), root))
    }

    /// Posts [`Comm::allgather`].
    pub fn iallgather<T: Element>(&self, send: &'s [T], recv: &'s mut [T]) -> Result<Ticket<'p>> {
        if let Some(c) = self.node() {
            return self.post_entry(Entry {
                send: c.place(send)?,
                recv: c.place(recv)?,
                ..Entry::start::<T>(What::Allgather)
            });
        }
        // SAFETY: lent for `'s` to work posted in this scope (module docs).
        let (send, recv) = unsafe { (Lent::new(send), LentMut::new(recv)) };
        self.start(move |s| s.iallgather(send.get(), recv.get()))
    }

    /// Posts [`Comm::allgatherv_in_place`]: this rank's block already in place in `recv`.
    /// Through the node proxy `counts` and `displs` lie in its memory too: a
    /// `proxy.alloc::<u64>(p)` seen through [`super::ProxyBuf::as_usize`].
    pub fn iallgatherv_in_place<T: Element>(
        &self,
        recv: &'s mut [T],
        counts: &'s [usize],
        displs: &'s [usize],
    ) -> Result<Ticket<'p>> {
        if let Some(c) = self.node() {
            if counts.len() != displs.len() {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("{} counts and {} displacements", counts.len(), displs.len()),
                ));
            }
            // Counts and displacements cross in arenas too (`ProxyBuf::as_usize`).
            let displs = c.place(displs)?;
            return self.post_entry(Entry {
                send: c.place(counts)?,
                recv: c.place(recv)?,
                arg: displs.packed(),
                ..Entry::start::<T>(What::AllgathervInPlace)
            });
        }
        // SAFETY: lent for `'s` to work posted in this scope (module docs).
        let (recv, counts, displs) =
            unsafe { (LentMut::new(recv), Lent::new(counts), Lent::new(displs)) };
        self.start(move |s| s.iallgatherv_in_place(recv.get(), counts.get(), displs.get()))
    }

    /// Posts [`Comm::allreduce`].
    pub fn iallreduce<T: Element>(
        &self,
        send: &'s [T],
        recv: &'s mut [T],
        op: &'s Op<T>,
    ) -> Result<Ticket<'p>> {
        if let Some(c) = self.node() {
            return self.post_entry(Entry {
                send: c.place(send)?,
                recv: c.place(recv)?,
                op: op_code(op)?,
                ..Entry::start::<T>(What::Allreduce)
            });
        }
        // SAFETY: lent for `'s` to work posted in this scope (module docs).
        let (send, recv, op) = unsafe { (Lent::new(send), LentMut::new(recv), Lent::new(op)) };
        self.start(move |s| s.iallreduce(send.get(), recv.get(), op.get()))
    }

    /// Posts [`Comm::allreduce_in_place`].
    pub fn iallreduce_in_place<T: Element>(
        &self,
        buf: &'s mut [T],
        op: &'s Op<T>,
    ) -> Result<Ticket<'p>> {
        if let Some(c) = self.node() {
            return self.post_entry(Entry {
                recv: c.place(buf)?,
                op: op_code(op)?,
                ..Entry::start::<T>(What::AllreduceInPlace)
            });
        }
        // SAFETY: lent for `'s` to work posted in this scope (module docs).
        let (buf, op) = unsafe { (LentMut::new(buf), Lent::new(op)) };
        self.start(move |s| s.iallreduce_in_place(buf.get(), op.get()))
    }

    /// Posts [`Comm::barrier`].
    pub fn ibarrier(&self) -> Result<Ticket<'p>> {
        if self.node().is_some() {
            return self.post_entry(Entry::start::<u8>(What::Barrier));
        }
        self.start(|s| s.ibarrier())
    }

    /// Posts [`Comm::reduce_scatter`].
    pub fn ireduce_scatter<T: Element>(
        &self,
        send: &'s [T],
        recv: &'s mut [T],
        op: &'s Op<T>,
    ) -> Result<Ticket<'p>> {
        if let Some(c) = self.node() {
            return self.post_entry(Entry {
                send: c.place(send)?,
                recv: c.place(recv)?,
                op: op_code(op)?,
                ..Entry::start::<T>(What::ReduceScatter)
            });
        }
        // SAFETY: lent for `'s` to work posted in this scope (module docs).
        let (send, recv, op) = unsafe { (Lent::new(send), LentMut::new(recv), Lent::new(op)) };
        self.start(move |s| s.ireduce_scatter(send.get(), recv.get(), op.get()))
    }

    /// Posts [`Comm::alltoall`].
    pub fn ialltoall<T: Element>(&self, send: &'s [T], recv: &'s mut [T]) -> Result<Ticket<'p>> {
        if let Some(c) = self.node() {
            return self.post_entry(Entry {
                send: c.place(send)?,
                recv: c.place(recv)?,
                ..Entry::start::<T>(What::Alltoall)
            });
        }
        // SAFETY: lent for `'s` to work posted in this scope (module docs).
        let (send, recv) = unsafe { (Lent::new(send), LentMut::new(recv)) };
        self.start(move |s| s.ialltoall(send.get(), recv.get()))
    }

    /// Posts a send ([`Comm::isend`]); the proxy copies or sends `buf` while the scope lasts.
    pub fn isend<T: Element>(&self, buf: &'s [T], dst: u32, tag: i32) -> Result<Ticket<'p>> {
        if let Some(c) = self.node() {
            return self.post_entry(Entry {
                send: c.place(buf)?,
                peer: dst,
                tag,
                ..Entry::start::<T>(What::Send)
            });
        }
        // SAFETY: lent for `'s` to work posted in this scope (module docs).
        let buf = unsafe { Lent::new(buf) };
        self.start(move |s| s.comm().isend(buf.get(), dst, tag))
    }

    /// Posts a receive ([`Comm::irecv`]); the ticket's status tells source, tag and length.
    pub fn irecv<T: Element>(
        &self,
        buf: &'s mut [T],
        src: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Ticket<'p>> {
        let (src, tag) = (src.into(), tag.into());
        if let Some(c) = self.node() {
            return self.post_entry(Entry {
                recv: c.place(buf)?,
                peer: match src {
                    Source::Any => ANY,
                    Source::Rank(r) => r,
                },
                tag: match tag {
                    Tag::Any => 0,
                    Tag::Is(t) => t,
                },
                any_tag: u16::from(tag == Tag::Any),
                ..Entry::start::<T>(What::Recv)
            });
        }
        // SAFETY: lent for `'s` to work posted in this scope (module docs).
        let buf = unsafe { LentMut::new(buf) };
        self.start(move |s| s.comm().irecv(buf.get(), src, tag))
    }
}
