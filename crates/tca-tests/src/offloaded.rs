//! Scenarios of ranks served by a node proxy (`tca run --offload`, `RANKPROG_OFFLOAD=1`):
//! the rank has no world; it posts to its proxy and checks what comes back. Without
//! `--offload` the same scenarios run through a progress thread ([`Proxy::from_env`]).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tca::offload::{Proxy, ProxyComm};
use tca::{ErrorKind, Op, Result};

/// Runs `scenario` if it is one of these (`None`: it is not).
pub fn run(scenario: &str, args: &[String]) -> Option<ExitCode> {
    let f: fn(&Proxy, &[String]) -> Result<bool> = match scenario {
        "offload-coll" => coll,
        "offload-compute" => compute,
        "offload-errors" => errors,
        "offload-exit" => exit,
        "offload-kill-proxy" => kill_proxy,
        "offload-stuck" => stuck,
        "offload-split" => split,
        "offload-put" => put,
        _ => return None,
    };
    let proxy = match Proxy::from_env() {
        Ok(p) => p,
        Err(e) => return Some(super::report(e)),
    };
    Some(match f(&proxy, args) {
        Ok(true) => match proxy.finish() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => super::report(e),
        },
        Ok(false) => ExitCode::from(1),
        Err(e) => super::report(e),
    })
}

