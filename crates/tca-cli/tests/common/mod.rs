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
