//! `tca`: the command-line face of the library. Parsing and printing only; the work is in
//! `tca` (launcher), `tca-bench` (benchmarks), `tca-model` (models), `tca-cg` (the solver)
//! and `tca-chaos` (the fault campaign).
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

mod bench;
mod cg;
mod chaos;
mod model;
mod sim;

#[derive(Parser, Debug)]
#[command(
    name = "tca",
    version,
    about = "Tightly coupled communication: launcher, benchmarks, models and a CG solver"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start N ranks of a program on this node and supervise them.
    Run(RunArgs),
    /// IMB-compatible benchmarks over tca (and a real MPI with --compare mpi), or the floor.
    Bench(bench::Args),
    /// Performance models: Hockney fits, the seed 002 estimates, calibrated cost models.
    #[command(subcommand)]
    Model(model::Cmd),
    /// The distributed Conjugate Gradient solver on a Matrix Market matrix.
    Cg(cg::Args),
    /// A fault campaign: jobs of random size and work, one injected fault each, and the
    /// figures (hangs, faults answered, wrong results, leftovers, time to error and to exit).
    Chaos(chaos::Args),
    /// Simulated networks: the models, and the seeds' figures reproduced on them (runs on a
    /// model: `tca bench --network NAME`).
    #[command(subcommand)]
    Sim(sim::Cmd),
    /// The node proxy process that `tca run --offload` starts (not for direct use).
    #[command(hide = true)]
    NodeProxy,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "np", value_name = "N")]
    ranks: u32,
    /// Prefix every output line with `[rank] `.
    #[arg(long)]
    tag_output: bool,
    /// Spread the ranks over these hosts: `h1,h2` (evenly, in blocks) or `h1:2,h2:2` (slots).
    /// Ranks meet at a rendezvous this launcher serves; `localhost` ranks start directly.
    #[arg(long, value_name = "HOSTS")]
    hosts: Option<String>,
    /// The remote-shell agent that starts ranks on other hosts [default: $TCA_RSH, else
    /// `ssh -o BatchMode=yes`]; any command taking a host, then the command (`ip netns exec`).
    #[arg(long, value_name = "CMD")]
    rsh: Option<String>,
    /// The address of this machine the other hosts reach it at [default: the one routing
    /// towards the first other host].
    #[arg(long, value_name = "ADDRESS")]
    kv_host: Option<String>,
    /// Start a node proxy first (seed 004's host proxy): one process that holds every rank's
    /// world and runs their posted collectives and messages, so a rank that only computes
    /// still completes them. The ranks connect with `tca::offload::Proxy::connect()`
    /// (`TCA_PROGRESS=proxy`). With --hosts, one proxy per host.
    #[arg(long)]
    offload: bool,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROG ARGS"
    )]
    command: Vec<OsString>,
}

fn run(cli: Cli) -> Result<i32> {
    match cli.cmd {
        Cmd::Model(m) => model::run(m),
        Cmd::Cg(a) => cg::run(a),
        Cmd::Chaos(a) => chaos::run(a),
        Cmd::Sim(c) => sim::run(c),
        Cmd::NodeProxy => {
            tca::offload::serve_node().context("node proxy")?;
            Ok(0)
        }
        Cmd::Run(a) => {
            let mut it = a.command.into_iter();
            let program = it.next().context("no program given after --")?;
            let hosts = match &a.hosts {
                Some(h) => tca::bootstrap::launcher::parse_hosts(h)?,
                None => Vec::new(),
            };
            let launch = tca::bootstrap::launcher::Launch {
                ranks: a.ranks,
                tag_output: a.tag_output,
                program,
                args: it.collect(),
                env: Vec::new(),
                hosts,
                rsh: a
                    .rsh
                    .map(|r| r.split_whitespace().map(str::to_string).collect())
                    .unwrap_or_default(),
                kv_host: a.kv_host,
                offload: if a.offload {
                    Some(vec![
                        std::env::current_exe()
                            .context("finding this program's path (for the node proxy)")?
                            .into(),
                        "node-proxy".into(),
                    ])
                } else {
                    None
                },
            };
            Ok(launch.run()?.status())
        }
        Cmd::Bench(a) => bench::run(a),
    }
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
