//! The launcher behind `tca run`: start N ranks on this node, forward their output, and
//! supervise them.
//!
//! - Each rank gets `TCA_RANK`, `TCA_SIZE`, `TCA_JOB_ID`, `TCA_LAUNCHER_PID`, `TCA_JOB_CPUS`
//!   and the number of the launcher's descriptor of the job board, a memfd (`TCA_BOARD_FD`),
//!   which it opens through `/proc`. Nothing is created in any filesystem, so nothing can be left behind,
//!   whatever kills whom.
//! - The launcher watches every rank through a pidfd. When a rank exits non-zero or is killed
//!   by a signal, it reports which rank and how, sets the board's abort word (ranks blocked in
//!   a wait fail at once with an error naming that rank), sends SIGTERM to the others and
//!   SIGKILL to any still alive [`GRACE`] later. The job's exit status is the first failing
//!   rank's (128 + signal number for a signal, as shells report it). Each rank leads its own
//!   process group and the whole group is signalled, so helpers a rank started stop too.
//! - SIGINT, SIGTERM and SIGHUP sent to the launcher are forwarded to every rank, with the same
//!   grace period; the launcher then exits with 128 + that signal.
//! - Ranks notice a launcher that dies (even by SIGKILL) through its pidfd, on their next wait.
//! - Rank i is bound to the i-th CPU the launcher may use when every rank can have one
//!   (`TCA_BIND`, see [`super::bind`]).
//! - With a node proxy ([`Launch::offload`], `tca run --offload`) the launcher first starts
//!   the proxy process (seed 004's host proxy, [`crate::offload::serve_node`]), which joins
//!   the job as every rank and holds their worlds, with the board's environment and
//!   `TCA_PROXY_FD`, the launcher's descriptor of the proxy's channel (a memfd with each
//!   rank's queues); then the ranks, with `TCA_PROGRESS=proxy`, `TCA_PROXY_FD` and
//!   `TCA_PROXY_PID`, and writes each rank's pid into its slot of the channel (so the proxy
//!   learns of a rank that is gone). A proxy that fails stops the job (the ranks waiting on it
//!   fail naming it); the job's status is then the proxy's unless a rank failed first.
//!
//! # Several nodes (`hosts`)
//! With a host list the ranks are spread over the hosts in blocks (`h1:2,h2:2` gives each
//! host that many slots; plain names share the ranks evenly) and started on each host through
//! a remote-shell agent, `ssh -o BatchMode=yes` by default (`TCA_RSH` or [`Launch::rsh`]: any
//! command that takes the host and then the command, such as `ip netns exec`). An agent
//! named `ssh` gets the rank's command as one shell-quoted line, any other its words as
//! arguments. `localhost` ranks are started directly. Instead of a board the ranks get
//! `TCA_KV`, the address of a rendezvous ([`super::kv`]) this launcher serves: there they
//! meet, and through its connections the launcher learns of a rank that dies on another node
//! (the job is aborted, naming it) and the ranks learn of a launcher that dies. `TCA_*` and
//! libfabric's `FI_*` variables of the launcher's environment are passed on to every rank.
//!
//! With a node proxy across hosts the launcher first starts one proxy per host (through the
//! agent, as a rank; `TCA_KV` and `TCA_PROXY_RANKS`, that host's ranks): it makes its channel
//! itself and writes where it is on its first line of output ([`crate::offload::serve_node`]),
//! which the launcher reads before it starts that host's ranks with it (`TCA_PROXY_PID`,
//! `TCA_PROXY_FD`); the rest of the proxy's output is passed on. Its worlds meet the others at
//! the rendezvous. A rank's pid reaches the proxy through the rank's claim of its slot; the
//! proxy's standard input stays open until every rank has ended, so a proxy whose rank never
//! connected learns that it is gone from its end (through a remote shell too). A
//! proxy that fails stops the job as on one node, and its death is the job's status even when
//! the rendezvous saw its ranks' connections close first.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::process::{self, Proc};

use super::bind::{self, Bind};
use crate::cast::rank_u32;
use crate::env;
use crate::error::{Error, ErrorKind, Result};
use crate::rand::random_u64;
use crate::transport::{AbortReason, NodeBoard};

/// How long ranks get between SIGTERM and SIGKILL once the job is being stopped.
pub const GRACE: Duration = Duration::from_millis(500);
/// How long ranks of a job spanning nodes get to notice an abort (and name the rank) before
/// the launcher stops them.
pub const NOTICE: Duration = Duration::from_millis(300);

/// What to launch.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// Number of ranks.
    pub ranks: u32,
    /// Prefix every output line with `[rank] `.
    pub tag_output: bool,
    /// The program each rank runs.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Extra environment for every rank.
    pub env: Vec<(OsString, OsString)>,
    /// Hosts to spread the ranks over, with their slots (empty: every rank on this node).
    pub hosts: Vec<(String, Option<u32>)>,
    /// The remote-shell agent for other hosts (empty: `TCA_RSH`, else `ssh -o BatchMode=yes`).
    pub rsh: Vec<String>,
    /// The address ranks on other hosts reach this launcher at (default: found by routing
    /// towards the first other host).
    pub kv_host: Option<String>,
    /// The node proxy's command (program and arguments; a program that calls
    /// [`crate::offload::serve_node`], such as `tca node-proxy`): with it, one proxy process
    /// per node holds its ranks' worlds and serves their queues (`tca run --offload`; across
    /// hosts one per host, started through the agent).
    pub offload: Option<Vec<OsString>>,
}

