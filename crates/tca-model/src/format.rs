//! How every tca command prints numbers, in one place: the way seed 002's Table 1 prints
//! them (four significant digits, thousands separated by commas: `4,226`, `1,920,000`,
//! `411.4`; sizes in E-notation: `7.919E+06`), counts (`1,234,567`), byte sizes in binary
//! units (`16 KiB`, and `16K` where space is short: axis labels, one-line summaries) and
//! durations (`1.234 ms`).
//!
//! Rounding is half away from zero on the exact binary value, as the paper's tables (and
//! spreadsheets) round: the PingPong M_1/2 is exactly 5,000 MB/s x 6.965 us = 34,825 bytes,
//! printed `3.483E+04`, where Rust's and C's formatting (half to even) would print
//! `3.482e4`.

/// `x` rounded to `sig` significant digits: the digits and the decimal exponent of the first
/// one (`12678.5`, 4 → `("1268", 4)`), or `None` for zero, NaN and infinities.
fn round_sig(x: f64, sig: usize) -> Option<(Vec<u8>, i32)> {
    if !x.is_finite() || x == 0.0 || sig == 0 {
        return None;
    }
    // Rust prints the exact decimal expansion when asked for enough digits; 40 is far more
    // than a double's 17 significant ones, so the tail decides ties exactly.
    let s = format!("{:.40e}", x.abs());
    let (mant, exp) = s.split_once('e')?;
    let mut exp: i32 = exp.parse().ok()?;
    let digits: Vec<u8> = mant
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect();
    let mut kept: Vec<u8> = digits[..sig.min(digits.len())].to_vec();
    let next = digits.get(sig).copied().unwrap_or(0);
    if next >= 5 {
        let mut i = kept.len();
        loop {
            if i == 0 {
                kept.insert(0, 1);
                kept.pop();
                exp += 1;
                break;
            }
            i -= 1;
            if kept[i] == 9 {
                kept[i] = 0;
            } else {
                kept[i] += 1;
                break;
            }
        }
    }
    Some((kept, exp))
}

fn special(x: f64) -> Option<String> {
    if x.is_nan() {
        Some("NaN".into())
    } else if x.is_infinite() {
        Some(if x > 0.0 { "inf" } else { "-inf" }.into())
    } else {
        None
    }
}

/// A count with thousands separated: `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    group_thousands(&n.to_string())
}

fn group_thousands(int: &str) -> String {
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `x` to `sig` significant digits in plain notation with thousands separators, as Table 1
/// prints B and t_L: `sig(4226.17, 4)` = `4,226`, `sig(12678.5, 4)` = `12,680`,
/// `sig(411.388, 4)` = `411.4`, `sig(6.965, 4)` = `6.965`.
pub fn sig(x: f64, sig: usize) -> String {
    if let Some(s) = special(x) {
        return s;
    }
    let Some((digits, exp)) = round_sig(x, sig) else {
        return "0".into();
    };
    let d: String = digits.iter().map(|&b| char::from(b'0' + b)).collect();
    let sign = if x < 0.0 { "-" } else { "" };
    let n = digits.len() as i32;
    let body = if exp >= n - 1 {
        // All digits are in the integer part; pad with zeros.
        let zeros = usize::try_from(exp - (n - 1)).unwrap_or(0);
        group_thousands(&format!("{d}{}", "0".repeat(zeros)))
    } else if exp >= 0 {
        let split = usize::try_from(exp + 1).unwrap_or(0);
        format!("{}.{}", group_thousands(&d[..split]), &d[split..])
    } else {
        let zeros = usize::try_from(-exp - 1).unwrap_or(0);
        format!("0.{}{d}", "0".repeat(zeros))
    };
    format!("{sign}{body}")
}

/// `x` to `sig` significant digits in E-notation with a signed two-digit exponent, as Table
/// 1 prints M_1/2: `exp(7918582.3, 4)` = `7.919E+06`.
pub fn exp(x: f64, sig: usize) -> String {
    if let Some(s) = special(x) {
        return s;
    }
    let (digits, e) = round_sig(x, sig).unwrap_or_else(|| (vec![0; sig.max(1)], 0));
    let d: String = digits.iter().map(|&b| char::from(b'0' + b)).collect();
    let sign = if x < 0.0 { "-" } else { "" };
    let mant = if d.len() > 1 {
        format!("{}.{}", &d[..1], &d[1..])
    } else {
        d
    };
    let esign = if e < 0 { '-' } else { '+' };
    format!("{sign}{mant}E{esign}{:02}", e.abs())
}

/// A byte count in binary units where it is a whole number of them (`16 KiB`, `4 MiB`),
/// otherwise in bytes (`13000 B`).
pub fn bytes(n: u64) -> String {
    for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} B")
}

