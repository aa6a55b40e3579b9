//! The two-sided software path on one core: a rank sends 8 bytes to itself and receives them,
//! many times (no other core involved), against the one-sided put_signal + wait on one core.
//! `cargo run --release -p tca --example p2p_selfpath`
use std::time::Instant;

use tca::{Comm, SignalOp, threads};

fn main() -> tca::Result<()> {
    threads::run(1, |w| {
        let c = Comm::world(w)?;
        let seg = w.alloc_symmetric(4096)?;
        let h = *seg.handle(0)?;
        let n = 2_000_000u64;
        for round in 0..3 {
            let mut b = [0u8; 8];
            let t0 = Instant::now();
            for _ in 0..n {
                c.send(&b, 0, 1)?;
                c.recv(&mut b, 0, 1)?;
            }
            let two = t0.elapsed().as_nanos() as f64 / n as f64;
            let t0 = Instant::now();
            for i in 0..n {
                w.put_signal(&h, 0, &b, &h, 56, SignalOp::Set(i + 1 + round * n))?;
                w.wait_until(&seg, 56, i + 1 + round * n)?;
            }
            let one = t0.elapsed().as_nanos() as f64 / n as f64;
            println!("send+recv to self: {two:.1} ns; put_signal+wait_until: {one:.1} ns");
        }
        Ok(())
    })?;
    Ok(())
}
