use super::*;
use crate::format;

fn model(name: &str) -> (Preset, AnalyticModel) {
    let p = preset(name).unwrap();
    let m = AnalyticModel::from_params(p.kind, &p.params).unwrap();
    (p, m)
}

fn table1(name: &str) -> Estimate {
    let (p, m) = model(name);
    let regime = p.regime.unwrap_or(p.kind.regimes()[0]);
    m.estimate(regime).unwrap()
}

/// Every estimate cell of seed 002's Table 1, as printed.
#[test]
fn table1_estimates_to_the_printed_digit() {
    let printed = [
        ("k-pingpong", "5,000", "3.483E+04", "6.965"),
        ("k-bcast-1d", "4,226", "7.919E+06", "1,874"),
        ("k-bcast-2d", "8,452", "3.477E+06", "411.4"),
        ("k-bcast-3d", "12,680", "1.818E+06", "143.4"),
        ("k-allreduce-3d", "5,129", "1.315E+06", "512.8"),
        ("k-allgather-3d-short", "1,920,000", "7.718E+06", "1,544"),
        ("k-allgather-3d-long", "15,040", "9.852E+03", "251.6"),
    ];
    assert_eq!(presets().len(), printed.len());
    for (name, b, m_half, t_l) in printed {
        let e = table1(name);
        assert_eq!(format::sig(e.b_eff_mb_s, 4), b, "{name} B'");
        assert_eq!(format::exp(e.m_half_bytes, 4), m_half, "{name} M_1/2");
        assert_eq!(format::sig(e.t_l_us, 4), t_l, "{name} t_L");
        // The preset's own copy of the cells agrees with the printed ones.
        let c = preset(name).unwrap().paper_estimate;
        assert_eq!(format::sig(c.b_mb_s, 4), b);
        assert_eq!(format::exp(c.m_half_bytes, 4), m_half);
        assert_eq!(format::sig(c.t_l_us, 4), t_l);
    }
}

#[test]
fn table1_values_in_full() {
    // The unrounded values, worked by hand from the equations.
    let close = |x: f64, want: f64| (x - want).abs() <= 1e-9 * want.abs();
    let e = table1("k-bcast-1d");
    assert!(close(e.t_l_us, 8.370 + 1.396 + 383.0 * 4.8768 - 3.8768));
    assert!(close(e.b_eff_mb_s, 16_384.0 / 3.8768));
    let e = table1("k-allreduce-3d");
    assert!(close(
        e.b_eff_mb_s,
        2.0 / (1.0 / 16_384.0 + 1.0 / 4000.0 + 0.6 / (3.0 * 16_384.0) + 1.0 / 15_000.0)
    ));
    assert!(close(
        e.t_l_us,
        8.370 + 2.0 * 1.396 + 20.0 * 6.8768 + 20.0 * 19.1648 - 19.1648
    ));
    assert!(close(e.m_half_bytes, e.b_eff_mb_s * e.t_l_us / 2.0));
    let e = table1("k-allgather-3d-long");
    assert!(close(e.b_eff_mb_s, 15_000.0 * 384.0 / 383.0));
    assert!(close(e.m_half_bytes, e.b_eff_mb_s * e.t_l_us / 384.0));
    assert_eq!(e.volume, 384.0);
}

/// Inside a regime the full formula is the linear form: t(M) = t_L + volume M / B'.
#[test]
fn full_formula_matches_the_linear_form() {
    for p in presets() {
        let m = AnalyticModel::from_params(p.kind, &p.params).unwrap();
        for size in [0.0, 1.0, 1000.0, 48_000.0, 65_536.0, 1e6, 3e7] {
            let t = m.time_us(size).unwrap();
            let e = m.estimate_at(size).unwrap();
            let lin = e.t_l_us + e.volume * size / e.b_eff_mb_s;
            assert!(
                (t - lin).abs() <= 1e-9 * t,
                "{} at {size}: {t} vs {lin}",
                p.name
            );
            assert_eq!(e.regime, m.regime_at(size).unwrap());
        }
    }
}

