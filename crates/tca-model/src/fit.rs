//! Least-squares fits of Hockney's throughput curve to measurements, as seed 002 (sec. 4)
//! turns IMB output into a peak throughput B, a half-performance length M_1/2 and a latency
//! t_L.
//!
//! # What is minimised, and why relative residuals
//!
//! The model is the throughput formula `T(M) = B / (1 + M_1/2 / M)` (eq. 3), fitted in
//! throughput, not in time, as the paper does. The residual of point i is, by default,
//! **relative**: `(T(M_i) - T_i) / T_i` ([`Weighting::Relative`]). Measured sizes span three
//! to seven decades and throughput grows with them by orders of magnitude, so with absolute
//! residuals the few largest messages decide everything: B comes out well but M_1/2 (and
//! therefore t_L) is fitted to the points that say least about it, and small-message points
//! can be off by a factor without moving the fit. Timer noise is roughly proportional to the
//! time measured, which relative residuals also match: a 3 % wobble weighs the same at 1 KiB
//! and at 16 MiB. Minimising relative throughput error is also, to first order, minimising
//! relative time error, so the fitted curve is equally good read as a time model.
//! [`Weighting::Absolute`] (plain least squares in MB/s, which is what "least squares on the
//! throughput" means literally) is there to reproduce fits done that way.
//!
//! # How
//!
//! 1. A start from the linearised form `1/T = 1/B + (M_1/2 / B) (1/M)`: a weighted straight
//!    line through (1/M, 1/T), weights chosen so the line's residuals approximate the chosen
//!    throughput residuals.
//! 2. Levenberg-Marquardt on (ln B, ln M_1/2): logarithms keep both parameters positive and
//!    make the two (which differ by orders of magnitude) equally scaled.
//! 3. Checks: a fit whose M_1/2 runs to zero (throughput does not rise with size over the
//!    range) or whose B runs away (throughput still proportional to size at the largest
//!    message, so the peak is never seen) is an error that says so, not a number.
//!
//! # Throughput of what: the data volume
//!
//! IMB's throughput is message bytes over time. Seed 002 counts the data an operation moves:
//! Allreduce twice the message (sec. 4.2.4, "M is doubled"), Allgather np times (sec. 4.2.5).
//! Multiplying throughput by a constant k multiplies the fitted B by k and leaves M_1/2 (in
//! message bytes) unchanged, and t_L = k M_1/2 / B is then unchanged too; so a fit is done in
//! IMB's terms and [`Fit::scaled`] converts it ([`seed002_volume`] gives k).

use serde::Serialize;

use crate::hockney::Hockney;
use crate::record::Row;

/// How residuals are weighted (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Weighting {
    /// `(T_model - T) / T`: every point counts by its relative error (the default).
    #[default]
    Relative,
    /// `T_model - T` in MB/s: plain least squares in throughput.
    Absolute,
}

/// A fitted Hockney curve and how well it fits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    /// Peak throughput B, MB/s, counting `volume` x message bytes per call.
    pub b_mb_s: f64,
    /// Half-performance length M_1/2, in message bytes (the sizes of the points).
    pub m_half_bytes: f64,
    /// Start-up latency t_L = volume · M_1/2 / B, us.
    pub t_l_us: f64,
    /// Points used.
    pub points: usize,
    /// Smallest message size among the points, bytes.
    pub min_bytes: f64,
    /// Largest message size among the points, bytes.
    pub max_bytes: f64,
    /// Coefficient of determination of the throughput values (unweighted):
    /// `1 - Σ(T_model - T)² / Σ(T - mean T)²`.
    pub r2: f64,
    /// Root mean square of the relative throughput errors `(T_model - T) / T`.
    pub rms_rel_err: f64,
    /// The residual weighting used.
    pub weighting: Weighting,
    /// Data moved per message byte that the throughput counts (1: IMB's convention).
    pub volume: f64,
    /// Levenberg-Marquardt iterations taken.
    pub iterations: u32,
}

impl Fit {
    /// The fitted time model per message (B per message byte, i.e. `B / volume`).
    pub fn hockney(&self) -> Hockney {
        Hockney {
            b_mb_s: self.b_mb_s / self.volume,
            m_half_bytes: self.m_half_bytes,
        }
    }