/// Parses a host list: `h1,h2` or `h1:2,h2:4` (slots).
pub fn parse_hosts(list: &str) -> Result<Vec<(String, Option<u32>)>> {
    list.split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| match h.rsplit_once(':') {
            Some((name, n)) if !name.is_empty() && !name.contains(':') => {
                let slots = n.parse::<u32>().ok().filter(|&s| s > 0).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Launch,
                        format!("host `{h}`: slots must be a positive whole number"),
                    )
                })?;
                Ok((name.to_string(), Some(slots)))
            }
            _ => Ok((h.to_string(), None)),
        })
        .collect::<Result<Vec<_>>>()
        .and_then(|v| {
            if v.is_empty() {
                Err(Error::new(ErrorKind::Launch, "the host list is empty"))
            } else {
                Ok(v)
            }
        })
}

/// The host of each of `ranks` ranks: hosts with slots take that many in order; the rest of
/// the ranks are shared evenly, in blocks, by the hosts without slots (or, if all have slots,
/// refused when they do not fit).
pub fn place(hosts: &[(String, Option<u32>)], ranks: u32) -> Result<Vec<usize>> {
    let fixed: u32 = hosts.iter().filter_map(|h| h.1).sum();
    let free = u32::try_from(hosts.iter().filter(|h| h.1.is_none()).count())
        .map_err(|_| Error::new(ErrorKind::Launch, "more than 2^32 hosts"))?;
    if fixed > ranks || (free == 0 && fixed != ranks) {
        return Err(Error::new(
            ErrorKind::Launch,
            format!("{ranks} ranks do not fill the hosts' {fixed} slots exactly"),
        ));
    }
    let rest = ranks - fixed;
    let mut out = Vec::with_capacity(ranks as usize);
    let mut k = 0u32;
    for (i, h) in hosts.iter().enumerate() {
        let n = match h.1 {
            Some(s) => s,
            None => {
                let n = rest / free + u32::from(k < rest % free);
                k += 1;
                n
            }
        };
        out.extend(std::iter::repeat_n(i, n as usize));
    }
    Ok(out)
}

/// Whether `k=v` is what an offloaded job (`--offload`) set for its ranks: a job started
/// inside one of them is not served by that job's node proxy unless it says so itself.
fn proxy_var(k: &str, v: &str) -> bool {
    [env::PROXY_FD, env::PROXY_PID, env::PROXY_RANKS].contains(&k)
        || (k == env::PROGRESS && v.trim() == "proxy")
}

/// Removes from `c`'s environment what [`proxy_var`] names, as this process has it.
fn unproxy(c: &mut Command) {
    for (k, v) in std::env::vars() {
        if proxy_var(&k, &v) {
            c.env_remove(k);
        }
    }
}

/// Removes from `c`'s environment what this launcher's own job (if it runs inside one) set
/// for its ranks: a job started here is not that job's rank, nor served by its node proxy,
/// unless it says so itself.
fn scrub(c: &mut Command) {
    for k in [env::RANK, env::BOARD_FD, env::LAUNCHER_PID, env::KV] {
        c.env_remove(k);
    }
    unproxy(c);
}

fn is_this_host(h: &str) -> bool {
    h == "localhost" || h == "127.0.0.1"
}

/// Quotes `s` for a POSIX shell.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// How a rank ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankExit {
    /// Exited with this status.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl RankExit {
    /// The status a shell would report: the code, or 128 + signal.
    pub fn status(self) -> i32 {
        match self {
            Self::Code(c) => c,
            Self::Signal(s) => 128 + s,
        }
    }

    fn failed(self) -> bool {
        self != Self::Code(0)
    }
}

impl std::fmt::Display for RankExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Self::Code(c) => write!(f, "exited with status {c}"),
            Self::Signal(s) => write!(f, "was killed by signal {s} ({})", signal_name(s)),
        }
    }
}

/// The first rank that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankFailure {
    /// The rank.
    pub rank: u32,
    /// Its pid.
    pub pid: u32,
    /// How it ended.
    pub how: RankExit,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// How each rank ended, indexed by rank.
    pub ranks: Vec<RankExit>,
    /// The first rank that failed, if any.
    pub failure: Option<RankFailure>,
    /// The signal that interrupted the launcher, if any.
    pub interrupted: Option<i32>,
    /// How the node proxy ended, with one ([`Launch::offload`]).
    pub proxy: Option<RankExit>,
}

impl Outcome {
    /// The job's exit status: 128 + signal if interrupted, else the first failure's status,
    /// else the node proxy's, else 0.
    pub fn status(&self) -> i32 {
        if let Some(s) = self.interrupted {
            return 128 + s;
        }
        match (self.failure, self.proxy) {
            (Some(f), _) => f.how.status(),
            (None, Some(p)) => p.status(),
            (None, None) => 0,
        }
    }
}

/// Name of a common signal number.
pub fn signal_name(s: i32) -> &'static str {
    match s {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "signal",
    }
}

struct Rank {
    child: Child,
    proc: Proc,
    exit: Option<RankExit>,
}

/// Whether this process was started by `tca run` (it is a rank of a launched job).
pub fn under_launcher() -> bool {
    // As start-up reads them: a blank `TCA_KV` or `TCA_RANK` is unset.
    let set = |name| super::var(&env::Process, name).is_some();
    std::env::var_os(env::BOARD_FD).is_some() || (set(env::KV) && set(env::RANK))
}

impl Launch {
    /// A launch of this very program with its own arguments, `ranks` times: how a tool such as
    /// `tca bench pingpong --np 2` starts its own ranks without a separate launcher step.
    /// `TCA_HOSTS` (and `TCA_RSH`, `TCA_KV_HOST`) spread them over hosts as `--hosts` does.
    pub fn this_program(ranks: u32) -> Result<Self> {
        let program = std::env::current_exe()
            .map_err(|e| Error::os(ErrorKind::Launch, "finding this program's path", e))?
            .into_os_string();
        Ok(Self {
            ranks,
            tag_output: false,
            program,
            args: std::env::args_os().skip(1).collect(),
            env: Vec::new(),
            hosts: match std::env::var(env::HOSTS) {
                Ok(h) if !h.trim().is_empty() => parse_hosts(&h)?,
                _ => Vec::new(),
            },
            rsh: Vec::new(),
            kv_host: std::env::var(env::KV_HOST).ok().filter(|h| !h.is_empty()),
            offload: None,
        })
    }

