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
    /// Called once before a series of [`Backend::allgatherv_f64`] with these counts, so that
    /// the series allocates nothing (an adapter that must convert counts does it here).
    fn prepare_allgatherv(&mut self, counts: &[usize], displs: &[usize]) -> CommResult<()> {
        let _ = (counts, displs);
        Ok(())
    }
    /// In place: `x[displs[me]..][..counts[me]]` holds this rank's block; afterwards `x`
    /// holds every rank's block at its displacement. Calls with the counts of the last
    /// [`Backend::prepare_allgatherv`] allocate nothing (others prepare first).
    fn allgatherv_f64(
        &mut self,
        x: &mut [f64],
        counts: &[usize],
        displs: &[usize],
    ) -> CommResult<()>;
    /// The sum of `v` over all ranks, the same bits on every rank.
    fn allreduce_sum_f64(&mut self, v: f64) -> CommResult<f64>;

    /// Rank 0's `v`, on every rank.
    fn agree(&mut self, v: u64) -> CommResult<u64> {
        let mut b = [v];
        self.broadcast_u64(&mut b)?;
        Ok(b[0])
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
    #[inline]
    fn allreduce_sum_f64(&mut self, v: f64) -> CommResult<f64> {
        let mut b = [v];
        self.allreduce_in_place(&mut b, &tca::Op::Sum)?;
        Ok(b[0])
    }
}

#[cfg(feature = "mpi")]
pub use with_mpi::MpiComm;

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
            let int = |v: &[usize]| -> CommResult<Vec<i32>> {
                v.iter()
                    .map(|&c| {
                        i32::try_from(c).map_err(|_| {
                            CommError::Mpi(format!("{c} elements exceed MPI's 32-bit counts"))
                        })
                    })
                    .collect()
            };
            self.counts = int(counts)?;
            self.displs = int(displs)?;
            self.send = vec![0.0; counts[self.rank()]];
            Ok(())
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
        fn prepare_allgatherv(&mut self, counts: &[usize], displs: &[usize]) -> CommResult<()> {
            self.fit(counts, displs)
        }
        #[inline]
        fn allgatherv_f64(
            &mut self,
            x: &mut [f64],
            counts: &[usize],
            displs: &[usize],
        ) -> CommResult<()> {
            let me = self.rank();
            // As cheap as the check of the old per-solver adapter (lengths only), so the MPI
            // half's timed Allgatherv pays nothing tca's does not; that the counts are the
            // prepared ones is the caller's contract, checked in debug builds.
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
                "allgatherv_f64 with counts other than the prepared ones"
            );
            let mine = displs[me]..displs[me] + counts[me];
            self.send.copy_from_slice(&x[mine]);
            let mut recv = PartitionMut::new(x, &self.counts[..], &self.displs[..]);
            self.world
                .all_gather_varcount_into(&self.send[..], &mut recv);
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
