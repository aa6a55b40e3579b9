//! `stale-handle`: the rank writes through four handles it must not be able to use.
//!
//! 1. A segment handle of an earlier job of this campaign, which has ended (its owner is
//!    gone): refused by the job check.
//! 2. The same handle with its job id forged to this job's: it now names this job's rank 0
//!    and a segment number that, descriptor numbers being reused from job to job, may well
//!    be a live segment of this job (the probe segment) — with another key: refused by the
//!    owner's header check.
//! 3. A live peer's probe segment handle with a wrong key: refused by the header check.
//! 4. Its own segment's handle after freeing it: refused by the segment's freed state.
//!
//! Each must fail with `InvalidHandle` before a byte moves. A write that goes through is a
//! wrong result (the report's `fault_wrong`); nothing may land in the probe segments, which
//! every rank checks are still zero at the end of the job. The first job of a campaign has no
//! earlier job: it tries 3 and 4 only.

use tca::{ErrorKind, Handle, SymmetricSegment, World};

use super::super::{Answer, Fail, Step};

pub(super) fn inflict(
    world: &World,
    probe: &SymmetricSegment,
    earlier: Option<&str>,
    answer: &mut Answer,
) -> Step {
    let mut tries: Vec<(&str, Handle)> = Vec::new();
    if let Some(hex) = earlier {
        let h = Handle::from_bytes(&hex::decode(hex).unwrap_or_default())
            .map_err(|e| Fail::Other(format!("the earlier job's handle `{hex}`: {e}")))?;
        tries.push(("an earlier job's handle", h));
        tries.push((
            "an earlier job's handle forged to this job",
            h.forged(None, None, None, Some(world.job_id())),
        ));
    }
    let peer = (world.rank() + 1) % world.size();
    let ph = *probe.handle(peer)?;
    tries.push((
        "a live peer's handle with a wrong key",
        ph.forged(None, Some(ph.key() ^ 2), None, None),
    ));
    let own = world.alloc(4096)?;
    let freed = own.handle();
    drop(own);
    tries.push(("its own freed segment's handle", freed));
    answer.inflicted = true;
    for (what, h) in tries {
        match world.put(&h, 0, &[0x5a; 64]) {
            Err(e) if e.kind() == ErrorKind::InvalidHandle => {
                answer.notes.push(format!("{what}: refused ({e})"));
            }
            Err(e) => {
                // Refused, but not as a bad handle: not a corruption, but not the answer.
                answer.notes.push(format!(
                    "{what}: refused as {:?}, not InvalidHandle ({e})",
                    e.kind()
                ));
                answer.unexpected.push(what.to_string());
            }
            Ok(()) => answer.accepted.push(what.to_string()),
        }
    }
    Ok(())
}
