//! Progress bars on stderr for long sweeps: drawn only on a terminal, so piped or captured
//! output (CI, `--out`, tests) stays clean.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `len` steps, visible if `show` and stderr is a terminal; hidden otherwise (every
/// call on a hidden bar is a no-op).
pub fn bar(len: u64, show: bool) -> ProgressBar {
    if !show || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}")
    {
        b.set_style(style);
    }
    b
}
