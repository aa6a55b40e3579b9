//! `tca bench floor`: the machine's physical floor, against which every latency and bandwidth
//! figure of tca is stated.
//!
//! - **Cache-line half round trip**: two processes bounce one 64-bit word in one shared cache
//!   line (rank 0 writes odd values, rank 1 answers with the next even one), spinning with
//!   plain atomic loads, no futex, no checks. One half round trip moves the line once between
//!   cores: nothing that communicates through shared memory can be faster.
//!   (A comparison's parent measures the same on two threads of its own before each half:
//!   `tca_mpi::rounds::line_floor_ns`.)
//! - **Two-line half round trip**: the same with each direction its own word, in the
//!   receiver's memory (rank 0 writes into rank 1's segment and polls its own, rank 1 the
//!   other way round): the pattern of lines a put-and-signal ping-pong moves, with raw
//!   atomics. On the development machine it took about twice the one-line figure
//!   (BENCHMARKS.md, "The 8-byte path"), and tca's 8-byte put_signal ping-pong 0.7-1.3x it: the
//!   reference for what a put can reach, not a strict floor.
//! - **Small-message stream**: rank 0 streams 8-byte messages to rank 1 through a ring of 64
//!   cache lines in rank 1's memory, raw atomics again (a payload word, then a sequence word;
//!   rank 1 spins on the sequence word, reads the payload and hands back a credit word in rank
//!   0's memory every fourth message): the time per message of what a root's back-to-back
//!   8-byte broadcasts or scatters move, with no software. Four forms: one message per line
//!   (the layout of tca's rings, `fabric::ring`) or two (32-byte cells, as Open MPI's
//!   shared-memory fast boxes align small messages), each with the sequence word stored plain
//!   (Release: the store waits in the store buffer while the sender goes on) or SeqCst (a
//!   locked store, which waits until the line is the sender's: tca's signals,
//!   [`tca::World::signal`], so that a waiter may sleep without losing its wake-up). A waiter
//!   that never sleeps, as MPI's spin, can be signalled by plain stores.
//! - **memcpy bandwidth**: one thread copying between two buffers of 4 KiB, 64 KiB, 1 MiB and
//!   16 MiB, plus 4 MiB to compare with the largest ping-pong (the buffers are reused, as IMB reuses its buffers).
//!   Both buffers start on a page boundary, as tca's segments and slots do. Two plain `Vec`s
//!   from malloc start 16 bytes past a page offset of each other: every store then lands
//!   4 KiB-aliased a few bytes after a pending load, and on this machine's AMD EPYC the copy
//!   ran at 24-30 GB/s at 4 and 64 KiB instead of 50-68 GB/s page-aligned (1 MiB: the same
//!   either way). That, not the machine, is why earlier floors showed a dip at 64 KiB.

use std::sync::atomic::Ordering;
use std::time::Instant;

use serde::Serialize;

use crate::machine::Machine;
use anyhow::Result;

/// Floor measurements.
#[derive(Debug, Clone, Serialize)]
pub struct Floor {
    /// Machine and date.
    pub machine: Machine,
    /// Half round trip of one cache line between two processes, nanoseconds (best of rounds).
    pub cacheline_half_rtt_ns: f64,
    /// Median over rounds of the same.
    pub cacheline_half_rtt_ns_median: f64,
    /// Half round trip with each direction its own line in the receiver's memory (what a put
    /// moves), nanoseconds, best of rounds.
    pub two_line_half_rtt_ns: f64,
    /// Median over rounds of the same.
    pub two_line_half_rtt_ns_median: f64,
    /// Streams of 8-byte messages (see the module doc), nanoseconds per message, in the order
    /// of [`STREAM_FORMS`].
    pub stream_8b: Vec<StreamFloor>,
    /// (bytes, GB/s) of single-thread memcpy.
    pub memcpy_gb_s: Vec<(usize, f64)>,
    /// Cross-core streaming, GB/s: rank 0 writes 64 MiB in 256 KiB chunks through a ring of
    /// four slots in rank 1's memory, rank 1 copies each chunk out. The bandwidth floor of
    /// any collective that moves data from one core to another.
    pub stream_gb_s: f64,
}

/// One form of the small-message stream and its time per message.
#[derive(Debug, Clone, Serialize)]
pub struct StreamFloor {
    /// Messages per cache line (1 or 2).
    pub per_line: usize,
    /// Whether the sequence word is stored SeqCst (a locked store) rather than Release.
    pub seqcst: bool,
    /// Nanoseconds per message, best of rounds.
    pub ns: f64,
    /// Median over rounds of the same.
    pub ns_median: f64,
}

/// The small-message stream's forms: (messages per line, SeqCst sequence word).
pub const STREAM_FORMS: [(usize, bool); 4] = [(1, false), (1, true), (2, false), (2, true)];

