//! The processes of a job: `PROGRAM ... --job SPEC` is the job's launcher when the campaign
//! starts it, and a rank when that launcher starts it (the launcher's environment says which:
//! [`tca_mpi::role`], the one place that tells a parent from a rank).
//!
//! Why the launcher is a process of its own: `kill-launcher` must kill a launcher without
//! killing the campaign, and a launcher in the campaign's process could not die alone.

use std::path::Path;

use tca_mpi::Role;

use crate::spec::JobSpec;

/// Runs this process as the launcher or a rank of the job described at `spec`; returns the
/// exit status.
pub fn main(spec: &Path) -> u8 {
    let job = match JobSpec::read(spec) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("tca chaos: {e:#}");
            return 2;
        }
    };
    match tca_mpi::role() {
        Role::TcaRank => crate::rank::main(&job),
        Role::Parent => crate::launcher::main(&job, spec),
        Role::MpiRank => {
            eprintln!("tca chaos: a chaos job does not run under mpirun");
            2
        }
    }
}
