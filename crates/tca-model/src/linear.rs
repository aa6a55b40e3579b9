//! Non-negative linear least squares with relative residuals: how `tca model calibrate` fits
//! the parameters of tca's algorithm cost models to measured times.
//!
//! # The problem
//!
//! A cost model predicts a time as a dot product `c · θ` of coefficients `c` (what an
//! algorithm does at one rank count and size: steps, messages, bytes copied, bytes reduced)
//! and parameters `θ` (what the machine charges for each: microseconds per step, per message,
//! per byte). Given measured times `t_i` with their coefficient rows `c_i`, the fit minimises
//!
//! ```text
//!     sum_i ((c_i · θ - t_i) / t_i)^2    subject to θ >= 0
//! ```
//!
//! Relative residuals for the same reason as the Hockney fits ([`crate::fit`]): the times span
//! five decades (0.1 us to 10 ms), and with absolute residuals the largest messages would
//! decide every parameter, leaving the latency terms to chance. Non-negativity because every
//! parameter is a cost: a negative per-step time that happens to improve the fit would make the
//! model prefer algorithms with more steps, which is nonsense; a parameter the data cannot see
//! comes out as zero instead.
//!
//! # How
//!
//! Lawson and Hanson's active-set algorithm (Solving Least Squares Problems, 1974, ch. 23) on
//! the row-scaled system, with columns scaled to unit norm, and each unconstrained sub-problem
//! solved by Householder QR. A column that is (numerically) a combination of the columns
//! already in the solution is left out at zero rather than allowed to make the solve
//! ill-conditioned, so collinear coefficients (two parameters that the measured algorithms
//! always use in the same proportion) give a valid fit, with the weight on one of them.
//!
//! Models whose cost is the larger of two schedules (a root that sends to everyone, or the
//! receivers it sends to, whichever is slower) are linear only once the slower one is known,
//! and which one is slower depends on the parameters: [`fit_piecewise`] alternates between
//! choosing the active pieces at the current parameters and refitting, keeping the best fit.

use serde::Serialize;

/// Why a fit could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinearError {
    /// No points, or no parameters.
    #[error("nothing to fit: {0}")]
    Empty(&'static str),
    /// A coefficient row has the wrong length.
    #[error("point {point} has {got} coefficients, the model has {want} parameters")]
    Shape {
        /// Index of the point.
        point: usize,
        /// Coefficients given.
        got: usize,
        /// Parameters of the model.
        want: usize,
    },
    /// A measured time that is not a positive finite number.
    #[error("point {point}: measured time {value} is not a positive number of microseconds")]
    BadTime {
        /// Index of the point.
        point: usize,
        /// The value.
        value: f64,
    },
    /// A coefficient that is not a finite number >= 0.
    #[error("point {point}: coefficient {index} is {value}, not a finite number >= 0")]
    BadCoefficient {
        /// Index of the point.
        point: usize,
        /// Index of the coefficient.
        index: usize,
        /// The value.
        value: f64,
    },
    /// Every coefficient of every point is zero: no parameter can be seen.
    #[error("the coefficients are all zero: the points say nothing about the parameters")]
    Degenerate,
}

/// A fitted parameter vector and how well it reproduces the points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinearFit {
    /// The parameters, each >= 0, in the order of the coefficients.
    pub params: Vec<f64>,
    /// Points fitted.
    pub points: usize,
    /// Root mean square of the relative errors `(predicted - measured) / measured`.
    pub rms_rel_err: f64,
    /// Largest relative error in magnitude (signed).
    pub worst_rel_err: f64,
    /// Index of the point with the largest error.
    pub worst_point: usize,
}

