//! The suite over a real MPI (rsmpi), for `--compare mpi`: the calls IMB-MPI1 makes for each
//! benchmark (PingPong: `MPI_Send` + `MPI_Recv`; PingPing: `MPI_Isend` + `MPI_Recv` +
//! `MPI_Wait`; the collectives with rank 0 as root, `MPI_FLOAT` + `MPI_SUM` for reductions,
//! `MPI_Reduce_scatter_block` for Reduce_scatter), the calls the OSU micro-benchmarks make
//! (`MPI_Isend`/`MPI_Irecv` windows and `MPI_Waitall`), Put and Get as `MPI_Put`/`MPI_Get` +
//! `MPI_Win_flush` in a window of `MPI_Win_allocate` under one `MPI_Win_lock_all` epoch
//! (GASNet's blocking put and get: complete at the target, or here, on return), and the halo
//! exchange through
//! `MPI_Irecv`/`MPI_Isend` + `MPI_Waitall` (rsmpi has no persistent requests; Open MPI's
//! persistent point-to-point is the same path). Buffers are allocated once, as in
//! [`super::tca`]. MPI reports errors by aborting the job (its default error handler), which
//! the parent sees as a failed `mpirun`.

use anyhow::{Context, Result};
use tca_mpi::MpiComm;
use tca_mpi::mpi;
use tca_mpi::mpi::collective::SystemOperation;
use tca_mpi::mpi::topology::SimpleCommunicator;
use tca_mpi::mpi::traits::*;

use super::driver::{self, Backend};
use super::halo::{Buffers, Halo};
use super::overlap::Cpu;
use super::{Benchmark, Kind, OSU_WINDOW, Options};

/// MPI's side of the suite.
pub struct MpiBackend {
    lib: MpiComm,
    bsend: Vec<u8>,
    brecv: Vec<u8>,
    fsend: Vec<f32>,
    frecv: Vec<f32>,
    bwin: Vec<u8>,
    /// The one-sided window of Put and Get, when they are among the benchmarks (allocated
    /// and freed collectively, with the backend).
    rma: Option<tca_mpi::rma::Window>,
    halo: Option<Buffers>,
    cur: (Kind, usize),
    /// Whether the benchmark prepared last is non-blocking (IMB-NBC).
    nonblocking: bool,
}

impl std::fmt::Debug for MpiBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiBackend")
            .field("lib", &self.lib)
            .field("cur", &self.cur)
            .finish_non_exhaustive()
    }
}

impl MpiBackend {
    /// Buffers for messages up to the largest size.
    pub fn new(world: SimpleCommunicator, opts: &Options) -> Self {
        let p = world.size() as usize;
        let max = opts.sizes.iter().copied().max().unwrap_or(0).max(8);
        let rma = opts
            .benches()
            .any(|b| matches!(b.kind, Kind::Put | Kind::Get))
            .then(|| tca_mpi::rma::Window::allocate(&world, max));
        Self {
            lib: MpiComm::new(world),
            bsend: vec![0xa5; max * p],
            brecv: vec![0; max * p.max(2)],
            fsend: vec![1.0; max / 4 * p],
            frecv: vec![0.0; max / 4 * p],
            bwin: vec![
                0;
                if super::tca::osu_windows(opts) {
                    max * OSU_WINDOW
                } else {
                    0
                }
            ],
            rma,
            halo: None,
            cur: (Kind::Barrier, 0),
            nonblocking: false,
        }
    }

