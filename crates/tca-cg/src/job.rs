//! Processes: `tca cg` is one command that starts its own ranks.
//!
//! Which process this is comes from [`tca_mpi::role`]. The process a user starts (the
//! *parent*, not a rank) re-runs itself with the same
//! arguments as `np` tca ranks under tca's launcher ([`tca_mpi::launch_tca`]) and, with
//! `--compare mpi`, once more as `np` MPI ranks under `mpirun` ([`tca_mpi::launch`]); the two
//! halves never run at the same time. Rank 0 of each half sends its [`RankResult`] back as
//! JSON and the parent prints.
//!
//! Errors that all ranks reach together ([`CgError::is_collective`]: bad input, breakdown)
//! end the job in order: every rank exits 0 and rank 0 sends `Failed` with the message, so
//! the user sees one clear line, not a launcher's report of a crashed rank. Anything else (a
//! dead peer) is a failure of the job. A rank started some other way (`tca run -n 2 -- tca cg
//! ...`, nobody listening for a result) returns the report, or rank 0's error, to print.

use anyhow::{Result, bail};

use crate::error::CgError;
use crate::report::{Output, Report};
use crate::run::{Options, run_rank};

/// What rank 0 sends to the parent.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum RankResult {
    /// The solve ran.
    Solved {
        /// Its report.
        report: Box<Report>,
    },
    /// Every rank stopped on this error (bad input, breakdown).
    Failed {
        /// The message.
        error: String,
    },
}

impl RankResult {
    fn into_report(self) -> Result<Report> {
        match self {
            RankResult::Solved { report } => Ok(*report),
            RankResult::Failed { error } => Err(anyhow::anyhow!(error)),
        }
    }
}

