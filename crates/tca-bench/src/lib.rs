//! tca's benchmarks: the machine's physical floor and put_signal ping-pong.
//!
//! Every benchmark launches its own ranks (it re-runs the calling program under
//! [`tca::bootstrap::launcher`]) so that `tca bench pingpong --np 2` is one command. Results
//! are printed by rank 0 as a table, or as JSON with the machine and date for provenance.
#![forbid(unsafe_code)]

pub mod collectives;
pub mod floor;
pub mod machine;
pub mod pingpong;

use tca::bootstrap::launcher::{Launch, under_launcher};

/// Runs `body` as a rank when this process is one; otherwise launches `np` copies of this
/// program (with the same arguments) and returns their exit status.
pub fn launch_or_run(
    np: u32,
    body: impl FnOnce(&tca::World) -> anyhow::Result<()>,
) -> anyhow::Result<i32> {
    if under_launcher() {
        let world = tca::init()?;
        if world.size() != np {
            anyhow::bail!("launched with {} ranks but --np {np}", world.size());
        }
        body(&world)?;
        world.finalize()?;
        Ok(0)
    } else {
        let outcome = Launch::this_program(np)?.run()?;
        Ok(outcome.status())
    }
}

/// The byte sizes 0, 1, 2, 4, ... up to `max` (a power of two or not).
pub fn sizes_up_to(max: usize) -> Vec<usize> {
    let mut v = vec![0];
    let mut s = 1;
    while s <= max {
        v.push(s);
        s *= 2;
    }
    v
}

/// A benchmark result: printable as a table, serialisable as JSON.
pub trait Report: serde::Serialize {
    /// The human-readable table.
    fn table(&self) -> String;
}

/// Runs `bench` on `np` ranks (launching them if needed) and prints rank 0's report as a
/// table or JSON.
pub fn run_and_print<R: Report>(
    np: u32,
    json: bool,
    bench: impl FnOnce(&tca::World) -> anyhow::Result<Option<R>>,
) -> anyhow::Result<i32> {
    launch_or_run(np, |world| {
        if let Some(r) = bench(world)? {
            if json {
                println!("{}", to_json(&r)?);
            } else {
                print!("{}", r.table());
            }
        }
        Ok(())
    })
}

/// A result as pretty JSON.
pub fn to_json<T: serde::Serialize>(v: &T) -> serde_json::Result<String> {
    serde_json::to_string_pretty(v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::sizes_up_to(4), vec![0, 1, 2, 4]);
        assert_eq!(super::sizes_up_to(0), vec![0]);
        assert_eq!(super::sizes_up_to(4 << 20).len(), 24);
    }
}