    /// Fitted time of one call with a message of `m_bytes`, us.
    pub fn time_us(&self, m_bytes: f64) -> f64 {
        self.hockney().time_us(m_bytes)
    }

    /// Fitted throughput at `m_bytes`, MB/s, in this fit's volume convention.
    pub fn throughput_mb_s(&self, m_bytes: f64) -> f64 {
        self.hockney().throughput_mb_s(m_bytes) * self.volume
    }

    /// The same fit with throughput counting `volume` x message bytes per call (seed 002's
    /// convention for Allreduce and Allgather): B scales, M_1/2 and t_L do not. `volume` is
    /// absolute, not relative to the current one.
    pub fn scaled(&self, volume: f64) -> Result<Fit, FitError> {
        if !(volume.is_finite() && volume > 0.0) {
            return Err(FitError::BadVolume { volume });
        }
        Ok(Fit {
            b_mb_s: self.b_mb_s / self.volume * volume,
            volume,
            ..self.clone()
        })
    }
}

/// Why a fit failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    /// Fewer than three points.
    #[error("a Hockney fit needs at least 3 points, got {got}")]
    TooFewPoints {
        /// Points given.
        got: usize,
    },
    /// A size or throughput that is zero, negative, NaN or infinite.
    #[error(
        "point {index}: size {bytes} B, throughput {throughput} MB/s; both must be finite and positive"
    )]
    BadPoint {
        /// 0-based index of the point.
        index: usize,
        /// Its size.
        bytes: f64,
        /// Its throughput.
        throughput: f64,
    },
    /// Every point has the same size: B and M_1/2 cannot be told apart.
    #[error("all points have the same size ({bytes} B): B and M_1/2 cannot be separated")]
    OneSize {
        /// The size.
        bytes: f64,
    },
    /// The iteration did not settle.
    #[error("the fit did not converge in {iterations} iterations")]
    NotConverged {
        /// Iterations tried.
        iterations: u32,
    },
    /// Throughput keeps growing in proportion to size: the peak is never approached.
    #[error(
        "B is not determined: throughput still grows in proportion to size at the largest \
         message ({max_bytes} B); include larger messages"
    )]
    Unbounded {
        /// The largest size given.
        max_bytes: f64,
    },
    /// Throughput does not rise with size: the best M_1/2 would be zero or negative.
    #[error(
        "M_1/2 is not positive: throughput does not rise with message size between {min_bytes} \
         and {max_bytes} B; include smaller messages or check the data"
    )]
    NoRise {
        /// Smallest size.
        min_bytes: f64,
        /// Largest size.
        max_bytes: f64,
    },
    /// No rows matched a selection.
    #[error("no rows of {what} with 0 < bytes in [{min}, {max}]")]
    NoRows {
        /// The benchmark (and implementation) asked for.
        what: String,
        /// Range start.
        min: u64,
        /// Range end.
        max: u64,
    },
    /// The selected rows come from runs with different rank counts.
    #[error("rows of {what} come from runs of {ranks:?} ranks; choose one rank count")]
    MixedRanks {
        /// The benchmark (and implementation) asked for.
        what: String,
        /// The rank counts found.
        ranks: Vec<u32>,
    },
    /// A size range whose start is above its end.
    #[error("empty size range {min}:{max}")]
    BadRange {
        /// Start.
        min: u64,
        /// End.
        max: u64,
    },
    /// A data volume factor that is not a positive number.
    #[error("data volume factor {volume} must be positive")]
    BadVolume {
        /// The factor.
        volume: f64,
    },
}

/// Fits `T = B / (1 + M_1/2 / M)` to `(bytes, throughput MB/s)` points with relative
/// residuals (see the module docs).
pub fn fit_hockney(points: &[(f64, f64)]) -> Result<Fit, FitError> {
    fit_hockney_weighted(points, Weighting::Relative)
}

const MAX_ITERATIONS: u32 = 500;