/// Ends a rank's run: hands the result to the parent if one listens, else returns the
/// report (rank 0) or the error for the caller to print.
fn finish(r: Result<Option<Report>, CgError>) -> Result<Option<Report>> {
    match r {
        Ok(Some(report)) => {
            let res = RankResult::Solved {
                report: Box::new(report.clone()),
            };
            if tca_mpi::write_result(&res)? {
                Ok(None)
            } else {
                Ok(Some(report))
            }
        }
        Ok(None) | Err(CgError::RootFailed) => Ok(None),
        Err(e) if e.is_collective() => {
            let res = RankResult::Failed {
                error: e.to_string(),
            };
            // Every rank has this error; rank 0 (the one holding the real message) tells.
            if tca_mpi::write_result(&res)? {
                Ok(None)
            } else {
                Err(e.into())
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// A rank of the tca half: joins the job, runs, reports. `Some(report)` when nobody listens
/// for the result (print it).
pub fn tca_rank(opts: &Options, np: u32) -> Result<Option<Report>> {
    let world = tca_mpi::join(np)?;
    let r = {
        let mut comm = tca::Comm::world(&world)?;
        let r = run_rank(&mut comm, opts);
        // Non-root ranks with a collective error return quietly: rank 0 reports it.
        if world.rank() != 0 && matches!(&r, Err(e) if e.is_collective()) {
            Ok(None)
        } else {
            r
        }
    };
    let failed_comm = matches!(&r, Err(e) if !e.is_collective());
    let out = finish(r);
    if !failed_comm {
        world.finalize()?;
    }
    out
}

/// The whole job on `np` simulated ranks (threads of this process on the network of `sim`,
/// in virtual time): rank 0's report. Local computation (SpMV, dot products, AXPYs) costs
/// virtual time only under `Compute::Measured`; with the model's rates only the reductions
/// inside the collectives do.
pub fn simulate(opts: &Options, np: u32, sim: &tca::sim::Options) -> Result<Report> {
    if np == 0 {
        bail!("--np must be at least 1");
    }
    let mut opts = opts.clone();
    opts.progress = false;
    let run = tca::sim::run(sim, np, |w| {
        let mut comm = tca::Comm::world(w)?;
        run_rank(&mut comm, &opts).map_err(|e| tca::Error::program(e.to_string()))
    })?;
    run.results
        .into_iter()
        .next()
        .flatten()
        .ok_or_else(|| anyhow::anyhow!("rank 0 of the simulated job returned no report"))
}

/// A rank of the MPI half (needs the `mpi` feature).
pub fn mpi_rank(opts: &Options) -> Result<Option<Report>> {
    #[cfg(feature = "mpi")]
    {
        let r = crate::mpi::run(opts);
        let root = crate::mpi::is_root();
        if !root && matches!(&r, Err(e) if e.is_collective()) {
            return Ok(None);
        }
        finish(r)
    }
    #[cfg(not(feature = "mpi"))]
    {
        let _ = opts;
        Err(tca_mpi::not_enabled())
    }
}

/// The parent: runs the tca half on `np` ranks and, with `compare`, the MPI half, `rounds`
/// times in turn ([`tca_mpi::rounds::alternate`]); returns each half's median round by time
/// per iteration for printing. The tca report gets a note: with several rounds every round's
/// time per iteration (and ratio), and with MPI or several rounds the floor before each half.
/// A failure of either half is the error.
pub fn launch(np: u32, compare: Option<tca_mpi::MpiRun>, rounds: u32) -> Result<Output> {
    if np == 0 {
        bail!("--np must be at least 1");
    }
    if compare.is_some() && !tca_mpi::ENABLED {
        return Err(tca_mpi::not_enabled());
    }
    let floors = compare.is_some() || rounds > 1;
    let mut ours = || -> Result<(String, Report)> {
        Ok((
            "tca".into(),
            tca_mpi::launch_tca::<RankResult>(np)?.into_report()?,
        ))
    };
    let mut theirs = || -> Result<(String, Report)> {
        let Some(run) = &compare else {
            bail!("no MPI half was asked for")
        };
        let (flavour, r) = tca_mpi::launch::<RankResult>(run)?;
        Ok((flavour.label(), r.into_report()?))
    };
    let measured = if compare.is_some() {
        tca_mpi::rounds::alternate(rounds, floors, &mut [&mut ours, &mut theirs])?
    } else {
        tca_mpi::rounds::alternate(rounds, floors, &mut [&mut ours])?
    };
    let names: Vec<String> = measured.halves.iter().map(|h| h[0].0.clone()).collect();
    let per_iter: Vec<Vec<f64>> = measured
        .halves
        .iter()
        .map(|h| h.iter().map(|(_, r)| r.per_iteration_s).collect())
        .collect();
    let mut medians = measured
        .halves
        .into_iter()
        .zip(&per_iter)
        .map(|(mut h, t)| {
            let i = tca_mpi::rounds::median_index(t).unwrap_or(0);
            h.swap_remove(i)
        });
    let (_, mut tca) = medians.next().expect("the tca half ran");
    let mpi = medians.next();
    if floors {
        tca.notes
            .push(rounds_note(rounds, &names, &per_iter, &measured.floors));
    }
    Ok(Output::new(tca, mpi))
}

/// The note of a comparison's rounds: each round's time per iteration (and tca's ratio to
/// the other half), then the floors ([`tca_mpi::rounds::note`]).
fn rounds_note(
    rounds: u32,
    names: &[String],
    per_iter: &[Vec<f64>],
    floors: &[Option<f64>],
) -> String {
    let us = |t: &[f64]| -> String {
        let v: Vec<String> = t.iter().map(|s| format!("{:.2}", s * 1e6)).collect();
        v.join(", ")
    };
    let mut s = String::new();
    if rounds > 1 {
        let times: Vec<String> = names
            .iter()
            .zip(per_iter)
            .map(|(n, t)| format!("{n} {}", us(t)))
            .collect();
        s += &format!("time per iteration by round, us: {}", times.join("; "));
        if let [a, b] = per_iter
            && let Some((lo, hi)) = tca_mpi::rounds::ratio_range(a, b)
        {
            s += &format!(" (ratio {lo:.2}-{hi:.2})");
        }
        s += "; ";
    }
    s + &tca_mpi::rounds::note(rounds.max(1), names, floors)
}
