//! Intel MPI Benchmarks (IMB-MPI1) text: written by `tca bench --format imb`, read by
//! `tca model fit` (from tca or from a real IMB run).
//!
//! The layout is IMB's, so the parsers people already have read it: each benchmark is a
//! section opened by `# Benchmarking NAME` and `# #processes = N`, then a column header line,
//! then one line of numbers per message size. PingPong and PingPing report `t[usec]` and
//! `Mbytes/sec` (10^6 bytes per second); the collectives report `t_min[usec] t_max[usec]
//! t_avg[usec]` over the ranks; Barrier has no `#bytes` column. Times are printed with three
//! decimals (IMB prints two, which hides everything below 10 ns; parsers split on whitespace
//! and do not care). The non-blocking benchmarks' sections are IMB-NBC's: `t_ovrl[usec]
//! t_pure[usec] t_CPU[usec] overlap[%]` (Ibarrier without `#bytes`).

use std::fmt::Write as _;

use crate::record::{Overlap, Row};

/// Which columns a benchmark's section has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Columns {
    /// `#bytes #repetitions t[usec] Mbytes/sec` (PingPong, PingPing).
    PointToPoint,
    /// `#bytes #repetitions t_min[usec] t_max[usec] t_avg[usec]` (collectives).
    Collective,
    /// `#repetitions t_min[usec] t_max[usec] t_avg[usec]` (Barrier).
    NoBytes,
    /// `#bytes #repetitions t_ovrl[usec] t_pure[usec] t_CPU[usec] overlap[%]` (IMB-NBC).
    Overlap,
    /// `#repetitions t_ovrl[usec] t_pure[usec] t_CPU[usec] overlap[%]` (Ibarrier).
    OverlapNoBytes,
}

impl Columns {
    /// The columns IMB uses for the benchmark called `name`.
    pub fn of(name: &str) -> Columns {
        match name {
            "PingPong" | "PingPing" | "Sendrecv" | "Exchange" | "osu_latency" | "osu_bw"
            | "osu_bibw" | "osu_mbw_mr" | "Halo" | "AM_Short" | "AM_Medium" | "AM_Medium_from"
            | "AM_Long" | "Get" | "Get_nbi" | "Put" | "Put_from" | "Put_nbi" | "VIS_Halo"
            | "VIS_Halo_MtoM" => Columns::PointToPoint,
            "Barrier" => Columns::NoBytes,
            "Ibcast" | "Iallgather" | "Igather" | "Iscatter" | "Ialltoall" | "Ireduce"
            | "Ireduce_scatter" | "Iallreduce" => Columns::Overlap,
            "Ibarrier" => Columns::OverlapNoBytes,
            _ => Columns::Collective,
        }
    }

    fn header(self) -> &'static str {
        match self {
            Columns::PointToPoint => "       #bytes #repetitions      t[usec]   Mbytes/sec",
            Columns::Collective => {
                "       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]"
            }
            Columns::NoBytes => " #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]",
            Columns::Overlap => {
                "       #bytes #repetitions t_ovrl[usec] t_pure[usec]  t_CPU[usec]   overlap[%]"
            }
            Columns::OverlapNoBytes => {
                " #repetitions t_ovrl[usec] t_pure[usec]  t_CPU[usec]   overlap[%]"
            }
        }
    }
}

/// One line of a section.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    /// Message bytes (0 for Barrier).
    pub bytes: u64,
    /// Timed calls.
    pub repetitions: u64,
    /// Fastest rank, us (equal to the others for PingPong/PingPing).
    pub t_min: f64,
    /// Slowest rank, us.
    pub t_max: f64,
    /// Mean, us.
    pub t_avg: f64,
    /// Mbytes/sec (PingPong, PingPing).
    pub mbytes_per_sec: Option<f64>,
    /// IMB-NBC's figures (the non-blocking benchmarks, whose times are t_ovrl).
    pub overlap: Option<Overlap>,
}

/// One `# Benchmarking` section.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// IMB's benchmark name.
    pub benchmark: String,
    /// `# #processes = N`: the ranks taking part.
    pub processes: u32,
    /// `( N additional processes waiting in MPI_Barrier)`: ranks idle during the benchmark.
    pub waiting: u32,
    /// The lines, in size order.
    pub lines: Vec<Line>,
}

