//! The safe layer over the `tca_fi_*` shim (see the crate docs).

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::fmt;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys;

/// Capabilities every endpoint is opened with: messages and RMA, both directions.
const CAPS: u64 = sys::FI_MSG
    | sys::FI_RMA
    | sys::FI_READ
    | sys::FI_WRITE
    | sys::FI_REMOTE_READ
    | sys::FI_REMOTE_WRITE
    | sys::FI_SEND
    | sys::FI_RECV;
/// Mode bits we accept: every operation context is an [`OpContext`], whose first field is a
/// `struct fi_context2` (which also satisfies `FI_CONTEXT`).
const MODE: u64 = sys::FI_CONTEXT | sys::FI_CONTEXT2;
/// Memory-registration modes we handle (see [`Endpoint::register`]).
const MR_MODE: u64 = sys::FI_MR_LOCAL
    | sys::FI_MR_VIRT_ADDR
    | sys::FI_MR_ALLOCATED
    | sys::FI_MR_PROV_KEY
    | sys::FI_MR_ENDPOINT;
/// Ordering requested: a send after a write (the "data then flag" pattern) and write after
/// write arrive in order.
const ORDER: u64 = sys::FI_ORDER_SAW | sys::FI_ORDER_WAW | sys::FI_ORDER_SAS;
/// `FI_ADDR_UNSPEC` and `FI_ADDR_NOTAVAIL` are `((uint64_t) -1)`; csrc/shim.c asserts it.
const ADDR_NONE: u64 = u64::MAX;
/// Completions read per `fi_cq_read` call at most.
const CQ_BATCH: usize = 64;

const _: () = assert!(
    MR_MODE <= c_int::MAX as u64,
    "mr_mode bits must fit the int field"
);

fn neg(code: sys::tca_fi_const) -> i32 {
    -(code as i32)
}

/// The text of `fi_strerror` for a positive FI_E* (or errno) value.
fn strerror(errnum: i32) -> String {
    // SAFETY: fi_strerror accepts any int and returns a pointer to a static NUL-terminated
    // string (or null, checked below), never freed.
    let p = unsafe { sys::tca_fi_strerror(errnum) };
    if p.is_null() {
        return format!("error {errnum}");
    }
    // SAFETY: p is non-null and points to a static NUL-terminated string (see above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// An error returned by a libfabric call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The libfabric function that failed, e.g. `"fi_write"`.
    pub call: &'static str,
    /// The negative `FI_E*` code it returned (e.g. `-FI_EAGAIN` = -11).
    pub code: i32,
    /// `fi_strerror` text, or `fi_cq_strerror` text for a failed operation, or a message of
    /// this crate for arguments it refused before calling libfabric.
    pub text: String,
}

impl Error {
    /// An error from a negative return value of `call`.
    fn from_ret(call: &'static str, ret: isize) -> Error {
        let code = i32::try_from(ret).unwrap_or(i32::MIN);
        Error {
            call,
            code,
            text: strerror(code.saturating_neg()),
        }
    }

    /// An error for an argument this crate refuses (code `-FI_EINVAL` unless given).
    fn refused(call: &'static str, code: sys::tca_fi_const, text: String) -> Error {
        Error {
            call,
            code: neg(code),
            text,
        }
    }

    /// Whether this is `-FI_EAGAIN`: the provider's queues are full; read the completion
    /// queue (which also drives manual progress) and try again.
    pub fn is_again(&self) -> bool {
        self.code == neg(sys::TCA_FI_EAGAIN)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.text, self.code)
    }
}

impl std::error::Error for Error {}

/// Turns an `int` return of libfabric into a `Result`.
fn check(call: &'static str, ret: c_int) -> Result<(), Error> {
    if ret < 0 {
        Err(Error::from_ret(call, ret as isize))
    } else {
        Ok(())
    }
}

/// Turns an `ssize_t` return of a data-transfer call into a `Result`.
fn check_post(call: &'static str, ret: isize) -> Result<(), Error> {
    if ret < 0 {
        Err(Error::from_ret(call, ret))
    } else {
        Ok(())
    }
}

/// An error read from the completion queue: either an operation that completed in error
/// (`id` is `Some`), or a failure of `fi_cq_read`/`fi_cq_readerr` itself (`id` is `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CqError {
    /// `"fi_cq_readerr"` for a failed operation, else the call that failed.
    pub call: &'static str,
    /// Negative `FI_E*` code: `-err` for a failed operation.
    pub code: i32,
    /// `fi_cq_strerror` text for a failed operation, else `fi_strerror` text.
    pub text: String,
    /// The [`OpContext::id`] of the failed operation (`u64::MAX` when it had no context).
    pub id: Option<u64>,
    /// Completion flags of the failed operation (`FI_WRITE`, `FI_SEND`, ...).
    pub flags: u64,
    /// Positive `FI_E*` error of the failed operation, 0 if `id` is `None`.
    pub err: i32,
    /// Provider-specific error number of the failed operation.
    pub prov_errno: i32,
}

impl CqError {
    /// The call, code and text as an [`Error`].
    pub fn error(&self) -> Error {
        Error {
            call: self.call,
            code: self.code,
            text: self.text.clone(),
        }
    }
}

impl From<Error> for CqError {
    fn from(e: Error) -> CqError {
        CqError {
            call: e.call,
            code: e.code,
            text: e.text,
            id: None,
            flags: 0,
            err: 0,
            prov_errno: 0,
        }
    }
}

impl From<CqError> for Error {
    fn from(e: CqError) -> Error {
        e.error()
    }
}

impl fmt::Display for CqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.id {
            Some(id) => write!(
                f,
                "operation {id} (flags {:#x}) failed: {} (err {}, prov_errno {})",
                self.flags, self.text, self.err, self.prov_errno
            ),
            None => write!(f, "{} failed: {} ({})", self.call, self.text, self.code),
        }
    }
}

impl std::error::Error for CqError {}

/// The runtime libfabric version, `(major, minor)` (`fi_version`).
pub fn version() -> (u32, u32) {
    // SAFETY: fi_version takes no arguments and only returns a constant.
    let v = unsafe { sys::tca_fi_version() };
    (v >> 16, v & 0xffff)
}

