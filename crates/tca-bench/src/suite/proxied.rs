//! The suite's collectives through a proxy: a progress thread per rank (`--progress thread`,
//! `TCA_PROGRESS=thread`), whose world belongs to it, or the node proxy process that holds
//! every rank's world (`--progress proxy`, `tca run --offload`; [`tca::offload::Proxy`]).
//! The non-blocking benchmarks post their collective and wait for its ticket; the blocking
//! ones run as commands on a progress thread, and are posted and waited for on the node proxy
//! (a closure of the rank cannot cross to another process); the two-sided ping-pongs post
//! their sends and receives. Message buffers come from [`Proxy::alloc`] (memory the node proxy
//! maps too). IMB-NBC's overlap then measures what the proxy moves while the rank computes.

use std::time::Instant;

use anyhow::{Result, bail};
use tca::coll::Element;
use tca::offload::{Proxy, ProxyBuf};
use tca::{Op, World};
use tca_mpi::{Backend as Lib, CommResult, Staged};

use super::driver::{self, Backend};
use super::halo::Halo;
use super::overlap::Cpu;
use super::{Benchmark, Half, Kind, Options};

/// The driver's own synchronisation and gathering, as commands on the proxy.
#[derive(Debug)]
pub struct ProxyLib<'p> {
    proxy: &'p Proxy,
    epoch: Instant,
    transport: String,
}

impl Lib for ProxyLib<'_> {
    fn rank(&self) -> usize {
        self.proxy.rank() as usize
    }
    fn size(&self) -> usize {
        self.proxy.size() as usize
    }
    fn name(&self) -> String {
        "tca".into()
    }
    fn transport(&self) -> String {
        self.transport.clone()
    }
    fn wtime(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }
    fn barrier(&mut self) -> CommResult<()> {
        Ok(self.proxy.scope(|s| s.ibarrier()?.wait().map(drop))?)
    }
    fn broadcast_u64(&mut self, buf: &mut [u64]) -> CommResult<()> {
        let mut b = self.staged(buf)?;
        self.proxy
            .scope(|s| s.ibroadcast(&mut b, 0)?.wait().map(drop))?;
        buf.copy_from_slice(&b);
        Ok(())
    }
    fn scatter_u64(&mut self, send: &[u64], recv: &mut [u64]) -> CommResult<()> {
        self.scatter(send, recv)
    }
    fn scatter_f64(&mut self, send: &[f64], recv: &mut [f64]) -> CommResult<()> {
        self.scatter(send, recv)
    }
    fn gather_f64(&mut self, send: &[f64], recv: &mut [f64]) -> CommResult<()> {
        let (s_in, mut r_in) = (self.staged(send)?, self.staged(recv)?);
        self.proxy
            .scope(|s| s.igather(&s_in, &mut r_in, 0)?.wait().map(drop))?;
        recv.copy_from_slice(&r_in);
        Ok(())
    }
    fn allgatherv_f64(
        &mut self,
        x: &mut [f64],
        counts: &[usize],
        displs: &[usize],
    ) -> CommResult<()> {
        Ok(self
            .proxy
            .scope(|s| s.run(|c| c.allgatherv_in_place(x, counts, displs)))?)
    }
    type Gathered = Staged;
    fn gathered(&mut self, len: usize, counts: &[usize], displs: &[usize]) -> CommResult<Staged> {
        Ok(Staged::new(len, counts, displs, self.rank()))
    }
    fn allgatherv_into(&mut self, g: &mut Staged) -> CommResult<()> {
        let (v, counts, displs) = g.parts();
        self.allgatherv_f64(v, counts, displs)
    }
    /// Posted to the proxy, which moves the blocks while `during` runs on the rank.
    fn allgatherv_into_overlapped<W: FnOnce(&Self)>(
        &mut self,
        g: &mut Staged,
        during: W,
    ) -> CommResult<()> {
        let this: &Self = self;
        let (v, counts, displs) = g.parts();
        Ok(this.proxy.scope(|s| {
            let mut t = s.iallgatherv_in_place(v, counts, displs)?;
            during(this);
            t.wait().map(drop)
        })?)
    }
    fn allreduce_sum_f64(&mut self, v: f64) -> CommResult<f64> {
        let mut b = self.staged(&[v])?;
        self.proxy
            .scope(|s| s.iallreduce_in_place(&mut b, &Op::Sum)?.wait().map(drop))?;
        Ok(b[0])
    }
}

