//! `tca bench collectives`: time per call of each collective, IMB style.
//!
//! Every rank runs `iters` back-to-back calls of the same collective on the same buffers
//! (after a warm-up), and its time per call is the elapsed time over `iters`; the table shows
//! the minimum, mean and maximum over ranks, as IMB's t_min / t_avg / t_max. Sizes are the
//! bytes of one rank's buffer (for allgather and gather, the block each rank contributes).
//! The same run measures the 8-byte put_signal ping-pong between ranks 0 and 1 and memcpy
//! bandwidth at the largest size, so ratios can be taken within one run; and a soak of many
//! 8-byte allreduce calls checks resident memory and mappings stay flat.

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use tca::{Collective, Comm, Op, World};

use crate::machine::{Machine, MemStat};

/// Options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Collectives to run.
    pub which: Vec<Collective>,
    /// Message sizes in bytes.
    pub sizes: Vec<usize>,
    /// Calls per size (default: by size).
    pub iters: Option<u64>,
    /// Forced algorithms (collective, name).
    pub algos: Vec<(Collective, String)>,
    /// 8-byte allreduce calls of the memory soak (0: skip).
    pub soak: u64,
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Collective name.
    pub collective: &'static str,
    /// Algorithm used.
    pub algorithm: &'static str,
    /// Bytes per rank.
    pub bytes: usize,
    /// Calls timed.
    pub repetitions: u64,
    /// Fastest rank, microseconds per call.
    pub t_min_us: f64,
    /// Mean over ranks.
    pub t_avg_us: f64,
    /// Slowest rank.
    pub t_max_us: f64,
}

/// The result.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Machine and date.
    pub machine: Machine,
    /// Ranks.
    pub ranks: u32,
    /// 8-byte put_signal ping-pong half round trip between ranks 0 and 1, microseconds.
    pub pingpong_8b_us: f64,
    /// memcpy GB/s at the largest size (one thread, rank 0).
    pub memcpy_gb_s: f64,
    /// Cross-core streaming GB/s between ranks 0 and 1 (the bandwidth floor), this run.
    pub stream_gb_s: f64,
    /// Rows.
    pub rows: Vec<Row>,
    /// Scratch bytes each rank registered for the communicator.
    pub scratch_bytes: usize,
    /// Memory before and after the soak.
    pub soak: (u64, MemStat, MemStat),
}

fn default_iters(bytes: usize) -> u64 {
    ((64u64 << 20) / (bytes.max(4096) as u64)).clamp(20, 20_000)
}

fn once(c: &Comm<'_>, coll: Collective, buf: &mut [f64], out: &mut [f64]) -> tca::Result<()> {
    let n = buf.len();
    match coll {
        Collective::Broadcast => c.broadcast(buf, 0),
        Collective::Scatter => c.scatter(out, buf, 0),
        Collective::Gather => c.gather(buf, out, 0),
        Collective::Reduce => c.reduce(buf, &mut out[..n], &Op::Sum, 0),
        Collective::Allgather => c.allgather(buf, out),
        Collective::Allreduce => c.allreduce(buf, &mut out[..n], &Op::Sum),
        Collective::Barrier => c.barrier(),
        Collective::ReduceScatter => c.reduce_scatter(out, buf, &Op::Sum),
        Collective::Alltoall => c.alltoall(&out[..n], buf),
    }
}

/// 8-byte put_signal ping-pong between ranks 0 and 1 (others wait), microseconds.
fn pingpong_8b(w: &World, iters: u64) -> Result<f64> {
    let seg = w.alloc_symmetric(4096)?;
    let me = w.rank();
    let mut t = 0.0;
    if me < 2 {
        let peer = *seg.handle(1 - me)?;
        let t0 = Instant::now();
        for s in 1..=iters {
            if me == 0 {
                w.put_line(&peer, 0, &[1; 8], s)?;
                w.wait_until(&seg, 56, s)?;
            } else {
                w.wait_until(&seg, 56, s)?;
                w.put_line(&peer, 0, &[1; 8], s)?;
            }
        }
        t = t0.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64;
    }
    w.barrier()?;
    Ok(t)
}