/// How to pick the provider when opening an [`Endpoint`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// Provider name, as `fi_info -l` or [`providers`] spell it: e.g. `"verbs"`, `"tcp"`
    /// (which selects the `tcp;ofi_rxm` RDM endpoints), `"tcp;ofi_rxm"`. `None`: of the RDM
    /// providers offering our capabilities (`FI_PROVIDER` still filters), a network's own
    /// first, in libfabric's order, then the native RDM over TCP (`net` in 1.17) before the
    /// other TCP and UDP ones (`preference` in this file).
    pub provider: Option<String>,
    /// Domain (NIC) name, e.g. `"mlx5_0"` or `"lo"` for tcp on loopback; `None`: any.
    pub domain: Option<String>,
}

/// What the opened endpoint's provider granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Largest message `inject`/`inject_write` accept (`tx_attr->inject_size`).
    pub inject_size: usize,
    /// Largest single message or RMA transfer (`ep_attr->max_msg_size`).
    pub max_msg_size: usize,
    /// Bytes of remote CQ data `writedata` carries (`domain_attr->cq_data_size`).
    pub cq_data_size: usize,
    /// `FI_MR_LOCAL`: local buffers must be registered and their `desc` passed.
    pub needs_local_mr: bool,
    /// `FI_MR_VIRT_ADDR`: remote addresses are virtual addresses, else offsets.
    pub virt_addr: bool,
    /// `FI_MR_PROV_KEY`: the provider picks keys; the requested key is ignored.
    pub prov_key: bool,
    /// `FI_MR_ENDPOINT`: regions are bound to the endpoint (done by `register`).
    pub mr_endpoint: bool,
    /// `FI_ORDER_SAW` on both sides: a send is delivered after earlier writes.
    pub order_saw: bool,
    /// `FI_ORDER_WAW` on both sides: writes land in the order posted.
    pub order_waw: bool,
    /// `FI_ORDER_SAS` on both sides: messages arrive in the order sent.
    pub order_sas: bool,
    /// `FI_PROGRESS_MANUAL` data progress: transfers advance only while the application
    /// calls into libfabric (reads the CQ), on both sides.
    pub manual_progress: bool,
    /// `FI_THREAD_SAFE` granted (else `FI_THREAD_DOMAIN`-like: serialized access).
    pub thread_safe: bool,
    /// Raw `info->mode` bits granted (a subset of `FI_CONTEXT | FI_CONTEXT2`).
    pub mode: u64,
    /// Raw `domain_attr->mr_mode` bits granted.
    pub mr_mode: u64,
}

/// A peer's address in this endpoint's address vector (`fi_addr_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr(pub u64);

/// Per-operation context. libfabric (modes `FI_CONTEXT`/`FI_CONTEXT2`) uses the leading
/// `fi_context2` as scratch space while the operation is in flight, so an `OpContext` passed
/// to a posting call must stay at the same address, unmoved and otherwise untouched, until
/// its completion (or error completion) is read or the endpoint is dropped. Keep them in a
/// `Box<[OpContext]>` (see [`OpContext::slab`]) or similar stable storage.
#[repr(C)]
#[derive(Debug, Default)]
pub struct OpContext {
    /// Provider scratch space; must be the first field.
    raw: sys::fi_context2,
    /// Caller's identifier, reported back as [`Completion::id`] / [`CqError::id`].
    pub id: u64,
}

// SAFETY: `raw` holds the provider's scratch pointers, which only libfabric calls on the
// endpoint the context was posted to read or write; those calls are serialized by that
// endpoint's one owner (`Endpoint` is `Send`, not `Sync`), so a context may move to another
// thread together with its endpoint (a rank's world handed to its progress thread).
unsafe impl Send for OpContext {}

impl OpContext {
    /// A context with the given id.
    pub fn new(id: u64) -> OpContext {
        OpContext {
            raw: sys::fi_context2::default(),
            id,
        }
    }

    /// `n` contexts with ids `0..n`, at stable heap addresses.
    pub fn slab(n: usize) -> Box<[OpContext]> {
        (0..n as u64).map(OpContext::new).collect()
    }
}

/// One successful completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Completion {
    /// [`OpContext::id`] of the operation, or `u64::MAX` when the event has no context
    /// (e.g. the target-side event of a `writedata`).
    pub id: u64,
    /// Raw completion flags (`FI_SEND`, `FI_RECV`, `FI_WRITE`, `FI_REMOTE_CQ_DATA`, ...).
    pub flags: u64,
    /// Bytes received (receives); provider-defined otherwise.
    pub len: usize,
    /// Remote CQ data (valid when `FI_REMOTE_CQ_DATA` is in `flags`, else 0).
    pub data: u64,
    /// A receive completed (`FI_RECV`).
    pub is_recv: bool,
    /// A peer's write targeted us (`FI_REMOTE_WRITE` or `FI_REMOTE_CQ_DATA`).
    pub is_remote_write: bool,
    /// One of our sends completed (`FI_SEND`).
    pub is_send: bool,
    /// One of our writes completed (`FI_WRITE` without `FI_REMOTE_WRITE`).
    pub is_write: bool,
}

impl Completion {
    /// A placeholder to fill arrays that [`Endpoint::read_cq`] writes into.
    pub const EMPTY: Completion = Completion {
        id: u64::MAX,
        flags: 0,
        len: 0,
        data: 0,
        is_recv: false,
        is_remote_write: false,
        is_send: false,
        is_write: false,
    };

    fn from_raw(e: &sys::fi_cq_data_entry) -> Completion {
        let f = e.flags;
        let remote = f & (sys::FI_REMOTE_WRITE | sys::FI_REMOTE_CQ_DATA) != 0;
        Completion {
            // SAFETY: see `context_id`: a non-null op_context on our CQ is an OpContext
            // posted through one of our unsafe posting functions, still valid by contract.
            id: unsafe { context_id(e.op_context) },
            flags: f,
            len: e.len,
            data: if f & sys::FI_REMOTE_CQ_DATA != 0 {
                e.data
            } else {
                0
            },
            is_recv: f & sys::FI_RECV != 0,
            is_remote_write: remote,
            is_send: f & sys::FI_SEND != 0,
            is_write: f & sys::FI_WRITE != 0 && !remote,
        }
    }
}

/// The id of the [`OpContext`] behind a completion's `op_context` (`u64::MAX` for null).
///
/// # Safety
/// `ctx` is null or points to a live `OpContext` (this holds for every `op_context` libfabric
/// reports on an Endpoint's CQ: contexts are only ever supplied by the posting functions,
/// whose callers guarantee validity until the completion is read).
unsafe fn context_id(ctx: *mut c_void) -> u64 {
    if ctx.is_null() {
        return u64::MAX;
    }
    // SAFETY: non-null and pointing to a live OpContext (caller's contract); the operation
    // has completed, so the provider no longer writes to it.
    unsafe { (*ctx.cast::<OpContext>()).id }
}

