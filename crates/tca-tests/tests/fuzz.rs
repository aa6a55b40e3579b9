//! Structured fuzzing (proptest) of the readers of outside bytes: result files
//! (`tca_model::record::parse_any`: tca CSV and JSON, IMB text) and IMB sections, sizes and
//! ranges, Matrix Market matrices and the solver's specs, the calibration file, segment
//! handles, host lists, the start-up rendezvous. Each target gets arbitrary input and
//! mutations of real inputs (bytes replaced, inserted, deleted, lines duplicated, the text cut
//! short) and hands them to the target functions of `tca_tests` (src/lib.rs), which the
//! coverage-guided AFL++ harness (`fuzz/`, `scripts/fuzz.sh`) drives too: a reader returns
//! `Ok` or `Err` and never panics (or aborts on a huge allocation), and what it accepts is
//! consistent. CI runs proptest's default 256 cases per target;
//! `PROPTEST_CASES=100000 cargo test --release -p tca-tests --test fuzz` is the longer
//! campaign (its figures in BENCHMARKS.md).

use proptest::prelude::*;
use tca_model::record::{Row, Run};
use tca_model::size;

/// A real `tca bench` result, as CSV, JSON-like record and IMB text seeds.
fn seed_run() -> Run {
    let row = |bench: &str, bytes: u64, t: f64| Row {
        implementation: "tca".into(),
        benchmark: bench.into(),
        algorithm: "ring".into(),
        ranks: 2,
        bytes,
        repetitions: 1000,
        t_min_us: t,
        t_max_us: t * 1.1,
        t_avg_us: t * 1.05,
        mbytes_per_sec: Some(bytes as f64 / t),
        overlap: None,
    };
    Run {
        machine: "AMD EPYC (2 cpus), Linux 6.18".into(),
        date: "2026-11-23T08:25:30Z".into(),
        transport: "tca: shm".into(),
        rows: (0..8)
            .map(|k| row("Allreduce", 8 << (2 * k), 0.2 + k as f64))
            .chain((0..4).map(|k| row("PingPong", 1 << (3 * k), 0.05 + k as f64)))
            .collect(),
    }
}

const IMB: &str = "#------------------------------------------------------------
# Benchmarking PingPong
# #processes = 2
#------------------------------------------------------------
       #bytes #repetitions      t[usec]   Mbytes/sec
            0         1000         0.18         0.00
            1         1000         0.19         5.26
         1024         1000         0.45      2275.56
#----------------------------------------------------------------
# Benchmarking Allreduce
# #processes = 2
#----------------------------------------------------------------
       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]
            0         1000         0.03         0.04         0.03
            8         1000         0.20         0.21         0.20
         4096         1000         1.10         1.20         1.15
";

/// Real IMB-MPI1 output (Intel MPI Benchmarks 2021.11 built from its sources, run under Open
/// MPI 4.1.4 on the development machine): every benchmark of its default list at 2 ranks,
/// and at 4 ranks the point-to-point ones with waiting ranks, Uniband, Biband and three
/// collectives. Also AFL++'s seeds (`fuzz/corpus/results`).
const REAL_IMB_NP2: &str = include_str!("../../../fuzz/corpus/results/imb-mpi1-2021.11-np2.txt");
const REAL_IMB_NP4: &str = include_str!("../../../fuzz/corpus/results/imb-mpi1-2021.11-np4.txt");

