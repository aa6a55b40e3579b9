//! What every `tca` command test needs: the binary, run as a user would, and its output as text.

#![allow(dead_code)] // each test crate uses what it needs

use std::process::{Command, Output, Stdio};

/// The `tca` binary under test.
pub const TCA: &str = env!("CARGO_BIN_EXE_tca");

/// Runs `tca ARGS` with no input and collects its output.
pub fn tca(args: &[&str]) -> Output {
    Command::new(TCA)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("tca runs")
}

/// Output bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `tca ARGS`, which must succeed; its standard output.
pub fn ok(args: &[&str]) -> String {
    let o = tca(args);
    assert!(o.status.success(), "tca {args:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

/// Runs `tca ARGS`, which must fail with `needle` in its standard error.
pub fn fails(args: &[&str], needle: &str) {
    let o = tca(args);
    assert!(!o.status.success(), "tca {args:?} should fail");
    let err = text(&o.stderr);
    assert!(
        err.contains(needle),
        "tca {args:?}: `{needle}` not in: {err}"
    );
}
