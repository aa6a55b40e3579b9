//! The `tca` command as a user types it.

use std::process::{Command, Output, Stdio};

mod common;

use common::{TCA, tca, text};

#[test]
fn run_forwards_output_and_status() {
    let o = tca(&[
        "run",
        "-n",
        "3",
        "--",
        "sh",
        "-c",
        "echo rank $TCA_RANK of $TCA_SIZE",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    for r in 0..3 {
        assert!(out.contains(&format!("rank {r} of 3")), "{out}");
    }
}

#[test]
fn run_tags_output_lines() {
    let o = tca(&[
        "run",
        "-n",
        "2",
        "--tag-output",
        "--",
        "sh",
        "-c",
        "echo hello; echo oops >&2",
    ]);
    assert!(o.status.success());
    let out = text(&o.stdout);
    assert!(
        out.contains("[0] hello") && out.contains("[1] hello"),
        "{out}"
    );
    let err = text(&o.stderr);
    assert!(
        err.contains("[0] oops") && err.contains("[1] oops"),
        "{err}"
    );
}

#[test]
fn run_returns_first_failing_status_and_names_the_rank() {
    let o = tca(&[
        "run",
        "-n",
        "3",
        "--",
        "sh",
        "-c",
        "if [ $TCA_RANK = 1 ]; then exit 7; fi; sleep 30",
    ]);
    assert_eq!(o.status.code(), Some(7));
    let err = text(&o.stderr);
    assert!(
        err.contains("rank 1") && err.contains("exited with status 7"),
        "{err}"
    );
    assert!(err.contains("stopping the other 2 rank(s)"), "{err}");
}

#[test]
fn run_reports_a_rank_killed_by_a_signal() {
    let o = tca(&[
        "run",
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        "if [ $TCA_RANK = 0 ]; then kill -9 $$; fi; sleep 30",
    ]);
    assert_eq!(o.status.code(), Some(137));
    let err = text(&o.stderr);
    assert!(
        err.contains("rank 0") && err.contains("signal 9 (SIGKILL)"),
        "{err}"
    );
}

#[test]
fn run_rejects_bad_input_clearly() {
    let o = tca(&["run", "-n", "0", "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("at least 1"),
        "{}",
        text(&o.stderr)
    );

    let o = tca(&["run", "-n", "2", "--", "/no/such/program"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("no such program"),
        "{}",
        text(&o.stderr)
    );

    let o = tca(&["run", "-n", "99999", "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("limit"), "{}", text(&o.stderr));

    let o = tca(&["run", "-n", "two", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "clap usage error");
}

/// `tca run` with `TCA_BIND` set to `bind` (None: unset).
fn run_with_bind(bind: Option<&str>, n: usize, script: &str) -> Output {
    let mut c = Command::new(TCA);
    c.args(["run", "-n", &n.to_string(), "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .env_remove("TCA_BIND");
    if let Some(b) = bind {
        c.env("TCA_BIND", b);
    }
    c.output().expect("tca runs")
}

#[test]
fn run_binds_one_rank_per_cpu_when_they_fit() {
    let cpus = tca::bootstrap::bind::allowed_cpus().unwrap();
    let n = cpus.len().min(4);
    let script =
        "echo $TCA_RANK $TCA_JOB_CPUS $(grep Cpus_allowed_list /proc/self/status | cut -f2)";
    for bind in [None, Some("auto"), Some("core")] {
        let o = run_with_bind(bind, n, script);
        assert!(o.status.success(), "{bind:?}: {}", text(&o.stderr));
        let out = text(&o.stdout);
        for (r, cpu) in cpus.iter().enumerate().take(n) {
            let want = format!("{r} {} {cpu}\n", cpus.len());
            assert!(out.contains(&want), "{bind:?}: want {want:?} in {out:?}");
        }
    }
    // Unbound: every rank keeps the launcher's whole mask, and still learns the job's CPUs.
    let o = run_with_bind(Some("none"), n, script);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert_eq!(out.lines().count(), n, "{out}");
    if cpus.len() > 1 {
        for line in out.lines() {
            let mask = line.split(' ').nth(2).unwrap();
            assert!(mask.contains('-') || mask.contains(','), "{line}");
        }
    }
    // More ranks than CPUs: auto runs them unbound, core refuses with a reason.
    let o = run_with_bind(None, cpus.len() + 1, "true");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = run_with_bind(Some("core"), cpus.len() + 1, "true");
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("TCA_BIND=core") && err.contains("CPUs"),
        "{err}"
    );
    let o = run_with_bind(Some("sockets"), 2, "true");
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("sockets") && err.contains("auto, core, none"),
        "{err}"
    );
}
