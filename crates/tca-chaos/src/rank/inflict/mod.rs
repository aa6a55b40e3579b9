//! The survivable faults a rank inflicts on itself, between two rounds, when the campaign
//! says so (SIGUSR1): one file each, each with the reason it is a fault worth trying and what
//! the library must answer. They use the library's public API only, as a buggy or unlucky
//! program would.

use tca::{SymmetricSegment, World};

use super::{Answer, Step};
use crate::fault::Fault;
use crate::rng::{Rng, mix};
use crate::spec::JobSpec;

mod alloc_huge;
mod fd_limit;
mod stale_handle;

/// Inflicts the job's fault on this rank; the answers go to `answer`.
pub(crate) fn inflict(
    spec: &JobSpec,
    world: &World,
    probe: &SymmetricSegment,
    answer: &mut Answer,
) -> Step {
    match spec.plan.fault {
        Fault::AllocHuge => alloc_huge::inflict(world, answer),
        Fault::FdLimit => {
            let mut r = Rng::new(mix(&[spec.plan.seed, 6]));
            fd_limit::inflict(r.below(4), answer)
        }
        Fault::StaleHandle => {
            stale_handle::inflict(world, probe, spec.stale_handle.as_deref(), answer)
        }
        Fault::SelftestHang => {
            // Alive, and never calls tca again: the others wait for it forever (no
            // TCA_TIMEOUT in these jobs), which the campaign must count as a hang.
            answer.inflicted = true;
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        // The flip is done by the round loop, on the next control Allreduce's result.
        Fault::SelftestWrong => {
            answer.inflicted = true;
            Ok(())
        }
        Fault::None | Fault::KillRank | Fault::StopRank | Fault::KillLauncher => Ok(()),
    }
}
