//! "tca or MPI": the one trait the tools are written against, so that a benchmark suite or a
//! solver is written once and runs on either library unchanged ([`Backend`]), with one
//! adapter per library: `tca::Comm` implements it itself, and `MpiComm` wraps rsmpi's world
//! communicator (with the `mpi` feature).
//!
//! The trait holds what the tools need *around* their measured or solved work: who am I,
//! synchronise, agree on a value, distribute a matrix, collect timings, and the two
//! collectives of the CG iteration (seed 000, Fig. 13: an Allgatherv of the direction
//! vector and an 8-byte AllreduceSum). What a benchmark times is each library's own calls,
//! written by the benchmark against the library's native API (the `tca::Comm`,
//! `MpiComm::world`), as IMB writes MPI calls.
//!
//! Contract, as for MPI: every rank calls the same operations in the same order with
//! matching counts; root is always rank 0; [`Backend::allreduce_sum_f64`] gives the same
//! bits on every rank (tca promises it for every allreduce algorithm; MPI libraries do it
//! for commutative operations), which a solver relies on to take its branches together.

/// An operation of the library under a [`Backend`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    /// tca failed (a peer died, a timeout, bad arguments); its message as it is.
    #[error(transparent)]
    Tca(#[from] tca::Error),
    /// The MPI failed, or cannot express the call (counts beyond its 32-bit `int`).
    #[error("MPI: {0}")]
    Mpi(String),
}

/// `Result` with [`CommError`].
pub type CommResult<T> = Result<T, CommError>;

/// A communication library's world, as the tools use it (see the module doc).
pub trait Backend {
    /// This rank.
    fn rank(&self) -> usize;
    /// Ranks in the job.
    fn size(&self) -> usize;
    /// The library's name for tables and reports ("tca", "Open MPI 4.1.4").
    fn name(&self) -> String;
    /// What carries its bytes, for reports (tca: the `World`'s transport; on a simulated
    /// network `sim:` and the model's name).
    fn transport(&self) -> String;
    /// Seconds on this rank's clock, what the tools time with: tca's [`tca::World::wtime`]
    /// (virtual time on a simulated network), `MPI_Wtime`.
    fn wtime(&self) -> f64;
    /// Blocks until every rank has arrived.
    fn barrier(&mut self) -> CommResult<()>;
    /// Rank 0's `buf` to every rank.
    fn broadcast_u64(&mut self, buf: &mut [u64]) -> CommResult<()>;
    /// Rank 0's `send` (size() x recv.len(), read on rank 0 only) cut in equal blocks; block
    /// r to rank r's `recv`.
    fn scatter_u64(&mut self, send: &[u64], recv: &mut [u64]) -> CommResult<()>;
    /// As [`Backend::scatter_u64`], for `f64`.
    fn scatter_f64(&mut self, send: &[f64], recv: &mut [f64]) -> CommResult<()>;
    /// Every rank's `send` (same length) to block r of rank 0's `recv` (written on rank 0
    /// only).
    fn gather_f64(&mut self, send: &[f64], recv: &mut [f64]) -> CommResult<()>;
    /// In place: `x[displs[me]..][..counts[me]]` holds this rank's block; afterwards `x`
    /// holds every rank's block at its displacement. (A series of them on one vector is
    /// faster as a [`Backend::gathered`] vector.)
    fn allgatherv_f64(
        &mut self,
        x: &mut [f64],
        counts: &[usize],
        displs: &[usize],
    ) -> CommResult<()>;
    /// A vector that [`Backend::allgatherv_into`] fills again and again (the CG's direction
    /// vector), kept where the library gathers into it fastest: tca's own memory, which peers
    /// write straight into (one copy per byte: [`tca::Comm::allgatherv_init`]), or a plain
    /// vector.
    type Gathered: GatheredVector;
    /// Sets up a vector of `len` elements gathered with these counts and displacements
    /// (collective; the same arguments on every rank).
    fn gathered(
        &mut self,
        len: usize,
        counts: &[usize],
        displs: &[usize],
    ) -> CommResult<Self::Gathered>;
    /// One Allgatherv of `g`: every rank's block, as [`GatheredVector::block_mut`] left it, into
    /// every rank's [`GatheredVector::vector`].
    fn allgatherv_into(&mut self, g: &mut Self::Gathered) -> CommResult<()>;
    /// [`Backend::allgatherv_into`] started, `during` run while the blocks travel, then finished: a
    /// non-blocking Allgatherv (tca's round started and waited for, `MPI_Iallgatherv`). `during`
    /// gets the backend for its clock ([`Backend::wtime`]); it cannot touch `g`.
    ///
    /// Whether blocks move while `during` runs is the library's affair: MPI and tca's
    /// collective algorithms progress only when called, while tca's gathered vector is
    /// written by the peers' own puts (on shared memory, and RDMA writes across a network)
    /// whatever this rank does (across a network an eager write lands in this rank's
    /// progress, its wait).
    fn allgatherv_into_overlapped<W: FnOnce(&Self)>(
        &mut self,
        g: &mut Self::Gathered,
        during: W,
    ) -> CommResult<()>
    where
        Self: Sized;

