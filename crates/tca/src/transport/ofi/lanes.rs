//! Channels as network endpoints: seed 001's DMA channels across a network. A put split over
//! N channels (`am::Endpoint::set_channels`) sends part 0 from this rank's endpoint and part
//! k from its k-th *lane*, another libfabric endpoint of this rank, all posted at once: on a
//! stream provider (`net`, `tcp`) each lane is its own connection to the target, on a NIC its
//! own queue pair. Each part's time, from the call until its write's completion, tunes the
//! weights (`am::Tune`) as a DMA channel's did in the seed.
//!
//! A lane writes into the target's segments as the target registered them (a target's
//! registrations belong to its domain, reached through any of the peer's connections), and
//! sends only quiet requests. Lanes are opened on the first split put, on the provider and
//! domain of this rank's endpoint, and stay open.
//!
//! A lane's writes are ordered with nothing else this rank sends: two puts to overlapping
//! bytes, or a put and a signal that should follow it, need a quiet between them (as the
//! active-message layer's puts promise completion only at a wait or quiet).
//!
//! Completion at the target: a write's local completion says only that the source may be
//! reused. Writes from the main endpoint are ordered before its later messages (`Quiet`, a
//! signal: `FI_ORDER_SAW`), but a lane is another connection, ordered with nothing the main
//! endpoint sends. So [`Ofi::quiet`] also asks every rank a lane wrote to since the last quiet
//! a `Quiet` request *through that lane*: the target answers (to this rank's main endpoint)
//! after everything earlier on that connection, the lane's writes included.
//!
//! Not split: on providers that need local buffers registered (each lane is its own domain,
//! where the source is not registered), without send-after-write ordering, with every put
//! staged (`TCA_OFI_STAGE=always`), and parts of 1 GiB or more; the caller puts those whole.

#![allow(unsafe_code)] // posting writes and sends on the lanes' endpoints; each call argued

use std::cell::{Cell, RefCell};
use std::time::Instant;

use tca_ofi::{Addr, Completion, Config, Endpoint, OpContext};

use super::{HDR, Header, Kind, Ofi, Path, ofi_err};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::Handle;
use crate::transport::shm::Shm;

/// A lane's write context.
const WRITE: usize = 0;
/// A lane's context for its quiet request's send.
const SEND: usize = 1;
/// Largest part a lane writes in one operation.
const PART_MAX: usize = 1 << 30;

/// One extra endpoint of this rank: the channel one part of a split put travels on.
///
/// Field order is drop order: the endpoint closes before the buffer and contexts its
/// operations may still hold.
pub(super) struct Lane {
    ep: Endpoint,
    /// Every rank's main endpoint, in this endpoint's address vector.
    addrs: Vec<Addr>,
    /// The quiet request's bytes while its send is in flight (a heap buffer: its address
    /// does not move with the lane).
    buf: RefCell<Box<[u8; HDR]>>,
    /// Contexts of the write ([`WRITE`]) and the quiet request's send ([`SEND`]).
    ctx: Box<[OpContext]>,
    /// Whether each context's operation is in flight.
    busy: [Cell<bool>; 2],
    /// The rank each context's operation went to (to name it in errors).
    dest: [Cell<u32>; 2],
    /// Ranks written to since the last quiet.
    touched: RefCell<Vec<bool>>,
}

impl Lane {
    /// Reads this lane's completions: operations done (or failed: the first error, naming
    /// the peer, after marking it done).
    fn poll(&self, provider: &str) -> Result<()> {
        let mut got = [Completion::EMPTY; 4];
        match self.ep.read_cq(&mut got) {
            Ok(n) => {
                for c in &got[..n] {
                    if let Some(b) = self.busy.get(usize::try_from(c.id).unwrap_or(usize::MAX)) {
                        b.set(false);
                    }
                }
                Ok(())
            }
            Err(e) => {
                let id = e.id.and_then(|i| usize::try_from(i).ok());
                let to = id.and_then(|i| self.dest.get(i)).map(Cell::get);
                if let Some(b) = id.and_then(|i| self.busy.get(i)) {
                    b.set(false);
                }
                Err(ofi_err(e.error(), provider, to))
            }
        }
    }

