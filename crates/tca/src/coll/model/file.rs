//! The calibration file: a [`Calibration`] holds the models of one machine, per rank count
//! ([`RankModels`]), each per collective and over all collectives ([`Fitted`]), and is stored
//! as JSON. The serde types are the file format: [`Calibration::new`] and
//! [`Calibration::builtin`] stamp [`FORMAT`] and [`VERSION`], and [`Calibration::validate`]
//! (run by every load and save) rejects any other. [`default_path`] says where the file is
//! looked for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::CostModel;
use crate::coll::registry::Collective;
use crate::env;
use crate::error::{Error, ErrorKind, Result};

/// `format` of a calibration file.
pub const FORMAT: &str = "tca cost model";
/// `version` of the calibration files this tca writes and reads.
pub const VERSION: u32 = 1;

/// How well a fitted model reproduces its measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quality {
    /// Measurements fitted.
    pub points: usize,
    /// Root mean square of the relative errors.
    pub rms_rel_err: f64,
    /// Largest relative error (signed).
    pub worst_rel_err: f64,
    /// Where the largest error is: "algorithm at bytes".
    pub worst_at: String,
}

/// A fitted model and its fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fitted {
    /// The parameters.
    pub model: CostModel,
    /// How well they fit (absent in hand-written files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<Quality>,
}

/// The models of one rank count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankModels {
    /// The communicator size they were measured at.
    pub ranks: u32,
    /// Cores of the machine when measured (more ranks than cores: oversubscribed).
    #[serde(default)]
    pub cores: u32,
    /// Measured with ranks on different nodes, through a network (`tca model calibrate` under
    /// `TCA_HOSTS`, Slurm or an MPI launcher): the models of communicators that span nodes.
    /// Absent (false): measured within one node. (tca builds from before this field existed
    /// refuse a file with it set: they know no such field.) A file may hold both kinds for
    /// one rank count; `tca model calibrate` keeps the entries of the kind it did not measure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// Fitted over every collective: the model of a collective not in `collectives`.
    pub all: Fitted,
    /// Fitted per collective, by [`Collective::name`].
    #[serde(default)]
    pub collectives: BTreeMap<String, Fitted>,
}

/// A calibration file: the models of one machine, per rank count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Always [`FORMAT`] ([`Calibration::new`] fills it in).
    pub format: String,
    /// [`VERSION`] when written by this tca ([`Calibration::new`] fills it in).
    pub version: u32,
    /// The machine it was measured on.
    #[serde(default)]
    pub machine: String,
    /// When (RFC 3339).
    #[serde(default)]
    pub date: String,
    /// How it was measured (the command line).
    #[serde(default)]
    pub command: String,
    /// The models, one entry per rank count.
    pub ranks: Vec<RankModels>,
}

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, msg)
}

impl Calibration {
    /// An empty calibration of this tca's [`FORMAT`] and [`VERSION`], measured on `machine`
    /// at `date` (RFC 3339) by `command`; push one [`RankModels`] per rank count measured.
    pub fn new(
        machine: impl Into<String>,
        date: impl Into<String>,
        command: impl Into<String>,
    ) -> Calibration {
        Calibration {
            format: FORMAT.into(),
            version: VERSION,
            machine: machine.into(),
            date: date.into(),
            command: command.into(),
            ranks: Vec::new(),
        }
    }

    /// The built-in models: [`CostModel::default`] for every collective and rank count.
    pub fn builtin() -> Calibration {
        Calibration {
            command: "built-in defaults".into(),
            ..Calibration::single(CostModel::default(), false)
        }
    }

    /// A calibration of one model for every collective and rank count, measured within a
    /// node or across a network (`network`).
    pub fn single(model: CostModel, network: bool) -> Calibration {
        Calibration {
            ranks: vec![RankModels {
                ranks: 2,
                cores: 0,
                network,
                all: Fitted { model, fit: None },
                collectives: BTreeMap::new(),
            }],
            ..Calibration::new("", "", "one model")
        }
    }

    /// Checks the format, the version and every parameter; the error says where.
    pub fn validate(&self) -> Result<()> {
        if self.format != FORMAT {
            return Err(invalid(format!(
                "format is {:?}, not {FORMAT:?}: not a tca cost model file",
                self.format
            )));
        }
        if self.version != VERSION {
            return Err(invalid(format!(
                "version {} is not the version this tca reads ({VERSION}); recalibrate with \
                 `tca model calibrate`",
                self.version
            )));
        }
        if self.ranks.is_empty() {
            return Err(invalid("no rank counts: the file holds no models".into()));
        }
        for (i, r) in self.ranks.iter().enumerate() {
            if r.ranks == 0 {
                return Err(invalid(format!(
                    "entry {i} has ranks = 0: a rank count must be at least 1"
                )));
            }
            if self.ranks[..i]
                .iter()
                .any(|q| q.ranks == r.ranks && q.network == r.network)
            {
                let kind = if r.network { " across a network" } else { "" };
                return Err(invalid(format!(
                    "rank count {}{kind} appears twice",
                    r.ranks
                )));
            }
            r.all
                .model
                .validate()
                .map_err(|e| invalid(format!("ranks {}, all collectives: {e}", r.ranks)))?;
            for (name, f) in &r.collectives {
                if Collective::from_name(name).is_none() {
                    let valid: Vec<&str> = Collective::ALL.iter().map(|c| c.name()).collect();
                    return Err(invalid(format!(
                        "ranks {}: unknown collective {name:?} (valid: {})",
                        r.ranks,
                        valid.join(", ")
                    )));
                }
                f.model
                    .validate()
                    .map_err(|e| invalid(format!("ranks {}, {name}: {e}", r.ranks)))?;
            }
        }
        Ok(())
    }

