//! The IMB-compatible suite: PingPong, PingPing, the collectives and Barrier, measured the same
//! way over tca and over a real MPI.
//!
//! Every benchmark is one row of [`BENCHMARKS`]; the timing loop is written once
//! ([`driver`]) over a [`Backend`] that performs one call of a benchmark: [`tca::TcaBackend`]
//! and, with the `mpi` feature, [`mpi::MpiBackend`]. Message sizes mean what they mean in
//! IMB-MPI1, so a row of tca's table and a row of IMB's table are the same experiment:
//!
//! | benchmark | `#bytes` is | data type |
//! |---|---|---|
//! | PingPong, PingPing | the message | bytes |
//! | Sendrecv, Exchange | the message (to each neighbour) | bytes |
//! | Bcast | the message | bytes |
//! | Scatter, Gather, Allgather | each rank's block | bytes |
//! | Alltoall | the block each rank sends each rank | bytes |
//! | Reduce, Allreduce | the vector | f32, sum |
//! | Reduce_scatter | the whole vector (each rank gets 1/p of it; tca selects by the share, [`Benchmark::selection_bytes`]) | f32, sum |
//! | Barrier | (none) | |
//! | osu_latency, osu_bw, osu_bibw, osu_mbw_mr | the message | bytes |
//! | Halo | what one rank sends per exchange (from `--lattice`) | 48-byte sites |
//!
//! Roots are rank 0. PingPong and PingPing run between ranks 0 and 1 while the other ranks
//! wait, as IMB's "additional processes waiting in MPI_Barrier". Over tca they are one-sided
//! (`put_signal` into the partner's segment) unless `--two-sided` asks for tca's send and
//! receive (`tca::p2p`); the algorithm column says which form ran. Sendrecv and Exchange are
//! always two-sided, and report IMB's Mbytes/sec (2 and 4 messages per call per rank).
//!
//! Beyond IMB, and run only when named: OSU's two-sided benchmarks as the OSU micro-benchmarks
//! define them (`osu_latency`: blocking send/receive ping-pong; `osu_bw`: a window of
//! [`OSU_WINDOW`] non-blocking sends answered by a 4-byte acknowledgement; `osu_bibw`: windows
//! both ways at once; `osu_mbw_mr`: the bandwidth test on P/2 pairs at once, rank i with
//! i + P/2), where `t[usec]` is per message and `Mbytes/sec` the aggregate (10^6 bytes per
//! second; OSU's message rate is that over the size); and `Halo`, QUDA's halo exchange
//! ([`halo`]) over persistent requests, one row per `--lattice`, `t[usec]` per exchange and
//! `Mbytes/sec` counting what a rank sends and receives.
//!
//! And IMB-NBC's benchmarks, run when named (`Ibcast`, `Iallreduce`, ...): each collective
//! above, non-blocking, measured alone and overlapped with computation, reported in IMB-NBC's
//! columns `t_ovrl t_pure t_CPU overlap[%]` ([`overlap`]); `#bytes` as for the blocking one.

/// Starts the suite's collective `kind` at `bytes` non-blocking in scope `$s` — a
/// communicator's [`::tca::coll::nb::Scope`] or a proxy's [`::tca::offload::ProxyScope`], whose
/// methods are the same — on the buffers `(bytes out, bytes in, f32 out, f32 in)`, root 0,
/// sizes as [`collective`]'s; `?` on the start's error. Collectives only (checked by callers).
macro_rules! start_collective {
    ($s:expr, $kind:expr, $bytes:expr, $p:expr, ($bs:expr, $br:expr, $fs:expr, $fr:expr), $sum:expr) => {{
        let (bytes, p) = ($bytes, $p);
        let e = bytes / 4;
        match $kind {
            Kind::Bcast => $s.ibroadcast(&mut $bs[..bytes], 0)?,
            Kind::Scatter => $s.iscatter(&$bs[..bytes * p], &mut $br[..bytes], 0)?,
            Kind::Gather => $s.igather(&$bs[..bytes], &mut $br[..bytes * p], 0)?,
            Kind::Reduce => $s.ireduce(&$fs[..e], &mut $fr[..e], $sum, 0)?,
            Kind::Allgather => $s.iallgather(&$bs[..bytes], &mut $br[..bytes * p])?,
            Kind::Allreduce => $s.iallreduce(&$fs[..e], &mut $fr[..e], $sum)?,
            Kind::ReduceScatter => $s.ireduce_scatter(&$fs[..e], &mut $fr[..e / p], $sum)?,
            Kind::Alltoall => $s.ialltoall(&$bs[..bytes * p], &mut $br[..bytes * p])?,
            Kind::Barrier => $s.ibarrier()?,
            _ => unreachable!("collectives only"),
        }
    }};
}

pub mod driver;
pub mod halo;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod overlap;
pub mod proxied;
pub mod tca;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use tca_model::imb::Columns;
use tca_model::record::Row;