/// A CString from an optional config string; interior NULs are refused.
fn c_string(what: &str, s: Option<&str>) -> Result<Option<CString>, Error> {
    s.map(|s| {
        CString::new(s).map_err(|_| {
            Error::refused(
                "fi_getinfo",
                sys::TCA_FI_EINVAL,
                format!("{what} {s:?} contains NUL"),
            )
        })
    })
    .transpose()
}

/// A `fi_info` list returned by `fi_getinfo` or `fi_dupinfo`, freed on drop.
struct InfoList(NonNull<sys::fi_info>);

impl Drop for InfoList {
    fn drop(&mut self) {
        // SAFETY: the list came from fi_getinfo/fi_dupinfo and is freed only here, once.
        unsafe { sys::tca_fi_freeinfo(self.0.as_ptr()) }
    }
}

impl InfoList {
    /// The entries of the list, in libfabric's preference order.
    fn iter(&self) -> impl Iterator<Item = &sys::fi_info> {
        // SAFETY: the head is valid while self lives, and each `next` is null or valid.
        std::iter::successors(Some(unsafe { self.0.as_ref() }), |i| unsafe {
            i.next.as_ref()
        })
    }

    /// A single-entry copy of the first entry whose provider, fabric and domain names are the
    /// given ones (`None` matches any): providers do not all honour name hints (tcp;ofi_rxm in
    /// 1.17 ignores the domain name, and a provider hint also matches the utility providers
    /// layered over it), so the list is filtered here too.
    fn dup_matching(
        &self,
        provider: Option<&str>,
        fabric: Option<&str>,
        domain: Option<&str>,
    ) -> Result<Option<InfoList>, Error> {
        let Some(entry) = self.iter().find(|i| {
            let (p, f, d) = names(i);
            provider.is_none_or(|n| n == p)
                && fabric.is_none_or(|n| n == f)
                && domain.is_none_or(|n| n == d)
        }) else {
            return Ok(None);
        };
        // SAFETY: `entry` is a valid fi_info of this list; fi_dupinfo copies only that entry
        // (with next = NULL) and returns null on allocation failure.
        let p = unsafe { sys::tca_fi_dupinfo(entry) };
        match NonNull::new(p) {
            Some(p) => Ok(Some(InfoList(p))),
            None => Err(Error::from_ret("fi_dupinfo", -12 /* -FI_ENOMEM */)),
        }
    }
}

/// Provider name, fabric name and domain name of an entry.
fn names(i: &sys::fi_info) -> (String, String, String) {
    let s = |p: *const c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: non-null strings of a fi_info from libfabric are NUL-terminated and
            // live as long as the info.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    // SAFETY: fi_getinfo/fi_dupinfo entries always have non-null fabric and domain attrs.
    let (fa, da) = unsafe { (&*i.fabric_attr, &*i.domain_attr) };
    (s(fa.prov_name), s(fa.name), s(da.name))
}

/// What a `fi_getinfo` query asks for beyond the fixed caps, mode and mr_mode.
struct Query<'a> {
    provider: Option<&'a CStr>,
    fabric: Option<&'a CStr>,
    domain: Option<&'a CStr>,
    threading: sys::fi_threading,
    order: u64,
}

/// `fi_getinfo` for RDM endpoints with our caps; `Ok(None)` when nothing matches.
fn getinfo(q: &Query<'_>) -> Result<Option<InfoList>, Error> {
    // SAFETY: fi_allocinfo takes no arguments; it returns null or a zeroed fi_info whose
    // attr structs are allocated.
    let hints = unsafe { sys::tca_fi_allocinfo() };
    let Some(hints) = NonNull::new(hints).map(InfoList) else {
        return Err(Error::from_ret("fi_allocinfo", -12 /* -FI_ENOMEM */));
    };
    let as_mut = |s: Option<&CStr>| s.map_or(ptr::null_mut(), |s| s.as_ptr().cast_mut());
    let mut out: *mut sys::fi_info = ptr::null_mut();
    // SAFETY: `hints` is a valid fi_info from fi_allocinfo whose attr pointers are checked
    // non-null before use. The name strings are borrowed from `q` (alive for the whole
    // block), only read by fi_getinfo, and detached again before `hints` is dropped, so
    // fi_freeinfo never frees them. `out` is written by fi_getinfo only on success.
    let ret = unsafe {
        let h = &mut *hints.0.as_ptr();
        if h.ep_attr.is_null()
            || h.domain_attr.is_null()
            || h.fabric_attr.is_null()
            || h.tx_attr.is_null()
            || h.rx_attr.is_null()
        {
            return Err(Error::from_ret("fi_allocinfo", -12 /* -FI_ENOMEM */));
        }
        h.caps = CAPS;
        h.mode = MODE;
        (*h.ep_attr).type_ = sys::FI_EP_RDM;
        (*h.domain_attr).mr_mode = MR_MODE as c_int;
        (*h.domain_attr).threading = q.threading;
        (*h.tx_attr).msg_order = q.order;
        (*h.rx_attr).msg_order = q.order;
        (*h.fabric_attr).prov_name = as_mut(q.provider);
        (*h.fabric_attr).name = as_mut(q.fabric);
        (*h.domain_attr).name = as_mut(q.domain);
        let ret = sys::tca_fi_getinfo(
            sys::TCA_FI_API_VERSION,
            ptr::null(),
            ptr::null(),
            0,
            h,
            &mut out,
        );
        (*h.fabric_attr).prov_name = ptr::null_mut();
        (*h.fabric_attr).name = ptr::null_mut();
        (*h.domain_attr).name = ptr::null_mut();
        ret
    };
    if ret == neg(sys::TCA_FI_ENODATA) {
        return Ok(None);
    }
    check("fi_getinfo", ret)?;
    Ok(NonNull::new(out).map(InfoList))
}

