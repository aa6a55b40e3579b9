//! Segment memory on this node: a sealed memfd whose first page is a header that peers check
//! when they attach.
//!
//! ```text
//! 0    magic "TCASEG01", layout version, owner rank, job id, segment id, length, key
//! 64   state word (u64): 1 live, 2 freed         writer: owner (Release), readers: anyone
//! 4096 data (the `len` bytes a handle describes), page-aligned
//! ```
//!
//! The header is written once, before the handle exists, so a peer that holds a handle sees a
//! complete header. The state word is what makes a handle *stale* after `drop(segment)`: a peer
//! that still has the segment mapped sees `freed` on its next put and gets an error instead of
//! writing into memory no one reads. Every segment is such a region, whatever transport carries
//! the writes of remote peers: a network transport registers the same memory with its NIC.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytemuck::{Pod, Zeroable};

use super::{HEADER_BYTES, Mapping, memfd, page_round};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::Handle;

const MAGIC: u64 = u64::from_le_bytes(*b"TCASEG01");
const VERSION: u32 = 1;
const STATE: usize = 64;
const LIVE: u64 = 1;
const FREED: u64 = 2;

/// The segments created by this process, by (job, owner, segment id): a rank attaching a
/// segment of a rank that is a thread of the same process shares its mapping instead of
/// mapping the file again (thread mode and the simulator run hundreds of ranks in one
/// process, and every rank attaches every peer's control segment: N^2 mappings would pass
/// the kernel's limit of 65,530 per process at about 256 ranks). The entry goes when the
/// owner's region does; attaching still checks the header against the handle as for any
/// peer.
static IN_PROCESS: Mutex<BTreeMap<(u64, u32, u32), Weak<Mapping>>> = Mutex::new(BTreeMap::new());