/// What a benchmark does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kind {
    /// Round trip between ranks 0 and 1; time is half of it.
    PingPong,
    /// Ranks 0 and 1 send to each other at once; time is one exchange.
    PingPing,
    /// Every rank sends to its right neighbour and receives from its left (a periodic chain).
    Sendrecv,
    /// Every rank sends to and receives from both neighbours.
    Exchange,
    /// Broadcast from rank 0.
    Bcast,
    /// Scatter from rank 0.
    Scatter,
    /// Gather to rank 0.
    Gather,
    /// Reduce (f32 sum) to rank 0.
    Reduce,
    /// Allgather.
    Allgather,
    /// Allreduce (f32 sum).
    Allreduce,
    /// Reduce_scatter (block, f32 sum).
    ReduceScatter,
    /// Alltoall.
    Alltoall,
    /// Barrier.
    Barrier,
    /// OSU latency: blocking two-sided ping-pong between ranks 0 and 1, half round trip.
    OsuLatency,
    /// OSU bandwidth: rank 0 sends a window of non-blocking messages to rank 1, which
    /// acknowledges the window.
    OsuBw,
    /// OSU bidirectional bandwidth: ranks 0 and 1 send windows to each other at once.
    OsuBibw,
    /// OSU multiple bandwidth / message rate: the bandwidth test on P/2 pairs at once.
    OsuMbwMr,
    /// QUDA's 4-D halo exchange with persistent requests.
    Halo,
    /// GASNet's testam: a Short request from rank 0 to rank 1 answered by a Short reply
    /// (the size is the arguments' bytes, 8 per argument), round trip.
    AmShort,
    /// testam's Medium ping-pong: a Medium request and a Medium reply of the same size.
    AmMedium,
    /// AM_Medium with the request's payload sent from rank 0's segment (seed 001's MtoB).
    AmMediumFrom,
    /// testam's Long ping-pong: a Long request and a Long reply of the same size.
    AmLong,
    /// A blocking get by rank 0 from rank 1's segment (within a node a direct read; across a
    /// network a request whose handler writes back).
    Get,
    /// A blocking put by rank 0 into rank 1's segment.
    Put,
    /// A blocking put by rank 0 from its own segment into rank 1's: segment to segment
    /// (seed 001's MtoM; across a network an RMA write straight from the segment).
    PutFrom,
    /// GASNet testlarge's non-blocking put bandwidth: a window of [`OSU_WINDOW`] `put_nbi`s
    /// by rank 0 into rank 1's segment, then one `wait_syncnbi_puts`.
    PutNbi,
    /// The same for gets: a window of `get_nbi_into`s from rank 1's segment into rank 0's,
    /// then one `wait_syncnbi_gets`.
    GetNbi,
    /// Seed 001's strided halo exchange of a 3-D array of f64: three faces (contiguous,
    /// block-stride, strided) put into the partner's ghost array by strided puts, both ways.
    VisHalo,
    /// VIS_Halo with the cube in the sender's segment: each face one cached chain, segment to
    /// segment (the seed's MtoM with its descriptor cache).
    VisHaloMtoM,
}

impl Kind {
    /// Whether it is one of the collectives (which have non-blocking forms).
    pub fn collective(self) -> bool {
        matches!(
            self,
            Kind::Bcast
                | Kind::Scatter
                | Kind::Gather
                | Kind::Reduce
                | Kind::Allgather
                | Kind::Allreduce
                | Kind::ReduceScatter
                | Kind::Alltoall
                | Kind::Barrier
        )
    }
}

/// Edge lengths of the VIS_Halo benchmark's N x N x N arrays (the seed's range).
pub const VIS_HALO_N: [usize; 4] = [16, 32, 64, 128];

/// Bytes one rank sends per VIS_Halo exchange of an `n`-cube: three faces of n*n f64.
pub fn vis_halo_bytes(n: usize) -> usize {
    3 * n * n * 8
}

/// Messages in flight per window of the OSU bandwidth tests (OSU's default).
pub const OSU_WINDOW: usize = 64;

/// Where a benchmark comes from; a run without names is IMB-MPI1's suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// IMB-MPI1: run by default.
    Imb,
    /// The OSU micro-benchmarks: run when named.
    Osu,
    /// Seed 003's application pattern: run when named.
    Application,
    /// GASNet's test programs over tca's active messages (seed 001): run when named; tca
    /// only.
    Gasnet,
    /// IMB-NBC: the non-blocking collectives' overlap with computation (see [`overlap`]);
    /// run when named.
    Nbc,
}

/// One benchmark of the suite.
#[derive(Debug)]
pub struct Benchmark {
    /// IMB's name (also what the command line accepts, in any case).
    pub name: &'static str,
    /// What it does.
    pub kind: Kind,
    /// The tca collective behind it (for `--algo` and the algorithm column), if any.
    pub collective: Option<::tca::Collective>,
    /// Which suite it belongs to.
    pub family: Family,
    /// One line for `--help` and errors.
    pub about: &'static str,
}

