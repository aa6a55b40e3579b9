//! Non-blocking collectives: every algorithm of the table, started now and finished later,
//! from the same `async` description the blocking call runs (one source: a blocking call
//! polls the algorithm on its stack with waiting steps; a non-blocking one boxes it and polls
//! it with trying steps, see the `step` module).
//!
//! # Scopes and requests
//! [`Comm::scope`] opens a scope, as `std::thread::scope` does: requests started in it
//! (`s.iallreduce(..)`) borrow their buffers for the scope's lifetime, so the borrow checker —
//! not the documentation — keeps a buffer alive and untouched while its collective may still
//! write or read it, and the scope finishes every request before it returns (a dropped or
//! forgotten request is completed there, never left writing into freed memory). The request
//! is the two-sided layer's [`Request`] (`MPI_Request` for both, as in MPI): a collective's
//! and a send's or receive's can be waited for together ([`crate::p2p::wait_all`],
//! [`crate::p2p::wait_any`], [`crate::p2p::test_all`]).
//!
//! # Order and progress
//! A communicator's chunks to a peer travel in one ordered channel, and every member starts
//! the collectives in the same order (MPI's rule), so the started collectives progress in
//! that order: a call to [`Request::test`], [`Request::wait`] or [`Scope::progress`] polls the
//! oldest unfinished one until it must wait, and the next ones only once it is done. Waiting
//! for a later request first finishes the earlier ones (the caller may wait in any order). A
//! blocking collective called on the communicator inside a scope first finishes the started
//! ones. The two-sided layer's waits (a receive, a send, a request's `wait`, `wait_any`,
//! `wait_all`) move the started collectives on while they wait for their message, since a
//! peer may finish its part of a collective before it sends. Progress happens in these
//! calls: a rank that computes without calling tca leaves its collectives where they are
//! (its peers' steps wait for it).
//!
//! The borrow checker enforces the rule that a buffer is left alone while its collective
//! runs:
//!
//! ```compile_fail
//! # fn f(c: &tca::Comm) -> tca::Result<()> {
//! let mut x = vec![1.0f64; 8];
//! c.scope(|s| {
//!     let mut r = s.iallreduce_in_place(&mut x, &tca::Op::Sum)?;
//!     x[0] = 2.0; // error: `x` is borrowed by the started allreduce
//!     r.wait().map(drop)
//! })
//! # }
//! ```
//!
//! # Errors
//! An error of a started collective is returned by its request's `test` or `wait`; one whose
//! request was dropped is returned when the scope ends. After an error, the collectives
//! started after it fail at once (the communicator is left inconsistent, as after a blocking
//! collective's error).

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::task::{Context, Poll, Waker};

use super::registry::{Kernel, Run};
use super::step::{Start, Steps};
use super::{Collective, Comm, Element, Op, Reducer, direct, len_error, op};
use crate::error::{Error, ErrorKind, Result};
use crate::p2p::Request;

/// The started collectives of a scope, oldest first.
struct Ops<'s> {
    slots: RefCell<Vec<Slot<'s>>>,
    /// The first slot not finished.
    head: Cell<usize>,
    /// Set while a slot is polled: a poll does not start another (a reduction op that waits
    /// on a request gets an error, not a second mutable use of the channels).
    polling: Cell<bool>,
}

impl std::fmt::Debug for Ops<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ops")
            .field("started", &self.slots.borrow().len())
            .field("finished", &self.head.get())
            .finish()
    }
}

struct Slot<'s> {
    /// The run, until it finishes.
    run: Option<Run<'s>>,
    /// Its outcome once finished, until a `test` or `wait` (or the scope's end) takes it.
    done: Option<Result<()>>,
}