impl<'p> ProxyLib<'p> {
    /// A copy of `data` in memory the proxy reaches (the driver's own exchanges, untimed).
    fn staged<T: Element>(&self, data: &[T]) -> tca::Result<ProxyBuf<'p, T>> {
        let mut b = self.proxy.alloc(data.len())?;
        b.copy_from_slice(data);
        Ok(b)
    }

    fn scatter<T: Element>(&self, send: &[T], recv: &mut [T]) -> CommResult<()> {
        let (s_in, mut r_in) = (self.staged(send)?, self.staged(recv)?);
        self.proxy
            .scope(|s| s.iscatter(&s_in, &mut r_in, 0)?.wait().map(drop))?;
        recv.copy_from_slice(&r_in);
        Ok(())
    }
}

/// The suite's collectives through a proxy.
#[derive(Debug)]
pub struct ProxyBackend<'p> {
    lib: ProxyLib<'p>,
    bsend: ProxyBuf<'p, u8>,
    brecv: ProxyBuf<'p, u8>,
    fsend: ProxyBuf<'p, f32>,
    frecv: ProxyBuf<'p, f32>,
    cur: (Kind, usize),
    nonblocking: bool,
    forced: Vec<(usize, String)>,
}

impl<'p> ProxyBackend<'p> {
    /// Buffers for the largest size; refuses benchmarks that are not collectives.
    pub fn new(proxy: &'p Proxy, opts: &Options) -> Result<Self> {
        if let Some(b) = opts.benches().find(|b| {
            b.collective.is_none() && !matches!(b.kind, Kind::PingPong | Kind::OsuLatency)
        }) {
            bail!(
                "--progress thread and proxy run the collectives (blocking ones as commands on \
                 a progress thread or posted to the node proxy, non-blocking ones posted) and \
                 the two-sided ping-pongs (PingPong, osu_latency: sends and receives posted), \
                 not {}",
                b.name
            );
        }
        let p = proxy.size() as usize;
        let max = opts.sizes.iter().copied().max().unwrap_or(0).max(8);
        let me = proxy.rank() as usize;
        let transport = proxy.control("transport")?;
        let mut bsend = proxy.alloc::<u8>(max * p)?;
        for (i, b) in bsend.iter_mut().enumerate() {
            *b = (i + me) as u8;
        }
        let mut fsend = proxy.alloc::<f32>(max / 4 + 1)?;
        for (i, x) in fsend.iter_mut().enumerate() {
            *x = (i % 7) as f32;
        }
        let how = if proxy.is_node_proxy() {
            "node proxy"
        } else {
            "progress thread"
        };
        Ok(Self {
            lib: ProxyLib {
                proxy,
                epoch: Instant::now(),
                transport: format!("{transport}, {how}"),
            },
            bsend,
            brecv: proxy.alloc(max * p)?,
            fsend,
            frecv: proxy.alloc(max / 4 + 1)?,
            cur: (Kind::Barrier, 0),
            nonblocking: false,
            forced: opts.algos.clone(),
        })
    }

    /// The message buffers, as the suite's collective calls take them.
    fn buffers(&mut self) -> (&mut [u8], &mut [u8], &[f32], &mut [f32]) {
        (
            &mut self.bsend,
            &mut self.brecv,
            &self.fsend,
            &mut self.frecv,
        )
    }

    /// `n` calls, each posted and waited for (with `work`: computation with tests between,
    /// see [`Cpu::run`]); the microseconds spent computing.
    fn calls_with(&mut self, n: u64, work: Option<(&Cpu, f64, u32)>) -> Result<f64> {
        let (cur, p) = (self.cur, self.lib.proxy.size() as usize);
        let sum = Op::<f32>::Sum;
        let mut spent = 0.0;
        let proxy = self.lib.proxy;
        for _ in 0..n {
            let bufs = self.buffers();
            spent += proxy.scope(|s| {
                let (bs, br, fs, fr) = bufs;
                let mut t = start_collective!(s, cur.0, cur.1, p, (bs, br, fs, fr), &sum);
                let c = match work {
                    Some((cpu, us, tests)) => cpu.run(us, tests, || t.test().map(drop))?,
                    None => 0.0,
                };
                t.wait()?;
                Ok(c)
            })?;
        }
        Ok(spent)
    }

    /// `n` two-sided round trips between ranks 0 and 1, each send and receive posted to the
    /// proxy and waited for (seed 003's requests served by a polling thread).
    fn ping_pong(&mut self, n: u64) -> Result<()> {
        let bytes = self.cur.1;
        let proxy = self.lib.proxy;
        let me = proxy.rank();
        if me > 1 {
            return Ok(());
        }
        let peer = 1 - me;
        let (bs, br) = (&self.bsend[..bytes], &mut self.brecv[..bytes]);
        for _ in 0..n {
            proxy.scope(|s| {
                if me == 0 {
                    let mut out = s.isend(bs, peer, 0)?;
                    let mut back = s.irecv(&mut *br, peer, 0)?;
                    out.wait()?;
                    back.wait().map(drop)
                } else {
                    s.irecv(&mut *br, peer, 0)?.wait()?;
                    s.isend(bs, peer, 0)?.wait().map(drop)
                }
            })?;
        }
        Ok(())
    }