    /// Starts the ranks and supervises them to the end. `Err` means the job could not be
    /// started at all; a job whose ranks fail returns `Ok` with the failure in the [`Outcome`].
    pub fn run(&self) -> Result<Outcome> {
        let max = env::max_ranks();
        if self.ranks == 0 {
            return Err(Error::new(
                ErrorKind::Launch,
                "the number of ranks must be at least 1 (got -n 0)",
            ));
        }
        if self.ranks > max {
            return Err(Error::new(
                ErrorKind::Launch,
                format!(
                    "{} ranks exceed the per-node limit of {max} (set {} to change it)",
                    self.ranks,
                    env::MAX_RANKS
                ),
            ));
        }
        if !self.hosts.is_empty() {
            return self.run_hosts();
        }
        let cpus = bind::plan(
            Bind::from_env()?,
            self.ranks,
            &bind::allowed_cpus().unwrap_or_default(),
        )?
        .unwrap_or_default();
        let job = random_u64();
        let (board_fd, board) = NodeBoard::create(self.ranks, job, Some(std::process::id()))?;

        let (caught, hooks) = catch_signals()?;
        // (Signals are caught from here: one that comes while the proxy starts stops the job
        // as any other.)
        let proxy = match self
            .offload
            .as_ref()
            .map(|cmd| self.start_proxy(cmd, &board_fd, job))
        {
            None => None,
            Some(Ok(p)) => Some(p),
            Some(Err(e)) => {
                for id in hooks {
                    signal_hook::low_level::unregister(id);
                }
                return Err(e);
            }
        };
        let proxies: Vec<NodeProxy> = proxy.into_iter().collect();
        let spawn = |r: u32, job_cpus: u32| {
            let child = self.spawn(r, &board_fd, job, job_cpus, proxies.first())?;
            if let Some((_, ch)) = proxies.first().and_then(|p| p.channel.as_ref()) {
                ch.set_rank_pid(r, child.id())?;
            }
            Ok(child)
        };
        let result = self.supervise(&Control::Board(&board), &spawn, &cpus, &caught, &proxies);
        let result = finish_proxies(proxies, result, &caught);
        for id in hooks {
            signal_hook::low_level::unregister(id);
        }
        result
    }

