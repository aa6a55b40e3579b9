//! Provenance: what machine and when, recorded with every result.

use serde::Serialize;

/// The machine a result was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model name from /proc/cpuinfo.
    pub cpu: String,
    /// CPUs this process may use.
    pub cpus: u32,
    /// Kernel release.
    pub kernel: String,
    /// Seconds since the Unix epoch when measured.
    pub unix_time: u64,
    /// tca version.
    pub tca_version: &'static str,
}

impl Machine {
    /// Reads the machine's description.
    pub fn here() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let unix_time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self {
            cpu,
            cpus: tca::bootstrap::job_cpus(),
            kernel,
            unix_time,
            tca_version: env!("CARGO_PKG_VERSION"),
        }
    }

    /// One line for the head of a table.
    pub fn line(&self) -> String {
        format!("{} ({} cpus), Linux {}", self.cpu, self.cpus, self.kernel)
    }
}

/// The current UTC time, RFC 3339 to the second ("2026-11-21T07:00:00Z").
pub fn rfc3339_now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// This process's memory as the kernel sees it: resident set, mapping count, and the bytes
/// mapped from tca's shared-memory objects.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct MemStat {
    /// VmRSS in KiB.
    pub rss_kib: u64,
    /// Number of mappings in /proc/self/maps.
    pub mappings: u64,
    /// Mappings of tca memfds.
    pub tca_mappings: u64,
    /// Bytes of tca memfd mappings.
    pub tca_bytes: u64,
}

impl MemStat {
    /// Reads /proc/self/status and /proc/self/maps.
    pub fn now() -> Self {
        let rss_kib = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
            })
            .unwrap_or(0);
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let (mut mappings, mut tca_mappings, mut tca_bytes) = (0, 0, 0);
        for l in maps.lines() {
            mappings += 1;
            if l.contains("/memfd:tca-") {
                tca_mappings += 1;
                if let Some((a, b)) = l.split_whitespace().next().and_then(|r| r.split_once('-')) {
                    if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
                    {
                        tca_bytes += b - a;
                    }
                }
            }
        }
        Self {
            rss_kib,
            mappings,
            tca_mappings,
            tca_bytes,
        }
    }
}
