//! Watching and ending the processes of a job from outside, by pidfd.
//!
//! Why pidfds: the campaign signals and watches processes that are not its children (the
//! ranks are the launcher's), that die at random moments and whose pids the system may give
//! to someone else once they are reaped. A pidfd names one process for as long as it is
//! held: a signal through it can never reach a stranger, and it becomes readable the moment
//! the process exits (zombie or reaped), which `poll` waits on without spinning.
//!
//! When the launcher is killed its ranks are orphaned; the campaign makes itself their
//! *subreaper* ([`become_subreaper`]) so that they are re-parented to it rather than to
//! init, and reaps them itself ([`Proc::reap`]), leaving no zombie behind.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, poll};
use rustix::process::{Pid, PidfdFlags, Signal, WaitIdOptions, pidfd_open, pidfd_send_signal};

/// A process, held by pidfd.
#[derive(Debug)]
pub struct Proc {
    /// Its pid (for messages).
    pub pid: u32,
    fd: OwnedFd,
}

impl Proc {
    /// Holds process `pid`, which must be running.
    pub fn open(pid: u32) -> std::io::Result<Self> {
        let p = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| std::io::Error::other(format!("{pid} is not a pid")))?;
        let fd = pidfd_open(p, PidfdFlags::empty())?;
        Ok(Self { pid, fd })
    }

    /// Whether it has exited.
    pub fn gone(&self) -> bool {
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
    }

    /// Sends `sig` (nothing if it has exited).
    pub fn signal(&self, sig: Signal) {
        let _ = pidfd_send_signal(&self.fd, sig);
    }

    /// Reaps it if it has exited and is this process's child (an orphan re-parented here);
    /// nothing otherwise.
    pub fn reap(&self) {
        let _ = rustix::process::waitid(
            rustix::process::WaitId::PidFd(self.fd.as_fd()),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
        );
    }
}

/// Waits until one of `procs` that is still running exits, or `timeout` passes.
pub fn wait_any(procs: &[&Proc], timeout: Duration) {
    let mut fds: Vec<PollFd<'_>> = procs
        .iter()
        .map(|p| PollFd::new(&p.fd, PollFlags::IN))
        .collect();
    let ts = rustix::time::Timespec {
        tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    if fds.is_empty() {
        std::thread::sleep(timeout);
    } else {
        let _ = poll(&mut fds, Some(&ts));
    }
}

/// The parent pid of process `pid`, from `/proc/PID/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses; it ends at the last ')'.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
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
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit_once(')')
                .map_or("", |(_, rest)| rest)
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// Makes this process the subreaper of its descendants (see the module doc).
pub fn become_subreaper() -> std::io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    Ok(())
}
