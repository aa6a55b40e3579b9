//! `tca model calibrate` and `tca bench --model` as a user types them (issue 5, item 4). Every
//! command runs with its own `TCA_MODEL_FILE`, so the user's real configuration is never read
//! or written.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tca::Collective;
use tca::coll::ALGORITHMS;
use tca::coll::model::{Calibration, CostModel};
use tca_bench::suite::BENCHMARKS;
use tca_model::record::{Row, Run};

const TCA: &str = env!("CARGO_BIN_EXE_tca");

/// A temporary directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("tca-calibrate-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tca(model_file: &Path, args: &[&str]) -> Output {
    Command::new(TCA)
        .args(args)
        .env("TCA_MODEL_FILE", model_file)
        .stdin(Stdio::null())
        .output()
        .expect("tca runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The model the synthetic measurements are made with.
fn truth() -> CostModel {
    CostModel {
        alpha: 0.07,
        beta: 1.1e-4,
        beta_send: 4.0e-5,
        beta_small: 3.0e-5,
        beta_local: 2.0e-5,
        gamma: 1.0e-5,
        delta: 0.12,
        alpha_spill: 0.015,
        beta_far: 3.0e-5,
        knee: 2048.0,
        cache: (1 << 20) as f64,
        cores: 0.0,
    }
}

/// Rows as `tca bench` would write them if the machine followed `m` exactly: every algorithm
/// of every collective benchmark, forced, at 2 and 4 ranks, 8 B to 4 MiB.
fn synthetic_rows(m: &CostModel, cores: u32) -> Vec<Row> {
    // As measured on a machine of `cores` cores.
    let on_this_machine = CostModel {
        cores: f64::from(cores),
        ..*m
    };
    let mut rows = Vec::new();
    for p in [2usize, 4] {
        for a in ALGORITHMS.iter().filter(|a| (a.supports)(p)) {
            let bench = BENCHMARKS
                .iter()
                .find(|b| b.collective == Some(a.collective))
                .expect("every collective has its benchmark");
            let sizes: Vec<u64> = if a.collective == Collective::Barrier {
                vec![0]
            } else {
                (3..=22).map(|k| 1u64 << k).collect()
            };
            for bytes in sizes {
                // What the model takes: each rank's share for Reduce_scatter (stated here, not
                // taken from the code under test).
                let n = if a.collective == Collective::ReduceScatter {
                    bytes as usize / p
                } else {
                    bytes as usize
                };
                let t = a.cost(&on_this_machine, p, n);
                rows.push(Row {
                    implementation: "tca".into(),
                    benchmark: bench.name.into(),
                    algorithm: a.name.into(),
                    ranks: p as u32,
                    bytes,
                    repetitions: 100,
                    t_min_us: t,
                    t_max_us: t,
                    t_avg_us: t,
                    mbytes_per_sec: None,
                    overlap: None,
                });
            }
        }
    }
    rows
}

/// The true model's rows as measured on `cores` cores, written to a CSV file in `dir`.
fn write_rows(dir: &TempDir, cores: u32) -> PathBuf {
    let rows = dir.0.join("rows.csv");
    let run = Run {
        machine: "synthetic".into(),
        date: "2026-01-01T00:00:00Z".into(),
        transport: "none".into(),
        rows: synthetic_rows(&truth(), cores),
    };
    std::fs::write(&rows, run.to_csv()).unwrap();
    rows
}

/// `tca model calibrate --from rows --cores N`, writing `out`.
fn calibrate_from(out: &Path, rows: &Path, cores: &str) -> Output {
    let args = [
        "model",
        "calibrate",
        "--from",
        rows.to_str().unwrap(),
        "--cores",
        cores,
    ];
    tca(out, &args)
}

#[test]
fn calibrate_fits_measurements_and_writes_the_file() {
    let dir = TempDir::new("fit");
    let rows = write_rows(&dir, 4);
    let out = dir.0.join("model.json");
    let o = calibrate_from(&out, &rows, "4");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    assert!(s.contains("2 ranks") && s.contains("4 ranks"), "{s}");
    assert!(
        s.contains("allreduce") && s.contains("automatic choice"),
        "{s}"
    );
    assert!(s.contains(&format!("wrote {}", out.display())), "{s}");

    // The file: valid, both rank counts, a model per collective, fitting almost exactly.
    let cal = Calibration::load(&out).unwrap();
    assert_eq!(
        cal.ranks.iter().map(|r| r.ranks).collect::<Vec<_>>(),
        vec![2, 4]
    );
    for r in &cal.ranks {
        assert!(r.collectives.len() >= 8, "{:?}", r.collectives.keys());
        for (name, f) in &r.collectives {
            let q = f.fit.as_ref().unwrap();
            assert!(q.rms_rel_err < 0.01, "{name}: {q:?}");
        }
        assert!(r.all.fit.as_ref().unwrap().rms_rel_err < 0.01);
        // The chosen shape parameters are the truth's.
        assert_eq!(
            (r.all.model.knee, r.all.model.cache),
            (truth().knee, truth().cache)
        );
    }
    // Choices made from the fitted models are those of the true model (where the truth
    // does not tie).
    let t = Calibration {
        ranks: cal
            .ranks
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.all.model = truth();
                r.collectives.clear();
                r
            })
            .collect(),
        ..cal.clone()
    };
    let mut same = 0;
    let mut total = 0;
    for p in [2usize, 4] {
        for c in Collective::ALL {
            for k in 3..=22 {
                total += 1;
                same += usize::from(std::ptr::eq(
                    cal.choose(c, p, 1 << k),
                    t.choose(c, p, 1 << k),
                ));
            }
        }
    }
    assert!(same * 100 >= total * 95, "{same} of {total} choices agree");
}