/// What a request needs of its scope's started collectives (their lifetime erased): the
/// collective form of [`crate::p2p::Request`].
pub(crate) trait Drive {
    fn drive(&self, comm: &Comm<'_>, upto: usize, block: bool) -> Result<()>;
    fn take(&self, i: usize) -> Option<Result<()>>;
    fn finished(&self, i: usize) -> bool;
}

impl Drive for Ops<'_> {
    /// Polls the unfinished runs in order, up to and including slot `upto`, stopping at the
    /// first that cannot go on (`block`: none stops; each waits until it is done).
    fn drive(&self, comm: &Comm<'_>, upto: usize, block: bool) -> Result<()> {
        if self.polling.get() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a non-blocking collective was tested or waited for from inside a collective \
                 (a reduction op)",
            ));
        }
        if !block && self.head.get() < self.slots.borrow().len() {
            // A network transport moves data only while polled, and trying steps do not wait
            // (waiting ones poll it in their wait): what peers sent since the last test gets
            // in here. Over shared memory this checks nothing but the job monitor.
            comm.world.progress()?;
        }
        let mut cx = Context::from_waker(Waker::noop());
        while self.head.get() <= upto {
            let i = self.head.get();
            let Some(run) = self.slots.borrow_mut().get_mut(i).map(|s| s.run.take()) else {
                break; // nothing started there
            };
            let Some(mut run) = run else {
                // Finished when it started (an empty buffer, one rank) while an older one
                // was still running: nothing to poll, the next one may go.
                self.head.set(i + 1);
                continue;
            };
            let polled = {
                let _mode = Polling::new(&self.polling, &comm.nb, block);
                run.as_mut().poll(&mut cx)
            };
            let mut slots = self.slots.borrow_mut();
            match polled {
                Poll::Ready(r) => {
                    let r = comm.run(r);
                    let failed = r.is_err();
                    slots[i].done = Some(r);
                    self.head.set(i + 1);
                    if failed {
                        // The channels are in an unknown state: what was started after it
                        // cannot run.
                        for s in slots.iter_mut().skip(i + 1) {
                            if s.run.take().is_some() {
                                s.done = Some(Err(Error::new(
                                    ErrorKind::Aborted,
                                    "an earlier non-blocking collective of this communicator \
                                     failed",
                                )));
                            }
                        }
                        self.head.set(slots.len());
                    }
                }
                Poll::Pending => {
                    slots[i].run = Some(run);
                    if !block {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes slot `i`'s outcome if it has finished.
    fn take(&self, i: usize) -> Option<Result<()>> {
        self.slots.borrow_mut()[i].done.take()
    }

    fn finished(&self, i: usize) -> bool {
        i < self.head.get()
    }
}

/// The mode of one poll, set for its duration (and reset on unwind: a communicator left in
/// non-blocking mode would make its blocking calls spin).
struct Polling<'a> {
    polling: &'a Cell<bool>,
    nb: &'a Cell<bool>,
}

impl<'a> Polling<'a> {
    fn new(polling: &'a Cell<bool>, nb: &'a Cell<bool>, block: bool) -> Self {
        polling.set(true);
        nb.set(!block);
        Self { polling, nb }
    }
}

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        self.nb.set(false);
        self.polling.set(false);
    }
}

/// A scope of non-blocking collectives on one communicator: see [`Comm::scope`] and the
/// module's documentation. Buffers are borrowed for `'s`, which outlives the scope.
#[derive(Debug)]
pub struct Scope<'s, 'c: 's> {
    comm: &'c Comm<'c>,
    ops: Ops<'s>,
    /// Invariant in `'s`, as `std::thread::Scope`.
    _scope: PhantomData<&'s mut &'s ()>,
}