    /// Parses and validates the JSON text of a calibration file.
    pub fn from_json(text: &str) -> Result<Calibration> {
        let c: Calibration = serde_json::from_str(text)
            .map_err(|e| invalid(format!("not a valid cost model file: {e}")))?;
        c.validate()?;
        Ok(c)
    }

    /// The file's JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a calibration serialises") + "\n"
    }

    /// Reads and validates a calibration file; errors name the file.
    pub fn load(path: &Path) -> Result<Calibration> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("cannot read cost model file {}: {e}", path.display()),
            )
        })?;
        Self::from_json(&text)
            .map_err(|e| invalid(format!("cost model file {}: {e}", path.display())))
    }

    /// Validates and writes the file (creating its directory), atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.validate()?;
        let io = |doing: String, e: std::io::Error| {
            Error::new(ErrorKind::InvalidArgument, format!("{doing}: {e}"))
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| io(format!("cannot create {}", dir.display()), e))?;
        }
        let tmp = path.with_extension("json.part");
        std::fs::write(&tmp, self.to_json())
            .map_err(|e| io(format!("cannot write {}", tmp.display()), e))?;
        std::fs::rename(&tmp, path).map_err(|e| io(format!("cannot write {}", path.display()), e))
    }

    /// The entry measured within one node nearest to `p` ranks (by ratio; ties go to the
    /// smaller count).
    pub fn nearest(&self, p: usize) -> Option<&RankModels> {
        self.nearest_on(p, false)
    }

    /// [`Calibration::nearest`] among the entries measured through a network (`network`) or
    /// within one node.
    pub fn nearest_on(&self, p: usize, network: bool) -> Option<&RankModels> {
        let lp = (p.max(1) as f64).log2();
        self.ranks
            .iter()
            .filter(|r| r.network == network)
            .min_by(|a, b| {
                let da = ((a.ranks as f64).log2() - lp).abs();
                let db = ((b.ranks as f64).log2() - lp).abs();
                da.total_cmp(&db).then(a.ranks.cmp(&b.ranks))
            })
    }

    /// The model of `collective` on `p` ranks of one node: the nearest rank count's model of
    /// that collective, else its model of all collectives, else the defaults.
    pub fn model(&self, collective: Collective, p: usize) -> CostModel {
        self.model_on(collective, p, false)
    }

    /// [`Calibration::model`] for a communicator whose members talk through a network
    /// (`network`), from the entries measured so; without any, the built-in
    /// [`CostModel::network`].
    pub fn model_on(&self, collective: Collective, p: usize, network: bool) -> CostModel {
        let default = if network {
            CostModel::network
        } else {
            CostModel::default
        };
        self.nearest_on(p, network)
            .map_or_else(default, |r| CostModel {
                cores: f64::from(r.cores),
                ..r.collectives
                    .get(collective.name())
                    .map_or(r.all.model, |f| f.model)
            })
    }
}

/// Where the calibration file is looked for: `$TCA_MODEL_FILE` if set (`None` if it is
/// `none` or empty), else `$XDG_CONFIG_HOME/tca/model.json`, else
/// `$HOME/.config/tca/model.json`.
pub fn default_path() -> Option<PathBuf> {
    model_path(
        std::env::var_os(env::MODEL_FILE).as_deref(),
        std::env::var_os("XDG_CONFIG_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
}

/// [`default_path`] from the values of `TCA_MODEL_FILE`, `XDG_CONFIG_HOME` and `HOME`.
pub fn model_path(
    model_file: Option<&std::ffi::OsStr>,
    xdg_config_home: Option<&std::ffi::OsStr>,
    home: Option<&std::ffi::OsStr>,
) -> Option<PathBuf> {
    if let Some(v) = model_file {
        if v.is_empty() || v == "none" {
            return None;
        }
        return Some(PathBuf::from(v));
    }
    let xdg = xdg_config_home.filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = xdg.or_else(|| {
        home.filter(|v| !v.is_empty())
            .map(|h| PathBuf::from(h).join(".config"))
    })?;
    Some(base.join("tca").join("model.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_stamps_the_format_and_version() {
        let mut c = Calibration::new("machine", "2026-01-01T00:00:00Z", "tca model calibrate");
        assert_eq!((c.format.as_str(), c.version), (FORMAT, VERSION));
        assert!(
            c.validate().is_err(),
            "a calibration without rank counts is not valid"
        );
        c.ranks = Calibration::builtin().ranks;
        c.validate().unwrap();
        assert_eq!(Calibration::from_json(&c.to_json()).unwrap(), c);
    }
}