/// Measurements that crossed a network make entries for communicators that span nodes;
/// `tca model choices` shows what Auto picks with them, and within a node (no such entries
/// in the file) the built-in shared-memory models.
#[test]
fn network_calibration_and_the_choices_it_makes() {
    let dir = TempDir::new("net");
    let rows = write_rows(&dir, 4);
    let out = dir.0.join("model.json");
    let mut args = vec!["model", "calibrate", "--from", rows.to_str().unwrap()];
    args.extend(["--cores", "4", "--network"]);
    let o = tca(&out, &args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("at 2 ranks across a network"));
    let cal = Calibration::load(&out).unwrap();
    assert!(cal.ranks.iter().all(|r| r.network), "{cal:?}");
    assert!(cal.nearest(2).is_none());

    let file = out.to_str().unwrap();
    let net = tca(
        Path::new("none"),
        &[
            "model",
            "choices",
            "--file",
            file,
            "--np",
            "2,4",
            "--network",
        ],
    );
    assert!(net.status.success(), "{}", text(&net.stderr));
    let s = text(&net.stdout);
    assert!(s.contains(&format!("models: {file}")), "{s}");
    for p in [2, 4] {
        assert!(s.contains(&format!("at {p} ranks across a network")), "{s}");
    }
    // Within a node the file has nothing: the built-in models choose, as without any file.
    let on_node = tca(
        Path::new("none"),
        &["model", "choices", "--file", file, "--np", "4"],
    );
    let builtin = tca(Path::new("none"), &["model", "choices", "--np", "4"]);
    let body = |o: &Output| {
        text(&o.stdout)
            .lines()
            .skip(1)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        body(&on_node).contains("at 4 ranks ("),
        "{}",
        body(&on_node)
    );
    assert_eq!(body(&on_node), body(&builtin));
    assert!(text(&builtin.stdout).starts_with("models: the built-in models"));
    // Calibrating within a node into the same file keeps its network entries beside.
    let o = calibrate_from(&out, &rows, "4");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    assert!(s.contains("kept the 2 entries"), "{s}");
    let both = Calibration::load(&out).unwrap();
    assert_eq!(both.ranks.iter().filter(|r| r.network).count(), 2);
    assert_eq!(both.nearest(4).unwrap().ranks, 4);
    assert!(both.nearest_on(4, true).unwrap().network);
    let bad = tca(Path::new("none"), &["model", "choices", "--np", "1"]);
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("at least 2 ranks"));
    let missing = tca(
        Path::new("none"),
        &["model", "choices", "--file", "/nonexistent/m.json"],
    );
    assert!(!missing.status.success());
    assert!(text(&missing.stderr).contains("/nonexistent/m.json"));
}