/// Fits `T = B / (1 + M_1/2 / M)` to `(bytes, throughput MB/s)` points with the chosen
/// residual weighting.
pub fn fit_hockney_weighted(points: &[(f64, f64)], weighting: Weighting) -> Result<Fit, FitError> {
    if points.len() < 3 {
        return Err(FitError::TooFewPoints { got: points.len() });
    }
    for (index, &(bytes, throughput)) in points.iter().enumerate() {
        let ok = |x: f64| x.is_finite() && x > 0.0;
        if !ok(bytes) || !ok(throughput) {
            return Err(FitError::BadPoint {
                index,
                bytes,
                throughput,
            });
        }
    }
    let min_bytes = points.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let max_bytes = points.iter().map(|p| p.0).fold(0.0, f64::max);
    if min_bytes == max_bytes {
        return Err(FitError::OneSize { bytes: min_bytes });
    }
    let t_max = points.iter().map(|p| p.1).fold(0.0, f64::max);
    // Residual weights: relative, or absolute scaled by the largest throughput so that the
    // cost is of order one either way (the minimiser is the same).
    let weight = |t: f64| match weighting {
        Weighting::Relative => 1.0 / t,
        Weighting::Absolute => 1.0 / t_max,
    };

    let (b0, h0) = linearised_start(points, weighting, max_bytes, t_max);
    let cost_at = |lb: f64, lh: f64| -> f64 {
        let (b, h) = (lb.exp(), lh.exp());
        points
            .iter()
            .map(|&(m, t)| {
                let r = weight(t) * (b * m / (m + h) - t);
                r * r
            })
            .sum()
    };

    let (mut lb, mut lh) = (b0.ln(), h0.ln());
    let mut cost = cost_at(lb, lh);
    let mut lambda = 1e-3;
    let mut iterations = 0;
    let mut converged = false;
    while iterations < MAX_ITERATIONS {
        iterations += 1;
        let (b, h) = (lb.exp(), lh.exp());
        // Normal equations of the residuals' Jacobian in (ln B, ln H).
        let (mut a11, mut a12, mut a22, mut g1, mut g2) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(m, t) in points {
            let w = weight(t);
            let tm = b * m / (m + h);
            let r = w * (tm - t);
            let j1 = w * tm;
            let j2 = -w * tm * h / (m + h);
            a11 += j1 * j1;
            a12 += j1 * j2;
            a22 += j2 * j2;
            g1 += j1 * r;
            g2 += j2 * r;
        }
        if g1.abs().max(g2.abs()) <= 1e-15 * cost.max(1e-300) {
            converged = true;
            break;
        }
        // Damped steps until one lowers the cost; a damping that no step survives means the
        // current point is as good as it gets.
        let mut accepted = None;
        while lambda < 1e16 {
            let (d11, d22) = (a11 * (1.0 + lambda), a22 * (1.0 + lambda));
            let det = d11 * d22 - a12 * a12;
            if det > 0.0 && det.is_finite() {
                let s1 = -(d22 * g1 - a12 * g2) / det;
                let s2 = -(d11 * g2 - a12 * g1) / det;
                let c = cost_at(lb + s1, lh + s2);
                if c.is_finite() && c <= cost {
                    accepted = Some((s1, s2, c));
                    break;
                }
            }
            lambda *= 4.0;
        }
        let Some((s1, s2, c)) = accepted else {
            converged = true;
            break;
        };
        lb += s1;
        lh += s2;
        // Running off to B = infinity or M_1/2 = 0 (far past anything a start could
        // overshoot to) means the optimum is at that boundary: stop and say which.
        if lb.exp() > 1e6 * t_max {
            return Err(FitError::Unbounded { max_bytes });
        }
        if lh.exp() < 1e-9 * min_bytes {
            return Err(FitError::NoRise {
                min_bytes,
                max_bytes,
            });
        }
        let gain = cost - c;
        cost = c;
        lambda = (lambda / 3.0).max(1e-12);
        if s1.abs().max(s2.abs()) < 1e-12 || gain <= 1e-15 * cost {
            converged = true;
            break;
        }
    }
    let (b, h) = (lb.exp(), lh.exp());
    if !(b.is_finite() && h.is_finite()) || b > 1e3 * t_max {
        return Err(FitError::Unbounded { max_bytes });
    }
    // M_1/2 a million times below every size: the curve is flat over the data, the fit has
    // run into the boundary M_1/2 = 0, and the data wants a negative one.
    if h < 1e-6 * min_bytes {
        return Err(FitError::NoRise {
            min_bytes,
            max_bytes,
        });
    }
    if !converged {
        return Err(FitError::NotConverged { iterations });
    }
    let n = points.len() as f64;
    let mean = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut ss_res, mut ss_tot, mut rel2) = (0.0, 0.0, 0.0);
    for &(m, t) in points {
        let tm = b * m / (m + h);
        ss_res += (tm - t) * (tm - t);
        ss_tot += (t - mean) * (t - mean);
        rel2 += ((tm - t) / t).powi(2);
    }
    let r2 = if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        f64::from(u8::from(ss_res == 0.0))
    };
    Ok(Fit {
        b_mb_s: b,
        m_half_bytes: h,
        t_l_us: h / b,
        points: points.len(),
        min_bytes,
        max_bytes,
        r2,
        rms_rel_err: (rel2 / n).sqrt(),
        weighting,
        volume: 1.0,
        iterations,
    })
}

