//! tca's benchmarks: the machine's physical floor, and an IMB-compatible suite measured over
//! tca and, in the same invocation, over a real MPI.
//!
//! `tca bench` is one command: the process a user starts is the *parent*. It starts the tca
//! ranks itself (tca's launcher re-runs this program), then, for `--compare mpi`, the MPI
//! ranks (that MPI's `mpirun` re-runs this program); each half's rank 0 sends its rows back
//! as JSON ([`tca_mpi`]), and the parent prints the tables, the comparison and the fits, and
//! draws the plot. The halves never run at the same time. [`calibrate`] fits tca's
//! collective cost models to the suite's measurements (`tca model calibrate`).
#![forbid(unsafe_code)]

pub mod calibrate;
pub mod floor;
pub mod machine;
pub mod plot;
pub mod progress;
pub mod report;
pub mod reproduce;
pub mod suite;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use tca::bootstrap::launcher::Launch;
use tca::offload::Progress;
use tca_mpi::{Role, join};

pub use report::Format;

/// Runs `body` as a rank when this process is one; otherwise launches `np` copies of this
/// program (with the same arguments) and returns their exit status.
pub fn launch_or_run(
    np: u32,
    body: impl FnOnce(&tca::World) -> anyhow::Result<()>,
) -> anyhow::Result<i32> {
    match tca_mpi::role() {
        Role::TcaRank => {
            let world = join(np)?;
            body(&world)?;
            world.finalize()?;
            Ok(0)
        }
        Role::Parent => {
            let outcome = Launch::this_program(np)?.run()?;
            Ok(outcome.status())
        }
        Role::MpiRank => bail!("this measurement runs on tca only, not under mpirun"),
    }
}

/// A result that prints itself as a table or JSON.
pub trait Report: serde::Serialize {
    /// The human-readable table.
    fn table(&self) -> String;
}

/// Runs `bench` on `np` ranks (launching them if needed) and prints rank 0's report as a
/// table or JSON.
pub fn run_and_print<R: Report>(
    np: u32,
    json: bool,
    bench: impl FnOnce(&tca::World) -> anyhow::Result<Option<R>>,
) -> anyhow::Result<i32> {
    launch_or_run(np, |world| {
        if let Some(r) = bench(world)? {
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", r.table());
            }
        }
        Ok(())
    })
}

/// One `tca bench` invocation of the suite.
#[derive(Debug, Clone)]
pub struct Request {
    /// Ranks.
    pub np: u32,
    /// What to measure.
    pub suite: suite::Options,
    /// How to print.
    pub format: Format,
    /// Write the output here instead of stdout.
    pub out: Option<PathBuf>,
    /// Draw latency and throughput here (.png or .svg).
    pub plot: Option<PathBuf>,
    /// Fit range in bytes (None: above tca's last algorithm switch).
    pub fit: Option<(u64, u64)>,
    /// Also run the suite through MPI.
    pub compare_mpi: bool,
    /// Run the whole suite this many times (alternating with MPI's with `compare_mpi`) and
    /// report each cell's median round (`--rounds`).
    pub rounds: u32,
    /// The MPI's `mpirun` (None: `$TCA_MPIRUN` or `mpirun`).
    pub mpirun: Option<PathBuf>,
    /// Print the cost models' prediction beside each measured tca collective row.
    pub model: bool,
    /// Run on this simulated network instead of this machine (`--network`).
    pub network: Option<tca::sim::Options>,
}

/// Timed calls per size on a simulated network under `--iters auto`: virtual times do not
/// vary from call to call as a host's do, so a few calls after one warm-up give the figure.
pub const SIM_REPS: u64 = 5;

