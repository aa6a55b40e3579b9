//! Multi-process jobs through tca's own launcher (and without it, as Slurm or mpirun would
//! start them): correctness at 2, 3, 4 and 8 ranks (8 on a 2-core machine is oversubscribed),
//! failures, signals and cleanup. No test asserts a time; the only deadlines are hang guards.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tca::bootstrap::launcher::{Launch, RankExit};

const PROG: &str = env!("CARGO_BIN_EXE_tca-rankprog");

/// Tests that look at /dev/shm run one at a time, so one test's start-up board is not
/// mistaken for another's leak.
static SHM: Mutex<()> = Mutex::new(());

fn shm_lock() -> std::sync::MutexGuard<'static, ()> {
    SHM.lock().unwrap_or_else(|p| p.into_inner())
}

/// tca's objects in /dev/shm (`tca::transport::shm_entries`).
fn tca_shm_entries() -> Vec<String> {
    tca::transport::shm_entries().into_iter().collect()
}

fn launch(n: u32, args: &[&str]) -> tca::Result<tca::bootstrap::launcher::Outcome> {
    Launch {
        ranks: n,
        tag_output: false,
        program: PROG.into(),
        args: args.iter().map(Into::into).collect(),
        env: Vec::new(),
        ..Default::default()
    }
    .run()
}

#[test]
fn ring_at_2_3_4_and_8_ranks() {
    let _g = shm_lock();
    let before = tca_shm_entries();
    for n in [2, 3, 4, 8] {
        let o = launch(n, &["ring", "20"]).unwrap();
        assert_eq!(o.status(), 0, "{n} ranks: {o:?}");
        assert!(o.ranks.iter().all(|&r| r == RankExit::Code(0)));
    }
    assert_eq!(
        tca_shm_entries(),
        before,
        "shared memory left behind after normal exits"
    );
}

#[test]
fn stress_100k_round_trips_between_processes() {
    let o = launch(2, &["stress", "100000"]).unwrap();
    assert_eq!(o.status(), 0, "{o:?}");
}

#[test]
fn stress_8_ranks_oversubscribed() {
    let o = launch(8, &["stress", "5000"]).unwrap();
    assert_eq!(o.status(), 0, "{o:?}");
}

#[test]
fn every_collective_algorithm_between_processes() {
    for n in 1..=9 {
        let o = launch(n, &["coll", "500"]).unwrap();
        assert_eq!(o.status(), 0, "{n} ranks: {o:?}");
    }
}

#[test]
fn two_sided_messages_between_processes_both_rendezvous_paths() {
    for n in [2, 3] {
        let o = launch(n, &["p2p", "8"]).unwrap();
        assert_eq!(o.status(), 0, "{n} ranks: {o:?}");
    }
}

#[test]
fn environment_forces_collective_algorithms() {
    let run = |value: &str| {
        Launch {
            ranks: 3,
            tag_output: false,
            program: PROG.into(),
            args: vec!["coll".into(), "50".into()],
            env: vec![("TCA_COLL_ALLREDUCE".into(), value.into())],
            ..Default::default()
        }
        .run()
        .unwrap()
    };
    assert_eq!(run("ring").status(), 0);
    assert_eq!(run("rabenseifner").status(), 0);
    // An unknown name stops the job with an error that lists the valid names (on stderr).
    assert_eq!(run("fastest").status(), 2);
}

#[test]
fn memory_and_mappings_stay_flat() {
    let o = launch(2, &["soak", "200000"]).unwrap();
    assert_eq!(o.status(), 0, "mapping count or RSS grew: {o:?}");
}

#[test]
fn rank_error_exit_stops_the_job_with_its_status() {
    let _g = shm_lock();
    let before = tca_shm_entries();
    let o = launch(4, &["exit", "3", "1"]).unwrap();
    let f = o.failure.expect("a failure is reported");
    assert_eq!((f.rank, f.how), (1, RankExit::Code(3)));
    assert_eq!(o.status(), 3);
    // The others were waiting forever: they ended because the launcher stopped them (or
    // because they saw the abort), never successfully.
    for (r, e) in o.ranks.iter().enumerate() {
        assert_ne!(*e, RankExit::Code(0), "rank {r}");
    }
    assert_eq!(
        tca_shm_entries(),
        before,
        "shared memory left behind after an error exit"
    );
}

