//! `tca sim reproduce`: the seeds' network figures, run again on the simulated networks.
//!
//! The paper values live in one data file, `data/seed-figures.toml`, each with the table or
//! figure it comes from. Every reproduction is the suite itself ([`crate::simulate`]): IMB's
//! PingPong, Allreduce, Bcast and Allgather with tca's algorithms, on a network model built
//! from hardware parameters and the seeds' ping-pong figures only — the collective figures
//! are predicted, not fitted. Seed 002's Table 1 is reproduced as the paper made it: IMB on
//! 384 nodes, a Hockney fit of the throughput (seed 002's volume convention), beside the
//! paper's fit and its formula estimate (`tca model estimate`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use tca_model::fit::{Selection, fit_selection};
use tca_model::record::Row;

use crate::report::FitLine;
use crate::suite::{self, Benchmark, Iters};

/// Seed 002's pipeline segment m_B (16 KiB): the collectives' chunk in the Table 1 runs.
pub const SEED002_SEGMENT: usize = 16 << 10;

/// The paper values (see the module doc).
pub const FIGURES: &str = include_str!("../data/seed-figures.toml");

/// The data file's contents.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figures {
    /// Single figures (a latency, a bandwidth, a table cell).
    pub point: Vec<Point>,
    /// Seed 001's DMA channel figures.
    #[serde(default)]
    pub channel: Vec<Channel>,
    /// Seed 002's Table 1 columns (measured rows).
    pub table1: Vec<Table1>,
    /// Figures the simulation does not reproduce, and why.
    pub missing: Vec<Missing>,
}

/// What a point compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// IMB's t_avg, us.
    TUs,
    /// IMB's MB/s.
    MbS,
}

/// One figure of a paper.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// Short name.
    pub id: String,
    /// Where in which seed.
    pub source: String,
    /// Network model.
    pub network: String,
    /// IMB benchmark.
    pub benchmark: String,
    /// tca algorithm to force (collectives).
    pub algorithm: Option<String>,
    /// Ranks.
    pub ranks: u32,
    /// Message size.
    pub bytes: usize,
    /// Which figure of the row.
    pub measure: Measure,
    /// The paper's value.
    pub paper: f64,
    /// What the model lacks, for a figure the simulation misses by more than [`OFF_PCT`].
    pub lacks: Option<String>,
}

/// A simulated figure further than this from the paper's (percent) is a miss, which the data
/// file explains: the mechanism the model lacks.
pub const OFF_PCT: f64 = 15.0;

/// One of seed 001's channel figures: a put of `bytes` between two ranks of `network`, on
/// channel `alone` by itself (its bandwidth in MB/s), or split over `channels` channels tuned
/// by the seed's algorithm (`tca::am`'s channels) against channel 0 alone (the gain, x).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Channel {
    /// Short name.
    pub id: String,
    /// Where in which seed.
    pub source: String,
    /// Network model.
    pub network: String,
    /// Put size.
    pub bytes: usize,
    /// The one channel used, for a channel's bandwidth.
    pub alone: Option<usize>,
    /// The channels a put is split over, for the gain.
    pub channels: Option<usize>,
    /// The paper's value.
    pub paper: f64,
    /// What the model lacks, for a miss.
    pub lacks: Option<String>,
}

/// Simulates one channel figure: MB/s of channel `alone`, or the gain of `channels` tuned
/// channels over channel 0 alone (a ratio of rank 0's put times).
fn channel_figure(c: &Channel) -> Result<f64> {
    // A channel alone is measured among PEACH2's four.
    let n = c.channels.unwrap_or(4);
    if c.alone.is_some_and(|a| a >= n) || c.alone.is_some() == c.channels.is_some() {
        bail!(
            "{}: give either `alone` (a channel below {n}) or `channels`",
            c.id
        );
    }
    let opts = tca::sim::Options::new(tca::sim::Network::load(&c.network)?);
    let len = c.bytes;
    let run = tca::sim::run(&opts, 2, |w| {
        let comm = tca::Comm::world(w)?;
        let ep = tca::am::Endpoint::new(&comm, tca::am::Table::new(), len)?;
        ep.set_channels(n)?;
        let data = vec![1u8; len];
        let mut out = 0.0;
        if comm.rank() == 0 {
            let mut one = vec![0.0; n];
            one[c.alone.unwrap_or(0)] = 1.0;
            let t_one = ep.put_weighted(1, 0, &data, &one)?[c.alone.unwrap_or(0)];
            out = if c.alone.is_some() {
                len as f64 / t_one / 1e6
            } else {
                for _ in 0..tca::am::TUNING {
                    ep.put(1, 0, &data)?;
                }
                let t0 = w.wtime();
                ep.put(1, 0, &data)?;
                t_one / (w.wtime() - t0)
            };
        }
        comm.barrier()?;
        Ok(out)
    })
    .with_context(|| format!("{} on {}", c.id, c.network))?;
    Ok(run.results[0])
}

