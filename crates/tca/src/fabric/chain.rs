//! Chains: reusable, prebuilt lists of puts with an optional final signal (the papers'
//! chained DMA descriptors).
//!
//! A chain is validated and resolved once, when it is built: every source range, target range
//! and the signal word are checked, and the target mappings are held by the chain. Starting it
//! is then a straight run of copies and one signal, with no lookup, allocation or system call
//! (the papers build descriptors once and reuse them, and so does every collective in tca).
//!
//! Sources must be registered local segments, not borrowed slices: a chain outlives any one
//! call, so it cannot hold a borrow. On shared memory a started chain is complete when
//! [`World::start`] returns; the final signal is raised after all its puts, so a reader that
//! sees the signal sees every put of the chain. A put to a rank on another node is a network
//! put of the same bytes (complete at [`World::quiet`], and ordered before a signal to the
//! same rank; before a signal to another rank the chain waits for it to complete).

use std::cell::RefCell;
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};

use super::segment::{Handle, Region, Segment, out_of_bounds};
use super::world::{SignalOp, World};

/// Where a chain's put or signal lands.
#[derive(Debug)]
enum Target {
    /// A mapping of this node: the byte offset in it.
    Mapped(Arc<Region>, usize),
    /// A rank reached through the network: its handle and the data offset.
    Net(Handle, usize),
}

#[derive(Debug)]
struct Op {
    src: Arc<Region>,
    src_at: usize,
    dst: Target,
    len: usize,
}

#[derive(Debug)]
struct Signal {
    target: Target,
    owner: u32,
    op: SignalOp,
}

/// A prebuilt list of puts with an optional final signal. Build with [`World::chain`].
#[derive(Debug)]
pub struct Chain {
    job: u64,
    rank: u32,
    ops: Vec<Op>,
    signal: Option<Signal>,
    /// Staging for network puts (their sources are shared memory, not Rust slices), sized
    /// when the chain is built.
    stage: RefCell<Vec<u8>>,
    /// Whether a network put goes to another rank than the final signal's.
    quiet_before_signal: bool,
}

impl Chain {
    /// Number of puts in the chain.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the chain has no puts (it may still have a signal).
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Total bytes moved by one start.
    pub fn bytes(&self) -> usize {
        self.ops.iter().map(|o| o.len).sum()
    }
}

/// Builds a [`Chain`]; errors are collected and reported by [`ChainBuilder::build`].
#[derive(Debug)]
pub struct ChainBuilder<'w> {
    world: &'w World,
    ops: Vec<Op>,
    signal: Option<Signal>,
    error: Option<Error>,
}

impl World {
    /// Starts building a chain.
    pub fn chain(&self) -> ChainBuilder<'_> {
        ChainBuilder {
            world: self,
            ops: Vec::new(),
            signal: None,
            error: None,
        }
    }

    /// Runs every put of `chain` in order, then its final signal. Complete on return.
    pub fn start(&self, chain: &Chain) -> Result<()> {
        self.start_with(chain, None)
    }

    /// Like [`World::start`], with the final signal's operation replaced by `op` (for
    /// example a fresh sequence number per call).
    pub fn start_with(&self, chain: &Chain, op: Option<SignalOp>) -> Result<()> {
        if chain.job != self.job_id() || chain.rank != self.rank() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "chain was built by another rank or job",
            ));
        }
        let freed = |h: Handle| {
            Error::new(
                ErrorKind::InvalidHandle,
                format!(
                    "chain refers to segment {} of rank {}, which has been freed",
                    h.segment(),
                    h.rank()
                ),
            )
        };
        for o in &chain.ops {
            if !o.src.is_live() {
                return Err(freed(o.src.handle));
            }
            match &o.dst {
                Target::Mapped(d, at) => {
                    if !d.is_live() {
                        return Err(freed(d.handle));
                    }
                    // Cannot fail: both offsets came from `Region::range` when the op was added.
                    d.map.copy_from(*at, &o.src.map, o.src_at, o.len)?;
                }
                Target::Net(h, off) => {
                    // Straight from the segment where the network takes it (MtoM); else (a
                    // piece a message carries) through a copy.
                    if !self.put_region_net(h, *off, &o.src, o.src_at, o.len)? {
                        let mut stage = chain.stage.borrow_mut();
                        // Cannot fail: `src_at` came from `Region::range` when the op was added.
                        o.src.map.read(o.src_at, &mut stage[..o.len])?;
                        self.put(h, *off, &stage[..o.len])?;
                    }
                }
            }
        }
        if let Some(s) = &chain.signal {
            let op = op.unwrap_or(s.op);
            match &s.target {
                Target::Mapped(region, at) => {
                    if !region.is_live() {
                        return Err(Error::new(
                            ErrorKind::InvalidHandle,
                            "chain's signal segment has been freed",
                        ));
                    }
                    let word = region
                        .map
                        .atomic_u64(*at)
                        .ok_or_else(|| Error::new(ErrorKind::Transport, "signal word moved"))?;
                    if chain.quiet_before_signal {
                        self.quiet()?;
                    }
                    self.raise(word, s.owner, op);
                }
                Target::Net(h, off) => {
                    if chain.quiet_before_signal {
                        self.quiet()?;
                    }
                    self.signal(h, *off, op)?;
                }
            }
        }
        Ok(())
    }
}

