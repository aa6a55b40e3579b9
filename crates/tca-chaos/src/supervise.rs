//! One job of a campaign, from outside: start it, wait until every rank runs its rounds,
//! wait the planned moment, inject the fault, and watch until every process of the job is
//! gone, or declare a hang.
//!
//! ```text
//! start launcher ──► every ready-R file ──► delay ──► FAULT ──► all gone? ──► reports
//!    (its own process)   (pids, by pidfd)            t0     │  (launcher and ranks,
//!                                                           │   by pidfd, until t0 +
//!                                                           │   hang-after)
//!                                                           └─► HANG: SIGCONT + SIGKILL all
//! ```
//!
//! The fault's moment `t0` is when the campaign sends the signal (SIGKILL, SIGSTOP, or the
//! SIGUSR1 that tells the victim to inflict a survivable fault on itself). After a
//! survivable fault (once the victim says it is applied, and the plan's `after_ms` of rounds
//! under its consequences) or none, the campaign writes the stop file: the job must then end
//! by itself, completed. After a fatal fault nothing is
//! written: the job must end by itself through errors. "Gone" is measured from `t0` to the
//! moment the last process of the job (launcher included) has exited.
//!
//! A job still running `hang_after` after a fatal fault is either stuck or running on without
//! having noticed the fault. The campaign then writes the stop file and gives it
//! [`RAN_ON_GRACE`]: a job whose ranks then all complete, verified, *ran on* (the fault was
//! not answered, but nothing is stuck); one that still does not end is a hang.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::process::Signal;

use crate::fault::Fault;
use crate::plan::JobPlan;
use crate::report::{Ending, RankReport};
use crate::spec::{JobDir, JobSpec, unix_ms, unix_us, write_atomic};
use crate::verdict::{self, Verdict};
use tca::process::{self, Proc};

/// How long a job that was still running at `hang_after` gets to end once the campaign has
/// written its stop file before it is a hang.
pub const RAN_ON_GRACE: Duration = Duration::from_secs(5);

/// How jobs are run (the campaign's settings that each job needs).
#[derive(Debug, Clone)]
pub struct Settings {
    /// How to start this program as a process of a job (`--job SPEC` is appended).
    pub command: Vec<String>,
    /// How long after its fault a job may take to end before it is a hang (also the limit
    /// for its ranks to get ready).
    pub hang_after: Duration,
    /// `TCA_TIMEOUT` of `stop-rank` jobs, in seconds.
    pub stop_timeout: f64,
    /// Set (by the campaign's SIGINT handler) to stop: the current job is killed and
    /// [`run`] returns an [`Interrupted`] error.
    pub interrupted: Arc<AtomicBool>,
}

/// The error [`run`] returns when [`Settings::interrupted`] was set during the job (its
/// processes are killed by then).
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

impl Settings {
    fn check_interrupt(&self) -> Result<()> {
        if self.interrupted.load(Ordering::Relaxed) {
            return Err(Interrupted.into());
        }
        Ok(())
    }
}

/// What happened in one job.
#[derive(Debug, Clone)]
pub struct JobRecord {
    /// The job.
    pub plan: JobPlan,
    /// It did not end within `hang_after` of its fault.
    pub hang: bool,
    /// What its ranks' reports say.
    pub verdict: Verdict,
    /// `tca*` objects that appeared in `/dev/shm` during the job and are still there.
    pub shm_left: Vec<String>,
    /// Processes of the job still running after the campaign's own clean-up.
    pub procs_left: Vec<u32>,
    /// Milliseconds from the fault (the stop file, for survivable faults that left the job
    /// running) to the last process of the job gone (`None` on a hang, or if the campaign had
    /// to stop a job after a fatal fault).
    pub gone_ms: Option<f64>,
    /// Every rank was still running `hang_after` after a fatal fault and completed, verified,
    /// when the campaign wrote the stop file: the fault went unnoticed (not stuck: not a hang).
    pub ran_on: bool,
    /// Why the fault could not be injected (the job failed to start or ended before it).
    pub not_injected: Option<String>,
    /// Each rank's report.
    pub reports: Vec<Option<RankReport>>,
    /// The job's directory.
    pub dir: PathBuf,
}

impl JobRecord {
    /// Whether the job met every goal: injected, no hang, handled, nothing wrong or left.
    pub fn passed(&self) -> bool {
        self.not_injected.is_none()
            && !self.hang
            && self.verdict.handled
            && self.verdict.wrong.is_empty()
            && self.shm_left.is_empty()
            && self.procs_left.is_empty()
    }

