//! What a run reports: [`Report`] (one transport), [`Output`] (what `tca cg` prints as JSON:
//! the tca run, and with `--compare mpi` the MPI run and the ratios), and their text forms.
//!
//! Times are seconds in the JSON and microseconds per iteration in the text tables, as
//! Fig. 15 of the paper shows per-phase time of rank 0; the maximum over ranks is beside it
//! because a collective's time on rank 0 includes waiting for the slowest rank.

use std::fmt::Write as _;

use crate::problem::MatrixInfo;
use crate::solver::{Outcome, Phases};
use tca_model::format::{seconds, thousands};

/// Total and per-phase seconds of one rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PhaseTimes {
    /// The whole solve (Fig. 13 lines 1 to 26).
    pub total: f64,
    /// Per phase.
    #[serde(flatten)]
    pub phases: Phases,
    /// The time outside the five phases (scalar work, loop control, the clock itself).
    pub other: f64,
}

impl PhaseTimes {
    /// A rank's times; `other` is what the phases leave of `total`.
    pub fn new(total: f64, phases: Phases) -> PhaseTimes {
        let p = &phases;
        let other = (total - (p.spmv + p.dot + p.axpy + p.allgather + p.allreduce)).max(0.0);
        PhaseTimes {
            total,
            phases,
            other,
        }
    }

    /// The rank's own work: SpMV, DOT, AXPY and the time outside the phases (no collective).
    pub fn local(&self) -> f64 {
        let p = &self.phases;
        p.spmv + p.dot + p.axpy + self.other
    }

    /// (name, seconds) of every row of the table: the five phases, other, total.
    pub fn rows(&self) -> [(&'static str, f64); 7] {
        let p = &self.phases;
        [
            ("SpMV", p.spmv),
            ("DOT", p.dot),
            ("AXPY", p.axpy),
            ("Allgather", p.allgather),
            ("Allreduce", p.allreduce),
            ("other", self.other),
            ("total", self.total),
        ]
    }

    /// The per-field maximum of `all`.
    pub fn max_of(all: &[PhaseTimes]) -> PhaseTimes {
        Self::fold(all, f64::max)
    }

    /// The per-field minimum of `all`.
    pub fn min_of(all: &[PhaseTimes]) -> PhaseTimes {
        Self::fold(all, f64::min)
    }

    fn fold(all: &[PhaseTimes], f: fn(f64, f64) -> f64) -> PhaseTimes {
        let Some((first, rest)) = all.split_first() else {
            return PhaseTimes::default();
        };
        let mut m = *first;
        for t in rest {
            m.total = f(m.total, t.total);
            m.other = f(m.other, t.other);
            m.phases.spmv = f(m.phases.spmv, t.phases.spmv);
            m.phases.dot = f(m.phases.dot, t.phases.dot);
            m.phases.axpy = f(m.phases.axpy, t.phases.axpy);
            m.phases.allgather = f(m.phases.allgather, t.phases.allgather);
            m.phases.allreduce = f(m.phases.allreduce, t.phases.allreduce);
        }
        m
    }
}

/// The per-phase breakdown (`--breakdown`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Breakdown {
    /// Rank 0 (the paper's Fig. 15).
    pub rank0: PhaseTimes,
    /// The maximum over ranks, per phase.
    pub max: PhaseTimes,
    /// The minimum over ranks, per phase. For a collective this is about its own cost: the
    /// rank that arrives last waits least, while the others' time includes waiting for the
    /// slowest rank's SpMV (load imbalance).
    pub min: PhaseTimes,
    /// Every rank.
    pub per_rank: Vec<PhaseTimes>,
    /// One clock read on rank 0, nanoseconds.
    pub clock_ns: f64,
    /// Clock reads per iteration.
    pub clock_reads_per_iteration: u32,
    /// Estimated share of rank 0's total spent reading the clock.
    pub clock_share: f64,
}