/// `tca model fit`'s reader takes real IMB-MPI1 output whole: every section with times, and
/// the bandwidth-only Uniband and Biband as empty sections (they once made it refuse the
/// whole file: "unknown column header").
#[test]
fn real_imb_output_is_read_whole() {
    use tca_model::{imb, record};
    let two = imb::parse(REAL_IMB_NP2).unwrap();
    let names: Vec<&str> = two.iter().map(|s| s.benchmark.as_str()).collect();
    assert_eq!(names.len(), 19, "{names:?}");
    assert!(
        ["PingPong", "Sendrecv", "Exchange", "Alltoallv", "Barrier"]
            .iter()
            .all(|b| names.contains(b))
    );
    for s in &two {
        assert_eq!(s.processes, 2, "{}", s.benchmark);
        let want = if s.benchmark == "Barrier" { 1 } else { 10 };
        assert!(
            s.lines.len() >= want,
            "{}: {} lines",
            s.benchmark,
            s.lines.len()
        );
        assert!(
            s.lines
                .iter()
                .all(|l| l.t_min <= l.t_avg && l.t_avg <= l.t_max)
        );
    }
    let four = imb::parse(REAL_IMB_NP4).unwrap();
    let by = |n: &str, p: u32| {
        four.iter()
            .find(|s| s.benchmark == n && s.processes == p)
            .unwrap_or_else(|| panic!("{n} at {p} processes"))
    };
    assert_eq!(by("PingPong", 2).waiting, 2);
    assert!(by("Uniband", 4).lines.is_empty() && by("Biband", 4).lines.is_empty());
    let sr = by("Sendrecv", 4);
    assert_eq!(sr.lines.len(), 10);
    assert_eq!(sr.lines[0].t_avg, 1.11);
    // As rows: what `tca model fit` fits, 4 ranks for the pair that had 2 waiting.
    let rows = record::parse_any(REAL_IMB_NP4).unwrap();
    assert!(
        rows.iter()
            .any(|r| r.benchmark == "PingPong" && r.ranks == 4)
    );
    assert!(rows.iter().all(|r| r.benchmark != "Uniband"));
}

/// One edit of a text.
#[derive(Debug, Clone)]
enum Edit {
    Replace(usize, u8),
    Insert(usize, u8),
    Delete(usize, usize),
    DupLine(usize),
    Cut(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let byte = prop_oneof![
        any::<u8>(),
        Just(b','),
        Just(b'\n'),
        Just(b'#'),
        Just(b'-'),
        Just(b'9'),
        Just(b'e'),
        Just(b'"'),
        Just(b'{'),
        Just(b'}')
    ];
    prop_oneof![
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Edit::Replace(i, b)),
        (any::<usize>(), byte).prop_map(|(i, b)| Edit::Insert(i, b)),
        (any::<usize>(), 1usize..40).prop_map(|(i, n)| Edit::Delete(i, n)),
        any::<usize>().prop_map(Edit::DupLine),
        any::<usize>().prop_map(Edit::Cut),
    ]
}

