//! What the processes of one job share: the job's description (a JSON file the launcher and
//! every rank read) and a directory through which the ranks and the campaign talk.
//!
//! Why files, not pipes: the campaign kills processes at random, and a file written by
//! rename is either there, whole, or not at all; it outlives whoever wrote it, so a rank that
//! reported and then died still counts; and nothing needs a reader that might be gone.
//!
//! ```text
//! DIR/spec.json       this job (JobSpec)                 campaign -> launcher, ranks
//! DIR/ready-R         "PID JOBID HANDLE": rank R runs     rank R -> campaign
//!                     its rounds (HANDLE: one of its
//!                     segments, for a later stale-handle job)
//! DIR/applied         the victim inflicted its fault      victim -> campaign
//! DIR/stop            end the rounds (rank 0 reads it)    campaign -> rank 0
//! DIR/result-R.json   how rank R ended (RankReport)       rank R -> campaign
//! DIR/out, DIR/err    the launcher's and ranks' output    for a reader of a failed job
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::plan::JobPlan;

/// One job, as its processes see it: its plan, and what the campaign adds to start it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobSpec {
    /// What the campaign drew for this job.
    #[serde(flatten)]
    pub plan: JobPlan,
    /// A segment handle (hex) of an earlier job that has ended, for `stale-handle`.
    pub stale_handle: Option<String>,
    /// The job's directory.
    pub dir: PathBuf,
    /// How to start this program again as a process of the job (the launcher appends
    /// `--job SPEC` and starts it as each rank).
    pub command: Vec<String>,
    /// Wall-clock time (ms since the epoch) after which a rank stops on its own: a last
    /// guard for ranks whose campaign and launcher are both gone.
    pub deadline_unix_ms: u64,
}

impl JobSpec {
    /// Reads a job's description.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the job description {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("{}: not a job description", path.display()))
    }

    /// The job's directory and its files.
    pub fn dir(&self) -> JobDir {
        JobDir(self.dir.clone())
    }
}

/// A job's directory (see the module doc).
#[derive(Debug, Clone)]
pub struct JobDir(pub PathBuf);

impl JobDir {
    /// The job description.
    pub fn spec(&self) -> PathBuf {
        self.0.join("spec.json")
    }
    /// Rank `r` is running its rounds.
    pub fn ready(&self, r: u32) -> PathBuf {
        self.0.join(format!("ready-{r}"))
    }
    /// The victim inflicted its fault.
    pub fn applied(&self) -> PathBuf {
        self.0.join("applied")
    }
    /// End the rounds.
    pub fn stop(&self) -> PathBuf {
        self.0.join("stop")
    }
    /// How rank `r` ended.
    pub fn result(&self, r: u32) -> PathBuf {
        self.0.join(format!("result-{r}.json"))
    }
    /// The processes' standard output.
    pub fn out(&self) -> PathBuf {
        self.0.join("out")
    }
    /// The processes' standard error.
    pub fn err(&self) -> PathBuf {
        self.0.join("err")
    }
}

/// Writes `text` to `path` whole or not at all (a temporary file, then a rename).
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("part");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Milliseconds since the epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Microseconds since the epoch.
pub fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
