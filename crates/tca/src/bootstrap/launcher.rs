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

use std::ffi::OsString;
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};

use super::bind::{self, Bind};
use super::board::{AbortReason, Board};
use crate::env;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::shm::memfd::random_u64;
use crate::transport::shm::wait::SpinPolicy;

/// How long ranks get between SIGTERM and SIGKILL once the job is being stopped.
pub const GRACE: Duration = Duration::from_millis(500);

/// What to launch.
#[derive(Debug, Clone)]
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
}

impl Outcome {
    /// The job's exit status: 128 + signal if interrupted, else the first failure's status,
    /// else 0.
    pub fn status(&self) -> i32 {
        if let Some(s) = self.interrupted {
            return 128 + s;
        }
        self.failure.map_or(0, |f| f.how.status())
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
    pidfd: OwnedFd,
    exit: Option<RankExit>,
}

/// Whether this process was started by `tca run` (it is a rank of a launched job).
pub fn under_launcher() -> bool {
    std::env::var_os(env::BOARD_FD).is_some()
}

impl Launch {
    /// A launch of this very program with its own arguments, `ranks` times: how a tool such as
    /// `tca bench pingpong --np 2` starts its own ranks without a separate launcher step.
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
        let cpus = bind::plan(
            Bind::from_env()?,
            self.ranks,
            &bind::allowed_cpus().unwrap_or_default(),
        )?
        .unwrap_or_default();
        let job = random_u64();
        let (board_fd, board) = Board::create(self.ranks, job, Some(std::process::id()))?;

        let caught = Arc::new(AtomicUsize::new(0));
        let mut hooks = Vec::new();
        for sig in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            let id = signal_hook::flag::register_usize(sig, caught.clone(), sig as usize)
                .map_err(|e| Error::os(ErrorKind::Launch, "installing signal handlers", e))?;
            hooks.push(id);
        }
        let result = self.supervise(&board, &board_fd, job, &cpus, &caught);
        for id in hooks {
            signal_hook::low_level::unregister(id);
        }
        result
    }

    fn spawn(&self, rank: u32, board_fd: &OwnedFd, job: u64, job_cpus: u32) -> Result<Child> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env(env::RANK, rank.to_string())
            .env(env::SIZE, self.ranks.to_string())
            .env(env::JOB_ID, format!("{job:016x}"))
            .env(env::BOARD_FD, board_fd.as_raw_fd().to_string())
            .env(env::LAUNCHER_PID, std::process::id().to_string())
            .env(env::JOB_CPUS, job_cpus.to_string())
            .stdin(if rank == 0 {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
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
        board: &Board,
        board_fd: &OwnedFd,
        job: u64,
        cpus: &[usize],
        caught: &AtomicUsize,
    ) -> Result<Outcome> {
        let mut ranks: Vec<Rank> = Vec::with_capacity(self.ranks as usize);
        let mut pumps = Vec::new();
        let mut bind_warned = false;
        // Before any binding narrows this thread's mask.
        let job_cpus = SpinPolicy::cpus();
        for r in 0..self.ranks {
            let spawned = match cpus.get(r as usize) {
                Some(&cpu) => {
                    let (spawned, bound) =
                        bind::start_on(cpu, || self.spawn(r, board_fd, job, job_cpus));
                    if let Err(e) = bound {
                        if !bind_warned {
                            eprintln!("tca run: warning: rank {r}: {e}");
                            bind_warned = true;
                        }
                    }
                    spawned
                }
                None => self.spawn(r, board_fd, job, job_cpus),
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
                    pumps.push(pump(out, r, false));
                }
                if let Some(err) = child.stderr.take() {
                    pumps.push(pump(err, r, true));
                }
            }
            let pid = Pid::from_child(&child);
            let pidfd = match pidfd_open(pid, PidfdFlags::empty()) {
                Ok(fd) => fd,
                Err(e) => {
                    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
                    let _ = child.kill();
                    let _ = child.wait();
                    abandon(&mut ranks);
                    return Err(Error::os(
                        ErrorKind::Launch,
                        format!("pidfd_open for rank {r}"),
                        e,
                    ));
                }
            };
            ranks.push(Rank {
                child,
                pidfd,
                exit: None,
            });
        }

        let mut failure: Option<RankFailure> = None;
        let mut interrupted: Option<i32> = None;
        let mut kill_at: Option<Instant> = None;
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
            wait_any(&ranks, &running, timeout);
            for &i in &running {
                let rank = &mut ranks[i];
                if let Ok(Some(st)) = rank.child.try_wait() {
                    let how = match (st.code(), st.signal()) {
                        (Some(c), _) => RankExit::Code(c),
                        (None, Some(s)) => RankExit::Signal(s),
                        (None, None) => RankExit::Code(1),
                    };
                    rank.exit = Some(how);
                    if how.failed() && failure.is_none() && interrupted.is_none() {
                        let pid = rank.child.id();
                        failure = Some(RankFailure {
                            rank: i as u32,
                            pid,
                            how,
                        });
                        board.abort(i as u32, AbortReason::RankFailed);
                        let others = ranks.iter().filter(|k| k.exit.is_none()).count();
                        eprintln!(
                            "tca run: rank {i} (pid {pid}) {how}{}",
                            if others > 0 {
                                format!("; stopping the other {others} rank(s)")
                            } else {
                                String::new()
                            }
                        );
                        signal_all(&ranks, Signal::TERM);
                        kill_at.get_or_insert(Instant::now() + GRACE);
                    }
                }
            }
            let sig = caught.swap(0, Ordering::SeqCst);
            if sig != 0 && interrupted.is_none() {
                let sig = sig as i32;
                interrupted = Some(sig);
                board.abort(0, AbortReason::Interrupted);
                eprintln!("tca run: caught {}; stopping all ranks", signal_name(sig));
                let fwd = Signal::from_named_raw(sig).unwrap_or(Signal::TERM);
                signal_all(&ranks, fwd);
                kill_at.get_or_insert(Instant::now() + GRACE);
            }
            if kill_at.is_some_and(|t| Instant::now() >= t) {
                signal_all(&ranks, Signal::KILL);
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
        })
    }
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
        let _ = pidfd_send_signal(&r.pidfd, sig);
    }
}

fn wait_any(ranks: &[Rank], running: &[usize], timeout: Duration) {
    use rustix::event::{PollFd, PollFlags, poll};
    let mut fds: Vec<PollFd<'_>> = running
        .iter()
        .map(|&i| PollFd::new(&ranks[i].pidfd, PollFlags::IN))
        .collect();
    let ts = rustix::time::Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    let _ = poll(&mut fds, Some(&ts));
}

/// Copies a rank's output to ours line by line, each line prefixed with `[rank] `.
fn pump(src: impl Read + Send + 'static, rank: u32, is_err: bool) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(src);
        let mut line = Vec::with_capacity(256);
        let prefix = format!("[{rank}] ");
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
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
                    if r.is_err() {
                        break;
                    }
                }
            }
        }
    })
}