/// `seed` with `edits` applied, as text (invalid UTF-8 replaced, as a reader of a file would
/// see after `from_utf8_lossy`).
fn mutate(seed: &str, edits: &[Edit]) -> String {
    let mut b = seed.as_bytes().to_vec();
    for e in edits {
        let n = b.len().max(1);
        match *e {
            Edit::Replace(i, c) if !b.is_empty() => b[i % n] = c,
            Edit::Insert(i, c) => b.insert(i % (b.len() + 1), c),
            Edit::Delete(i, k) if !b.is_empty() => {
                let s = i % n;
                b.drain(s..(s + k).min(b.len()));
            }
            Edit::DupLine(i) => {
                let lines: Vec<&[u8]> = b.split(|&c| c == b'\n').collect();
                let l = lines[i % lines.len()].to_vec();
                let at = i % (b.len() + 1);
                b.splice(at..at, l.into_iter().chain([b'\n']));
            }
            Edit::Cut(i) => b.truncate(i % (b.len() + 1)),
            _ => {}
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

proptest! {
    #[test]
    fn result_files_never_panic(edits in prop::collection::vec(edit(), 0..12), which in 0..5u8) {
        let run = seed_run();
        let seed = match which {
            0 => run.to_csv(),
            1 => serde_json::to_string(&run).unwrap(),
            2 => REAL_IMB_NP2.to_string(),
            3 => REAL_IMB_NP4.to_string(),
            _ => IMB.to_string(),
        };
        tca_tests::results(mutate(&seed, &edits).as_bytes());
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
        tca_tests::results(text.as_bytes());
        tca_tests::sizes(text.as_bytes());
    }

    #[test]
    fn sizes_never_panic_and_round_trip(
        n in 0u64..(1 << 30),
        unit in prop::sample::select(vec!["", "B", "K", "KiB", "KB", "m", "MiB", "g", "GB"]),
        noise in "[0-9KMGkmgiB:, -]{0,12}",
    ) {
        let shift = match unit.to_ascii_lowercase().chars().next() {
            Some('k') => 10,
            Some('m') => 20,
            Some('g') => 30,
            _ => 0,
        };
        if let Some(v) = n.checked_shl(shift).filter(|v| v >> shift == n) {
            prop_assert_eq!(size::parse_bytes(&format!("{n}{unit}")), Ok(v));
        }
        for s in [noise.clone(), format!("{n}{noise}"), format!("{noise}:{n}")] {
            tca_tests::sizes(s.as_bytes());
        }
    }
}

/// A small SPD matrix in Matrix Market symmetric storage (tridiagonal 4, -1), the seed of the
/// matrix reader's mutations; and a general, an integer, a pattern and an array form.
fn mtx_seeds() -> Vec<String> {
    let mut sym = String::from("%%MatrixMarket matrix coordinate real symmetric\n% seed\n6 6 11\n");
    for i in 1..=6 {
        sym += &format!("{i} {i} 4.0\n");
        if i > 1 {
            sym += &format!("{i} {} -1e0\n", i - 1);
        }
    }
    vec![
        sym,
        "%%MatrixMarket matrix coordinate real general\n3 3 5\n1 1 2\n2 2 2\n3 3 2\n1 2 -.5\n2 1 -.5\n".into(),
        "%%MatrixMarket matrix coordinate integer symmetric\n2 2 3\n1 1 3\n2 2 3\n2 1 1\n".into(),
        "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 4\n1 1\n2 1\n3 2\n3 3\n".into(),
        "%%MatrixMarket matrix array real general\n2 2\n4\n1\n1\n4\n".into(),
    ]
}

proptest! {
    #[test]
    fn matrix_market_never_panics(seed in 0..5usize, edits in prop::collection::vec(edit(), 0..10)) {
        tca_tests::matrix(mutate(&mtx_seeds()[seed], &edits).as_bytes());
    }

    #[test]
    fn matrix_headers_claiming_huge_sizes_are_errors(
        rows in prop::sample::select(vec![0u64, 1, 6, 1 << 31, 1 << 40, u64::MAX]),
        cols in prop::sample::select(vec![0u64, 6, 1 << 33, u64::MAX]),
        nnz in prop::sample::select(vec![0u64, 11, 1 << 35, u64::MAX]),
    ) {
        let seed = &mtx_seeds()[0];
        let body: Vec<&str> = seed.lines().skip(3).collect();
        let text = format!(
            "%%MatrixMarket matrix coordinate real symmetric\n{rows} {cols} {nnz}\n{}\n",
            body.join("\n")
        );
        // Claims the entries do not back are refused before anything that size is allocated.
        let r = tca_cg::mm::parse_matrix(&text, "fuzz");
        if (rows, cols, nnz) != (6, 6, 11) {
            prop_assert!(r.is_err(), "{rows} {cols} {nnz}");
        }
    }

    #[test]
    fn solver_specs_never_panic(spec in "\\PC{0,40}", tail in "[0-9:a-z.]{0,20}") {
        for s in [spec.clone(), format!("poisson3d:{tail}"), format!("banded:{tail}"), format!("manufactured:{tail}")] {
            tca_tests::specs(s.as_bytes());
        }
    }

    #[test]
    fn calibration_file_never_panics(edits in prop::collection::vec(edit(), 0..10)) {
        let seed = tca::coll::model::Calibration::builtin().to_json();
        tca_tests::calibration(mutate(&seed, &edits).as_bytes());
    }

    #[test]
    fn network_models_never_panic(
        which in 0..tca::sim::BUILT_IN.len(),
        edits in prop::collection::vec(edit(), 0..10),
    ) {
        tca_tests::network(mutate(tca::sim::BUILT_IN[which].1, &edits).as_bytes());
    }

    #[test]
    fn handles_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        tca_tests::handle(&bytes);
    }

    #[test]
    fn host_lists_never_panic(list in "[a-z0-9.:,\\[\\]-]{0,40}") {
        tca_tests::hosts(list.as_bytes());
        tca_tests::env(list.as_bytes());
    }
}

/// The seeds of the `launch` target (`fuzz/corpus/launch/*.txt`: the environments of `tca
/// run`, Slurm on one and two nodes, `mpirun`, a PMI launcher).
fn launch_seeds() -> Vec<String> {
    let dir = fuzz_dir().join("corpus").join("launch");
    let mut seeds: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| std::fs::read_to_string(e.expect("a corpus entry").path()).expect("a text seed"))
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 6, "launch seeds in {}", dir.display());
    seeds
}

