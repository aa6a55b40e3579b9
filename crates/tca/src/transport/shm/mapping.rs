//! The one module of the transport that touches raw pointers.
//!
//! A [`Mapping`] is a `MAP_SHARED` read-write mapping of a whole memfd. Its memory is *not* a
//! Rust object: other processes (or threads of this one) write into it concurrently, as the
//! fabric's protocol allows. So nothing here hands out `&`/`&mut` to plain bytes except the
//! typed views whose callers take responsibility; copies go through raw pointers, and words
//! that are shared on purpose are accessed only as atomics.
//!
//! Every accessor checks its range against the mapping length: the copies fail with
//! [`ErrorKind::OutOfBounds`] and the atomics and views return `None` when it does not fit, so
//! no call here can write outside the mapping whatever its arguments, and no caller can miss
//! that a copy did not happen. Memfds are sealed against shrinking before they are
//! mapped (see [`super::memfd`]), so a mapped page can never disappear under us (no SIGBUS).
#![allow(unsafe_code)]

use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use rustix::mm::{MapFlags, ProtFlags};

use crate::error::{Error, ErrorKind, Result};

/// A shared read-write mapping of a memfd.
#[derive(Debug)]
pub struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; all access goes through raw-pointer copies and
// atomics whose concurrent use is defined by the protocol (the same memory is shared with other
// processes anyway). Moving or sharing the owner of the pointer between threads is fine.
unsafe impl Send for Mapping {}
// SAFETY: see `Send`; `&Mapping` only offers copies and atomics.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of the memfd `fd` shared and read-write.
    ///
    /// Refused unless the file is at least `len` bytes long and sealed against shrinking:
    /// otherwise whoever holds a descriptor could truncate it and turn our next access into
    /// `SIGBUS`. Every memory object tca maps is a sealed memfd ([`super::memfd::create`]).
    pub fn map(fd: impl AsFd, len: usize) -> Result<Self> {
        Self::map_from(fd, 0, len)
    }

    /// Maps `len` bytes of the memfd `fd` from byte `off` (a multiple of the page size),
    /// shared and read-write, checked as [`Mapping::map`] checks: the part of a segment past
    /// its header (a node proxy's rank maps its arenas' data so).
    pub fn map_from(fd: impl AsFd, off: usize, len: usize) -> Result<Self> {
        let end = off.checked_add(len).ok_or_else(|| {
            Error::new(
                ErrorKind::Transport,
                format!("{len} bytes at {off} overflow"),
            )
        })?;
        if len == 0 {
            return Err(Error::new(
                ErrorKind::Transport,
                "cannot map an empty segment",
            ));
        }
        let seals = rustix::fs::fcntl_get_seals(&fd).map_err(|e| {
            Error::os(
                ErrorKind::Transport,
                "reading the seals of a shared memory object",
                e,
            )
        })?;
        if !seals.contains(rustix::fs::SealFlags::SHRINK) {
            return Err(Error::new(
                ErrorKind::Transport,
                "shared memory object is not sealed against shrinking",
            ));
        }
        let size = super::memfd::file_len(&fd)?;
        if size < end {
            return Err(Error::new(
                ErrorKind::Transport,
                if off == 0 {
                    format!("cannot map {len} bytes of a {size}-byte shared memory object")
                } else {
                    format!("cannot map {len} bytes at {off} of a {size}-byte shared memory object")
                },
            ));
        }
        // SAFETY: a fresh mapping at an address the kernel chooses (null hint) cannot alias any
        // existing Rust object. The fd stays valid for the duration of the call; the kernel
        // refuses an `off` that is not page-aligned.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                off as u64,
            )
        }
        .map_err(|e| {
            let why = if off == 0 {
                format!("mmap of {len} bytes")
            } else {
                // The one way a valid descriptor fails here that its caller can mend.
                format!("mmap of {len} bytes at {off} (a multiple of the page size?)")
            };
            Error::os(ErrorKind::Transport, why, e)
        })?;
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| Error::new(ErrorKind::Transport, "mmap returned null"))?;
        Ok(Self { base, len })
    }

    /// The mapping's first byte as a raw pointer, for registering the memory with a network
    /// interface (which then writes into it as a peer process would). Making the pointer is
    /// safe; whoever dereferences it answers for the bounds.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Address of the mapping's first byte, for diagnostics and identity comparisons only.
    pub fn addr(&self) -> usize {
        self.base.as_ptr() as usize
    }

    fn fits(&self, off: usize, n: usize) -> bool {
        off.checked_add(n).is_some_and(|end| end <= self.len)
    }

    /// `Ok` if `off..off + n` lies in the mapping, else the error that says so.
    #[inline]
    fn check(&self, what: &'static str, off: usize, n: usize) -> Result<()> {
        if self.fits(off, n) {
            Ok(())
        } else {
            Err(self.outside(what, off, n))
        }
    }

    /// The error of an access that does not fit (out of line: the hot paths only test).
    #[cold]
    #[inline(never)]
    fn outside(&self, what: &str, off: usize, n: usize) -> Error {
        Error::new(
            ErrorKind::OutOfBounds,
            format!(
                "{what} of {n} bytes at offset {off} falls outside a {}-byte mapping",
                self.len
            ),
        )
    }

    /// Copies `src` to `off` with one `memcpy`. Fails with [`ErrorKind::OutOfBounds`] (and
    /// writes nothing) if the range does not fit.
    #[inline]
    pub fn write(&self, off: usize, src: &[u8]) -> Result<()> {
        self.check("a write", off, src.len())?;
        // SAFETY: `off + src.len() <= self.len` was checked, so the destination lies inside the
        // live mapping. `src` is a Rust slice and cannot overlap the mapping's bytes in a way
        // that matters for `copy_nonoverlapping`: if a caller passes a slice of this very
        // mapping (a typed view) the ranges may overlap, so use `copy` in that case.
        unsafe {
            let dst = self.base.as_ptr().add(off);
            if ranges_overlap(src.as_ptr() as usize, dst as usize, src.len()) {
                std::ptr::copy(src.as_ptr(), dst, src.len());
            } else {
                std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len());
            }
        }
        Ok(())
    }

    /// Asks the CPU to start taking the cache line that holds byte `off` for writing
    /// (`prefetchw` on x86-64 CPUs that have it), so that a store there soon does not stall
    /// on moving the line from another core. A hint only: it changes no byte, nobody's view
    /// of memory, and does nothing where `off` lies outside the mapping, on CPUs without the
    /// instruction and on other architectures.
    #[inline]
    pub fn prefetch_for_write(&self, off: usize) {
        #[cfg(target_arch = "x86_64")]
        if off < self.len && has_prefetchw() {
            // SAFETY: `off < self.len`, so the address lies inside the live mapping;
            // `prefetchw` is a hint that reads and writes no architectural state (no flags, no
            // registers, no memory contents), cannot fault, and the CPU has it (checked).
            unsafe {
                std::arch::asm!(
                    "prefetchw byte ptr [{0}]",
                    in(reg) self.base.as_ptr().add(off),
                    options(nostack, preserves_flags, readonly),
                );
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = off;
    }

    /// Copies a small `src` to `off` with plain 8-byte stores (no `memcpy` call): the inline
    /// put of the papers' PIO path. Fails with [`ErrorKind::OutOfBounds`] (and writes nothing)
    /// if the range does not fit.
    #[inline]
    pub fn write_inline(&self, off: usize, src: &[u8]) -> Result<()> {
        self.check("a write", off, src.len())?;
        // SAFETY: the whole range `off..off + src.len()` is inside the mapping (checked above);
        // each store below writes a sub-range of it, unaligned stores are used for u64 words.
        unsafe {
            let dst = self.base.as_ptr().add(off);
            let words = src.len() / 8;
            for i in 0..words {
                let w = std::ptr::read_unaligned(src.as_ptr().add(i * 8).cast::<u64>());
                std::ptr::write_unaligned(dst.add(i * 8).cast::<u64>(), w);
            }
            for i in words * 8..src.len() {
                *dst.add(i) = *src.as_ptr().add(i);
            }
        }
        Ok(())
    }

    /// Copies `dst.len()` bytes from `off` into `dst`. Fails with [`ErrorKind::OutOfBounds`]
    /// (and reads nothing) if the range does not fit.
    #[inline]
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        self.check("a read", off, dst.len())?;
        // SAFETY: the source range is inside the mapping (checked); `dst` is an exclusive Rust
        // slice. `copy` tolerates a `dst` that is itself a view of this mapping.
        unsafe {
            std::ptr::copy(self.base.as_ptr().add(off), dst.as_mut_ptr(), dst.len());
        }
        Ok(())
    }

    /// Copies `len` bytes from `from` in `src` to `to` in `self` with one `memcpy`. Fails with
    /// [`ErrorKind::OutOfBounds`] (and copies nothing) if either range does not fit.
    #[inline]
    pub fn copy_from(&self, to: usize, src: &Mapping, from: usize, len: usize) -> Result<()> {
        src.check("a copy's source", from, len)?;
        self.check("a copy's destination", to, len)?;
        // SAFETY: both ranges are inside their live mappings (checked). Two mappings of the
        // same memfd may alias, so use `copy`, which tolerates overlap.
        unsafe {
            std::ptr::copy(src.base.as_ptr().add(from), self.base.as_ptr().add(to), len);
        }
        Ok(())
    }

    /// The 64-bit word at `off` as an atomic, if `off` is 8-aligned and in range.
    #[inline]
    pub fn atomic_u64(&self, off: usize) -> Option<&AtomicU64> {
        if off % 8 != 0 || !self.fits(off, 8) {
            return None;
        }
        // SAFETY: in range and 8-aligned (the mapping base is page-aligned). The memory lives as
        // long as `self`; `AtomicU64` has the same layout as `u64` and all concurrent access to
        // shared words goes through atomics.
        Some(unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU64>() })
    }

    /// The 32-bit word at `off` as an atomic, if `off` is 4-aligned and in range.
    #[inline]
    pub fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        if off % 4 != 0 || !self.fits(off, 4) {
            return None;
        }
        // SAFETY: in range and 4-aligned, lives as long as `self`; same layout as `u32`.
        Some(unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU32>() })
    }

    /// A shared typed view of `count` elements at `off`, if aligned and in range.
    ///
    /// # Safety
    /// Nothing may write these bytes while the slice lives (no peer, no other thread, no other
    /// method of this mapping): a `&[T]` promises immutable memory.
    pub unsafe fn view<T: bytemuck::Pod>(&self, off: usize, count: usize) -> Option<&[T]> {
        let bytes = count.checked_mul(std::mem::size_of::<T>())?;
        if !self.fits(off, bytes) || (self.addr() + off) % std::mem::align_of::<T>() != 0 {
            return None;
        }
        // SAFETY: in range and aligned for `T`; any bit pattern is a valid `T` (Pod); no writer
        // while the slice lives is the caller's obligation.
        Some(unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off).cast::<T>(), count) })
    }

    /// An exclusive typed view of `count` elements at `off`, if aligned and in range.
    ///
    /// # Safety
    /// No other access to these bytes (read or write, through any path, by any thread or
    /// process) may happen while the returned slice lives.
    #[allow(clippy::mut_from_ref)] // exclusivity is the documented obligation of the caller
    pub unsafe fn view_mut<T: bytemuck::Pod>(&self, off: usize, count: usize) -> Option<&mut [T]> {
        let bytes = count.checked_mul(std::mem::size_of::<T>())?;
        if !self.fits(off, bytes) || (self.addr() + off) % std::mem::align_of::<T>() != 0 {
            return None;
        }
        // SAFETY: in range and aligned; exclusivity is the caller's obligation (see above).
        Some(unsafe {
            std::slice::from_raw_parts_mut(self.base.as_ptr().add(off).cast::<T>(), count)
        })
    }
}