impl ChainBuilder<'_> {
    fn record(&mut self, r: Result<()>) {
        if let (Err(e), None) = (r, &self.error) {
            self.error = Some(e);
        }
    }

    /// Adds a put of `len` bytes from `src` at `src_off` to `dst` at `dst_off`.
    pub fn put(
        self,
        src: &Segment,
        src_off: usize,
        dst: &Handle,
        dst_off: usize,
        len: usize,
    ) -> Self {
        self.put_region(&src.region, src_off, dst, dst_off, len)
    }

    /// [`ChainBuilder::put`] from a region the caller keeps alive by its `Arc` (the message
    /// engine's persistent sends, whose segment borrow ends before the chain does).
    pub(crate) fn put_region(
        mut self,
        src: &Arc<Region>,
        src_off: usize,
        dst: &Handle,
        dst_off: usize,
        len: usize,
    ) -> Self {
        let r = (|| {
            if src.handle.rank() != self.world.rank() || src.handle.job() != self.world.job_id() {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    "a chain's source must be a segment of this rank",
                ));
            }
            let s_at = src.range(src_off, len)?;
            let target = if self.world.is_remote(dst.rank()) {
                self.world.attach(dst)?;
                self.world.put(dst, dst_off, &[])?; // checks the bounds of the start
                if dst_off.checked_add(len).is_none_or(|e| e > dst.len()) {
                    return Err(out_of_bounds(dst, dst_off, len));
                }
                Target::Net(*dst, dst_off)
            } else {
                let d = self.world.resolve(dst)?;
                let d_at = d.range(dst_off, len)?;
                Target::Mapped(d, d_at)
            };
            self.ops.push(Op {
                src: src.clone(),
                src_at: s_at,
                dst: target,
                len,
            });
            Ok(())
        })();
        self.record(r);
        self
    }

    /// Ends the chain with `op` on the signal word at `off` in `sig`.
    pub fn signal(mut self, sig: &Handle, off: usize, op: SignalOp) -> Self {
        let r = (|| {
            let target = if self.world.is_remote(sig.rank()) {
                // A remote word: checked now, and by its owner when it is raised.
                self.world.check_remote_word(sig, off)?;
                Target::Net(*sig, off)
            } else {
                let region = self.world.resolve(sig)?;
                region.word(off)?;
                let at = region.range(off, 8)?;
                Target::Mapped(region, at)
            };
            self.signal = Some(Signal {
                target,
                owner: sig.rank(),
                op,
            });
            Ok(())
        })();
        self.record(r);
        self
    }

    /// The chain, or the first error any step met.
    pub fn build(self) -> Result<Chain> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let net_len = self
            .ops
            .iter()
            .filter(|o| matches!(o.dst, Target::Net(..)))
            .map(|o| o.len)
            .max()
            .unwrap_or(0);
        let owner = self.signal.as_ref().map(|s| s.owner);
        let quiet_before_signal = owner.is_some()
            && self.ops.iter().any(|o| match &o.dst {
                Target::Net(h, _) => Some(h.rank()) != owner,
                Target::Mapped(..) => false,
            });
        Ok(Chain {
            job: self.world.job_id(),
            rank: self.world.rank(),
            ops: self.ops,
            signal: self.signal,
            stage: RefCell::new(vec![0; net_len]),
            quiet_before_signal,
        })
    }
}
