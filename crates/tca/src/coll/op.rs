//! Element types and reduction operations.

use std::sync::Arc;

use bytemuck::Pod;

use crate::error::{Error, ErrorKind, Result};

mod sealed {
    pub trait Sealed {}
}

/// A plain-old-data element type the collectives can reduce: the primitive integers and
/// floats of 1, 2, 4 and 8 bytes. Sealed, because the channels cut messages at multiples of
/// 64 bytes and stage them in 8-aligned buffers, which only such sizes divide.
pub trait Element: sealed::Sealed + Pod + PartialOrd + Send + Sync + 'static {
    /// Name for messages.
    const NAME: &'static str;
    /// The code two-sided messages carry for this type (1..=10; 0 is raw bytes).
    #[doc(hidden)]
    const CODE: u8;
    /// a + b (wrapping for integers).
    fn add(a: Self, b: Self) -> Self;
    /// a * b (wrapping for integers).
    fn mul(a: Self, b: Self) -> Self;
    /// Bitwise and/or/xor, `None` for floating point.
    fn bits(a: Self, b: Self, op: BitOp) -> Option<Self>;
}

/// Bitwise operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitOp {
    /// a & b
    And,
    /// a | b
    Or,
    /// a ^ b
    Xor,
}

macro_rules! int_element {
    ($($t:ty = $code:literal),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = stringify!($t);
            const CODE: u8 = $code;
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            fn bits(a: Self, b: Self, op: BitOp) -> Option<Self> {
                Some(match op { BitOp::And => a & b, BitOp::Or => a | b, BitOp::Xor => a ^ b })
            }
        }
    )*};
}
int_element!(
    u8 = 1,
    i8 = 2,
    u16 = 3,
    i16 = 4,
    u32 = 5,
    i32 = 6,
    u64 = 7,
    i64 = 8
);

macro_rules! float_element {
    ($($t:ty = $code:literal),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = stringify!($t);
            const CODE: u8 = $code;
            fn add(a: Self, b: Self) -> Self { a + b }
            fn mul(a: Self, b: Self) -> Self { a * b }
            fn bits(_: Self, _: Self, _: BitOp) -> Option<Self> { None }
        }
    )*};
}
float_element!(f32 = 9, f64 = 10);

/// A reduction operation. Every operation must be associative and commutative (the
/// algorithms combine contributions in whatever order their schedule gives; for floating
/// point, results can differ in the last bits between algorithms, as in MPI).
#[derive(Clone)]
pub enum Op<T> {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Bitwise and (integers only).
    BitAnd,
    /// Bitwise or (integers only).
    BitOr,
    /// Bitwise xor (integers only).
    BitXor,
    /// A user function, associative and commutative. If it panics, the collective returns an
    /// error on this rank and aborts the job (peers get an error naming this rank).
    Custom(Arc<dyn Fn(T, T) -> T + Send + Sync>),
}

impl<T> std::fmt::Debug for Op<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Sum => "Sum",
            Self::Prod => "Prod",
            Self::Min => "Min",
            Self::Max => "Max",
            Self::BitAnd => "BitAnd",
            Self::BitOr => "BitOr",
            Self::BitXor => "BitXor",
            Self::Custom(_) => "Custom",
        })
    }
}

impl<T: Element> Op<T> {
    /// A user-supplied associative and commutative function.
    pub fn custom(f: impl Fn(T, T) -> T + Send + Sync + 'static) -> Self {
        Self::Custom(Arc::new(f))
    }

    /// Checks the op applies to `T` (bitwise ops need integers).
    pub(crate) fn check(&self) -> Result<()> {
        let bit = match self {
            Self::BitAnd => Some(BitOp::And),
            Self::BitOr => Some(BitOp::Or),
            Self::BitXor => Some(BitOp::Xor),
            _ => None,
        };
        if let Some(b) = bit {
            let z = T::zeroed();
            if T::bits(z, z, b).is_none() {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("{self:?} is not defined for {}", T::NAME),
                ));
            }
        }
        Ok(())
    }

    /// acc[i] = acc[i] op inc[i].
    pub(crate) fn combine(&self, acc: &mut [T], inc: &[T]) -> Result<()> {
        macro_rules! each {
            ($f:expr) => {{
                for (a, &b) in acc.iter_mut().zip(inc) {
                    *a = $f(*a, b);
                }
            }};
        }
        match self {
            Self::Sum => each!(T::add),
            Self::Prod => each!(T::mul),
            Self::Min => each!(|a: T, b: T| pick(a, b, std::cmp::Ordering::Less)),
            Self::Max => each!(|a: T, b: T| pick(a, b, std::cmp::Ordering::Greater)),
            Self::BitAnd => each!(|a, b| T::bits(a, b, BitOp::And).unwrap_or(a)),
            Self::BitOr => each!(|a, b| T::bits(a, b, BitOp::Or).unwrap_or(a)),
            Self::BitXor => each!(|a, b| T::bits(a, b, BitOp::Xor).unwrap_or(a)),
            Self::Custom(f) => {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    each!(|a, b| f(a, b))
                }));
                if r.is_err() {
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        "the user's reduction function panicked",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The smaller (`want` = Less) or larger of `a` and `b`, symmetric in its arguments even for
/// values that compare equal or unordered (+0 and -0, NaN): those are ordered by their bit
/// patterns, so `pick(a, b) == pick(b, a)` bit for bit and every rank of an allreduce that
/// combines the same pair in either order gets the same result.
fn pick<T: Element>(a: T, b: T, want: std::cmp::Ordering) -> T {
    let ord = match a.partial_cmp(&b) {
        Some(std::cmp::Ordering::Equal) | None => {
            bytemuck::bytes_of(&a).cmp(bytemuck::bytes_of(&b))
        }
        Some(o) => o,
    };
    if ord == want { a } else { b }
}

/// `acc = acc op inc` over byte buffers of whole elements.
pub(crate) type ByteOp<'a> = dyn Fn(&mut [u8], &[u8]) -> Result<()> + 'a;

/// A type-erased reduction over byte buffers, what the algorithms see.
pub struct Reducer<'a> {
    /// Element size in bytes.
    pub elem: usize,
    f: &'a ByteOp<'a>,
}

impl std::fmt::Debug for Reducer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reducer({} bytes)", self.elem)
    }
}

impl<'a> Reducer<'a> {
    pub(crate) fn new(elem: usize, f: &'a ByteOp<'a>) -> Self {
        Self { elem, f }
    }

    /// acc = acc op inc, both whole elements.
    pub(crate) fn apply(&self, acc: &mut [u8], inc: &[u8]) -> Result<()> {
        (self.f)(acc, inc)
    }
}

/// The byte-level combine function for `op` on `T`.
pub(crate) fn byte_combiner<T: Element>(
    op: &Op<T>,
) -> impl Fn(&mut [u8], &[u8]) -> Result<()> + '_ {
    move |acc: &mut [u8], inc: &[u8]| {
        if acc.is_empty() {
            return Ok(());
        }
        let a: &mut [T] = bytemuck::try_cast_slice_mut(acc).map_err(misaligned)?;
        let b: &[T] = bytemuck::try_cast_slice(inc).map_err(misaligned)?;
        op.combine(a, b)
    }
}

fn misaligned(e: bytemuck::PodCastError) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("reduction buffer is not whole, aligned elements: {e:?}"),
    )
}
