//! Two "nodes" on one machine: two network namespaces joined by a veth pair, ranks started in
//! each through `tca`'s launcher (`--hosts A:2,B:2` with `ip netns exec` as the remote-shell
//! agent), libfabric's tcp provider between them, shared memory inside each.
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

/// Two namespaces `a` and `b` with addresses 10.77.k.1 and 10.77.k.2 on a veth pair.
struct Nodes {
    a: String,
    b: String,
    addr_a: String,
    addr_b: String,
}

impl Nodes {
    fn make(k: u8) -> Option<Self> {
        if !rustix::process::geteuid().is_root() || !ip(&["netns", "list"]) {
            eprintln!("skipped: needs root and iproute2 (`ip netns`)");
            return None;
        }
        let id = std::process::id() % 10_000;
        let (a, b) = (format!("tca-a{id}-{k}"), format!("tca-b{id}-{k}"));
        // Leftovers of a killed run.
        let _ = ip(&["netns", "del", &a]);
        let _ = ip(&["netns", "del", &b]);
        let me = Self {
            a: a.clone(),
            b: b.clone(),
            addr_a: format!("10.77.{k}.1"),
            addr_b: format!("10.77.{k}.2"),
        };
        let (va, vb) = (format!("tva{id}{k}"), format!("tvb{id}{k}"));
        let ok = ip(&["netns", "add", &a])
            && ip(&["netns", "add", &b])
            && ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])
            && ip(&["link", "set", &va, "netns", &a])
            && ip(&["link", "set", &vb, "netns", &b])
            && ip(&[
                "-n",
                &a,
                "addr",
                "add",
                &format!("10.77.{k}.1/24"),
                "dev",
                &va,
            ])
            && ip(&[
                "-n",
                &b,
                "addr",
                "add",
                &format!("10.77.{k}.2/24"),
                "dev",
                &vb,
            ])
            && ip(&["-n", &a, "link", "set", &va, "up"])
            && ip(&["-n", &b, "link", "set", &vb, "up"])
            && ip(&["-n", &a, "link", "set", "lo", "up"])
            && ip(&["-n", &b, "link", "set", "lo", "up"]);
        assert!(ok, "could not build the two namespaces");
        Some(me)
    }

    /// Starts `tca-rankprog launch N ARGS` in namespace `a`, spreading ranks over a and b.
    fn launch(&self, n: u32, slots: &str, args: &[&str], extra: &[(&str, &str)]) -> Child {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.a, PROG, "launch", &n.to_string()])
            .args(args)
            .env(
                "RANKPROG_HOSTS",
                slots.replace('A', &self.a).replace('B', &self.b),
            )
            .env("RANKPROG_RSH", "ip netns exec")
            .env("RANKPROG_KV_HOST", &self.addr_a)
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
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            for p in Self::pids(ns) {
                if let Some(pid) = rustix::process::Pid::from_raw(p) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            let _ = ip(&["netns", "del", ns]);
        }
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
    let Some(n) = Nodes::make(1) else { return };
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
fn killing_one_namespaces_ranks_is_named_on_the_other() {
    let Some(n) = Nodes::make(2) else { return };
    let mut c = n.launch(4, "A:2,B:2", &["wait-forever"], &[]);
    let lines = wait_ready(&mut c, 4);
    for p in Nodes::pids(&n.b) {
        if let Some(pid) = rustix::process::Pid::from_raw(p) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let (code, _, err) = finish(c, Duration::from_secs(60));
    assert_ne!(code, 0);
    // The ranks of namespace a (0 and 1) name a rank of namespace b (2 or 3).
    let named: Vec<&String> = rest.iter().filter(|l| l.starts_with("peer-died")).collect();
    assert!(
        named.iter().any(|l| l.ends_with(" 2") || l.ends_with(" 3")),
        "{rest:?} {err}"
    );
}

#[test]
fn a_node_that_becomes_unreachable_is_named() {
    let Some(n) = Nodes::make(3) else { return };
    let mut c = n.launch(4, "A:2,B:2", &["wait-forever"], &[("TCA_KV_SILENCE", "2")]);
    let lines = wait_ready(&mut c, 4);
    // Cut the cable: namespace b's end of the veth pair goes down, no packet says goodbye.
    // (Deleting it would delete both ends, and namespace a's address with them.)
    let vb = format!("tvb{}{}", std::process::id() % 10_000, 3);
    assert!(ip(&["-n", &n.b, "link", "set", &vb, "down"]));
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let (code, _, err) = finish(c, Duration::from_secs(60));
    assert_ne!(code, 0);
    assert!(
        rest.iter()
            .any(|l| l == "peer-died 2" || l == "peer-died 3"),
        "ranks 0 and 1 must name a rank of the lost node: {rest:?} {err}"
    );
}

/// Starts `tca-rankprog ARGS` as rank r of `n` directly in namespace a (ranks below n/2) or
/// b, with the environment a resource manager would give it.
fn start_as(n: &Nodes, rank: u32, size: u32, env: &[(String, String)], args: &[&str]) -> Child {
    let ns = if rank < size / 2 { &n.a } else { &n.b };
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
    let Some(n) = Nodes::make(4) else { return };
    let b = n.addr_b.clone();
    let port = 40_000 + std::process::id() % 20_000;
    let kv = format!("{}:{port}", n.addr_a);
    let kv2 = format!("{}:{}", n.addr_a, port + 1);
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
                    ("SLURM_STEP_NODELIST", format!("{},{b}", n.addr_a)),
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
