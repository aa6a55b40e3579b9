//! `tca bench pingpong`: put_signal ping-pong between pairs of ranks (0-1, 2-3, ...).
//!
//! The leader of each pair puts `size` bytes and a sequence number into its partner's segment
//! and waits for the same back; the half round trip is the elapsed time over twice the
//! repetitions, as IMB's PingPong reports it. Messages of up to 56 bytes share one cache line
//! with their signal word ([`tca::fabric::line`]); larger ones go to a page-aligned buffer with
//! the signal in a separate line. Buffers are reused across repetitions, as IMB does.
//!
//! With more than one pair (for example 8 ranks on 2 cores) every pair runs at once and the
//! table shows the minimum, mean and maximum over pairs.
//!
//! Two extra measurements make the figures comparable on a machine whose core placement
//! drifts (virtual machines move virtual CPUs): the floor (a raw cache-line ping-pong) and the
//! 8-byte put_signal ping-pong are run in alternating rounds and their ratio is taken round by
//! round; and a soak of many 8-byte round trips checks that resident memory and the mapping
//! count stay flat.

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use tca::fabric::line;
use tca::{Handle, SignalOp, SymmetricSegment, World};

use crate::floor::CacheLine;
use crate::machine::{Machine, MemStat};

/// Options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Largest message in bytes (sizes are 0 and the powers of two up to it).
    pub max_size: usize,
    /// Repetitions per size (default: by size, see [`default_iters`]).
    pub iters: Option<u64>,
    /// 8-byte round trips of the memory soak (0: skip).
    pub soak: u64,
}

/// One size's result over all pairs.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Message size.
    pub bytes: usize,
    /// Repetitions timed.
    pub repetitions: u64,
    /// Fastest pair's half round trip, microseconds.
    pub t_min_us: f64,
    /// Mean over pairs.
    pub t_avg_us: f64,
    /// Slowest pair.
    pub t_max_us: f64,
    /// bytes / t_avg, in MB/s (10^6 bytes per second).
    pub mb_per_s: f64,
}

/// The whole result.
#[derive(Debug, Clone, Serialize)]
pub struct PingPong {
    /// Machine and date.
    pub machine: Machine,
    /// Ranks in the job.
    pub ranks: u32,
    /// Pairs measured at once.
    pub pairs: u32,
    /// The spin policy in force (spins, yields before sleeping).
    pub spin: (u32, u32),
    /// Rank 0's pair: (floor ns, 8-byte put_signal ns) of alternating rounds.
    pub floor_rounds: Vec<(f64, f64)>,
    /// Median over rounds of 8-byte put_signal / floor.
    pub ratio_8b_to_floor: f64,
    /// Single-thread memcpy bandwidth at the largest size, GB/s, measured by rank 0 in this run.
    pub memcpy_gb_s_at_max: f64,
    /// Per-size results.
    pub rows: Vec<Row>,
    /// Rank 0's memory right after joining (control overhead only).
    pub mem_at_init: MemStat,
    /// Rank 0's memory before the soak.
    pub mem_before_soak: MemStat,
    /// Rank 0's memory after the soak.
    pub mem_after_soak: MemStat,
    /// put_signal calls made by rank 0 during the soak.
    pub soak_put_signals: u64,
}

/// Default repetitions for a message of `bytes`: many for small messages, fewer for large,
/// about the same time per size (IMB's rule of thumb).
pub fn default_iters(bytes: usize) -> u64 {
    ((1u64 << 28) / (bytes.max(8192) as u64)).clamp(50, 20_000)
}

/// A pair's ping-pong state: the segment, the partner's handle, the running sequence.
struct Pair {
    seg: SymmetricSegment,
    peer: Option<Handle>,
    leader: bool,
    line_at: usize,
    seq: u64,
}

