//! A job's launcher: tca's own ([`tca::bootstrap::launcher::Launch`]), in a process of its
//! own, started by the campaign and killed by it for `kill-launcher`.
//!
//! It asks the kernel for SIGTERM if the campaign dies (Ctrl-C, a kill): the launcher then
//! stops its ranks as it does for any SIGTERM, so an interrupted campaign leaves no job
//! running.

use std::ffi::OsString;
use std::path::Path;

use tca::bootstrap::launcher::Launch;

use crate::spec::JobSpec;

/// Launches the job's ranks and supervises them; returns the job's exit status.
pub(crate) fn main(spec: &JobSpec, spec_path: &Path) -> u8 {
    if let Err(e) =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
    {
        eprintln!("tca chaos launcher: cannot ask for SIGTERM when the campaign dies: {e}");
    }
    let Some((program, args)) = spec.command.split_first() else {
        eprintln!("tca chaos launcher: the job description names no program");
        return 2;
    };
    let mut args: Vec<OsString> = args.iter().map(OsString::from).collect();
    args.push("--job".into());
    args.push(spec_path.into());
    let launch = Launch {
        ranks: spec.plan.ranks,
        program: program.into(),
        args,
        ..Default::default()
    };
    match launch.run() {
        Ok(o) => u8::try_from(o.status()).unwrap_or(1),
        Err(e) => {
            eprintln!("tca chaos launcher: {e}");
            2
        }
    }
}
