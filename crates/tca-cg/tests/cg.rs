//! tca-cg's tests: Matrix Market reading, the generators, every bad-input case, and the
//! solver on 1 to 5 ranks (threads on the real shared-memory transport) against a one-rank
//! solve and against manufactured solutions.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use tca_cg::mm::{self, Field, Symmetry};
use tca_cg::synth::Synthetic;
use tca_cg::{
    CgError, Csr, MatrixSource, Options, Outcome, Partition, PartitionBy, Phases, Precond, Problem,
    Report, Rhs, Schedule, Stop, run_rank, setup, solve,
};

// ---- helpers ---------------------------------------------------------------------------------

/// A fresh directory for one test's files, removed when dropped.
struct TmpDir(PathBuf);

impl std::ops::Deref for TmpDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmpdir(tag: &str) -> TmpDir {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "tca-cg-test-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    TmpDir(d)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The lower triangle of a symmetric matrix as a `coordinate real symmetric` file.
fn mtx_symmetric(a: &Csr) -> String {
    let mut lines = Vec::new();
    for i in 0..a.n_rows {
        let (c, v) = a.row(i);
        for (&j, &x) in c.iter().zip(v) {
            if j as usize <= i {
                lines.push(format!("{} {} {x:e}", i + 1, j + 1));
            }
        }
    }
    format!(
        "%%MatrixMarket matrix coordinate real symmetric\n% written by a test\n{} {} {}\n{}\n",
        a.n_rows,
        a.n_cols,
        lines.len(),
        lines.join("\n")
    )
}

fn problem(matrix: &str, rhs: Rhs) -> Problem {
    Problem {
        matrix: MatrixSource::parse(matrix).unwrap(),
        rhs,
        partition: PartitionBy::Rows,
    }
}

fn tol(t: f64) -> Stop {
    Stop::Tolerance {
        tol: t,
        max_iters: 10_000,
    }
}

/// Sets up and solves on `p` thread ranks; the whole x (blocks in rank order) and rank 0's
/// outcome, or the error (rank 0's, which holds the message).
fn solve_on(p: u32, prob: &Problem, stop: Stop) -> Result<(Vec<f64>, Outcome, u64), CgError> {
    solve_scheduled(p, prob, stop, Schedule::Paper)
}

/// [`solve_on`] with lines 14-15 in the order `schedule`.
fn solve_scheduled(
    p: u32,
    prob: &Problem,
    stop: Stop,
    schedule: Schedule,
) -> Result<(Vec<f64>, Outcome, u64), CgError> {
    let per_rank = tca::threads::run(p, |world| {
        let mut c = tca::Comm::world(world)?;
        let r = (|| {
            let lp = setup(&mut c, prob)?;
            let s = solve(&mut c, &lp, stop, Precond::None, schedule, false, None)?;
            Ok((s.x, s.stats.outcome, s.stats.iterations))
        })();
        match r {
            Err(CgError::Comm(e)) => Err(e),
            r => Ok(r),
        }
    })
    .expect("no rank fails in the runtime");
    let mut x = Vec::new();
    let mut first = None;
    for r in per_rank {
        let (xl, o, k) = r?;
        x.extend(xl);
        first.get_or_insert((o, k));
    }
    let (o, k) = first.unwrap();
    Ok((x, o, k))
}

/// Runs the whole job on `p` thread ranks; rank 0's report or error.
fn run_on(p: u32, opts: &Options) -> Result<Report, CgError> {
    let mut per_rank = tca::threads::run(p, |world| {
        let mut c = tca::Comm::world(world)?;
        match run_rank(&mut c, opts) {
            Err(CgError::Comm(e)) => Err(e),
            r => Ok(r),
        }
    })
    .expect("no rank fails in the runtime");
    for (rank, r) in per_rank.iter().enumerate().skip(1) {
        match r {
            Ok(None) => {}
            Err(CgError::RootFailed) => {}
            Err(e) => assert!(e.is_collective(), "rank {rank}: {e}"),
            Ok(Some(_)) => panic!("rank {rank} returned a report"),
        }
    }
    per_rank.swap_remove(0).map(|r| r.expect("rank 0 reports"))
}

fn opts(prob: Problem, stop: Stop, breakdown: bool) -> Options {
    Options {
        problem: prob,
        stop,
        precond: Precond::None,
        schedule: Schedule::Paper,
        breakdown,
        progress: false,
    }
}

fn max_rel_diff(a: &[f64], b: &[f64]) -> f64 {
    let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-300);
    a.iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

// ---- partition and generators -------------------------------------------------------------------

/// The weight (entries plus one per row) of each block of `part` over `row_ptr`.
fn block_weights(part: &Partition, row_ptr: &[usize]) -> Vec<usize> {
    (0..part.p())
        .map(|r| {
            let rg = part.range(r);
            row_ptr[rg.end] - row_ptr[rg.start] + rg.len()
        })
        .collect()
}

#[test]
fn an_nnz_split_balances_the_work() {
    // Rows 0..10 hold 20 entries each, the 90 others 2: the paper's split at 2 ranks gives
    // rank 0 every heavy row (330 against 150 of weight).
    let mut row_ptr = vec![0];
    for i in 0..100 {
        let len = if i < 10 { 20 } else { 2 };
        row_ptr.push(row_ptr[i] + len);
    }
    let total = row_ptr[100] + 100;
    for p in 1..=7 {
        let part = Partition::by_nnz(&row_ptr, p).unwrap();
        assert_eq!(part.p(), p);
        assert_eq!(part.counts.iter().sum::<usize>(), 100);
        assert_eq!(part.displs[0], 0);
        for r in 1..p {
            assert_eq!(part.displs[r], part.displs[r - 1] + part.counts[r - 1]);
        }
        let w = block_weights(&part, &row_ptr);
        let (lo, hi) = (*w.iter().min().unwrap(), *w.iter().max().unwrap());
        // Each boundary is at most half a row (21 at most) from its ideal place.
        assert!(
            hi <= total / p + 21 && lo + 21 >= total / p,
            "p = {p}: weights {w:?}"
        );
        let rows = block_weights(&Partition::new(100, p).unwrap(), &row_ptr);
        assert!(
            hi <= *rows.iter().max().unwrap(),
            "p = {p}: {w:?} against {rows:?}"
        );
    }
    assert_eq!(
        block_weights(&Partition::by_nnz(&row_ptr, 2).unwrap(), &row_ptr),
        vec![240, 240]
    );
    // As many ranks as rows: one row each, however heavy; more: the paper's error.
    let part = Partition::by_nnz(&row_ptr, 100).unwrap();
    assert!(part.counts.iter().all(|&c| c == 1));
    assert!(matches!(
        Partition::by_nnz(&row_ptr, 101),
        Err(CgError::TooFewRows(_))
    ));
    // One row heavier than the rest together: alone on rank 0, the others share the rest.
    let skew = [0, 1000, 1001, 1002, 1003];
    let part = Partition::by_nnz(&skew, 3).unwrap();
    assert_eq!(part.counts, vec![1, 1, 2]);
}

#[test]
fn a_split_from_its_starts_is_checked() {
    let part = Partition::from_displs(10, vec![0, 3, 4]).unwrap();
    assert_eq!(part.counts, vec![3, 1, 6]);
    for bad in [
        vec![],
        vec![1, 3],
        vec![0, 3, 3],
        vec![0, 5, 10],
        vec![0, 7, 4],
    ] {
        assert!(
            matches!(
                Partition::from_displs(10, bad.clone()),
                Err(CgError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
}

/// A symmetric, diagonally dominant matrix of 40 rows whose first 10 (or, `heavy_last`, last
/// 10) are coupled to every other row: their rows hold 31 entries, the others 11.
fn uneven_matrix(d: &Path, heavy_last: bool) -> PathBuf {
    let mut text = String::from("%%MatrixMarket matrix coordinate real symmetric\n");
    let mut entries = Vec::new();
    for i in 1..=40 {
        entries.push(format!("{i} {i} 10"));
    }
    let at = |i: usize| if heavy_last { 41 - i } else { i };
    for i in 1..=10 {
        for j in 11..=40 {
            let (r, c) = (at(i).max(at(j)), at(i).min(at(j)));
            entries.push(format!("{r} {c} -0.1"));
        }
    }
    text += &format!("40 40 {}\n{}\n", entries.len(), entries.join("\n"));
    let name = if heavy_last {
        "uneven-last.mtx"
    } else {
        "uneven.mtx"
    };
    write(d, name, &text)
}

#[test]
fn an_nnz_split_solves_the_same_system() {
    let d = tmpdir("nnz-split");
    let a = uneven_matrix(&d, false);
    for (spec, rhs) in [
        (a.to_str().unwrap(), Rhs::AOnes),
        ("poisson3d:6", Rhs::Manufactured { seed: 3 }),
        ("banded:50:5", Rhs::Manufactured { seed: 4 }),
    ] {
        let mut prob = problem(spec, rhs);
        let (x_rows, o, _) = solve_on(1, &prob, tol(1e-12)).unwrap();
        assert_eq!(o, Outcome::Converged, "{spec}");
        prob.partition = PartitionBy::Nnz;
        for p in 1..=5u32 {
            let (x, o, _) = solve_on(p, &prob, tol(1e-12)).unwrap();
            assert_eq!(o, Outcome::Converged, "{spec}, {p} ranks");
            let err = max_rel_diff(&x, &x_rows);
            assert!(err < 1e-9, "{spec}, {p} ranks: {err:e}");
        }
    }
    // The report says how it split: on the uneven matrix the nnz split evens the entries
    // the paper's leaves 200 apart (rows 1-20 against 21-40), to within a heavy row.
    let mut prob = problem(a.to_str().unwrap(), Rhs::Ones);
    let r = run_on(2, &opts(prob.clone(), Stop::Fixed { iters: 3 }, false)).unwrap();
    assert_eq!(r.partition, PartitionBy::Rows);
    assert_eq!(r.nnz_per_rank, vec![420, 220]);
    prob.partition = PartitionBy::Nnz;
    let r = run_on(2, &opts(prob, Stop::Fixed { iters: 3 }, false)).unwrap();
    assert_eq!(r.partition, PartitionBy::Nnz);
    assert_eq!(r.rows_per_rank.iter().sum::<u64>(), 40);
    let (lo, hi) = (
        r.nnz_per_rank[0].min(r.nnz_per_rank[1]),
        r.nnz_per_rank[0].max(r.nnz_per_rank[1]),
    );
    assert!(hi - lo <= 31, "{:?}", r.nnz_per_rank);
    let text = tca_cg::Output::new(r, None).text();
    assert!(text.contains("rows, split by nonzeros"), "{text}");
    // Heavy rows last: the last rank gets the fewest rows, and a right-hand side from a file
    // is scattered in blocks of the largest count (rank 0's), not the last rank's.
    let a = uneven_matrix(&d, true);
    let b: Vec<String> = (0..40)
        .map(|i| format!("{}", 1.0 + i as f64 / 8.0))
        .collect();
    let bf = write(
        &d,
        "b.mtx",
        &format!(
            "%%MatrixMarket matrix array real general\n40 1\n{}\n",
            b.join("\n")
        ),
    );
    let mut prob = problem(a.to_str().unwrap(), Rhs::File(bf));
    let (x_rows, o, _) = solve_on(1, &prob, tol(1e-12)).unwrap();
    assert_eq!(o, Outcome::Converged);
    prob.partition = PartitionBy::Nnz;
    for p in 2..=4u32 {
        let r = run_on(p, &opts(prob.clone(), Stop::Fixed { iters: 1 }, false)).unwrap();
        assert!(
            r.rows_per_rank[0] > r.rows_per_rank[p as usize - 1],
            "{p} ranks: {:?}",
            r.rows_per_rank
        );
        let (x, o, _) = solve_on(p, &prob, tol(1e-12)).unwrap();
        assert_eq!(o, Outcome::Converged, "{p} ranks");
        assert!(max_rel_diff(&x, &x_rows) < 1e-9, "{p} ranks");
    }
}

#[test]
fn partition_is_the_papers_split() {
    let p = Partition::new(13, 5).unwrap();
    assert_eq!(p.counts, vec![2, 2, 2, 2, 5]);
    assert_eq!(p.displs, vec![0, 2, 4, 6, 8]);
    assert_eq!(p.range(4), 8..13);
    let p = Partition::new(7, 1).unwrap();
    assert_eq!(p.counts, vec![7]);
    assert!(matches!(Partition::new(3, 4), Err(CgError::TooFewRows(_))));
}

#[test]
fn generators_are_symmetric_positive_diagonal_and_count_right() {
    for s in [
        Synthetic::Poisson3d { m: 1 },
        Synthetic::Poisson3d { m: 4 },
        Synthetic::Banded { n: 1, k: 5 },
        Synthetic::Banded { n: 13, k: 5 },
        Synthetic::Banded { n: 20, k: 41 },
        Synthetic::Banded { n: 50, k: 1 },
    ] {
        let a = s.rows(0..s.n());
        assert_eq!(a.nnz(), s.nnz(), "{}", s.label());
        a.check_spd_shape(&s.label()).unwrap();
        for i in 0..a.n_rows {
            let (c, _) = a.row(i);
            assert!(c.windows(2).all(|w| w[0] < w[1]), "sorted row {i}");
        }
        // Row lengths without the rows (what `--partition nnz` weighs generated rows by).
        for i in 0..a.n_rows {
            assert_eq!(s.row_len(i), a.row(i).0.len(), "{} row {i}", s.label());
        }
        // Any block of rows is the same as those rows of the whole.
        let n = s.n();
        let (lo, hi) = (n / 3, n - n / 4);
        assert_eq!(s.rows(lo..hi), a.rows(lo..hi), "{}", s.label());
    }
}

#[test]
fn synthetic_specs_parse_and_reject_nonsense() {
    assert_eq!(
        MatrixSource::parse("poisson3d:31").unwrap(),
        MatrixSource::Synthetic(Synthetic::Poisson3d { m: 31 })
    );
    assert_eq!(
        MatrixSource::parse("banded:72_000:399").unwrap(),
        MatrixSource::Synthetic(Synthetic::Banded { n: 72000, k: 399 })
    );
    assert_eq!(
        MatrixSource::parse("dir/x.mtx").unwrap(),
        MatrixSource::File("dir/x.mtx".into())
    );
    for bad in [
        "poisson3d:0",
        "poisson3d:x",
        "poisson3d:3:3",
        "poisson3d:100000",
        "banded:10:4",
        "banded:0:3",
        "banded:10",
    ] {
        assert!(
            matches!(MatrixSource::parse(bad), Err(CgError::Invalid(_))),
            "{bad}"
        );
    }
    assert_eq!(Rhs::parse("ones").unwrap(), Rhs::Ones);
    assert_eq!(Rhs::parse("random").unwrap(), Rhs::Random { seed: 1 });
    assert_eq!(
        Rhs::parse("manufactured:7").unwrap(),
        Rhs::Manufactured { seed: 7 }
    );
    assert_eq!(Rhs::parse("file:b.mtx").unwrap(), Rhs::File("b.mtx".into()));
    assert_eq!(Rhs::parse("b.mtx").unwrap(), Rhs::File("b.mtx".into()));
    assert!(Rhs::parse("random:x").is_err());
}

// ---- Matrix Market reading ----------------------------------------------------------------------

#[test]
fn reads_real_general_summing_duplicates() {
    let f = mm::parse_matrix(
        "%%MatrixMarket matrix coordinate real general\n% c\n3 3 5\n1 1 2.5\n2 2 -.5\n3 3 1e1\n1 2 1\n1 2 2\n",
        "t",
    )
    .unwrap();
    assert_eq!(
        (f.field, f.symmetry, f.stored),
        (Field::Real, Symmetry::General, 5)
    );
    assert_eq!(f.csr.get(0, 0), Some(2.5));
    assert_eq!(f.csr.get(1, 1), Some(-0.5));
    assert_eq!(f.csr.get(2, 2), Some(10.0));
    assert_eq!(f.csr.get(0, 1), Some(3.0));
    assert_eq!(f.csr.nnz(), 4);
}

#[test]
fn reads_symmetric_storage_expanded() {
    let f = mm::parse_matrix(
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 4\n1 1 4\n2 1 -1\n2 2 4\n3 3 4\n",
        "t",
    )
    .unwrap();
    assert_eq!((f.symmetry, f.stored), (Symmetry::Symmetric, 4));
    assert_eq!(f.csr.nnz(), 5);
    assert_eq!(f.csr.get(0, 1), Some(-1.0));
    assert_eq!(f.csr.get(1, 0), Some(-1.0));
    f.csr.check_spd_shape("t").unwrap();
}

#[test]
fn reads_integer_fields() {
    let g = mm::parse_matrix(
        "%%MatrixMarket matrix coordinate integer general\n2 2 4\n1 1 3\n1 2 -1\n2 1 -1\n2 2 3\n",
        "t",
    )
    .unwrap();
    assert_eq!(g.field, Field::Integer);
    assert_eq!(g.csr.get(0, 1), Some(-1.0));
    g.csr.check_spd_shape("t").unwrap();
    let s = mm::parse_matrix(
        "%%MatrixMarket matrix coordinate integer symmetric\n2 2 3\n1 1 3\n2 1 -1\n2 2 3\n",
        "t",
    )
    .unwrap();
    assert_eq!(s.csr, g.csr);
}

/// Found by the coverage-guided fuzzer (fuzz/regressions/matrix): indices whose product
/// overflows a `usize` — one glued to its value (`9 97777777777777777.5` is column
/// 97777777777777777 and value .5 to the reader), or two of ten digits — are refused as too
/// large before the reader multiplies them (it panicked in builds with overflow checks).
#[test]
fn indices_too_large_for_the_reader_are_refused_first() {
    let head = "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n";
    for entry in [
        "9 9777777777777777777.8288",
        "9999999999 9999999999 1.0",
        "4294967296 1 1.0",
        "1 1\t9\r88888888888888888888888888\t2 3",
    ] {
        let e = mm::parse_matrix(&format!("{head}{entry}\n"), "t").unwrap_err();
        assert!(e.to_string().contains("is too large"), "{entry}: {e}");
    }
    // Within a u32, an index outside the matrix is the reader's ordinary error.
    let e = mm::parse_matrix(&format!("{head}4294967295 1 1.0\n"), "t").unwrap_err();
    assert!(e.to_string().contains("outside the matrix"), "{e}");
    // Dense files hold values, not indices: a large integer value is fine.
    let a = mm::parse_matrix(
        "%%MatrixMarket matrix array integer general\n1 1\n99999999999\n",
        "t",
    )
    .unwrap();
    assert_eq!(a.csr.get(0, 0), Some(99_999_999_999.0));
}

#[test]
fn reads_pattern_as_laplacian_plus_identity() {
    // A path 1 - 2 - 3, with and without diagonal entries: the same matrix.
    let sym = mm::parse_matrix(
        "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 2\n2 1\n3 2\n",
        "t",
    )
    .unwrap();
    assert_eq!(sym.field, Field::Pattern);
    let general = mm::parse_matrix(
        "%%MatrixMarket matrix coordinate pattern general\n3 3 7\n1 1\n2 2\n3 3\n1 2\n2 1\n2 3\n3 2\n",
        "t",
    )
    .unwrap();
    assert_eq!(sym.csr, general.csr);
    let a = &sym.csr;
    assert_eq!(
        (a.get(0, 0), a.get(1, 1), a.get(2, 2)),
        (Some(2.0), Some(3.0), Some(2.0))
    );
    assert_eq!(
        (a.get(0, 1), a.get(2, 1), a.get(0, 2)),
        (Some(-1.0), Some(-1.0), None)
    );
    a.check_spd_shape("t").unwrap();
}

#[test]
fn reads_case_comments_and_blank_lines() {
    let f = mm::parse_matrix(
        "\n%%matrixmarket MATRIX Coordinate REAL Symmetric\n%\n% more\n2 2 2\n1 1 1.5e+00\n\n   2   2    7.5701187792160e+06\n\n",
        "t",
    )
    .unwrap();
    assert_eq!(f.csr.get(1, 1), Some(7.5701187792160e+06));
}

#[test]
fn reads_gzip_files() {
    let d = tmpdir("gz");
    let p = d.join("a.mtx.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&p).unwrap(),
        flate2::Compression::default(),
    );
    enc.write_all(b"%%MatrixMarket matrix coordinate real symmetric\n2 2 3\n1 1 2\n2 1 1\n2 2 2\n")
        .unwrap();
    enc.finish().unwrap();
    let f = mm::read_matrix(&p).unwrap();
    assert_eq!(f.csr.get(0, 1), Some(1.0));
    // A corrupt gzip stream is an error, not a panic.
    let bad = d.join("bad.mtx.gz");
    std::fs::write(&bad, [0x1f, 0x8b, 8, 0, 1, 2, 3]).unwrap();
    assert!(matches!(mm::read_matrix(&bad), Err(CgError::Read(_))));
}

#[test]
fn reads_vectors() {
    let d = tmpdir("vec");
    let arr = write(
        &d,
        "a.mtx",
        "%%MatrixMarket matrix array real general\n3 1\n1\n-2.5\n3\n",
    );
    assert_eq!(mm::read_vector(&arr, 3).unwrap(), vec![1.0, -2.5, 3.0]);
    let coo = write(
        &d,
        "c.mtx",
        "%%MatrixMarket matrix coordinate integer general\n1 3 2\n1 1 4\n1 3 5\n",
    );
    assert_eq!(mm::read_vector(&coo, 3).unwrap(), vec![4.0, 0.0, 5.0]);
    assert!(matches!(mm::read_vector(&arr, 4), Err(CgError::Invalid(_))));
    let nan = write(
        &d,
        "n.mtx",
        "%%MatrixMarket matrix array real general\n2 1\n1\nNaN\n",
    );
    assert!(matches!(
        mm::read_vector(&nan, 2),
        Err(CgError::NotFinite(_))
    ));
}

// ---- bad input ----------------------------------------------------------------------------------

fn read_err(text: &str) -> CgError {
    match mm::parse_matrix(text, "t").and_then(|f| f.csr.check_spd_shape("t").map(|_| f)) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    }
}

#[test]
fn rejects_files_that_are_not_matrix_market() {
    for text in [
        "",
        "hello world\n1 2 3\n",
        "%%MatrixMarket tensor coordinate real general\n1 1 1\n1 1 1\n",
        "%%MatrixMarket matrix coordinate real\n1 1 1\n1 1 1\n",
        "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1\n2 2 1\n",
        "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 abc\n",
        "%%MatrixMarket matrix coordinate real general\n2 2 1\n0 1 1\n",
        "%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1\n",
        "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1\n",
        "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 1\n1 2 1\n",
        "%%MatrixMarket matrix coordinate real general\n99999999999999999999999 1 1\n1 1 1\n",
        "%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n",
        "%%MatrixMarket matrix coordinate real hermitian\n1 1 1\n1 1 1\n",
        "%%MatrixMarket matrix coordinate real weird\n1 1 1\n1 1 1\n",
    ] {
        assert!(matches!(read_err(text), CgError::Read(_)), "{text}");
    }
    let d = tmpdir("bin");
    let bin = d.join("x.bin");
    std::fs::write(&bin, [0xffu8, 0xfe, 0, 1, 2]).unwrap();
    let e = mm::read_matrix(&bin).unwrap_err();
    assert!(e.to_string().contains("not a Matrix Market file"), "{e}");
    let e = mm::read_matrix(&d.join("missing.mtx")).unwrap_err();
    assert!(e.to_string().contains("cannot read"), "{e}");
}

#[test]
fn rejects_an_empty_matrix() {
    let e = read_err("%%MatrixMarket matrix coordinate real symmetric\n0 0 0\n");
    assert!(matches!(e, CgError::Invalid(_)), "{e}");
    assert!(e.to_string().contains("no rows"), "{e}");
}

#[test]
fn rejects_non_square() {
    let e = read_err("%%MatrixMarket matrix coordinate real general\n2 3 2\n1 1 1\n2 2 1\n");
    assert!(matches!(e, CgError::NotSquare(_)), "{e}");
    let e = read_err("%%MatrixMarket matrix coordinate real symmetric\n2 3 2\n1 1 1\n2 2 1\n");
    assert!(matches!(e, CgError::NotSquare(_)), "{e}");
}

#[test]
fn rejects_non_symmetric() {
    let e = read_err(
        "%%MatrixMarket matrix coordinate real general\n2 2 4\n1 1 4\n1 2 1\n2 1 1.001\n2 2 4\n",
    );
    assert!(matches!(e, CgError::NotSymmetric(_)), "{e}");
    assert!(e.to_string().contains("A(1, 2) = 1"), "{e}");
    // An entry with no partner at all, on either side of the diagonal.
    for text in [
        "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 4\n2 1 1\n2 2 4\n",
        "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 4\n1 2 1\n2 2 4\n",
    ] {
        assert!(matches!(read_err(text), CgError::NotSymmetric(_)), "{text}");
    }
    let e = read_err("%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n2 1 1\n");
    assert!(matches!(e, CgError::NotSymmetric(_)), "{e}");
    // Within the tolerance is symmetric.
    mm::parse_matrix(
        "%%MatrixMarket matrix coordinate real general\n2 2 4\n1 1 4\n1 2 1\n2 1 1.000000000001\n2 2 4\n",
        "t",
    )
    .unwrap()
    .csr
    .check_spd_shape("t")
    .unwrap();
}

#[test]
fn rejects_missing_or_non_positive_diagonal() {
    let e = read_err("%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 1\n2 1 0.5\n");
    assert!(matches!(e, CgError::Diagonal(_)), "{e}");
    assert!(e.to_string().contains("row 2 has no diagonal"), "{e}");
    for d in ["0", "-3"] {
        let e = read_err(&format!(
            "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 1\n2 2 {d}\n"
        ));
        assert!(matches!(e, CgError::Diagonal(_)), "{e}");
    }
}

#[test]
fn rejects_nan_and_infinity() {
    for v in ["NaN", "inf", "-inf"] {
        let e = read_err(&format!(
            "%%MatrixMarket matrix coordinate real symmetric\n2 2 3\n1 1 1\n2 1 {v}\n2 2 1\n"
        ));
        assert!(matches!(e, CgError::NotFinite(_)), "{v}: {e}");
    }
}

#[test]
fn rejects_fewer_rows_than_ranks_on_every_rank() {
    let d = tmpdir("few");
    let f = write(
        &d,
        "a.mtx",
        "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 1\n2 2 1\n",
    );
    let prob = problem(f.to_str().unwrap(), Rhs::Ones);
    let e = solve_on(3, &prob, tol(1e-8)).unwrap_err();
    assert!(matches!(e, CgError::TooFewRows(_)), "{e}");
    let e = solve_on(4, &problem("poisson3d:1", Rhs::Ones), tol(1e-8)).unwrap_err();
    assert!(matches!(e, CgError::TooFewRows(_)), "{e}");
}

#[test]
fn bad_file_on_rank_0_ends_every_rank_in_order() {
    let d = tmpdir("bad");
    let f = write(&d, "a.mtx", "not a matrix\n");
    let o = opts(problem(f.to_str().unwrap(), Rhs::Ones), tol(1e-8), false);
    let e = run_on(3, &o).unwrap_err();
    assert!(matches!(e, CgError::Read(_)), "{e}");
    // And a bad right-hand side file.
    let b = write(
        &d,
        "b.mtx",
        "%%MatrixMarket matrix array real general\n8 1\n1\n1\n1\n1\n1\n1\n1\ninf\n",
    );
    let o = opts(
        problem("poisson3d:2", Rhs::File(b.clone())),
        tol(1e-8),
        false,
    );
    let e = run_on(2, &o).unwrap_err();
    assert!(matches!(e, CgError::NotFinite(_)), "{e}");
    let o = opts(problem("banded:9:3", Rhs::File(b)), tol(1e-8), false);
    let e = run_on(2, &o).unwrap_err();
    assert!(matches!(e, CgError::Invalid(_)), "{e}");
}

#[test]
fn indefinite_matrix_is_a_breakdown_error() {
    // [[1, 2], [2, 1]] has eigenvalues 3 and -1; b = (1, 0) reaches the negative one.
    let d = tmpdir("indef");
    let a = write(
        &d,
        "a.mtx",
        "%%MatrixMarket matrix coordinate real symmetric\n2 2 3\n1 1 1\n2 1 2\n2 2 1\n",
    );
    let b = write(
        &d,
        "b.mtx",
        "%%MatrixMarket matrix array real general\n2 1\n1\n0\n",
    );
    for (p, schedule) in [
        (1, Schedule::Paper),
        (2, Schedule::Paper),
        (2, Schedule::Overlap),
    ] {
        let e = solve_scheduled(
            p,
            &problem(a.to_str().unwrap(), Rhs::File(b.clone())),
            tol(1e-12),
            schedule,
        )
        .unwrap_err();
        assert!(matches!(e, CgError::Breakdown(_)), "{e}");
        assert!(e.to_string().contains("not positive definite"), "{e}");
    }
}

#[test]
fn overflow_is_a_divergence_error() {
    let d = tmpdir("ovf");
    let a = write(
        &d,
        "a.mtx",
        "%%MatrixMarket matrix coordinate real symmetric\n2 2 3\n1 1 1e10\n2 1 -1e9\n2 2 1e10\n",
    );
    let tiny = write(
        &d,
        "t.mtx",
        "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 1e-300\n2 2 1e-300\n",
    );
    let vec2 = |name: &str, v: &str| {
        write(
            &d,
            name,
            &format!("%%MatrixMarket matrix array real general\n2 1\n{v}\n{v}\n"),
        )
    };
    // ||b|| itself overflows; p·Ap overflows; x overflows while r stays finite.
    for (m, b) in [(&a, "1e160"), (&a, "1e150"), (&tiny, "1e300")] {
        let prob = problem(
            m.to_str().unwrap(),
            Rhs::File(vec2(&format!("b{b}.mtx"), b)),
        );
        let e = run_on(2, &opts(prob, tol(1e-12), false)).unwrap_err();
        assert!(matches!(e, CgError::Breakdown(_)), "{e}");
        assert!(e.to_string().contains("overflow"), "{e}");
    }
}

// ---- the solver ---------------------------------------------------------------------------------

#[test]
fn any_rank_count_matches_one_rank_and_the_manufactured_solution() {
    let d = tmpdir("ranks");
    // The banded matrix through a file, so that rank 0's scatter is exercised too.
    let s = Synthetic::Banded { n: 13, k: 5 };
    let f = write(&d, "b13.mtx", &mtx_symmetric(&s.rows(0..13)));
    for spec in [
        f.to_str().unwrap(),
        "banded:13:5",
        "poisson3d:3",
        "banded:31:7",
    ] {
        for rhs in [Rhs::Manufactured { seed: 5 }, Rhs::Random { seed: 2 }] {
            let prob = problem(spec, rhs.clone());
            let (x1, o1, k1) = solve_on(1, &prob, tol(1e-12)).unwrap();
            assert_eq!(o1, Outcome::Converged);
            for (p, schedule) in (1..=5)
                .flat_map(|p| [(p, Schedule::Paper), (p, Schedule::Overlap)])
                .skip(1)
            {
                let (xp, op, kp) = solve_scheduled(p, &prob, tol(1e-12), schedule).unwrap();
                assert_eq!(op, Outcome::Converged, "{spec} p={p} {schedule}");
                assert!(
                    kp.abs_diff(k1) <= 1,
                    "{spec} p={p} {schedule}: {kp} vs {k1} iterations"
                );
                let diff = max_rel_diff(&xp, &x1);
                assert!(
                    diff < 1e-10,
                    "{spec} {rhs} p={p} {schedule}: differs by {diff:e}"
                );
            }
            if let Rhs::Manufactured { seed } = rhs {
                let n = x1.len();
                let xs: Vec<f64> = (0..n)
                    .map(|i| tca_cg::problem::uniform(seed, i as u64))
                    .collect();
                let err = max_rel_diff(&x1, &xs);
                assert!(err < 1e-9, "{spec}: error {err:e} against x*");
            }
        }
    }
}

#[test]
fn report_carries_residuals_error_and_breakdown() {
    let o = opts(
        problem("banded:13:5", Rhs::Manufactured { seed: 9 }),
        tol(1e-10),
        true,
    );
    for p in 1..=5u32 {
        let r = run_on(p, &o).unwrap();
        assert_eq!(r.ranks, p);
        assert_eq!(r.rows_per_rank.iter().sum::<u64>(), 13);
        assert_eq!(r.outcome, Outcome::Converged);
        assert!(r.relative_residual < 1e-10);
        assert!(
            r.true_relative_residual < 1e-9,
            "{}",
            r.true_relative_residual
        );
        assert!(r.solution_error.unwrap() < 1e-8);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let b = r.breakdown.as_ref().unwrap();
        assert_eq!(b.per_rank.len(), p as usize);
        let ph = &b.rank0.phases;
        for t in [
            ph.spmv,
            ph.dot,
            ph.axpy,
            ph.allgather,
            ph.allreduce,
            b.rank0.other,
        ] {
            assert!(t >= 0.0 && t <= b.rank0.total);
        }
        assert!(b.max.total >= b.rank0.total && b.min.total <= b.rank0.total);
        assert!(b.min.phases.allreduce <= b.max.phases.allreduce);
        assert!(r.per_iteration_s > 0.0);
        // The JSON round trip the CLI relies on.
        let out = tca_cg::Output::new(r.clone(), None);
        let back = tca_cg::Output::from_json(&out.to_json()).unwrap();
        assert_eq!(
            (
                back.tca.iterations,
                back.tca.outcome,
                back.tca.rows_per_rank
            ),
            (r.iterations, r.outcome, r.rows_per_rank.clone())
        );
        assert!((back.tca.total_s - r.total_s).abs() <= 1e-12 * r.total_s);
        assert!(out.text().contains("Allreduce"));
    }
}

/// `--compare mpi --breakdown` says what faster communication alone could reach: tca's
/// slowest rank's own work over MPI's time, and MPI's share outside its own work.
#[test]
fn a_comparison_says_what_free_communication_would_reach() {
    use tca_cg::report::PhaseTimes;
    let o = opts(
        problem("poisson3d:5", Rhs::Ones),
        Stop::Fixed { iters: 7 },
        true,
    );
    let mut a = run_on(2, &o).unwrap();
    assert_eq!(a.iterations, 7);
    let mut m = a.clone();
    let ph = |spmv, axpy, allreduce| Phases {
        spmv,
        dot: 0.0,
        axpy,
        allgather: 0.0,
        allreduce,
    };
    // tca: rank 1 works 1.5 s (SpMV 1.25, AXPY 0.25), rank 0 1.0 s and waits; MPI: 4 s, its
    // slowest rank working 1.6 s.
    a.total_s = 2.0;
    a.breakdown.as_mut().unwrap().per_rank = vec![
        PhaseTimes::new(2.0, ph(1.0, 0.0, 1.0)),
        PhaseTimes::new(2.0, ph(1.25, 0.25, 0.5)),
    ];
    m.total_s = 4.0;
    m.breakdown.as_mut().unwrap().per_rank = vec![
        PhaseTimes::new(4.0, ph(1.2, 0.0, 2.8)),
        PhaseTimes::new(4.0, ph(1.6, 0.0, 2.4)),
    ];
    let out = tca_cg::Output::new(a, Some(("MPI-X".into(), m)));
    let r = out.ratio.as_ref().unwrap();
    assert!((r.free_communication.unwrap() - 0.375).abs() < 1e-12);
    assert!((r.mpi_communication_share.unwrap() - 0.6).abs() < 1e-12);
    let text = out.text();
    assert!(
        text.contains("would still take at least 214285.71 us per"),
        "{text}"
    );
    assert!(text.contains("0.38 of MPI-X's time"), "{text}");
    assert!(
        text.contains("collectives and their waits are 60%"),
        "{text}"
    );
    // Without a breakdown there is nothing to say.
    let plain = opts(
        problem("poisson3d:5", Rhs::Ones),
        Stop::Fixed { iters: 7 },
        false,
    );
    let b = run_on(2, &plain).unwrap();
    let out = tca_cg::Output::new(b.clone(), Some(("MPI-X".into(), b)));
    assert_eq!(out.ratio.as_ref().unwrap().free_communication, None);
    assert!(!out.text().contains("cost nothing"));
}

#[test]
fn fixed_mode_runs_exactly_k_iterations() {
    let o = opts(
        problem("poisson3d:5", Rhs::Ones),
        Stop::Fixed { iters: 7 },
        false,
    );
    let r = run_on(3, &o).unwrap();
    assert_eq!((r.iterations, r.outcome), (7, Outcome::Completed));
    assert!(r.breakdown.is_none());
    assert_eq!(r.tol, None);
}

#[test]
fn fixed_mode_stops_when_the_residual_vanishes() {
    let d = tmpdir("vanish");
    let a = write(
        &d,
        "a.mtx",
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 2\n2 2 2\n3 3 2\n",
    );
    let o = opts(
        problem(a.to_str().unwrap(), Rhs::Ones),
        Stop::Fixed { iters: 1000 },
        true,
    );
    let r = run_on(2, &o).unwrap();
    assert_eq!((r.iterations, r.outcome), (1, Outcome::ResidualVanished));
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.true_relative_residual < 1e-15);
}

#[test]
fn tolerance_mode_reports_an_iteration_limit() {
    let o = opts(
        problem("poisson3d:6", Rhs::Ones),
        Stop::Tolerance {
            tol: 1e-12,
            max_iters: 3,
        },
        false,
    );
    let r = run_on(2, &o).unwrap();
    assert_eq!((r.iterations, r.outcome), (3, Outcome::IterationLimit));
    assert!(
        r.warnings[0].contains("did not converge"),
        "{:?}",
        r.warnings
    );
}

#[test]
fn zero_right_hand_side_needs_no_iteration() {
    let d = tmpdir("zero");
    let b = write(
        &d,
        "b.mtx",
        "%%MatrixMarket matrix coordinate real general\n8 1 0\n",
    );
    let o = opts(problem("poisson3d:2", Rhs::File(b)), tol(1e-8), false);
    let r = run_on(2, &o).unwrap();
    assert_eq!((r.iterations, r.outcome), (0, Outcome::ZeroResidual));
    assert_eq!(r.true_relative_residual, 0.0);
}

#[test]
fn pattern_and_integer_files_solve() {
    let d = tmpdir("pat");
    let a = write(
        &d,
        "p.mtx",
        "%%MatrixMarket matrix coordinate pattern symmetric\n5 5 4\n2 1\n3 2\n4 3\n5 4\n",
    );
    let o = opts(
        problem(a.to_str().unwrap(), Rhs::Manufactured { seed: 1 }),
        tol(1e-12),
        false,
    );
    let r = run_on(2, &o).unwrap();
    assert_eq!(r.outcome, Outcome::Converged);
    assert!(r.solution_error.unwrap() < 1e-10);
    assert!(
        r.notes.iter().any(|n| n.contains("Laplacian")),
        "{:?}",
        r.notes
    );
    let i = write(
        &d,
        "i.mtx",
        "%%MatrixMarket matrix coordinate integer symmetric\n3 3 5\n1 1 4\n2 1 -1\n2 2 4\n3 2 -1\n3 3 4\n",
    );
    let o = opts(problem(i.to_str().unwrap(), Rhs::Ones), tol(1e-12), false);
    let r = run_on(3, &o).unwrap();
    assert_eq!(r.outcome, Outcome::Converged);
    assert_eq!(r.matrix.nnz, 7);
}

// ---- Jacobi preconditioning -----------------------------------------------------------------

/// `a` scaled symmetrically, D A D with D_i = 10^(e_i), e_i spread over [0, 3): rows and
/// columns whose scales differ by up to 10^6, as in the bcsstk stiffness matrices. Still
/// symmetric positive definite; the condition number grows by up to 10^12.
fn badly_scaled(a: &Csr) -> Csr {
    let e = |i: usize| 10f64.powf(((i * 7) % 13) as f64 * 3.0 / 13.0);
    let mut s = a.clone();
    for i in 0..s.n_rows {
        for k in s.row_ptr[i]..s.row_ptr[i + 1] {
            s.val[k] *= e(i) * e(s.col[k] as usize);
        }
    }
    s
}

fn precond_opts(prob: Problem, max_iters: u64, precond: Precond) -> Options {
    Options {
        precond,
        ..opts(
            prob,
            Stop::Tolerance {
                tol: 1e-8,
                max_iters,
            },
            false,
        )
    }
}

/// With a constant diagonal (the Poisson matrix: 6 everywhere) Jacobi changes nothing but
/// a scale: the same iterations, the same answer.
#[test]
fn jacobi_on_a_constant_diagonal_is_plain_cg() {
    for p in [1, 3] {
        let prob = problem("poisson3d:6", Rhs::AOnes);
        let none = run_on(p, &precond_opts(prob.clone(), 1000, Precond::None)).unwrap();
        let jac = run_on(p, &precond_opts(prob, 1000, Precond::Jacobi)).unwrap();
        assert_eq!(none.outcome, Outcome::Converged);
        assert_eq!(jac.outcome, Outcome::Converged);
        assert!(
            jac.iterations.abs_diff(none.iterations) <= 1,
            "p={p}: {} vs {} iterations",
            jac.iterations,
            none.iterations
        );
        assert_eq!(jac.precond, Precond::Jacobi);
        assert!(
            jac.solution_error.unwrap() < 1e-6,
            "{:?}",
            jac.solution_error
        );
    }
}

/// D A D (rows scaled over six decades): plain CG does not converge in twenty times the
/// iterations it needs on A itself; Jacobi, which undoes the scaling, converges in a
/// quarter of that, to the all-ones solution of b = A 1.
#[test]
fn jacobi_converges_where_plain_cg_does_not() {
    let d = tmpdir("jacobi");
    let a = Synthetic::Poisson3d { m: 6 }.rows(0..216);
    let f = write(&d, "scaled.mtx", &mtx_symmetric(&badly_scaled(&a)));
    let plain = run_on(
        2,
        &precond_opts(problem("poisson3d:6", Rhs::AOnes), 1000, Precond::None),
    )
    .unwrap();
    let scaled = problem(f.to_str().unwrap(), Rhs::AOnes);
    let limit = 20 * plain.iterations;
    let none = run_on(2, &precond_opts(scaled.clone(), limit, Precond::None)).unwrap();
    assert_eq!(none.outcome, Outcome::IterationLimit, "{none:?}");
    assert!(
        none.warnings.iter().any(|w| w.contains("--precond jacobi")),
        "{none:?}"
    );
    for p in [2, 4] {
        let jac = run_on(p, &precond_opts(scaled.clone(), limit, Precond::Jacobi)).unwrap();
        assert_eq!(jac.outcome, Outcome::Converged, "p={p}: {jac:?}");
        assert!(
            4 * jac.iterations <= limit,
            "p={p}: {} iterations, plain CG {} on the unscaled matrix",
            jac.iterations,
            plain.iterations
        );
        assert!(
            jac.solution_error.unwrap() < 1e-4,
            "{:?}",
            jac.solution_error
        );
    }
}

/// A diagonal entry Jacobi cannot invert on one rank only is an error on every rank
/// together (the verdict is allreduced), not a hang or a NaN.
#[test]
fn jacobi_refuses_a_diagonal_it_cannot_invert_on_every_rank() {
    let results = tca::threads::run(3, |world| {
        let mut c = tca::Comm::world(world)?;
        let r = (|| {
            let mut lp = setup(&mut c, &problem("poisson3d:3", Rhs::Ones))?;
            if c.rank() == 1 {
                let i = 0;
                let lo = lp.part.range(1).start;
                let (s, e) = (lp.a.row_ptr[i], lp.a.row_ptr[i + 1]);
                let k = s + lp.a.col[s..e]
                    .iter()
                    .position(|&j| j as usize == lo)
                    .unwrap();
                lp.a.val[k] = 0.0;
            }
            solve(
                &mut c,
                &lp,
                tol(1e-8),
                Precond::Jacobi,
                Schedule::Paper,
                false,
                None,
            )
        })();
        Ok(r.map(|s| s.stats.iterations))
    })
    .unwrap();
    for (rank, r) in results.iter().enumerate() {
        match r {
            Err(CgError::Diagonal(m)) => assert!(m.contains("1 diagonal entries"), "{m}"),
            other => panic!("rank {rank}: {other:?}"),
        }
    }
}

// ---- the overlapped schedule ---------------------------------------------------------------

/// Splitting a block of rows by column keeps every entry exactly once, on the right side, and
/// the two halves of the SpMV add up to the whole one.
#[test]
fn split_rows_add_up_to_the_whole_spmv() {
    for spec in [
        Synthetic::Banded { n: 40, k: 9 },
        Synthetic::Poisson3d { m: 4 },
    ] {
        let n = spec.rows(0..1).n_cols;
        let full = spec.rows(0..n);
        let x: Vec<f64> = (0..n)
            .map(|i| tca_cg::problem::uniform(3, i as u64))
            .collect();
        for p in 1..=5 {
            let part = Partition::new(n, p).unwrap();
            for r in 0..p {
                let rows = part.range(r);
                let a = full.rows(rows.clone());
                let sp = a.split(rows.clone());
                assert_eq!(
                    sp.own.nnz() + sp.other.nnz(),
                    a.nnz(),
                    "{spec:?} p={p} r={r}"
                );
                assert!(sp.own.col.iter().all(|&j| (j as usize) < rows.len()));
                assert!(sp.other.col.iter().all(|&j| !rows.contains(&(j as usize))));
                assert!(sp.rows.windows(2).all(|w| w[0] < w[1]));
                assert_eq!(sp.rows.len(), sp.other.n_rows);
                if p == 1 {
                    assert_eq!((sp.other.nnz(), sp.rows.len()), (0, 0));
                }
                let mut whole = vec![0.0; rows.len()];
                a.spmv(&x, &mut whole);
                let mut halves = vec![f64::NAN; rows.len()];
                sp.spmv_own(&x[rows.clone()], &mut halves);
                sp.spmv_other_add(&x, &mut halves);
                let diff = max_rel_diff(&halves, &whole);
                assert!(diff < 1e-14, "{spec:?} p={p} r={r}: {diff:e}");
            }
        }
    }
}

/// The whole job with the overlapped schedule, timed: the report says which schedule ran, the
/// answer is right, and the phases are all there.
#[test]
fn overlapped_schedule_reports_itself_and_solves() {
    let o = Options {
        schedule: Schedule::Overlap,
        ..opts(
            problem("poisson3d:5", Rhs::Manufactured { seed: 4 }),
            tol(1e-10),
            true,
        )
    };
    for p in [1, 2, 3] {
        let r = run_on(p, &o).unwrap();
        assert_eq!(r.schedule, Schedule::Overlap);
        assert_eq!(r.outcome, Outcome::Converged);
        assert!(r.solution_error.unwrap() < 1e-8, "p={p}");
        let b = r.breakdown.as_ref().unwrap();
        assert_eq!(b.per_rank.len(), p as usize);
        assert_eq!(b.clock_reads_per_iteration, 13);
        let ph = &b.rank0.phases;
        assert!(
            ph.spmv > 0.0 && ph.allgather > 0.0 && ph.dot > 0.0,
            "{ph:?}"
        );
        assert!(ph.spmv + ph.allgather + ph.dot + ph.axpy + ph.allreduce <= b.rank0.total);
        assert!(r.text().contains("schedule: overlap"), "{}", r.text());
    }
    assert_eq!(Schedule::parse("overlap").unwrap(), Schedule::Overlap);
    assert_eq!(Schedule::parse("paper").unwrap(), Schedule::Paper);
    assert!(matches!(Schedule::parse("async"), Err(CgError::Invalid(_))));
}

#[test]
fn precond_and_a_ones_parse() {
    assert_eq!(Precond::parse("jacobi").unwrap(), Precond::Jacobi);
    assert_eq!(Precond::parse("none").unwrap(), Precond::None);
    assert!(matches!(Precond::parse("ilu"), Err(CgError::Invalid(_))));
    assert_eq!(Rhs::parse("a-ones").unwrap(), Rhs::AOnes);
    assert_eq!(Rhs::AOnes.to_string(), "a-ones");
}

/// A solve on a simulated network, in both schedules (where the backend gathers the direction
/// vector with the collective algorithms the simulation models, not the one-copy vector):
/// the same answer as on shared memory, in the same number of iterations give or take one.
#[test]
fn simulated_network_solves_in_both_schedules() {
    let net = tca::sim::Network::load("peach2-2x8").unwrap();
    let sim = tca::sim::Options::new(net);
    let prob = problem("poisson3d:5", Rhs::Manufactured { seed: 6 });
    let here = run_on(3, &opts(prob.clone(), tol(1e-10), false)).unwrap();
    for schedule in [Schedule::Paper, Schedule::Overlap] {
        let o = Options {
            schedule,
            ..opts(prob.clone(), tol(1e-10), true)
        };
        let r = tca_cg::job::simulate(&o, 3, &sim).unwrap();
        assert_eq!(r.outcome, Outcome::Converged, "{schedule}");
        assert!(r.iterations.abs_diff(here.iterations) <= 1, "{schedule}");
        assert!(r.solution_error.unwrap() < 1e-8, "{schedule}");
        assert!(r.transport.starts_with("tca"), "{}", r.transport);
        assert_eq!(r.schedule, schedule);
    }
}

/// The SpMV kernel, short rows (one sum) and long rows (four partial sums), against a plain
/// element-by-element product: exactly equal on integer values (every order of the sums is
/// exact there), and within rounding on random ones.
#[test]
fn spmv_matches_a_plain_product_for_short_and_long_rows() {
    let mut kernels = std::collections::HashSet::new();
    for (n, k) in [(50, 5), (80, 41), (64, 25), (40, 15)] {
        let a = Synthetic::Banded { n, k }.rows(0..n);
        kernels.insert(a.nnz() >= tca_cg::matrix::LONG_ROW * a.n_rows);
        let plain = |a: &Csr, x: &[f64]| -> Vec<f64> {
            (0..a.n_rows)
                .map(|i| {
                    let (c, v) = a.row(i);
                    c.iter().zip(v).map(|(&j, &w)| w * x[j as usize]).sum()
                })
                .collect()
        };
        // Integer matrix and vector: exact.
        let int = Csr {
            val: a.val.iter().map(|v| v.round()).collect(),
            ..a.clone()
        };
        let xi: Vec<f64> = (0..n).map(|i| (i % 7) as f64 - 3.0).collect();
        let mut y = vec![0.0; n];
        int.spmv(&xi, &mut y);
        assert_eq!(y, plain(&int, &xi), "n={n} k={k}");
        let xr: Vec<f64> = (0..n)
            .map(|i| tca_cg::problem::uniform(9, i as u64))
            .collect();
        a.spmv(&xr, &mut y);
        let diff = max_rel_diff(&y, &plain(&a, &xr));
        assert!(diff < 1e-12, "n={n} k={k}: {diff:e}");
    }
    assert_eq!(kernels.len(), 2, "both kernels were tried");
}
