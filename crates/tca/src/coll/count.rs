//! The counting pass: an algorithm's cost model read off its own description.
//!
//! Every algorithm is one `async fn run<M: Mode>` ([`step`](super::step)). Besides running
//! it blocking ([`Block`](super::step::Block)) or started ([`Start`](super::step::Start)),
//! the registry runs it in a third mode, [`Count`], on the ranks of a communicator that does
//! not exist (one of each class of ranks that do alike, [`classes`]). Each step, instead of
//! moving bytes, adds what it would do to that rank's [`Work`] (a [`Sched`] of the model's
//! counts), so the cost model of every algorithm is what its code does, and no second
//! description can drift from it (one did, before this pass: the hand-written schedule of an
//! algorithm that had changed).
//!
//! # What is counted
//! - A send or a receive of `x` bytes: one message of `x` bytes ([`Sched::send`],
//!   [`Sched::recv`], with the combination for a combining receive). The channel cuts a
//!   message into chunks; the model prices that from the message's length, so the pass runs
//!   every chunk loop once, over the whole message (`Site::chunks` is 1 here; decisions by
//!   size ask [`Site::spans_chunks`], which answers as the channel would).
//! - Local work: copies ([`Site::copy`], [`Site::rotate_right`]) and the combination of
//!   staged contributions ([`Site::combine_in_order`]).
//! - **Synchronising rounds** (the model's `rounds`: a wait for a message whose sender waits
//!   for this rank's, in back-to-back calls). A rank starts a round when it receives from a
//!   rank it also sends to in the call (outside exchange steps), having sent since its last
//!   round (calls repeat, so a call's first receive follows the last call's sends): a flat
//!   exchange is one round, a fold's partner waits once for the folded rank (whose next fold
//!   waits for this call's unfold) and the folded rank once for the result; a one-way tree
//!   has none. Which ranks a rank sends to is found by a first pass. A round also starts at
//!   every exchange step ([`Mode::sendrecv`](super::step::Mode)) unless the step continues
//!   the previous one: the same partners, sending nothing received since the round began
//!   (the blocks of one of Bruck's or recursive doubling's rounds; a ring's next step sends
//!   what the last one received, so it is a round of its own).
//! - The front end's copies, which run outside the algorithm ([`front`]): the send buffer
//!   into the working buffer (reduce, allreduce, reduce_scatter), this rank's block into
//!   place (allgather), the result out (reduce's root).
//!
//! The pace of back-to-back calls is then [`CostModel::paced`] over the busiest rank (by the
//! model's prices) and the total of all ranks, as the [`model`](super::model) docs describe.
//!
//! # Buffers
//! The pass runs the real code, which slices real buffers, so it needs buffers of the
//! message's size, and scratch of up to p times it, that it never reads or writes: address
//! space reserved without memory ([`Phantom`], `MAP_NORESERVE`), as much as the pass needs
//! (at most [`REGION`] each), kept in a pool for the next pass. A call whose buffers would
//! not fit is refused.

use std::cell::{Cell, RefCell, RefMut};
use std::collections::HashMap;
use std::future::{Future, ready};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use super::Reducer;
use super::channel::chunk_bytes;
use super::model::{CostModel, Sched, Work};
use super::registry::{ALGORITHMS, Algorithm, Collective, Kernel};
use super::step::{Mode, Site, Together};
use crate::error::{Error, ErrorKind, Result};

/// Bytes of each buffer the pass can hand an algorithm: a buffer (a whole allgather's, an
/// alltoall's, a reduce_scatter's: p blocks) or a scratch of up to p times a block.
pub(crate) const REGION: usize = if usize::BITS >= 64 {
    1 << (usize::BITS - 28)
} else {
    1 << 30
};

/// The counting mode: every step adds to its rank's [`Tally`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Count;

/// One rank's counts in a counting pass.
pub(crate) struct Tally {
    p: usize,
    me: usize,
    sched: Cell<Sched>,
    /// Per rank, whether this rank sends to it in the call (a first pass's `targets`).
    partners: Vec<bool>,
    /// Per rank, whether this rank has sent to it (outside exchange steps) so far.
    targets: RefCell<Vec<bool>>,
    /// Whether this rank has sent since its last round.
    sent_since: Cell<bool>,
    /// The partners of the last step, if it was an exchange.
    pair: Cell<Option<(usize, usize)>>,
    /// The address ranges received since the round began, adjacent ones merged.
    got: RefCell<Vec<(usize, usize)>>,
    /// Local bytes copied: added to the counts at the end as one copy (the model prices a
    /// rank's local copies in a call together, against its cache step).
    local: Cell<usize>,
    /// A hash of every step's kind and size, in order, peers left out: ranks whose passes
    /// hash alike do alike ([`classes`]).
    sig: Cell<u64>,
    tmp: [RefCell<Phantom>; 3],
}

