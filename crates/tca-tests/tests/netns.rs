//! "Nodes" on one machine: network namespaces, each with one end of a veth pair whose other
//! end is a port of a bridge (in a namespace of its own), ranks started in each through
//! `tca`'s launcher (`--hosts A:2,B:2` with `ip netns exec` as the remote-shell agent),
//! libfabric's tcp provider between them, shared memory inside each.
//!
//! Needs root and iproute2 (CI has both) and the `ofi` feature; elsewhere each test says why
//! it did not run. The namespaces are removed however a test ends (a guard's `Drop`, which
//! runs on panics too; a SIGKILLed test leaves `tca-*` namespaces that the next run removes).
#![cfg(feature = "ofi")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PROG: &str = env!("CARGO_BIN_EXE_tca-rankprog");

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Namespaces `A`, `B`, `C`, ... with addresses 10.77.k.1, 10.77.k.2, ... on one switch: a
/// bridge in namespace `bridge`, one veth pair per node.
struct Nodes {
    /// The nodes' namespaces, in host-letter order.
    ns: Vec<String>,
    /// Their addresses.
    addr: Vec<String>,
    /// Node i's interface (its end of the veth pair), in its namespace.
    dev: Vec<String>,
    bridge: String,
}

impl Nodes {
    /// `count` nodes (at most 26) on network 10.77.k.0/24; `None` (the test skipped) without
    /// root or iproute2.
    fn make(k: u8, count: usize) -> Option<Self> {
        if !rustix::process::geteuid().is_root() || !ip(&["netns", "list"]) {
            eprintln!("skipped: needs root and iproute2 (`ip netns`)");
            return None;
        }
        assert!((1..=26).contains(&count));
        let id = std::process::id() % 10_000;
        let letter = |i: usize| char::from(b'a' + i as u8);
        let me = Self {
            ns: (0..count)
                .map(|i| format!("tca-{}{id}-{k}", letter(i)))
                .collect(),
            addr: (0..count).map(|i| format!("10.77.{k}.{}", i + 1)).collect(),
            dev: (0..count)
                .map(|i| format!("tv{}{id}{k}", letter(i)))
                .collect(),
            // Two letters before the id: no node's name (one letter) can be it.
            bridge: format!("tca-sw{id}-{k}"),
        };
        // Leftovers of a killed run.
        for ns in me.ns.iter().chain([&me.bridge]) {
            let _ = ip(&["netns", "del", ns]);
        }
        let br = &me.bridge;
        let mut ok = ip(&["netns", "add", br])
            && ip(&["-n", br, "link", "add", "sw", "type", "bridge"])
            && ip(&["-n", br, "link", "set", "sw", "up"]);
        for i in 0..count {
            let (ns, dev, port) = (&me.ns[i], &me.dev[i], format!("p{i}"));
            let cidr = format!("{}/24", me.addr[i]);
            ok = ok
                && ip(&["netns", "add", ns])
                && ip(&[
                    "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", &port,
                    "netns", br,
                ])
                && ip(&["-n", br, "link", "set", &port, "master", "sw", "up"])
                && ip(&["-n", ns, "addr", "add", &cidr, "dev", dev])
                && ip(&["-n", ns, "link", "set", dev, "up"])
                && ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        assert!(ok, "could not build {count} namespaces on a bridge");
        Some(me)
    }

    /// Starts `tca-rankprog launch N ARGS` in the first namespace, spreading ranks over the
    /// nodes as `slots` says (`A:2,B:1`: letters name the nodes).
    fn launch(&self, n: u32, slots: &str, args: &[&str], extra: &[(&str, &str)]) -> Child {
        let mut hosts = slots.to_string();
        for (i, ns) in self.ns.iter().enumerate() {
            hosts = hosts.replace(char::from(b'A' + i as u8), ns);
        }
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[0], PROG, "launch", &n.to_string()])
            .args(args)
            .env("RANKPROG_HOSTS", hosts)
            .env("RANKPROG_RSH", "ip netns exec")
            .env("RANKPROG_KV_HOST", &self.addr[0])
            .env("FI_PROVIDER", "tcp")
            .env_remove("TCA_BOARD_FD")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in extra {
            c.env(k, v);
        }
        c.spawn().expect("ip netns exec")
    }

    /// Pids of every process in namespace `ns`.
    fn pids(ns: &str) -> Vec<i32> {
        let out = Command::new("ip")
            .args(["netns", "pids", ns])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        out.split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Kills every process in node i's namespace.
    fn kill_all(&self, i: usize) {
        for p in Self::pids(&self.ns[i]) {
            if let Some(pid) = rustix::process::Pid::from_raw(p) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for (i, ns) in self.ns.iter().enumerate() {
            self.kill_all(i);
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["netns", "del", &self.bridge]);
    }
}

/// Waits for `c` with a bound; kills it and fails if it hangs.
fn finish(mut c: Child, limit: Duration) -> (i32, String, String) {
    let end = Instant::now() + limit;
    loop {
        if let Ok(Some(_)) = c.try_wait() {
            break;
        }
        if Instant::now() >= end {
            let _ = c.kill();
            let o = c.wait_with_output().unwrap();
            panic!(
                "job hung for {limit:?}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = c.wait_with_output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Waits until `n` ranks of the job `c` printed `ready`; returns the rest of its output.
fn wait_ready(c: &mut Child, n: usize) -> std::io::Lines<BufReader<std::process::ChildStdout>> {
    let out = c.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let mut ready = 0;
    let end = Instant::now() + Duration::from_secs(60);
    while ready < n && Instant::now() < end {
        match lines.next() {
            Some(Ok(l)) if l.starts_with("ready") => ready += 1,
            Some(_) => {}
            None => break,
        }
    }
    assert_eq!(ready, n, "not every rank started");
    lines
}

#[test]
fn collectives_across_two_namespaces_match_the_reference() {
    let Some(n) = Nodes::make(1, 2) else { return };
    // Every collective algorithm at 4 ranks (2 + 2), checked against a sequential reference.
    let (code, out, err) = finish(
        n.launch(4, "A:2,B:2", &["coll", "5"], &[]),
        Duration::from_secs(240),
    );
    assert_eq!(code, 0, "{out}{err}");
    // 3 ranks on 1 + 2: odd counts and a node of one rank.
    let (code, out, err) = finish(
        n.launch(3, "A:1,B:2", &["ring", "50"], &[]),
        Duration::from_secs(120),
    );
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn jobs_span_three_and_four_namespaces() {
    let Some(n) = Nodes::make(5, 4) else { return };
    // Each rank starts on the node its host entry names, knows its node's ranks, and talks
    // through shared memory to them and libfabric to the rest (a node of one: libfabric only).
    let (code, out, err) = finish(
        n.launch(6, "A:2,B:1,C:3", &["env"], &[]),
        Duration::from_secs(60),
    );
    assert_eq!(code, 0, "{out}{err}");
    for (r, node, on) in [
        (0, "0,1", "shm+ofi"),
        (1, "0,1", "shm+ofi"),
        (2, "2", "ofi"),
        (3, "3,4,5", "shm+ofi"),
        (4, "3,4,5", "shm+ofi"),
        (5, "3,4,5", "shm+ofi"),
    ] {
        let line = format!("rank {r} size 6 via tca run node {node} on {on}");
        assert!(out.lines().any(|l| l == line), "no `{line}` in {out}{err}");
    }
    // Every collective algorithm against the sequential reference: three uneven nodes, then
    // four nodes of one rank (every pair over the network).
    for (np, slots) in [(6, "A:2,B:1,C:3"), (4, "A:1,B:1,C:1,D:1")] {
        let (code, out, err) = finish(
            n.launch(np, slots, &["coll", "2"], &[]),
            Duration::from_secs(240),
        );
        assert_eq!(code, 0, "{slots}: {out}{err}");
    }
    // Eight ranks on four nodes: puts and signals around a ring, every other hop between
    // nodes; then two-sided messages of random lengths between pairs on different nodes.
    for (np, slots, args) in [
        (8, "A:2,B:2,C:2,D:2", ["ring", "50"]),
        (4, "A:1,B:1,C:1,D:1", ["p2p", "20"]),
    ] {
        let (code, out, err) = finish(n.launch(np, slots, &args, &[]), Duration::from_secs(120));
        assert_eq!(code, 0, "{slots} {args:?}: {out}{err}");
    }
}

/// Runs a `wait-forever` job of `np` ranks over `slots`, lets `lose` take something away once
/// every rank is ready, and returns the job's remaining output lines and its stderr; the job
/// must fail.
fn job_losing(
    n: &Nodes,
    np: u32,
    slots: &str,
    extra: &[(&str, &str)],
    lose: impl FnOnce(),
) -> (Vec<String>, String) {
    let mut c = n.launch(np, slots, &["wait-forever"], extra);
    let lines = wait_ready(&mut c, np as usize);
    lose();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let (code, _, err) = finish(c, Duration::from_secs(60));
    assert_ne!(code, 0, "{rest:?} {err}");
    (rest, err)
}

#[test]
fn a_dead_node_is_named_by_the_others() {
    let Some(n) = Nodes::make(6, 3) else { return };
    let (rest, err) = job_losing(&n, 3, "A:1,B:1,C:1", &[], || n.kill_all(2));
    // Ranks 0 and 1 are alive on nodes a and b; whichever reports before the launcher stops
    // it names rank 2 (node c), never the other live rank; the launcher names rank 2 too.
    let named: Vec<&String> = rest.iter().filter(|l| l.starts_with("peer-died")).collect();
    assert!(!named.is_empty(), "{rest:?} {err}");
    assert!(named.iter().all(|l| *l == "peer-died 2"), "{rest:?} {err}");
    assert!(err.contains("rank 2 "), "{err}");
}

#[test]
fn killing_one_namespaces_ranks_is_named_on_the_other() {
    let Some(n) = Nodes::make(2, 2) else { return };
    let (rest, err) = job_losing(&n, 4, "A:2,B:2", &[], || n.kill_all(1));
    // The ranks of namespace a (0 and 1) name a rank of namespace b (2 or 3).
    let named: Vec<&String> = rest.iter().filter(|l| l.starts_with("peer-died")).collect();
    assert!(
        named.iter().any(|l| l.ends_with(" 2") || l.ends_with(" 3")),
        "{rest:?} {err}"
    );
}

#[test]
fn a_node_that_becomes_unreachable_is_named() {
    let Some(n) = Nodes::make(3, 2) else { return };
    // Cut the cable: namespace b's end of its veth pair goes down, no packet says goodbye.
    let cut = || assert!(ip(&["-n", &n.ns[1], "link", "set", &n.dev[1], "down"]));
    let (rest, err) = job_losing(&n, 4, "A:2,B:2", &[("TCA_KV_SILENCE", "2")], cut);
    assert!(
        rest.iter()
            .any(|l| l == "peer-died 2" || l == "peer-died 3"),
        "ranks 0 and 1 must name a rank of the lost node: {rest:?} {err}"
    );
}

/// Starts `tca-rankprog ARGS` as rank r of `n` directly in namespace a (ranks below n/2) or
/// b, with the environment a resource manager would give it.
fn start_as(n: &Nodes, rank: u32, size: u32, env: &[(String, String)], args: &[&str]) -> Child {
    let ns = &n.ns[usize::from(rank >= size / 2)];
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, PROG])
        .args(args)
        .env("FI_PROVIDER", "tcp")
        .env_remove("TCA_BOARD_FD")
        .env_remove("TCA_KV")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("ip netns exec")
}

#[test]
fn slurm_pmix_and_pmi_environments_start_across_namespaces() {
    let Some(n) = Nodes::make(4, 2) else { return };
    let (a, b) = (n.addr[0].clone(), n.addr[1].clone());
    let port = 40_000 + std::process::id() % 20_000;
    let kv = format!("{a}:{port}");
    let kv2 = format!("{a}:{}", port + 1);
    type EnvOf<'a> = Box<dyn Fn(u32) -> Vec<(String, String)> + 'a>;
    let styles: [(&str, EnvOf<'_>); 3] = [
        (
            // Slurm: the rendezvous is the step's first node and a port derived from the job.
            "Slurm",
            Box::new(|r| {
                [
                    ("SLURM_PROCID", r.to_string()),
                    ("SLURM_NTASKS", "4".into()),
                    ("SLURM_JOB_ID", format!("netns{}", std::process::id())),
                    ("SLURM_STEP_ID", "0".into()),
                    ("SLURM_STEP_NUM_NODES", "2".into()),
                    ("SLURM_STEP_NODELIST", format!("{a},{b}")),
                ]
                .map(|(k, v)| (k.to_string(), v))
                .to_vec()
            }),
        ),
        (
            // Open MPI's mpirun (PMIx environment): rank 0's address given in TCA_KV.
            "PMIx",
            Box::new(|r| {
                [
                    ("OMPI_COMM_WORLD_RANK", r.to_string()),
                    ("OMPI_COMM_WORLD_SIZE", "4".into()),
                    ("OMPI_COMM_WORLD_LOCAL_SIZE", "2".into()),
                    ("PMIX_NAMESPACE", format!("ns{}", std::process::id())),
                    ("TCA_KV", kv.clone()),
                ]
                .map(|(k, v)| (k.to_string(), v))
                .to_vec()
            }),
        ),
        (
            // MPICH's hydra (PMI environment).
            "PMI",
            Box::new(|r| {
                [
                    ("PMI_RANK", r.to_string()),
                    ("PMI_SIZE", "4".into()),
                    ("MPI_LOCALNRANKS", "2".into()),
                    ("PMI_KVSNAME", format!("kvs{}", std::process::id())),
                    ("TCA_KV", kv2.clone()),
                ]
                .map(|(k, v)| (k.to_string(), v))
                .to_vec()
            }),
        ),
    ];
    for (style, env) in &styles {
        let ranks: Vec<Child> = (0..4)
            .map(|r| start_as(&n, r, 4, &env(r), &["ring", "30"]))
            .collect();
        for (r, c) in ranks.into_iter().enumerate() {
            let (code, out, err) = finish(c, Duration::from_secs(120));
            assert_eq!(code, 0, "{style}: rank {r}: {out}{err}");
            assert!(out.contains("ring ok"), "{style}: rank {r}: {out}");
        }
    }
}

/// The real launchers, started in the first namespace with `scripts/netns-rsh.sh` as their
/// remote shell: 2 + 2 ranks, and no `TCA_KV` — rank 0 publishes its rendezvous through the
/// launcher's directory (MPICH's Hydra: PMI-1 over `PMI_FD`; Open MPI's mpirun: PMIx, with
/// the `pmix` feature). A launcher that is not installed is skipped, saying so (unless
/// `TCA_TEST_LAUNCHERS=all`, as in CI).
#[test]
fn mpirun_and_hydra_start_jobs_across_namespaces() {
    let Some(n) = Nodes::make(7, 2) else { return };
    let rsh = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/netns-rsh.sh");
    let map: Vec<String> = n
        .addr
        .iter()
        .zip(&n.ns)
        .map(|(a, ns)| format!("{a}={ns}"))
        .collect();
    let hosts = format!("{}:2,{}:2", n.addr[0], n.addr[1]);
    let has = |bin: &str| {
        Command::new(bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    let run_with = |launcher: &[&str], args: &[&str], kv: Option<&str>| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &n.ns[0]])
            .args(launcher)
            .args(["-n", "4", PROG])
            .args(args)
            .env("NETNS_MAP", map.join(","))
            .env("FI_PROVIDER", "tcp")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env_remove("TCA_KV")
            .env_remove("TCA_BOARD_FD")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(kv) = kv {
            c.env("TCA_KV", kv);
        }
        finish(c.spawn().expect("ip netns exec"), Duration::from_secs(120))
    };
    let run = |launcher: &[&str], args: &[&str]| run_with(launcher, args, None);
    let hydra = [
        "mpiexec.hydra",
        "-launcher",
        "ssh",
        "-launcher-exec",
        rsh,
        "-localhost",
        &n.addr[0],
        "-hosts",
        &hosts,
    ];
    let subnet = format!("{}.0/24", n.addr[0].rsplit_once('.').unwrap().0);
    let ompi = [
        "mpirun.openmpi",
        "--host",
        &hosts,
        "--mca",
        "plm_rsh_agent",
        rsh,
        "--bind-to",
        "none",
        "--mca",
        "oob_tcp_if_include",
        &subnet,
        "-x",
        "FI_PROVIDER",
    ];
    // CI installs both launchers and builds with `pmix`, and sets TCA_TEST_LAUNCHERS=all so
    // that a missing one fails rather than skips.
    let all = std::env::var("TCA_TEST_LAUNCHERS").is_ok_and(|v| v == "all");
    let skip = |why: &str| {
        assert!(!all, "TCA_TEST_LAUNCHERS=all: {why}");
        eprintln!("{why}");
    };
    let mut launchers: Vec<(&str, &[&str])> = Vec::new();
    if has("mpiexec.hydra") {
        launchers.push(("Hydra", &hydra));
    } else {
        skip("Hydra skipped: no mpiexec.hydra (Debian: mpich)");
    }
    if cfg!(feature = "pmix") && has("mpirun.openmpi") {
        launchers.push(("mpirun", &ompi));
    } else {
        skip("Open MPI's mpirun skipped: needs the `pmix` feature and openmpi-bin");
    }
    for (name, launcher) in launchers {
        // Who is where, and through which transport.
        let (code, out, err) = run(launcher, &["env"]);
        assert_eq!(code, 0, "{name}: {out}{err}");
        let mut lines: Vec<&str> = out.lines().filter(|l| l.starts_with("rank")).collect();
        lines.sort();
        assert_eq!(lines.len(), 4, "{name}: {out}{err}");
        for (r, l) in lines.iter().enumerate() {
            let node = if r < 2 { "node 0,1" } else { "node 2,3" };
            assert!(
                l.starts_with(&format!("rank {r} size 4 ")) && l.contains(node),
                "{name}: {l}"
            );
            assert!(l.ends_with("on shm+ofi"), "{name}: {l}");
        }
        // Every collective algorithm against the reference, over the mix.
        let (code, out, err) = run(launcher, &["coll", "2"]);
        assert_eq!(code, 0, "{name}: {out}{err}");
        assert_eq!(out.matches("coll ok").count(), 4, "{name}: {out}{err}");
        // With TCA_KV, rank 0 listens there; the ranks still agree on the job (Hydra names
        // it nowhere: the directory carries rank 0's id).
        let kv = format!("{}:{}", n.addr[0], 40_000 + std::process::id() % 20_000);
        let (code, out, err) = run_with(launcher, &["ring", "5"], Some(&kv));
        assert_eq!(code, 0, "{name} with TCA_KV: {out}{err}");
        assert_eq!(out.matches("ring ok").count(), 4, "{name}: {out}{err}");
        // Two worlds in turn in each process: the second meets the job through the same
        // directory (Hydra closes a PMI-1 connection after `finalize`; PMIx is opened again).
        let (code, out, err) = run(launcher, &["twice"]);
        assert_eq!(code, 0, "{name}, two worlds: {out}{err}");
        assert_eq!(out.matches("ring ok").count(), 8, "{name}: {out}{err}");
        // A rank that outlives its world and its node's other rank is not killed.
        let (code, out, err) = run(launcher, &["linger"]);
        assert_eq!(code, 0, "{name}: {out}{err}");
        for r in [1, 3] {
            assert!(
                out.contains(&format!("lingered rank {r}")),
                "{name}: {out}{err}"
            );
        }
    }
}

#[test]
fn a_node_proxy_per_namespace_serves_that_nodes_ranks() {
    let Some(n) = Nodes::make(8, 2) else { return };
    // `tca run --offload` across nodes: the launcher starts a node proxy in each namespace
    // through the agent, learns where it made its channel, and starts that node's ranks
    // with it; the proxies' worlds meet at the rendezvous and talk through libfabric.
    for (np, slots, args) in [
        (4, "A:2,B:2", ["offload-coll", "3"]),
        (4, "A:2,B:2", ["offload-split", "5"]),
        (3, "A:1,B:2", ["offload-put", "5"]),
    ] {
        let (code, out, err) = finish(
            n.launch(
                np,
                slots,
                &args,
                &[("RANKPROG_OFFLOAD", "1"), ("TCA_TIMEOUT", "20")],
            ),
            Duration::from_secs(120),
        );
        assert_eq!(code, 0, "{slots} {args:?}: {out}{err}");
    }
}