/// Runs the suite `opts` on `np` simulated ranks (threads of this process, in virtual time on
/// the network `sim`); returns rank 0's half, with notes on the model and the simulator's own
/// cost.
pub fn simulate(np: u32, opts: &suite::Options, sim: &tca::sim::Options) -> Result<suite::Half> {
    let mut opts = opts.clone();
    if opts.iters == suite::Iters::Auto {
        opts.iters = suite::Iters::Fixed(SIM_REPS);
        opts.warmup = Some(opts.warmup.unwrap_or(1));
    }
    let run = tca::sim::run(sim, np, |w| {
        suite::tca::run(w, &opts).map_err(|e| match e.downcast::<tca::Error>() {
            Ok(t) => t,
            Err(e) => tca::Error::program(format!("{e:#}")),
        })
    })
    .context("simulated run")?;
    let (events, host_s) = (run.stats.events, run.host_s);
    let mut half = run
        .results
        .into_iter()
        .next()
        .flatten()
        .context("rank 0 returned no results")?;
    let net = &sim.network;
    half.notes.insert(
        0,
        format!(
            "SIMULATED: {} ({}; {}), {} ranks, virtual time; {} payload; computation {}",
            net.name,
            net.shape(),
            net.summary,
            np,
            if sim.payload {
                "with"
            } else {
                "timing only, no"
            },
            match sim.compute {
                tca::sim::Compute::Model => "charged from the model".to_string(),
                tca::sim::Compute::Measured { scale } =>
                    format!("measured on this host x {scale} (not deterministic)"),
            }
        ),
    );
    half.notes.push(format!(
        "simulator: {events} events in {host_s:.2} s of host time ({:.0} events/s)",
        events as f64 / host_s.max(1e-9)
    ));
    Ok(half)
}

/// Runs the suite as whichever process this is (parent, tca rank, MPI rank); returns the exit
/// status for the parent.
pub fn bench(req: &Request) -> Result<i32> {
    let mpi = req.compare_mpi.then(|| tca_mpi::MpiRun {
        np: req.np,
        mpirun: req.mpirun.clone(),
    });
    let output = |halves: &[suite::Half]| {
        let mut out = report::Output::new(machine_line(), halves, req.fit);
        if req.model {
            // The models this process loaded: the same file the ranks selected with, with its
            // network models if the job crossed a network (as its communicators chose).
            let active = tca::coll::model::active();
            let network = halves
                .iter()
                .any(|h| h.implementation == "tca" && calibrate::crosses_network(&h.transport));
            out.predict(&active.calibration, network, active.describe());
        }
        out
    };
    if let Some(sim) = &req.network {
        if tca_mpi::role() != Role::Parent {
            bail!("--network runs the ranks as threads of `tca bench` itself: start it directly");
        }
        let half = simulate(req.np, &req.suite, sim)?;
        let line = format!(
            "simulated network {} ({}) on {}",
            sim.network.name,
            sim.network.shape(),
            machine_line()
        );
        let mut out = report::Output::new(line, &[half], req.fit);
        if req.model {
            // What Auto chose with there: the network's own model.
            let cal = tca::coll::model::Calibration::single(sim.network.cost_model(), true);
            let what = format!("the cost model of the network {}", sim.network.name);
            out.predict(&cal, true, what);
        }
        emit(req, &out)?;
        return Ok(0);
    }
    match measure(req.np, &req.suite, mpi.as_ref(), req.rounds)? {
        Measured::Parent(halves) => emit(req, &output(&halves))?,
        Measured::Rank(Some(half)) => {
            // Started some other way (`tca run`, Slurm): rank 0 prints its own half.
            emit(req, &output(&[half]))?;
        }
        Measured::Rank(None) => {}
    }
    Ok(0)
}

/// What [`measure`] did in this process (which process it is: [`tca_mpi::role`]).
#[derive(Debug)]
pub enum Measured {
    /// The command a user typed: the halves measured (tca first, then MPI if asked).
    Parent(Vec<suite::Half>),
    /// A rank of one half. `Some` on rank 0 of a job nobody waits for (started by `tca run`
    /// or Slurm rather than by a parent), which should print its half itself.
    Rank(Option<suite::Half>),
}

