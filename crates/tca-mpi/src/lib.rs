//! Running both halves of tca's side-by-side comparisons (`tca bench --compare mpi`,
//! `tca cg --compare mpi`) and bringing their results back to the command a user typed.
//!
//! The parent process (the `tca` command a user typed) runs the tca half under tca's own
//! launcher with [`launch_tca`] (rank 0 writes its result with [`write_result`], into the
//! file [`TCA_RESULT_ENV`] names), then starts the same program again under the MPI's own `mpirun` with
//! [`RESULT_ENV`] naming a result file. Each MPI rank sees [`is_child`], initialises MPI (the
//! [`mpi`] crate, compiled in with this crate's `mpi` feature), runs the same benchmark and
//! rank 0 writes its result as JSON with [`write_result`]; the parent reads it back from
//! [`launch`] and prints both halves side by side. The two halves never run at the same time.
//!
//! Every command that starts its own ranks (`tca bench`, `tca cg`, `tca model calibrate`)
//! asks [`role`] which of the three processes it is, and the halves talk to their library
//! through one trait, [`Backend`] (with the adapters `tca::Comm` and `MpiComm`).
//!
//! `mpirun` is taken from `--mpirun`, else `$TCA_MPIRUN`, else `mpirun` on the PATH; Open MPI
//! and MPICH (Hydra) are told apart by `mpirun --version` and get the flags each needs to run
//! here (oversubscription, running as root).
#![deny(unsafe_code)] // but in `rma`, the MPI one-sided C calls rsmpi does not wrap

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

#[cfg(feature = "mpi")]
pub use mpi;

mod backend;
#[cfg(feature = "mpi")]
pub mod rma;
pub mod rounds;

pub use backend::{Backend, CommError, CommResult, GatheredVector, Staged, TcaGathered};
#[cfg(feature = "mpi")]
pub use backend::{MpiComm, MpiGathered};

/// Which process of a side-by-side command this is: the command a user typed, or a rank it
/// started. The one place that decides it, from the environment the launchers set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The command a user typed: it starts the ranks ([`launch_tca`], [`launch`]) and prints.
    Parent,
    /// A rank of the tca half: started by tca's launcher (by [`launch_tca`], or by `tca run`
    /// or Slurm, where nobody waits for a result: [`write_result`] says so).
    TcaRank,
    /// A rank of the MPI half, started by [`launch`] under `mpirun`.
    MpiRank,
}

/// This process's [`Role`].
pub fn role() -> Role {
    if is_child() {
        Role::MpiRank
    } else if tca::bootstrap::launcher::under_launcher() {
        Role::TcaRank
    } else {
        Role::Parent
    }
}

/// In a [`Role::TcaRank`]: joins the job, checking that it has the `np` ranks the command
/// asked for (a rank started by `tca run -n 4 -- tca bench --np 2` would otherwise measure
/// something else than asked).
pub fn join(np: u32) -> Result<tca::World> {
    let world = tca::init().context("joining the tca job")?;
    if world.size() != np {
        bail!(
            "launched with {} ranks but --np {np}: give the same number",
            world.size()
        );
    }
    Ok(world)
}

/// Set for the MPI ranks: the file rank 0 writes its JSON result to.
pub const RESULT_ENV: &str = tca::env::MPI_RESULT;

/// Set for the tca ranks started by [`launch_tca`]: the file rank 0 writes its result to.
pub const TCA_RESULT_ENV: &str = tca::env::JOB_RESULT;

/// Whether MPI support is compiled in.
pub const ENABLED: bool = cfg!(feature = "mpi");

/// Whether this process is an MPI rank started by [`launch`].
pub fn is_child() -> bool {
    std::env::var_os(RESULT_ENV).is_some()
}

/// The error `--compare mpi` gives when tca was built without MPI.
pub fn not_enabled() -> anyhow::Error {
    anyhow::anyhow!(
        "--compare mpi needs tca built with MPI support: install an MPI and libclang \
         (Debian: apt-get install openmpi-bin libopenmpi-dev libclang-dev) and run \
         `cargo run --release --features mpi -- ...`"
    )
}

/// Which MPI an `mpirun` belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flavour {
    /// Open MPI, with its version ("4.1.4").
    OpenMpi(String),
    /// MPICH's Hydra launcher, with its version.
    Mpich(String),
    /// Something else; started with plain `-np N`.
    Other(String),
}

impl Flavour {
    /// A short name for tables: "Open MPI 4.1.4", "MPICH 4.0.2".
    pub fn label(&self) -> String {
        match self {
            Flavour::OpenMpi(v) => format!("Open MPI {v}"),
            Flavour::Mpich(v) => format!("MPICH {v}"),
            Flavour::Other(v) => v.clone(),
        }
    }

    /// Reads `mpirun --version` output.
    pub fn from_version_text(text: &str) -> Flavour {
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let last_word = |l: &str| l.split_whitespace().last().unwrap_or("").to_string();
        if text.contains("Open MPI") || text.contains("OpenRTE") {
            Flavour::OpenMpi(last_word(first))
        } else if text.contains("HYDRA") {
            let v = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("Version:"))
                .map(|v| v.trim().to_string())
                .unwrap_or_default();
            Flavour::Mpich(v)
        } else {
            Flavour::Other(first.trim().to_string())
        }
    }
}

/// How to start the MPI half.
#[derive(Debug, Clone)]
pub struct MpiRun {
    /// Ranks.
    pub np: u32,
    /// The `mpirun` to use (None: `$TCA_MPIRUN`, else `mpirun` on the PATH).
    pub mpirun: Option<PathBuf>,
}

impl MpiRun {
    fn program(&self) -> PathBuf {
        self.mpirun
            .clone()
            .or_else(|| std::env::var_os(tca::env::MPIRUN).map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("mpirun"))
    }

