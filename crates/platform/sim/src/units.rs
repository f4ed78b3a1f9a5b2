//! Sizes as users write them: `512B`, `4KiB`, `10GiB`, `1.5GB`, a number of
//! cache lines (`1000lines`), or a percentage of the trace footprint;
//! fractions (`10%` or `0.1`) and durations (`500ms`, `10s`, `2m`): the one
//! parser of each for every command.

use std::fmt;

/// A cache size before it is resolved against a line size and a footprint.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SizeSpec {
    Bytes(u64),
    /// A number of cache lines.
    Lines(u64),
    /// A share of the trace footprint, in percent.
    Percent(f64),
}

impl SizeSpec {
    /// Resolve to bytes given the line size and the trace footprint in bytes.
    pub fn bytes(self, line: u64, footprint: u64) -> u64 {
        match self {
            SizeSpec::Bytes(b) => b,
            SizeSpec::Lines(n) => n.saturating_mul(line),
            SizeSpec::Percent(p) => {
                let lines = ((footprint as f64 * p / 100.0) / line as f64).round() as u64;
                lines.max(1) * line
            }
        }
    }
}

impl fmt::Display for SizeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeSpec::Bytes(b) => f.write_str(&format_bytes(*b)),
            SizeSpec::Lines(n) => write!(f, "{n}lines"),
            SizeSpec::Percent(p) => write!(f, "{p}%"),
        }
    }
}

const UNITS: [(&str, u64); 19] = [
    ("b", 1),
    ("k", 1 << 10),
    ("kb", 1000),
    ("kib", 1 << 10),
    ("m", 1 << 20),
    ("mb", 1_000_000),
    ("mib", 1 << 20),
    ("g", 1 << 30),
    ("gb", 1_000_000_000),
    ("gib", 1 << 30),
    ("t", 1 << 40),
    ("tb", 1_000_000_000_000),
    ("tib", 1 << 40),
    ("p", 1 << 50),
    ("pb", 1_000_000_000_000_000),
    ("pib", 1 << 50),
    ("e", 1 << 60),
    ("eb", 1_000_000_000_000_000_000),
    ("eib", 1 << 60),
];

/// `v` bytes of `s` as a whole number of bytes, or why not (negative, too
/// large for 64 bits, a fraction of a byte). `min` is the smallest allowed.
fn whole_bytes(s: &str, v: f64, min: u64) -> Result<u64, String> {
    if v.is_nan() || v < 0.0 || (v == 0.0 && min > 0) {
        return Err(format!("invalid size '{s}': must be positive"));
    }
    // 2^64 bytes (16 EiB) and more do not fit.
    if v >= u64::MAX as f64 {
        return Err(format!("invalid size '{s}': too large (at most 16 EiB)"));
    }
    if v.fract() != 0.0 {
        return Err(format!("invalid size '{s}': not a whole number of bytes"));
    }
    if (v as u64) < min {
        return Err(format!("invalid size '{s}': must be at least {min} byte"));
    }
    Ok(v as u64)
}

/// Whether `t` is a negative number (with or without a unit), refused with
/// a clear message instead of "not understood".
fn negative(s: &str, t: &str) -> Result<(), String> {
    if t.starts_with('-') && t[1..].starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return Err(format!("invalid size '{s}': must be positive"));
    }
    Ok(())
}

/// The units a cache size may carry, for the messages that list them.
const SIZE_UNITS: &str = "a number with a unit such as 512B, 4KiB, 10GiB, 1.5GB; a number of cache lines such as 1000lines; or a percentage of the trace footprint such as 10%";

/// Parse a cache size: bytes with a unit, lines (`1000lines`) or a
/// percentage of the footprint. A bare number is refused: it is bytes in
/// `format --size` and was lines here, so it would mean two things.
pub fn parse_size(s: &str) -> Result<SizeSpec, String> {
    let t = s.trim();
    let err = || format!("invalid size '{s}' (allowed: {SIZE_UNITS})");
    negative(s, t)?;
    if let Some(p) = t.strip_suffix('%') {
        let v: f64 = p.trim().parse().map_err(|_| err())?;
        if !(v > 0.0 && v.is_finite()) {
            return Err(format!("invalid size '{s}': a percentage must be above 0"));
        }
        return Ok(SizeSpec::Percent(v));
    }
    if let Ok(n) = t.parse::<u64>() {
        return Err(format!(
            "invalid size '{s}': a number needs a unit here ({n}lines for {n} cache lines, {n}B for bytes; allowed: {SIZE_UNITS})"
        ));
    }
    let lower = t.to_ascii_lowercase();
    if let Some(n) = lower
        .strip_suffix("lines")
        .or_else(|| lower.strip_suffix("line"))
    {
        let n: u64 = n.trim().parse().map_err(|_| err())?;
        if n == 0 {
            return Err(format!(
                "invalid size '{s}': zero (allowed: at least one line)"
            ));
        }
        return Ok(SizeSpec::Lines(n));
    }
    let split = t.find(|c: char| c.is_ascii_alphabetic()).ok_or_else(err)?;
    let (num, unit) = t.split_at(split);
    let v: f64 = num.trim().parse().map_err(|_| err())?;
    let unit = unit.trim().to_ascii_lowercase();
    let mul = UNITS
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, m)| *m)
        .ok_or_else(err)?;
    Ok(SizeSpec::Bytes(whole_bytes(s, v * mul as f64, 1)?))
}

