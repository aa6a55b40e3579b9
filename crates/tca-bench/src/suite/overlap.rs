//! IMB-NBC's measurement of how much of a non-blocking collective overlaps computation.
//!
//! Per benchmark and size, on every rank, as IMB-NBC does it:
//! 1. **t_pure**: time per call of the collective alone — start it, wait for it (the driver's
//!    timed calls, `Backend::calls`);
//! 2. the computation is sized to this rank's t_pure (IMB's `IMB_cpu_exploit`, calibrated to
//!    the pure time so neither side dominates);
//! 3. **t_ovrl**: time per call of start, compute, wait (`Backend::overlapped`), and **t_CPU**,
//!    the part of it spent computing.
//!
//! The row's t_min, t_max and t_avg are over the ranks' t_ovrl; its t_pure, t_CPU and overlap
//! are those of the rank with the largest t_ovrl (IMB-NBC's rule), the overlap being
//! `100 max(0, min(1, (t_pure + t_CPU - t_ovrl) / max(t_pure, t_CPU)))` as IMB-NBC's code
//! computes it ([`tca_model::record::Overlap`]): 100% when the collective hid entirely behind
//! a computation as long as itself, 0% when the two took turns (t_ovrl = their sum).
//!
//! The computation ([`Cpu`]) is a dependent chain of floating-point multiply-adds in
//! registers: it touches no memory the collective uses and calls no library, so what
//! overlaps is what the library moves without its caller — a progress thread, a proxy, a
//! network card, or work the start call itself did. With `--test-calls N` (OSU's `-t`) the
//! computation is cut into N + 1 equal slices with a test of the request between them, as an
//! application that polls does; the tests' time counts as communication, not as t_CPU.

use std::hint::black_box;
use std::time::Instant;

/// Steps of the calibration run (a few milliseconds).
const CALIBRATION_STEPS: u64 = 1 << 21;

/// The computation of the overlap benchmarks, calibrated on this rank's core.
#[derive(Debug, Clone, Copy)]
pub struct Cpu {
    /// Multiply-add steps per microsecond.
    steps_per_us: f64,
}

impl Cpu {
    /// Measures the chain's speed: the fastest of five runs (a run that was preempted is
    /// slower, never faster).
    pub fn calibrate() -> Cpu {
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t0 = Instant::now();
            chain(CALIBRATION_STEPS);
            best = best.min(t0.elapsed().as_secs_f64() * 1e6);
        }
        Cpu {
            steps_per_us: CALIBRATION_STEPS as f64 / best.max(1e-3),
        }
    }

    /// Computes for about `us` microseconds, in `tests + 1` equal slices with a call of `test`
    /// between consecutive slices; returns the microseconds spent computing (the tests not
    /// counted). `test`'s error stops the computation.
    pub fn run<E>(
        &self,
        us: f64,
        tests: u32,
        mut test: impl FnMut() -> Result<(), E>,
    ) -> Result<f64, E> {
        let slices = u64::from(tests) + 1;
        let per = (us.max(0.0) * self.steps_per_us / slices as f64) as u64;
        let mut spent = 0.0;
        for k in 0..slices {
            if k > 0 {
                test()?;
            }
            let t0 = Instant::now();
            chain(per);
            spent += t0.elapsed().as_secs_f64() * 1e6;
        }
        Ok(spent)
    }
}

/// `n` dependent multiply-adds on a register (a chain the compiler cannot shorten: the
/// count is opaque and floating point is not reassociated).
fn chain(n: u64) {
    let mut x = black_box(1.0f64);
    for _ in 0..black_box(n) {
        x = x * 0.999_999_9 + 1e-7;
    }
    black_box(x);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_and_tests() {
        let cpu = Cpu::calibrate();
        assert!(cpu.steps_per_us > 0.0 && cpu.steps_per_us.is_finite());
        let mut calls = 0;
        let spent = cpu
            .run(200.0, 3, || {
                calls += 1;
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!(calls, 3, "a test between each two of the four slices");
        assert!(spent > 0.0);
        // No tests: one slice, the closure never called.
        cpu.run(10.0, 0, || Err::<(), ()>(())).unwrap();
        // A test's error stops the computation and is returned.
        let mut left = 2;
        let e = cpu.run(10.0, 5, || {
            left -= 1;
            if left == 0 { Err("stop") } else { Ok(()) }
        });
        assert_eq!(e, Err("stop"));
    }
}
