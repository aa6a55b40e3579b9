//! [`ProxyComm`]: a communicator that a rank's proxy made on the rank's behalf (the seed's
//! command channel), for operations posted on a part of the job.

use super::node::{ANY, Entry, Kind};
use super::scope::{self, ProxyScope};
use super::serve::{CommId, MAX_COMMS, NO_COMM, Work};
use super::{Link, Msg, Proxy};
use crate::error::{Error, ErrorKind, Result};

#[cfg(doc)]
use crate::Comm;

/// A communicator held by the rank's proxy ([`Proxy::split`], [`ProxyComm::split`]): its
/// operations are posted in [`ProxyComm::scope`], as the world's are in [`Proxy::scope`].
/// Dropping it frees the proxy's communicator (which, as any communicator's drop, first
/// delivers sends of it that were never received, for a bounded time).
#[derive(Debug)]
pub struct ProxyComm<'p> {
    proxy: &'p Proxy,
    id: CommId,
    rank: u32,
    size: u32,
}

impl<'p> ProxyComm<'p> {
    /// This rank in the communicator.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Ranks in the communicator.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The proxy.
    pub fn proxy(&self) -> &'p Proxy {
        self.proxy
    }

    /// Runs `f` with a scope in which operations are posted on this communicator (ranks,
    /// roots and peers are this communicator's); as [`Proxy::scope`].
    pub fn scope<'s, R>(
        &self,
        f: impl for<'q> FnOnce(&'q ProxyScope<'q, 's>) -> Result<R>,
    ) -> Result<R> {
        scope::run(self.proxy, self.id, f)
    }

    /// Splits this communicator, as [`Proxy::split`] splits the job (collective over its
    /// members).
    pub fn split(&self, color: Option<u32>, key: i64) -> Result<Option<ProxyComm<'p>>> {
        split(self.proxy, self.id, color, key)
    }

    /// Runs a control request with this communicator, as [`Proxy::control`] does with the
    /// world's (`force COLLECTIVE NAME` forces it on this communicator only).
    pub fn control(&self, request: &str) -> Result<String> {
        self.proxy.control_on(self.id, request)
    }
}

impl Drop for ProxyComm<'_> {
    fn drop(&mut self) {
        // Its scopes have ended (they borrow it), so nothing of it is in flight. An ended
        // proxy has let go of it already.
        let c = self.id;
        let _ = self.proxy.request(|id| match self.proxy.link {
            Link::Thread { .. } => Msg::Work(Work::Free(id, c)),
            Link::Node(_) => Msg::Entry(Entry {
                id,
                comm: c,
                ..Entry::new(Kind::FreeComm)
            }),
        });
        self.proxy
            .comms
            .set(self.proxy.comms.get().saturating_sub(1));
    }
}

/// Splits communicator `parent` of `proxy`'s rank.
pub(super) fn split(
    proxy: &Proxy,
    parent: CommId,
    color: Option<u32>,
    key: i64,
) -> Result<Option<ProxyComm<'_>>> {
    let n = proxy.in_flight();
    if n > 0 {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "rank {} has {n} operation(s) in flight at its proxy: wait for them (end \
                 their scope) before making a communicator",
                proxy.rank()
            ),
        ));
    }
    let held = proxy.comms.get();
    if held >= MAX_COMMS {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "rank {} holds {MAX_COMMS} communicators at its proxy (the world's included): \
                 drop some before making more",
                proxy.rank()
            ),
        ));
    }
    if color == Some(ANY) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("a color is below {ANY} (None takes no part)"),
        ));
    }
    let st = proxy.request(|id| match proxy.link {
        Link::Thread { .. } => Msg::Work(Work::Split {
            id,
            parent,
            color,
            key,
        }),
        Link::Node(_) => Msg::Entry(Entry {
            id,
            comm: parent,
            peer: color.unwrap_or(ANY),
            arg: u64::from_le_bytes(key.to_le_bytes()),
            ..Entry::new(Kind::Split)
        }),
    })?;
    if st.source == NO_COMM {
        return Ok(None);
    }
    let made = |what: &str| {
        Error::new(
            ErrorKind::Transport,
            format!("the proxy answered a split with {what}"),
        )
    };
    proxy.comms.set(held + 1);
    Ok(Some(ProxyComm {
        proxy,
        id: CommId::try_from(st.source).map_err(|_| made("no communicator"))?,
        rank: u32::try_from(st.tag).map_err(|_| made("no rank"))?,
        size: u32::try_from(st.bytes).map_err(|_| made("no size"))?,
    }))
}
