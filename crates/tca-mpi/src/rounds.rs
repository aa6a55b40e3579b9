//! Alternating rounds of a comparison's halves (`--rounds`), with the machine's floor before
//! each half.
//!
//! On the machines we measure on, the virtual CPUs move between physical cores: the
//! cache-line half round trip flips between about 22 and 200 ns, sometimes within seconds. A
//! comparison whose two halves run one after the other can then compare two different
//! machines. So a command runs its halves in alternating rounds ([`alternate`]), keeps each
//! cell's median round, and measures the floor before each half ([`line_floor_ns`]): where
//! the floors differ the note ([`note`]) says so.

use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::Result;

/// What [`alternate`] measured: each half's results, round by round, and the floor before
/// each half of each round in turn, then after the last.
#[derive(Debug)]
pub struct Rounds<T> {
    /// `halves[h][r]`: half `h`'s result of round `r`.
    pub halves: Vec<Vec<T>>,
    /// The cache-line half round trip (ns) before each half of each round, in the order they
    /// ran, then after the last (`None` where not measured).
    pub floors: Vec<Option<f64>>,
}

/// Runs `halves` (at least one) in turn, `rounds` times (at least once), measuring the floor
/// before each half and after the last where `floors` ([`line_floor_ns`]).
pub fn alternate<T>(
    rounds: u32,
    floors: bool,
    halves: &mut [&mut dyn FnMut() -> Result<T>],
) -> Result<Rounds<T>> {
    debug_assert!(!halves.is_empty(), "a comparison has at least one half");
    let floor = || floors.then(line_floor_ns).flatten();
    let mut out = Rounds {
        halves: halves.iter().map(|_| Vec::new()).collect(),
        floors: Vec::new(),
    };
    for _ in 0..rounds.max(1) {
        for (h, half) in halves.iter_mut().enumerate() {
            out.floors.push(floor());
            out.halves[h].push(half()?);
        }
    }
    out.floors.push(floor());
    Ok(out)
}

/// The smallest and largest of `values`; `None` if there are none.
pub fn span(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values.into_iter().fold(None, |acc, x| match acc {
        None => Some((x, x)),
        Some((lo, hi)) => Some((f64::min(lo, x), f64::max(hi, x))),
    })
}

/// The range of the round pairs' ratios `a[k] / b[k]` (two halves' figures, round by round);
/// `None` unless both have the same, non-zero number of rounds.
pub fn ratio_range(a: &[f64], b: &[f64]) -> Option<(f64, f64)> {
    if a.len() != b.len() {
        return None;
    }
    span(a.iter().zip(b).map(|(a, b)| a / b))
}

/// The index of the median of `values` (the lower of the middle two for an even count);
/// `None` if empty.
pub fn median_index(values: &[f64]) -> Option<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    order.get(values.len().saturating_sub(1) / 2).copied()
}

/// The cache-line half round trip between two threads of this process, ns: the median of
/// three rounds of 20,000 round trips (after 5,000 of warm-up) on one word, as `tca bench
/// floor` bounces one between two processes. What the parent of a comparison measures before
/// each half, so that a half that ran while the machine's cores were farther apart shows as
/// such (this machine's virtual CPUs move: BENCHMARKS.md). `None` with fewer than two cores (a
/// pure spin cannot share one) or when the measurement took over half a second (other load
/// kept a thread off its core: no floor to speak of).
pub fn line_floor_ns() -> Option<f64> {
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::time::Duration;

    #[repr(align(128))]
    struct Line(AtomicU64);

    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return None;
    }
    let line = Line(AtomicU64::new(0));
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // The partner answers each odd value with the next even one until told to stop.
        s.spawn(|| {
            let mut expect = 1;
            loop {
                if line.0.load(Ordering::Acquire) == expect {
                    line.0.store(expect + 1, Ordering::Release);
                    expect += 2;
                } else if stop.load(Ordering::Relaxed) {
                    break;
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        let deadline = Instant::now() + Duration::from_millis(500);
        let mut v = 0u64;
        let mut rounds = Vec::new();
        // Counted across round trips, so that the deadline is looked at however short each.
        let mut spins = 0u32;
        'measure: for (k, n) in [5_000u64, 20_000, 20_000, 20_000].into_iter().enumerate() {
            let t0 = Instant::now();
            for _ in 0..n {
                line.0.store(v + 1, Ordering::Release);
                v += 2;
                while line.0.load(Ordering::Acquire) != v {
                    std::hint::spin_loop();
                    spins = spins.wrapping_add(1);
                    if spins % 4096 == 0 && Instant::now() > deadline {
                        rounds.clear();
                        break 'measure;
                    }
                }
            }
            if k > 0 {
                rounds.push(t0.elapsed().as_secs_f64() * 1e9 / (2 * n) as f64);
            }
        }
        stop.store(true, Ordering::Relaxed);
        rounds.sort_by(f64::total_cmp);
        rounds.get(1).copied()
    })
}

