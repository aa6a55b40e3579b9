//! `tca sim`: the simulated networks (the runs themselves: `tca bench --network`).

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

/// Simulated networks.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum Cmd {
    /// The network models that ship with tca (name, shape, nodes, summary).
    Networks,
    /// Runs the seeds' network figures again on the simulated networks and prints paper,
    /// simulated and error: seed 000's ping-pongs, peak bandwidths and Table 6, the node
    /// mapping effect, and with --table1 seed 002's Table 1 (IMB on 384 simulated nodes,
    /// Hockney fits: minutes of host time).
    Reproduce(ReproduceArgs),
}

/// `tca sim reproduce` options.
#[derive(clap::Args, Debug)]
pub(crate) struct ReproduceArgs {
    /// Also seed 002's Table 1 on 384 simulated nodes of Tofu.
    #[arg(long)]
    table1: bool,
    /// With --table1: draw the simulated throughput beside the paper's fitted curves
    /// (FILE.png).
    #[arg(long, value_name = "FILE", requires = "table1")]
    plot: Option<PathBuf>,
}

/// The simulation of `--network NAME|FILE` for `np` ranks (`tca bench`, `tca cg`).
pub(crate) fn options(
    network: &str,
    np: u32,
    timing_only: bool,
    compute: &str,
    chunk: Option<&str>,
) -> Result<tca::sim::Options> {
    let mut o = tca::sim::Options::new(tca::sim::Network::load(network)?);
    o.payload = !timing_only;
    if let Some(c) = chunk {
        let b = tca_model::size::parse_bytes(c).with_context(|| format!("--chunk {c}"))?;
        o.chunk = Some(usize::try_from(b).context("--chunk")?);
    }
    o.compute = tca::sim::Compute::parse(compute)
        .with_context(|| format!("--compute {compute}: expected `model` or `measured:SCALE`"))?;
    if np > o.network.nodes() {
        bail!(
            "--np {np}: the network {} ({}) has {} nodes, one rank each",
            o.network.name,
            o.network.shape(),
            o.network.nodes()
        );
    }
    Ok(o)
}

pub(crate) fn run(cmd: Cmd) -> Result<i32> {
    match cmd {
        Cmd::Networks => {
            println!("{:<16} {:<40} {:>6}  summary", "name", "shape", "nodes");
            for (name, _) in tca::sim::BUILT_IN {
                let n = tca::sim::Network::load(name)?;
                println!(
                    "{:<16} {:<40} {:>6}  {}",
                    n.name,
                    n.shape(),
                    n.nodes(),
                    n.summary
                );
            }
            println!("# or a TOML file of your own: copy one from crates/tca/networks/");
            Ok(0)
        }
        Cmd::Reproduce(a) => {
            if let Some(p) = &a.plot {
                tca_bench::reproduce::check_plot(p)?;
            }
            let opts = tca_bench::reproduce::Options {
                table1: a.table1,
                plot: a.plot.clone(),
            };
            let rep = tca_bench::reproduce::run(&opts, |what| eprintln!("tca sim: {what}"))?;
            print!("{}", rep.render());
            if let Some(p) = &a.plot {
                eprintln!("tca sim: plotted {}", p.display());
            }
            Ok(0)
        }
    }
}