/// Sizes of the memcpy measurement.
pub const MEMCPY_SIZES: [usize; 5] = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20];

/// Runs on two ranks; rank 0 returns the result.
pub fn run(world: &tca::World, iters: u64, rounds: u32) -> Result<Option<Floor>> {
    let (mut per_round, mut two) = (Vec::new(), Vec::new());
    let mut streams = vec![Vec::new(); STREAM_FORMS.len()];
    let mut line = CacheLine::new(world)?;
    let mut small = SmallStream::new(world)?;
    line.round(world, iters)?; // warm-up
    line.round_two_lines(world, iters)?;
    for (per_line, seqcst) in STREAM_FORMS {
        small.round(world, per_line, seqcst, iters)?;
    }
    for _ in 0..rounds {
        per_round.push(line.round(world, iters)?);
        two.push(line.round_two_lines(world, iters)?);
        for (v, (per_line, seqcst)) in streams.iter_mut().zip(STREAM_FORMS) {
            v.push(small.round(world, per_line, seqcst, 2 * iters)?);
        }
    }
    let stream_gb_s = stream(world, 256 << 10, 64 << 20)?;
    if world.rank() != 0 {
        return Ok(None);
    }
    for v in streams.iter_mut().chain([&mut per_round, &mut two]) {
        v.sort_by(f64::total_cmp);
    }
    let stream_8b = streams
        .iter()
        .zip(STREAM_FORMS)
        .map(|(v, (per_line, seqcst))| StreamFloor {
            per_line,
            seqcst,
            ns: v[0],
            ns_median: v[v.len() / 2],
        })
        .collect();
    let memcpy_gb_s = MEMCPY_SIZES
        .iter()
        .map(|&n| (n, memcpy_bandwidth(n)))
        .collect();
    Ok(Some(Floor {
        machine: Machine::here(),
        cacheline_half_rtt_ns: per_round[0],
        cacheline_half_rtt_ns_median: per_round[per_round.len() / 2],
        two_line_half_rtt_ns: two[0],
        two_line_half_rtt_ns_median: two[two.len() / 2],
        stream_8b,
        memcpy_gb_s,
        stream_gb_s,
    }))
}

/// Cross-core streaming bandwidth between ranks 0 and 1 in GB/s (see [`Floor::stream_gb_s`]),
/// with tca's own put, signal, wait and read: `total` bytes in `chunk`-byte pieces through four
/// slots, each acknowledged by the reader. Collective; the result is meaningful on rank 0.
pub fn stream(world: &tca::World, chunk: usize, total: usize) -> Result<f64> {
    const SLOTS: usize = 4;
    let seg = world.alloc_symmetric(SLOTS * chunk + 256)?;
    let (me, ctl) = (world.rank(), SLOTS * chunk);
    let n = (total / chunk) as u64;
    world.barrier()?;
    let t0 = Instant::now();
    if me == 0 {
        let peer = *seg.handle(1)?;
        let src = vec![7u8; chunk];
        for i in 1..=n {
            if i > SLOTS as u64 {
                world.wait_until(&seg, ctl + 128, i - SLOTS as u64)?;
            }
            let at = ((i - 1) as usize % SLOTS) * chunk;
            world.put_signal(&peer, at, &src, &peer, ctl, tca::SignalOp::Set(i))?;
        }
        world.wait_until(&seg, ctl + 128, n)?;
    } else if me == 1 {
        let peer = *seg.handle(0)?;
        let mut dst = vec![0u8; chunk];
        for i in 1..=n {
            world.wait_until(&seg, ctl, i)?;
            seg.read(((i - 1) as usize % SLOTS) * chunk, &mut dst)?;
            world.signal(&peer, ctl + 128, tca::SignalOp::Set(i))?;
        }
    }
    let gbs = (n as usize * chunk) as f64 / t0.elapsed().as_secs_f64() / 1e9;
    world.barrier()?;
    Ok(gbs)
}

/// One shared word per pair (in the pair leader's segment), bounced by plain atomics; and
/// for the two-line round, a word in each rank's own segment that its partner writes.
#[derive(Debug)]
pub struct CacheLine {
    word: tca::RemoteWord,
    /// This rank's word of the two-line round (it polls it)...
    mine: tca::RemoteWord,
    /// ... and its partner's (it writes it).
    theirs: tca::RemoteWord,
    leader: bool,
    active: bool,
    base: u64,
    _seg: tca::SymmetricSegment,
}

