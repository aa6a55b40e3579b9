//! Allreduce as a pipelined reduce followed by a pipelined broadcast (seed 002 sec. 4.2.4,
//! eqs. 20-28, Table 6).
//!
//! Both phases follow the Trinaryx3 broadcast's pipeline ([`super::bcast`]) over the same
//! shape; the reduce phase also combines each segment at the CPU's reduction throughput T_C
//! (per direction T_C/d), and only it pays the decision overhead t_O; each pays t_S. With d
//! the dimensions (3 in the paper) and `steps` as for the broadcast:
//!
//! ```text
//! t   = t_R + t_B                                                            (eq. 20)
//! t_R = t_O + t_S + steps (d L_S + L_H + m_R/(B/d) + m_R/(T_C/d))
//!       + ((M/d)/m_R - 1) max(d L_S + m_R/(T_C/d), L_H + m_R/(B/d))          (eq. 21)
//! t_B = t_S + steps (d L_S + L_H + m_B/(B/d))
//!       + ((M/d)/m_B - 1) max(d L_S, L_H + m_B/(B/d))                        (eq. 22)
//! t_L = t_O + 2 t_S + steps (...) + steps (...) - max_R - max_B              (eq. 23)
//! t   = t_L + 2M/B',  B' = 2 / (max_R/(d m_R) + max_B/(d m_B))               (eqs. 24, 25)
//! M_1/2 = B' t_L / 2                                                         (eq. 27)
//! ```
//!
//! Seed 002 counts Allreduce throughput on 2M (the data goes down and up), hence the 2 in
//! B' and M_1/2 and the [`Estimate::volume`] of 2. Eq. 25 as printed,
//! `2 / (max(L_S/m_R + 1/T_C, L_H/(3 m_R) + 1/B) + max(L_S/m_B, L_H/(3 m_B) + 1/B))`, is the
//! same expression divided through by 3 m; with K's parameters the reduce side is paced by
//! software and reduction (3 L_S + m_R/(T_C/3) = 15.29 us) and the broadcast side by the
//! transfer (L_H + m_B/(B/3) = 3.877 us), giving B' = 5,129 MB/s and t_L = 512.8 us.
//!
//! Below d·m (less than a segment per direction) a phase sends M/d in one piece, as in the
//! broadcast; with m_B != m_R the two phases switch at different sizes, and
//! [`Allreduce::estimate_at`] takes each phase's own regime.

use super::bcast::{Pipe, pipe};
use super::{
    Estimate, EstimateError, Kind, Param, Regime, Shape, Switch, Term, check_link_times,
    check_rate, check_segment, check_size, per_dir, times,
};

/// The Allreduce estimate's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Allreduce {
    /// Node shape; its dimension count is the number of directions.
    pub shape: Shape,
    /// B, MB/s: bandwidth of all directions together.
    pub b_mb_s: f64,
    /// m_B, bytes: broadcast-phase segment.
    pub m_b_bytes: u64,
    /// m_R, bytes: reduce-phase segment.
    pub m_r_bytes: u64,
    /// T_C, MB/s: reduction throughput ((B_M - 2B)/4 = 4,000 MB/s on K, eq. 28).
    pub t_c_mb_s: f64,
    /// t_O, us: algorithm decision overhead (once, before the reduce).
    pub t_o_us: f64,
    /// t_S, us: address exchange (once per phase).
    pub t_s_us: f64,
    /// L_S, us: software part of the MPI latency.
    pub l_s_us: f64,
    /// L_H, us: hardware part of the MPI latency.
    pub l_h_us: f64,
}

/// One phase's linear form: latency, us per byte, and its terms.
struct Phase {
    t_l: f64,
    per_byte: f64,
    pipelined: bool,
}