/// Runs on every rank; rank 0 returns the report.
pub fn run(w: &World, opts: &Options) -> Result<Option<Report>> {
    let c = Comm::world(w)?;
    let p = c.size() as usize;
    for (coll, name) in &opts.algos {
        c.force(*coll, Some(name))?;
    }
    let pp = if p >= 2 {
        pingpong_8b(w, 200_000)?
    } else {
        0.0
    };
    let stream = if p >= 2 {
        crate::floor::stream(w, 256 << 10, 64 << 20)?
    } else {
        0.0
    };
    let max = opts.sizes.iter().copied().max().unwrap_or(8);
    let elems = max.div_ceil(8).max(1).next_multiple_of(p.max(1));
    let mut buf = vec![1.0f64; elems];
    let mut out = vec![1.0f64; elems * p];
    let mut times = Vec::new();
    for &coll in &opts.which {
        for &bytes in &opts.sizes {
            if coll == Collective::Barrier && bytes != opts.sizes[0] {
                continue;
            }
            let n = (bytes / 8).max(1);
            let n = if coll == Collective::Alltoall {
                n.next_multiple_of(p)
            } else {
                n
            };
            let iters = opts.iters.unwrap_or_else(|| default_iters(bytes));
            let (b, o) = (&mut buf[..n.min(elems)], &mut out[..n.min(elems) * p]);
            for _ in 0..iters / 10 + 1 {
                once(&c, coll, b, o)?;
            }
            c.barrier()?;
            let t0 = Instant::now();
            for _ in 0..iters {
                once(&c, coll, b, o)?;
            }
            let us = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
            let alg = c.algorithm(coll, n * 8).name;
            times.push((coll, alg, n * 8, iters, us));
            c.barrier()?;
        }
    }
    let before = MemStat::now();
    let mut x = [1.0f64];
    for _ in 0..opts.soak {
        c.allreduce_in_place(&mut x, &Op::Max)?;
    }
    let after = MemStat::now();
    let mine: Vec<u8> = times.iter().flat_map(|t| t.4.to_le_bytes()).collect();
    let all = w.exchange(&mine)?;
    if w.rank() != 0 {
        return Ok(None);
    }
    let rows = times
        .iter()
        .enumerate()
        .map(|(k, &(coll, alg, bytes, reps, _))| {
            let ts: Vec<f64> = all
                .iter()
                .map(|b| f64::from_le_bytes(b[8 * k..8 * k + 8].try_into().expect("8 bytes")))
                .collect();
            Row {
                collective: coll.name(),
                algorithm: alg,
                bytes,
                repetitions: reps,
                t_min_us: ts.iter().copied().fold(f64::INFINITY, f64::min),
                t_avg_us: ts.iter().sum::<f64>() / ts.len() as f64,
                t_max_us: ts.iter().copied().fold(0.0, f64::max),
            }
        })
        .collect();
    Ok(Some(Report {
        machine: Machine::here(),
        ranks: w.size(),
        pingpong_8b_us: pp,
        memcpy_gb_s: crate::floor::memcpy_bandwidth(max.max(1)),
        stream_gb_s: stream,
        rows,
        scratch_bytes: tca::coll::scratch_bytes(p),
        soak: (opts.soak, before, after),
    }))
}

impl crate::Report for Report {
    fn table(&self) -> String {
        let mut s = format!(
            "# tca bench collectives: {} ranks, shared memory\n# {}\n# this run: 8 B put_signal ping-pong (ranks 0-1) {:.3} us; memcpy {:.1} GB/s; cross-core streaming {:.2} GB/s\n",
            self.ranks,
            self.machine.line(),
            self.pingpong_8b_us,
            self.memcpy_gb_s,
            self.stream_gb_s
        );
        s += &format!(
            "{:<15} {:<22} {:>10} {:>12} {:>12} {:>12} {:>12} {:>10}\n",
            "#collective",
            "algorithm",
            "#bytes",
            "#repetitions",
            "t_min[usec]",
            "t_avg[usec]",
            "t_max[usec]",
            "x pingpong"
        );
        for r in &self.rows {
            let eff = if r.collective == "allreduce" && r.bytes >= 1 << 20 {
                format!("  {:.1} GB/s", r.bytes as f64 / r.t_max_us / 1e3)
            } else {
                String::new()
            };
            s += &format!(
                "{:<15} {:<22} {:>10} {:>12} {:>12.3} {:>12.3} {:>12.3} {:>10.2}{eff}\n",
                r.collective,
                r.algorithm,
                r.bytes,
                r.repetitions,
                r.t_min_us,
                r.t_avg_us,
                r.t_max_us,
                r.t_max_us / self.pingpong_8b_us
            );
        }
        s += &format!(
            "# scratch per rank for this communicator: {} KiB\n",
            self.scratch_bytes / 1024
        );
        if self.soak.0 > 0 {
            s += &format!(
                "# soak of {} 8 B allreduce calls: rank 0 RSS {} -> {} KiB, mappings {} -> {}\n",
                self.soak.0,
                self.soak.1.rss_kib,
                self.soak.2.rss_kib,
                self.soak.1.mappings,
                self.soak.2.mappings
            );
        }
        s
    }
}