/// The suite, in IMB-MPI1's order.
pub static BENCHMARKS: &[Benchmark] = &[
    Benchmark {
        name: "PingPong",
        kind: Kind::PingPong,
        collective: None,
        family: Family::Imb,
        about: "half round trip between ranks 0 and 1",
    },
    Benchmark {
        name: "PingPing",
        kind: Kind::PingPing,
        collective: None,
        family: Family::Imb,
        about: "ranks 0 and 1 send to each other at the same time",
    },
    Benchmark {
        name: "Sendrecv",
        kind: Kind::Sendrecv,
        collective: None,
        family: Family::Imb,
        about: "two-sided: send right, receive from the left, every rank at once",
    },
    Benchmark {
        name: "Exchange",
        kind: Kind::Exchange,
        collective: None,
        family: Family::Imb,
        about: "two-sided: send to and receive from both neighbours, every rank at once",
    },
    Benchmark {
        name: "Reduce_scatter",
        kind: Kind::ReduceScatter,
        collective: Some(::tca::Collective::ReduceScatter),
        family: Family::Imb,
        about: "f32 sum, each rank keeps 1/p of the vector",
    },
    Benchmark {
        name: "Allreduce",
        kind: Kind::Allreduce,
        collective: Some(::tca::Collective::Allreduce),
        family: Family::Imb,
        about: "f32 sum, result on every rank",
    },
    Benchmark {
        name: "Reduce",
        kind: Kind::Reduce,
        collective: Some(::tca::Collective::Reduce),
        family: Family::Imb,
        about: "f32 sum to rank 0",
    },
    Benchmark {
        name: "Allgather",
        kind: Kind::Allgather,
        collective: Some(::tca::Collective::Allgather),
        family: Family::Imb,
        about: "every rank's block to every rank",
    },
    Benchmark {
        name: "Gather",
        kind: Kind::Gather,
        collective: Some(::tca::Collective::Gather),
        family: Family::Imb,
        about: "every rank's block to rank 0",
    },
    Benchmark {
        name: "Scatter",
        kind: Kind::Scatter,
        collective: Some(::tca::Collective::Scatter),
        family: Family::Imb,
        about: "a block from rank 0 to every rank",
    },
    Benchmark {
        name: "Alltoall",
        kind: Kind::Alltoall,
        collective: Some(::tca::Collective::Alltoall),
        family: Family::Imb,
        about: "a block from every rank to every rank",
    },
    Benchmark {
        name: "Bcast",
        kind: Kind::Bcast,
        collective: Some(::tca::Collective::Broadcast),
        family: Family::Imb,
        about: "the message from rank 0 to every rank",
    },
    Benchmark {
        name: "Barrier",
        kind: Kind::Barrier,
        collective: Some(::tca::Collective::Barrier),
        family: Family::Imb,
        about: "no data",
    },
    Benchmark {
        name: "osu_latency",
        kind: Kind::OsuLatency,
        collective: None,
        family: Family::Osu,
        about: "OSU: blocking send/recv ping-pong between ranks 0 and 1, half round trip",
    },
    Benchmark {
        name: "osu_bw",
        kind: Kind::OsuBw,
        collective: None,
        family: Family::Osu,
        about: "OSU: windows of 64 isends from rank 0 to rank 1, acknowledged",
    },
    Benchmark {
        name: "osu_bibw",
        kind: Kind::OsuBibw,
        collective: None,
        family: Family::Osu,
        about: "OSU: windows of 64 isends both ways between ranks 0 and 1",
    },
    Benchmark {
        name: "osu_mbw_mr",
        kind: Kind::OsuMbwMr,
        collective: None,
        family: Family::Osu,
        about: "OSU: osu_bw on P/2 pairs at once (rank i with i + P/2), aggregate",
    },
    Benchmark {
        name: "Halo",
        kind: Kind::Halo,
        collective: None,
        family: Family::Application,
        about: "QUDA's 4-D halo exchange, persistent requests, sizes from --lattice",
    },
    Benchmark {
        name: "AM_Short",
        kind: Kind::AmShort,
        collective: None,
        family: Family::Gasnet,
        about: "GASNet testam: Short request and reply, round trip; size = 8 bytes per argument (up to 128)",
    },
    Benchmark {
        name: "AM_Medium",
        kind: Kind::AmMedium,
        collective: None,
        family: Family::Gasnet,
        about: "GASNet testam: Medium request and reply of the size, round trip (up to 64 KiB)",
    },
    Benchmark {
        name: "AM_Medium_from",
        kind: Kind::AmMediumFrom,
        collective: None,
        family: Family::Gasnet,
        about: "AM_Medium with the request's payload sent from rank 0's segment straight into rank 1's ring (seed 001's MtoB)",
    },
    Benchmark {
        name: "AM_Long",
        kind: Kind::AmLong,
        collective: None,
        family: Family::Gasnet,
        about: "GASNet testam: Long request and reply of the size, round trip",
    },
    Benchmark {
        name: "Get",
        kind: Kind::Get,
        collective: None,
        family: Family::Gasnet,
        about: "blocking get from rank 1's segment into memory (same node: a direct read; across a network: an AM whose handler writes back)",
    },
    Benchmark {
        name: "VIS_Halo",
        kind: Kind::VisHalo,
        collective: None,
        family: Family::Gasnet,
        about: "strided puts of a 3-D array's three faces (contiguous, block-stride, strided), both ways, N = 16..128",
    },
    Benchmark {
        name: "VIS_Halo_MtoM",
        kind: Kind::VisHaloMtoM,
        collective: None,
        family: Family::Gasnet,
        about: "VIS_Halo from the sender's segment: each face one cached chain of puts, segment to segment",
    },
    Benchmark {
        name: "Put",
        kind: Kind::Put,
        collective: None,
        family: Family::Gasnet,
        about: "blocking put into rank 1's segment (the algorithm column names seed 001's data mode)",
    },
    Benchmark {
        name: "Put_from",
        kind: Kind::PutFrom,
        collective: None,
        family: Family::Gasnet,
        about: "blocking put from rank 0's segment into rank 1's: segment to segment (MtoM)",
    },
    Benchmark {
        name: "Put_nbi",
        kind: Kind::PutNbi,
        collective: None,
        family: Family::Gasnet,
        about: "GASNet testlarge: 64 non-blocking puts into rank 1's segment, then one sync; time per put",
    },
    Benchmark {
        name: "Get_nbi",
        kind: Kind::GetNbi,
        collective: None,
        family: Family::Gasnet,
        about: "GASNet testlarge: 64 non-blocking gets from rank 1's segment into rank 0's, then one sync; time per get",
    },
    Benchmark {
        name: "Ibcast",
        kind: Kind::Bcast,
        collective: Some(::tca::Collective::Broadcast),
        family: Family::Nbc,
        about: "IMB-NBC: Bcast's message from rank 0, started, computed over, waited for",
    },
    Benchmark {
        name: "Iallgather",
        kind: Kind::Allgather,
        collective: Some(::tca::Collective::Allgather),
        family: Family::Nbc,
        about: "IMB-NBC: Allgather, started, computed over, waited for",
    },
    Benchmark {
        name: "Igather",
        kind: Kind::Gather,
        collective: Some(::tca::Collective::Gather),
        family: Family::Nbc,
        about: "IMB-NBC: Gather to rank 0, started, computed over, waited for",
    },
    Benchmark {
        name: "Iscatter",
        kind: Kind::Scatter,
        collective: Some(::tca::Collective::Scatter),
        family: Family::Nbc,
        about: "IMB-NBC: Scatter from rank 0, started, computed over, waited for",
    },
    Benchmark {
        name: "Ialltoall",
        kind: Kind::Alltoall,
        collective: Some(::tca::Collective::Alltoall),
        family: Family::Nbc,
        about: "IMB-NBC: Alltoall, started, computed over, waited for",
    },
    Benchmark {
        name: "Ireduce",
        kind: Kind::Reduce,
        collective: Some(::tca::Collective::Reduce),
        family: Family::Nbc,
        about: "IMB-NBC: Reduce (f32 sum) to rank 0, started, computed over, waited for",
    },
    Benchmark {
        name: "Ireduce_scatter",
        kind: Kind::ReduceScatter,
        collective: Some(::tca::Collective::ReduceScatter),
        family: Family::Nbc,
        about: "IMB-NBC: Reduce_scatter (f32 sum), started, computed over, waited for",
    },
    Benchmark {
        name: "Iallreduce",
        kind: Kind::Allreduce,
        collective: Some(::tca::Collective::Allreduce),
        family: Family::Nbc,
        about: "IMB-NBC: Allreduce (f32 sum), started, computed over, waited for",
    },
    Benchmark {
        name: "Ibarrier",
        kind: Kind::Barrier,
        collective: Some(::tca::Collective::Barrier),
        family: Family::Nbc,
        about: "IMB-NBC: Barrier, started, computed over, waited for",
    },
];