    /// `run` over several hosts: a rendezvous here, ranks started through the agent.
    fn run_hosts(&self) -> Result<Outcome> {
        let placement = place(&self.hosts, self.ranks)?;
        let job = random_u64();
        let server = super::kv::KvServer::start(([0, 0, 0, 0], 0).into(), job, self.ranks)?;
        let port = server.addr().port();
        let all_local = self.hosts.iter().all(|h| is_this_host(&h.0));
        let host = match &self.kv_host {
            Some(h) => h.clone(),
            None if all_local => "127.0.0.1".into(),
            None => {
                let first = self
                    .hosts
                    .iter()
                    .find(|h| !is_this_host(&h.0))
                    .map(|h| h.0.clone())
                    .unwrap_or_default();
                route_towards(&first).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Launch,
                        format!(
                            "cannot tell which address of this machine host `{first}` reaches: \
                             give it with --kv-host ADDRESS"
                        ),
                    )
                })?
            }
        };
        let kv = format!("{host}:{port}");
        let rsh: Vec<String> = if !self.rsh.is_empty() {
            self.rsh.clone()
        } else if let Ok(r) = std::env::var(env::RSH) {
            r.split_whitespace().map(str::to_string).collect()
        } else {
            vec!["ssh".into(), "-o".into(), "BatchMode=yes".into()]
        };
        // What every rank gets: its identity, the rendezvous, and our TCA_*/FI_* settings.
        let mut pass: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| {
                (k.starts_with("TCA_") || k.starts_with("FI_"))
                    && ![
                        env::RANK,
                        env::SIZE,
                        env::JOB_ID,
                        env::KV,
                        env::BOARD_FD,
                        env::LAUNCHER_PID,
                    ]
                    .contains(&k.as_str())
            })
            .collect();
        pass.extend(self.env.iter().map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        }));
        // A job started inside an offloaded rank is not offloaded unless it asks.
        pass.retain(|(k, v)| !proxy_var(k, v));
        let mut job_vars = pass.clone();
        job_vars.push((env::SIZE.into(), self.ranks.to_string()));
        job_vars.push((env::JOB_ID.into(), format!("{job:016x}")));
        job_vars.push((env::KV.into(), kv.clone()));
        let (caught, hooks) = catch_signals()?;
        // With --offload, a node proxy per host first, each serving that host's ranks.
        let mut proxies: Vec<NodeProxy> = Vec::new();
        if let Some(cmd) = &self.offload {
            let mut starting: Vec<Starting> = Vec::new();
            let mut failed: Option<Error> = None;
            for (h, (host, _)) in self.hosts.iter().enumerate() {
                let mine: Vec<String> = (0..self.ranks)
                    .filter(|&r| placement[r as usize] == h)
                    .map(|r| r.to_string())
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                let mut vars = job_vars.clone();
                vars.push((env::PROXY_RANKS.into(), mine.join(",")));
                let started = self
                    .remote_command(host, &rsh, cmd, &vars)
                    .and_then(|c| NodeProxy::spawn_remote(c, host, h));
                match started {
                    Ok(s) => starting.push(s),
                    Err(e) => {
                        failed.get_or_insert(e);
                        break;
                    }
                }
            }
            // Every proxy is starting: one deadline for all of them to say where their
            // channels are (a failed start drops the rest, which kills them).
            let deadline = crate::bootstrap::boot_deadline(&crate::env::Process)
                .unwrap_or_else(|_| Instant::now() + Duration::from_secs(60));
            let mut rest = starting.into_iter();
            for s in rest.by_ref() {
                if failed.is_some() {
                    break;
                }
                match s.ready(deadline, &caught) {
                    Ok(p) => proxies.push(p),
                    Err(e) => failed = Some(e),
                }
            }
            drop(rest);
            if let Some(e) = failed {
                for p in proxies {
                    p.kill();
                }
                for id in hooks {
                    signal_hook::low_level::unregister(id);
                }
                return Err(e);
            }
        }
        let spawn = |r: u32, _cpus: u32| {
            let h = placement[r as usize];
            let host = &self.hosts[h].0;
            let mut vars = job_vars.clone();
            vars.push((env::RANK.into(), r.to_string()));
            if let Some(p) = proxies
                .iter()
                .find(|p| p.host.as_ref().is_some_and(|x| x.0 == h))
            {
                let (pid, fd) = p.at;
                vars.push((env::PROGRESS.into(), "proxy".into()));
                vars.push((env::PROXY_PID.into(), pid.to_string()));
                vars.push((env::PROXY_FD.into(), fd.to_string()));
            }
            let program: Vec<OsString> = std::iter::once(self.program.clone())
                .chain(self.args.iter().cloned())
                .collect();
            let mut cmd = self.remote_command(host, &rsh, &program, &vars)?;
            cmd.stdin(Stdio::null()).process_group(0);
            if self.tag_output {
                cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            }
            cmd.spawn().map_err(|e| {
                Error::new(
                    ErrorKind::Launch,
                    format!("cannot start rank {r} on host {host}: {e}"),
                )
            })
        };
        let result = self.supervise(&Control::Kv(&server), &spawn, &[], &caught, &proxies);
        let result = finish_proxies(proxies, result, &caught);
        for id in hooks {
            signal_hook::low_level::unregister(id);
        }
        result
    }

    /// The command that runs `program` (its words) with `vars` on `host`: directly where it
    /// is this host, else through the remote-shell agent `rsh` (`ssh` gets one shell-quoted
    /// line, any other agent the words).
    fn remote_command(
        &self,
        host: &str,
        rsh: &[String],
        program: &[OsString],
        vars: &[(String, String)],
    ) -> Result<Command> {
        let (first, rest) = program
            .split_first()
            .ok_or_else(|| Error::new(ErrorKind::Launch, "an empty command"))?;
        if is_this_host(host) {
            let mut c = Command::new(first);
            scrub(&mut c);
            c.args(rest).envs(vars.iter().map(|(k, v)| (k, v)));
            return Ok(c);
        }
        let agent = rsh
            .first()
            .ok_or_else(|| Error::new(ErrorKind::Launch, "the remote-shell agent is empty"))?;
        let mut c = Command::new(agent);
        // (An agent such as `ip netns exec` passes its environment on.)
        scrub(&mut c);
        c.args(&rsh[1..]).arg(host);
        let mut words: Vec<String> = vec!["env".into()];
        words.extend(vars.iter().map(|(k, v)| format!("{k}={v}")));
        words.extend(program.iter().map(|a| a.to_string_lossy().into_owned()));
        let ssh = std::path::Path::new(agent)
            .file_name()
            .is_some_and(|n| n == "ssh");
        if ssh {
            let line: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
            c.arg(format!("exec {}", line.join(" ")));
        } else {
            c.args(&words);
        }
        Ok(c)
    }

    fn spawn(
        &self,
        rank: u32,
        board_fd: &OwnedFd,
        job: u64,
        job_cpus: u32,
        proxy: Option<&NodeProxy>,
    ) -> Result<Child> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env(env::RANK, rank.to_string())
            .env(env::SIZE, self.ranks.to_string())
            .env(env::JOB_ID, format!("{job:016x}"))
            .env(env::BOARD_FD, board_fd.as_raw_fd().to_string())
            .env(env::LAUNCHER_PID, std::process::id().to_string())
            .env(env::JOB_CPUS, job_cpus.to_string())
            // The board is this job's meeting place: a rendezvous of an outer job is not.
            .env_remove(env::KV)
            .stdin(if rank == 0 {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        // After the program's own environment: these are the launcher's to say (and a job
        // started inside an offloaded rank is not offloaded unless it asks).
        match proxy {
            Some(p) => {
                cmd.env(env::PROGRESS, "proxy")
                    .env(env::PROXY_FD, p.at.1.to_string())
                    .env(env::PROXY_PID, p.at.0.to_string());
            }
            None => unproxy(&mut cmd),
        }
        // Each rank leads its own process group, so stopping a rank also stops whatever it
        // started (a shell's children, helper processes). Exception: rank 0 reading a terminal
        // stays in the foreground group, or the terminal would stop it (SIGTTIN).
        if rank != 0 || !std::io::stdin().is_terminal() {
            cmd.process_group(0);
        }
        if self.tag_output {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        cmd.spawn().map_err(|e| {
            let what = self.program.to_string_lossy();
            let why = if e.kind() == std::io::ErrorKind::NotFound {
                "no such program (not a file, and not found on PATH)".to_string()
            } else {
                e.to_string()
            };
            Error::new(
                ErrorKind::Launch,
                format!("cannot start rank {rank}: `{what}`: {why}"),
            )
        })
    }

    fn supervise(
        &self,
        control: &Control<'_>,
        spawn: &dyn Fn(u32, u32) -> Result<Child>,
        cpus: &[usize],
        caught: &AtomicUsize,
        proxies: &[NodeProxy],
    ) -> Result<Outcome> {
        let mut ranks: Vec<Rank> = Vec::with_capacity(self.ranks as usize);
        let mut pumps = Vec::new();
        let mut bind_warned = false;
        // Before any binding narrows this thread's mask.
        let job_cpus = super::job_cpus();
        for r in 0..self.ranks {
            let spawned = match cpus.get(r as usize) {
                Some(&cpu) => {
                    let (spawned, bound) = bind::start_on(cpu, || spawn(r, job_cpus));
                    if let Err(e) = bound {
                        if !bind_warned {
                            eprintln!("tca run: warning: rank {r}: {e}");
                            bind_warned = true;
                        }
                    }
                    spawned
                }
                None => spawn(r, job_cpus),
            };
            let mut child = match spawned {
                Ok(c) => c,
                Err(e) => {
                    abandon(&mut ranks);
                    return Err(e);
                }
            };
            if self.tag_output {
                if let Some(out) = child.stdout.take() {
                    pumps.push(pump(out, format!("[{r}] "), false, None));
                }
                if let Some(err) = child.stderr.take() {
                    pumps.push(pump(err, format!("[{r}] "), true, None));
                }
            }
            let pid = Pid::from_child(&child);
            let proc = match Proc::open(child.id()) {
                Ok(p) => p,
                Err(e) => {
                    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
                    let _ = child.kill();
                    let _ = child.wait();
                    abandon(&mut ranks);
                    return Err(Error::new(
                        ErrorKind::Launch,
                        format!("cannot watch rank {r}: {e}"),
                    ));
                }
            };
            ranks.push(Rank {
                child,
                proc,
                exit: None,
            });
        }

        let mut failure: Option<RankFailure> = None;
        let mut interrupted: Option<i32> = None;
        let mut proxy_exit: Option<RankExit> = None;
        let mut proxy_failed = false;
        // When the rendezvous first said the job was aborted.
        let mut kv_seen: Option<Instant> = None;
        let mut kill_at: Option<Instant> = None;
        let mut term_at: Option<Instant> = None;
        loop {
            let running: Vec<usize> = (0..ranks.len())
                .filter(|&i| ranks[i].exit.is_none())
                .collect();
            if running.is_empty() {
                break;
            }
            let timeout = match kill_at {
                Some(t) => t
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
                None => Duration::from_millis(50),
            };
            wait_any(&ranks, &running, proxies, timeout);
            for px in proxies {
                if px.exit.get().is_some() {
                    continue;
                }
                let Some(how) = px.ended() else { continue };
                px.exit.set(Some(how));
                if how.failed() && proxy_exit.is_none() {
                    proxy_exit = Some(how);
                }
                if how.failed() && failure.is_none() && interrupted.is_none() && !proxy_failed {
                    let others = ranks.iter().filter(|k| k.exit.is_none()).count();
                    eprintln!(
                        "tca run: the node proxy {}{how}; stopping the {others} rank(s)",
                        px.name()
                    );
                    // The ranks waiting on it notice within a sleep slice and fail naming
                    // it: a moment for that, then they are stopped. Their failures are the
                    // proxy's, not causes of their own.
                    proxy_failed = true;
                    term_at.get_or_insert(Instant::now() + NOTICE);
                }
            }
            for &i in &running {
                let rank = &mut ranks[i];
                if let Ok(Some(st)) = rank.child.try_wait() {
                    let how = exit_of(st);
                    rank.exit = Some(how);
                    if how.failed() && failure.is_none() && interrupted.is_none() && !proxy_failed {
                        let pid = rank.child.id();
                        failure = Some(RankFailure {
                            rank: rank_u32(i),
                            pid,
                            how,
                        });
                        let named =
                            control.abort(rank_u32(i), AbortReason::RankFailed, &how.to_string());
                        let others = ranks.iter().filter(|k| k.exit.is_none()).count();
                        eprintln!(
                            "tca run: rank {i} (pid {pid}) {how}{}{}",
                            match named {
                                Some(r) if r != rank_u32(i) && (r as usize) < ranks.len() => {
                                    format!(", after a fault of rank {r}")
                                }
                                _ => String::new(),
                            },
                            if others > 0 {
                                format!("; stopping the other {others} rank(s)")
                            } else {
                                String::new()
                            }
                        );
                        if let Control::Kv(_) = control {
                            // Ranks on other nodes learn of it through the rendezvous: give
                            // them a moment to say so (naming the rank) before stopping them.
                            term_at.get_or_insert(Instant::now() + NOTICE);
                        } else {
                            signal_all(&ranks, Signal::TERM);
                            for px in proxies {
                                px.signal(Signal::TERM);
                            }
                            kill_at.get_or_insert(Instant::now() + GRACE);
                        }
                    }
                }
            }
            let sig = caught.swap(0, Ordering::SeqCst);
            if sig != 0 && interrupted.is_none() {
                // One of the (small, positive) numbers `catch_signals` registered.
                let sig = i32::try_from(sig).unwrap_or(signal_hook::consts::SIGTERM);
                interrupted = Some(sig);
                control.abort(0, AbortReason::Interrupted, "the launcher was interrupted");
                eprintln!("tca run: caught {}; stopping all ranks", signal_name(sig));
                let fwd = Signal::from_named_raw(sig).unwrap_or(Signal::TERM);
                signal_all(&ranks, fwd);
                for px in proxies {
                    px.signal(fwd);
                }
                kill_at.get_or_insert(Instant::now() + GRACE);
            }
            if let (Control::Kv(kv), None, None, false) =
                (control, failure, interrupted, proxy_failed)
            {
                // A rank on another node died or went silent: the rendezvous saw it.
                // A node proxy that died closed its ranks' connections before its end can be
                // seen (through ssh, well before): its death is the cause, so a rank is not
                // named until the proxies had a moment to be seen ending.
                let abort = kv.aborted().filter(|_| {
                    let first = *kv_seen.get_or_insert_with(Instant::now);
                    let proxy_ending = proxies
                        .iter()
                        .any(|p| p.exit.get().is_none() && p.ended().is_some());
                    !proxy_ending && (proxies.is_empty() || first.elapsed() >= NOTICE)
                });
                if let Some((who, why)) = abort {
                    eprintln!("tca run: {why}; stopping all ranks");
                    failure = Some(RankFailure {
                        rank: who.unwrap_or(0),
                        pid: 0,
                        how: RankExit::Code(1),
                    });
                    term_at.get_or_insert(Instant::now() + NOTICE);
                }
            }
            if term_at.is_some_and(|t| Instant::now() >= t) && kill_at.is_none() {
                signal_all(&ranks, Signal::TERM);
                kill_at = Some(Instant::now() + GRACE);
            }
            if kill_at.is_some_and(|t| Instant::now() >= t) {
                signal_all(&ranks, Signal::KILL);
                for px in proxies {
                    px.signal(Signal::KILL);
                }
            }
        }
        // Output pumps end at EOF; a rank's background child holding the pipe must not hang us.
        let deadline = Instant::now() + Duration::from_secs(1);
        for p in pumps {
            while !p.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            if p.is_finished() {
                let _ = p.join();
            }
        }
        Ok(Outcome {
            ranks: ranks
                .iter()
                .map(|r| r.exit.unwrap_or(RankExit::Code(1)))
                .collect(),
            failure,
            interrupted,
            proxy: proxy_exit,
        })
    }
}

/// Catches SIGINT, SIGTERM and SIGHUP into one flag (the signal number) for `supervise`;
/// returns the flag and the registrations to undo.
fn catch_signals() -> Result<(Arc<AtomicUsize>, Vec<signal_hook::SigId>)> {
    // Linking libfabric installed handlers for these signals before main: ours must be the
    // only ones (see `tca_ofi::restore_default_signals`).
    #[cfg(feature = "ofi")]
    tca_ofi::restore_default_signals();
    let caught = Arc::new(AtomicUsize::new(0));
    let mut hooks = Vec::new();
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        let value = usize::try_from(sig).expect("signal numbers are positive");
        let id = signal_hook::flag::register_usize(sig, caught.clone(), value)
            .map_err(|e| Error::os(ErrorKind::Launch, "installing signal handlers", e))?;
        hooks.push(id);
    }
    Ok((caught, hooks))
}

