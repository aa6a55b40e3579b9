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

fn print<T: serde_json_free::Printable>(v: &T, json: bool) -> Result<()> {
    if json {
        println!("{}", v.json()?);
    } else {
        print!("{}", v.text());
    }
    Ok(())
}

/// Output in table or JSON form.
mod serde_json_free {
    pub trait Printable {
        fn text(&self) -> String;
        fn json(&self) -> anyhow::Result<String>;
    }
    impl Printable for tca_bench::floor::Floor {
        fn text(&self) -> String {
            self.table()
        }
        fn json(&self) -> anyhow::Result<String> {
            Ok(tca_bench::to_json(self)?)
        }
    }
    impl Printable for tca_bench::pingpong::PingPong {
        fn text(&self) -> String {
            self.table()
        }
        fn json(&self) -> anyhow::Result<String> {
            Ok(tca_bench::to_json(self)?)
        }
    }
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
            tca_bench::launch_or_run(2, |world| {
                if let Some(f) = tca_bench::floor::run(world, iters, 7)? {
                    print(&f, json)?;
                }
                Ok(())
            })
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
            tca_bench::launch_or_run(np, |world| {
                if let Some(p) = tca_bench::pingpong::run(world, &opts)? {
                    print(&p, json)?;
                }
                Ok(())
            })
        }
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