/// One column of seed 002's Table 1.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table1 {
    /// Column heading.
    pub column: String,
    /// The same column's preset in `tca model estimate`.
    pub preset: String,
    /// Network model.
    pub network: String,
    /// IMB benchmark.
    pub benchmark: String,
    /// tca algorithm to force.
    pub algorithm: Option<String>,
    /// Ranks.
    pub ranks: u32,
    /// Sizes to simulate.
    pub sizes: Vec<usize>,
    /// The paper's fitted B, MB/s.
    pub b_mb_s: f64,
    /// The paper's fitted M_1/2, bytes.
    pub m_half_bytes: f64,
    /// The paper's fitted t_L, us.
    pub t_l_us: f64,
    /// Why the column is not simulated, if it is not.
    pub skipped: Option<String>,
    /// What the model lacks, for the column's misses.
    pub lacks: Option<String>,
}

/// A figure not reproduced.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Missing {
    /// Short name.
    pub id: String,
    /// Where in which seed.
    pub source: String,
    /// Why.
    pub reason: String,
}

/// Parses the data file.
pub fn figures() -> Result<Figures> {
    toml::from_str(FIGURES).context("data/seed-figures.toml")
}

/// One line of the report: a paper figure and its simulated value.
#[derive(Debug, Clone)]
pub struct Line {
    /// What it is.
    pub figure: String,
    /// The paper's value.
    pub paper: f64,
    /// The simulation's value.
    pub simulated: f64,
    /// What the model lacks, if the data file says.
    pub lacks: Option<String>,
}

impl Line {
    /// Simulated relative to the paper, in percent.
    pub fn error_pct(&self) -> f64 {
        error_pct(self.paper, self.simulated)
    }

    /// Whether the simulation misses the paper's figure by more than [`OFF_PCT`].
    pub fn off(&self) -> bool {
        off(self.paper, self.simulated)
    }
}

/// `simulated` relative to `paper`, in percent.
fn error_pct(paper: f64, simulated: f64) -> f64 {
    (simulated / paper - 1.0) * 100.0
}

/// Whether `simulated` misses `paper` by more than [`OFF_PCT`].
fn off(paper: f64, simulated: f64) -> bool {
    error_pct(paper, simulated).abs() > OFF_PCT
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Also simulate Table 1 (384 ranks: minutes of host time).
    pub table1: bool,
    /// Where to draw Table 1's curves (PNG), if anywhere.
    pub plot: Option<PathBuf>,
}

/// One Table 1 column's B, M_1/2 and t_L, each as (paper fit, paper estimate, simulated fit).
pub type Table1Cells = [(f64, f64, f64); 3];

/// One simulated run of the suite.
#[derive(Debug, Clone, Default)]
struct Run<'a> {
    network: &'a str,
    ranks: u32,
    benchmark: &'a str,
    algorithm: Option<&'a str>,
    sizes: &'a [usize],
    timing_only: bool,
    mapping: Option<Vec<u32>>,
    chunk: Option<usize>,
}

/// Everything `tca sim reproduce` prints.
#[derive(Debug, Default)]
pub struct Report {
    /// The single figures.
    pub points: Vec<Line>,
    /// Table 1: per column, its name, [`Table1Cells`] and what the model lacks.
    pub table1: Vec<(String, Table1Cells, Option<String>)>,
    /// The node-mapping comparison: (bytes per rank, naive us, chosen us).
    pub mapping: Vec<(usize, f64, f64)>,
    /// The same step by step: (bytes per rank, step, naive us, chosen us).
    pub mapping_steps: Vec<(usize, u32, f64, f64)>,
    /// Lines on what is missing or was skipped.
    pub notes: Vec<String>,
    /// Host seconds spent.
    pub host_s: f64,
}