    /// A few lines for people: the job, what went wrong, the ranks' reports.
    pub fn describe(&self) -> String {
        let p = &self.plan;
        let mix: Vec<&str> = p.mix.iter().map(|w| w.name()).collect();
        let mut s = format!(
            "job {} ({}, {} ranks, victim {}, mix {}, {} ms after ready; {}):",
            p.index,
            p.fault,
            p.ranks,
            p.victim.map_or("-".into(), |v| v.to_string()),
            mix.join("+"),
            p.delay_ms,
            self.dir.display()
        );
        let mut say = |t: String| {
            s.push_str("\n    ");
            s.push_str(&t);
        };
        if let Some(why) = &self.not_injected {
            say(format!("not injected: {why}"));
        }
        if self.hang {
            say("HANG".into());
        }
        for w in &self.verdict.wrong {
            say(format!("WRONG: {w}"));
        }
        for pr in &self.verdict.problems {
            say(pr.clone());
        }
        if !self.shm_left.is_empty() {
            say(format!("left in /dev/shm: {:?}", self.shm_left));
        }
        if !self.procs_left.is_empty() {
            say(format!("processes left: {:?}", self.procs_left));
        }
        for (r, rep) in self.reports.iter().enumerate() {
            say(match rep {
                Some(rep) => rep.line(),
                None => format!("rank {r}: no report"),
            });
        }
        s
    }
}

/// The processes of a running job. Dropped, it kills whatever of them still runs, so that
/// no path out of [`run`] (an error, an interrupt) leaves a process behind.
struct Job {
    launcher: Child,
    launcher_fd: Proc,
    ranks: Vec<Proc>,
    /// How many ranks the job has (`ranks` holds those that reported ready).
    size: usize,
    dir: JobDir,
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.running().is_empty() || self.ranks.len() < self.size {
            let _ = self.kill_all();
        }
        self.reap();
    }
}

impl Job {
    fn all(&self) -> impl Iterator<Item = &Proc> {
        std::iter::once(&self.launcher_fd).chain(&self.ranks)
    }

    fn running(&self) -> Vec<&Proc> {
        self.all().filter(|p| !p.gone()).collect()
    }

    /// Kills everything still running (continuing stopped ranks first) and waits up to two
    /// seconds for it to go; returns the pids that did not.
    fn kill_all(&mut self) -> Vec<u32> {
        // Ranks that never reported ready are only known as the launcher's children; if the
        // launcher died, they were re-parented to the campaign (its subreaper).
        let mut unknown = process::children_of(self.launcher_fd.pid());
        if self.launcher_fd.gone() {
            unknown.extend(
                process::children_of(std::process::id())
                    .into_iter()
                    .filter(|&c| c != self.launcher_fd.pid()),
            );
        }
        let extra: Vec<Proc> = unknown
            .into_iter()
            .filter(|c| self.ranks.iter().all(|r| r.pid() != *c))
            .filter_map(|c| Proc::open(c).ok())
            .collect();
        self.ranks.extend(extra);
        for p in &self.ranks {
            p.signal(Signal::CONT);
            p.signal(Signal::KILL);
        }
        self.launcher_fd.signal(Signal::KILL);
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until && !self.running().is_empty() {
            process::wait_any(self.running(), Duration::from_millis(20));
        }
        self.running().iter().map(|p| p.pid()).collect()
    }

    /// Reaps the launcher and any orphaned rank (re-parented to the campaign).
    fn reap(&mut self) {
        if self.launcher_fd.gone() {
            let _ = self.launcher.wait();
        }
        for r in &self.ranks {
            r.reap();
        }
    }
}

