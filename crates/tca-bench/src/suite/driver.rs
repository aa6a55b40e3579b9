//! The timing loop, written once for every implementation.
//!
//! Per benchmark and size, as IMB-MPI1 does it: agree on the repetition count (fixed, or
//! [`Iters::Auto`]: after one untimed call, rank 0 times a doubling trial until it lasts
//! [`TRIAL_S`], then picks the count that fills [`AUTO_TARGET_S`]), run the warm-up calls
//! (under [`Iters::Auto`] at least [`AUTO_WARM_S`] of them), synchronise with a barrier,
//! time the calls on every rank, and gather each rank's time per call at rank 0, which
//! reports the minimum, maximum and mean over the ranks taking part. With
//! [`Options::repeat`] = k > 1 the barrier, timed calls and gather run k times and the run
//! with the lowest mean is reported: a noisy machine slows whole runs, rarely all k.
//!
//! Every decision that must be the same on all ranks (how many calls) is made by rank 0 and
//! broadcast, so a rank that happened to run slower cannot fall out of step.
//!
//! The non-blocking benchmarks (IMB-NBC) time two things per run, the collective alone and
//! overlapped with computation ([`super::overlap`]); their calls are counted as above.

use anyhow::Result;
use tca_model::record::{Overlap, Row};
use tca_mpi::Backend as _;

use super::halo::Halo;
use super::overlap::Cpu;
use super::{Benchmark, Half, Iters, Options};

/// Seconds of timed calls per size under [`Iters::Auto`].
pub const AUTO_TARGET_S: f64 = 0.05;
/// Seconds of warm-up calls at least, per size, under [`Iters::Auto`]: large messages on a
/// virtual machine run 3-6x slower for their first tens of calls (BENCHMARKS.md, "Stable
/// figures"), longer than a tenth of the timed calls lasts.
pub const AUTO_WARM_S: f64 = 0.02;
/// The trial that sizes [`Iters::Auto`] doubles until it lasts this long.
pub const TRIAL_S: f64 = 0.002;
/// Bounds on the automatic repetition count.
pub const AUTO_MIN: u64 = 10;
/// See [`AUTO_MIN`].
pub const AUTO_MAX: u64 = 200_000;

/// One implementation of the suite's calls: the library's world for the driver's own
/// synchronisation and gathering (the tools' one "tca or MPI" trait, [`tca_mpi::Backend`]),
/// and the calls each benchmark times, written against the library's own API.
pub trait Backend {
    /// The library's world.
    type Lib: tca_mpi::Backend;
    /// The library's world, for barriers, agreeing on counts and gathering times.
    fn lib(&mut self) -> &mut Self::Lib;
    /// Prepares `bench` at `bytes` (called before its calls; the place to pick an algorithm).
    fn prepare(&mut self, bench: &Benchmark, bytes: usize) -> Result<()>;
    /// Prepares the Halo benchmark for one lattice (its buffers and requests).
    fn prepare_halo(&mut self, halo: &Halo) -> Result<()>;
    /// `n` calls of the benchmark prepared last (only on ranks that take part); for a
    /// non-blocking benchmark, each starts the collective and waits for it.
    fn calls(&mut self, n: u64) -> Result<()>;
    /// `n` calls of the non-blocking benchmark prepared last, each overlapped with
    /// computation: start the collective, `cpu.run(us, tests, ..)` with the request's test as
    /// the test, wait. Returns the microseconds spent computing, in all.
    fn overlapped(&mut self, n: u64, cpu: &Cpu, us: f64, tests: u32) -> Result<f64>;
    /// The algorithm the implementation uses for `bench` at `bytes` ("-" if unknown).
    fn algorithm(&self, bench: &Benchmark, bytes: usize) -> String;
    /// Whether the implementation runs `bench` at all (MPI has no active messages).
    fn runs(&self, bench: &Benchmark) -> bool {
        let _ = bench;
        true
    }
}

/// This rank and the number of ranks, as the rows count them.
fn rank_size<B: Backend>(b: &mut B) -> (u32, u32) {
    let l = b.lib();
    // Ranks are counted in u32 everywhere in tca; neither library can have more.
    let u = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
    (u(l.rank()), u(l.size()))
}