/// Runs one benchmark on a simulated network; rank 0's rows.
fn simulate(run: Run<'_>) -> Result<Vec<Row>> {
    let Run {
        network,
        ranks,
        benchmark,
        algorithm,
        sizes,
        timing_only,
        mapping,
        chunk,
    } = run;
    let bench = Benchmark::find(benchmark)?;
    let index = suite::index_of(bench);
    let algos = match algorithm {
        Some(a) => suite::parse_algos(&[format!("{}={a}", bench.name)], &[index])?,
        None => Vec::new(),
    };
    let big = ranks > 64;
    let opts = suite::Options {
        benchmarks: vec![index],
        sizes: sizes.to_vec(),
        // Virtual times are the same call after call: a few calls at small scale, one at
        // 384 ranks (the first call's costs are the same as any other's in virtual time).
        iters: Iters::Fixed(if big { 1 } else { crate::SIM_REPS }),
        warmup: Some(u64::from(!big)),
        repeat: 1,
        algos,
        soak: 0,
        two_sided: false,
        lattices: Vec::new(),
        test_calls: 0,
        progress: tca::offload::Progress::Caller,
        heap_buffers: false,
    };
    let mut sim = tca::sim::Options::new(tca::sim::Network::load(network)?);
    sim.payload = !timing_only;
    sim.mapping = mapping;
    sim.chunk = chunk;
    let half = crate::simulate(ranks, &opts, &sim)
        .with_context(|| format!("{benchmark} on {ranks} ranks of {network}"))?;
    Ok(half.rows)
}

/// Runs every reproduction; `say` gets a line as each starts.
pub fn run(opts: &Options, mut say: impl FnMut(&str)) -> Result<Report> {
    let t0 = std::time::Instant::now();
    let f = figures()?;
    let mut rep = Report::default();
    for p in &f.point {
        say(&p.source);
        let rows = simulate(Run {
            network: &p.network,
            ranks: p.ranks,
            benchmark: &p.benchmark,
            algorithm: p.algorithm.as_deref(),
            sizes: &[p.bytes],
            ..Run::default()
        })?;
        let row = rows
            .iter()
            .find(|r| r.bytes as usize == p.bytes)
            .with_context(|| format!("{}: no row at {} bytes", p.id, p.bytes))?;
        let simulated = match p.measure {
            Measure::TUs => row.t_avg_us,
            Measure::MbS => row
                .mbytes_per_sec
                .with_context(|| format!("{}: no MB/s", p.id))?,
        };
        rep.points.push(Line {
            figure: p.source.clone(),
            paper: p.paper,
            simulated,
            lacks: p.lacks.clone(),
        });
    }
    for c in &f.channel {
        say(&c.source);
        rep.points.push(Line {
            figure: c.source.clone(),
            paper: c.paper,
            simulated: channel_figure(c)?,
            lacks: c.lacks.clone(),
        });
    }
    say("seed 000: node mapping of recursive-doubling allgather, 16 ranks");
    rep.mapping = mapping_effect()?;
    rep.mapping_steps = mapping_steps(&[4 << 10, 64 << 10])?;
    for m in &f.missing {
        rep.notes
            .push(format!("not reproduced: {}: {}", m.source, m.reason));
    }
    if opts.table1 {
        let mut plot_rows = Vec::new();
        let mut plot_fits = Vec::new();
        let mut simulated: Vec<Option<Vec<Row>>> = vec![None; f.table1.len()];
        for i in largest_first(&f.table1) {
            let c = &f.table1[i];
            say(&format!("seed 002 Table 1, {} on {}", c.column, c.network));
            simulated[i] = Some(simulate(Run {
                network: &c.network,
                ranks: c.ranks,
                benchmark: &c.benchmark,
                algorithm: c.algorithm.as_deref(),
                sizes: &c.sizes,
                timing_only: true,
                mapping: None,
                chunk: Some(SEED002_SEGMENT),
            })?);
        }
        for (c, rows) in f.table1.iter().zip(simulated) {
            if let Some(why) = &c.skipped {
                rep.notes
                    .push(format!("Table 1 {} not simulated: {why}", c.column));
                continue;
            }
            let Some(rows) = rows else { continue };
            let preset = tca_model::estimate::preset(&c.preset)?;
            let sel = Selection {
                range: preset.fit_range,
                seed002_volume: true,
                ..Selection::new(&c.benchmark)
            };
            let e = preset.paper_estimate;
            let fit = match fit_selection(&rows, &sel) {
                Ok(f) => f,
                Err(err) => {
                    // The simulated curve has no Hockney shape: say so, show the points.
                    let pts: Vec<String> = rows
                        .iter()
                        .map(|r| format!("{} B {:.1} us", r.bytes, r.t_avg_us))
                        .collect();
                    rep.notes.push(format!(
                        "Table 1 {}: no fit ({err}); simulated: {}",
                        c.column,
                        pts.join(", ")
                    ));
                    continue;
                }
            };
            rep.table1.push((
                c.column.clone(),
                [
                    (c.b_mb_s, e.b_mb_s, fit.b_mb_s),
                    (c.m_half_bytes, e.m_half_bytes, fit.m_half_bytes),
                    (c.t_l_us, e.t_l_us, fit.t_l_us),
                ],
                c.lacks.clone(),
            ));
            let volume = tca_model::fit::seed002_volume(&c.benchmark, c.ranks);
            let (lo, hi) = bounds(&rows);
            plot_fits.push(FitLine {
                implementation: "simulated".into(),
                benchmark: c.column.clone(),
                b_mb_s: c.b_mb_s / volume,
                m_half_bytes: c.m_half_bytes,
                t_l_us: c.t_l_us,
                r2: 1.0,
                rms_rel_err: 0.0,
                points: 0,
                min_bytes: lo,
                max_bytes: hi,
                range: "the paper's fit",
            });
            plot_rows.extend(rows.into_iter().map(|mut r| {
                r.implementation = "simulated".into();
                r.benchmark = c.column.clone();
                r
            }));
        }
        if let Some(p) = &opts.plot {
            crate::plot::draw(
                p,
                "seed 002 Table 1 on simulated Tofu: points simulated, dashed the paper's fit",
                &plot_rows,
                &plot_fits,
            )?;
        }
    }
    rep.host_s = t0.elapsed().as_secs_f64();
    Ok(rep)
}

