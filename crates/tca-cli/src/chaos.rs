//! `tca chaos ...`: parsing and printing; the campaign, its jobs and its ranks are in
//! `tca-chaos`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, anyhow};
use tca_chaos::{Campaign, Fault, campaign};

/// Exit status of a campaign that missed a goal.
const MISSED: i32 = 2;
/// Exit status of a campaign stopped by SIGINT or SIGTERM (after its partial figures).
const INTERRUPTED: i32 = 130;

fn after_help() -> String {
    format!(
        "FAULT KINDS (--kinds)\n{}\n\n\
         Each job runs rounds of verified work (a control Allreduce, then collectives,\n\
         two-sided messages, active messages or a CG solve) until the fault. A fatal fault\n\
         must end the job with an error naming the culprit on every other rank; after a\n\
         survivable one (and none) the job must complete with every result verified.\n\n\
         Columns: faults injected; not injected (start-up failed, a rank ended first, or\n\
         the victim could not inflict the fault: a goal missed); hangs (still running --hang-after s after the fault, and\n\
         5 s after being told to stop); ran on (never noticed a fatal fault, completed when\n\
         told to stop); handled (answered as promised); in errors (jobs that ended in\n\
         errors: a fatal fault, or a rank that did not complete); directly (of those, jobs where every\n\
         survivor's error names the culprit itself, not through a rank that failed because\n\
         of it); wrong\n\
         results without an error, in every job, injected or not; tca* objects left in /dev/shm; processes left; ms from the\n\
         fault to the last named error, and to the last process of the job gone (from the\n\
         stop, after a survivable fault), median / max.\n\n\
         Exit status: 0 when every goal is met (0 hangs, 0 wrong, 0 left, every fault\n\
         handled); 2 when one is missed (the jobs are listed on stderr and their directories\n\
         kept); 130 when interrupted (SIGINT or SIGTERM: the current job is killed, the\n\
         figures of the jobs that ended printed); 1 on an error.\n\n\
         EXAMPLES\n  tca chaos --faults 20 --seed 1\n  \
         tca chaos --faults 1000 --seed 7 --format csv\n  \
         tca chaos --kinds kill-rank,stop-rank --np 8 --faults 50",
        tca_chaos::fault::help()
    )
}

/// A fault campaign: jobs of random size and workload, one fault each, and the figures.
#[derive(clap::Args, Debug)]
#[command(after_help = after_help())]
pub(crate) struct Args {
    /// Faults to inject (one job each).
    #[arg(long, default_value_t = 20)]
    faults: u64,
    /// Seed of every random choice (job size, workload, fault, victim, moment) [default:
    /// from the clock; printed, so that the campaign can be replayed].
    #[arg(long)]
    seed: Option<u64>,
    /// Ranks per job: N or MIN:MAX (at least 2).
    #[arg(long, default_value = "2:8", value_parser = parse_np, value_name = "MIN:MAX")]
    np: (u32, u32),
    /// Fault kinds to draw from, comma-separated, or `all` (see below).
    #[arg(long, default_value = "all", value_parser = parse_kinds, value_name = "KINDS")]
    kinds: Kinds,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Seconds after its fault until a job still running counts as a hang (and is killed).
    #[arg(long, default_value_t = campaign::HANG_AFTER_S, value_name = "SECONDS")]
    hang_after: f64,
    /// Longest wait between every rank running and the fault, in milliseconds.
    #[arg(long, default_value_t = campaign::MAX_DELAY_MS, value_name = "MS")]
    max_delay: u64,
    /// Where the jobs' directories go [default: the system's temporary directory].
    #[arg(long, value_name = "DIR")]
    workdir: Option<PathBuf>,
    /// Keep every job's directory (description, output, each rank's report), not only
    /// those of jobs that missed a goal.
    #[arg(long)]
    keep: bool,
    /// Run only job I of the campaign (0-based; what the others were does not change it):
    /// replays one job of a seed, e.g. one listed as missing a goal.
    #[arg(long, value_name = "I")]
    replay: Option<u64>,
    /// No progress bar (it shows only on a terminal).
    #[arg(long)]
    no_progress: bool,
    /// Run as a process of one job (the campaign starts its own jobs this way).
    #[arg(long, hide = true, value_name = "SPEC")]
    job: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Table,
    Csv,
    Json,
}

fn parse_np(s: &str) -> Result<(u32, u32), String> {
    tca_chaos::plan::parse_np(s, tca::env::max_ranks())
}

/// `--kinds`, as one value (clap would take a `Vec` for a repeated option).
#[derive(Debug, Clone)]
struct Kinds(Vec<Fault>);

fn parse_kinds(s: &str) -> Result<Kinds, String> {
    Fault::parse_list(s).map(Kinds)
}

pub(crate) fn run(a: Args) -> Result<i32> {
    if let Some(spec) = &a.job {
        return Ok(i32::from(tca_chaos::job::main(spec)));
    }
    // Not a duration at all (negative, NaN, too large to hold): said here; the range of a
    // duration is the campaign's to check.
    let hang_after = Duration::try_from_secs_f64(a.hang_after).map_err(|_| {
        anyhow!(
            "--hang-after {}: give a number of seconds above 0 and at most {}",
            a.hang_after,
            campaign::MAX_HANG_AFTER_S
        )
    })?;
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let seed = a.seed.unwrap_or_else(campaign::clock_seed);
    let mut c = Campaign::new(a.faults, seed, vec![exe, "chaos".into()]);
    c.np = a.np;
    c.kinds = a.kinds.0;
    c.max_delay_ms = a.max_delay;
    c.settings.hang_after = hang_after;
    c.workdir = a.workdir;
    c.keep = a.keep;
    c.only = a.replay;
    eprintln!("tca chaos: seed {seed} (replay with --seed {seed})");
    let jobs = if a.replay.is_some() { 1 } else { a.faults };
    let bar = tca_bench::progress::bar(jobs, !a.no_progress);
    let mut missed = 0u64;
    let summary = c.run(|job| {
        if !job.passed() {
            missed += 1;
        }
        bar.set_message(format!("{} missed", missed));
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    match a.format {
        Format::Table => print!("{}", summary.table()),
        Format::Csv => print!("{}", summary.csv()),
        Format::Json => println!("{}", summary.json()),
    }
    for f in &summary.failures {
        eprintln!("{f}");
    }
    Ok(if summary.interrupted {
        INTERRUPTED
    } else if summary.goals_met() {
        0
    } else {
        MISSED
    })
}