impl Breakdown {
    /// Seconds of the slowest rank's own work ([`PhaseTimes::local`]). With collectives that
    /// cost nothing no iteration could end before its slowest rank's work, so the solve could
    /// take no less than this (a sum of per-iteration maxima is at least the maximum of the
    /// sums): what faster communication alone can reach, measured in the same run.
    pub fn local_max(&self) -> f64 {
        self.per_rank
            .iter()
            .map(PhaseTimes::local)
            .fold(0.0, f64::max)
    }
}

/// One run of the solver on one transport.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    /// The library: "tca", or the MPI as it names itself ("Open MPI 4.1.4"), as `tca bench`
    /// names its implementations.
    pub transport: String,
    /// The matrix.
    pub matrix: MatrixInfo,
    /// The right-hand side (`ones`, `random:SEED`, ...).
    pub rhs: String,
    /// Ranks.
    pub ranks: u32,
    /// Rows of each rank.
    pub rows_per_rank: Vec<u64>,
    /// Nonzeros of each rank's rows (SpMV work: its spread shows as Allreduce wait on the
    /// lighter ranks).
    pub nnz_per_rank: Vec<u64>,
    /// "fixed" or "tolerance".
    pub mode: String,
    /// The preconditioner (reports written before it existed read as none).
    #[serde(default)]
    pub precond: crate::solver::Precond,
    /// How the rows were split (reports written before it existed read as the paper's).
    #[serde(default)]
    pub partition: crate::partition::PartitionBy,
    /// The order of the Allgather and the SpMV (reports written before it existed read as
    /// the paper's).
    #[serde(default)]
    pub schedule: crate::solver::Schedule,
    /// Iterations asked for (fixed) or allowed (tolerance).
    pub max_iterations: u64,
    /// ε (tolerance mode).
    pub tol: Option<f64>,
    /// Iterations done.
    pub iterations: u64,
    /// How the solve ended.
    pub outcome: Outcome,
    /// ||r|| / ||r0||, the recursively updated residual.
    pub relative_residual: f64,
    /// ||b - A x|| / ||b||, recomputed from x at the end.
    pub true_relative_residual: f64,
    /// ||x - x*|| / ||x*|| for a manufactured right-hand side.
    pub solution_error: Option<f64>,
    /// Seconds to read, check and distribute the problem (rank 0).
    pub setup_s: f64,
    /// Seconds of the solve (rank 0).
    pub total_s: f64,
    /// total_s / iterations.
    pub per_iteration_s: f64,
    /// Per-phase times, with `--breakdown`.
    pub breakdown: Option<Breakdown>,
    /// What was read.
    pub notes: Vec<String>,
    /// Things the user should know (early stop, no convergence, residual gap).
    pub warnings: Vec<String>,
}

/// tca time / MPI time, per phase.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PhaseRatios {
    /// Whole solve.
    pub total: f64,
    /// SpMV.
    pub spmv: f64,
    /// DOT.
    pub dot: f64,
    /// AXPY.
    pub axpy: f64,
    /// Allgather.
    pub allgather: f64,
    /// Allreduce.
    pub allreduce: f64,
}

impl PhaseRatios {
    fn of(a: &PhaseTimes, b: &PhaseTimes) -> PhaseRatios {
        PhaseRatios {
            total: ratio(a.total, b.total),
            spmv: ratio(a.phases.spmv, b.phases.spmv),
            dot: ratio(a.phases.dot, b.phases.dot),
            axpy: ratio(a.phases.axpy, b.phases.axpy),
            allgather: ratio(a.phases.allgather, b.phases.allgather),
            allreduce: ratio(a.phases.allreduce, b.phases.allreduce),
        }
    }
}

/// tca / MPI.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Ratios {
    /// Time per iteration.
    pub per_iteration: f64,
    /// Per phase on rank 0, with `--breakdown`.
    pub rank0: Option<PhaseRatios>,
    /// Per phase, maximum over ranks, with `--breakdown`.
    pub max: Option<PhaseRatios>,
    /// With `--breakdown`: tca's solve with collectives that cost nothing (its slowest rank's
    /// own work, [`Breakdown::local_max`]) over MPI's whole solve: the least `per_iteration`
    /// can become by faster communication alone.
    #[serde(default)]
    pub free_communication: Option<f64>,
    /// With `--breakdown`: the share of MPI's solve outside its slowest rank's own work (its
    /// collectives and the waits in them).
    #[serde(default)]
    pub mpi_communication_share: Option<f64>,
}

