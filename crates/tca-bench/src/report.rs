//! What `tca bench` prints: IMB-MPI1 text (default), CSV or JSON, the side-by-side comparison
//! with an MPI, the Hockney fits, the notes of each half, and with `--model` the cost models'
//! predictions beside the measured times ([`Output::predict`]).

use serde::Serialize;
use tca_model::imb;
use tca_model::record::{Row, Run};

use crate::suite::{BENCHMARKS, Half};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// IMB-MPI1's text layout (readable by IMB parsers), comparison and fits as `#` lines.
    Imb,
    /// One CSV line per measurement with the provenance columns.
    Csv,
    /// One JSON document: the run, the notes and the fits.
    Json,
}

/// A Hockney fit of one implementation's benchmark.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitLine {
    /// "tca" or the MPI.
    pub implementation: String,
    /// IMB name.
    pub benchmark: String,
    /// Asymptotic bandwidth B, MB/s.
    pub b_mb_s: f64,
    /// Half-performance length M_1/2, bytes.
    pub m_half_bytes: f64,
    /// Latency t_L = M_1/2 / B, us.
    pub t_l_us: f64,
    /// Coefficient of determination of the throughputs.
    pub r2: f64,
    /// RMS relative error of the throughputs.
    pub rms_rel_err: f64,
    /// Points used.
    pub points: usize,
    /// Smallest size used.
    pub min_bytes: u64,
    /// Largest size used.
    pub max_bytes: u64,
    /// Where the range came from.
    pub range: &'static str,
}

/// A cost model's prediction beside one measured tca row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// IMB name.
    pub benchmark: String,
    /// The algorithm that ran.
    pub algorithm: String,
    /// Ranks.
    pub ranks: u32,
    /// `#bytes` of the row.
    pub bytes: u64,
    /// Measured t_avg, us.
    pub measured_us: f64,
    /// Predicted, us.
    pub predicted_us: f64,
    /// (predicted - measured) / measured, percent.
    pub error_percent: f64,
}

/// The predictions of `--model` and the models they come from.
#[derive(Debug, Clone, Serialize)]
pub struct ModelReport {
    /// Which models (a calibration file, or the built-in defaults).
    pub source: String,
    /// One per tca collective row.
    pub predictions: Vec<Prediction>,
}

/// The algorithm, rank count and size (as [`tca::coll::Algorithm::cost`] means it) of a tca row
/// of a collective benchmark, or `None` for other rows. The suite's `#bytes` is what IMB means
/// (see [`crate::suite`]); the cost models take what the library selects by: the same, except
/// Reduce_scatter, whose `#bytes` is the whole vector and whose models take each rank's share.
pub fn model_input(row: &Row) -> Option<(&'static tca::coll::Algorithm, usize, usize)> {
    if row.implementation != "tca" {
        return None;
    }
    let coll = BENCHMARKS
        .iter()
        .find(|b| b.name == row.benchmark)?
        .collective?;
    let alg = tca::coll::registry::find(coll, &row.algorithm).ok()?;
    let p = row.ranks as usize;
    let bytes = usize::try_from(row.bytes).ok()?;
    let n = match coll {
        tca::Collective::ReduceScatter => bytes / p.max(1),
        _ => bytes,
    };
    Some((alg, p, n))
}

/// Everything one invocation measured.
#[derive(Debug, Clone, Serialize)]
pub struct Output {
    /// The run (machine, date, transport, rows of every implementation).
    #[serde(flatten)]
    pub run: Run,
    /// (implementation, note) lines.
    pub notes: Vec<(String, String)>,
    /// Hockney fits.
    pub fits: Vec<FitLine>,
    /// Fits that could not be made, and why.
    pub fit_skipped: Vec<String>,
    /// The cost models' predictions (`--model`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelReport>,
}

impl Output {
    /// Gathers the halves into one output, fitting each benchmark over `fit` (or the default
    /// range: the sizes above tca's last algorithm switch, see [`default_range`]).
    pub fn new(machine: String, halves: &[Half], fit: Option<(u64, u64)>) -> Output {
        let rows: Vec<Row> = halves.iter().flat_map(|h| h.rows.clone()).collect();
        let notes = halves
            .iter()
            .flat_map(|h| {
                h.notes
                    .iter()
                    .map(|n| (h.implementation.clone(), n.clone()))
            })
            .collect();
        let (fits, fit_skipped) = fits(&rows, fit);
        Output {
            run: Run {
                machine,
                date: crate::machine::rfc3339_now(),
                transport: halves
                    .iter()
                    .map(|h| format!("{}: {}", h.implementation, h.transport))
                    .collect::<Vec<_>>()
                    .join(", "),
                rows,
            },
            notes,
            fits,
            fit_skipped,
            model: None,
        }
    }

