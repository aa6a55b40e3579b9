//! One-sided puts through the node proxy: [`ProxyWindow`]s, memory that peers write into
//! (the fabric's segments, reached by copies only), and [`ProxyChain`]s, lists of puts with
//! a final signal that the proxy builds once and starts whenever the rank posts it (the seed's
//! DMA descriptors: built once, kicked many times).
//!
//! A window is an arena of the proxy like a [`ProxyBuf`]'s, but a peer may write it at any
//! time, so this process never holds a Rust reference into it: it is read and written by
//! copies and its signal words by atomic loads, as a [`crate::fabric::Segment`] is. Its
//! [`Handle`] is what peers put to; ranks trade handles as bytes (an `iallgather` of
//! [`Handle::to_bytes`], say).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::entry::{Descriptor, Kind, signal_code};
use super::{Entry, SLICE};
use crate::error::{Error, ErrorKind, Result};
use crate::fabric::{Handle, SignalOp};
use crate::offload::{Link, Msg, Proxy};
use crate::transport::NodeMemory;

#[cfg(doc)]
use super::ProxyBuf;

/// Looks at a window's word before it yields the core.
const SPINS: u32 = 1000;
/// Yields of the core before it sleeps (the proxy's serving thread may need it).
const YIELDS: u32 = 1000;

/// Memory of this rank that peers put into ([`Proxy::window`]), through the node proxy.
/// Zeroed when made; freed (through the proxy) when dropped.
#[derive(Debug)]
pub struct ProxyWindow<'p> {
    proxy: &'p Proxy,
    arena: u32,
    map: NodeMemory,
    handle: Handle,
}

impl<'p> ProxyWindow<'p> {
    pub(super) fn new(proxy: &'p Proxy, arena: u32, map: NodeMemory, handle: Handle) -> Self {
        Self {
            proxy,
            arena,
            map,
            handle,
        }
    }

    /// Bytes in the window.
    pub fn len(&self) -> usize {
        self.handle.len()
    }

    /// Whether the window has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The handle peers put to (and chains name).
    pub fn handle(&self) -> Handle {
        self.handle
    }

    /// Copies `src` to `off` (bounds-checked).
    pub fn write(&self, off: usize, src: &[u8]) -> Result<()> {
        self.check(off, src.len())?;
        self.map.write(off, src)
    }

    /// Copies the bytes at `off` into `dst` (bounds-checked).
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        self.check(off, dst.len())?;
        self.map.read(off, dst)
    }

    /// The signal word at `off` (8-byte aligned, inside), as a peer's signal left it.
    pub fn signal_value(&self, off: usize) -> Result<u64> {
        Ok(self.word(off)?.load(Ordering::Acquire))
    }

    /// Waits until the signal word at `off` is at least `value`; returns the value seen. The
    /// proxy raises no doorbell here, so the wait spins briefly, yields the core a while, then
    /// sleeps in naps that grow to 50 us. It fails if the node proxy ends meanwhile, and after
    /// `TCA_TIMEOUT` (when set) with [`ErrorKind::Timeout`].
    pub fn wait_until(&self, off: usize, value: u64) -> Result<u64> {
        let limit = match &self.proxy.link {
            Link::Node(c) => c.timeout,
            Link::Thread { .. } => None,
        };
        self.wait_until_timeout(off, value, limit)
    }

    /// [`ProxyWindow::wait_until`] for at most `timeout` (`None`: no limit).
    pub fn wait_until_timeout(
        &self,
        off: usize,
        value: u64,
        timeout: Option<Duration>,
    ) -> Result<u64> {
        let word = self.word(off)?;
        let start = Instant::now();
        let mut nap = Duration::from_micros(1);
        let mut looked = start;
        let mut spins = 0u32;
        loop {
            let v = word.load(Ordering::Acquire);
            if v >= value {
                return Ok(v);
            }
            if spins < SPINS + YIELDS {
                spins += 1;
                if spins <= SPINS {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                continue;
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_micros(50));
            if looked.elapsed() >= SLICE {
                looked = Instant::now();
                if let Link::Node(c) = &self.proxy.link
                    && !c.proxy_alive()
                {
                    return Err(c.gone());
                }
            }
            if let Some(t) = timeout
                && start.elapsed() >= t
            {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "rank {} waited {:.3} s for the signal word at {off} of its window to \
                         reach {value} (it is {v})",
                        self.proxy.rank(),
                        t.as_secs_f64()
                    ),
                ));
            }
        }
    }

    fn word(&self, off: usize) -> Result<&std::sync::atomic::AtomicU64> {
        self.check(off, 8)?;
        self.map.word(off).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("a signal word is 8-byte aligned; offset {off} is not"),
            )
        })
    }

    fn check(&self, off: usize, len: usize) -> Result<()> {
        if off.checked_add(len).is_none_or(|end| end > self.len()) {
            return Err(Error::new(
                ErrorKind::OutOfBounds,
                format!(
                    "{len} bytes at {off} do not fit a window of {} bytes",
                    self.len()
                ),
            ));
        }
        Ok(())
    }
}

