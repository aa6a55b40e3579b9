//! The launcher's key-value directory: how rank 0 of a job that spans nodes tells the other
//! ranks where its start-up rendezvous ([`super::kv`]) listens, when no `TCA_KV` names it.
//!
//! MPI launchers give the processes they start a small key-value store shared by the job
//! (the "PMI"): a process puts a key, all meet at a barrier (a fence), then any process
//! reads any key. tca uses it once, at start-up, the way NCCL passes its unique id:
//! 1. rank 0 starts the rendezvous on a port the kernel picks, on every interface;
//! 2. it puts `tca-kv` = its node's id and the addresses it listens at (`TCA_KV_HOST` if
//!    set, else every IPv4 address of its interfaces but loopback's);
//! 3. every rank meets the others at the fence, and the others read the value;
//! 4. each rank connects to the rendezvous: at loopback if it shares rank 0's node, else at
//!    rank 0's addresses that are not also its own (a bridge such as docker0 has the same
//!    address on every host), in turn, until one answers or start-up times out.
//!
//! Two directories:
//! - **PMI-1** over the descriptor `PMI_FD` (MPICH's Hydra, `mpiexec`; Intel MPI's), the
//!   "simple PMI" wire protocol: lines of `cmd=... key=value` over a socket to the
//!   launcher's proxy. Pure Rust, always built.
//! - **PMIx** (Open MPI's `mpirun`, PRRTE, `srun --mpi=pmix`) through the system client
//!   library, behind the cargo feature `pmix` (crate `tca-pmix`).
//!
//! # Living beside an MPI in the same program
//! - PMI-1 is not finalized: Hydra closes a process's connection at `finalize`, so an
//!   `MPI_Init` after it would fail, while a process that never sends it exits cleanly.
//!   MPICH's `MPI_Init` works before and after tca's start-up (both checked with
//!   `mpiexec.hydra -n 2` and a C program that speaks the wire protocol beside MPICH 4.0).
//! - PMIx is finalized when start-up is done. Open MPI 4.1's `MPI_Init` fails in a process
//!   that initialised PMIx before it (`orte_init`: "getting local rank failed"), and works
//!   when it came first: a program that uses both calls `MPI_Init` before it joins a tca
//!   world that spans nodes, or sets `TCA_KV`.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

/// The key rank 0 puts its rendezvous under.
pub const KEY: &str = "tca-kv";

/// A launcher's key-value directory, as start-up found it in the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directory {
    /// PMI-1's wire protocol over descriptor `fd` (`PMI_FD`).
    Pmi1 {
        /// The descriptor the launcher opened for this process.
        fd: i32,
    },
    /// PMIx (needs the `pmix` feature to be opened).
    Pmix,
}

impl Directory {
    /// How errors name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pmi1 { .. } => "PMI-1 (PMI_FD)",
            Self::Pmix => "PMIx",
        }
    }
}

/// An open directory: put, fence, get, then dropped (PMIx's is finalized then).
trait Open {
    fn put(&mut self, key: &str, value: &str) -> Result<()>;
    fn fence(&mut self, deadline: Instant) -> Result<()>;
    fn get(&mut self, rank: u32, key: &str) -> Result<String>;
}

/// What rank 0 publishes: the id of its node, its job id, then where it listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Published {
    /// [`super::hash`] of rank 0's node name (`fabric::world::node_name`).
    pub node: u64,
    /// Rank 0's job id, which every rank takes (a launcher may give nodes no common name
    /// to derive one from: Hydra sets no `PMI_KVSNAME`).
    pub job: u64,
    /// Rank 0's addresses, with the rendezvous's port.
    pub addrs: Vec<SocketAddr>,
}

impl Published {
    /// `NODE@JOB@A:P,B:P`: no spaces, `=` or `;` (PMI-1 splits on them).
    fn encode(&self) -> String {
        let addrs: Vec<String> = self.addrs.iter().map(ToString::to_string).collect();
        format!("{:016x}@{:016x}@{}", self.node, self.job, addrs.join(","))
    }

