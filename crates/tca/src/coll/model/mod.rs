//! Cost models of the collective algorithms, their calibration file, and the per-communicator
//! decision table that [`Algorithm`](super::registry::Algorithm)-selection reads on every call.
//!
//! # What is modelled (`cost`)
//!
//! What an algorithm does is a [`Work`]: the counts of the things the channel layer
//! (`channel`) spends time on. They are not written by hand: a counting pass runs the
//! algorithm's own description on every rank of a communicator that does not exist and adds
//! up what each step would do (`coll::count`), so the model is always that of the code that
//! runs. [`CostModel`] prices each count, so a prediction is the dot product `Work ·
//! CostModel`, linear in the parameters:
//!
//! | count | parameter | what it is on shared memory |
//! |---|---|---|
//! | `rounds` | `delta` (us) | a synchronising round: the rank waits for a message whose sender is waiting for this rank's message (an exchange step); one cache line each way plus the wake-up |
//! | `chunks` | `alpha` (us) | one chunk sent or received: credit check, header line, sequence word |
//! | `spilled` | `alpha_spill` (us) | a chunk whose payload does not ride in its header line (more than `channel::INLINE` bytes): at least one more line transfer, paid in latency because nothing overlaps the first miss |
//! | `recv_bytes` | `beta` (us/B) | a byte copied out of a slot by its receiver, past the first `knee` bytes of its chunk |
//! | `sent_bytes` | `beta_send` (us/B) | a byte copied into a peer's slot by its sender, past the first `knee` bytes |
//! | `small_bytes` | `beta_small` (us/B) | the first `knee` bytes of each chunk, sent or received: small copies stay in the first-level caches and overlap with the line transfers, so they are cheaper per byte than long ones |
//! | `local_bytes` | `beta_local` (us/B) | a byte copied inside the rank (staging buffers, the typed front end's copy of the send buffer) |
//! | `reduced_bytes` | `gamma` (us/B) | a byte combined with the reduction operation |
//! | `far_bytes` | `beta_far` (us/B) | a byte of a message of at least `cache` bytes, sent, received or copied, on top of its other prices: such a message, with its partner's, no longer fits the caches the ranks share, so its bytes come from farther away |
//!
//! Messages longer than a chunk (`chunk_bytes(p)`) stream through the channel's slots, so a
//! message of `x` bytes is `ceil(x / chunk)` chunks and pays `alpha` and the knee per chunk.
//! `knee` and `cache` are not fitted but chosen: calibration fits the linear parameters at
//! each candidate pair and keeps the pair that fits best. The cache step is per message, not
//! per call, because that is what the measurements show: at 2 ranks on the development
//! machine a 4 MiB exchange (recursive-doubling allgather, dissemination allreduce) costs
//! 25-50% more per byte than the same bytes moved as 2 MiB halves (Rabenseifner), while a
//! 4 MiB one-way stream (broadcast) does not slow down; being per collective, the fit finds
//! that threshold for each (and none for broadcast).
//! The `Cost:` line that opens each algorithm's file is the textbook α-β-γ cost; the counting
//! pass gives the schedule this model prices.
//!
//! **What time is predicted.** The time per call of back-to-back calls, as IMB and
//! `tca bench` measure it. In an exchange every rank waits for its partners each round, so the
//! rounds add up. In a rooted collective whose data flows one way (broadcast, scatter,
//! gather, reduce) nobody waits for anything that depends on its own message, so consecutive
//! calls overlap up to the channels' credits, and the time per call is the work of the
//! busiest rank: the root, or the rank that receives and forwards the most, whichever is
//! slower at the model's parameters ([`CostModel::slowest`]). That makes those models a maximum
//! of linear forms, linear again once the slower side is known, which is how calibration
//! fits them (`tca_model::linear::fit_piecewise`).
//!
//! **More ranks than cores.** Then the ranks' work competes for the cores, and the pace is
//! the work of all ranks spread over the cores, when that is longer than the busiest rank's
//! ([`CostModel::paced`]): each algorithm states its total as well. For an exchange, where every
//! rank runs the same schedule, that is p/cores times one rank's; for a rooted collective it
//! is what separates the algorithms (at 8 ranks on 2 cores an 8-byte broadcast took 3.5 us,
//! where its busiest rank alone predicts 1.4 us). The cores are those recorded with the
//! rank count's calibration ([`RankModels::cores`]).
//!
//! # Where the parameters come from (`file`, `cache`)
//!
//! Built-in defaults ([`CostModel::default`]) measured on the development machine, unless a
//! calibration file exists: `tca model calibrate` measures every algorithm with a short
//! `tca bench` run, fits the parameters per rank count, per collective and over all
//! collectives together (non-negative least squares on relative errors), and writes a
//! [`Calibration`] as JSON to [`default_path`] (`$TCA_MODEL_FILE`, else
//! `$XDG_CONFIG_HOME/tca/model.json`, else `~/.config/tca/model.json`). The library reads it
//! once per process, at the first communicator ([`active`]); a malformed file is reported
//! once on stderr and the defaults are used. `TCA_MODEL_FILE=none` forces the defaults.
//!
//! Parameters are fitted per collective because only algorithms of one collective are ever
//! compared with each other, and what the shared counts cost differs between collectives in
//! ways the counts do not capture (a reduction's f32 kernel against a byte copy, whose buffers
//! stay in cache, which side of a one-way stream is slower); the fit over all collectives is
//! the fallback for a collective the calibration did not measure. Parameters are fitted per
//! rank count because with more ranks than cores every count costs more (the ranks share
//! cores and wait on each other through the scheduler); a communicator uses the rank count
//! measured nearest to its size ([`Calibration::nearest`]).
//!
//! # Selection (`table`)
//!
//! [`Table`] holds, per collective and per quarter-octave size bucket, the supported
//! algorithm with the lowest predicted time at the bucket's lower edge (exact at powers of
//! two). A communicator builds its table once, for its size, when it is created, and takes
//! rank 0's (one small broadcast), so that members that read different files still agree; a
//! call looks its algorithm up in O(1), so no model is evaluated and no file is read on the
//! hot path. A forced algorithm (`TCA_COLL_<OP>`, `Comm::force`) still comes first.
//!
//! **Across a network.** A message between nodes costs microseconds (a TCP stack, a NIC),
//! not the tens of nanoseconds of a cache line, so fewer messages win: at 2 ranks over
//! libfabric's tcp provider a 32-64 KiB allreduce by recursive doubling takes 36-48 us, and
//! Rabenseifner's, which the shared-memory models take from 32 KiB, 68-93 us (BENCHMARKS.md,
//! "Choosing algorithms for a network"). A communicator with members on other
//! nodes ([`Comm::spans_network`](crate::Comm::spans_network)) therefore builds its table
//! from the entries of the calibration measured across a network ([`RankModels::network`]:
//! `tca model calibrate` run with its ranks spread over nodes, e.g. under `TCA_HOSTS`), and
//! without any from the built-in [`CostModel::network`]. On a simulated network the model is
//! made from the network's own parameters, whatever calibration file the host has, so that a
//! simulated job chooses, and times, the same on every machine.
//!
//! # What the models leave out
//!
//! Contention (flat algorithms' p - 1 streams into one rank), cache capacity beyond the one
//! per-message step, locality, and the latency of one isolated call. So some algorithms are
//! never predicted to win: the ring allgather, the ring reduce_scatter and the pairwise
//! alltoall send the same messages as Bruck's allgather or the one-round flat variants in
//! more rounds. And some tie: with data flowing one way, a pipeline's middle rank often does
//! as much as binomial's busiest rank (a tie that table order gives to the pipeline, measured
//! the faster at 4-6 ranks). They stay in the table for forcing and for the regimes the
//! models do not describe. With more ranks than cores, the models see the scheduler through
//! the total work over the cores and through parameters fitted at that rank count.
//!
//! # Layout
//!
//! - `cost`: the cost algebra, [`CostModel`] and the [`Work`] it prices (and the schedule
//!   builder the counting pass adds each step to);
//! - `file`: the calibration file, [`Calibration`] and its parts, and where it is looked for
//!   ([`default_path`]);
//! - `cache`: the process-wide model, read once ([`active`]), and where it came from
//!   ([`Source`]);
//! - `table`: selection, [`Calibration::choose`] and the per-communicator [`Table`].
//!
//! The submodules are private and every item is re-exported here: `tca::coll::model::X`
//! names it whichever file holds it.

mod cache;
mod cost;
mod file;
mod table;

pub use cache::{Active, Source, active, load_or_default, warn_once};
pub(crate) use cost::Sched;
pub use cost::{CostModel, MAX_CACHE, MAX_KNEE, Work};
pub use file::{
    Calibration, FORMAT, Fitted, Quality, RankModels, VERSION, default_path, model_path,
};
pub use table::{SELECT_MAX, Table};
