//! The rank program of a chaos job: rounds of verified work until told to stop, and one
//! report at the end, whatever ends it.
//!
//! # Rounds
//! Every round starts with a *control* Allreduce (rank 0 adds 1 if the campaign has written
//! the stop file; every rank adds 1 to a second word that must come back as the job size),
//! then does one step of a workload drawn from the job's mix with the job's seed, so every
//! rank draws the same step without a message about it. The control Allreduce involves every
//! rank, so a rank that dies, stops or leaves is missed by every other within one round:
//! that is what lets a job run until the fault, for as long as the campaign needs, and
//! still never pass a dead rank by.
//!
//! Every step verifies everything it computes against values each rank can compute on its
//! own (collectives against sequential references, messages and active-message payloads
//! against patterns keyed by round, sender and receiver, CG against the known solution of a
//! manufactured problem): a wrong result that no error announces is reported as `Wrong`,
//! the failure this campaign exists to find. Data depend on the round, so stale data from an
//! earlier round is wrong too.
//!
//! # Faults from inside
//! The victim of a survivable fault inflicts it on itself between two rounds when the
//! campaign sends it SIGUSR1 (module `inflict`, one file per fault), having first written the `applied` file (after a
//! lowered descriptor limit it could not). Its report then carries what it tried and what the
//! library answered.
//!
//! # Signals
//! SIGTERM is caught (a flag): the launcher sends it to every rank when one fails, and a rank
//! that died of it could not say what the library told it. A rank that ignores the flag is
//! still stopped by the launcher's SIGKILL half a second later
//! ([`tca::bootstrap::launcher::GRACE`]), and so is a rank that never reaches a wait.
//!
//! # Files
//! The report file is opened before the first round, because after `fd-limit` no descriptor
//! may be left to open it with; it is renamed into place at the end (see [`crate::spec`]).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tca::{Comm, Op};

use crate::fault::Fault;
use crate::plan::Workload;
use crate::report::{Ending, FaultAnswer, Named, RankReport};
use crate::rng::Rng;
use crate::spec::{JobSpec, unix_ms, unix_us, write_atomic};

mod am;
mod cg;
mod coll;
mod inflict;
mod p2p;

/// Exit status of a rank whose run ended with a library error.
pub const EXIT_ERROR: u8 = 3;
/// Exit status of a rank that found a wrong result.
pub const EXIT_WRONG: u8 = 4;

/// Why a step did not complete.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The library said no.
    Tca(tca::Error),
    /// A result was wrong and nothing said so.
    Wrong(String),
    /// Something else failed (the solver's own verdict, a file).
    Other(String),
}

impl From<tca::Error> for Fail {
    fn from(e: tca::Error) -> Self {
        Fail::Tca(e)
    }
}

/// What a step returns.
pub(crate) type Step = Result<(), Fail>;

/// A failed check, as a [`Fail::Wrong`] unless `ok`.
pub(crate) fn check(ok: bool, what: impl FnOnce() -> String) -> Step {
    if ok { Ok(()) } else { Err(Fail::Wrong(what())) }
}

/// What the victim of a survivable fault tried and what the library answered.
pub(crate) type Answer = FaultAnswer;

/// The signals a rank watches.
struct Signals {
    term: Arc<AtomicBool>,
    usr1: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        let term = Arc::new(AtomicBool::new(false));
        let usr1 = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGTERM, term.clone())?;
        signal_hook::flag::register(signal_hook::consts::SIGUSR1, usr1.clone())?;
        Ok(Self { term, usr1 })
    }
}

/// Runs this process as rank of the job `spec` (it was started by the launcher); returns its
/// exit status.
pub fn main(spec: &JobSpec) -> u8 {
    let rank = std::env::var(tca::env::RANK)
        .ok()
        .and_then(|r| r.parse::<u32>().ok())
        .unwrap_or(u32::MAX);
    let dir = spec.dir();
    let final_path = dir.result(rank);
    let part = final_path.with_extension("part");
    let mut file = match std::fs::File::create(&part) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("chaos rank {rank}: cannot create {}: {e}", part.display());
            return EXIT_ERROR;
        }
    };
    let mut report = RankReport {
        rank,
        pid: std::process::id(),
        ending: Ending::Ok,
        rounds: 0,
        at_unix_us: 0,
        sigterm: false,
        fault: FaultAnswer::default(),
    };
    let mut answer = Answer::default();
    let signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("chaos rank {rank}: installing signal handlers: {e}");
            return EXIT_ERROR;
        }
    };
    let mut failed_at = None;
    let result = run(
        spec,
        &signals,
        &mut report.rounds,
        &mut answer,
        &mut failed_at,
    );
    // When the error first came back, not after the world's teardown.
    report.at_unix_us = failed_at.unwrap_or_else(unix_us);
    report.sigterm = signals.term.load(Ordering::Relaxed);
    report.ending = match result {
        Ok(()) => Ending::Ok,
        Err(Fail::Tca(e)) => Ending::Error {
            kind: format!("{:?}", e.kind()),
            named: Named::of(&e),
            message: e.to_string(),
        },
        Err(Fail::Other(m)) => Ending::Error {
            kind: "Other".into(),
            named: Named::Nobody,
            message: m,
        },
        Err(Fail::Wrong(what)) => Ending::Wrong { what },
    };
    report.fault = answer;
    let status = match &report.ending {
        Ending::Ok => 0,
        Ending::Error { .. } => EXIT_ERROR,
        Ending::Wrong { .. } => EXIT_WRONG,
    };
    if status != 0 {
        eprintln!("chaos rank {rank}: {}", report.line());
    }
    let text = serde_json::to_string(&report).unwrap_or_default();
    if file.write_all(text.as_bytes()).is_err() || std::fs::rename(&part, &final_path).is_err() {
        eprintln!("chaos rank {rank}: cannot write {}", final_path.display());
    }
    status
}

