//! Every `TCA_*` environment variable, defined once and shared by the launcher and the runtime.
//!
//! | variable | set by | meaning |
//! |---|---|---|
//! | `TCA_RANK`, `TCA_SIZE` | launcher | this process's rank and the job size |
//! | `TCA_JOB_ID` | launcher | 64-bit job id (hex); handles of other jobs are refused |
//! | `TCA_BOARD_FD` | launcher | the launcher's descriptor number of the job board (a memfd, opened through `/proc`) |
//! | `TCA_LAUNCHER_PID` | launcher | the launcher's pid: ranks abort if it dies |
//! | `TCA_JOB_CPUS` | launcher | CPUs the job may use, as the launcher saw them (a bound rank's own mask holds one): whether ranks outnumber cores |
//! | `TCA_BIND` | user | `auto` (default: bind rank i to the i-th CPU when every rank has one), `core` (always; more ranks than CPUs is an error) or `none` (see `bootstrap::bind`) |
//! | `TCA_SPIN` | user | spin iterations before a wait yields or sleeps (overrides the adaptive default) |
//! | `TCA_SIGNAL_FENCE` | user | how a signal on this node is ordered before its writer looks for sleepers: `seqcst` (default: a locked store on every signal) or `asymmetric` (a plain store; a rank about to sleep calls `membarrier`; faster small-message streams, but a wake-up can come up to 10 ms late where the kernel's `membarrier` misses a CPU, see `World::set_plain_signals`); the same for every rank of a node |
//! | `TCA_RING_PREFETCH` | user | `on` (default) or `off`: whether a rank streaming small packets to a peer of this node (back-to-back rooted collectives, a window of sends) takes the header line a few packets ahead for writing (`prefetchw`) right after each packet, so that its store there does not stall on moving the line from the reader's core (see `fabric::ring`, "A stream's next lines"); `off` for measuring what it gives |
//! | `TCA_TIMEOUT` | user | seconds (a decimal number) a blocking call may sleep, counted from its first sleep, before it gives up with `ErrorKind::Timeout` naming the culprit: a peer on this node whose process is stopped, else (a job on one node) the only other rank not waiting, else the rank it waited for where the layer knows it (collectives, two-sided, active messages): a peer that is alive but stuck (stopped, spinning in user code) then ends the job with an error instead of a hang; unset or 0: no limit (a dead peer is detected without it) |
//! | `TCA_BOOT_TIMEOUT` | user | seconds to wait for all ranks at start-up without the launcher (default 60) |
//! | `TCA_MAX_RANKS` | user | raises or lowers the per-node rank limit (default 1024) |
//! | `TCA_TRANSPORT` | user | `auto` (default: shared memory between ranks of one node, libfabric between nodes), `shm` (one node only), `ofi` (libfabric between every pair of ranks, also on one node), `sim` (thread mode only, `tca::threads::run`: the ranks run on a simulated network in virtual time, see `tca::sim`) |
//! | `TCA_SIM_NETWORK` | user | the network model of `TCA_TRANSPORT=sim`: a built-in name (`peach2-2x8`, `tofu-8x6x8`, ...) or a TOML file (default `peach2-2x8`) |
//! | `TCA_SIM_COMPUTE` | user | how computation costs virtual time under `TCA_TRANSPORT=sim`: `model` (default: reductions at the model's rate) or `measured:SCALE` (host time between calls times SCALE). On a simulated network `TCA_TIMEOUT` and `World::set_timeout` do not apply (a wait no rank can satisfy is a deadlock error there); `World::wait_until_timeout` times out in virtual time |
//! | `TCA_OFI_PROVIDER` | user | the libfabric provider (`tcp`, `verbs`, `efa`, `cxi`, ...; default: a network's own RDM provider in libfabric's order, else the native RDM over TCP (`net`; `tcp` from libfabric 1.18) before `tcp;ofi_rxm`, the other TCP/UDP layers, `sockets` and `shm`) |
//! | `TCA_OFI_DOMAIN` | user | the libfabric domain (the tcp provider's: a network interface such as `eth0`; default: the first the provider offers that is not loopback) |
//! | `TCA_OFI_STAGE` | user | `auto` (default: a put from memory outside this rank's registered segments is copied through two registered staging buffers only where the provider needs local buffers registered) or `always` (every such put is staged: the seed's BtoM, for measuring it) |
//! | `TCA_KV` | launcher, user | `host:port` of the start-up rendezvous of a job that spans nodes (`tca run --hosts` sets it; under Slurm it defaults to the step's first node) |
//! | `TCA_KV_SILENCE` | user | seconds a rank or the rendezvous may be silent before its node is declared unreachable (default 5) |
//! | `TCA_HOSTS` | user | hosts for the ranks that `tca bench`, `tca cg` and `tca model calibrate` start themselves (`h1:2,h2:2`, as `tca run --hosts`) |
//! | `TCA_KV_HOST` | user | the address other hosts reach the start-up rendezvous at: the launcher's (as `tca run --kv-host`), or rank 0's when it publishes it under `mpirun`/Hydra (used there only if it is an address of rank 0's node; default: every address of rank 0's interfaces but loopback and link-local ones) |
//! | `TCA_RSH` | user | the remote-shell agent of `tca run --hosts` (default `ssh -o BatchMode=yes`) |
//! | `TCA_NODE` | user | overrides this rank's node name (ranks with the same node name share memory; default: host name and network namespace) |
//! | `TCA_JOB_RESULT` | `tca bench`, `tca cg` | file where rank 0 of a job they started writes its result |
//! | `TCA_MPI_RESULT` | `tca bench`, `tca cg` | the same for the MPI ranks of `--compare mpi` |
//! | `TCA_MPIRUN` | user | the `mpirun` of `--compare mpi` (default: `mpirun` on the PATH) |
//! | `TCA_P2P_EAGER` | user | largest two-sided message (bytes) sent eagerly; larger ones go by rendezvous (default `p2p::EAGER_DEFAULT`, capped by the ring's packet size) |
//! | `TCA_CMA` | user | smallest two-sided rendezvous message (bytes) written straight into a plain receive buffer by cross-memory attach, or `off` (default `p2p::CMA_DEFAULT`; see `p2p::cross_memory_attach`) |
//! | `TCA_SINGLE_COPY` | user | smallest collective message (bytes; the per-rank block where the collective has blocks) that goes single-copy between `Comm::buffer`s on one node, or `off` (default `coll::SINGLE_COPY_MIN`, for broadcast, scatter, gather and reduce `coll::SINGLE_COPY_ROOTED_MIN`, `coll::SINGLE_COPY_MIN_CROWDED` for all with more ranks than cores; a value set here applies to all; an allreduce only up to `coll::SINGLE_COPY_ALLREDUCE_RANKS` ranks with a core each or from `coll::ALLREDUCE_CROWDED_MIN` bytes, whatever the setting; rank 0's value is every member's) |
//! | `TCA_AM_CHANNELS` | user | channels (copy engines) a large active-message put into memory of this node is split over, weights tuned per transfer pattern (default 1: no split; see `am::Endpoint::set_channels`) |
//! | `TCA_AM_PACK` | user | pieces of a vector, indexed or strided put shorter than this (bytes) are packed through the active-message ring; longer ones go segment to segment (default `am::PACK_DEFAULT`, capped by the ring's packet size) |
//! | `TCA_PROGRESS` | user | where communication progresses in `tca bench`'s non-blocking benchmarks and for programs that ask `offload::Progress::from_env`: `caller` (default: in the caller's tca calls), `thread` (a progress thread per rank owns the world, `offload::Proxy`) or `proxy` (the node's proxy process holds every rank's world; set by `tca run --offload`, `offload::Proxy::connect`) |
//! | `TCA_PROXY_FD`, `TCA_PROXY_PID` | launcher | the node proxy's channel and the proxy's pid, set by `tca run --offload`: the channel is the launcher's descriptor on one node, the proxy's own across hosts (`TCA_KV` set) |
//! | `TCA_PROXY_RANKS` | launcher | the ranks a node proxy serves across hosts (`tca run --offload --hosts`: `2,3`) |
//! | `TCA_P2P_PROGRESS` | user | where a communicator's communication progresses while its rank computes in `Comm::overlap`: `caller` (default: nowhere; the computation runs inline) or `thread` (the rank's thread polls while the computation runs on a thread of its own; see `offload`'s `overlap`) |
//! | `TCA_MODEL_FILE` | user | the collectives' calibrated cost models, written by `tca model calibrate` and read at the first communicator (default: `$XDG_CONFIG_HOME/tca/model.json`, else `~/.config/tca/model.json`; `none`: the built-in defaults) |
//!
//! Unknown `TCA_*` names are reported once on stderr by [`warn_unknown`], so a typo such as
//! `TCA_SPINS=0` does not silently do nothing.