/// A rank that fails because of another names it, and so does everyone after it: rank 1's
/// write into a segment rank 2 freed is refused naming rank 2, rank 1 exits with that error,
/// and the launcher's abort on rank 1's account names rank 2 (the blame rank 1 recorded on
/// the board): in its own line, and in the error of any rank that sees the abort before the
/// launcher stops it.
#[test]
fn a_failure_caused_by_another_rank_names_the_first_cause() {
    let _g = shm_lock();
    let before = tca_shm_entries();
    let out = Command::new(PROG)
        .args(["launch", "4", "cascade"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "rank 1's error: {said}{err}");
    assert!(
        err.contains("segment has been freed") && err.contains("rank 2"),
        "{err}"
    );
    assert!(
        err.contains("tca run: rank 1 ") && err.contains("after a fault of rank 2"),
        "{err}"
    );
    // The launcher stops the others at once (SIGTERM): those that saw the abort first say
    // whom it names.
    let named: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("peer-died"))
        .collect();
    assert!(named.iter().all(|&l| l == "peer-died 2"), "{said}{err}");
    assert_eq!(tca_shm_entries(), before, "shared memory left behind");
}

/// A rank that is alive but stopped (SIGSTOP) is not a dead peer: without a timeout the
/// others would wait for ever. With `TCA_TIMEOUT` they end with a timeout that names the
/// stopped rank itself (not a rank that waits like them), the launcher stops the job (the
/// stopped rank too) and nothing is left behind.
#[test]
fn a_stopped_rank_ends_the_job_through_the_timeout() {
    let _g = shm_lock();
    let before = tca_shm_entries();
    let out = Command::new(PROG)
        .args(["launch", "4", "sigstop", "2"])
        .env("TCA_TIMEOUT", "0.5")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(44),
        "a timeout, not a crash: {out:?}"
    );
    // Each survivor prints how it ended: a timeout naming a rank, or the job's abort after
    // the first of them failed. The abort names rank 2 too, not the rank that timed out
    // first (which the launcher saw exit): that rank blamed rank 2 on the board.
    let said = String::from_utf8_lossy(&out.stdout);
    let timeouts: Vec<&str> = said.lines().filter(|l| l.starts_with("timeout")).collect();
    assert!(!timeouts.is_empty(), "{said}");
    assert!(timeouts.iter().all(|&l| l == "timeout 2"), "{said}");
    let aborts: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("peer-died"))
        .collect();
    assert!(aborts.iter().all(|&l| l == "peer-died 2"), "{said}");
    assert_eq!(
        tca_shm_entries(),
        before,
        "shared memory left behind after a stopped rank"
    );
    // A timeout that is not a number of seconds is refused at start-up, not ignored.
    for bad in ["abc", "-1", "inf"] {
        let o = Launch {
            ranks: 2,
            program: PROG.into(),
            args: ["env"].iter().map(Into::into).collect(),
            env: vec![("TCA_TIMEOUT".into(), bad.into())],
            ..Default::default()
        }
        .run()
        .unwrap();
        assert_eq!(o.failure.map(|f| f.how), Some(RankExit::Code(2)), "{bad}");
    }
}