    /// The sum of `v` over all ranks, the same bits on every rank.
    fn allreduce_sum_f64(&mut self, v: f64) -> CommResult<f64>;

    /// Rank 0's `v`, on every rank.
    fn agree(&mut self, v: u64) -> CommResult<u64> {
        let mut b = [v];
        self.broadcast_u64(&mut b)?;
        Ok(b[0])
    }
}

/// A vector gathered again and again ([`Backend::gathered`]).
pub trait GatheredVector {
    /// This rank's block for the next gather: write all of it before every gather. What it
    /// holds before that is unspecified (it differs by library: tca's vector alternates
    /// between two buffers, MPI's block is a separate send buffer, [`Staged`]'s is the vector).
    fn block_mut(&mut self) -> &mut [f64];
    /// The whole vector the last gather filled (zeros before the first); an error if a
    /// gather failed and left it unusable.
    fn vector(&self) -> CommResult<&[f64]>;
}

/// A gathered vector in ordinary memory, gathered in place (this rank's block is part of the
/// vector): for libraries and transports that gather into a plain buffer.
#[derive(Debug, Clone)]
pub struct Staged {
    v: Vec<f64>,
    counts: Vec<usize>,
    displs: Vec<usize>,
    block: std::ops::Range<usize>,
}

impl Staged {
    /// A vector of `len` zeros, rank `me`'s block at `displs[me]`. `counts` and `displs` are
    /// checked by the gather that uses them: a block that does not fit is cut here and
    /// refused there. The plain implementation of [`Backend::Gathered`] for a library that
    /// gathers into ordinary memory in place.
    pub fn new(len: usize, counts: &[usize], displs: &[usize], me: usize) -> Staged {
        let at = displs.get(me).copied().unwrap_or(0).min(len);
        let n = counts.get(me).copied().unwrap_or(0).min(len - at);
        Staged {
            v: vec![0.0; len],
            counts: counts.to_vec(),
            displs: displs.to_vec(),
            block: at..at + n,
        }
    }

    /// The vector and the counts and displacements, for an in-place Allgatherv.
    pub fn parts(&mut self) -> (&mut [f64], &[usize], &[usize]) {
        (&mut self.v, &self.counts, &self.displs)
    }
}

impl GatheredVector for Staged {
    fn block_mut(&mut self) -> &mut [f64] {
        &mut self.v[self.block.clone()]
    }
    fn vector(&self) -> CommResult<&[f64]> {
        Ok(&self.v)
    }
}

/// tca's gathered vector: in tca's memory, written by the peers' puts (one copy), or on a
/// simulated network a plain vector gathered by the collective algorithms.
#[derive(Debug)]
pub enum TcaGathered {
    /// [`tca::Comm::allgatherv_init`]'s vector.
    Direct(tca::coll::Gathered<f64>),
    /// A plain vector and `allgatherv_in_place`.
    Staged(Staged),
}

impl GatheredVector for TcaGathered {
    #[inline]
    fn block_mut(&mut self) -> &mut [f64] {
        match self {
            TcaGathered::Direct(d) => d.block_mut(),
            TcaGathered::Staged(s) => s.block_mut(),
        }
    }
    #[inline]
    fn vector(&self) -> CommResult<&[f64]> {
        match self {
            TcaGathered::Direct(d) => Ok(d.vector()?),
            TcaGathered::Staged(s) => s.vector(),
        }
    }
}