/// Channels a large active-message put is split over.
pub const AM_CHANNELS: &str = "TCA_AM_CHANNELS";
/// Pieces of a VIS put shorter than this many bytes travel packed through the AM ring.
pub const AM_PACK: &str = "TCA_AM_PACK";
/// Largest two-sided message sent eagerly, in bytes.
pub const P2P_EAGER: &str = "TCA_P2P_EAGER";
/// Smallest rendezvous message written by cross-memory attach, in bytes, or `off`.
pub const CMA: &str = "TCA_CMA";
/// Smallest collective message that goes single-copy between buffers in tca's memory, or `off`.
pub const SINGLE_COPY: &str = "TCA_SINGLE_COPY";
/// Where communication progresses: `caller`, `thread` or `proxy` (`offload::Progress`).
pub const PROGRESS: &str = "TCA_PROGRESS";
/// The launcher's descriptor of the node proxy's channel, set by `tca run --offload`.
pub const PROXY_FD: &str = "TCA_PROXY_FD";
/// Pid of the node proxy, set by `tca run --offload`.
pub const PROXY_PID: &str = "TCA_PROXY_PID";
/// The ranks a node proxy of a job across hosts serves.
pub const PROXY_RANKS: &str = "TCA_PROXY_RANKS";
/// Where a communicator progresses during `Comm::overlap`: `caller` or `thread`.
pub const P2P_PROGRESS: &str = "TCA_P2P_PROGRESS";
/// Rank of this process, set by `tca run`.
pub const RANK: &str = "TCA_RANK";
/// Number of ranks in the job, set by `tca run`.
pub const SIZE: &str = "TCA_SIZE";
/// Job id in hex, set by `tca run`.
pub const JOB_ID: &str = "TCA_JOB_ID";
/// The launcher's descriptor number of the job board, set by `tca run`.
pub const BOARD_FD: &str = "TCA_BOARD_FD";
/// Pid of the launcher, set by `tca run`.
pub const LAUNCHER_PID: &str = "TCA_LAUNCHER_PID";
/// Spin iterations before yielding or sleeping in a wait.
pub const SPIN: &str = "TCA_SPIN";
/// How a signal's store is ordered before its writer's look for sleepers.
pub const SIGNAL_FENCE: &str = "TCA_SIGNAL_FENCE";
/// Whether a ring's streaming sender takes its next header lines ahead: `on` or `off`.
pub const RING_PREFETCH: &str = "TCA_RING_PREFETCH";
/// Seconds a blocking wait may sleep before it gives up, naming its peer (see the table).
pub const TIMEOUT: &str = "TCA_TIMEOUT";
/// How the launcher binds ranks to CPUs.
pub const BIND: &str = "TCA_BIND";
/// CPUs the job may use, set by the launcher.
pub const JOB_CPUS: &str = "TCA_JOB_CPUS";
/// Start-up timeout in seconds when ranks meet without the launcher.
pub const BOOT_TIMEOUT: &str = "TCA_BOOT_TIMEOUT";
/// Per-node rank limit.
pub const MAX_RANKS: &str = "TCA_MAX_RANKS";

