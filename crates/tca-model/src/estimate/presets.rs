//! The parameter sets of seed 002's Tables 3-7 (and sec. 4.1 for PingPong), named, with the
//! Table 1 cells the paper reports for them: measured on 384 nodes of the K computer
//! ("fit") and from the formulas ("estimate").

use serde::Serialize;

use super::{EstimateError, Kind, Params, Regime, Shape};

/// One column of Table 1: B (MB/s), M_1/2 (bytes), t_L (us).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cells {
    /// B, MB/s.
    pub b_mb_s: f64,
    /// M_1/2, bytes.
    pub m_half_bytes: f64,
    /// t_L, us.
    pub t_l_us: f64,
}

/// A named parameter set of the paper.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preset {
    /// Name (`k-bcast-3d`).
    pub name: &'static str,
    /// What it is, and where in the paper.
    pub about: &'static str,
    /// The operation.
    pub kind: Kind,
    /// The parameters.
    pub params: Params,
    /// The regime of its Table 1 column, where the operation has more than one that the
    /// paper reports.
    pub regime: Option<Regime>,
    /// The message sizes the paper fitted over (inclusive).
    pub fit_range: (u64, u64),
    /// Table 1, fit (measured on K).
    pub paper_fit: Cells,
    /// Table 1, estimate (what the formulas give; the tests check this crate reproduces it).
    pub paper_estimate: Cells,
}

const T_O: f64 = 8.370;
const T_S: f64 = 1.396;
const L_S: f64 = 1.000;
const L_H: f64 = 0.600;
const SEGMENT: u64 = 16 * 1024;
/// Trinaryx3 is used from 128 KiB on; the paper fits Bcast and Allreduce from there.
const TRINARYX3_FROM: u64 = 128 * 1024;

fn shape(dims: &[u32]) -> Shape {
    // The preset shapes are valid by construction; `Shape::new` would accept them.
    Shape {
        dims: dims.to_vec(),
    }
}

fn cells(b_mb_s: f64, m_half_bytes: f64, t_l_us: f64) -> Cells {
    Cells {
        b_mb_s,
        m_half_bytes,
        t_l_us,
    }
}

fn bcast(name: &'static str, about: &'static str, dims: &[u32], b: f64) -> Preset {
    Preset {
        name,
        about,
        kind: Kind::Bcast,
        params: Params {
            shape: Some(shape(dims)),
            b_mb_s: Some(b),
            m_b_bytes: Some(SEGMENT),
            t_o_us: Some(T_O),
            t_s_us: Some(T_S),
            l_s_us: Some(L_S),
            l_h_us: Some(L_H),
            ..Params::default()
        },
        regime: None,
        fit_range: (TRINARYX3_FROM, u64::MAX),
        paper_fit: cells(0.0, 0.0, 0.0),
        paper_estimate: cells(0.0, 0.0, 0.0),
    }
}

fn allgather(name: &'static str, about: &'static str, regime: Regime) -> Preset {
    Preset {
        name,
        about,
        kind: Kind::Allgather,
        params: Params {
            shape: Some(shape(&[8, 6, 8])),
            b_mb_s: Some(15_000.0),
            t_o_us: Some(T_O),
            t_s_us: Some(T_S),
            l_s_us: Some(L_S),
            l_h_us: Some(L_H),
            ..Params::default()
        },
        regime: Some(regime),
        fit_range: (1, u64::MAX),
        paper_fit: cells(0.0, 0.0, 0.0),
        paper_estimate: cells(0.0, 0.0, 0.0),
    }
}

