//! `tca-rankprog SCENARIO [ARGS]`: the rank program the multi-process tests launch.
//!
//! Exit codes: 0 success, 42 a peer died (the error named it, printed as `peer-died R`),
//! 43 the job was aborted, 44 a timeout (printed as `timeout R`), 2 any other error, 1 a
//! failed check.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

mod offloaded;

use tca::bootstrap::launcher::Launch;
use tca::{ErrorKind, SignalOp, World};

fn arg(args: &[String], i: usize, default: u64) -> u64 {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(scenario) = args.first().cloned() else {
        eprintln!("usage: tca-rankprog SCENARIO [ARGS]");
        return ExitCode::from(2);
    };
    if scenario == "launch" {
        // Act as a launcher of this program: `launch N SCENARIO ARGS...`, over the hosts in
        // RANKPROG_HOSTS (with RANKPROG_RSH and RANKPROG_KV_HOST) if set.
        let hosts = match std::env::var("RANKPROG_HOSTS") {
            Ok(h) => match tca::bootstrap::launcher::parse_hosts(&h) {
                Ok(h) => h,
                Err(e) => {
                    eprintln!("launch error: {e}");
                    return ExitCode::from(2);
                }
            },
            Err(_) => Vec::new(),
        };
        let launch = Launch {
            ranks: arg(&args, 1, 2) as u32,
            tag_output: false,
            program: std::env::current_exe().expect("own path").into(),
            args: args[2..].iter().map(Into::into).collect(),
            env: Vec::new(),
            hosts,
            rsh: std::env::var("RANKPROG_RSH")
                .map(|r| r.split_whitespace().map(String::from).collect())
                .unwrap_or_default(),
            kv_host: std::env::var("RANKPROG_KV_HOST").ok(),
            // `RANKPROG_OFFLOAD=1`: with this program as the node proxy.
            offload: std::env::var_os("RANKPROG_OFFLOAD").map(|_| {
                vec![
                    std::env::current_exe().expect("own path").into(),
                    "node-proxy".into(),
                ]
            }),
        };
        return match launch.run() {
            Ok(o) => ExitCode::from(o.status() as u8),
            Err(e) => {
                eprintln!("launch error: {e}");
                ExitCode::from(2)
            }
        };
    }
    if scenario == "open-peer" {
        // `open-peer PID FD`: what attaching to a segment is at bottom, opening the owner's
        // descriptor through /proc, tried by a process that is not a rank at all (the tests
        // run it as another user). 0: refused by the kernel; 1: it opened.
        let path = format!("/proc/{}/fd/{}", arg(&args, 1, 0), arg(&args, 2, 0));
        return match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(_) => {
                println!("opened {path}");
                ExitCode::from(1)
            }
            Err(e) => {
                println!("refused {path}: {e}");
                ExitCode::SUCCESS
            }
        };
    }
    if scenario == "twice" {
        // Two worlds in turn in one process, each meeting the job afresh (under mpirun and
        // Hydra: through the launcher's directory, whose connection outlives the first).
        for _ in 0..2 {
            let w = match tca::init() {
                Ok(w) => w,
                Err(e) => return report(e),
            };
            match ring(&w, 3) {
                Ok(true) => {}
                Ok(false) => return ExitCode::from(1),
                Err(e) => return report(e),
            }
            if let Err(e) = w.finalize() {
                return report(e);
            }
        }
        return ExitCode::SUCCESS;
    }
    if scenario == "node-proxy" {
        // The node proxy of `launch` with RANKPROG_OFFLOAD.
        return match tca::offload::serve_node() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("node proxy: {e}");
                ExitCode::from(1)
            }
        };
    }
    if let Some(code) = offloaded::run(&scenario, &args) {
        return code;
    }
    let world = match tca::init() {
        Ok(w) => w,
        Err(e) => return report(e),
    };
    let r = match scenario.as_str() {
        "ring" => ring(&world, arg(&args, 1, 10)),
        "stress" => stress(&world, arg(&args, 1, 10_000)),
        "soak" => soak(&world, arg(&args, 1, 100_000)),
        "exit" => die(&world, arg(&args, 2, 1) as u32, || {
            std::process::exit(arg(&args, 1, 3) as i32)
        }),
        "sigkill" => die(&world, arg(&args, 1, 1) as u32, || {
            let _ = rustix_kill_self();
        }),
        "wait-forever" => wait_forever(&world),
        "busy-forever" => busy_forever(&world),
        "sigstop" => stuck(&world, arg(&args, 1, 1) as u32),
        "cascade" => cascade(&world),
        "fd-limit" => fd_limit(&world),
        "publish" => publish(&world, &args[1]),
        "steal" => steal(&world, &args[1]),
        "coll" => coll(&world, arg(&args, 1, 200)),
        "sleep-where" => sleep_where(&world),
        "sigkill-in-single-copy" => sigkill_in_single_copy(&world, arg(&args, 1, 1) as u32),
        "p2p" => p2p(&world, arg(&args, 1, 20)),
        #[cfg(feature = "ofi")]
        "net-garbage" => net_garbage(&world, arg(&args, 1, 2000), arg(&args, 2, 1)),
        // Odd ranks outlive their world (and the even ranks' processes) by a second, then
        // say so: nothing may kill them meanwhile (Hydra does, unless PMI was finalized).
        "linger" => world.barrier().map(|()| true),
        "env" => {
            let node: Vec<String> = world.node_ranks().iter().map(u32::to_string).collect();
            println!(
                "rank {} size {} via {} node {} on {}",
                world.rank(),
                world.size(),
                world.launched_by(),
                node.join(","),
                world.transport()
            );
            Ok(true)
        }
        other => {
            eprintln!("unknown scenario {other}");
            return ExitCode::from(2);
        }
    };
    let rank = world.rank();
    match r {
        Ok(true) => match world.finalize() {
            Ok(()) => {
                if scenario == "linger" && rank % 2 == 1 {
                    std::thread::sleep(Duration::from_secs(1));
                    println!("lingered rank {rank}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => report(e),
        },
        Ok(false) => ExitCode::from(1),
        Err(e) => report(e),
    }
}

fn report(e: tca::Error) -> ExitCode {
    use std::io::Write;
    // The reader of stdout may be gone (the job is being torn down): never panic on EPIPE.
    let say = |s: String| {
        let _ = writeln!(std::io::stdout(), "{s}");
    };
    match e.kind() {
        ErrorKind::PeerDied => {
            say(format!("peer-died {}", e.rank().map_or(-1, i64::from)));
            eprintln!("error: {e}");
            ExitCode::from(42)
        }
        ErrorKind::Aborted => {
            say("aborted".into());
            eprintln!("error: {e}");
            ExitCode::from(43)
        }
        ErrorKind::Timeout => {
            say(format!("timeout {}", e.rank().map_or(-1, i64::from)));
            eprintln!("error: {e}");
            ExitCode::from(44)
        }
        _ => {
            eprintln!("error ({:?}): {e}", e.kind());
            ExitCode::from(2)
        }
    }
}

fn rustix_kill_self() -> std::io::Result<()> {
    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL)?;
    std::thread::sleep(Duration::from_secs(10));
    Ok(())
}

/// Each rank sends a patterned message to the next, `rounds` times; checks every byte.
fn ring(w: &World, rounds: u64) -> tca::Result<bool> {
    let seg = w.alloc_symmetric(64 * 1024)?;
    let n = w.size();
    let next = *seg.handle((w.rank() + 1) % n)?;
    let prev = (w.rank() + n - 1) % n;
    let len = 10_000 + w.rank() as usize;
    for k in 1..=rounds {
        let msg: Vec<u8> = (0..len)
            .map(|i| (i as u64 * 7 + k + u64::from(w.rank())) as u8)
            .collect();
        w.put_signal(&next, 128, &msg, &next, 0, SignalOp::Set(k))?;
        w.wait_until(&seg, 0, k)?;
        let plen = 10_000 + prev as usize;
        let mut got = vec![0u8; plen];
        seg.read(128, &mut got)?;
        if got
            .iter()
            .enumerate()
            .any(|(i, &b)| b != (i as u64 * 7 + k + u64::from(prev)) as u8)
        {
            eprintln!("rank {}: corrupt message in round {k}", w.rank());
            return Ok(false);
        }
        w.barrier()?; // the message of round k is read before round k + 1 overwrites it
    }
    println!("ring ok rank {} of {}", w.rank(), n);
    Ok(true)
}

/// Pairs (0-1, 2-3, ...) do `rounds` round trips of random-length messages with random
/// delays, checking every byte.
fn stress(w: &World, rounds: u64) -> tca::Result<bool> {
    let seg = w.alloc_symmetric(8192)?;
    let partner = w.rank() ^ 1;
    if partner >= w.size() {
        return Ok(true);
    }
    let peer = *seg.handle(partner)?;
    let leader = w.rank() % 2 == 0;
    let mut rng = 0x2545_f491_4f6c_dd1du64 ^ u64::from(w.rank());
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for seq in 1..=rounds {
        let len = (next() % 4000) as usize;
        let r = next();
        if r % 128 == 0 {
            std::thread::yield_now();
        } else if r % 8192 == 1 {
            std::thread::sleep(Duration::from_micros(r % 200));
        }
        let mut framed = (len as u64).to_le_bytes().to_vec();
        framed.extend((0..len).map(|i| (seq as u8).wrapping_add(i as u8) ^ w.rank() as u8));
        if leader {
            w.put_signal(&peer, 64, &framed, &peer, 0, SignalOp::Set(seq))?;
        }
        w.wait_until(&seg, 0, seq)?;
        let mut lenb = [0u8; 8];
        seg.read(64, &mut lenb)?;
        let plen = u64::from_le_bytes(lenb) as usize;
        let mut got = vec![0u8; plen];
        seg.read(72, &mut got)?;
        if got
            .iter()
            .enumerate()
            .any(|(i, &b)| b != (seq as u8).wrapping_add(i as u8) ^ partner as u8)
        {
            eprintln!("rank {}: corrupt message {seq}", w.rank());
            return Ok(false);
        }
        if !leader {
            w.put_signal(&peer, 64, &framed, &peer, 0, SignalOp::Set(seq))?;
        }
    }
    println!("stress ok rank {}", w.rank());
    Ok(true)
}

fn maps() -> (usize, u64) {
    let n = std::fs::read_to_string("/proc/self/maps")
        .map(|s| s.lines().count())
        .unwrap_or(0);
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    (n, rss)
}

/// `rounds` 8-byte round trips per pair; the mapping count must not change and resident
/// memory must not grow by more than 256 KiB.
fn soak(w: &World, rounds: u64) -> tca::Result<bool> {
    let seg = w.alloc_symmetric(4096)?;
    let partner = w.rank() ^ 1;
    if partner >= w.size() {
        return Ok(true);
    }
    let peer = *seg.handle(partner)?;
    let mut seq = 0;
    let mut go = |n: u64| -> tca::Result<()> {
        for _ in 0..n {
            seq += 1;
            if w.rank() % 2 == 0 {
                w.put_line(&peer, 0, &[1; 8], seq)?;
                w.wait_until(&seg, 56, seq)?;
            } else {
                w.wait_until(&seg, 56, seq)?;
                w.put_line(&peer, 0, &[1; 8], seq)?;
            }
        }
        Ok(())
    };
    go(1000)?;
    let (m0, r0) = maps();
    go(rounds)?;
    let (m1, r1) = maps();
    println!(
        "soak rank {}: mappings {m0} -> {m1}, rss {r0} -> {r1} KiB",
        w.rank()
    );
    Ok(m0 == m1 && r1 <= r0 + 256)
}

/// After a barrier, rank `victim` dies by `how`; every other rank waits for a signal that
/// never comes and must get an error naming the victim.
fn die(w: &World, victim: u32, how: impl FnOnce()) -> tca::Result<bool> {
    let seg = w.alloc_symmetric(64)?;
    w.barrier()?;
    println!("ready {} pid {}", w.rank(), std::process::id());
    if w.rank() == victim {
        how();
    }
    w.wait_until(&seg, 0, 1)?;
    Ok(false)
}

/// Large collectives over `Comm::buffer`s (single copy: peers read each other's buffers in
/// place) without end; `victim` SIGKILLs itself in the middle of them. The launcher reports
/// it and stops the job: no rank hangs reading or waiting for the dead one.
fn sigkill_in_single_copy(w: &World, victim: u32) -> tca::Result<bool> {
    use tca::{Comm, Op};
    let c = Comm::world(w)?;
    let p = c.size() as usize;
    let n = 1 << 17; // 1 MiB of f64 per block
    let mut s = c.buffer::<f64>(n)?;
    s.fill(f64::from(c.rank()));
    let mut r = c.buffer::<f64>(p * n)?;
    println!("ready {} pid {}", w.rank(), std::process::id());
    for k in 0u64.. {
        if w.rank() == victim && k == 20 {
            let _ = rustix_kill_self();
        }
        c.allgather(&s, &mut r)?;
        c.allreduce(&s, &mut r[..n], &Op::Sum)?;
    }
    Ok(false)
}

/// Two-sided messages between processes around a ring, `rounds` times: eager and rendezvous
/// sizes, blocking receives and waited requests, every rendezvous into plain memory written by
/// cross-memory attach on odd rounds (where the kernel allows it) and through landing buffers
/// on even ones, and into a `Comm::buffer` by one put every third round; every byte checked.
fn p2p(w: &World, rounds: u64) -> tca::Result<bool> {
    use tca::Comm;
    let c = Comm::world(w)?;
    let (p, me) = (c.size(), c.rank());
    let (to, from) = ((me + 1) % p, (me + p - 1) % p);
    let fill = |r: u32, round: u64, n: usize| -> Vec<u8> {
        (0..n)
            .map(|i| (i as u64 * 13 + u64::from(r) * 7 + round).to_le_bytes()[0])
            .collect()
    };
    let mut ok = true;
    // Every third round receives into tca's memory: a rendezvous from a rank of this node is
    // then one put into it (the sender's process attaches the receiver's buffer).
    let mut tbuf = c.buffer::<u8>((2 << 20) + 64)?;
    for round in 0..rounds {
        c.set_cma_min((round % 2 == 1).then_some(0));
        for n in [8usize, 40_000, 300_000, 2 << 20] {
            let out = fill(me, round, n);
            let mut plain = vec![0u8; n];
            let got: &mut [u8] = if round % 3 == 2 {
                &mut tbuf[64..64 + n]
            } else {
                &mut plain
            };
            let tag = i32::try_from(n % 1000).unwrap_or(0);
            let mut s = c.isend(&out, to, tag)?;
            if round % 4 < 2 {
                c.recv_bytes(got, from, tag)?;
            } else {
                c.irecv(got, from, tag)?.wait()?;
            }
            s.wait()?;
            if *got != fill(from, round, n)[..] {
                eprintln!("rank {me}: round {round}, {n} bytes from {from} differ");
                ok = false;
            }
        }
    }
    Ok(ok)
}

fn v(rank: usize, i: usize) -> f64 {
    ((rank * 7 + i * 3) % 11) as f64 + 1.0
}

/// On 4 ranks, nodes {0, 1} and {2, 3}: a binomial broadcast from rank 2 after it slept
/// 100 ms. Rank 0 waits for rank 2 (another node) and must sleep on the network, and really
/// sleep: once a wait's turns look like a descriptor that never blocks (64 quick ones over
/// 2 ms with nothing completed, or 4,096 in all), every turn takes at least 50 us, so its
/// turns stay within `World::network_sleeps_bound` of the time waited whatever the
/// provider's descriptor does. Rank 1 waits for rank 0 (its own node) and must sleep on the
/// shared word, not on the network.
fn sleep_where(w: &World) -> tca::Result<bool> {
    use tca::{Collective, Comm};
    let c = Comm::world(w)?;
    // Shared memory within each node and the network between them (not TCA_TRANSPORT=ofi),
    // and a provider whose completion queue has a descriptor to sleep on (tcp, net).
    if c.size() != 4 || w.is_local(2) == w.is_local(1) || w.transport() != "shm+ofi" {
        eprintln!(
            "sleep-where needs 4 ranks on two nodes of two over shm+ofi, got {} on {}",
            c.size(),
            w.transport()
        );
        return Ok(false);
    }
    c.force(Collective::Broadcast, Some("binomial"))?;
    let mut b = [0u64];
    c.barrier()?;
    let before = w.network_sleeps();
    if w.rank() == 2 {
        std::thread::sleep(Duration::from_millis(100));
        b[0] = 7;
    }
    let t = std::time::Instant::now();
    c.broadcast(&mut b, 2)?;
    let waited = t.elapsed();
    let slept = w.network_sleeps() - before;
    let bound = w.network_sleeps_bound(waited);
    println!(
        "rank {} network-sleeps {slept} in {} us (bound {bound})",
        w.rank(),
        waited.as_micros()
    );
    let ok = b[0] == 7
        && match w.rank() {
            // A busy poll of `net`'s descriptor made 75,761 turns in this wait; the bound
            // (4,097 and one per 50 us) is about 6,100.
            0 => slept > 0 && slept <= bound,
            1 => slept == 0,
            _ => true,
        };
    if !ok {
        eprintln!(
            "rank {}: got {}, {slept} sleeps on the network in the broadcast",
            w.rank(),
            b[0]
        );
    }
    Ok(ok)
}

/// Every registered algorithm that supports the job size, on several sizes and roots, checked
/// against sequential references; then `rounds` back-to-back mixed calls.
fn coll(w: &World, rounds: u64) -> tca::Result<bool> {
    use tca::coll::ALGORITHMS;
    use tca::{Collective, Comm, Op};
    let c = Comm::world(w)?;
    let (p, me) = (c.size() as usize, c.rank() as usize);
    let input = |r: usize, n: usize| -> Vec<f64> { (0..n).map(|i| v(r, i)).collect() };
    let sum = |n: usize| -> Vec<f64> { (0..n).map(|i| (0..p).map(|r| v(r, i)).sum()).collect() };
    for alg in ALGORITHMS.iter().filter(|a| (a.supports)(p)) {
        c.force(alg.collective, Some(alg.name))?;
        for n in [0usize, 1, 7, 4096, 70_000] {
            let root = (n % p) as u32;
            let ok = match alg.collective {
                Collective::Broadcast => {
                    let mut b = if me == root as usize {
                        input(me, n)
                    } else {
                        vec![0.0; n]
                    };
                    c.broadcast(&mut b, root)?;
                    b == input(root as usize, n)
                }
                Collective::Scatter => {
                    let all: Vec<f64> = (0..p * n).map(|i| v(9, i)).collect();
                    let mut r = vec![0.0; n];
                    c.scatter(if me == root as usize { &all } else { &[] }, &mut r, root)?;
                    r == all[me * n..(me + 1) * n]
                }
                Collective::Gather => {
                    let mut r = vec![0.0; if me == root as usize { p * n } else { 0 }];
                    c.gather(&input(me, n), &mut r, root)?;
                    me != root as usize || r == (0..p).flat_map(|q| input(q, n)).collect::<Vec<_>>()
                }
                Collective::Reduce => {
                    let mut r = vec![0.0; n];
                    c.reduce(&input(me, n), &mut r, &Op::Sum, root)?;
                    me != root as usize || r == sum(n)
                }
                Collective::Allgather => {
                    let mut r = vec![0.0; p * n];
                    c.allgather(&input(me, n), &mut r)?;
                    r == (0..p).flat_map(|q| input(q, n)).collect::<Vec<_>>()
                }
                Collective::Allreduce => {
                    let mut r = vec![0.0; n];
                    c.allreduce(&input(me, n), &mut r, &Op::Sum)?;
                    r == sum(n)
                }
                Collective::Barrier => c.barrier().is_ok(),
                Collective::ReduceScatter => {
                    let mut r = vec![0.0; n];
                    c.reduce_scatter(&input(me, p * n), &mut r, &Op::Sum)?;
                    r == sum(p * n)[me * n..(me + 1) * n]
                }
                Collective::Alltoall => {
                    let s: Vec<f64> = (0..p * n).map(|i| (me * 1000 + i) as f64).collect();
                    let mut r = vec![0.0; p * n];
                    c.alltoall(&s, &mut r)?;
                    (0..p).all(|j| (0..n).all(|i| r[j * n + i] == (j * 1000 + me * n + i) as f64))
                }
            };
            if !ok {
                eprintln!(
                    "rank {me}: {} {} wrong at n={n} root={root}",
                    alg.collective.name(),
                    alg.name
                );
                return Ok(false);
            }
        }
        c.force(alg.collective, None)?;
    }
    // Single copy between processes: buffers in tca's memory, from the threshold on.
    let n = tca::coll::SINGLE_COPY_MIN / 8 + 11;
    c.set_single_copy_min(Some(tca::coll::SINGLE_COPY_MIN)); // the default with a core per rank
    let before = c.single_copy_calls();
    let mut s = c.buffer::<f64>(p * n)?;
    for (i, x) in s.iter_mut().enumerate() {
        *x = v(me, i);
    }
    let mut r = c.buffer::<f64>(p * n)?;
    c.allgather(&s[..n], &mut r)?;
    let mut ok = r[..] == (0..p).flat_map(|q| input(q, n)).collect::<Vec<_>>()[..];
    c.allreduce(&s[..n], &mut r[..n], &Op::Sum)?;
    ok &= r[..n] == sum(n)[..];
    let root = (p - 1) as u32;
    c.reduce(&s[..n], &mut r[..n], &Op::Sum, root)?;
    ok &= me != p - 1 || r[..n] == sum(n)[..];
    c.reduce_scatter(&s, &mut r[..n], &Op::Sum)?;
    ok &= r[..n] == sum(p * n)[me * n..(me + 1) * n];
    c.broadcast(&mut s[..n], root)?;
    ok &= s[..n] == input(p - 1, n)[..];
    let calls = c.single_copy_calls() - before;
    let want = if c.single_copy() && p > 1 {
        let cores = tca::bootstrap::job_cpus() as usize;
        4 + u64::from(p <= tca::coll::SINGLE_COPY_ALLREDUCE_RANKS && p <= cores)
    } else {
        0
    };
    if !ok || calls != want {
        eprintln!("rank {me}: single-copy collectives wrong ({calls} of {want} single-copy)");
        return Ok(false);
    }
    for k in 0..rounds {
        let mut x = [k as f64 + me as f64];
        c.allreduce_in_place(&mut x, &Op::Sum)?;
        let mut b = [k; 5];
        c.broadcast(&mut b, (k % p as u64) as u32)?;
        if x[0] != (p as u64 * k) as f64 + (p * (p - 1) / 2) as f64 || b != [k; 5] {
            eprintln!("rank {me}: back-to-back call {k} wrong");
            return Ok(false);
        }
    }
    println!("coll ok rank {me} of {p}");
    Ok(true)
}

/// `victim` stops itself (SIGSTOP: alive, pid and memory intact, but never runs again) while
/// the others go on into Allreduces: with `TCA_TIMEOUT` set they end with a timeout naming
/// the rank they waited for, instead of waiting for ever.
fn stuck(w: &World, victim: u32) -> tca::Result<bool> {
    let c = tca::Comm::world(w)?;
    c.barrier()?;
    if w.rank() == victim
        && rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::STOP)
            .is_err()
    {
        return Ok(false);
    }
    let mut out = [0.0f64; 4];
    for _ in 0..1_000_000 {
        c.allreduce(&[1.0f64; 4], &mut out, &tca::Op::Sum)?;
    }
    Ok(false)
}

