//! Pipelined broadcast, K's Trinaryx3 (seed 002 secs. 4.2.1-4.2.3, eqs. 9-19, Tables 3-5).
//!
//! The message is split into d parts (d = the shape's dimensions), each sent in its own
//! direction at B/d, in segments of m_B bytes passed along a pipeline. With
//! `steps` the longest path ([`Shape::bcast_steps`]: np - 1, np1 + np2 - 1,
//! np1 + np2 + np3 - 2):
//!
//! ```text
//! t = t_O + t_S + steps · (d L_S + L_H + m_B/(B/d))
//!               + ((M/d)/m_B - 1) · max(d L_S, L_H + m_B/(B/d))        (eqs. 9, 12, 16)
//! t_L = t_O + t_S + steps · (d L_S + L_H + m_B/(B/d)) - max(...)        (eqs. 10, 13, 17)
//! B'  = d m_B / max(d L_S, L_H + m_B/(B/d))                             (eqs. 11, 14, 18)
//! ```
//!
//! The max(): once the pipeline is full, a step costs the software latency d L_S (the
//! software of the d transfers runs one after another, overlapped with the hardware) or the
//! hardware latency plus one segment's transfer, whichever is longer. With K's parameters
//! the transfer wins in 1-, 2- and 3-D (3.877 us against 1, 2, 3 us); the paper prints the
//! formulas with that branch already taken, this code takes whichever is larger.
//!
//! For M < d m_B there is less than a segment per direction, and eqs. 9-16 (which count
//! M/(d m_B) - 1 further segments) would go below their one-segment value. This code then
//! sends M/d in one piece per direction: `t = t_O + t_S + steps (d L_S + L_H + M/B)`, which
//! meets the pipelined formula at M = d m_B ([`Regime::SingleSegment`], not in the paper).

use super::{
    Estimate, EstimateError, Kind, Param, Regime, Shape, Switch, Term, check_link_times,
    check_rate, check_segment, check_size, per_dir, times,
};

/// The broadcast estimate's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Bcast {
    /// Node shape; its dimension count is the number of directions.
    pub shape: Shape,
    /// B, MB/s: bandwidth of all d directions together (5,000 / 10,000 / 15,000 on K).
    pub b_mb_s: f64,
    /// m_B, bytes: pipeline segment.
    pub m_b_bytes: u64,
    /// t_O, us: algorithm decision overhead.
    pub t_o_us: f64,
    /// t_S, us: address exchange.
    pub t_s_us: f64,
    /// L_S, us: software part of the MPI latency.
    pub l_s_us: f64,
    /// L_H, us: hardware part of the MPI latency.
    pub l_h_us: f64,
}

/// The broadcast pipeline's pieces, shared with the Allreduce's broadcast phase.
pub(crate) struct Pipe {
    /// d.
    pub d: f64,
    /// Steps of the longest path.
    pub steps: f64,
    /// A step while the pipeline fills: d L_S + L_H + m_B/(B/d).
    pub fill: f64,
    /// A step once it is full: max(d L_S, L_H + m_B/(B/d)).
    pub beat: f64,
    /// Whether the transfer side of the max() is in force.
    pub transfer_bound: bool,
}

pub(crate) fn pipe(shape: &Shape, b: f64, m_b: f64, l_s: f64, l_h: f64) -> Pipe {
    let d = shape.d() as f64;
    let software = d * l_s;
    let transfer = l_h + m_b / (b / d);
    Pipe {
        d,
        steps: shape.bcast_steps() as f64,
        fill: software + transfer,
        beat: software.max(transfer),
        transfer_bound: transfer >= software,
    }
}