/// Each formula is continuous across its switches (except PingPong's protocol change,
/// which adds the control messages at once).
#[test]
fn switches_are_where_the_paper_puts_them() {
    let at = |name: &str| {
        let (_, m) = model(name);
        let s = m.switches().unwrap();
        assert_eq!(s.len(), 1, "{name}");
        (m, s[0].clone())
    };
    let below = |x: f64| x * (1.0 - 1e-9);

    // Allgather: B (4 L_S - L_H) = 15,000 x 3.4 = 51,000 B (49.8 KiB), between the paper's
    // 32 KiB and 64 KiB fit ranges.
    let (m, s) = at("k-allgather-3d-long");
    assert_eq!(s.bytes, 51_000.0);
    assert!((s.bytes / 1024.0 - 49.8).abs() < 0.05);
    assert_eq!((s.below, s.above), (Regime::Short, Regime::Long));
    assert_eq!(m.regime_at(32_768.0).unwrap(), Regime::Short);
    assert_eq!(m.regime_at(below(51_000.0)).unwrap(), Regime::Short);
    assert_eq!(m.regime_at(51_000.0).unwrap(), Regime::Long);
    assert_eq!(m.regime_at(65_536.0).unwrap(), Regime::Long);
    let (a, b) = (
        m.time_us(below(51_000.0)).unwrap(),
        m.time_us(51_000.0).unwrap(),
    );
    assert!((a - b).abs() < 1e-6 * b);

    // PingPong: rendezvous from 13 KiB, 5.365 us of control messages on top.
    let (m, s) = at("k-pingpong");
    assert_eq!(s.bytes, 13_312.0);
    assert_eq!(m.regime_at(13_311.0).unwrap(), Regime::Eager);
    assert_eq!(m.regime_at(13_312.0).unwrap(), Regime::Rendezvous);
    let jump = m.time_us(13_312.0).unwrap() - m.time_us(13_311.0).unwrap();
    assert!((jump - 5.365 - 1.0 / 5000.0).abs() < 1e-9);
    assert!((m.time_us(0.0).unwrap() - 1.6).abs() < 1e-12);

    // Bcast and Allreduce pipeline whole segments from d x 16 KiB on.
    for (name, d) in [
        ("k-bcast-1d", 1.0),
        ("k-bcast-2d", 2.0),
        ("k-bcast-3d", 3.0),
        ("k-allreduce-3d", 3.0),
    ] {
        let (m, s) = at(name);
        assert_eq!(s.bytes, d * 16_384.0, "{name}");
        assert_eq!(
            (s.below, s.above),
            (Regime::SingleSegment, Regime::Pipelined)
        );
        assert_eq!(m.regime_at(below(s.bytes)).unwrap(), Regime::SingleSegment);
        assert_eq!(m.regime_at(s.bytes).unwrap(), Regime::Pipelined);
        let (a, b) = (
            m.time_us(below(s.bytes)).unwrap(),
            m.time_us(s.bytes).unwrap(),
        );
        assert!((a - b).abs() < 1e-6 * b, "{name}: {a} vs {b}");
    }
}

#[test]
fn max_terms_follow_the_parameters() {
    // K's parameters: the transfer paces the broadcast pipeline.
    let e = table1("k-bcast-3d");
    assert!(e.terms.iter().any(|t| t.note.contains("transfer paces")));
    // A fast network (B = 150,000 MB/s over 3 directions): 3 L_S = 3 us exceeds
    // L_H + m_B/(B/3) = 0.93 us, and software paces it: B' = 3 m_B / 3 L_S.
    let p = preset("k-bcast-3d").unwrap();
    let fast = Params {
        b_mb_s: Some(150_000.0),
        ..Params::default()
    }
    .or(&p.params);
    let e = AnalyticModel::from_params(Kind::Bcast, &fast)
        .unwrap()
        .estimate(Regime::Pipelined)
        .unwrap();
    assert!(e.terms.iter().any(|t| t.note.contains("software paces")));
    assert!((e.b_eff_mb_s - 16_384.0).abs() < 1e-9);
    // The Allreduce's two max() sides as the paper takes them (eq. 23's second form).
    let e = table1("k-allreduce-3d");
    let notes: Vec<&str> = e.terms.iter().map(|t| t.note.as_str()).collect();
    assert!(
        notes.iter().any(|n| n.starts_with("reduce phase: = 3L_S")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.starts_with("bcast phase: = L_H")),
        "{notes:?}"
    );
    // No short Allgather when 4 L_S <= L_H.
    let p = preset("k-allgather-3d-long").unwrap();
    let slow_hw = Params {
        l_h_us: Some(5.0),
        ..Params::default()
    }
    .or(&p.params);
    let m = AnalyticModel::from_params(Kind::Allgather, &slow_hw).unwrap();
    assert!(m.switches().unwrap().is_empty());
    assert_eq!(m.regime_at(1.0).unwrap(), Regime::Long);
}

