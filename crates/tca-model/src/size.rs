//! Message sizes as people type them: `65536`, `64K`, `64KiB`, `4M`, `1G`, and size ranges
//! `MIN:MAX`.
//!
//! K, M and G are binary (1024, 1024², 1024³), as message sizes in MPI benchmarks always
//! are (IMB's sizes are powers of two; seed 002 writes 16 KiB, 128 KiB). `KB`/`MB`/`GB` are
//! refused rather than guessed: half of the world reads them as powers of ten.

/// A size or range that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}`: {why}")]
pub struct SizeError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub why: String,
}

fn err(input: &str, why: impl Into<String>) -> SizeError {
    SizeError {
        input: input.to_string(),
        why: why.into(),
    }
}

/// A byte count: digits, optionally followed by `K`/`Ki`/`KiB`, `M`/`Mi`/`MiB`,
/// `G`/`Gi`/`GiB` (any case, binary multiples) or `B`.
pub fn parse_bytes(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(err(
            s,
            "expected a number of bytes, like 65536, 64K or 4MiB",
        ));
    }
    let n: u64 = num.parse().map_err(|_| err(s, "the number is too large"))?;
    let unit = unit.trim();
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "ki" | "kib" => 10,
        "m" | "mi" | "mib" => 20,
        "g" | "gi" | "gib" => 30,
        "kb" | "mb" | "gb" => {
            return Err(err(
                s,
                "KB/MB/GB are ambiguous: write K, KiB (x1024) or the number of bytes",
            ));
        }
        _ => {
            return Err(err(
                s,
                format!("unknown unit `{unit}` (use K, M, G or KiB, MiB, GiB)"),
            ));
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| err(s, "the size is too large"))
}

/// An inclusive size range `MIN:MAX`; either side may be left out (`64K:` is 64 KiB and
/// up, `:32K` is up to 32 KiB, from 1 byte: size 0 has no throughput).
pub fn parse_range(s: &str) -> Result<(u64, u64), SizeError> {
    let Some((lo, hi)) = s.split_once(':') else {
        return Err(err(s, "expected MIN:MAX, like 128K:16M, 64K: or :32K"));
    };
    let lo = if lo.trim().is_empty() {
        1
    } else {
        parse_bytes(lo)?
    };
    let hi = if hi.trim().is_empty() {
        u64::MAX
    } else {
        parse_bytes(hi)?
    };
    if lo > hi {
        return Err(err(s, "the range is empty (MIN is above MAX)"));
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("65536"), Ok(65536));
        assert_eq!(parse_bytes("64K"), Ok(65536));
        assert_eq!(parse_bytes("64k"), Ok(65536));
        assert_eq!(parse_bytes("4KiB"), Ok(4096));
        assert_eq!(parse_bytes("4 MiB"), Ok(4 << 20));
        assert_eq!(parse_bytes("4M"), Ok(4 << 20));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("13Ki"), Ok(13 * 1024));
        assert_eq!(parse_bytes("8B"), Ok(8));
        for bad in [
            "",
            "K",
            "-4",
            "4.5K",
            "4KB",
            "4 x",
            "99999999999999999999",
            "17179869184G",
        ] {
            let e = parse_bytes(bad).unwrap_err();
            assert!(e.to_string().starts_with(&format!("`{bad}`")), "{e}");
        }
        assert!(parse_bytes("4MB").unwrap_err().why.contains("ambiguous"));
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("128K:16M"), Ok((128 << 10, 16 << 20)));
        assert_eq!(parse_range("64K:"), Ok((64 << 10, u64::MAX)));
        assert_eq!(parse_range(":32K"), Ok((1, 32 << 10)));
        assert_eq!(parse_range(":"), Ok((1, u64::MAX)));
        assert!(parse_range("16M:128K").is_err());
        assert!(parse_range("128K").is_err());
        assert!(parse_range("a:b").is_err());
    }
}
