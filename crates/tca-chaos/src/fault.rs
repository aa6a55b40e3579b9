//! The fault kinds: one table, enumerated by the parser, `--help`, the plan, the verdict and
//! the report, so a kind added here is everywhere at once.
//!
//! Each kind says who inflicts it and what the library must answer:
//! - **fatal** kinds take a process away (killed, stopped, the launcher gone). Every rank
//!   that survives must end with an error that names the culprit: the faulty rank (kill,
//!   stop), or the launcher. A rank whose error names another rank that itself failed naming
//!   the culprit counts too (see [`crate::verdict`]: a stopped rank is named by the first
//!   rank whose wait times out; the rest learn of *that* rank's failure).
//! - **survivable** kinds are inflicted by a rank on itself, from inside the library's API
//!   (a huge allocation, a low descriptor limit, a stale or forged handle). The library must
//!   answer with a clear error; the job then either completes with every result verified, or,
//!   if the error ends the faulty rank, every other rank names it.
//! - `none` is the control: no fault, the job must complete and verify.

use std::fmt;

/// A fault kind.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// No fault (the control).
    None,
    /// SIGKILL of a random rank.
    KillRank,
    /// SIGSTOP of a random rank; the job runs with `TCA_TIMEOUT`.
    StopRank,
    /// SIGKILL of the launcher.
    KillLauncher,
    /// A rank asks for segments larger than the machine's memory.
    AllocHuge,
    /// A rank lowers its descriptor limit to what it has open, then goes on.
    FdLimit,
    /// A rank writes through stale and forged handles.
    StaleHandle,
}

/// What the table says about a kind.
#[derive(Debug, Clone, Copy)]
pub struct Info {
    /// The kind.
    pub fault: Fault,
    /// Its name on the command line and in reports.
    pub name: &'static str,
    /// Whether it takes a process away (see the module doc).
    pub fatal: bool,
    /// Whether a rank inflicts it on itself when told to (SIGUSR1), rather than the campaign
    /// from outside.
    pub by_rank: bool,
    /// What is done, for `--help` and the docs.
    pub what: &'static str,
    /// What the library must answer.
    pub expect: &'static str,
}

/// Every fault kind, in report order.
pub const FAULTS: &[Info] = &[
    Info {
        fault: Fault::KillRank,
        name: "kill-rank",
        fatal: true,
        by_rank: false,
        what: "SIGKILL of a random rank",
        expect: "every other rank ends with an error naming it",
    },
    Info {
        fault: Fault::StopRank,
        name: "stop-rank",
        fatal: true,
        by_rank: false,
        what: "SIGSTOP of a random rank, the job running with TCA_TIMEOUT",
        expect: "every other rank ends with an error naming it (the first through its timeout)",
    },
    Info {
        fault: Fault::KillLauncher,
        name: "kill-launcher",
        fatal: true,
        by_rank: false,
        what: "SIGKILL of the launcher",
        expect: "every rank ends with an error saying the launcher died",
    },
    Info {
        fault: Fault::AllocHuge,
        name: "alloc-huge",
        fatal: false,
        by_rank: true,
        what: "a rank asks for a segment of twice the machine's memory, and one of 1 PiB",
        expect: "each allocation fails with a clear error or succeeds lazily; the job completes",
    },
    Info {
        fault: Fault::FdLimit,
        name: "fd-limit",
        fatal: false,
        by_rank: true,
        what: "a rank lowers RLIMIT_NOFILE to about what it has open, then goes on",
        expect: "the job completes, or the rank fails with a clear error that the others name",
    },
    Info {
        fault: Fault::StaleHandle,
        name: "stale-handle",
        fatal: false,
        by_rank: true,
        what: "a rank writes through an earlier job's handle, the same forged to this job, a \
               live peer's handle with a wrong key and its own freed segment's handle",
        expect: "every write is refused with InvalidHandle; the job completes",
    },
    Info {
        fault: Fault::None,
        name: "none",
        fatal: false,
        by_rank: false,
        what: "no fault (the control)",
        expect: "the job completes and every result verifies",
    },
];

impl Fault {
    /// This kind's entry in [`FAULTS`].
    pub fn info(self) -> &'static Info {
        FAULTS
            .iter()
            .find(|i| i.fault == self)
            .unwrap_or(&FAULTS[FAULTS.len() - 1])
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Every kind, in table order.
    pub fn all() -> Vec<Fault> {
        FAULTS.iter().map(|i| i.fault).collect()
    }

    /// A kind by name.
    pub fn parse(name: &str) -> Result<Fault, String> {
        let t = name.trim();
        FAULTS
            .iter()
            .find(|i| i.name.eq_ignore_ascii_case(t))
            .map(|i| i.fault)
            .ok_or_else(|| {
                format!(
                    "unknown fault kind `{t}` (known: {})",
                    FAULTS.iter().map(|i| i.name).collect::<Vec<_>>().join(", ")
                )
            })
    }

    /// A comma-separated list of kinds (`all` for every kind), without duplicates, in table
    /// order.
    pub fn parse_list(list: &str) -> Result<Vec<Fault>, String> {
        if list.trim().eq_ignore_ascii_case("all") {
            return Ok(Self::all());
        }
        let mut out = Vec::new();
        for name in list.split(',').filter(|s| !s.trim().is_empty()) {
            let f = Self::parse(name)?;
            if !out.contains(&f) {
                out.push(f);
            }
        }
        if out.is_empty() {
            return Err("no fault kind given (use --kinds all, or names such as kill-rank)".into());
        }
        out.sort_by_key(|f| FAULTS.iter().position(|i| i.fault == *f));
        Ok(out)
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One line per kind, for `--help`.
pub fn help() -> String {
    FAULTS
        .iter()
        .map(|i| format!("  {:<14}{}: {}", i.name, i.what, i.expect))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for i in FAULTS {
            assert_eq!(Fault::parse(i.name), Ok(i.fault));
            assert_eq!(i.fault.name(), i.name);
        }
        assert_eq!(
            Fault::parse_list("stop-rank, kill-rank,kill-rank").unwrap(),
            vec![Fault::KillRank, Fault::StopRank]
        );
        assert_eq!(Fault::parse_list("all").unwrap().len(), FAULTS.len());
        let e = Fault::parse_list("kill-rank,explode").unwrap_err();
        assert!(e.contains("unknown fault kind `explode`") && e.contains("kill-launcher"));
        assert!(Fault::parse_list(" , ").is_err());
    }
}
