//! `tca bench [BENCHMARK...]`: parsing and checking the options; the suite lives in tca-bench.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use tca_bench::suite::{self, BENCHMARKS, Benchmark, Iters};

/// Benchmark options.
#[derive(clap::Args, Debug)]
#[command(after_help = BENCH_HELP)]
pub(crate) struct Args {
    /// Benchmarks, names in any case (default: IMB-MPI1's suite): PingPong PingPing
    /// Sendrecv Exchange Reduce_scatter Allreduce Reduce Allgather Gather Scatter Alltoall Bcast Barrier;
    /// OSU's osu_latency osu_bw osu_bibw osu_mbw_mr; Halo (QUDA's halo exchange, see
    /// --lattice); IMB-NBC's Ibcast Iallgather Igather Iscatter Ialltoall Ireduce
    /// Ireduce_scatter Iallreduce Ibarrier (overlap with computation); or `floor` alone (the machine's cache-line round trip, memcpy and
    /// cross-core bandwidth).
    #[arg(value_name = "BENCHMARK")]
    benchmarks: Vec<String>,
    /// Ranks (launched by tca bench itself).
    #[arg(long, default_value_t = 2)]
    np: u32,
    /// Run on a simulated network instead of this machine, in virtual time: a model name
    /// (peach2-2x8, peach2-2x8-gpu, tofu-384, tofu-64x6, tofu-8x6x8, fat-tree) or a TOML
    /// file (see crates/tca/networks/). The ranks are threads of this process, one per node
    /// of the model; every figure is the model's, the same on every run.
    #[arg(long, value_name = "NAME|FILE")]
    network: Option<String>,
    /// With --network: time messages without moving their payload (messages above 64 KiB
    /// move only their first and last 256 bytes; a collective's are not copied out of its
    /// chunks), for hundreds of ranks and large sizes.
    #[arg(long, requires = "network")]
    timing_only: bool,
    /// With --network: how computation costs virtual time: `model` (reductions at the
    /// model's rate; deterministic) or `measured:SCALE` (host time between calls x SCALE).
    #[arg(
        long,
        requires = "network",
        value_name = "model|measured:SCALE",
        default_value = "model"
    )]
    compute: String,
    /// With --network: the collectives' chunk (pipeline segment) size, e.g. 16K (seed 002's
    /// MPI on K) [default: tca's, 64 KiB down to 4 KiB by rank count].
    #[arg(long, requires = "network", value_name = "BYTES")]
    chunk: Option<String>,
    /// Message sizes: MIN:MAX (0 and the powers of two, IMB's default 0:4M) or a comma list;
    /// K, M, G (KiB, KB, ...) are powers of 1024.
    #[arg(long, default_value = "0:4M")]
    sizes: String,
    /// Timed calls per size: a number, or `auto` (many for small sizes, fewer for large,
    /// about 50 ms per size).
    #[arg(long, default_value = "auto")]
    iters: String,
    /// Untimed calls before each size (default: a tenth of the timed calls; with `--iters auto`
    /// at least 20 ms of calls).
    #[arg(long)]
    warmup: Option<u64>,
    /// Time each size this many times and report the fastest run (by its mean): steadier
    /// figures on a shared machine, where other load slows whole runs. IMB runs once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: u32,
    /// Run the whole suite this many times, alternating with MPI's under --compare, and
    /// report each cell's median round; the cache-line floor is measured before each half
    /// (also with --compare alone) and noted, flagged where it moved.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Force tca algorithms: NAME (every benchmark that has it) or BENCHMARK=NAME,
    /// comma-separated (e.g. Allreduce=ring).
    #[arg(long, value_delimiter = ',')]
    algo: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = tca_bench::Format::Imb)]
    format: tca_bench::Format,
    /// Write the output to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Draw latency and throughput against size to FILE.png or FILE.svg.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Hockney fit range MIN:MAX in bytes, inclusive, either side may be left out (default:
    /// above tca's last algorithm switch).
    #[arg(long, value_name = "MIN:MAX", value_parser = crate::model::parse_range)]
    fit: Option<(u64, u64)>,
    /// Run the same benchmarks through a real MPI too, side by side (needs `--features mpi`).
    #[arg(long, value_name = "mpi", value_parser = ["mpi"])]
    compare: Option<String>,
    /// The MPI's mpirun for --compare (default: $TCA_MPIRUN, else mpirun on the PATH).
    #[arg(long, value_name = "PATH")]
    mpirun: Option<PathBuf>,
    /// 8-byte PingPong round trips of a memory soak after the suite (tca; 0: none).
    #[arg(long, default_value_t = 0)]
    soak: u64,
    /// Print the cost models' predicted time beside each measured tca collective time, with
    /// the error in percent (`# model` lines; a `model` field in JSON). The models are the
    /// library's: `tca model calibrate`'s file, or the built-in defaults. The models describe
    /// the channel algorithms, so tca's buffers are ordinary memory then (`--buffers heap`).
    #[arg(long)]
    model: bool,
    /// PingPong and PingPing over tca's two-sided send/recv (`tca::p2p`) instead of one-sided
    /// put_signal (Sendrecv, Exchange, the OSU tests and Halo are always two-sided).
    #[arg(long)]
    two_sided: bool,
    /// Halo: global 4-D lattices XxYxZxT, comma-separated, each split over the ranks (one row
    /// each; faces of 48-byte sites, QUDA's single-precision Wilson half spinors).
    #[arg(
        long,
        value_name = "XxYxZxT",
        default_value = "8x8x8x8,16x16x16x16,24x24x24x24,32x32x32x32"
    )]
    lattice: String,
    /// IMB-NBC benchmarks (Ibcast, Iallreduce, ...): tests of the request between slices of
    /// the computation (OSU's -t; 0: IMB-NBC's computation, which calls no library).
    #[arg(long, value_name = "N", default_value_t = 0)]
    test_calls: u32,
    /// Where tca's collectives progress: `caller` (in its own calls), `thread` (a progress
    /// thread per rank owns the world and runs them: blocking collectives as commands,
    /// non-blocking ones and PingPong's / osu_latency's sends and receives posted to it) or
    /// `proxy` (one node proxy process holds every rank's world, as `tca run --offload`:
    /// every call posted to it, blocking ones then waited for). Default: `$TCA_PROGRESS`,
    /// else caller.
    #[arg(long, value_name = "caller|thread|proxy")]
    progress: Option<String>,
    /// tca's message buffers: `tca` (`Comm::buffer`: large collectives on one node read
    /// them in place, one copy per byte, as a tca program allocates memory it communicates
    /// from) or `heap` (ordinary memory: two copies through the channels, as before).
    #[arg(long, value_name = "tca|heap", default_value = "tca", value_parser = ["tca", "heap"])]
    buffers: String,
}