    fn decode(s: &str) -> Option<Self> {
        let mut it = s.trim().splitn(3, '@');
        let (node, job, addrs) = (it.next()?, it.next()?, it.next()?);
        let node = u64::from_str_radix(node, 16).ok()?;
        let job = u64::from_str_radix(job, 16).ok()?;
        let addrs: Vec<SocketAddr> = addrs
            .split(',')
            .map(str::parse)
            .collect::<std::result::Result<_, _>>()
            .ok()?;
        (!addrs.is_empty()).then_some(Self { node, job, addrs })
    }

    /// The addresses a rank on node `mine` (its [`super::hash`]), whose own interfaces have
    /// `own` addresses, tries, in order: loopback on rank 0's node; elsewhere rank 0's
    /// addresses that are not also this host's (all of them if every one is).
    pub(crate) fn candidates(&self, mine: u64, own: &[IpAddr]) -> Vec<SocketAddr> {
        let port = self.addrs[0].port();
        if mine == self.node {
            return vec![SocketAddr::from((Ipv4Addr::LOCALHOST, port))];
        }
        let theirs: Vec<SocketAddr> = self
            .addrs
            .iter()
            .copied()
            .filter(|a| !own.contains(&a.ip()))
            .collect();
        if theirs.is_empty() {
            self.addrs.clone()
        } else {
            theirs
        }
    }
}

/// This host's IPv4 addresses but loopback's, from its interfaces.
pub(crate) fn own_addrs() -> Vec<IpAddr> {
    if_addrs::get_if_addrs()
        .map(|ifs| {
            ifs.into_iter()
                .map(|i| i.ip())
                .filter(|ip| ip.is_ipv4() && !ip.is_loopback())
                .collect()
        })
        .unwrap_or_default()
}

/// Through `dir`: rank 0 publishes `port` (its rendezvous's) and `job` on node `node` (its
/// name, as start-up tells nodes apart); every rank meets the others at the fence; returns
/// the addresses this rank tries, in order, and rank 0's job id.
pub(crate) fn meet(
    dir: Directory,
    (rank, job): (u32, u64),
    node: &str,
    port: Option<u16>,
    deadline: Instant,
) -> Result<(Vec<SocketAddr>, u64)> {
    let node = super::hash(node);
    let mut open = open(dir)?;
    let fail = |e: Error| {
        Error::new(
            e.kind(),
            format!(
                "rank {rank}: publishing rank 0's start-up address through the launcher's \
                 {}: {e}",
                dir.name()
            ),
        )
    };
    let mine = match port {
        Some(port) => {
            let ips = match std::env::var(crate::env::KV_HOST) {
                Ok(h) if !h.trim().is_empty() => super::kv::resolve(&format!("{}:0", h.trim()))
                    .map(|a| vec![a.ip()])
                    .map_err(fail)?,
                _ => own_addrs(),
            };
            let ips = if ips.is_empty() {
                vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]
            } else {
                ips
            };
            let p = Published {
                node,
                job,
                addrs: ips
                    .into_iter()
                    .map(|ip| SocketAddr::new(ip, port))
                    .collect(),
            };
            open.put(KEY, &p.encode()).map_err(fail)?;
            Some(p)
        }
        None => None,
    };
    open.fence(deadline).map_err(fail)?;
    let p = match mine {
        Some(p) => p,
        None => {
            let v = open.get(0, KEY).map_err(fail)?;
            Published::decode(&v).ok_or_else(|| {
                fail(Error::peer(
                    ErrorKind::Bootstrap,
                    0,
                    format!("rank 0 published {v:?}, which is no rendezvous address"),
                ))
            })?
        }
    };
    drop(open);
    Ok((p.candidates(node, &own_addrs()), p.job))
}

fn open(dir: Directory) -> Result<Box<dyn Open>> {
    match dir {
        Directory::Pmi1 { fd } => Ok(Box::new(Pmi1::open(fd)?)),
        Directory::Pmix => open_pmix(),
    }
}

#[cfg(feature = "pmix")]
fn open_pmix() -> Result<Box<dyn Open>> {
    let c = tca_pmix::Client::init().map_err(pmix_err)?;
    Ok(Box::new(Pmix(c)))
}

#[cfg(not(feature = "pmix"))]
fn open_pmix() -> Result<Box<dyn Open>> {
    Err(Error::new(
        ErrorKind::Bootstrap,
        format!(
            "tca was built without PMIx: rebuild with `--features pmix` (Debian: \
             libpmix-dev), or set {}=HOST:PORT (rank 0's node, any free port)",
            crate::env::KV
        ),
    ))
}

