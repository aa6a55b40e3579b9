//! The per-communicator decision table: per collective and per quarter-octave size bucket,
//! the index of the algorithm to use. [`Calibration::choose`] compares the predicted times of a
//! collective's algorithms; [`Table::new`] asks it once per bucket, at the bucket's lower edge,
//! when a communicator is created, so a call is one array lookup ([`Table::get`]). A table fits
//! in one small broadcast, so every member can take rank 0's.

use super::Calibration;
use crate::coll::registry::{ALGORITHMS, Algorithm, Collective};
use crate::error::{Error, ErrorKind, Result};

impl Calibration {
    /// The predicted time of `alg` on `p` ranks and `bytes` bytes (its collective's meaning
    /// of bytes, see [`Algorithm::cost`]), us.
    pub fn predict(&self, alg: &Algorithm, p: usize, bytes: usize) -> f64 {
        self.predict_on(alg, p, bytes, false)
    }

    /// [`Calibration::predict`] with the models of a communicator that spans a network
    /// (`network`, [`Calibration::model_on`]) or lies within one node.
    pub fn predict_on(&self, alg: &Algorithm, p: usize, bytes: usize, network: bool) -> f64 {
        alg.cost(&self.model_on(alg.collective, p, network), p, bytes)
    }

    /// The supported algorithm of `collective` with the lowest predicted time on `p` ranks and
    /// `bytes` bytes, of those Auto considers ([`Algorithm::auto`]). Times within a relative 1e-9
    /// (which rounding can tell apart) are equal; among equals, the one whose busiest rank has the
    /// least to do (with more ranks than cores several one-way broadcasts predict the same total
    /// over the cores, and the shorter critical path is what sets them apart), then the first in
    /// table order. Sizes of more than [`SELECT_MAX`] bytes in all (p times `bytes`) are
    /// chosen for as that size: the counting pass prices every algorithm by running it on
    /// buffers of those sizes. If no algorithm can be counted (the address space for the pass
    /// cannot be reserved), the first that Auto considers and that runs on `p` ranks, with a
    /// warning on stderr, once.
    pub fn choose(&self, collective: Collective, p: usize, bytes: usize) -> &'static Algorithm {
        self.choose_on(collective, p, bytes, false)
    }

    /// [`Calibration::choose`] under the models of a communicator that spans a network
    /// (`network`, [`Calibration::model_on`]) or lies within one node.
    pub fn choose_on(
        &self,
        collective: Collective,
        p: usize,
        bytes: usize,
        network: bool,
    ) -> &'static Algorithm {
        let m = self.model_on(collective, p, network);
        let bytes = selected(p, bytes);
        let below = |a: f64, b: f64| a < b * (1.0 - 1e-9);
        let mut best: Option<(&'static Algorithm, f64, f64)> = None;
        for a in collective
            .algorithms()
            .filter(|a| a.auto && (a.supports)(p) && bytes <= a.auto_max)
        {
            // The busiest rank's time alone is the pace with a core per rank.
            let (t, busiest) = match crate::coll::count::parts(a, &m, p, bytes) {
                Ok((b, total)) => (m.time(&m.paced(p, b, total)), m.time(&b)),
                Err(e) => {
                    uncounted(&e);
                    continue;
                }
            };
            if best.is_none_or(|(_, bt, bb)| below(t, bt) || (!below(bt, t) && below(busiest, bb)))
            {
                best = Some((a, t, busiest));
            }
        }
        best.map(|(a, _, _)| a)
            .or_else(|| collective.algorithms().find(|a| a.auto && (a.supports)(p)))
            .or_else(|| collective.algorithms().find(|a| (a.supports)(p)))
            .or_else(|| collective.algorithms().next())
            .expect("every collective has an algorithm")
    }
}

/// The most bytes in all (p times a size) at which [`Calibration::choose`] compares the
/// algorithms; larger sizes take the choice at this one.
pub const SELECT_MAX: usize = 1 << 30;

/// The size `bytes` on `p` ranks is chosen for as: itself, or at most [`SELECT_MAX`] in all.
fn selected(p: usize, bytes: usize) -> usize {
    bytes.min(SELECT_MAX / p.max(1))
}

/// Says once on stderr that Auto could not count an algorithm's cost.
fn uncounted(e: &Error) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        eprintln!(
            "tca: warning: Auto could not count a collective algorithm's cost ({e}); it takes \
             the first algorithm that runs where none can be counted"
        );
    });
}

/// Size buckets per octave.
const SUB: usize = 4;
/// Buckets: 0 bytes, then four per power of two up to 2^64.
const BUCKETS: usize = 1 + 64 * SUB;

