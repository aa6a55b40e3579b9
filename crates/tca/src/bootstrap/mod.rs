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
//! (under Slurm by default the step's first node and a port derived from the job id; under
//! Open MPI's `mpirun` and MPICH's Hydra by default a port rank 0 picks and publishes
//! through the launcher's key-value directory, PMIx or PMI-1: [`pmi`]); each node's first
//! rank then makes the node's board and announces it there.

pub mod bind;
pub mod kv;
pub mod launcher;
pub mod pmi;

use std::time::{Duration, Instant};

use crate::env::{self, Vars};
use crate::error::{Error, ErrorKind, Result};

/// Where ranks on different nodes meet (see [`kv`]).
#[derive(Debug, Clone)]
pub struct Rendezvous {
    /// Where the server listens.
    pub at: Meet,
    /// Whether this rank runs the server (rank 0 when no launcher of ours does).
    pub serve: bool,
    /// Who runs it, for errors: `Some(0)` for rank 0, `None` for the launcher.
    pub owner: Option<u32>,
}

/// How the ranks learn where the rendezvous listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meet {
    /// At `host:port` (`TCA_KV`, the launcher's, Slurm's default).
    Addr(String),
    /// Through the launcher's key-value directory ([`pmi`]): rank 0 listens at `at`'s port
    /// (`TCA_KV`) or one of its choosing, and publishes `at` or its node's addresses, and
    /// its job id, which every rank takes.
    Published {
        /// The directory.
        dir: pmi::Directory,
        /// `TCA_KV`, if set.
        at: Option<String>,
    },
}

impl Meet {
    /// The address, if one was given.
    pub fn addr(&self) -> Option<&str> {
        match self {
            Self::Addr(a) | Self::Published { at: Some(a), .. } => Some(a),
            Self::Published { at: None, .. } => None,
        }
    }
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

impl JobEnv {
    /// Checks what every start-up source must agree to: at least one rank, at most `max`
    /// ranks (the per-node limit, `TCA_MAX_RANKS`), this rank among them.
    pub(crate) fn check(&self, max: u32) -> Result<()> {
        let (rank, size) = (self.rank, self.size);
        if size == 0 {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                "a job needs at least one rank",
            ));
        }
        if size > max {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "{size} ranks exceed the per-node limit of {max} (set {} to change it)",
                    env::MAX_RANKS
                ),
            ));
        }
        if rank >= size {
            return Err(Error::new(
                ErrorKind::InvalidRank,
                format!("rank {rank} is not in a {size}-rank job"),
            ));
        }
        Ok(())
    }
}