#[test]
fn allreduce_with_different_segments_switches_per_phase() {
    let p = preset("k-allreduce-3d").unwrap();
    let params = Params {
        m_r_bytes: Some(4096),
        ..Params::default()
    }
    .or(&p.params);
    let m = AnalyticModel::from_params(Kind::Allreduce, &params).unwrap();
    let s = m.switches().unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!((s[0].bytes, s[1].bytes), (3.0 * 4096.0, 3.0 * 16_384.0));
    // Continuous at both, and the linear form at each size is exact.
    for x in [s[0].bytes, s[1].bytes] {
        let (a, b) = (m.time_us(x * (1.0 - 1e-9)).unwrap(), m.time_us(x).unwrap());
        assert!((a - b).abs() < 1e-6 * b);
    }
    let e = m.estimate_at(20_000.0).unwrap();
    assert_eq!(e.regime, Regime::SingleSegment);
    assert!(
        e.terms
            .iter()
            .any(|t| t.note.starts_with("bcast phase: one piece"))
    );
}

#[test]
fn bad_parameters_are_clear_errors() {
    let base = preset("k-bcast-3d").unwrap().params;
    let with = |p: Params| AnalyticModel::from_params(Kind::Bcast, &p.or(&base));
    let e = with(Params {
        b_mb_s: Some(0.0),
        ..Params::default()
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "B (--bandwidth) = 0: must be a positive number of MB/s"
    );
    for b in [-5.0, f64::NAN, f64::INFINITY] {
        assert!(
            with(Params {
                b_mb_s: Some(b),
                ..Params::default()
            })
            .is_err()
        );
    }
    let e = with(Params {
        m_b_bytes: Some(0),
        ..Params::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("m_B (--segment) = 0"), "{e}");
    let e = with(Params {
        l_s_us: Some(-1.0),
        ..Params::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("L_S (--l-s)"), "{e}");

    // Missing and stray parameters are named.
    let e = AnalyticModel::from_params(Kind::Allreduce, &Params::default()).unwrap_err();
    let s = e.to_string();
    for p in Kind::Allreduce.params() {
        assert!(s.contains(p.flag()), "{s}");
    }
    let e = with(Params {
        t_c_mb_s: Some(4000.0),
        ..Params::default()
    })
    .unwrap_err();
    assert!(
        matches!(
            e,
            EstimateError::Unused {
                param: Param::TC,
                ..
            }
        ),
        "{e}"
    );

    // Shapes.
    for bad in [
        "",
        "x",
        "0",
        "1",
        "8x0x8",
        "8x1",
        "8x6x8x2",
        "8x-6",
        "8xsix",
        "4294967296",
    ] {
        let e = bad.parse::<Shape>().unwrap_err();
        assert!(e.to_string().starts_with(&format!("shape `{bad}`")), "{e}");
    }
    assert!(Shape::new(vec![]).is_err());
    assert_eq!("8x6x8".parse::<Shape>().unwrap().nodes(), 384);
    assert_eq!("64X6".parse::<Shape>().unwrap().bcast_steps(), 69);
    let ag = preset("k-allgather-3d-long").unwrap().params;
    let e = AnalyticModel::from_params(
        Kind::Allgather,
        &Params {
            shape: Some("384".parse().unwrap()),
            ..Params::default()
        }
        .or(&ag),
    )
    .unwrap_err();
    assert!(e.to_string().contains("3-D shapes only"), "{e}");

    // Sizes and regimes.
    let (_, m) = model("k-bcast-1d");
    assert_eq!(m.time_us(-1.0), Err(EstimateError::BadSize(-1.0)));
    assert!(m.time_us(f64::NAN).is_err());
    let e = m.estimate(Regime::Short).unwrap_err();
    assert!(e.to_string().contains("has no short regime"), "{e}");
    assert!("medium".parse::<Regime>().is_err());
    assert!(
        "alltoall"
            .parse::<Kind>()
            .unwrap_err()
            .to_string()
            .contains("bcast")
    );
    assert!(
        preset("k-bcast-4d")
            .unwrap_err()
            .to_string()
            .contains("k-bcast-3d")
    );
    // A model built by hand with bad fields errors rather than panicking.
    let bad = Bcast {
        shape: "8x6x8".parse().unwrap(),
        b_mb_s: 0.0,
        m_b_bytes: 16_384,
        t_o_us: 0.0,
        t_s_us: 0.0,
        l_s_us: 0.0,
        l_h_us: 0.0,
    };
    assert!(bad.time_us(1e6).is_err() && bad.estimate(Regime::Pipelined).is_err());
}

#[test]
fn fewer_steps_in_more_dimensions() {
    // Eqs. 15 and 19: 383, 69, 20 steps; t_L falls with them.
    let steps: Vec<f64> = ["k-bcast-1d", "k-bcast-2d", "k-bcast-3d"]
        .iter()
        .map(|n| table1(n).terms[0].value)
        .collect();
    assert_eq!(steps, vec![383.0, 69.0, 20.0]);
}
