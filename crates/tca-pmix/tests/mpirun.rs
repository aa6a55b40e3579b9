//! The binding against a real PMIx server: Open MPI's `mpirun` starts the example
//! `pmix_exchange` on 3 processes; each puts a key, fences and gets every process's key.

#![cfg(feature = "link")]

use std::path::PathBuf;
use std::process::Command;

fn example() -> PathBuf {
    // target/<profile>/deps/mpirun-<hash> -> target/<profile>/examples/pmix_exchange
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("examples/pmix_exchange")
}

#[test]
fn every_process_gets_every_key_after_the_fence() {
    let out = Command::new("mpirun.openmpi")
        .args(["--oversubscribe", "-n", "3"])
        .arg(example())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("mpirun.openmpi (Debian: openmpi-bin)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 3, "{text}");
    let nspace = lines[0].split_whitespace().nth(3).unwrap();
    for (r, line) in lines.iter().enumerate() {
        assert_eq!(
            *line,
            format!("rank {r} nspace {nspace} saw from-0-of-3,from-1-of-3,from-2-of-3")
        );
    }
}

#[test]
fn a_process_not_started_by_a_pmix_launcher_gets_an_error() {
    let out = Command::new(example()).env_clear().output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PMIx_Init failed"), "{err}");
}