    fn idle(&self) -> bool {
        !self.busy[WRITE].get() && !self.busy[SEND].get()
    }
}

impl Ofi {
    /// Opens lanes until there are `n` (on the provider and domain of this rank's endpoint),
    /// each with every rank's main endpoint in its address vector; `false` if a lane's
    /// endpoint lacks send-after-write ordering or needs local buffers registered.
    fn open_lanes(&self, n: usize) -> Result<bool> {
        let cfg = Config {
            provider: Some(self.ep.provider().to_string()),
            domain: Some(self.ep.domain_name().to_string()),
        };
        let names: Vec<&[u8]> = self.names.iter().map(Vec::as_slice).collect();
        while self.lanes.borrow().len() < n {
            let ep = Endpoint::open(&cfg).map_err(|e| ofi_err(e, self.ep.provider(), None))?;
            if ep.provider() != self.ep.provider() {
                return Err(Error::new(
                    ErrorKind::Transport,
                    format!(
                        "a channel's endpoint opened on provider {}, this rank's is on {}",
                        ep.provider(),
                        self.ep.provider()
                    ),
                ));
            }
            let caps = ep.caps();
            if !caps.order_saw || caps.needs_local_mr {
                // Its quiet would not follow its writes, or its parts would need registering
                // in its own domain: this rank's puts go whole.
                return Ok(false);
            }
            let addrs = ep
                .insert(&names)
                .map_err(|e| ofi_err(e, self.ep.provider(), None))?;
            self.lanes.borrow_mut().push(Lane {
                ep,
                addrs,
                buf: RefCell::new(Box::new([0; HDR])),
                ctx: OpContext::slab(2),
                busy: [Cell::new(false), Cell::new(false)],
                dest: [Cell::new(u32::MAX), Cell::new(u32::MAX)],
                touched: RefCell::new(vec![false; self.names.len()]),
            });
        }
        Ok(true)
    }

