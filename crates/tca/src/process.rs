//! Processes held by pidfd: watching and ending ranks and launchers, by whoever supervises
//! them (the launcher its ranks, the shared-memory transport its peers, a fault campaign the
//! jobs it starts).
//!
//! Why pidfds: a supervisor signals and watches processes that die at random moments and
//! whose pids the system may give to someone else once they are reaped (and that are not
//! always its children). A pidfd names one process for as long as it is held: a signal
//! through it never reaches a stranger, and it becomes readable the moment the process
//! exits (zombie or reaped), which `poll` waits on without spinning.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, poll};
use rustix::process::{Pid, PidfdFlags, Signal, WaitIdOptions, pidfd_open, pidfd_send_signal};

use crate::error::{Error, ErrorKind, Result};

/// A process, held by pidfd.
#[derive(Debug)]
pub struct Proc {
    pid: u32,
    fd: OwnedFd,
}

impl Proc {
    /// Holds process `pid`. A process that is gone is a [`ErrorKind::PeerDied`] error; out of
    /// descriptors a [`ErrorKind::Transport`] one (this process's resource, not the other's).
    pub fn open(pid: u32) -> Result<Self> {
        let gone = || Error::new(ErrorKind::PeerDied, format!("process {pid} is gone"));
        let p = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(gone)?;
        let fd = pidfd_open(p, PidfdFlags::empty()).map_err(|e| {
            Error::reaching(ErrorKind::PeerDied, format!("watching process {pid}"), e)
        })?;
        Ok(Self { pid, fd })
    }

    /// Its pid (for messages; the pidfd is what names it).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether it has exited, without blocking.
    pub fn gone(&self) -> bool {
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
    }

    /// Whether it is stopped (`SIGSTOP`, `SIGTSTP`, a debugger): alive, but running none of
    /// its code. Read from `/proc/<pid>/stat`; `false` if it has exited or cannot be read.
    pub fn stopped(&self) -> bool {
        if self.gone() {
            return false;
        }
        // `T`: stopped by a signal; `t`: by a tracer.
        stat_fields(self.pid)
            .is_some_and(|f| matches!(f.first().map(String::as_str), Some("T" | "t")))
    }

    /// Sends `sig` (nothing if it has exited).
    pub fn signal(&self, sig: Signal) {
        let _ = pidfd_send_signal(&self.fd, sig);
    }

    /// Reaps it if it has exited and is this process's child; nothing otherwise.
    pub fn reap(&self) {
        let _ = rustix::process::waitid(
            rustix::process::WaitId::PidFd(self.fd.as_fd()),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
        );
    }
}

/// Waits until one of `procs` exits or `timeout` passes (sleeps `timeout` when there are
/// none).
pub fn wait_any<'a>(procs: impl IntoIterator<Item = &'a Proc>, timeout: Duration) {
    let mut fds: Vec<PollFd<'_>> = procs
        .into_iter()
        .map(|p| PollFd::new(&p.fd, PollFlags::IN))
        .collect();
    if fds.is_empty() {
        std::thread::sleep(timeout);
    } else {
        let _ = poll(&mut fds, Some(&crate::cast::timespec(timeout)));
    }
}

/// The parent pid of process `pid`, from `/proc/PID/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// The fields of `/proc/<pid>/stat` after the command name (state, parent, ...): "pid (comm)
/// state ppid ...", where comm may hold spaces and parentheses; it ends at the last ')'.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Processes whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|&c| parent_of(c) == Some(pid))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether process `pid` is running (a zombie is not: it runs no code and holds no memory).
pub fn alive(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|state| state != "Z"))
}

/// Whether process `pid` exists (a zombie does), asked without a descriptor (`kill(pid, 0)`):
/// only "no such process" says no, so a process out of descriptors does not take a live
/// peer for gone.
pub fn exists(pid: u32) -> bool {
    let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(p),
        Err(rustix::io::Errno::SRCH)
    )
}

/// Whether process `pid` has ended but not been reaped (its main thread a zombie; for a
/// process with threads, the others may still be ending).
pub fn zombie(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|state| state == "Z"))
}

/// Makes this process the subreaper of its descendants: orphans (the ranks of a launcher
/// that was killed) are re-parented to it rather than to init, and it reaps them.
pub fn become_subreaper() -> Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|e| Error::os(ErrorKind::Launch, "becoming a subreaper", e))
}
