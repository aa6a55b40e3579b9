//! Message sizes as people type them — the one grammar of every tca command (`tca bench
//! --sizes/--fit`, `tca model ... --range/--m/--segment`, `tca model calibrate --sizes`).
//!
//! A size is digits with an optional unit: `65536`, `64K`, `64KiB`, `64KB`, `4M`, `1G`, `8B`
//! (any case, spaces allowed before the unit). Every unit is binary (1024, 1024², 1024³),
//! `KB`/`MB`/`GB` included: message sizes in MPI benchmarks are powers of two (IMB's and
//! OSU's tables, seed 002's 16 KiB and 128 KiB), and their users write 64KB for 65536. For a
//! power of ten, write the number.
//!
//! Two forms of `MIN:MAX`, by what the option means:
//! - [`parse_sizes`] (sizes to measure): `MIN:MAX` is 0 if MIN is 0, then every power of two
//!   from MIN up to MAX (`0:4M` is IMB's default sweep); or a comma list (`8,1K,64K`).
//! - [`parse_range`] (sizes to select): an inclusive filter, either side may be left out
//!   (`64K:`, `:32K`).

/// The grammar in one paragraph, for the commands' `--help` (a macro, so that `concat!` can
/// put it into a command's help text at compile time; [`GRAMMAR`] is the same text).
#[macro_export]
macro_rules! size_grammar {
    () => {
        "Sizes are bytes with an optional unit, all powers of 1024: 65536, 64K, 64KiB and 64KB \
         are the same; 4M, 1G. MIN:MAX to measure is 0 (if MIN is 0) and the powers of two \
         from MIN to MAX; MIN:MAX to select is inclusive, either side may be left out (64K:)."
    };
}

/// See [`size_grammar!`].
pub const GRAMMAR: &str = size_grammar!();

/// The largest size [`parse_sizes`] accepts (the benchmarks' buffers are allocated whole).
pub const MAX_MEASURED: u64 = 1 << 30;

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

/// A byte count: digits, optionally followed by `K`/`Ki`/`KiB`/`KB`, `M`/`Mi`/`MiB`/`MB`,
/// `G`/`Gi`/`GiB`/`GB` (any case, all binary multiples) or `B`.
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
        "k" | "ki" | "kib" | "kb" => 10,
        "m" | "mi" | "mib" | "mb" => 20,
        "g" | "gi" | "gib" | "gb" => 30,
        _ => {
            return Err(err(
                s,
                format!("unknown unit `{unit}` (use K, M, G: powers of 1024)"),
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

/// Sizes to measure: `MIN:MAX` (0 if MIN is 0, then the powers of two from MIN to MAX) or a
/// comma list (sorted, duplicates dropped); every size at most [`MAX_MEASURED`].
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, SizeError> {
    let one = |t: &str| -> Result<usize, SizeError> {
        let b = parse_bytes(t)?;
        if b > MAX_MEASURED {
            return Err(err(t, "larger than 1 GiB, the largest size measured"));
        }
        usize::try_from(b).map_err(|_| err(t, "too large for this machine"))
    };
    if let Some((a, b)) = s.split_once(':') {
        let (lo, hi) = (one(a)?, one(b)?);
        if lo > hi {
            return Err(err(s, "MIN is larger than MAX"));
        }
        let mut v = Vec::new();
        if lo == 0 {
            v.push(0);
        }
        let mut x = lo.max(1).next_power_of_two();
        while x <= hi {
            v.push(x);
            x *= 2;
        }
        if v.is_empty() {
            return Err(err(s, "no power of two between MIN and MAX"));
        }
        return Ok(v);
    }
    let mut v: Vec<usize> = s.split(',').map(one).collect::<Result<_, _>>()?;
    v.sort_unstable();
    v.dedup();
    Ok(v)
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
        assert_eq!(parse_bytes("64KB"), Ok(65536));
        assert_eq!(parse_bytes("4mb"), Ok(4 << 20));
        assert_eq!(parse_bytes("1GB"), Ok(1 << 30));
        for bad in [
            "",
            "K",
            "-4",
            "4.5K",
            "4TB",
            "4 x",
            "99999999999999999999",
            "17179869184G",
        ] {
            let e = parse_bytes(bad).unwrap_err();
            assert!(e.to_string().starts_with(&format!("`{bad}`")), "{e}");
        }
        assert!(parse_bytes("4T").unwrap_err().why.contains("unknown unit"));
    }

    #[test]
    fn measured_sizes() {
        assert_eq!(parse_sizes("0:8").unwrap(), vec![0, 1, 2, 4, 8]);
        assert_eq!(parse_sizes("3:16").unwrap(), vec![4, 8, 16]);
        assert_eq!(parse_sizes("1K:4K").unwrap(), vec![1024, 2048, 4096]);
        assert_eq!(parse_sizes("1KB:2KB").unwrap(), vec![1024, 2048]);
        assert_eq!(
            parse_sizes("8,1KiB,64k,4M,8").unwrap(),
            vec![8, 1024, 65536, 4 << 20]
        );
        assert_eq!(parse_sizes("0:4M").unwrap().len(), 24);
        assert_eq!(parse_sizes("1G").unwrap(), vec![1 << 30]);
        for bad in ["", "x", "8:4", "1:2:3", "5:7", "1T", "-1", "2G", "8,"] {
            assert!(parse_sizes(bad).is_err(), "{bad}");
        }
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
