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
//! sees the signal sees every put of the chain.

use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
use crate::transport::shm::HEADER_BYTES;

use super::segment::{Handle, Region, Segment};
use super::world::{SignalOp, World};

#[derive(Debug)]
struct Op {
    src: Arc<Region>,
    src_at: usize,
    dst: Arc<Region>,
    dst_at: usize,
    len: usize,
}

#[derive(Debug)]
struct Signal {
    region: Arc<Region>,
    at: usize,
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
        for o in &chain.ops {
            if !o.dst.is_live() || !o.src.is_live() {
                let h = if o.dst.is_live() {
                    o.src.handle
                } else {
                    o.dst.handle
                };
                return Err(Error::new(
                    ErrorKind::InvalidHandle,
                    format!(
                        "chain refers to segment {} of rank {}, which has been freed",
                        h.segment(),
                        h.rank()
                    ),
                ));
            }
            o.dst.map.copy_from(o.dst_at, &o.src.map, o.src_at, o.len);
        }
        if let Some(s) = &chain.signal {
            if !s.region.is_live() {
                return Err(Error::new(
                    ErrorKind::InvalidHandle,
                    "chain's signal segment has been freed",
                ));
            }
            let word = s
                .region
                .map
                .atomic_u64(s.at)
                .ok_or_else(|| Error::new(ErrorKind::Transport, "signal word moved"))?;
            self.raise(word, s.owner, op.unwrap_or(s.op));
        }
        Ok(())
    }

    pub(crate) fn resolve_arc(&self, h: &Handle) -> Result<Arc<Region>> {
        // Attach through a zero-length put (checks job, rank, key and liveness), then take the
        // mapping out of the cache.
        self.put(h, 0, &[])?;
        self.cached(h).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidHandle,
                "segment vanished while building a chain",
            )
        })
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
        mut self,
        src: &Segment,
        src_off: usize,
        dst: &Handle,
        dst_off: usize,
        len: usize,
    ) -> Self {
        let r = (|| {
            if src.handle().rank() != self.world.rank() || src.handle().job() != self.world.job_id()
            {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    "a chain's source must be a segment of this rank",
                ));
            }
            let s_at = src.region.range(src_off, len)?;
            let d = self.world.resolve_arc(dst)?;
            let d_at = d.range(dst_off, len)?;
            self.ops.push(Op {
                src: src.region.clone(),
                src_at: s_at,
                dst: d,
                dst_at: d_at,
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
            let region = self.world.resolve_arc(sig)?;
            region.word(off)?;
            self.signal = Some(Signal {
                region,
                at: HEADER_BYTES + off,
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
        Ok(Chain {
            job: self.world.job_id(),
            rank: self.world.rank(),
            ops: self.ops,
            signal: self.signal,
        })
    }
}