/// [`Backend`] on a tca communicator: the communicator itself (built once, it holds its
/// scratch and its peers' handles for its whole life, so no call below allocates or
/// exchanges handles).
impl Backend for tca::Comm<'_> {
    fn rank(&self) -> usize {
        tca::Comm::rank(self) as usize
    }
    fn size(&self) -> usize {
        tca::Comm::size(self) as usize
    }
    fn name(&self) -> String {
        "tca".into()
    }
    fn transport(&self) -> String {
        let w = self.world_ref();
        match w.simulated() {
            Some(net) => format!("sim:{net}"),
            None => w.transport().into(),
        }
    }
    fn wtime(&self) -> f64 {
        self.world_ref().wtime()
    }
    fn barrier(&mut self) -> CommResult<()> {
        Ok(tca::Comm::barrier(self)?)
    }
    fn broadcast_u64(&mut self, buf: &mut [u64]) -> CommResult<()> {
        Ok(self.broadcast(buf, 0)?)
    }
    fn scatter_u64(&mut self, send: &[u64], recv: &mut [u64]) -> CommResult<()> {
        Ok(self.scatter(send, recv, 0)?)
    }
    fn scatter_f64(&mut self, send: &[f64], recv: &mut [f64]) -> CommResult<()> {
        Ok(self.scatter(send, recv, 0)?)
    }
    fn gather_f64(&mut self, send: &[f64], recv: &mut [f64]) -> CommResult<()> {
        Ok(self.gather(send, recv, 0)?)
    }
    #[inline]
    fn allgatherv_f64(
        &mut self,
        x: &mut [f64],
        counts: &[usize],
        displs: &[usize],
    ) -> CommResult<()> {
        Ok(self.allgatherv_in_place(x, counts, displs)?)
    }
    type Gathered = TcaGathered;
    fn gathered(
        &mut self,
        len: usize,
        counts: &[usize],
        displs: &[usize],
    ) -> CommResult<TcaGathered> {
        // On a simulated network the table's Allgatherv algorithms, which the simulation
        // models as the seeds ran them; elsewhere the one-copy vector.
        if self.world_ref().simulated().is_some() {
            let me = tca::Comm::rank(self) as usize;
            return Ok(TcaGathered::Staged(Staged::new(len, counts, displs, me)));
        }
        Ok(TcaGathered::Direct(
            self.allgatherv_init(len, counts, displs)?,
        ))
    }
    #[inline]
    fn allgatherv_into(&mut self, g: &mut TcaGathered) -> CommResult<()> {
        match g {
            TcaGathered::Direct(d) => d.run(self)?,
            TcaGathered::Staged(s) => {
                let (v, counts, displs) = s.parts();
                self.allgatherv_in_place(v, counts, displs)?;
            }
        }
        Ok(())
    }
    fn allgatherv_into_overlapped<W: FnOnce(&Self)>(
        &mut self,
        g: &mut TcaGathered,
        during: W,
    ) -> CommResult<()> {
        let comm: &Self = self;
        match g {
            TcaGathered::Direct(d) => d.run_overlapped(comm, |_| during(comm))?,
            TcaGathered::Staged(s) => {
                let (v, counts, displs) = s.parts();
                comm.scope(|sc| {
                    let mut r = sc.iallgatherv_in_place(v, counts, displs)?;
                    during(comm);
                    r.wait().map(drop)
                })?;
            }
        }
        Ok(())
    }
    #[inline]
    fn allreduce_sum_f64(&mut self, v: f64) -> CommResult<f64> {
        let mut b = [v];
        self.allreduce_in_place(&mut b, &tca::Op::Sum)?;
        Ok(b[0])
    }
}

#[cfg(feature = "mpi")]
pub use with_mpi::{MpiComm, MpiGathered};

#[cfg(feature = "mpi")]
mod with_mpi {
    use mpi::collective::SystemOperation;
    use mpi::datatype::PartitionMut;
    use mpi::topology::SimpleCommunicator;
    use mpi::traits::*;

    use super::{Backend, CommError, CommResult};