/// How the launcher tells the ranks that the job is over.
enum Control<'a> {
    /// The node's board (one node).
    Board(&'a NodeBoard),
    /// The rendezvous the ranks of several nodes are connected to.
    Kv(&'a super::kv::KvServer),
}

impl Control<'_> {
    /// Aborts the job on account of `rank`; returns the rank the abort in force names, where
    /// the board tells it (the first cause of `rank`'s failure, or an earlier abort's rank).
    fn abort(&self, rank: u32, why: AbortReason, how: &str) -> Option<u32> {
        match self {
            Control::Board(b) => match b.abort_at_root(rank, why) {
                (r, AbortReason::PeerDied | AbortReason::RankFailed) => Some(r),
                _ => None,
            },
            Control::Kv(k) => {
                match why {
                    AbortReason::Interrupted | AbortReason::LauncherDied => k.abort(None, how),
                    _ => k.abort(Some(rank), &format!("rank {rank} {how}")),
                }
                None
            }
        }
    }
}

/// The address of this machine that packets towards `host` leave from (a UDP socket
/// "connected" there: nothing is sent).
fn route_towards(host: &str) -> Option<String> {
    use std::net::{ToSocketAddrs, UdpSocket};
    let to = (host, 9).to_socket_addrs().ok()?.find(|a| a.is_ipv4())?;
    let s = UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect(to).ok()?;
    Some(s.local_addr().ok()?.ip().to_string())
}

