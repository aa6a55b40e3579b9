//! Cost of the fabric's hot path without any other core involved: put_signal into this
//! rank's own segment and a wait that is already satisfied. Run with
//! `cargo run --release -p tca --example hotpath`.
use std::time::Instant;

fn main() -> tca::Result<()> {
    tca::threads::run(1, |w| {
        let seg = w.alloc_symmetric(4096)?;
        let h = *seg.handle(0)?;
        let n = 20_000_000u64;
        let msg = [7u8; 8];
        for round in 0..3 {
            let t0 = Instant::now();
            for i in 1..=n {
                w.put_signal(&h, 0, &msg, &h, 56, tca::SignalOp::Set(i + round * n))?;
            }
            let put = t0.elapsed().as_nanos() as f64 / n as f64;
            let t0 = Instant::now();
            for _ in 1..=n {
                w.wait_until(&seg, 56, 1)?;
            }
            let wait = t0.elapsed().as_nanos() as f64 / n as f64;
            println!("put_signal 8 B: {put:.2} ns/op   satisfied wait_until: {wait:.2} ns/op");
        }
        Ok(())
    })?;
    Ok(())
}
