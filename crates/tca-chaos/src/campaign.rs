//! A campaign: N jobs, one after the other, each drawn from the seed ([`crate::plan`]), run
//! and watched ([`crate::supervise`]), and the figures ([`crate::summary`]).
//!
//! Jobs run one at a time: a fault's effects (how fast a dead rank is named, whether a job
//! ends) must be the job's own, not a neighbour's load, and oversubscription comes from the
//! job sizes already (up to 8 ranks on a 2-core machine). Each job's directory is removed once
//! it has met every goal; a job that missed one keeps its directory (description, output,
//! reports) for whoever investigates.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::fault::Fault;
use crate::plan;
use crate::summary::Summary;
use crate::supervise::{self, Interrupted, JobRecord, Settings};

/// A campaign's settings.
#[derive(Debug, Clone)]
pub struct Campaign {
    /// Faults to inject (one job each).
    pub faults: u64,
    /// The seed of every random choice.
    pub seed: u64,
    /// Ranks per job, MIN and MAX (see [`plan::parse_np`]).
    pub np: (u32, u32),
    /// The kinds to draw from.
    pub kinds: Vec<Fault>,
    /// Longest wait between every rank being ready and the fault, ms.
    pub max_delay_ms: u64,
    /// How the jobs are run.
    pub settings: Settings,
    /// Where the jobs' directories go (default: the system's temporary directory).
    pub workdir: Option<PathBuf>,
    /// Keep every job's directory, not only those of jobs that missed a goal.
    pub keep: bool,
    /// Run only job number `only` of the campaign (to replay one job of a seed).
    pub only: Option<u64>,
}

/// `TCA_TIMEOUT` of `stop-rank` jobs, seconds.
pub const STOP_TIMEOUT_S: f64 = 1.0;
/// Default seconds after a fault until a job still running is a hang.
pub const HANG_AFTER_S: f64 = 30.0;
/// Most faults one campaign may ask for.
pub const MAX_FAULTS: u64 = 1_000_000;
/// Most seconds `--hang-after` may be.
pub const MAX_HANG_AFTER_S: f64 = 3600.0;
/// Default longest delay between ready and fault, ms.
pub const MAX_DELAY_MS: u64 = 500;

/// A seed from the clock, for a campaign given none (it is printed, so it can be replayed).
pub fn clock_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    crate::rng::mix(&[
        t.as_secs(),
        u64::from(t.subsec_nanos()),
        u64::from(std::process::id()),
    ]) % 1_000_000_000
}

impl Campaign {
    /// A campaign with the defaults: `faults` jobs, every kind, 2 to 8 ranks, a hang after
    /// 30 s; `command` starts this program as a process of a job (`--job SPEC` appended).
    pub fn new(faults: u64, seed: u64, command: Vec<String>) -> Self {
        Self {
            faults,
            seed,
            np: (2, 8),
            kinds: Fault::all(),
            max_delay_ms: MAX_DELAY_MS,
            settings: Settings {
                command,
                hang_after: Duration::from_secs_f64(HANG_AFTER_S),
                stop_timeout: STOP_TIMEOUT_S,
                interrupted: Arc::new(AtomicBool::new(false)),
            },
            workdir: None,
            keep: false,
            only: None,
        }
    }