/// RDM providers that offer our capabilities, best first, e.g. `["verbs;ofi_rxm",
/// "tcp;ofi_rxm", "sockets"]` (honours `FI_PROVIDER`). For error messages and defaults.
pub fn providers() -> Result<Vec<String>, Error> {
    let q = Query {
        provider: None,
        fabric: None,
        domain: None,
        threading: sys::FI_THREAD_DOMAIN,
        order: sys::FI_ORDER_NONE,
    };
    let mut out: Vec<String> = Vec::new();
    if let Some(list) = getinfo(&q)? {
        for i in list.iter() {
            let (p, _, _) = names(i);
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// How tca ranks the RDM providers libfabric offers, lower first, where the user names none
/// (`FI_PROVIDER` and [`Config::provider`] still filter what is offered): a network's own
/// provider (verbs, efa, cxi, psm3, opx ...) as libfabric orders them; then the native RDM
/// endpoint over TCP (`net` in libfabric 1.17, `tcp` from 1.18 on), whose 8-byte round trip
/// measured 0.57x that of `tcp;ofi_rxm`, which libfabric 1.17 lists first (BENCHMARKS.md,
/// "Across nodes"); then the RDM layers over TCP or UDP; `sockets` (a 4 MiB write took 266 ms
/// there); last the shared-memory providers (`shm`, `sm2`), which cannot leave the node.
fn preference(provider: &str) -> u8 {
    match provider {
        "net" | "tcp" => 1,
        "tcp;ofi_rxm" | "net;ofi_rxm" => 2,
        "udp;ofi_rxd" | "udp" => 3,
        "sockets" => 4,
        "shm" | "sm2" => 5,
        _ => 0,
    }
}

/// Picks one fi_info: of the entries matching `cfg` under the weakest acceptable
/// requirements, the preferred ([`preference`]), then that same provider/fabric/domain with
/// `FI_THREAD_SAFE` and the `ORDER` bits if it grants them.
fn select(cfg: &Config) -> Result<InfoList, Error> {
    let prov = c_string("provider", cfg.provider.as_deref())?;
    let dom = c_string("domain", cfg.domain.as_deref())?;
    let base = Query {
        provider: prov.as_deref(),
        fabric: None,
        domain: dom.as_deref(),
        threading: sys::FI_THREAD_DOMAIN,
        order: sys::FI_ORDER_NONE,
    };
    let chosen = match getinfo(&base)? {
        Some(list) => {
            // The entry to use, of those on a domain `want` accepts: the provider tca prefers
            // ([`preference`]), then libfabric's order.
            let pick = |want: &dyn Fn(&str) -> bool| {
                list.iter()
                    .map(names)
                    .filter(|(_, _, d)| want(d))
                    .min_by_key(|(p, _, _)| preference(p))
            };
            let entry = match cfg.domain.as_deref() {
                Some(named) => pick(&|d| d == named),
                // Without a named domain, prefer one that other nodes can reach: a loopback
                // domain ("lo") only if nothing else is offered.
                None => pick(&|d| d != "lo").or_else(|| pick(&|_| true)),
            };
            match entry {
                Some((p, f, d)) => list.dup_matching(Some(&p), Some(&f), Some(&d))?,
                None => None,
            }
        }
        None => None,
    };
    let Some(chosen) = chosen else {
        let avail = providers()
            .map(|p| p.join(", "))
            .unwrap_or_else(|e| e.to_string());
        return Err(Error::refused(
            "fi_getinfo",
            sys::TCA_FI_ENODATA,
            format!(
                "no RDM provider{}{} offers FI_MSG|FI_RMA with modes FI_CONTEXT|FI_CONTEXT2 \
                 (providers that do: [{avail}])",
                cfg.provider
                    .as_deref()
                    .map(|p| format!(" {p:?}"))
                    .unwrap_or_default(),
                cfg.domain
                    .as_deref()
                    .map(|d| format!(" on domain {d:?}"))
                    .unwrap_or_default(),
            ),
        ));
    };
    let (p, f, d) = chosen.iter().next().map(names).unwrap_or_default();
    let (cp, cf, cd) = (
        c_string("provider", Some(&p))?,
        c_string("fabric", Some(&f))?,
        c_string("domain", Some(&d))?,
    );
    for (threading, order) in [
        (sys::FI_THREAD_SAFE, ORDER),
        (sys::FI_THREAD_DOMAIN, ORDER),
        (sys::FI_THREAD_SAFE, sys::FI_ORDER_NONE),
    ] {
        let q = Query {
            provider: cp.as_deref(),
            fabric: cf.as_deref(),
            domain: cd.as_deref(),
            threading,
            order,
        };
        // A refinement the provider refuses (or fails on) just falls back to `chosen`.
        if let Ok(Some(list)) = getinfo(&q) {
            if let Some(better) = list.dup_matching(Some(&p), Some(&f), Some(&d))? {
                return Ok(better);
            }
        }
    }
    Ok(chosen)
}

static NEXT_ENDPOINT_ID: AtomicU64 = AtomicU64::new(1);

/// A registered memory region: plain data (key, descriptor, address), valid until passed to
/// [`Endpoint::deregister`] or until its endpoint is dropped. Dropping a `MemoryRegion`
/// does NOT deregister it (the endpoint owns the registration, so that regions can be
/// stored next to their endpoint and are always closed before its domain).
#[derive(Debug, PartialEq, Eq)]
pub struct MemoryRegion {
    endpoint: u64,
    slot: usize,
    key: u64,
    desc: *mut c_void,
    base: *mut u8,
    len: usize,
    virt_addr: bool,
}

// SAFETY: a MemoryRegion holds no libfabric object, only values: `desc` and `base` are
// opaque tokens that this crate never dereferences and only passes back to libfabric inside
// unsafe posting functions whose callers vouch for them.
unsafe impl Send for MemoryRegion {}
// SAFETY: as for Send; every method only copies values out.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// The key a peer passes as `rkey` to write here (`fi_mr_key`).
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The local descriptor to pass as `desc` for buffers in this region (`fi_mr_desc`;
    /// required when [`Caps::needs_local_mr`], may be null otherwise).
    pub fn desc(&self) -> *mut c_void {
        self.desc
    }

    /// Start of the registered memory.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Length of the registered memory in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `raddr` a peer uses to write at byte `offset` of this region: the virtual
    /// address `base + offset` under `FI_MR_VIRT_ADDR`, else `offset` itself.
    pub fn remote_addr(&self, offset: usize) -> u64 {
        if self.virt_addr {
            self.base as u64 + offset as u64
        } else {
            offset as u64
        }
    }
}

/// One `FI_EP_RDM` endpoint with its fabric, domain, completion queue (format
/// `FI_CQ_FORMAT_DATA`, bound for transmit and receive) and address vector (`FI_AV_TABLE`).
/// Dropping it closes registered regions, then endpoint, AV, CQ, domain, fabric, and frees
/// the info, in that order. Buffers and [`OpContext`]s of operations still in flight may be
/// freed after the drop.
pub struct Endpoint {
    info: *mut sys::fi_info,
    fabric: *mut sys::fid_fabric,
    domain: *mut sys::fid_domain,
    cq: *mut sys::fid_cq,
    av: *mut sys::fid_av,
    ep: *mut sys::fid_ep,
    /// Registered regions by slot; null once deregistered.
    mrs: RefCell<Vec<*mut sys::fid_mr>>,
    id: u64,
    provider: String,
    fabric_name: String,
    domain_name: String,
    caps: Caps,
    name: Vec<u8>,
    wait_fd: Option<RawFd>,
}

// SAFETY: the Endpoint exclusively owns its libfabric objects, which are not tied to the
// thread that created them. Endpoint is !Sync, so all calls on it happen on the one thread
// that owns it at a time, which meets even FI_THREAD_DOMAIN's requirement that the
// application serialize access to the domain's objects. Raw buffers and contexts of posted
// operations are covered by the unsafe posting functions' contracts.
unsafe impl Send for Endpoint {}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.provider)
            .field("fabric", &self.fabric_name)
            .field("domain", &self.domain_name)
            .field("caps", &self.caps)
            .field("wait_fd", &self.wait_fd)
            .finish_non_exhaustive()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; a failed close leaks that object.
        // SAFETY: every non-null pointer is an open object owned by self and closed only
        // here, once, children before parents (MRs and EP before AV and CQ, those before the
        // domain, the domain before the fabric); `info` came from fi_dupinfo.
        unsafe {
            for &mr in self.mrs.get_mut().iter() {
                if !mr.is_null() {
                    sys::tca_fi_close(sys::tca_fi_mr_fid(mr));
                }
            }
            if !self.ep.is_null() {
                sys::tca_fi_close(sys::tca_fi_ep_fid(self.ep));
            }
            if !self.av.is_null() {
                sys::tca_fi_close(sys::tca_fi_av_fid(self.av));
            }
            if !self.cq.is_null() {
                sys::tca_fi_close(sys::tca_fi_cq_fid(self.cq));
            }
            if !self.domain.is_null() {
                sys::tca_fi_close(sys::tca_fi_domain_fid(self.domain));
            }
            if !self.fabric.is_null() {
                sys::tca_fi_close(sys::tca_fi_fabric_fid(self.fabric));
            }
            if !self.info.is_null() {
                sys::tca_fi_freeinfo(self.info);
            }
        }
    }
}