/// The Table 1 columns to simulate, those with the most buffer bytes first (an allgather's
/// receive buffer is the ranks times a block): the later, smaller columns then reuse the heap
/// the first freed. In the data file's order glibc could keep the earlier columns' freed
/// memory: the run peaked at 20.6 GiB in two runs of three, where the largest column alone
/// takes 12.6 (BENCHMARKS.md, "K's multi-ring").
fn largest_first(cols: &[Table1]) -> Vec<usize> {
    let bytes = |c: &Table1| {
        let per_rank = c.sizes.iter().max().copied().unwrap_or(0);
        let blocks = if c.benchmark == "Allgather" {
            c.ranks
        } else {
            1
        };
        per_rank as u64 * u64::from(c.ranks) * u64::from(blocks)
    };
    let mut order: Vec<usize> = (0..cols.len())
        .filter(|&i| cols[i].skipped.is_none())
        .collect();
    order.sort_by_key(|&i| std::cmp::Reverse(bytes(&cols[i])));
    order
}

fn bounds(rows: &[Row]) -> (u64, u64) {
    let lo = rows.iter().map(|r| r.bytes).filter(|&b| b > 0).min();
    let hi = rows.iter().map(|r| r.bytes).max();
    (lo.unwrap_or(1), hi.unwrap_or(1))
}

