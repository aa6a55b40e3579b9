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
//! Under 2-4 the ranks of one node meet through a named board in `/dev/shm` (see `transport::NodeBoard`).
//! A job that spans nodes (`tca run --hosts`, a Slurm step on several nodes, `mpirun` over
//! several hosts) meets at a TCP rendezvous ([`kv`]): the launcher's, or rank 0's at `TCA_KV`
//! (under Slurm by default the step's first node and a port derived from the job id); each
//! node's first rank then makes the node's board and announces it there.

pub mod bind;
pub mod kv;
pub mod launcher;

use std::time::{Duration, Instant};

use crate::env;
use crate::error::{Error, ErrorKind, Result};

/// Where ranks on different nodes meet (see [`kv`]).
#[derive(Debug, Clone)]
pub struct Rendezvous {
    /// `host:port` of the server.
    pub addr: String,
    /// Whether this rank runs the server (rank 0 when no launcher of ours does).
    pub serve: bool,
    /// Who runs it, for errors: `Some(0)` for rank 0, `None` for the launcher.
    pub owner: Option<u32>,
}

/// Where the job's board comes from.
#[derive(Debug)]
pub enum BoardSource {
    /// The launcher's board, already opened.
    Fd(std::os::fd::OwnedFd),
    /// A named object in `/dev/shm`, created by rank 0.
    Named(String),
    /// A private board (singleton job).
    Private,
    /// Made at start-up by the node's first rank and announced through the rendezvous (a job
    /// spanning nodes).
    Node,
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
    /// The rendezvous of a job that may span nodes (`None`: every rank is on this node).
    pub kv: Option<Rendezvous>,
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

/// The rendezvous of a job that `source` spread over nodes: `TCA_KV` if set, else `default`
/// (a host the launcher names and a port derived from the job), else an error saying what to set.
fn spread(source: &str, rank: u32, default: Option<String>) -> Result<Rendezvous> {
    let addr = var(env::KV).or(default).ok_or_else(|| {
        Error::new(
            ErrorKind::Bootstrap,
            format!(
                "{source} spread this job over several nodes; tell the ranks where rank 0 listens \
                 for start-up: set {}=HOST:PORT (HOST: rank 0's node, PORT: any free port; with \
                 mpirun: `-x {}=node1:29500`)",
                env::KV,
                env::KV
            ),
        )
    })?;
    Ok(Rendezvous {
        addr,
        serve: rank == 0,
        owner: Some(0),
    })
}

/// A port for the rendezvous of job `name` when nobody named one: 20000-39999, the same on
/// every rank.
fn derived_port(name: &str) -> u16 {
    20_000 + (hash(name) % 20_000) as u16
}

/// The first host of a Slurm host list such as `node[03-05,9],gpu1`; `None` for a list that
/// is not one (unbalanced brackets, a range that does not start with digits).
pub fn first_host(list: &str) -> Option<String> {
    let list = list.trim();
    let mut depth = 0u32;
    let mut end = list.len();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let first = &list[..end];
    match first.find('[') {
        None => (!first.is_empty()).then(|| first.to_string()),
        Some(b) => {
            let inner = first[b + 1..].strip_suffix(']')?;
            let range = inner.split(',').next()?;
            let lo = range.split('-').next()?;
            (!lo.is_empty() && lo.chars().all(|c| c.is_ascii_digit())).then_some(())?;
            Some(format!("{}{lo}", &first[..b]))
        }
    }
}

/// CPUs the job may run on: as the launcher saw them before it bound its ranks
/// (`TCA_JOB_CPUS`), else the CPUs this process may run on. Waits spin less when the node's
/// ranks outnumber them.
pub fn job_cpus() -> u32 {
    env::parse::<u32>(env::JOB_CPUS)
        .ok()
        .flatten()
        .filter(|&n| n > 0)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        })
}