impl<'w> Comm<'w> {
    /// Runs `f` with a scope in which non-blocking collectives can be started
    /// (`s.iallreduce(..)`, …); every one started is finished before this returns. Returns
    /// `f`'s error, else the error of a collective whose request was dropped unfinished.
    /// Scopes do not nest on one communicator.
    ///
    /// ```no_run
    /// # fn f(c: &tca::Comm) -> tca::Result<()> {
    /// let mut x = vec![1.0f64; 1 << 16];
    /// c.scope(|s| {
    ///     let mut r = s.iallreduce_in_place(&mut x, &tca::Op::Sum)?;
    ///     // ... compute, calling r.test() now and then ...
    ///     r.wait().map(drop)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn scope<'s, 'c: 's, R>(
        &'c self,
        f: impl for<'r> FnOnce(&'r Scope<'s, 'c>) -> Result<R>,
    ) -> Result<R> {
        if self.scope.get().is_some() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a scope of non-blocking collectives is already open on this communicator",
            ));
        }
        let comm: &'c Comm<'c> = self;
        let s = Scope {
            comm,
            ops: Ops {
                slots: RefCell::new(Vec::new()),
                head: Cell::new(0),
                polling: Cell::new(false),
            },
            _scope: PhantomData,
        };
        // Dropped before `s` (declared after it): the communicator forgets the scope first.
        let _open = Open::new(comm, &s.ops);
        let out = f(&s);
        // Finish what is left, dropped requests included; their errors are reported unless
        // `f` has one of its own.
        let end = s.ops.drive(self, usize::MAX, true);
        let started = s.ops.slots.borrow().len();
        let left = (0..started).find_map(|i| s.ops.take(i)?.err());
        match (out, end) {
            (Err(e), _) | (Ok(_), Err(e)) => Err(e),
            (Ok(v), Ok(())) => left.map_or(Ok(v), Err),
        }
    }

    /// Finishes the collectives started in an open scope (called before a blocking one).
    #[inline]
    pub(crate) fn settle(&self) -> Result<()> {
        match self.scope.get() {
            None => Ok(()),
            Some(open) => open.with(|ops| ops.drive(self, usize::MAX, true)),
        }
    }

    /// Moves the collectives started in an open scope on without waiting: what the
    /// two-sided layer's waits run on their passes, since a peer may need this rank's part of
    /// a collective before it sends what the wait is for.
    #[inline]
    pub(crate) fn progress_scope(&self) -> Result<()> {
        match self.scope.get() {
            None => Ok(()),
            Some(open) => open.with(|ops| ops.drive(self, usize::MAX, false)),
        }
    }

    /// Whether an open scope has started collectives that have not finished.
    pub(crate) fn scope_pending(&self) -> bool {
        self.scope
            .get()
            .is_some_and(|open| open.with(|ops| ops.head.get() < ops.slots.borrow().len()))
    }
}

/// The open scope of a communicator, as the communicator sees it: a pointer to its started
/// collectives, so that a blocking collective can finish them first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpenScope(NonNull<()>);

impl OpenScope {
    /// Runs `f` on the open scope's started collectives.
    #[allow(unsafe_code)] // the one dereference of the open scope's pointer
    fn with<R>(self, f: impl FnOnce(&Ops<'_>) -> R) -> R {
        // SAFETY: the pointer is to the `Ops` of the scope open on this communicator; `Open`
        // sets it when the scope's `Ops` exists and clears it (on return and on unwind)
        // before they are dropped, and a communicator is used from one thread (`Comm` is not
        // `Sync`), so they outlive this call. `f` cannot keep the reference (its lifetime is
        // this call's), and `Ops` uses nothing of the lifetime `'s` but the runs it polls,
        // which live as long as the `Ops`.
        f(unsafe { self.0.cast::<Ops<'_>>().as_ref() })
    }
}

/// Registers a scope's `Ops` with its communicator for the scope's duration.
struct Open<'a> {
    comm: &'a Comm<'a>,
}

impl<'a> Open<'a> {
    fn new(comm: &'a Comm<'a>, ops: &'a Ops<'_>) -> Self {
        // The pointer outlives nothing: `Drop` clears it before `ops` goes.
        comm.scope.set(Some(OpenScope(NonNull::from(ops).cast())));
        Self { comm }
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.comm.scope.set(None);
    }
}

/// An 8-aligned copy of `bytes` (a reduction's work buffer: reductions combine elements in
/// place).
fn work_copy(bytes: &[u8]) -> Vec<u64> {
    let mut w = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut w)[..bytes.len()].copy_from_slice(bytes);
    w
}

fn work_bytes(w: &mut [u64], n: usize) -> &mut [u8] {
    &mut bytemuck::cast_slice_mut::<u64, u8>(w)[..n]
}

impl<'s, 'c: 's> Scope<'s, 'c> {
    /// The communicator.
    pub fn comm(&self) -> &'c Comm<'c> {
        self.comm
    }

    /// Polls the started collectives without waiting (for a caller that computes between
    /// calls and wants its collectives to move meanwhile).
    pub fn progress(&self) -> Result<()> {
        self.ops.drive(self.comm, usize::MAX, false)
    }

