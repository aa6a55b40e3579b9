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
//!
//! Each kind also says, strictly, which error kinds its victim and the other ranks may end
//! with, whether the victim may fail at all (`fd-limit` only: a rank out of descriptors may
//! be unable to go on; a huge allocation or a stale handle must leave it usable) and whether
//! every survivor must name the culprit itself.
//!
//! Two hidden kinds, `selftest-wrong` and `selftest-hang`, are accepted by `--kinds` but
//! neither drawn by `all` nor listed: they break a job on purpose (a flipped byte, a rank
//! that sleeps forever), so that the tests can show the campaign counts a wrong result and
//! a hang.

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
    /// Self-test of the wrong-result detector: a rank flips a byte it received (hidden).
    SelftestWrong,
    /// Self-test of the hang detector: a rank sleeps forever without calling tca (hidden).
    SelftestHang,
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
    /// Whether the victim may end with an error (a survivable kind whose consequence may
    /// legitimately end the rank that inflicted it); otherwise the job must complete.
    pub victim_may_fail: bool,
    /// The error kinds (`ErrorKind` as Rust prints it) the victim's own error may have, when
    /// it may fail; for the survivable kinds, the kind each refused attempt must have.
    pub victim_kinds: &'static [&'static str],
    /// The error kinds the other ranks' errors may have, when the job ends in errors.
    pub survivor_kinds: &'static [&'static str],
    /// Whether every survivor must name the culprit itself (not through a chain).
    pub direct: bool,
    /// Not drawn by `all`, not listed in `--help`: the campaign's self-tests, whose goals are
    /// missed on purpose (they show that the detectors work).
    pub hidden: bool,
}

/// Every fault kind, in report order.
pub const FAULTS: &[Info] = &[
    Info {
        fault: Fault::KillRank,
        name: "kill-rank",
        fatal: true,
        by_rank: false,
        what: "SIGKILL of a random rank",
        expect: "every other rank ends with an error (PeerDied or Aborted) naming it itself",
        victim_may_fail: false,
        victim_kinds: &[],
        survivor_kinds: &["PeerDied", "Aborted"],
        direct: true,
        hidden: false,
    },
    Info {
        fault: Fault::StopRank,
        name: "stop-rank",
        fatal: true,
        by_rank: false,
        what: "SIGSTOP of a random rank, the job running with TCA_TIMEOUT",
        expect: "every other rank ends with an error naming it (the first through its timeout)",
        victim_may_fail: false,
        victim_kinds: &[],
        survivor_kinds: &["Timeout", "PeerDied", "Aborted"],
        direct: false,
        hidden: false,
    },
    Info {
        fault: Fault::KillLauncher,
        name: "kill-launcher",
        fatal: true,
        by_rank: false,
        what: "SIGKILL of the launcher",
        expect: "every rank ends with an error saying the launcher died (the first to see \
                 it aborts the job saying so)",
        victim_may_fail: false,
        victim_kinds: &[],
        survivor_kinds: &["Aborted", "PeerDied"],
        direct: true,
        hidden: false,
    },
    Info {
        fault: Fault::AllocHuge,
        name: "alloc-huge",
        fatal: false,
        by_rank: true,
        what: "a rank asks for a segment of twice the machine's memory, and one of 1 PiB",
        expect: "each allocation fails with a Transport error or succeeds lazily; the job \
                 completes",
        victim_may_fail: false,
        victim_kinds: &["Transport"],
        survivor_kinds: &[],
        direct: false,
        hidden: false,
    },
    Info {
        fault: Fault::FdLimit,
        name: "fd-limit",
        fatal: false,
        by_rank: true,
        what: "a rank lowers RLIMIT_NOFILE to about what it has open, then goes on",
        expect: "the job completes, or the rank fails with a Transport error that the others \
                 name (as failed, as the owner of segments it freed as it failed, or as the \
                 rank that refused their request for want of a descriptor, with its reason)",
        victim_may_fail: true,
        victim_kinds: &["Transport"],
        survivor_kinds: &["PeerDied", "Aborted", "InvalidHandle", "Transport"],
        direct: false,
        hidden: false,
    },
    Info {
        fault: Fault::StaleHandle,
        name: "stale-handle",
        fatal: false,
        by_rank: true,
        what: "a rank writes through an earlier job's handle, the same forged to this job, a \
               live peer's handle with a wrong key and its own freed segment's handle",
        expect: "every write is refused with InvalidHandle; the job completes",
        victim_may_fail: false,
        victim_kinds: &["InvalidHandle"],
        survivor_kinds: &[],
        direct: false,
        hidden: false,
    },
    Info {
        fault: Fault::None,
        name: "none",
        fatal: false,
        by_rank: false,
        what: "no fault (the control)",
        expect: "the job completes and every result verifies",
        victim_may_fail: false,
        victim_kinds: &[],
        survivor_kinds: &[],
        direct: false,
        hidden: false,
    },
    Info {
        fault: Fault::SelftestWrong,
        name: "selftest-wrong",
        fatal: false,
        by_rank: true,
        what: "self-test: a rank flips a byte of a result it received",
        expect: "the campaign counts 1 wrong result (the goal is missed on purpose)",
        victim_may_fail: false,
        victim_kinds: &[],
        survivor_kinds: &[],
        direct: false,
        hidden: true,
    },
    Info {
        fault: Fault::SelftestHang,
        name: "selftest-hang",
        fatal: false,
        by_rank: true,
        what: "self-test: a rank sleeps forever without calling tca",
        expect: "the campaign counts 1 hang (the goal is missed on purpose)",
        victim_may_fail: false,
        victim_kinds: &[],
        survivor_kinds: &[],
        direct: false,
        hidden: true,
    },
];

impl Fault {
    /// This kind's entry in [`FAULTS`].
    pub fn info(self) -> &'static Info {
        FAULTS
            .iter()
            .find(|i| i.fault == self)
            .unwrap_or(&FAULTS[0])
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Every kind but the hidden self-tests, in table order.
    pub fn all() -> Vec<Fault> {
        FAULTS
            .iter()
            .filter(|i| !i.hidden)
            .map(|i| i.fault)
            .collect()
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
                    FAULTS
                        .iter()
                        .filter(|i| !i.hidden)
                        .map(|i| i.name)
                        .collect::<Vec<_>>()
                        .join(", ")
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
        .filter(|i| !i.hidden)
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
        assert_eq!(Fault::parse_list("all").unwrap().len(), FAULTS.len() - 2);
        assert!(!Fault::all().contains(&Fault::SelftestWrong));
        assert!(!help().contains("selftest"));
        assert_eq!(Fault::parse("selftest-hang"), Ok(Fault::SelftestHang));
        let e = Fault::parse_list("kill-rank,explode").unwrap_err();
        assert!(e.contains("unknown fault kind `explode`") && e.contains("kill-launcher"));
        assert!(Fault::parse_list(" , ").is_err());
    }
}
