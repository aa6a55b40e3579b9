//! PingPong between neighbouring nodes (seed 002 sec. 4.1, Table 2).
//!
//! Hockney's model as it stands: `t = t_L + M / B` with B the link bandwidth (5,000 MB/s on
//! K). The latency is the MPI latency L_S + L_H (1.6 us, measured one-sided between
//! neighbours) and, from the rendezvous threshold on (13 KiB on K, where K's MPI changes
//! protocol), the control messages that carry the destination address before the data:
//! 40, 64 and 80 bytes, 1.751 + 1.785 + 1.829 = 5.365 us (Table 2). Table 1's estimate row is
//! the rendezvous regime: t_L = 1.6 + 5.365 = 6.965 us, M_1/2 = B t_L = 3.483E+04 bytes.
//!
//! Below the threshold (eager) the paper gives no estimate; the same formula without the
//! control messages is the obvious reading and is what [`Regime::Eager`] is.

use super::{
    Estimate, EstimateError, Kind, Param, Regime, Switch, Term, check_rate, check_size, check_time,
};

/// The PingPong estimate's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct PingPong {
    /// B, MB/s: link bandwidth.
    pub b_mb_s: f64,
    /// L_S, us: software part of the MPI latency.
    pub l_s_us: f64,
    /// L_H, us: hardware part of the MPI latency.
    pub l_h_us: f64,
    /// t_ctl, us: control messages of a rendezvous transfer (Table 2's total).
    pub t_ctl_us: f64,
    /// Messages of this many bytes and more use the rendezvous protocol.
    pub rendezvous_bytes: u64,
}

impl PingPong {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), EstimateError> {
        check_rate(Param::Bandwidth, self.b_mb_s)?;
        check_time(Param::LS, self.l_s_us)?;
        check_time(Param::LH, self.l_h_us)?;
        check_time(Param::TCtl, self.t_ctl_us)
    }

    /// The regime at `m_bytes`: rendezvous from the threshold on.
    pub fn regime_at(&self, m_bytes: f64) -> Result<Regime, EstimateError> {
        self.validate()?;
        check_size(m_bytes)?;
        Ok(if m_bytes >= self.rendezvous_bytes as f64 {
            Regime::Rendezvous
        } else {
            Regime::Eager
        })
    }

    /// One-way time of a message of `m_bytes`, us: `L_S + L_H [+ t_ctl] + M / B`.
    pub fn time_us(&self, m_bytes: f64) -> Result<f64, EstimateError> {
        let r = self.regime_at(m_bytes)?;
        Ok(self.estimate(r)?.time_us(m_bytes))
    }

    /// The linear form of `regime` (Eager or Rendezvous).
    pub fn estimate(&self, regime: Regime) -> Result<Estimate, EstimateError> {
        self.validate()?;
        let mpi = self.l_s_us + self.l_h_us;
        let mut terms = vec![Term {
            expr: "L_S + L_H".into(),
            value: mpi,
            unit: "us",
            note: "MPI latency between neighbours".into(),
        }];
        let t_l = match regime {
            Regime::Eager => mpi,
            Regime::Rendezvous => {
                terms.push(Term {
                    expr: "t_ctl".into(),
                    value: self.t_ctl_us,
                    unit: "us",
                    note: "control messages before the data (Table 2)".into(),
                });
                mpi + self.t_ctl_us
            }
            _ => {
                return Err(EstimateError::NoSuchRegime {
                    kind: Kind::PingPong,
                    regime,
                });
            }
        };
        let mut e = Estimate::linear(Kind::PingPong, regime, t_l, 1.0 / self.b_mb_s, 1.0);
        e.terms = terms;
        Ok(e)
    }

    /// The protocol switch.
    pub fn switches(&self) -> Result<Vec<Switch>, EstimateError> {
        self.validate()?;
        Ok(vec![Switch {
            bytes: self.rendezvous_bytes as f64,
            below: Regime::Eager,
            above: Regime::Rendezvous,
            rule: "M >= rendezvous threshold: control messages (t_ctl) precede the data".into(),
        }])
    }
}
