//! The job board: one small shared region per job where ranks meet at start-up.
//!
//! Every rank publishes its pid and its control segment there, learns everyone else's, and
//! watches the job-wide abort word. The launcher creates the board as an inherited memfd
//! (no name, cannot leak); without the launcher, ranks meet through a named object in
//! `/dev/shm` that rank 0 creates and unlinks as soon as every rank has published.
//!
//! # Layout (offsets in bytes)
//! ```text
//! 0      header: magic, version, size, job id, launcher pid, creator pid   (written once)
//! 128    abort word (u64): 0, or reason << 32 | (rank + 1)     writers: launcher, any rank
//! 256    published count (u64): ranks that have published        writers: every rank once
//! 384    sleeper count (u32) for waits on the words above
//! 512    one 128-byte entry per rank: state, pid, control segment id and key, an "asleep in
//!        a wait" flag and a count of finished sleeping waits (for deadlock detection), and
//!        the rank it blames for its failure, if any                writer: that rank only
//! ```
//! All shared words are atomics: Release when written, Acquire when read.
//!
//! # Blame
//! A rank that meets a fault of another rank writes that rank into its entry's blame word:
//! at once for the faults that end a rank (the other's death or failure, its silence past
//! `TCA_TIMEOUT`), and for a write refused because the other freed the segment or left the
//! job, when that error goes up from the write. So when it fails in turn, whoever aborts the
//! job on its account — the launcher seeing it exit, a peer seeing it failed, a rank that
//! gives up on it — follows the blame from rank to rank ([`Board::abort_at_root`]) and names
//! the first cause: every rank's error names the rank at the root of the trouble, not the last
//! rank to fall. The first record stands; a rank that survived such an error and later fails
//! for a reason of its own is still named through it (the board keeps no error, only whom
//! it blames).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use bytemuck::{Pod, Zeroable};

use super::{Mapping, PAD, memfd, page_round};
use crate::cast::low_u32;
use crate::error::{Error, ErrorKind, Result};

const MAGIC: u64 = u64::from_le_bytes(*b"TCABOARD");
const VERSION: u32 = 1;
const ABORT: usize = 128;
const PUBLISHED: usize = 256;
const SLEEPERS: usize = 384;
const ENTRIES: usize = 512;

/// A rank's state on the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum RankState {
    /// Not yet published.
    Empty = 0,
    /// Published and running.
    Ready = 1,
    /// Left the job cleanly (its `World` was dropped or finalized).
    Done = 2,
    /// Failed: panicked, or returned an error in thread mode.
    Failed = 3,
}

/// Why a job was aborted (the high half of the abort word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum AbortReason {
    /// A rank saw this peer die.
    PeerDied = 1,
    /// The launcher saw this rank exit with an error or a signal.
    RankFailed = 2,
    /// The launcher was interrupted (SIGINT / SIGTERM).
    Interrupted = 3,
    /// A rank saw the launcher die (the rank named is the one that saw it first).
    LauncherDied = 4,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct Header {
    magic: u64,
    version: u32,
    size: u32,
    job: u64,
    launcher_pid: u32,
    creator_pid: u32,
}

/// What a rank published about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Process id.
    pub pid: u32,
    /// Segment id (descriptor number) of the rank's control segment.
    pub ctrl_segment: u32,
    /// Key of the control segment.
    pub ctrl_key: u64,
}

/// A mapped job board.
#[derive(Debug)]
pub struct Board {
    map: Mapping,
    job: u64,
    /// Ranks in the job (the header's count, checked at open).
    size: u32,
    launcher_pid: Option<u32>,
}

impl Board {
    /// Bytes a board for `size` ranks occupies.
    pub fn bytes_for(size: u32) -> usize {
        page_round(ENTRIES + PAD * size as usize).unwrap_or(usize::MAX)
    }

    /// Creates a board in a fresh sealed memfd. Other processes open it through
    /// `/proc/<creator pid>/fd/<fd>`, so it never needs a name.
    pub fn create(size: u32, job: u64, launcher_pid: Option<u32>) -> Result<(OwnedFd, Self)> {
        let bytes = Self::bytes_for(size);
        let fd = memfd::create(&format!("board-{job:016x}"), bytes)?;
        let board = Self::init(&fd, bytes, size, job, launcher_pid)?;
        Ok((fd, board))
    }

