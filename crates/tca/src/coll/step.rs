//! The steps algorithms are written in, and the ways they run.
//!
//! Every algorithm is one `async fn run<M: Mode>(c: Steps<'_, M>, ..)`: one description of
//! its sends, receives and local work (copies and combinations through [`Site`], so that
//! every mode sees them). The mode is a type, so each algorithm is compiled three times from
//! that one source: the two below, and the counting pass's [`Count`](super::count::Count),
//! whose steps count what they would do, for the algorithm's cost model (`count`).
//!
//! - [`Block`], the blocking collective: each step waits until it is done and hands back a
//!   finished future (`std::future::Ready`), so the compiled `run` is, once inlined, close
//!   to the straight-line code of a hand-written blocking algorithm, polled once on the
//!   caller's stack ([`run_blocking`]); no allocation, no flag read per step (BENCHMARKS.md
//!   has the 8-byte figures before and after).
//! - [`Start`], the non-blocking collective ([`super::nb`]): each step goes chunk by chunk
//!   and, where a chunk cannot move yet, pays the credits this rank owes and yields; the run
//!   is boxed and polled by the scope's progress.
//!
//! A run started non-blocking and then waited for finishes blocking: its steps read the
//! communicator's mode at every poll (`Comm::nb`, set by the scope around each poll), and
//! wait in the channel's waiting functions (spin, then sleep) rather than spin on tries.
//!
//! # Scratch
//! Some algorithms hold a scratch buffer (`Comm::tmp`, a `RefCell`) across their steps. Two
//! runs on one communicator never interleave: a scope polls its oldest unfinished run and
//! starts polling the next only when that one is done, and a blocking collective first
//! finishes the open scope's runs (`Comm::settle`). So a borrow held across an `.await` is
//! never contended (a run is not polled from inside itself: `nb` refuses that).

use std::cell::RefMut;
use std::future::{Future, ready};
use std::marker::PhantomData;
use std::ops::Deref;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use super::{Comm, Reducer};
use crate::error::{Error, ErrorKind, Result};

/// How an algorithm's steps run: see the module's documentation.
pub(crate) trait Mode: Copy {
    /// What the steps act on: the communicator ([`Block`], [`Start`]), or the tally of a
    /// counting pass ([`Count`](super::count::Count)).
    type On<'a>: Site + Copy;

    /// `on` for a shorter lifetime (what covariance gives each concrete `On`).
    fn shorten<'a: 'b, 'b>(on: Self::On<'a>) -> Self::On<'b>;

    /// Sends `msg` to `to`.
    fn send<'a>(c: Self::On<'a>, to: usize, msg: &'a [u8])
    -> impl Future<Output = Result<()>> + 'a;
    /// Receives `dst.len()` bytes from `from` into `dst`, copied or combined with `red`.
    fn recv<'a>(
        c: Self::On<'a>,
        from: usize,
        dst: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a;
    /// Sends chunk `i` of `msg` to `to`.
    fn send_chunk<'a>(
        c: Self::On<'a>,
        to: usize,
        msg: &'a [u8],
        i: usize,
    ) -> impl Future<Output = Result<()>> + 'a;
    /// Receives chunk `i` of a `dst.len()`-byte message from `from`.
    fn recv_chunk<'a>(
        c: Self::On<'a>,
        from: usize,
        dst: &'a mut [u8],
        i: usize,
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a;
    /// Sends `msg` to `to` while receiving `dst` from `from`, chunk by chunk.
    fn sendrecv<'a>(
        c: Self::On<'a>,
        to: usize,
        msg: &'a [u8],
        from: usize,
        dst: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a;
    /// Sends `buf` to `to` and receives the same length from `from` into `buf` itself.
    fn sendrecv_in_place<'a>(
        c: Self::On<'a>,
        to: usize,
        from: usize,
        buf: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a;
}

/// The blocking mode: every step is done when it is made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block;

/// The non-blocking mode: steps try and yield.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Start;

impl Mode for Block {
    type On<'a> = &'a Comm<'a>;

