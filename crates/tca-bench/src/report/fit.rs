//! The Hockney fits of `tca bench` (seed 002's method): throughput T = B / (1 + M_1/2 / M)
//! per implementation and benchmark, over `--fit` or, by default, the sizes where tca runs
//! one algorithm.

use tca_model::record::Row;

use super::FitLine;

/// The default fit range of a benchmark: the sizes (above 0) from tca's last algorithm switch
/// up, where one algorithm is in use (seed 002 fits over one algorithm's range); all sizes
/// above 0 when tca's rows do not say (MPI alone, or only one algorithm).
pub fn default_range(rows: &[Row], benchmark: &str) -> (u64, u64, &'static str) {
    let tca: Vec<&Row> = rows
        .iter()
        .filter(|r| r.implementation == "tca" && r.benchmark == benchmark && r.bytes > 0)
        .collect();
    let all_max = rows
        .iter()
        .filter(|r| r.benchmark == benchmark)
        .map(|r| r.bytes)
        .max()
        .unwrap_or(0);
    match tca.last() {
        Some(last) => {
            let from = tca
                .iter()
                .rev()
                .take_while(|r| r.algorithm == last.algorithm)
                .last()
                .map_or(1, |r| r.bytes);
            if from == tca[0].bytes {
                (1, all_max, "all sizes")
            } else {
                (from, all_max, "above tca's last algorithm switch")
            }
        }
        None => (1, all_max, "all sizes"),
    }
}

pub(crate) fn fits(rows: &[Row], fit: Option<(u64, u64)>) -> (Vec<FitLine>, Vec<String>) {
    let mut done = Vec::new();
    let mut skipped = Vec::new();
    let mut groups: Vec<(String, String)> = Vec::new();
    // The non-blocking benchmarks' times include the computation they overlap: no fit.
    for r in rows.iter().filter(|r| r.bytes > 0 && r.overlap.is_none()) {
        let g = (r.implementation.clone(), r.benchmark.clone());
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    for (im, bench) in groups {
        let (lo, hi, range) = match fit {
            Some((a, b)) => (a.max(1), b, "--fit"),
            None => default_range(rows, &bench),
        };
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| {
                r.implementation == im
                    && r.benchmark == bench
                    && (lo..=hi).contains(&r.bytes)
                    && r.time_us() > 0.0
            })
            .map(|r| (r.bytes as f64, r.throughput_mb_s()))
            .collect();
        match tca_model::fit::fit_hockney(&pts) {
            Ok(f) => done.push(FitLine {
                implementation: im,
                benchmark: bench,
                b_mb_s: f.b_mb_s,
                m_half_bytes: f.m_half_bytes,
                t_l_us: f.t_l_us,
                r2: f.r2,
                rms_rel_err: f.rms_rel_err,
                points: f.points,
                min_bytes: f.min_bytes as u64,
                max_bytes: f.max_bytes as u64,
                range,
            }),
            Err(e) => {
                let hi = if hi == u64::MAX {
                    String::new()
                } else {
                    hi.to_string()
                };
                skipped.push(format!("{im} {bench} over {lo}..{hi} bytes: {e}"));
            }
        }
    }
    (done, skipped)
}