/// The kinds of step a [`Tally`]'s signature tells apart.
#[derive(Clone, Copy)]
enum Step {
    Local = 1,
    Round,
    Recv,
    RecvReduce,
    Send,
    Exchange,
    Combine,
}

fn span(b: &[u8]) -> (usize, usize) {
    let a = b.as_ptr() as usize;
    (a, a + b.len())
}

impl Tally {
    /// Adds a step.
    fn add(&self, f: impl FnOnce(Sched) -> Sched) {
        self.sched.set(f(self.sched.get()));
    }

    fn flush(&self) {
        let x = self.local.replace(0);
        if x > 0 {
            self.note(Step::Local, x);
            self.sched.set(self.sched.get().local(x as f64));
        }
    }

    /// Adds a step of kind `k` and `x` bytes to the signature (FNV-1a over the two words).
    fn note(&self, k: Step, x: usize) {
        let mut h = self.sig.get();
        for v in [k as u64, x as u64] {
            h = (h ^ v).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.sig.set(h);
    }

    /// What was counted.
    fn work(&self) -> Work {
        self.flush();
        self.sched.get().work()
    }

    fn new_round(&self) {
        self.sent_since.set(false);
        self.got.borrow_mut().clear();
        self.add(|s| s.rounds(1.0));
        self.note(Step::Round, 0);
    }

    fn received(&self, dst: &[u8]) {
        let (a, b) = span(dst);
        let mut got = self.got.borrow_mut();
        match got.last_mut() {
            Some(last) if last.1 == a => last.1 = b,
            _ => got.push((a, b)),
        }
    }

    /// Whether `msg` lies in what was received this round. An empty message has no place
    /// (an empty block's slice need not point into the buffer): it counts as passing on
    /// whatever this round received, as a ring's empty block is still a message that waits
    /// for the step before.
    fn holds_received(&self, msg: &[u8]) -> bool {
        let (a, b) = span(msg);
        let got = self.got.borrow();
        if a == b {
            return !got.is_empty();
        }
        got.iter().any(|&(x, y)| a < y && x < b)
    }

    fn count_recv(&self, dst: &[u8], reduce: bool) {
        self.note(
            if reduce { Step::RecvReduce } else { Step::Recv },
            dst.len(),
        );
        let x = dst.len() as f64;
        self.received(dst);
        self.add(|s| {
            if reduce {
                s.recv_reduce(1.0, x)
            } else {
                s.recv(1.0, x)
            }
        });
    }

    fn send(&self, to: usize, msg: &[u8]) {
        if let Some(r) = self.targets.borrow_mut().get_mut(to) {
            *r = true;
        }
        self.sent_since.set(true);
        self.pair.set(None);
        self.note(Step::Send, msg.len());
        let x = msg.len() as f64;
        self.add(|s| s.send(1.0, x));
    }

    fn recv(&self, from: usize, dst: &[u8], reduce: bool) {
        if self.sent_since.get() && self.partners.get(from) == Some(&true) {
            self.new_round();
        }
        self.pair.set(None);
        self.count_recv(dst, reduce);
    }

    fn exchange(&self, to: usize, msg: &[u8], from: usize, dst: &[u8], reduce: bool) {
        if self.pair.get() != Some((to, from)) || self.holds_received(msg) {
            self.new_round();
        }
        self.note(Step::Exchange, msg.len());
        let x = msg.len() as f64;
        self.add(|s| s.send(1.0, x));
        self.count_recv(dst, reduce);
        self.pair.set(Some((to, from)));
    }

    fn local(&self, bytes: usize) {
        self.local.set(self.local.get() + bytes);
    }
}

impl Site for &Tally {
    fn p(&self) -> usize {
        self.p
    }

    fn me(&self) -> usize {
        self.me
    }

    /// One: the pass counts each message whole.
    fn chunks(&self, _n: usize) -> usize {
        1
    }

    fn spans_chunks(&self, n: usize) -> bool {
        n > chunk_bytes(self.p)
    }

