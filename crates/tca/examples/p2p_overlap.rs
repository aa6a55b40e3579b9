//! What a plain communicator's progress thread (`Comm::overlap`, `TCA_P2P_PROGRESS=thread`)
//! buys a peer, and what it costs: rank 0 posts a receive and then computes a fixed amount of
//! work (about 10 ms) inside `Comm::overlap`; rank 1 sends, blocking, and times its send.
//! Alternating rounds with the caller's progress (the work runs inline; rank 1's rendezvous
//! waits for rank 0's wait) and the progress thread. Also a flood of 256 eager 1 KiB
//! messages (more than the ring holds), a send that starts 5 ms into the computation (the
//! loop has been quiet and napping), a computation of 100 ms (what the naps cost it), and
//! the cost of one `overlap` with no work.
//!
//! `cargo run --release -p tca --example p2p_overlap` (two thread ranks), or as processes
//! bound by the launcher: `tca run --np 2 target/release/examples/p2p_overlap`.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // step counts, byte patterns

use std::hint::black_box;
use std::time::{Duration, Instant};

use tca::offload::Progress;
use tca::{Comm, World, threads};

const ROUNDS: usize = 5;
const FLOOD: usize = 256;

/// `n` dependent multiply-adds (work the compiler cannot shorten).
fn chain(n: u64) -> f64 {
    let mut x = black_box(1.0f64);
    for _ in 0..black_box(n) {
        x = x * 0.999_999_9 + 1e-7;
    }
    x
}

/// Steps of `chain` that take about `us` microseconds here (fastest of five runs).
fn steps_for(us: f64) -> u64 {
    let n = 1 << 21;
    let best = (0..5)
        .map(|_| {
            let t0 = Instant::now();
            black_box(chain(n));
            t0.elapsed().as_secs_f64() * 1e6
        })
        .fold(f64::INFINITY, f64::min);
    (us * n as f64 / best.max(1e-3)) as u64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One round: (rank 1's send time, rank 0's receive + computation + wait), in us; rank 1
/// starts sending `late` after the round starts.
fn round(
    c: &Comm,
    mode: Progress,
    bytes: Option<usize>,
    steps: u64,
    late: Duration,
) -> tca::Result<[f64; 2]> {
    c.set_progress(mode);
    c.barrier()?;
    if c.rank() == 1 {
        std::thread::sleep(late);
    }
    let t0 = Instant::now();
    let mut out = [0.0; 2];
    match bytes {
        Some(n) if c.rank() == 0 => {
            let mut buf = vec![0u8; n];
            let mut r = c.irecv(&mut buf, 1, 0)?;
            black_box(c.overlap(|| chain(steps))?);
            r.wait()?;
            out[1] = t0.elapsed().as_secs_f64() * 1e6;
        }
        Some(n) => {
            c.send_bytes(&vec![1u8; n], 0, 0)?;
            out[0] = t0.elapsed().as_secs_f64() * 1e6;
        }
        None if c.rank() == 0 => {
            black_box(c.overlap(|| chain(steps))?);
            let mut m = [0u8; 1024];
            for _ in 0..FLOOD {
                c.recv_bytes(&mut m, 1, 0)?;
            }
            out[1] = t0.elapsed().as_secs_f64() * 1e6;
        }
        None => {
            for k in 0..FLOOD {
                c.send_bytes(&[k as u8; 1024], 0, 0)?;
            }
            out[0] = t0.elapsed().as_secs_f64() * 1e6;
        }
    }
    let mut both = [0.0; 4];
    c.allgather(&out, &mut both)?;
    Ok([both[2], both[0] + both[1]])
}

fn body(w: &World) -> tca::Result<()> {
    let c = Comm::world(w)?;
    if c.size() != 2 {
        return Err(tca::Error::program("p2p_overlap runs on 2 ranks"));
    }
    let mut steps = [steps_for(10_000.0)];
    c.broadcast(&mut steps, 0)?;
    let steps = steps[0];
    // One overlap with no work, thread mode: a thread started and joined.
    c.set_progress(Progress::Thread);
    let mut empty: Vec<f64> = (0..200)
        .map(|_| {
            let t0 = Instant::now();
            c.overlap(|| ()).map(|()| t0.elapsed().as_secs_f64() * 1e6)
        })
        .collect::<tca::Result<_>>()?;
    if c.rank() == 0 {
        println!(
            "# 2 ranks; rank 0 computes ~10 ms of fixed work in Comm::overlap; \
             medians of {ROUNDS} alternating rounds, us"
        );
        println!(
            "# one overlap with no work (thread): median {:.1} us",
            median(&mut empty)
        );
        println!(
            "{:>16} {:>14} {:>14} {:>14} {:>14}",
            "case", "r1 send caller", "r1 send thread", "r0 all caller", "r0 all thread"
        );
    }
    let now = Duration::ZERO;
    let cases: [(String, Option<usize>, u64, Duration); 6] = [
        (format!("{FLOOD} x 1 KiB"), None, steps, now),
        ("64 KiB".into(), Some(64 << 10), steps, now),
        ("1 MiB".into(), Some(1 << 20), steps, now),
        ("4 MiB".into(), Some(4 << 20), steps, now),
        (
            "64 KiB, 5 ms in".into(),
            Some(64 << 10),
            steps,
            Duration::from_millis(5),
        ),
        ("64 KiB, 100 ms".into(), Some(64 << 10), 10 * steps, now),
    ];
    for (name, bytes, steps, late) in cases {
        let (mut caller, mut thread) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            caller.push(round(&c, Progress::Caller, bytes, steps, late)?);
            thread.push(round(&c, Progress::Thread, bytes, steps, late)?);
        }
        let col =
            |v: &[[f64; 2]], i: usize| median(&mut v.iter().map(|r| r[i]).collect::<Vec<_>>());
        if c.rank() == 0 {
            println!(
                "{name:>16} {:>14.0} {:>14.0} {:>14.0} {:>14.0}",
                col(&caller, 0),
                col(&thread, 0),
                col(&caller, 1),
                col(&thread, 1)
            );
        }
    }
    Ok(())
}

fn main() -> tca::Result<()> {
    if std::env::var_os(tca::env::RANK).is_some() {
        let w = tca::init()?;
        body(&w)?;
        w.finalize()
    } else {
        threads::run(2, body).map(drop)
    }
}