/// Seed 000's node mapping for recursive-doubling allgather on the 2x8 torus: naive (rank r
/// on node r: step 2, partner r ^ 4, crosses 4 hops when the blocks are already 4 deep) and
/// chosen so that long routes fall in the early, small steps (the three low rank bits
/// reversed along x: the partners of steps 2 and 3 are one hop away, those of steps 0 and 1
/// four and two). Per-rank message sizes from 1 KiB to 256 KiB.
fn mapping_effect() -> Result<Vec<(usize, f64, f64)>> {
    let sizes: Vec<usize> = (10..=18).map(|k| 1usize << k).collect();
    let chosen = chosen_mapping();
    let run = |mapping: Option<Vec<u32>>| {
        simulate(Run {
            network: "peach2-2x8",
            ranks: 16,
            benchmark: "Allgather",
            algorithm: Some("recursive_doubling"),
            sizes: &sizes,
            mapping,
            ..Run::default()
        })
    };
    let naive = run(None)?;
    let picked = run(Some(chosen))?;
    Ok(sizes
        .iter()
        .filter_map(|&b| {
            let t = |rows: &[Row]| {
                rows.iter()
                    .find(|r| r.bytes as usize == b)
                    .map(|r| r.t_avg_us)
            };
            Some((b, t(&naive)?, t(&picked)?))
        })
        .collect())
}

/// Which mapping took less time: "chosen", "naive", or "same" within 0.1%.
fn faster(naive: f64, chosen: f64) -> &'static str {
    if (naive - chosen).abs() <= 1e-3 * naive.max(chosen) {
        "same"
    } else if chosen < naive {
        "chosen"
    } else {
        "naive"
    }
}

/// Seed 000's chosen mapping on the 2x8 torus (see [`mapping_effect`]): rank r on the node
/// whose x has r's three low bits reversed.
fn chosen_mapping() -> Vec<u32> {
    (0..16u32)
        .map(|r| {
            let low = r & 7;
            let rev = ((low & 1) << 2) | (low & 2) | ((low >> 2) & 1);
            (r & 8) | rev
        })
        .collect()
}

/// The two mappings of [`mapping_effect`] step by step, "which is faster at which step":
/// each step of recursive doubling on its own, every rank at once putting the 2^k blocks it
/// holds (one put and a signal) into its partner r ^ 2^k and waiting for its partner's, after
/// a barrier; the slowest rank's virtual time from leaving the barrier to holding its
/// partner's blocks. Returns (bytes per rank, step, naive us, chosen us).
fn mapping_steps(sizes: &[usize]) -> Result<Vec<(usize, u32, f64, f64)>> {
    const RANKS: u32 = 16;
    let steps = RANKS.ilog2();
    let most = sizes.iter().max().copied().unwrap_or(0) << (steps - 1);
    let run = |mapping: Option<Vec<u32>>| -> Result<Vec<f64>> {
        let mut sim = tca::sim::Options::new(tca::sim::Network::load("peach2-2x8")?);
        sim.mapping = mapping;
        let cells = sizes.len() * steps as usize;
        let run = tca::sim::run(&sim, RANKS, |w| {
            let seg = w.alloc_symmetric(most + 8 * cells)?;
            let data = vec![0x5au8; most];
            let me = w.rank();
            let mut t = Vec::with_capacity(cells);
            for (i, (&m, k)) in sizes
                .iter()
                .flat_map(|m| std::iter::repeat(m).zip(0..steps))
                .enumerate()
            {
                let partner = seg.handle(me ^ (1 << k))?;
                let sig = most + 8 * i;
                w.barrier()?;
                let t0 = w.wtime();
                let d = &data[..m << k];
                w.put_signal(partner, 0, d, partner, sig, tca::SignalOp::Set(1))?;
                w.wait_until(seg.local(), sig, 1)?;
                t.push(w.wtime() - t0);
            }
            Ok(t)
        })?;
        Ok((0..cells)
            .map(|i| run.results.iter().map(|t| t[i]).fold(0.0, f64::max) * 1e6)
            .collect())
    };
    let naive = run(None)?;
    let chosen = run(Some(chosen_mapping()))?;
    Ok(sizes
        .iter()
        .flat_map(|&m| (0..steps).map(move |k| (m, k)))
        .zip(naive.into_iter().zip(chosen))
        .map(|((m, k), (n, c))| (m, k, n, c))
        .collect())
}