    #[inline]
    fn shorten<'a: 'b, 'b>(on: &'a Comm<'a>) -> &'b Comm<'b> {
        on
    }

    #[inline]
    fn send<'a>(
        c: Self::On<'a>,
        to: usize,
        msg: &'a [u8],
    ) -> impl Future<Output = Result<()>> + 'a {
        ready(c.ch_send(to, msg))
    }

    #[inline]
    fn recv<'a>(
        c: Self::On<'a>,
        from: usize,
        dst: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a {
        ready(match red {
            Some(r) => c.recv_reduce(from, dst, r),
            None => c.ch_recv(from, dst),
        })
    }

    #[inline]
    fn send_chunk<'a>(
        c: Self::On<'a>,
        to: usize,
        msg: &'a [u8],
        i: usize,
    ) -> impl Future<Output = Result<()>> + 'a {
        ready(c.send_chunk(to, msg, i, true).map(drop))
    }

    #[inline]
    fn recv_chunk<'a>(
        c: Self::On<'a>,
        from: usize,
        dst: &'a mut [u8],
        i: usize,
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a {
        ready(c.recv_chunk(from, dst, i, red, true).map(drop))
    }

    #[inline]
    fn sendrecv<'a>(
        c: Self::On<'a>,
        to: usize,
        msg: &'a [u8],
        from: usize,
        dst: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a {
        ready(c.ch_sendrecv(to, msg, from, dst, red))
    }

    #[inline]
    fn sendrecv_in_place<'a>(
        c: Self::On<'a>,
        to: usize,
        from: usize,
        buf: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a {
        ready(c.sendrecv_in_place(to, from, buf, red))
    }
}

impl Mode for Start {
    type On<'a> = &'a Comm<'a>;

    #[inline]
    fn shorten<'a: 'b, 'b>(on: &'a Comm<'a>) -> &'b Comm<'b> {
        on
    }

    async fn send<'a>(c: Self::On<'a>, to: usize, msg: &'a [u8]) -> Result<()> {
        for i in 0..c.chunks(msg.len()) {
            Self::send_chunk(c, to, msg, i).await?;
        }
        Ok(())
    }

    async fn recv<'a>(
        c: Self::On<'a>,
        from: usize,
        dst: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> Result<()> {
        for i in 0..c.chunks(dst.len()) {
            recv_chunk(c, from, dst, i, red).await?;
        }
        Ok(())
    }

    fn send_chunk<'a>(
        c: Self::On<'a>,
        to: usize,
        msg: &'a [u8],
        i: usize,
    ) -> impl Future<Output = Result<()>> + 'a {
        retry(c, move |wait| c.send_chunk(to, msg, i, wait))
    }

    fn recv_chunk<'a>(
        c: Self::On<'a>,
        from: usize,
        dst: &'a mut [u8],
        i: usize,
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a {
        recv_chunk(c, from, dst, i, red)
    }

    async fn sendrecv<'a>(
        c: Self::On<'a>,
        to: usize,
        msg: &'a [u8],
        from: usize,
        dst: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> Result<()> {
        let (ns, nr) = (c.chunks(msg.len()), c.chunks(dst.len()));
        for i in 0..ns.max(nr) {
            if i < ns {
                Self::send_chunk(c, to, msg, i).await?;
            }
            if i < nr {
                recv_chunk(c, from, dst, i, red).await?;
            }
        }
        Ok(())
    }

    async fn sendrecv_in_place<'a>(
        c: Self::On<'a>,
        to: usize,
        from: usize,
        buf: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> Result<()> {
        for i in 0..c.chunks(buf.len()) {
            // Chunk i leaves before the incoming chunk i overwrites it.
            Self::send_chunk(c, to, buf, i).await?;
            recv_chunk(c, from, buf, i, red).await?;
        }
        Ok(())
    }
}

/// [`Start`]'s chunk receive (its loops call it without naming the trait).
fn recv_chunk<'a>(
    c: &'a Comm<'a>,
    from: usize,
    dst: &'a mut [u8],
    i: usize,
    red: Option<&'a Reducer<'a>>,
) -> impl Future<Output = Result<()>> + 'a {
    retry(c, move |wait| c.recv_chunk(from, dst, i, red, wait))
}

/// One step of a non-blocking collective that may have to wait for a peer: `f` tries it and
/// says whether it happened; if not, the step yields, having written back the credits this
/// rank owes (so that no peer's send waits for credits held by a rank that goes off to
/// compute). The mode is read at
/// every poll: a run started non-blocking and then waited for finishes its step blocking
/// (`f(true)` waits until it is done).
fn retry<'a>(
    c: &'a Comm<'a>,
    mut f: impl FnMut(bool) -> Result<bool> + 'a,
) -> impl Future<Output = Result<()>> + 'a {
    std::future::poll_fn(move |_| match f(!c.nb.get()) {
        Ok(true) => {
            c.step_taken();
            Poll::Ready(Ok(()))
        }
        Ok(false) => match c.ch.pay(c.world) {
            Ok(()) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        },
        Err(e) => Poll::Ready(Err(e)),
    })
}