/// Parse a size that must be in bytes (line and sub-block sizes): a number
/// with a unit, or a plain integer number of bytes. Zero is refused.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let b = parse_byte_count(s)?;
    if b == 0 {
        return Err(format!("invalid size '{s}': must be at least 1 byte"));
    }
    Ok(b)
}

/// Parse a byte offset: like [`parse_bytes`], but 0 is allowed (`0`, `0B`).
pub fn parse_offset(s: &str) -> Result<u64, String> {
    parse_byte_count(s)
}

/// A whole number of bytes, with or without a unit (a plain integer is bytes).
fn parse_byte_count(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let err = || {
        format!("invalid size '{s}' (allowed: a number of bytes, with a unit such as 512B, 4KiB, 10GiB, 1.5GB or without one)")
    };
    negative(s, t)?;
    if t.ends_with('%') {
        return Err(format!(
            "invalid size '{s}': a percentage is not allowed here (allowed: a number of bytes such as 4KiB)"
        ));
    }
    if let Ok(n) = t.parse::<u64>() {
        return Ok(n);
    }
    let split = t.find(|c: char| c.is_ascii_alphabetic()).ok_or_else(err)?;
    let (num, unit) = t.split_at(split);
    let v: f64 = num.trim().parse().map_err(|_| err())?;
    let unit = unit.trim().to_ascii_lowercase();
    let mul = UNITS
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, m)| *m)
        .ok_or_else(err)?;
    if !v.is_finite() {
        return Err(err());
    }
    whole_bytes(s, v * mul as f64, 0)
}

/// Parse a fraction the way every fraction option takes it: a percentage
/// (`10%`, `12.5%`) or a share from 0 to 1 (`0.1`). Refused outside 0-100 %.
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => t.parse::<f64>(),
    };
    check_fraction(v.unwrap_or(f64::NAN), s)
}

/// `x` if it is a share from 0 to 1, else the one message every fraction
/// option gives (naming the value as the user wrote it, `shown`).
pub fn check_fraction(x: f64, shown: &str) -> Result<f64, String> {
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!(
            "{shown} is not a share (allowed: a percentage from 0% to 100% such as 10%, or a share from 0.0 to 1.0 such as 0.1)"
        ))
    }
}

