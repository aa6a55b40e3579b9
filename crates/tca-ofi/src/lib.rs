//! A small, audited binding of the system libfabric (OFI), for tca's RDMA transport.
//!
//! libfabric is the portable user-space fabric API behind MPI and SHMEM libraries on
//! InfiniBand (`verbs`), Slingshot (`cxi`), EFA (`efa`), Omni-Path (`psm2`/`opx`) and plain
//! TCP (`tcp`, with `ofi_rxm` layered on top for reliable-datagram endpoints). This crate
//! opens one reliable-datagram (`FI_EP_RDM`) endpoint with one completion queue and one
//! address vector, registers memory, and posts RMA writes, sends and receives: exactly what
//! tca needs, nothing more.
//!
//! # Why a C shim
//! Nearly every libfabric call (`fi_write`, `fi_cq_read`, `fi_mr_reg`, `fi_close`, ...) is a
//! `static inline` function in `<rdma/fi_*.h>` that jumps through the ops table of a fid
//! object, so the shared library exports no symbol for it. `csrc/shim.c` compiles one thin
//! exported `tca_fi_*` function per call used (same arguments, same result, no policy), and
//! build.rs runs bindgen over `csrc/shim.h` with an allowlist of those functions and the few
//! structs and constants used.
//!
//! # Feature `link`
//! Everything here requires the `link` feature (off by default). Without it the crate is an
//! empty library: no native dependency, no C compiler and no libclang at build time, so the
//! workspace builds and tests on machines without libfabric. With it, build.rs needs
//! `pkg-config libfabric` (>= 1.17; Debian: `libfabric-dev`) and libclang.
//!
//! # Safety model
//! All `unsafe` code of the binding is in this crate; each block has a `SAFETY` comment.
//! Operations whose buffers or contexts must stay valid until a completion is read
//! (`write`, `writedata`, `send`, `recv`) and memory registration are `unsafe fn`s with a
//! `# Safety` section; everything else is safe.

#[cfg(feature = "link")]
mod ofi;
#[cfg(feature = "link")]
mod sys;

#[cfg(feature = "link")]
pub use ofi::*;

/// Gives SIGINT, SIGTERM and SIGHUP their default action back.
///
/// Linking libfabric loads libraries whose constructors (libinfinipath, through the psm
/// providers) install handlers for these signals before `main` runs; such a handler turns a
/// SIGTERM into `exit(1)`, and chained behind a launcher's own handler it ends the launcher
/// before the launcher can stop its ranks. A signal that is ignored (`nohup`) stays ignored.
/// Call it before installing handlers of your own: a handler installed earlier is replaced.
#[cfg(feature = "link")]
pub fn restore_default_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: sigaction with a zeroed (valid: empty mask, no flags) struct only reads or
        // replaces the disposition of one signal; SIG_DFL needs no handler to stay alive.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if old.sa_sigaction == libc::SIG_IGN || old.sa_sigaction == libc::SIG_DFL {
                continue;
            }
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &new, std::ptr::null_mut());
        }
    }
}