    /// `n` blocking calls of the prepared collective, each a command on the proxy (posted,
    /// run there, answered): what a blocking call costs a rank whose world is its proxy's. On
    /// the node proxy, which runs no closure of this process, each call is posted and waited
    /// for.
    fn blocking(&mut self, n: u64) -> Result<()> {
        let (kind, bytes) = self.cur;
        let proxy = self.lib.proxy;
        if proxy.is_node_proxy() {
            return self.calls_with(n, None).map(drop);
        }
        for _ in 0..n {
            let bufs = self.buffers();
            proxy.scope(|s| s.run(|c| super::collective(c, kind, bytes, bufs)))?;
        }
        Ok(())
    }
}

impl<'p> Backend for ProxyBackend<'p> {
    type Lib = ProxyLib<'p>;

    fn lib(&mut self) -> &mut ProxyLib<'p> {
        &mut self.lib
    }

    fn prepare(&mut self, bench: &Benchmark, bytes: usize) -> Result<()> {
        self.cur = (bench.kind, bytes);
        self.nonblocking = bench.nonblocking();
        if let Some(coll) = bench.collective {
            let name = super::forced_algorithm(&self.forced, bench).unwrap_or("auto");
            self.lib
                .proxy
                .control(&format!("force {} {name}", coll.name()))?;
        }
        Ok(())
    }

    fn prepare_halo(&mut self, _halo: &Halo) -> Result<()> {
        bail!("--progress thread and proxy do not run the Halo benchmark")
    }

    fn calls(&mut self, n: u64) -> Result<()> {
        if matches!(self.cur.0, Kind::PingPong | Kind::OsuLatency) {
            return self.ping_pong(n);
        }
        if self.nonblocking {
            self.calls_with(n, None).map(drop)
        } else {
            self.blocking(n)
        }
    }

    fn overlapped(&mut self, n: u64, cpu: &Cpu, us: f64, tests: u32) -> Result<f64> {
        self.calls_with(n, Some((cpu, us, tests)))
    }

    fn algorithm(&self, bench: &Benchmark, bytes: usize) -> String {
        let Some(coll) = bench.collective else {
            return "two-sided, posted".into();
        };
        let p = self.lib.proxy.size() as usize;
        let sel = bench.selection_bytes(bytes, p);
        self.lib
            .proxy
            .control(&format!("algorithm {} {sel}", coll.name()))
            .unwrap_or_else(|_| "-".into())
    }
}

/// Runs the suite on this rank with a progress thread that owns `world`; rank 0 returns the
/// result.
pub fn run(world: World, opts: &Options) -> Result<Option<Half>> {
    serve(Proxy::start(world)?, opts)
}

/// Runs the suite on this rank of a job with a node proxy (`--progress proxy`, `tca run
/// --offload`), which holds the rank's world; rank 0 returns the result.
pub fn run_node(np: u32, opts: &Options) -> Result<Option<Half>> {
    let proxy = Proxy::connect()?;
    if proxy.size() != np {
        bail!(
            "launched with {} ranks but --np {np}: give the same number",
            proxy.size()
        );
    }
    serve(proxy, opts)
}

fn serve(proxy: Proxy, opts: &Options) -> Result<Option<Half>> {
    let note = if proxy.is_node_proxy() {
        format!(
            "progress: the node proxy process holds every rank's world and serves its queues \
             in shared memory (tca::offload::Proxy::connect, tca run --offload); it naps {} us \
             on a work queue when nothing in flight moved",
            tca::offload::NAP.as_micros()
        )
    } else {
        format!(
            "progress: a thread per rank owns its world (tca::offload::Proxy); it naps {} us \
             on its work queue when nothing in flight moved",
            tca::offload::NAP.as_micros()
        )
    };
    let r = (|| {
        let mut b = ProxyBackend::new(&proxy, opts)?;
        let total: usize = opts.benches().count() * opts.sizes.len();
        let bar = crate::progress::bar(total as u64, proxy.rank() == 0);
        let half = driver::run(&mut b, opts, |name, bytes| {
            bar.set_message(format!("{name} {bytes} B"));
            bar.inc(1);
        })?;
        bar.finish_and_clear();
        Ok(half.map(|mut h| {
            h.notes.push(note);
            h
        }))
    })();
    match r {
        Ok(h) => {
            proxy.finish()?;
            Ok(h)
        }
        Err(e) => {
            let _ = proxy.fail();
            Err(e)
        }
    }
}
