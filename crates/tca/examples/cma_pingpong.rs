//! The two rendezvous paths into plain memory side by side: a blocking two-sided ping-pong
//! between two thread ranks, each size timed in alternating rounds with every rendezvous
//! written once by cross-memory attach (`Comm::set_cma_min(Some(0))`) and through a landing
//! buffer and a copy out (`None`). Prints the half round trip per path and their ratio.
//! `cargo run --release -p tca --example cma_pingpong`
use std::time::Instant;

use tca::{Comm, threads};

fn main() -> tca::Result<()> {
    if !tca::p2p::cross_memory_attach() {
        println!("cross-memory attach is not permitted on this machine: nothing to compare");
        return Ok(());
    }
    let sizes = [
        64usize << 10,
        256 << 10,
        1 << 20,
        4 << 20,
        16 << 20,
        64 << 20,
    ];
    let rounds = 5;
    let out = threads::run(2, |w| {
        let c = Comm::world(w)?;
        let peer = 1 - c.rank();
        let mut rows = Vec::new();
        for &n in &sizes {
            let reps = (256usize << 20).div_ceil(n).clamp(4, 2000);
            let mut a = vec![1u8; n];
            let mut b = vec![2u8; n];
            let (mut cma, mut landing) = (Vec::new(), Vec::new());
            for round in 0..2 * rounds {
                let direct = round % 2 == 0;
                c.set_cma_min(direct.then_some(0));
                c.barrier()?;
                let t0 = Instant::now();
                for _ in 0..reps {
                    if c.rank() == 0 {
                        c.send_bytes(&a, peer, 0)?;
                        c.recv_bytes(&mut b, peer, 0)?;
                    } else {
                        c.recv_bytes(&mut b, peer, 0)?;
                        c.send_bytes(&a, peer, 0)?;
                    }
                }
                let half = t0.elapsed().as_secs_f64() * 1e6 / (2 * reps) as f64;
                if direct { &mut cma } else { &mut landing }.push(half);
                std::mem::swap(&mut a, &mut b);
            }
            rows.push((n, median(&mut cma), median(&mut landing)));
        }
        Ok(rows)
    })?;
    println!("# two thread ranks, blocking ping-pong, {rounds} alternating rounds, medians");
    println!("#    bytes   cma [us]  landing [us]   cma/landing   cma GB/s");
    for &(n, cma, landing) in &out[0] {
        println!(
            "{n:>10} {cma:>10.1} {landing:>13.1} {:>13.2} {:>10.2}",
            cma / landing,
            n as f64 / cma / 1e3
        );
    }
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