impl Section {
    /// The section as result rows of `implementation`.
    pub fn rows(&self, implementation: &str) -> Vec<Row> {
        self.lines
            .iter()
            .map(|l| Row {
                implementation: implementation.to_string(),
                benchmark: self.benchmark.clone(),
                algorithm: "-".to_string(),
                ranks: self.processes + self.waiting,
                bytes: l.bytes,
                repetitions: l.repetitions,
                t_min_us: l.t_min,
                t_max_us: l.t_max,
                t_avg_us: l.t_avg,
                mbytes_per_sec: l.mbytes_per_sec,
                overlap: l.overlap,
            })
            .collect()
    }
}

const RULE: &str = "#----------------------------------------------------------------";

/// Writes sections as IMB-MPI1 text; `preamble` lines are printed first, each prefixed `# `.
pub fn write(preamble: &[String], sections: &[Section]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{RULE}");
    for p in preamble {
        let _ = writeln!(s, "# {p}");
    }
    let _ = writeln!(s, "{RULE}");
    for sec in sections {
        let cols = Columns::of(&sec.benchmark);
        let _ = writeln!(s, "\n{RULE}");
        let _ = writeln!(s, "# Benchmarking {}", sec.benchmark);
        let _ = writeln!(s, "# #processes = {}", sec.processes);
        if sec.waiting > 0 {
            let _ = writeln!(
                s,
                "# ( {} additional processes waiting in MPI_Barrier)",
                sec.waiting
            );
        }
        let _ = writeln!(s, "{RULE}");
        let _ = writeln!(s, "{}", cols.header());
        for l in &sec.lines {
            let _ = match cols {
                Columns::PointToPoint => writeln!(
                    s,
                    "{:>13} {:>12} {:>12.3} {:>12.2}",
                    l.bytes,
                    l.repetitions,
                    l.t_avg,
                    l.mbytes_per_sec.unwrap_or(0.0)
                ),
                Columns::Collective => writeln!(
                    s,
                    "{:>13} {:>12} {:>12.3} {:>12.3} {:>12.3}",
                    l.bytes, l.repetitions, l.t_min, l.t_max, l.t_avg
                ),
                Columns::NoBytes => writeln!(
                    s,
                    "{:>13} {:>12.3} {:>12.3} {:>12.3}",
                    l.repetitions, l.t_min, l.t_max, l.t_avg
                ),
                Columns::Overlap | Columns::OverlapNoBytes => {
                    let o = l.overlap.unwrap_or(Overlap {
                        t_pure_us: 0.0,
                        t_cpu_us: 0.0,
                        percent: 0.0,
                    });
                    if cols == Columns::Overlap {
                        let _ = write!(s, "{:>13} ", l.bytes);
                    }
                    // IMB-NBC's t_ovrl is that of the rank with the largest.
                    writeln!(
                        s,
                        "{:>12} {:>12.3} {:>12.3} {:>12.3} {:>12.2}",
                        l.repetitions, l.t_max, o.t_pure_us, o.t_cpu_us, o.percent
                    )
                }
            };
        }
    }
    s
}

/// A malformed IMB text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("IMB text line {line}: {why}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub why: String,
}