/// The modes whose steps act on a live communicator ([`Block`], [`Start`]): their [`Steps`]
/// reach the communicator itself (through `Deref` to `&Comm`), which the single-copy
/// protocols (`direct`) need; the algorithms of the table stay generic over every [`Mode`],
/// the counting pass's too, and ask only what [`Site`] offers.
pub(crate) trait Live: for<'a> Mode<On<'a> = &'a Comm<'a>> {}

impl Live for Block {}
impl Live for Start {}

/// What an algorithm asks of the communicator besides its steps: its size and rank, its
/// chunking, its scratch buffers, its grid, and the local work between steps (copies,
/// combinations), which a counting pass counts instead of doing.
pub(crate) trait Site {
    /// Ranks.
    fn p(&self) -> usize;
    /// This rank.
    fn me(&self) -> usize;
    /// Chunks a message of `n` bytes is sent in, as the chunk loops iterate them.
    fn chunks(&self, n: usize) -> usize;
    /// Whether a message of `n` bytes spans more than one of the channel's chunks (a
    /// decision an algorithm takes by size, the same in every mode).
    fn spans_chunks(&self, n: usize) -> bool;
    /// Scratch buffer `i` (1 or 2), at least `n` bytes.
    fn tmp(&self, i: usize, n: usize) -> RefMut<'_, [u8]>;
    /// The grid of `D` dimensions the topology-aware algorithms lay the ranks out on.
    fn grid<const D: usize>(&self) -> [usize; D];
    /// `dst` = `src`: a copy within the rank.
    fn copy(&self, dst: &mut [u8], src: &[u8]);
    /// Rotates `buf` right by `k` bytes: a copy within the rank.
    fn rotate_right(&self, buf: &mut [u8], k: usize);
    /// `buf` = block 0 op block 1 op ... op block p-1 of `all`, in that order (`p` blocks of
    /// `buf.len()` bytes).
    fn combine_in_order(
        &self,
        all: &[u8],
        buf: &mut [u8],
        p: usize,
        red: &Reducer<'_>,
    ) -> Result<()>;
    /// Marks the sends from now on, until the guard drops, as going together: no credit is
    /// written after their packets, so one owed to a member a later send goes to rides with
    /// it (the ring's "Credits off the critical path"). Nothing to count.
    fn together(&self) -> Together<'_>;
}

/// Sends going together ([`Site::together`]) while this lives.
#[must_use]
pub(crate) struct Together<'a>(pub(super) Option<&'a super::channel::Channels>);

impl Drop for Together<'_> {
    fn drop(&mut self) {
        if let Some(ch) = self.0 {
            ch.together(false);
        }
    }
}

impl Site for &Comm<'_> {
    #[inline]
    fn p(&self) -> usize {
        Comm::p(self)
    }

    #[inline]
    fn me(&self) -> usize {
        Comm::me(self)
    }

    #[inline]
    fn chunks(&self, n: usize) -> usize {
        Comm::chunks(self, n)
    }

    #[inline]
    fn spans_chunks(&self, n: usize) -> bool {
        Comm::chunks(self, n) >= 2
    }

    #[inline]
    fn tmp(&self, i: usize, n: usize) -> RefMut<'_, [u8]> {
        Comm::tmp(self, i, n)
    }

    #[inline]
    fn grid<const D: usize>(&self) -> [usize; D] {
        Comm::grid(self)
    }

    #[inline]
    fn copy(&self, dst: &mut [u8], src: &[u8]) {
        dst.copy_from_slice(src);
    }

    #[inline]
    fn rotate_right(&self, buf: &mut [u8], k: usize) {
        buf.rotate_right(k);
    }

    fn combine_in_order(
        &self,
        all: &[u8],
        buf: &mut [u8],
        p: usize,
        red: &Reducer<'_>,
    ) -> Result<()> {
        let n = buf.len();
        self.world_ref().computed(n * p.saturating_sub(1));
        buf.copy_from_slice(&all[..n]);
        for q in 1..p {
            red.apply(buf, &all[q * n..(q + 1) * n])?;
        }
        Ok(())
    }

    fn together(&self) -> Together<'_> {
        self.ch.together(true);
        Together(Some(&self.ch))
    }
}