/// Solves `min |A x - b|` subject to `x >= 0` (Lawson-Hanson). `a` is row-major, `m` rows of
/// `n` columns. Columns that are numerically dependent on those already in use stay at zero.
pub fn nnls(a: &[Vec<f64>], b: &[f64]) -> Result<Vec<f64>, LinearError> {
    let m = a.len();
    if m == 0 {
        return Err(LinearError::Empty("no points"));
    }
    let n = a[0].len();
    if n == 0 {
        return Err(LinearError::Empty("no parameters"));
    }
    for (i, row) in a.iter().enumerate() {
        if row.len() != n {
            return Err(LinearError::Shape {
                point: i,
                got: row.len(),
                want: n,
            });
        }
    }
    // Columns scaled to unit norm: parameters of very different sizes (us per step, us per
    // byte) become comparable, which the tolerances below rely on.
    let norms: Vec<f64> = (0..n)
        .map(|j| a.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt())
        .collect();
    if norms.iter().all(|&s| s == 0.0) {
        return Err(LinearError::Degenerate);
    }
    let scaled: Vec<Vec<f64>> = a
        .iter()
        .map(|r| {
            r.iter()
                .zip(&norms)
                .map(|(v, s)| if *s > 0.0 { v / s } else { 0.0 })
                .collect()
        })
        .collect();
    let bnorm = b.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-300);
    let tol = 1e-12 * bnorm * (m.max(n) as f64);

    let mut x = vec![0.0; n];
    let mut passive = vec![false; n];
    // Columns found dependent on the passive set, or with no data: never tried again.
    let mut excluded: Vec<bool> = norms.iter().map(|&s| s == 0.0).collect();
    for _ in 0..3 * n + 10 {
        let w = gradient(&scaled, b, &x);
        let Some(t) = (0..n)
            .filter(|&j| !passive[j] && !excluded[j] && w[j] > tol)
            .max_by(|&i, &j| w[i].total_cmp(&w[j]))
        else {
            break;
        };
        passive[t] = true;
        // Inner loop: keep the unconstrained solution on the passive set feasible.
        for _ in 0..3 * n + 10 {
            let cols: Vec<usize> = (0..n).filter(|&j| passive[j]).collect();
            let Some(s) = solve_ls(&scaled, b, &cols) else {
                // `t` is dependent on the others: leave it out for good.
                passive[t] = false;
                excluded[t] = true;
                break;
            };
            let mut z = vec![0.0; n];
            for (k, &j) in cols.iter().enumerate() {
                z[j] = s[k];
            }
            if cols.iter().all(|&j| z[j] > 0.0) {
                x = z;
                break;
            }
            // Step from x towards z as far as feasibility allows, then drop the columns
            // that reached zero.
            let mut alpha = f64::INFINITY;
            for &j in &cols {
                if z[j] <= 0.0 {
                    let d = x[j] - z[j];
                    let a = if d > 0.0 { x[j] / d } else { 0.0 };
                    alpha = alpha.min(a);
                }
            }
            let alpha = alpha.clamp(0.0, 1.0);
            for j in 0..n {
                x[j] += alpha * (z[j] - x[j]);
            }
            for &j in &cols {
                if x[j] <= 1e-15 {
                    x[j] = 0.0;
                    passive[j] = false;
                }
            }
            if !passive.iter().any(|&p| p) {
                break;
            }
        }
    }
    Ok(x.iter()
        .zip(&norms)
        .map(|(v, s)| if *s > 0.0 { (v / s).max(0.0) } else { 0.0 })
        .collect())
}

/// `A^T (b - A x)`.
fn gradient(a: &[Vec<f64>], b: &[f64], x: &[f64]) -> Vec<f64> {
    let n = x.len();
    let mut w = vec![0.0; n];
    for (row, bi) in a.iter().zip(b) {
        let r = bi - row.iter().zip(x).map(|(u, v)| u * v).sum::<f64>();
        for j in 0..n {
            w[j] += row[j] * r;
        }
    }
    w
}

/// Unconstrained least squares on the columns `cols` of `a` by Householder QR; `None` when
/// the columns are numerically dependent.
fn solve_ls(a: &[Vec<f64>], b: &[f64], cols: &[usize]) -> Option<Vec<f64>> {
    let m = a.len();
    let k = cols.len();
    if k > m {
        return None;
    }
    let mut q: Vec<Vec<f64>> = cols
        .iter()
        .map(|&j| a.iter().map(|r| r[j]).collect())
        .collect();
    let mut y = b.to_vec();
    let mut rdiag = vec![0.0; k];
    for c in 0..k {
        let norm = q[c][c..].iter().map(|v| v * v).sum::<f64>().sqrt();
        // Columns have unit norm, so an absolute threshold measures dependence.
        if norm < 1e-9 {
            return None;
        }
        let alpha = if q[c][c] > 0.0 { -norm } else { norm };
        let mut v: Vec<f64> = q[c][c..].to_vec();
        v[0] -= alpha;
        let vn2: f64 = v.iter().map(|x| x * x).sum();
        if vn2 > 0.0 {
            for col in q.iter_mut().skip(c) {
                let d: f64 = v.iter().zip(&col[c..]).map(|(p, r)| p * r).sum();
                let f = 2.0 * d / vn2;
                for (i, vi) in v.iter().enumerate() {
                    col[c + i] -= f * vi;
                }
            }
            let d: f64 = v.iter().zip(&y[c..]).map(|(p, r)| p * r).sum();
            let f = 2.0 * d / vn2;
            for (i, vi) in v.iter().enumerate() {
                y[c + i] -= f * vi;
            }
        }
        rdiag[c] = q[c][c];
    }
    let _ = m;
    // Back substitution: R s = Q^T b.
    let mut s = vec![0.0; k];
    for c in (0..k).rev() {
        let mut acc = y[c];
        for (j, sj) in s.iter().enumerate().skip(c + 1) {
            acc -= q[j][c] * sj;
        }
        s[c] = acc / rdiag[c];
    }
    s.iter().all(|v| v.is_finite()).then_some(s)
}

