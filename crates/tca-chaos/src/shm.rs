//! Objects in `/dev/shm`: what a job must not leave behind.
//!
//! tca's segments and launcher boards are memfds, which have no name and cannot outlive
//! their last user; only jobs started without the launcher make a named board there (and
//! unlink it). So any `tca*` entry a job leaves in `/dev/shm` is a leak. Entries that other
//! programs of this user create meanwhile (another test suite's Slurm-style jobs) would count
//! too: the comparison is per job, before and after.

use std::collections::BTreeSet;

/// Names in `/dev/shm` that start with `tca`.
pub fn tca_entries() -> BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with("tca"))
                .collect()
        })
        .unwrap_or_default()
}