    /// Adds the predictions of `calibration` (described by `source`) for every tca collective
    /// row: `tca bench --model` passes the models the library loaded
    /// ([`tca::coll::model::active`]).
    pub fn predict(&mut self, calibration: &tca::coll::model::Calibration, source: String) {
        let predictions = self
            .run
            .rows
            .iter()
            .filter(|r| r.t_avg_us > 0.0)
            .filter_map(|r| {
                let (alg, p, n) = model_input(r)?;
                let t = calibration.predict(alg, p, n);
                Some(Prediction {
                    benchmark: r.benchmark.clone(),
                    algorithm: r.algorithm.clone(),
                    ranks: r.ranks,
                    bytes: r.bytes,
                    measured_us: r.t_avg_us,
                    predicted_us: t,
                    error_percent: 100.0 * (t - r.t_avg_us) / r.t_avg_us,
                })
            })
            .collect();
        self.model = Some(ModelReport {
            source,
            predictions,
        });
    }

    /// The implementations in order of appearance.
    fn implementations(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for r in &self.run.rows {
            if !v.contains(&r.implementation) {
                v.push(r.implementation.clone());
            }
        }
        v
    }

    /// The output in `format`.
    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Csv => self.run.to_csv(),
            Format::Json => serde_json::to_string_pretty(self).expect("output serialises"),
            Format::Imb => self.imb_text(),
        }
    }

    fn imb_text(&self) -> String {
        let mut s = String::new();
        let impls = self.implementations();
        for im in &impls {
            let rows: Vec<&Row> = self
                .run
                .rows
                .iter()
                .filter(|r| &r.implementation == im)
                .collect();
            let ranks = rows.first().map_or(0, |r| r.ranks);
            let mut pre = vec![
                format!("tca bench: IMB-MPI1 compatible suite, implementation: {im}"),
                format!("machine: {}", self.run.machine),
                format!("date: {}", self.run.date),
                format!("ranks: {ranks}"),
            ];
            if im == "tca" {
                pre.push(format!("transport: {}", self.run.transport));
            }
            let sections: Vec<imb::Section> = BENCHMARKS
                .iter()
                .filter_map(|b| {
                    let lines: Vec<imb::Line> = rows
                        .iter()
                        .filter(|r| r.benchmark == b.name)
                        .map(|r| imb::Line {
                            bytes: r.bytes,
                            repetitions: r.repetitions,
                            t_min: r.t_min_us,
                            t_max: r.t_max_us,
                            t_avg: r.t_avg_us,
                            mbytes_per_sec: r.mbytes_per_sec,
                        })
                        .collect();
                    (!lines.is_empty()).then(|| {
                        let active = b.active(ranks);
                        imb::Section {
                            benchmark: b.name.to_string(),
                            processes: active,
                            waiting: ranks - active,
                            lines,
                        }
                    })
                })
                .collect();
            s += &imb::write(&pre, &sections);
            let algs = self.algorithm_lines(im);
            if !algs.is_empty() {
                s += "\n# algorithms (tca's choice per size, or --algo):\n";
                s += &algs;
            }
            for (who, n) in &self.notes {
                if who == im {
                    s += &format!("# {n}\n");
                }
            }
            if im == "tca"
                && let Some(m) = &self.model
            {
                s += &model_text(m);
            }
            s += "\n";
        }
        if impls.len() == 2 {
            s += &self.comparison(&impls[0], &impls[1]);
        }
        if !self.fits.is_empty() || !self.fit_skipped.is_empty() {
            s += "\n# Hockney fits (seed 002): throughput T = B / (1 + M_1/2 / M), t_L = M_1/2 / B\n";
            s += &format!(
                "# {:<16} {:<15} {:>12} {:>12} {:>11} {:>8} {:>7} {:>20}\n",
                "implementation",
                "benchmark",
                "B[MB/s]",
                "M_1/2[B]",
                "t_L[usec]",
                "R2",
                "rms",
                "sizes"
            );
            for f in &self.fits {
                s += &format!(
                    "# {:<16} {:<15} {:>12.1} {:>12} {:>11.3} {:>8.4} {:>6.1}% {:>9}..{:<9} ({})\n",
                    f.implementation,
                    f.benchmark,
                    f.b_mb_s,
                    tca_model::format::exp(f.m_half_bytes, 4),
                    f.t_l_us,
                    f.r2,
                    f.rms_rel_err * 100.0,
                    f.min_bytes,
                    f.max_bytes,
                    f.range
                );
            }
            for k in &self.fit_skipped {
                s += &format!("# no fit: {k}\n");
            }
        }
        s
    }

    /// `# Allreduce: 8..64 recursive_doubling, 128.. ring` lines for tca.
    fn algorithm_lines(&self, im: &str) -> String {
        let mut s = String::new();
        for b in BENCHMARKS
            .iter()
            .filter(|b| b.collective.is_some() || b.lattice())
        {
            let mut runs: Vec<(u64, u64, &str)> = Vec::new();
            for r in
                self.run.rows.iter().filter(|r| {
                    r.implementation == im && r.benchmark == b.name && r.algorithm != "-"
                })
            {
                match runs.last_mut() {
                    Some(last) if last.2 == r.algorithm => last.1 = r.bytes,
                    _ => runs.push((r.bytes, r.bytes, &r.algorithm)),
                }
            }
            if !runs.is_empty() {
                let parts: Vec<String> = runs
                    .iter()
                    .map(|(a, z, n)| format!("{a}..{z} {n}"))
                    .collect();
                s += &format!("#   {:<15} {}\n", b.name, parts.join(", "));
            }
        }
        s
    }

    /// The side-by-side table: t_avg of both and the ratio, per benchmark and size.
    fn comparison(&self, a: &str, b: &str) -> String {
        let mut s = format!(
            "#----------------------------------------------------------------\n# {a} vs {b}: t_avg[usec] per call, ratio {a}/{b} (below 1: {a} is faster)\n#----------------------------------------------------------------\n"
        );
        s += &format!(
            "# {:<15} {:>10} {:>13} {:>13} {:>9}\n",
            "benchmark", "#bytes", a, b, "ratio"
        );
        let mut wins = (0, 0);
        for bench in BENCHMARKS {
            for x in self
                .run
                .rows
                .iter()
                .filter(|r| r.implementation == a && r.benchmark == bench.name)
            {
                let Some(y) = self.run.rows.iter().find(|r| {
                    r.implementation == b && r.benchmark == bench.name && r.bytes == x.bytes
                }) else {
                    continue;
                };
                let ratio = x.t_avg_us / y.t_avg_us;
                if ratio < 1.0 {
                    wins.0 += 1;
                } else {
                    wins.1 += 1;
                }
                s += &format!(
                    "# {:<15} {:>10} {:>13.3} {:>13.3} {:>9.3}\n",
                    bench.name, x.bytes, x.t_avg_us, y.t_avg_us, ratio
                );
            }
        }
        s += &format!(
            "# {a} faster in {} of {} comparisons\n",
            wins.0,
            wins.0 + wins.1
        );
        s
    }
}

