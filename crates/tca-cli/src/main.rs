//! `tca`: the command-line face of the library. Parsing and printing only; the work is in
//! `tca` (launcher) and `tca-bench` (benchmarks).
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "tca",
    version,
    about = "Tightly coupled communication: launcher and benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start N ranks of a program on this node and supervise them.
    Run(RunArgs),
    /// Measure the machine and tca.
    #[command(subcommand)]
    Bench(Bench),
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "np", value_name = "N")]
    ranks: u32,
    /// Prefix every output line with `[rank] `.
    #[arg(long)]
    tag_output: bool,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROG ARGS"
    )]
    command: Vec<OsString>,
}

#[derive(Subcommand, Debug)]
enum Bench {
    /// Time per call of each collective (t_min/t_avg/t_max over ranks), with the 8-byte
    /// ping-pong and memcpy of the same run for ratios.
    Collectives {
        /// Number of ranks.
        #[arg(long, default_value_t = 2)]
        np: u32,
        /// Collectives, comma-separated (default: all).
        #[arg(long, value_delimiter = ',')]
        ops: Vec<String>,
        /// Bytes per rank, comma-separated.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "8,1024,65536,1048576,4194304"
        )]
        sizes: Vec<usize>,
        /// Force algorithms: COLLECTIVE=NAME, comma-separated (e.g. allreduce=ring).
        #[arg(long, value_delimiter = ',')]
        algo: Vec<String>,
        /// Calls per size (default: by size).
        #[arg(long)]
        iters: Option<u64>,
        /// 8-byte allreduce calls of the memory soak.
        #[arg(long, default_value_t = 1_000_000)]
        soak: u64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The physical floor: cache-line half round trip between two processes, memcpy bandwidth.
    Floor {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Round trips per measurement round.
        #[arg(long, default_value_t = 200_000)]
        iters: u64,
    },
    /// put_signal ping-pong between rank pairs (0-1, 2-3, ...), 0 B to --max-size.
    Pingpong {
        /// Number of ranks (pairs run at once).
        #[arg(long, default_value_t = 2)]
        np: u32,
        /// Largest message in bytes.
        #[arg(long, default_value_t = 4 << 20)]
        max_size: usize,
        /// Repetitions per size (default: by size).
        #[arg(long)]
        iters: Option<u64>,
        /// 8-byte round trips of the memory soak that checks RSS and mappings stay flat.
        #[arg(long, default_value_t = 1_000_000)]
        soak: u64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn run(cli: Cli) -> Result<i32> {
    match cli.cmd {
        Cmd::Run(a) => {
            let mut it = a.command.into_iter();
            let program = it.next().context("no program given after --")?;
            let launch = tca::bootstrap::launcher::Launch {
                ranks: a.ranks,
                tag_output: a.tag_output,
                program,
                args: it.collect(),
                env: Vec::new(),
            };
            Ok(launch.run()?.status())
        }
        Cmd::Bench(Bench::Floor { json, iters }) => {
            if iters == 0 {
                bail!("--iters must be at least 1");
            }
            tca_bench::run_and_print(2, json, |w| tca_bench::floor::run(w, iters, 7))
        }
        Cmd::Bench(Bench::Collectives {
            np,
            ops,
            sizes,
            algo,
            iters,
            soak,
            json,
        }) => {
            if np == 0 {
                bail!("--np must be at least 1");
            }
            let which = if ops.is_empty() {
                tca::Collective::ALL.to_vec()
            } else {
                ops.iter()
                    .map(|o| collective(o))
                    .collect::<Result<Vec<_>>>()?
            };
            let mut algos = Vec::new();
            for a in &algo {
                let (c, n) = a
                    .split_once('=')
                    .with_context(|| format!("--algo {a}: expected COLLECTIVE=NAME"))?;
                let c = collective(c)?;
                tca::coll::registry::find(c, n)?;
                algos.push((c, n.to_string()));
            }
            let opts = tca_bench::collectives::Options {
                which,
                sizes,
                iters,
                algos,
                soak,
            };
            tca_bench::run_and_print(np, json, |w| tca_bench::collectives::run(w, &opts))
        }
        Cmd::Bench(Bench::Pingpong {
            np,
            max_size,
            iters,
            soak,
            json,
        }) => {
            if np < 2 {
                bail!("ping-pong needs at least 2 ranks (--np {np})");
            }
            if iters == Some(0) {
                bail!("--iters must be at least 1");
            }
            let opts = tca_bench::pingpong::Options {
                max_size,
                iters,
                soak,
            };
            tca_bench::run_and_print(np, json, |w| tca_bench::pingpong::run(w, &opts))
        }
    }
}

/// A collective by name (as in `TCA_COLL_<NAME>`), or an error listing the names.
fn collective(name: &str) -> Result<tca::Collective> {
    let alias = match name {
        "bcast" => "broadcast",
        n => n,
    };
    tca::Collective::ALL
        .into_iter()
        .find(|c| c.name() == alias)
        .with_context(|| {
            let names: Vec<&str> = tca::Collective::ALL.iter().map(|c| c.name()).collect();
            format!("unknown collective `{name}`; valid: {}", names.join(", "))
        })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("tca: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