/// Reads every `# Benchmarking` section of IMB-MPI1 text (IMB's own output or tca's).
/// Lines outside sections (IMB's preamble, `#` comments) are skipped. Columns past the ones
/// read are ignored (IMB's Sendrecv and Exchange add `Mbytes/sec` after the times, IMB-P2P's
/// PingPong `Msg/sec`). Uniband and Biband, which report only a bandwidth and a message rate,
/// are read as sections without lines.
pub fn parse(text: &str) -> Result<Vec<Section>, ParseError> {
    let mut out: Vec<Section> = Vec::new();
    let mut cols: Option<Columns> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let err = |why: String| ParseError { line: i + 1, why };
        if let Some(name) = line.strip_prefix("# Benchmarking ") {
            out.push(Section {
                benchmark: name.trim().to_string(),
                processes: 0,
                waiting: 0,
                lines: Vec::new(),
            });
            cols = None;
            continue;
        }
        let Some(sec) = out.last_mut() else { continue };
        if let Some(n) = line.strip_prefix("# #processes =") {
            sec.processes = n
                .trim()
                .parse()
                .map_err(|_| err(format!("bad process count `{}`", n.trim())))?;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# (") {
            if let Some(n) = rest.split_whitespace().next() {
                sec.waiting = n.parse().unwrap_or(0);
            }
            continue;
        }
        if line.starts_with("#bytes") || line.starts_with("#repetitions") {
            let c = if line.contains("t_ovrl") {
                if line.starts_with("#bytes") {
                    Columns::Overlap
                } else {
                    Columns::OverlapNoBytes
                }
            } else if line.contains("t_min") {
                if line.starts_with("#bytes") {
                    Columns::Collective
                } else {
                    Columns::NoBytes
                }
            } else if line.contains("t[usec]") {
                Columns::PointToPoint
            } else if line.contains("Mbytes/sec") && line.contains("Msg/sec") {
                // IMB-MPI1's Uniband and Biband: a bandwidth and a message rate over a window
                // of messages, no time per call. Nothing here to fit: the section stays
                // empty.
                cols = None;
                continue;
            } else {
                return Err(err(format!("unknown column header `{line}`")));
            };
            cols = Some(c);
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(c) = cols else { continue };
        let nums: Vec<&str> = line.split_whitespace().collect();
        let want = match c {
            Columns::PointToPoint => 4,
            Columns::Collective => 5,
            Columns::NoBytes => 4,
            Columns::Overlap => 6,
            Columns::OverlapNoBytes => 5,
        };
        if nums.len() < want {
            // IMB ends a section with free text in some versions; stop reading numbers.
            cols = None;
            continue;
        }
        let int = |k: usize| -> Result<u64, ParseError> {
            nums[k]
                .parse()
                .map_err(|_| err(format!("`{}` is not a whole number", nums[k])))
        };
        let real = |k: usize| -> Result<f64, ParseError> {
            let v: f64 = nums[k]
                .parse()
                .map_err(|_| err(format!("`{}` is not a number", nums[k])))?;
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(err(format!("`{}` is not a time", nums[k])))
            }
        };
        let l = match c {
            Columns::PointToPoint => {
                let t = real(2)?;
                Line {
                    bytes: int(0)?,
                    repetitions: int(1)?,
                    t_min: t,
                    t_max: t,
                    t_avg: t,
                    mbytes_per_sec: Some(real(3)?),
                    overlap: None,
                }
            }
            Columns::Collective => Line {
                bytes: int(0)?,
                repetitions: int(1)?,
                t_min: real(2)?,
                t_max: real(3)?,
                t_avg: real(4)?,
                mbytes_per_sec: None,
                overlap: None,
            },
            Columns::NoBytes => Line {
                bytes: 0,
                repetitions: int(0)?,
                t_min: real(1)?,
                t_max: real(2)?,
                t_avg: real(3)?,
                mbytes_per_sec: None,
                overlap: None,
            },
            Columns::Overlap | Columns::OverlapNoBytes => {
                let k = usize::from(c == Columns::Overlap);
                let t = real(k + 1)?;
                Line {
                    bytes: if k == 1 { int(0)? } else { 0 },
                    repetitions: int(k)?,
                    t_min: t,
                    t_max: t,
                    t_avg: t,
                    mbytes_per_sec: None,
                    overlap: Some(Overlap {
                        t_pure_us: real(k + 2)?,
                        t_cpu_us: real(k + 3)?,
                        percent: real(k + 4)?,
                    }),
                }
            }
        };
        sec.lines.push(l);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round3(x: f64) -> f64 {
        (x * 1000.0).round() / 1000.0
    }

    /// IMB 2021.3 output as it comes from a real run (abridged).
    const REAL_IMB: &str = "\
#----------------------------------------------------------------
#    Intel(R) MPI Benchmarks 2021.3, MPI-1 part
#----------------------------------------------------------------
# Date                  : Tue Nov 10 10:00:00 2026
# Machine               : x86_64

# List of Benchmarks to run:

# PingPong
# Allreduce
# Barrier

#----------------------------------------------------------------
# Benchmarking PingPong
# #processes = 2
# ( 2 additional processes waiting in MPI_Barrier)
#----------------------------------------------------------------
       #bytes #repetitions      t[usec]   Mbytes/sec
            0         1000         0.21         0.00
            1         1000         0.22         4.55
      4194304           10       851.30      4926.94

#----------------------------------------------------------------
# Benchmarking Allreduce
# #processes = 4
#----------------------------------------------------------------
       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]
            0         1000         0.03         0.04         0.03
            8         1000         0.61         0.75         0.68

