//! `--plot FILE.png|svg`: latency and throughput against message size, log axes, one line per
//! implementation and benchmark, each Hockney fit dashed in its line's colour.

use std::path::Path;

use anyhow::{Context, Result, bail};
use plotters::coord::Shift;
use plotters::prelude::*;
use tca_model::record::Row;

use crate::report::FitLine;

/// One series: the label and its (bytes, t_avg us) points with bytes > 0.
fn series(rows: &[Row]) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in rows.iter().filter(|r| r.bytes > 0 && r.t_avg_us > 0.0) {
        let label = format!("{} {}", r.implementation, r.benchmark);
        let p = (r.bytes as f64, r.t_avg_us);
        match out.iter_mut().find(|(l, _)| *l == label) {
            Some((_, v)) => v.push(p),
            None => out.push((label, vec![p])),
        }
    }
    out
}

/// Checks that `path` names a PNG or SVG file in an existing directory, before a long run.
pub fn check_path(path: &Path) -> Result<()> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if !matches!(ext.as_deref(), Some("png" | "svg")) {
        bail!(
            "--plot {}: the file name must end in .png or .svg",
            path.display()
        );
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(d) = dir
        && !d.is_dir()
    {
        bail!("--plot {}: no directory {}", path.display(), d.display());
    }
    Ok(())
}

/// Draws the plot to `path` (PNG or SVG by extension).
pub fn draw(path: &Path, title: &str, rows: &[Row], fits: &[FitLine]) -> Result<()> {
    let s = series(rows);
    if s.is_empty() {
        bail!("--plot: no measurement with a non-zero size to plot");
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let size = (1400, 600);
    match ext.as_deref() {
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            panels(&root, title, &s, fits)?;
            root.present()
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            panels(&root, title, &s, fits)?;
            root.present()
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        _ => bail!(
            "--plot {}: the file name must end in .png or .svg",
            path.display()
        ),
    }
    Ok(())
}

type Series = (String, Vec<(f64, f64)>);

fn panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    s: &[Series],
    fits: &[FitLine],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(err)?;
    let (left, right) = root.split_horizontally(700);
    let xs = s.iter().flat_map(|(_, v)| v.iter().map(|p| p.0));
    let (xmin, xmax) = bounds(xs);
    let lat: Vec<Series> = s.to_vec();
    let thr: Vec<Series> = s
        .iter()
        .map(|(l, v)| (l.clone(), v.iter().map(|&(m, t)| (m, m / t)).collect()))
        .collect();
    panel(
        &left,
        "latency",
        "t_avg [usec]",
        &lat,
        fits,
        (xmin, xmax),
        false,
    )?;
    panel(&right, "throughput", "MB/s", &thr, fits, (xmin, xmax), true)?;
    Ok(())
}

fn bounds(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = v.fold((f64::INFINITY, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
    if lo.is_finite() && hi > 0.0 {
        (lo / 1.5, hi * 1.5)
    } else {
        (1.0, 10.0)
    }
}

fn err<E: std::error::Error + Send + Sync + 'static>(e: DrawingAreaErrorKind<E>) -> anyhow::Error {
    anyhow::anyhow!("drawing the plot: {e} (are fonts installed? Debian: fonts-dejavu-core)")
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    ylabel: &str,
    s: &[Series],
    fits: &[FitLine],
    x: (f64, f64),
    throughput: bool,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let (ymin, ymax) = bounds(s.iter().flat_map(|(_, v)| v.iter().map(|p| p.1)));
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((x.0..x.1).log_scale(), (ymin..ymax).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("message size [bytes]")
        .y_desc(ylabel)
        .x_label_formatter(&|v| human(*v))
        .draw()
        .map_err(err)?;
    for (i, (label, pts)) in s.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))
            .map_err(err)?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled())))
            .map_err(err)?;
        if let Some(f) = fits
            .iter()
            .find(|f| format!("{} {}", f.implementation, f.benchmark) == *label)
        {
            let curve: Vec<(f64, f64)> = log_points(f.min_bytes as f64, f.max_bytes as f64)
                .map(|m| {
                    let t = f.t_l_us + m / f.b_mb_s;
                    (m, if throughput { m / t } else { t })
                })
                .collect();
            chart
                .draw_series(DashedLineSeries::new(curve, 6, 4, colour.stroke_width(1)))
                .map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(if throughput {
            SeriesLabelPosition::LowerRight
        } else {
            SeriesLabelPosition::UpperLeft
        })
        .draw()
        .map_err(err)?;
    Ok(())
}

/// 40 points per decade between `a` and `b`, log-spaced.
fn log_points(a: f64, b: f64) -> impl Iterator<Item = f64> {
    let (la, lb) = (a.max(1.0).ln(), b.max(1.0).ln());
    let n = (((lb - la) / std::f64::consts::LN_10) * 40.0)
        .ceil()
        .max(2.0) as usize;
    (0..=n).map(move |i| (la + (lb - la) * i as f64 / n as f64).exp())
}

/// Axis labels: 1024 -> "1K", 4194304 -> "4M", 1000000 -> "1e6" (log axes put ticks at
/// powers of ten; sizes are powers of two).
fn human(v: f64) -> String {
    // Tick values are positive and far below 2^64.
    let v = v.round() as u64;
    let decade = (1..=12).find(|&k| 10u64.pow(k) == v);
    match decade.filter(|&k| k >= 3) {
        Some(k) => format!("1e{k}"),
        None => tca_model::format::bytes_short(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_points() {
        assert_eq!(human(4194304.0), "4M");
        assert_eq!(human(65536.0), "64K");
        assert_eq!(human(100.0), "100");
        assert_eq!(human(1e6), "1e6");
        let p: Vec<f64> = log_points(10.0, 1000.0).collect();
        assert!((p[0] - 10.0).abs() < 1e-9 && (p[p.len() - 1] - 1000.0).abs() < 1e-6);
        assert_eq!(p.len(), 81);
    }
}
