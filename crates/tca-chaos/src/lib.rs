//! # tca-chaos — the fault campaign behind `tca chaos`
//!
//! tca promises that a peer that dies or hangs becomes an error on every rank within a
//! bounded time, naming it; that nothing is left in `/dev/shm` or running afterwards; and
//! that a bad handle is refused before a byte moves. Tests show each promise once, in one
//! chosen moment. A campaign checks them the way they fail in production: N jobs of random
//! size running a random mix of verified work (collectives, two-sided and active messages,
//! CG), each hit by one fault at a random moment, and figures per fault kind — hangs, faults
//! answered as promised, wrong results without an error, leftovers, and how long the job took
//! to know and to be gone. The goals are zeros; a campaign that misses one names the jobs
//! (and keeps their directories) so that the failure can be replayed from the seed.
//!
//! It is a library (not code in the CLI) because whoever runs tca on a new machine, kernel
//! or transport wants the same campaign from a test or CI job, and because its two halves
//! must be one program: the campaign starts its own binary again as the launcher and the
//! ranks of each job (`PROGRAM ... --job SPEC`, [`job::main`]).
//!
//! ## Vocabulary
//! - **campaign** ([`Campaign`]): N jobs from one seed. **job**: one launch of 2 to 8 ranks
//!   ([`plan::JobPlan`]), one **fault** ([`fault::Fault`]), one **victim** rank (or the
//!   launcher).
//! - **round**: a control Allreduce and one verified workload step ([`rank`]); a job runs
//!   rounds until the campaign writes its **stop** file, or until an error ends it.
//! - **fatal** faults take a process away (SIGKILL of a rank or of the launcher, SIGSTOP);
//!   **survivable** ones are inflicted by the victim on itself through the library's API (a
//!   huge allocation, a lowered descriptor limit, stale and forged handles).
//! - **handled**: the fault was answered as promised ([`verdict`]); **named**: a survivor's
//!   error names the culprit, itself or through a chain of failed ranks; **wrong**: a
//!   result that failed its check with no error to say so; **hang**: a job still running
//!   `--hang-after` seconds after its fault; **gone**: every process of the job has exited.
//!
//! ## Contents
//! - [`fault`]: the kinds, one table. [`plan`]: what each job is, from the seed.
//!   [`rng`]: the seeded generator every process shares.
//! - [`campaign`]: the loop. [`supervise`]: one job from outside (start, inject, watch,
//!   judge), with tca's own pidfd helpers (`tca::process`) and `/dev/shm` listing
//!   (`tca::transport::shm_entries`).
//! - [`job`]: which process of a job this is. [`launcher`](mod@launcher): tca's launcher in
//!   a process of its own. [`rank`]: the rank program, its workloads and the faults a rank
//!   inflicts on itself.
//! - [`spec`]: the job's description and directory. [`report`]: what each rank leaves.
//!   [`verdict`]: the judgement. [`summary`]: figures, goals, table, CSV, JSON.
//!
//! ## Example
//! ```no_run
//! // Inside a program whose `--job SPEC` arguments call `tca_chaos::job::main`:
//! let exe = std::env::current_exe()?.to_string_lossy().into_owned();
//! let mut c = tca_chaos::Campaign::new(20, 1, vec![exe]);
//! c.kinds = vec![tca_chaos::Fault::KillRank];
//! let summary = c.run(|_| {})?;
//! print!("{}", summary.table());
//! assert!(summary.goals_met());
//! # Ok::<(), anyhow::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod campaign;
pub mod fault;
pub mod job;
pub mod launcher;
pub mod plan;
pub mod rank;
pub mod report;
pub mod rng;
pub mod spec;
pub mod summary;
pub mod supervise;
pub mod verdict;

pub use campaign::Campaign;
pub use fault::Fault;
pub use summary::Summary;
