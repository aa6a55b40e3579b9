//! `tca cg` as a user runs it: the command starts its own rank processes.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tca-cli-cg-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `tca cg ARGS` with a hard timeout.
fn tca_cg(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tca"))
        .arg("cg")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("tca cg {args:?} did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A 12 x 12 SPD matrix (tridiagonal 4, -1) in symmetric storage.
/// 40 rows, the first 10 coupled to all others (31 entries each, the others 11): a split by
/// nonzeros differs from the paper's.
#[cfg(feature = "mpi")]
fn uneven_matrix() -> String {
    let mut entries: Vec<String> = (1..=40).map(|i| format!("{i} {i} 10")).collect();
    for i in 1..=10 {
        for j in 11..=40 {
            entries.push(format!("{j} {i} -0.1"));
        }
    }
    format!(
        "%%MatrixMarket matrix coordinate real symmetric\n40 40 {}\n{}\n",
        entries.len(),
        entries.join("\n")
    )
}

fn small_matrix() -> String {
    let mut s = String::from("%%MatrixMarket matrix coordinate real symmetric\n12 12 23\n");
    for i in 1..=12 {
        s += &format!("{i} {i} 4.0\n");
        if i > 1 {
            s += &format!("{i} {} -1\n", i - 1);
        }
    }
    s
}

#[test]
fn solves_a_small_file_on_two_processes() {
    let d = tmpdir("ok");
    let f = d.join("a.mtx");
    std::fs::write(&f, small_matrix()).unwrap();
    let out = tca_cg(&[
        "--matrix",
        f.to_str().unwrap(),
        "--np",
        "2",
        "--tol",
        "1e-10",
        "--breakdown",
        "--format",
        "json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let o = tca_cg::Output::from_json(&stdout).unwrap();
    let r = &o.tca;
    assert_eq!((r.ranks, r.rows_per_rank.as_slice()), (2, &[6u64, 6][..]));
    assert_eq!((r.matrix.rows, r.matrix.nnz), (12, 34));
    assert_eq!(r.outcome, tca_cg::Outcome::Converged);
    assert!(r.iterations > 0 && r.iterations <= 12, "{}", r.iterations);
    assert!(r.relative_residual < 1e-10);
    assert!(r.true_relative_residual < 1e-9);
    let b = r.breakdown.as_ref().unwrap();
    assert_eq!(b.per_rank.len(), 2);
    assert!(o.mpi.is_none() && o.ratio.is_none());
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn bad_input_is_one_clear_error() {
    let d = tmpdir("bad");
    let f = d.join("a.mtx");
    // Not symmetric: A(1,2) = -1 but A(2,1) = -2.
    std::fs::write(
        &f,
        "%%MatrixMarket matrix coordinate real general\n2 2 4\n1 1 4\n1 2 -1\n2 1 -2\n2 2 4\n",
    )
    .unwrap();
    let out = tca_cg(&["--matrix", f.to_str().unwrap(), "--np", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not symmetric"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line only:\n{stderr}");
    assert!(out.stdout.is_empty());

    let out = tca_cg(&["--matrix", "banded:8:3", "--np", "9"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("8 rows but there are 9 ranks"), "{stderr}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn unconverged_tolerance_run_exits_2() {
    let out = tca_cg(&[
        "--matrix",
        "poisson3d:4",
        "--np",
        "2",
        "--tol",
        "1e-12",
        "--max-iters",
        "2",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("did not converge"), "{stdout}");
}

#[cfg(feature = "mpi")]
#[test]
fn compare_mpi_runs_both_halves() {
    let d = tmpdir("mpi");
    let f = d.join("a.mtx");
    std::fs::write(&f, uneven_matrix()).unwrap();
    let out = tca_cg(&[
        "--matrix",
        f.to_str().unwrap(),
        "--np",
        "3",
        "--tol",
        "1e-10",
        "--breakdown",
        "--schedule",
        "overlap",
        "--partition",
        "nnz",
        "--compare",
        "mpi",
        "--rounds",
        "2",
        "--format",
        "json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let o = tca_cg::Output::from_json(&stdout).unwrap();
    let m = o.mpi.as_ref().expect("an MPI half");
    // The library as the benchmarks name it ("Open MPI 4.1.4", "MPICH 4.0.2").
    assert!(m.transport.contains("MPI"), "{}", m.transport);
    // Split by nonzeros on both halves alike (the paper's split: 13, 13, 14 rows).
    assert_eq!(m.rows_per_rank, vec![7, 14, 19]);
    assert_eq!(m.rows_per_rank, o.tca.rows_per_rank);
    assert_eq!(
        (o.tca.partition, m.partition),
        (tca_cg::PartitionBy::Nnz, tca_cg::PartitionBy::Nnz)
    );
    assert_eq!(m.iterations, o.tca.iterations);
    // Both halves overlapped the Allgather (MPI with MPI_Iallgatherv).
    assert_eq!(
        (o.tca.schedule, m.schedule),
        (tca_cg::Schedule::Overlap, tca_cg::Schedule::Overlap)
    );
    assert!(m.true_relative_residual < 1e-9);
    let r = o.ratio.as_ref().unwrap();
    assert!(r.per_iteration > 0.0 && r.rank0.is_some() && r.max.is_some());
    // What free communication would reach: tca's own work, a part of its whole time.
    let free = r.free_communication.expect("with --breakdown");
    assert!(
        free > 0.0 && free <= r.per_iteration,
        "{free} {}",
        r.per_iteration
    );
    assert!(
        r.mpi_communication_share
            .is_some_and(|s| (0.0..1.0).contains(&s))
    );
    assert!(o.mpi_library.is_some());
    // Two alternating rounds, each half's median printed, every round's time in the note.
    let note = o
        .tca
        .notes
        .iter()
        .find(|n| n.starts_with("time per iteration by round, us: tca "))
        .unwrap_or_else(|| panic!("{:?}", o.tca.notes));
    assert!(note.contains("2 rounds alternating tca, then "), "{note}");
    assert!(
        note.contains("(ratio ") && note.contains("after the last "),
        "{note}"
    );
    std::fs::remove_dir_all(&d).ok();
}

#[cfg(not(feature = "mpi"))]
#[test]
fn compare_mpi_without_the_feature_says_how_to_get_it() {
    let out = tca_cg(&["--matrix", "poisson3d:3", "--compare", "mpi"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--features mpi"), "{stderr}");
}

/// `--precond jacobi --schedule overlap --rhs a-ones`: the report says which preconditioner
/// and schedule ran and how far x is from the all-ones solution; an unknown preconditioner or
/// schedule is a usage error.
#[test]
fn jacobi_preconditioner_from_the_command_line() {
    let out = tca_cg(&[
        "--matrix",
        "poisson3d:5",
        "--np",
        "2",
        "--tol",
        "1e-10",
        "--precond",
        "jacobi",
        "--schedule",
        "overlap",
        "--rhs",
        "a-ones",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("preconditioner: jacobi"), "{stdout}");
    assert!(stdout.contains("schedule: overlap"), "{stdout}");
    assert!(stdout.contains("b = a-ones"), "{stdout}");
    let bad = tca_cg(&["--matrix", "poisson3d:5", "--precond", "ilu"]);
    assert_eq!(bad.status.code(), Some(2), "clap usage error");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("jacobi"));
    let bad = tca_cg(&["--matrix", "poisson3d:5", "--schedule", "async"]);
    assert_eq!(bad.status.code(), Some(2), "clap usage error");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("overlap"));
    // Rounds without MPI: the median of three solves, the floor before each.
    let out = tca_cg(&[
        "--matrix",
        "poisson3d:5",
        "--np",
        "2",
        "--iters",
        "20",
        "--rounds",
        "3",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let note = stdout
        .lines()
        .find(|l| l.starts_with("note: time per iteration by round, us: tca "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let times = note
        .split("tca ")
        .nth(1)
        .and_then(|t| t.split(';').next())
        .unwrap_or_default();
    assert_eq!(times.split(", ").count(), 3, "three solves: {note}");
    assert!(
        note.contains("3 rounds: each figure is its implementation's median round"),
        "{note}"
    );
    let bad = tca_cg(&[
        "--matrix",
        "poisson3d:5",
        "--np",
        "4",
        "--rounds",
        "2",
        "--network",
        "peach2-2x8",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("the same in every round"));
    let bad = tca_cg(&["--matrix", "poisson3d:5", "--partition", "cols"]);
    assert_eq!(bad.status.code(), Some(2), "clap usage error");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("nnz"));
}