/// The start of the iteration: the straight line `1/T = a + c (1/M)` (a = 1/B, c = M_1/2/B)
/// by weighted least squares. A relative error e in T is a relative error e in 1/T, so the
/// relative weighting weighs point i by `T_i²`; an absolute error d in T is an error
/// `d / T_i²` in 1/T, so absolute weighting weighs it by `T_i⁴`. Where the line has a
/// non-positive intercept or slope (noise, or data that does not level off), a start from
/// the data's extremes is used instead: the iteration then decides.
fn linearised_start(points: &[(f64, f64)], w: Weighting, max_bytes: f64, t_max: f64) -> (f64, f64) {
    let (mut s, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(m, t) in points {
        let v = match w {
            Weighting::Relative => (t / t_max).powi(2),
            Weighting::Absolute => (t / t_max).powi(4),
        };
        // Scale x and y to order one so the sums stay well conditioned.
        let x = max_bytes / m;
        let y = t_max / t;
        s += v;
        sx += v * x;
        sy += v * y;
        sxx += v * x * x;
        sxy += v * x * y;
    }
    let det = s * sxx - sx * sx;
    if det > 0.0 {
        let c = (s * sxy - sx * sy) / det;
        let a = (sy - c * sx) / s;
        if a > 0.0 && c > 0.0 {
            // 1/T = a/t_max + (c/t_max)(max_bytes/M): B = t_max/a, M_1/2 = c max_bytes / a.
            return (t_max / a, c * max_bytes / a);
        }
    }
    // Fallback: peak twice the best throughput seen, M_1/2 putting the largest point on the
    // curve.
    let t_at_max = points
        .iter()
        .filter(|p| p.0 == max_bytes)
        .map(|p| p.1)
        .fold(0.0, f64::max);
    let b = 2.0 * t_max;
    let h = (max_bytes * (b / t_at_max - 1.0)).max(1e-3 * max_bytes);
    (b, h)
}

/// The data volume per message byte that seed 002 counts in throughput: 2 for Allreduce
/// (a reduce and a broadcast each move the message, sec. 4.2.4), the rank count for
/// Allgather (every rank's block reaches every rank, sec. 4.2.5), 1 otherwise (PingPong,
/// Bcast, and anything the paper does not treat).
pub fn seed002_volume(benchmark: &str, ranks: u32) -> f64 {
    if benchmark.eq_ignore_ascii_case("allreduce") {
        2.0
    } else if benchmark.eq_ignore_ascii_case("allgather") {
        f64::from(ranks.max(1))
    } else {
        1.0
    }
}

/// Which rows a fit uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection<'a> {
    /// Benchmark name, compared without regard to ASCII case ("Bcast", "bcast").
    pub benchmark: &'a str,
    /// Only rows of this implementation (exact name), or any.
    pub implementation: Option<&'a str>,
    /// Only rows of runs with this many ranks, or any (then they must all agree).
    pub ranks: Option<u32>,
    /// Inclusive message size range in bytes; size-0 rows are never used.
    pub range: (u64, u64),
    /// Residual weighting.
    pub weighting: Weighting,
    /// Count throughput as seed 002 does ([`seed002_volume`]) instead of IMB's bytes/time.
    pub seed002_volume: bool,
}