/// The `# model` lines: every prediction beside its measurement, then the worst error of each
/// benchmark.
fn model_text(m: &ModelReport) -> String {
    let mut s = format!("\n# model: {}\n", m.source);
    if m.predictions.is_empty() {
        return s + "#   (no tca collective rows to predict)\n";
    }
    s += &format!(
        "#   {:<15} {:>10} {:<19} {:>13} {:>13} {:>8}\n",
        "benchmark", "#bytes", "algorithm", "t_avg[usec]", "model[usec]", "error"
    );
    for p in &m.predictions {
        s += &format!(
            "#   {:<15} {:>10} {:<19} {:>13.3} {:>13.3} {:>+7.1}%\n",
            p.benchmark, p.bytes, p.algorithm, p.measured_us, p.predicted_us, p.error_percent
        );
    }
    let mut seen: Vec<&str> = Vec::new();
    for p in &m.predictions {
        if !seen.contains(&p.benchmark.as_str()) {
            seen.push(&p.benchmark);
        }
    }
    for b in seen {
        let mine: Vec<&Prediction> = m.predictions.iter().filter(|p| p.benchmark == b).collect();
        let worst = mine
            .iter()
            .max_by(|x, y| x.error_percent.abs().total_cmp(&y.error_percent.abs()))
            .expect("a benchmark seen has predictions");
        let within = mine
            .iter()
            .filter(|p| p.error_percent.abs() <= 25.0)
            .count();
        s += &format!(
            "# model {:<15} worst error {:+.1}% at {} bytes; {} of {} within 25%\n",
            b,
            worst.error_percent,
            worst.bytes,
            within,
            mine.len()
        );
    }
    s
}

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