/// What the rounds and the floors before each half say (a note for the report): `lines`
/// holds the cache-line half round trip (ns) before each half of each round in turn (`names`
/// in order, at least one), then after the last.
pub fn note(rounds: u32, names: &[String], lines: &[Option<f64>]) -> String {
    let ns = |x: &Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}"));
    let mut s = if rounds > 1 {
        format!(
            "{rounds} rounds{}: each figure is its implementation's median round; ",
            if names.len() > 1 {
                format!(" alternating {}", names.join(", then "))
            } else {
                String::new()
            }
        )
    } else {
        String::new()
    };
    let per: Vec<String> = lines
        .chunks(names.len())
        .take(rounds as usize)
        .enumerate()
        .map(|(r, l)| {
            let each: Vec<String> = names
                .iter()
                .zip(l)
                .map(|(n, x)| format!("{n} {}", ns(x)))
                .collect();
            format!("round {}: {}", r + 1, each.join(", "))
        })
        .collect();
    s += &format!(
        "cache-line half round trip before each half (2 threads of this command), ns: {}; after \
         the last {}",
        per.join("; "),
        ns(lines.last().unwrap_or(&None))
    );
    if let Some((lo, hi)) = span(lines.iter().flatten().copied())
        && hi > 2.0 * lo
    {
        s += &format!(
            ". THE FLOOR MOVED ({lo:.1}-{hi:.1} ns): the machine's cores moved apart or together \
             during the run, and halves measured apart compare different machines; compare \
             rounds whose floors agree, or run again"
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::{alternate, median_index, note, ratio_range};
    use anyhow::Result;

    #[test]
    fn the_rounds_note_gives_every_halfs_floor_and_flags_a_move() {
        let names = ["tca".to_string(), "Open MPI 4.1.4".to_string()];
        let steady = [Some(24.0), Some(25.5), Some(23.9), Some(24.2), Some(24.8)];
        let s = note(2, &names, &steady);
        assert!(
            s.starts_with(
                "2 rounds alternating tca, then Open MPI 4.1.4: each figure is its \
                 implementation's median round; "
            ),
            "{s}"
        );
        assert!(
            s.contains(
                "ns: round 1: tca 24.0, Open MPI 4.1.4 25.5; round 2: tca 23.9, Open MPI 4.1.4 \
                 24.2; after the last 24.8"
            ),
            "{s}"
        );
        assert!(!s.contains("MOVED"), "{s}");
        let moved = [Some(24.0), Some(185.0), Some(24.5)];
        let s = note(1, &names, &moved);
        assert!(s.starts_with("cache-line half round trip"), "{s}");
        assert!(s.contains("THE FLOOR MOVED (24.0-185.0 ns)"), "{s}");
        // One implementation, no floor (a single core): dashes, nothing flagged.
        let s = note(2, &names[..1], &[None, None, None]);
        assert!(
            s.contains("round 1: tca -; round 2: tca -; after the last -"),
            "{s}"
        );
        assert!(!s.contains("alternating") && !s.contains("MOVED"), "{s}");
    }

    #[test]
    fn rounds_alternate_the_halves_and_the_median_is_the_lower_middle() {
        let (mut a, mut b) = (0, 0);
        let r = {
            let mut ha = || -> Result<u32> {
                a += 1;
                Ok(a)
            };
            let mut hb = || -> Result<u32> {
                b += 10;
                Ok(b)
            };
            alternate(3, false, &mut [&mut ha, &mut hb]).unwrap()
        };
        assert_eq!(r.halves, vec![vec![1, 2, 3], vec![10, 20, 30]]);
        assert_eq!(r.floors, vec![None; 7]);
        assert_eq!(median_index(&[3.0, 1.0, 2.0]), Some(2));
        assert_eq!(median_index(&[4.0, 1.0]), Some(1));
        assert_eq!(median_index(&[]), None);
        assert_eq!(
            ratio_range(&[1.0, 3.0, 2.0], &[2.0, 2.0, 4.0]),
            Some((0.5, 1.5))
        );
        assert_eq!(ratio_range(&[1.0], &[1.0, 2.0]), None);
        assert_eq!(ratio_range(&[], &[]), None);
        let mut fails = || -> Result<u32> { anyhow::bail!("half failed") };
        assert!(alternate(2, false, &mut [&mut fails]).is_err());
    }
}