/// The bucket of `bytes`: 0 for 0; otherwise the octave (bit length) and the next two bits.
fn bucket(bytes: usize) -> usize {
    let bits = (usize::BITS - bytes.leading_zeros()) as usize;
    if bits == 0 {
        return 0;
    }
    let sub = if bits > 2 {
        (bytes >> (bits - 3)) & (SUB - 1)
    } else {
        // 1, 2 and 3 bytes: their own buckets.
        if bits == 2 { bytes & 1 } else { 0 }
    };
    1 + (bits - 1) * SUB + sub
}

/// The smallest size in bucket `b` (the size the table decides at).
fn bucket_floor(b: usize) -> usize {
    if b == 0 {
        return 0;
    }
    let (octave, sub) = ((b - 1) / SUB, (b - 1) % SUB);
    match octave {
        0 => 1,
        1 => 2 + (sub & 1),
        _ => (1usize << octave) | (sub << (octave - 2)),
    }
}

/// Per collective and size bucket, the index in [`ALGORITHMS`] of the algorithm to use: built
/// once per communicator (see the [`model`](super) docs).
#[derive(Clone)]
pub struct Table {
    /// `choice[c * BUCKETS + b]`: collective `c` (its index in [`Collective::ALL`]), bucket `b`.
    choice: Box<[u8]>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").finish_non_exhaustive()
    }
}

impl Table {
    /// The table of `calibration` for `p` ranks, within one node or across a network
    /// (`network`: [`Calibration::choose_on`]).
    pub fn new(calibration: &Calibration, p: usize, network: bool) -> Table {
        let mut choice = vec![0u8; Collective::ALL.len() * BUCKETS].into_boxed_slice();
        for c in Collective::ALL {
            let mut last = None;
            for b in 0..BUCKETS {
                let at = c as usize * BUCKETS + b;
                // Past SELECT_MAX every bucket is chosen for as the same size: choose once.
                let size = selected(p, bucket_floor(b));
                if let Some((s, i)) = last
                    && s == size
                {
                    choice[at] = i;
                    continue;
                }
                let alg = calibration.choose_on(c, p, size, network);
                let i = ALGORITHMS
                    .iter()
                    .position(|a| std::ptr::eq(a, alg))
                    .expect("chosen from the table");
                choice[at] = u8::try_from(i).expect("algorithm index fits a byte");
                last = Some((size, choice[at]));
            }
        }
        Table { choice }
    }

    /// A table to receive rank 0's into (every entry 0, which [`Table::check`] refuses for
    /// most collectives): what the other members of a new communicator hold until rank 0's
    /// table arrives.
    pub(crate) fn unset() -> Table {
        Table {
            choice: vec![0u8; Collective::ALL.len() * BUCKETS].into_boxed_slice(),
        }
    }

    /// The algorithm for `collective` on `bytes` bytes.
    #[inline]
    pub fn get(&self, collective: Collective, bytes: usize) -> &'static Algorithm {
        &ALGORITHMS[self.choice[collective as usize * BUCKETS + bucket(bytes)] as usize]
    }

    /// The table as bytes, to make every member's table rank 0's (a communicator broadcasts
    /// it when it is created, so that ranks that read different model files still agree).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.choice
    }

    /// Checks a table received from another rank: every entry an algorithm of its row's
    /// collective.
    pub(crate) fn check(&self) -> Result<()> {
        for c in Collective::ALL {
            for b in 0..BUCKETS {
                let i = self.choice[c as usize * BUCKETS + b] as usize;
                if ALGORITHMS.get(i).is_none_or(|a| a.collective != c) {
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        format!(
                            "the algorithm table received from rank 0 names algorithm {i} for \
                             {}: the ranks run different builds of tca",
                            c.name()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_floors_land_in_them() {
        let mut xs: Vec<usize> = (0..5000).collect();
        xs.extend((12..64).flat_map(|k| [(1usize << k) - 1, 1 << k, (1 << k) + 1, 3 << (k - 2)]));
        xs.push(usize::MAX);
        xs.sort_unstable();
        let mut last = 0;
        for x in xs {
            let b = bucket(x);
            assert!(b < BUCKETS && b >= last, "{x}");
            last = b;
            let f = bucket_floor(b);
            assert!(f <= x && bucket(f) == b, "{x}: bucket {b}, floor {f}");
        }
        // Powers of two are bucket floors: the table decides exactly there.
        for k in 0..63 {
            assert_eq!(bucket_floor(bucket(1 << k)), 1 << k);
        }
    }
}
