//! The steps algorithms are written in, and the two ways they run.
//!
//! Every algorithm is one `async fn run<M: Mode>(c: Steps<'_, M>, ..)`: one description of
//! its sends, receives and local work. The mode is a type, so each algorithm is compiled
//! twice from that one source:
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

use std::future::{Future, ready};
use std::marker::PhantomData;
use std::ops::Deref;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use super::{Comm, Reducer};
use crate::error::{Error, ErrorKind, Result};

/// How an algorithm's steps run: see the module's documentation.
pub(crate) trait Mode: Copy {
    /// Sends `msg` to `to`.
    fn send<'a>(c: &'a Comm<'a>, to: usize, msg: &'a [u8])
    -> impl Future<Output = Result<()>> + 'a;
    /// Receives `dst.len()` bytes from `from` into `dst`, copied or combined with `red`.
    fn recv<'a>(
        c: &'a Comm<'a>,
        from: usize,
        dst: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a;
    /// Sends chunk `i` of `msg` to `to`.
    fn send_chunk<'a>(
        c: &'a Comm<'a>,
        to: usize,
        msg: &'a [u8],
        i: usize,
    ) -> impl Future<Output = Result<()>> + 'a;
    /// Receives chunk `i` of a `dst.len()`-byte message from `from`.
    fn recv_chunk<'a>(
        c: &'a Comm<'a>,
        from: usize,
        dst: &'a mut [u8],
        i: usize,
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a;
    /// Sends `msg` to `to` while receiving `dst` from `from`, chunk by chunk.
    fn sendrecv<'a>(
        c: &'a Comm<'a>,
        to: usize,
        msg: &'a [u8],
        from: usize,
        dst: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a;
    /// Sends `buf` to `to` and receives the same length from `from` into `buf` itself.
    fn sendrecv_in_place<'a>(
        c: &'a Comm<'a>,
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
    #[inline]
    fn send<'a>(
        c: &'a Comm<'a>,
        to: usize,
        msg: &'a [u8],
    ) -> impl Future<Output = Result<()>> + 'a {
        ready(c.ch_send(to, msg))
    }

    #[inline]
    fn recv<'a>(
        c: &'a Comm<'a>,
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
        c: &'a Comm<'a>,
        to: usize,
        msg: &'a [u8],
        i: usize,
    ) -> impl Future<Output = Result<()>> + 'a {
        ready(c.send_chunk(to, msg, i, true).map(drop))
    }

    #[inline]
    fn recv_chunk<'a>(
        c: &'a Comm<'a>,
        from: usize,
        dst: &'a mut [u8],
        i: usize,
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a {
        ready(c.recv_chunk(from, dst, i, red, true).map(drop))
    }

    #[inline]
    fn sendrecv<'a>(
        c: &'a Comm<'a>,
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
        c: &'a Comm<'a>,
        to: usize,
        from: usize,
        buf: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a {
        ready(c.sendrecv_in_place(to, from, buf, red))
    }
}

impl Mode for Start {
    async fn send<'a>(c: &'a Comm<'a>, to: usize, msg: &'a [u8]) -> Result<()> {
        for i in 0..c.chunks(msg.len()) {
            Self::send_chunk(c, to, msg, i).await?;
        }
        Ok(())
    }

    async fn recv<'a>(
        c: &'a Comm<'a>,
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
        c: &'a Comm<'a>,
        to: usize,
        msg: &'a [u8],
        i: usize,
    ) -> impl Future<Output = Result<()>> + 'a {
        retry(c, move |wait| c.send_chunk(to, msg, i, wait))
    }

    fn recv_chunk<'a>(
        c: &'a Comm<'a>,
        from: usize,
        dst: &'a mut [u8],
        i: usize,
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a {
        recv_chunk(c, from, dst, i, red)
    }

    async fn sendrecv<'a>(
        c: &'a Comm<'a>,
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
        c: &'a Comm<'a>,
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
        Ok(true) => Poll::Ready(Ok(())),
        Ok(false) => match c.ch.pay(c.world) {
            Ok(()) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        },
        Err(e) => Poll::Ready(Err(e)),
    })
}

/// An algorithm's handle on its communicator, in mode `M`: the steps, and (through `Deref`)
/// the communicator's size, rank, scratch buffers and chunking.
pub(crate) struct Steps<'a, M> {
    comm: &'a Comm<'a>,
    _mode: PhantomData<M>,
}

impl<M> Clone for Steps<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M> Copy for Steps<'_, M> {}

impl<'a, M> Deref for Steps<'a, M> {
    type Target = Comm<'a>;

    #[inline]
    fn deref(&self) -> &Comm<'a> {
        self.comm
    }
}

impl<'a, M: Mode> Steps<'a, M> {
    #[inline]
    pub(crate) fn new(comm: &'a Comm<'a>) -> Self {
        Self {
            comm,
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
        M::send(self.comm, to, msg)
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
        M::recv(self.comm, from, dst, None)
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
        M::recv(self.comm, from, acc, Some(red))
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
        M::send_chunk(self.comm, to, msg, i)
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
        M::recv_chunk(self.comm, from, dst, i, red)
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
        M::sendrecv(self.comm, to, msg, from, dst, red)
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
        M::sendrecv_in_place(self.comm, to, from, buf, red)
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