/// A duration with a unit: `10s`, `500ms`, `2m`, `1h` (a plain number is seconds).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (examples: 10s, 500ms, 2m)"))?;
    let secs = match unit.trim() {
        "" | "s" => v,
        "ms" => v / 1000.0,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        u => return Err(format!("'{s}': unknown unit '{u}' (allowed: ms, s, m, h)")),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// A duration in whole seconds (`60s`, `2m`; a plain number is seconds), for
/// options that count seconds.
pub fn parse_seconds(s: &str) -> Result<u64, String> {
    let d = parse_duration(s)?;
    if d.subsec_nanos() != 0 {
        return Err(format!("'{s}' is not a whole number of seconds"));
    }
    Ok(d.as_secs())
}

/// Human-readable binary size: `4 KiB`, `1.5 GiB`.
pub fn format_bytes(b: u64) -> String {
    const N: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < N.len() {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{v} {}", N[i])
    } else {
        format!("{v:.2} {}", N[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_units_lines_and_percentages() {
        assert_eq!(parse_size("512B"), Ok(SizeSpec::Bytes(512)));
        assert_eq!(parse_size("4KiB"), Ok(SizeSpec::Bytes(4096)));
        assert_eq!(parse_size("4k"), Ok(SizeSpec::Bytes(4096)));
        assert_eq!(parse_size("10GiB"), Ok(SizeSpec::Bytes(10 << 30)));
        assert_eq!(parse_size("1.5GB"), Ok(SizeSpec::Bytes(1_500_000_000)));
        assert_eq!(parse_size("1000lines"), Ok(SizeSpec::Lines(1000)));
        assert_eq!(parse_size("1 line"), Ok(SizeSpec::Lines(1)));
        assert_eq!(parse_size(" 20 Lines "), Ok(SizeSpec::Lines(20)));
        assert_eq!(parse_size("10%"), Ok(SizeSpec::Percent(10.0)));
        assert!(parse_size("0lines").unwrap_err().contains("zero"));
        assert!(parse_size("1.5lines").unwrap_err().contains("allowed"));
        // What a spec prints parses back to the same spec.
        for spec in [
            SizeSpec::Lines(7),
            SizeSpec::Percent(2.5),
            SizeSpec::Bytes(4096),
        ] {
            assert_eq!(parse_size(&spec.to_string().replace(' ', "")), Ok(spec));
        }
        // A bare number is refused (it is bytes in `format --size`), and the
        // message gives both spellings it could have meant.
        for bare in ["1000", "0", " 64 "] {
            let e = parse_size(bare).unwrap_err();
            assert!(
                e.contains("lines for") && e.contains("B for bytes"),
                "{bare}: {e}"
            );
        }
        // Byte counts: a plain integer is bytes, and the error says so.
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("0").unwrap_err().contains("at least 1 byte"));
        assert!(!parse_bytes("x").unwrap_err().contains("line"));
        assert!(parse_bytes("5%").is_err());
        // Offsets may be 0.
        assert_eq!(parse_offset("0"), Ok(0));
        assert_eq!(parse_offset("0B"), Ok(0));
        assert_eq!(parse_offset("1MiB"), Ok(1 << 20));
        assert!(parse_size("12XB").unwrap_err().contains("allowed"));
        assert!(parse_size("-3%").is_err());
        assert!(parse_size("0.3B").is_err());
        // 10% of a 1 MiB footprint with 4 KiB lines: 25.6 lines -> 26 lines.
        assert_eq!(SizeSpec::Percent(10.0).bytes(4096, 1 << 20), 26 * 4096);
        assert_eq!(SizeSpec::Lines(3).bytes(512, 0), 1536);
        assert_eq!(format_bytes(4096), "4 KiB");
        assert_eq!(format_bytes(1536 << 20), "1.50 GiB");
    }

    #[test]
    fn petabytes_negative_sizes_and_overflow_say_what_is_wrong() {
        assert_eq!(parse_bytes("2PiB"), Ok(2 << 50));
        assert_eq!(parse_bytes("1PB"), Ok(1_000_000_000_000_000));
        assert_eq!(parse_size("3PiB"), Ok(SizeSpec::Bytes(3 << 50)));
        assert_eq!(parse_bytes("1EiB"), Ok(1 << 60));
        assert_eq!(parse_bytes("15EB"), Ok(15_000_000_000_000_000_000));
        for big in ["16EiB", "20EB", "99999EiB"] {
            assert!(parse_bytes(big).unwrap_err().contains("too large"), "{big}");
            assert!(parse_size(big).unwrap_err().contains("too large"), "{big}");
        }
        for neg in ["-1", "-1GiB", "-0.5MiB", "-3%"] {
            assert!(
                parse_bytes(neg).unwrap_err().contains("must be positive"),
                "{neg}"
            );
            assert!(
                parse_size(neg).unwrap_err().contains("must be positive"),
                "{neg}"
            );
        }
        assert!(parse_offset("-4KiB")
            .unwrap_err()
            .contains("must be positive"));
        assert!(parse_bytes("0GiB").unwrap_err().contains("at least 1 byte"));
    }

    #[test]
    fn fractions_as_percentages_or_shares() {
        assert_eq!(parse_fraction("10%"), Ok(0.1));
        assert_eq!(parse_fraction(" 12.5 % "), Ok(0.125));
        assert_eq!(parse_fraction("0.8"), Ok(0.8));
        assert_eq!(parse_fraction("0"), Ok(0.0));
        assert_eq!(parse_fraction("100%"), Ok(1.0));
        for bad in ["101%", "1.5", "-0.1", "-5%", "high", "", "%", "nan", "NaN%"] {
            let e = parse_fraction(bad).unwrap_err();
            assert!(e.contains("not a share") && e.contains("10%"), "{bad}: {e}");
        }
    }
}
