//! Benchmark results as files: the rows `tca bench` writes (CSV, JSON) and reading any result
//! file back, IMB text included, so fits and comparisons work on tca's output and on a real
//! IMB run alike.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::imb;

/// One measurement: one benchmark, one implementation, one message size.
///
/// Times follow IMB: per call, in microseconds, t_min / t_max / t_avg over the ranks (for
/// PingPong and PingPing all three are the same half round trip / one-way time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// "tca", or the MPI it was measured with ("Open MPI 4.1.4").
    pub implementation: String,
    /// IMB's name of the benchmark: PingPong, PingPing, Bcast, ..., Barrier.
    pub benchmark: String,
    /// The algorithm tca used ("-" where not known, as for MPI).
    pub algorithm: String,
    /// Ranks in the job.
    pub ranks: u32,
    /// Message size in bytes as IMB counts it (per rank's block for Gather, Allgather, ...).
    pub bytes: u64,
    /// Timed calls.
    pub repetitions: u64,
    /// Fastest rank, us per call.
    pub t_min_us: f64,
    /// Slowest rank, us per call.
    pub t_max_us: f64,
    /// Mean over ranks, us per call.
    pub t_avg_us: f64,
    /// IMB's Mbytes/sec (10^6 bytes per second) for PingPong and PingPing.
    pub mbytes_per_sec: Option<f64>,
    /// IMB-NBC's overlap figures, for the non-blocking benchmarks (whose t_min, t_max and
    /// t_avg are over the ranks' t_ovrl).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
}

/// What IMB-NBC reports of a non-blocking collective beside its time with computation
/// (t_ovrl): the rank with the largest t_ovrl's pure communication time and computation time,
/// and how much of the two overlapped.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Overlap {
    /// The collective alone (start, then wait), us per call.
    pub t_pure_us: f64,
    /// The computation between start and wait, us per call.
    pub t_cpu_us: f64,
    /// IMB-NBC's overlap, percent, as IMB-NBC computes it (`IMB_output.c`): `100 max(0,
    /// min(1, (t_pure + t_CPU - t_ovrl) / max(t_pure, t_CPU)))` — 100 when the two took the
    /// time of one (t_ovrl = max(t_pure, t_CPU) with t_pure = t_CPU, as IMB-NBC sizes the
    /// computation), 0 when they took turns. (IMB's user guide prints `min` in the
    /// denominator; its code, and so every IMB-NBC table, uses `max`.)
    pub percent: f64,
}

impl Overlap {
    /// The figures from the three times (us), IMB-NBC's formula for the percentage.
    pub fn new(t_ovrl_us: f64, t_pure_us: f64, t_cpu_us: f64) -> Overlap {
        let hidden = (t_pure_us + t_cpu_us - t_ovrl_us) / t_pure_us.max(t_cpu_us);
        let percent = if hidden.is_finite() {
            100.0 * hidden.clamp(0.0, 1.0)
        } else {
            0.0
        };
        Overlap {
            t_pure_us,
            t_cpu_us,
            percent,
        }
    }

    /// OSU's overlap (osu_iallreduce and friends), percent: the share of the pure
    /// communication time that did not add to the computation, `max(0, 100 (1 - (t_ovrl -
    /// t_CPU) / t_pure))`.
    pub fn osu_percent(&self, t_ovrl_us: f64) -> f64 {
        let p = 100.0 * (1.0 - (t_ovrl_us - self.t_cpu_us) / self.t_pure_us);
        if p.is_finite() {
            p.clamp(0.0, 100.0)
        } else {
            0.0
        }
    }
}

impl Row {
    /// The time a fit or a comparison uses: t_avg, IMB's headline figure.
    pub fn time_us(&self) -> f64 {
        self.t_avg_us
    }

    /// Throughput in MB/s (10^6 bytes per second): bytes over [`Row::time_us`], as seed 002
    /// turns IMB times into throughput.
    pub fn throughput_mb_s(&self) -> f64 {
        if self.time_us() > 0.0 {
            self.bytes as f64 / self.time_us()
        } else {
            0.0
        }
    }
}

/// A whole run with its provenance (the JSON form).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// CPU model, cores, kernel.
    pub machine: String,
    /// UTC date and time of the run (RFC 3339).
    pub date: String,
    /// How tca moved data ("shared memory (memfd)").
    pub transport: String,
    /// Every measurement.
    pub rows: Vec<Row>,
}

/// Errors reading result files.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error("{path}: {err}")]
    Io {
        /// The file.
        path: String,
        /// Why (in the message, not a separate cause, so it is printed once).
        err: std::io::Error,
    },
    /// The contents are none of the formats, or broken.
    #[error("{path}: {why}")]
    Format {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
}

