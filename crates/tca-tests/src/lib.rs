//! The fuzz targets of tca: one function per reader of bytes from outside, taking the bytes
//! as they come. Each must return (never panic, abort or allocate what the input only
//! claims), and what a reader accepts must be consistent — checked here with assertions, so
//! an inconsistency is a crash like any other. Two engines drive the same functions: the
//! structured fuzzing of `tests/fuzz.rs` (proptest: arbitrary text and mutations of real
//! inputs, in every `cargo test`) and the coverage-guided fuzzing of `fuzz/` (AFL++ through
//! cargo-afl: `scripts/fuzz.sh`, seeded from `fuzz/corpus`).
#![forbid(unsafe_code)]

use tca_model::{imb, record, size};

pub mod netfuzz;

/// A target: its name on the command line and the function that takes an input.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("results", results),
    ("sizes", sizes),
    ("matrix", matrix),
    ("specs", specs),
    ("calibration", calibration),
    ("network", network),
    ("handle", handle),
    ("hosts", hosts),
    ("attach", attach),
    ("board", board),
    ("rendezvous", rendezvous),
    ("pmi", pmi),
    ("env", env),
    ("launch", launch),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<fn(&[u8])> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|&(_, f)| f)
}

fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// Result files (`tca model fit`, `calibrate --from`: tca CSV, JSON, IMB text) and IMB
/// sections: what the fits compute from every accepted row.
pub fn results(data: &[u8]) {
    let text = text(data);
    if let Ok(rows) = record::parse_any(&text) {
        for r in &rows {
            let _ = (r.time_us(), r.throughput_mb_s());
        }
    }
    let _ = imb::parse(&text);
}

/// Sizes and ranges (`--sizes`, `--range`, `--fit`): lists come out strictly increasing
/// and within what can be measured (`size::MAX_MEASURED`), ranges ordered.
pub fn sizes(data: &[u8]) {
    let text = text(data);
    let _ = size::parse_bytes(&text);
    if let Ok(v) = size::parse_sizes(&text) {
        assert!(
            v.windows(2).all(|w| w[0] < w[1])
                && v.iter()
                    .all(|&x| u64::try_from(x).is_ok_and(|x| x <= size::MAX_MEASURED)),
            "{text:?} gave {v:?}"
        );
    }
    if let Ok((lo, hi)) = size::parse_range(&text) {
        assert!(lo <= hi, "{text:?} gave {lo}..{hi}");
    }
}

/// Matrix Market files, plain or gzip: an accepted matrix is a consistent CSR that a
/// product runs on.
pub fn matrix(data: &[u8]) {
    let Ok(text) = tca_cg::mm::decode(data.to_vec(), "fuzz") else {
        return;
    };
    if let Ok(m) = tca_cg::mm::parse_matrix(&text, "fuzz") {
        let a = &m.csr;
        assert_eq!(a.row_ptr.len(), a.n_rows + 1);
        assert!(a.row_ptr.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(a.row_ptr.last().copied(), Some(a.col.len()));
        assert!(a.col.iter().all(|&j| (j as usize) < a.n_cols));
        let mut y = vec![0.0; a.n_rows];
        a.spmv(&vec![1.0; a.n_cols], &mut y);
    }
}

/// `tca cg`'s matrix, right-hand side and preconditioner specs.
pub fn specs(data: &[u8]) {
    let text = text(data);
    let _ = tca_cg::MatrixSource::parse(&text);
    let _ = tca_cg::Rhs::parse(&text);
    let _ = tca_cg::Precond::parse(&text);
}

/// The calibration file: an accepted one selects an algorithm at every size.
pub fn calibration(data: &[u8]) {
    if let Ok(c) = tca::coll::model::Calibration::from_json(&text(data)) {
        for p in [1usize, 2, 3, 8] {
            for b in [0usize, 8, 1 << 20] {
                let _ = c.choose(tca::Collective::Allreduce, p, b);
            }
        }
    }
}

/// A simulated network's model file (`tca sim --network FILE`): an accepted model is used
/// as a simulation uses it without a panic (`tca::sim::fuzz_network`).
pub fn network(data: &[u8]) {
    let _ = tca::sim::fuzz_network(&text(data));
}

/// Segment handles as peers send them: an accepted handle round-trips.
pub fn handle(data: &[u8]) {
    if let Ok(h) = tca::Handle::from_bytes(data) {
        assert_eq!(tca::Handle::from_bytes(&h.to_bytes()).ok(), Some(h));
    }
}

/// Host lists (`tca run --hosts`): no accepted host is empty.
pub fn hosts(data: &[u8]) {
    if let Ok(hosts) = tca::bootstrap::launcher::parse_hosts(&text(data)) {
        assert!(hosts.iter().all(|(h, _)| !h.is_empty()), "{hosts:?}");
    }
}

/// A peer's segment as attach finds it (header page and file length against a handle): what
/// does not match is refused, what is accepted matches and is writable to its last byte.
pub fn attach(data: &[u8]) {
    let _accepted = tca::transport::fuzz_attach(data);
}

/// A node's start-up board as a rank opens it (a shared page any rank of the job may have
/// scribbled on), and the `tca-board` line of ranks started without the launcher.
pub fn board(data: &[u8]) {
    let _accepted = tca::transport::fuzz_board(data);
}

/// What a rank reads from the start-up rendezvous (a server on the network): frames of any
/// kind and length; accepted records are one per rank.
pub fn rendezvous(data: &[u8]) {
    let _ended = tca::bootstrap::kv::fuzz_client(data);
}

/// What a launcher's PMI-1 socket (`PMI_FD`, MPICH's Hydra) sends a rank at start-up:
/// answers of any shape; an accepted rendezvous has addresses
/// (`tca::bootstrap::pmi::fuzz_replies`).
pub fn pmi(data: &[u8]) {
    let _accepted = tca::bootstrap::pmi::fuzz_replies(data);
}

/// The hand-written parsers of environment values: Slurm host lists (`SLURM_STEP_NODELIST`,
/// whose first host runs the rendezvous) and `TCA_BIND`. A first host is one host: not
/// empty, no list or range syntax left in it. (Numbers and durations in `TCA_*` variables go
/// through `str::parse`.)
pub fn env(data: &[u8]) {
    let text = text(data);
    if let Some(h) = tca::bootstrap::first_host(&text) {
        assert!(
            !h.is_empty() && !h.contains([',', '[', ']']),
            "{text:?} gave {h:?}"
        );
    }
    let _ = tca::bootstrap::bind::Bind::parse(&text);
}

/// Start-up's whole detection of the job from its environment (`tca run`'s `TCA_*`, Slurm,
/// Open MPI's `mpirun`, PMI; lines `NAME=VALUE`): which source wins, its numbers, the
/// rendezvous address and board name it derives, and the checks every job passes (see
/// `tca::bootstrap::fuzz_detect` for what is asserted of an accepted job).
pub fn launch(data: &[u8]) {
    let _accepted = tca::bootstrap::fuzz_detect(data);
}
