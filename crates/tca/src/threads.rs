//! In-process mode: N ranks as N threads of one process, on the same shared-memory code.
//!
//! Each thread joins the job exactly as a process would (its own control segment, a board,
//! peers attached through `/proc`), so tests and embedders exercise the real transport. A rank
//! that panics or returns an error is marked failed on the board, and every other rank's next
//! wait fails with [`ErrorKind::PeerDied`] naming it instead of hanging.

use crate::bootstrap::{BoardSource, JobEnv};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::World;
use crate::offload::Proxy;
use crate::transport::{NodeBoard, open_inherited};

/// Runs `f` on `n` ranks (threads) and returns each rank's result, indexed by rank.
pub fn run_each<T, F>(n: u32, f: F) -> Vec<Result<T>>
where
    T: Send,
    F: Fn(&World) -> Result<T> + Sync,
{
    if std::env::var(crate::env::TRANSPORT).is_ok_and(|t| t.trim() == "sim") {
        // The same ranks on a simulated network (the suites run unchanged on it).
        return match crate::sim::Options::from_env() {
            Ok(opts) => match crate::sim::run_each(&opts, n, f) {
                Ok((all, ..)) => all,
                Err(e) => vec![Err(e)],
            },
            Err(e) => vec![Err(e)],
        };
    }
    run_ranks(n, |_, joined| joined, lent(f))
}

/// `f` on a world it borrows; an error of `f` marks the rank failed (its peers' waits fail
/// naming it instead of hanging).
pub(crate) fn lent<T>(
    f: impl Fn(&World) -> Result<T> + Sync,
) -> impl Fn(World) -> Result<T> + Sync {
    move |world| {
        let r = f(&world);
        if r.is_err() {
            world.mark_failed();
        }
        r
    }
}

/// Runs `f` on `n` ranks (threads), each with a progress thread of its own that owns the
/// rank's world ([`Proxy`]): the in-process form of `TCA_PROGRESS=thread`. The proxies
/// leave cleanly together (after a barrier) when every `f` returned `Ok`; a rank whose `f`
/// failed marks itself failed, so its peers get errors naming it. The ranks run on shared
/// memory (or libfabric, `TCA_TRANSPORT=ofi`); `TCA_TRANSPORT=sim` does not apply here, as a
/// progress thread cannot serve a rank of the simulated network's one virtual-time schedule.
pub fn run_offloaded<T, F>(n: u32, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&Proxy) -> Result<T> + Sync,
{
    let all = run_ranks(
        n,
        |_, joined| joined,
        |world| {
            let proxy = Proxy::start(world)?;
            match f(&proxy) {
                Ok(v) => proxy.finish().map(|()| v),
                Err(e) => {
                    let _ = proxy.fail();
                    Err(e)
                }
            }
        },
    );
    root_error(all)
}

/// [`run_each`] with `setup` between a rank's joining and `f`: it gets the rank and what
/// joining gave, and returns the world `f` runs on (the simulated transport makes its rank
/// part of the simulation there, or, when joining failed, tells the simulation that the rank
/// will not come).
pub(crate) fn run_ranks<T, S, F>(n: u32, setup: S, f: F) -> Vec<Result<T>>
where
    T: Send,
    S: Fn(u32, Result<World>) -> Result<World> + Sync,
    F: Fn(World) -> Result<T> + Sync,
{
    let max = crate::env::max_ranks();
    if n == 0 || n > max {
        let e = Error::new(
            ErrorKind::InvalidArgument,
            format!("thread mode needs 1..={max} ranks, got {n}"),
        );
        return vec![Err(e)];
    }
    let job = crate::rand::random_u64();
    let (fd, _board) = match NodeBoard::create(n, job, None) {
        Ok(b) => b,
        Err(e) => return vec![Err(e)],
    };
    // An open descriptor is never negative.
    let Ok(raw) = u32::try_from(std::os::fd::AsRawFd::as_raw_fd(&fd)) else {
        return vec![Err(Error::new(ErrorKind::Transport, "negative descriptor"))];
    };
    let (f, setup) = (&f, &setup);
    on_rank_threads(&(0..n).collect::<Vec<u32>>(), "tca-rank", |rank| {
        let joined = open_inherited(std::process::id(), raw).and_then(|fd| {
            World::join(JobEnv {
                rank,
                size: n,
                job,
                board: BoardSource::Fd(fd),
                source: "threads",
                boot_deadline: std::time::Instant::now() + std::time::Duration::from_secs(60),
                kv: None,
            })
        });
        f(setup(rank, joined)?)
    })
}

/// `f(rank)` on a thread of its own for each of `ranks` (named `{name}-{rank}`), every result
/// in the order of `ranks`; a thread that cannot start, or panics, is an error naming its
/// rank. The one loop of rank threads (thread mode, the node proxy's serving threads).
pub(crate) fn on_rank_threads<T: Send>(
    ranks: &[u32],
    name: &str,
    f: impl Fn(u32) -> Result<T> + Sync,
) -> Vec<Result<T>> {
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .map(|&rank| {
                std::thread::Builder::new()
                    .name(format!("{name}-{rank}"))
                    .spawn_scoped(s, move || f(rank))
            })
            .collect();
        handles
            .into_iter()
            .zip(ranks)
            .map(|(h, &rank)| match h {
                Err(e) => Err(Error::os(
                    ErrorKind::Launch,
                    format!("spawning thread for rank {rank}"),
                    e,
                )),
                Ok(h) => h.join().unwrap_or_else(|p| {
                    let msg = crate::error::panic_message(&*p);
                    Err(Error::peer(
                        ErrorKind::PeerDied,
                        rank,
                        format!("rank {rank} panicked: {msg}"),
                    ))
                }),
            })
            .collect()
    })
}

/// Runs `f` on `n` ranks (threads); all results, or the error that caused the failure (a
/// rank's own error is preferred over the "peer died" errors it caused elsewhere).
pub fn run<T, F>(n: u32, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&World) -> Result<T> + Sync,
{
    root_error(run_each(n, f))
}

/// Every rank's result, or the error that caused the failure: a rank's own error is preferred
/// over the "peer died" errors it caused elsewhere.
pub(crate) fn root_error<T>(all: Vec<Result<T>>) -> Result<Vec<T>> {
    if all.iter().all(|r| r.is_ok()) {
        return all.into_iter().collect();
    }
    let errs: Vec<Error> = all.into_iter().filter_map(|r| r.err()).collect();
    let root = errs
        .iter()
        .find(|e| !matches!(e.kind(), ErrorKind::PeerDied | ErrorKind::Aborted))
        .or_else(|| errs.iter().find(|e| e.message().contains("panicked")))
        .unwrap_or(&errs[0]);
    Err(root.clone())
}