    fn init(
        fd: impl AsFd,
        bytes: usize,
        size: u32,
        job: u64,
        launcher_pid: Option<u32>,
    ) -> Result<Self> {
        let map = Mapping::map(fd, bytes)?;
        let h = Header {
            magic: 0,
            version: VERSION,
            size,
            job,
            launcher_pid: launcher_pid.unwrap_or(0),
            creator_pid: std::process::id(),
        };
        // Cannot fail: the header is the start of a mapping of at least one page
        // (`bytes_for` rounds up to pages).
        map.write(0, bytemuck::bytes_of(&h))?;
        // The magic goes last, with Release, so a reader that sees it sees the whole header.
        word(&map, 0).store(MAGIC, Ordering::Release);
        Ok(Self {
            map,
            job,
            size,
            launcher_pid,
        })
    }

    /// Maps an existing board from a descriptor and checks it is one for `size` ranks.
    pub fn open(fd: impl AsFd, size: u32) -> Result<Self> {
        let len = memfd::file_len(&fd)?;
        if len < Self::bytes_for(size) {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!("job board is {len} bytes, too small for {size} ranks"),
            ));
        }
        let map = Mapping::map(&fd, len)?;
        Self::validate(map, size)
    }

    fn validate(map: Mapping, size: u32) -> Result<Self> {
        if word(&map, 0).load(Ordering::Acquire) != MAGIC {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                "job board has no valid header (not a tca board)",
            ));
        }
        let mut h = Header::zeroed();
        // Cannot fail: the mapping holds at least `bytes_for(size)`, whole pages (checked by
        // `open`).
        map.read(0, bytemuck::bytes_of_mut(&mut h))?;
        if h.version != VERSION {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "job board layout version {} is not {VERSION}: mixed tca versions?",
                    h.version
                ),
            ));
        }
        if h.size != size {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "job board is for {} ranks but this rank was told the job has {size}",
                    h.size
                ),
            ));
        }
        let launcher_pid = (h.launcher_pid != 0).then_some(h.launcher_pid);
        Ok(Self {
            map,
            job: h.job,
            size,
            launcher_pid,
        })
    }

    /// Meets the other ranks without the launcher. Rank 0 creates the board (a memfd) and
    /// publishes where to find it, `tca-board <pid> <fd> <job> <size>`, in a small file in
    /// `/dev/shm` (written under a temporary name, then renamed, so readers never see half of
    /// it). The others read the file, open the board through `/proc`, and check it. Rank 0
    /// removes the file once every rank has joined ([`World::join`](crate::World)); the file
    /// is never mapped, so it cannot be truncated under anyone.
    pub fn open_named(
        name: &str,
        rank: u32,
        size: u32,
        job: u64,
        deadline: std::time::Instant,
    ) -> Result<(OwnedFd, Self)> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = std::path::Path::new("/dev/shm").join(name);
        let me = std::process::id();
        if rank == 0 {
            // A leftover of an earlier job with the same id (it crashed before the unlink) is
            // replaced, never reused.
            let _ = std::fs::remove_file(&path);
            let (fd, board) = Self::create(size, job, None)?;
            let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
            let tmp = path.with_file_name(format!("{name}.tmp{me}"));
            let publish = || -> std::io::Result<()> {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&tmp)?;
                writeln!(f, "tca-board {me} {raw} {job:016x} {size}")?;
                std::fs::rename(&tmp, &path)
            };
            publish().map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                Error::os(
                    ErrorKind::Bootstrap,
                    format!("publishing {}", path.display()),
                    e,
                )
            })?;
            return Ok((fd, board));
        }
        loop {
            if let Some((pid, fd)) = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| parse_rendezvous(&t, job, size))
            {
                // A leftover whose creator is gone fails here; keep waiting for the new one.
                // Out of descriptors, though, waiting cannot help: say so now.
                match memfd::open_peer(pid, fd) {
                    Ok(bfd) => {
                        if let Ok(b) = Self::open(&bfd, size) {
                            if b.job == job {
                                return Ok((bfd, b));
                            }
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Transport => return Err(e),
                    Err(_) => {}
                }
            }
            if std::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Bootstrap,
                    format!(
                        "rank {rank}: rank 0 did not publish the job board {} in time ({})",
                        path.display(),
                        crate::env::BOOT_TIMEOUT
                    ),
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// The job id.
    pub fn job(&self) -> u64 {
        self.job
    }

    /// Pid of the launcher, if the job was started by `tca run`.
    pub fn launcher_pid(&self) -> Option<u32> {
        self.launcher_pid
    }

    fn entry_word(&self, rank: u32, off: usize) -> &AtomicU64 {
        word(&self.map, ENTRIES + PAD * rank as usize + off)
    }

    fn state_word(&self, rank: u32) -> &AtomicU32 {
        self.map
            .atomic_u32(ENTRIES + PAD * rank as usize)
            .expect("board entry lies inside the board (checked at open)")
    }

    /// Publishes this rank's entry and counts it.
    pub fn publish(&self, rank: u32, e: Entry) {
        self.entry_word(rank, 8).store(
            u64::from(e.pid) | (u64::from(e.ctrl_segment) << 32),
            Ordering::Relaxed,
        );
        self.entry_word(rank, 16)
            .store(e.ctrl_key, Ordering::Relaxed);
        self.state_word(rank)
            .store(RankState::Ready as u32, Ordering::Release);
        self.published().fetch_add(1, Ordering::SeqCst);
        super::wait::notify(self.published(), self.sleepers());
    }

    /// A rank's published entry, if it has published.
    pub fn entry(&self, rank: u32) -> Option<Entry> {
        if self.state(rank) == RankState::Empty {
            return None;
        }
        let a = self.entry_word(rank, 8).load(Ordering::Relaxed);
        Some(Entry {
            pid: low_u32(a),
            ctrl_segment: (a >> 32) as u32,
            ctrl_key: self.entry_word(rank, 16).load(Ordering::Relaxed),
        })
    }

    /// A rank's state.
    pub fn state(&self, rank: u32) -> RankState {
        match self.state_word(rank).load(Ordering::Acquire) {
            0 => RankState::Empty,
            1 => RankState::Ready,
            2 => RankState::Done,
            _ => RankState::Failed,
        }
    }

    /// Marks whether `rank` is asleep in a wait; clearing it counts one finished sleep.
    pub fn set_asleep(&self, rank: u32, asleep: bool) {
        self.entry_word(rank, 24)
            .store(u64::from(asleep), Ordering::SeqCst);
        if !asleep {
            self.entry_word(rank, 32).fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Whether `rank` is asleep in a wait, and how many sleeping waits it has finished.
    pub fn sleep_state(&self, rank: u32) -> (bool, u64) {
        (
            self.entry_word(rank, 24).load(Ordering::SeqCst) != 0,
            self.entry_word(rank, 32).load(Ordering::SeqCst),
        )
    }

    /// Records that `rank` fails on account of `culprit`: the first such record stands (the
    /// first fault a rank met is the cause of what followed). Ignored for itself or a rank
    /// outside the job.
    pub fn blame(&self, rank: u32, culprit: u32) {
        if culprit == rank || culprit >= self.size {
            return;
        }
        let _ = self.entry_word(rank, 40).compare_exchange(
            0,
            u64::from(culprit) + 1,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// The rank `rank` blames for its failure, if it recorded one.
    pub fn blamed(&self, rank: u32) -> Option<u32> {
        let v = self.entry_word(rank, 40).load(Ordering::Acquire);
        u32::try_from(v.checked_sub(1)?)
            .ok()
            .filter(|&r| r < self.size)
    }

    /// The first cause of `rank`'s trouble: the blame followed from rank to rank until a rank
    /// that blames nobody. A circle anywhere along the way (two ranks timing out on each
    /// other, or a corrupt board) ends at `rank` itself, after at most the job's size steps.
    pub fn root_of(&self, rank: u32) -> u32 {
        let mut at = rank;
        for _ in 0..self.size {
            match self.blamed(at) {
                Some(next) if next != rank => at = next,
                Some(_) => return rank,
                None => return at,
            }
        }
        rank
    }

    /// Records that `rank` left (cleanly or not). A failure is never overwritten by `Done`.
    pub fn set_state(&self, rank: u32, s: RankState) {
        let w = self.state_word(rank);
        if s == RankState::Failed {
            w.store(s as u32, Ordering::Release);
        } else {
            let _ = w.fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                (cur != RankState::Failed as u32).then_some(s as u32)
            });
        }
    }

    /// The count of ranks that have published.
    pub fn published(&self) -> &AtomicU64 {
        word(&self.map, PUBLISHED)
    }

    /// Sleeper count for waits on board words.
    pub fn sleepers(&self) -> &AtomicU32 {
        self.map
            .atomic_u32(SLEEPERS)
            .expect("sleeper word lies inside the board")
    }

    /// Aborts the job on account of `rank`'s failure or death, naming the first cause of it
    /// ([`Board::root_of`]) (first abort wins). Returns the abort in force. Other reasons
    /// (the launcher's) are about no rank's failure: `rank` is kept.
    pub fn abort_at_root(&self, rank: u32, reason: AbortReason) -> (u32, AbortReason) {
        let failure = matches!(reason, AbortReason::PeerDied | AbortReason::RankFailed);
        let root = if failure && rank < self.size {
            self.root_of(rank)
        } else {
            rank
        };
        self.abort(root, reason)
    }

    /// Aborts the job on account of `rank` itself (first abort wins). Returns the abort in
    /// force.
    pub fn abort(&self, rank: u32, reason: AbortReason) -> (u32, AbortReason) {
        let v = (u64::from(reason as u32) << 32) | u64::from(rank + 1);
        let w = word(&self.map, ABORT);
        match w.compare_exchange(0, v, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => (rank, reason),
            Err(cur) => decode_abort(cur).unwrap_or((rank, reason)),
        }
    }

    /// The abort in force, if any: the rank it is about and why.
    pub fn aborted(&self) -> Option<(u32, AbortReason)> {
        decode_abort(word(&self.map, ABORT).load(Ordering::Acquire))
    }
}

/// The start-up board against arbitrary contents: the fuzz targets
/// (`tca::transport::fuzz_board`) feed `data` here. Its first byte gives the job's size (1 to
/// 64 ranks: what this rank was told), the second the file's length (1 to 4 pages); the rest
/// is the board's contents, and also the `tca-board` line by which ranks started without the
/// launcher find the board. Whatever the board holds, opening it refuses it or gives a board
/// whose every rank's entry, state, sleep record and blame (followed to its root, and an
/// abort on its account), abort word, job and launcher read without a panic. Returns whether
/// it was accepted. A board holds no pointer or length that a rank follows: what a peer
/// publishes there (pid, control segment id and key) is checked again by attach, the
/// `attach` target's subject.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_board(data: &[u8]) -> bool {
    let Some((&[n, pages], contents)) = data.split_first_chunk::<2>() else {
        return false;
    };
    let size = u32::from(n % 64) + 1;
    let page = page_round(1).expect("a page");
    let len = (usize::from(pages % 4) + 1) * page;
    let _ = parse_rendezvous(&String::from_utf8_lossy(contents), 0x7ca, size);
    let Ok(fd) = memfd::create("fuzz-board", len) else {
        return false;
    };
    {
        let Ok(map) = Mapping::map(&fd, len) else {
            return false;
        };
        map.write(0, &contents[..contents.len().min(len)])
            .expect("the contents fit the file");
    }
    let Ok(b) = Board::open(&fd, size) else {
        return false;
    };
    assert!(
        len >= Board::bytes_for(size),
        "a board of {len} bytes accepted for {size} ranks"
    );
    for r in 0..size {
        let _ = (b.entry(r), b.state(r), b.sleep_state(r), b.blamed(r));
        assert!(b.root_of(r) < size, "a root outside the job");
    }
    let _ = (b.aborted(), b.job(), b.launcher_pid());
    let _ = b.abort_at_root(size - 1, AbortReason::RankFailed);
    true
}

/// Parses `tca-board <pid> <fd> <job hex> <size>`; `None` unless it is for `job` and `size`.
fn parse_rendezvous(text: &str, job: u64, size: u32) -> Option<(u32, u32)> {
    let mut it = text.split_whitespace();
    if it.next()? != "tca-board" {
        return None;
    }
    let pid = it.next()?.parse().ok()?;
    let fd = it.next()?.parse().ok()?;
    let j = u64::from_str_radix(it.next()?, 16).ok()?;
    let n: u32 = it.next()?.parse().ok()?;
    (j == job && n == size).then_some((pid, fd))
}

fn decode_abort(v: u64) -> Option<(u32, AbortReason)> {
    if v == 0 {
        return None;
    }
    let reason = match (v >> 32) as u32 {
        1 => AbortReason::PeerDied,
        2 => AbortReason::RankFailed,
        4 => AbortReason::LauncherDied,
        _ => AbortReason::Interrupted,
    };
    Some((low_u32(v).wrapping_sub(1), reason))
}

fn word(map: &Mapping, off: usize) -> &AtomicU64 {
    map.atomic_u64(off)
        .expect("board word lies inside the board (layout constant)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_lines() {
        assert_eq!(
            parse_rendezvous("tca-board 12 7 00000000000000ab 4\n", 0xab, 4),
            Some((12, 7))
        );
        assert_eq!(
            parse_rendezvous("tca-board 12 7 00000000000000ab 4", 0xab, 5),
            None
        );
        assert_eq!(parse_rendezvous("tca-board 12 7 ac 4", 0xab, 4), None);
        assert_eq!(parse_rendezvous("garbage", 0xab, 4), None);
        assert_eq!(parse_rendezvous("tca-board -1 7 ab 4", 0xab, 4), None);
    }

    #[test]
    fn publish_and_abort() {
        let (fd, b) = Board::create(4, 0xabc, None).unwrap();
        assert_eq!(b.entry(2), None);
        b.publish(
            2,
            Entry {
                pid: 7,
                ctrl_segment: 9,
                ctrl_key: 11,
            },
        );
        assert_eq!(
            b.entry(2),
            Some(Entry {
                pid: 7,
                ctrl_segment: 9,
                ctrl_key: 11
            })
        );
        assert_eq!(b.published().load(Ordering::SeqCst), 1);
        let again = Board::open(&fd, 4).unwrap();
        assert_eq!(again.job(), 0xabc);
        assert_eq!(again.state(2), RankState::Ready);
        assert!(Board::open(&fd, 5).is_err());
        assert_eq!(b.aborted(), None);
        assert_eq!(
            b.abort(3, AbortReason::PeerDied),
            (3, AbortReason::PeerDied)
        );
        assert_eq!(
            again.abort(1, AbortReason::RankFailed),
            (3, AbortReason::PeerDied)
        );
        b.set_state(2, RankState::Failed);
        b.set_state(2, RankState::Done);
        assert_eq!(b.state(2), RankState::Failed);
    }

    #[test]
    fn an_abort_names_the_first_cause() {
        let (_fd, b) = Board::create(5, 0xabc, None).unwrap();
        // Rank 3 timed out on rank 1, rank 4 then met rank 3's failure: rank 1 is the cause.
        assert_eq!(b.root_of(4), 4);
        b.blame(3, 1);
        b.blame(4, 3);
        b.blame(4, 0); // the first record stands
        b.blame(2, 2); // nobody blames itself
        b.blame(2, 9); // nor a rank outside the job
        assert_eq!((b.blamed(4), b.blamed(2)), (Some(3), None));
        assert_eq!((b.root_of(4), b.root_of(3), b.root_of(1)), (1, 1, 1));
        // Two ranks that blame each other: the chain ends where it began.
        b.blame(0, 2);
        b.blame(2, 0);
        assert_eq!((b.root_of(0), b.root_of(2)), (0, 2));
        // The launcher seeing rank 4 exit names rank 1; a later abort changes nothing.
        assert_eq!(
            b.abort_at_root(4, AbortReason::RankFailed),
            (1, AbortReason::RankFailed)
        );
        assert_eq!(
            b.abort_at_root(0, AbortReason::PeerDied),
            (1, AbortReason::RankFailed)
        );
        // A rank aborting in its own name is named as itself, whatever it blamed.
        let (_fd, d) = Board::create(3, 0xabe, None).unwrap();
        d.blame(1, 2);
        assert_eq!(
            d.abort(1, AbortReason::PeerDied),
            (1, AbortReason::PeerDied)
        );
        // A blame word a corrupt board holds, outside the job, is no blame.
        d.entry_word(0, 40).store(u64::MAX, Ordering::Release);
        assert_eq!((d.blamed(0), d.root_of(0)), (None, 0));
        // A launcher's death is about nobody's failure: the rank that saw it is kept.
        let (_fd, c) = Board::create(3, 0xabd, None).unwrap();
        c.blame(1, 2);
        assert_eq!(
            c.abort(1, AbortReason::LauncherDied),
            (1, AbortReason::LauncherDied)
        );
        assert_eq!(c.aborted(), Some((1, AbortReason::LauncherDied)));
    }
}