fn check(rows: &[Vec<f64>], measured: &[f64]) -> Result<usize, LinearError> {
    if rows.is_empty() || measured.is_empty() {
        return Err(LinearError::Empty("no points"));
    }
    if rows.len() != measured.len() {
        return Err(LinearError::Shape {
            point: rows.len().min(measured.len()),
            got: rows.len(),
            want: measured.len(),
        });
    }
    let n = rows[0].len();
    if n == 0 {
        return Err(LinearError::Empty("no parameters"));
    }
    for (i, (row, &t)) in rows.iter().zip(measured).enumerate() {
        if !(t.is_finite() && t > 0.0) {
            return Err(LinearError::BadTime { point: i, value: t });
        }
        if row.len() != n {
            return Err(LinearError::Shape {
                point: i,
                got: row.len(),
                want: n,
            });
        }
        if let Some((j, &v)) = row
            .iter()
            .enumerate()
            .find(|(_, v)| !(v.is_finite() && **v >= 0.0))
        {
            return Err(LinearError::BadCoefficient {
                point: i,
                index: j,
                value: v,
            });
        }
    }
    Ok(n)
}

/// Relative errors of `params` on the points: (rms, signed worst, index of the worst).
pub fn relative_errors(rows: &[Vec<f64>], measured: &[f64], params: &[f64]) -> (f64, f64, usize) {
    let mut sum = 0.0;
    let (mut worst, mut at) = (0.0f64, 0);
    for (i, (row, t)) in rows.iter().zip(measured).enumerate() {
        let p: f64 = row.iter().zip(params).map(|(c, v)| c * v).sum();
        let e = (p - t) / t;
        sum += e * e;
        if e.abs() > worst.abs() {
            (worst, at) = (e, i);
        }
    }
    ((sum / rows.len().max(1) as f64).sqrt(), worst, at)
}

/// Fits `params >= 0` minimising the relative errors of `rows · params` against `measured`
/// (see the module docs).
pub fn fit_relative(rows: &[Vec<f64>], measured: &[f64]) -> Result<LinearFit, LinearError> {
    check(rows, measured)?;
    let a: Vec<Vec<f64>> = rows
        .iter()
        .zip(measured)
        .map(|(r, t)| r.iter().map(|c| c / t).collect())
        .collect();
    let ones = vec![1.0; rows.len()];
    let params = nnls(&a, &ones)?;
    let (rms, worst, at) = relative_errors(rows, measured, &params);
    Ok(LinearFit {
        params,
        points: rows.len(),
        rms_rel_err: rms,
        worst_rel_err: worst,
        worst_point: at,
    })
}