    fn push(&self, run: Option<Run<'s>>) -> Request<'_> {
        let mut slots = self.ops.slots.borrow_mut();
        let i = slots.len();
        let failed = i > 0
            && i == self.ops.head.get()
            && slots[i - 1].done.as_ref().is_some_and(Result::is_err);
        let done = match (&run, failed) {
            (None, _) => Some(Ok(())),
            (Some(_), true) => Some(Err(Error::new(
                ErrorKind::Aborted,
                "an earlier non-blocking collective of this communicator failed",
            ))),
            (Some(_), false) => None,
        };
        let finished = done.is_some();
        slots.push(Slot {
            run: if finished { None } else { run },
            done,
        });
        if finished && self.ops.head.get() == i {
            self.ops.head.set(i + 1);
        }
        Request::collective(self.comm, &self.ops, i)
    }

    /// Non-blocking [`Comm::broadcast`].
    pub fn ibroadcast<T: Element>(&self, buf: &'s mut [T], root: u32) -> Result<Request<'_>> {
        let c = self.comm;
        let root = c.check_root(root)?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        if bytes.is_empty() || c.p() == 1 {
            return Ok(self.push(None));
        }
        let f = kernel!(start c, Broadcast, bytes.len());
        if c.direct_started(Collective::Broadcast, bytes.len())? {
            return Ok(self.push(Some(Box::pin(async move {
                if direct::broadcast(Steps::<Start>::new(c), bytes, root).await? {
                    return Ok(());
                }
                f(c, bytes, root).await
            }))));
        }
        Ok(self.push(Some(f(c, bytes, root))))
    }

    /// Non-blocking [`Comm::scatter`].
    pub fn iscatter<T: Element>(
        &self,
        send: &'s [T],
        recv: &'s mut [T],
        root: u32,
    ) -> Result<Request<'_>> {
        let c = self.comm;
        let root = c.check_rooted(root, "scatter send buffer", recv.len() * c.p(), send.len())?;
        let (s, r): (&[u8], &mut [u8]) =
            (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        if r.is_empty() || c.p() == 1 {
            r.copy_from_slice(&s[..r.len().min(s.len())]);
            return Ok(self.push(None));
        }
        let f = kernel!(start c, Scatter, r.len());
        if c.direct_started(Collective::Scatter, r.len())? {
            return Ok(self.push(Some(Box::pin(async move {
                if direct::scatter(Steps::<Start>::new(c), s, r, root).await? {
                    return Ok(());
                }
                f(c, s, r, root).await
            }))));
        }
        Ok(self.push(Some(f(c, s, r, root))))
    }

    /// Non-blocking [`Comm::gather`].
    pub fn igather<T: Element>(
        &self,
        send: &'s [T],
        recv: &'s mut [T],
        root: u32,
    ) -> Result<Request<'_>> {
        let c = self.comm;
        let root = c.check_rooted(
            root,
            "gather receive buffer",
            send.len() * c.p(),
            recv.len(),
        )?;
        let (s, r): (&[u8], &mut [u8]) =
            (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        if s.is_empty() || c.p() == 1 {
            let n = s.len().min(r.len());
            r[..n].copy_from_slice(&s[..n]);
            return Ok(self.push(None));
        }
        let f = kernel!(start c, Gather, s.len());
        if c.direct_started(Collective::Gather, s.len())? {
            return Ok(self.push(Some(Box::pin(async move {
                if direct::gather(Steps::<Start>::new(c), s, r, root).await? {
                    return Ok(());
                }
                f(c, s, r, root).await
            }))));
        }
        Ok(self.push(Some(f(c, s, r, root))))
    }

    /// Non-blocking [`Comm::reduce`].
    pub fn ireduce<T: Element>(
        &self,
        send: &'s [T],
        recv: &'s mut [T],
        op: &'s Op<T>,
        root: u32,
    ) -> Result<Request<'_>> {
        let c = self.comm;
        let root = c.check_root(root)?;
        op.check()?;
        if c.me == root && recv.len() != send.len() {
            c.fail(len_error("reduce receive buffer", send.len(), recv.len()))?;
        }
        let s: &[u8] = bytemuck::cast_slice(send);
        if s.is_empty() || c.p() == 1 {
            if c.me == root {
                recv.copy_from_slice(send);
            }
            return Ok(self.push(None));
        }
        let f = kernel!(start c, Reduce, s.len());
        let n = s.len();
        let single = c.direct_started(Collective::Reduce, n)?;
        // The channel algorithms reduce in place: into a copy of `send`, taken now.
        let mut work = if single { Vec::new() } else { work_copy(s) };
        let me_root = c.me == root;
        let recv: &'s mut [u8] = bytemuck::cast_slice_mut(recv);
        Ok(self.push(Some(Box::pin(async move {
            let comb = op::byte_combiner(op);
            let red = Reducer::new(std::mem::size_of::<T>(), &comb);
            if single {
                if direct::reduce(Steps::<Start>::new(c), s, recv, &red, root).await? {
                    return Ok(());
                }
                work = work_copy(s);
            }
            f(c, work_bytes(&mut work, n), &red, root).await?;
            if me_root {
                recv.copy_from_slice(work_bytes(&mut work, n));
            }
            Ok(())
        }))))
    }

    /// Non-blocking [`Comm::allgather`].
    pub fn iallgather<T: Element>(&self, send: &'s [T], recv: &'s mut [T]) -> Result<Request<'_>> {
        let c = self.comm;
        let p = c.p();
        if recv.len() != send.len() * p {
            c.fail(len_error(
                "allgather receive buffer",
                send.len() * p,
                recv.len(),
            ))?;
        }
        let n = send.len();
        let bytes = std::mem::size_of_val(send);
        // The single-copy path places this rank's own block itself (see `Comm::allgather`).
        if bytes > 0 && p > 1 && c.direct_started(Collective::Allgather, bytes)? {
            let f = kernel!(start c, Allgather, bytes);
            let (s, r): (&'s [u8], &'s mut [u8]) =
                (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
            return Ok(self.push(Some(Box::pin(async move {
                if direct::allgather(Steps::<Start>::new(c), s, r).await? {
                    return Ok(());
                }
                let counts = vec![bytes; p];
                let displs: Vec<usize> = (0..p).map(|q| q * bytes).collect();
                f(c, r, &counts, &displs).await
            }))));
        }
        recv[c.me * n..(c.me + 1) * n].copy_from_slice(send);
        let counts = vec![bytes; p];
        let displs = (0..p).map(|r| r * bytes).collect();
        self.allgather_bytes(bytemuck::cast_slice_mut(recv), counts, displs)
    }

    /// Non-blocking [`Comm::allgatherv_in_place`].
    pub fn iallgatherv_in_place<T: Element>(
        &self,
        recv: &'s mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<Request<'_>> {
        let c = self.comm;
        c.check_v(recv.len(), counts, displs)?;
        let sz = std::mem::size_of::<T>();
        let counts = counts.iter().map(|x| x * sz).collect();
        let displs = displs.iter().map(|x| x * sz).collect();
        self.allgather_bytes(bytemuck::cast_slice_mut(recv), counts, displs)
    }

    fn allgather_bytes(
        &self,
        recv: &'s mut [u8],
        counts: Vec<usize>,
        displs: Vec<usize>,
    ) -> Result<Request<'_>> {
        let c = self.comm;
        let total: usize = counts.iter().sum();
        if total == 0 || c.p() == 1 {
            return Ok(self.push(None));
        }
        let f = kernel!(start c, Allgather, total / c.p());
        Ok(self.push(Some(Box::pin(
            async move { f(c, recv, &counts, &displs).await },
        ))))
    }

    /// Non-blocking [`Comm::allreduce`].
    pub fn iallreduce<T: Element>(
        &self,
        send: &'s [T],
        recv: &'s mut [T],
        op: &'s Op<T>,
    ) -> Result<Request<'_>> {
        let c = self.comm;
        if recv.len() != send.len() {
            c.fail(len_error(
                "allreduce receive buffer",
                send.len(),
                recv.len(),
            ))?;
        }
        let bytes = std::mem::size_of_val(send);
        if bytes > 0 && c.p() > 1 && c.direct_started(Collective::Allreduce, bytes)? {
            op.check()?;
            let f = kernel!(start c, Allreduce, bytes);
            let (s, r): (&'s [u8], &'s mut [u8]) =
                (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
            return Ok(self.push(Some(Box::pin(async move {
                let comb = op::byte_combiner(op);
                let red = Reducer::new(std::mem::size_of::<T>(), &comb);
                if direct::allreduce(Steps::<Start>::new(c), s, r, &red).await? {
                    return Ok(());
                }
                r.copy_from_slice(s);
                f(c, r, &red).await
            }))));
        }
        recv.copy_from_slice(send);
        self.iallreduce_in_place(recv, op)
    }

    /// Non-blocking [`Comm::allreduce_in_place`].
    pub fn iallreduce_in_place<T: Element>(
        &self,
        buf: &'s mut [T],
        op: &'s Op<T>,
    ) -> Result<Request<'_>> {
        let c = self.comm;
        op.check()?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        if bytes.is_empty() || c.p() == 1 {
            return Ok(self.push(None));
        }
        let f = kernel!(start c, Allreduce, bytes.len());
        Ok(self.push(Some(Box::pin(async move {
            let comb = op::byte_combiner(op);
            let red = Reducer::new(std::mem::size_of::<T>(), &comb);
            f(c, bytes, &red).await
        }))))
    }

