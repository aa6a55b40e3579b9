//! Whether a job's ranks answered its fault as the library promises, from their reports.
//!
//! # Naming
//! A surviving rank *names the culprit* (the faulty rank, or the launcher) if its error names
//! it, or names a rank that itself ended with an error naming the culprit, and so on: a
//! chain: a rank that times out on a stopped peer names that peer, then exits with the
//! error, and every step names its cause. `direct` records the stronger property, every
//! survivor naming the culprit itself. The library aims at it: a rank that fails on account
//! of another records the blame on the node's board before its error goes up, so whoever
//! aborts the job on its account (the launcher seeing it exit, a peer seeing it fail) names
//! the first cause; and the first rank to see the launcher die aborts the job saying so. A
//! chain is still accepted where the kind allows one (`direct` false): a rank's error that
//! the board never sees (a refusal that carries a peer's own reason) can still start one.
//!
//! # Per kind
//! - fatal (`kill-rank`, `stop-rank`, `kill-launcher`): every rank but the victim ends with an
//!   error of one of the kind's `survivor_kinds` naming the culprit; for `kill-rank` and
//!   `kill-launcher`, naming it itself (`direct` in [`crate::fault::FAULTS`]).
//! - survivable (`alloc-huge`, `fd-limit`, `stale-handle`): the victim inflicted the fault
//!   (`applied`) and its attempts were answered with the kind's `victim_kinds`; then every
//!   rank completes with every result verified, or, for the one kind whose victim may fail
//!   (`fd-limit`), the victim ended with an error of its `victim_kinds` and every other rank
//!   names it.
//! - `none`: every rank completes.
//!
//! Independently of the kind, and whether or not the fault was injected, a *wrong result* is
//! a rank that found a result wrong with no error to say so, or a write the library let
//! through that it must refuse ([`wrong_of`]).

use crate::fault::{Fault, Info};
use crate::report::{Ending, Named, RankReport};

/// What the reports say about one job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// The fault was answered as the library promises (see the module doc).
    pub handled: bool,
    /// The job ended in errors: a fatal fault, or a rank that did not complete after another
    /// (whatever the errors say).
    pub in_errors: bool,
    /// Every survivor's error names the culprit itself (jobs that ended in errors only).
    pub direct: bool,
    /// Wrong results delivered without an error.
    pub wrong: Vec<String>,
    /// Milliseconds from the fault to the last survivor's named error (jobs that ended in
    /// errors only).
    pub named_ms: Option<f64>,
    /// Why the job was not handled, for people.
    pub problems: Vec<String>,
}

/// The wrong results in a job's reports, whatever its fault and however it ended: a rank
/// that found a result wrong with no error to say so, or a write the library let through.
pub fn wrong_of(reports: &[Option<RankReport>]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (r, rep) in reports.iter().enumerate() {
        let Some(rep) = rep else { continue };
        if let Ending::Wrong { what } = &rep.ending {
            wrong.push(format!("rank {r}: {what}"));
        }
        if !rep.fault.accepted.is_empty() {
            wrong.push(format!(
                "rank {r}: the library let through {}",
                rep.fault.accepted.join(", ")
            ));
        }
    }
    wrong
}

/// Judges the reports of a job with fault `fault` and `victim`, injected at `fault_us`
/// (microseconds since the epoch); `applied` says whether the victim of a survivable fault
/// inflicted it.
pub fn judge(
    fault: Fault,
    victim: Option<u32>,
    reports: &[Option<RankReport>],
    fault_us: u64,
    applied: bool,
) -> Verdict {
    let mut v = Verdict {
        wrong: wrong_of(reports),
        ..Verdict::default()
    };
    let all_ok = reports.iter().all(|r| {
        matches!(
            r,
            Some(RankReport {
                ending: Ending::Ok,
                ..
            })
        )
    });
    let info = fault.info();
    v.in_errors = info.fatal || !all_ok;
    if info.hidden {
        v.problems
            .push(format!("{fault}: a self-test, its goal missed on purpose"));
    } else if info.fatal {
        let culprit = victim.map_or(Named::Launcher, Named::Rank);
        named_by_all(&mut v, reports, victim, culprit, fault_us, info);
    } else if fault == Fault::None {
        v.handled = all_ok;
        if !all_ok {
            v.problems.push("the control job did not complete".into());
        }
    } else {
        let vr = victim
            .and_then(|r| reports.get(r as usize))
            .and_then(Option::as_ref);
        if !applied {
            v.problems
                .push("the victim never inflicted the fault (the job ended first)".into());
        }
        if let Some(rep) = vr {
            if !rep.fault.unexpected.is_empty() {
                v.problems.push(format!(
                    "rank {}: refused with another error than {}: {}",
                    rep.rank,
                    info.victim_kinds.join(" or "),
                    rep.fault.unexpected.join(", ")
                ));
            }
        }
        let answered = applied && vr.is_some_and(|r| r.fault.unexpected.is_empty());
        if all_ok {
            v.handled = answered;
        } else if let (Some(rep), Some(vic)) = (vr, victim) {
            match &rep.ending {
                Ending::Error { kind, .. }
                    if info.victim_may_fail && info.victim_kinds.contains(&kind.as_str()) =>
                {
                    named_by_all(&mut v, reports, victim, Named::Rank(vic), fault_us, info);
                    v.handled &= answered;
                }
                Ending::Error { .. } if info.victim_may_fail => v.problems.push(format!(
                    "the victim failed with another error than {}: {}",
                    info.victim_kinds.join(" or "),
                    rep.line()
                )),
                Ending::Error { .. } => v.problems.push(format!(
                    "{fault} must let the job complete, but its victim failed: {}",
                    rep.line()
                )),
                _ => v.problems.push(format!(
                    "the job failed, but not through its victim (rank {vic}: {})",
                    rep.line()
                )),
            }
        } else {
            v.problems
                .push("the job failed and its victim left no report".into());
        }
    }
    if !v.wrong.is_empty() {
        v.handled = false;
    }
    v
}