/// Runs job `plan` in a new directory under `root`; `stale` is a segment handle of an
/// earlier, ended job. Returns the record and rank 0's probe handle (for later jobs).
pub fn run(
    plan: &JobPlan,
    settings: &Settings,
    root: &Path,
    stale: Option<String>,
) -> Result<(JobRecord, Option<String>)> {
    let dir = JobDir(job_dir(root, plan.index));
    std::fs::create_dir_all(&dir.0).with_context(|| format!("creating {}", dir.0.display()))?;
    let spec = JobSpec {
        plan: plan.clone(),
        stale_handle: stale,
        dir: dir.0.clone(),
        command: settings.command.clone(),
        deadline_unix_ms: unix_ms()
            + u64::try_from(settings.hang_after.as_millis() * 3).unwrap_or(u64::MAX / 2)
            + 60_000,
    };
    let text = serde_json::to_string_pretty(&spec)?;
    std::fs::write(dir.spec(), text)
        .with_context(|| format!("writing {}", dir.spec().display()))?;
    let shm_before = tca::transport::shm_entries();

    let (program, args) = settings
        .command
        .split_first()
        .context("no program to start jobs with")?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .arg("--job")
        .arg(dir.spec())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.out())?)
        .stderr(std::fs::File::create(dir.err())?);
    if plan.fault == Fault::StopRank {
        cmd.env(tca::env::TIMEOUT, settings.stop_timeout.to_string());
    }
    let launcher = cmd
        .spawn()
        .with_context(|| format!("starting the launcher `{program}`"))?;
    let launcher_fd = Proc::open(launcher.id()).context("watching the launcher")?;
    let mut job = Job {
        launcher,
        launcher_fd,
        ranks: Vec::new(),
        size: plan.ranks as usize,
        dir: dir.clone(),
    };
    let mut rec = JobRecord {
        plan: plan.clone(),
        hang: false,
        verdict: Verdict::default(),
        shm_left: Vec::new(),
        procs_left: Vec::new(),
        gone_ms: None,
        ran_on: false,
        not_injected: None,
        reports: Vec::new(),
        dir: dir.0.clone(),
    };

    let ready = match wait_ready(&mut job, plan.ranks, settings) {
        Ok(r) => r,
        Err(why) => {
            settings.check_interrupt()?;
            rec.not_injected = Some(why);
            rec.procs_left = job.kill_all();
            return Ok((finish(job, rec, &shm_before, 0, false), None));
        }
    };
    let probe = ready.first().map(|(_, hex)| hex.clone());
    // The delay, watching for a job that ends early.
    let until = Instant::now() + Duration::from_millis(plan.delay_ms);
    while Instant::now() < until {
        settings.check_interrupt()?;
        if job.all().any(Proc::gone) {
            rec.not_injected = Some("a process of the job exited before the fault".into());
            rec.procs_left = job.kill_all();
            return Ok((finish(job, rec, &shm_before, 0, false), probe));
        }
        let left = until.saturating_duration_since(Instant::now());
        process::wait_any(job.all(), left.min(Duration::from_millis(50)));
    }

    // The fault.
    let t0 = Instant::now();
    let t0_us = unix_us();
    let victim = plan.victim.and_then(|v| job.ranks.get(v as usize));
    let by_rank = plan.fault.info().by_rank;
    match (plan.fault, victim) {
        (Fault::KillRank, Some(v)) => v.signal(Signal::KILL),
        (Fault::StopRank, Some(v)) => v.signal(Signal::STOP),
        (Fault::KillLauncher, _) => job.launcher_fd.signal(Signal::KILL),
        // The kinds a rank inflicts on itself: told to by SIGUSR1.
        (_, Some(v)) if by_rank => v.signal(Signal::USR1),
        _ => {}
    }
    let mut stop_written = false;
    if plan.fault == Fault::None {
        write_stop(&dir)?;
        stop_written = true;
    }
    // hang_after is bounded (at most an hour) by the campaign's check.
    let mut deadline = t0 + settings.hang_after;
    let mut applied = false;
    let mut stopped_late = false;
    let mut stop_at = None;
    // What "gone" counts from: the fault, or for the survivable kinds the stop.
    let mut ends_from = t0;
    loop {
        settings.check_interrupt()?;
        if by_rank && !applied && dir.applied().exists() {
            applied = true;
            stop_at = Some(Instant::now() + Duration::from_millis(plan.after_ms));
        }
        if stop_at.is_some_and(|t| Instant::now() >= t) && !stop_written {
            write_stop(&dir)?;
            stop_written = true;
            ends_from = Instant::now();
        }
        let running = job.running();
        if running.is_empty() {
            rec.gone_ms = Some(ends_from.elapsed().as_secs_f64() * 1000.0);
            break;
        }
        if Instant::now() >= deadline {
            if stop_written {
                rec.hang = true;
                break;
            }
            // Still running and never told to stop: stuck, or running on without having
            // noticed the fault. The stop file tells them apart.
            write_stop(&dir)?;
            stop_written = true;
            stopped_late = true;
            deadline = Instant::now() + RAN_ON_GRACE;
            continue;
        }
        let wait = match stop_at {
            _ if by_rank && !applied => Duration::from_millis(2),
            Some(t) if !stop_written => t.saturating_duration_since(Instant::now()),
            _ => Duration::from_millis(50),
        };
        process::wait_any(
            running.iter().copied(),
            wait.min(deadline.saturating_duration_since(Instant::now())),
        );
    }
    applied |= dir.applied().exists();
    if rec.hang {
        rec.procs_left = job.kill_all();
    }
    let mut rec = finish(job, rec, &shm_before, t0_us, applied);
    if stopped_late && !rec.hang {
        rec.gone_ms = None;
        rec.ran_on = rec
            .reports
            .iter()
            .all(|r| r.as_ref().is_some_and(|r| matches!(r.ending, Ending::Ok)));
        rec.verdict.handled = false;
        rec.verdict.problems.insert(
            0,
            format!(
                "ran on: still running {} s after the fault, {}",
                settings.hang_after.as_secs_f64(),
                if rec.ran_on {
                    "then completed when the campaign stopped it (the fault went unnoticed)"
                } else {
                    "then ended when the campaign stopped it"
                }
            ),
        );
    }
    if rec.hang {
        rec.verdict.handled = false;
        rec.verdict.problems.insert(
            0,
            format!(
                "still running {} s after the fault",
                settings.hang_after.as_secs_f64()
            ),
        );
    }
    Ok((rec, probe))
}