/// Every preset, in Table 1's column order.
pub fn presets() -> Vec<Preset> {
    vec![
        Preset {
            name: "k-pingpong",
            about: "PingPong between neighbouring nodes of K, rendezvous protocol \
                    (13 KiB and up); seed 002 sec. 4.1, Table 2",
            kind: Kind::PingPong,
            params: Params {
                b_mb_s: Some(5_000.0),
                l_s_us: Some(L_S),
                l_h_us: Some(L_H),
                // Table 2: control messages of 40, 64 and 80 bytes, 1.751 + 1.785 + 1.829 us.
                t_ctl_us: Some(5.365),
                rendezvous_bytes: Some(13 * 1024),
                ..Params::default()
            },
            regime: None,
            fit_range: (13 * 1024, u64::MAX),
            paper_fit: cells(4_685.0, 4.894e4, 10.45),
            paper_estimate: cells(5_000.0, 3.483e4, 6.965),
        },
        Preset {
            paper_fit: cells(3_616.0, 1.010e7, 2_795.0),
            paper_estimate: cells(4_226.0, 7.919e6, 1_874.0),
            ..bcast(
                "k-bcast-1d",
                "Bcast (Trinaryx3) on 384 nodes in 1-D, 16 KiB segments; seed 002 Table 3",
                &[384],
                5_000.0,
            )
        },
        Preset {
            paper_fit: cells(7_467.0, 4.092e6, 548.0),
            paper_estimate: cells(8_452.0, 3.477e6, 411.4),
            ..bcast(
                "k-bcast-2d",
                "Bcast (Trinaryx3) on 64x6 nodes, 16 KiB segments; seed 002 Table 4",
                &[64, 6],
                10_000.0,
            )
        },
        Preset {
            paper_fit: cells(10_400.0, 1.756e6, 168.9),
            paper_estimate: cells(12_680.0, 1.818e6, 143.4),
            ..bcast(
                "k-bcast-3d",
                "Bcast (Trinaryx3) on 8x6x8 nodes, 16 KiB segments; seed 002 Table 5",
                &[8, 6, 8],
                15_000.0,
            )
        },
        Preset {
            name: "k-allreduce-3d",
            about: "Allreduce (reduce + bcast, Trinaryx3) on 8x6x8 nodes, 16 KiB segments; \
                    seed 002 Table 6",
            kind: Kind::Allreduce,
            params: Params {
                shape: Some(shape(&[8, 6, 8])),
                b_mb_s: Some(15_000.0),
                m_b_bytes: Some(SEGMENT),
                m_r_bytes: Some(SEGMENT),
                t_c_mb_s: Some(4_000.0),
                t_o_us: Some(T_O),
                t_s_us: Some(T_S),
                l_s_us: Some(L_S),
                l_h_us: Some(L_H),
                ..Params::default()
            },
            regime: None,
            fit_range: (TRINARYX3_FROM, u64::MAX),
            paper_fit: cells(5_266.0, 1.024e6, 388.8),
            paper_estimate: cells(5_129.0, 1.315e6, 512.8),
        },
        Preset {
            fit_range: (1, 32 * 1024),
            paper_fit: cells(149_800.0, 6.206e5, 1_590.0),
            paper_estimate: cells(1_920_000.0, 7.718e6, 1_544.0),
            ..allgather(
                "k-allgather-3d-short",
                "Allgather (3D-multiring) on 8x6x8 nodes, short messages (up to 32 KiB); \
                 seed 002 Table 7",
                Regime::Short,
            )
        },
        Preset {
            fit_range: (64 * 1024, u64::MAX),
            paper_fit: cells(13_210.0, 6.917e3, 201.1),
            paper_estimate: cells(15_040.0, 9.852e3, 251.6),
            ..allgather(
                "k-allgather-3d-long",
                "Allgather (3D-multiring) on 8x6x8 nodes, long messages (64 KiB and up); \
                 seed 002 Table 7",
                Regime::Long,
            )
        },
    ]
}

/// The preset called `name`, or an error listing them.
pub fn preset(name: &str) -> Result<Preset, EstimateError> {
    let all = presets();
    let names: Vec<&'static str> = all.iter().map(|p| p.name).collect();
    all.into_iter()
        .find(|p| p.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| EstimateError::UnknownName {
            what: "preset",
            name: name.to_string(),
            valid: names,
        })
}
