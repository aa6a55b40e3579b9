//! Binding ranks to cores: the launcher pins rank i to the i-th CPU it may run on, when every
//! rank can have a CPU of its own.
//!
//! # Why
//! A freshly started job's ranks can share one CPU for a while, until the kernel's load
//! balancer moves one of them: every handoff then costs a waiter's whole spin budget (the
//! rank it waits for cannot run meanwhile). On the development machine (2 vCPUs) 2 of 16
//! unbound 2-rank `tca bench Allreduce --sizes 8,64` runs measured their first size at 1.6 and
//! 12.8 us instead of 0.12 us. Open MPI binds to cores by default for the same reason, so
//! `--compare mpi` compares like with like only if tca does too.
//!
//! # Policy (`TCA_BIND`)
//! - unset or `auto`: bind when the job has at most as many ranks as the launcher has CPUs
//!   (its affinity mask, so `taskset` and cgroup cpusets are respected); otherwise do not: with
//!   more ranks than cores the scheduler must be free to move them.
//! - `core`: bind, and refuse a job with more ranks than CPUs.
//! - `none`: never bind (for several jobs sharing a node: each would pin its rank 0 to the
//!   same first CPU).
//!
//! A bound rank's own affinity mask holds one CPU, so the launcher tells every rank how many
//! CPUs the job has (`TCA_JOB_CPUS`): that, not the mask, decides whether ranks outnumber
//! cores. The launcher binds its own thread to rank i's CPU while it starts rank i, so the
//! rank is bound from its first instruction (and allocates its memory where it will run).
//! Binding is advice to the kernel: a rank that cannot be bound (the call fails) runs unbound
//! and the launcher says so once on stderr.

use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

use crate::env;
use crate::error::{Error, ErrorKind, Result};

/// What `TCA_BIND` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    /// Bind when every rank can have its own CPU.
    Auto,
    /// Always bind; more ranks than CPUs is an error.
    Core,
    /// Never bind.
    None,
}

impl Bind {
    /// Parses a `TCA_BIND` value.
    pub fn parse(v: &str) -> Result<Bind> {
        match v.trim() {
            "" | "auto" => Ok(Bind::Auto),
            "core" => Ok(Bind::Core),
            "none" => Ok(Bind::None),
            other => Err(Error::new(
                ErrorKind::Launch,
                format!(
                    "{}={other:?} is not a binding (valid: auto, core, none)",
                    env::BIND
                ),
            )),
        }
    }

    /// The policy in the environment (`TCA_BIND`, default auto).
    pub fn from_env() -> Result<Bind> {
        match std::env::var(env::BIND) {
            Ok(v) => Bind::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(Bind::Auto),
            Err(std::env::VarError::NotUnicode(_)) => Err(Error::new(
                ErrorKind::Launch,
                format!("{} is not valid UTF-8", env::BIND),
            )),
        }
    }
}

/// The CPUs this process may run on, in increasing order.
pub fn allowed_cpus() -> Result<Vec<usize>> {
    let set = sched_getaffinity(None)
        .map_err(|e| Error::os(ErrorKind::Launch, "reading the CPU affinity mask", e))?;
    Ok((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

/// The CPU of each of `ranks` ranks under `bind`, given the CPUs the launcher may use (`None`:
/// do not bind).
pub fn plan(bind: Bind, ranks: u32, cpus: &[usize]) -> Result<Option<Vec<usize>>> {
    let n = ranks as usize;
    match bind {
        Bind::None => Ok(None),
        Bind::Auto => Ok((n <= cpus.len()).then(|| cpus[..n].to_vec())),
        Bind::Core if n <= cpus.len() => Ok(Some(cpus[..n].to_vec())),
        Bind::Core => Err(Error::new(
            ErrorKind::Launch,
            format!(
                "{}=core: {ranks} ranks but only {} CPUs to bind them to (use {}=auto or none \
                 to run them unbound)",
                env::BIND,
                cpus.len(),
                env::BIND
            ),
        )),
    }
}

/// Lets a helper thread of a rank that the launcher bound to one CPU (a progress thread)
/// run on any CPU the kernel allows the process, so it runs beside its rank rather than in
/// turns with it. A thread whose mask holds several CPUs, or of a process that `tca run` did
/// not start, keeps its mask (a `taskset` or a cpuset from outside is respected then).
/// Whether the mask was widened.
pub fn unbind_helper_thread() -> bool {
    let bound_by_launcher = std::env::var_os(env::JOB_CPUS).is_some()
        && std::env::var(env::BIND).map_or(true, |b| b.trim() != "none");
    let one = sched_getaffinity(None).is_ok_and(|m| m.count() == 1);
    if !bound_by_launcher || !one {
        return false;
    }
    let mut set = CpuSet::new();
    for c in 0..CpuSet::MAX_CPU {
        set.set(c);
    }
    sched_setaffinity(None, &set).is_ok()
}

/// Runs `start` (which starts a process) with the calling thread bound to `cpu`, so that the
/// process inherits the binding from its first instruction, then restores the thread's mask.
/// A binding that fails is returned beside `start`'s result, which runs unbound.
pub fn start_on<T>(cpu: usize, start: impl FnOnce() -> T) -> (T, Result<()>) {
    let os = |doing: String, e| Error::os(ErrorKind::Launch, doing, e);
    let saved = match sched_getaffinity(None) {
        Ok(s) => s,
        Err(e) => return (start(), Err(os("reading the CPU affinity mask".into(), e))),
    };
    let mut set = CpuSet::new();
    set.set(cpu);
    if let Err(e) = sched_setaffinity(None, &set) {
        return (start(), Err(os(format!("binding to CPU {cpu}"), e)));
    }
    let out = start();
    let restored = sched_setaffinity(None, &saved)
        .map_err(|e| os("restoring the launcher's CPU mask".into(), e));
    (out, restored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_and_garbage_is_named() {
        assert_eq!(Bind::parse("auto").unwrap(), Bind::Auto);
        assert_eq!(Bind::parse("").unwrap(), Bind::Auto);
        assert_eq!(Bind::parse(" core ").unwrap(), Bind::Core);
        assert_eq!(Bind::parse("none").unwrap(), Bind::None);
        let e = Bind::parse("socket").unwrap_err().to_string();
        assert!(
            e.contains("TCA_BIND") && e.contains("socket") && e.contains("auto, core, none"),
            "{e}"
        );
    }

    #[test]
    fn plans_bind_only_when_every_rank_has_a_cpu() {
        let cpus = [2, 3, 5];
        assert_eq!(plan(Bind::Auto, 2, &cpus).unwrap(), Some(vec![2, 3]));
        assert_eq!(plan(Bind::Auto, 3, &cpus).unwrap(), Some(vec![2, 3, 5]));
        assert_eq!(plan(Bind::Auto, 4, &cpus).unwrap(), None);
        assert_eq!(plan(Bind::Auto, 1, &[]).unwrap(), None);
        assert_eq!(plan(Bind::None, 1, &cpus).unwrap(), None);
        assert_eq!(plan(Bind::Core, 3, &cpus).unwrap(), Some(vec![2, 3, 5]));
        let e = plan(Bind::Core, 4, &cpus).unwrap_err().to_string();
        assert!(e.contains("4 ranks") && e.contains("3 CPUs"), "{e}");
    }

    #[test]
    fn this_process_has_cpus() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
    }
}
