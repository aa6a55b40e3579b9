//! The K computer's 3D-multiring allgather as seed 002 describes it (§4.2.5, eqs. 29-34):
//! every block cut in four parts, each sent over its own direction of the torus (K drives its
//! four network interfaces at once), each part taking the three ring stages of the 3-D grid
//! one block at a time. Every step a rank sends four messages, a quarter of one block each
//! (of a long block, a chunk of each quarter), so a step costs max(4 L_S, L_H + M/B) (eq. 29): about 383 steps of 4 L_S at 384 ranks for
//! short blocks (seed 002's measured t_L, 1,590 us).
//!
//! This is the algorithm seed 002 measured, kept so that `tca sim reproduce` simulates what
//! the paper's figures come from. tca's own [`ring_3d`](super::ring_3d) is the same for
//! blocks of more than one chunk; for shorter ones it passes a stage's blocks as one message
//! (n0 + n1 + n2 - 3 steps instead of p - 1), on the simulated 384-node Tofu 34.8 against
//! 1,565 us at 8 bytes.
//! Cost: p - 1 steps of four messages of M/4, each part a ring of its own.
//! Reuse: channel flow control; the parts' pipeline is [`ring_3d::run_parts`].

use super::ring_3d;
use crate::coll::step::{Mode, Steps};
use crate::error::Result;

pub(crate) async fn run<M: Mode>(
    c: Steps<'_, M>,
    buf: &mut [u8],
    counts: &[usize],
    displs: &[usize],
) -> Result<()> {
    match ring_3d::uniform(counts, displs) {
        Some(b) => ring_3d::run_parts(c, buf, b).await,
        // K's algorithm is an allgather's: blocks of other sizes and places go by tca's rings.
        None => ring_3d::run(c, buf, counts, displs).await,
    }
}