#----------------------------------------------------------------
# Benchmarking Barrier
# #processes = 4
#----------------------------------------------------------------
 #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]
         1000         0.50         0.52         0.51


# All processes entering MPI_Finalize
";

    #[test]
    fn reads_real_imb_output() {
        let s = parse(REAL_IMB).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].benchmark, "PingPong");
        assert_eq!((s[0].processes, s[0].waiting), (2, 2));
        assert_eq!(s[0].lines.len(), 3);
        assert_eq!(s[0].lines[2].bytes, 4194304);
        assert_eq!(s[0].lines[2].t_avg, 851.30);
        assert_eq!(s[0].lines[2].mbytes_per_sec, Some(4926.94));
        assert_eq!(s[1].lines[1].t_max, 0.75);
        assert_eq!(s[2].benchmark, "Barrier");
        assert_eq!(s[2].lines[0].repetitions, 1000);
        assert_eq!(s[2].lines[0].t_avg, 0.51);
        assert_eq!(s[0].rows("IMB")[0].ranks, 4);
    }

    /// IMB-NBC's layout (columns and widths as IMB 2021 prints them; the numbers are made
    /// up, consistent with IMB-NBC's formula): the overlap columns, Ibarrier without bytes.
    const REAL_NBC: &str = "\
#----------------------------------------------------------------
# Benchmarking Iallreduce
# #processes = 2
#----------------------------------------------------------------
       #bytes #repetitions t_ovrl[usec] t_pure[usec]  t_CPU[usec]   overlap[%]
            0         1000         1.17         0.61         0.58         3.28
        65536          320        62.90        33.51        33.16        11.25

#----------------------------------------------------------------
# Benchmarking Ibarrier
# #processes = 2
#----------------------------------------------------------------
 #repetitions t_ovrl[usec] t_pure[usec]  t_CPU[usec]   overlap[%]
         1000         3.11         1.40         1.66         0.00
