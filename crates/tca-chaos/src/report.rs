//! How a rank ended: the one machine-readable record each rank leaves (`result-R.json`).
//!
//! A rank reports what the library told it, not what it guesses: the error's kind, the rank
//! the error names ([`tca::Error::rank`]), and its message. The library names no launcher in
//! an error field; an `Aborted` error whose message says the launcher died or was interrupted
//! is taken as naming it ([`Named::Launcher`]), the one place where a message is read. The
//! message decides even when the error also names a rank: a wait's error that names no one is
//! given the rank the wait was for (`Error::waiting_for` in the library), the launcher's
//! death included, so `rank()` then names a live, innocent peer (`Error::waiting_for` in
//! `crates/tca/src/error.rs`).

use serde::{Deserialize, Serialize};

/// Who an error blames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Named {
    /// A rank.
    Rank(u32),
    /// The launcher.
    Launcher,
    /// Nobody.
    Nobody,
}

impl Named {
    /// Whom a library error names.
    pub fn of(e: &tca::Error) -> Named {
        match e.rank() {
            _ if e.by_launcher() => Named::Launcher,
            Some(r) => Named::Rank(r),
            None => Named::Nobody,
        }
    }
}

/// How a rank's run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Ending {
    /// Every round verified, the stop came, the world finalised.
    Ok,
    /// The library returned an error.
    Error {
        /// `ErrorKind`, as Rust prints it (`PeerDied`, `Timeout`, ...), or `Other` for an
        /// error that is not the library's (the solver's verdict).
        kind: String,
        /// Whom it names.
        named: Named,
        /// Its message.
        message: String,
    },
    /// A result was wrong and no error said so.
    Wrong {
        /// What was wrong.
        what: String,
    },
}

/// The record a rank leaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankReport {
    /// Its rank.
    pub rank: u32,
    /// Its pid.
    pub pid: u32,
    /// How it ended.
    pub ending: Ending,
    /// Rounds completed.
    pub rounds: u64,
    /// When it ended (microseconds since the epoch).
    pub at_unix_us: u64,
    /// Whether the launcher had sent it SIGTERM (caught, so that the rank can report what
    /// the library says rather than die of it).
    pub sigterm: bool,
    /// What the victim of a survivable fault tried and what the library answered.
    pub fault: FaultAnswer,
}

/// What the victim of a survivable fault tried and what the library answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultAnswer {
    /// Whether the fault was inflicted (a lowered descriptor limit that `setrlimit` refused
    /// was not: such a job is not counted as injected).
    #[serde(default)]
    pub inflicted: bool,
    /// Each attempt and the answer, for people.
    pub notes: Vec<String>,
    /// Attempts the library let through that it must refuse (a write through a stale
    /// handle): wrong results, even if the job completes.
    pub accepted: Vec<String>,
    /// Attempts refused, but not as they must be (another error kind than expected).
    pub unexpected: Vec<String>,
}

impl RankReport {
    /// Whom this rank's error names, if it ended with an error.
    pub fn named(&self) -> Option<Named> {
        match &self.ending {
            Ending::Error { named, .. } => Some(*named),
            _ => None,
        }
    }

    /// Reads a report; `None` if the file is missing or not a report (the rank died first).
    pub fn read(path: &std::path::Path) -> Option<Self> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// One line for people.
    pub fn line(&self) -> String {
        let end = match &self.ending {
            Ending::Ok => "ok".to_string(),
            Ending::Error {
                kind,
                named,
                message,
            } => format!("error {kind} naming {named:?}: {message}"),
            Ending::Wrong { what } => format!("WRONG: {what}"),
        };
        let mut s = format!("rank {} (pid {}): {end}", self.rank, self.pid);
        for n in &self.fault.notes {
            s.push_str("; ");
            s.push_str(n);
        }
        if !self.fault.accepted.is_empty() {
            s.push_str("; WRONG, accepted: ");
            s.push_str(&self.fault.accepted.join(", "));
        }
        s
    }
}
