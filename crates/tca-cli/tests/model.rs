//! `tca model ...` as a user types it.

use std::process::Output;

mod common;

use common::{tca, text};

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON output")
}

fn num(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn estimate_reproduces_table1() {
    // Seed 002 Table 1, Bcast 1D: B' 4,226 MB/s, M_1/2 7.919E+06 B, t_L 1,874 us.
    let v = json(&tca(&[
        "model",
        "estimate",
        "--preset",
        "k-bcast-1d",
        "--format",
        "json",
    ]));
    assert_eq!(num(&v, "b_eff_mb_s").round(), 4226.0);
    assert_eq!((num(&v, "m_half_bytes") / 1e3).round(), 7919.0);
    assert_eq!(num(&v, "t_l_us").round(), 1874.0);
    assert_eq!(v["regime"], "pipelined");
    assert!(v.get("t_us").is_none());

    // The Allgather's long regime, with a size: the time is the full formula's.
    let v = json(&tca(&[
        "model",
        "estimate",
        "allgather",
        "--preset",
        "k-allgather-3d-long",
        "--size",
        "64K",
        "--format",
        "json",
    ]));
    assert_eq!(num(&v, "b_eff_mb_s").round(), 15039.0);
    assert_eq!((num(&v, "t_l_us") * 10.0).round(), 2516.0);
    let want = 251.566 + 383.0 * 65536.0 / 15000.0;
    assert!((num(&v, "t_us") - want).abs() < 1e-6, "{v}");
    assert_eq!(v["regime_at_size"], "long");

    // Text prints the row as the paper does.
    let o = tca(&["model", "estimate", "bcast", "--preset", "k-bcast-3d"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.lines().any(|l| l.starts_with("estimate")
            && l.contains("12,680")
            && l.contains("1.818E+06")
            && l.contains("143.4")),
        "{out}"
    );
}

#[test]
fn overrides_and_bad_parameters() {
    // B from 5,000 to 10,000 MB/s over one direction: the segment moves twice as fast.
    let v = json(&tca(&[
        "model",
        "estimate",
        "--preset",
        "k-bcast-1d",
        "--bandwidth",
        "10000",
        "--format",
        "json",
    ]));
    assert!((num(&v, "b_eff_mb_s") - 16384.0 / (0.6 + 1.6384)).abs() < 1e-6);

    for (args, says) in [
        (
            vec![
                "model",
                "estimate",
                "--preset",
                "k-bcast-1d",
                "--bandwidth",
                "0",
            ],
            "B (--bandwidth) = 0: must be a positive number of MB/s",
        ),
        (
            vec![
                "model",
                "estimate",
                "--preset",
                "k-bcast-2d",
                "--segment",
                "0",
            ],
            "m_B (--segment) = 0",
        ),
        (
            vec!["model", "estimate", "bcast", "--shape", "8x6x8"],
            "needs B (--bandwidth), m_B (--segment)",
        ),
        (
            vec![
                "model",
                "estimate",
                "--preset",
                "k-bcast-1d",
                "--shape",
                "8x0x8",
            ],
            "shape `8x0x8`",
        ),
        (
            vec!["model", "estimate", "--preset", "k-bcast-9d"],
            "unknown preset `k-bcast-9d`",
        ),
    ] {
        let o = tca(&args);
        assert!(!o.status.success(), "{args:?}");
        let err = text(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn fit_and_compare_an_imb_file() {
    // IMB text of a PingPong with B = 4,685 MB/s and t_L = 10.45 us (Table 1's fit).
    let mut imb = String::from(
        "#----------------------------------------------------------------\n\
         # Benchmarking PingPong\n\
         # #processes = 2\n\
         #----------------------------------------------------------------\n\
         \x20      #bytes #repetitions      t[usec]   Mbytes/sec\n",
    );
    for k in 0..=22 {
        let m = 1u64 << k;
        let t = 10.45 + m as f64 / 4685.0;
        imb += &format!("{m:>13} {:>12} {t:>12.3} {:>12.2}\n", 1000, m as f64 / t);
    }
    let dir = std::env::temp_dir().join(format!("tca-model-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("pingpong.txt");
    std::fs::write(&file, imb).expect("write IMB file");
    let path = file.to_str().expect("UTF-8 temp path");

    let v = json(&tca(&["model", "fit", path, "--format", "json"]));
    let f = &v[0]["fit"];
    assert_eq!(v[0]["benchmark"], "PingPong");
    assert!((num(f, "b_mb_s") / 4685.0 - 1.0).abs() < 1e-3, "{v}");
    assert!((num(f, "t_l_us") / 10.45 - 1.0).abs() < 1e-3, "{v}");
    assert_eq!(num(f, "points"), 23.0);

    let o = tca(&["model", "fit", path, "--range", "16K:"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("4,685") && out.contains("10.45"), "{out}");

    let o = tca(&["model", "compare", path, "--preset", "k-pingpong"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("-6.3%") && out.contains("+50.0%"), "{out}");

    let o = tca(&["model", "fit", path, "--benchmark", "Bcast"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("nothing matches"),
        "{}",
        text(&o.stderr)
    );
    let o = tca(&["model", "fit", path, "--range", "1M:1K"]);
    assert!(!o.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}