impl<'a> Selection<'a> {
    /// All sizes of `benchmark`, any implementation, relative residuals, IMB throughput.
    pub fn new(benchmark: &'a str) -> Selection<'a> {
        Selection {
            benchmark,
            implementation: None,
            ranks: None,
            range: (1, u64::MAX),
            weighting: Weighting::Relative,
            seed002_volume: false,
        }
    }

    fn what(&self) -> String {
        let mut w = self.benchmark.to_string();
        if let Some(i) = self.implementation {
            w += &format!(" ({i})");
        }
        if let Some(r) = self.ranks {
            w += &format!(" on {r} ranks");
        }
        w
    }

    /// The rows this selection takes, in their order.
    pub fn select<'r>(&self, rows: &'r [Row]) -> Vec<&'r Row> {
        rows.iter()
            .filter(|r| {
                r.benchmark.eq_ignore_ascii_case(self.benchmark)
                    && self.implementation.is_none_or(|i| r.implementation == i)
                    && self.ranks.is_none_or(|n| r.ranks == n)
                    && r.bytes > 0
                    && r.bytes >= self.range.0
                    && r.bytes <= self.range.1
            })
            .collect()
    }
}

/// Fits the rows of `benchmark` (and `implementation`, if given) whose size lies in
/// `range` (inclusive; size 0 excluded) by [`fit_hockney`] on [`Row::throughput_mb_s`].
/// The rows must all come from one rank count; [`fit_selection`] can choose one.
pub fn fit_rows(
    rows: &[Row],
    benchmark: &str,
    implementation: Option<&str>,
    range: (u64, u64),
) -> Result<Fit, FitError> {
    fit_selection(
        rows,
        &Selection {
            implementation,
            range,
            ..Selection::new(benchmark)
        },
    )
}

/// Fits the rows a [`Selection`] takes.
pub fn fit_selection(rows: &[Row], sel: &Selection<'_>) -> Result<Fit, FitError> {
    let (min, max) = sel.range;
    if min > max {
        return Err(FitError::BadRange { min, max });
    }
    let picked = sel.select(rows);
    let Some(first) = picked.first() else {
        return Err(FitError::NoRows {
            what: sel.what(),
            min,
            max,
        });
    };
    let mut ranks: Vec<u32> = picked.iter().map(|r| r.ranks).collect();
    ranks.sort_unstable();
    ranks.dedup();
    if ranks.len() > 1 {
        return Err(FitError::MixedRanks {
            what: sel.what(),
            ranks,
        });
    }
    let points: Vec<(f64, f64)> = picked
        .iter()
        .map(|r| (r.bytes as f64, r.throughput_mb_s()))
        .collect();
    let fit = fit_hockney_weighted(&points, sel.weighting)?;
    if sel.seed002_volume {
        fit.scaled(seed002_volume(&first.benchmark, first.ranks))
    } else {
        Ok(fit)
    }
}

/// One (implementation, benchmark, ranks) group of rows: what one curve is fitted to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// Implementation name.
    pub implementation: String,
    /// Benchmark name.
    pub benchmark: String,
    /// Ranks in the run.
    pub ranks: u32,
}