impl Benchmark {
    /// The benchmark called `name` (case-insensitive), or an error listing the names.
    pub fn find(name: &str) -> Result<&'static Benchmark> {
        BENCHMARKS
            .iter()
            .find(|b| b.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let names: Vec<&str> = BENCHMARKS.iter().map(|b| b.name).collect();
                anyhow::anyhow!(
                    "unknown benchmark `{name}`; valid: {}, floor",
                    names.join(", ")
                )
            })
    }

    /// IMB's columns for this benchmark.
    pub fn columns(&self) -> Columns {
        Columns::of(self.name)
    }

    /// Whether the benchmark moves f32 (reductions): sizes must be multiples of 4 bytes.
    pub fn reduces(&self) -> bool {
        matches!(
            self.kind,
            Kind::Reduce | Kind::Allreduce | Kind::ReduceScatter
        )
    }

    /// Ranks that take part out of `p`.
    pub fn active(&self, p: u32) -> u32 {
        match self.kind {
            Kind::PingPong
            | Kind::PingPing
            | Kind::OsuLatency
            | Kind::OsuBw
            | Kind::OsuBibw
            | Kind::AmShort
            | Kind::AmMedium
            | Kind::AmMediumFrom
            | Kind::AmLong
            | Kind::Get
            | Kind::GetNbi
            | Kind::VisHalo
            | Kind::VisHaloMtoM => 2.min(p),
            Kind::Put | Kind::PutFrom | Kind::PutNbi => 1,
            Kind::OsuMbwMr => p / 2 * 2,
            _ => p,
        }
    }

    /// Whether it is one of IMB-NBC's: the collective of its kind started, overlapped with
    /// computation, waited for (see [`overlap`]).
    pub fn nonblocking(&self) -> bool {
        self.family == Family::Nbc
    }

    /// Whether it runs over tca's active-message endpoint (GASNet's test programs).
    pub fn gasnet(&self) -> bool {
        self.family == Family::Gasnet
    }

    /// Whether only tca runs it (MPI has no active messages; `--compare mpi` skips it). Put
    /// and Get run on MPI too, as `MPI_Put`/`MPI_Get` in a window.
    pub fn tca_only(&self) -> bool {
        self.gasnet() && !matches!(self.kind, Kind::Put | Kind::Get)
    }

    /// Whether its sizes are fixed array edges ([`VIS_HALO_N`]) rather than `--sizes`.
    pub fn grid(&self) -> bool {
        matches!(self.kind, Kind::VisHalo | Kind::VisHaloMtoM)
    }

    /// Whether its sizes come from `--lattice` rather than `--sizes`.
    pub fn lattice(&self) -> bool {
        self.kind == Kind::Halo
    }

    /// Whether rank 0 starts every exchange and sees it end while rank 1 only answers: then
    /// rank 0's time is the benchmark's (rank 1 stops its clock after its last answer, half
    /// a round trip early, which is 1/(2 x calls) of a round trip too short per call: 10% on
    /// the 5 calls of a simulated run).
    pub fn answered(&self) -> bool {
        matches!(
            self.kind,
            Kind::PingPong
                | Kind::OsuLatency
                | Kind::OsuBw
                | Kind::AmShort
                | Kind::AmMedium
                | Kind::AmMediumFrom
                | Kind::AmLong
                | Kind::Get
                | Kind::GetNbi
        )
    }

    /// Per-call time divisor: calls of PingPong and osu_latency are round trips (IMB and OSU
    /// report half of one); a call of an OSU bandwidth test is a window.
    pub fn per_call_divisor(&self) -> f64 {
        match self.kind {
            Kind::PingPong | Kind::OsuLatency => 2.0,
            Kind::OsuBw | Kind::OsuBibw | Kind::OsuMbwMr | Kind::PutNbi | Kind::GetNbi => {
                OSU_WINDOW as f64
            }
            _ => 1.0,
        }
    }

    /// Mbytes/sec (10^6 bytes per second) from `bytes` per message and `t_us` per call as
    /// [`Benchmark::per_call_divisor`] makes it, on `p` ranks: what one rank sends and receives
    /// (IMB's convention: Sendrecv 2 messages, Exchange 4), or the aggregate of every pair
    /// (osu_bibw both directions, osu_mbw_mr every pair). None for collectives.
    pub fn mbytes_per_sec(&self, bytes: usize, t_us: f64, p: u32) -> Option<f64> {
        let msgs = match self.kind {
            Kind::PingPong
            | Kind::PingPing
            | Kind::OsuLatency
            | Kind::OsuBw
            | Kind::Get
            | Kind::Put
            | Kind::PutFrom
            | Kind::PutNbi
            | Kind::GetNbi => 1.0,
            Kind::Sendrecv | Kind::OsuBibw | Kind::Halo | Kind::VisHalo | Kind::VisHaloMtoM => 2.0,
            // A round trip carries the size both ways.
            Kind::AmShort | Kind::AmMedium | Kind::AmMediumFrom | Kind::AmLong => 2.0,
            Kind::Exchange => 4.0,
            Kind::OsuMbwMr => f64::from(p / 2),
            _ => return None,
        };
        Some(if t_us > 0.0 {
            msgs * bytes as f64 / t_us
        } else {
            0.0
        })
    }

    /// The size tca's algorithm selection and cost models see for a row of `bytes` (`#bytes`
    /// as IMB means it, see the module doc) on `p` ranks: the same, except Reduce_scatter,
    /// whose `#bytes` is the whole vector while `tca::Comm::reduce_scatter` (and its
    /// models) take each rank's share. The one place this convention lives.
    pub fn selection_bytes(&self, bytes: usize, p: usize) -> usize {
        match self.kind {
            Kind::ReduceScatter => bytes / p.max(1),
            _ => bytes,
        }
    }

    /// The bytes actually moved for a requested size on `p` ranks, or None to skip the size
    /// (as IMB skips 1- and 2-byte reductions; Reduce_scatter keeps whole f32 blocks per rank).
    pub fn bytes_for(&self, requested: usize, p: usize) -> Option<usize> {
        match self.kind {
            Kind::Barrier => Some(0),
            Kind::ReduceScatter => {
                if requested % 4 != 0 {
                    return None;
                }
                let elems = requested / 4 / p * p;
                (elems > 0 || requested == 0).then_some(elems * 4)
            }
            _ if self.reduces() => (requested % 4 == 0).then_some(requested),
            Kind::AmShort => {
                (requested % 8 == 0 && requested <= 8 * ::tca::am::MAX_ARGS).then_some(requested)
            }
            Kind::AmMedium | Kind::AmMediumFrom => {
                (requested <= ::tca::am::MAX_MEDIUM).then_some(requested)
            }
            _ => Some(requested),
        }
    }
}

