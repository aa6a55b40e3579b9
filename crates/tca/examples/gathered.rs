//! The one-copy gathered vector (`Comm::allgatherv_init`) against the collective Allgatherv
//! into a plain vector (`Comm::allgatherv_in_place`, the algorithm table's choice), the same
//! blocks, alternating rounds; the median time per call of each, and their ratio.
//! `cargo run --release -p tca --example gathered [-- RANKS]` (default 2 ranks, threads).
use std::time::Instant;

use tca::{Comm, threads};

const ROUNDS: usize = 5;

/// Seconds per call of each kind over `iters` calls, measured on rank 0 after a barrier.
fn round(c: &Comm<'_>, per_rank: usize, iters: usize) -> tca::Result<(f64, f64)> {
    let p = c.size() as usize;
    let me = c.rank() as usize;
    let counts = vec![per_rank; p];
    let displs: Vec<usize> = (0..p).map(|r| r * per_rank).collect();
    let mut plain = vec![me as f64; per_rank * p];
    let mut g = c.allgatherv_init::<f64>(per_rank * p, &counts, &displs)?;
    // Warm both paths.
    for _ in 0..iters / 10 + 1 {
        c.allgatherv_in_place(&mut plain, &counts, &displs)?;
        g.block_mut().fill(me as f64);
        g.run(c)?;
    }
    c.barrier()?;
    let t = Instant::now();
    for _ in 0..iters {
        c.allgatherv_in_place(&mut plain, &counts, &displs)?;
    }
    c.barrier()?;
    let collective = t.elapsed().as_secs_f64() / iters as f64;
    let t = Instant::now();
    for _ in 0..iters {
        // The block is written every round (the buffers alternate), as a solver writes its
        // new block: counted against the gathered vector.
        g.block_mut().fill(me as f64);
        g.run(c)?;
    }
    c.barrier()?;
    let direct = t.elapsed().as_secs_f64() / iters as f64;
    assert!(
        g.vector()?
            .iter()
            .enumerate()
            .all(|(i, &x)| x == (i / per_rank) as f64)
    );
    Ok((collective, direct))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> tca::Result<()> {
    let np: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    println!("{np} ranks (threads); per-rank block, median of {ROUNDS} alternating rounds");
    println!(
        "{:>12} {:>16} {:>16} {:>8}",
        "bytes/rank", "allgatherv us", "gathered us", "ratio"
    );
    for bytes in [64usize, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20] {
        let per_rank = bytes / 8;
        let iters = (20_000_000 / bytes.max(1024)).clamp(50, 20_000);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let t = threads::run(np, |w| {
                let c = Comm::world(w)?;
                round(&c, per_rank, iters)
            })?;
            a.push(t[0].0);
            b.push(t[0].1);
        }
        let (a, b) = (median(a), median(b));
        println!(
            "{bytes:>12} {:>16.3} {:>16.3} {:>8.2}",
            a * 1e6,
            b * 1e6,
            b / a
        );
    }
    Ok(())
}
