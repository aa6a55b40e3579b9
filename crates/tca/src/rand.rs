//! Random 64-bit values from the kernel: job ids, segment keys.

/// A random 64-bit value (getrandom). Unique enough to tell jobs and segments apart; never
/// used for security.
pub(crate) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    match rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()) {
        Ok(8) => u64::from_ne_bytes(b),
        // getrandom cannot fail for 8 bytes after boot; fall back to time and pid, still unique
        // enough to tell jobs apart.
        _ => {
            // The low 64 bits of the nanoseconds (all of them until 2554): all a seed needs.
            #[allow(clippy::cast_possible_truncation)]
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            t ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15
        }
    }
}