/// Sets `handled`, `direct` and `named_ms` from whether every rank but `victim` ended with an
/// error of one of the kind's `survivor_kinds` naming `culprit` (itself, where the kind says
/// `direct`).
fn named_by_all(
    v: &mut Verdict,
    reports: &[Option<RankReport>],
    victim: Option<u32>,
    culprit: Named,
    fault_us: u64,
    info: &Info,
) {
    v.handled = true;
    v.direct = true;
    let mut last = None::<u64>;
    for (r, rep) in reports.iter().enumerate() {
        let r = u32::try_from(r).unwrap_or(u32::MAX);
        if Some(r) == victim {
            continue;
        }
        let Some(rep) = rep else {
            v.handled = false;
            v.direct = false;
            v.problems.push(format!("rank {r} left no report"));
            continue;
        };
        if let Ending::Error { kind, .. } = &rep.ending {
            if !info.survivor_kinds.contains(&kind.as_str()) {
                v.handled = false;
                v.problems.push(format!(
                    "ended with another error than {}: {}",
                    info.survivor_kinds.join(" or "),
                    rep.line()
                ));
            }
        }
        match chain(reports, rep, culprit) {
            Some(hops) => {
                v.direct &= hops == 1;
                if info.direct && hops > 1 {
                    v.handled = false;
                    v.problems.push(format!(
                        "names {culprit:?} only through another rank: {}",
                        rep.line()
                    ));
                }
                last = last.max(Some(rep.at_unix_us));
            }
            None => {
                v.handled = false;
                v.direct = false;
                v.problems
                    .push(format!("does not name {culprit:?}: {}", rep.line()));
            }
        }
    }
    v.named_ms = last.map(|t| t.saturating_sub(fault_us) as f64 / 1000.0);
}

