//! What each job of a campaign is: drawn from the campaign's seed and the job's number alone,
//! so that a campaign is replayed exactly from its printed seed, and job 17 is the same job
//! whether the campaign runs 20 faults or 1,000.

use std::fmt;

use crate::fault::Fault;
use crate::rng::Rng;

/// A workload a rank mixes into its rounds (see [`crate::rank`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// A collective of random kind, size, root and algorithm.
    Coll,
    /// Two-sided messages: a ring of sendrecvs, all pairs non-blocking, or a wildcard gather.
    P2p,
    /// Active messages: a Medium echo, then a put and a get through the extended API.
    Am,
    /// A small CG solve, its answer checked against the known solution.
    Cg,
}

/// Every workload, in order.
pub const WORKLOADS: [Workload; 4] = [Workload::Coll, Workload::P2p, Workload::Am, Workload::Cg];

impl Workload {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Coll => "coll",
            Self::P2p => "p2p",
            Self::Am => "am",
            Self::Cg => "cg",
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One job of a campaign.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobPlan {
    /// Its number in the campaign (0-based).
    pub index: u64,
    /// Ranks.
    pub ranks: u32,
    /// The workloads its rounds draw from (at least one).
    pub mix: Vec<Workload>,
    /// The fault.
    pub fault: Fault,
    /// The rank that is killed, stopped or inflicts the fault on itself (`None` for the
    /// launcher and the control).
    pub victim: Option<u32>,
    /// Milliseconds between every rank being ready and the fault.
    pub delay_ms: u64,
    /// Milliseconds the job goes on after the victim inflicted a survivable fault, before
    /// the campaign stops it: rounds that meet the fault's consequences (200 to 1,000).
    pub after_ms: u64,
    /// The seed of the job's workload (every rank draws the same steps from it).
    pub seed: u64,
}

/// Draws job `index` of the campaign seeded `seed`: a size in `np`, a fault of `kinds`, a
/// victim, a non-empty workload mix and a delay of at most `max_delay_ms`.
pub fn draw(seed: u64, index: u64, np: (u32, u32), kinds: &[Fault], max_delay_ms: u64) -> JobPlan {
    let mut r = Rng::derive(seed, index);
    let ranks = u32::try_from(r.range(u64::from(np.0), u64::from(np.1))).unwrap_or(np.0);
    let fault = r.pick(kinds).copied().unwrap_or(Fault::None);
    let victim = u32::try_from(r.below(u64::from(ranks))).unwrap_or(0);
    let victim = match fault {
        Fault::None | Fault::KillLauncher => None,
        _ => Some(victim),
    };
    // A non-empty subset of the workloads, each in with probability 1/2.
    let mask = r.range(1, (1 << WORKLOADS.len()) - 1);
    let mix = WORKLOADS
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, w)| *w)
        .collect();
    let delay_ms = r.range(0, max_delay_ms);
    let after_ms = r.range(200, 1000);
    JobPlan {
        index,
        ranks,
        mix,
        fault,
        victim,
        delay_ms,
        after_ms,
        seed: r.next_u64(),
    }
}

/// Parses `--np`: `N` or `MIN:MAX`, each at least 2 (a fault needs a rank to observe it)
/// and at most `max`.
pub fn parse_np(s: &str, max: u32) -> Result<(u32, u32), String> {
    let num = |t: &str| -> Result<u32, String> {
        t.trim()
            .parse::<u32>()
            .map_err(|_| format!("--np `{s}`: `{}` is not a number of ranks", t.trim()))
    };
    let (lo, hi) = match s.split_once(':') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => {
            let n = num(s)?;
            (n, n)
        }
    };
    if lo < 2 {
        return Err(format!(
            "--np `{s}`: jobs need at least 2 ranks (a fault needs a rank that observes it)"
        ));
    }
    if lo > hi {
        return Err(format!("--np `{s}`: MIN is above MAX"));
    }
    if hi > max {
        return Err(format!("--np `{s}`: at most {max} ranks per job"));
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_jobs() {
        let kinds = Fault::all();
        for i in 0..200 {
            let a = draw(42, i, (2, 8), &kinds, 500);
            assert_eq!(a, draw(42, i, (2, 8), &kinds, 500));
            assert!((2..=8).contains(&a.ranks));
            assert!(!a.mix.is_empty());
            assert!(a.delay_ms <= 500);
            assert!(a.victim.is_none_or(|v| v < a.ranks));
            assert_eq!(
                a.victim.is_none(),
                matches!(a.fault, Fault::None | Fault::KillLauncher)
            );
        }
        let a: Vec<_> = (0..20).map(|i| draw(1, i, (2, 8), &kinds, 500)).collect();
        let b: Vec<_> = (0..20).map(|i| draw(2, i, (2, 8), &kinds, 500)).collect();
        assert_ne!(a, b);
        // Every kind, size and workload comes up.
        let many: Vec<_> = (0..500).map(|i| draw(3, i, (2, 8), &kinds, 500)).collect();
        for k in &kinds {
            assert!(many.iter().any(|j| j.fault == *k), "{k}");
        }
        for n in 2..=8 {
            assert!(many.iter().any(|j| j.ranks == n), "{n}");
        }
        for w in WORKLOADS {
            assert!(many.iter().any(|j| j.mix.contains(&w)), "{w}");
        }
    }

    #[test]
    fn rank_ranges() {
        assert_eq!(parse_np("2:8", 64), Ok((2, 8)));
        assert_eq!(parse_np("4", 64), Ok((4, 4)));
        assert!(parse_np("0", 64).unwrap_err().contains("at least 2"));
        assert!(parse_np("1:4", 64).unwrap_err().contains("at least 2"));
        assert!(
            parse_np("8:2", 64)
                .unwrap_err()
                .contains("MIN is above MAX")
        );
        assert!(parse_np("2:100", 64).unwrap_err().contains("at most 64"));
        assert!(parse_np("two", 64).unwrap_err().contains("not a number"));
        assert!(parse_np("2:", 64).is_err());
    }
}
