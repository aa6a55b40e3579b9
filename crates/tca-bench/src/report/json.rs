//! `--format json`: one document, [`Output`] as serde writes it — the run and its rows (the
//! fields of `tca_model::record`, which `tca model fit` reads back), the notes, the fits and
//! with `--model` the predictions.

use super::Output;

/// The JSON document of `out`, pretty-printed.
pub fn render(out: &Output) -> String {
    // Output holds strings and numbers only: serialising cannot fail.
    serde_json::to_string_pretty(out).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