/// The groups of `rows`, in order of first appearance.
pub fn groups(rows: &[Row]) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for r in rows {
        if !out.iter().any(|g| {
            g.implementation == r.implementation && g.benchmark == r.benchmark && g.ranks == r.ranks
        }) {
            out.push(Group {
                implementation: r.implementation.clone(),
                benchmark: r.benchmark.clone(),
                ranks: r.ranks,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny deterministic generator (Knuth's MMIX LCG): uniform in [0, 1).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    fn sizes(lo: u32, hi: u32) -> Vec<f64> {
        (lo..=hi).map(|k| f64::from(1u32 << k)).collect()
    }

    fn curve(b: f64, h: f64, sizes: &[f64]) -> Vec<(f64, f64)> {
        let model = Hockney {
            b_mb_s: b,
            m_half_bytes: h,
        };
        sizes
            .iter()
            .map(|&m| (m, model.throughput_mb_s(m)))
            .collect()
    }

    fn close(x: f64, want: f64, rel: f64) -> bool {
        ((x - want) / want).abs() <= rel
    }

    #[test]
    fn exact_data_is_recovered() {
        for (b, h, lo, hi) in [
            (5000.0, 34_825.0, 10, 24),
            (4226.0, 7.919e6, 17, 26),
            (1.2e4, 1.8e6, 1, 30),
            (0.8, 3.0, 0, 6),
        ] {
            for w in [Weighting::Relative, Weighting::Absolute] {
                let f = fit_hockney_weighted(&curve(b, h, &sizes(lo, hi)), w).unwrap();
                assert!(close(f.b_mb_s, b, 1e-6), "{f:?}");
                assert!(close(f.m_half_bytes, h, 1e-6), "{f:?}");
                assert!(close(f.t_l_us, h / b, 1e-6), "{f:?}");
                assert!(f.r2 > 0.999_999_999 && f.rms_rel_err < 1e-7, "{f:?}");
            }
        }
    }

    #[test]
    fn noisy_data_is_recovered_within_a_few_percent() {
        let mut rng = Lcg(2017);
        for (b, h, lo, hi) in [
            (4685.0, 4.894e4, 13, 25),
            (3616.0, 1.010e7, 17, 27),
            (13_210.0, 6917.0, 10, 22),
        ] {
            let pts: Vec<(f64, f64)> = curve(b, h, &sizes(lo, hi))
                .into_iter()
                .map(|(m, t)| (m, t * (1.0 + 0.06 * (rng.next() - 0.5))))
                .collect();
            let f = fit_hockney(&pts).unwrap();
            assert!(close(f.b_mb_s, b, 0.03), "{f:?}");
            assert!(close(f.m_half_bytes, h, 0.06), "{f:?}");
            assert!(f.rms_rel_err < 0.03 && f.r2 > 0.99, "{f:?}");
            assert_eq!(f.points, pts.len());
        }
    }

    #[test]
    fn both_weightings_recover_the_curve_relative_fits_small_sizes_better() {
        // 3 % noise, sizes over 7 decades: both are consistent; the relative residuals give
        // the smaller relative error over the sizes, which is what they minimise.
        let mut rng = Lcg(7);
        let pts: Vec<(f64, f64)> = curve(5000.0, 34_825.0, &sizes(4, 26))
            .into_iter()
            .map(|(m, t)| (m, t * (1.0 + 0.06 * (rng.next() - 0.5))))
            .collect();
        let rel = fit_hockney(&pts).unwrap();
        let abs = fit_hockney_weighted(&pts, Weighting::Absolute).unwrap();
        for f in [&rel, &abs] {
            assert!(close(f.b_mb_s, 5000.0, 0.02), "{f:?}");
            assert!(close(f.m_half_bytes, 34_825.0, 0.05), "{f:?}");
        }
        assert_eq!(abs.weighting, Weighting::Absolute);
        assert!(rel.rms_rel_err < abs.rms_rel_err, "{rel:?} {abs:?}");
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        assert_eq!(
            fit_hockney(&[(1.0, 1.0), (2.0, 1.5)]),
            Err(FitError::TooFewPoints { got: 2 })
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = fit_hockney(&[(1.0, 1.0), (2.0, 1.5), (bad, 2.0)]).unwrap_err();
            assert!(matches!(e, FitError::BadPoint { index: 2, .. }), "{e}");
            let e = fit_hockney(&[(1.0, 1.0), (2.0, bad), (4.0, 2.0)]).unwrap_err();
            assert!(matches!(e, FitError::BadPoint { index: 1, .. }), "{e}");
        }
        let e = fit_hockney(&[(8.0, 1.0), (8.0, 1.5), (8.0, 2.0)]).unwrap_err();
        assert!(e.to_string().contains("same size"), "{e}");
    }

    #[test]
    fn data_without_a_peak_or_a_rise_is_an_error() {
        // Throughput exactly proportional to size: pure latency, no peak in sight.
        let linear: Vec<(f64, f64)> = sizes(0, 12).iter().map(|&m| (m, m / 3.0)).collect();
        let e = fit_hockney(&linear).unwrap_err();
        assert!(matches!(e, FitError::Unbounded { .. }), "{e}");
        assert!(e.to_string().contains("larger messages"), "{e}");
        // Throughput falling with size: the best M_1/2 is negative.
        let falling: Vec<(f64, f64)> = sizes(10, 20)
            .iter()
            .map(|&m| (m, 1000.0 * (1.0 + 1e4 / m)))
            .collect();
        let e = fit_hockney(&falling).unwrap_err();
        assert!(matches!(e, FitError::NoRise { .. }), "{e}");
    }

    fn row(implementation: &str, benchmark: &str, ranks: u32, bytes: u64, t: f64) -> Row {
        Row {
            implementation: implementation.into(),
            benchmark: benchmark.into(),
            algorithm: "-".into(),
            ranks,
            bytes,
            repetitions: 10,
            t_min_us: t,
            t_max_us: t,
            t_avg_us: t,
            mbytes_per_sec: None,
            overlap: None,
        }
    }

    #[test]
    fn rows_are_selected_and_scaled() {
        let model = Hockney::from_latency(2000.0, 5.0);
        let mut rows = vec![row("tca", "Allreduce", 4, 0, 1.0)];
        for k in 0..20 {
            let m = 1u64 << k;
            rows.push(row("tca", "Allreduce", 4, m, model.time_us(m as f64)));
            rows.push(row("mpi", "Allreduce", 4, m, 2.0 * model.time_us(m as f64)));
        }
        let f = fit_rows(&rows, "allreduce", Some("tca"), (1, u64::MAX)).unwrap();
        assert_eq!(f.points, 20);
        assert!(close(f.b_mb_s, 2000.0, 1e-6) && close(f.t_l_us, 5.0, 1e-6));
        // Seed 002 counts Allreduce throughput on twice the message: B doubles, t_L stays.
        let sel = Selection {
            implementation: Some("tca"),
            seed002_volume: true,
            ..Selection::new("Allreduce")
        };
        let g = fit_selection(&rows, &sel).unwrap();
        assert!(close(g.b_mb_s, 4000.0, 1e-6) && close(g.t_l_us, 5.0, 1e-6));
        assert!(close(g.m_half_bytes, f.m_half_bytes, 1e-9));
        assert!(close(g.time_us(1e5), model.time_us(1e5), 1e-6));
        let f = fit_rows(&rows, "Allreduce", Some("tca"), (1024, 65536)).unwrap();
        assert_eq!(f.points, 7);
        assert_eq!((f.min_bytes, f.max_bytes), (1024.0, 65536.0));

        let e = fit_rows(&rows, "Bcast", None, (1, 10)).unwrap_err();
        assert!(e.to_string().contains("no rows of Bcast"), "{e}");
        let e = fit_rows(&rows, "Allreduce", None, (10, 1)).unwrap_err();
        assert_eq!(e, FitError::BadRange { min: 10, max: 1 });
        rows.push(row("tca", "Allreduce", 8, 64, 10.0));
        let e = fit_rows(&rows, "Allreduce", Some("tca"), (1, u64::MAX)).unwrap_err();
        assert!(matches!(e, FitError::MixedRanks { ref ranks, .. } if ranks == &[4, 8]));
        let sel = Selection {
            implementation: Some("tca"),
            ranks: Some(4),
            ..Selection::new("Allreduce")
        };
        assert!(fit_selection(&rows, &sel).is_ok());
        assert_eq!(groups(&rows).len(), 3);
    }

    #[test]
    fn volume() {
        assert_eq!(seed002_volume("Allreduce", 384), 2.0);
        assert_eq!(seed002_volume("Allgather", 384), 384.0);
        assert_eq!(seed002_volume("Bcast", 384), 1.0);
        assert_eq!(seed002_volume("PingPong", 2), 1.0);
        let f = fit_hockney(&curve(1.0, 2.0, &sizes(0, 8))).unwrap();
        assert!(f.scaled(0.0).is_err() && f.scaled(f64::NAN).is_err());
    }
}