impl Endpoint {
    /// Selects a provider (see [`Config`]) and opens fabric, domain, CQ, AV and endpoint,
    /// binds CQ and AV, and enables the endpoint.
    ///
    /// Hints: `FI_EP_RDM`; caps `FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ |
    /// FI_REMOTE_WRITE | FI_SEND | FI_RECV`; modes `FI_CONTEXT | FI_CONTEXT2`; mr_mode
    /// `FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT`;
    /// `FI_THREAD_SAFE` if granted, else `FI_THREAD_DOMAIN`; `FI_ORDER_SAW | FI_ORDER_WAW`
    /// if granted. The CQ waits on an fd (`FI_WAIT_FD`) if the provider allows, else none.
    pub fn open(cfg: &Config) -> Result<Endpoint, Error> {
        let info = select(cfg)?;
        let mut e = Endpoint {
            info: info.0.as_ptr(),
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            cq: ptr::null_mut(),
            av: ptr::null_mut(),
            ep: ptr::null_mut(),
            mrs: RefCell::new(Vec::new()),
            id: NEXT_ENDPOINT_ID.fetch_add(1, Ordering::Relaxed),
            provider: String::new(),
            fabric_name: String::new(),
            domain_name: String::new(),
            caps: Caps {
                inject_size: 0,
                max_msg_size: 0,
                cq_data_size: 0,
                needs_local_mr: false,
                virt_addr: false,
                prov_key: false,
                mr_endpoint: false,
                order_saw: false,
                order_waw: false,
                order_sas: false,
                manual_progress: false,
                thread_safe: false,
                mode: 0,
                mr_mode: 0,
            },
            name: Vec::new(),
            wait_fd: None,
        };
        // `e` now owns the info (freed by its Drop, also on the error paths below).
        std::mem::forget(info);

        // SAFETY: e.info is a valid single fi_info from fi_dupinfo, with non-null attrs.
        let i = unsafe { &*e.info };
        (e.provider, e.fabric_name, e.domain_name) = names(i);
        // SAFETY: as above, the attr pointers of a fi_info from libfabric are valid.
        let (tx, rx, ep_attr, dom) =
            unsafe { (&*i.tx_attr, &*i.rx_attr, &*i.ep_attr, &*i.domain_attr) };
        let mr_mode = dom.mr_mode as u64;
        let order = tx.msg_order & rx.msg_order;
        e.caps = Caps {
            inject_size: tx.inject_size,
            max_msg_size: ep_attr.max_msg_size,
            cq_data_size: dom.cq_data_size,
            needs_local_mr: mr_mode & sys::FI_MR_LOCAL != 0,
            virt_addr: mr_mode & sys::FI_MR_VIRT_ADDR != 0,
            prov_key: mr_mode & sys::FI_MR_PROV_KEY != 0,
            mr_endpoint: mr_mode & sys::FI_MR_ENDPOINT != 0,
            order_saw: order & sys::FI_ORDER_SAW != 0,
            order_waw: order & sys::FI_ORDER_WAW != 0,
            order_sas: order & sys::FI_ORDER_SAS != 0,
            manual_progress: dom.data_progress == sys::FI_PROGRESS_MANUAL,
            thread_safe: dom.threading == sys::FI_THREAD_SAFE,
            mode: i.mode,
            mr_mode,
        };

        // SAFETY: (this and the open calls below) e.info is valid; every object pointer passed in was
        // returned by the preceding successful open call; out-pointers are fields of `e`,
        // which its Drop closes if non-null; attr structs live on the stack for the call.
        check("fi_fabric", unsafe {
            sys::tca_fi_fabric(i.fabric_attr, &mut e.fabric, ptr::null_mut())
        })?;
        // SAFETY: see above.
        check("fi_domain", unsafe {
            sys::tca_fi_domain(e.fabric, e.info, &mut e.domain, ptr::null_mut())
        })?;

        let mut cq_attr = sys::fi_cq_attr {
            format: sys::FI_CQ_FORMAT_DATA,
            wait_obj: sys::FI_WAIT_FD,
            ..Default::default()
        };
        // SAFETY: see above.
        let mut ret =
            unsafe { sys::tca_fi_cq_open(e.domain, &mut cq_attr, &mut e.cq, ptr::null_mut()) };
        if ret < 0 {
            // No fd wait object on this provider: a CQ that is only polled.
            e.cq = ptr::null_mut();
            cq_attr.wait_obj = sys::FI_WAIT_NONE;
            // SAFETY: see above.
            ret =
                unsafe { sys::tca_fi_cq_open(e.domain, &mut cq_attr, &mut e.cq, ptr::null_mut()) };
        }
        check("fi_cq_open", ret)?;

        let mut av_attr = sys::fi_av_attr {
            type_: sys::FI_AV_TABLE,
            ..Default::default()
        };
        // SAFETY: see above.
        check("fi_av_open", unsafe {
            sys::tca_fi_av_open(e.domain, &mut av_attr, &mut e.av, ptr::null_mut())
        })?;
        // SAFETY: see above.
        check("fi_endpoint", unsafe {
            sys::tca_fi_endpoint(e.domain, e.info, &mut e.ep, ptr::null_mut())
        })?;
        // SAFETY: see above; ep, cq and av are open.
        check("fi_ep_bind(cq)", unsafe {
            sys::tca_fi_ep_bind(
                e.ep,
                sys::tca_fi_cq_fid(e.cq),
                sys::FI_TRANSMIT | sys::FI_RECV,
            )
        })?;
        // SAFETY: see above.
        check("fi_ep_bind(av)", unsafe {
            sys::tca_fi_ep_bind(e.ep, sys::tca_fi_av_fid(e.av), 0)
        })?;
        // SAFETY: see above.
        check("fi_enable", unsafe { sys::tca_fi_enable(e.ep) })?;
        e.name = e.getname()?;

        if cq_attr.wait_obj == sys::FI_WAIT_FD {
            let mut fd: c_int = -1;
            // SAFETY: the CQ is open with FI_WAIT_FD, for which FI_GETWAIT writes an int.
            let ret = unsafe { sys::tca_fi_cq_getwait_fd(e.cq, &mut fd) };
            e.wait_fd = (ret == 0 && fd >= 0).then_some(fd);
        }
        Ok(e)
    }