    /// [`Backend`] on an MPI communicator (rsmpi): `MPI_Barrier`, `MPI_Bcast`, `MPI_Scatter`,
    /// `MPI_Gather`, `MPI_Allgatherv` and an 8-byte `MPI_Allreduce`, root 0.
    ///
    /// One difference from tca inside the Allgatherv: rsmpi offers no `MPI_IN_PLACE` for
    /// `all_gather_varcount_into`, so this rank's block is first copied to a send buffer
    /// (kept between calls; for nasa2910 on two ranks 1,455 doubles, 11.6 KB, a fraction of
    /// a microsecond). MPI copies its own block into the receive buffer in any case.
    pub struct MpiComm {
        world: SimpleCommunicator,
        name: String,
        counts: Vec<i32>,
        displs: Vec<i32>,
        send: Vec<f64>,
    }

    impl std::fmt::Debug for MpiComm {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("MpiComm")
                .field("rank", &self.world.rank())
                .field("name", &self.name)
                .finish_non_exhaustive()
        }
    }

    impl MpiComm {
        /// Uses `world` (`universe.world()` after `mpi::initialize`).
        pub fn new(world: SimpleCommunicator) -> Self {
            Self {
                world,
                name: library_name(),
                counts: Vec::new(),
                displs: Vec::new(),
                send: Vec::new(),
            }
        }

        /// The communicator, for the calls a benchmark times.
        pub fn world(&self) -> &SimpleCommunicator {
            &self.world
        }

        /// Converts the Allgatherv's counts (MPI counts are `int`) and sizes the send buffer.
        fn fit(&mut self, counts: &[usize], displs: &[usize]) -> CommResult<()> {
            self.counts = int_counts(counts)?;
            self.displs = int_counts(displs)?;
            self.send = vec![0.0; counts[self.rank()]];
            Ok(())
        }
    }

    /// Whether two non-empty blocks overlap (erroneous for `MPI_Allgatherv`, which does not
    /// check it).
    fn overlapping(counts: &[usize], displs: &[usize]) -> bool {
        let mut blocks: Vec<(usize, usize)> = counts
            .iter()
            .zip(displs)
            .filter(|&(&c, _)| c > 0)
            .map(|(&c, &d)| (d, d + c))
            .collect();
        blocks.sort_unstable();
        blocks.windows(2).any(|w| w[1].0 < w[0].1)
    }

    /// Counts or displacements as MPI's `int`s.
    fn int_counts(v: &[usize]) -> CommResult<Vec<i32>> {
        v.iter()
            .map(|&c| {
                i32::try_from(c)
                    .map_err(|_| CommError::Mpi(format!("{c} elements exceed MPI's 32-bit counts")))
            })
            .collect()
    }

    /// MPI's gathered vector: a plain vector and a send buffer (rsmpi has no `MPI_IN_PLACE`
    /// for `MPI_Allgatherv`), counts converted once.
    #[derive(Debug)]
    pub struct MpiGathered {
        v: Vec<f64>,
        send: Vec<f64>,
        counts: Vec<i32>,
        displs: Vec<i32>,
    }

    impl super::GatheredVector for MpiGathered {
        fn block_mut(&mut self) -> &mut [f64] {
            &mut self.send
        }
        fn vector(&self) -> CommResult<&[f64]> {
            Ok(&self.v)
        }
    }

    /// The MPI library's name and version, as its `MPI_Get_library_version` says
    /// ("Open MPI 4.1.4", "MPICH 4.0.2").
    fn library_name() -> String {
        let v = mpi::environment::library_version().unwrap_or_default();
        let first = v.lines().next().unwrap_or("MPI").trim();
        if let Some(rest) = first.strip_prefix("Open MPI v") {
            format!("Open MPI {}", rest.split([',', ' ']).next().unwrap_or(""))
        } else if let Some(rest) = first.strip_prefix("MPICH Version:") {
            format!("MPICH {}", rest.trim())
        } else {
            first.chars().take(40).collect()
        }
    }

    /// `MPI_Scatter` from rank 0: the root's `send` (read there only) to every rank's `recv`.
    fn scatter_from_0<T: Equivalence>(world: &SimpleCommunicator, send: &[T], recv: &mut [T]) {
        let root = world.process_at_rank(0);
        if world.rank() == 0 {
            root.scatter_into_root(send, recv);
        } else {
            root.scatter_into(recv);
        }
    }

    impl Backend for MpiComm {
        fn rank(&self) -> usize {
            usize::try_from(self.world.rank()).unwrap_or(0)
        }
        fn size(&self) -> usize {
            usize::try_from(self.world.size()).unwrap_or(0)
        }
        fn name(&self) -> String {
            self.name.clone()
        }
        fn transport(&self) -> String {
            "MPI (its own transports)".into()
        }
        fn wtime(&self) -> f64 {
            mpi::time()
        }
        fn barrier(&mut self) -> CommResult<()> {
            self.world.barrier();
            Ok(())
        }
        fn broadcast_u64(&mut self, buf: &mut [u64]) -> CommResult<()> {
            self.world.process_at_rank(0).broadcast_into(buf);
            Ok(())
        }
        fn scatter_u64(&mut self, send: &[u64], recv: &mut [u64]) -> CommResult<()> {
            scatter_from_0(&self.world, send, recv);
            Ok(())
        }
        fn scatter_f64(&mut self, send: &[f64], recv: &mut [f64]) -> CommResult<()> {
            scatter_from_0(&self.world, send, recv);
            Ok(())
        }
        fn gather_f64(&mut self, send: &[f64], recv: &mut [f64]) -> CommResult<()> {
            let root = self.world.process_at_rank(0);
            if self.world.rank() == 0 {
                root.gather_into_root(send, recv);
            } else {
                root.gather_into(send);
            }
            Ok(())
        }
        #[inline]
        fn allgatherv_f64(
            &mut self,
            x: &mut [f64],
            counts: &[usize],
            displs: &[usize],
        ) -> CommResult<()> {
            let me = self.rank();
            // Counts converted once and kept: a series with the same counts converts nothing
            // (checked by lengths; that they are the kept ones is checked in debug builds).
            if self.counts.len() != counts.len() || self.send.len() != counts[me] {
                self.fit(counts, displs)?;
            }
            debug_assert!(
                self.counts
                    .iter()
                    .zip(counts)
                    .all(|(&x, &y)| usize::try_from(x) == Ok(y))
                    && self
                        .displs
                        .iter()
                        .zip(displs)
                        .all(|(&x, &y)| usize::try_from(x) == Ok(y)),
                "allgatherv_f64 with other counts of the same lengths as the kept ones"
            );
            let mine = displs[me]..displs[me] + counts[me];
            self.send.copy_from_slice(&x[mine]);
            let mut recv = PartitionMut::new(x, &self.counts[..], &self.displs[..]);
            self.world
                .all_gather_varcount_into(&self.send[..], &mut recv);
            Ok(())
        }
        type Gathered = MpiGathered;
        fn gathered(
            &mut self,
            len: usize,
            counts: &[usize],
            displs: &[usize],
        ) -> CommResult<MpiGathered> {
            let me = self.rank();
            if counts.len() != self.size()
                || displs.len() != self.size()
                || counts
                    .iter()
                    .zip(displs)
                    .any(|(&c, &d)| c.checked_add(d).is_none_or(|e| e > len))
                || overlapping(counts, displs)
            {
                return Err(CommError::Mpi(format!(
                    "a gathered vector of {len} elements: {} counts and {} displacements that \
                     do not describe separate blocks inside it for {} ranks",
                    counts.len(),
                    displs.len(),
                    self.size()
                )));
            }
            Ok(MpiGathered {
                v: vec![0.0; len],
                send: vec![0.0; counts[me]],
                counts: int_counts(counts)?,
                displs: int_counts(displs)?,
            })
        }
        fn allgatherv_into(&mut self, g: &mut MpiGathered) -> CommResult<()> {
            let mut recv = PartitionMut::new(&mut g.v[..], &g.counts[..], &g.displs[..]);
            self.world.all_gather_varcount_into(&g.send[..], &mut recv);
            Ok(())
        }
        fn allgatherv_into_overlapped<W: FnOnce(&Self)>(
            &mut self,
            g: &mut MpiGathered,
            during: W,
        ) -> CommResult<()> {
            let this: &Self = self;
            let mut recv = PartitionMut::new(&mut g.v[..], &g.counts[..], &g.displs[..]);
            mpi::request::scope(|sc| {
                let req = this
                    .world
                    .immediate_all_gather_varcount_into(sc, &g.send[..], &mut recv);
                during(this);
                req.wait();
            });
            Ok(())
        }
        #[inline]
        fn allreduce_sum_f64(&mut self, v: f64) -> CommResult<f64> {
            let mut out = 0.0f64;
            self.world
                .all_reduce_into(&v, &mut out, SystemOperation::sum());
            Ok(out)
        }
    }
}