/// A failure caused by another rank: rank 2 frees its copy of a segment that rank 1 still
/// writes to; rank 1's write is refused naming rank 2, and rank 1 fails (exits) with that
/// error. The others, waiting in a barrier, end when the launcher aborts the job on rank 1's
/// account: their errors must name rank 2, the first cause (rank 1 blamed it on the board),
/// not rank 1.
fn cascade(w: &World) -> tca::Result<bool> {
    let seg = w.alloc_symmetric(64)?;
    let to2 = *seg.handle(2)?;
    if w.rank() == 1 {
        w.put(&to2, 0, &[1u8; 8])?;
    }
    w.barrier()?;
    if w.rank() == 2 {
        drop(seg);
    }
    w.barrier()?;
    if w.rank() == 1 {
        w.put(&to2, 0, &[2u8; 8])?;
        return Ok(false);
    }
    w.barrier()?;
    Ok(false)
}

/// Rank 0, out of descriptors (its soft RLIMIT_NOFILE lowered to its lowest free descriptor
/// number), writes to rank 1's new segment, which attaching needs a descriptor for: the error
/// must say this process ran out (`Transport`), not that the handle is bad. Prints the kind.
fn fd_limit(w: &World) -> tca::Result<bool> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let seg = w.alloc_symmetric(4096)?;
    let mut ok = true;
    if w.rank() == 0 {
        // The lowest free descriptor number is the one the next open gets.
        let free = {
            let probe = std::fs::File::open("/dev/null").expect("/dev/null");
            std::os::fd::AsRawFd::as_raw_fd(&probe) as u64
        };
        let old = getrlimit(Resource::Nofile);
        let low = Rlimit {
            current: Some(free),
            maximum: old.maximum,
        };
        setrlimit(Resource::Nofile, low).expect("lowering RLIMIT_NOFILE");
        let r = w.put(seg.handle(1)?, 0, &[7]);
        setrlimit(Resource::Nofile, old).expect("restoring RLIMIT_NOFILE");
        let kind = r.err().map(|e| {
            println!("error: {e}");
            e.kind()
        });
        println!("put out of descriptors: {kind:?}");
        ok = kind == Some(ErrorKind::Transport);
    }
    w.barrier()?;
    Ok(ok)
}

