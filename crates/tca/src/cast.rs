//! Integer conversions that the types cannot prove but the library's invariants can.
//!
//! The crate denies itself the silent `as` casts that truncate, wrap or drop a sign (clippy's
//! `cast_possible_truncation`, `cast_sign_loss`, `cast_possible_wrap`, in its `Cargo.toml`).
//! A conversion is lossless (`From`), checked where its input can be out of range
//! (`try_from`, with an error or a saturating value that fails the bounds check it meets
//! next), or one of the functions here, each named for the reason it cannot lose bits and
//! checked in debug builds. A cast that is right for a reason of its own says so where it is.

use std::time::Duration;

/// A rank, a rank count or a member index (below a communicator's size) as the `u32` ranks
/// are. It fits: every size is a `u32` ([`crate::fabric::World::size`]), and communicators and
/// endpoints hold their members' ranks as indices into vectors of that many entries.
#[inline]
#[allow(clippy::cast_possible_truncation)] // below a u32 size (see above; debug-checked)
pub(crate) fn rank_u32(i: usize) -> u32 {
    debug_assert!(u32::try_from(i).is_ok(), "rank or rank count {i} past u32");
    i as u32
}

/// The low half of a word that packs two 32-bit values (or whose low half is what a kernel
/// ABI compares, as the futex's): dropping the high half is the point.
#[inline]
#[allow(clippy::cast_possible_truncation)] // the high half is not wanted (see above)
pub(crate) fn low_u32(v: u64) -> u32 {
    v as u32
}

/// A 64-bit length, offset or index from outside this process's types (a peer's message or
/// handle, a completion the network returns) as a `usize`: the value, or `usize::MAX` where
/// it does not fit (32-bit targets only), which then fails the bounds check or lookup every
/// such value meets before it is used. Free on 64-bit targets.
#[inline]
pub(crate) fn usize_sat(x: u64) -> usize {
    usize::try_from(x).unwrap_or(usize::MAX)
}

/// A timeout as a `timespec` for the kernel (futex, poll): whole seconds saturate at
/// `i64::MAX`, about 292 billion years, so a huge timeout stays huge instead of wrapping
/// negative.
#[inline]
pub(crate) fn timespec(d: Duration) -> rustix::time::Timespec {
    rustix::time::Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_keep_or_saturate() {
        assert_eq!(rank_u32(7), 7);
        assert_eq!(low_u32(0x1_0000_0002), 2);
        assert_eq!(usize_sat(1 << 20), 1 << 20);
        if usize::BITS == 64 {
            assert_eq!(usize_sat(u64::MAX), usize::MAX);
        }
        let t = timespec(Duration::new(3, 5));
        assert_eq!((t.tv_sec, t.tv_nsec), (3, 5));
        assert_eq!(timespec(Duration::MAX).tv_sec, i64::MAX);
    }
}
