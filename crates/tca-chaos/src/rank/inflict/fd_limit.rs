//! `fd-limit`: the rank lowers its soft RLIMIT_NOFILE to its lowest free descriptor number
//! (plus 0 to 3 spare), then goes on.
//!
//! Why: every segment is a memfd and every attach opens a peer's descriptor through
//! `/proc`, so descriptors are what a rank runs out of first on a node shared with a program
//! that leaks them or a low `ulimit -n`. The library raises the limit at start-up when it is
//! too low for the job size; this fault lowers it later, under a running job. The limit
//! bounds descriptor *numbers*, and a new descriptor takes the lowest free number, so a
//! limit at the lowest free number (not above the highest open one) is what leaves no room:
//! the descriptors open stay usable, and whatever the next call needs a new one for (a
//! larger pooled buffer, a landing segment, a peer's new segment) must fail as an error that
//! says so, and the rank's failure must reach the others as an error naming it; calls that
//! need no new descriptor must keep working.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

use super::super::{Answer, Step};

/// The lowest descriptor number not open now (the number the next open gets: the kernel
/// hands out the lowest free one), and how many are open.
fn lowest_free() -> Option<(u64, usize)> {
    // Listing /proc/self/fd shows the listing's own descriptor too, which is closed again
    // afterwards: ask the kernel instead, by opening something.
    let free = {
        let probe = std::fs::File::open("/dev/null").ok()?;
        u64::try_from(std::os::fd::AsRawFd::as_raw_fd(&probe)).ok()?
    };
    let open = std::fs::read_dir("/proc/self/fd")
        .ok()?
        .count()
        .saturating_sub(1);
    Some((free, open))
}

/// Lowers the limit; `answer.inflicted` says whether it was lowered (if not, the job is not
/// counted as injected).
pub(super) fn inflict(spare: u64, answer: &mut Answer) -> Step {
    let Some((free, open)) = lowest_free() else {
        answer
            .notes
            .push("fd-limit: cannot list /proc/self/fd; limit left alone".into());
        return Ok(());
    };
    let old = getrlimit(Resource::Nofile);
    let new = free + spare;
    match setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(new),
            maximum: old.maximum,
        },
    ) {
        Ok(()) => {
            answer.inflicted = true;
            answer.notes.push(format!(
                "RLIMIT_NOFILE {} -> {new} (lowest free descriptor {free}, {open} open)",
                old.current.map_or("unlimited".into(), |c| c.to_string())
            ));
        }
        Err(e) => answer.notes.push(format!(
            "fd-limit: setrlimit({new}) failed: {e}; limit left alone"
        )),
    }
    Ok(())
}