#[cfg(feature = "pmix")]
fn pmix_err(e: tca_pmix::Error) -> Error {
    Error::new(ErrorKind::Bootstrap, e.to_string())
}

/// An open PMIx client.
#[cfg(feature = "pmix")]
struct Pmix(tca_pmix::Client);

#[cfg(feature = "pmix")]
impl Open for Pmix {
    fn put(&mut self, key: &str, value: &str) -> Result<()> {
        self.0.put(key, value).map_err(pmix_err)
    }

    fn fence(&mut self, deadline: Instant) -> Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.0.fence(left).map_err(pmix_err)
    }

    fn get(&mut self, rank: u32, key: &str) -> Result<String> {
        self.0.get(rank, key).map_err(pmix_err)
    }
}

/// PMI-1's simple wire protocol on the launcher's descriptor.
struct Pmi1 {
    reader: BufReader<UnixStream>,
    kvs: String,
}

/// Longest line read from the launcher (PMI-1's values are at most 1024 bytes).
const LINE_MAX: usize = 4096;

impl Pmi1 {
    fn open(fd: i32) -> Result<Self> {
        let own = dup(fd)?;
        let s = UnixStream::from(own);
        let mut p = Self {
            reader: BufReader::new(s),
            kvs: String::new(),
        };
        p.call(
            "cmd=init pmi_version=1 pmi_subversion=1",
            "response_to_init",
            None,
        )?;
        let r = p.call("cmd=get_my_kvsname", "my_kvsname", None)?;
        p.kvs = field(&r, "kvsname")
            .ok_or_else(|| Error::new(ErrorKind::Bootstrap, format!("PMI-1 answered {r:?}")))?
            .to_string();
        Ok(p)
    }

    /// Sends `cmd` and reads the answer `want` (`cmd=want ...`), failing on a non-zero `rc`
    /// or silence past `deadline`.
    fn call(&mut self, cmd: &str, want: &str, deadline: Option<Instant>) -> Result<String> {
        let io = |what: &str, e: std::io::Error| {
            Error::new(ErrorKind::Bootstrap, format!("PMI-1 {what} ({cmd:?}): {e}"))
        };
        let s = self.reader.get_mut();
        s.set_read_timeout(Some(deadline.map_or(Duration::from_secs(60), |d| {
            d.saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1))
        })))
        .map_err(|e| io("timeout", e))?;
        s.write_all(format!("{cmd}\n").as_bytes())
            .map_err(|e| io("write", e))?;
        let mut line = String::new();
        let n = std::io::Read::take(&mut self.reader, LINE_MAX as u64)
            .read_line(&mut line)
            .map_err(|e| {
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) {
                    Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "PMI-1: no answer to {cmd:?} before the start-up timeout (a rank \
                             that never arrived? set {} to wait longer)",
                            crate::env::BOOT_TIMEOUT
                        ),
                    )
                } else {
                    io("read", e)
                }
            })?;
        if n == 0 {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!("PMI-1: the launcher closed the connection at {cmd:?}"),
            ));
        }
        if field(&line, "cmd") != Some(want) {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!("PMI-1: {cmd:?} answered {:?}", line.trim()),
            ));
        }
        match field(&line, "rc") {
            None | Some("0") => Ok(line.trim().to_string()),
            Some(rc) => Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "PMI-1: {cmd:?} failed, rc {rc} {}",
                    field(&line, "msg").unwrap_or("")
                ),
            )),
        }
    }
}

/// The value of `key` in a PMI-1 line `cmd=x key=value ...`.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
    })
}

/// A duplicate of this process's descriptor `fd`, checked to be a socket. Taken through a
/// pidfd of this very process (`pidfd_getfd`), which needs no `unsafe` borrow of a raw
/// descriptor number.
fn dup(fd: i32) -> Result<std::os::fd::OwnedFd> {
    use rustix::process::{PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};
    let bad = |why: String| {
        Error::new(
            ErrorKind::Bootstrap,
            format!("PMI_FD={fd} is not the launcher's socket: {why}"),
        )
    };
    if fd < 0 {
        return Err(bad("negative".into()));
    }
    let me = pidfd_open(rustix::process::getpid(), PidfdFlags::empty())
        .map_err(|e| bad(e.to_string()))?;
    let own = pidfd_getfd(&me, fd, PidfdGetfdFlags::empty()).map_err(|e| bad(e.to_string()))?;
    let st = rustix::fs::fstat(&own).map_err(|e| bad(e.to_string()))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
        return Err(bad("not a socket".into()));
    }
    Ok(own)
}

