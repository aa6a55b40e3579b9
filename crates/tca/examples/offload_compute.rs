//! What a proxy buys a peer: rank 0 starts an allreduce and then computes for 10 ms without
//! calling tca; rank 1 starts the same allreduce and waits for it. With the caller's progress
//! (`Comm::scope`) rank 1's wait lasts until rank 0 is back from its computation; with a
//! progress thread per rank (`offload::Proxy::start`) or the node proxy process
//! (`Proxy::connect`, `tca run --offload`) rank 0's proxy does its part meanwhile. Prints rank
//! 1's wait and rank 0's whole call per mode: the caller's and the threads' in alternating
//! rounds (ranks as threads), then the node proxy's (this program launches itself: 2 ranks and
//! the proxy, which is this program too).
//! `cargo run --release -p tca --example offload_compute`
use std::time::{Duration, Instant};

use tca::bootstrap::launcher::{Launch, under_launcher};
use tca::offload::{Proxy, serve_node};
use tca::{Comm, Op, threads};

/// The sizes, in f64s.
const SIZES: [usize; 4] = [1, 8192, 131_072, 524_288];
/// Rank 0's computation.
const COMPUTE: Duration = Duration::from_millis(10);

/// Computes for about `d` without touching memory or calling tca.
fn compute(d: Duration) {
    let t0 = Instant::now();
    let mut x = std::hint::black_box(1.0f64);
    while t0.elapsed() < d {
        for _ in 0..1000 {
            x = x * 0.999_999_9 + 1e-7;
        }
    }
    std::hint::black_box(x);
}

/// (rank 1's wait, rank 0's start + compute + wait), in microseconds.
fn caller(n: usize, d: Duration) -> tca::Result<(f64, f64)> {
    let t = threads::run(2, |w| {
        let c = Comm::world(w)?;
        let mine = vec![1.0f64; n];
        let mut sum = vec![0.0; n];
        c.barrier()?;
        let t0 = Instant::now();
        c.scope(|s| {
            let mut r = s.iallreduce(&mine, &mut sum, &Op::Sum)?;
            if c.rank() == 0 {
                compute(d);
            }
            r.wait().map(drop)
        })?;
        Ok(t0.elapsed().as_secs_f64() * 1e6)
    })?;
    Ok((t[1], t[0]))
}

/// As [`caller`], through a progress thread per rank.
fn thread(n: usize, d: Duration) -> tca::Result<(f64, f64)> {
    let t = threads::run_offloaded(2, |p| {
        let mine = vec![1.0f64; n];
        let mut sum = vec![0.0; n];
        p.scope(|s| s.run(|c| c.barrier()))?;
        let t0 = Instant::now();
        p.scope(|s| {
            let mut r = s.iallreduce(&mine, &mut sum, &Op::Sum)?;
            if p.rank() == 0 {
                compute(d);
            }
            r.wait().map(drop)
        })?;
        Ok(t0.elapsed().as_secs_f64() * 1e6)
    })?;
    Ok((t[1], t[0]))
}

/// A rank of the node proxy's job: (rank 1's wait, rank 0's call) per size, printed by rank 0.
fn node_rank(p: &Proxy) -> tca::Result<()> {
    let mut times = p.alloc::<f64>(5)?;
    let mut theirs = p.alloc::<f64>(1)?;
    for n in SIZES {
        let mut mine = p.alloc::<f64>(n)?;
        mine.fill(1.0);
        let mut sum = p.alloc::<f64>(n)?;
        for t in times.iter_mut() {
            p.scope(|s| s.ibarrier()?.wait().map(drop))?;
            let t0 = Instant::now();
            p.scope(|s| {
                let mut r = s.iallreduce(&mine, &mut sum, &Op::Sum)?;
                if p.rank() == 0 {
                    compute(COMPUTE);
                }
                r.wait().map(drop)
            })?;
            *t = t0.elapsed().as_secs_f64() * 1e6;
        }
        assert!(sum.iter().all(|&x| x == 2.0), "allreduce result");
        times.sort_by(f64::total_cmp);
        if p.rank() == 1 {
            theirs[0] = times[2];
            p.scope(|s| s.isend(&theirs, 0, 1)?.wait().map(drop))?;
        } else {
            p.scope(|s| s.irecv(&mut theirs, 1, 1)?.wait().map(drop))?;
            println!("{n:>10} {:>16.1} {:>16.1}", theirs[0], times[2]);
        }
    }
    Ok(())
}

fn main() -> tca::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("node-proxy") {
        return serve_node();
    }
    if under_launcher() {
        let p = Proxy::connect()?;
        node_rank(&p)?;
        return p.finish();
    }
    println!(
        "rank 0 computes {} ms after starting the allreduce; us, median of 5 alternating rounds",
        COMPUTE.as_millis()
    );
    println!(
        "{:>10} {:>16} {:>16} {:>16} {:>16}",
        "f64s", "caller: r1 wait", "thread: r1 wait", "caller: r0 all", "thread: r0 all"
    );
    for n in SIZES {
        let (mut c, mut t) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            c.push(caller(n, COMPUTE)?);
            t.push(thread(n, COMPUTE)?);
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (mut c1, mut c0): (Vec<f64>, Vec<f64>) = c.into_iter().unzip();
        let (mut t1, mut t0): (Vec<f64>, Vec<f64>) = t.into_iter().unzip();
        println!(
            "{n:>10} {:>16.1} {:>16.1} {:>16.1} {:>16.1}",
            med(&mut c1),
            med(&mut t1),
            med(&mut c0),
            med(&mut t0)
        );
    }
    println!("the node proxy (tca run --offload), median of 5 rounds:");
    println!(
        "{:>10} {:>16} {:>16}",
        "f64s", "proxy: r1 wait", "proxy: r0 all"
    );
    let exe = std::env::current_exe()
        .map_err(|e| tca::Error::program(format!("finding this program: {e}")))?;
    let o = Launch {
        ranks: 2,
        program: exe.clone().into(),
        offload: Some(vec![exe.into(), "node-proxy".into()]),
        ..Default::default()
    }
    .run()?;
    std::process::exit(o.status());
}