/// The algorithm, rank count and size (as [`::tca::coll::Algorithm::cost`] means it, see
/// [`Benchmark::selection_bytes`]) of a tca row of a collective benchmark, or `None` for
/// other rows: what the cost models need to predict the row.
pub fn model_input(row: &Row) -> Option<(&'static ::tca::coll::Algorithm, usize, usize)> {
    if row.implementation != "tca" {
        return None;
    }
    let bench = BENCHMARKS.iter().find(|b| b.name == row.benchmark)?;
    if bench.nonblocking() {
        return None; // its time includes the computation
    }
    let alg = ::tca::coll::registry::find(bench.collective?, &row.algorithm).ok()?;
    let p = row.ranks as usize;
    let bytes = usize::try_from(row.bytes).ok()?;
    Some((alg, p, bench.selection_bytes(bytes, p)))
}

/// How many timed calls per size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Iters {
    /// This many, at every size.
    Fixed(u64),
    /// IMB's rule of thumb, by time: many calls for small sizes, fewer for large, about
    /// [`driver::AUTO_TARGET_S`] of timed calls per size.
    Auto,
}

/// What to run (the same on every rank, the parent and the MPI half).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Options {
    /// Benchmarks, by their index in [`BENCHMARKS`].
    pub benchmarks: Vec<usize>,
    /// Requested message sizes in bytes.
    pub sizes: Vec<usize>,
    /// Timed calls per size.
    pub iters: Iters,
    /// Untimed calls before the timed ones (None: a tenth of the timed calls, at least 1, and
    /// under [`Iters::Auto`] at least [`driver::AUTO_WARM_S`] of calls).
    pub warmup: Option<u64>,
    /// Times each size's timed calls are run; the run with the lowest mean is reported (1:
    /// IMB's single run). On a shared machine, a burst of other load slows whole runs.
    #[serde(default = "one")]
    pub repeat: u32,
    /// Forced tca algorithms: (benchmark index, algorithm name).
    pub algos: Vec<(usize, String)>,
    /// 8-byte PingPong round trips of a memory soak after the suite (tca only; 0: none).
    pub soak: u64,
    /// PingPong and PingPing over tca's two-sided messages instead of put_signal.
    #[serde(default)]
    pub two_sided: bool,
    /// Global lattices (X, Y, Z, T) of the Halo benchmark.
    #[serde(default)]
    pub lattices: Vec<[usize; 4]>,
    /// Tests of the request during the non-blocking benchmarks' computation (OSU's `-t`; 0:
    /// IMB-NBC's computation without library calls).
    #[serde(default)]
    pub test_calls: u32,
    /// Where tca's communication progresses (`--progress`): in the caller's calls, in a
    /// progress thread per rank, or in the node proxy process that holds every rank's world
    /// (both through [`proxied`]); MPI's half is unchanged.
    #[serde(default)]
    pub progress: ::tca::offload::Progress,
    /// tca's message buffers are ordinary heap memory (`--buffers heap`) instead of
    /// `Comm::buffer`s, which large collectives on one node read in place (single copy).
    #[serde(default)]
    pub heap_buffers: bool,
}

