//! The client (feature `link`).

use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

unsafe extern "C" {
    fn tca_pmix_init(rank: *mut u32, size: *mut u32) -> c_int;
    fn tca_pmix_nspace(buf: *mut c_char, len: usize);
    fn tca_pmix_put(key: *const c_char, value: *const c_char) -> c_int;
    fn tca_pmix_fence(timeout_s: c_int) -> c_int;
    fn tca_pmix_get(
        rank: u32,
        key: *const c_char,
        timeout_s: c_int,
        buf: *mut c_char,
        len: usize,
    ) -> c_int;
    fn tca_pmix_finalize() -> c_int;
    fn tca_pmix_error(rc: c_int) -> *const c_char;
    fn tca_pmix_err_timeout() -> c_int;
    fn tca_pmix_max_keylen() -> usize;
}

/// The longest value [`Client::get`] returns, in bytes.
pub const VALUE_MAX: usize = 4096;

/// PMIx_Init's namespace length (`PMIX_MAX_NSLEN` + 1).
const NSPACE_LEN: usize = 256;

/// Whether a [`Client`] exists in this process.
static OPEN: AtomicBool = AtomicBool::new(false);

/// A failed PMIx call: which, its status, and PMIx's words for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The PMIx function (`PMIx_Init`, `PMIx_Fence`, ...), or what was refused before a call.
    pub call: &'static str,
    /// PMIx's status (0 when no call was made).
    pub status: i32,
    /// What went wrong.
    pub text: String,
}

impl Error {
    /// Whether PMIx gave up waiting (`PMIX_ERR_TIMEOUT`: a fence some process never reached).
    pub fn is_timeout(&self) -> bool {
        // SAFETY: returns a constant.
        self.status != 0 && self.status == unsafe { tca_pmix_err_timeout() }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.status == 0 {
            write!(f, "{}: {}", self.call, self.text)
        } else {
            write!(f, "{} failed: {} ({})", self.call, self.text, self.status)
        }
    }
}

impl std::error::Error for Error {}

fn check(call: &'static str, rc: c_int) -> Result<(), Error> {
    if rc == 0 {
        return Ok(());
    }
    // SAFETY: PMIx_Error_string returns a pointer to a static, NUL-terminated string for
    // every status (known or not); it is only read here.
    let text = unsafe { CStr::from_ptr(tca_pmix_error(rc)) }
        .to_string_lossy()
        .into_owned();
    Err(Error {
        call,
        status: rc,
        text,
    })
}

fn refused(call: &'static str, text: impl Into<String>) -> Error {
    Error {
        call,
        status: 0,
        text: text.into(),
    }
}

/// `limit` as PMIx's `PMIX_TIMEOUT` takes it: whole seconds, rounded up, at least 1.
fn whole_secs(limit: Duration) -> c_int {
    c_int::try_from(limit.as_secs().saturating_add(1)).unwrap_or(c_int::MAX)
}

fn c_string(call: &'static str, s: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| refused(call, format!("{s:?} contains a NUL byte")))
}

/// A key as PMIx takes it: no NUL, at most `PMIX_MAX_KEYLEN` bytes (PMIx would cut it).
fn c_key(call: &'static str, key: &str) -> Result<CString, Error> {
    // SAFETY: returns a constant.
    let max = unsafe { tca_pmix_max_keylen() };
    if key.len() > max {
        return Err(refused(
            call,
            format!("key {key:?} is longer than PMIx's {max} bytes"),
        ));
    }
    c_string(call, key)
}

/// This process's connection to its launcher's PMIx server. Finalized on drop.
#[derive(Debug)]
pub struct Client {
    rank: u32,
    size: u32,
    nspace: String,
}

impl Client {
    /// Connects to the PMIx server that started this process (`PMIx_Init`) and reads the
    /// job's size. Fails when no server started it (no `PMIX_*` environment) or a client
    /// already exists in this process.
    pub fn init() -> Result<Self, Error> {
        if OPEN.swap(true, Ordering::AcqRel) {
            return Err(refused(
                "PMIx_Init",
                "a PMIx client is already open in this process",
            ));
        }
        let (mut rank, mut size) = (0u32, 0u32);
        // SAFETY: both pointers are to live, writable u32s; the shim writes only them.
        let rc = unsafe { tca_pmix_init(&mut rank, &mut size) };
        if let Err(e) = check("PMIx_Init", rc) {
            OPEN.store(false, Ordering::Release);
            return Err(e);
        }
        let mut buf = [0 as c_char; NSPACE_LEN];
        // SAFETY: `buf` is NSPACE_LEN writable bytes; the shim writes at most len bytes, the
        // last a NUL.
        unsafe { tca_pmix_nspace(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: the shim NUL-terminated `buf` within its length.
        let nspace = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(Self { rank, size, nspace })
    }

    /// This process's rank in its job.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of processes in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The job's namespace (its name at the launcher).
    pub fn nspace(&self) -> &str {
        &self.nspace
    }

    /// Puts string `value` under `key` for every process of the job (`PMIx_Put`, global
    /// scope); others see it after the next [`Client::fence`].
    pub fn put(&self, key: &str, value: &str) -> Result<(), Error> {
        let (k, v) = (c_key("PMIx_Put", key)?, c_string("PMIx_Put", value)?);
        // SAFETY: both are NUL-terminated strings that outlive the call; PMIx copies them.
        check("PMIx_Put", unsafe { tca_pmix_put(k.as_ptr(), v.as_ptr()) })
    }

    /// Commits this process's puts and waits until every process of the job has
    /// (`PMIx_Commit`, `PMIx_Fence` collecting the data), at most `limit` (rounded up to
    /// whole seconds; PMIx's `PMIX_ERR_TIMEOUT` after it).
    pub fn fence(&self, limit: Duration) -> Result<(), Error> {
        let secs = whole_secs(limit);
        // SAFETY: a plain integer argument; the client is initialized (this `Client`
        // exists).
        check("PMIx_Fence", unsafe { tca_pmix_fence(secs) })
    }

    /// The string that process `rank` put under `key` (`PMIx_Get`), waiting at most `limit`
    /// (rounded up to whole seconds; PMIx's `PMIX_ERR_TIMEOUT` after it) for a key the
    /// server does not have yet.
    pub fn get(&self, rank: u32, key: &str, limit: Duration) -> Result<String, Error> {
        let k = c_key("PMIx_Get", key)?;
        let secs = whole_secs(limit);
        let mut buf = vec![0 as c_char; VALUE_MAX + 1];
        // SAFETY: `k` is NUL-terminated; `buf` is buf.len() writable bytes, and the shim
        // writes at most that many, NUL included.
        let rc = unsafe { tca_pmix_get(rank, k.as_ptr(), secs, buf.as_mut_ptr(), buf.len()) };
        check("PMIx_Get", rc)?;
        // SAFETY: on success the shim wrote a NUL-terminated string into `buf`.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: the client is initialized (this `Client` exists) and finalized only here.
        let _ = unsafe { tca_pmix_finalize() };
        OPEN.store(false, Ordering::Release);
    }
}
