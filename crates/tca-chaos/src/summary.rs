//! A campaign's figures per fault kind, its goals, and the three ways to print them (one
//! module, so the table, CSV and JSON cannot disagree on a column).

use std::fmt::Write as _;

use serde::Serialize;

use crate::fault::{FAULTS, Fault};
use crate::supervise::JobRecord;

/// Median and maximum of a set of durations, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Spread {
    /// How many.
    pub n: usize,
    /// Median (the lower middle of an even count).
    pub median: Option<f64>,
    /// Maximum.
    pub max: Option<f64>,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Self {
        v.sort_by(f64::total_cmp);
        Self {
            n: v.len(),
            median: v.get(v.len().saturating_sub(1) / 2).copied(),
            max: v.last().copied(),
        }
    }

    fn text(&self) -> String {
        match (self.median, self.max) {
            (Some(m), Some(x)) => format!("{m:.0} / {x:.0}"),
            _ => "-".into(),
        }
    }
}

/// One fault kind's figures (or the total's).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Row {
    /// The kind (or `total`).
    pub kind: String,
    /// Faults injected (jobs whose fault could not be injected are not counted here).
    pub faults: u64,
    /// Jobs whose fault could not be injected: start-up failed, a rank ended first (with an
    /// error or a wrong result), or the victim could not inflict it (goal 0).
    pub not_injected: u64,
    /// Jobs still running `hang_after` after the fault (goal 0).
    pub hangs: u64,
    /// Jobs that never noticed a fatal fault and completed when the campaign stopped them.
    pub ran_on: u64,
    /// Jobs whose fault was answered as the library promises (goal: all).
    pub handled: u64,
    /// Jobs that ended in errors (a fatal fault, or a rank that did not complete): the jobs
    /// the naming columns are about.
    pub in_errors: u64,
    /// Jobs that ended in errors where every survivor named the culprit itself.
    pub named_directly: u64,
    /// Wrong results delivered without an error, in every job, injected or not (goal 0).
    pub wrong: u64,
    /// `tca*` objects left in `/dev/shm` (goal 0).
    pub shm_left: u64,
    /// Processes left running (goal 0).
    pub procs_left: u64,
    /// Fault to the last survivor's named error, ms (jobs that ended in errors).
    pub named_ms: Spread,
    /// Fault (or, after a survivable fault, the stop) to the last process of the job gone, ms.
    pub gone_ms: Spread,
}

/// The counted columns, in the order every format prints them: the table's header, the
/// CSV's, and the table's width.
const COUNTED: [(&str, &str, usize); 10] = [
    ("faults", "faults", 6),
    ("not inj", "not_injected", 7),
    ("hangs", "hangs", 6),
    ("ran on", "ran_on", 6),
    ("handled", "handled", 8),
    ("in errors", "in_errors", 9),
    ("directly", "named_directly", 8),
    ("wrong", "wrong", 6),
    ("/dev/shm", "shm_left", 9),
    ("procs", "procs_left", 6),
];

impl Row {
    /// The counted columns' values, in [`COUNTED`]'s order.
    fn counts(&self) -> [u64; 10] {
        [
            self.faults,
            self.not_injected,
            self.hangs,
            self.ran_on,
            self.handled,
            self.in_errors,
            self.named_directly,
            self.wrong,
            self.shm_left,
            self.procs_left,
        ]
    }

    fn of(kind: &str, jobs: &[&JobRecord]) -> Self {
        let injected: Vec<&&JobRecord> = jobs.iter().filter(|j| j.not_injected.is_none()).collect();
        let count =
            |f: &dyn Fn(&JobRecord) -> bool| injected.iter().filter(|j| f(j)).count() as u64;
        Self {
            kind: kind.to_string(),
            faults: injected.len() as u64,
            not_injected: (jobs.len() - injected.len()) as u64,
            hangs: count(&|j| j.hang),
            ran_on: count(&|j| j.ran_on),
            handled: count(&|j| j.verdict.handled && !j.hang),
            in_errors: count(&|j| j.verdict.in_errors),
            named_directly: count(&|j| j.verdict.direct && j.verdict.in_errors),
            wrong: jobs.iter().map(|j| j.verdict.wrong.len() as u64).sum(),
            shm_left: jobs.iter().map(|j| j.shm_left.len() as u64).sum(),
            procs_left: jobs.iter().map(|j| j.procs_left.len() as u64).sum(),
            named_ms: Spread::of(injected.iter().filter_map(|j| j.verdict.named_ms).collect()),
            gone_ms: Spread::of(injected.iter().filter_map(|j| j.gone_ms).collect()),
        }
    }
}