    fn tmp(&self, i: usize, n: usize) -> RefMut<'_, [u8]> {
        let cell = &self.tmp[i.min(2)];
        RefMut::map(cell.borrow_mut(), |r| r.slice(n))
    }

    fn grid<const D: usize>(&self) -> [usize; D] {
        super::grid::<D>(self.p)
    }

    fn copy(&self, dst: &mut [u8], _src: &[u8]) {
        self.local(dst.len());
    }

    fn rotate_right(&self, buf: &mut [u8], _k: usize) {
        self.local(buf.len());
    }

    fn combine_in_order(
        &self,
        _all: &[u8],
        buf: &mut [u8],
        p: usize,
        _red: &Reducer<'_>,
    ) -> Result<()> {
        let n = buf.len();
        self.local(n);
        self.note(Step::Combine, n * p.saturating_sub(1));
        self.add(|s| s.reduce((n * p.saturating_sub(1)) as f64));
        Ok(())
    }

    fn together(&self) -> Together<'_> {
        Together(None)
    }
}

impl Mode for Count {
    type On<'a> = &'a Tally;

    fn shorten<'a: 'b, 'b>(on: &'a Tally) -> &'b Tally {
        on
    }

    fn send<'a>(c: &'a Tally, to: usize, msg: &'a [u8]) -> impl Future<Output = Result<()>> + 'a {
        c.send(to, msg);
        ready(Ok(()))
    }

    fn recv<'a>(
        c: &'a Tally,
        from: usize,
        dst: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a {
        c.recv(from, dst, red.is_some());
        ready(Ok(()))
    }

    fn send_chunk<'a>(
        c: &'a Tally,
        to: usize,
        msg: &'a [u8],
        i: usize,
    ) -> impl Future<Output = Result<()>> + 'a {
        if i == 0 {
            c.send(to, msg);
        }
        ready(Ok(()))
    }

    fn recv_chunk<'a>(
        c: &'a Tally,
        from: usize,
        dst: &'a mut [u8],
        i: usize,
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a {
        if i == 0 {
            c.recv(from, dst, red.is_some());
        }
        ready(Ok(()))
    }

    fn sendrecv<'a>(
        c: &'a Tally,
        to: usize,
        msg: &'a [u8],
        from: usize,
        dst: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a {
        c.exchange(to, msg, from, dst, red.is_some());
        ready(Ok(()))
    }

    fn sendrecv_in_place<'a>(
        c: &'a Tally,
        to: usize,
        from: usize,
        buf: &'a mut [u8],
        red: Option<&'a Reducer<'a>>,
    ) -> impl Future<Output = Result<()>> + 'a {
        c.exchange(to, buf, from, buf, red.is_some());
        ready(Ok(()))
    }
}

/// Bytes the front end copies on rank `me` of `p` before and after the algorithm of `c`,
/// for `n` bytes (the units of [`Algorithm::work`]), in the typed calls that IMB and
/// `tca bench` time (`Comm::allreduce`, not `allreduce_in_place`): the send buffer into the
/// working one, this rank's block into place, the root's result out.
fn front(c: Collective, p: usize, me: usize, n: usize) -> (usize, usize) {
    match c {
        Collective::Reduce => (n, if me == 0 { n } else { 0 }),
        Collective::Allreduce | Collective::Allgather => (n, 0),
        Collective::ReduceScatter => (p * n, 0),
        Collective::Broadcast
        | Collective::Scatter
        | Collective::Gather
        | Collective::Barrier
        | Collective::Alltoall => (0, 0),
    }
}

/// The busiest rank's work (by `m`'s prices) and all ranks' together, for `alg` on `p`
/// ranks and `n` bytes (a block for scatter, gather, allgather, reduce_scatter and
/// alltoall; the whole buffer otherwise), the root 0: a counting pass over one rank of each
/// class of ranks that do alike ([`classes`]), each class's work counted once per member.
pub(crate) fn parts(alg: &Algorithm, m: &CostModel, p: usize, n: usize) -> Result<(Work, Work)> {
    let p = p.max(1);
    if !(alg.supports)(p) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "{} {} does not run on {p} ranks: it needs {}",
                alg.collective.name(),
                alg.name,
                alg.note
            ),
        ));
    }
    // The classes' probes need 6p blocks of 6p bytes; past that no pass fits.
    if p.checked_mul(6 * p).is_none_or(|b| b > REGION) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("cannot count collectives on {p} ranks: too many for the counting pass"),
        ));
    }
    // The front ends return before any algorithm on empty buffers: an empty call is priced as
    // the smallest that runs (counted at n = 0 every block of an exchange would lie at one
    // address, and the rounds could not be told apart). A barrier has no bytes.
    let n = if alg.collective == Collective::Barrier {
        0
    } else {
        n.max(1)
    };
    let classes = classes(alg, p)?;
    let reps: Vec<usize> = classes.iter().map(|&(r, _)| r).collect();
    let mut busiest = m.sched(p).work();
    let mut total = m.sched(p);
    each_rank(alg, m, p, n, &reps, |i, w, _| {
        busiest = m.slowest(busiest, w);
        total = total.then(w.scaled(classes[i].1 as f64));
    })?;
    Ok((busiest, total.work()))
}

