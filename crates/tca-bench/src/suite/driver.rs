//! The timing loop, written once for every implementation.
//!
//! Per benchmark and size, as IMB-MPI1 does it: agree on the repetition count (fixed, or
//! [`Iters::Auto`]: rank 0 times a doubling trial until it lasts [`TRIAL_S`], then picks the
//! count that fills [`AUTO_TARGET_S`]), run the warm-up calls, synchronise with a barrier,
//! time the calls on every rank, and gather each rank's time per call at rank 0, which
//! reports the minimum, maximum and mean over the ranks taking part. With
//! [`Options::repeat`] = k > 1 the barrier, timed calls and gather run k times and the run
//! with the lowest mean is reported: a noisy machine slows whole runs, rarely all k.
//!
//! Every decision that must be the same on all ranks (how many calls) is made by rank 0 and
//! broadcast, so a rank that happened to run slower cannot fall out of step.

use std::time::Instant;

use anyhow::Result;
use tca_model::record::Row;

use super::halo::Halo;
use super::{Benchmark, Half, Iters, Options};

/// Seconds of timed calls per size under [`Iters::Auto`].
pub const AUTO_TARGET_S: f64 = 0.05;
/// The trial that sizes [`Iters::Auto`] doubles until it lasts this long.
pub const TRIAL_S: f64 = 0.002;
/// Bounds on the automatic repetition count.
pub const AUTO_MIN: u64 = 10;
/// See [`AUTO_MIN`].
pub const AUTO_MAX: u64 = 200_000;

/// One implementation of the suite's calls.
pub trait Backend {
    /// This rank.
    fn rank(&self) -> u32;
    /// Ranks in the job.
    fn size(&self) -> u32;
    /// The implementation's name for the tables.
    fn name(&self) -> String;
    /// What carries its bytes, for the report (tca: the `World`'s transport).
    fn transport(&self) -> String {
        "its own".into()
    }
    /// Blocks until every rank has arrived.
    fn barrier(&mut self) -> Result<()>;
    /// Rank 0's `v`, on every rank.
    fn agree(&mut self, v: u64) -> Result<u64>;
    /// Every rank's `v` at rank 0 (in rank order); empty elsewhere.
    fn gather(&mut self, v: f64) -> Result<Vec<f64>>;
    /// Prepares `bench` at `bytes` (called before its calls; the place to pick an algorithm).
    fn prepare(&mut self, bench: &Benchmark, bytes: usize) -> Result<()>;
    /// Prepares the Halo benchmark for one lattice (its buffers and requests).
    fn prepare_halo(&mut self, halo: &Halo) -> Result<()>;
    /// `n` calls of the benchmark prepared last (only on ranks that take part).
    fn calls(&mut self, n: u64) -> Result<()>;
    /// The algorithm the implementation uses for `bench` at `bytes` ("-" if unknown).
    fn algorithm(&self, bench: &Benchmark, bytes: usize) -> String;
    /// Whether the implementation runs `bench` at all (MPI has no active messages).
    fn runs(&self, bench: &Benchmark) -> bool {
        let _ = bench;
        true
    }
}

/// Runs the suite; rank 0 returns the rows. `tick` is called by rank 0 after each size.
pub fn run<B: Backend>(
    b: &mut B,
    opts: &Options,
    mut tick: impl FnMut(&str, usize),
) -> Result<Option<Half>> {
    let p = b.size();
    let mut rows = Vec::new();
    for bench in opts.benches() {
        if (bench.collective.is_none() && p < 2) || !b.runs(bench) {
            // Point-to-point needs a partner; collectives on one rank run as they are.
            continue;
        }
        if bench.grid() {
            for n in super::VIS_HALO_N {
                let bytes = super::vis_halo_bytes(n);
                b.prepare(bench, bytes)?;
                if let Some(row) = measure(b, bench, bytes, opts)? {
                    rows.push(row);
                    tick(bench.name, bytes);
                }
            }
            continue;
        }
        if bench.lattice() {
            for &l in &opts.lattices {
                let halo = Halo::new(l, p)?;
                b.prepare_halo(&halo)?;
                if let Some(row) = measure(b, bench, halo.bytes_per_exchange(), opts)? {
                    rows.push(row);
                    tick(bench.name, halo.bytes_per_exchange());
                }
            }
            continue;
        }
        let mut seen = Vec::new();
        for &req in &opts.sizes {
            let Some(bytes) = bench.bytes_for(req, p as usize) else {
                continue;
            };
            if seen.contains(&bytes) {
                continue;
            }
            seen.push(bytes);
            b.prepare(bench, bytes)?;
            if let Some(row) = measure(b, bench, bytes, opts)? {
                rows.push(row);
                tick(bench.name, bytes);
            }
        }
    }
    Ok((b.rank() == 0).then(|| Half {
        implementation: b.name(),
        transport: b.transport(),
        ranks: p,
        rows,
        notes: Vec::new(),
    }))
}