/// The job as this rank runs it: join, set up, announce, rounds, check, leave. `failed_at` is
/// set (microseconds since the epoch) when a round fails, before anything is dropped.
fn run(
    spec: &JobSpec,
    sig: &Signals,
    rounds: &mut u64,
    answer: &mut Answer,
    failed_at: &mut Option<u64>,
) -> Step {
    let world = tca::init()?;
    let mut comm = Comm::world(&world)?;
    let me = world.rank();
    let am = if spec.plan.mix.contains(&Workload::Am) {
        Some(am::Am::new(&comm)?)
    } else {
        None
    };
    // A segment nobody may write: the target of the forged handles of `stale-handle`, and
    // what a later job's stale handle is taken from.
    let probe = world.alloc_symmetric(PROBE_BYTES)?;
    let hex = hex::encode(probe.local().handle().to_bytes());
    let dir = spec.dir();
    let ready = format!("{} {:016x} {hex}\n", std::process::id(), world.job_id());
    write_atomic(&dir.ready(me), &ready)
        .map_err(|e| Fail::Other(format!("writing {}: {e}", dir.ready(me).display())))?;

    let looped = rounds_until_stop(
        spec,
        sig,
        &world,
        &mut comm,
        am.as_ref(),
        &probe,
        rounds,
        answer,
    );
    if looped.is_err() {
        *failed_at = Some(unix_us());
    }
    looped?;
    // Nobody wrote into the probe segment (a forged handle would have).
    let mut back = vec![0u8; PROBE_BYTES];
    probe.local().read(0, &mut back)?;
    check(back.iter().all(|&b| b == 0), || {
        "the probe segment, which no rank writes, holds data: a refused handle wrote".into()
    })?;
    // Active-message handlers run only inside calls: leave together.
    comm.barrier()?;
    drop(probe);
    drop(am);
    drop(comm);
    world.finalize()?;
    Ok(())
}

/// The rounds, until the campaign's stop (see the module doc).
#[allow(clippy::too_many_arguments)]
fn rounds_until_stop(
    spec: &JobSpec,
    sig: &Signals,
    world: &tca::World,
    comm: &mut Comm,
    am: Option<&am::Am>,
    probe: &tca::SymmetricSegment,
    rounds: &mut u64,
    answer: &mut Answer,
) -> Step {
    let me = world.rank();
    let dir = spec.dir();
    let mut flip = false;
    let mut rng = Rng::new(spec.plan.seed);
    let p = u64::from(world.size());
    let stop = dir.stop();
    loop {
        if unix_ms() > spec.deadline_unix_ms {
            return Err(Fail::Other(
                "the job's deadline passed with no stop from the campaign".into(),
            ));
        }
        let stop_now = me == 0 && stop.exists();
        let mut ctl = [u64::from(stop_now), 1];
        comm.allreduce_in_place(&mut ctl, &Op::Sum)?;
        if flip {
            // selftest-wrong: a bit of a received byte flipped, as a corruption would.
            ctl[1] ^= 1;
        }
        check(ctl[0] <= 1 && ctl[1] == p, || {
            format!("control Allreduce gave {ctl:?} in round {rounds}, expected [0 or 1, {p}]")
        })?;
        if ctl[0] == 1 {
            break;
        }
        if spec.plan.victim == Some(me) && sig.usr1.swap(false, Ordering::Relaxed) {
            let _ = write_atomic(&dir.applied(), &format!("{}\n", unix_us()));
            inflict::inflict(spec, world, probe, answer)?;
            flip = spec.plan.fault == Fault::SelftestWrong;
        }
        let round = *rounds;
        let w = *rng.pick(&spec.plan.mix).unwrap_or(&Workload::Coll);
        match w {
            Workload::Coll => coll::step(comm, round, &mut rng)?,
            Workload::P2p => p2p::step(comm, round, &mut rng)?,
            Workload::Am => match am {
                Some(am) => am.step(comm, round, &mut rng)?,
                None => coll::step(comm, round, &mut rng)?,
            },
            Workload::Cg => cg::step(comm, round, &mut rng)?,
        }
        *rounds += 1;
    }
    Ok(())
}

/// Size of the probe segment.
const PROBE_BYTES: usize = 4096;

/// Runs `rounds` rounds of a workload on thread ranks of 2 and 3 (the workloads' tests):
/// `setup` once per rank, then `step` per round, which must verify.
#[cfg(test)]
pub(crate) fn on_thread_ranks<S>(
    seed: u64,
    rounds: u64,
    setup: impl Fn(&Comm) -> S + Sync,
    step: impl Fn(&S, &mut Comm, u64, &mut Rng) -> Step + Sync,
) {
    for p in [2u32, 3] {
        tca::threads::run(p, |w| {
            let mut c = Comm::world(w)?;
            let s = setup(&c);
            let mut r = Rng::new(seed);
            for round in 0..rounds {
                if let Err(e) = step(&s, &mut c, round, &mut r) {
                    panic!("{p} ranks, round {round}: {e:?}");
                }
            }
            Ok(())
        })
        .unwrap();
    }
}