/// A campaign's results.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The seed (replays the campaign).
    pub seed: u64,
    /// Faults asked for.
    pub faults: u64,
    /// Ranks per job, MIN and MAX.
    pub np: (u32, u32),
    /// The kinds drawn from.
    pub kinds: Vec<Fault>,
    /// Seconds after a fault until a job is a hang.
    pub hang_after_s: f64,
    /// Wall time of the campaign, seconds.
    pub wall_s: f64,
    /// One row per kind that came up, in table order.
    pub rows: Vec<Row>,
    /// All kinds together.
    pub total: Row,
    /// Jobs whose fault could not be injected (start-up failed, or the job ended first).
    pub not_injected: u64,
    /// The jobs that missed a goal, described.
    pub failures: Vec<String>,
    /// The campaign was interrupted (SIGINT): the figures are those of the jobs that ended.
    pub interrupted: bool,
}

impl Summary {
    /// Figures from the campaign's jobs.
    pub fn new(
        seed: u64,
        np: (u32, u32),
        kinds: &[Fault],
        hang_after_s: f64,
        wall_s: f64,
        jobs: &[JobRecord],
    ) -> Self {
        let rows = FAULTS
            .iter()
            .filter_map(|i| {
                let mine: Vec<&JobRecord> =
                    jobs.iter().filter(|j| j.plan.fault == i.fault).collect();
                (!mine.is_empty()).then(|| Row::of(i.name, &mine))
            })
            .collect();
        let all: Vec<&JobRecord> = jobs.iter().collect();
        Self {
            seed,
            faults: jobs.len() as u64,
            np,
            kinds: kinds.to_vec(),
            hang_after_s,
            wall_s,
            rows,
            total: Row::of("total", &all),
            not_injected: jobs.iter().filter(|j| j.not_injected.is_some()).count() as u64,
            failures: jobs
                .iter()
                .filter(|j| !j.passed())
                .map(JobRecord::describe)
                .collect(),
            interrupted: false,
        }
    }

    /// The goals: every fault injected and handled; no hang, wrong result or leftover.
    pub fn goals_met(&self) -> bool {
        let t = &self.total;
        !self.interrupted
            && self.not_injected == 0
            && t.hangs == 0
            && t.wrong == 0
            && t.shm_left == 0
            && t.procs_left == 0
            && t.handled == t.faults
    }

    /// The table for people.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let kinds: Vec<&str> = self.kinds.iter().map(|k| k.name()).collect();
        let _ = writeln!(
            s,
            "# tca chaos: {} faults, seed {}, {}..{} ranks, kinds {}, hang after {} s; {:.0} s",
            self.faults,
            self.seed,
            self.np.0,
            self.np.1,
            kinds.join(","),
            self.hang_after_s,
            self.wall_s
        );
        let _ = write!(s, "{:<14}", "kind");
        for (head, _, w) in COUNTED {
            let _ = write!(s, " {head:>w$}");
        }
        let _ = writeln!(s, " {:>18} {:>18}", "named ms med/max", "gone ms med/max");
        for r in self.rows.iter().chain(std::iter::once(&self.total)) {
            let _ = write!(s, "{:<14}", r.kind);
            for (v, (_, _, w)) in r.counts().into_iter().zip(COUNTED) {
                let _ = write!(s, " {v:>w$}");
            }
            let _ = writeln!(s, " {:>18} {:>18}", r.named_ms.text(), r.gone_ms.text());
        }
        if self.not_injected > 0 {
            let _ = writeln!(
                s,
                "{} job(s) could not be injected (start-up failed, a rank ended first, or the \
                 victim could not inflict the fault): see the jobs listed on stderr",
                self.not_injected
            );
        }
        if self.interrupted {
            let _ = writeln!(
                s,
                "INTERRUPTED after {} of {} jobs: partial figures",
                self.total.faults + self.total.not_injected,
                self.faults
            );
        }
        let t = &self.total;
        let mark = |ok: bool| if ok { "met" } else { "MISSED" };
        let _ = writeln!(
            s,
            "goals: hangs 0 ({}), wrong results 0 ({}), /dev/shm 0 ({}), processes 0 ({}), \
             every fault handled ({})",
            mark(t.hangs == 0),
            mark(t.wrong == 0),
            mark(t.shm_left == 0),
            mark(t.procs_left == 0),
            mark(t.handled == t.faults && self.not_injected == 0)
        );
        s
    }

    /// CSV: a header and one line per row (the total last).
    pub fn csv(&self) -> String {
        let heads: Vec<&str> = COUNTED.iter().map(|&(_, h, _)| h).collect();
        let mut s = format!(
            "kind,{},named_ms_median,named_ms_max,gone_ms_median,gone_ms_max\n",
            heads.join(",")
        );
        let num = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.1}"));
        for r in self.rows.iter().chain(std::iter::once(&self.total)) {
            let counts: Vec<String> = r.counts().iter().map(u64::to_string).collect();
            let _ = writeln!(
                s,
                "{},{},{},{},{},{}",
                r.kind,
                counts.join(","),
                num(r.named_ms.median),
                num(r.named_ms.max),
                num(r.gone_ms.median),
                num(r.gone_ms.max)
            );
        }
        s
    }

    /// JSON: the whole summary, goals included.
    pub fn json(&self) -> String {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("goals_met".into(), self.goals_met().into());
        }
        serde_json::to_string_pretty(&v).unwrap_or_default()
    }
}