/// Kills and reaps every rank started so far (start-up failed part-way).
fn abandon(ranks: &mut [Rank]) {
    for r in ranks.iter_mut() {
        r.exit = None;
    }
    signal_all(ranks, Signal::KILL);
    for r in ranks.iter_mut() {
        let _ = r.child.wait();
    }
}

fn signal_all(ranks: &[Rank], sig: Signal) {
    for r in ranks.iter().filter(|r| r.exit.is_none()) {
        // The rank is not reaped yet, so its pid (= its process group id) cannot have been
        // reused: signal the whole group, then the rank itself through its pidfd in case it
        // left the group.
        let _ = rustix::process::kill_process_group(Pid::from_child(&r.child), sig);
        r.proc.signal(sig);
    }
}

fn wait_any(ranks: &[Rank], running: &[usize], proxies: &[NodeProxy], timeout: Duration) {
    // A proxy that has ended is not waited on again (its pidfd stays readable).
    let proxies = proxies.iter().map(|p| &p.proc).filter(|p| !p.gone());
    process::wait_any(
        running.iter().map(|&i| &ranks[i].proc).chain(proxies),
        timeout,
    );
}

/// A node proxy across hosts that was started and has not yet said where its channel is;
/// killed if dropped so (the launch failed).
struct Starting {
    /// The process and its pidfd, until made ready.
    live: Option<(Child, Proc)>,
    rx: std::sync::mpsc::Receiver<String>,
    host: String,
    h: usize,
}

/// Kills `child` and its process group, and reaps it.
fn kill_child(child: &mut Child) {
    let _ = rustix::process::kill_process_group(Pid::from_child(child), Signal::KILL);
    let _ = child.kill();
    let _ = child.wait();
}

impl Starting {
    /// The error saying why it failed (dropping it kills it).
    fn fail(self, why: String) -> Error {
        Error::new(
            ErrorKind::Launch,
            format!("the node proxy of host {}: {why}", self.host),
        )
    }