/// Measures the suite `opts` on `np` ranks, whichever process this is: the parent starts the
/// tca ranks (and then the MPI ranks, with `mpi`) and collects their halves; a rank measures
/// and sends its half back. The parent does so `rounds` times, alternating the halves, and
/// keeps each cell's median round ([`suite::Half::median_of`]); with MPI or several rounds it
/// measures the cache-line floor before each half and after the last
/// ([`tca_mpi::rounds::alternate`]), and notes them (this machine's virtual CPUs move: a half
/// run while they were apart is slower for it, and shows by its floor). A command can offer a
/// measurement this way as long as the ranks it starts parse the same arguments (`tca model
/// calibrate`, which measures many forced runs per rank, has its own rank loop in
/// [`calibrate`]).
pub fn measure(
    np: u32,
    opts: &suite::Options,
    mpi: Option<&tca_mpi::MpiRun>,
    rounds: u32,
) -> Result<Measured> {
    match tca_mpi::role() {
        Role::MpiRank => {
            #[cfg(feature = "mpi")]
            {
                suite::mpi::run(opts)?;
                return Ok(Measured::Rank(None));
            }
            #[cfg(not(feature = "mpi"))]
            return Err(tca_mpi::not_enabled());
        }
        // Started by `tca run` or a batch system, not by this command's parent (which names
        // a result file for its ranks): nobody alternates the rounds.
        Role::TcaRank if rounds > 1 && std::env::var_os(tca_mpi::TCA_RESULT_ENV).is_none() => {
            bail!(
                "--rounds alternates whole jobs that `tca bench` starts itself; started by \
                 `tca run` or a batch system, run the command once per round"
            );
        }
        Role::TcaRank => {
            let mut mine = None;
            let half = match opts.progress {
                // No world here: the node proxy holds it.
                Progress::Proxy => suite::proxied::run_node(np, opts)?,
                // The proxy owns the world and leaves the job when the suite is done.
                Progress::Thread => suite::proxied::run(join(np)?, opts)?,
                Progress::Caller => {
                    let world = join(np)?;
                    let h = suite::tca::run(&world, opts)?;
                    world.finalize()?;
                    h
                }
            };
            if let Some(half) = half
                && !tca_mpi::write_result(&half)?
            {
                mine = Some(half);
            }
            return Ok(Measured::Rank(mine));
        }
        Role::Parent => {}
    }
    if let Some(run) = mpi {
        if !tca_mpi::ENABLED {
            return Err(tca_mpi::not_enabled());
        }
        // Fail before the long tca half if the MPI is missing.
        run.flavour()?;
    }
    let offload = opts.progress == Progress::Proxy;
    let floors = mpi.is_some() || rounds > 1;
    let mut ours = || tca_mpi::launch_tca_with::<suite::Half>(np, offload);
    let mut theirs = || match mpi {
        Some(run) => Ok(tca_mpi::launch::<suite::Half>(run)?.1),
        None => bail!("no MPI half was asked for"),
    };
    let measured = match mpi {
        Some(_) => tca_mpi::rounds::alternate(rounds, floors, &mut [&mut ours, &mut theirs])?,
        None => tca_mpi::rounds::alternate(rounds, floors, &mut [&mut ours])?,
    };
    let mut halves = measured
        .halves
        .into_iter()
        .map(suite::Half::median_of)
        .collect::<Result<Vec<_>>>()?;
    if floors {
        let names: Vec<String> = halves.iter().map(|h| h.implementation.clone()).collect();
        let note = tca_mpi::rounds::note(rounds.max(1), &names, &measured.floors);
        halves[0].notes.push(note);
    }
    Ok(Measured::Parent(halves))
}

fn machine_line() -> String {
    machine::Machine::here().line()
}

/// Prints (or writes) the output and draws the plot.
fn emit(req: &Request, out: &report::Output) -> Result<()> {
    let text = out.render(req.format);
    match &req.out {
        Some(p) => {
            std::fs::write(p, &text).with_context(|| format!("cannot write {}", p.display()))?;
            eprintln!("tca bench: wrote {}", p.display());
        }
        None => print!("{text}"),
    }
    if let Some(p) = &req.plot {
        let ranks = out.run.rows.first().map_or(0, |r| r.ranks);
        let title = format!("tca bench, {ranks} ranks, {}", out.run.date);
        plot::draw(p, &title, &out.run.rows, &out.fits)?;
        eprintln!("tca bench: plotted {}", p.display());
    }
    Ok(())
}