fn arg(args: &[String], i: usize, default: u64) -> u64 {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn check(ok: bool, what: &str, rank: u32) -> bool {
    if !ok {
        eprintln!("rank {rank}: wrong result: {what}");
    }
    ok
}

/// Every operation the node proxy takes, all outstanding at once, waited for newest first,
/// `rounds` times with a moving root; each result checked against what this rank computes
/// alone.
fn coll(proxy: &Proxy, args: &[String]) -> Result<bool> {
    let (me, p) = (proxy.rank(), proxy.size());
    let (mu, pu) = (me as usize, p as usize);
    let (n, b) = (1000, 8); // long vectors; per-rank blocks
    let mut ok = true;
    let mut mine = proxy.alloc::<f64>(n)?;
    let mut sum = proxy.alloc::<f64>(n)?;
    let mut bcast = proxy.alloc::<u32>(n)?;
    let mut ag_in = proxy.alloc::<i64>(b)?;
    let mut ag_out = proxy.alloc::<i64>(b * pu)?;
    let mut a2a_in = proxy.alloc::<i64>(b * pu)?;
    let mut a2a_out = proxy.alloc::<i64>(b * pu)?;
    let mut red_in = proxy.alloc::<i32>(n)?;
    let mut red_out = proxy.alloc::<i32>(n)?;
    let mut sc_src = proxy.alloc::<u16>(b * pu)?;
    let mut sc_out = proxy.alloc::<u16>(b)?;
    let mut ga_in = proxy.alloc::<u16>(b)?;
    let mut ga_out = proxy.alloc::<u16>(b * pu)?;
    let mut rs_in = proxy.alloc::<f32>(b * pu)?;
    let mut rs_out = proxy.alloc::<f32>(b)?;
    let mut xor = proxy.alloc::<u64>(n)?;
    let mut msg = proxy.alloc::<u8>(70_000)?;
    let mut got = proxy.alloc::<u8>(70_000)?;
    // Rank r gathers r + 1 elements, in reverse order of ranks.
    let mut counts = proxy.alloc::<u64>(pu)?;
    let mut displs = proxy.alloc::<u64>(pu)?;
    for r in 0..pu {
        counts[r] = r as u64 + 1;
        displs[r] = (r + 1..pu).map(|q| q as u64 + 1).sum();
    }
    let total: usize = (1..=pu).sum();
    let mut agv = proxy.alloc::<u32>(total)?;
    let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
    for round in 0..arg(args, 1, 10) {
        let root = (round % u64::from(p)) as u32;
        let rf = round as f64;
        for (i, x) in mine.iter_mut().enumerate() {
            *x = (mu * 1000 + i) as f64 + rf;
        }
        for (i, x) in bcast.iter_mut().enumerate() {
            *x = if me == root {
                i as u32 ^ round as u32
            } else {
                0
            };
        }
        for (k, x) in ag_in.iter_mut().enumerate() {
            *x = (mu * b + k) as i64 - round as i64;
        }
        for (j, x) in a2a_in.iter_mut().enumerate() {
            *x = (mu * 1_000_000 + j) as i64;
        }
        for (i, x) in red_in.iter_mut().enumerate() {
            *x = ((mu * 7 + i + round as usize) % 13) as i32;
        }
        for (j, x) in sc_src.iter_mut().enumerate() {
            *x = j as u16 + round as u16;
        }
        ga_in.fill(me as u16 * 3 + round as u16);
        for (j, x) in rs_in.iter_mut().enumerate() {
            *x = (mu + j) as f32;
        }
        for (i, x) in xor.iter_mut().enumerate() {
            *x = (1u64 << (mu % 64)) ^ i as u64;
        }
        msg.fill((me as u8).wrapping_add(round as u8));
        agv.fill(u32::MAX);
        let at = displs[mu] as usize;
        for k in 0..=mu {
            agv[at + k] = (mu * 100 + k) as u32 + round as u32;
        }
        let mut status = None;
        proxy.scope(|s| {
            let mut recv = s.irecv(&mut got, prev, 5)?;
            let mut t = vec![
                s.iallreduce(&mine, &mut sum, &Op::Sum)?,
                s.ibroadcast(&mut bcast, root)?,
                s.iallgather(&ag_in, &mut ag_out)?,
                s.ialltoall(&a2a_in, &mut a2a_out)?,
                s.ireduce(&red_in, &mut red_out, &Op::Max, root)?,
                s.iscatter(&sc_src, &mut sc_out, root)?,
                s.igather(&ga_in, &mut ga_out, root)?,
                s.ireduce_scatter(&rs_in, &mut rs_out, &Op::Sum)?,
                s.iallreduce_in_place(&mut xor, &Op::BitXor)?,
                s.iallgatherv_in_place(&mut agv, counts.as_usize(), displs.as_usize())?,
                s.isend(&msg, next, 5)?,
                s.ibarrier()?,
            ];
            while let Some(mut x) = t.pop() {
                x.wait()?;
            }
            status = Some(recv.wait()?);
            Ok(())
        })?;
        ok &= check(
            status.map(|st| (st.source, st.tag, st.bytes)) == Some((prev, 5, 70_000)),
            "receive status",
            me,
        );
        let base: f64 = (0..pu).map(|r| (r * 1000) as f64 + rf).sum();
        ok &= check(
            sum.iter()
                .enumerate()
                .all(|(i, &x)| x == base + (pu * i) as f64),
            "allreduce",
            me,
        );
        ok &= check(
            bcast
                .iter()
                .enumerate()
                .all(|(i, &x)| x == i as u32 ^ round as u32),
            "broadcast",
            me,
        );
        ok &= check(
            ag_out
                .iter()
                .enumerate()
                .all(|(j, &x)| x == j as i64 - round as i64),
            "allgather",
            me,
        );
        ok &= check(
            (0..pu).all(|src| {
                (0..b).all(|k| a2a_out[src * b + k] == (src * 1_000_000 + mu * b + k) as i64)
            }),
            "alltoall",
            me,
        );
        if me == root {
            ok &= check(
                red_out.iter().enumerate().all(|(i, &x)| {
                    x == (0..pu)
                        .map(|r| ((r * 7 + i + round as usize) % 13) as i32)
                        .max()
                        .unwrap_or(0)
                }),
                "reduce",
                me,
            );
            ok &= check(
                ga_out
                    .iter()
                    .enumerate()
                    .all(|(j, &x)| x == (j / b) as u16 * 3 + round as u16),
                "gather",
                me,
            );
        }
        ok &= check(
            sc_out
                .iter()
                .enumerate()
                .all(|(k, &x)| x == (mu * b + k) as u16 + round as u16),
            "scatter",
            me,
        );
        ok &= check(
            rs_out
                .iter()
                .enumerate()
                .all(|(k, &x)| x == (0..pu).map(|r| (r + mu * b + k) as f32).sum::<f32>()),
            "reduce_scatter",
            me,
        );
        let bits = (0..pu).fold(0u64, |a, r| a ^ (1u64 << (r % 64)));
        let parity = if pu % 2 == 1 { u64::MAX } else { 0 };
        ok &= check(
            xor.iter()
                .enumerate()
                .all(|(i, &x)| x == bits ^ (i as u64 & parity)),
            "allreduce in place",
            me,
        );
        ok &= check(
            got.iter()
                .all(|&x| x == (prev as u8).wrapping_add(round as u8)),
            "message",
            me,
        );
        ok &= check(
            (0..pu).all(|r| {
                (0..=r).all(|k| agv[displs[r] as usize + k] == (r * 100 + k) as u32 + round as u32)
            }),
            "allgatherv in place",
            me,
        );
    }
    Ok(ok)
}

/// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds: one clock for every process of the node.
fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Rank 0 posts an allreduce and then computes for `ms` milliseconds without a tca call;
/// the other ranks' allreduces complete meanwhile (through the proxy, which runs rank 0's
/// part): each tells rank 0 when its own completed, and rank 0 checks that was before its
/// computation ended.
fn compute(proxy: &Proxy, args: &[String]) -> Result<bool> {
    let me = proxy.rank();
    let ms = arg(args, 1, 100);
    let mut mine = proxy.alloc::<f64>(1 << 16)?;
    let mut sum = proxy.alloc::<f64>(1 << 16)?;
    mine.fill(f64::from(me) + 1.0);
    let mut when = proxy.alloc::<u64>(1)?;
    let mut ended = 0;
    proxy.scope(|s| {
        let mut a = s.iallreduce(&mine, &mut sum, &Op::Sum)?;
        if me == 0 {
            let t0 = Instant::now();
            let mut x = 1.0f64;
            while t0.elapsed() < Duration::from_millis(ms) {
                for _ in 0..1000 {
                    x = std::hint::black_box(x * 0.999_999 + 1e-6);
                }
            }
            ended = now_ns();
        }
        a.wait()?;
        Ok(())
    })?;
    let p = proxy.size();
    let want = f64::from(p * (p + 1) / 2);
    let mut ok = check(sum.iter().all(|&x| x == want), "allreduce", me);
    if me == 0 {
        for src in 1..p {
            proxy.scope(|s| s.irecv(&mut when, src, 1)?.wait().map(drop))?;
            ok &= check(
                when[0] < ended,
                &format!("rank {src}'s allreduce completed only after rank 0 computed"),
                me,
            );
        }
    } else {
        when[0] = now_ns();
        proxy.scope(|s| s.isend(&when, 0, 1)?.wait().map(drop))?;
    }
    Ok(ok)
}

/// Bad requests get clear errors, and the proxy serves on: a buffer not from `alloc`, a
/// reduction by a function of this process, a command closure; a receive dropped before it
/// completed; more operations outstanding than the queues hold.
fn errors(proxy: &Proxy, _args: &[String]) -> Result<bool> {
    let me = proxy.rank();
    let mut ok = true;
    let plain = vec![1.0f64; 4];
    let mut out = proxy.alloc::<f64>(4)?;
    let e = proxy
        .scope(|s| s.iallreduce(&plain, &mut out, &Op::Sum).map(drop))
        .unwrap_err();
    ok &= check(
        e.kind() == ErrorKind::InvalidArgument && e.message().contains("Proxy::alloc"),
        "a plain buffer is refused",
        me,
    );
    let ones = proxy.alloc::<f64>(4)?;
    let mine = Op::custom(|a, b| a + b);
    let e = proxy
        .scope(|s| s.iallreduce(&ones, &mut out, &mine).map(drop))
        .unwrap_err();
    ok &= check(
        e.message().contains("own function"),
        "a custom reduction is refused",
        me,
    );
    let e = proxy.scope(|s| s.run(|c| c.barrier())).unwrap_err();
    ok &= check(e.message().contains("command"), "a command is refused", me);
    // A receive that no one answers, its ticket dropped unclaimed: cancelled when the scope
    // ends (no write into the buffer after it).
    let mut never = proxy.alloc::<u8>(64)?;
    proxy.scope(|s| s.irecv(&mut never, (me + 1) % proxy.size(), 99).map(drop))?;
    // More operations than the queues hold, all outstanding: the posts wait for room
    // (back-pressure), the proxy keeps what its rank's completion queue cannot take yet.
    let n = 3 * tca::offload::QUEUE_DEPTH;
    proxy.scope(|s| {
        let mut t = Vec::with_capacity(n);
        for _ in 0..n {
            t.push(s.ibarrier()?);
        }
        for mut x in t {
            x.wait()?;
        }
        Ok(())
    })?;
    ok &= check(proxy.in_flight() == 0, "every barrier answered", me);
    // One connection per rank: a second is refused, naming the first.
    let e = Proxy::connect().unwrap_err();
    ok &= check(
        e.message().contains("connected to its node proxy already"),
        "a second connect is refused",
        me,
    );
    // Control requests cross as text; a bad one is an error, not the proxy's end.
    let t = proxy.control("transport")?;
    ok &= check(
        ["shm", "ofi", "shm+ofi"].contains(&t.as_str()),
        "transport",
        me,
    );
    proxy.control("force allreduce recursive_doubling")?;
    ok &= check(
        proxy.control("algorithm allreduce 8")? == "recursive_doubling",
        "forced algorithm",
        me,
    );
    proxy.control("force allreduce auto")?;
    ok &= check(
        proxy.control("force allreduce fastest").is_err(),
        "an unknown algorithm is refused",
        me,
    );
    // The arenas are the communicator's buffers: a large allreduce reads them in place
    // (single copy), and its result is right.
    let big = 1 << 17;
    let mut mine = proxy.alloc::<f64>(big)?;
    for (i, x) in mine.iter_mut().enumerate() {
        *x = (i % 1000) as f64 + f64::from(me);
    }
    let mut sum = proxy.alloc::<f64>(big)?;
    let before: u64 = proxy.control("single-copy-calls")?.parse().unwrap_or(0);
    proxy.scope(|s| s.iallreduce(&mine, &mut sum, &Op::Sum)?.wait().map(drop))?;
    let after: u64 = proxy.control("single-copy-calls")?.parse().unwrap_or(0);
    let p = proxy.size();
    let ranks = f64::from(p * (p - 1) / 2);
    ok &= check(
        sum.iter()
            .enumerate()
            .all(|(i, &x)| x == f64::from(p) * (i % 1000) as f64 + ranks),
        "large allreduce",
        me,
    );
    ok &= check(
        t != "shm" || p == 1 || after > before,
        "a large allreduce over arenas goes single-copy",
        me,
    );
    // Still serving: a collective after the refusals.
    let mut ones = ones;
    ones.fill(1.0);
    proxy.scope(|s| s.iallreduce(&ones, &mut out, &Op::Sum)?.wait().map(drop))?;
    ok &= check(
        out.iter().all(|&x| x == f64::from(proxy.size())),
        "allreduce after the refusals",
        me,
    );
    Ok(ok)
}

/// Rank `who` exits with status `code` after one allreduce; the others then wait in a
/// second one and must get an error (the launcher stops the job).
fn exit(proxy: &Proxy, args: &[String]) -> Result<bool> {
    let (code, who) = (arg(args, 1, 3) as i32, arg(args, 2, 1) as u32);
    let mine = proxy.alloc::<u64>(8)?;
    let mut sum = proxy.alloc::<u64>(8)?;
    proxy.scope(|s| s.iallreduce(&mine, &mut sum, &Op::Sum)?.wait().map(drop))?;
    if proxy.rank() == who {
        std::process::exit(code);
    }
    proxy.scope(|s| s.iallreduce(&mine, &mut sum, &Op::Sum)?.wait().map(drop))?;
    eprintln!(
        "rank {}: a collective completed without rank {who}",
        proxy.rank()
    );
    Ok(false)
}

/// Rank 0 kills the node proxy while every rank waits in a collective that cannot complete
/// (rank 0 never joins it): every rank must get an error naming the proxy.
fn kill_proxy(proxy: &Proxy, _args: &[String]) -> Result<bool> {
    let mine = proxy.alloc::<u64>(8)?;
    let mut sum = proxy.alloc::<u64>(8)?;
    if proxy.rank() == 0 {
        std::thread::sleep(Duration::from_millis(200));
        let pid = std::env::var("TCA_PROXY_PID")
            .ok()
            .and_then(|p| p.parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw)
            .expect("TCA_PROXY_PID");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        std::thread::sleep(Duration::from_millis(50));
    }
    let e = proxy
        .scope(|s| s.iallreduce(&mine, &mut sum, &Op::Sum)?.wait().map(drop))
        .unwrap_err();
    eprintln!("rank {}: {e}", proxy.rank());
    if e.message().contains("node proxy") {
        println!("proxy-gone {}", proxy.rank());
    }
    Err(e)
}

/// Rank 0 waits in an allreduce that the others join only seconds later; with a short
/// `TCA_TIMEOUT` its serving thread gives up, and rank 0 must get that error (not wait on).
fn stuck(proxy: &Proxy, _args: &[String]) -> Result<bool> {
    let mine = proxy.alloc::<u64>(8)?;
    let mut sum = proxy.alloc::<u64>(8)?;
    if proxy.rank() != 0 {
        std::thread::sleep(Duration::from_secs(3));
    }
    proxy.scope(|s| s.iallreduce(&mine, &mut sum, &Op::Sum)?.wait().map(drop))?;
    eprintln!("rank {}: the allreduce completed", proxy.rank());
    Ok(false)
}

/// Communicators the proxy makes on the rank's behalf: split by parity (reversed by key),
/// with collectives and messages on the part and on the world outstanding at once; a split
/// of the part with a rank taking no part; a split while an operation is in flight refused;
/// `rounds` communicators made and dropped in turn (more than a rank may hold at once: each
/// is freed).
fn split(proxy: &Proxy, args: &[String]) -> Result<bool> {
    let (me, p) = (proxy.rank(), proxy.size());
    let mut ok = true;
    let Some(half) = proxy.split(Some(me % 2), -i64::from(me))? else {
        return Ok(check(
            false,
            "a split with a color gave no communicator",
            me,
        ));
    };
    // Same parity, highest world rank first.
    let members: Vec<u32> = (0..p).rev().filter(|r| r % 2 == me % 2).collect();
    let at = members.iter().position(|&r| r == me).unwrap_or(usize::MAX);
    ok &= check(
        half.rank() as usize == at && half.size() as usize == members.len(),
        "split's rank and size",
        me,
    );
    let (hr, hp) = (half.rank(), half.size());
    let mut mine = proxy.alloc::<u64>(300)?;
    let mut sum = proxy.alloc::<u64>(300)?;
    let mut world = proxy.alloc::<u64>(300)?;
    let mut wsum = proxy.alloc::<u64>(300)?;
    let mut root = proxy.alloc::<u32>(17)?;
    let mut out = proxy.alloc::<u32>(5)?;
    let mut back = proxy.alloc::<u32>(5)?;
    mine.fill(u64::from(me) + 1);
    world.fill(1 << me.min(40));
    root.fill(if hr == 0 { me * 10 } else { 0 });
    out.fill(me);
    let (next, prev) = ((hr + 1) % hp, (hr + hp - 1) % hp);
    proxy.scope(|w| {
        half.scope(|s| {
            let mut all = w.iallreduce(&world, &mut wsum, &Op::BitOr)?;
            let mut t = vec![
                s.iallreduce(&mine, &mut sum, &Op::Sum)?,
                s.ibroadcast(&mut root, 0)?,
                s.irecv(&mut back, prev, 3)?,
                s.isend(&out, next, 3)?,
            ];
            all.wait()?;
            for x in &mut t {
                x.wait()?;
            }
            Ok(())
        })
    })?;
    let psum: u64 = members.iter().map(|&r| u64::from(r) + 1).sum();
    ok &= check(sum.iter().all(|&x| x == psum), "allreduce on the part", me);
    let bits = (0..p).fold(0u64, |a, r| a | 1 << r.min(40));
    ok &= check(
        wsum.iter().all(|&x| x == bits),
        "allreduce on the world",
        me,
    );
    ok &= check(
        root.iter().all(|&x| x == members[0] * 10),
        "broadcast on the part",
        me,
    );
    ok &= check(
        back.iter().all(|&x| x == members[prev as usize]),
        "message on the part (ranks of the part)",
        me,
    );
    ok &= check(
        !half.control("transport")?.is_empty(),
        "a control request on the part",
        me,
    );
    // A split of the part: its rank 0 takes no part.
    let rest = half.split((hr != 0).then_some(7), 0)?;
    ok &= check(rest.is_some() == (hr != 0), "a split without a color", me);
    if let Some(rest) = &rest {
        ok &= check(rest.size() == hp - 1, "size without rank 0", me);
        let mut x = proxy.alloc::<u32>(1)?;
        x[0] = 1;
        rest.scope(|s| s.iallreduce_in_place(&mut x, &Op::Sum)?.wait())?;
        ok &= check(x[0] == hp - 1, "allreduce without rank 0", me);
    }
    drop(rest);
    // A split with an operation in flight is refused, and the proxy serves on.
    let mut lone = proxy.alloc::<u8>(1)?;
    let refused = proxy.scope(|s| {
        let _r = s.irecv(&mut lone, me, 99)?;
        Ok(proxy.split(Some(0), 0).err())
    })?;
    ok &= check(
        refused.is_some_and(|e| e.kind() == ErrorKind::InvalidArgument),
        "a split with an operation in flight",
        me,
    );
    // Dropped while an operation of the world's is in flight (freed after it), then a new one.
    let mut w = proxy.alloc::<u64>(4)?;
    w.fill(1);
    proxy.scope(|s| {
        let mut t = s.iallreduce_in_place(&mut w, &Op::Sum)?;
        drop(half);
        t.wait().map(drop)
    })?;
    ok &= check(
        w.iter().all(|&x| x == u64::from(p)),
        "allreduce beside a free",
        me,
    );
    // Made and dropped in turn, more than a rank may hold at once (each must be freed):
    // every round's communicator groups ranks by round.
    for round in 0..arg(args, 1, 20) as u32 {
        let k = round % 3 + 1;
        let Some(c): Option<ProxyComm> = proxy.split(Some(me % k), i64::from(round))? else {
            return Ok(check(
                false,
                "a split with a color gave no communicator",
                me,
            ));
        };
        let mut x = proxy.alloc::<u32>(3)?;
        x.fill(me);
        c.scope(|s| s.iallreduce_in_place(&mut x, &Op::Max)?.wait())?;
        let top = (0..p).filter(|r| r % k == me % k).max().unwrap_or(0);
        ok &= check(
            x.iter().all(|&v| v == top),
            "a made and dropped communicator",
            me,
        );
    }
    Ok(ok)
}

/// One-sided puts through the node proxy: windows, handles traded by an allgather, a chain
/// built once and started `rounds` times with a fresh signal value (each put's data checked
/// by its receiver), a chain of two puts to two peers with an adding signal, and chains the
/// proxy refuses to build.
fn put(proxy: &Proxy, args: &[String]) -> Result<bool> {
    use tca::fabric::{Handle, SignalOp};
    let (me, p) = (proxy.rank(), proxy.size());
    let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
    let mut ok = true;
    let win = proxy.window(256)?;
    let src = proxy.window(64)?;
    let mut mine = proxy.alloc::<u8>(Handle::BYTES)?;
    let mut all = proxy.alloc::<u8>(Handle::BYTES * p as usize)?;
    mine.copy_from_slice(&win.handle().to_bytes());
    proxy.scope(|s| s.iallgather(&mine, &mut all)?.wait())?;
    let handle = |r: u32| Handle::from_bytes(&all[r as usize * Handle::BYTES..][..Handle::BYTES]);
    let (to_next, to_prev, to_root) = (handle(next)?, handle(prev)?, handle(0)?);
    // Word 0 counts rounds; 64..128 takes the previous rank's data.
    let ring = proxy
        .chain()
        .put(&src, 0, &to_next, 64, 64)
        .signal(&to_next, 0, SignalOp::Set(0))
        .build()?;
    ok &= check(
        ring.len() == 1 && ring.bytes() == 64 && ring.has_signal(),
        "a chain's shape",
        me,
    );
    for round in 1..=arg(args, 1, 20) {
        src.write(
            0,
            &[(me as u8).wrapping_mul(31).wrapping_add(round as u8); 64],
        )?;
        proxy.scope(|s| s.istart_with(&ring, SignalOp::Set(round))?.wait())?;
        let seen = win.wait_until(0, round)?;
        let mut got = [0u8; 64];
        win.read(64, &mut got)?;
        let want = (prev as u8).wrapping_mul(31).wrapping_add(round as u8);
        ok &= check(seen == round && got == [want; 64], "a chain's put", me);
        // The next round's put may land only once this one was read.
        proxy.scope(|s| s.ibarrier()?.wait())?;
    }
    // Two puts to two peers, then an adding signal at rank 0: it counts every rank's chain.
    src.write(0, &(u64::from(me) + 100).to_le_bytes())?;
    let two = proxy
        .chain()
        .put(&src, 0, &to_next, 200, 8)
        .put(&src, 0, &to_prev, 208, 8)
        .signal(&to_root, 8, SignalOp::Add(1))
        .build()?;
    proxy.scope(|s| s.istart(&two)?.wait())?;
    if me == 0 {
        ok &= check(
            win.wait_until(8, u64::from(p))? == u64::from(p),
            "an adding signal",
            me,
        );
    }
    proxy.scope(|s| s.ibarrier()?.wait())?;
    let mut word = [0u8; 8];
    win.read(200, &mut word)?;
    ok &= check(
        u64::from_le_bytes(word) == u64::from(prev) + 100,
        "first put",
        me,
    );
    win.read(208, &mut word)?;
    ok &= check(
        u64::from_le_bytes(word) == u64::from(next) + 100,
        "second put",
        me,
    );
    // Refused: a put past the window's end, a forged handle, a misaligned signal word, a
    // read past the end.
    let past = proxy.chain().put(&src, 0, &to_next, 250, 8).build();
    ok &= check(
        past.is_err_and(|e| e.kind() == ErrorKind::OutOfBounds),
        "a put past the end",
        me,
    );
    let mut forged = to_next.to_bytes();
    forged[8] ^= 0x5a; // the key
    let forged = Handle::from_bytes(&forged)?;
    let bad = proxy.chain().put(&src, 0, &forged, 0, 8).build();
    ok &= check(bad.is_err(), "a forged handle", me);
    ok &= check(win.signal_value(4).is_err(), "a misaligned signal word", me);
    // A source dropped before the chain is built, or after: refused, not read.
    let gone = proxy.window(8)?;
    let before = proxy.chain().put(&gone, 0, &to_next, 0, 8);
    drop(gone);
    ok &= check(
        before
            .build()
            .is_err_and(|e| e.kind() == ErrorKind::InvalidHandle),
        "a chain of a dropped source",
        me,
    );
    let later = proxy.window(8)?;
    let built = proxy.chain().put(&later, 0, &to_next, 216, 8).build()?;
    drop(later);
    let started = proxy.scope(|s| s.istart(&built)?.wait());
    ok &= check(
        started.is_err(),
        "a chain started after its source was dropped",
        me,
    );
    // A chain without a signal takes no signal; a wait that cannot end times out.
    let plain = proxy.chain().put(&src, 0, &to_next, 216, 8).build()?;
    ok &= check(
        proxy
            .scope(|s| s.istart_with(&plain, SignalOp::Set(1)).map(drop))
            .is_err_and(|e| e.kind() == ErrorKind::InvalidArgument),
        "a signal for a chain without one",
        me,
    );
    ok &= check(
        win.wait_until_timeout(16, 1, Some(Duration::from_millis(20)))
            .is_err_and(|e| e.kind() == ErrorKind::Timeout),
        "a wait that times out",
        me,
    );
    ok &= check(
        win.read(250, &mut [0; 8])
            .is_err_and(|e| e.kind() == ErrorKind::OutOfBounds),
        "a read past the end",
        me,
    );
    // The proxy serves on.
    proxy.scope(|s| s.ibarrier()?.wait())?;
    Ok(ok)
}
