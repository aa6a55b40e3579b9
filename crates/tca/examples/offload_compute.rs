//! What a progress thread buys a peer: rank 0 starts an allreduce and then computes for `C`
//! milliseconds without calling tca; rank 1 starts the same allreduce and waits for it. With
//! the caller's progress (`Comm::scope`) rank 1's wait lasts until rank 0 is back from its
//! computation; with a progress thread per rank (`offload::Proxy`) rank 0's proxy does its
//! part meanwhile. Prints rank 1's wait and rank 0's whole call per mode, alternating rounds.
//! `cargo run --release -p tca --example offload_compute`
use std::time::{Duration, Instant};

use tca::{Comm, Op, threads};

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

fn main() -> tca::Result<()> {
    let d = Duration::from_millis(10);
    println!(
        "rank 0 computes {} ms after starting the allreduce; us, median of 5 alternating rounds",
        d.as_millis()
    );
    println!(
        "{:>10} {:>16} {:>16} {:>16} {:>16}",
        "f64s", "caller: r1 wait", "thread: r1 wait", "caller: r0 all", "thread: r0 all"
    );
    for n in [1usize, 8192, 131_072, 524_288] {
        let (mut c, mut t) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            c.push(caller(n, d)?);
            t.push(thread(n, d)?);
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
    Ok(())
}