    /// Waits until it says where its channel is, until `deadline` or a caught signal.
    fn ready(mut self, deadline: Instant, caught: &AtomicUsize) -> Result<NodeProxy> {
        use crate::offload::node::READY;
        use std::sync::mpsc::RecvTimeoutError;
        let line = loop {
            match self.rx.recv_timeout(Duration::from_millis(50)) {
                Ok(l) => break l,
                Err(RecvTimeoutError::Disconnected) => {
                    let how = self
                        .live
                        .as_mut()
                        .and_then(|(c, _)| c.try_wait().ok().flatten())
                        .map_or("ended".to_string(), |st| exit_of(st).to_string());
                    return Err(self.fail(format!("{how} before it was ready")));
                }
                Err(RecvTimeoutError::Timeout) => {
                    let sig = caught.load(Ordering::SeqCst);
                    if sig != 0 {
                        let name = signal_name(i32::try_from(sig).unwrap_or(0));
                        return Err(self.fail(format!("the launcher caught {name} meanwhile")));
                    }
                    if Instant::now() >= deadline {
                        return Err(self.fail(format!(
                            "not ready by the start-up deadline ({})",
                            env::BOOT_TIMEOUT
                        )));
                    }
                }
            }
        };
        let mut words = line.split_whitespace();
        let at = match (words.next(), words.next(), words.next()) {
            (Some(w), Some(pid), Some(fd)) if w == READY => pid.parse().ok().zip(fd.parse().ok()),
            _ => None,
        };
        let (Some(at), Some((child, proc))) = (at, self.live.take()) else {
            return Err(self.fail(format!("said `{line}` instead of where its channel is")));
        };
        Ok(NodeProxy {
            child: std::cell::RefCell::new(child),
            proc,
            channel: None,
            at,
            host: Some((self.h, self.host.clone())),
            exit: std::cell::Cell::new(None),
        })
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some((mut child, _)) = self.live.take() {
            kill_child(&mut child);
        }
    }
}

/// The node proxy process of a launch with [`Launch::offload`].
struct NodeProxy {
    child: std::cell::RefCell<Child>,
    /// The process this launcher started: the proxy, or the remote-shell agent running it.
    proc: Proc,
    /// One node: the channel this launcher made (its descriptor, and its map for the ranks'
    /// pids). Across hosts the proxy makes its own.
    channel: Option<(OwnedFd, crate::offload::node::Channel)>,
    /// What the ranks are told: the proxy's pid and the descriptor of the channel in the
    /// process that holds it (this launcher on one node, the proxy across hosts).
    at: (u32, u32),
    /// Across hosts: the index of its host in the host list, and the host.
    host: Option<(usize, String)>,
    /// How it ended, once seen.
    exit: std::cell::Cell<Option<RankExit>>,
}

impl Launch {
    /// Makes the channel and starts the node proxy `cmd` with the board's environment.
    fn start_proxy(&self, cmd: &[OsString], board_fd: &OwnedFd, job: u64) -> Result<NodeProxy> {
        let (program, args) = cmd
            .split_first()
            .ok_or_else(|| Error::new(ErrorKind::Launch, "the node proxy's command is empty"))?;
        let (channel_fd, channel) = crate::offload::node::Channel::create(self.ranks)?;
        let mut c = Command::new(program);
        scrub(&mut c);
        c.args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove(env::RANK)
            .env_remove(env::KV)
            .env(env::SIZE, self.ranks.to_string())
            .env(env::JOB_ID, format!("{job:016x}"))
            .env(env::BOARD_FD, board_fd.as_raw_fd().to_string())
            .env(env::LAUNCHER_PID, std::process::id().to_string())
            .env(env::PROXY_FD, channel_fd.as_raw_fd().to_string())
            .env_remove(env::PROXY_PID)
            .env_remove(env::PROGRESS)
            .stdin(Stdio::null())
            .process_group(0);
        let child = c.spawn().map_err(|e| {
            Error::new(
                ErrorKind::Launch,
                format!(
                    "cannot start the node proxy `{}`: {e}",
                    program.to_string_lossy()
                ),
            )
        })?;
        let proc = match Proc::open(child.id()) {
            Ok(p) => p,
            Err(e) => {
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::new(
                    ErrorKind::Launch,
                    format!("cannot watch the node proxy: {e}"),
                ));
            }
        };
        let at = (
            proc.pid(),
            u32::try_from(channel_fd.as_raw_fd()).unwrap_or(u32::MAX),
        );
        Ok(NodeProxy {
            child: std::cell::RefCell::new(child),
            proc,
            channel: Some((channel_fd, channel)),
            at,
            host: None,
            exit: std::cell::Cell::new(None),
        })
    }
}

impl NodeProxy {
    /// Starts `cmd`, the node proxy of host `host` (number `h` of the list) across hosts; its
    /// output is read by a thread that hands over the line saying where it made the channel
    /// (`READY pid fd`) and passes every other line on ([`Starting::ready`] waits for it).
    fn spawn_remote(mut cmd: Command, host: &str, h: usize) -> Result<Starting> {
        use crate::offload::node::READY;
        // Its standard input stays open until every rank has ended (`finish_proxies`).
        cmd.env_remove(env::RANK)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| {
            Error::new(
                ErrorKind::Launch,
                format!("cannot start the node proxy of host {host}: {e}"),
            )
        })?;
        let (proc, out) = match (Proc::open(child.id()), child.stdout.take()) {
            (Ok(p), Some(o)) => (p, o),
            (p, _) => {
                kill_child(&mut child);
                let why = p.err().map_or("no output to read".to_string(), |e| {
                    format!("cannot watch it: {e}")
                });
                return Err(Error::new(
                    ErrorKind::Launch,
                    format!("the node proxy of host {host}: {why}"),
                ));
            }
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let _ = pump(out, String::new(), false, Some((READY, tx)));
        Ok(Starting {
            live: Some((child, proc)),
            rx,
            host: host.to_string(),
            h,
        })
    }

    /// How it is named in messages: its pid, and its host across hosts.
    fn name(&self) -> String {
        match &self.host {
            Some((_, host)) if self.at.0 != self.pid() => {
                format!("(pid {} on host {host}) ", self.at.0)
            }
            _ => format!("(pid {}) ", self.pid()),
        }
    }

    /// How it ended, once it has.
    fn exit(&self) -> Option<RankExit> {
        self.child
            .borrow_mut()
            .try_wait()
            .ok()
            .flatten()
            .map(exit_of)
    }