/// Which transports to use: `auto`, `shm`, `ofi` or (thread mode) `sim`.
pub const TRANSPORT: &str = "TCA_TRANSPORT";
/// The network model of `TCA_TRANSPORT=sim`.
pub const SIM_NETWORK: &str = "TCA_SIM_NETWORK";
/// How computation costs virtual time under `TCA_TRANSPORT=sim`.
pub const SIM_COMPUTE: &str = "TCA_SIM_COMPUTE";
/// The libfabric provider.
pub const OFI_PROVIDER: &str = "TCA_OFI_PROVIDER";
/// The libfabric domain (for tcp: a network interface).
pub const OFI_DOMAIN: &str = "TCA_OFI_DOMAIN";
/// Whether large puts from unregistered memory across the network are staged (`auto`, `always`).
pub const OFI_STAGE: &str = "TCA_OFI_STAGE";
/// `host:port` of the start-up rendezvous across nodes.
pub const KV: &str = "TCA_KV";
/// Seconds of silence before a node is declared unreachable.
pub const KV_SILENCE: &str = "TCA_KV_SILENCE";
/// This rank's node name.
pub const NODE: &str = "TCA_NODE";
/// The remote-shell agent of `tca run --hosts`.
pub const RSH: &str = "TCA_RSH";
/// Hosts for ranks that tools start themselves.
pub const HOSTS: &str = "TCA_HOSTS";
/// The address other hosts reach the launcher at.
pub const KV_HOST: &str = "TCA_KV_HOST";