/// Times the prepared benchmark at `bytes` on every rank; rank 0 gets the row.
fn measure<B: Backend>(
    b: &mut B,
    bench: &Benchmark,
    bytes: usize,
    opts: &Options,
) -> Result<Option<Row>> {
    let p = b.size();
    let active = b.rank() < bench.active(p);
    let reps = match opts.iters {
        Iters::Fixed(n) => n,
        Iters::Auto => auto_reps(b, active)?,
    };
    let warm = opts.warmup.unwrap_or((reps / 10).max(1));
    if active {
        b.calls(warm)?;
    }
    // Rank 0 keeps the fastest run's times (by their mean over ranks).
    let mut best: Option<(f64, Vec<f64>)> = None;
    for _ in 0..opts.repeat.max(1) {
        b.barrier()?;
        let t0 = Instant::now();
        if active {
            b.calls(reps)?;
        }
        let t = t0.elapsed().as_secs_f64() * 1e6 / reps as f64 / bench.per_call_divisor();
        let all = b.gather(if active { t } else { f64::NAN })?;
        b.barrier()?;
        if b.rank() == 0 {
            let ts: Vec<f64> = all.into_iter().filter(|t| !t.is_nan()).collect();
            let avg = ts.iter().sum::<f64>() / ts.len() as f64;
            if best.as_ref().is_none_or(|(a, _)| avg < *a) {
                best = Some((avg, ts));
            }
        }
    }
    Ok(best.map(|(avg, ts)| Row {
        implementation: b.name(),
        benchmark: bench.name.to_string(),
        algorithm: b.algorithm(bench, bytes),
        ranks: p,
        bytes: bytes as u64,
        repetitions: reps,
        t_min_us: ts.iter().copied().fold(f64::INFINITY, f64::min),
        t_max_us: ts.iter().copied().fold(0.0, f64::max),
        t_avg_us: avg,
        mbytes_per_sec: bench.mbytes_per_sec(bytes, avg, p),
    }))
}

/// [`Iters::Auto`]: rank 0 times 1, 2, 4, ... calls until a trial lasts [`TRIAL_S`] (every
/// rank runs the same trials, told by rank 0 when to stop), then every rank gets the count
/// that fills [`AUTO_TARGET_S`].
fn auto_reps<B: Backend>(b: &mut B, active: bool) -> Result<u64> {
    let mut n = 1u64;
    loop {
        b.barrier()?;
        let t0 = Instant::now();
        if active {
            b.calls(n)?;
        }
        let dt = t0.elapsed().as_secs_f64();
        let go_on = b.agree(u64::from(dt < TRIAL_S && n < AUTO_MAX))?;
        if go_on == 0 {
            let per_call = dt / n as f64;
            let want = (AUTO_TARGET_S / per_call.max(1e-9)) as u64;
            return b.agree(want.clamp(AUTO_MIN, AUTO_MAX));
        }
        n *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::BENCHMARKS;
    use std::time::Duration;

    /// One rank whose timed batches take the scripted times, in order.
    struct Scripted {
        batches: Vec<Duration>,
    }

    impl Backend for Scripted {
        fn rank(&self) -> u32 {
            0
        }
        fn size(&self) -> u32 {
            1
        }
        fn name(&self) -> String {
            "scripted".into()
        }
        fn barrier(&mut self) -> Result<()> {
            Ok(())
        }
        fn agree(&mut self, v: u64) -> Result<u64> {
            Ok(v)
        }
        fn gather(&mut self, v: f64) -> Result<Vec<f64>> {
            Ok(vec![v])
        }
        fn prepare(&mut self, _: &Benchmark, _: usize) -> Result<()> {
            Ok(())
        }
        fn prepare_halo(&mut self, _: &Halo) -> Result<()> {
            Ok(())
        }
        fn calls(&mut self, n: u64) -> Result<()> {
            if n > 0 {
                std::thread::sleep(self.batches.remove(0));
            }
            Ok(())
        }
        fn algorithm(&self, _: &Benchmark, _: usize) -> String {
            "-".into()
        }
    }

    #[test]
    fn repeated_runs_report_the_fastest() {
        let ms = Duration::from_millis;
        let opts = |repeat| Options {
            benchmarks: vec![
                BENCHMARKS
                    .iter()
                    .position(|b| b.name == "Allreduce")
                    .unwrap(),
            ],
            sizes: vec![8],
            iters: Iters::Fixed(1),
            warmup: Some(0),
            repeat,
            algos: Vec::new(),
            soak: 0,
            two_sided: false,
            lattices: Vec::new(),
        };
        // The middle run is 40x faster than the others: it is the one reported.
        let mut b = Scripted {
            batches: vec![ms(80), ms(2), ms(80)],
        };
        let half = run(&mut b, &opts(3), |_, _| {}).unwrap().unwrap();
        assert!(b.batches.is_empty(), "three timed runs");
        let r = &half.rows[0];
        assert_eq!((r.bytes, r.repetitions), (8, 1));
        assert!(r.t_avg_us < 40_000.0, "{r:?}");
        // One run (IMB's way): the one there is.
        let mut b = Scripted {
            batches: vec![ms(80)],
        };
        let half = run(&mut b, &opts(1), |_, _| {}).unwrap().unwrap();
        assert!(half.rows[0].t_avg_us >= 80_000.0, "{:?}", half.rows[0]);
    }
}