/// Reads the environment (see the module doc).
pub fn detect() -> Result<JobEnv> {
    let boot = boot_deadline()?;
    if let (Some(addr), Some(rank), Some(size), Some(job)) = (
        var(env::KV),
        num(env::RANK)?,
        num(env::SIZE)?,
        var(env::JOB_ID),
    ) {
        // `tca run --hosts`: ranks on several nodes meet at the launcher's rendezvous.
        let job = u64::from_str_radix(&job, 16)
            .map_err(|_| Error::new(ErrorKind::Bootstrap, "TCA_JOB_ID is not hex"))?;
        return Ok(JobEnv {
            rank,
            size,
            job,
            board: BoardSource::Node,
            source: "tca run",
            boot_deadline: boot,
            kv: Some(Rendezvous {
                addr,
                serve: false,
                owner: None,
            }),
        });
    }
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
        let fd = crate::transport::open_inherited(launcher, fd).map_err(|e| {
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
            kv: None,
        });
    }
    if let (Some(rank), Some(size)) = (num("SLURM_PROCID")?, num("SLURM_NTASKS")?) {
        let nodes = num("SLURM_STEP_NUM_NODES")?
            .or(num("SLURM_NNODES")?)
            .unwrap_or(1);
        let name = format!(
            "slurm-{}.{}",
            var("SLURM_JOB_ID").unwrap_or_default(),
            var("SLURM_STEP_ID").unwrap_or_default()
        );
        let mut job = named(rank, size, &name, "Slurm", boot);
        if nodes > 1 || var(env::KV).is_some() {
            let host = var("SLURM_STEP_NODELIST")
                .or_else(|| var("SLURM_JOB_NODELIST"))
                .and_then(|l| first_host(&l));
            let port = derived_port(&name);
            job.kv = Some(spread("Slurm", rank, host.map(|h| format!("{h}:{port}")))?);
            job.board = BoardSource::Node;
        }
        return Ok(job);
    }
    if let (Some(rank), Some(size)) = (num("OMPI_COMM_WORLD_RANK")?, num("OMPI_COMM_WORLD_SIZE")?) {
        let spans = num("OMPI_COMM_WORLD_LOCAL_SIZE")?.is_some_and(|l| l != size);
        let name = var("PMIX_NAMESPACE")
            .or_else(|| var("OMPI_MCA_ess_base_jobid"))
            .unwrap_or_else(|| {
                format!(
                    "ppid{}",
                    rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get())
                )
            });
        let mut job = named(rank, size, &format!("ompi-{name}"), "Open MPI", boot);
        if spans || var(env::KV).is_some() {
            job.kv = Some(spread("Open MPI's mpirun", rank, None)?);
            job.board = BoardSource::Node;
        }
        return Ok(job);
    }
    if let (Some(rank), Some(size)) = (num("PMI_RANK")?, num("PMI_SIZE")?) {
        let spans = num("MPI_LOCALNRANKS")?.is_some_and(|l| l != size);
        let name = var("PMI_KVSNAME").unwrap_or_else(|| {
            format!(
                "ppid{}",
                rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get())
            )
        });
        let mut job = named(rank, size, &format!("pmi-{name}"), "PMI", boot);
        if spans || var(env::KV).is_some() {
            job.kv = Some(spread("the PMI launcher", rank, None)?);
            job.board = BoardSource::Node;
        }
        return Ok(job);
    }
    Ok(JobEnv {
        rank: 0,
        size: 1,
        job: crate::rand::random_u64(),
        board: BoardSource::Private,
        source: "singleton",
        boot_deadline: boot,
        kv: None,
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
        kv: None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn first_host_of_slurm_lists() {
        use super::first_host;
        assert_eq!(first_host("node[03-05,9],gpu1").as_deref(), Some("node03"));
        assert_eq!(first_host("gpu1,node[1-2]").as_deref(), Some("gpu1"));
        assert_eq!(
            first_host("10.77.0.1,10.77.0.2").as_deref(),
            Some("10.77.0.1")
        );
        assert_eq!(first_host("n[7]").as_deref(), Some("n7"));
        assert_eq!(first_host(""), None);
        assert_eq!(first_host("n[x-y]"), None);
        // Not lists (found by fuzzing: `jj]z8],` came back whole, commas and all).
        for bad in ["jj]z8],", "a]b", "node[", "n[-3]", "n[1]x"] {
            assert_eq!(first_host(bad), None, "{bad}");
        }
    }

    #[test]
    fn hash_is_stable() {
        assert_eq!(super::hash(""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(super::hash("slurm-1.0"), super::hash("slurm-1.1"));
    }
}