/// The number of hops from `rep`'s error to `culprit` along the ranks the errors name, or
/// `None` if the chain does not get there.
fn chain(reports: &[Option<RankReport>], rep: &RankReport, culprit: Named) -> Option<usize> {
    let mut at = rep;
    let mut seen = vec![false; reports.len()];
    for hops in 1..=reports.len() {
        let named = at.named()?;
        if named == culprit {
            return Some(hops);
        }
        let Named::Rank(next) = named else {
            return None;
        };
        let i = next as usize;
        if *seen.get(i)? {
            return None;
        }
        seen[i] = true;
        at = reports.get(i)?.as_ref()?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::FaultAnswer;

    fn rep(rank: u32, ending: Ending, at: u64) -> Option<RankReport> {
        Some(RankReport {
            rank,
            pid: 100 + rank,
            ending,
            rounds: 5,
            at_unix_us: at,
            sigterm: false,
            fault: FaultAnswer::default(),
        })
    }

    fn err(named: Named) -> Ending {
        Ending::Error {
            kind: "PeerDied".into(),
            named,
            message: "m".into(),
        }
    }

    #[test]
    fn a_killed_rank_named_by_all() {
        let reports = vec![
            rep(0, err(Named::Rank(2)), 1_020_000),
            rep(1, err(Named::Rank(2)), 1_030_000),
            None,
        ];
        let v = judge(Fault::KillRank, Some(2), &reports, 1_000_000, false);
        assert!(v.handled && v.direct, "{v:?}");
        assert_eq!(v.named_ms, Some(30.0));
        assert!(v.wrong.is_empty());
    }

    #[test]
    fn a_stopped_rank_named_through_a_chain() {
        // Rank 1 timed out on the stopped rank 2; rank 0 learnt of rank 1's failure.
        let reports = vec![
            rep(0, err(Named::Rank(1)), 10),
            rep(1, err(Named::Rank(2)), 5),
            None,
        ];
        let v = judge(Fault::StopRank, Some(2), &reports, 0, false);
        assert!(v.handled && !v.direct, "{v:?}");
        // A chain that goes round in circles, or ends with nobody, names no one.
        let reports = vec![
            rep(0, err(Named::Rank(1)), 10),
            rep(1, err(Named::Rank(0)), 5),
            None,
        ];
        assert!(!judge(Fault::StopRank, Some(2), &reports, 0, false).handled);
        let reports = vec![rep(0, err(Named::Nobody), 10), None];
        assert!(!judge(Fault::KillRank, Some(1), &reports, 0, false).handled);
        // A killed rank must be named directly, and with PeerDied or Aborted.
        let reports = vec![
            rep(0, err(Named::Rank(1)), 10),
            rep(1, err(Named::Rank(2)), 5),
            None,
        ];
        assert!(!judge(Fault::KillRank, Some(2), &reports, 0, false).handled);
        let timeout = Ending::Error {
            kind: "Timeout".into(),
            named: Named::Rank(1),
            message: "m".into(),
        };
        let reports = vec![rep(0, timeout, 10), None];
        assert!(!judge(Fault::KillRank, Some(1), &reports, 0, false).handled);
    }

    #[test]
    fn the_launcher_named_by_all() {
        let reports = vec![
            rep(0, err(Named::Launcher), 10),
            rep(1, err(Named::Rank(0)), 12),
        ];
        // Through a rank that failed first is not enough: the first rank to see the launcher
        // die aborts the job saying so.
        let v = judge(Fault::KillLauncher, None, &reports, 0, false);
        assert!(!v.handled && !v.direct, "{v:?}");
        let reports = vec![
            rep(0, err(Named::Launcher), 10),
            rep(1, err(Named::Launcher), 12),
        ];
        let v = judge(Fault::KillLauncher, None, &reports, 0, false);
        assert!(v.handled && v.direct, "{v:?}");
        let reports = vec![rep(0, err(Named::Launcher), 10), None];
        assert!(!judge(Fault::KillLauncher, None, &reports, 0, false).handled);
    }

    #[test]
    fn survivable_faults() {
        let ok = vec![rep(0, Ending::Ok, 0), rep(1, Ending::Ok, 0)];
        assert!(judge(Fault::StaleHandle, Some(1), &ok, 0, true).handled);
        assert!(!judge(Fault::StaleHandle, Some(1), &ok, 0, false).handled);
        assert!(judge(Fault::None, None, &ok, 0, false).handled);
        // The victim failed with a Transport error, and the other rank names it.
        let transport = Ending::Error {
            kind: "Transport".into(),
            named: Named::Nobody,
            message: "out of descriptors".into(),
        };
        let failed = vec![rep(0, err(Named::Rank(1)), 9), rep(1, transport.clone(), 3)];
        let v = judge(Fault::FdLimit, Some(1), &failed, 0, true);
        assert!(v.handled && v.direct, "{v:?}");
        // Or names it as the owner of a segment it freed as it failed.
        let freed = Ending::Error {
            kind: "InvalidHandle".into(),
            named: Named::Rank(1),
            message: "handle to segment 3 of rank 1 refused: the segment has been freed".into(),
        };
        let named = vec![rep(0, freed, 9), rep(1, transport.clone(), 3)];
        assert!(judge(Fault::FdLimit, Some(1), &named, 0, true).handled);
        // With another kind, or for a kind whose victim must not fail, it is not handled.
        let other = vec![
            rep(0, err(Named::Rank(1)), 9),
            rep(1, err(Named::Nobody), 3),
        ];
        assert!(!judge(Fault::FdLimit, Some(1), &other, 0, true).handled);
        assert!(!judge(Fault::AllocHuge, Some(1), &failed, 0, true).handled);
        assert!(!judge(Fault::StaleHandle, Some(1), &failed, 0, true).handled);
        // Another rank failing instead is not the fault's answer.
        let failed = vec![rep(0, err(Named::Nobody), 9), rep(1, Ending::Ok, 3)];
        assert!(!judge(Fault::FdLimit, Some(1), &failed, 0, true).handled);
        // A write let through is a wrong result.
        let mut leaked = ok.clone();
        if let Some(r) = leaked[1].as_mut() {
            r.fault.accepted.push("a forged handle".into());
        }
        let v = judge(Fault::StaleHandle, Some(1), &leaked, 0, true);
        assert!(!v.handled && v.wrong.len() == 1, "{v:?}");
        let wrong = vec![
            rep(0, Ending::Wrong { what: "x".into() }, 0),
            rep(1, Ending::Ok, 0),
        ];
        assert_eq!(judge(Fault::None, None, &wrong, 0, false).wrong.len(), 1);
        assert_eq!(wrong_of(&wrong).len(), 1);
        // The self-tests are never handled.
        assert!(!judge(Fault::SelftestHang, Some(1), &ok, 0, true).handled);
    }
}