fn fits(rows: &[Row], fit: Option<(u64, u64)>) -> (Vec<FitLine>, Vec<String>) {
    let mut done = Vec::new();
    let mut skipped = Vec::new();
    let mut groups: Vec<(String, String)> = Vec::new();
    for r in rows.iter().filter(|r| r.bytes > 0) {
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
            Err(e) => skipped.push(format!("{im} {bench} over {lo}..{hi} bytes: {e}")),
        }
    }
    (done, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(im: &str, bench: &str, alg: &str, bytes: u64, t: f64) -> Row {
        Row {
            implementation: im.into(),
            benchmark: bench.into(),
            algorithm: alg.into(),
            ranks: 2,
            bytes,
            repetitions: 100,
            t_min_us: t,
            t_max_us: t,
            t_avg_us: t,
            mbytes_per_sec: None,
        }
    }

    /// Hockney data: t = 1 us + M / 5000 MB/s.
    fn hockney(im: &str, bench: &str, alg: impl Fn(u64) -> &'static str) -> Vec<Row> {
        (0..20)
            .map(|k| 1u64 << k)
            .map(|m| row(im, bench, alg(m), m, 1.0 + m as f64 / 5000.0))
            .collect()
    }

    #[test]
    fn default_range_starts_at_the_last_switch() {
        let rows = hockney("tca", "Allreduce", |m| if m < 4096 { "a" } else { "b" });
        assert_eq!(default_range(&rows, "Allreduce").0, 4096);
        let rows = hockney("tca", "Bcast", |_| "a");
        assert_eq!(default_range(&rows, "Bcast").0, 1);
    }

    #[test]
    fn output_fits_and_compares() {
        let mut rows = hockney("tca", "Allreduce", |m| if m < 64 { "a" } else { "b" });
        rows.extend(
            hockney("MPI", "Allreduce", |_| "-")
                .into_iter()
                .map(|mut r| {
                    r.t_avg_us *= 2.0;
                    r
                }),
        );
        let half = |im: &str, rows: Vec<Row>| Half {
            implementation: im.into(),
            transport: "shm".into(),
            ranks: 2,
            rows,
            notes: vec![format!("{im} note")],
        };
        let (t, m): (Vec<Row>, Vec<Row>) =
            rows.into_iter().partition(|r| r.implementation == "tca");
        let out = Output::new(
            "test machine".into(),
            &[half("tca", t), half("MPI", m)],
            None,
        );
        assert_eq!(out.fits.len(), 2, "{:?}", out.fit_skipped);
        let f = &out.fits[0];
        assert!((f.b_mb_s / 5000.0 - 1.0).abs() < 1e-3, "{f:?}");
        assert!((f.t_l_us - 1.0).abs() < 1e-3, "{f:?}");
        let text = out.render(Format::Imb);
        assert!(text.contains("# Benchmarking Allreduce"), "{text}");
        assert!(text.contains("tca vs MPI"), "{text}");
        assert!(text.contains("tca faster in 20 of 20"), "{text}");
        assert!(text.contains("# tca note"), "{text}");
        // The IMB sections read back with the same numbers.
        let back = tca_model::imb::parse(&text).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].lines.len(), 20);
        assert_eq!(
            back[0].lines[3].t_avg,
            (out.run.rows[3].t_avg_us * 1000.0).round() / 1000.0
        );
        // CSV and JSON carry the same rows.
        let csv = tca_model::record::parse_any(&out.render(Format::Csv)).unwrap();
        assert_eq!(csv, out.run.rows);
        let json = tca_model::record::parse_any(&out.render(Format::Json)).unwrap();
        assert_eq!(json, out.run.rows);
    }

    #[test]
    fn too_few_points_is_reported_not_fitted() {
        let rows = vec![
            row("tca", "Bcast", "a", 8, 1.0),
            row("tca", "Bcast", "a", 16, 1.0),
        ];
        let out = Output::new(
            "m".into(),
            &[Half {
                implementation: "tca".into(),
                transport: "shm".into(),
                ranks: 2,
                rows,
                notes: vec![],
            }],
            None,
        );
        assert!(out.fits.is_empty());
        assert_eq!(out.fit_skipped.len(), 1);
        assert!(out.render(Format::Imb).contains("# no fit: tca Bcast"));
    }
}