fn one() -> u32 {
    1
}

impl Options {
    /// The benchmarks to run.
    pub fn benches(&self) -> impl Iterator<Item = &'static Benchmark> + '_ {
        self.benchmarks.iter().map(|&i| &BENCHMARKS[i])
    }
}

/// What rank 0 of one implementation sends back to the command.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Half {
    /// "tca" or the MPI's name.
    pub implementation: String,
    /// What carried its bytes (tca: the `World`'s transport, such as "shm").
    #[serde(default)]
    pub transport: String,
    /// Ranks in the job.
    pub ranks: u32,
    /// The measurements.
    pub rows: Vec<Row>,
    /// Extra lines for the report (the floor ratio, memory soak, ...).
    pub notes: Vec<String>,
    /// With several rounds ([`Half::median_of`]): each row's t_avg in every round, in round
    /// order (empty for one round).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub round_t_avg_us: Vec<Vec<f64>>,
}

impl Half {
    /// One half from several rounds of the same suite (`--rounds`): each row is the round
    /// whose t_avg is the median of that cell's rounds (the lower of the middle two for an
    /// even count), whole, so its t_min, t_max and repetitions stay one run's; the notes are
    /// the first round's, then any other round's that differ (a warning raised in one round
    /// only is kept). An error if the rounds are not of one implementation or did not measure
    /// the same cells.
    pub fn median_of(mut rounds: Vec<Half>) -> Result<Half> {
        if rounds.len() <= 1 {
            return rounds
                .pop()
                .ok_or_else(|| anyhow::anyhow!("no round was measured"));
        }
        let key = |r: &Row| (r.benchmark.clone(), r.bytes, r.ranks);
        let first = &rounds[0];
        for (i, h) in rounds.iter().enumerate().skip(1) {
            if h.implementation != first.implementation {
                bail!(
                    "round {} is of {}, round 1 of {}",
                    i + 1,
                    h.implementation,
                    first.implementation
                );
            }
            if h.rows.iter().map(key).ne(first.rows.iter().map(key)) {
                bail!(
                    "round {} of {} measured other cells than round 1",
                    i + 1,
                    first.implementation
                );
            }
        }
        let rows = (0..first.rows.len())
            .map(|c| {
                let mut cell: Vec<&Row> = rounds.iter().map(|h| &h.rows[c]).collect();
                cell.sort_by(|a, b| a.t_avg_us.total_cmp(&b.t_avg_us));
                cell[(cell.len() - 1) / 2].clone()
            })
            .collect();
        let each = (0..first.rows.len())
            .map(|c| rounds.iter().map(|h| h.rows[c].t_avg_us).collect())
            .collect();
        let mut notes = Vec::new();
        for n in rounds.iter().flat_map(|h| &h.notes) {
            if !notes.contains(n) {
                notes.push(n.clone());
            }
        }
        let mut half = rounds.swap_remove(0);
        half.rows = rows;
        half.round_t_avg_us = each;
        half.notes = notes;
        Ok(half)
    }
}