/// Runs the suite; rank 0 returns the rows. `tick` is called by rank 0 after each size.
pub fn run<B: Backend>(
    b: &mut B,
    opts: &Options,
    mut tick: impl FnMut(&str, usize),
) -> Result<Option<Half>> {
    let (me, p) = rank_size(b);
    let mut rows = Vec::new();
    // The overlap benchmarks' computation, calibrated once (when one runs).
    let cpu = opts
        .benches()
        .any(Benchmark::nonblocking)
        .then(Cpu::calibrate);
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
            let row = match &cpu {
                Some(cpu) if bench.nonblocking() => measure_overlap(b, bench, bytes, opts, cpu)?,
                _ => measure(b, bench, bytes, opts)?,
            };
            if let Some(row) = row {
                rows.push(row);
                tick(bench.name, bytes);
            }
        }
    }
    let l = b.lib();
    Ok((me == 0).then(|| Half {
        implementation: l.name(),
        transport: l.transport(),
        ranks: p,
        rows,
        notes: Vec::new(),
        round_t_avg_us: Vec::new(),
    }))
}

/// Times the prepared benchmark at `bytes` on every rank; rank 0 gets the row.
fn measure<B: Backend>(
    b: &mut B,
    bench: &Benchmark,
    bytes: usize,
    opts: &Options,
) -> Result<Option<Row>> {
    let (me, p) = rank_size(b);
    let active = me < bench.active(p);
    let (reps, warm) = reps_and_warmup(b, active, opts)?;
    if active {
        b.calls(warm)?;
    }
    // Rank 0 keeps the fastest run's times (by their mean over ranks).
    let mut best: Option<(f64, Vec<f64>)> = None;
    // Rank 0 collects every rank's time per call; the buffer is the same for each run.
    let mut all = vec![0.0; if me == 0 { p as usize } else { 0 }];
    for _ in 0..opts.repeat.max(1) {
        b.lib().barrier()?;
        let t0 = b.lib().wtime();
        if active {
            b.calls(reps)?;
        }
        let t = (b.lib().wtime() - t0) * 1e6 / reps as f64 / bench.per_call_divisor();
        b.lib()
            .gather_f64(&[if active { t } else { f64::NAN }], &mut all)?;
        b.lib().barrier()?;
        if me == 0 {
            let ts: Vec<f64> = if bench.answered() {
                all[..1].to_vec()
            } else {
                all.iter().copied().filter(|t| !t.is_nan()).collect()
            };
            let avg = ts.iter().sum::<f64>() / ts.len() as f64;
            if best.as_ref().is_none_or(|(a, _)| avg < *a) {
                best = Some((avg, ts));
            }
        }
    }
    let name = b.lib().name();
    Ok(best.map(|(_, ts)| row(b, name, bench, (bytes, p, reps), &ts, None)))
}

/// Rank 0's row of `bench` at `bytes` on `ranks` ranks: `ts` is each taking part rank's time
/// per call (us), of which the row gives the fastest, the slowest and the mean.
fn row<B: Backend>(
    b: &B,
    implementation: String,
    bench: &Benchmark,
    (bytes, ranks, repetitions): (usize, u32, u64),
    ts: &[f64],
    overlap: Option<Overlap>,
) -> Row {
    let avg = ts.iter().sum::<f64>() / ts.len() as f64;
    Row {
        implementation,
        benchmark: bench.name.to_string(),
        algorithm: b.algorithm(bench, bytes),
        ranks,
        bytes: bytes as u64,
        repetitions,
        t_min_us: ts.iter().copied().fold(f64::INFINITY, f64::min),
        t_max_us: ts.iter().copied().fold(0.0, f64::max),
        t_avg_us: avg,
        mbytes_per_sec: bench.mbytes_per_sec(bytes, avg, ranks),
        overlap,
    }
}

/// IMB-NBC's measurement of the prepared non-blocking benchmark at `bytes` on every rank
/// ([`super::overlap`]); rank 0 gets the row. With [`Options::repeat`] = k, the run whose
/// slowest rank's t_ovrl is the lowest is reported.
fn measure_overlap<B: Backend>(
    b: &mut B,
    bench: &Benchmark,
    bytes: usize,
    opts: &Options,
    cpu: &Cpu,
) -> Result<Option<Row>> {
    let (me, p) = rank_size(b);
    let (reps, warm) = reps_and_warmup(b, true, opts)?;
    b.calls(warm)?;
    // Rank 0: every rank's (t_ovrl, t_pure, t_CPU) of the run with the lowest largest t_ovrl.
    let mut best: Option<(f64, Vec<f64>)> = None;
    let mut all = vec![0.0; if me == 0 { 3 * p as usize } else { 0 }];
    let per_call = |b: &mut B, t0: f64| (b.lib().wtime() - t0) * 1e6 / reps as f64;
    for _ in 0..opts.repeat.max(1) {
        b.lib().barrier()?;
        let t0 = b.lib().wtime();
        b.calls(reps)?;
        let pure = per_call(b, t0);
        b.lib().barrier()?;
        let t0 = b.lib().wtime();
        let computing = b.overlapped(reps, cpu, pure, opts.test_calls)?;
        let ovrl = per_call(b, t0);
        b.lib()
            .gather_f64(&[ovrl, pure, computing / reps as f64], &mut all)?;
        b.lib().barrier()?;
        if me == 0 {
            let worst = all.chunks(3).map(|t| t[0]).fold(0.0, f64::max);
            if best.as_ref().is_none_or(|(w, _)| worst < *w) {
                best = Some((worst, all.clone()));
            }
        }
    }
    let name = b.lib().name();
    Ok(best.map(|(_, all)| {
        let ovrl: Vec<f64> = all.chunks(3).map(|t| t[0]).collect();
        // IMB-NBC's figures are the slowest rank's (by t_ovrl).
        let worst = all
            .chunks(3)
            .max_by(|x, y| x[0].total_cmp(&y[0]))
            .expect("at least one rank");
        let overlap = Overlap::new(worst[0], worst[1], worst[2]);
        row(b, name, bench, (bytes, p, reps), &ovrl, Some(overlap))
    }))
}

