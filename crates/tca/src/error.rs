//! Errors: one typed [`Error`] with an inspectable [`ErrorKind`].
//!
//! Operating-system errors are translated in one place ([`Error::os`]) so that every message
//! names what tca was doing when the system said no. Nothing in the library panics on a peer's
//! mistake: a bad handle, a dead rank or an out-of-range write all come back as an `Error`.

use std::fmt;

/// What went wrong, for callers that want to react rather than print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A write or read would fall outside the target segment.
    OutOfBounds,
    /// A handle is malformed, belongs to another job, or names a segment that is gone.
    InvalidHandle,
    /// A rank number is not in `0..size`.
    InvalidRank,
    /// An argument is invalid (alignment, size limits, mismatched collective arguments).
    InvalidArgument,
    /// A message is longer than the buffer that received it (the buffer holds its start).
    Truncated,
    /// A peer rank died or exited while this rank still needed it.
    PeerDied,
    /// The job was aborted (by the launcher, or by a rank that saw a peer die).
    Aborted,
    /// A wait with a deadline did not see its signal in time.
    Timeout,
    /// Finding rank, size or peers failed (environment, launcher board, start-up timeout).
    Bootstrap,
    /// The transport (memory mapping, futex, file descriptors) failed.
    Transport,
    /// Starting or supervising processes failed.
    Launch,
    /// An active-message handler of the program returned an error ([`Error::handler`]).
    Handler,
    /// The program's own code failed inside a rank that tca runs ([`Error::program`]):
    /// thread mode, a simulated network.
    Program,
}

impl ErrorKind {
    /// Every kind, in the order of their codes ([`ErrorKind::code`]).
    const ALL: [ErrorKind; 13] = [
        ErrorKind::OutOfBounds,
        ErrorKind::InvalidHandle,
        ErrorKind::InvalidRank,
        ErrorKind::InvalidArgument,
        ErrorKind::Truncated,
        ErrorKind::PeerDied,
        ErrorKind::Aborted,
        ErrorKind::Timeout,
        ErrorKind::Bootstrap,
        ErrorKind::Transport,
        ErrorKind::Launch,
        ErrorKind::Handler,
        ErrorKind::Program,
    ];

    /// A number for this kind (1 and up) where an error crosses to another process as
    /// bytes (the node proxy's answers).
    pub(crate) fn code(self) -> u32 {
        let i = Self::ALL.iter().position(|&k| k == self).unwrap_or(0);
        u32::try_from(i).map_or(1, |i| i + 1)
    }

    /// The kind of `code` ([`ErrorKind::code`]); an unknown one is `Transport`.
    pub(crate) fn from_code(code: u32) -> Self {
        usize::try_from(code)
            .ok()
            .and_then(|c| c.checked_sub(1))
            .and_then(|i| Self::ALL.get(i).copied())
            .unwrap_or(ErrorKind::Transport)
    }
}

/// The error type of every fallible tca call.
///
/// One pointer wide (its parts are boxed): a `Result<()>` is returned in a register, so the
/// hot paths that pass results up through several calls (a collective's steps) pay nothing
/// for the error they almost never carry.
#[derive(Clone, PartialEq, Eq)]
pub struct Error(Box<Parts>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Parts {
    kind: ErrorKind,
    rank: Option<u32>,
    /// The launcher is the one to blame (it died, was interrupted, or is gone).
    launcher: bool,
    message: String,
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.0.kind)
            .field("rank", &self.0.rank)
            .field("launcher", &self.0.launcher)
            .field("message", &self.0.message)
            .finish()
    }
}