const BENCH_HELP: &str = concat!(
    "Examples:
  tca bench                                   every benchmark, 2 ranks, 0 B .. 4 MiB
  tca bench PingPong Allreduce --compare mpi  beside Open MPI (build with --features mpi)
  tca bench PingPong Sendrecv --two-sided --compare mpi   two-sided messages beside MPI's
  tca bench osu_latency osu_bw osu_bibw --compare mpi      OSU's tests, beside MPI's
  tca bench osu_mbw_mr --np 4                              OSU message rate, 2 pairs
  tca bench Halo --lattice 16x16x16x32,32x32x32x32 --compare mpi   QUDA's halo exchange
  tca bench Iallreduce Ibcast --sizes 64K,1M,4M --compare mpi  IMB-NBC: overlap with computation
  tca bench Iallreduce --sizes 1M --test-calls 16          the same, testing 16 times while computing
  tca bench Allreduce --np 4 --algo ring --sizes 1K:1M --format csv --out ar.csv
  tca bench PingPong --plot pingpong.png --fit 64K:4M
  tca bench Allreduce Allgather Bcast --sizes 8:4M --model   predictions beside measurements
  tca bench floor
  tca bench Allreduce --np 16 --network peach2-2x8 --sizes 8   on a simulated PEACH2 torus
  tca bench Bcast --np 384 --network tofu-8x6x8 --algo pipeline_3d --timing-only

",
    tca_model::size_grammar!()
);