    /// One call of an OSU test (see [`super::tca`]: the same messages through MPI).
    fn osu(&mut self, kind: Kind) {
        let w = self.lib.world();
        let bytes = self.cur.1;
        let (me, p) = (w.rank(), w.size());
        let pairs = if kind == Kind::OsuMbwMr { p / 2 } else { 1 };
        if me >= 2 * pairs {
            return;
        }
        let sender = me < pairs;
        let other = w.process_at_rank(if sender { me + pairs } else { me - pairs });
        let bs = &self.bsend[..bytes];
        let mut ack = [0u8; 4];
        let mut done = Vec::with_capacity(2 * OSU_WINDOW);
        let win = self.bwin.chunks_mut(bytes.max(1)).map(|b| &mut b[..bytes]);
        match kind {
            Kind::OsuLatency if sender => {
                other.send(bs);
                other.receive_into(&mut self.brecv[..bytes]);
            }
            Kind::OsuLatency => {
                other.receive_into(&mut self.brecv[..bytes]);
                other.send(bs);
            }
            Kind::OsuBw | Kind::OsuMbwMr if sender => {
                mpi::request::multiple_scope(OSU_WINDOW, |scope, coll| {
                    for _ in 0..OSU_WINDOW {
                        coll.add(other.immediate_send_with_tag(scope, bs, 100));
                    }
                    coll.wait_all(&mut done);
                });
                other.receive_into_with_tag(&mut ack[..], 101);
            }
            Kind::OsuBw | Kind::OsuMbwMr => {
                mpi::request::multiple_scope(OSU_WINDOW, |scope, coll| {
                    for b in win.take(OSU_WINDOW) {
                        coll.add(other.immediate_receive_into_with_tag(scope, b, 100));
                    }
                    coll.wait_all(&mut done);
                });
                other.send_with_tag(&ack[..], 101);
            }
            Kind::OsuBibw => {
                mpi::request::multiple_scope(2 * OSU_WINDOW, |scope, coll| {
                    for b in win.take(OSU_WINDOW) {
                        coll.add(other.immediate_receive_into_with_tag(scope, b, 100));
                    }
                    for _ in 0..OSU_WINDOW {
                        coll.add(other.immediate_send_with_tag(scope, bs, 100));
                    }
                    coll.wait_all(&mut done);
                });
            }
            _ => unreachable!("OSU kinds only"),
        }
    }

    /// `n` calls of the prepared collective through the MPI's immediate form (`MPI_Ibcast`,
    /// `MPI_Iallreduce`, ...; `MPI_Ireduce_scatter_block` for Ireduce_scatter), each followed
    /// by `work` (see [`Cpu::run`], with `MPI_Test` as the test) and `MPI_Wait`. Returns the
    /// microseconds spent computing.
    fn nonblocking(&mut self, n: u64, work: Option<(&Cpu, f64, u32)>) -> Result<f64> {
        let (kind, bytes) = self.cur;
        if !kind.collective() {
            anyhow::bail!("{kind:?} has no non-blocking form");
        }
        let w = self.lib.world();
        let p = w.size() as usize;
        let me = w.rank();
        let root = w.process_at_rank(0);
        let e = bytes / 4;
        let (bs, br, fs, fr) = (
            &mut self.bsend,
            &mut self.brecv,
            &self.fsend,
            &mut self.frecv,
        );
        let sum = SystemOperation::sum;
        let mut spent = 0.0;
        for _ in 0..n {
            spent += mpi::request::scope(|sc| match kind {
                Kind::Bcast => overlap(root.immediate_broadcast_into(sc, &mut bs[..bytes]), work),
                Kind::Scatter if me == 0 => overlap(
                    root.immediate_scatter_into_root(sc, &bs[..bytes * p], &mut br[..bytes]),
                    work,
                ),
                Kind::Scatter => overlap(root.immediate_scatter_into(sc, &mut br[..bytes]), work),
                Kind::Gather if me == 0 => overlap(
                    root.immediate_gather_into_root(sc, &bs[..bytes], &mut br[..bytes * p]),
                    work,
                ),
                Kind::Gather => overlap(root.immediate_gather_into(sc, &bs[..bytes]), work),
                Kind::Reduce if me == 0 => overlap(
                    root.immediate_reduce_into_root(sc, &fs[..e], &mut fr[..e], sum()),
                    work,
                ),
                Kind::Reduce => overlap(root.immediate_reduce_into(sc, &fs[..e], sum()), work),
                Kind::Allgather => overlap(
                    w.immediate_all_gather_into(sc, &bs[..bytes], &mut br[..bytes * p]),
                    work,
                ),
                Kind::Allreduce => overlap(
                    w.immediate_all_reduce_into(sc, &fs[..e], &mut fr[..e], sum()),
                    work,
                ),
                Kind::ReduceScatter => overlap(
                    w.immediate_reduce_scatter_block_into(sc, &fs[..e], &mut fr[..e / p], sum()),
                    work,
                ),
                Kind::Alltoall => overlap(
                    w.immediate_all_to_all_into(sc, &bs[..bytes * p], &mut br[..bytes * p]),
                    work,
                ),
                Kind::Barrier => overlap(w.immediate_barrier(), work),
                _ => unreachable!("checked above"),
            });
        }
        Ok(spent)
    }