impl Allreduce {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), EstimateError> {
        check_rate(Param::Bandwidth, self.b_mb_s)?;
        check_rate(Param::TC, self.t_c_mb_s)?;
        check_segment(Param::Segment, self.m_b_bytes)?;
        check_segment(Param::ReduceSegment, self.m_r_bytes)?;
        check_link_times(self.t_o_us, self.t_s_us, self.l_s_us, self.l_h_us)
    }

    fn d(&self) -> f64 {
        self.shape.d() as f64
    }

    /// The reduce phase's pipeline: fill and beat include the reduction of a segment.
    fn reduce_pipe(&self) -> Pipe {
        let d = self.d();
        let m_r = self.m_r_bytes as f64;
        let reduce = m_r / (self.t_c_mb_s / d);
        let software = d * self.l_s_us + reduce;
        let transfer = self.l_h_us + m_r / (self.b_mb_s / d);
        Pipe {
            d,
            steps: self.shape.bcast_steps() as f64,
            fill: d * self.l_s_us + transfer + reduce,
            beat: software.max(transfer),
            transfer_bound: transfer >= software,
        }
    }

    fn bcast_pipe(&self) -> Pipe {
        pipe(
            &self.shape,
            self.b_mb_s,
            self.m_b_bytes as f64,
            self.l_s_us,
            self.l_h_us,
        )
    }

    /// The reduce phase (t_O, t_S included) in the pipelined or single-segment form.
    fn reduce_phase(&self, pipelined: bool) -> Phase {
        let p = self.reduce_pipe();
        let fixed = self.t_o_us + self.t_s_us;
        if pipelined {
            Phase {
                t_l: fixed + p.steps * p.fill - p.beat,
                per_byte: p.beat / (p.d * self.m_r_bytes as f64),
                pipelined,
            }
        } else {
            Phase {
                t_l: fixed + p.steps * (p.d * self.l_s_us + self.l_h_us),
                per_byte: p.steps * (1.0 / self.b_mb_s + 1.0 / self.t_c_mb_s),
                pipelined,
            }
        }
    }

    /// The broadcast phase (t_S included) in the pipelined or single-segment form.
    fn bcast_phase(&self, pipelined: bool) -> Phase {
        let p = self.bcast_pipe();
        if pipelined {
            Phase {
                t_l: self.t_s_us + p.steps * p.fill - p.beat,
                per_byte: p.beat / (p.d * self.m_b_bytes as f64),
                pipelined,
            }
        } else {
            Phase {
                t_l: self.t_s_us + p.steps * (p.d * self.l_s_us + self.l_h_us),
                per_byte: p.steps / self.b_mb_s,
                pipelined,
            }
        }
    }

    /// Size from which the reduce phase pipelines whole segments: d m_R.
    pub fn reduce_pipelined_from_bytes(&self) -> f64 {
        self.d() * self.m_r_bytes as f64
    }

    /// Size from which the broadcast phase pipelines whole segments: d m_B.
    pub fn bcast_pipelined_from_bytes(&self) -> f64 {
        self.d() * self.m_b_bytes as f64
    }

    /// The regime at `m_bytes`: Pipelined once both phases are, SingleSegment before.
    pub fn regime_at(&self, m_bytes: f64) -> Result<Regime, EstimateError> {
        self.validate()?;
        check_size(m_bytes)?;
        let from = self
            .reduce_pipelined_from_bytes()
            .max(self.bcast_pipelined_from_bytes());
        Ok(if m_bytes >= from {
            Regime::Pipelined
        } else {
            Regime::SingleSegment
        })
    }

    /// Time of an Allreduce of `m_bytes`, us (eqs. 20-22).
    pub fn time_us(&self, m_bytes: f64) -> Result<f64, EstimateError> {
        Ok(self.estimate_at(m_bytes)?.time_us(m_bytes))
    }

    /// The linear form with each phase in its own regime at `m_bytes`.
    pub fn estimate_at(&self, m_bytes: f64) -> Result<Estimate, EstimateError> {
        let regime = self.regime_at(m_bytes)?;
        Ok(self.form(
            regime,
            m_bytes >= self.reduce_pipelined_from_bytes(),
            m_bytes >= self.bcast_pipelined_from_bytes(),
        ))
    }

    /// The linear form of `regime` for both phases (Pipelined: Table 1's row).
    pub fn estimate(&self, regime: Regime) -> Result<Estimate, EstimateError> {
        self.validate()?;
        match regime {
            Regime::Pipelined => Ok(self.form(regime, true, true)),
            Regime::SingleSegment => Ok(self.form(regime, false, false)),
            _ => Err(EstimateError::NoSuchRegime {
                kind: Kind::Allreduce,
                regime,
            }),
        }
    }

    fn form(&self, regime: Regime, reduce_pipelined: bool, bcast_pipelined: bool) -> Estimate {
        let r = self.reduce_phase(reduce_pipelined);
        let b = self.bcast_phase(bcast_pipelined);
        let mut e = Estimate::linear(
            Kind::Allreduce,
            regime,
            r.t_l + b.t_l,
            r.per_byte + b.per_byte,
            2.0,
        );
        let d = self.shape.d();
        let (rp, bp) = (self.reduce_pipe(), self.bcast_pipe());
        e.terms.push(Term {
            expr: format!("steps = {}", self.shape.steps_expr()),
            value: rp.steps,
            unit: "steps",
            note: format!(
                "longest pipeline path over {} nodes, each phase",
                self.shape.nodes()
            ),
        });
        let (sw, bw, tc) = (times(d, "L_S"), per_dir(d, "B"), per_dir(d, "T_C"));
        for (phase, seg, p, pipelined, sw_side) in [
            (
                "reduce",
                "m_R",
                &rp,
                r.pipelined,
                format!("{sw} + m_R/{tc}"),
            ),
            ("bcast", "m_B", &bp, b.pipelined, sw.clone()),
        ] {
            let tr_side = format!("L_H + {seg}/{bw}");
            if pipelined {
                e.terms.push(Term {
                    expr: format!("max({sw_side}, {tr_side})"),
                    value: p.beat,
                    unit: "us",
                    note: if p.transfer_bound {
                        format!("{phase} phase: = {tr_side}, the transfer paces the pipeline")
                    } else {
                        format!("{phase} phase: = {sw_side}, the software paces the pipeline")
                    },
                });
            } else {
                e.terms.push(Term {
                    expr: format!("M/{d} < {seg}"),
                    value: p.d
                        * if phase == "reduce" {
                            self.m_r_bytes as f64
                        } else {
                            self.m_b_bytes as f64
                        },
                    unit: "bytes",
                    note: format!("{phase} phase: one piece per direction, below this size"),
                });
            }
        }
        e
    }

    /// The switches to pipelining of each phase (one if m_B = m_R).
    pub fn switches(&self) -> Result<Vec<Switch>, EstimateError> {
        self.validate()?;
        let (r, b) = (
            self.reduce_pipelined_from_bytes(),
            self.bcast_pipelined_from_bytes(),
        );
        let d = self.shape.d();
        Ok(if r == b {
            vec![Switch {
                bytes: r,
                below: Regime::SingleSegment,
                above: Regime::Pipelined,
                rule: format!(
                    "M >= {} = {}: at least one segment per direction",
                    times(d, "m_R"),
                    times(d, "m_B")
                ),
            }]
        } else {
            let (mr, mb) = (times(d, "m_R"), times(d, "m_B"));
            let (lo, lo_rule, hi, hi_rule) = if r < b {
                (
                    r,
                    format!("reduce phase: M >= {mr}"),
                    b,
                    format!("bcast phase: M >= {mb}"),
                )
            } else {
                (
                    b,
                    format!("bcast phase: M >= {mb}"),
                    r,
                    format!("reduce phase: M >= {mr}"),
                )
            };
            vec![
                Switch {
                    bytes: lo,
                    below: Regime::SingleSegment,
                    above: Regime::SingleSegment,
                    rule: format!("{lo_rule} (the other phase not yet)"),
                },
                Switch {
                    bytes: hi,
                    below: Regime::SingleSegment,
                    above: Regime::Pipelined,
                    rule: format!("{hi_rule}: both phases pipelined"),
                },
            ]
        })
    }
}