fn in_process() -> std::sync::MutexGuard<'static, BTreeMap<(u64, u32, u32), Weak<Mapping>>> {
    // Every update of the map completes before anything can panic: a poisoned lock is fine.
    IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Segments freed in this process so far: a transport that keeps per-segment state (network
/// registrations) looks at it with one load to learn that it has something to clean up.
pub(crate) static FREED_SEGMENTS: AtomicU64 = AtomicU64::new(0);

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct Header {
    magic: u64,
    version: u32,
    owner: u32,
    job: u64,
    segment: u32,
    _pad: u32,
    len: u64,
    key: u64,
}

/// A mapped segment, local or a peer's: the mapping, its checked header and (for local
/// segments) the descriptor that keeps the segment id reserved.
#[derive(Debug)]
pub(crate) struct Region {
    /// Shared by every rank of this process that has the segment attached (thread mode):
    /// one mapping per segment in the process, not one per rank and peer.
    pub(crate) map: Arc<Mapping>,
    pub(crate) handle: Handle,
    _fd: Option<OwnedFd>,
}

impl Region {
    /// Creates a local segment of `len` data bytes owned by `rank`.
    pub(crate) fn create(rank: u32, job: u64, len: usize, what: &str) -> Result<Self> {
        let bytes = page_round(len)
            .and_then(|l| l.checked_add(HEADER_BYTES))
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("segment of {len} bytes is too large"),
                )
            })?;
        let fd = memfd::create(&format!("{what}-{job:016x}-r{rank}"), bytes)?;
        let segment = u32::try_from(std::os::fd::AsRawFd::as_raw_fd(&fd))
            .map_err(|_| Error::new(ErrorKind::Transport, "negative descriptor"))?;
        let map = Mapping::map(&fd, bytes)?;
        let key = crate::rand::random_u64() | 1;
        let h = Header {
            magic: MAGIC,
            version: VERSION,
            owner: rank,
            job,
            segment,
            _pad: 0,
            len: len as u64,
            key,
        };
        // Cannot fail: the header is 48 bytes of a mapping of at least one page.
        map.write(0, bytemuck::bytes_of(&h))?;
        state_word(&map).store(LIVE, Ordering::Release);
        let handle = Handle::new(job, key, len, rank, segment);
        let map = Arc::new(map);
        in_process().insert((job, rank, segment), Arc::downgrade(&map));
        Ok(Self {
            map,
            handle,
            _fd: Some(fd),
        })
    }

    /// Attaches a peer's segment named by `h`, owned by process `pid`, checking everything.
    /// A segment its owner has freed is refused naming the owner ([`freed`]); every other
    /// refusal names nobody (the handle is at fault, or cannot be told from one that is).
    pub(crate) fn attach(h: &Handle, pid: u32) -> Result<Self> {
        let shared = (pid == std::process::id())
            .then(|| {
                in_process()
                    .get(&(h.job(), h.rank(), h.segment()))?
                    .upgrade()
            })
            .flatten();
        let map = match shared {
            Some(m) => {
                need_fits(h, m.len())?;
                m
            }
            None => {
                let fd = memfd::open_peer(pid, h.segment())?;
                let file = memfd::file_len(&fd)?;
                need_fits(h, file)?;
                Arc::new(Mapping::map(&fd, file)?)
            }
        };
        let mut hd = Header::zeroed();
        // Cannot fail: the file, mapped whole, holds at least the header page (checked above).
        map.read(0, bytemuck::bytes_of_mut(&mut hd))?;
        if hd.magic != MAGIC {
            return Err(stale(h, "the segment has no tca header".into()));
        }
        if hd.version != VERSION {
            return Err(stale(
                h,
                format!(
                    "layout version {} is not {VERSION} (mixed tca versions?)",
                    hd.version
                ),
            ));
        }
        if hd.job != h.job() {
            return Err(stale(
                h,
                format!(
                    "it belongs to job {:016x}, the segment to job {:016x}",
                    h.job(),
                    hd.job
                ),
            ));
        }
        if hd.owner != h.rank()
            || hd.segment != h.segment()
            || hd.len != h.len() as u64
            || hd.key != h.key()
        {
            return Err(stale(
                h,
                "its key, length or id does not match the segment (stale or forged handle)".into(),
            ));
        }
        if state_word(&map).load(Ordering::Acquire) != LIVE {
            return Err(freed(h));
        }
        Ok(Self {
            map,
            handle: *h,
            _fd: None,
        })
    }

    /// The descriptor this process holds the segment by, for a local one.
    pub(crate) fn descriptor(&self) -> Option<u32> {
        self._fd
            .as_ref()
            .and_then(|f| u32::try_from(std::os::fd::AsRawFd::as_raw_fd(f)).ok())
    }

    /// Where the data area starts in this process and how long it is: what a network
    /// transport registers with its NIC. (Making the pointer is safe; using it is not.)
    pub(crate) fn data_ptr(&self) -> (*mut u8, usize) {
        (
            self.map.as_ptr().wrapping_add(HEADER_BYTES),
            self.handle.len(),
        )
    }

    /// Whether the owner has not freed the segment.
    #[inline]
    pub(crate) fn is_live(&self) -> bool {
        state_word(&self.map).load(Ordering::Acquire) == LIVE
    }

    pub(crate) fn mark_freed(&self) {
        state_word(&self.map).store(FREED, Ordering::Release);
        FREED_SEGMENTS.fetch_add(1, Ordering::Release);
    }

    /// Checks that `off..off+n` lies in the data area; returns the mapping offset.
    ///
    /// The mapping covers the header page and the page-rounded data area (`create` maps that
    /// much; `attach` maps the whole file, checked to be at least that long), so a range this
    /// returns fits it and a [`Mapping`] copy there cannot fail. Callers still pass the copy's
    /// `Result` on with `?`: a broken invariant is then an error, never a lost write.
    #[inline]
    pub(crate) fn range(&self, off: usize, n: usize) -> Result<usize> {
        match off.checked_add(n) {
            Some(end) if end <= self.handle.len() => Ok(HEADER_BYTES + off),
            _ => Err(out_of_bounds(&self.handle, off, n)),
        }
    }

    /// The 8-aligned signal word at data offset `off`.
    #[inline]
    pub(crate) fn word(&self, off: usize) -> Result<&AtomicU64> {
        let at = self.range(off, 8)?;
        self.map.atomic_u64(at).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("signal offset {off} is not a multiple of 8"),
            )
        })
    }
}

/// Refuses `h` if it claims more bytes than a segment file of `file` bytes holds.
fn need_fits(h: &Handle, file: usize) -> Result<()> {
    let need = page_round(h.len()).and_then(|l| l.checked_add(HEADER_BYTES));
    if need.is_none_or(|n| n > file) {
        return Err(stale(
            h,
            format!(
                "it claims {} bytes but the segment holds {}",
                h.len(),
                file.saturating_sub(HEADER_BYTES)
            ),
        ));
    }
    Ok(())
}