    /// One halo exchange: every ghost's `MPI_Irecv`, every face's `MPI_Isend`, `MPI_Waitall`.
    fn halo(&mut self) {
        let w = self.lib.world();
        let Some(Buffers {
            faces, send, ghost, ..
        }) = &mut self.halo
        else {
            return;
        };
        let mut done = Vec::with_capacity(2 * faces.len());
        mpi::request::multiple_scope(2 * faces.len(), |scope, coll| {
            for (f, g) in faces.iter().zip(ghost.iter_mut()) {
                let from = w.process_at_rank(f.from as i32);
                coll.add(from.immediate_receive_into_with_tag(scope, &mut g[..], f.tag));
            }
            for (f, s) in faces.iter().zip(send.iter()) {
                let to = w.process_at_rank(f.to as i32);
                coll.add(to.immediate_send_with_tag(scope, &s[..], f.tag));
            }
            coll.wait_all(&mut done);
        });
    }
}

impl Backend for MpiBackend {
    type Lib = MpiComm;

    fn lib(&mut self) -> &mut MpiComm {
        &mut self.lib
    }

    fn prepare(&mut self, bench: &Benchmark, bytes: usize) -> Result<()> {
        self.cur = (bench.kind, bytes);
        self.nonblocking = bench.nonblocking();
        Ok(())
    }

    fn prepare_halo(&mut self, halo: &Halo) -> Result<()> {
        self.cur = (Kind::Halo, halo.bytes_per_exchange());
        self.nonblocking = false;
        self.halo = Some(Buffers::new(halo, self.lib.world().rank() as u32));
        Ok(())
    }