#[test]
fn calibrate_rejects_bad_arguments() {
    let dir = TempDir::new("args");
    let f = dir.0.join("m.json");
    for (args, needle) in [
        (vec!["model", "calibrate", "--np", "0"], "at least 1"),
        (vec!["model", "calibrate", "--rounds", "0"], "at least 1"),
        (vec!["model", "calibrate", "--sizes", "8:4"], "--sizes"),
        (
            vec!["model", "calibrate", "--from", "/nonexistent/rows.csv"],
            "rows.csv",
        ),
    ] {
        let o = tca(&f, &args);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            text(&o.stderr).contains(needle),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    // Nowhere to write.
    let o = tca(Path::new("none"), &["model", "calibrate", "--quick"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("--out"), "{}", text(&o.stderr));
    assert!(!f.exists());
}

#[test]
fn bench_prints_predictions_beside_measurements() {
    let dir = TempDir::new("bench");
    let f = dir.0.join("model.json");
    let mut cal = Calibration::builtin();
    cal.machine = "test machine".into();
    cal.date = "2026-01-01T00:00:00Z".into();
    cal.save(&f).unwrap();
    let args = [
        "bench",
        "Allreduce",
        "Bcast",
        "Reduce_scatter",
        "--np",
        "2",
        "--sizes",
        "8,64K",
        "--iters",
        "20",
        "--model",
    ];
    let o = tca(&f, &args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    assert!(
        s.contains("# model: cost model calibrated 2026-01-01T00:00:00Z on test machine"),
        "{s}"
    );
    assert!(
        s.contains("model[usec]") && s.contains("worst error"),
        "{s}"
    );
    let lines: Vec<&str> = s
        .lines()
        .filter(|l| l.starts_with("#   Allreduce") || l.starts_with("#   Bcast"))
        .filter(|l| l.ends_with('%'))
        .collect();
    assert_eq!(lines.len(), 4, "{s}");

    // JSON: a field per prediction, with the same measured times as the rows.
    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let o = tca(&f, &json_args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let preds = v["model"]["predictions"].as_array().unwrap();
    assert_eq!(preds.len(), 6, "{v}");
    for p in preds {
        let (m, t, e) = (
            p["measured_us"].as_f64().unwrap(),
            p["predicted_us"].as_f64().unwrap(),
            p["error_percent"].as_f64().unwrap(),
        );
        assert!(m > 0.0 && t > 0.0);
        assert!((e - 100.0 * (t - m) / m).abs() < 1e-6);
    }
    // Reduce_scatter's model takes each rank's share: the prediction at 64K is the cost at 32K.
    let rs = preds
        .iter()
        .find(|p| p["benchmark"] == "Reduce_scatter" && p["bytes"] == 65536)
        .unwrap();
    let alg =
        tca::coll::registry::find(Collective::ReduceScatter, rs["algorithm"].as_str().unwrap())
            .unwrap();
    let want = cal.predict(alg, 2, 32768);
    assert!((rs["predicted_us"].as_f64().unwrap() - want).abs() < 1e-9 * want);

    // Without --model: no model lines.
    let o = tca(&f, &args[..args.len() - 1]);
    assert!(!text(&o.stdout).contains("# model"));
}

#[test]
fn a_malformed_model_file_is_one_warning_and_the_defaults() {
    let dir = TempDir::new("bad");
    let f = dir.0.join("model.json");
    std::fs::write(&f, "{ this is not a model").unwrap();
    let o = tca(
        &f,
        &[
            "bench",
            "Allreduce",
            "--np",
            "3",
            "--sizes",
            "8",
            "--iters",
            "10",
            "--model",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains(&f.display().to_string()) && warnings[0].contains("built-in"),
        "{err}"
    );
    let s = text(&o.stdout);
    assert!(s.contains("# model: built-in default cost model"), "{s}");
    // A missing file is no warning: the defaults, silently.
    let o = tca(
        &dir.0.join("missing.json"),
        &[
            "bench",
            "Allreduce",
            "--np",
            "2",
            "--sizes",
            "8",
            "--iters",
            "10",
        ],
    );
    assert!(o.status.success());
    assert!(!text(&o.stderr).contains("warning"), "{}", text(&o.stderr));
}

#[test]
fn calibrate_shares_the_cores_out_when_ranks_outnumber_them() {
    // Measured on 2 cores: the 4-rank rows are paced by all ranks' work over 2 cores.
    let dir = TempDir::new("crowded");
    let rows = write_rows(&dir, 2);
    let out = dir.0.join("model.json");
    let fit = |cores: &str| {
        let o = calibrate_from(&out, &rows, cores);
        assert!(o.status.success(), "{}", text(&o.stderr));
        Calibration::load(&out).unwrap()
    };
    let shared = fit("2");
    let four = shared.ranks.iter().find(|r| r.ranks == 4).unwrap();
    assert_eq!(four.cores, 2);
    let rms = |r: &tca::coll::model::RankModels| {
        r.collectives
            .values()
            .map(|f| f.fit.as_ref().unwrap().rms_rel_err)
            .fold(0.0, f64::max)
    };
    eprintln!("cores 2: worst rms {}", rms(four));
    // Fitted as if every rank had a core, the same rows fit worse.
    let dedicated = fit("4");
    let four_dedicated = dedicated.ranks.iter().find(|r| r.ranks == 4).unwrap();
    eprintln!("cores 4: worst rms {}", rms(four_dedicated));
    assert!(rms(four) < 0.05, "{}", rms(four));
    assert!(
        rms(four_dedicated) > rms(four),
        "{} {}",
        rms(four_dedicated),
        rms(four)
    );
}

/// `tca model counts` prints what each algorithm's counting pass found and Auto's choice:
/// the ring allreduce on 4 ranks takes 2 (p - 1) rounds and sends 2 (p - 1) blocks of n/p
/// per rank; exactly one algorithm per size is Auto's; bad names are clear errors.
#[test]
fn counts_show_each_algorithm_s_schedule() {
    let o = tca(
        Path::new("none"),
        &[
            "model",
            "counts",
            "--np",
            "4",
            "--collective",
            "allreduce",
            "--sizes",
            "1K,1M",
            "--format",
            "json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    let ring = rows
        .iter()
        .find(|r| r["algorithm"] == "ring" && r["bytes"] == 1 << 20)
        .unwrap();
    assert_eq!(ring["busiest"]["rounds"], 6.0);
    assert_eq!(ring["busiest"]["sent_bytes"], 6.0 * f64::from(1 << 18));
    assert_eq!(ring["all_ranks"]["sent_bytes"], 24.0 * f64::from(1 << 18));
    for n in [1024, 1 << 20] {
        let autos = rows
            .iter()
            .filter(|r| r["bytes"] == n && r["auto"] == true)
            .count();
        assert_eq!(autos, 1, "{n}");
    }
    let t = tca(
        Path::new("none"),
        &["model", "counts", "--np", "8", "--collective", "bcast"],
    );
    assert!(!t.status.success());
    assert!(text(&t.stderr).contains("broadcast"), "{}", text(&t.stderr));
    let text_out = tca(Path::new("none"), &["model", "counts", "--np", "3"]);
    assert!(text_out.status.success(), "{}", text(&text_out.stderr));
    let s = text(&text_out.stdout);
    assert!(s.contains("recursive_doubling") && s.contains(" *"), "{s}");
}