/// Per class of ranks that do alike: one of them, and how many there are.
type Classes = Arc<[(usize, usize)]>;

/// The sizes at which [`classes`] compares the ranks: multiples of 6p, which the algorithms
/// split evenly where they split in p blocks or 2 or 3 parts (Rabenseifner's p' blocks need
/// not be, which only makes more classes), one small and one past three chunks (so that
/// decisions by size show).
fn probes(p: usize) -> [usize; 2] {
    let unit = 6 * p;
    [unit, unit * (3 * chunk_bytes(p) / unit + 1)]
}

/// Classes of ranks that do alike: per class, one rank and how many there are. Ranks whose
/// passes have the same steps in the same order, with the same sizes, at both [`probes`]
/// sizes are one class; counting one of them stands for all (a ring's ranks are one class,
/// a binomial tree's ranks a class per subtree shape), so a 384-rank table is priced in a
/// fraction of the passes. At sizes that do not split evenly, the members of a class differ
/// by the odd bytes of their blocks (under a relative 1e-3 of the time, checked by the
/// tests). Found once per algorithm and rank count, and kept.
fn classes(alg: &Algorithm, p: usize) -> Result<Classes> {
    /// Classes found, by algorithm (its index in the table) and rank count.
    type Known = HashMap<(usize, usize), Classes>;
    static KNOWN: Mutex<Option<Known>> = Mutex::new(None);
    let index = ALGORITHMS
        .iter()
        .position(|a| std::ptr::eq(a, alg))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("{} {} is not in the table", alg.collective.name(), alg.name),
            )
        })?;
    let key = (index, p);
    if let Some(c) = KNOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .get(&key)
    {
        return Ok(c.clone());
    }
    let m = CostModel::default();
    let all: Vec<usize> = (0..p).collect();
    let mut sigs = vec![[0u64; 2]; p];
    for (k, n) in probes(p).into_iter().enumerate() {
        each_rank(alg, &m, p, n, &all, |i, _, sig| sigs[i][k] = sig)?;
    }
    let mut found: HashMap<[u64; 2], usize> = HashMap::new();
    let mut classes: Vec<(usize, usize)> = Vec::new();
    for (me, sig) in sigs.into_iter().enumerate() {
        let i = *found.entry(sig).or_insert_with(|| {
            classes.push((me, 0));
            classes.len() - 1
        });
        classes[i].1 += 1;
    }
    let classes: Classes = classes.into();
    KNOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, classes.clone());
    Ok(classes)
}

/// Counts `alg` on each of `ranks` of `p` and hands its index in `ranks`, its [`Work`] and
/// its signature to `f`.
fn each_rank(
    alg: &Algorithm,
    m: &CostModel,
    p: usize,
    n: usize,
    ranks: &[usize],
    mut f: impl FnMut(usize, Work, u64),
) -> Result<()> {
    let whole = p.checked_mul(n).filter(|&b| b <= REGION).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "cannot count {} {} on {p} ranks of {n} bytes: its buffers would pass the \
                 counting pass's {REGION} bytes",
                alg.collective.name(),
                alg.name
            ),
        )
    })?;
    let nothing = |_: &mut [u8], _: &[u8]| -> Result<()> { Ok(()) };
    let red = Reducer::new(1, &nothing);
    let counts = vec![n; p];
    let displs: Vec<usize> = (0..p).map(|r| r * n).collect();
    let pass = Pass {
        alg,
        m,
        p,
        n,
        whole,
        red: &red,
        counts: &counts,
        displs: &displs,
    };
    let mut set = Pool::take();
    let mut result = set.reserve(whole);
    for (i, &me) in ranks.iter().enumerate() {
        if result.is_err() {
            break;
        }
        // First pass: whom this rank sends to; second: the counts, with that known.
        let counted = pass
            .count(me, &mut set, None)
            .and_then(|(_, partners, _)| pass.count(me, &mut set, Some(partners)));
        match counted {
            Ok((w, _, sig)) => f(i, w, sig),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    Pool::give(set);
    result
}

/// What every rank's pass of one count shares.
struct Pass<'a> {
    alg: &'a Algorithm,
    m: &'a CostModel,
    p: usize,
    n: usize,
    whole: usize,
    red: &'a Reducer<'a>,
    counts: &'a [usize],
    displs: &'a [usize],
}