/// Rank 0 writes the handle of a segment of its own (and its pid) to FILE, then waits until
/// FILE.done appears (a job that tried to use the handle is finished) and checks that nothing
/// was written into the segment.
fn publish(w: &World, file: &str) -> tca::Result<bool> {
    let seg = w.alloc(4096)?;
    if w.rank() != 0 {
        return Ok(true);
    }
    let h = seg.handle();
    let hex = hex::encode(h.to_bytes());
    let tmp = format!("{file}.part");
    if std::fs::write(
        &tmp,
        format!("{hex} {} {}\n", std::process::id(), h.segment()),
    )
    .is_err()
        || std::fs::rename(&tmp, file).is_err()
    {
        return Ok(false);
    }
    let done = format!("{file}.done");
    for _ in 0..3000 {
        if std::path::Path::new(&done).exists() {
            let mut back = vec![0xaau8; 4096];
            seg.read(0, &mut back)?;
            return Ok(back.iter().all(|&b| b == 0));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(false)
}

/// Another job's ranks take the handle FILE holds and try to write through it: as it is (the
/// other job's id), and with the job id forged to their own (it then names a segment of
/// this job's rank with that number, whose key differs). Both must be refused as invalid
/// handles. Writes FILE.done at the end.
fn steal(w: &World, file: &str) -> tca::Result<bool> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let hex = text.split_whitespace().next().unwrap_or("");
    let stolen = tca::Handle::from_bytes(&hex::decode(hex).unwrap_or_default())?;
    let mut ok = true;
    for h in [stolen, stolen.forged(None, None, None, Some(w.job_id()))] {
        match w.put(&h, 0, &[0x55; 64]) {
            Err(e) if e.kind() == ErrorKind::InvalidHandle => println!("refused: {e}"),
            other => {
                println!("not refused: {other:?}");
                ok = false;
            }
        }
    }
    w.barrier()?;
    if w.rank() == 0 {
        let _ = std::fs::write(format!("{file}.done"), "");
    }
    Ok(ok)
}

/// Allreduces of 8 bytes for ever: waits that end before they would sleep, so only the
/// busy look of a wait (every 1,024 waits, once 10 ms have passed) can notice the
/// launcher's death.
fn busy_forever(w: &World) -> tca::Result<bool> {
    let c = tca::Comm::world(w)?;
    c.barrier()?;
    println!("ready {} pid {}", w.rank(), std::process::id());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let mut out = [0u64];
    loop {
        c.allreduce(&[1u64], &mut out, &tca::Op::Sum)?;
    }
}

fn wait_forever(w: &World) -> tca::Result<bool> {
    let seg = w.alloc_symmetric(64)?;
    w.barrier()?;
    println!("ready {} pid {}", w.rank(), std::process::id());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    w.wait_until(&seg, 0, 1)?;
    Ok(false)
}

/// `net-garbage CASES SEED` (2 ranks over the network transport): rank 1 sends rank 0 CASES
/// messages a confused or hostile peer could send (`tca_tests::netfuzz`: writes in and out
/// of bounds, wrong keys, misaligned and unknown signals and atomics, forged answers and
/// refusals, lying lengths, noise), then its model of what rank 0's target segment must
/// hold. Rank 0 checks the segment against it byte for byte, and that its other segment is
/// untouched; rank 1 that its refused writes were reported to it; both that the job still
/// works (a request each way, a barrier).
#[cfg(feature = "ofi")]
fn net_garbage(w: &World, cases: u64, seed: u64) -> tca::Result<bool> {
    use tca_tests::netfuzz::{Gen, Target};
    const LEN: usize = 4096;
    let me = w.rank();
    if w.size() != 2 || w.transport() != "ofi" {
        eprintln!("net-garbage needs 2 ranks that talk through the network");
        return Ok(false);
    }
    let pattern = |salt: usize| -> Vec<u8> { (0..LEN).map(|i| (i * 31 + salt) as u8).collect() };
    let target = w.alloc_symmetric(LEN)?;
    let canary = w.alloc_symmetric(LEN)?;
    let done = w.alloc_symmetric(LEN + 64)?;
    target.local().write(0, &pattern(7))?;
    canary.local().write(0, &pattern(11))?;
    w.barrier()?;
    if me == 0 {
        // From here rank 0 writes nothing to rank 1 (its go-ahead is a request, an atomic):
        // a refusal of a write that rank 1 sends is a forgery, and must not be taken.
        w.quiet()?;
        w.remote_word(done.handle(1)?, 16)?.store(w, 1)?;
    } else {
        w.wait_until(done.local(), 16, 1)?;
    }
    if me == 1 {
        let t = target.handle(0)?;
        let to = *done.handle(0)?;
        // A first real write, so the refusals of the garbage below are this rank's to hear.
        w.put(&to, 64, &[1])?;
        let goal = Target {
            seg: t.segment(),
            key: t.key(),
            len: LEN,
        };
        let mut g = Gen::new(seed, goal, canary.handle(0)?.segment(), pattern(7));
        for _ in 0..cases {
            w.fuzz_send_raw(0, &g.message())?;
        }
        // The model, then the signal that all is sent (messages between a pair stay in order).
        w.put_signal(&to, 64, &g.image, &to, 0, SignalOp::Set(1))?;
        let first = w.quiet();
        match (&first, g.refusals) {
            (Err(e), n) if n > 0 && e.message().contains("refused") => {}
            (Ok(()), 0) => {}
            _ => {
                eprintln!(
                    "rank 1: {} refusals expected, quiet said {first:?}",
                    g.refusals
                );
                return Ok(false);
            }
        }
        w.quiet()?;
        println!(
            "net-garbage sent {} ({} writes applied, {} refused, {} dropped) seed {seed}",
            g.sent, g.applied, g.refusals, g.dropped
        );
    } else {
        w.wait_until(done.local(), 0, 1)?;
        let (mut got, mut want) = (vec![0u8; LEN], vec![0u8; LEN]);
        target.local().read(0, &mut got)?;
        done.local().read(64, &mut want)?;
        if let Some(i) = (0..LEN).find(|&i| got[i] != want[i]) {
            eprintln!(
                "rank 0: target byte {i} is {} where the model says {} (seed {seed})",
                got[i], want[i]
            );
            return Ok(false);
        }
        canary.local().read(0, &mut got)?;
        if got != pattern(11) {
            eprintln!("rank 0: the canary segment was written (seed {seed})");
            return Ok(false);
        }
    }
    // Requests still work both ways after the garbage (forged answers were not taken): the
    // peer's canary, which nobody wrote, answers its own bytes.
    let word = w.remote_word(canary.handle(1 - me)?, 8)?;
    let got = word.fetch_add(w, 0)?;
    let want = u64::from_le_bytes(pattern(11)[8..16].try_into().expect("8 bytes"));
    if got != want {
        eprintln!("rank {me}: the peer's canary word reads {got:#x}, not {want:#x}");
        return Ok(false);
    }
    w.barrier()?;
    println!("net-garbage ok rank {me}");
    Ok(true)
}
