//! The process-wide model: [`active`] reads the calibration file at [`default_path`] once, at
//! the first communicator, and keeps it for the life of the process. Reading never fails: a
//! missing file, `TCA_MODEL_FILE=none` or a file that cannot be used gives the built-in
//! defaults, and [`Source`] records which; [`warn_once`] reports an unusable file once per job.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::{Calibration, default_path};
use crate::env;

/// Where the active model came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// The built-in defaults: no calibration file.
    Builtin,
    /// The built-in defaults, because `TCA_MODEL_FILE` says so (`none`).
    Disabled,
    /// A calibration file.
    File(PathBuf),
    /// The built-in defaults, because the file could not be used (the warning printed).
    Fallback(PathBuf, String),
}

/// The models the library selects with, and where they came from.
#[derive(Debug, Clone)]
pub struct Active {
    /// The models.
    pub calibration: Calibration,
    /// Their source.
    pub source: Source,
}

impl Active {
    /// One line saying which models are in use.
    pub fn describe(&self) -> String {
        let c = &self.calibration;
        let ranks: Vec<String> = c.ranks.iter().map(|r| r.ranks.to_string()).collect();
        match &self.source {
            Source::Builtin => {
                "built-in default cost model (no calibration file; run `tca model calibrate`)"
                    .into()
            }
            Source::Disabled => format!("built-in default cost model ({}=none)", env::MODEL_FILE),
            Source::File(p) => format!(
                "cost model calibrated {} on {} for {} ranks ({})",
                c.date,
                c.machine,
                ranks.join(", "),
                p.display()
            ),
            Source::Fallback(p, e) => format!(
                "built-in default cost model ({} unusable: {e})",
                p.display()
            ),
        }
    }
}

/// The models at `path` (or the defaults when there is no file), with where they came from.
/// Never fails: a file that cannot be used gives [`Source::Fallback`] and the defaults.
pub fn load_or_default(path: Option<&Path>) -> Active {
    let Some(path) = path else {
        return Active {
            calibration: Calibration::builtin(),
            source: Source::Disabled,
        };
    };
    if !path.exists() {
        return Active {
            calibration: Calibration::builtin(),
            source: Source::Builtin,
        };
    }
    match Calibration::load(path) {
        Ok(c) => Active {
            calibration: c,
            source: Source::File(path.to_path_buf()),
        },
        Err(e) => Active {
            calibration: Calibration::builtin(),
            source: Source::Fallback(path.to_path_buf(), e.to_string()),
        },
    }
}

/// The models this process selects with, read once at first use (the first communicator):
/// see the [`model`](super) docs. Never fails; see [`warn_once`] for a file that could not be
/// used.
pub fn active() -> &'static Active {
    static ACTIVE: OnceLock<Active> = OnceLock::new();
    ACTIVE.get_or_init(|| match default_path() {
        Some(p) => load_or_default(Some(&p)),
        None if std::env::var_os(env::MODEL_FILE).is_some() => load_or_default(None),
        None => Active {
            calibration: Calibration::builtin(),
            source: Source::Builtin,
        },
    })
}

/// Prints, once per process, why the calibration file in force could not be used (if it
/// could not): communicators call it on their rank 0, so a job reports it once per job rather
/// than once per rank.
pub fn warn_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if let Source::Fallback(_, e) = &active().source {
        ONCE.call_once(|| eprintln!("tca: warning: {e}; using the built-in cost model"));
    }
}