pub(crate) fn run(a: Args) -> Result<i32> {
    if a.np == 0 {
        bail!("--np must be at least 1");
    }
    let network = a
        .network
        .as_deref()
        .map(|n| crate::sim::options(n, a.np, a.timing_only, &a.compute, a.chunk.as_deref()))
        .transpose()?;
    if network.is_some() && a.compare.is_some() {
        bail!("--network and --compare mpi: MPI runs on this machine only; run them apart");
    }
    if network.is_some() && a.rounds > 1 {
        bail!("--rounds with --network: virtual times are the same in every round");
    }
    let iters = match a.iters.as_str() {
        "auto" => Iters::Auto,
        n => match n.parse::<u64>() {
            Ok(0) | Err(_) => bail!("--iters {n}: expected a positive number or `auto`"),
            Ok(n) => Iters::Fixed(n),
        },
    };
    if a.benchmarks.iter().any(|b| b.eq_ignore_ascii_case("floor")) {
        if network.is_some() {
            bail!("`floor` measures this machine; it has no simulated form");
        }
        if a.benchmarks.len() > 1 {
            bail!("`floor` runs on its own: `tca bench floor`");
        }
        if a.rounds > 1 {
            bail!("`floor` alternates its own 7 rounds; --rounds is for the suite");
        }
        let n = match iters {
            Iters::Fixed(n) => n,
            Iters::Auto => 200_000,
        };
        let json = a.format == tca_bench::Format::Json;
        return tca_bench::run_and_print(2, json, |w| tca_bench::floor::run(w, n, 7));
    }
    let benchmarks: Vec<usize> = if a.benchmarks.is_empty() {
        (0..BENCHMARKS.len())
            .filter(|&i| BENCHMARKS[i].family == suite::Family::Imb)
            .collect()
    } else {
        let mut v = Vec::new();
        for name in &a.benchmarks {
            let b = Benchmark::find(name)?;
            if b.collective.is_none() && a.np < 2 {
                bail!("{} needs at least 2 ranks (--np {})", b.name, a.np);
            }
            if b.kind == suite::Kind::OsuMbwMr && a.np % 2 != 0 {
                bail!("osu_mbw_mr pairs the ranks: --np {} must be even", a.np);
            }
            let i = suite::index_of(b);
            if !v.contains(&i) {
                v.push(i);
            }
        }
        v
    };
    let sizes = tca_model::size::parse_sizes(&a.sizes).context("--sizes")?;
    let fit = a.fit;
    if let Some(p) = &a.plot {
        tca_bench::plot::check_path(p)?;
    }
    let algos = suite::parse_algos(&a.algo, &benchmarks)?;
    let lattices = suite::halo::parse_lattices(&a.lattice).context("--lattice")?;
    if benchmarks.iter().any(|&i| BENCHMARKS[i].lattice()) {
        let mut seen: Vec<(usize, String)> = Vec::new();
        for &l in &lattices {
            let h = suite::halo::Halo::new(l, a.np).context("--lattice")?;
            let b = h.bytes_per_exchange();
            if let Some((_, other)) = seen.iter().find(|(x, _)| *x == b) {
                bail!(
                    "--lattice: {} and {other} both move {b} bytes per exchange on {} ranks \
                     (rows are keyed by bytes); keep one",
                    h.describe(),
                    a.np
                );
            }
            seen.push((b, h.describe()));
        }
    }
    let progress = match &a.progress {
        Some(p) => tca::offload::Progress::parse(p)?,
        None => tca::offload::Progress::from_env()?,
    };
    if progress != tca::offload::Progress::Caller && network.is_some() {
        anyhow::bail!(
            "--progress thread and proxy run on this machine's ranks, not on a simulated network"
        );
    }
    let req = tca_bench::Request {
        np: a.np,
        suite: suite::Options {
            benchmarks,
            sizes,
            iters,
            warmup: a.warmup,
            repeat: a.repeat,
            algos,
            soak: a.soak,
            two_sided: a.two_sided,
            lattices,
            test_calls: a.test_calls,
            progress,
            // The models describe the channel algorithms: predictions are checked over
            // ordinary memory, where those run at every size.
            heap_buffers: a.buffers == "heap" || a.model,
        },
        format: a.format,
        out: a.out,
        plot: a.plot,
        fit,
        compare_mpi: a.compare.is_some(),
        rounds: a.rounds,
        mpirun: a.mpirun,
        model: a.model,
        network,
    };
    tca_bench::bench(&req)
}