    fn getname(&self) -> Result<Vec<u8>, Error> {
        let mut buf = vec![0u8; 256];
        loop {
            let mut len = buf.len();
            // SAFETY: the endpoint is open; buf has `len` writable bytes, and fi_getname
            // writes at most `len` bytes and stores the needed length in `len`.
            let ret = unsafe {
                sys::tca_fi_getname(
                    sys::tca_fi_ep_fid(self.ep),
                    buf.as_mut_ptr().cast(),
                    &mut len,
                )
            };
            if ret == neg(sys::TCA_FI_ETOOSMALL) && len > buf.len() {
                buf.resize(len, 0);
                continue;
            }
            check("fi_getname", ret)?;
            buf.truncate(len);
            return Ok(buf);
        }
    }

    /// Provider name, e.g. `"tcp;ofi_rxm"` or `"verbs;ofi_rxm"`.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// Fabric name, e.g. `"127.0.0.1/32"` for tcp on loopback.
    pub fn fabric_name(&self) -> &str {
        &self.fabric_name
    }

    /// Domain name, e.g. `"lo"` or `"mlx5_0"`.
    pub fn domain_name(&self) -> &str {
        &self.domain_name
    }

    /// What the provider granted.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// This endpoint's address (`fi_getname`), for peers to [`insert`](Endpoint::insert).
    pub fn name(&self) -> Result<Vec<u8>, Error> {
        Ok(self.name.clone())
    }