/// Names start-up reads, and value shapes that reach its branches.
const LAUNCH_NAMES: &[&str] = &[
    "TCA_RANK",
    "TCA_SIZE",
    "TCA_JOB_ID",
    "TCA_BOARD_FD",
    "TCA_LAUNCHER_PID",
    "TCA_KV",
    "TCA_BOOT_TIMEOUT",
    "TCA_MAX_RANKS",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_STEP_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_KVSNAME",
    "MPI_LOCALNRANKS",
];

fn launch_value() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..10).prop_map(|n| n.to_string()),
        any::<u32>().prop_map(|n| n.to_string()),
        Just(String::new()),
        Just(" 3 ".to_string()),
        Just("-1".to_string()),
        Just("4294967296".to_string()),
        "[0-9a-f]{1,17}",
        "[a-z0-9\\[\\],:-]{0,16}",
        "\\PC{0,12}",
    ]
}

proptest! {
    /// Start-up's detection as a whole (`tca::bootstrap::fuzz_detect`): environments mutated
    /// from real launchers' and made of the variables it reads with odd values; whatever it
    /// accepts is a job this rank can join, the same twice.
    #[test]
    fn launch_environments_are_a_job_or_an_error(
        seed in 0..6usize,
        edits in prop::collection::vec(edit(), 0..8),
        extra in prop::collection::vec((prop::sample::select(LAUNCH_NAMES), launch_value()), 0..6),
    ) {
        let seeds = launch_seeds();
        let mut text = mutate(&seeds[seed % seeds.len()], &edits);
        for (name, value) in &extra {
            text.push_str(&format!("\n{name}={value}"));
        }
        tca_tests::launch(text.as_bytes());
        let bare: String = extra.iter().map(|(n, v)| format!("{n}={v}\n")).collect();
        tca_tests::launch(bare.as_bytes());
    }
}

#[test]
fn launch_seeds_are_jobs_and_break_into_errors() {
    for seed in launch_seeds() {
        assert!(tca::bootstrap::fuzz_detect(seed.as_bytes()), "{seed}");
    }
    for bad in [
        "SLURM_PROCID=8\nSLURM_NTASKS=8\n",
        "PMI_RANK=0\nPMI_SIZE=0\n",
        "TCA_BOARD_FD=5\nTCA_RANK=0\nTCA_SIZE=2\n",
        "OMPI_COMM_WORLD_RANK=0\nOMPI_COMM_WORLD_SIZE=4\nOMPI_COMM_WORLD_LOCAL_SIZE=1\n",
    ] {
        assert!(!tca::bootstrap::fuzz_detect(bad.as_bytes()), "{bad}");
    }
}