/// The timed calls per run and the warm-up calls before them: `--iters` (or
/// [`auto_reps`]) and `--warmup`, whose default is a tenth of the timed calls (at least one)
/// and, under [`Iters::Auto`], at least [`AUTO_WARM_S`] of calls.
fn reps_and_warmup<B: Backend>(b: &mut B, active: bool, opts: &Options) -> Result<(u64, u64)> {
    let (reps, warm_auto) = match opts.iters {
        Iters::Fixed(n) => (n, 0),
        Iters::Auto => auto_reps(b, active)?,
    };
    Ok((
        reps,
        opts.warmup.unwrap_or((reps / 10).max(1).max(warm_auto)),
    ))
}

/// [`Iters::Auto`]: one untimed call (a cold first call, whose buffers are touched for the
/// first time, must not size the run), then rank 0 times 1, 2, 4, ... calls until a trial
/// lasts [`TRIAL_S`] (every rank joins each trial, and agrees on whether to go on), and picks
/// the count that fills [`AUTO_TARGET_S`] and the warm-up calls that fill [`AUTO_WARM_S`].
fn auto_reps<B: Backend>(b: &mut B, active: bool) -> Result<(u64, u64)> {
    if active {
        b.calls(1)?;
    }
    let mut n = 1u64;
    loop {
        b.lib().barrier()?;
        let t0 = b.lib().wtime();
        if active {
            b.calls(n)?;
        }
        let dt = b.lib().wtime() - t0;
        let go_on = b.lib().agree(u64::from(dt < TRIAL_S && n < AUTO_MAX))?;
        if go_on == 0 {
            let per_call = (dt / n as f64).max(1e-9);
            let reps = (AUTO_TARGET_S / per_call) as u64;
            let warm = (AUTO_WARM_S / per_call) as u64;
            return Ok((
                b.lib().agree(reps.clamp(AUTO_MIN, AUTO_MAX))?,
                b.lib().agree(warm.min(AUTO_MAX))?,
            ));
        }
        n *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::BENCHMARKS;
    use std::time::Duration;

    /// How long the scripted benchmark's calls take.
    enum Script {
        /// Each batch of calls (any number) takes the next of these, in order.
        Batches(Vec<Duration>),
        /// Each call takes `each`, but the very first takes `first` (its buffers touched for
        /// the first time).
        ColdStart { first: Duration, each: Duration },
    }

    /// One rank (a real one-rank tca communicator) whose calls take the scripted times.
    struct Scripted<'w> {
        comm: tca::Comm<'w>,
        script: Script,
        /// Calls made so far.
        made: u64,
    }

    impl<'w> Scripted<'w> {
        fn new(comm: tca::Comm<'w>, script: Script) -> Self {
            Self {
                comm,
                script,
                made: 0,
            }
        }
    }

    impl<'w> Backend for Scripted<'w> {
        type Lib = tca::Comm<'w>;
        fn lib(&mut self) -> &mut tca::Comm<'w> {
            &mut self.comm
        }
        fn prepare(&mut self, _: &Benchmark, _: usize) -> Result<()> {
            Ok(())
        }
        fn prepare_halo(&mut self, _: &Halo) -> Result<()> {
            Ok(())
        }
        fn calls(&mut self, n: u64) -> Result<()> {
            match &mut self.script {
                Script::Batches(batches) if n > 0 => std::thread::sleep(batches.remove(0)),
                Script::Batches(_) => {}
                Script::ColdStart { first, each } => {
                    for k in 0..n {
                        let cold = self.made + k == 0;
                        std::thread::sleep(if cold { *first } else { *each });
                    }
                }
            }
            self.made += n;
            Ok(())
        }
        fn overlapped(&mut self, n: u64, cpu: &Cpu, us: f64, tests: u32) -> Result<f64> {
            // The scripted calls are the communication; the computation runs after them (no
            // overlap at all), with `tests` no-op tests.
            self.calls(n)?;
            let mut t = 0.0;
            for _ in 0..n {
                t += cpu.run(us, tests, || Ok::<(), ()>(())).unwrap();
            }
            Ok(t)
        }
        fn algorithm(&self, _: &Benchmark, _: usize) -> String {
            "-".into()
        }
    }

    /// `bench` at 8 bytes, one call per run, `repeat` runs, no warm-up.
    fn one_size(bench: &str, repeat: u32) -> Options {
        Options {
            benchmarks: vec![BENCHMARKS.iter().position(|b| b.name == bench).unwrap()],
            sizes: vec![8],
            iters: Iters::Fixed(1),
            warmup: Some(0),
            repeat,
            algos: Vec::new(),
            soak: 0,
            two_sided: false,
            lattices: Vec::new(),
            test_calls: 0,
            progress: tca::offload::Progress::Caller,
            heap_buffers: false,
        }
    }

    /// A non-blocking benchmark whose communication does not overlap at all (the scripted
    /// batch, then the computation): a row with IMB-NBC's figures, the computation sized to
    /// the pure time, and little overlap.
    #[test]
    fn overlap_rows_carry_imb_nbcs_figures() {
        let opts = Options {
            test_calls: 3,
            ..one_size("Iallreduce", 1)
        };
        tca::threads::run(1, |world| {
            let ms = Duration::from_millis;
            // Pure batch 100 ms; the overlapped one 100 ms of communication, then computing.
            let mut b = Scripted::new(
                tca::Comm::world(world)?,
                Script::Batches(vec![ms(100), ms(100)]),
            );
            let half = run(&mut b, &opts, |_, _| {}).unwrap().unwrap();
            let r = &half.rows[0];
            let o = r.overlap.expect("IMB-NBC figures");
            assert!(o.t_pure_us >= 100_000.0, "{r:?}");
            // The computation was sized to the pure time (a slow moment may stretch it).
            assert!(o.t_cpu_us >= 0.5 * o.t_pure_us, "{r:?}");
            // Taking turns is no overlap (up to the sleeps' oversleeping, far below 50 ms).
            assert!(o.percent < 50.0, "{r:?}");
            Ok(())
        })
        .unwrap();
    }

    /// Under `--iters auto` a cold first call does not size the run: calls of 2 ms give 25
    /// timed calls (50 ms) and 10 warm-up calls (20 ms), not the 10 (the minimum) that a first
    /// call of 200 ms would give. (Sleeps only overshoot: a slow moment gives fewer calls, and
    /// the check allows anything above the minimum.)
    #[test]
    fn auto_iterations_are_sized_by_warm_calls() {
        let opts = Options {
            iters: Iters::Auto,
            warmup: None,
            ..one_size("Allreduce", 1)
        };
        tca::threads::run(1, |world| {
            let cold = Script::ColdStart {
                first: Duration::from_millis(200),
                each: Duration::from_millis(2),
            };
            let mut b = Scripted::new(tca::Comm::world(world)?, cold);
            let half = run(&mut b, &opts, |_, _| {}).unwrap().unwrap();
            let reps = half.rows[0].repetitions;
            assert!(reps > AUTO_MIN && reps <= 25, "{reps} timed calls");
            // The untimed call, the trial (one call), the warm-up (at least half of 10) and
            // the timed calls.
            assert!(b.made >= 1 + 1 + 5 + reps, "{} calls in all", b.made);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn repeated_runs_report_the_fastest() {
        let ms = Duration::from_millis;
        let opts = |repeat| one_size("Allreduce", repeat);
        tca::threads::run(1, |world| {
            // The middle run is 40x faster than the others: it is the one reported.
            let mut b = Scripted::new(
                tca::Comm::world(world)?,
                Script::Batches(vec![ms(80), ms(2), ms(80)]),
            );
            let half = run(&mut b, &opts(3), |_, _| {}).unwrap().unwrap();
            assert!(
                matches!(&b.script, Script::Batches(left) if left.is_empty()),
                "three timed runs"
            );
            let r = &half.rows[0];
            assert_eq!((r.bytes, r.repetitions), (8, 1));
            assert!(r.t_avg_us < 40_000.0, "{r:?}");
            assert_eq!(half.implementation, "tca");
            // One run (IMB's way): the one there is.
            let mut b = Scripted::new(tca::Comm::world(world)?, Script::Batches(vec![ms(80)]));
            let half = run(&mut b, &opts(1), |_, _| {}).unwrap().unwrap();
            assert!(half.rows[0].t_avg_us >= 80_000.0, "{:?}", half.rows[0]);
            Ok(())
        })
        .unwrap();
    }
}
