//! K's 3D-multiring Allgather (seed 002 sec. 4.2.5, eqs. 29-34, Table 7).
//!
//! The data is split four ways over the node's four network interfaces (4 directions at
//! B/4 each, so M/4 bytes at B/4 take M/B) and moved around rings in three stages, one per
//! axis of a 3-D shape: stage 1 along np1, stage 2 carries the gathered np1 blocks along
//! np2, stage 3 the np1 np2 blocks along np3. In each stage the first transfer pays the full
//! latency and the later ones pipeline behind it; in all np - 1 block transfers, 3 of them
//! full:
//!
//! ```text
//! t = t_O + t_S + 3 (4 L_S + L_H + M/B) + max(4 L_S, L_H + M/B) (np - 4)        (eq. 29)
//! short, 4 L_S > L_H + M/B, i.e. M < B (4 L_S - L_H):
//!     t_L = t_O + t_S + 3 (4 L_S + L_H) + 4 L_S (np - 4),  B' = B np / 3        (eqs. 30, 31)
//! long, M >= B (4 L_S - L_H):
//!     t_L = t_O + t_S + 3 (4 L_S + L_H) + L_H (np - 4),    B' = B np / (np - 1) (eqs. 32-34)
//! ```
//!
//! The switch is at B (4 L_S - L_H) = 51,000 bytes (49.8 KiB) with K's parameters; with
//! 4 L_S <= L_H there is no short regime.
//!
//! Throughput counts the np M bytes every rank ends up with (volume np). Table 1's M_1/2
//! cells are in message bytes: M_1/2 = B' t_L / np (7.718E+06 = 1,920,000 x 1,544 / 384;
//! 9.852E+03 = 15,040 x 251.6 / 384), the size at which the per-rank block reaches half the
//! peak; B' t_L alone would be the total gathered size at that point.
//!
//! The algorithm works only on 3-D shapes ("applicable only to contiguous 3-D
//! communicators"), so the shape must have three dimensions.

use super::{
    Estimate, EstimateError, Kind, Param, Regime, Shape, Switch, Term, check_link_times,
    check_rate, check_size,
};

/// Directions used at once: K's four Tofu network interfaces.
pub const DIRECTIONS: f64 = 4.0;

/// Ring stages: one per axis of the 3-D shape.
const STAGES: f64 = 3.0;

/// The Allgather estimate's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Allgather {
    /// Node shape, three dimensions.
    pub shape: Shape,
    /// B, MB/s: bandwidth of the four interfaces together (15,000 on K).
    pub b_mb_s: f64,
    /// t_O, us: algorithm decision overhead.
    pub t_o_us: f64,
    /// t_S, us: address exchange.
    pub t_s_us: f64,
    /// L_S, us: software part of the MPI latency.
    pub l_s_us: f64,
    /// L_H, us: hardware part of the MPI latency.
    pub l_h_us: f64,
}

impl Allgather {
    /// Checks the parameters; the shape must be 3-D.
    pub fn validate(&self) -> Result<(), EstimateError> {
        if self.shape.d() != 3 {
            return Err(EstimateError::Shape {
                input: self.shape.to_string(),
                why: "the 3D-multiring Allgather runs on 3-D shapes only, like 8x6x8".into(),
            });
        }
        check_rate(Param::Bandwidth, self.b_mb_s)?;
        check_link_times(self.t_o_us, self.t_s_us, self.l_s_us, self.l_h_us)
    }

    fn np(&self) -> f64 {
        self.shape.nodes() as f64
    }

    /// The short/long switch, B (4 L_S - L_H) bytes; 0 when there is no short regime.
    pub fn switch_bytes(&self) -> f64 {
        (self.b_mb_s * (DIRECTIONS * self.l_s_us - self.l_h_us)).max(0.0)
    }

    /// The regime at `m_bytes`: short below [`Allgather::switch_bytes`], long from it.
    pub fn regime_at(&self, m_bytes: f64) -> Result<Regime, EstimateError> {
        self.validate()?;
        check_size(m_bytes)?;
        Ok(if m_bytes < self.switch_bytes() {
            Regime::Short
        } else {
            Regime::Long
        })
    }

    /// Time of an Allgather of `m_bytes` per rank, us (eq. 29).
    pub fn time_us(&self, m_bytes: f64) -> Result<f64, EstimateError> {
        self.validate()?;
        check_size(m_bytes)?;
        let (sw, hw) = (
            DIRECTIONS * self.l_s_us,
            self.l_h_us + m_bytes / self.b_mb_s,
        );
        Ok(self.t_o_us + self.t_s_us + STAGES * (sw + hw) + sw.max(hw) * (self.np() - 4.0))
    }

    /// The linear form of `regime` (Short: eqs. 30, 31; Long: eqs. 32, 33).
    pub fn estimate(&self, regime: Regime) -> Result<Estimate, EstimateError> {
        self.validate()?;
        let np = self.np();
        let fixed = self.t_o_us + self.t_s_us + STAGES * (DIRECTIONS * self.l_s_us + self.l_h_us);
        let (t_l, per_byte, beat, note) = match regime {
            Regime::Short => (
                fixed + DIRECTIONS * self.l_s_us * (np - 4.0),
                STAGES / self.b_mb_s,
                "4L_S",
                "software latency paces the rings (M < B (4L_S - L_H))",
            ),
            Regime::Long => (
                fixed + self.l_h_us * (np - 4.0),
                (np - 1.0) / self.b_mb_s,
                "L_H + M/B",
                "transfers pace the rings (M >= B (4L_S - L_H))",
            ),
            _ => {
                return Err(EstimateError::NoSuchRegime {
                    kind: Kind::Allgather,
                    regime,
                });
            }
        };
        let mut e = Estimate::linear(Kind::Allgather, regime, t_l, per_byte, np);
        e.terms = vec![
            Term {
                expr: "np - 4".into(),
                value: np - 4.0,
                unit: "steps",
                note: format!(
                    "pipelined block transfers ({} nodes, 3 stages of which the first transfer is full)",
                    self.shape.nodes()
                ),
            },
            Term {
                expr: "max(4L_S, L_H + M/B)".into(),
                value: if regime == Regime::Short {
                    DIRECTIONS * self.l_s_us
                } else {
                    self.l_h_us
                },
                unit: "us",
                note: format!("= {beat}: {note} (value without the M/B part)"),
            },
            Term {
                expr: "B (4L_S - L_H)".into(),
                value: self.switch_bytes(),
                unit: "bytes",
                note: "short/long switch".into(),
            },
        ];
        Ok(e)
    }

    /// The short/long switch (none when 4 L_S <= L_H).
    pub fn switches(&self) -> Result<Vec<Switch>, EstimateError> {
        self.validate()?;
        let at = self.switch_bytes();
        Ok(if at > 0.0 {
            vec![Switch {
                bytes: at,
                below: Regime::Short,
                above: Regime::Long,
                rule: "M >= B (4L_S - L_H): L_H + M/B outgrows 4L_S".into(),
            }]
        } else {
            Vec::new()
        })
    }
}
