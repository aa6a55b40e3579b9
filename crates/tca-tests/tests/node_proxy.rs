//! The node proxy (`tca run --offload`, seed 004's host proxy): ranks with no world of their
//! own post every operation to one proxy process per node, through queues in shared memory.
//! Correctness at 1-9 ranks (more than cores from 3 on), a rank that computes while its peers
//! complete, bad input, a rank that dies, a proxy that dies, and cleanup. No test asserts a
//! time; the only deadlines are hang guards.

use std::process::Command;
use std::sync::Mutex;

use tca::bootstrap::launcher::{Launch, RankExit};

const PROG: &str = env!("CARGO_BIN_EXE_tca-rankprog");

/// One job at a time looks at /dev/shm.
static SHM: Mutex<()> = Mutex::new(());

fn offloaded(n: u32, args: &[&str]) -> tca::bootstrap::launcher::Outcome {
    Launch {
        ranks: n,
        program: PROG.into(),
        args: args.iter().map(Into::into).collect(),
        offload: Some(vec![PROG.into(), "node-proxy".into()]),
        ..Default::default()
    }
    .run()
    .unwrap()
}

#[test]
fn every_posted_operation_at_1_to_9_ranks() {
    let _g = SHM.lock().unwrap_or_else(|p| p.into_inner());
    let before = tca::transport::shm_entries();
    for n in 1..=9 {
        let o = offloaded(n, &["offload-coll", "3"]);
        assert_eq!(o.status(), 0, "{n} ranks: {o:?}");
        assert_eq!(o.proxy, Some(RankExit::Code(0)), "{n} ranks: {o:?}");
    }
    assert_eq!(
        tca::transport::shm_entries(),
        before,
        "shared memory left behind"
    );
}

#[test]
fn a_rank_that_computes_still_completes_its_peers_collectives() {
    let o = offloaded(4, &["offload-compute", "100"]);
    assert_eq!(o.status(), 0, "{o:?}");
}

#[test]
fn bad_requests_get_errors_and_the_proxy_serves_on() {
    let o = offloaded(3, &["offload-errors"]);
    assert_eq!(o.status(), 0, "{o:?}");
}

#[test]
fn a_rank_that_exits_stops_the_job_with_its_status() {
    let o = offloaded(3, &["offload-exit", "3", "1"]);
    assert_eq!(o.status(), 3, "{o:?}");
    assert_eq!(o.failure.map(|f| f.rank), Some(1), "{o:?}");
}

/// Rank 0 kills its node proxy while every rank waits in a collective: the job's status is
/// the proxy's death (SIGKILL), not the ranks' errors it caused, and the ranks it served
/// (`named`) fail naming it; nothing is left in /dev/shm. `hosts`: as RANKPROG_HOSTS.
fn killed_proxy(n: u32, hosts: Option<&str>, named: u32) {
    let _g = SHM.lock().unwrap_or_else(|p| p.into_inner());
    let before = tca::transport::shm_entries();
    let mut c = Command::new(PROG);
    c.args(["launch", &n.to_string(), "offload-kill-proxy"])
        .env("RANKPROG_OFFLOAD", "1");
    if let Some(h) = hosts {
        c.env("RANKPROG_HOSTS", h);
    }
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 9), "{stdout}\n{stderr}");
    for r in 0..named {
        assert!(
            stdout.lines().any(|l| l == format!("proxy-gone {r}")),
            "rank {r} did not fail naming the proxy:\n{stdout}\n{stderr}"
        );
    }
    assert!(stderr.contains("the node proxy (pid"), "{stderr}");
    assert_eq!(tca::transport::shm_entries(), before);
}

#[test]
fn a_killed_proxy_fails_every_waiting_rank_naming_it() {
    killed_proxy(3, None, 3);
}

#[test]
fn a_serving_thread_that_gives_up_fails_its_rank() {
    let o = Launch {
        ranks: 2,
        program: PROG.into(),
        args: vec!["offload-stuck".into()],
        env: vec![("TCA_TIMEOUT".into(), "0.5".into())],
        offload: Some(vec![PROG.into(), "node-proxy".into()]),
        ..Default::default()
    }
    .run()
    .unwrap();
    // Rank 0's timeout (44), not a hang, and not a rank's own wrong result (1).
    assert_eq!(o.status(), 44, "{o:?}");
    assert_eq!(o.failure.map(|f| f.rank), Some(0), "{o:?}");
}

