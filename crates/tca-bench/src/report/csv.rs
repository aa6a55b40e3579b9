//! `--format csv`: one line per measurement with the provenance columns (machine, date,
//! transport), the record format `tca model fit` and `tca model calibrate --from` read back
//! (`tca_model::record`, which owns the columns).

use super::Output;

/// The CSV of `out`'s rows.
pub fn render(out: &Output) -> String {
    out.run.to_csv()
}