/// The CSV header line: the measurement columns, the provenance columns, then the
/// non-blocking benchmarks' overlap columns (added later, so older readers' column positions
/// hold; empty for other rows).
pub const CSV_COLUMNS: [&str; 16] = [
    "implementation",
    "benchmark",
    "algorithm",
    "ranks",
    "bytes",
    "repetitions",
    "t_min_us",
    "t_max_us",
    "t_avg_us",
    "mbytes_per_sec",
    "machine",
    "date",
    "transport",
    "t_pure_us",
    "t_cpu_us",
    "overlap_percent",
];

#[derive(Serialize, Deserialize)]
struct CsvRow {
    implementation: String,
    benchmark: String,
    algorithm: String,
    ranks: u32,
    bytes: u64,
    repetitions: u64,
    t_min_us: f64,
    t_max_us: f64,
    t_avg_us: f64,
    mbytes_per_sec: Option<f64>,
    machine: String,
    date: String,
    transport: String,
    #[serde(default)]
    t_pure_us: Option<f64>,
    #[serde(default)]
    t_cpu_us: Option<f64>,
    #[serde(default)]
    overlap_percent: Option<f64>,
}

impl Run {
    /// The run as CSV: a header line then one line per row, provenance repeated per line so
    /// every line stands alone (what spreadsheet and pandas users expect).
    pub fn to_csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        for r in &self.rows {
            w.serialize(CsvRow {
                implementation: r.implementation.clone(),
                benchmark: r.benchmark.clone(),
                algorithm: r.algorithm.clone(),
                ranks: r.ranks,
                bytes: r.bytes,
                repetitions: r.repetitions,
                t_min_us: r.t_min_us,
                t_max_us: r.t_max_us,
                t_avg_us: r.t_avg_us,
                mbytes_per_sec: r.mbytes_per_sec,
                machine: self.machine.clone(),
                date: self.date.clone(),
                transport: self.transport.clone(),
                t_pure_us: r.overlap.map(|o| o.t_pure_us),
                t_cpu_us: r.overlap.map(|o| o.t_cpu_us),
                overlap_percent: r.overlap.map(|o| o.percent),
            })
            .expect("writing CSV to memory cannot fail");
        }
        if self.rows.is_empty() {
            w.write_record(CSV_COLUMNS)
                .expect("writing CSV to memory cannot fail");
        }
        String::from_utf8(w.into_inner().expect("in-memory writer")).expect("CSV of UTF-8 fields")
    }

    /// The run as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a Run always serialises")
    }
}

/// Rows from CSV text written by [`Run::to_csv`].
pub fn parse_csv(text: &str) -> Result<Vec<Row>, String> {
    let mut rd = csv::Reader::from_reader(text.as_bytes());
    let mut rows = Vec::new();
    for (i, rec) in rd.deserialize::<CsvRow>().enumerate() {
        let r = rec.map_err(|e| format!("CSV line {}: {e}", i + 2))?;
        rows.push(Row {
            implementation: r.implementation,
            benchmark: r.benchmark,
            algorithm: r.algorithm,
            ranks: r.ranks,
            bytes: r.bytes,
            repetitions: r.repetitions,
            t_min_us: r.t_min_us,
            t_max_us: r.t_max_us,
            t_avg_us: r.t_avg_us,
            mbytes_per_sec: r.mbytes_per_sec,
            overlap: match (r.t_pure_us, r.t_cpu_us, r.overlap_percent) {
                (Some(t_pure_us), Some(t_cpu_us), Some(percent)) => Some(Overlap {
                    t_pure_us,
                    t_cpu_us,
                    percent,
                }),
                _ => None,
            },
        });
    }
    Ok(rows)
}

/// Rows from any result text: tca JSON (a [`Run`]), tca CSV, or IMB-MPI1 text output.
pub fn parse_any(text: &str) -> Result<Vec<Row>, String> {
    let t = text.trim_start();
    if t.starts_with('{') {
        let run: Run = serde_json::from_str(t).map_err(|e| format!("JSON: {e}"))?;
        return Ok(run.rows);
    }
    if t.starts_with("implementation,") {
        return parse_csv(t);
    }
    let tables = imb::parse(text).map_err(|e| e.to_string())?;
    if tables.is_empty() {
        return Err(
            "not a tca CSV/JSON result nor IMB output (no `# Benchmarking` section)".into(),
        );
    }
    Ok(tables.iter().flat_map(|t| t.rows("IMB")).collect())
}