    /// Inserts peers' names into the address vector (`fi_av_insert`); one [`Addr`] per name,
    /// in order. Fails if any name has another length than ours or could not be inserted.
    pub fn insert(&self, names: &[&[u8]]) -> Result<Vec<Addr>, Error> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let len = self.name.len();
        if let Some(bad) = names.iter().find(|n| n.len() != len) {
            return Err(Error::refused(
                "fi_av_insert",
                sys::TCA_FI_EINVAL,
                format!("address of {} bytes, this provider's are {len}", bad.len()),
            ));
        }
        let packed: Vec<u8> = names.concat();
        let mut addrs = vec![ADDR_NONE; names.len()];
        // SAFETY: the AV is open; `packed` holds names.len() addresses of the provider's
        // address length (checked above against our own name); `addrs` has room for one
        // fi_addr_t per address; no context is needed without FI_EVENT.
        let ret = unsafe {
            sys::tca_fi_av_insert(
                self.av,
                packed.as_ptr().cast(),
                names.len(),
                addrs.as_mut_ptr(),
                0,
                ptr::null_mut(),
            )
        };
        check("fi_av_insert", ret)?;
        if ret as usize != names.len() || addrs.contains(&ADDR_NONE) {
            return Err(Error::refused(
                "fi_av_insert",
                sys::TCA_FI_EINVAL,
                format!("inserted {ret} of {} addresses", names.len()),
            ));
        }
        Ok(addrs.into_iter().map(Addr).collect())
    }

    /// Registers `len` bytes at `base` (`fi_mr_reg`, then `fi_mr_bind` to the endpoint and
    /// `fi_mr_enable` under `FI_MR_ENDPOINT`). Access: local send/receive/read/write, plus
    /// remote read and write when `remote`. `requested_key` is used unless the provider
    /// picks keys ([`Caps::prov_key`]); read the actual one with [`MemoryRegion::key`].
    ///
    /// # Safety
    /// `base..base + len` must be memory this process may read and write, and must stay
    /// allocated (not unmapped or freed) until the region is passed to
    /// [`deregister`](Endpoint::deregister) or the endpoint is dropped: with `remote`, peers
    /// may write into it at any time until then.
    pub unsafe fn register(
        &self,
        base: *mut u8,
        len: usize,
        requested_key: u64,
        remote: bool,
    ) -> Result<MemoryRegion, Error> {
        let mut access = sys::FI_SEND | sys::FI_RECV | sys::FI_READ | sys::FI_WRITE;
        if remote {
            access |= sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE;
        }
        let mut mr: *mut sys::fid_mr = ptr::null_mut();
        // SAFETY: the domain is open; the memory is valid for the registration's lifetime
        // (caller's contract); `mr` is written only on success.
        check("fi_mr_reg", unsafe {
            sys::tca_fi_mr_reg(
                self.domain,
                base.cast_const().cast(),
                len,
                access,
                0,
                requested_key,
                0,
                &mut mr,
                ptr::null_mut(),
            )
        })?;
        if self.caps.mr_endpoint {
            // SAFETY: mr and ep are open; binding with flags 0 then enabling is the
            // FI_MR_ENDPOINT sequence.
            let bound = check("fi_mr_bind", unsafe {
                sys::tca_fi_mr_bind(mr, sys::tca_fi_ep_fid(self.ep), 0)
            })
            // SAFETY: mr is open and bound.
            .and_then(|()| check("fi_mr_enable", unsafe { sys::tca_fi_mr_enable(mr) }));
            if let Err(err) = bound {
                // SAFETY: mr is open and not yet recorded anywhere else; closed once.
                unsafe { sys::tca_fi_close(sys::tca_fi_mr_fid(mr)) };
                return Err(err);
            }
        }
        // SAFETY: mr is an open (and, if required, enabled) memory region.
        let (key, desc) = unsafe { (sys::tca_fi_mr_key(mr), sys::tca_fi_mr_desc(mr)) };
        let mut mrs = self.mrs.borrow_mut();
        mrs.push(mr);
        Ok(MemoryRegion {
            endpoint: self.id,
            slot: mrs.len() - 1,
            key,
            desc,
            base,
            len,
            virt_addr: self.caps.virt_addr,
        })
    }

    /// Closes a region from [`register`](Endpoint::register) on this endpoint (`fi_close`);
    /// after this, peers' writes with its key fail and its memory may be freed.
    pub fn deregister(&self, mr: MemoryRegion) -> Result<(), Error> {
        let mut mrs = self.mrs.borrow_mut();
        let slot = match mrs.get_mut(mr.slot) {
            Some(slot) if mr.endpoint == self.id && !slot.is_null() => slot,
            _ => {
                return Err(Error::refused(
                    "fi_close(mr)",
                    sys::TCA_FI_EINVAL,
                    "memory region of another endpoint".into(),
                ));
            }
        };
        let raw = std::mem::replace(slot, ptr::null_mut());
        // SAFETY: raw is an open MR of this endpoint (non-null slot of ours); the slot is
        // cleared first so it is closed exactly once.
        check("fi_close(mr)", unsafe {
            sys::tca_fi_close(sys::tca_fi_mr_fid(raw))
        })
    }

    /// Non-null context pointer, or an error naming `call`.
    fn ctx(call: &'static str, ctx: *mut OpContext) -> Result<*mut c_void, Error> {
        if ctx.is_null() {
            Err(Error::refused(
                call,
                sys::TCA_FI_EINVAL,
                "null OpContext".into(),
            ))
        } else {
            Ok(ctx.cast())
        }
    }

    /// Refuses inject payloads over [`Caps::inject_size`].
    fn inject_len(&self, call: &'static str, len: usize) -> Result<(), Error> {
        if len > self.caps.inject_size {
            return Err(Error::refused(
                call,
                sys::TCA_FI_EMSGSIZE,
                format!("{len} bytes exceed inject_size {}", self.caps.inject_size),
            ));
        }
        Ok(())
    }

    /// RMA write of `len` bytes at `src` to `raddr` (see [`MemoryRegion::remote_addr`]) in
    /// the region with key `rkey` at `dest` (`fi_write`). Completes with a [`Completion`]
    /// (`is_write`, id of `ctx`) or a [`CqError`]. `Err(e)` with `e.is_again()`: read the CQ
    /// and retry.
    ///
    /// # Safety
    /// `src..src + len` must stay readable and unmodified, and `*ctx` (non-null) valid,
    /// unmoved and untouched, until this operation's completion is read from the CQ or the
    /// endpoint is dropped. `desc` is null or the [`MemoryRegion::desc`] of a live region of
    /// this endpoint covering the buffer (required under [`Caps::needs_local_mr`]).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn write(
        &self,
        src: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: Addr,
        raddr: u64,
        rkey: u64,
        ctx: *mut OpContext,
    ) -> Result<(), Error> {
        let ctx = Self::ctx("fi_write", ctx)?;
        // SAFETY: the endpoint is open; buffer, descriptor and context validity until
        // completion is the caller's contract.
        check_post("fi_write", unsafe {
            sys::tca_fi_write(self.ep, src.cast(), len, desc, dest.0, raddr, rkey, ctx)
        })
    }

    /// Like [`write`](Endpoint::write), also delivering `data` as remote CQ data: the target
    /// reads a [`Completion`] with `is_remote_write` and this `data` (`fi_writedata`).
    ///
    /// # Safety
    /// As for [`write`](Endpoint::write).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn writedata(
        &self,
        src: *const u8,
        len: usize,
        desc: *mut c_void,
        data: u64,
        dest: Addr,
        raddr: u64,
        rkey: u64,
        ctx: *mut OpContext,
    ) -> Result<(), Error> {
        let ctx = Self::ctx("fi_writedata", ctx)?;
        // SAFETY: as in `write`.
        check_post("fi_writedata", unsafe {
            sys::tca_fi_writedata(
                self.ep,
                src.cast(),
                len,
                desc,
                data,
                dest.0,
                raddr,
                rkey,
                ctx,
            )
        })
    }

    /// RMA write of a small buffer (at most [`Caps::inject_size`] bytes), copied before the
    /// call returns; no local completion (`fi_inject_write`).
    pub fn inject_write(&self, src: &[u8], dest: Addr, raddr: u64, rkey: u64) -> Result<(), Error> {
        self.inject_len("fi_inject_write", src.len())?;
        // SAFETY: the endpoint is open; inject copies `src` (valid for its length) before
        // returning and takes no context, so nothing outlives the call.
        check_post("fi_inject_write", unsafe {
            sys::tca_fi_inject_write(self.ep, src.as_ptr().cast(), src.len(), dest.0, raddr, rkey)
        })
    }

    /// Like [`inject_write`](Endpoint::inject_write), also delivering `data` as remote CQ
    /// data (`fi_inject_writedata`).
    pub fn inject_writedata(
        &self,
        src: &[u8],
        data: u64,
        dest: Addr,
        raddr: u64,
        rkey: u64,
    ) -> Result<(), Error> {
        self.inject_len("fi_inject_writedata", src.len())?;
        // SAFETY: as in `inject_write`.
        check_post("fi_inject_writedata", unsafe {
            sys::tca_fi_inject_writedata(
                self.ep,
                src.as_ptr().cast(),
                src.len(),
                data,
                dest.0,
                raddr,
                rkey,
            )
        })
    }

    /// Sends `len` bytes at `buf` to `dest`, matched to a receive posted there (`fi_send`).
    /// Completes with a [`Completion`] (`is_send`) or a [`CqError`].
    ///
    /// # Safety
    /// As for [`write`](Endpoint::write): `buf..buf + len` readable and unmodified, `*ctx`
    /// valid and untouched until the completion is read or the endpoint dropped; `desc` null
    /// or a live region's descriptor covering the buffer.
    pub unsafe fn send(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: Addr,
        ctx: *mut OpContext,
    ) -> Result<(), Error> {
        let ctx = Self::ctx("fi_send", ctx)?;
        // SAFETY: as in `write`.
        check_post("fi_send", unsafe {
            sys::tca_fi_send(self.ep, buf.cast(), len, desc, dest.0, ctx)
        })
    }

    /// Sends a small message (at most [`Caps::inject_size`] bytes), copied before the call
    /// returns; no local completion (`fi_inject`).
    pub fn inject(&self, buf: &[u8], dest: Addr) -> Result<(), Error> {
        self.inject_len("fi_inject", buf.len())?;
        // SAFETY: as in `inject_write`.
        check_post("fi_inject", unsafe {
            sys::tca_fi_inject(self.ep, buf.as_ptr().cast(), buf.len(), dest.0)
        })
    }

    /// Posts a receive of up to `len` bytes into `buf`, from any peer (`fi_recv` with
    /// `FI_ADDR_UNSPEC`). Completes with a [`Completion`] (`is_recv`, `len` received).
    ///
    /// # Safety
    /// `buf..buf + len` must stay writable and not otherwise accessed, and `*ctx` valid and
    /// untouched, until the completion is read or the endpoint is dropped; `desc` null or a
    /// live region's descriptor covering the buffer.
    pub unsafe fn recv(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        ctx: *mut OpContext,
    ) -> Result<(), Error> {
        let ctx = Self::ctx("fi_recv", ctx)?;
        // SAFETY: as in `write`, for a writable buffer.
        check_post("fi_recv", unsafe {
            sys::tca_fi_recv(self.ep, buf.cast(), len, desc, ADDR_NONE, ctx)
        })
    }

    /// Reads up to `out.len()` (at most 64) completions without blocking (`fi_cq_read`);
    /// `Ok(0)` when none is ready. A failed operation is returned as a [`CqError`] read with
    /// `fi_cq_readerr` (text from `fi_cq_strerror`). Under [`Caps::manual_progress`] this is
    /// also what moves data, on both sides of a transfer.
    pub fn read_cq(&self, out: &mut [Completion]) -> Result<usize, CqError> {
        let n = out.len().min(CQ_BATCH);
        if n == 0 {
            return Ok(0);
        }
        // Not zeroed: this runs on every poll of every wait, and zeroing 64 entries (2.5 KiB)
        // was 5% of a polling rank's time (`perf`, a ping-pong across namespaces).
        let mut raw = [const { MaybeUninit::<sys::fi_cq_data_entry>::uninit() }; CQ_BATCH];
        // SAFETY: the CQ is open with FI_CQ_FORMAT_DATA, and `raw` has room for n entries.
        let ret = unsafe { sys::tca_fi_cq_read(self.cq, raw.as_mut_ptr().cast(), n) };
        if ret >= 0 {
            let got = (ret as usize).min(n);
            for (o, r) in out.iter_mut().zip(&raw[..got]) {
                // SAFETY: fi_cq_read returns how many entries it wrote, from the first on.
                *o = Completion::from_raw(unsafe { r.assume_init_ref() });
            }
            return Ok(got);
        }
        if ret == neg(sys::TCA_FI_EAGAIN) as isize {
            return Ok(0);
        }
        if ret != neg(sys::TCA_FI_EAVAIL) as isize {
            return Err(Error::from_ret("fi_cq_read", ret).into());
        }
        let mut e = sys::fi_cq_err_entry::default();
        // SAFETY: the CQ is open; `e` is a zeroed entry (err_data_size 0: the provider
        // points err_data at its own buffer, valid until the next CQ read).
        let ret = unsafe { sys::tca_fi_cq_readerr(self.cq, &mut e, 0) };
        if ret < 0 {
            return Err(Error::from_ret("fi_cq_readerr", ret).into());
        }
        let mut buf = [0 as c_char; 256];
        // SAFETY: the CQ is open; err_data is from the entry just read; `buf` has
        // buf.len() writable bytes. The result is null, or a NUL-terminated string in
        // `buf` or static storage.
        let p = unsafe {
            sys::tca_fi_cq_strerror(
                self.cq,
                e.prov_errno,
                e.err_data,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        let text = if p.is_null() {
            strerror(e.err)
        } else {
            // SAFETY: non-null NUL-terminated string, alive during this call (see above).
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Err(CqError {
            call: "fi_cq_readerr",
            code: -e.err,
            text,
            // SAFETY: see `context_id`: op_context was supplied by our posting functions.
            id: Some(unsafe { context_id(e.op_context) }),
            flags: e.flags,
            err: e.err,
            prov_errno: e.prov_errno,
        })
    }

    /// The CQ's wait fd (`fi_control(FI_GETWAIT)`), or `None` when the provider refused
    /// `FI_WAIT_FD`. Poll it for readability only after [`trywait`](Endpoint::trywait)
    /// returned true.
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.wait_fd
    }

    /// `fi_trywait` on the CQ: true when it is safe to block on
    /// [`wait_fd`](Endpoint::wait_fd) now; false when completions may be pending (read the
    /// CQ first) or there is no wait fd.
    pub fn trywait(&self) -> bool {
        if self.wait_fd.is_none() {
            return false;
        }
        // SAFETY: fabric and CQ are open; `fids` is one valid fid pointer for the call.
        let ret = unsafe {
            let mut fids = [sys::tca_fi_cq_fid(self.cq)];
            sys::tca_fi_trywait(self.fabric, fids.as_mut_ptr(), 1)
        };
        ret == 0
    }
}
