//! The simulated networks as a user types them: `tca bench --network`, `tca cg --network`,
//! `tca sim networks`, `tca sim reproduce`, and their errors.

mod common;

use common::{fails, ok};

/// The same simulated benchmark twice: identical output lines (the figures are virtual,
/// whatever the host does), marked as simulated and naming the model; on a torus of 16.
#[test]
fn bench_on_a_simulated_network_is_deterministic() {
    let args = [
        "bench",
        "PingPong",
        "Allreduce",
        "Bcast",
        "--np",
        "16",
        "--network",
        "peach2-2x8",
        "--sizes",
        "8:4K",
        "--format",
        "csv",
    ];
    let a = ok(&args);
    let b = ok(&args);
    // Every figure of every row (the fields before the machine and date columns).
    let rows = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(',').take(10).collect::<Vec<_>>().join(","))
            .collect()
    };
    assert_eq!(rows(&a), rows(&b));
    assert!(rows(&a).len() > 10, "{a}");
    assert!(a.contains("simulated network peach2-2x8"), "{a}");
    assert!(a.contains("sim:peach2-2x8"), "{a}");
}

#[test]
fn bench_network_errors() {
    fails(
        &["bench", "Bcast", "--np", "17", "--network", "peach2-2x8"],
        "has 16 nodes",
    );
    fails(
        &["bench", "Bcast", "--network", "nowhere"],
        "no network model",
    );
    fails(
        &["bench", "floor", "--network", "peach2-2x8"],
        "no simulated form",
    );
    fails(
        &[
            "bench",
            "Bcast",
            "--network",
            "peach2-2x8",
            "--compute",
            "fast",
        ],
        "expected `model`",
    );
}

#[test]
fn cg_on_a_simulated_network() {
    let out = ok(&[
        "cg",
        "--matrix",
        "poisson3d:8",
        "--np",
        "8",
        "--iters",
        "20",
        "--breakdown",
        "--network",
        "tofu-8x6x8",
    ]);
    assert!(out.contains("SIMULATED on tofu-8x6x8"), "{out}");
    assert!(
        out.contains("Allgather") && out.contains("Allreduce"),
        "{out}"
    );
    // A Matrix Market file, read by rank 0 inside its coroutine, split by nonzeros.
    let dir = std::env::temp_dir().join(format!("tca-sim-cg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("tri.mtx");
    let mut text = String::from("%%MatrixMarket matrix coordinate real symmetric\n30 30 59\n");
    for i in 1..=30 {
        text += &format!("{i} {i} 4.0\n");
        if i > 1 {
            text += &format!("{i} {} -1\n", i - 1);
        }
    }
    std::fs::write(&f, text).unwrap();
    let out = ok(&[
        "cg",
        "--matrix",
        f.to_str().unwrap(),
        "--np",
        "4",
        "--tol",
        "1e-10",
        "--partition",
        "nnz",
        "--network",
        "peach2-2x8",
    ]);
    std::fs::remove_dir_all(&dir).ok();
    assert!(out.contains("SIMULATED on peach2-2x8"), "{out}");
    // The paper's split: 7, 7, 7 and 9 rows; by nonzeros 8, 7, 7, 8.
    assert!(
        out.contains("(converged)") && out.contains("7 to 8 rows, split by nonzeros"),
        "{out}"
    );
}

#[test]
fn networks_are_listed() {
    let out = ok(&["sim", "networks"]);
    for n in [
        "peach2-2x8",
        "tofu-8x6x8",
        "tofu-64x6",
        "tofu-384",
        "fat-tree",
    ] {
        assert!(out.contains(n), "{n}: {out}");
    }
    assert!(out.contains("torus 8x6x8"), "{out}");
}

/// The seed 000 and 001 reproductions: every figure printed with its paper value and an
/// error; the ping-pongs, peak bandwidths and channel rates the models are built from come
/// back within 5%.
#[test]
fn reproduce_prints_every_seed_000_and_001_figure() {
    let out = ok(&["sim", "reproduce"]);
    let seed = |s: &str| -> Vec<&str> { out.lines().filter(|l| l.starts_with(s)).collect() };
    // A line's last columns: "... paper simulated error%".
    let col = |l: &str, back: usize| -> f64 {
        let v = l.split_whitespace().rev().nth(back).unwrap();
        v.trim_end_matches('%').parse().unwrap()
    };
    let lines = seed("seed 000");
    assert_eq!(lines.len(), 8, "{out}");
    for l in &lines[..4] {
        assert!(col(l, 0).abs() < 5.0, "{l}");
    }
    assert!(out.contains("chosen"), "{out}");
    // Seed 001: each DMA channel alone comes back at its rate (the model's input, channel 0
    // under the port's), and the multi-channel gains are printed.
    let ch = seed("seed 001");
    assert_eq!(ch.len(), 6, "{out}");
    for l in &ch[..4] {
        assert!(col(l, 0).abs() < 5.0, "{l}");
    }
    assert!(!out.contains("not reproduced: seed 001"), "{out}");
    // The model's gains (deterministic): four channels share the port, so none at 256 KB
    // (as the paper) and a small loss at 8 KB to the extra descriptors (the paper: 1.4x).
    assert!((0.8..1.0).contains(&col(ch[4], 1)), "{}", ch[4]);
    assert!((col(ch[5], 1) - 1.0).abs() < 0.05, "{}", ch[5]);
}

/// Auto on a simulated network chooses with the network's own model, not the calibration file
/// of the machine running the simulation: a file that changes what Auto takes on shared
/// memory leaves the simulated choices and virtual times as they are.
#[test]
fn simulated_choices_ignore_the_hosts_calibration_file() {
    use std::process::{Command, Stdio};
    let dir = std::env::temp_dir().join(format!("tca-sim-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("model.json");
    // Rounds a thousand times dearer than the built-in models say.
    let rounds_dear = tca::coll::model::CostModel {
        delta: 1000.0,
        ..tca::coll::model::CostModel::default()
    };
    std::fs::write(
        &file,
        tca::coll::model::Calibration::single(rounds_dear, false).to_json(),
    )
    .unwrap();
    let run = |model: &std::path::Path, net: &[&str]| -> Vec<String> {
        let mut args = vec!["bench", "Allreduce", "Reduce", "--sizes", "8,4K,64K"];
        args.extend(["--iters", "10", "--format", "csv"]);
        args.extend(net);
        let o = Command::new(common::TCA)
            .args(&args)
            .env("TCA_MODEL_FILE", model)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", common::text(&o.stderr));
        let keep = if net.is_empty() { 5 } else { 9 };
        common::text(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("tca,"))
            .map(|l| l.split(',').take(keep).collect::<Vec<_>>().join(","))
            .collect()
    };
    let none = std::path::Path::new("none");
    // On shared memory the file is what Auto chooses with (algorithms only: times vary).
    let shm = ["--np", "4"];
    let algo = |rows: Vec<String>| -> Vec<String> {
        rows.iter()
            .map(|r| r.split(',').take(3).collect::<Vec<_>>().join(","))
            .collect()
    };
    assert_ne!(algo(run(none, &shm)), algo(run(&file, &shm)));
    // On a simulated network it is not: the same algorithms and the same virtual times.
    let sim = ["--np", "8", "--network", "peach2-2x8"];
    let (a, b) = (run(none, &sim), run(&file, &sim));
    assert_eq!(a, b);
    assert_eq!(a.len(), 6, "{a:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