impl Bcast {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), EstimateError> {
        // A `Shape` is checked when it is made (its dimensions are private).
        check_rate(Param::Bandwidth, self.b_mb_s)?;
        check_segment(Param::Segment, self.m_b_bytes)?;
        check_link_times(self.t_o_us, self.t_s_us, self.l_s_us, self.l_h_us)
    }

    fn pipe(&self) -> Pipe {
        pipe(
            &self.shape,
            self.b_mb_s,
            self.m_b_bytes as f64,
            self.l_s_us,
            self.l_h_us,
        )
    }

    /// Size from which whole segments are pipelined: d m_B.
    pub fn pipelined_from_bytes(&self) -> f64 {
        self.shape.d() as f64 * self.m_b_bytes as f64
    }

    /// The regime at `m_bytes`.
    pub fn regime_at(&self, m_bytes: f64) -> Result<Regime, EstimateError> {
        self.validate()?;
        check_size(m_bytes)?;
        Ok(if m_bytes >= self.pipelined_from_bytes() {
            Regime::Pipelined
        } else {
            Regime::SingleSegment
        })
    }

    /// Time of a broadcast of `m_bytes`, us (eqs. 9, 12, 16).
    pub fn time_us(&self, m_bytes: f64) -> Result<f64, EstimateError> {
        let p = self.pipe();
        let fixed = self.t_o_us + self.t_s_us;
        Ok(match self.regime_at(m_bytes)? {
            Regime::Pipelined => {
                fixed + p.steps * p.fill + (m_bytes / p.d / self.m_b_bytes as f64 - 1.0) * p.beat
            }
            _ => fixed + p.steps * (p.d * self.l_s_us + self.l_h_us + m_bytes / self.b_mb_s),
        })
    }

    /// The linear form of `regime` (Pipelined: Table 1's row; or SingleSegment).
    pub fn estimate(&self, regime: Regime) -> Result<Estimate, EstimateError> {
        self.validate()?;
        let p = self.pipe();
        let d = self.shape.d();
        let fixed = self.t_o_us + self.t_s_us;
        let mut terms = vec![Term {
            expr: format!("steps = {}", self.shape.steps_expr()),
            value: p.steps,
            unit: "steps",
            note: format!("longest pipeline path over {} nodes", self.shape.nodes()),
        }];
        let e = match regime {
            Regime::Pipelined => {
                let (sw, tr) = (times(d, "L_S"), format!("L_H + m_B/{}", per_dir(d, "B")));
                terms.push(Term {
                    expr: format!("{sw} + {tr}"),
                    value: p.fill,
                    unit: "us",
                    note: "a step while the pipeline fills".into(),
                });
                terms.push(Term {
                    expr: format!("max({sw}, {tr})"),
                    value: p.beat,
                    unit: "us",
                    note: if p.transfer_bound {
                        format!("= {tr}: the transfer paces the pipeline")
                    } else {
                        format!("= {sw}: the software paces the pipeline")
                    },
                });
                let t_l = fixed + p.steps * p.fill - p.beat;
                let per_byte = p.beat / (p.d * self.m_b_bytes as f64);
                Estimate::linear(Kind::Bcast, regime, t_l, per_byte, 1.0)
            }
            Regime::SingleSegment => {
                terms.push(Term {
                    expr: format!("{} + L_H + (M/{d})/{}", times(d, "L_S"), per_dir(d, "B")),
                    value: p.d * self.l_s_us + self.l_h_us,
                    unit: "us",
                    note: "each step sends the whole M/d at once (value without the transfer)"
                        .into(),
                });
                let t_l = fixed + p.steps * (p.d * self.l_s_us + self.l_h_us);
                Estimate::linear(Kind::Bcast, regime, t_l, p.steps / self.b_mb_s, 1.0)
            }
            _ => {
                return Err(EstimateError::NoSuchRegime {
                    kind: Kind::Bcast,
                    regime,
                });
            }
        };
        Ok(Estimate { terms, ..e })
    }

    /// The switch to pipelining at d m_B.
    pub fn switches(&self) -> Result<Vec<Switch>, EstimateError> {
        self.validate()?;
        Ok(vec![Switch {
            bytes: self.pipelined_from_bytes(),
            below: Regime::SingleSegment,
            above: Regime::Pipelined,
            rule: format!(
                "M >= {}: at least one segment per direction",
                times(self.shape.d(), "m_B")
            ),
        }])
    }
}