";

    #[test]
    fn reads_imb_nbc_output() {
        let s = parse(REAL_NBC).unwrap();
        assert_eq!(s.len(), 2);
        let l = &s[0].lines[1];
        assert_eq!((l.bytes, l.repetitions, l.t_avg), (65536, 320, 62.90));
        let o = l.overlap.unwrap();
        assert_eq!((o.t_pure_us, o.t_cpu_us, o.percent), (33.51, 33.16, 11.25));
        assert!((Overlap::new(62.90, 33.51, 33.16).percent - o.percent).abs() < 0.01);
        let b = &s[1].lines[0];
        assert_eq!((b.bytes, b.repetitions, b.t_max), (0, 1000, 3.11));
        assert_eq!(b.overlap.unwrap().percent, 0.0);
        assert_eq!(s[0].rows("IMB")[1].overlap, Some(o));
    }

    #[test]
    fn bad_numbers_name_the_line() {
        let t = "# Benchmarking Allreduce\n# #processes = 2\n #bytes #repetitions t_min[usec] t_max[usec] t_avg[usec]\n 8 x 1 2 3\n";
        let e = parse(t).unwrap_err();
        assert_eq!(e.line, 4);
        assert!(e.to_string().contains("`x`"), "{e}");
        let t = "# Benchmarking Allreduce\n# #processes = two\n";
        assert!(parse(t).is_err());
        let t = "# Benchmarking Allreduce\n# #processes = 2\n #bytes #repetitions t_min[usec] t_max[usec] t_avg[usec]\n 8 1 NaN 2 3\n";
        assert!(parse(t).is_err());
    }

    fn line(cols: Columns) -> impl Strategy<Value = Line> {
        (
            0u64..1 << 26,
            1u64..100_000,
            0.0f64..1e6,
            0.0f64..1e6,
            0.0f64..1e6,
        )
            .prop_map(move |(b, r, x, y, z)| {
                let (lo, hi) = (x.min(y).min(z), x.max(y).max(z));
                match cols {
                    Columns::PointToPoint => Line {
                        bytes: b,
                        repetitions: r,
                        t_min: x,
                        t_max: x,
                        t_avg: x,
                        mbytes_per_sec: Some(if x > 0.0 { b as f64 / x } else { 0.0 }),
                        overlap: None,
                    },
                    Columns::Collective => Line {
                        bytes: b,
                        repetitions: r,
                        t_min: lo,
                        t_max: hi,
                        t_avg: (lo + hi) / 2.0,
                        mbytes_per_sec: None,
                        overlap: None,
                    },
                    Columns::NoBytes => Line {
                        bytes: 0,
                        repetitions: r,
                        t_min: lo,
                        t_max: hi,
                        t_avg: (lo + hi) / 2.0,
                        mbytes_per_sec: None,
                        overlap: None,
                    },
                    Columns::Overlap | Columns::OverlapNoBytes => Line {
                        bytes: if cols == Columns::Overlap { b } else { 0 },
                        repetitions: r,
                        t_min: x,
                        t_max: x,
                        t_avg: x,
                        mbytes_per_sec: None,
                        overlap: Some(Overlap::new(x, y, z)),
                    },
                }
            })
    }

    proptest! {
        /// Write, read back: the same sections, numbers equal to the printed precision, and
        /// writing what was read gives the same text.
        #[test]
        fn round_trip(
            pp in proptest::collection::vec(line(Columns::PointToPoint), 0..6),
            co in proptest::collection::vec(line(Columns::Collective), 0..6),
            ba in proptest::collection::vec(line(Columns::NoBytes), 0..2),
            ov in proptest::collection::vec(line(Columns::Overlap), 0..4),
            ob in proptest::collection::vec(line(Columns::OverlapNoBytes), 0..2),
            procs in 1u32..64,
            waiting in 0u32..4,
        ) {
            let secs = vec![
                Section { benchmark: "PingPong".into(), processes: 2, waiting, lines: pp },
                Section { benchmark: "Allreduce".into(), processes: procs, waiting: 0, lines: co },
                Section { benchmark: "Barrier".into(), processes: procs, waiting: 0, lines: ba },
                Section { benchmark: "Iallreduce".into(), processes: procs, waiting: 0, lines: ov },
                Section { benchmark: "Ibarrier".into(), processes: procs, waiting: 0, lines: ob },
            ];
            let text = write(&["tca bench, test".into()], &secs);
            let back = parse(&text).unwrap();
            prop_assert_eq!(back.len(), 5);
            for (a, b) in secs.iter().zip(&back) {
                prop_assert_eq!(&a.benchmark, &b.benchmark);
                prop_assert_eq!((a.processes, a.waiting), (b.processes, b.waiting));
                prop_assert_eq!(a.lines.len(), b.lines.len());
                for (x, y) in a.lines.iter().zip(&b.lines) {
                    prop_assert_eq!((x.bytes, x.repetitions), (y.bytes, y.repetitions));
                    prop_assert_eq!(round3(x.t_min), y.t_min);
                    prop_assert_eq!(round3(x.t_max), y.t_max);
                    prop_assert_eq!(round3(x.t_avg), y.t_avg);
                    if let (Some(m), Some(n)) = (x.mbytes_per_sec, y.mbytes_per_sec) {
                        prop_assert!((m - n).abs() <= 0.005 + 1e-9);
                    }
                    prop_assert_eq!(x.overlap.is_some(), y.overlap.is_some());
                    if let (Some(m), Some(n)) = (x.overlap, y.overlap) {
                        prop_assert_eq!(round3(m.t_pure_us), n.t_pure_us);
                        prop_assert_eq!(round3(m.t_cpu_us), n.t_cpu_us);
                        prop_assert!((m.percent - n.percent).abs() <= 0.005 + 1e-9);
                    }
                }
            }
            prop_assert_eq!(write(&["tca bench, test".into()], &back), text);
        }
    }
}