impl Report {
    /// The table a user reads.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s += "# tca sim reproduce: the seeds' network figures on simulated networks (virtual time,\n";
        s += "# deterministic; parameters from hardware and ping-pong figures only)\n";
        s += &format!(
            "{:<76} {:>10} {:>10} {:>8}\n",
            "figure", "paper", "simulated", "error"
        );
        for l in &self.points {
            s += &format!(
                "{:<76} {:>10} {:>10} {:>+7.1}%\n",
                l.figure,
                sig(l.paper),
                sig(l.simulated),
                l.error_pct()
            );
        }
        s += &explain(
            self.points
                .iter()
                .filter(|l| l.off())
                .map(|l| (l.figure.clone(), &l.lacks))
                .collect(),
        );
        if !self.mapping.is_empty() {
            s += "\n# seed 000: recursive-doubling allgather on 16 ranks of the 2x8 torus, naive\n";
            s += "# mapping vs long routes in the early steps (t_avg, us; the paper: chosen is faster)\n";
            s += &format!(
                "{:>12} {:>12} {:>12} {:>10}\n",
                "bytes/rank", "naive", "chosen", "faster"
            );
            for &(b, n, c) in &self.mapping {
                s += &format!("{b:>12} {n:>12.2} {c:>12.2} {:>10}\n", faster(n, c));
            }
        }
        if !self.mapping_steps.is_empty() {
            s += "\n# the same, step by step: step k alone (every rank puts the 2^k blocks it holds\n";
            s += "# into rank r ^ 2^k at once), the slowest rank's time in us\n";
            s += &format!(
                "{:>12} {:>5} {:>12} {:>12} {:>12} {:>10}\n",
                "bytes/rank", "step", "bytes sent", "naive", "chosen", "faster"
            );
            for &(b, k, n, c) in &self.mapping_steps {
                s += &format!(
                    "{b:>12} {k:>5} {:>12} {n:>12.2} {c:>12.2} {:>10}\n",
                    b << k,
                    faster(n, c)
                );
            }
        }
        if !self.table1.is_empty() {
            s += "\n# seed 002 Table 1 (384 nodes of Tofu): Hockney fit of simulated IMB vs the\n";
            s += "# paper's fit (measured on K) and its estimate (formulas); error vs the fit\n";
            s += &format!(
                "{:<24} {:<10} {:>11} {:>11} {:>11} {:>8}\n",
                "column", "quantity", "paper fit", "estimate", "simulated", "error"
            );
            let mut misses = Vec::new();
            for (col, cells, lacks) in &self.table1 {
                let mut missed = Vec::new();
                let quantities = [("B", "MB/s"), ("M_1/2", "B"), ("t_L", "us")];
                for ((q, unit), &(fit, est, sim)) in quantities.iter().zip(cells) {
                    s += &format!(
                        "{:<24} {:<10} {:>11} {:>11} {:>11} {:>+7.1}%\n",
                        col,
                        format!("{q} {unit}"),
                        sig(fit),
                        sig(est),
                        sig(sim),
                        error_pct(fit, sim)
                    );
                    if off(fit, sim) {
                        missed.push(*q);
                    }
                }
                if !missed.is_empty() {
                    misses.push((format!("{col} ({})", missed.join(", ")), lacks));
                }
            }
            s += &explain(misses);
        }
        for n in &self.notes {
            s += &format!("# {n}\n");
        }
        s += &format!("# host time: {:.1} s\n", self.host_s);
        s
    }
}

/// The lines under a table for its misses (more than [`OFF_PCT`] from the paper): each with
/// what the model lacks, as the data file says.
fn explain(misses: Vec<(String, &Option<String>)>) -> String {
    let mut s = String::new();
    if misses.is_empty() {
        return s;
    }
    s += &format!("# more than {OFF_PCT}% from the paper, and what the model lacks:\n");
    for (what, lacks) in misses {
        let why = lacks.as_deref().unwrap_or("not explained in the data file");
        s += &format!("#   {what}: {why}\n");
    }
    s
}

/// Four significant digits (tca-model's formats): plain, in exponent form from 10^5.
fn sig(v: f64) -> String {
    use tca_model::format;
    if v.abs() >= 1e5 {
        format::exp(v, 4)
    } else {
        format::sig(v, 4)
    }
}