impl Drop for Region {
    fn drop(&mut self) {
        if self._fd.is_some() {
            // The owner's region: its id may name another segment from now on.
            let mut m = in_process();
            let k = (self.handle.job(), self.handle.rank(), self.handle.segment());
            if m.get(&k)
                .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&self.map)))
            {
                m.remove(&k);
            }
        }
    }
}

/// Attach against arbitrary segment files: a peer's memory is untrusted input, so the fuzz
/// targets (`tca::transport::fuzz_attach`) feed `data` here: a handle's job, key, length and
/// rank (8 + 8 + 4 + 4 bytes, the length below 16 MiB), the file's data length (4 bytes, below
/// 16 MiB), then the first bytes of the file (its header page). The header's segment-id field
/// is XORed with the file's real descriptor number (which the handle names), so 0 there means
/// "matches" and the check stays reachable. Attaching must refuse whatever does not match the
/// handle; a segment it accepts must match it field by field and take a write at its last
/// byte. Returns whether it attached.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_attach(data: &[u8]) -> bool {
    let Some((fixed, contents)) = data.split_first_chunk::<28>() else {
        return false;
    };
    let u64_at = |i: usize| u64::from_le_bytes(fixed[i..i + 8].try_into().expect("8 bytes"));
    let u32_at = |i: usize| u32::from_le_bytes(fixed[i..i + 4].try_into().expect("4 bytes"));
    let (job, key, rank) = (u64_at(0), u64_at(8), u32_at(20));
    let len = usize::try_from(u32_at(16) & 0xff_ffff).expect("24 bits");
    let file_len = usize::try_from(u32_at(24) & 0xff_ffff).expect("24 bits");
    let size = page_round(file_len).expect("small") + HEADER_BYTES;
    let Ok(fd) = memfd::create("tca-fuzz", size) else {
        return false;
    };
    let segment = u32::try_from(std::os::fd::AsRawFd::as_raw_fd(&fd)).expect("a descriptor");
    let mut page = contents[..contents.len().min(HEADER_BYTES)].to_vec();
    if let Some(id) = page.get_mut(24..28) {
        let v = u32::from_le_bytes(id.try_into().expect("4 bytes")) ^ segment;
        id.copy_from_slice(&v.to_le_bytes());
    }
    {
        let Ok(map) = Mapping::map(&fd, size) else {
            return false;
        };
        map.write(0, &page).expect("the header page fits the file");
    }
    let h = Handle::new(job, key, len, rank, segment);
    let pid = rustix::process::getpid()
        .as_raw_nonzero()
        .get()
        .unsigned_abs();
    match Region::attach(&h, pid) {
        Ok(r) => {
            let mut hd = Header::zeroed();
            r.map
                .read(0, bytemuck::bytes_of_mut(&mut hd))
                .expect("header");
            assert_eq!(
                (
                    hd.magic, hd.version, hd.owner, hd.job, hd.segment, hd.len, hd.key
                ),
                (MAGIC, VERSION, rank, job, segment, len as u64, key),
                "attach accepted a header that does not match its handle"
            );
            assert!(r.is_live());
            if len > 0 {
                let at = r.range(len - 1, 1).expect("the last byte is in range");
                r.map.write(at, &[0xab]).expect("the last byte is mapped");
            }
            assert!(r.range(len, 1).is_err());
            true
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidHandle, "{e}");
            false
        }
    }
}

#[inline]
fn state_word(map: &Mapping) -> &AtomicU64 {
    map.atomic_u64(STATE)
        .expect("state word lies in the header page (layout constant)")
}

fn stale(h: &Handle, why: String) -> Error {
    Error::new(
        ErrorKind::InvalidHandle,
        format!(
            "handle to segment {} of rank {} refused: {why}",
            h.segment(),
            h.rank()
        ),
    )
}

/// The refusal of a handle whose segment its owner has freed: names the owner.
pub(crate) fn freed(h: &Handle) -> Error {
    let e = stale(h, "the segment has been freed".into());
    Error::peer(e.kind(), h.rank(), e.message())
}

pub(crate) fn out_of_bounds(h: &Handle, off: usize, n: usize) -> Error {
    Error::new(
        ErrorKind::OutOfBounds,
        format!(
            "access of {n} bytes at offset {off} is outside segment {} of rank {} ({} bytes); nothing was written",
            h.segment(),
            h.rank(),
            h.len()
        ),
    )
}