#[test]
fn an_offloaded_rank_has_no_world_of_its_own() {
    let out = Command::new(PROG)
        .args(["launch", "2", "ring", "3"])
        .env("RANKPROG_OFFLOAD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Proxy::connect"), "{stderr}");
}

/// Two "hosts" of this machine (`localhost` and `127.0.0.1`: started directly, meeting at
/// the launcher's rendezvous), each with its node proxy serving its ranks.
fn across_hosts(n: u32, first: u32, args: &[&str]) -> tca::bootstrap::launcher::Outcome {
    Launch {
        ranks: n,
        program: PROG.into(),
        args: args.iter().map(Into::into).collect(),
        hosts: vec![
            ("localhost".into(), Some(first)),
            ("127.0.0.1".into(), Some(n - first)),
        ],
        offload: Some(vec![PROG.into(), "node-proxy".into()]),
        ..Default::default()
    }
    .run()
    .unwrap()
}

#[test]
fn a_node_proxy_per_host_serves_that_hosts_ranks() {
    let _g = SHM.lock().unwrap_or_else(|p| p.into_inner());
    let before = tca::transport::shm_entries();
    for (n, first) in [(4, 2), (3, 1)] {
        for args in [
            &["offload-coll", "3"][..],
            &["offload-split", "5"],
            &["offload-put", "5"],
        ] {
            let o = across_hosts(n, first, args);
            assert_eq!(
                o.status(),
                0,
                "{n} ranks, {first} on the first host, {args:?}: {o:?}"
            );
            assert_eq!(o.proxy, Some(RankExit::Code(0)), "{args:?}: {o:?}");
        }
    }
    assert_eq!(
        tca::transport::shm_entries(),
        before,
        "shared memory left behind"
    );
}

#[test]
fn a_killed_proxy_of_one_host_stops_the_job_naming_it() {
    // The first host's proxy: its two ranks fail naming it (the other host's fail too, naming
    // a rank that is gone).
    killed_proxy(4, Some("localhost:2,127.0.0.1:2"), 2);
}

#[test]
fn communicators_made_by_the_proxy_at_1_to_6_ranks_node_and_thread() {
    let _g = SHM.lock().unwrap_or_else(|p| p.into_inner());
    let before = tca::transport::shm_entries();
    for n in 1..=6 {
        // 70 made and dropped in turn: more than the 64 a rank may hold.
        let o = offloaded(n, &["offload-split", "70"]);
        assert_eq!(o.status(), 0, "node proxy, {n} ranks: {o:?}");
        assert_eq!(o.proxy, Some(RankExit::Code(0)), "{n} ranks: {o:?}");
        // The same scenario through a progress thread of each rank.
        let o = Launch {
            ranks: n,
            program: PROG.into(),
            args: vec!["offload-split".into(), "70".into()],
            ..Default::default()
        }
        .run()
        .unwrap();
        assert_eq!(o.status(), 0, "progress thread, {n} ranks: {o:?}");
    }
    assert_eq!(tca::transport::shm_entries(), before);
}

#[test]
fn chains_of_puts_through_the_node_proxy_at_1_to_5_ranks() {
    let _g = SHM.lock().unwrap_or_else(|p| p.into_inner());
    let before = tca::transport::shm_entries();
    for n in 1..=5 {
        let o = offloaded(n, &["offload-put", "20"]);
        assert_eq!(o.status(), 0, "{n} ranks: {o:?}");
        assert_eq!(o.proxy, Some(RankExit::Code(0)), "{n} ranks: {o:?}");
    }
    assert_eq!(tca::transport::shm_entries(), before);
}

#[test]
fn ranks_that_never_connect_let_their_proxies_leave() {
    // A program that is not a tca program at all: its proxies learn from the launcher (once
    // every rank has ended) that their ranks are gone, and leave cleanly.
    for hosts in [
        vec![],
        vec![("localhost".into(), Some(1)), ("127.0.0.1".into(), Some(1))],
    ] {
        let o = Launch {
            ranks: 2,
            program: "true".into(),
            hosts: hosts.clone(),
            offload: Some(vec![PROG.into(), "node-proxy".into()]),
            ..Default::default()
        }
        .run()
        .unwrap();
        assert_eq!(o.status(), 0, "{hosts:?}: {o:?}");
        assert_eq!(o.proxy, Some(RankExit::Code(0)), "{hosts:?}: {o:?}");
    }
}