/// Result file of a job started by `tca bench` / `tca cg` (rank 0 writes it).
pub const JOB_RESULT: &str = "TCA_JOB_RESULT";
/// Result file of the MPI half of `--compare mpi`.
pub const MPI_RESULT: &str = "TCA_MPI_RESULT";
/// The `mpirun` of `--compare mpi`.
pub const MPIRUN: &str = "TCA_MPIRUN";
/// The calibration file of the collectives' cost models (see `tca::coll::model`).
pub const MODEL_FILE: &str = "TCA_MODEL_FILE";

/// Every variable tca reads or sets. Prefixes of per-operation variables (such as the
/// collective selection variables of later services) are listed in [`KNOWN_PREFIXES`].
pub const KNOWN: &[&str] = &[
    RANK,
    SIZE,
    JOB_ID,
    BOARD_FD,
    LAUNCHER_PID,
    SPIN,
    SIGNAL_FENCE,
    RING_PREFETCH,
    TIMEOUT,
    BIND,
    JOB_CPUS,
    BOOT_TIMEOUT,
    MAX_RANKS,
    TRANSPORT,
    SIM_NETWORK,
    SIM_COMPUTE,
    OFI_PROVIDER,
    OFI_DOMAIN,
    OFI_STAGE,
    KV,
    KV_SILENCE,
    NODE,
    RSH,
    HOSTS,
    KV_HOST,
    JOB_RESULT,
    MPI_RESULT,
    MPIRUN,
    MODEL_FILE,
    P2P_EAGER,
    CMA,
    SINGLE_COPY,
    AM_PACK,
    AM_CHANNELS,
    PROGRESS,
    PROXY_FD,
    PROXY_PID,
    PROXY_RANKS,
    P2P_PROGRESS,
];

/// Prefixes of families of variables (`TCA_COLL_ALLREDUCE=ring` and the like).
pub const KNOWN_PREFIXES: &[&str] = &["TCA_COLL_"];

/// Default per-node rank limit: each rank maps every peer's control segment and holds a pidfd
/// per peer, so the cost grows as N^2 over the node.
pub const DEFAULT_MAX_RANKS: u32 = 1024;

/// Where environment values come from: the process's environment ([`Process`]), or a map of
/// names to values (start-up's detection fuzzed as a whole, tests).
pub(crate) trait Vars {
    /// The value of `name`: `None` if unset, `Some(Err(()))` if it is not valid UTF-8.
    fn get(&self, name: &str) -> Option<std::result::Result<String, ()>>;
}

/// The process's environment.
pub(crate) struct Process;

impl Vars for Process {
    fn get(&self, name: &str) -> Option<std::result::Result<String, ()>> {
        match std::env::var(name) {
            Ok(v) => Some(Ok(v)),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(_)) => Some(Err(())),
        }
    }
}

#[cfg(any(test, feature = "fuzzing"))]
impl Vars for std::collections::BTreeMap<String, std::result::Result<String, ()>> {
    fn get(&self, name: &str) -> Option<std::result::Result<String, ()>> {
        std::collections::BTreeMap::get(self, name).cloned()
    }
}

/// Reads an environment variable as a parsed value, with a clear error for garbage.
pub(crate) fn parse<T: std::str::FromStr>(name: &str) -> crate::Result<Option<T>> {
    parse_in(&Process, name)
}