/// What `tca cg --format json` prints.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Output {
    /// The run on tca.
    pub tca: Report,
    /// The run on MPI (`--compare mpi`).
    pub mpi: Option<Report>,
    /// The MPI library ("Open MPI 4.1.4").
    pub mpi_library: Option<String>,
    /// tca / MPI.
    pub ratio: Option<Ratios>,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

impl Output {
    /// Assembles the output, computing the ratios when there is an MPI run.
    pub fn new(tca: Report, mpi: Option<(String, Report)>) -> Output {
        let (mpi_library, mpi) = match mpi {
            Some((l, r)) => (Some(l), Some(r)),
            None => (None, None),
        };
        let ratio = mpi.as_ref().map(|m| Ratios {
            per_iteration: ratio(tca.per_iteration_s, m.per_iteration_s),
            rank0: tca
                .breakdown
                .as_ref()
                .zip(m.breakdown.as_ref())
                .map(|(a, b)| PhaseRatios::of(&a.rank0, &b.rank0)),
            max: tca
                .breakdown
                .as_ref()
                .zip(m.breakdown.as_ref())
                .map(|(a, b)| PhaseRatios::of(&a.max, &b.max)),
            free_communication: tca
                .breakdown
                .as_ref()
                .zip(m.breakdown.as_ref())
                .map(|(a, _)| ratio(per_iter(&tca, a.local_max()), per_iter(m, m.total_s))),
            mpi_communication_share: m
                .breakdown
                .as_ref()
                .map(|b| ratio(m.total_s - b.local_max(), m.total_s).max(0.0)),
        });
        Output {
            tca,
            mpi,
            mpi_library,
            ratio,
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serialises")
    }

    /// Reads [`Output::to_json`]'s text back.
    pub fn from_json(text: &str) -> Result<Output, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// The text form: the run(s), and the comparison table with `--compare`.
    pub fn text(&self) -> String {
        let mut s = String::new();
        match (&self.mpi, &self.ratio) {
            (Some(m), Some(r)) => {
                let lib = self.mpi_library.as_deref().unwrap_or("MPI");
                s += &header(&self.tca);
                s += "\n";
                s += &results_side_by_side(&self.tca, m, lib, r);
                if let (Some(a), Some(b)) = (&self.tca.breakdown, &m.breakdown) {
                    s += "\n";
                    s += &compare_table(&self.tca, a, m, b, lib);
                    s += &free_line(&self.tca, a, r, lib);
                }
                s += &notes(&self.tca);
                s += &warnings("tca", &self.tca);
                s += &warnings(lib, m);
            }
            _ => {
                s += &self.tca.text();
            }
        }
        s
    }
}

fn header(r: &Report) -> String {
    let m = &r.matrix;
    let per_row = if m.rows > 0 {
        m.nnz as f64 / m.rows as f64
    } else {
        0.0
    };
    let split = match r.rows_per_rank.as_slice() {
        [] => String::new(),
        [one] => format!("{} rows", thousands(*one)),
        rows if rows.iter().all(|&x| x == rows[0]) => {
            format!("{} rows each", thousands(rows[0]))
        }
        rows if r.partition == crate::partition::PartitionBy::Rows => format!(
            "{} rows each, the last {}",
            thousands(rows[0]),
            thousands(rows[rows.len() - 1])
        ),
        rows => format!(
            "{} to {} rows",
            thousands(rows.iter().copied().min().unwrap_or(0)),
            thousands(rows.iter().copied().max().unwrap_or(0))
        ),
    } + match r.partition {
        crate::partition::PartitionBy::Nnz if r.rows_per_rank.len() > 1 => ", split by nonzeros",
        _ => "",
    };
    let nnz = match (r.nnz_per_rank.iter().min(), r.nnz_per_rank.iter().max()) {
        (Some(lo), Some(hi)) if r.nnz_per_rank.len() > 1 && lo == hi => {
            format!(" ({} nonzeros each)", thousands(*lo))
        }
        (Some(lo), Some(hi)) if r.nnz_per_rank.len() > 1 => {
            format!(" ({} to {} nonzeros)", thousands(*lo), thousands(*hi))
        }
        _ => String::new(),
    };
    format!(
        "tca cg: {}, {} rows, {} nonzeros ({per_row:.1} per row); b = {}\n\
         ranks: {}, {split}{nnz}\n",
        m.source,
        thousands(m.rows),
        thousands(m.nnz),
        r.rhs,
        r.ranks,
    ) + &match r.tol {
        Some(t) => format!(
            "mode: tolerance, ||r||/||r0|| < {t:e}, at most {} iterations",
            thousands(r.max_iterations)
        ),
        None => format!("mode: fixed, {} iterations", thousands(r.max_iterations)),
    } + &match r.precond {
        crate::solver::Precond::None => String::new(),
        p => format!("; preconditioner: {p}"),
    } + &match r.schedule {
        crate::solver::Schedule::Paper => "\n".to_string(),
        s => format!("; schedule: {s} (Allgather with the SpMV's own-column part)\n"),
    }
}

fn outcome_text(r: &Report) -> String {
    match r.outcome {
        Outcome::Completed => "all done".into(),
        Outcome::Converged => "converged".into(),
        Outcome::IterationLimit => "NOT converged: iteration limit".into(),
        Outcome::ResidualVanished => "stopped early: residual vanished".into(),
        Outcome::ZeroResidual => "b - A x0 = 0".into(),
    }
}

impl Report {
    /// The text form of one run.
    pub fn text(&self) -> String {
        let mut s = header(self);
        let _ = writeln!(s, "transport                {}", self.transport);
        let _ = writeln!(
            s,
            "iterations               {} ({})",
            thousands(self.iterations),
            outcome_text(self)
        );
        let _ = writeln!(
            s,
            "relative residual        {:.3e}   ||r|| / ||r0||, recursive",
            self.relative_residual
        );
        let _ = writeln!(
            s,
            "true relative residual   {:.3e}   ||b - A x|| / ||b||, recomputed",
            self.true_relative_residual
        );
        if let Some(e) = self.solution_error {
            let _ = writeln!(s, "solution error           {e:.3e}   ||x - x*|| / ||x*||");
        }
        let _ = writeln!(s, "total time               {}", seconds(self.total_s));
        let _ = writeln!(
            s,
            "time per iteration       {}",
            seconds(self.per_iteration_s)
        );
        let _ = writeln!(
            s,
            "setup                    {} (read, check, distribute)",
            seconds(self.setup_s)
        );
        if let Some(b) = &self.breakdown {
            s += "\n";
            s += &breakdown_table(self, b);
        }
        s += &notes(self);
        s += &warnings(&self.transport, self);
        s
    }
}

fn per_iter(r: &Report, secs: f64) -> f64 {
    if r.iterations > 0 {
        secs * 1e6 / r.iterations as f64
    } else {
        0.0
    }
}

fn breakdown_table(r: &Report, b: &Breakdown) -> String {
    let mut s = format!(
        "time per iteration by phase, us (over {} iterations; Fig. 15)\n\
         {:<10} {:>10} {:>7} {:>10} {:>10}\n",
        thousands(r.iterations),
        "phase",
        "rank 0",
        "share",
        "min rank",
        "max rank"
    );
    let (min, max) = (b.min.rows(), b.max.rows());
    for (i, (name, t)) in b.rank0.rows().into_iter().enumerate() {
        let share = if b.rank0.total > 0.0 {
            100.0 * t / b.rank0.total
        } else {
            0.0
        };
        let _ = writeln!(
            s,
            "{name:<10} {:>10.2} {:>6.1}% {:>10.2} {:>10.2}",
            per_iter(r, t),
            share,
            per_iter(r, min[i].1),
            per_iter(r, max[i].1)
        );
    }
    s += &clock_line(b);
    s
}

fn clock_line(b: &Breakdown) -> String {
    format!(
        "(the phase clock: {} reads per iteration at {:.0} ns each, {:.2}% of rank 0's time)\n",
        b.clock_reads_per_iteration,
        b.clock_ns,
        100.0 * b.clock_share
    )
}

fn results_side_by_side(a: &Report, b: &Report, lib: &str, r: &Ratios) -> String {
    let mut s = format!("{:<24} {:>14} {:>14}\n", "", "tca", lib);
    let mut row = |name: &str, x: String, y: String| {
        let _ = writeln!(s, "{name:<24} {x:>14} {y:>14}");
    };
    row(
        "iterations",
        thousands(a.iterations),
        thousands(b.iterations),
    );
    row(
        "relative residual",
        format!("{:.3e}", a.relative_residual),
        format!("{:.3e}", b.relative_residual),
    );
    row(
        "true relative residual",
        format!("{:.3e}", a.true_relative_residual),
        format!("{:.3e}", b.true_relative_residual),
    );
    if let (Some(x), Some(y)) = (a.solution_error, b.solution_error) {
        row("solution error", format!("{x:.3e}"), format!("{y:.3e}"));
    }
    row("total time", seconds(a.total_s), seconds(b.total_s));
    row(
        "time per iteration",
        seconds(a.per_iteration_s),
        seconds(b.per_iteration_s),
    );
    row("setup", seconds(a.setup_s), seconds(b.setup_s));
    let _ = writeln!(s, "time per iteration, tca / {lib}: {:.2}", r.per_iteration);
    s
}

fn compare_table(a: &Report, ab: &Breakdown, b: &Report, bb: &Breakdown, lib: &str) -> String {
    let mut s = String::from(
        "time per iteration by phase, us (Fig. 15), tca vs MPI: on rank 0, on the rank where\n\
         it is least (for a collective: its own cost, no waiting for slower ranks) and most\n",
    );
    let _ = writeln!(
        s,
        "{:<10}|{:>8} {:>8} {:>6} |{:>8} {:>8} {:>6} |{:>8} {:>8} {:>6}",
        "phase",
        "r0 tca",
        "r0 MPI",
        "ratio",
        "min tca",
        "min MPI",
        "ratio",
        "max tca",
        "max MPI",
        "ratio"
    );
    let cols = [
        (ab.rank0.rows(), bb.rank0.rows()),
        (ab.min.rows(), bb.min.rows()),
        (ab.max.rows(), bb.max.rows()),
    ];
    for i in 0..cols[0].0.len() {
        let _ = write!(s, "{:<10}", cols[0].0[i].0);
        for (x, y) in &cols {
            let (x, y) = (per_iter(a, x[i].1), per_iter(b, y[i].1));
            let _ = write!(s, "|{x:>8.2} {y:>8.2} {:>6.2} ", ratio(x, y));
        }
        s.pop();
        s.push('\n');
    }
    let _ = write!(s, "tca {}", clock_line(ab));
    let _ = write!(s, "{lib} {}", clock_line(bb));
    s
}

/// What faster communication alone could reach ([`Ratios::free_communication`]).
fn free_line(a: &Report, ab: &Breakdown, r: &Ratios, lib: &str) -> String {
    let (Some(free), Some(share)) = (r.free_communication, r.mpi_communication_share) else {
        return String::new();
    };
    format!(
        "with collectives that cost nothing, tca would still take at least {:.2} us per\n\
         iteration (its slowest rank's SpMV, DOT, AXPY and other): {free:.2} of {lib}'s time, the\n\
         least faster communication can reach; {lib}'s collectives and their waits are {:.0}%\n\
         of its time\n",
        per_iter(a, ab.local_max()),
        100.0 * share
    )
}

fn notes(r: &Report) -> String {
    r.notes.iter().map(|n| format!("note: {n}\n")).collect()
}

fn warnings(who: &str, r: &Report) -> String {
    r.warnings
        .iter()
        .map(|w| format!("warning ({who}): {w}\n"))
        .collect()
}