    fn check(&self) -> Result<()> {
        if self.faults == 0 {
            bail!("--faults must be at least 1");
        }
        if self.faults > MAX_FAULTS {
            bail!(
                "--faults {}: at most {MAX_FAULTS} faults in one campaign",
                self.faults
            );
        }
        if let Some(i) = self.only {
            if i >= self.faults {
                bail!(
                    "--replay {i}: the campaign has jobs 0 to {} (--faults {})",
                    self.faults - 1,
                    self.faults
                );
            }
        }
        plan::parse_np(
            &format!("{}:{}", self.np.0, self.np.1),
            tca::env::max_ranks(),
        )
        .map_err(anyhow::Error::msg)?;
        if self.kinds.is_empty() {
            bail!("no fault kind to draw from");
        }
        if self.settings.hang_after.is_zero()
            || self.settings.hang_after.as_secs_f64() > MAX_HANG_AFTER_S
        {
            bail!("--hang-after: give a number of seconds above 0 and at most {MAX_HANG_AFTER_S}");
        }
        if self.settings.hang_after.as_secs_f64() <= self.settings.stop_timeout + 1.0
            && self.kinds.contains(&Fault::StopRank)
        {
            bail!(
                "--hang-after {} s is too short for stop-rank, whose jobs end through a {} s \
                 timeout: give more than {} s",
                self.settings.hang_after.as_secs_f64(),
                self.settings.stop_timeout,
                self.settings.stop_timeout + 1.0
            );
        }
        if self.settings.command.is_empty() {
            bail!("no program to start the jobs with");
        }
        if tca_mpi::role() != tca_mpi::Role::Parent {
            bail!("tca chaos starts its own jobs: run it directly, not under a launcher");
        }
        Ok(())
    }

    /// Runs the campaign; `on_job` sees each job's record as it ends (for progress).
    ///
    /// SIGINT and SIGTERM handlers are installed for the run only (removed when it returns,
    /// however it returns).
    ///
    /// SIGINT (and SIGTERM) stop it: the current job is killed, the campaign's directory
    /// removed, and the figures of the jobs that ended are returned, marked
    /// [`Summary::interrupted`].
    pub fn run(&self, mut on_job: impl FnMut(&JobRecord)) -> Result<Summary> {
        self.check()?;
        tca::process::become_subreaper().context("becoming the jobs' subreaper")?;
        let flag = &self.settings.interrupted;
        flag.store(false, Ordering::Relaxed);
        let mut handlers = Handlers(Vec::new());
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            handlers.0.push(
                signal_hook::flag::register(sig, Arc::clone(flag))
                    .context("installing the SIGINT handler")?,
            );
        }
        let root = self
            .workdir
            .clone()
            .unwrap_or_else(std::env::temp_dir)
            .join(format!("tca-chaos-{}-{}", std::process::id(), self.seed));
        std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        let start = Instant::now();
        let mut jobs = Vec::with_capacity(usize::try_from(self.faults).unwrap_or(0));
        let mut stale: Option<String> = None;
        let indices = match self.only {
            Some(i) => i..i + 1,
            None => 0..self.faults,
        };
        let mut interrupted = false;
        // The job a signal cut short (its processes killed by then).
        let mut cut = None;
        for i in indices {
            if flag.load(Ordering::Relaxed) {
                interrupted = true;
                break;
            }
            let p = plan::draw(self.seed, i, self.np, &self.kinds, self.max_delay_ms);
            let (rec, probe) = match supervise::run(&p, &self.settings, &root, stale.clone()) {
                Ok(r) => r,
                Err(e) if e.is::<Interrupted>() => {
                    interrupted = true;
                    cut = Some(i);
                    break;
                }
                Err(e) => return Err(e),
            };
            if probe.is_some() {
                stale = probe;
            }
            if rec.passed() && !self.keep {
                let _ = std::fs::remove_dir_all(&rec.dir);
            }
            on_job(&rec);
            jobs.push(rec);
        }
        if let Some(i) = cut {
            // The job cut short is of no use to anyone.
            let _ = std::fs::remove_dir_all(supervise::job_dir(&root, i));
        }
        // Empty unless a job kept its directory.
        let _ = std::fs::remove_dir(&root);
        let mut summary = Summary::new(
            self.seed,
            self.np,
            &self.kinds,
            self.settings.hang_after.as_secs_f64(),
            start.elapsed().as_secs_f64(),
            &jobs,
        );
        summary.interrupted = interrupted;
        if interrupted && self.only.is_none() {
            summary.faults = self.faults;
        }
        Ok(summary)
    }
}

/// Signal handlers installed for one run, removed when it ends.
struct Handlers(Vec<signal_hook::SigId>);

impl Drop for Handlers {
    fn drop(&mut self) {
        for id in self.0.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}
