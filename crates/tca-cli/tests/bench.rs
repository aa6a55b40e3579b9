//! `tca bench` as a user types it: the floor, the IMB suite at 2 and 3 ranks, every output
//! format, plots, fits, and the errors for bad input.

mod common;

use common::{fails, ok, tca, text};

const ALL: [&str; 13] = [
    "PingPong",
    "PingPing",
    "Sendrecv",
    "Exchange",
    "Reduce_scatter",
    "Allreduce",
    "Reduce",
    "Allgather",
    "Gather",
    "Scatter",
    "Alltoall",
    "Bcast",
    "Barrier",
];

#[test]
fn floor_smoke() {
    let out = ok(&["bench", "floor", "--iters", "1000", "--format", "json"]);
    assert!(
        out.contains("cacheline_half_rtt_ns") && out.contains("memcpy_gb_s"),
        "{out}"
    );
    // The small-message stream in its four forms, each a time per message.
    let v: serde_json::Value = serde_json::from_str(&out).expect("the floor's JSON parses");
    let forms: Vec<(u64, bool)> = v["stream_8b"]
        .as_array()
        .expect("stream_8b is a list")
        .iter()
        .map(|f| {
            let (best, median) = (f["ns"].as_f64().unwrap(), f["ns_median"].as_f64().unwrap());
            assert!(best > 0.0 && best <= median && median.is_finite(), "{f}");
            (
                f["per_line"].as_u64().unwrap(),
                f["seqcst"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        forms,
        [(1, false), (1, true), (2, false), (2, true)],
        "{out}"
    );
}

/// Every benchmark at 2 and 3 ranks with tiny sizes; the IMB text reads back as IMB text
/// with the sections, process counts and sizes asked for.
#[test]
fn every_benchmark_at_2_and_3_ranks() {
    for np in ["2", "3"] {
        let out = ok(&[
            "bench", "--np", np, "--sizes", "0:64", "--iters", "20", "--warmup", "2",
        ]);
        let secs = tca_model::imb::parse(&out).expect("IMB text parses");
        let names: Vec<&str> = secs.iter().map(|s| s.benchmark.as_str()).collect();
        assert_eq!(names, ALL, "{out}");
        for s in &secs {
            let p: u32 = np.parse().unwrap();
            let pt2pt = s.benchmark.starts_with("Ping");
            assert_eq!(s.processes, if pt2pt { 2 } else { p }, "{}", s.benchmark);
            assert_eq!(s.processes + s.waiting, p);
            let sizes: Vec<u64> = s.lines.iter().map(|l| l.bytes).collect();
            let want: Vec<u64> = match s.benchmark.as_str() {
                "Barrier" => vec![0],
                "Allreduce" | "Reduce" => vec![0, 4, 8, 16, 32, 64],
                // whole f32 blocks per rank
                "Reduce_scatter" if np == "3" => vec![0, 12, 24, 60],
                "Reduce_scatter" => vec![0, 8, 16, 32, 64],
                _ => vec![0, 1, 2, 4, 8, 16, 32, 64],
            };
            assert_eq!(sizes, want, "{}", s.benchmark);
            for l in &s.lines {
                assert_eq!(l.repetitions, 20);
                assert!(l.t_min <= l.t_avg && l.t_avg <= l.t_max, "{l:?}");
            }
        }
        assert!(out.contains("# algorithms"), "{out}");
        // The floor ratio with a core per rank; with 3 ranks on 2 cores, why it is skipped.
        assert!(
            out.contains("one-sided/plain") || out.contains("floor comparison skipped"),
            "{out}"
        );
    }
}

/// `--progress thread`: the collectives through a progress thread per rank, blocking and
/// non-blocking, at 3 ranks; the report says so; other benchmarks and simulated networks are
/// refused with the reason.
#[test]
fn collectives_through_progress_threads() {
    let out = ok(&[
        "bench",
        "Iallreduce",
        "Ibcast",
        "Allreduce",
        "Barrier",
        "PingPong",
        "--np",
        "3",
        "--sizes",
        "8,64K",
        "--iters",
        "20",
        "--test-calls",
        "1",
        "--progress",
        "thread",
    ]);
    let secs = tca_model::imb::parse(&out).expect("the report parses");
    let names: Vec<&str> = secs.iter().map(|s| s.benchmark.as_str()).collect();
    assert_eq!(
        names,
        ["PingPong", "Allreduce", "Barrier", "Ibcast", "Iallreduce"],
        "{out}"
    );
    for s in &secs {
        let p = if s.benchmark == "PingPong" { 2 } else { 3 };
        assert_eq!(s.processes, p, "{}", s.benchmark);
        for l in &s.lines {
            assert!(l.t_max > 0.0 && l.repetitions == 20, "{l:?}");
            if s.benchmark.starts_with('I') {
                let o = l.overlap.expect("IMB-NBC columns");
                assert!((0.0..=100.0).contains(&o.percent), "{l:?}");
            }
        }
    }
    assert!(out.contains("progress thread"), "{out}");
    fails(
        &["bench", "PingPing", "--progress", "thread", "--iters", "5"],
        "--progress thread and proxy run the collectives",
    );
    fails(
        &["bench", "Allreduce", "--progress", "process"],
        "progress mode must be `caller`, `thread` or `proxy`",
    );
    fails(
        &[
            "bench",
            "Allreduce",
            "--progress",
            "thread",
            "--network",
            "peach2-2x8",
        ],
        "not on a simulated network",
    );
}

/// `--progress proxy`: the same through the node proxy process (`tca run --offload`), which
/// holds every rank's world; blocking collectives posted and waited for, forced algorithms
/// and the algorithm column through control requests.
#[test]
fn collectives_through_the_node_proxy() {
    let out = ok(&[
        "bench",
        "Iallreduce",
        "Allreduce",
        "Reduce_scatter",
        "PingPong",
        "--np",
        "3",
        "--sizes",
        "8,64K",
        "--iters",
        "20",
        "--algo",
        "Allreduce=ring",
        "--progress",
        "proxy",
    ]);
    let secs = tca_model::imb::parse(&out).expect("the report parses");
    let names: Vec<&str> = secs.iter().map(|s| s.benchmark.as_str()).collect();
    assert_eq!(
        names,
        ["PingPong", "Reduce_scatter", "Allreduce", "Iallreduce"],
        "{out}"
    );
    for s in &secs {
        for l in &s.lines {
            assert!(l.t_max > 0.0 && l.repetitions == 20, "{l:?}");
        }
    }
    assert!(out.contains("node proxy"), "{out}");
    assert!(out.contains("Allreduce       8..65536 ring"), "{out}");
    fails(
        &["bench", "Sendrecv", "--progress", "proxy", "--iters", "5"],
        "--progress thread and proxy run the collectives",
    );
}

/// IMB-NBC's benchmarks, named (not in the default run): every one at 3 ranks, with tests
/// during the computation; IMB-NBC's columns read back, the sizes of the blocking forms, the
/// overlap a percentage, and the CSV carries the same figures.
#[test]
fn imb_nbc_benchmarks() {
    const NBC: [&str; 9] = [
        "Ibcast",
        "Iallgather",
        "Igather",
        "Iscatter",
        "Ialltoall",
        "Ireduce",
        "Ireduce_scatter",
        "Iallreduce",
        "Ibarrier",
    ];
    let mut args = vec!["bench"];
    args.extend(NBC);
    args.extend([
        "--np",
        "3",
        "--sizes",
        "0,8,4K",
        "--iters",
        "5",
        "--test-calls",
        "2",
    ]);
    let out = ok(&args);
    let secs = tca_model::imb::parse(&out).expect("IMB-NBC text parses");
    let names: Vec<&str> = secs.iter().map(|s| s.benchmark.as_str()).collect();
    assert_eq!(names, NBC, "{out}");
    for s in &secs {
        assert_eq!(s.processes, 3);
        let sizes: Vec<u64> = s.lines.iter().map(|l| l.bytes).collect();
        let want: Vec<u64> = match s.benchmark.as_str() {
            "Ibarrier" => vec![0],
            // whole f32 blocks per rank
            "Ireduce_scatter" => vec![0, 4092],
            _ => vec![0, 8, 4096],
        };
        assert_eq!(sizes, want, "{}", s.benchmark);
        for l in &s.lines {
            let o = l.overlap.expect("IMB-NBC columns");
            assert!((0.0..=100.0).contains(&o.percent), "{l:?}");
            assert!(o.t_pure_us > 0.0 && l.t_max > 0.0, "{l:?}");
            assert_eq!(l.repetitions, 5);
        }
    }
    assert!(
        out.contains("t_ovrl[usec]") && out.contains("# algorithms"),
        "{out}"
    );
    // OSU's layout of the same figures: each benchmark's block, its overlap OSU's formula
    // over the slowest rank's t_ovrl, t_CPU and t_pure.
    for s in &secs {
        let head = format!(
            "# OSU's layout (osu_{}), 3 ranks",
            s.benchmark.to_lowercase()
        );
        let at = out
            .find(&head)
            .unwrap_or_else(|| panic!("no `{head}` in {out}"));
        let rows: Vec<Vec<f64>> = out[at..]
            .lines()
            .skip(2)
            .take(s.lines.len())
            .map(|l| {
                l.trim_start_matches('#')
                    .split_whitespace()
                    .map(|w| w.parse().unwrap())
                    .collect()
            })
            .collect();
        for (row, l) in rows.iter().zip(&s.lines) {
            // (Both layouts print rounded times: compared to the rounding.)
            let o = l.overlap.expect("IMB-NBC columns");
            assert_eq!(row[0], l.bytes as f64, "{row:?}");
            assert!((row[1] - l.t_max).abs() < 0.01, "{row:?} {l:?}");
            assert!((row[3] - o.t_pure_us).abs() < 0.01, "{row:?} {o:?}");
            // OSU's percent from the printed times, each rounded to 0.01 us: at sub-microsecond
            // times the rounding alone moves it by several points, so the printed percent must
            // lie within what the times' rounding allows.
            // The percent is monotonic in each time, so its bounds lie at the box's 8 corners.
            let (lo, hi) = (0..8)
                .map(|corner: u32| {
                    let off = |bit: u32| {
                        if corner >> bit & 1 == 1 {
                            0.005
                        } else {
                            -0.005
                        }
                    };
                    tca_model::record::Overlap {
                        t_pure_us: row[3] + off(0),
                        t_cpu_us: row[2] + off(1),
                        percent: 0.0,
                    }
                    .osu_percent(row[1] + off(2))
                })
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
                    (l.min(x), h.max(x))
                });
            assert!(
                (lo - 0.01..=hi + 0.01).contains(&row[4]),
                "{row:?} against {lo}..{hi}"
            );
        }
    }
    let csv = ok(&[
        "bench",
        "Iallreduce",
        "--sizes",
        "1K",
        "--iters",
        "5",
        "--format",
        "csv",
    ]);
    let rows = tca_model::record::parse_any(&csv).unwrap();
    assert_eq!(rows.len(), 1, "{csv}");
    let o = rows[0].overlap.expect("the overlap columns");
    assert!(o.t_cpu_us > 0.0 && o.t_pure_us > 0.0, "{csv}");
}

/// OSU's tests and the halo exchange, named (they are not in the default run): their sections,
/// sizes and pairs; osu_mbw_mr on two pairs; Halo one row per lattice with its grid.
/// GASNet's testam-style benchmarks over tca's active messages: every kind, get and put
/// (blocking, non-blocking windows, from the segment), at the sizes each takes (Short: 8
/// bytes per argument, up to 16; Medium: up to 64 KiB).
#[test]
fn gasnet_benchmarks() {
    let out = ok(&[
        "bench",
        "AM_Short",
        "AM_Medium",
        "AM_Medium_from",
        "AM_Long",
        "Get",
        "Get_nbi",
        "Put",
        "Put_from",
        "Put_nbi",
        "VIS_Halo",
        "VIS_Halo_MtoM",
        "--sizes",
        "8,128,200,100K",
        "--iters",
        "20",
    ]);
    let secs = tca_model::imb::parse(&out).expect("IMB text parses");
    let got: Vec<(&str, Vec<u64>)> = secs
        .iter()
        .map(|s| {
            (
                s.benchmark.as_str(),
                s.lines.iter().map(|l| l.bytes).collect(),
            )
        })
        .collect();
    let all = vec![8, 128, 200, 100 << 10];
    assert_eq!(
        got,
        [
            ("AM_Short", vec![8, 128]),
            ("AM_Medium", vec![8, 128, 200]),
            ("AM_Medium_from", vec![8, 128, 200]),
            ("AM_Long", all.clone()),
            ("Get", all.clone()),
            // Three faces of N*N f64 for N = 16, 32, 64, 128, whatever --sizes says.
            ("VIS_Halo", vec![6144, 24576, 98304, 393216]),
            ("VIS_Halo_MtoM", vec![6144, 24576, 98304, 393216]),
            ("Put", all.clone()),
            ("Put_from", all.clone()),
            ("Put_nbi", all.clone()),
            ("Get_nbi", all),
        ],
        "{out}"
    );
    assert!(
        secs.iter().all(|s| s.lines.iter().all(|l| l.t_min > 0.0)),
        "{out}"
    );
}

#[test]
fn osu_and_halo() {
    let out = ok(&[
        "bench",
        "osu_latency",
        "osu_bw",
        "osu_bibw",
        "Halo",
        "--sizes",
        "0,8,64K",
        "--iters",
        "4",
        "--lattice",
        "4x4x4x8,8x8x8x8",
    ]);
    let secs = tca_model::imb::parse(&out).expect("IMB text parses");
    let names: Vec<&str> = secs.iter().map(|s| s.benchmark.as_str()).collect();
    assert_eq!(
        names,
        ["osu_latency", "osu_bw", "osu_bibw", "Halo"],
        "{out}"
    );
    for s in &secs[..3] {
        let sizes: Vec<u64> = s.lines.iter().map(|l| l.bytes).collect();
        assert_eq!(sizes, [0, 8, 65536], "{out}");
        assert_eq!(s.processes, 2);
        assert!(s.lines[2].mbytes_per_sec.unwrap() > 0.0, "{out}");
    }
    // 4x4x4x8 on 1x1x1x2: two T faces of 4*4*4 sites of 48 bytes; 8x8x8x8: of 8*8*8.
    let halo: Vec<u64> = secs[3].lines.iter().map(|l| l.bytes).collect();
    assert_eq!(halo, [2 * 64 * 48, 2 * 512 * 48], "{out}");
    assert!(out.contains("4x4x4x8 on 1x1x1x2"), "{out}");
    let out = ok(&[
        "bench",
        "osu_mbw_mr",
        "Halo",
        "--np",
        "4",
        "--sizes",
        "8,4K",
        "--iters",
        "3",
        "--lattice",
        "8x8x8x8",
    ]);
    let secs = tca_model::imb::parse(&out).expect("IMB text parses");
    assert_eq!(secs[0].benchmark, "osu_mbw_mr");
    assert_eq!((secs[0].processes, secs[0].lines.len()), (4, 2), "{out}");
    // 8x8x8x8 on 1x1x2x2 (local 8x8x4x4): faces of 8*8*4 sites in Z and in T, both ways.
    assert_eq!(secs[1].lines[0].bytes, 4 * 256 * 48, "{out}");
    assert!(out.contains("8x8x8x8 on 1x1x2x2"), "{out}");
}

#[test]
fn csv_json_out_plot_and_fit() {
    let dir = std::env::temp_dir().join(format!("tca-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("r.csv");
    let png = dir.join("r.png");
    let svg = dir.join("r.svg");
    let o = tca(&[
        "bench",
        "PingPong",
        "allreduce",
        "--sizes",
        "1K:64K",
        "--iters",
        "30",
        "--format",
        "csv",
        "--out",
        csv.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty(), "with --out nothing goes to stdout");
    let rows = tca_model::record::read_file(&csv).unwrap();
    assert_eq!(rows.len(), 2 * 7);
    assert!(
        rows.iter()
            .all(|r| r.ranks == 2 && r.implementation == "tca")
    );
    let head = std::fs::read_to_string(&csv).unwrap();
    assert!(head.starts_with("implementation,benchmark,algorithm,ranks,bytes"));
    let png_bytes = std::fs::read(&png).unwrap();
    assert_eq!(&png_bytes[..4], b"\x89PNG");

    let out = ok(&[
        "bench",
        "PingPong",
        "--sizes",
        "1K:64K",
        "--iters",
        "30",
        "--fit",
        "1K:64K",
        "--format",
        "json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 7);
    // A fit is made, or refused with its reason (a loaded machine can give data no Hockney
    // curve fits; the fitting itself is tested on known data in tca-model and tca-bench).
    match v["fits"].as_array().unwrap().first() {
        Some(f) => {
            assert_eq!(f["benchmark"], "PingPong");
            assert!(f["b_mb_s"].as_f64().unwrap() > 0.0, "{f}");
            assert!(f["m_half_bytes"].as_f64().unwrap() > 0.0, "{f}");
            assert_eq!(f["range"], "--fit");
        }
        None => {
            let why = v["fit_skipped"][0].as_str().unwrap();
            assert!(why.contains("tca PingPong over 1024..65536 bytes"), "{why}");
        }
    }
    assert!(v["machine"].is_string() && v["date"].is_string() && v["transport"].is_string());
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn forced_algorithm_shows_in_the_rows() {
    let out = ok(&[
        "bench",
        "Allreduce",
        "--np",
        "3",
        "--sizes",
        "8,4K",
        "--iters",
        "10",
        "--algo",
        "ring",
        "--format",
        "csv",
    ]);
    let rows = tca_model::record::parse_any(&out).unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.algorithm == "ring"), "{rows:?}");
}

#[test]
fn repeat_times_each_size_again_and_keeps_the_counts() {
    let out = ok(&[
        "bench",
        "Allreduce",
        "Bcast",
        "--sizes",
        "8,4K",
        "--iters",
        "10",
        "--repeat",
        "3",
        "--format",
        "csv",
    ]);
    let rows = tca_model::record::parse_any(&out).unwrap();
    assert_eq!(rows.len(), 4);
    assert!(
        rows.iter().all(|r| r.repetitions == 10 && r.t_avg_us > 0.0),
        "{rows:?}"
    );
    let o = tca(&["bench", "--repeat", "0"]);
    assert_eq!(o.status.code(), Some(2), "clap usage error");
}

/// One size grammar: `tca bench` and `tca model` read `64KB`, `64K` and `65536` alike, and
/// both say so in `--help`.
#[test]
fn sizes_read_the_same_everywhere() {
    let out = ok(&[
        "bench",
        "Bcast",
        "--sizes",
        "1KB,2K,4096",
        "--iters",
        "5",
        "--format",
        "csv",
    ]);
    let rows = tca_model::record::parse_any(&out).expect("CSV parses");
    let sizes: Vec<u64> = rows.iter().map(|r| r.bytes).collect();
    assert_eq!(sizes, [1024, 2048, 4096], "{out}");
    for cmd in [&["bench", "--help"][..], &["model", "fit", "--help"]] {
        let help = ok(cmd);
        assert!(help.contains(tca_model::size::GRAMMAR), "{cmd:?}: {help}");
    }
}

#[test]
fn bad_input_is_refused_clearly() {
    fails(&["bench", "PingPong", "--np", "1"], "at least 2 ranks");
    fails(&["bench", "nosuch"], "unknown benchmark `nosuch`");
    fails(&["bench", "--sizes", "64:8"], "MIN is larger than MAX");
    fails(&["bench", "--sizes", "12Q"], "unknown unit");
    fails(&["bench", "--sizes", "abc"], "expected a number of bytes");
    fails(&["bench", "--sizes", "2G"], "larger than 1 GiB");
    fails(&["bench", "--fit", "4M:64K"], "MIN is above MAX");
    fails(&["bench", "--iters", "0"], "positive number or `auto`");
    fails(&["bench", "--algo", "nosuch"], "unknown algorithm `nosuch`");
    fails(&["bench", "--algo", "Allreduce=nosuch"], "nosuch");
    fails(&["bench", "--fit", "8"], "MIN:MAX");
    fails(&["bench", "--plot", "x.jpg"], ".png or .svg");
    fails(&["bench", "floor", "PingPong"], "on its own");
    fails(&["bench", "--np", "0"], "at least 1");
    fails(&["bench", "osu_mbw_mr", "--np", "3"], "must be even");
    fails(&["bench", "Halo", "--np", "1"], "at least 2 ranks");
    fails(
        &["bench", "Halo", "--lattice", "5x5x5x5"],
        "cannot be split over 2 ranks",
    );
    fails(&["bench", "Halo", "--lattice", "16x16x16"], "four extents");
    fails(
        &["bench", "Halo", "--lattice", "16x16x16x16,16x16x16x32"],
        "both move",
    );
    let o = tca(&["bench", "--format", "xml"]);
    assert_eq!(o.status.code(), Some(2), "clap usage error");
    let o = tca(&["bench", "--compare", "openmpi"]);
    assert_eq!(o.status.code(), Some(2), "clap usage error");
}

/// OSU's tests and the halo exchange beside MPI's (with the `mpi` feature).
#[test]
fn compare_mpi_osu_and_halo() {
    if !cfg!(feature = "mpi") {
        return;
    }
    let out = ok(&[
        "bench",
        "osu_bw",
        "osu_mbw_mr",
        "Halo",
        "AM_Short",
        "Iallreduce",
        "--sizes",
        "8,64K",
        "--iters",
        "5",
        "--lattice",
        "8x8x8x8",
        "--compare",
        "mpi",
    ]);
    let secs = tca_model::imb::parse(&out).unwrap();
    // AM_Short is tca's only (MPI has no active messages): no MPI section, no comparison.
    assert_eq!(secs.len(), 9, "tca and MPI sections: {out}");
    let rows = out
        .lines()
        .filter(|l| l.starts_with("# osu_") || l.starts_with("# Halo"))
        .count();
    assert_eq!(rows, 5, "one comparison line per benchmark and size: {out}");
    // MPI_Iallreduce's section has IMB-NBC's figures; both are compared on their own lines.
    let mpi = secs.iter().rfind(|s| s.benchmark == "Iallreduce").unwrap();
    assert!(mpi.lines.iter().all(|l| l.overlap.is_some()), "{out}");
    assert!(out.contains("non-blocking: t_pure"), "{out}");
    let rows = out
        .lines()
        .filter(|l| l.starts_with("# Iallreduce"))
        .count();
    assert_eq!(rows, 2, "one overlap comparison line per size: {out}");
}

/// Put and Get beside MPI's one-sided calls (`MPI_Put`/`MPI_Get` + `MPI_Win_flush` in a
/// window): both halves run them, and each size gets its comparison line.
#[test]
fn compare_mpi_put_get() {
    if !cfg!(feature = "mpi") {
        return;
    }
    let out = ok(&[
        "bench",
        "Put",
        "Get",
        "--sizes",
        "8,64K",
        "--iters",
        "5",
        "--compare",
        "mpi",
    ]);
    let secs = tca_model::imb::parse(&out).unwrap();
    assert_eq!(secs.len(), 4, "tca's and MPI's Put and Get: {out}");
    for b in ["Put", "Get"] {
        let rows = out
            .lines()
            .filter(|l| l.starts_with(&format!("# {b} ")))
            .count();
        assert_eq!(rows, 2, "one comparison line per size of {b}: {out}");
    }
}

/// Without the `mpi` feature, --compare mpi says how to get it; with it, a small comparison
/// runs (CI builds with the feature for this test: see .ci/run), in two alternating rounds
/// with the floor before each half.
#[test]
fn compare_mpi() {
    let o = tca(&[
        "bench",
        "PingPong",
        "Allreduce",
        "--sizes",
        "8,1K",
        "--iters",
        "20",
        "--compare",
        "mpi",
        "--rounds",
        "2",
    ]);
    let err = text(&o.stderr);
    if !cfg!(feature = "mpi") {
        assert!(!o.status.success());
        assert!(err.contains("--features mpi"), "{err}");
        return;
    }
    assert!(o.status.success(), "{err}");
    let out = text(&o.stdout);
    let secs = tca_model::imb::parse(&out).unwrap();
    assert_eq!(secs.len(), 4, "tca and MPI sections: {out}");
    assert!(out.contains("tca vs "), "{out}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("# PingPong") || l.starts_with("# Allreduce"))
        .collect();
    assert_eq!(
        rows.len(),
        4,
        "one comparison line per benchmark and size: {out}"
    );
    let note = out
        .lines()
        .find(|l| l.contains("2 rounds alternating tca, then "))
        .unwrap_or_else(|| panic!("the rounds note: {out}"));
    assert!(
        note.contains("round 1: tca ")
            && note.contains("round 2: tca ")
            && !note.contains("round 3"),
        "{note}"
    );
    assert!(note.contains("after the last "), "{note}");
}

/// `--rounds` without MPI keeps each cell's median round and notes the floors; it is refused
/// where it means nothing.
#[test]
fn rounds_of_the_suite() {
    let o = tca(&[
        "bench", "PingPong", "Bcast", "--sizes", "8", "--iters", "50", "--rounds", "3",
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{err}");
    assert_eq!(tca_model::imb::parse(&out).unwrap().len(), 2, "{out}");
    let note = out
        .lines()
        .find(|l| l.contains("3 rounds: each figure is its implementation's median round"))
        .unwrap_or_else(|| panic!("the rounds note: {out}"));
    for r in [
        "round 1: tca ",
        "round 2: tca ",
        "round 3: tca ",
        "after the last ",
    ] {
        assert!(note.contains(r), "{note}");
    }
    let o = tca(&["bench", "floor", "--rounds", "2"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("--rounds is for the suite"));
    let o = tca(&[
        "bench",
        "Bcast",
        "--np",
        "4",
        "--network",
        "peach2-2x8",
        "--rounds",
        "2",
    ]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("the same in every round"));
    let o = tca(&["bench", "Bcast", "--rounds", "0"]);
    assert_eq!(o.status.code(), Some(2), "a usage error");
    // Ranks started by `tca run` have nobody to alternate their rounds.
    let o = tca(&[
        "run",
        "-n",
        "2",
        "--",
        common::TCA,
        "bench",
        "Bcast",
        "--sizes",
        "8",
        "--rounds",
        "2",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("run the command once per round"),
        "{}",
        text(&o.stderr)
    );
}
