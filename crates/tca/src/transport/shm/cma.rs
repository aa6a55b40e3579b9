//! Cross-memory attach (Linux `process_vm_writev`): one copy from this process's memory
//! straight into another process's ordinary memory, by the kernel, with no segment on either
//! side — how Open MPI's and MPICH's shared-memory transports move large messages once.
//!
//! The two-sided layer uses it for a rendezvous into plain memory (seed 003's protocol: the
//! receiver posts its buffer's address, the sender writes the data once, then the done word),
//! so a large message is one copy instead of a put into a landing buffer and a copy out of it.
//!
//! Whether it can be used is decided once per process ([`available`]): a probe write into this
//! process itself tells whether the system call exists and is not filtered (seccomp profiles
//! of containers refuse it). A write into *another* process is further subject to the
//! ptrace access check: Yama's `ptrace_scope = 1` (Ubuntu's default) allows it only to a
//! declared tracer, so every rank that may be written into declares any process of its user
//! one ([`allow_peers`], `PR_SET_PTRACER_ANY`, as Open MPI does for the same purpose);
//! `ptrace_scope` 2 or 3 still refuse, and the first transfer then fails with `EPERM` and an
//! error that says to set `TCA_CMA=off`. Which messages use it is the two-sided layer's
//! choice (`TCA_CMA`, `p2p::CMA_DEFAULT`).
//!
//! This is the only place the transport calls `process_vm_writev`; its `unsafe` is the FFI
//! call, for which the kernel checks every address against the target's mappings.

#![allow(unsafe_code)] // the one FFI call, with its contract

use std::sync::OnceLock;

/// Whether the kernel lets this process write into peers' plain memory by cross-memory
/// attach: a probe write into this process itself went through (asked once per process).
pub(crate) fn available() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(probe)
}

/// Lets processes of this user write into this one by cross-memory attach under Yama's
/// `ptrace_scope = 1` (`PR_SET_PTRACER_ANY`; without Yama the call fails and nothing is
/// needed). Once per process, before any peer is given an address to write to.
pub(crate) fn allow_peers() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let _ = rustix::process::set_ptracer(rustix::process::PTracer::Any);
    });
}

/// Writes 8 bytes into this process through the kernel: whether the call is permitted here.
fn probe() -> bool {
    let src = 0x5eed_u64.to_le_bytes();
    let mut dst = [0u8; 8];
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    let ok = write(
        u32::try_from(pid).unwrap_or(0),
        dst.as_mut_ptr() as u64,
        &src,
    )
    .is_ok();
    // The kernel wrote `dst` behind the compiler's back: read it as the kernel left it.
    ok && std::hint::black_box(&mut dst)[..] == src[..]
}

/// Writes `src` into process `pid` at address `addr`, all of it: the kernel copies once from
/// this process's pages to the target's. Fails with the OS error (`ESRCH`: the process is
/// gone; `EFAULT`: the range is not writable memory of the target; `EPERM`: not allowed).
pub(crate) fn write(pid: u32, addr: u64, src: &[u8]) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| std::io::Error::from_raw_os_error(3))?;
    let mut done = 0usize;
    while done < src.len() {
        let rest = &src[done..];
        let to = usize::try_from(addr)
            .ok()
            .and_then(|a| a.checked_add(done))
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EFAULT))?;
        let local = libc::iovec {
            iov_base: rest.as_ptr().cast_mut().cast(),
            iov_len: rest.len(),
        };
        let remote = libc::iovec {
            iov_base: to as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: `local` describes `rest`, memory of this process that is borrowed for the
        // call and only read; `remote` names memory of process `pid`, which the kernel checks
        // against that process's mappings (an unmapped or read-only range is EFAULT, not a
        // write). When `pid` is this process (ranks run as threads), the range is a receive
        // buffer that its owner posted and does not touch until the done word it waits on is
        // raised after this call returns (see `p2p::engine`, "Cross-memory attach").
        let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
        match n {
            n if n > 0 => done += n.unsigned_abs(),
            0 => return Err(std::io::Error::from_raw_os_error(libc::EFAULT)),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_into_this_process_and_refuses_bad_addresses() {
        if !available() {
            eprintln!("cross-memory attach is not permitted here; nothing to test");
            return;
        }
        let pid = u32::try_from(rustix::process::getpid().as_raw_nonzero().get()).unwrap();
        let src: Vec<u8> = (0..100_000u32)
            .map(|i| u8::try_from(i % 251).unwrap())
            .collect();
        let mut dst = vec![0u8; src.len()];
        write(pid, dst.as_mut_ptr() as u64, &src).unwrap();
        assert_eq!(std::hint::black_box(&mut dst)[..], src[..]);
        // Address 8: never mapped. The kernel refuses; nothing is written anywhere.
        let e = write(pid, 8, &src).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
        // No such process.
        assert!(write(u32::MAX >> 1, dst.as_mut_ptr() as u64, &src).is_err());
    }
}
