//! `tca model ...`: seed 002's estimates, Hockney fits of result files, and the two side by
//! side as the paper's Table 1 puts them; and the calibration of tca's own algorithm cost
//! models (`calibrate`). Parsing, orchestration and printing only; the models are in
//! `tca_model` and `tca::coll::model`, the measurements in `tca_bench`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};
use tca_model::estimate::{
    self, AnalyticModel, Cells, Estimate, Kind, Params, Preset, Regime, Shape,
};
use tca_model::fit::{self, Fit, Group, Selection, Weighting};
use tca_model::record::{self, Row};
use tca_model::{format, size};

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Seed 002's estimate of an operation: effective peak B', half-performance length
    /// M_1/2 and latency t_L (Table 1's estimate row), and the time at a message size.
    ///
    /// Start from a preset of the paper (`tca model presets` lists them) and override any
    /// parameter, or give every parameter the formula needs. The row printed is for
    /// --regime if given, else for the regime in force at --size, else the preset's
    /// (Table 1's) regime.
    #[command(after_help = size::GRAMMAR)]
    Estimate(EstimateArgs),
    /// Fit Hockney's throughput curve T = B / (1 + M_1/2 / M) to a result file (tca CSV or
    /// JSON, or IMB text): B, M_1/2 and t_L per (implementation, benchmark, ranks).
    #[command(after_help = size::GRAMMAR)]
    Fit(FitArgs),
    /// A fit of a result file beside a preset's estimate, with percent differences, as
    /// seed 002's Table 1 compares them.
    #[command(after_help = size::GRAMMAR)]
    Compare(CompareArgs),
    /// Measure every collective algorithm with a short `tca bench` run on this machine, fit
    /// the parameters of their cost models (per rank count, per collective) and write the
    /// calibration file the library selects algorithms with.
    ///
    /// The file goes to --out, else $TCA_MODEL_FILE, else $XDG_CONFIG_HOME/tca/model.json or
    /// ~/.config/tca/model.json. Each algorithm is measured in --rounds runs of the suite, each
    /// timing every size twice, and the fastest time of each size kept, so that a burst of
    /// other load on the machine does not enter the fit.
    #[command(after_help = size::GRAMMAR)]
    Calibrate(CalibrateArgs),
    /// Which algorithm Auto chooses, per collective and message size, at the given rank
    /// counts: with the calibration file the library reads (or --file), else the built-in
    /// models; --network for communicators whose members are on different nodes.
    Choices(ChoicesArgs),
    /// What each collective algorithm does, counted from its own code (the counting pass its
    /// cost model prices): per algorithm and message size, the busiest rank's synchronising
    /// rounds, chunks, bytes sent, received, copied and combined; the bytes sent by all ranks;
    /// the predicted time with the calibration file the library reads (or --file), and which
    /// one Auto takes.
    #[command(after_help = size::GRAMMAR)]
    Counts(CountsArgs),
    /// The presets: seed 002's parameter sets (Tables 3-7) and their Table 1 columns.
    Presets {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// A table for people.
    Text,
    /// JSON for programs.
    Json,
}

/// Throughput convention of a fit.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Volume {
    /// Message bytes over time, as IMB prints it.
    Imb,
    /// The data the operation moves, as seed 002 counts it: 2M for Allreduce, np M for
    /// Allgather (B scales; M_1/2 and t_L do not).
    Seed002,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WeightingArg {
    /// Relative throughput errors: every size counts alike (the default; see tca_model::fit).
    Relative,
    /// Absolute errors in MB/s: plain least squares; the largest messages dominate.
    Absolute,
}

impl From<WeightingArg> for Weighting {
    fn from(w: WeightingArg) -> Weighting {
        match w {
            WeightingArg::Relative => Weighting::Relative,
            WeightingArg::Absolute => Weighting::Absolute,
        }
    }
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    s.parse()
        .map_err(|e: estimate::EstimateError| e.to_string())
}

fn parse_regime(s: &str) -> Result<Regime, String> {
    s.parse()
        .map_err(|e: estimate::EstimateError| e.to_string())
}

fn parse_shape(s: &str) -> Result<Shape, String> {
    s.parse()
        .map_err(|e: estimate::EstimateError| e.to_string())
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    size::parse_bytes(s).map_err(|e| e.to_string())
}

/// A `MIN:MAX` selection range for clap (`tca model ... --range`, `tca bench --fit`).
pub(crate) fn parse_range(s: &str) -> Result<(u64, u64), String> {
    size::parse_range(s).map_err(|e| e.to_string())
}

