//! Bootstrap: how a rank learns its rank, the job size, and where to meet its peers.
//!
//! Sources, in order of precedence:
//! 1. `tca run` (the launcher in [`launcher`]): `TCA_RANK`, `TCA_SIZE`, `TCA_JOB_ID`, and the
//!    board as descriptor `TCA_BOARD_FD` of process `TCA_LAUNCHER_PID` (opened through `/proc`).
//! 2. Slurm (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_JOB_ID`, `SLURM_STEP_ID`).
//! 3. Open MPI's `mpirun` (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`).
//! 4. MPICH / Hydra and other PMI launchers (`PMI_RANK`, `PMI_SIZE`).
//! 5. Otherwise a singleton job of one rank.
//!
//! Under 2-4 the ranks meet through a named board in `/dev/shm` (see [`board`]). All ranks
//! must share one node: a job that spans nodes is refused with an error that names the
//! missing piece (a network transport), rather than hanging at start-up.

pub mod bind;
pub mod board;
pub mod launcher;

use std::time::{Duration, Instant};

use crate::env;
use crate::error::{Error, ErrorKind, Result};

/// Where the job's board comes from.
#[derive(Debug)]
pub enum BoardSource {
    /// The launcher's board, already opened.
    Fd(std::os::fd::OwnedFd),
    /// A named object in `/dev/shm`, created by rank 0.
    Named(String),
    /// A private board (singleton job).
    Private,
}

/// What the environment says about this rank's job.
#[derive(Debug)]
pub struct JobEnv {
    /// This rank.
    pub rank: u32,
    /// Number of ranks.
    pub size: u32,
    /// Job id; handles carry it.
    pub job: u64,
    /// The board to meet at.
    pub board: BoardSource,
    /// Which launcher or resource manager was found.
    pub source: &'static str,
    /// How long to wait for all ranks to arrive.
    pub boot_deadline: Instant,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn num(name: &str) -> Result<Option<u32>> {
    env::parse::<u32>(name)
}

/// FNV-1a, to turn a resource manager's job name into a 64-bit job id.
fn hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn boot_deadline() -> Result<Instant> {
    let secs = env::parse::<u64>(env::BOOT_TIMEOUT)?.unwrap_or(60);
    // A huge timeout means "wait as long as it takes" (a year), not an overflow.
    let now = Instant::now();
    Ok(now
        .checked_add(Duration::from_secs(secs))
        .unwrap_or(now + Duration::from_secs(365 * 86_400)))
}

fn multi_node(source: &str, nodes: u32, size: u32) -> Error {
    Error::new(
        ErrorKind::Bootstrap,
        format!(
            "{source} placed this {size}-rank job on {nodes} nodes, but tca has only the shared-memory \
             transport (one node); the network transport (libfabric) is not built yet. Run all ranks \
             on one node (for example `srun -N 1`)"
        ),
    )
}

/// Reads the environment (see the module doc).
pub fn detect() -> Result<JobEnv> {
    let boot = boot_deadline()?;
    if let Some(fd) = num(env::BOARD_FD)? {
        let (Some(rank), Some(size)) = (num(env::RANK)?, num(env::SIZE)?) else {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                "TCA_BOARD_FD is set but TCA_RANK or TCA_SIZE is missing",
            ));
        };
        let job = var(env::JOB_ID)
            .and_then(|j| u64::from_str_radix(&j, 16).ok())
            .ok_or_else(|| Error::new(ErrorKind::Bootstrap, "TCA_JOB_ID is missing or not hex"))?;
        let launcher = num(env::LAUNCHER_PID)?.ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                "TCA_BOARD_FD is set but TCA_LAUNCHER_PID is missing",
            )
        })?;
        let fd = crate::transport::shm::memfd::open_peer(launcher, fd).map_err(|e| {
            Error::new(
                ErrorKind::Bootstrap,
                format!("cannot open the job board of launcher {launcher}: {e}"),
            )
        })?;
        return Ok(JobEnv {
            rank,
            size,
            job,
            board: BoardSource::Fd(fd),
            source: "tca run",
            boot_deadline: boot,
        });
    }
    if let (Some(rank), Some(size)) = (num("SLURM_PROCID")?, num("SLURM_NTASKS")?) {
        let nodes = num("SLURM_STEP_NUM_NODES")?
            .or(num("SLURM_NNODES")?)
            .unwrap_or(1);
        if nodes > 1 {
            return Err(multi_node("Slurm", nodes, size));
        }
        let name = format!(
            "slurm-{}.{}",
            var("SLURM_JOB_ID").unwrap_or_default(),
            var("SLURM_STEP_ID").unwrap_or_default()
        );
        return Ok(named(rank, size, &name, "Slurm", boot));
    }
    if let (Some(rank), Some(size)) = (num("OMPI_COMM_WORLD_RANK")?, num("OMPI_COMM_WORLD_SIZE")?) {
        if let Some(local) = num("OMPI_COMM_WORLD_LOCAL_SIZE")? {
            if local != size {
                return Err(multi_node(
                    "Open MPI's mpirun",
                    size.div_ceil(local.max(1)),
                    size,
                ));
            }
        }
        let name = var("PMIX_NAMESPACE")
            .or_else(|| var("OMPI_MCA_ess_base_jobid"))
            .unwrap_or_else(|| {
                format!(
                    "ppid{}",
                    rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get())
                )
            });
        return Ok(named(rank, size, &format!("ompi-{name}"), "Open MPI", boot));
    }
    if let (Some(rank), Some(size)) = (num("PMI_RANK")?, num("PMI_SIZE")?) {
        if let Some(local) = num("MPI_LOCALNRANKS")? {
            if local != size {
                return Err(multi_node(
                    "the PMI launcher",
                    size.div_ceil(local.max(1)),
                    size,
                ));
            }
        }
        let name = var("PMI_KVSNAME").unwrap_or_else(|| {
            format!(
                "ppid{}",
                rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get())
            )
        });
        return Ok(named(rank, size, &format!("pmi-{name}"), "PMI", boot));
    }
    Ok(JobEnv {
        rank: 0,
        size: 1,
        job: crate::transport::shm::memfd::random_u64(),
        board: BoardSource::Private,
        source: "singleton",
        boot_deadline: boot,
    })
}

fn named(rank: u32, size: u32, name: &str, source: &'static str, boot: Instant) -> JobEnv {
    let job = hash(name);
    let uid = rustix::process::getuid().as_raw();
    JobEnv {
        rank,
        size,
        job,
        board: BoardSource::Named(format!("tca-board-{uid}-{job:016x}")),
        source,
        boot_deadline: boot,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hash_is_stable() {
        assert_eq!(super::hash(""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(super::hash("slurm-1.0"), super::hash("slurm-1.1"));
    }
}