/// Isolation: a second job of the same user, given a segment handle of the first, cannot
/// write through it (as it is, or with its job id forged: key and job checks), and a process
/// of another user cannot even open the segment (the kernel refuses `/proc/PID/fd/N`; shown
/// when the tests run as root, which can start a process as `nobody`).
#[test]
fn another_job_or_user_cannot_use_a_stolen_handle() {
    let _g = shm_lock();
    let file = std::env::temp_dir().join(format!("tca-stolen-{}", std::process::id()));
    let f = file.to_string_lossy().into_owned();
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(format!("{f}.done"));
    let owner = std::thread::spawn({
        let f = f.clone();
        move || launch(2, &["publish", &f]).unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file.exists() {
        assert!(
            Instant::now() < deadline,
            "the first job published no handle"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let fields: Vec<&str> = text.split_whitespace().collect();
    let (pid, fd) = (fields[1], fields[2]);
    if rustix::process::geteuid().is_root() {
        use std::os::unix::process::CommandExt;
        let o = Command::new(PROG)
            .args(["open-peer", pid, fd])
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && out.contains("refused"), "{out}");
    } else {
        eprintln!("not root: the other-user half of this test is skipped");
    }
    let thief = launch(2, &["steal", &f]).unwrap();
    assert_eq!(
        thief.status(),
        0,
        "the stolen handle was not refused: {thief:?}"
    );
    let o = owner.join().unwrap();
    assert_eq!(o.status(), 0, "the first job's segment changed: {o:?}");
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(format!("{f}.done"));
}

/// Out of descriptors when attaching a peer's segment is this process's resource running out
/// (`Transport`), not a bad handle (it was `InvalidHandle`; found by `tca chaos`, fd-limit).
#[test]
fn running_out_of_descriptors_is_not_a_bad_handle() {
    let o = launch(2, &["fd-limit"]).unwrap();
    assert_eq!(o.status(), 0, "{o:?}");
}

#[test]
fn sigkill_of_one_rank_is_reported_and_cleaned_up() {
    let _g = shm_lock();
    let before = tca_shm_entries();
    let o = launch(3, &["sigkill", "2"]).unwrap();
    let f = o.failure.expect("a failure is reported");
    assert_eq!((f.rank, f.how), (2, RankExit::Signal(9)));
    assert_eq!(o.status(), 137);
    assert_eq!(
        tca_shm_entries(),
        before,
        "shared memory left behind after SIGKILL"
    );
}

#[test]
fn sigkill_in_a_single_copy_collective_is_reported_and_cleaned_up() {
    let _g = shm_lock();
    let before = tca_shm_entries();
    let o = launch(3, &["sigkill-in-single-copy", "1"]).unwrap();
    let f = o.failure.expect("a failure is reported");
    assert_eq!((f.rank, f.how), (1, RankExit::Signal(9)));
    assert_eq!(o.status(), 137);
    assert_eq!(
        tca_shm_entries(),
        before,
        "shared memory left behind after SIGKILL"
    );
}

#[test]
fn bad_launches_are_clear_errors() {
    let e = launch(0, &["ring"]).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
    let e = launch(100_000, &["ring"]).unwrap_err();
    assert!(e.to_string().contains("limit"), "{e}");
    let e = Launch {
        ranks: 2,
        tag_output: false,
        program: "/nonexistent/prog".into(),
        args: vec![],
        env: vec![],
        ..Default::default()
    }
    .run()
    .unwrap_err();
    assert!(e.to_string().contains("no such program"), "{e}");
}

/// Reads `ready R pid P` lines from a launched job until `n` ranks are ready.
fn ready_pids(child: &mut Child, n: usize) -> Vec<u32> {
    ready_lines(child, n).0
}

/// [`ready_pids`], and the rest of the job's stdout.
fn ready_lines(
    child: &mut Child,
    n: usize,
) -> (
    Vec<u32>,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let out = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(out).lines();
    let mut pids = Vec::new();
    while pids.len() < n {
        let l = lines
            .next()
            .expect("job ended before all ranks were ready")
            .unwrap();
        if let Some(p) = l
            .strip_prefix("ready ")
            .and_then(|r| r.split(" pid ").nth(1))
        {
            pids.push(p.trim().parse().unwrap());
        }
    }
    (pids, lines)
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: u32) -> bool {
    tca::process::alive(pid)
}

fn wait_gone(pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "ranks {pids:?} still alive (hang guard)"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal_launcher(sig: rustix::process::Signal, want_status: i32) {
    let _g = shm_lock();
    let before = tca_shm_entries();
    let mut child = Command::new(PROG)
        .args(["launch", "3", "wait-forever"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pids = ready_pids(&mut child, 3);
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, sig).unwrap();
    let st = child.wait().unwrap();
    assert_eq!(
        st.code(),
        Some(want_status),
        "launcher status after {sig:?}"
    );
    wait_gone(&pids);
    assert_eq!(
        tca_shm_entries(),
        before,
        "shared memory left behind after {sig:?}"
    );
}

#[test]
fn sigterm_of_the_launcher_stops_every_rank() {
    signal_launcher(rustix::process::Signal::TERM, 143);
}

#[test]
fn sigint_of_the_launcher_stops_every_rank() {
    signal_launcher(rustix::process::Signal::INT, 130);
}

/// SIGKILL of the launcher of ranks running `scenario` (which prints `ready` lines and then
/// never ends by itself): every rank ends with an error naming the launcher ("aborted" on
/// its stdout, which it shares with the launcher) and nothing is left behind.
fn sigkill_of_the_launcher(scenario: &str) {
    let _g = shm_lock();
    let before = tca_shm_entries();
    let mut child = Command::new(PROG)
        .args(["launch", "2", scenario])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (pids, mut lines) = ready_lines(&mut child, 2);
    child.kill().unwrap();
    child.wait().unwrap();
    wait_gone(&pids);
    // The ranks are gone, so their stdout (this pipe) is at its end.
    let said: Vec<String> = lines.by_ref().map_while(std::result::Result::ok).collect();
    assert_eq!(said, ["aborted", "aborted"], "{scenario}");
    assert_eq!(tca_shm_entries(), before);
}

/// Waiting ranks see the launcher's pidfd become readable on their next sleep slice.
#[test]
fn sigkill_of_the_launcher_ends_the_ranks() {
    sigkill_of_the_launcher("wait-forever");
}

/// Ranks whose waits never sleep (allreduces for ever) look every sleep slice all the same
/// (they ran on unsupervised before; found by `tca chaos`, kill-launcher).
#[test]
fn sigkill_of_the_launcher_ends_a_busy_job() {
    sigkill_of_the_launcher("busy-forever");
}

// ---- without the launcher: ranks started as Slurm would start them ------------------------

fn unique_job() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn slurm_job(n: u32, job: &str, extra: &[(&str, &str)], args: &[&str]) -> Vec<Child> {
    (0..n)
        .map(|r| {
            let mut c = Command::new(PROG);
            c.args(args)
                .env("SLURM_PROCID", r.to_string())
                .env("SLURM_NTASKS", n.to_string())
                .env("SLURM_JOB_ID", job)
                .env("SLURM_STEP_ID", "0")
                .env_remove("TCA_BOARD_FD")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in extra {
                c.env(k, v);
            }
            c.spawn().unwrap()
        })
        .collect()
}

fn finish(children: Vec<Child>) -> Vec<(Option<i32>, String, String)> {
    children
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).into(),
                String::from_utf8_lossy(&o.stderr).into(),
            )
        })
        .collect()
}

#[test]
fn slurm_environment_job_runs_and_leaves_nothing() {
    let _g = shm_lock();
    let before = tca_shm_entries();
    let out = finish(slurm_job(4, &unique_job(), &[], &["ring", "10"]));
    for (r, (code, so, se)) in out.iter().enumerate() {
        assert_eq!(*code, Some(0), "rank {r}: {so} {se}");
    }
    assert_eq!(
        tca_shm_entries(),
        before,
        "the start-up board was not unlinked"
    );
    let out = finish(slurm_job(2, &unique_job(), &[], &["env"]));
    assert!(out[1].1.contains("rank 1 size 2 via Slurm"), "{:?}", out[1]);
}

#[test]
fn open_mpi_environment_is_understood() {
    let ns = format!("test-{}", unique_job());
    let children: Vec<Child> = (0..3)
        .map(|r| {
            Command::new(PROG)
                .arg("env")
                .env("OMPI_COMM_WORLD_RANK", r.to_string())
                .env("OMPI_COMM_WORLD_SIZE", "3")
                .env("OMPI_COMM_WORLD_LOCAL_SIZE", "3")
                .env("PMIX_NAMESPACE", &ns)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let out = finish(children);
    assert!(
        out[2].1.contains("rank 2 size 3 via Open MPI"),
        "{:?}",
        out[2]
    );
}

#[test]
fn dead_peer_is_named_without_the_launcher() {
    let _g = shm_lock();
    let before = tca_shm_entries();
    let out = finish(slurm_job(3, &unique_job(), &[], &["sigkill", "1"]));
    assert_eq!(out[1].0, None, "rank 1 was killed by a signal");
    for r in [0, 2] {
        assert_eq!(out[r].0, Some(42), "rank {r}: {:?}", out[r]);
        assert!(
            out[r].1.contains("peer-died 1"),
            "rank {r} must name rank 1: {:?}",
            out[r]
        );
    }
    assert_eq!(tca_shm_entries(), before);
}

#[test]
fn multi_node_job_without_a_rendezvous_says_what_to_set() {
    // Slurm says two nodes but names none: nobody can know where rank 0 listens.
    let out = finish(slurm_job(
        2,
        &unique_job(),
        &[("SLURM_NNODES", "2"), ("SLURM_STEP_NUM_NODES", "2")],
        &["env"],
    ));
    for (code, _, se) in &out {
        assert_eq!(*code, Some(2));
        assert!(se.contains("TCA_KV=HOST:PORT"), "{se}");
    }
}

/// A free TCP port on loopback (bound, read, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn ranks_meet_at_a_rendezvous_and_share_a_node_board() {
    // Slurm says two nodes, but every rank finds itself on the same one: they meet at rank
    // 0's rendezvous, then on a node board made by the node's first rank, and run the
    // collectives over shared memory.
    let kv = format!("127.0.0.1:{}", free_port());
    let out = finish(slurm_job(
        3,
        &unique_job(),
        &[
            ("SLURM_NNODES", "2"),
            ("TCA_KV", &kv),
            ("TCA_NODE", "same-node"),
        ],
        &["coll", "30"],
    ));
    for (r, (code, so, se)) in out.iter().enumerate() {
        assert_eq!(*code, Some(0), "rank {r}: {so} {se}");
    }
}

#[test]
fn ranks_on_two_nodes_need_the_network_transport() {
    // Two "nodes" on this machine (node names given): with the `ofi` feature the job runs
    // over libfabric between them and shared memory within; without it, a clear error.
    let kv = format!("127.0.0.1:{}", free_port());
    let job = unique_job();
    let children: Vec<Child> = (0..4u32)
        .map(|r| {
            let mut c = Command::new(PROG);
            c.args(["coll", "30"])
                .env("SLURM_PROCID", r.to_string())
                .env("SLURM_NTASKS", "4")
                .env("SLURM_JOB_ID", &job)
                .env("SLURM_STEP_ID", "0")
                .env("SLURM_NNODES", "2")
                .env("TCA_KV", &kv)
                .env("TCA_NODE", if r < 2 { "node-a" } else { "node-b" })
                .env("FI_PROVIDER", "tcp")
                .env_remove("TCA_BOARD_FD")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    let out = finish(children);
    for (r, (code, so, se)) in out.iter().enumerate() {
        if cfg!(feature = "ofi") {
            assert_eq!(*code, Some(0), "rank {r}: {so} {se}");
        } else {
            assert_eq!(*code, Some(2), "rank {r}: {so} {se}");
            assert!(se.contains("--features ofi"), "rank {r}: {se}");
        }
    }
}

/// A remote-shell agent that runs the command here, as if on host `$1`: it gives the rank
/// that host as its node name, so hosts `a` and `b` are two nodes to tca.
fn fake_rsh() -> Vec<String> {
    ["sh", "-c", "h=$1; shift; TCA_NODE=$h exec \"$@\"", "rsh"]
        .map(String::from)
        .to_vec()
}

fn launch_hosts(n: u32, hosts: &str, args: &[&str]) -> tca::bootstrap::launcher::Outcome {
    Launch {
        ranks: n,
        program: PROG.into(),
        args: args.iter().map(Into::into).collect(),
        hosts: tca::bootstrap::launcher::parse_hosts(hosts).unwrap(),
        rsh: fake_rsh(),
        kv_host: Some("127.0.0.1".into()),
        ..Default::default()
    }
    .run()
    .unwrap()
}

#[test]
fn launcher_over_hosts_on_one_node() {
    // Every "host" is this one (localhost ranks start directly): the ranks meet at the
    // launcher's rendezvous, then on one node board.
    let o = launch_hosts(3, "localhost:2,localhost:1", &["coll", "30"]);
    assert_eq!(o.status(), 0, "{o:?}");
}

#[test]
fn launcher_over_two_hosts() {
    // Two hosts through the agent: two nodes; with the `ofi` feature the job runs (shared
    // memory within a host, libfabric between), without it every rank says what is missing.
    let o = launch_hosts(4, "a,b", &["coll", "30"]);
    if cfg!(feature = "ofi") {
        assert_eq!(o.status(), 0, "{o:?}");
    } else {
        assert_eq!(o.status(), 2, "{o:?}");
    }
}

#[test]
fn a_wait_for_another_node_sleeps_on_the_network() {
    if !cfg!(feature = "ofi") {
        return; // ranks on two hosts need the network transport
    }
    // Ranks 0 and 1 on host a, 2 and 3 on b: rank 0 waits for rank 2 and must sleep on the
    // network, rank 1 waits for rank 0 and must not (the scenario checks both).
    let o = launch_hosts(4, "a:2,b:2", &["sleep-where"]);
    assert_eq!(o.status(), 0, "{o:?}");
}

#[test]
fn a_rank_killed_on_another_host_is_named_everywhere() {
    if !cfg!(feature = "ofi") {
        return; // ranks on two hosts need the network transport
    }
    // Rank 3 (on host b) kills itself mid-job; ranks on host a must name it.
    let o = launch_hosts(4, "a,b", &["sigkill", "3"]);
    let f = o.failure.expect("the job fails");
    assert_eq!(f.rank, 3, "{o:?}");
    for r in [0, 1] {
        assert_eq!(
            o.ranks[r],
            RankExit::Code(42),
            "rank {r} must report peer-died: {o:?}"
        );
    }
}

#[test]
fn missing_rank_times_out_with_its_number() {
    let _g = shm_lock();
    let before = tca_shm_entries();
    let job = unique_job();
    let c = Command::new(PROG)
        .arg("env")
        .env("SLURM_PROCID", "0")
        .env("SLURM_NTASKS", "2")
        .env("SLURM_JOB_ID", &job)
        .env("SLURM_STEP_ID", "0")
        .env("TCA_BOOT_TIMEOUT", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(vec![c]);
    assert_eq!(out[0].0, Some(2));
    assert!(
        out[0].2.contains("ranks [1] of 2 did not start"),
        "{}",
        out[0].2
    );
    assert_eq!(
        tca_shm_entries(),
        before,
        "board left behind after a failed start-up"
    );
}

#[test]
fn rank_out_of_range_in_environment_is_refused() {
    let out = finish(slurm_job(
        1,
        &unique_job(),
        &[("SLURM_PROCID", "5")],
        &["env"],
    ));
    assert_eq!(out[0].0, Some(2));
    assert!(
        out[0].2.contains("rank 5 is not in a 1-rank job"),
        "{}",
        out[0].2
    );
}

/// A peer is untrusted input over the network too: rank 1 sends rank 0 thousands of messages
/// of the network transport's format that a confused or hostile peer could send (writes in
/// and out of bounds, wrong keys, misaligned and unknown signals and atomics, forged answers
/// and refusals, lying lengths, noise; `tca_tests::netfuzz`), and rank 0's memory must then
/// hold exactly what the model of the receiver's checks says, its other segment untouched,
/// the refused writes reported to the sender, and requests still answered both ways. Three
/// seeds, 2 processes over libfabric (`TCA_TRANSPORT=ofi`; the provider from `FI_PROVIDER`).
#[cfg(feature = "ofi")]
#[test]
fn a_peer_sending_garbage_over_the_network_writes_only_what_it_may() {
    for seed in ["1", "20261129", "77"] {
        let out = Command::new(PROG)
            .args(["launch", "2", "net-garbage", "3000", seed])
            .env("TCA_TRANSPORT", "ofi")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "seed {seed}: {said}{err}");
        assert_eq!(said.matches("net-garbage ok").count(), 2, "{said}{err}");
        assert!(said.contains("net-garbage sent 3000"), "{said}");
    }
}
