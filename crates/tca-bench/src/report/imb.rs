//! IMB-MPI1's text layout (`tca bench`'s default, `--format imb`): one IMB section per
//! benchmark and implementation, readable by IMB parsers (`tca_model::imb`), and everything
//! IMB does not print — tca's algorithm per size, each half's notes, the cost models'
//! predictions, the side-by-side comparison and the Hockney fits — as `#` lines.

use tca_model::imb;
use tca_model::record::Row;

use super::{ModelReport, Output, Prediction};
use crate::suite::BENCHMARKS;

/// The IMB-MPI1 text of `out`: a section per implementation (as IMB prints one run), then
/// the comparison of two implementations and the fits as `#` lines, which IMB parsers skip.
pub fn render(out: &Output) -> String {
    let mut s = String::new();
    let impls = out.implementations();
    for im in &impls {
        let rows: Vec<&Row> = out
            .run
            .rows
            .iter()
            .filter(|r| &r.implementation == im)
            .collect();
        let ranks = rows.first().map_or(0, |r| r.ranks);
        let mut pre = vec![
            format!("tca bench: IMB-MPI1 compatible suite, implementation: {im}"),
            format!("machine: {}", out.run.machine),
            format!("date: {}", out.run.date),
            format!("ranks: {ranks}"),
        ];
        if im == "tca" {
            pre.push(format!("transport: {}", out.run.transport));
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
                        overlap: r.overlap,
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
        s += &osu_overlap(&rows);
        let algs = algorithm_lines(out, im);
        if !algs.is_empty() {
            s += "\n# algorithms (tca's choice per size, or --algo):\n";
            s += &algs;
        }
        for (who, n) in &out.notes {
            if who == im {
                s += &format!("# {n}\n");
            }
        }
        if im == "tca"
            && let Some(m) = &out.model
        {
            s += &model_text(m);
        }
        s += "\n";
    }
    if impls.len() == 2 {
        s += &comparison(out, &impls[0], &impls[1]);
    }
    if !out.fits.is_empty() || !out.fit_skipped.is_empty() {
        s += "\n# Hockney fits (seed 002): throughput T = B / (1 + M_1/2 / M), t_L = M_1/2 / B\n";
        s += &format!(
            "# {:<16} {:<15} {:>12} {:>12} {:>11} {:>8} {:>7} {:>20}\n",
            "implementation", "benchmark", "B[MB/s]", "M_1/2[B]", "t_L[usec]", "R2", "rms", "sizes"
        );
        for f in &out.fits {
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
        for k in &out.fit_skipped {
            s += &format!("# no fit: {k}\n");
        }
    }
    s
}

/// `# Allreduce: 8..64 recursive_doubling, 128.. ring` lines for tca (and, for the GASNet
/// benchmarks, what each size does: `Put: 8..8 put, BtoB, 65536..4194304 put, MtoM`).
fn algorithm_lines(out: &Output, im: &str) -> String {
    let mut s = String::new();
    for b in BENCHMARKS
        .iter()
        .filter(|b| b.collective.is_some() || b.lattice() || b.gasnet())
    {
        let mut runs: Vec<(u64, u64, &str)> = Vec::new();
        for r in out
            .run
            .rows
            .iter()
            .filter(|r| r.implementation == im && r.benchmark == b.name && r.algorithm != "-")
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

/// The side-by-side table: t_avg of both and the ratio, per benchmark and size; with
/// `--rounds`, the range of the ratios of each round's pair (round k of one against round k
/// of the other, which ran next to it).
fn comparison(out: &Output, a: &str, b: &str) -> String {
    let rounds = !out.rounds.is_empty();
    let mut s = format!(
        "#----------------------------------------------------------------\n# {a} vs {b}: t_avg[usec] per call, ratio {a}/{b} (below 1: {a} is faster){}\n#----------------------------------------------------------------\n",
        if rounds {
            "; t_avg of the median round, and the ratios of the rounds' pairs"
        } else {
            ""
        }
    );
    s += &format!(
        "# {:<15} {:>10} {:>13} {:>13} {:>9}{}\n",
        "benchmark",
        "#bytes",
        a,
        b,
        "ratio",
        if rounds {
            format!(" {:>13}", "rounds")
        } else {
            String::new()
        }
    );
    let mut wins = (0, 0);
    for bench in BENCHMARKS.iter().filter(|b| !b.nonblocking()) {
        for x in out
            .run
            .rows
            .iter()
            .filter(|r| r.implementation == a && r.benchmark == bench.name)
        {
            let Some(y) =
                out.run.rows.iter().find(|r| {
                    r.implementation == b && r.benchmark == bench.name && r.bytes == x.bytes
                })
            else {
                continue;
            };
            let ratio = x.t_avg_us / y.t_avg_us;
            if ratio < 1.0 {
                wins.0 += 1;
            } else {
                wins.1 += 1;
            }
            let pairs = out
                .round_times(a, bench.name, x.bytes)
                .zip(out.round_times(b, bench.name, x.bytes))
                .and_then(|(p, q)| tca_mpi::rounds::ratio_range(p, q))
                .map_or(String::new(), |(lo, hi)| {
                    format!(" {:>13}", format!("{lo:.2}-{hi:.2}"))
                });
            s += &format!(
                "# {:<15} {:>10} {:>13.3} {:>13.3} {:>9.3}{pairs}\n",
                bench.name, x.bytes, x.t_avg_us, y.t_avg_us, ratio
            );
        }
    }
    if wins.0 + wins.1 == 0 {
        // Only non-blocking benchmarks ran: their own table.
        return overlap_comparison(out, a, b);
    }
    s += &format!(
        "# {a} faster in {} of {} comparisons\n",
        wins.0,
        wins.0 + wins.1
    );
    s + &overlap_comparison(out, a, b)
}

/// The non-blocking benchmarks of one implementation in OSU's layout (`osu_iallreduce`,
/// `osu_ibcast`, ...: overall, compute and pure communication time, OSU's overlap), as `#`
/// lines after IMB-NBC's section.
fn osu_overlap(rows: &[&Row]) -> String {
    let mut s = String::new();
    for bench in BENCHMARKS.iter().filter(|b| b.nonblocking()) {
        let mine: Vec<&&Row> = rows.iter().filter(|r| r.benchmark == bench.name).collect();
        let Some(first) = mine.first() else { continue };
        s += &format!(
            "# OSU's layout (osu_{}), {} ranks: overall = the slowest rank's t_ovrl\n",
            bench.name.to_lowercase(),
            first.ranks
        );
        s += &format!(
            "# {:>10} {:>14} {:>14} {:>16} {:>12}\n",
            "Size", "Overall(us)", "Compute(us)", "Pure Comm.(us)", "Overlap(%)"
        );
        for r in mine {
            let Some(o) = r.overlap else { continue };
            s += &format!(
                "# {:>10} {:>14.2} {:>14.2} {:>16.2} {:>12.2}\n",
                r.bytes,
                r.t_max_us,
                o.t_cpu_us,
                o.t_pure_us,
                o.osu_percent(r.t_max_us)
            );
        }
    }
    s
}

/// The non-blocking benchmarks side by side: each implementation's pure time, time with
/// computation and overlap (IMB-NBC's, and OSU's in brackets).
fn overlap_comparison(out: &Output, a: &str, b: &str) -> String {
    let pairs: Vec<(&Row, &Row)> = BENCHMARKS
        .iter()
        .filter(|x| x.nonblocking())
        .flat_map(|bench| {
            let rows = &out.run.rows;
            rows.iter()
                .filter(move |r| r.implementation == a && r.benchmark == bench.name)
                .filter_map(move |x| {
                    let y = rows.iter().find(|r| {
                        r.implementation == b && r.benchmark == bench.name && r.bytes == x.bytes
                    })?;
                    Some((x, y))
                })
        })
        .collect();
    if pairs.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "#----------------------------------------------------------------\n# {a} vs {b}, non-blocking: t_pure and t_ovrl[usec] (the slowest rank's), overlap % (IMB-NBC; OSU's in brackets)\n"
    );
    s += &format!(
        "# {:<15} {:>10} {:>11} {:>11} {:>14} {:>11} {:>11} {:>14}\n",
        "benchmark", "#bytes", "pure", "ovrl", a, "pure", "ovrl", b
    );
    let cell = |r: &Row| {
        let o = r
            .overlap
            .unwrap_or(tca_model::record::Overlap::new(0.0, 0.0, 0.0));
        (
            o.t_pure_us,
            r.t_max_us,
            format!("{:.0}% ({:.0}%)", o.percent, o.osu_percent(r.t_max_us)),
        )
    };
    for (x, y) in pairs {
        let (xp, xo, xc) = cell(x);
        let (yp, yo, yc) = cell(y);
        s += &format!(
            "# {:<15} {:>10} {:>11.2} {:>11.2} {:>14} {:>11.2} {:>11.2} {:>14}\n",
            x.benchmark, x.bytes, xp, xo, xc, yp, yo, yc
        );
    }
    s
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