/// Whether this CPU has `prefetchw` (CPUID 0x8000_0001, ECX bit 8: AMD since the K6, Intel
/// since Broadwell), asked once per process; `false` on other architectures.
pub fn has_prefetchw() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| {
            // `__cpuid` is an unsafe fn in older Rust releases (the workspace supports 1.85 on).
            #[allow(unused_unsafe)]
            // SAFETY: every x86-64 CPU has CPUID; leaf 0x8000_0001 is read only after leaf
            // 0x8000_0000 says it exists.
            unsafe {
                __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
            }
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The low 32 bits of a 64-bit signal word, as the futex word the kernel sleeps on.
#[inline]
pub fn futex_half(word: &AtomicU64) -> &AtomicU32 {
    const _: () = assert!(
        cfg!(target_endian = "little"),
        "signal words assume little endian"
    );
    // SAFETY: an `AtomicU64` is 8-aligned, so its first 4 bytes are a 4-aligned `AtomicU32`
    // that lives as long as the word; on little-endian targets they hold the low half, which
    // changes on every increment. Mixed-size atomic access to the same word is what the futex
    // ABI requires; the kernel reads it atomically, we only ever load or wait on this half.
    unsafe { &*(word as *const AtomicU64).cast::<AtomicU32>() }
}

fn ranges_overlap(a: usize, b: usize, n: usize) -> bool {
    a < b.wrapping_add(n) && b < a.wrapping_add(n)
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base..base+len` is exactly the range this object mapped, and no reference
        // derived from it can outlive `self` (all accessors borrow `self`).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(len: usize) -> Mapping {
        let fd = super::super::memfd::create("test", len).unwrap();
        Mapping::map(&fd, len).unwrap()
    }

    #[test]
    fn unsealed_or_short_files_are_refused() {
        let fd = rustix::fs::memfd_create("tca-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        assert!(
            Mapping::map(&fd, 4096)
                .unwrap_err()
                .to_string()
                .contains("sealed")
        );
        let fd = super::super::memfd::create("test", 4096).unwrap();
        assert!(
            Mapping::map(&fd, 8192)
                .unwrap_err()
                .to_string()
                .contains("4096-byte")
        );
    }

    #[test]
    fn writes_outside_are_refused() {
        let m = scratch(4096);
        m.write(4090, &[1; 6]).unwrap();
        let e = m.write(4091, &[1; 6]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfBounds);
        assert!(e.to_string().contains("4096-byte"), "{e}");
        assert!(m.write(usize::MAX, &[1]).is_err());
        assert!(m.write_inline(4095, &[1, 2]).is_err());
        assert!(m.read(4095, &mut [0; 2]).is_err());
        assert!(m.copy_from(0, &m, 4095, 2).is_err());
        assert!(m.copy_from(4095, &m, 0, 2).is_err());
        assert!(m.atomic_u64(4088).is_some());
        assert!(m.atomic_u64(4092).is_none());
        assert!(m.atomic_u64(4).is_none());
        // SAFETY: nothing writes this private scratch mapping while the views live.
        unsafe {
            assert!(m.view::<u64>(8, 511).is_some());
            assert!(m.view::<u64>(8, 512).is_none());
            assert!(m.view::<u64>(4, 1).is_none());
        }
    }

    #[test]
    fn inline_and_memcpy_agree() {
        let m = scratch(4096);
        for n in 0..100usize {
            let src: Vec<u8> = (0..n).map(|i| (i * 7 + n).to_le_bytes()[0]).collect();
            m.write_inline(3, &src).unwrap();
            let mut back = vec![0; n];
            m.read(3, &mut back).unwrap();
            assert_eq!(back, src);
        }
    }

    /// The write hint changes no byte, inside the mapping or at its edges, and does nothing
    /// out of range (no fault, no write).
    #[test]
    fn a_prefetch_for_write_changes_nothing() {
        let m = scratch(4096);
        let src: Vec<u8> = (0..4096usize).map(|i| (i * 13).to_le_bytes()[0]).collect();
        m.write(0, &src).unwrap();
        for off in [0, 63, 64, 4095, 4096, 1 << 40, usize::MAX] {
            m.prefetch_for_write(off);
        }
        let mut back = vec![0; 4096];
        m.read(0, &mut back).unwrap();
        assert_eq!(back, src);
    }

    #[test]
    fn futex_half_is_low_word() {
        let m = scratch(4096);
        let w = m.atomic_u64(64).unwrap();
        w.store(0x1_0000_0002, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(futex_half(w).load(std::sync::atomic::Ordering::Relaxed), 2);
    }
}