/// `Result` with tca's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self(Box::new(Parts {
            kind,
            rank: None,
            launcher: false,
            message: message.into(),
        }))
    }

    /// An error whose cause is the launcher (it died, is gone, or was interrupted): it names
    /// no rank, and a wait it ends does not give it one ([`Error::by_launcher`]).
    pub(crate) fn launcher(kind: ErrorKind, message: impl Into<String>) -> Self {
        let mut e = Self::new(kind, message);
        e.0.launcher = true;
        e
    }

    /// The error an active-message handler returns to say it failed (see `tca::am`): kept
    /// and returned by its rank's next call of the endpoint.
    pub fn handler(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Handler, message)
    }

    /// An error of the program's own code in a rank that tca runs (a rank closure of
    /// [`crate::threads::run`] or [`crate::sim::run`] that fails for its own reasons): the
    /// rank is marked failed and the others' waits name it.
    pub fn program(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Program, message)
    }

    /// An error about a specific peer rank (dead, aborted).
    pub(crate) fn peer(kind: ErrorKind, rank: u32, message: impl Into<String>) -> Self {
        let mut e = Self::new(kind, message);
        e.0.rank = Some(rank);
        e
    }

    /// A wait's error that names no rank yet gets the one the wait was for: `world_rank`, and
    /// `what` the rank was to send (the one place the message engines name a waited-on peer).
    /// An error of the launcher's, or of this process's own resources
    /// ([`ErrorKind::Transport`]), keeps naming no rank: the message says what was awaited.
    pub(crate) fn waiting_for(self, world_rank: u32, what: impl fmt::Display) -> Self {
        if self.0.rank.is_some() {
            return self;
        }
        let mut e = self;
        e.0.message = format!("{e} (waiting for {what})");
        if !e.0.launcher && !e.is_own() {
            e.0.rank = Some(world_rank);
        }
        e
    }

    /// Translates an OS error, naming what tca was doing.
    pub(crate) fn os(
        kind: ErrorKind,
        doing: impl fmt::Display,
        err: impl Into<std::io::Error>,
    ) -> Self {
        let err: std::io::Error = err.into();
        Self::new(kind, format!("{doing}: {err}"))
    }

    /// An OS error while reaching something of a peer (its segment, its process): running
    /// out of descriptors (`EMFILE`, `ENFILE`) or memory (`ENOMEM`) is this process's own
    /// resource, whatever the peer, and a [`ErrorKind::Transport`] error; anything else is
    /// `otherwise` (the handle is stale, the peer is gone).
    pub(crate) fn reaching(
        otherwise: ErrorKind,
        doing: impl fmt::Display,
        err: rustix::io::Errno,
    ) -> Self {
        use rustix::io::Errno;
        let kind = match err {
            Errno::MFILE | Errno::NFILE | Errno::NOMEM => ErrorKind::Transport,
            _ => otherwise,
        };
        Self::os(kind, doing, err)
    }

    /// This error if it is this process's own resource running out ([`ErrorKind::Transport`]
    /// from [`Error::reaching`]), else what `blame` makes of it (naming the peer it was
    /// about): running out of descriptors must not be blamed on a peer.
    pub(crate) fn unless_own(self, blame: impl FnOnce(Self) -> Self) -> Self {
        if self.is_own() { self } else { blame(self) }
    }

    /// Whether this process's own resources failed ([`ErrorKind::Transport`], see
    /// [`Error::reaching`]): never a peer's fault.
    fn is_own(&self) -> bool {
        self.0.kind == ErrorKind::Transport
    }

    /// Whether the launcher is to blame (it died, is gone, or was interrupted); such an
    /// error names no rank.
    pub fn by_launcher(&self) -> bool {
        self.0.launcher
    }

    /// The category of the error.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The peer rank the error is about, for [`ErrorKind::PeerDied`] and [`ErrorKind::Aborted`].
    pub fn rank(&self) -> Option<u32> {
        self.0.rank
    }

    /// The human-readable message, without the kind.
    pub fn message(&self) -> &str {
        &self.0.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for Error {}

/// What a caught panic says (its `&str` or `String` payload), for the errors that report a
/// rank's or a helper thread's panic.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait that ends in the launcher's error names the launcher, not the rank it was
    /// waiting for (a fault campaign found survivors "naming" an innocent awaited rank).
    #[test]
    fn a_launcher_error_names_no_rank_through_a_wait() {
        let e = Error::launcher(ErrorKind::Aborted, "the launcher (pid 7) died")
            .waiting_for(3, "a packet from rank 3");
        assert!(e.by_launcher());
        assert_eq!(e.rank(), None);
        assert!(
            e.to_string().contains("waiting for a packet from rank 3"),
            "{e}"
        );
        let own = Error::new(ErrorKind::Transport, "memfd_create: Too many open files")
            .waiting_for(3, "a packet from rank 3");
        assert_eq!(own.rank(), None, "{own}");
        assert!(
            own.message()
                .ends_with("(waiting for a packet from rank 3)")
        );
        let p = Error::new(ErrorKind::PeerDied, "gone").waiting_for(3, "a packet");
        assert!(!p.by_launcher());
        assert_eq!(p.rank(), Some(3));
    }

    /// Running out of descriptors stays this process's error; anything else is blamed.
    #[test]
    fn own_resources_are_not_blamed_on_a_peer() {
        let own = Error::reaching(
            ErrorKind::InvalidHandle,
            "opening",
            rustix::io::Errno::MFILE,
        );
        assert_eq!(own.kind(), ErrorKind::Transport);
        let blame = |_| Error::peer(ErrorKind::PeerDied, 2, "rank 2 died");
        assert_eq!(own.clone().unless_own(blame).kind(), ErrorKind::Transport);
        let other = Error::reaching(ErrorKind::PeerDied, "watching", rustix::io::Errno::SRCH);
        assert_eq!(other.unless_own(blame).rank(), Some(2));
    }
}

#[cfg(test)]
mod kind_codes {
    use super::ErrorKind;

    #[test]
    fn every_kind_has_a_code_that_reads_back() {
        for k in ErrorKind::ALL {
            assert!(k.code() > 0);
            assert_eq!(ErrorKind::from_code(k.code()), k);
        }
        assert_eq!(ErrorKind::from_code(0), ErrorKind::Transport);
        assert_eq!(ErrorKind::from_code(999), ErrorKind::Transport);
    }
}