    /// Reads every lane's completions (inside every progress of this transport).
    pub(super) fn poll_lanes(&self) -> Result<()> {
        let lanes = self.lanes.borrow();
        let mut first = Ok(());
        for l in lanes.iter() {
            let r = l.poll(self.ep.provider());
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Puts `src` at `off` in `dst` split at `cuts` (part 0 on this rank's endpoint, part k
    /// on lane k), all at once, and waits until every source part may be reused; `secs[k]`
    /// is part k's time from the call to its completion (0 for an empty part). Complete at
    /// the target on [`Ofi::quiet`]. `false` (nothing done) where puts are not split (see the
    /// module's last paragraph).
    pub(crate) fn put_lanes(
        &self,
        shm: &Shm,
        dst: &Handle,
        off: usize,
        src: &[u8],
        cuts: &[usize],
        secs: &mut [f64],
    ) -> Result<bool> {
        let parts = cuts.len() - 1;
        if self.local_mr
            || !self.order_saw
            || self.stage_always.get()
            || parts < 2
            || cuts.windows(2).any(|c| c[1] - c[0] >= PART_MAX)
            || !self.open_lanes(parts - 1)?
        {
            return Ok(false);
        }
        let d = self.describe(shm, dst)?;
        Self::check_range(dst, &d, off, src.len())?;
        let to = dst.rank();
        self.touched.borrow_mut()[to as usize] = true;
        let lanes = self.lanes.borrow();
        let t0 = Instant::now();
        let mut posted = Ok(());
        for (k, lane) in lanes.iter().enumerate().take(parts - 1) {
            let part = &src[cuts[k + 1]..cuts[k + 2]];
            secs[k + 1] = 0.0;
            if part.is_empty() {
                continue;
            }
            lane.touched.borrow_mut()[to as usize] = true;
            lane.dest[WRITE].set(to);
            self.count(None, part.len());
            let raddr = d.addr + (off + cuts[k + 1]) as u64;
            posted =
                self.post_lane_write(shm, lane, part, lane.addrs[to as usize], (raddr, d.rkey));
            if posted.is_err() {
                break;
            }
            lane.busy[WRITE].set(true);
        }
        let first = &src[..cuts[1]];
        secs[0] = 0.0;
        let mut main = None;
        if posted.is_ok() && !first.is_empty() {
            self.count(Some(Path::Direct), first.len());
            // SAFETY: `first` borrows the caller's slice, and this call returns only after
            // the write's completion (below, or `settle` on an error).
            match unsafe {
                self.post_write(
                    shm,
                    to,
                    first.as_ptr(),
                    first.len(),
                    std::ptr::null_mut(),
                    (d.addr + off as u64, d.rkey),
                    &[],
                )
            } {
                Ok(slot) => main = Some(slot),
                Err(e) => posted = Err(e),
            }
        }
        let waited = posted.and_then(|()| {
            let mut turns = 0;
            loop {
                self.poll_cq(shm)?;
                self.poll_lanes()?;
                let mut pending = false;
                if let Some(s) = main {
                    if self.wr_free.borrow().contains(&s) {
                        secs[0] = t0.elapsed().as_secs_f64();
                        main = None;
                    } else {
                        pending = true;
                    }
                }
                for (k, lane) in lanes.iter().enumerate().take(parts - 1) {
                    if lane.busy[WRITE].get() {
                        pending = true;
                    } else if secs[k + 1] == 0.0 && cuts[k + 2] > cuts[k + 1] {
                        secs[k + 1] = t0.elapsed().as_secs_f64();
                    }
                }
                if !pending {
                    return Ok(());
                }
                self.stalled(shm, &mut turns)?;
            }
        });
        if waited.is_err() {
            // The provider may still read the caller's parts: wait for every write first.
            self.settle(main.as_slice());
            self.settle_lanes(&lanes);
        }
        waited.map(|()| true)
    }

    /// Posts `part` as lane `lane`'s write to `(raddr, rkey)` at `dest`.
    fn post_lane_write(
        &self,
        shm: &Shm,
        lane: &Lane,
        part: &[u8],
        dest: Addr,
        (raddr, rkey): (u64, u64),
    ) -> Result<()> {
        let mut turns = 0;
        loop {
            // SAFETY: `part` borrows the caller's slice, and `put_lanes` returns only after
            // this write's completion (its wait, or `settle_lanes`); the lane's write context
            // is free (each lane writes one part per split put, waited for before the next).
            let r = unsafe {
                lane.ep.write(
                    part.as_ptr(),
                    part.len(),
                    std::ptr::null_mut(),
                    dest,
                    raddr,
                    rkey,
                    std::ptr::from_ref(&lane.ctx[WRITE]).cast_mut(),
                )
            };
            match r {
                Ok(()) => return Ok(()),
                Err(e) if e.is_again() => {
                    lane.poll(self.ep.provider())?;
                    self.poll_cq(shm)?;
                    self.stalled(shm, &mut turns)?;
                }
                Err(e) => return Err(ofi_err(e, self.ep.provider(), Some(lane.dest[WRITE].get()))),
            }
        }
    }

    /// After a failed split put: waits until no lane's operation is in flight (errors count
    /// as done), so the caller's parts are free. If that never happens the memory cannot be
    /// given back safely, and the process stops (as [`Ofi::settle`] does).
    fn settle_lanes(&self, lanes: &[Lane]) {
        let end = Instant::now() + std::time::Duration::from_secs(10);
        for l in lanes {
            while !l.idle() {
                if Instant::now() >= end {
                    eprintln!(
                        "tca: libfabric still holds a buffer of a failed split put after 10 s; \
                         stopping"
                    );
                    std::process::abort();
                }
                let _ = l.poll(self.ep.provider());
                std::thread::yield_now();
            }
        }
    }

    /// The lanes' part of [`Ofi::quiet`], begun: a `Quiet` request through every lane to
    /// every rank it wrote to since the last quiet, all at once. Returns what
    /// [`Ofi::finish_lane_quiets`] waits for. On an error the lanes' ranks stay to be
    /// quieted ([`Ofi::abandon_lane_quiets`]).
    pub(super) fn start_lane_quiets(&self, shm: &Shm) -> Result<Option<(u64, Vec<u32>)>> {
        let n = self.lanes.borrow().len();
        if n == 0 {
            return Ok(None);
        }
        let mut peers = Vec::new();
        let r = (|| {
            for i in 0..n {
                let ranks: Vec<u32> = {
                    let lanes = self.lanes.borrow();
                    let t = lanes[i].touched.borrow();
                    (0..t.len())
                        .filter(|&r| t[r])
                        .map(crate::cast::rank_u32)
                        .collect()
                };
                for r in ranks {
                    let req = self.next_req();
                    let h = Header {
                        kind: Kind::Quiet as u8,
                        src: self.rank,
                        dst_off: req,
                        ..Header::default()
                    };
                    // Asked before it is sent (its answer may come inside the send), and no
                    // longer touched: `abandon_lane_quiets` marks it again if this fails.
                    self.lane_asked.borrow_mut().push((i, r, req));
                    self.lanes.borrow()[i].touched.borrow_mut()[r as usize] = false;
                    self.lane_send(shm, i, r, &h)?;
                    if !peers.contains(&r) {
                        peers.push(r);
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            self.abandon_lane_quiets();
            return Err(e);
        }
        if peers.is_empty() {
            return Ok(None);
        }
        let base = self
            .lane_answered
            .load(std::sync::atomic::Ordering::Acquire);
        let asked = u64::try_from(self.lane_asked.borrow().len()).unwrap_or(u64::MAX);
        // Answers that came already are in `base` (and no longer asked); the rest are asked.
        Ok(Some((base + asked, peers)))
    }

    /// Waits for the answers to [`Ofi::start_lane_quiets`]' requests: then every lane's
    /// writes before them have landed.
    pub(super) fn finish_lane_quiets(
        &self,
        shm: &Shm,
        asked: Option<(u64, Vec<u32>)>,
        deadline: Option<Instant>,
    ) -> Result<()> {
        let Some((target, peers)) = asked else {
            return Ok(());
        };
        let r = self.await_count(
            shm,
            (&self.lane_answered, &self.lane_sleepers),
            target,
            &peers,
            deadline,
        );
        if r.is_err() {
            self.abandon_lane_quiets();
        }
        r
    }

    /// After a quiet failed between [`Ofi::start_lane_quiets`] and its finish: the requests
    /// still unanswered are dropped (a late answer to one counts for nothing) and their lanes'
    /// ranks marked written to again, so that the next quiet asks them once more.
    pub(super) fn abandon_lane_quiets(&self) {
        let lanes = self.lanes.borrow();
        for (i, r, _) in self.lane_asked.borrow_mut().drain(..) {
            if let Some(t) = lanes.get(i) {
                t.touched.borrow_mut()[r as usize] = true;
            }
        }
    }

    /// Sends header `h` to rank `to`'s main endpoint through lane `i` (its completion is read
    /// by later progress).
    fn lane_send(&self, shm: &Shm, i: usize, to: u32, h: &Header) -> Result<()> {
        let lanes = self.lanes.borrow();
        let lane = &lanes[i];
        let mut turns = 0;
        while lane.busy[SEND].get() {
            lane.poll(self.ep.provider())?;
            self.stalled_on(shm, &mut turns, lane.dest[SEND].get())?;
        }
        h.encode(&mut lane.buf.borrow_mut()[..]);
        let buf = lane.buf.borrow().as_ptr();
        lane.dest[SEND].set(to);
        loop {
            // SAFETY: the lane's buffer and send context stay untouched until the send's
            // completion: the next `lane_send` waits for it first (above), and the lane's
            // endpoint, dropped first, is closed before them.
            let r = unsafe {
                lane.ep.send(
                    buf,
                    HDR,
                    std::ptr::null_mut(),
                    lane.addrs[to as usize],
                    std::ptr::from_ref(&lane.ctx[SEND]).cast_mut(),
                )
            };
            match r {
                Ok(()) => {
                    lane.busy[SEND].set(true);
                    return Ok(());
                }
                Err(e) if e.is_again() => {
                    lane.poll(self.ep.provider())?;
                    self.poll_cq(shm)?;
                    self.stalled_on(shm, &mut turns, to)?;
                }
                Err(e) => return Err(ofi_err(e, self.ep.provider(), Some(to))),
            }
        }
    }
}