    /// Non-blocking [`Comm::barrier`]: finished once every rank has started it.
    pub fn ibarrier(&self) -> Result<Request<'_>> {
        let c = self.comm;
        if c.p() == 1 {
            return Ok(self.push(None));
        }
        let f = kernel!(start c, Barrier, 0);
        Ok(self.push(Some(f(c))))
    }

    /// Non-blocking [`Comm::reduce_scatter`].
    pub fn ireduce_scatter<T: Element>(
        &self,
        send: &'s [T],
        recv: &'s mut [T],
        op: &'s Op<T>,
    ) -> Result<Request<'_>> {
        let c = self.comm;
        op.check()?;
        if send.len() != recv.len() * c.p() {
            c.fail(len_error(
                "reduce_scatter send buffer",
                recv.len() * c.p(),
                send.len(),
            ))?;
        }
        let s: &[u8] = bytemuck::cast_slice(send);
        let r: &'s mut [u8] = bytemuck::cast_slice_mut(recv);
        if r.is_empty() || c.p() == 1 {
            r.copy_from_slice(s);
            return Ok(self.push(None));
        }
        let f = kernel!(start c, ReduceScatter, r.len());
        let n = s.len();
        let single = c.direct_started(Collective::ReduceScatter, r.len())?;
        // The channel algorithms reduce in place: into a copy of `send`, taken now.
        let mut work = if single { Vec::new() } else { work_copy(s) };
        Ok(self.push(Some(Box::pin(async move {
            let comb = op::byte_combiner(op);
            let red = Reducer::new(std::mem::size_of::<T>(), &comb);
            if single {
                if direct::reduce_scatter(Steps::<Start>::new(c), s, r, &red).await? {
                    return Ok(());
                }
                work = work_copy(s);
            }
            f(c, work_bytes(&mut work, n), r, &red).await
        }))))
    }

    /// Non-blocking [`Comm::alltoall`].
    pub fn ialltoall<T: Element>(&self, send: &'s [T], recv: &'s mut [T]) -> Result<Request<'_>> {
        let c = self.comm;
        c.check_alltoall(send.len(), recv.len())?;
        let (s, r): (&[u8], &mut [u8]) =
            (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        if s.is_empty() || c.p() == 1 {
            r.copy_from_slice(s);
            return Ok(self.push(None));
        }
        let f = kernel!(start c, Alltoall, s.len() / c.p());
        if c.direct_started(Collective::Alltoall, s.len() / c.p())? {
            return Ok(self.push(Some(Box::pin(async move {
                if direct::alltoall(Steps::<Start>::new(c), s, r).await? {
                    return Ok(());
                }
                f(c, s, r).await
            }))));
        }
        Ok(self.push(Some(f(c, s, r))))
    }
}