impl Pass<'_> {
    /// Counts rank `me`, knowing whom it sends to (`partners`) or not yet (`None`); returns
    /// its work, whom it sent to and its signature.
    fn count(
        &self,
        me: usize,
        set: &mut Set,
        partners: Option<Vec<bool>>,
    ) -> Result<(Work, Vec<bool>, u64)> {
        let Pass {
            alg,
            m,
            p,
            n,
            whole,
            red,
            counts,
            displs,
        } = *self;
        let Set { a, b, tmp } = set;
        let [t0, t1, t2] = std::mem::take(tmp);
        let partners = partners.unwrap_or_else(|| vec![false; p]);
        let t = Tally {
            p,
            me,
            sched: Cell::new(m.sched(p)),
            sent_since: Cell::new(partners.contains(&true)),
            partners,
            targets: RefCell::new(vec![false; p]),
            pair: Cell::new(None),
            got: RefCell::new(Vec::new()),
            local: Cell::new(0),
            sig: Cell::new(0xcbf2_9ce4_8422_2325),
            tmp: [RefCell::new(t0), RefCell::new(t1), RefCell::new(t2)],
        };
        let (before, after) = front(alg.collective, p, me, n);
        t.local(before);
        let r = match alg.kernel {
            Kernel::Broadcast(_, _, f) => f(&t, a.slice(n), 0),
            Kernel::Scatter(_, _, f) => f(&t, a.slice(whole), b.slice(n), 0),
            Kernel::Gather(_, _, f) => f(&t, a.slice(n), b.slice(whole), 0),
            Kernel::Reduce(_, _, f) => f(&t, a.slice(n), red, 0),
            Kernel::Allgather(_, _, f) => f(&t, a.slice(whole), counts, displs),
            Kernel::Allreduce(_, _, f) => f(&t, a.slice(n), red),
            Kernel::Barrier(_, _, f) => f(&t),
            Kernel::ReduceScatter(_, _, f) => f(&t, a.slice(whole), b.slice(n), red),
            Kernel::Alltoall(_, _, f) => f(&t, a.slice(whole), b.slice(whole)),
        };
        t.local(after);
        let w = t.work();
        let Tally {
            tmp: [t0, t1, t2],
            targets,
            sig,
            ..
        } = t;
        *tmp = [t0.into_inner(), t1.into_inner(), t2.into_inner()];
        r?;
        Ok((w, targets.into_inner(), sig.into_inner()))
    }
}

/// Address space that is never touched: bytes reserved without memory (`MAP_NORESERVE`), so
/// a slice of it costs nothing until written, and the counting pass never writes it. Grown
/// (mapped anew) to what a pass needs before the pass, in powers of two.
#[derive(Default)]
struct Phantom {
    base: Option<NonNull<u8>>,
    len: usize,
}

// SAFETY: a Phantom owns its mapping; nothing else refers to it.
#[allow(unsafe_code)]
unsafe impl Send for Phantom {}

impl Phantom {
    /// Makes the mapping at least `n` bytes (at most [`REGION`]: the caller checked).
    #[allow(unsafe_code)]
    fn reserve(&mut self, n: usize) -> Result<()> {
        if n <= self.len {
            return Ok(());
        }
        let len = n.next_power_of_two().max(1 << 20);
        *self = Self::default();
        use rustix::mm::{MapFlags, ProtFlags};
        // SAFETY: a fresh anonymous private mapping at an address the kernel chooses: it
        // aliases no memory of this process.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(|e| {
            Error::new(
                ErrorKind::Transport,
                format!("reserving {len} bytes of address space for the counting pass: {e}"),
            )
        })?;
        self.base = NonNull::new(p.cast());
        self.len = len;
        Ok(())
    }

    /// The first `n` bytes, at most as many as are reserved.
    #[allow(unsafe_code)]
    fn slice(&mut self, n: usize) -> &mut [u8] {
        match self.base {
            // SAFETY: the mapping is `len` bytes, readable and writable, owned by this
            // Phantom, and borrowed mutably through it alone (`&mut self`).
            Some(b) => unsafe { std::slice::from_raw_parts_mut(b.as_ptr(), n.min(self.len)) },
            None => &mut [],
        }
    }
}