/// The AFL++ harness's directory (`fuzz/`: corpus, regressions).
fn fuzz_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Seed `name` of `target`'s corpus (`fuzz/corpus/TARGET/NAME.bin`).
fn corpus(target: &str, name: &str) -> Vec<u8> {
    let path = fuzz_dir()
        .join("corpus")
        .join(target)
        .join(format!("{name}.bin"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `seed` with the bytes at the given positions replaced (positions past its end ignored).
fn edited(seed: &[u8], edits: &[(usize, u8)]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for &(i, v) in edits {
        if let Some(x) = b.get_mut(i) {
            *x = v;
        }
    }
    b
}

proptest! {
    /// A peer's segment file, mutated from a valid one (header bytes, the handle's fields,
    /// the file's length): attach refuses what does not match and what it accepts is
    /// consistent (`tca::transport::fuzz_attach`).
    #[test]
    fn attach_checks_every_header_field(
        seed in prop::sample::select(vec!["valid", "freed", "short-file", "empty"]),
        edits in prop::collection::vec((0usize..120, any::<u8>()), 0..4),
    ) {
        let b = edited(&corpus("attach", seed), &edits);
        tca_tests::attach(&b);
    }

    /// A node's start-up board, mutated from real ones (header, abort word, entries, the
    /// job's size and the file's length): opening refuses it or reads every field of every
    /// rank without a panic (`tca::transport::fuzz_board`).
    #[test]
    fn boards_open_or_are_refused(
        seed in prop::sample::select(vec!["ready-2", "aborted-8", "wrong-size", "line"]),
        edits in prop::collection::vec((0usize..1500, any::<u8>()), 0..6),
    ) {
        let b = edited(&corpus("board", seed), &edits);
        tca_tests::board(&b);
    }
}

/// The board seeds reach both outcomes: real boards open; one whose header counts other
/// ranks than the rank was told, or a file too short for the job, is refused.
#[test]
fn board_seeds_reach_both_outcomes() {
    let seed = |n: &str| corpus("board", n);
    assert!(tca::transport::fuzz_board(&seed("ready-2")));
    assert!(tca::transport::fuzz_board(&seed("aborted-8")));
    assert!(!tca::transport::fuzz_board(&seed("wrong-size")));
    assert!(!tca::transport::fuzz_board(&seed("line")));
    let mut version = seed("ready-2");
    version[2 + 8] = 2; // the layout version
    assert!(!tca::transport::fuzz_board(&version));
    // 64 ranks need three pages; one page is too short.
    let mut big = seed("ready-2");
    big[0] = 63;
    big[2 + 12] = 64; // the header's size
    assert!(!tca::transport::fuzz_board(&big));
    big[1] = 2;
    assert!(tca::transport::fuzz_board(&big));
}

proptest! {
    /// The rendezvous client against whatever a server sends: mutated real replies and
    /// arbitrary bytes (`tca::bootstrap::kv::fuzz_client`).
    #[test]
    fn rendezvous_replies_never_panic(
        seed in prop::sample::select(vec!["all", "beat-then-all", "refused", "abort"]),
        edits in prop::collection::vec((0usize..64, any::<u8>()), 0..4),
        junk in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let b = edited(&corpus("rendezvous", seed), &edits);
        tca_tests::rendezvous(&b);
        tca_tests::rendezvous(&junk);
    }
}

proptest! {
    /// Start-up through PMI-1 against whatever a launcher sends: mutated real answers and
    /// arbitrary bytes (`tca::bootstrap::pmi::fuzz_replies`).
    #[test]
    fn pmi_replies_never_panic(
        seed in prop::sample::select(vec!["rank0", "rank1", "refused"]),
        edits in prop::collection::vec((0usize..200, any::<u8>()), 0..4),
        junk in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let b = edited(&corpus("pmi", seed), &edits);
        tca_tests::pmi(&b);
        tca_tests::pmi(&junk);
    }
}

/// The PMI-1 seeds reach both outcomes: both ranks get their addresses from Hydra's
/// answers; a refused put is an error.
#[test]
fn pmi_seeds_reach_both_outcomes() {
    let replies = tca::bootstrap::pmi::fuzz_replies;
    assert!(replies(&corpus("pmi", "rank0")));
    assert!(replies(&corpus("pmi", "rank1")));
    assert!(!replies(&corpus("pmi", "refused")));
    // Rank 1's answers read as rank 0's: a get_result where the put's answer belongs.
    let mut swapped = corpus("pmi", "rank1");
    swapped[0] = 0;
    assert!(!replies(&swapped));
}

/// The rendezvous seeds end their round as a server meant: records, a refusal, an abort.
#[test]
fn rendezvous_seeds_end_their_rounds() {
    let seed = |n: &str| corpus("rendezvous", n);
    let client = tca::bootstrap::kv::fuzz_client;
    assert_eq!(client(&seed("all")), Some(true));
    assert_eq!(client(&seed("beat-then-all")), Some(true));
    assert_eq!(client(&seed("refused")), Some(false));
    assert_eq!(client(&seed("abort")), Some(false));
    // A round of three records read by a rank of a job of two is malformed.
    let mut wrong = seed("beat-then-all");
    wrong[0] = 1;
    assert_eq!(client(&wrong), Some(false));
}

/// The attach target's seeds reach both outcomes: the valid header attaches, the freed one,
/// the file shorter than its handle claims and a changed key do not.
#[test]
fn attach_seeds_reach_both_outcomes() {
    let seed = |n: &str| corpus("attach", n);
    assert!(tca::transport::fuzz_attach(&seed("valid")));
    assert!(tca::transport::fuzz_attach(&seed("empty")));
    assert!(!tca::transport::fuzz_attach(&seed("freed")));
    assert!(!tca::transport::fuzz_attach(&seed("short-file")));
    let mut forged = seed("valid");
    forged[8] ^= 2; // the handle's key
    assert!(!tca::transport::fuzz_attach(&forged));
}

/// What a stranger sends to the start-up rendezvous before the job's ranks come.
#[derive(Debug, Clone)]
enum Garbage {
    /// Any bytes.
    Raw(Vec<u8>),
    /// A well-framed message of any type.
    Frame(u8, Vec<u8>),
    /// A greeting of another job, any rank and size.
    OtherJob(u64, u32, u32),
    /// A greeting of this job with a rank out of range.
    BadRank(u32),
    /// A frame header claiming up to 4 GiB.
    Huge(u32),
}

fn garbage() -> impl Strategy<Value = Garbage> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200).prop_map(Garbage::Raw),
        (0u8..12, prop::collection::vec(any::<u8>(), 0..100))
            .prop_map(|(t, p)| Garbage::Frame(t, p)),
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(j, r, s)| Garbage::OtherJob(j, r, s)),
        (2u32..).prop_map(Garbage::BadRank),
        any::<u32>().prop_map(Garbage::Huge),
    ]
}

