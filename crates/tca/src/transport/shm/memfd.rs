//! Creating sealed memfds and opening peers' memfds through `/proc`.
//!
//! Why memfds: they have no name, so a crash at any moment (even `SIGKILL` of the launcher)
//! leaves nothing behind in `/dev/shm`; the kernel frees the memory with the last mapping.
//! Why seals: a peer holds a read-write descriptor; sealing the size (`F_SEAL_SHRINK |
//! F_SEAL_GROW | F_SEAL_SEAL`) means no one can truncate the file under a mapping, which would
//! turn the next access into `SIGBUS`.
//! Why `/proc/<pid>/fd/<n>`: it lets any rank of the same user open a peer's segment knowing
//! only its pid and descriptor number, with no socket or broker, for segments created at any
//! time. The link target is checked to be one of ours before it is opened.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{MemfdFlags, OFlags, SealFlags};

use crate::error::{Error, ErrorKind, Result};

/// Name prefix of every memfd tca creates; `/proc/<pid>/fd/<n>` links show `/memfd:<name>`.
pub const NAME_PREFIX: &str = "tca-";

/// Creates a sealed memfd of exactly `bytes` bytes, mode 0600 (only this user's processes can
/// open it through `/proc`), close-on-exec.
pub fn create(name: &str, bytes: usize) -> Result<OwnedFd> {
    let full = format!("{NAME_PREFIX}{name}");
    let fd = rustix::fs::memfd_create(
        full.as_str(),
        MemfdFlags::ALLOW_SEALING | MemfdFlags::CLOEXEC,
    )
    .map_err(|e| Error::os(ErrorKind::Transport, format!("memfd_create({full})"), e))?;
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o600)).map_err(|e| {
        Error::os(
            ErrorKind::Transport,
            "setting mode 0600 on shared memory object",
            e,
        )
    })?;
    rustix::fs::ftruncate(&fd, bytes as u64).map_err(|e| {
        Error::os(
            ErrorKind::Transport,
            format!("sizing shared memory object to {bytes} bytes"),
            e,
        )
    })?;
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
        .map_err(|e| Error::os(ErrorKind::Transport, "sealing shared memory object", e))?;
    Ok(fd)
}

/// Size in bytes of the file behind `fd`.
pub fn file_len(fd: impl AsFd) -> Result<usize> {
    let st = rustix::fs::fstat(fd).map_err(|e| Error::os(ErrorKind::Transport, "fstat", e))?;
    usize::try_from(st.st_size).map_err(|_| {
        Error::new(
            ErrorKind::Transport,
            "shared memory object has a negative size",
        )
    })
}

/// Opens descriptor `fd` of process `pid`, which must be a tca memfd, read-write.
///
/// Fails with [`ErrorKind::InvalidHandle`] if the process is gone, the descriptor is closed,
/// or it is not a tca memfd (a stale handle whose descriptor number was reused); with
/// [`ErrorKind::Transport`] if this process has no descriptor left to open it with.
pub fn open_peer(pid: u32, fd: u32) -> Result<OwnedFd> {
    let path = format!("/proc/{pid}/fd/{fd}");
    let target = std::fs::read_link(&path).map_err(|e| {
        Error::os(
            ErrorKind::InvalidHandle,
            format!("segment {fd} of process {pid} is gone ({path})"),
            e,
        )
    })?;
    let target = target.to_string_lossy();
    if !target.starts_with(&format!("/memfd:{NAME_PREFIX}")) {
        return Err(Error::new(
            ErrorKind::InvalidHandle,
            format!(
                "segment {fd} of process {pid} is not a tca segment ({path} -> {target}): stale handle?"
            ),
        ));
    }
    rustix::fs::open(
        path.as_str(),
        OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| {
        // Out of descriptors says nothing about the handle: see `Error::reaching`.
        Error::reaching(
            ErrorKind::InvalidHandle,
            format!("opening segment {fd} of process {pid}"),
            e,
        )
    })
}