/// The directory of job `index` of a campaign whose jobs go under `root`.
pub fn job_dir(root: &Path, index: u64) -> PathBuf {
    root.join(format!("job-{index:05}"))
}

fn write_stop(dir: &JobDir) -> Result<()> {
    write_atomic(&dir.stop(), "stop\n").with_context(|| format!("writing {}", dir.stop().display()))
}

/// Waits until every rank has written its ready file; returns each rank's (pid, probe handle).
fn wait_ready(
    job: &mut Job,
    ranks: u32,
    settings: &Settings,
) -> Result<Vec<(u32, String)>, String> {
    let limit = settings.hang_after;
    let until = Instant::now() + limit;
    let mut got: Vec<Option<(u32, String)>> = vec![None; ranks as usize];
    loop {
        for (r, slot) in got.iter_mut().enumerate() {
            if slot.is_some() {
                continue;
            }
            let rank = u32::try_from(r).unwrap_or(u32::MAX);
            if let Ok(text) = std::fs::read_to_string(job.dir.ready(rank)) {
                let mut it = text.split_whitespace();
                let pid = it.next().and_then(|p| p.parse::<u32>().ok());
                let hex = it.nth(1).unwrap_or("").to_string();
                let Some(pid) = pid else {
                    return Err(format!("rank {r}'s ready file is malformed: {text:?}"));
                };
                // Hold the process first, then check that it is still the launcher's child:
                // the other way round, the pid could be someone else's between the check and
                // the open.
                let proc = Proc::open(pid).map_err(|e| format!("watching rank {r}: {e}"))?;
                if process::parent_of(pid) != Some(job.launcher_fd.pid()) {
                    return Err(format!("rank {r} (pid {pid}) exited before the fault"));
                }
                job.ranks.push(proc);
                *slot = Some((pid, hex));
            }
        }
        if got.iter().all(Option::is_some) {
            // Ranks were pushed in the order they became ready: put them in rank order.
            let pids: Vec<u32> = got.iter().flatten().map(|(p, _)| *p).collect();
            job.ranks
                .sort_by_key(|p| pids.iter().position(|&q| q == p.pid()));
            return Ok(got.into_iter().flatten().collect());
        }
        if settings.interrupted.load(Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        if job.launcher_fd.gone() {
            return Err("the job ended before every rank was ready".into());
        }
        if Instant::now() >= until {
            return Err(format!(
                "not every rank was ready within {} s",
                limit.as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reaps the job, reads the reports and the leftovers, and judges.
fn finish(
    mut job: Job,
    mut rec: JobRecord,
    shm_before: &BTreeSet<String>,
    t0_us: u64,
    applied: bool,
) -> JobRecord {
    job.reap();
    let p = &rec.plan;
    rec.reports = (0..p.ranks)
        .map(|r| RankReport::read(&job.dir.result(r)))
        .collect();
    rec.shm_left = tca::transport::shm_entries()
        .difference(shm_before)
        .cloned()
        .collect();
    // A survivable fault that the victim says it could not inflict (a refused setrlimit)
    // was not injected.
    let victim_report = p
        .victim
        .and_then(|v| rec.reports.get(v as usize))
        .and_then(Option::as_ref);
    if rec.not_injected.is_none() && p.fault.info().by_rank && applied {
        if let Some(rep) = victim_report.filter(|r| !r.fault.inflicted) {
            rec.not_injected = Some(format!(
                "the victim could not inflict the fault: {}",
                rep.fault.notes.join("; ")
            ));
        }
    }
    if rec.not_injected.is_none() {
        rec.verdict = verdict::judge(p.fault, p.victim, &rec.reports, t0_us, applied);
    } else {
        // Not injected, but judged all the same for what matters whatever the fault: a
        // wrong result, and a rank that ended early with an error (a failure to show).
        rec.verdict.wrong = verdict::wrong_of(&rec.reports);
        for rep in rec.reports.iter().flatten() {
            if matches!(rep.ending, Ending::Error { .. }) {
                rec.verdict
                    .problems
                    .push(format!("ended early: {}", rep.line()));
            }
        }
    }
    rec
}