/// [`parse`] from `vars`.
pub(crate) fn parse_in<T: std::str::FromStr>(
    vars: &dyn Vars,
    name: &str,
) -> crate::Result<Option<T>> {
    match vars.get(name) {
        Some(Ok(v)) => v.trim().parse().map(Some).map_err(|_| {
            crate::Error::new(
                crate::ErrorKind::Bootstrap,
                format!("environment variable {name}={v:?} is not a valid value"),
            )
        }),
        None => Ok(None),
        Some(Err(())) => Err(crate::Error::new(
            crate::ErrorKind::Bootstrap,
            format!("environment variable {name} is not valid UTF-8"),
        )),
    }
}

/// `TCA_RING_PREFETCH`: `on` (the default, also when unset or empty) or `off`; anything else
/// is an error.
pub(crate) fn ring_prefetch() -> crate::Result<bool> {
    ring_prefetch_in(&Process)
}

/// [`ring_prefetch`] from `vars` (through [`parse_in`]: trimmed, and an error for a value
/// that is not UTF-8).
pub(crate) fn ring_prefetch_in(vars: &dyn Vars) -> crate::Result<bool> {
    match parse_in::<String>(vars, RING_PREFETCH)?.as_deref() {
        None | Some("" | "on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(crate::Error::new(
            crate::ErrorKind::InvalidArgument,
            format!("{RING_PREFETCH}={other:?}: expected `on` or `off`"),
        )),
    }
}

/// `TCA_TIMEOUT` as a duration: unset or 0 is none; a negative, infinite or unreadable value
/// is an error.
pub(crate) fn timeout() -> crate::Result<Option<std::time::Duration>> {
    match parse::<f64>(TIMEOUT)? {
        None => Ok(None),
        Some(0.0) => Ok(None),
        Some(s) => std::time::Duration::try_from_secs_f64(s)
            .map(Some)
            .map_err(|_| {
                crate::Error::new(
                    crate::ErrorKind::Bootstrap,
                    format!("{TIMEOUT}={s}: expected seconds, a number of at least 0"),
                )
            }),
    }
}

/// The per-node rank limit in force.
pub fn max_ranks() -> u32 {
    max_ranks_in(&Process)
}

/// [`max_ranks`] from `vars`.
pub(crate) fn max_ranks_in(vars: &dyn Vars) -> u32 {
    parse_in::<u32>(vars, MAX_RANKS)
        .ok()
        .flatten()
        .unwrap_or(DEFAULT_MAX_RANKS)
}

/// Names of `TCA_*` variables in the environment that tca does not know.
pub fn unknown() -> Vec<String> {
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("TCA_"))
        .filter(|k| {
            !KNOWN.contains(&k.as_str()) && !KNOWN_PREFIXES.iter().any(|p| k.starts_with(p))
        })
        .collect()
}

/// Prints one warning per unknown `TCA_*` variable (once per process).
pub fn warn_unknown() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for name in unknown() {
            eprintln!(
                "tca: warning: unknown environment variable {name} (known: {})",
                KNOWN.join(", ")
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn vars(
        v: Option<std::result::Result<&str, ()>>,
    ) -> BTreeMap<String, std::result::Result<String, ()>> {
        v.map(|v| (RING_PREFETCH.to_string(), v.map(str::to_string)))
            .into_iter()
            .collect()
    }

    /// `TCA_RING_PREFETCH` is on unless it says `off`, and garbage is an error naming it.
    #[test]
    fn ring_prefetch_reads_on_and_off() {
        assert!(ring_prefetch_in(&vars(None)).unwrap());
        assert!(ring_prefetch_in(&vars(Some(Ok("")))).unwrap());
        assert!(ring_prefetch_in(&vars(Some(Ok("on")))).unwrap());
        assert!(!ring_prefetch_in(&vars(Some(Ok(" off")))).unwrap());
        for bad in [Some(Ok("1")), Some(Err(()))] {
            let e = ring_prefetch_in(&vars(bad)).unwrap_err();
            assert!(e.to_string().contains(RING_PREFETCH), "{e}");
        }
    }
}
