//! Cost of the fabric's hot path on one core, without any other core involved:
//! put_signal into this rank's own segment, a wait that is already satisfied, and the two
//! puts (`put_inline`: plain 8-byte stores, against `put`: one `memcpy`) by size, which is how
//! `INLINE_MAX` was chosen. Run with
//! `cargo run --release -p tca --example hotpath`.
use std::time::Instant;

fn per_op(n: u64, mut f: impl FnMut(u64) -> tca::Result<()>) -> tca::Result<f64> {
    let t0 = Instant::now();
    for i in 1..=n {
        f(i)?;
    }
    Ok(t0.elapsed().as_nanos() as f64 / n as f64)
}

fn main() -> tca::Result<()> {
    tca::threads::run(1, |w| {
        let seg = w.alloc_symmetric(8192)?;
        let h = *seg.handle(0)?;
        let n = 10_000_000u64;
        let msg = [7u8; 8];
        let mut base = 0;
        for _ in 0..3 {
            let put = per_op(n, |i| {
                w.put_signal(&h, 0, &msg, &h, 56, tca::SignalOp::Set(base + i))
            })?;
            base += n;
            let wait = per_op(n, |_| w.wait_until(&seg, 56, 1).map(|_| ()))?;
            println!("put_signal 8 B: {put:.2} ns/op   satisfied wait_until: {wait:.2} ns/op");
        }
        println!("{:>6} {:>14} {:>14}", "bytes", "inline ns", "memcpy ns");
        let src = vec![3u8; 4096];
        for size in [8usize, 16, 32, 64, 128, 256] {
            let mut best = (f64::MAX, f64::MAX);
            for _ in 0..5 {
                // Vary the offset a little so neither routine sees one fixed alignment.
                let inl = per_op(n / 10, |i| {
                    w.put_inline(&h, (i % 4) as usize * 8, std::hint::black_box(&src[..size]))
                })?;
                let mc = per_op(n / 10, |i| {
                    w.put(&h, (i % 4) as usize * 8, std::hint::black_box(&src[..size]))
                })?;
                best = (best.0.min(inl), best.1.min(mc));
            }
            println!("{size:>6} {:>14.2} {:>14.2}", best.0, best.1);
        }
        Ok(())
    })?;
    Ok(())
}