fn frame(ty: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = u32::try_from(payload.len() + 1)
        .unwrap()
        .to_le_bytes()
        .to_vec();
    f.push(ty);
    f.extend_from_slice(payload);
    f
}

const KV_JOB: u64 = 0x7ca5_11ed_0000_0001;

proptest! {
    // Each case starts a rendezvous server and a two-rank job: fewer cases than the parsers.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse::<u32>().ok()).map_or(24, |c| (c / 10).max(1))
    ))]

    /// The rendezvous is the one network input of start-up: strangers' connections (garbage,
    /// other jobs, bad ranks, frames claiming 4 GiB) are refused or dropped, and the job's own
    /// two ranks still meet and exchange their records, with no abort.
    #[test]
    fn rendezvous_survives_strangers(junk in prop::collection::vec(garbage(), 1..6)) {
        use std::io::Write as _;
        use tca::bootstrap::kv::{KvClient, KvServer};
        let server = KvServer::start("127.0.0.1:0".parse().unwrap(), KV_JOB, 2).unwrap();
        let addr = server.addr();
        for g in &junk {
            let Ok(mut s) = std::net::TcpStream::connect(addr) else { continue };
            let bytes = match g {
                Garbage::Raw(b) => b.clone(),
                Garbage::Frame(t, p) => frame(*t, p),
                Garbage::OtherJob(j, r, sz) => {
                    let j = if *j == KV_JOB { j ^ 1 } else { *j };
                    let mut p = j.to_le_bytes().to_vec();
                    p.extend_from_slice(&r.to_le_bytes());
                    p.extend_from_slice(&sz.to_le_bytes());
                    frame(1, &p)
                }
                Garbage::BadRank(r) => {
                    let mut p = KV_JOB.to_le_bytes().to_vec();
                    p.extend_from_slice(&r.to_le_bytes());
                    p.extend_from_slice(&2u32.to_le_bytes());
                    frame(1, &p)
                }
                Garbage::Huge(n) => n.to_le_bytes().to_vec(),
            };
            let _ = s.write_all(&bytes);
            // The stranger hangs up (or the server already did).
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let ranks: Vec<_> = (0..2u32)
            .map(|r| {
                std::thread::spawn(move || {
                    let mut c = KvClient::connect(&[addr], KV_JOB, r, 2, (None, "test".into()), deadline)?;
                    let all = c.allgather(&[r as u8; 3], deadline)?;
                    c.leave();
                    Ok::<_, tca::Error>(all)
                })
            })
            .collect();
        for (r, t) in ranks.into_iter().enumerate() {
            let all = t.join().unwrap();
            prop_assert_eq!(all.as_ref().ok(), Some(&vec![vec![0u8; 3], vec![1u8; 3]]), "rank {}: {:?}", r, all.as_ref().err());
        }
        server.wait_done(std::time::Duration::from_secs(5));
        prop_assert!(server.aborted().is_none(), "{:?}", server.aborted());
    }
}