impl Pair {
    fn new(world: &World, max_size: usize) -> Result<Self> {
        let line_at = max_size.next_multiple_of(4096);
        let seg = world.alloc_symmetric(line_at + line::SLOT_STRIDE)?;
        let me = world.rank();
        let partner = me ^ 1;
        let peer = if partner < world.size() / 2 * 2 {
            Some(*seg.handle(partner)?)
        } else {
            None
        };
        Ok(Self {
            seg,
            peer,
            leader: me % 2 == 0,
            line_at,
            seq: 0,
        })
    }

    /// `warm + n` round trips of `msg`; the half round trip of the last `n`, microseconds.
    fn round(&mut self, world: &World, msg: &[u8], warm: u64, n: u64) -> Result<f64> {
        let sig = self.line_at + line::SIGNAL;
        let dst_off = if msg.len() <= line::PAYLOAD_MAX {
            self.line_at
        } else {
            0
        };
        let mut t0 = Instant::now();
        if let Some(peer) = &self.peer {
            for i in 1..=warm + n {
                if i == warm + 1 {
                    t0 = Instant::now();
                }
                let s = self.seq + i;
                if self.leader {
                    world.put_signal(peer, dst_off, msg, peer, sig, SignalOp::Set(s))?;
                    world.wait_until(&self.seg, sig, s)?;
                } else {
                    world.wait_until(&self.seg, sig, s)?;
                    world.put_signal(peer, dst_off, msg, peer, sig, SignalOp::Set(s))?;
                }
            }
        }
        let us = t0.elapsed().as_secs_f64() * 1e6 / (2 * n) as f64;
        self.seq += warm + n;
        Ok(us)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs on every rank; rank 0 returns the result.
pub fn run(world: &World, opts: &Options) -> Result<Option<PingPong>> {
    let mem_at_init = MemStat::now();
    let sizes = crate::sizes_up_to(opts.max_size);
    let mut pair = Pair::new(world, opts.max_size)?;
    let src = vec![0xa5u8; opts.max_size.max(8)];
    let me = world.rank();

    // Floor and 8-byte put_signal in alternating rounds. The floor is a pure spin, which is
    // meaningless (and endless) when ranks outnumber cores: skip it then.
    let dedicated = world.size() <= tca::transport::shm::wait::SpinPolicy::cpus();
    let mut line = CacheLine::new(world)?;
    if dedicated {
        line.round(world, opts.iters.unwrap_or(20_000))?;
    }
    let mut floor_rounds = Vec::new();
    let floor_iters = opts.iters.unwrap_or(50_000);
    for _ in 0..if dedicated { 7 } else { 0 } {
        let f = line.round(world, floor_iters)?;
        world.barrier()?;
        let t = pair.round(world, &src[..8], floor_iters / 50 + 1, floor_iters)? * 1000.0;
        world.barrier()?;
        floor_rounds.push((f, t));
    }

    let mut times = Vec::with_capacity(sizes.len());
    let mut reps = Vec::with_capacity(sizes.len());
    for &size in &sizes {
        let n = opts.iters.unwrap_or_else(|| default_iters(size));
        times.push(pair.round(world, &src[..size], n / 10 + 2, n)?);
        reps.push(n);
        world.barrier()?;
    }

    // Memory soak: many 8-byte round trips, resident memory and mappings before and after.
    let mem_before_soak = MemStat::now();
    if opts.soak > 0 {
        pair.round(world, &src[..8], 0, opts.soak)?;
    }
    let mem_after_soak = MemStat::now();
    world.barrier()?;

    // Gather every leader's times at rank 0 (setup-sized data: the fabric's exchange).
    let mine: Vec<u8> = if pair.peer.is_some() && pair.leader {
        times.iter().flat_map(|t| t.to_le_bytes()).collect()
    } else {
        Vec::new()
    };
    let all = world.exchange(&mine)?;
    if me != 0 {
        return Ok(None);
    }
    let per_pair: Vec<Vec<f64>> = all
        .iter()
        .filter(|b| b.len() == 8 * sizes.len())
        .map(|b| {
            b.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8-byte chunk")))
                .collect()
        })
        .collect();
    let rows = sizes
        .iter()
        .enumerate()
        .map(|(k, &bytes)| {
            let ts: Vec<f64> = per_pair.iter().map(|p| p[k]).collect();
            let avg = ts.iter().sum::<f64>() / ts.len() as f64;
            Row {
                bytes,
                repetitions: reps[k],
                t_min_us: ts.iter().copied().fold(f64::INFINITY, f64::min),
                t_avg_us: avg,
                t_max_us: ts.iter().copied().fold(0.0, f64::max),
                mb_per_s: if avg > 0.0 { bytes as f64 / avg } else { 0.0 },
            }
        })
        .collect();
    let p = world.spin_policy();
    let ratio_8b_to_floor = median(floor_rounds.iter().map(|(f, t)| t / f).collect());
    Ok(Some(PingPong {
        machine: Machine::here(),
        ranks: world.size(),
        pairs: world.size() / 2,
        spin: (p.spins, p.yields),
        floor_rounds,
        ratio_8b_to_floor,
        memcpy_gb_s_at_max: crate::floor::memcpy_bandwidth(opts.max_size.max(1)),
        rows,
        mem_at_init,
        mem_before_soak,
        mem_after_soak,
        soak_put_signals: opts.soak,
    }))
}

impl crate::Report for PingPong {
    fn table(&self) -> String {
        let mut s = format!(
            "# tca bench pingpong: put_signal, {} ranks ({} pair(s) at once), shared memory\n# {}\n# spin policy: {} spins, {} yields, then futex sleep\n",
            self.ranks,
            self.pairs,
            self.machine.line(),
            self.spin.0,
            self.spin.1
        );
        s += &format!(
            "{:>10} {:>12} {:>12} {:>12} {:>12} {:>12}\n",
            "#bytes", "#repetitions", "t_min[usec]", "t_avg[usec]", "t_max[usec]", "MB/s"
        );
        for r in &self.rows {
            s += &format!(
                "{:>10} {:>12} {:>12.3} {:>12.3} {:>12.3} {:>12.1}\n",
                r.bytes, r.repetitions, r.t_min_us, r.t_avg_us, r.t_max_us, r.mb_per_s
            );
        }
        let rounds: Vec<String> = self
            .floor_rounds
            .iter()
            .map(|(f, t)| format!("{t:.0}/{f:.0}"))
            .collect();
        if rounds.is_empty() {
            s += "# floor comparison skipped: ranks outnumber cores (a pure spin cannot share a core)\n";
        } else {
            s += &format!(
                "# 8 B put_signal vs floor (cache-line half round trip), alternating rounds, ns: {}\n# median ratio 8 B put_signal / floor = {:.2}\n",
                rounds.join(" "),
                self.ratio_8b_to_floor
            );
        }
        if let Some(r) = self.rows.last().filter(|r| r.bytes > 0) {
            s += &format!(
                "# memcpy at {} bytes (one thread, this run): {:.2} GB/s; put_signal / memcpy = {:.2}\n",
                r.bytes,
                self.memcpy_gb_s_at_max,
                r.mb_per_s / 1000.0 / self.memcpy_gb_s_at_max
            );
        }
        s += &format!(
            "# rank 0 memory: {} tca mappings, {} KiB of tca shared memory right after joining\n",
            self.mem_at_init.tca_mappings,
            self.mem_at_init.tca_bytes / 1024
        );
        if self.soak_put_signals > 0 {
            s += &format!(
                "# soak of {} 8 B round trips: RSS {} -> {} KiB, mappings {} -> {}\n",
                self.soak_put_signals,
                self.mem_before_soak.rss_kib,
                self.mem_after_soak.rss_kib,
                self.mem_before_soak.mappings,
                self.mem_after_soak.mappings
            );
        }
        s
    }
}