impl CacheLine {
    /// Collective: allocates the words.
    pub fn new(world: &tca::World) -> Result<Self> {
        let seg = world.alloc_symmetric(4096)?;
        let me = world.rank();
        let pair_leader = me - me % 2;
        let active = pair_leader + 1 < world.size();
        let partner = if !active {
            me
        } else if me == pair_leader {
            me + 1
        } else {
            pair_leader
        };
        let word = world.remote_word(seg.handle(pair_leader)?, 0)?;
        // A line of its own, away from the one-line word and its neighbour line.
        let mine = world.remote_word(seg.handle(me)?, 256)?;
        let theirs = world.remote_word(seg.handle(partner)?, 256)?;
        Ok(Self {
            word,
            mine,
            theirs,
            leader: me % 2 == 0,
            active,
            base: 0,
            _seg: seg,
        })
    }

    /// One round of `iters` round trips over two lines (see the module docs) between
    /// barriers; the half round trip in ns.
    pub fn round_two_lines(&mut self, world: &tca::World, iters: u64) -> Result<f64> {
        let local =
            || anyhow::anyhow!("the cache-line floor needs both ranks of a pair on one node");
        let mine = self.mine.node_local().ok_or_else(local)?;
        let theirs = self.theirs.node_local().ok_or_else(local)?;
        let base = self.base;
        world.barrier()?;
        let t0 = Instant::now();
        if self.active {
            for i in 0..iters {
                let v = base + i + 1;
                if self.leader {
                    theirs.store(v, Ordering::Release);
                }
                while mine.load(Ordering::Acquire) != v {
                    std::hint::spin_loop();
                }
                if !self.leader {
                    theirs.store(v, Ordering::Release);
                }
            }
        }
        let ns = t0.elapsed().as_secs_f64() * 1e9 / (2 * iters) as f64;
        self.base += iters;
        world.barrier()?;
        Ok(ns)
    }

    /// Whether this rank reports (a pair leader with a partner).
    pub fn measures(&self) -> bool {
        self.active && self.leader
    }

    /// One round of `iters` round trips between barriers; the half round trip in ns.
    pub fn round(&mut self, world: &tca::World, iters: u64) -> Result<f64> {
        let w = self.word.node_local().ok_or_else(|| {
            anyhow::anyhow!("the cache-line floor needs both ranks of a pair on one node")
        })?;
        let base = self.base;
        world.barrier()?;
        let t0 = Instant::now();
        if self.active && self.leader {
            for i in 0..iters {
                w.store(base + 2 * i + 1, Ordering::Release);
                while w.load(Ordering::Acquire) != base + 2 * i + 2 {
                    std::hint::spin_loop();
                }
            }
        } else if self.active {
            for i in 0..iters {
                while w.load(Ordering::Acquire) != base + 2 * i + 1 {
                    std::hint::spin_loop();
                }
                w.store(base + 2 * i + 2, Ordering::Release);
            }
        }
        let ns = t0.elapsed().as_secs_f64() * 1e9 / (2 * iters) as f64;
        self.base += 2 * iters;
        world.barrier()?;
        Ok(ns)
    }
}

/// The small-message stream of the module doc between ranks 0 and 1: the words of rank 1's
/// ring of [`SmallStream::LINES`] lines and rank 0's credit word.
#[derive(Debug)]
pub struct SmallStream {
    /// Every word of the ring's lines, in order.
    ring: Vec<tca::RemoteWord>,
    credit: tca::RemoteWord,
    me: u32,
    /// Messages sent in earlier rounds (the sequence words keep counting).
    base: u64,
    _seg: tca::SymmetricSegment,
}

impl SmallStream {
    /// Cache lines in the ring (64, as a collectives' ring of tca has per pair).
    pub const LINES: usize = 64;
    /// A credit goes back every this many messages.
    pub const ACK_EVERY: u64 = 4;
    /// The credit word, a line of its own past the ring's lines.
    const CREDIT_AT: usize = Self::LINES * 64 + 128;

    /// Collective: allocates the ring and the credit word.
    pub fn new(world: &tca::World) -> Result<Self> {
        let seg = world.alloc_symmetric(Self::CREDIT_AT + 128)?;
        let (me, size) = (world.rank(), world.size());
        let (ring, credit) = if size >= 2 && me < 2 {
            let ring = (0..Self::LINES * 8)
                .map(|k| world.remote_word(seg.handle(1)?, 8 * k))
                .collect::<tca::Result<Vec<_>>>()?;
            (ring, world.remote_word(seg.handle(0)?, Self::CREDIT_AT)?)
        } else {
            (
                Vec::new(),
                world.remote_word(seg.handle(me)?, Self::CREDIT_AT)?,
            )
        };
        Ok(Self {
            ring,
            credit,
            me,
            base: 0,
            _seg: seg,
        })
    }

