//! What `tca bench` prints, one module per output format: [`imb`] (IMB-MPI1's text layout,
//! the default, with the side-by-side comparison, the algorithm lines, the fits and the model
//! predictions as `#` lines), [`csv`] and [`json`]; [`fit`] makes the Hockney fits all three
//! carry. [`Output`] is what one invocation measured, whatever the format.

pub mod csv;
pub mod fit;
pub mod imb;
pub mod json;

use serde::Serialize;
use tca_model::record::{Row, Run};

use crate::suite::Half;

pub use fit::default_range;

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
    /// With `--rounds`: every row's t_avg in each round (the rows hold the median round).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<RoundTimes>,
}

/// One row's t_avg in each round of `--rounds`, in round order.
#[derive(Debug, Clone, Serialize)]
pub struct RoundTimes {
    /// "tca" or the MPI's name.
    pub implementation: String,
    /// IMB's name of the benchmark.
    pub benchmark: String,
    /// `#bytes` of the row.
    pub bytes: u64,
    /// t_avg of each round, us.
    pub t_avg_us: Vec<f64>,
}

impl Output {
    /// Each round's t_avg of `implementation`'s `benchmark` at `bytes`, with `--rounds`.
    pub fn round_times(&self, implementation: &str, benchmark: &str, bytes: u64) -> Option<&[f64]> {
        self.rounds
            .iter()
            .find(|r| {
                r.implementation == implementation && r.benchmark == benchmark && r.bytes == bytes
            })
            .map(|r| r.t_avg_us.as_slice())
    }
}

impl Output {
    /// Gathers the halves into one output, fitting each benchmark over `fit` (or the default
    /// range: the sizes above tca's last algorithm switch, see [`fit::default_range`]).
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
        let (fits, fit_skipped) = fit::fits(&rows, fit);
        let rounds = halves
            .iter()
            .flat_map(|h| {
                h.rows
                    .iter()
                    .zip(&h.round_t_avg_us)
                    .map(|(r, t)| RoundTimes {
                        implementation: h.implementation.clone(),
                        benchmark: r.benchmark.clone(),
                        bytes: r.bytes,
                        t_avg_us: t.clone(),
                    })
            })
            .collect();
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
            rounds,
        }
    }

    /// Adds the predictions of `calibration` (described by `source`) for every tca collective
    /// row, with its models for communicators that span a network where `network`:
    /// `tca bench --model` passes the models Auto chose with (the library's
    /// [`tca::coll::model::active`], or a simulated network's own).
    pub fn predict(
        &mut self,
        calibration: &tca::coll::model::Calibration,
        network: bool,
        source: String,
    ) {
        let predictions = self
            .run
            .rows
            .iter()
            .filter(|r| r.t_avg_us > 0.0)
            .filter_map(|r| {
                let (alg, p, n) = crate::suite::model_input(r)?;
                let t = calibration.predict_on(alg, p, n, network);
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
    pub(crate) fn implementations(&self) -> Vec<String> {
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
            Format::Csv => csv::render(self),
            Format::Json => json::render(self),
            Format::Imb => imb::render(self),
        }
    }
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
            overlap: None,
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
            round_t_avg_us: Vec::new(),
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

    /// With `--rounds` the side-by-side table gives each round pair's ratio range beside the
    /// median rounds' ratio.
    #[test]
    fn the_comparison_gives_the_rounds_ratio_range() {
        let half = |im: &str, t: f64, each: Vec<f64>| Half {
            implementation: im.into(),
            transport: "shm".into(),
            ranks: 2,
            rows: vec![row(im, "Bcast", "-", 8, t)],
            notes: vec![],
            round_t_avg_us: vec![each],
        };
        let out = Output::new(
            "m".into(),
            &[
                half("tca", 2.0, vec![2.0, 1.0, 3.0]),
                half("MPI", 4.0, vec![4.0, 4.0, 2.0]),
            ],
            None,
        );
        assert_eq!(
            out.round_times("MPI", "Bcast", 8),
            Some(&[4.0, 4.0, 2.0][..])
        );
        let text = out.render(Format::Imb);
        let line = text
            .lines()
            .find(|l| l.starts_with("# Bcast"))
            .unwrap_or_else(|| panic!("{text}"));
        // Median 2/4; round pairs 0.5, 0.25, 1.5.
        assert!(
            line.contains("0.500") && line.ends_with("0.25-1.50"),
            "{line}"
        );
        assert!(text.contains("the ratios of the rounds' pairs"), "{text}");
        // One round: no column.
        let one = |im: &str| Half {
            round_t_avg_us: Vec::new(),
            ..half(im, 1.0, vec![])
        };
        let out = Output::new("m".into(), &[one("tca"), one("MPI")], None);
        assert!(!out.render(Format::Imb).contains("rounds"));
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
                round_t_avg_us: Vec::new(),
            }],
            None,
        );
        assert!(out.fits.is_empty());
        assert_eq!(out.fit_skipped.len(), 1);
        assert!(out.render(Format::Imb).contains("# no fit: tca Bcast"));
    }
}