impl Open for Pmi1 {
    fn put(&mut self, key: &str, value: &str) -> Result<()> {
        let cmd = format!("cmd=put kvsname={} key={key} value={value}", self.kvs);
        self.call(&cmd, "put_result", None).map(drop)
    }

    fn fence(&mut self, deadline: Instant) -> Result<()> {
        self.call("cmd=barrier_in", "barrier_out", Some(deadline))
            .map(drop)
    }

    fn get(&mut self, _rank: u32, key: &str) -> Result<String> {
        let cmd = format!("cmd=get kvsname={} key={key}", self.kvs);
        let r = self.call(&cmd, "get_result", None)?;
        field(&r, "value").map(str::to_string).ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                format!("PMI-1: {cmd:?} answered {r:?}"),
            )
        })
    }
}

/// Start-up through PMI-1 against arbitrary replies: the fuzz targets' entry (a launcher's
/// socket is outside input). `data`: its first byte picks the rank (even: rank 0, which
/// puts; odd: rank 1, which gets), the rest is everything the launcher sends (at most
/// 64 KiB), then it closes. Runs [`meet`] to its end: an accepted rendezvous has addresses,
/// every error says what it was doing. Returns whether start-up got its addresses. Not
/// part of the API (feature `fuzzing`).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn fuzz_replies(data: &[u8]) -> bool {
    let Some((&first, replies)) = data.split_first() else {
        return false;
    };
    let (ours, mut theirs) = UnixStream::pair().expect("a socket pair");
    let replies = &replies[..replies.len().min(64 << 10)];
    theirs.write_all(replies).expect("room for the replies");
    theirs
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let fd = std::os::fd::AsRawFd::as_raw_fd(&ours);
    let (rank, port) = if first % 2 == 0 {
        (0, Some(4000))
    } else {
        (1, None)
    };
    let soon = Instant::now() + Duration::from_secs(5);
    match meet(Directory::Pmi1 { fd }, (rank, 1), "fuzz", port, soon) {
        Ok((addrs, _job)) => {
            assert!(!addrs.is_empty(), "no address from {replies:?}");
            true
        }
        Err(e) => {
            assert!(e.to_string().contains("PMI-1"), "{e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_addresses_round_trip_and_order_by_node() {
        let p = Published {
            node: 0xabc,
            job: 0x1234,
            addrs: vec![
                "10.0.0.1:4000".parse().unwrap(),
                "172.17.0.1:4000".parse().unwrap(),
            ],
        };
        let s = p.encode();
        assert!(!s.contains([' ', '=', ';']), "{s}");
        assert_eq!(Published::decode(&s), Some(p.clone()));
        for bad in [
            "",
            "xyz@1@10.0.0.1:1",
            "abc@1@",
            "abc@1@10.0.0.1",
            "abc@10.0.0.1:1",
            "abc",
        ] {
            assert_eq!(Published::decode(bad), None, "{bad}");
        }
        // On rank 0's node: loopback.
        assert_eq!(
            p.candidates(0xabc, &[]),
            vec!["127.0.0.1:4000".parse().unwrap()]
        );
        // Elsewhere: not the addresses this host has too (docker0's).
        let own: Vec<IpAddr> = vec!["172.17.0.1".parse().unwrap()];
        assert_eq!(
            p.candidates(1, &own),
            vec!["10.0.0.1:4000".parse().unwrap()]
        );
        let all: Vec<IpAddr> = p.addrs.iter().map(SocketAddr::ip).collect();
        assert_eq!(p.candidates(1, &all), p.addrs);
    }

    /// A fake launcher on the other end of a socket pair, answering PMI-1 as Hydra does.
    fn launcher(fail_put: bool) -> (i32, std::thread::JoinHandle<Vec<String>>, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&ours);
        let t = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut w = theirs.try_clone().unwrap();
            for line in BufReader::new(theirs).lines() {
                let line = line.unwrap();
                let reply = match field(&line, "cmd").unwrap() {
                    "init" => "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0".into(),
                    "get_my_kvsname" => "cmd=my_kvsname kvsname=kvs_7_0".into(),
                    "put" if fail_put => "cmd=put_result rc=-1 msg=duplicate_key".into(),
                    "put" => "cmd=put_result rc=0 msg=success".into(),
                    "barrier_in" => "cmd=barrier_out".into(),
                    "get" => format!(
                        "cmd=get_result rc=0 msg=success value={}",
                        Published {
                            node: 9,
                            job: 0x77,
                            addrs: vec!["10.1.2.3:555".parse().unwrap()],
                        }
                        .encode()
                    ),
                    other => format!("cmd={other}_unknown rc=1"),
                };
                seen.push(line);
                writeln!(w, "{reply}").unwrap();
            }
            seen
        });
        (fd, t, ours)
    }

    #[test]
    fn pmi1_put_fence_and_get_as_hydra_expects() {
        let soon = Instant::now() + Duration::from_secs(10);
        // Rank 1: reads rank 0's value after the barrier.
        let (fd, t, ours) = launcher(false);
        let got = meet(Directory::Pmi1 { fd }, (1, 5), "b", None, soon).unwrap();
        drop(ours);
        assert_eq!(got, (vec!["10.1.2.3:555".parse().unwrap()], 0x77));
        let seen = t.join().unwrap();
        assert_eq!(
            seen,
            [
                "cmd=init pmi_version=1 pmi_subversion=1",
                "cmd=get_my_kvsname",
                "cmd=barrier_in",
                "cmd=get kvsname=kvs_7_0 key=tca-kv",
            ]
        );
        // Rank 0: puts, then meets the others; on its own node it connects at loopback.
        let (fd, t, ours) = launcher(false);
        let got = meet(Directory::Pmi1 { fd }, (0, 0x42), "a", Some(4242), soon).unwrap();
        drop(ours);
        assert_eq!(got, (vec!["127.0.0.1:4242".parse().unwrap()], 0x42));
        let seen = t.join().unwrap();
        assert!(
            seen[2].starts_with(&format!(
                "cmd=put kvsname=kvs_7_0 key=tca-kv value={:016x}@0000000000000042@",
                super::super::hash("a")
            )),
            "{seen:?}"
        );
        assert_eq!(seen[3..], ["cmd=barrier_in"]);
    }

    #[test]
    fn pmi1_failures_are_errors_that_say_what_failed() {
        let soon = Instant::now() + Duration::from_secs(10);
        let (fd, t, ours) = launcher(true);
        let e = meet(Directory::Pmi1 { fd }, (0, 1), "a", Some(1), soon).unwrap_err();
        drop(ours);
        t.join().unwrap();
        assert!(
            e.to_string().contains("PMI-1 (PMI_FD)") && e.to_string().contains("rc -1"),
            "{e}"
        );
        // Not a socket, not open.
        let f = std::fs::File::open("/dev/null").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let e = meet(Directory::Pmi1 { fd }, (1, 5), "b", None, soon).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
        let e = meet(Directory::Pmi1 { fd: -3 }, (1, 1), "b", None, soon).unwrap_err();
        assert!(e.to_string().contains("PMI_FD=-3"), "{e}");
        // A launcher that never lets the barrier out: a timeout, not a hang.
        let (ours, theirs) = UnixStream::pair().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&ours);
        let t = std::thread::spawn(move || {
            let mut w = theirs.try_clone().unwrap();
            for line in BufReader::new(theirs).lines() {
                let line = line.unwrap();
                match field(&line, "cmd").unwrap() {
                    "init" => writeln!(w, "cmd=response_to_init rc=0").unwrap(),
                    "get_my_kvsname" => writeln!(w, "cmd=my_kvsname kvsname=k").unwrap(),
                    _ => {}
                }
            }
        });
        let quick = Instant::now() + Duration::from_millis(300);
        let e = meet(Directory::Pmi1 { fd }, (1, 1), "b", None, quick).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        drop(ours);
        t.join().unwrap();
    }
}