    /// One round of `n` messages, `per_line` (1 or 2) to a cache line, each sequence word
    /// stored SeqCst or Release, between barriers: nanoseconds per message, on rank 0 (0
    /// elsewhere).
    pub fn round(
        &mut self,
        world: &tca::World,
        per_line: usize,
        seqcst: bool,
        n: u64,
    ) -> Result<f64> {
        let local = || anyhow::anyhow!("the small-message stream needs ranks 0 and 1 on one node");
        let active = !self.ring.is_empty();
        let words = if active {
            self.ring
                .iter()
                .map(|w| w.node_local().ok_or_else(local))
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let credit = if active {
            Some(self.credit.node_local().ok_or_else(local)?)
        } else {
            None
        };
        // A cell is `cw` words: the payload in its first, the sequence word in its last.
        let cw = 8 / per_line;
        let cells = (Self::LINES * per_line) as u64;
        let cell = |i: u64| ((i - 1) % cells) as usize * cw;
        let base = self.base;
        world.barrier()?;
        let t0 = Instant::now();
        match (self.me, credit) {
            (0, Some(credit)) => {
                let mut acked = base;
                for i in base + 1..=base + n {
                    while i > acked + cells {
                        acked = credit.load(Ordering::Acquire);
                        std::hint::spin_loop();
                    }
                    let c = cell(i - base);
                    words[c].store(i, Ordering::Relaxed);
                    if seqcst {
                        words[c + cw - 1].swap(i, Ordering::SeqCst);
                    } else {
                        words[c + cw - 1].store(i, Ordering::Release);
                    }
                }
                while credit.load(Ordering::Acquire) < base + n {
                    std::hint::spin_loop();
                }
            }
            (1, Some(credit)) => {
                let mut sum = 0u64;
                for i in base + 1..=base + n {
                    let c = cell(i - base);
                    while words[c + cw - 1].load(Ordering::Acquire) < i {
                        std::hint::spin_loop();
                    }
                    sum = sum.wrapping_add(words[c].load(Ordering::Relaxed));
                    if (i - base) % Self::ACK_EVERY == 0 || i == base + n {
                        credit.store(i, Ordering::Release);
                    }
                }
                std::hint::black_box(sum);
            }
            _ => {}
        }
        let ns = t0.elapsed().as_secs_f64() * 1e9 / n as f64;
        self.base += n;
        world.barrier()?;
        Ok(if self.me == 0 { ns } else { 0.0 })
    }
}

/// Single-thread memcpy bandwidth in GB/s (10^9 bytes/s) at `n` bytes, best of 5 rounds of
/// about 50 ms each.
pub fn memcpy_bandwidth(n: usize) -> f64 {
    const PAGE: usize = 4096;
    // One allocation holding both buffers, each starting on a page boundary (see the module
    // doc): [pad][src, rounded up to pages][dst].
    let span = n.div_ceil(PAGE).max(1) * PAGE;
    let mut buf = vec![0u8; 2 * span + PAGE];
    let pad = (PAGE - buf.as_ptr() as usize % PAGE) % PAGE;
    let (src, dst) = buf[pad..pad + 2 * span].split_at_mut(span);
    let (src, dst) = (&mut src[..n], &mut dst[..n]);
    src.fill(1);
    dst.copy_from_slice(src);
    let src: &[u8] = src;
    let reps = ((256usize << 20) / n).clamp(4, 1 << 16);
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t0 = Instant::now();
        for _ in 0..reps {
            dst.copy_from_slice(std::hint::black_box(src));
            std::hint::black_box(&mut *dst);
        }
        let gbs = (n * reps) as f64 / t0.elapsed().as_secs_f64() / 1e9;
        best = best.max(gbs);
    }
    best
}

impl crate::Report for Floor {
    fn table(&self) -> String {
        let mut s = format!("# tca bench floor: {}\n", self.machine.line());
        s += &format!(
            "cache-line half round trip (2 processes): {:.1} ns best, {:.1} ns median\n",
            self.cacheline_half_rtt_ns, self.cacheline_half_rtt_ns_median
        );
        s += &format!(
            "two-line half round trip (raw atomics, each direction its own line in the receiver's memory, as a put moves): {:.1} ns best, {:.1} ns median\n",
            self.two_line_half_rtt_ns, self.two_line_half_rtt_ns_median
        );
        s += &format!(
            "8-byte message stream (raw atomics, {} lines in the receiver's memory, a credit every {}), ns per message, best and median:\n",
            SmallStream::LINES,
            SmallStream::ACK_EVERY
        );
        for f in &self.stream_8b {
            s += &format!(
                "  {} per line, sequence word {:<7} {:>6.1} {:>6.1}\n",
                f.per_line,
                if f.seqcst { "SeqCst" } else { "Release" },
                f.ns,
                f.ns_median
            );
        }
        s += &format!(
            "cross-core streaming (one core writes 256 KiB chunks, the other copies them out): {:.2} GB/s\n",
            self.stream_gb_s
        );
        s += "single-thread memcpy:\n";
        for (n, g) in &self.memcpy_gb_s {
            s += &format!("  {:>10} bytes  {:>7.2} GB/s\n", n, g);
        }
        s
    }
}