impl Drop for Phantom {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if let Some(b) = self.base {
            // SAFETY: this Phantom's own mapping of `len` bytes, no longer borrowed.
            let _ = unsafe { rustix::mm::munmap(b.as_ptr().cast(), self.len) };
        }
    }
}

/// The buffers of one counting pass: two arguments and the three scratch buffers.
#[derive(Default)]
struct Set {
    a: Phantom,
    b: Phantom,
    tmp: [Phantom; 3],
}

impl Set {
    /// Every buffer at least `n` bytes.
    fn reserve(&mut self, n: usize) -> Result<()> {
        self.a.reserve(n)?;
        self.b.reserve(n)?;
        self.tmp.iter_mut().try_for_each(|t| t.reserve(n))
    }
}

/// Sets left by finished passes, for the next (one per pass running at once).
struct Pool;

static POOL: Mutex<Vec<Set>> = Mutex::new(Vec::new());

impl Pool {
    fn take() -> Set {
        POOL.lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default()
    }

    fn give(s: Set) {
        POOL.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::model::MAX_CACHE;
    use crate::coll::registry::ALGORITHMS;

    /// Prices that make the counts plain: no knee, no cache step.
    fn plain() -> CostModel {
        CostModel {
            knee: 0.0,
            cache: MAX_CACHE,
            ..CostModel::default()
        }
    }

    fn ranks(c: Collective, name: &str, p: usize, n: usize) -> Vec<Work> {
        let alg = c.algorithms().find(|a| a.name == name).expect("registered");
        let mut all = Vec::new();
        let every: Vec<usize> = (0..p).collect();
        each_rank(alg, &plain(), p, n, &every, |_, w, _| all.push(w)).expect("counted");
        all
    }

    fn rounds(ws: &[Work]) -> Vec<f64> {
        ws.iter().map(|w| w.rounds).collect()
    }

    #[test]
    fn every_byte_counted_as_sent_is_counted_as_received() {
        let chunk = chunk_bytes(2);
        for alg in ALGORITHMS {
            for p in (1..=12).filter(|&p| (alg.supports)(p)) {
                for n in [0, 8, 1000, 3 * chunk + 5] {
                    let mut sent = 0.0;
                    let mut got = 0.0;
                    let every: Vec<usize> = (0..p).collect();
                    each_rank(alg, &plain(), p, n, &every, |_, w, _| {
                        sent += w.sent_bytes;
                        got += w.recv_bytes;
                    })
                    .expect("counted");
                    assert_eq!(
                        sent,
                        got,
                        "{} {} p {p} n {n}",
                        alg.collective.name(),
                        alg.name
                    );
                }
            }
        }
    }

    /// Counting one rank per class prices every algorithm as counting every rank does, at
    /// sizes other than the probes too.
    #[test]
    fn classes_stand_for_their_members() {
        let m = CostModel::default();
        for alg in ALGORITHMS {
            for p in (1..=24).filter(|&p| (alg.supports)(p)) {
                for n in [0, 1, 100, 4096, 77_777, 1 << 20, 6 * p * 1000] {
                    let every: Vec<usize> = (0..p).collect();
                    let mut busiest = m.sched(p).work();
                    let mut total = m.sched(p);
                    // `parts` prices an empty call as the smallest that runs.
                    let counted = if alg.collective == Collective::Barrier {
                        0
                    } else {
                        n.max(1)
                    };
                    each_rank(alg, &m, p, counted, &every, |_, w, _| {
                        busiest = m.slowest(busiest, w);
                        total = total.then(w);
                    })
                    .expect("counted");
                    let (b, t) = parts(alg, &m, p, n).expect("counted");
                    let what = format!("{} {} p {p} n {n}", alg.collective.name(), alg.name);
                    // Exact where blocks split evenly; within the odd bytes elsewhere.
                    let tol = if counted % (6 * p) == 0 { 1e-9 } else { 1e-3 };
                    for (a, e, which) in [
                        (m.time(&b), m.time(&busiest), "busiest"),
                        (m.time(&t), m.time(&total.work()), "total"),
                    ] {
                        assert!((a - e).abs() <= tol * e, "{which} {a} against {e}: {what}");
                    }
                }
            }
        }
    }

    #[test]
    fn exchanges_count_their_rounds() {
        use Collective::*;
        let n = 1024;
        let rd = ranks(Allreduce, "recursive_doubling", 8, n);
        for w in &rd {
            assert_eq!(
                (
                    w.rounds,
                    w.sent_bytes,
                    w.recv_bytes,
                    w.reduced_bytes,
                    w.local_bytes
                ),
                (3.0, 3.0 * 1024.0, 3.0 * 1024.0, 3.0 * 1024.0, 1024.0)
            );
        }
        // Six ranks fold onto four: ranks 0 and 2 hand their buffer up and wait for the
        // result (one round); 1 and 3 wait for it (the folded rank's next call waits for
        // this one's result), exchange twice and hand the result back.
        assert_eq!(
            rounds(&ranks(Allreduce, "recursive_doubling", 6, n)),
            [1.0, 3.0, 1.0, 3.0, 2.0, 2.0]
        );
        // A ring's step sends what the step before received: a round each.
        assert_eq!(rounds(&ranks(Allgather, "ring", 5, n)), [4.0; 5]);
        assert_eq!(rounds(&ranks(Allreduce, "ring", 4, 4 * n)), [6.0; 4]);
        // Bruck's and recursive doubling's rounds carry several blocks, none received in the
        // round: one round each.
        assert_eq!(rounds(&ranks(Allgather, "bruck", 5, n)), [3.0; 5]);
        assert_eq!(
            rounds(&ranks(Allgather, "recursive_doubling", 8, n)),
            [3.0; 8]
        );
        assert_eq!(rounds(&ranks(Alltoall, "pairwise", 4, n)), [3.0; 4]);
        // Flat: everything out, then everything in: one round, three local copies of n (the
        // front end's, the staging, the result) and p - 1 contributions combined.
        for w in ranks(Allreduce, "flat", 4, n) {
            assert_eq!(
                (w.rounds, w.sent_bytes, w.local_bytes, w.reduced_bytes),
                (1.0, 3.0 * 1024.0, 3.0 * 1024.0, 3.0 * 1024.0)
            );
        }
        assert_eq!(rounds(&ranks(Barrier, "dissemination", 5, 0)), [3.0; 5]);
    }

    #[test]
    fn one_way_trees_have_no_rounds_and_their_root_sends_most() {
        use Collective::*;
        let n = 4096;
        let bc = ranks(Broadcast, "binomial", 8, n);
        assert_eq!(bc[0].sent_bytes, 3.0 * 4096.0);
        assert_eq!(bc.iter().map(|w| w.sent_bytes).sum::<f64>(), 7.0 * 4096.0);
        assert!(bc.iter().all(|w| w.rounds == 0.0));
        let red = ranks(Reduce, "binomial", 8, n);
        assert_eq!(
            (red[0].reduced_bytes, red[0].local_bytes),
            (3.0 * 4096.0, 2.0 * 4096.0)
        );
        assert!(red.iter().all(|w| w.rounds == 0.0));
    }

    #[test]
    fn a_pass_over_a_gibibyte_touches_no_memory() {
        let resident = || {
            let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
            s.split_whitespace()
                .nth(1)
                .and_then(|x| x.parse::<usize>().ok())
                .unwrap_or(0)
                * 4096
        };
        let alg = Collective::Allgather
            .algorithms()
            .find(|a| a.name == "ring")
            .expect("registered");
        let before = resident();
        let w = alg.work(&plain(), 8, 128 << 20).expect("counted");
        assert_eq!(w.sent_bytes, 7.0 * (128 << 20) as f64);
        let grown = resident().saturating_sub(before);
        assert!(grown < 64 << 20, "resident memory grew by {grown} bytes");
    }

    #[test]
    fn buffers_past_the_region_are_refused() {
        let alg = &ALGORITHMS[0];
        let e = alg.work(&plain(), 4, REGION).unwrap_err();
        assert!(e.to_string().contains("counting pass"), "{e}");
        assert_eq!(alg.cost(&plain(), 4, REGION), f64::INFINITY);
    }
}
