//! `tca-fuzz TARGET`: one of tca's fuzz targets (`tca_tests::TARGETS`), run by AFL++'s
//! `afl-fuzz` in persistent mode. Built instrumented by `cargo afl build`; driven by
//! `scripts/fuzz.sh`, which seeds each target from `fuzz/corpus/TARGET`.
#![forbid(unsafe_code)]

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    if name == "--list" {
        for (n, _) in tca_tests::TARGETS {
            println!("{n}");
        }
        return;
    }
    let Some(target) = tca_tests::target(&name) else {
        let names: Vec<&str> = tca_tests::TARGETS.iter().map(|(n, _)| *n).collect();
        eprintln!(
            "usage: tca-fuzz TARGET (one of: {}), under afl-fuzz",
            names.join(", ")
        );
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| target(data));
}