/// A byte count in a few characters: `16K`, `4M`, `1G` where it is a whole number of the
/// unit, else the bytes (`1000`).
pub fn bytes_short(n: u64) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// A byte count (possibly fractional, as a formula gives it) with both readings where they
/// differ: `16 KiB (16384 B)`, `13,000 B (12.7 KiB)`, `512 B`, `34,825.5 B`.
pub fn bytes_detail(b: f64) -> String {
    if b.fract() == 0.0 && (0.0..1.8e19).contains(&b) {
        // A whole number below 2^64: the cast is exact.
        let n = b as u64;
        let f = bytes(n);
        if !f.ends_with(" B") {
            format!("{f} ({n} B)")
        } else if n >= 1024 {
            format!("{} B ({:.1} KiB)", thousands(n), b / 1024.0)
        } else {
            f
        }
    } else {
        format!("{} B", sig(b, 6))
    }
}

/// A whole number as it is (`383`, `51,000`), anything else to four significant digits.
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        // |v| < 10^15: the digits of its integer part, as many significant digits as it has.
        let digits = v.abs().max(1.0).log10().floor() as usize + 1;
        sig(v, digits)
    } else {
        sig(v, 4)
    }
}

/// Seconds in a short unit: `1.234 s`, `12.345 ms`, `6.50 us`.
pub fn seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.2} us", s * 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table1_style() {
        assert_eq!(sig(4_226.165_91, 4), "4,226");
        assert_eq!(sig(12_678.497_7, 4), "12,680");
        assert_eq!(sig(1_920_000.0, 4), "1,920,000");
        assert_eq!(sig(15_039.16, 4), "15,040");
        assert_eq!(sig(1873.7036, 4), "1,874");
        assert_eq!(sig(411.3884, 4), "411.4");
        assert_eq!(sig(6.965, 4), "6.965");
        assert_eq!(sig(9999.6, 4), "10,000");
        assert_eq!(sig(0.012_345, 3), "0.0123");
        assert_eq!(sig(-512.83, 4), "-512.8");
        assert_eq!(sig(0.0, 4), "0");
        assert_eq!(exp(34_825.0, 4), "3.483E+04");
        assert_eq!(exp(7_918_582.28, 4), "7.919E+06");
        assert_eq!(exp(9852.45, 4), "9.852E+03");
        assert_eq!(exp(9.9996e5, 4), "1.000E+06");
        assert_eq!(exp(1.5e-7, 2), "1.5E-07");
        assert_eq!(exp(f64::NAN, 4), "NaN");
        assert_eq!(exp(0.0, 4), "0.000E+00");
    }

    #[test]
    fn byte_units() {
        assert_eq!(bytes(16_384), "16 KiB");
        assert_eq!(bytes(4 << 20), "4 MiB");
        assert_eq!(bytes(13_000), "13000 B");
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes_short(16_384), "16K");
        assert_eq!(bytes_short(4 << 20), "4M");
        assert_eq!(bytes_short(1 << 30), "1G");
        assert_eq!(bytes_short(1000), "1000");
        assert_eq!(bytes_detail(16_384.0), "16 KiB (16384 B)");
        assert_eq!(bytes_detail(13_000.0), "13,000 B (12.7 KiB)");
        assert_eq!(bytes_detail(512.0), "512 B");
        assert_eq!(bytes_detail(34_825.5), "34,825.5 B");
    }

    #[test]
    fn counts_numbers_and_durations() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(number(383.0), "383");
        assert_eq!(number(51_000.0), "51,000");
        assert_eq!(number(6.9654), "6.965");
        assert_eq!(seconds(1.5), "1.500 s");
        assert_eq!(seconds(0.012_345), "12.345 ms");
        assert_eq!(seconds(6.5e-6), "6.50 us");
    }
}