/// Rows from a result file of any of the formats of [`parse_any`].
pub fn read_file(path: &Path) -> Result<Vec<Row>, ReadError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| ReadError::Io {
        path: p.clone(),
        err,
    })?;
    parse_any(&text).map_err(|why| ReadError::Format { path: p, why })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Run {
        Run {
            machine: "cpu, 2 cores".into(),
            date: "2026-11-21T00:00:00Z".into(),
            transport: "shared memory".into(),
            rows: vec![
                Row {
                    implementation: "tca".into(),
                    benchmark: "PingPong".into(),
                    algorithm: "put_signal".into(),
                    ranks: 2,
                    bytes: 8,
                    repetitions: 1000,
                    t_min_us: 0.061,
                    t_max_us: 0.061,
                    t_avg_us: 0.061,
                    mbytes_per_sec: Some(131.147_540_983_606_56),
                    overlap: None,
                },
                Row {
                    implementation: "Open MPI 4.1.4".into(),
                    benchmark: "Allreduce".into(),
                    algorithm: "-".into(),
                    ranks: 2,
                    bytes: 1 << 20,
                    repetitions: 40,
                    t_min_us: 300.25,
                    t_max_us: 310.5,
                    t_avg_us: 305.125,
                    mbytes_per_sec: None,
                    overlap: None,
                },
                Row {
                    implementation: "tca".into(),
                    benchmark: "Iallreduce".into(),
                    algorithm: "ring".into(),
                    ranks: 2,
                    bytes: 65536,
                    repetitions: 100,
                    t_min_us: 50.5,
                    t_max_us: 52.25,
                    t_avg_us: 51.375,
                    mbytes_per_sec: None,
                    overlap: Some(Overlap::new(52.25, 40.0, 39.5)),
                },
            ],
        }
    }

    #[test]
    fn csv_and_json_round_trip() {
        let r = run();
        assert_eq!(parse_any(&r.to_csv()).unwrap(), r.rows);
        assert_eq!(parse_any(&r.to_json()).unwrap(), r.rows);
        let empty = Run { rows: vec![], ..r };
        assert!(empty.to_csv().starts_with("implementation,benchmark,"));
        assert_eq!(parse_any(&empty.to_csv()).unwrap(), vec![]);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse_any("hello\nworld\n").is_err());
        assert!(parse_any("{ not json").is_err());
        assert!(parse_any("implementation,benchmark\nx").is_err());
        let e = read_file(Path::new("/nonexistent/x.csv")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.csv"));
    }

    #[test]
    fn old_csv_without_overlap_columns_reads() {
        let old = "implementation,benchmark,algorithm,ranks,bytes,repetitions,t_min_us,t_max_us,\
                   t_avg_us,mbytes_per_sec,machine,date,transport\n\
                   tca,Allreduce,ring,2,8,10,1.0,2.0,1.5,,m,d,shm\n";
        let rows = parse_any(old).unwrap();
        assert_eq!((rows.len(), rows[0].overlap), (1, None));
    }

    #[test]
    fn overlap_is_imb_nbcs_formula() {
        // No overlap: t_ovrl is the sum; perfect: the larger of the two; beyond either end,
        // clamped.
        assert_eq!(Overlap::new(20.0, 10.0, 10.0).percent, 0.0);
        assert_eq!(Overlap::new(10.0, 10.0, 10.0).percent, 100.0);
        assert_eq!(Overlap::new(15.0, 10.0, 10.0).percent, 50.0);
        assert_eq!(Overlap::new(25.0, 10.0, 10.0).percent, 0.0);
        assert_eq!(Overlap::new(5.0, 10.0, 10.0).percent, 100.0);
        // max(t_pure, t_CPU) is the denominator (IMB's code): 4 us of work hidden behind 10 us
        // of communication is 40%; 2 us of it, 20%.
        assert!((Overlap::new(10.0, 10.0, 4.0).percent - 40.0).abs() < 1e-9);
        assert!((Overlap::new(12.0, 10.0, 4.0).percent - 20.0).abs() < 1e-9);
        // OSU: the share of the pure time that did not add to the computation.
        assert!((Overlap::new(12.0, 10.0, 4.0).osu_percent(12.0) - 20.0).abs() < 1e-9);
        assert_eq!(
            Overlap::new(0.0, 0.0, 0.0).percent,
            0.0,
            "no times, no claim"
        );
    }

    #[test]
    fn throughput() {
        let r = &run().rows[1];
        assert!((r.throughput_mb_s() - (1u64 << 20) as f64 / 305.125).abs() < 1e-9);
    }
}