    /// The flavour of the `mpirun` that would be used, or an error saying it is missing.
    pub fn flavour(&self) -> Result<Flavour> {
        let prog = self.program();
        let out = Command::new(&prog)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .with_context(|| {
                format!(
                    "cannot run `{} --version`: is an MPI installed (Debian: openmpi-bin)?",
                    prog.display()
                )
            })?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        Ok(Flavour::from_version_text(&text))
    }
}

fn result_path(kind: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tca-{kind}-result-{}.json", std::process::id()))
}

/// Reads and removes a result file once its job ended.
fn take_result<T: serde::de::DeserializeOwned>(path: &Path, who: &str) -> Result<T> {
    let text = std::fs::read_to_string(path);
    let _ = std::fs::remove_file(path);
    let text = text.with_context(|| format!("{who} wrote no result to {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{who}'s result is not valid JSON"))
}

/// Starts `np` tca ranks of this program (same arguments) under tca's own launcher, waits for
/// them and returns the JSON rank 0 wrote with [`write_result`], decoded. A failing rank's
/// error has already been printed by the launcher; this returns an error with its status.
pub fn launch_tca<T: serde::de::DeserializeOwned>(np: u32) -> Result<T> {
    launch_tca_with(np, false)
}

/// [`launch_tca`], with `offload`: a node proxy first (`tca run --offload`), this program's
/// `node-proxy` subcommand (which calls `tca::offload::serve_node`).
pub fn launch_tca_with<T: serde::de::DeserializeOwned>(np: u32, offload: bool) -> Result<T> {
    let path = result_path("job");
    let _ = std::fs::remove_file(&path);
    let mut launch = tca::bootstrap::launcher::Launch::this_program(np)?;
    if offload {
        let exe = std::env::current_exe().context("cannot find this program for the node proxy")?;
        launch.offload = Some(vec![exe.into(), "node-proxy".into()]);
    }
    launch
        .env
        .push((TCA_RESULT_ENV.into(), path.clone().into_os_string()));
    let outcome = launch.run()?;
    if outcome.status() != 0 {
        let _ = std::fs::remove_file(&path);
        bail!("the tca ranks failed (exit status {})", outcome.status());
    }
    take_result(&path, "rank 0")
}

/// Starts `np` copies of this program with its own arguments under `mpirun`, waits for them
/// and returns the JSON rank 0 wrote with [`write_result`], decoded.
pub fn launch<T: serde::de::DeserializeOwned>(run: &MpiRun) -> Result<(Flavour, T)> {
    if !ENABLED {
        return Err(not_enabled());
    }
    if run.np == 0 {
        bail!("--np must be at least 1");
    }
    let flavour = run.flavour()?;
    let exe = std::env::current_exe().context("cannot find this program to start under mpirun")?;
    let result = result_path("mpi");
    let _ = std::fs::remove_file(&result);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let mut cmd = Command::new(run.program());
    match &flavour {
        Flavour::OpenMpi(_) => {
            if run.np > cores {
                cmd.arg("--oversubscribe");
            }
            if rustix::process::geteuid().is_root() {
                cmd.arg("--allow-run-as-root");
            }
            // On one node keep Open MPI to shared memory and itself, unless the user chose
            // its transports (OMPI_MCA_btl=tcp,self to compare across nodes).
            if std::env::var_os("OMPI_MCA_btl").is_none() {
                cmd.args(["--mca", "btl", "self,vader"]);
            }
        }
        Flavour::Mpich(_) | Flavour::Other(_) => {}
    }
    cmd.arg("-np").arg(run.np.to_string()).arg(&exe);
    cmd.args(std::env::args_os().skip(1));
    cmd.env(RESULT_ENV, &result).stdin(Stdio::null());
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", run.program().display()))?;
    if !status.success() {
        let _ = std::fs::remove_file(&result);
        bail!("the MPI half failed under {} ({status})", flavour.label());
    }
    let v = take_result(&result, &format!("the MPI half under {}", flavour.label()))?;
    Ok((flavour, v))
}

/// In a rank started by [`launch_tca`] or [`launch`]: writes the result for the parent (call on
/// rank 0 only). Outside such a job (a rank started by `tca run`, Slurm or a plain mpirun)
/// there is nobody to read it: returns `Ok(false)` and the caller prints instead.
pub fn write_result<T: serde::Serialize>(value: &T) -> Result<bool> {
    let Some(path) = std::env::var_os(RESULT_ENV).or_else(|| std::env::var_os(TCA_RESULT_ENV))
    else {
        return Ok(false);
    };
    let path = Path::new(&path);
    let tmp = path.with_extension("part");
    std::fs::write(&tmp, serde_json::to_vec(value)?)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavours() {
        let o =
            "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n";
        assert_eq!(
            Flavour::from_version_text(o),
            Flavour::OpenMpi("4.1.4".into())
        );
        let m = "HYDRA build details:\n    Version:                                 4.0.2\n    Release Date:                            Thu Apr  7 12:34:45 CDT 2022\n";
        assert_eq!(
            Flavour::from_version_text(m),
            Flavour::Mpich("4.0.2".into())
        );
        assert_eq!(Flavour::from_version_text(m).label(), "MPICH 4.0.2");
        assert!(matches!(
            Flavour::from_version_text("x 1"),
            Flavour::Other(_)
        ));
    }

    #[test]
    fn missing_mpirun_is_a_clear_error() {
        let r = MpiRun {
            np: 2,
            mpirun: Some("/nonexistent/mpirun".into()),
        };
        let e = r.flavour().unwrap_err().to_string();
        assert!(e.contains("/nonexistent/mpirun"), "{e}");
    }
}