/// The formulas' parameters, named after the paper's symbols. Each overrides the preset's.
#[derive(Args, Debug, Default)]
pub(crate) struct ParamArgs {
    /// Node shape np, np1xnp2 or np1xnp2xnp3 (384, 64x6, 8x6x8).
    #[arg(long, value_parser = parse_shape, value_name = "SHAPE")]
    shape: Option<Shape>,
    /// B: bandwidth of all directions in use together, MB/s (10^6 bytes/s).
    #[arg(long, value_name = "MB/S", allow_negative_numbers = true)]
    bandwidth: Option<f64>,
    /// m_B: pipeline segment (of the broadcast), bytes (16K).
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    segment: Option<u64>,
    /// m_R: pipeline segment of the reduction (Allreduce), bytes.
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    reduce_segment: Option<u64>,
    /// t_O: algorithm decision overhead, us.
    #[arg(long = "t-o", value_name = "US", allow_negative_numbers = true)]
    t_o: Option<f64>,
    /// t_S: address exchange, us.
    #[arg(long = "t-s", value_name = "US", allow_negative_numbers = true)]
    t_s: Option<f64>,
    /// L_S: software part of the MPI latency, us.
    #[arg(long = "l-s", value_name = "US", allow_negative_numbers = true)]
    l_s: Option<f64>,
    /// L_H: hardware part of the MPI latency, us.
    #[arg(long = "l-h", value_name = "US", allow_negative_numbers = true)]
    l_h: Option<f64>,
    /// T_C: reduction throughput (Allreduce), MB/s.
    #[arg(long = "t-c", value_name = "MB/S", allow_negative_numbers = true)]
    t_c: Option<f64>,
    /// t_ctl: control messages before a rendezvous transfer (PingPong), us.
    #[arg(long = "t-ctl", value_name = "US", allow_negative_numbers = true)]
    t_ctl: Option<f64>,
    /// Rendezvous threshold (PingPong): from this size on, control messages precede data.
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    rendezvous: Option<u64>,
}