/// Resolves `--algo`: `NAME` (every chosen benchmark whose collective has an algorithm of that
/// name) or `BENCHMARK=NAME`, comma-separated; unknown names are errors listing valid ones.
pub fn parse_algos(specs: &[String], benchmarks: &[usize]) -> Result<Vec<(usize, String)>> {
    let mut out = Vec::new();
    for spec in specs {
        if let Some((b, name)) = spec.split_once('=') {
            let bench = Benchmark::find(b)?;
            let Some(coll) = bench.collective else {
                bail!("--algo {spec}: {} has no algorithms to choose", bench.name);
            };
            ::tca::coll::registry::find(coll, name)?;
            let i = index_of(bench);
            if !benchmarks.contains(&i) {
                bail!(
                    "--algo {spec}: {} is not among the benchmarks run",
                    bench.name
                );
            }
            out.push((i, name.to_string()));
        } else {
            let mut any = false;
            for &i in benchmarks {
                if let Some(coll) = BENCHMARKS[i].collective
                    && ::tca::coll::registry::find(coll, spec).is_ok()
                {
                    out.push((i, spec.clone()));
                    any = true;
                }
            }
            if !any {
                let names: Vec<String> = ::tca::coll::ALGORITHMS
                    .iter()
                    .filter(|a| {
                        benchmarks
                            .iter()
                            .any(|&i| BENCHMARKS[i].collective == Some(a.collective))
                    })
                    .map(|a| format!("{}={}", a.collective.name(), a.name))
                    .collect();
                bail!(
                    "unknown algorithm `{spec}` for the benchmarks run; valid: {}",
                    names.join(", ")
                );
            }
        }
    }
    Ok(out)
}

/// One blocking call of the suite's collective `kind` at `bytes` on `c`, root 0: `bytes` is
/// the per-rank block of the rooted and all-to-all collectives (`p` blocks on the buffers'
/// other side) and `bytes / 4` f32s summed by the reductions. Buffers: bytes out, bytes in,
/// f32 out, f32 in, each large enough. Collectives only (checked by callers).
#[inline]
pub fn collective(
    c: &::tca::Comm<'_>,
    kind: Kind,
    bytes: usize,
    (bs, br, fs, fr): (&mut [u8], &mut [u8], &[f32], &mut [f32]),
) -> ::tca::Result<()> {
    let p = c.size() as usize;
    let e = bytes / 4;
    let sum = ::tca::Op::<f32>::Sum;
    match kind {
        Kind::Bcast => c.broadcast(&mut bs[..bytes], 0),
        Kind::Scatter => c.scatter(&bs[..bytes * p], &mut br[..bytes], 0),
        Kind::Gather => c.gather(&bs[..bytes], &mut br[..bytes * p], 0),
        Kind::Reduce => c.reduce(&fs[..e], &mut fr[..e], &sum, 0),
        Kind::Allgather => c.allgather(&bs[..bytes], &mut br[..bytes * p]),
        Kind::Allreduce => c.allreduce(&fs[..e], &mut fr[..e], &sum),
        Kind::ReduceScatter => c.reduce_scatter(&fs[..e], &mut fr[..e / p], &sum),
        Kind::Alltoall => c.alltoall(&bs[..bytes * p], &mut br[..bytes * p]),
        Kind::Barrier => c.barrier(),
        _ => unreachable!("collectives only"),
    }
}