impl Drop for ProxyWindow<'_> {
    fn drop(&mut self) {
        super::free(self.proxy, self.arena);
    }
}

/// Builds a [`ProxyChain`] ([`Proxy::chain`]); the first error is reported by
/// [`ProxyChainBuilder::build`].
#[derive(Debug)]
pub struct ProxyChainBuilder<'p> {
    proxy: &'p Proxy,
    steps: Vec<Descriptor>,
    signal: bool,
}

impl<'p> ProxyChainBuilder<'p> {
    pub(crate) fn new(proxy: &'p Proxy) -> Self {
        Self {
            proxy,
            steps: Vec::new(),
            signal: false,
        }
    }

    /// Adds a put of `len` bytes from `src` at `src_off` to the segment `dst` names, at
    /// `dst_off` (checked by the proxy when the chain is built).
    pub fn put(
        mut self,
        src: &ProxyWindow<'_>,
        src_off: usize,
        dst: &Handle,
        dst_off: usize,
        len: usize,
    ) -> Self {
        self.steps.push(Descriptor {
            handle: dst.to_bytes(),
            src: src.handle.to_bytes(),
            src_off: src_off as u64,
            len: len as u64,
            off: dst_off as u64,
            value: 0,
            src_arena: src.arena,
            signal: 0,
            _pad: [0; 3],
        });
        self
    }

    /// Ends the chain with `op` on the signal word at `off` of the segment `sig` names.
    pub fn signal(mut self, sig: &Handle, off: usize, op: SignalOp) -> Self {
        let (code, value) = signal_code(Some(op));
        self.signal = true;
        self.steps.push(Descriptor {
            handle: sig.to_bytes(),
            src: [0; Handle::BYTES],
            src_off: 0,
            len: 0,
            off: off as u64,
            value,
            src_arena: 0,
            signal: code,
            _pad: [0; 3],
        });
        self
    }

    /// Has the proxy build the chain (every source, range and handle checked there): one
    /// round trip, once.
    pub fn build(self) -> Result<ProxyChain<'p>> {
        let proxy = self.proxy;
        if !matches!(proxy.link, Link::Node(_)) {
            return Err(thread_has_world("a chain"));
        }
        let bytes: &[u8] = bytemuck::cast_slice(&self.steps);
        let puts = self.steps.iter().filter(|d| d.signal == 0).count();
        let total = self.steps.iter().map(|d| d.len).sum::<u64>();
        let mut desc = super::alloc::<u8>(proxy, bytes.len())?;
        desc.copy_from_slice(bytes);
        let Link::Node(c) = &proxy.link else {
            return Err(thread_has_world("a chain"));
        };
        let send = c.place(&desc)?;
        let n = u32::try_from(self.steps.len())
            .map_err(|_| Error::new(ErrorKind::InvalidArgument, "a chain of over 4e9 steps"))?;
        let k = proxy
            .request(|id| {
                Msg::Entry(Entry {
                    id,
                    peer: n,
                    send,
                    ..Entry::new(Kind::Chain)
                })
            })?
            .source;
        Ok(ProxyChain {
            proxy,
            k,
            puts,
            bytes: usize::try_from(total).unwrap_or(usize::MAX),
            signal: self.signal,
        })
    }
}

/// A chain of puts and a final signal that the node proxy holds for this rank
/// ([`Proxy::chain`]); started by [`crate::offload::ProxyScope::istart`]. Freed when dropped.
#[derive(Debug)]
pub struct ProxyChain<'p> {
    proxy: &'p Proxy,
    k: u32,
    puts: usize,
    bytes: usize,
    signal: bool,
}

impl ProxyChain<'_> {
    /// Puts in the chain.
    pub fn len(&self) -> usize {
        self.puts
    }

    /// Whether the chain has no puts (it may still have a signal).
    pub fn is_empty(&self) -> bool {
        self.puts == 0
    }

    /// Bytes one start moves.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the chain ends with a signal.
    pub fn has_signal(&self) -> bool {
        self.signal
    }

    /// The entry that starts it, the signal's operation replaced by `op` where given.
    pub(crate) fn start_entry(&self, proxy: &Proxy, op: Option<SignalOp>) -> Result<Entry> {
        if !std::ptr::eq(proxy, self.proxy) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a chain is started through the proxy that built it",
            ));
        }
        if op.is_some() && !self.signal {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "istart_with replaces a chain's final signal, and this chain has none",
            ));
        }
        let (code, value) = signal_code(op);
        Ok(Entry {
            peer: self.k,
            op: code,
            arg: value,
            ..Entry::start::<u8>(super::What::StartChain)
        })
    }
}

impl Drop for ProxyChain<'_> {
    fn drop(&mut self) {
        let k = self.k;
        let _ = self.proxy.request(|id| {
            Msg::Entry(Entry {
                id,
                peer: k,
                ..Entry::new(Kind::FreeChain)
            })
        });
    }
}

/// The error for one-sided work asked of a progress thread.
pub(crate) fn thread_has_world(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!(
            "{what} through the proxy is the node proxy's (tca run --offload); a progress \
             thread's rank reaches its world in ProxyScope::run (World::alloc, World::chain)"
        ),
    )
}