    fn calls(&mut self, n: u64) -> Result<()> {
        let (kind, bytes) = self.cur;
        if self.nonblocking {
            return self.nonblocking(n, None).map(drop);
        }
        match kind {
            Kind::OsuLatency | Kind::OsuBw | Kind::OsuBibw | Kind::OsuMbwMr => {
                (0..n).for_each(|_| self.osu(kind));
                return Ok(());
            }
            Kind::Halo => {
                (0..n).for_each(|_| self.halo());
                return match &self.halo {
                    Some(h) if n > 0 => h.check(),
                    _ => Ok(()),
                };
            }
            _ => {}
        }
        let w = self.lib.world();
        let p = w.size() as usize;
        let me = w.rank();
        let root = w.process_at_rank(0);
        let e = bytes / 4;
        let (bs, br, fs, fr) = (
            &mut self.bsend,
            &mut self.brecv,
            &mut self.fsend,
            &mut self.frecv,
        );
        for _ in 0..n {
            match kind {
                Kind::PingPong => {
                    let other = w.process_at_rank(1 - me);
                    if me == 0 {
                        other.send(&bs[..bytes]);
                        other.receive_into(&mut br[..bytes]);
                    } else {
                        other.receive_into(&mut br[..bytes]);
                        other.send(&bs[..bytes]);
                    }
                }
                Kind::PingPing => {
                    let other = w.process_at_rank(1 - me);
                    mpi::request::scope(|scope| {
                        let req = other.immediate_send(scope, &bs[..bytes]);
                        other.receive_into(&mut br[..bytes]);
                        req.wait();
                    });
                }
                Kind::Sendrecv => {
                    let right = w.process_at_rank((me + 1) % p as i32);
                    let left = w.process_at_rank((me + p as i32 - 1) % p as i32);
                    mpi::point_to_point::send_receive_into(
                        &bs[..bytes],
                        &right,
                        &mut br[..bytes],
                        &left,
                    );
                }
                Kind::Exchange => {
                    let right = w.process_at_rank((me + 1) % p as i32);
                    let left = w.process_at_rank((me + p as i32 - 1) % p as i32);
                    let (a, b) = br[..2 * bytes].split_at_mut(bytes);
                    mpi::request::scope(|scope| {
                        let r1 = left.immediate_receive_into(scope, a);
                        let r2 = right.immediate_receive_into(scope, b);
                        let s1 = left.immediate_send(scope, &bs[..bytes]);
                        let s2 = right.immediate_send(scope, &bs[..bytes]);
                        r1.wait();
                        r2.wait();
                        s1.wait();
                        s2.wait();
                    });
                }
                Kind::Bcast => root.broadcast_into(&mut bs[..bytes]),
                Kind::Scatter => {
                    if me == 0 {
                        root.scatter_into_root(&bs[..bytes * p], &mut br[..bytes]);
                    } else {
                        root.scatter_into(&mut br[..bytes]);
                    }
                }
                Kind::Gather => {
                    if me == 0 {
                        root.gather_into_root(&bs[..bytes], &mut br[..bytes * p]);
                    } else {
                        root.gather_into(&bs[..bytes]);
                    }
                }
                Kind::Reduce => {
                    if me == 0 {
                        root.reduce_into_root(&fs[..e], &mut fr[..e], SystemOperation::sum());
                    } else {
                        root.reduce_into(&fs[..e], SystemOperation::sum());
                    }
                }
                Kind::Allgather => w.all_gather_into(&bs[..bytes], &mut br[..bytes * p]),
                Kind::Allreduce => {
                    w.all_reduce_into(&fs[..e], &mut fr[..e], SystemOperation::sum())
                }
                Kind::ReduceScatter => {
                    w.reduce_scatter_block_into(&fs[..e], &mut fr[..e / p], SystemOperation::sum())
                }
                Kind::Alltoall => w.all_to_all_into(&bs[..bytes * p], &mut br[..bytes * p]),
                Kind::Barrier => w.barrier(),
                Kind::OsuLatency | Kind::OsuBw | Kind::OsuBibw | Kind::OsuMbwMr | Kind::Halo => {
                    unreachable!("handled above")
                }
                // Rank 0 puts into (gets from) rank 1's window; rank 1 takes no part.
                Kind::Put if me == 0 => {
                    let win = self.rma.as_ref().expect("allocated for Put");
                    win.put(&bs[..bytes], 1, 0);
                }
                Kind::Get if me == 0 => {
                    let win = self.rma.as_ref().expect("allocated for Get");
                    win.get(&mut br[..bytes], 1, 0);
                }
                Kind::Put | Kind::Get => {}
                Kind::AmShort
                | Kind::AmMedium
                | Kind::AmMediumFrom
                | Kind::AmLong
                | Kind::PutFrom
                | Kind::PutNbi
                | Kind::GetNbi
                | Kind::VisHalo
                | Kind::VisHaloMtoM => {
                    unreachable!("tca only: MPI does not run them")
                }
            }
        }
        Ok(())
    }

    fn overlapped(&mut self, n: u64, cpu: &Cpu, us: f64, tests: u32) -> Result<f64> {
        self.nonblocking(n, Some((cpu, us, tests)))
    }

    fn algorithm(&self, _: &Benchmark, _: usize) -> String {
        "-".into()
    }

    fn runs(&self, bench: &Benchmark) -> bool {
        !bench.tca_only()
    }
}

/// Runs `work` over a started request (testing it with `MPI_Test` between the computation's
/// slices), then waits for it; the microseconds spent computing.
fn overlap<'a, D: ?Sized, S: mpi::request::Scope<'a>>(
    req: mpi::request::Request<'a, D, S>,
    work: Option<(&Cpu, f64, u32)>,
) -> f64 {
    let mut req = Some(req);
    let spent = match work {
        Some((cpu, us, tests)) => {
            let r: Result<f64, std::convert::Infallible> = cpu.run(us, tests, || {
                if let Some(r) = req.take() {
                    // Done: the request is spent; not yet: keep it for the next test.
                    req = r.test().err();
                }
                Ok(())
            });
            r.unwrap_or_else(|e| match e {})
        }
        None => 0.0,
    };
    if let Some(r) = req {
        r.wait();
    }
    spent
}

/// The MPI half: initialise MPI, run the suite, rank 0 writes the result for the parent.
pub fn run(opts: &Options) -> Result<()> {
    let universe = mpi::initialize().context("MPI_Init failed (or MPI was initialised twice)")?;
    let world = universe.world();
    let mut b = MpiBackend::new(world, opts);
    if let Some(half) = driver::run(&mut b, opts, |_, _| {})? {
        tca_mpi::write_result(&half)?;
    }
    Ok(())
}