/// The algorithm `--algo` forces for `bench`, if any (`forced` as in [`Options::algos`]).
pub fn forced_algorithm<'a>(forced: &'a [(usize, String)], bench: &Benchmark) -> Option<&'a str> {
    let i = index_of(bench);
    forced
        .iter()
        .find(|(b, _)| *b == i)
        .map(|(_, n)| n.as_str())
}

/// The index of a benchmark in [`BENCHMARKS`].
pub fn index_of(b: &Benchmark) -> usize {
    BENCHMARKS
        .iter()
        .position(|x| x.name == b.name)
        .expect("a benchmark from the table")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half(times: &[(&str, u64, f64)], note: &str) -> Half {
        let rows = times
            .iter()
            .map(|&(b, bytes, t)| Row {
                implementation: "tca".into(),
                benchmark: b.into(),
                algorithm: "-".into(),
                ranks: 2,
                bytes,
                repetitions: 10,
                t_min_us: t - 0.5,
                t_max_us: t + 0.5,
                t_avg_us: t,
                mbytes_per_sec: None,
                overlap: None,
            })
            .collect();
        Half {
            implementation: "tca".into(),
            transport: "shm".into(),
            ranks: 2,
            rows,
            notes: vec![note.into()],
            round_t_avg_us: Vec::new(),
        }
    }

    #[test]
    fn rounds_merge_cell_by_cell_into_their_median() {
        let rounds = vec![
            half(&[("Bcast", 8, 3.0), ("Bcast", 64, 10.0)], "first"),
            half(&[("Bcast", 8, 1.0), ("Bcast", 64, 30.0)], "second"),
            half(&[("Bcast", 8, 2.0), ("Bcast", 64, 20.0)], "third"),
        ];
        let m = Half::median_of(rounds.clone()).unwrap();
        let t: Vec<(f64, f64)> = m.rows.iter().map(|r| (r.t_avg_us, r.t_min_us)).collect();
        assert_eq!(t, vec![(2.0, 1.5), (20.0, 19.5)]);
        assert_eq!(m.notes, vec!["first", "second", "third"]);
        assert_eq!(
            m.round_t_avg_us,
            vec![vec![3.0, 1.0, 2.0], vec![10.0, 30.0, 20.0]]
        );
        // An even count takes the lower middle round; one round is itself.
        let two = Half::median_of(rounds[..2].to_vec()).unwrap();
        assert_eq!(two.rows[0].t_avg_us, 1.0);
        assert_eq!(two.rows[1].t_avg_us, 10.0);
        assert_eq!(
            Half::median_of(rounds[2..].to_vec()).unwrap().rows[1].t_avg_us,
            20.0
        );
        // Rounds that measured other cells are refused.
        let other = vec![
            rounds[0].clone(),
            half(&[("Bcast", 8, 1.0), ("Bcast", 128, 1.0)], "x"),
        ];
        let e = Half::median_of(other).unwrap_err().to_string();
        assert!(e.contains("round 2") && e.contains("other cells"), "{e}");
        let mut mpi = rounds[1].clone();
        mpi.implementation = "MPI".into();
        let e = Half::median_of(vec![rounds[0].clone(), mpi])
            .unwrap_err()
            .to_string();
        assert!(e.contains("round 2 is of MPI, round 1 of tca"), "{e}");
        assert!(Half::median_of(vec![]).is_err());
    }

    #[test]
    fn names_and_sizes() {
        assert_eq!(Benchmark::find("allreduce").unwrap().name, "Allreduce");
        let e = Benchmark::find("nosuch").unwrap_err().to_string();
        assert!(e.contains("PingPong") && e.contains("floor"), "{e}");
        let rs = Benchmark::find("reduce_scatter").unwrap();
        assert_eq!(rs.bytes_for(64, 3), Some(60));
        assert_eq!(rs.bytes_for(4, 3), None);
        assert_eq!(rs.bytes_for(0, 3), Some(0));
        let ar = Benchmark::find("Allreduce").unwrap();
        assert_eq!(ar.bytes_for(2, 2), None);
        assert_eq!(ar.bytes_for(8, 2), Some(8));
        assert_eq!(Benchmark::find("bcast").unwrap().bytes_for(3, 2), Some(3));
    }

    #[test]
    fn algos() {
        let all: Vec<usize> = (0..BENCHMARKS.len()).collect();
        let a = parse_algos(&["ring".into()], &all).unwrap();
        assert!(a.len() >= 2, "{a:?}"); // allreduce and allgather (and reduce_scatter) have rings
        let a = parse_algos(&["Allreduce=ring".into()], &all).unwrap();
        assert_eq!(
            a,
            vec![(
                index_of(Benchmark::find("Allreduce").unwrap()),
                "ring".into()
            )]
        );
        assert!(parse_algos(&["nosuch".into()], &all).is_err());
        assert!(parse_algos(&["Allreduce=nosuch".into()], &all).is_err());
        assert!(parse_algos(&["PingPong=ring".into()], &all).is_err());
        let only_pp = vec![0];
        assert!(parse_algos(&["ring".into()], &only_pp).is_err());
    }
}