/// Every target has a seed corpus for the coverage-guided fuzzer (`fuzz/corpus/TARGET`) and
/// takes every input of it, and of `fuzz/regressions/TARGET` (where what a campaign found
/// goes, so that it stays fixed), without a panic — not even one caught inside tca (the
/// matrix reader catches its library's panics; AFL++ counts them as crashes, and so does this
/// test).
/// Every built-in model is accepted and used whole by the target; a model that breaks a
/// rule is refused before it is used.
#[test]
fn network_seeds_reach_both_outcomes() {
    for (name, text) in tca::sim::BUILT_IN {
        assert!(tca::sim::fuzz_network(text), "{name}");
    }
    let (_, text) = tca::sim::BUILT_IN[0];
    let huge = format!("{text}\n").replace("dims = [", "dims = [65536, ");
    assert!(
        !tca::sim::fuzz_network(&huge),
        "a torus of more than 65,536 nodes"
    );
    assert!(!tca::sim::fuzz_network("not a model"));
}

#[test]
fn every_target_takes_its_corpus_and_regressions() {
    thread_local!(static PANICKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICKED.with(|p| p.set(true));
        previous(info);
    }));
    let fuzz = fuzz_dir();
    for &(name, target) in tca_tests::TARGETS {
        let mut seeds = 0;
        for dir in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(name)) else {
                continue;
            };
            for e in entries {
                let path = e.unwrap().path();
                target(&std::fs::read(&path).unwrap());
                assert!(!PANICKED.with(|p| p.get()), "{} panicked", path.display());
                seeds += usize::from(dir == "corpus");
            }
        }
        assert!(seeds > 0, "fuzz/corpus/{name} is empty");
    }
    assert!(tca_tests::target("no-such-target").is_none());
}