impl ParamArgs {
    fn params(&self) -> Params {
        Params {
            shape: self.shape.clone(),
            b_mb_s: self.bandwidth,
            m_b_bytes: self.segment,
            m_r_bytes: self.reduce_segment,
            t_o_us: self.t_o,
            t_s_us: self.t_s,
            l_s_us: self.l_s,
            l_h_us: self.l_h,
            t_c_mb_s: self.t_c,
            t_ctl_us: self.t_ctl,
            rendezvous_bytes: self.rendezvous,
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct EstimateArgs {
    /// pingpong, bcast, allreduce or allgather (implied by --preset).
    #[arg(value_parser = parse_kind, value_name = "KIND")]
    kind: Option<Kind>,
    /// Start from one of the paper's parameter sets (k-bcast-1d, ...; see `tca model presets`).
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
    #[command(flatten)]
    params: ParamArgs,
    /// The regime of the row to print: eager|rendezvous (pingpong),
    /// single-segment|pipelined (bcast, allreduce), short|long (allgather).
    #[arg(long, value_parser = parse_regime, value_name = "REGIME")]
    regime: Option<Regime>,
    /// Also give the time and throughput at this message size (bytes; 64K, 4MiB, ...).
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    size: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

#[derive(Args, Debug)]
pub(crate) struct SelectArgs {
    /// Only this benchmark (IMB's name: PingPong, Bcast, Allreduce, ...).
    #[arg(long, value_name = "NAME")]
    benchmark: Option<String>,
    /// Only this implementation ("tca", "IMB" for IMB text, an MPI's name).
    #[arg(long, value_name = "NAME")]
    implementation: Option<String>,
    /// Only runs with this many ranks.
    #[arg(long, value_name = "N")]
    ranks: Option<u32>,
    /// Message sizes to fit, inclusive: MIN:MAX, MIN: or :MAX (128K:16M).
    #[arg(long, value_parser = parse_range, value_name = "MIN:MAX")]
    range: Option<(u64, u64)>,
    /// Residual weighting of the least squares.
    #[arg(long, value_enum, default_value_t = WeightingArg::Relative)]
    weighting: WeightingArg,
}

#[derive(Args, Debug)]
pub(crate) struct FitArgs {
    /// Result file: tca CSV or JSON (`tca bench`), or IMB-MPI1 text output.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    select: SelectArgs,
    /// What throughput counts: IMB's message bytes, or seed 002's data volume.
    #[arg(long, value_enum, default_value_t = Volume::Imb)]
    volume: Volume,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

#[derive(Args, Debug)]
pub(crate) struct CompareArgs {
    /// Result file: tca CSV or JSON (`tca bench`), or IMB-MPI1 text output.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The estimate to compare with (see `tca model presets`); parameters override it.
    #[arg(long, value_name = "NAME")]
    preset: String,
    #[command(flatten)]
    params: ParamArgs,
    #[command(flatten)]
    select: SelectArgs,
    /// The estimate's regime (default: the preset's).
    #[arg(long, value_parser = parse_regime, value_name = "REGIME")]
    regime: Option<Regime>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

#[derive(Args, Debug)]
pub(crate) struct CalibrateArgs {
    /// Rank counts to calibrate, comma-separated (each is a separate job of that size).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "2",
        value_name = "N[,N...]"
    )]
    np: Vec<u32>,
    /// Where to write the calibration (`-`: print its JSON on stdout instead).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Message sizes to measure (as `tca bench --sizes`: MIN:MAX, powers of two, or a list).
    #[arg(long, default_value = "8:4M")]
    sizes: String,
    /// Times each algorithm is measured; the fastest of each size is kept.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Shorter: every other size of --sizes, two rounds (about a third of the time).
    #[arg(long)]
    quick: bool,
    /// Fit a result file of `tca bench` runs with forced algorithms (CSV or JSON) instead of
    /// measuring.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// Also write the measurements to FILE (CSV, as `tca bench --format csv`), to refit them
    /// later with --from.
    #[arg(long, value_name = "FILE")]
    rows: Option<PathBuf>,
    /// Also print every measurement beside its fitted prediction.
    #[arg(long)]
    residuals: bool,
    /// Cores of the machine the measurements come from (default: this machine's): with more
    /// ranks than cores, the models share the cores out. For --from files measured elsewhere.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    cores: Option<u32>,
    /// The measurements crossed a network (ranks on different nodes): the models are those of
    /// communicators that span nodes. For --from files; a measuring run knows it from its
    /// transport (libfabric between some ranks).
    #[arg(long)]
    network: bool,
}

#[derive(Args, Debug)]
pub(crate) struct ChoicesArgs {
    /// Rank counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "2")]
    np: Vec<u32>,
    /// For a communicator that spans nodes: the models measured across a network.
    #[arg(long)]
    network: bool,
    /// A calibration file instead of the one the library reads.
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(crate) struct CountsArgs {
    /// Ranks.
    #[arg(long, default_value_t = 2)]
    np: u32,
    /// Message sizes (a block per rank for scatter, gather, allgather, reduce_scatter and
    /// alltoall; the whole buffer otherwise): a list, or MIN:MAX for the powers of two.
    #[arg(long, default_value = "8,1K,64K,1M")]
    sizes: String,
    /// Only this collective (broadcast, scatter, gather, reduce, allgather, allreduce,
    /// barrier, reduce_scatter, alltoall).
    #[arg(long)]
    collective: Option<String>,
    /// Only the algorithm of this name.
    #[arg(long)]
    algo: Option<String>,
    /// For a communicator that spans nodes: the models measured across a network.
    #[arg(long)]
    network: bool,
    /// A calibration file instead of the one the library reads.
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

pub(crate) fn run(cmd: Cmd) -> Result<i32> {
    let (out, code) = match cmd {
        Cmd::Calibrate(a) => return calibrate::run(&a),
        Cmd::Estimate(a) => (estimate_cmd(&a)?, 0),
        Cmd::Fit(a) => fit_cmd(&a)?,
        Cmd::Compare(a) => (compare_cmd(&a)?, 0),
        Cmd::Presets { format } => (presets_cmd(format)?, 0),
        Cmd::Choices(a) => (choices_cmd(&a)?, 0),
        Cmd::Counts(a) => (counts_cmd(&a)?, 0),
    };
    print!("{out}");
    Ok(code)
}

// ---------------------------------------------------------------------------------------
// estimate

/// A preset by name, with its kind checked against one given explicitly.
fn lookup_preset(name: &str, kind: Option<Kind>) -> Result<Preset> {
    let p = estimate::preset(name)?;
    match kind {
        Some(k) if k != p.kind => bail!("preset {} is a {} estimate, not {k}", p.name, p.kind),
        _ => {}
    }
    Ok(p)
}

/// The model from a preset (if any) and the parameters given over it.
fn build(kind: Kind, preset: Option<&Preset>, args: &ParamArgs) -> Result<AnalyticModel> {
    let mut params = args.params();
    if let Some(p) = preset {
        params = params.or(&p.params);
    }
    let m = AnalyticModel::from_params(kind, &params);
    match preset {
        Some(p) => m.with_context(|| format!("{kind} estimate from preset {}", p.name)),
        None => Ok(m?),
    }
}

fn estimate_cmd(a: &EstimateArgs) -> Result<String> {
    let preset = a
        .preset
        .as_deref()
        .map(|n| lookup_preset(n, a.kind))
        .transpose()?;
    let Some(kind) = a.kind.or(preset.as_ref().map(|p| p.kind)) else {
        bail!(
            "give the operation to estimate (pingpong, bcast, allreduce, allgather) or a \
             --preset (`tca model presets` lists them)"
        );
    };
    let model = build(kind, preset.as_ref(), &a.params)?;
    let regime = match (a.regime, a.size) {
        (Some(r), _) => r,
        (None, Some(m)) => model.regime_at(m as f64)?,
        (None, None) => preset
            .as_ref()
            .and_then(|p| p.regime)
            .unwrap_or(kind.regimes()[0]),
    };
    let est = model.estimate(regime)?;
    let switches = model.switches()?;
    let at = a
        .size
        .map(|m| -> Result<(u64, f64, Regime)> {
            let mf = m as f64;
            Ok((m, model.time_us(mf)?, model.regime_at(mf)?))
        })
        .transpose()?;

    if a.format == Format::Json {
        let mut v = serde_json::to_value(&est)?;
        if let Value::Object(o) = &mut v {
            o.insert("preset".into(), json!(preset.as_ref().map(|p| p.name)));
            o.insert("parameters".into(), serde_json::to_value(model.params())?);
            o.insert("switches".into(), serde_json::to_value(&switches)?);
            if let Some((m, t, r)) = at {
                o.insert("size_bytes".into(), json!(m));
                o.insert("t_us".into(), json!(t));
                o.insert("throughput_mb_s".into(), json!(est.volume * m as f64 / t));
                o.insert("regime_at_size".into(), json!(r));
            }
            if let Some(p) = &preset {
                o.insert(
                    "paper".into(),
                    json!({ "estimate": p.paper_estimate, "fit": p.paper_fit }),
                );
            }
        }
        return Ok(serde_json::to_string_pretty(&v)? + "\n");
    }

    let mut s = String::new();
    match &preset {
        Some(p) => writeln!(
            s,
            "{} estimate, preset {}: {}",
            kind.benchmark(),
            p.name,
            p.about
        )?,
        None => writeln!(s, "{} estimate", kind.benchmark())?,
    }
    let params = model.params();
    for &p in kind.params() {
        let v = params.get(p).unwrap_or_default();
        let unit = if p.unit() == "nodes" { "" } else { p.unit() };
        writeln!(s, "  {:<11}{:<16}{:<7}({})", p.symbol(), v, unit, p.flag())?;
    }
    writeln!(s, "regime {}", est.regime)?;
    for t in &est.terms {
        writeln!(
            s,
            "  {} = {} {}  {}",
            t.expr,
            format::number(t.value),
            t.unit,
            t.note
        )?;
    }
    for sw in &switches {
        writeln!(
            s,
            "switch at {}: {} -> {}  ({})",
            format::bytes_detail(sw.bytes),
            sw.below,
            sw.above,
            sw.rule
        )?;
    }
    writeln!(s)?;
    writeln!(s, "{}", row_header(""))?;
    writeln!(s, "{}", row("estimate", &cells_of_estimate(&est)))?;
    if let Some(p) = &preset {
        writeln!(s, "{}", row("Table 1 estimate", &p.paper_estimate))?;
        writeln!(s, "{}", row("Table 1 fit (K)", &p.paper_fit))?;
        let table1 = p.regime.unwrap_or(kind.regimes()[0]);
        if table1 != est.regime {
            writeln!(s, "(Table 1's column is the {table1} regime)")?;
        }
    }
    if est.volume != 1.0 {
        writeln!(
            s,
            "(throughput counts {} x the message, as seed 002 does; M_1/2 is in message bytes)",
            format::number(est.volume)
        )?;
    }
    if let Some((m, t, r)) = at {
        writeln!(
            s,
            "\nat M = {}: t = {} us, throughput {} MB/s (regime {r})",
            format::bytes_detail(m as f64),
            format::sig(t, 4),
            format::sig(est.volume * m as f64 / t, 4)
        )?;
    }
    Ok(s)
}

fn cells_of_estimate(e: &Estimate) -> Cells {
    Cells {
        b_mb_s: e.b_eff_mb_s,
        m_half_bytes: e.m_half_bytes,
        t_l_us: e.t_l_us,
    }
}

fn cells_of_fit(f: &Fit) -> Cells {
    Cells {
        b_mb_s: f.b_mb_s,
        m_half_bytes: f.m_half_bytes,
        t_l_us: f.t_l_us,
    }
}

fn row_header(first: &str) -> String {
    format!(
        "{first:<18}{:>12}{:>14}{:>11}",
        "B [MB/s]", "M_1/2 [byte]", "t_L [us]"
    )
}

fn row(name: &str, c: &Cells) -> String {
    format!(
        "{name:<18}{:>12}{:>14}{:>11}",
        format::sig(c.b_mb_s, 4),
        format::exp(c.m_half_bytes, 4),
        format::sig(c.t_l_us, 4)
    )
}

// ---------------------------------------------------------------------------------------
// fit

fn read_rows(path: &Path) -> Result<Vec<Row>> {
    // `ReadError`'s message already holds its source; `{e}` keeps the chain from repeating
    // it.
    let rows = record::read_file(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    if rows.is_empty() {
        bail!("{}: no measurements in the file", path.display());
    }
    Ok(rows)
}

/// The groups of `rows` that `sel` lets through, or an error naming what there is.
fn chosen_groups(path: &Path, rows: &[Row], sel: &SelectArgs) -> Result<Vec<Group>> {
    let all = fit::groups(rows);
    let chosen: Vec<Group> = all
        .iter()
        .filter(|g| {
            sel.benchmark
                .as_deref()
                .is_none_or(|b| g.benchmark.eq_ignore_ascii_case(b))
                && sel
                    .implementation
                    .as_deref()
                    .is_none_or(|i| g.implementation == i)
                && sel.ranks.is_none_or(|n| g.ranks == n)
        })
        .cloned()
        .collect();
    if chosen.is_empty() {
        let have: Vec<String> = all
            .iter()
            .map(|g| format!("{} {} on {} ranks", g.implementation, g.benchmark, g.ranks))
            .collect();
        bail!(
            "{}: nothing matches the selection; the file has: {}",
            path.display(),
            have.join(", ")
        );
    }
    Ok(chosen)
}

fn selection<'a>(g: &'a Group, sel: &SelectArgs, range: (u64, u64)) -> Selection<'a> {
    Selection {
        benchmark: &g.benchmark,
        implementation: Some(&g.implementation),
        ranks: Some(g.ranks),
        range,
        weighting: sel.weighting.into(),
        seed002_volume: false,
    }
}

/// Whether the selected rows repeat a size: a sign of several runs in one group (IMB's
/// sections for several process counts that the file records under one rank count).
fn sizes_repeat(rows: &[&Row]) -> bool {
    let mut b: Vec<u64> = rows.iter().map(|r| r.bytes).collect();
    b.sort_unstable();
    b.windows(2).any(|w| w[0] == w[1])
}

fn fit_cmd(a: &FitArgs) -> Result<(String, i32)> {
    let rows = read_rows(&a.file)?;
    let groups = chosen_groups(&a.file, &rows, &a.select)?;
    let range = a.select.range.unwrap_or((1, u64::MAX));
    let mut results: Vec<(Group, std::result::Result<Fit, String>, bool)> = Vec::new();
    for g in groups {
        let sel = selection(&g, &a.select, range);
        let picked = sel.select(&rows);
        if picked.is_empty() && a.select.benchmark.is_none() {
            continue; // e.g. Barrier: no sizes, nothing to fit
        }
        let repeat = sizes_repeat(&picked);
        let r = fit::fit_selection(&rows, &sel).and_then(|f| match a.volume {
            Volume::Imb => Ok(f),
            Volume::Seed002 => f.scaled(fit::seed002_volume(&g.benchmark, g.ranks)),
        });
        results.push((g, r.map_err(|e| e.to_string()), repeat));
    }
    if results.is_empty() {
        bail!(
            "{}: no rows with message sizes in {} to fit",
            a.file.display(),
            range_text(range)
        );
    }
    let failed = results.iter().filter(|r| r.1.is_err()).count();
    let code = i32::from(failed > 0);

    if a.format == Format::Json {
        let v: Vec<Value> = results
            .iter()
            .map(|(g, r, repeat)| {
                json!({
                    "implementation": g.implementation,
                    "benchmark": g.benchmark,
                    "ranks": g.ranks,
                    "range": range_json(range),
                    "fit": r.as_ref().ok(),
                    "error": r.as_ref().err(),
                    "sizes_repeat": repeat,
                })
            })
            .collect();
        return Ok((serde_json::to_string_pretty(&v)? + "\n", code));
    }

    let mut s = String::new();
    writeln!(
        s,
        "{}: Hockney fits over {}, {} residuals{}",
        a.file.display(),
        range_text(range),
        match a.select.weighting {
            WeightingArg::Relative => "relative",
            WeightingArg::Absolute => "absolute",
        },
        if a.volume == Volume::Seed002 {
            ", throughput counted as seed 002 does (2M Allreduce, np M Allgather)"
        } else {
            ""
        }
    )?;
    writeln!(
        s,
        "{:<16}{:<12}{:>6}{:>7}  {:<21}{:>10}{:>14}{:>11}{:>9}{:>9}",
        "implementation",
        "benchmark",
        "ranks",
        "points",
        "sizes",
        "B [MB/s]",
        "M_1/2 [byte]",
        "t_L [us]",
        "R^2",
        "rms err"
    )?;
    let mut notes = Vec::new();
    for (g, r, repeat) in &results {
        write!(
            s,
            "{:<16}{:<12}{:>6}",
            g.implementation, g.benchmark, g.ranks
        )?;
        match r {
            Ok(f) => writeln!(
                s,
                "{:>7}  {:<21}{:>10}{:>14}{:>11}{:>9.5}{:>8.2}%",
                f.points,
                format!(
                    "{}..{}",
                    format::bytes(f.min_bytes as u64),
                    format::bytes(f.max_bytes as u64)
                ),
                format::sig(f.b_mb_s, 4),
                format::exp(f.m_half_bytes, 4),
                format::sig(f.t_l_us, 4),
                f.r2,
                100.0 * f.rms_rel_err
            )?,
            Err(e) => writeln!(s, "  fit failed: {e}")?,
        }
        if *repeat {
            notes.push(format!(
                "note: {} {} repeats message sizes: the rows may mix several runs \
                 (select one with --ranks or split the file)",
                g.implementation, g.benchmark
            ));
        }
    }
    for n in notes {
        writeln!(s, "{n}")?;
    }
    Ok((s, code))
}

/// `[MIN, MAX]`, with `null` for an open end.
fn range_json((lo, hi): (u64, u64)) -> Value {
    json!([lo, (hi != u64::MAX).then_some(hi)])
}

fn range_text((lo, hi): (u64, u64)) -> String {
    match (lo <= 1, hi == u64::MAX) {
        (true, true) => "all sizes > 0".into(),
        (false, true) => format!("{} and up", format::bytes(lo)),
        (true, false) => format!("up to {}", format::bytes(hi)),
        (false, false) => format!("{}..{}", format::bytes(lo), format::bytes(hi)),
    }
}

// ---------------------------------------------------------------------------------------
// compare

fn pct(fit: f64, est: f64) -> f64 {
    100.0 * (fit - est) / est
}

fn compare_cmd(a: &CompareArgs) -> Result<String> {
    let preset = lookup_preset(&a.preset, None)?;
    let kind = preset.kind;
    let model = build(kind, Some(&preset), &a.params)?;
    let regime = a.regime.or(preset.regime).unwrap_or(kind.regimes()[0]);
    let est = model.estimate(regime)?;
    let nodes = model.params().shape.map(|s| s.nodes());

    let rows = read_rows(&a.file)?;
    let select = SelectArgs {
        benchmark: Some(
            a.select
                .benchmark
                .clone()
                .unwrap_or_else(|| kind.benchmark().to_string()),
        ),
        implementation: a.select.implementation.clone(),
        ranks: a.select.ranks,
        range: a.select.range,
        weighting: a.select.weighting,
    };
    let groups = chosen_groups(&a.file, &rows, &select)?;
    let range = a.select.range.unwrap_or(preset.fit_range);

    let mut json_out = Vec::new();
    let mut s = String::new();
    for g in &groups {
        let sel = selection(g, &select, range);
        // Seed 002's throughput convention for this operation, on the run's rank count.
        let volume = fit::seed002_volume(kind.benchmark(), g.ranks);
        let f = fit::fit_selection(&rows, &sel)
            .and_then(|f| f.scaled(volume))
            .with_context(|| {
                format!(
                    "fitting {} {} on {} ranks over {} in {}",
                    g.implementation,
                    g.benchmark,
                    g.ranks,
                    range_text(range),
                    a.file.display()
                )
            })?;
        let diff = [
            pct(f.b_mb_s, est.b_eff_mb_s),
            pct(f.m_half_bytes, est.m_half_bytes),
            pct(f.t_l_us, est.t_l_us),
        ];
        let other_size = nodes.is_some_and(|n| n != u64::from(g.ranks));
        if a.format == Format::Json {
            json_out.push(json!({
                "implementation": g.implementation,
                "benchmark": g.benchmark,
                "ranks": g.ranks,
                "range": range_json(range),
                "preset": preset.name,
                "parameters": model.params(),
                "fit": f,
                "estimate": est,
                "diff_percent": {
                    "b": diff[0],
                    "m_half": diff[1],
                    "t_l": diff[2],
                },
                "paper_fit": preset.paper_fit,
                "paper_estimate": preset.paper_estimate,
            }));
            continue;
        }
        writeln!(
            s,
            "{} {} on {} ranks, {} ({} points, R^2 {:.4}) vs preset {} ({} regime)",
            g.implementation,
            g.benchmark,
            g.ranks,
            range_text(range),
            f.points,
            f.r2,
            preset.name,
            est.regime
        )?;
        writeln!(s, "{}", row_header(""))?;
        writeln!(s, "{}", row("fit", &cells_of_fit(&f)))?;
        writeln!(s, "{}", row("estimate", &cells_of_estimate(&est)))?;
        writeln!(
            s,
            "{:<18}{:>12}{:>14}{:>11}",
            "fit vs estimate",
            format!("{:+.1}%", diff[0]),
            format!("{:+.1}%", diff[1]),
            format!("{:+.1}%", diff[2])
        )?;
        writeln!(s, "{}", row("Table 1 fit (K)", &preset.paper_fit))?;
        if volume != 1.0 {
            writeln!(
                s,
                "(throughput counts {} x the message, as seed 002 does)",
                format::number(volume)
            )?;
        }
        if other_size {
            writeln!(
                s,
                "note: the run has {} ranks, the estimate is for {} nodes (override with --shape)",
                g.ranks,
                nodes.unwrap_or(0)
            )?;
        }
        writeln!(s)?;
    }
    if a.format == Format::Json {
        return Ok(serde_json::to_string_pretty(&json_out)? + "\n");
    }
    Ok(s)
}

// ---------------------------------------------------------------------------------------
// presets

fn presets_cmd(format: Format) -> Result<String> {
    let all = estimate::presets();
    if format == Format::Json {
        return Ok(serde_json::to_string_pretty(&all)? + "\n");
    }
    let mut s = String::new();
    for p in &all {
        writeln!(s, "{:<22}{}", p.name, p.about)?;
        let params: Vec<String> = p
            .kind
            .params()
            .iter()
            .filter_map(|&q| p.params.get(q).map(|v| format!("{}={v}", q.flag())))
            .collect();
        writeln!(s, "{:<22}{} {}", "", p.kind, params.join(" "))?;
        let regime = p.regime.unwrap_or(p.kind.regimes()[0]);
        writeln!(
            s,
            "{:<22}regime {regime}, paper fit over {}",
            "",
            range_text(p.fit_range)
        )?;
        writeln!(s, "  {}", row_header(""))?;
        writeln!(s, "  {}", row("Table 1 estimate", &p.paper_estimate))?;
        writeln!(s, "  {}", row("Table 1 fit (K)", &p.paper_fit))?;
        writeln!(s)?;
    }
    Ok(s)
}

// ---------------------------------------------------------------------------------------
// calibrate

mod calibrate {
    use std::fmt::Write as _;
    use std::time::Instant;

    use anyhow::{Context, Result};
    use tca::coll::model::{Calibration, Fitted, MAX_CACHE};
    use tca_bench::calibrate::{self, Outcome, RankFit, Request};
    use tca_model::format;

    use super::CalibrateArgs;

    pub(super) fn run(a: &CalibrateArgs) -> Result<i32> {
        let mut sizes = tca_model::size::parse_sizes(&a.sizes).context("--sizes")?;
        let rounds = if a.quick { a.rounds.min(2) } else { a.rounds };
        if a.quick {
            sizes = sizes.into_iter().step_by(2).collect();
        }
        let command = match &a.from {
            Some(path) => format!(
                "tca model calibrate --from {}{}",
                path.display(),
                if a.network { " --network" } else { "" }
            ),
            None => {
                let nps: Vec<String> = a.np.iter().map(u32::to_string).collect();
                let last = if a.quick {
                    " --quick".to_string()
                } else {
                    format!(" --rounds {rounds}")
                };
                format!(
                    "tca model calibrate --sizes {} --np {}{last}",
                    a.sizes,
                    nps.join(",")
                )
            }
        };
        let req = Request {
            np: a.np.clone(),
            sizes,
            rounds,
            cores: a.cores,
            from: a.from.clone(),
            rows: a.rows.clone(),
            network: a.network,
            command,
        };
        // Where the file goes is decided before the long measurement.
        let out = match &a.out {
            Some(p) => Some(p.clone()),
            None if tca_mpi::role() == tca_mpi::Role::Parent => {
                Some(tca::coll::model::default_path().context(
                    "TCA_MODEL_FILE=none and no --out: nowhere to write the calibration",
                )?)
            }
            None => None,
        };
        let started = Instant::now();
        let Some(outcome) = calibrate::run(&req)? else {
            return Ok(0); // a rank of the measuring job
        };
        let out = out.context("the parent knows where to write")?;
        let mut text = String::new();
        for f in &outcome.fits {
            text += &fit_table(f, a.residuals)?;
        }
        text += &choices(&outcome);
        let mut cal = outcome.calibration.clone();
        if out.as_os_str() == "-" {
            eprint!("{text}");
            print!("{}", cal.to_json());
            return Ok(0);
        }
        // A calibration across nodes keeps the file's entries measured within a node, and
        // the other way round: the two describe different communicators.
        if let Ok(old) = Calibration::load(&out) {
            let kept: Vec<_> = old
                .ranks
                .into_iter()
                .filter(|o| cal.ranks.iter().all(|r| r.network != o.network))
                .collect();
            if let Some(k) = kept.first() {
                let kind = if k.network {
                    "across a network"
                } else {
                    "within a node"
                };
                let _ = writeln!(
                    text,
                    "\nkept the {} entries of {} measured {kind}",
                    kept.len(),
                    out.display()
                );
            }
            cal.ranks.extend(kept);
        }
        cal.save(&out)?;
        print!("{text}");
        println!(
            "wrote {} ({:.0} s); the library reads it at the first communicator \
             (TCA_MODEL_FILE overrides the place)",
            out.display(),
            started.elapsed().as_secs_f64()
        );
        Ok(0)
    }

    /// One rank count's parameters and fit quality, and with `residuals` every point.
    fn fit_table(f: &RankFit, residuals: bool) -> Result<String> {
        let np = f.models.ranks;
        for (c, why) in &f.unfitted {
            eprintln!(
                "tca model calibrate: {np} ranks, {c}: no fit ({why}); the fit over all \
                 collectives stands in"
            );
        }
        let mut s = format!(
            "\n{np} ranks: cost model parameters (per-byte ones as GB/s; 0: not seen) and fit \
             (relative errors)\n"
        );
        writeln!(
            s,
            "{:<15}{:>7}{:>8}{:>9}  {:<32}{:>7}{:>7}{:>7}{:>7}{:>7}{:>8}{:>8}{:>7}{:>7}{:>6}{:>8}",
            "collective",
            "points",
            "rms",
            "worst",
            "(where)",
            "delta",
            "alpha",
            "spill",
            "beta",
            "b_send",
            "b_small",
            "b_local",
            "gamma",
            "b_far",
            "knee",
            "cache"
        )?;
        let mut line = |name: &str, f: &Fitted| -> Result<()> {
            let q = f.fit.as_ref().context("a fitted model has its quality")?;
            let m = &f.model;
            let gbs = |v: f64| {
                if v > 0.0 {
                    format!("{:.1}", 1e-3 / v)
                } else {
                    "-".into()
                }
            };
            let cache = if m.cache >= MAX_CACHE {
                "-".to_string()
            } else {
                // Below MAX_CACHE (2^62): a whole number of bytes that fits.
                format::bytes(m.cache as u64)
            };
            writeln!(
                s,
                "{:<15}{:>7}{:>7.1}%{:>+8.1}%  {:<32}{:>7.3}{:>7.3}{:>7.3}{:>7}{:>7}{:>8}{:>8}{:>7}{:>7}{:>6}{:>8}",
                name,
                q.points,
                100.0 * q.rms_rel_err,
                100.0 * q.worst_rel_err,
                q.worst_at,
                m.delta,
                m.alpha,
                m.alpha_spill,
                gbs(m.beta),
                gbs(m.beta_send),
                gbs(m.beta_small),
                gbs(m.beta_local),
                gbs(m.gamma),
                gbs(m.beta_far),
                m.knee,
                cache
            )?;
            Ok(())
        };
        for c in tca::Collective::ALL {
            if let Some(fitted) = f.models.collectives.get(c.name()) {
                line(c.name(), fitted)?;
            }
        }
        line("(all)", &f.models.all)?;
        if residuals {
            writeln!(
                s,
                "\n{:<15}{:<22}{:>10}{:>13}{:>13}{:>9}",
                "collective", "algorithm", "bytes", "measured", "model", "error"
            )?;
            for r in &f.residuals {
                writeln!(
                    s,
                    "{:<15}{:<22}{:>10}{:>13.3}{:>13.3}{:>+8.1}%",
                    r.collective,
                    r.algorithm,
                    r.bytes,
                    r.measured_us,
                    r.model_us,
                    100.0 * (r.model_us - r.measured_us) / r.measured_us
                )?;
            }
        }
        Ok(s)
    }

    /// What selection will now choose, per collective and size, at each rank count.
    fn choices(outcome: &Outcome) -> String {
        let cal: &Calibration = &outcome.calibration;
        let mut s = String::new();
        for r in &cal.ranks {
            s += &choice_lines(cal, r.ranks as usize, r.network);
        }
        s
    }

    /// What selection chooses with `cal` at `p` ranks (across a network: `network`), per
    /// collective and size.
    pub(super) fn choice_lines(cal: &Calibration, p: usize, network: bool) -> String {
        let mut s = String::new();
        let across = if network { " across a network" } else { "" };
        let _ = writeln!(
            s,
            "\nautomatic choice at {p} ranks{across} (message sizes as the library sees them):"
        );
        {
            for c in calibrate::choices(cal, p, network) {
                let parts: Vec<String> = c
                    .runs
                    .iter()
                    .map(|&(a, b, n)| {
                        format!(
                            "{}..{} {n}",
                            format::bytes_short(a as u64),
                            format::bytes_short(b as u64)
                        )
                    })
                    .collect();
                let _ = writeln!(s, "  {:<15}{}", c.collective.name(), parts.join(", "));
            }
        }
        s
    }
}

/// The calibration `file`, or the one the library reads, and where it came from.
fn calibration_from(file: Option<&PathBuf>) -> Result<(tca::coll::model::Calibration, String)> {
    use tca::coll::model::{Calibration, Source, active};
    Ok(match file {
        Some(f) => (
            Calibration::load(f).map_err(|e| anyhow::anyhow!("{e}"))?,
            f.display().to_string(),
        ),
        None => {
            let act = active();
            let from = match &act.source {
                Source::Builtin | Source::Disabled => "the built-in models".to_string(),
                Source::File(p) => p.display().to_string(),
                Source::Fallback(p, e) => format!("the built-in models ({}: {e})", p.display()),
            };
            (act.calibration.clone(), from)
        }
    })
}

fn choices_cmd(a: &ChoicesArgs) -> Result<String> {
    let (calibration, from) = calibration_from(a.file.as_ref())?;
    let mut s = format!("models: {from}\n");
    for &p in &a.np {
        if p < 2 {
            bail!("--np: a choice needs at least 2 ranks");
        }
        s += &calibrate::choice_lines(&calibration, p as usize, a.network);
    }
    Ok(s)
}

// ---------------------------------------------------------------------------------------
// counts

fn counts_cmd(a: &CountsArgs) -> Result<String> {
    use tca::Collective;
    use tca::coll::ALGORITHMS;
    use tca::coll::model::{CostModel, MAX_CACHE};
    let p = a.np as usize;
    if p < 1 {
        bail!("--np: at least 1 rank");
    }
    let sizes = size::parse_sizes(&a.sizes).map_err(|e| anyhow::anyhow!("--sizes: {e}"))?;
    let only = match &a.collective {
        Some(n) => Some(Collective::from_name(n).with_context(|| {
            let names: Vec<&str> = Collective::ALL.iter().map(|c| c.name()).collect();
            format!(
                "--collective: no collective `{n}` (one of {})",
                names.join(", ")
            )
        })?),
        None => None,
    };
    let algs: Vec<_> = ALGORITHMS
        .iter()
        .filter(|x| only.is_none_or(|c| x.collective == c))
        .filter(|x| a.algo.as_ref().is_none_or(|n| x.name == n))
        .filter(|x| (x.supports)(p))
        .collect();
    if algs.is_empty() {
        bail!("no algorithm matches --collective, --algo and {p} ranks");
    }
    let (calibration, from) = calibration_from(a.file.as_ref())?;
    let mut rows = Vec::new();
    for alg in algs {
        let m = calibration.model_on(alg.collective, p, a.network);
        // The counts themselves: no knee, no cache step, so bytes are bytes.
        let plain = CostModel {
            knee: 0.0,
            cache: MAX_CACHE,
            ..m
        };
        // A barrier has no bytes.
        let at = if alg.collective == Collective::Barrier {
            &[0][..]
        } else {
            &sizes[..]
        };
        for &n in at {
            let (busiest, total) = alg
                .schedule(&plain, p, n)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let auto = std::ptr::eq(calibration.choose_on(alg.collective, p, n, a.network), alg);
            rows.push(serde_json::json!({
                "collective": alg.collective.name(),
                "algorithm": alg.name,
                "bytes": n,
                "busiest": busiest,
                "all_ranks": total,
                "predicted_us": alg.cost(&m, p, n),
                "auto": auto,
            }));
        }
    }
    if a.format == Format::Json {
        let doc = serde_json::json!({"models": from, "ranks": p, "rows": rows});
        return Ok(serde_json::to_string_pretty(&doc)? + "\n");
    }
    let mut s = format!(
        "models: {from}; {p} ranks; counted from each algorithm's code (busiest rank; sent: all \
         ranks; *: Auto's choice)\n"
    );
    s += &format!(
        "{:<15} {:<22} {:>10} {:>7} {:>8} {:>12} {:>12} {:>12} {:>12} {:>14} {:>12}\n",
        "collective",
        "algorithm",
        "bytes",
        "rounds",
        "chunks",
        "sent",
        "received",
        "copied",
        "combined",
        "sent (all)",
        "predicted us"
    );
    for r in &rows {
        let w = |k: &str, f: &str| r[k][f].as_f64().unwrap_or(0.0);
        s += &format!(
            "{:<15} {:<22} {:>10} {:>7} {:>8} {:>12} {:>12} {:>12} {:>12} {:>14} {:>11.3}{}\n",
            r["collective"].as_str().unwrap_or(""),
            r["algorithm"].as_str().unwrap_or(""),
            r["bytes"].as_u64().unwrap_or(0),
            w("busiest", "rounds"),
            w("busiest", "chunks"),
            w("busiest", "sent_bytes"),
            w("busiest", "recv_bytes"),
            w("busiest", "local_bytes"),
            w("busiest", "reduced_bytes"),
            w("all_ranks", "sent_bytes"),
            r["predicted_us"].as_f64().unwrap_or(f64::INFINITY),
            if r["auto"].as_bool() == Some(true) {
                " *"
            } else {
                ""
            },
        );
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }

    #[test]
    fn every_parameter_has_its_option() {
        Cli::command().debug_assert();
        let cmd = Cli::command();
        let est = cmd
            .find_subcommand("estimate")
            .expect("the estimate subcommand exists");
        let longs: Vec<String> = est
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        for k in Kind::ALL {
            for p in k.params() {
                assert!(longs.contains(&p.flag().to_string()), "{}", p.flag());
            }
        }
    }
}