/// An algorithm's handle on what its steps act on, in mode `M`: the steps, and (through
/// `Deref` to `M::On`) what it asks besides ([`Site`]: size, rank, chunking, scratch, local
/// work); in the live modes that is the communicator itself.
pub(crate) struct Steps<'a, M: Mode> {
    on: M::On<'a>,
    _mode: PhantomData<M>,
}

impl<M: Mode> Clone for Steps<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: Mode> Copy for Steps<'_, M> {}

impl<'a, M: Mode> Deref for Steps<'a, M> {
    type Target = M::On<'a>;

    #[inline]
    fn deref(&self) -> &M::On<'a> {
        &self.on
    }
}

impl<'a, M: Mode> Steps<'a, M> {
    #[inline]
    pub(crate) fn new(on: M::On<'a>) -> Self {
        Self {
            on,
            _mode: PhantomData,
        }
    }

    #[inline]
    pub(crate) fn ch_send<'b>(
        self,
        to: usize,
        msg: &'b [u8],
    ) -> impl Future<Output = Result<()>> + 'b
    where
        'a: 'b,
    {
        M::send(M::shorten(self.on), to, msg)
    }

    #[inline]
    pub(crate) fn ch_recv<'b>(
        self,
        from: usize,
        dst: &'b mut [u8],
    ) -> impl Future<Output = Result<()>> + 'b
    where
        'a: 'b,
    {
        M::recv(M::shorten(self.on), from, dst, None)
    }

    #[inline]
    pub(crate) fn recv_reduce<'b>(
        self,
        from: usize,
        acc: &'b mut [u8],
        red: &'b Reducer<'b>,
    ) -> impl Future<Output = Result<()>> + 'b
    where
        'a: 'b,
    {
        M::recv(M::shorten(self.on), from, acc, Some(red))
    }

    #[inline]
    pub(crate) fn send_chunk<'b>(
        self,
        to: usize,
        msg: &'b [u8],
        i: usize,
    ) -> impl Future<Output = Result<()>> + 'b
    where
        'a: 'b,
    {
        M::send_chunk(M::shorten(self.on), to, msg, i)
    }

    #[inline]
    pub(crate) fn recv_chunk<'b>(
        self,
        from: usize,
        dst: &'b mut [u8],
        i: usize,
        red: Option<&'b Reducer<'b>>,
    ) -> impl Future<Output = Result<()>> + 'b
    where
        'a: 'b,
    {
        M::recv_chunk(M::shorten(self.on), from, dst, i, red)
    }

    /// Sends `msg` to `to` while receiving `dst` from `from`, chunk by chunk (deadlock-free
    /// even when both directions carry large messages: see `channel`).
    #[inline]
    pub(crate) fn ch_sendrecv<'b>(
        self,
        to: usize,
        msg: &'b [u8],
        from: usize,
        dst: &'b mut [u8],
        red: Option<&'b Reducer<'b>>,
    ) -> impl Future<Output = Result<()>> + 'b
    where
        'a: 'b,
    {
        M::sendrecv(M::shorten(self.on), to, msg, from, dst, red)
    }

    /// Sends `buf` to `to` and receives a message of the same length from `from` into `buf`
    /// itself, chunk by chunk: chunk i is sent before the incoming chunk i overwrites (or is
    /// reduced into) it, so no copy of `buf` is needed.
    #[inline]
    pub(crate) fn sendrecv_in_place<'b>(
        self,
        to: usize,
        from: usize,
        buf: &'b mut [u8],
        red: Option<&'b Reducer<'b>>,
    ) -> impl Future<Output = Result<()>> + 'b
    where
        'a: 'b,
    {
        M::sendrecv_in_place(M::shorten(self.on), to, from, buf, red)
    }
}

/// Runs a blocking-mode algorithm on this thread: its steps are done when made, so its first
/// poll finishes it; the future lives on the stack.
#[inline]
pub(crate) fn run_blocking<T>(f: impl Future<Output = Result<T>>) -> Result<T> {
    let f = pin!(f);
    match f.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(Error::new(
            ErrorKind::Transport,
            "a blocking collective's algorithm yielded (a step not in blocking mode)",
        )),
    }
}