/// A value that is set, valid UTF-8 and not blank, without surrounding white space (a
/// `TCA_KV` of form feeds is no address: found by fuzzing, `fuzz/regressions/launch`).
fn var(vars: &dyn Vars, name: &str) -> Option<String> {
    vars.get(name)
        .and_then(|v| v.ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn num(vars: &dyn Vars, name: &str) -> Result<Option<u32>> {
    env::parse_in::<u32>(vars, name)
}

/// FNV-1a, to turn a resource manager's job name into a 64-bit job id.
fn hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

pub(crate) fn boot_deadline(vars: &dyn Vars) -> Result<Instant> {
    let secs = env::parse_in::<u64>(vars, env::BOOT_TIMEOUT)?.unwrap_or(60);
    // A huge timeout means "wait as long as it takes" (a year), not an overflow.
    let now = Instant::now();
    Ok(now
        .checked_add(Duration::from_secs(secs))
        .unwrap_or(now + Duration::from_secs(365 * 86_400)))
}

/// The rendezvous of a job that `source` spread over nodes: through the launcher's
/// directory `dir` if there is one (with `TCA_KV`'s address if set), else at `TCA_KV`, else
/// at `default` (a host the launcher names and a port derived from the job), else an error
/// saying what to set.
fn spread(
    vars: &dyn Vars,
    source: &str,
    rank: u32,
    default: Option<String>,
    dir: Option<pmi::Directory>,
) -> Result<Rendezvous> {
    let at = match (dir, var(vars, env::KV).or(default)) {
        (Some(dir), at) => Meet::Published { dir, at },
        (None, Some(addr)) => Meet::Addr(addr),
        (None, None) => {
            // Only under Open MPI does a PMIx build find the way by itself.
            let pmix = if source.contains("Open MPI") && !cfg!(feature = "pmix") {
                ", or build tca with the `pmix` feature"
            } else {
                ""
            };
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "{source} spread this job over several nodes; tell the ranks where rank 0 \
                     listens for start-up: set {}=HOST:PORT (HOST: rank 0's node, PORT: any \
                     free port; with mpirun: `-x {}=node1:29500`){pmix}",
                    env::KV,
                    env::KV
                ),
            ));
        }
    };
    Ok(Rendezvous {
        at,
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

/// Reads the environment (see the module doc). Joining the job checks what it describes
/// ([`JobEnv::check`], as for every other start-up source).
pub fn detect() -> Result<JobEnv> {
    detect_in(&env::Process, &crate::transport::open_inherited)
}

/// [`detect`] from `vars`, opening the launcher's board with `open(launcher pid, fd)`.
pub(crate) fn detect_in(
    vars: &dyn Vars,
    open: &dyn Fn(u32, u32) -> Result<std::os::fd::OwnedFd>,
) -> Result<JobEnv> {
    let boot = boot_deadline(vars)?;
    if let (Some(addr), Some(rank), Some(size), Some(job)) = (
        var(vars, env::KV),
        num(vars, env::RANK)?,
        num(vars, env::SIZE)?,
        var(vars, env::JOB_ID),
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
                at: Meet::Addr(addr),
                serve: false,
                owner: None,
            }),
        });
    }
    if let Some(fd) = num(vars, env::BOARD_FD)? {
        let (Some(rank), Some(size)) = (num(vars, env::RANK)?, num(vars, env::SIZE)?) else {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                "TCA_BOARD_FD is set but TCA_RANK or TCA_SIZE is missing",
            ));
        };
        let job = var(vars, env::JOB_ID)
            .and_then(|j| u64::from_str_radix(&j, 16).ok())
            .ok_or_else(|| Error::new(ErrorKind::Bootstrap, "TCA_JOB_ID is missing or not hex"))?;
        let launcher = num(vars, env::LAUNCHER_PID)?.ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                "TCA_BOARD_FD is set but TCA_LAUNCHER_PID is missing",
            )
        })?;
        let fd = open(launcher, fd).map_err(|e| {
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
    if let (Some(rank), Some(size)) = (num(vars, "SLURM_PROCID")?, num(vars, "SLURM_NTASKS")?) {
        let nodes = num(vars, "SLURM_STEP_NUM_NODES")?
            .or(num(vars, "SLURM_NNODES")?)
            .unwrap_or(1);
        let name = format!(
            "slurm-{}.{}",
            var(vars, "SLURM_JOB_ID").unwrap_or_default(),
            var(vars, "SLURM_STEP_ID").unwrap_or_default()
        );
        let mut job = named(rank, size, &name, "Slurm", boot);
        if nodes > 1 || var(vars, env::KV).is_some() {
            let host = var(vars, "SLURM_STEP_NODELIST")
                .or_else(|| var(vars, "SLURM_JOB_NODELIST"))
                .and_then(|l| first_host(&l));
            let port = derived_port(&name);
            job.kv = Some(spread(
                vars,
                "Slurm",
                rank,
                host.map(|h| format!("{h}:{port}")),
                None,
            )?);
            job.board = BoardSource::Node;
        }
        return Ok(job);
    }
    if let (Some(rank), Some(size)) = (
        num(vars, "OMPI_COMM_WORLD_RANK")?,
        num(vars, "OMPI_COMM_WORLD_SIZE")?,
    ) {
        let spans = num(vars, "OMPI_COMM_WORLD_LOCAL_SIZE")?.is_some_and(|l| l != size);
        let name = var(vars, "PMIX_NAMESPACE")
            .or_else(|| var(vars, "OMPI_MCA_ess_base_jobid"))
            .unwrap_or_else(|| {
                format!(
                    "ppid{}",
                    rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get())
                )
            });
        let mut job = named(rank, size, &format!("ompi-{name}"), "Open MPI", boot);
        if spans || var(vars, env::KV).is_some() {
            // Open MPI's mpirun is a PMIx server (PMIX_RANK, PMIX_SERVER_URI*). With TCA_KV
            // it is not needed: the job's name (PMIX_NAMESPACE) is the same on every node,
            // and Open MPI's own MPI_Init fails after another PMIx client (see `pmi`).
            let dir = var(vars, "PMIX_RANK")
                .filter(|_| cfg!(feature = "pmix") && var(vars, env::KV).is_none())
                .map(|_| pmi::Directory::Pmix);
            job.kv = Some(spread(vars, "Open MPI's mpirun", rank, None, dir)?);
            job.board = BoardSource::Node;
        }
        return Ok(job);
    }
    if let (Some(rank), Some(size)) = (num(vars, "PMI_RANK")?, num(vars, "PMI_SIZE")?) {
        let spans = num(vars, "MPI_LOCALNRANKS")?.is_some_and(|l| l != size);
        let name = var(vars, "PMI_KVSNAME").unwrap_or_else(|| {
            format!(
                "ppid{}",
                rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get())
            )
        });
        let mut job = named(rank, size, &format!("pmi-{name}"), "PMI", boot);
        if spans || var(vars, env::KV).is_some() {
            // Hydra hands each process a socket for PMI-1's wire protocol; it also carries
            // the job id, as Hydra names the job nowhere in the environment.
            let dir = num(vars, "PMI_FD")?
                .and_then(|fd| i32::try_from(fd).ok())
                .map(|fd| pmi::Directory::Pmi1 { fd });
            job.kv = Some(spread(vars, "the PMI launcher", rank, None, dir)?);
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

/// Start-up's detection of the job from an environment built from `data` (the fuzz targets'
/// entry: lines `NAME=VALUE`, a value that is not UTF-8 stays so), as a whole: every source's
/// variables, their precedence, the rendezvous address and the checks of [`JobEnv::check`];
/// the launcher's board descriptor is `/dev/null`. Panics if what it accepts is not a job
/// this rank can join (a rank outside the job, an empty rendezvous address, a board name
/// that is not one name in `/dev/shm`) or if detecting twice disagrees; returns whether it
/// was accepted. Not part of the API (feature `fuzzing`).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_detect(data: &[u8]) -> bool {
    let vars: std::collections::BTreeMap<String, std::result::Result<String, ()>> = data
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let eq = line.iter().position(|&b| b == b'=')?;
            let name = String::from_utf8_lossy(&line[..eq]).into_owned();
            let value = String::from_utf8(line[eq + 1..].to_vec()).map_err(drop);
            Some((name, value))
        })
        .collect();
    let open = |_launcher: u32, _fd: u32| -> Result<std::os::fd::OwnedFd> {
        std::fs::File::open("/dev/null")
            .map(Into::into)
            .map_err(|e| Error::new(ErrorKind::Bootstrap, e.to_string()))
    };
    let checked = |job: JobEnv| job.check(env::max_ranks_in(&vars)).map(|()| job);
    let Ok(job) = detect_in(&vars, &open).and_then(checked) else {
        return false;
    };
    assert!(
        job.size >= 1 && job.rank < job.size && job.size <= env::max_ranks_in(&vars),
        "rank {} of {} accepted from {vars:?}",
        job.rank,
        job.size
    );
    if let BoardSource::Named(name) = &job.board {
        assert!(
            name.starts_with("tca-board-") && !name.contains(['/', '\0']),
            "board {name:?} from {vars:?}"
        );
    }
    if let Some(rv) = &job.kv {
        if let Meet::Addr(a) = &rv.at {
            assert!(!a.trim().is_empty(), "empty rendezvous from {vars:?}");
        }
        assert!(
            !rv.serve || (job.rank == 0 && rv.owner == Some(0)),
            "rank {} serves the rendezvous from {vars:?}",
            job.rank
        );
    }
    let again = detect_in(&vars, &open)
        .and_then(checked)
        .expect("detected once, detected again");
    assert_eq!(
        (again.rank, again.size, again.source, again.kv.map(|k| k.at)),
        (job.rank, job.size, job.source, job.kv.map(|k| k.at)),
        "two detections from {vars:?}"
    );
    if job.source != "singleton" {
        assert_eq!(again.job, job.job, "the job id from {vars:?}");
    }
    true
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

    type Vars = std::collections::BTreeMap<String, std::result::Result<String, ()>>;

    fn vars(pairs: &[(&str, &str)]) -> Vars {
        pairs
            .iter()
            .map(|&(k, v)| (k.to_string(), Ok(v.to_string())))
            .collect()
    }

    /// Detection and the check that joining applies.
    fn detect(v: &Vars) -> crate::Result<super::JobEnv> {
        let job = super::detect_in(v, &|_, _| {
            Err(crate::Error::new(
                crate::ErrorKind::Bootstrap,
                "no launcher here",
            ))
        })?;
        job.check(crate::env::max_ranks_in(v))?;
        Ok(job)
    }

    #[test]
    fn the_environment_is_detected_as_a_whole() {
        use crate::ErrorKind::{Bootstrap, InvalidRank};
        let kind = |v: &Vars| detect(v).err().map(|e| e.kind());
        // Nothing: a singleton.
        let one = detect(&vars(&[])).unwrap();
        assert_eq!((one.rank, one.size, one.source), (0, 1, "singleton"));
        // Slurm on one node: a named board, no rendezvous; the same job id on every rank.
        let s0 = detect(&vars(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_ID", "77"),
        ]))
        .unwrap();
        let s3 = detect(&vars(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_ID", "77"),
        ]))
        .unwrap();
        assert_eq!((s3.rank, s3.size, s3.source), (3, 4, "Slurm"));
        assert_eq!(s0.job, s3.job);
        assert!(s0.kv.is_none() && matches!(s0.board, super::BoardSource::Named(_)));
        // Slurm over two nodes: the step's first node runs the rendezvous, on rank 0.
        let spread = |r: &str| {
            detect(&vars(&[
                ("SLURM_PROCID", r),
                ("SLURM_NTASKS", "4"),
                ("SLURM_JOB_ID", "77"),
                ("SLURM_STEP_NUM_NODES", "2"),
                ("SLURM_STEP_NODELIST", "node[03-04]"),
            ]))
            .unwrap()
        };
        let (a, b) = (spread("0"), spread("2"));
        let (ka, kb) = (a.kv.unwrap(), b.kv.unwrap());
        let addr = ka.at.addr().unwrap();
        assert!(addr.starts_with("node03:") && ka.at == kb.at);
        assert!(ka.serve && !kb.serve);
        // A rank outside the job, an empty job, garbage: errors, whichever source says so.
        for (r, n) in [("4", "4"), ("0", "0")] {
            let want = if n == "0" { Bootstrap } else { InvalidRank };
            for (rk, sk) in [
                ("SLURM_PROCID", "SLURM_NTASKS"),
                ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                ("PMI_RANK", "PMI_SIZE"),
            ] {
                assert_eq!(
                    kind(&vars(&[(rk, r), (sk, n)])),
                    Some(want),
                    "{rk}={r} {sk}={n}"
                );
            }
        }
        assert_eq!(
            kind(&vars(&[("PMI_RANK", "x"), ("PMI_SIZE", "2")])),
            Some(Bootstrap)
        );
        let mut bad = vars(&[("SLURM_NTASKS", "2")]);
        bad.insert("SLURM_PROCID".into(), Err(()));
        assert_eq!(kind(&bad), Some(Bootstrap));
        // More ranks than the per-node limit, unless the limit is raised.
        assert_eq!(
            kind(&vars(&[("PMI_RANK", "0"), ("PMI_SIZE", "2000")])),
            Some(Bootstrap)
        );
        assert!(
            detect(&vars(&[
                ("PMI_RANK", "0"),
                ("PMI_SIZE", "2000"),
                ("TCA_MAX_RANKS", "4096")
            ]))
            .is_ok()
        );
        // mpirun over several hosts without TCA_KV: an error that says what to set.
        let e = detect(&vars(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("TCA_KV"), "{e}");
        // ... unless a launcher's directory can carry rank 0's address: PMIx under mpirun,
        // PMI-1's socket under Hydra; TCA_KV still wins.
        let ompi = |r: &str, kv: Option<&str>| {
            let mut v = vars(&[
                ("OMPI_COMM_WORLD_RANK", r),
                ("OMPI_COMM_WORLD_SIZE", "4"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
                ("PMIX_RANK", r),
            ]);
            if let Some(kv) = kv {
                v.insert("TCA_KV".into(), Ok(kv.into()));
            }
            detect(&v).unwrap().kv.unwrap()
        };
        if cfg!(feature = "pmix") {
            let (k0, k1) = (ompi("0", None), ompi("1", None));
            let pmix = super::Meet::Published {
                dir: super::pmi::Directory::Pmix,
                at: None,
            };
            assert_eq!(k0.at, pmix);
            assert!(k0.serve && !k1.serve && k0.at == k1.at);
        }
        assert_eq!(ompi("1", Some("h:1")).at, super::Meet::Addr("h:1".into()));
        let hydra = detect(&vars(&[
            ("PMI_RANK", "3"),
            ("PMI_SIZE", "4"),
            ("MPI_LOCALNRANKS", "2"),
            ("PMI_FD", "9"),
        ]))
        .unwrap();
        assert_eq!(
            hydra.kv.unwrap().at,
            super::Meet::Published {
                dir: super::pmi::Directory::Pmi1 { fd: 9 },
                at: None
            }
        );
        // The launcher's variables come first; its board is opened, and a failure says whose.
        let e = detect(&vars(&[
            ("TCA_BOARD_FD", "5"),
            ("TCA_RANK", "0"),
            ("TCA_SIZE", "2"),
            ("TCA_JOB_ID", "ab"),
            ("TCA_LAUNCHER_PID", "42"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("launcher 42"), "{e}");
        assert_eq!(
            kind(&vars(&[("TCA_BOARD_FD", "5"), ("TCA_RANK", "0")])),
            Some(Bootstrap)
        );
    }

    #[test]
    fn hash_is_stable() {
        assert_eq!(super::hash(""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(super::hash("slurm-1.0"), super::hash("slurm-1.1"));
    }
}