/// Checks a plot path before the long run.
pub fn check_plot(p: &Path) -> Result<()> {
    if p.extension().and_then(|e| e.to_str()) != Some("png") {
        bail!("--plot {}: the file name must end in .png", p.display());
    }
    crate::plot::check_path(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The data file parses, names real networks, benchmarks and algorithms, and its Table 1
    /// rows are the same numbers as `tca model estimate`'s presets hold.
    #[test]
    fn the_paper_values_are_complete_and_agree_with_the_presets() {
        let f = figures().unwrap();
        assert!(f.point.len() >= 8);
        for p in &f.point {
            tca::sim::Network::load(&p.network).unwrap();
            let b = Benchmark::find(&p.benchmark).unwrap();
            if let Some(a) = &p.algorithm {
                tca::coll::registry::find(b.collective.unwrap(), a).unwrap();
            }
            assert!(p.paper > 0.0, "{}", p.id);
        }
        assert_eq!(f.channel.len(), 6);
        for c in &f.channel {
            let n = tca::sim::Network::load(&c.network).unwrap();
            assert_eq!(n.dma.channels_gbs.len(), 4, "{}", c.id);
            assert!(c.alone.is_some() != c.channels.is_some(), "{}", c.id);
            assert!(c.paper > 0.0, "{}", c.id);
        }
        assert_eq!(f.table1.len(), 7);
        for c in &f.table1 {
            let n = tca::sim::Network::load(&c.network).unwrap();
            assert!(c.ranks <= n.nodes(), "{}", c.column);
            let preset = tca_model::estimate::preset(&c.preset).unwrap();
            assert_eq!(preset.paper_fit.b_mb_s, c.b_mb_s, "{}", c.column);
            assert_eq!(
                preset.paper_fit.m_half_bytes, c.m_half_bytes,
                "{}",
                c.column
            );
            assert_eq!(preset.paper_fit.t_l_us, c.t_l_us, "{}", c.column);
            assert!(c.skipped.is_some() || !c.sizes.is_empty(), "{}", c.column);
        }
    }

    /// Seed 000's mapping effect, step by step: the chosen mapping puts the long routes (and
    /// their collisions) in the first two steps, where the naive one is faster, and wins the
    /// third, where the naive mapping's partners are four hops apart; the last step crosses
    /// the torus's short dimension in both.
    #[test]
    fn the_chosen_mapping_loses_the_early_steps_and_wins_the_third() {
        let steps = mapping_steps(&[4 << 10]).unwrap();
        let who: Vec<_> = steps.iter().map(|&(_, _, n, c)| faster(n, c)).collect();
        assert_eq!(who, ["naive", "naive", "chosen", "same"], "{steps:?}");
        let rep = Report {
            mapping_steps: steps,
            ..Report::default()
        };
        let out = rep.render();
        assert!(out.contains("step by step"), "{out}");
        assert!(out.contains("        4096     2        16384"), "{out}");
    }

    /// Table 1's columns run the long allgather first (the most memory), every column once.
    #[test]
    fn table1_runs_its_largest_column_first() {
        let f = figures().unwrap();
        let order = largest_first(&f.table1);
        assert_eq!(f.table1[order[0]].column, "Allgather 3-D >=64KiB");
        let mut all = order.clone();
        all.sort_unstable();
        all.dedup();
        assert_eq!(
            all.len(),
            f.table1.iter().filter(|c| c.skipped.is_none()).count()
        );
    }

    /// A figure more than 15% from the paper's is listed under its table with what the model
    /// lacks (or that the data file does not say); one within 15% is not.
    #[test]
    fn misses_are_listed_with_what_the_model_lacks() {
        let line = |figure: &str, simulated: f64, lacks: Option<&str>| Line {
            figure: figure.into(),
            paper: 1.0,
            simulated,
            lacks: lacks.map(str::to_string),
        };
        let rep = Report {
            points: vec![
                line("close", 1.14, Some("never printed")),
                line("low", 0.80, Some("host work per step")),
                line("high", 1.2, None),
            ],
            table1: vec![(
                "Bcast".into(),
                [(10.0, 11.0, 10.5), (100.0, 90.0, 50.0), (5.0, 6.0, 2.0)],
                Some("no t_O".into()),
            )],
            ..Report::default()
        };
        let out = rep.render();
        assert!(out.contains("#   low: host work per step\n"), "{out}");
        assert!(
            out.contains("#   high: not explained in the data file\n"),
            "{out}"
        );
        assert!(!out.contains("never printed"), "{out}");
        assert!(out.contains("#   Bcast (M_1/2, t_L): no t_O\n"), "{out}");
    }
}
