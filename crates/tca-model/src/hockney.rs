//! Hockney's linear model of one message: a start-up latency, then bytes at a peak rate.
//!
//! ```text
//! t(M) = t_L + M / B                      time of one message of M bytes
//! T(M) = M / t = B / (1 + M_1/2 / M)      throughput
//!      = B · pipe(M / M_1/2),  pipe(x) = 1 / (1 + 1/x)
//! M_1/2 = B · t_L                          the half-performance length: T(M_1/2) = B / 2
//! ```
//!
//! Seed 002 (sec. 3, eqs. 1-8) describes every measured curve and every estimate by the two
//! numbers B and M_1/2 (or, equivalently, B and t_L): B is where the throughput goes for long
//! messages, M_1/2 says how long a message must be to get half of it.
//!
//! Units throughout the crate: B in MB/s (10^6 bytes per second, IMB's Mbytes/sec), which is
//! the same number as bytes per microsecond; M in bytes; t in microseconds. So `M / B` is
//! already in microseconds and `B · t_L` already in bytes, with no conversion factor.

use serde::Serialize;

/// Hockney's `pipe` function (seed 002 eq. 6): `1 / (1 + 1/x)`, 0 at x = 0, 1/2 at x = 1,
/// 1 for large x. Defined as 0 for x <= 0, where the formula has no meaning.
pub fn pipe(x: f64) -> f64 {
    if x > 0.0 { x / (x + 1.0) } else { 0.0 }
}

/// One Hockney curve: peak throughput B and half-performance length M_1/2.
///
/// Throughput here is message bytes over time (IMB's convention). Where seed 002 counts the
/// data an operation moves rather than the message (Allreduce twice the message, Allgather
/// np times), the model of time per message is still a `Hockney` with `B = B' / volume`;
/// [`crate::fit::Fit`] and [`crate::estimate::Estimate`] do that conversion.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Hockney {
    /// Peak throughput B, MB/s (= bytes per us).
    pub b_mb_s: f64,
    /// Half-performance length M_1/2, bytes.
    pub m_half_bytes: f64,
}

impl Hockney {
    /// The curve with peak `b_mb_s` and latency `t_l_us` (M_1/2 = B t_L, eq. 4).
    pub fn from_latency(b_mb_s: f64, t_l_us: f64) -> Hockney {
        Hockney {
            b_mb_s,
            m_half_bytes: b_mb_s * t_l_us,
        }
    }

    /// Start-up latency t_L = M_1/2 / B (eq. 8), us.
    pub fn t_l_us(&self) -> f64 {
        self.m_half_bytes / self.b_mb_s
    }

    /// Time of one message of `m_bytes`, us: t_L + M / B (eq. 1).
    pub fn time_us(&self, m_bytes: f64) -> f64 {
        self.t_l_us() + m_bytes / self.b_mb_s
    }

    /// Throughput at `m_bytes`, MB/s: B · pipe(M / M_1/2) (eq. 5); 0 for M <= 0.
    pub fn throughput_mb_s(&self, m_bytes: f64) -> f64 {
        if m_bytes <= 0.0 {
            return 0.0;
        }
        if self.m_half_bytes <= 0.0 {
            return self.b_mb_s;
        }
        self.b_mb_s * pipe(m_bytes / self.m_half_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipe_shape() {
        assert_eq!(pipe(0.0), 0.0);
        assert_eq!(pipe(-3.0), 0.0);
        assert!((pipe(1.0) - 0.5).abs() < 1e-15);
        assert!(pipe(1e12) > 0.999_999);
    }

    #[test]
    fn time_and_throughput_agree() {
        // Seed 002's PingPong estimate: B = 5,000 MB/s, t_L = 6.965 us.
        let h = Hockney::from_latency(5000.0, 6.965);
        assert!((h.m_half_bytes - 34_825.0).abs() < 1e-9);
        assert!((h.t_l_us() - 6.965).abs() < 1e-12);
        for m in [1.0, 1e3, 34_825.0, 1e6, 1e9] {
            let t = h.time_us(m);
            assert!((h.throughput_mb_s(m) - m / t).abs() < 1e-9 * h.b_mb_s);
        }
        assert!((h.throughput_mb_s(h.m_half_bytes) - 2500.0).abs() < 1e-9);
        assert_eq!(h.throughput_mb_s(0.0), 0.0);
    }
}
