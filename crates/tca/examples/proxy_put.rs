//! One-sided ping-pong of 8 bytes between two ranks: a put with a signal straight through the
//! fabric (`World::put_signal`, the caller's own world), against the same put as a chain the
//! node proxy holds and starts when the rank posts it (`tca run --offload`: `Proxy::window`,
//! `Proxy::chain`, `ProxyScope::istart_with`). Prints half a round trip, median of
//! alternating rounds.
//!
//! `cargo run --release -p tca --example proxy_put`

use std::time::Instant;

use tca::bootstrap::launcher::{Launch, under_launcher};
use tca::fabric::{Handle, SignalOp};
use tca::offload::{Proxy, serve_node};

const ITERS: u64 = 20_000;
const PROXY_ITERS: u64 = 2_000;
const ROUNDS: usize = 5;

/// Half a round trip through the fabric, in us (rank 0 prints it).
fn direct() -> tca::Result<()> {
    let w = tca::init()?;
    let seg = w.alloc(64)?;
    let hs = w.all_handles(&seg)?;
    let (me, peer) = (w.rank(), 1 - w.rank());
    let to = &hs[peer as usize];
    let data = [7u8; 8];
    w.barrier()?;
    let t = Instant::now();
    for i in 1..=ITERS {
        if me == 0 {
            w.put_signal(to, 8, &data, to, 0, SignalOp::Set(i))?;
            w.wait_until(&seg, 0, i)?;
        } else {
            w.wait_until(&seg, 0, i)?;
            w.put_signal(to, 8, &data, to, 0, SignalOp::Set(i))?;
        }
    }
    if me == 0 {
        println!(
            "direct {:.3}",
            t.elapsed().as_secs_f64() * 1e6 / ITERS as f64 / 2.0
        );
    }
    w.finalize()
}

/// The same through the node proxy.
fn proxied() -> tca::Result<()> {
    let p = Proxy::connect()?;
    let win = p.window(64)?;
    let src = p.window(8)?;
    src.write(0, &[7u8; 8])?;
    let (me, peer) = (p.rank(), 1 - p.rank());
    let mut mine = p.alloc::<u8>(Handle::BYTES)?;
    let mut all = p.alloc::<u8>(2 * Handle::BYTES)?;
    mine.copy_from_slice(&win.handle().to_bytes());
    p.scope(|s| s.iallgather(&mine, &mut all)?.wait())?;
    let to = Handle::from_bytes(&all[peer as usize * Handle::BYTES..][..Handle::BYTES])?;
    let chain = p
        .chain()
        .put(&src, 0, &to, 8, 8)
        .signal(&to, 0, SignalOp::Set(0))
        .build()?;
    p.scope(|s| s.ibarrier()?.wait())?;
    let t = Instant::now();
    for i in 1..=PROXY_ITERS {
        p.scope(|s| {
            if me == 1 {
                win.wait_until(0, i)?;
            }
            let mut put = s.istart_with(&chain, SignalOp::Set(i))?;
            if me == 0 {
                win.wait_until(0, i)?;
            }
            put.wait().map(drop)
        })?;
    }
    if me == 0 {
        println!(
            "proxy {:.3}",
            t.elapsed().as_secs_f64() * 1e6 / PROXY_ITERS as f64 / 2.0
        );
    }
    drop(chain);
    drop((win, src, mine, all));
    p.finish()
}

fn main() -> tca::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("node-proxy") {
        return serve_node();
    }
    if under_launcher() {
        return if std::env::var_os("TCA_PROXY_FD").is_some() {
            proxied()
        } else {
            direct()
        };
    }
    let exe = std::env::current_exe()
        .map_err(|e| tca::Error::program(format!("finding this program: {e}")))?;
    println!("8-byte put with a signal, half a round trip in us, {ROUNDS} alternating rounds:");
    for _ in 0..ROUNDS {
        for offload in [false, true] {
            let o = Launch {
                ranks: 2,
                program: exe.clone().into(),
                offload: offload.then(|| vec![exe.clone().into(), "node-proxy".into()]),
                ..Default::default()
            }
            .run()?;
            if o.status() != 0 {
                std::process::exit(o.status());
            }
        }
    }
    Ok(())
}