/// [`fit_relative`] for models that are linear once their active pieces are chosen:
/// `coefficients(params, i)` gives point i's coefficient row at `params` (the row of the piece
/// that is largest there). Starting from `start`, alternates choosing rows and refitting, up to
/// `rounds` times or until the rows stop changing, and returns the fit with the smallest rms
/// error (its errors evaluated with the rows chosen at its own parameters).
pub fn fit_piecewise(
    measured: &[f64],
    start: &[f64],
    rounds: usize,
    mut coefficients: impl FnMut(&[f64], usize) -> Vec<f64>,
) -> Result<LinearFit, LinearError> {
    let rows_at = |p: &[f64], f: &mut dyn FnMut(&[f64], usize) -> Vec<f64>| -> Vec<Vec<f64>> {
        (0..measured.len()).map(|i| f(p, i)).collect()
    };
    let mut params = start.to_vec();
    let mut rows = rows_at(&params, &mut coefficients);
    let mut best: Option<LinearFit> = None;
    for _ in 0..rounds.max(1) {
        let fit = fit_relative(&rows, measured)?;
        let next = rows_at(&fit.params, &mut coefficients);
        // Judge the fit by the model it defines: rows chosen at its own parameters.
        let (rms, worst, at) = relative_errors(&next, measured, &fit.params);
        let judged = LinearFit {
            rms_rel_err: rms,
            worst_rel_err: worst,
            worst_point: at,
            ..fit
        };
        let stable = next == rows;
        if best
            .as_ref()
            .is_none_or(|b| judged.rms_rel_err < b.rms_rel_err)
        {
            best = Some(judged.clone());
        }
        if stable {
            break;
        }
        params = judged.params;
        rows = next;
    }
    let _ = params;
    best.ok_or(LinearError::Empty("no rounds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-12)
    }

    #[test]
    fn recovers_exact_parameters() {
        // t = 0.5 steps + 2e-4 bytes + 1e-4 reduced, across five decades.
        let truth = [0.5, 2e-4, 1e-4];
        let mut rows = Vec::new();
        let mut t = Vec::new();
        for k in 0..20 {
            let bytes = (1u64 << k) as f64;
            for (steps, red) in [(1.0, 0.0), (2.0, 1.0), (3.0, 0.5)] {
                let r = vec![steps, bytes, red * bytes];
                t.push(r.iter().zip(&truth).map(|(a, b)| a * b).sum());
                rows.push(r);
            }
        }
        let f = fit_relative(&rows, &t).unwrap();
        for (a, b) in f.params.iter().zip(&truth) {
            assert!(close(*a, *b, 1e-6), "{:?}", f.params);
        }
        assert!(f.rms_rel_err < 1e-9);
    }

    #[test]
    fn parameters_stay_non_negative() {
        // The best unconstrained fit has a negative second parameter.
        let rows = vec![vec![1.0, 1.0], vec![1.0, 2.0], vec![1.0, 3.0]];
        let t = vec![3.0, 2.0, 1.0];
        let f = fit_relative(&rows, &t).unwrap();
        assert!(f.params.iter().all(|&p| p >= 0.0), "{:?}", f.params);
        assert_eq!(f.params[1], 0.0);
    }

    #[test]
    fn collinear_columns_are_handled() {
        // Columns 0 and 1 always equal: any split is a solution; one must be found.
        let rows: Vec<Vec<f64>> = (1..10).map(|i| vec![i as f64, i as f64, 1.0]).collect();
        let t: Vec<f64> = (1..10).map(|i| 3.0 * i as f64 + 1.0).collect();
        let f = fit_relative(&rows, &t).unwrap();
        assert!(
            close(f.params[0] + f.params[1], 3.0, 1e-6),
            "{:?}",
            f.params
        );
        assert!(close(f.params[2], 1.0, 1e-6), "{:?}", f.params);
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(matches!(fit_relative(&[], &[]), Err(LinearError::Empty(_))));
        assert!(matches!(
            fit_relative(&[vec![1.0]], &[0.0]),
            Err(LinearError::BadTime { .. })
        ));
        assert!(matches!(
            fit_relative(&[vec![1.0]], &[f64::NAN]),
            Err(LinearError::BadTime { .. })
        ));
        assert!(matches!(
            fit_relative(&[vec![-1.0]], &[1.0]),
            Err(LinearError::BadCoefficient { .. })
        ));
        assert!(matches!(
            fit_relative(&[vec![1.0, 2.0], vec![1.0]], &[1.0, 1.0]),
            Err(LinearError::Shape { .. })
        ));
        assert!(matches!(
            fit_relative(&[vec![0.0, 0.0]], &[1.0]),
            Err(LinearError::Degenerate)
        ));
    }

    #[test]
    fn piecewise_picks_the_active_pieces() {
        // t = max(a x, b y) with a = 1, b = 2: points on both sides of the switch.
        let pts: Vec<(f64, f64)> = (1..20).map(|i| (i as f64, (20 - i) as f64)).collect();
        let t: Vec<f64> = pts.iter().map(|(x, y)| (1.0 * x).max(2.0 * y)).collect();
        let f = fit_piecewise(&t, &[1.0, 1.0], 10, |p, i| {
            let (x, y) = pts[i];
            if p[0] * x >= p[1] * y {
                vec![x, 0.0]
            } else {
                vec![0.0, y]
            }
        })
        .unwrap();
        assert!(f.rms_rel_err < 1e-9, "{f:?}");
        assert!(close(f.params[0], 1.0, 1e-6) && close(f.params[1], 2.0, 1e-6));
    }
}