    /// How it ended, once it has. A process whose main thread is a zombie has ended for its
    /// ranks (they see it gone at once) while the kernel may still be ending its other
    /// threads: it is given a moment to be reaped, and looked at again on the next turn
    /// otherwise, so the ranks' errors are not taken for the cause.
    fn ended(&self) -> Option<RankExit> {
        if let Some(how) = self.exit() {
            return Some(how);
        }
        let deadline = Instant::now() + Duration::from_millis(50);
        while process::zombie(self.pid()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
            if let Some(how) = self.exit() {
                return Some(how);
            }
        }
        None
    }

    /// Kills it and reaps it (the launch failed part-way).
    fn kill(self) {
        self.signal(Signal::KILL);
        let _ = self.child.into_inner().wait();
    }

    fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Sends `sig` to the proxy and its process group.
    fn signal(&self, sig: Signal) {
        if self.exit().is_none() {
            let _ = rustix::process::kill_process_group(Pid::from_child(&self.child.borrow()), sig);
            self.proc.signal(sig);
        }
    }

    /// After the ranks: waits for the proxy to leave (it does once every rank has stopped or
    /// gone), stops it if it does not; how it ended.
    fn finish(self, deadline: Instant, caught: &AtomicUsize) -> RankExit {
        let name = self.name();
        let mut child = self.child.into_inner();
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break Some(st),
                Ok(None) if Instant::now() < deadline && caught.load(Ordering::SeqCst) == 0 => {
                    process::wait_any([&self.proc], Duration::from_millis(20));
                }
                Ok(None) => {
                    eprintln!(
                        "tca run: the node proxy {name}has not left {:.1} s after its ranks; \
                         stopping it",
                        (4 * GRACE).as_secs_f64()
                    );
                    let _ =
                        rustix::process::kill_process_group(Pid::from_child(&child), Signal::KILL);
                    self.proc.signal(Signal::KILL);
                    break child.wait().ok();
                }
                Err(_) => break None,
            }
        };
        status.map_or(RankExit::Code(1), exit_of)
    }
}

/// After the ranks: every proxy finished ([`NodeProxy::finish`]), killed if the ranks did not
/// all start; the job's proxy exit is the first that failed, else the last.
fn finish_proxies(
    proxies: Vec<NodeProxy>,
    result: Result<Outcome>,
    caught: &AtomicUsize,
) -> Result<Outcome> {
    if proxies.is_empty() {
        return result;
    }
    if result.is_err() {
        // The ranks did not all start: nothing for the proxies to serve.
        for p in proxies {
            p.kill();
        }
        return result;
    }
    // Every rank has ended: a proxy across hosts still serving a rank that never connected
    // (nothing else tells it that rank is gone) learns it from the end of its standard input
    // (through a remote shell too). On one node the ranks' pids tell it.
    for p in &proxies {
        drop(p.child.borrow_mut().stdin.take());
    }
    let deadline = Instant::now() + 4 * GRACE;
    let mut how: Option<RankExit> = None;
    for p in proxies {
        let seen = p.exit.get();
        let h = p.finish(deadline, caught);
        let h = seen.unwrap_or(h);
        if !how.is_some_and(|x| x.failed()) {
            how = Some(h);
        }
    }
    result.map(|mut o| {
        o.proxy = o.proxy.filter(|x| x.failed()).or(how);
        o
    })
}

fn exit_of(st: std::process::ExitStatus) -> RankExit {
    match (st.code(), st.signal()) {
        (Some(c), _) => RankExit::Code(c),
        (None, Some(s)) => RankExit::Signal(s),
        (None, None) => RankExit::Code(1),
    }
}

/// Copies a process's output to ours line by line, each line after `prefix` (a rank's
/// `[rank] `); with `pick`, the first line that starts with its word is sent there instead
/// (a node proxy's ready line), and the output is read to its end whatever happens to the
/// copies (a proxy must not meet a closed pipe); without, a copy that fails ends it.
fn pump(
    src: impl Read + Send + 'static,
    prefix: String,
    is_err: bool,
    mut pick: Option<(&'static str, std::sync::mpsc::Sender<String>)>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(src);
        let mut line = Vec::with_capacity(256);
        let (mut copy, drain) = (true, pick.is_some());
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if let Some((word, _)) = &pick
                        && line.starts_with(word.as_bytes())
                    {
                        if let Some((_, tx)) = pick.take() {
                            let _ = tx.send(String::from_utf8_lossy(&line).trim().to_string());
                        }
                        continue;
                    }
                    if !copy {
                        continue;
                    }
                    if line.last() != Some(&b'\n') {
                        line.push(b'\n');
                    }
                    let r = if is_err {
                        let mut e = std::io::stderr().lock();
                        e.write_all(prefix.as_bytes())
                            .and_then(|()| e.write_all(&line))
                    } else {
                        let mut o = std::io::stdout().lock();
                        o.write_all(prefix.as_bytes())
                            .and_then(|()| o.write_all(&line))
                            .and_then(|()| o.flush())
                    };
                    copy = r.is_ok();
                    if !copy && !drain {
                        break;
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_and_placement() {
        let h = parse_hosts("a:2, b:1").unwrap();
        assert_eq!(h, vec![("a".into(), Some(2)), ("b".into(), Some(1))]);
        assert_eq!(place(&h, 3).unwrap(), vec![0, 0, 1]);
        assert!(place(&h, 4).is_err());
        let h = parse_hosts("a,b,c").unwrap();
        assert_eq!(place(&h, 5).unwrap(), vec![0, 0, 1, 1, 2]);
        let h = parse_hosts("a:3,b").unwrap();
        assert_eq!(place(&h, 5).unwrap(), vec![0, 0, 0, 1, 1]);
        assert!(parse_hosts("a:0").is_err());
        assert!(parse_hosts(" , ").is_err());
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("TCA_RANK=3"), "TCA_RANK=3");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
