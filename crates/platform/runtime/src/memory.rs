//! How much RAM a cache's in-memory metadata may take: the share of the
//! machine's memory `format` and `serve` allow ([`METADATA_RAM_SHARE`]), and
//! the one-line refusal when a cache would need more.
//!
//! Each design states its own bound on metadata bytes per cached line; this
//! module only says how much of the machine that bound may use.

/// Share of MemTotal a cache's metadata may take (the rest is for the page
/// cache, the data buffers in flight and everything else on the machine).
pub const METADATA_RAM_SHARE: f64 = 0.5;

/// Environment variable that overrides the allowance (plain bytes): for a
/// machine whose other uses of RAM are known, and for tests independent of
/// the machine's RAM.
pub const LIMIT_ENV: &str = "TIERCACHE_METADATA_MEMORY_LIMIT";

/// MemTotal from /proc/meminfo, in bytes (`None` where it cannot be read).
pub fn mem_total() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Bytes of metadata memory a cache may take: [`LIMIT_ENV`] when set, else
/// [`METADATA_RAM_SHARE`] of MemTotal (`None`: unknown, nothing is refused).
pub fn metadata_allowance() -> Option<u64> {
    if let Some(v) = std::env::var_os(LIMIT_ENV) {
        if let Some(n) = v.to_str().and_then(|s| s.trim().parse::<u64>().ok()) {
            return Some(n);
        }
    }
    mem_total().map(|t| (t as f64 * METADATA_RAM_SHARE) as u64)
}

/// Where the allowance comes from, for messages: "half of this machine's 24 GiB of RAM".
fn allowance_source() -> String {
    if std::env::var_os(LIMIT_ENV).is_some() {
        return format!("set by {LIMIT_ENV}");
    }
    let share = if METADATA_RAM_SHARE == 0.5 {
        "half".to_string()
    } else {
        format!("{:.0}%", METADATA_RAM_SHARE * 100.0)
    };
    match mem_total() {
        Some(t) => format!("{share} of this machine's {} of RAM", human_bytes(t)),
        None => format!("{share} of this machine's RAM"),
    }
}

/// The one-line refusal: "<what> needs <need> of metadata memory, more than
/// the <allowance> allowed (half of this machine's <MemTotal> of RAM); <fix>".
pub fn refusal(what: &str, need: u64, allowance: u64, fix: &str) -> String {
    format!(
        "{what} needs {} of metadata memory, more than the {} allowed ({}); {fix}",
        human_bytes(need),
        human_bytes(allowance),
        allowance_source()
    )
}

/// Bytes with a binary unit and at most one decimal: "12 GiB", "1.5 TiB", "48 B".
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    let s = format!("{v:.1}");
    let s = s.strip_suffix(".0").unwrap_or(&s);
    format!("{s} {}", UNITS[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_a_person_writes_them() {
        assert_eq!(human_bytes(48), "48 B");
        assert_eq!(human_bytes(12 << 30), "12 GiB");
        assert_eq!(human_bytes(3 << 39), "1.5 TiB");
    }

    #[test]
    fn meminfo_is_read_and_the_refusal_is_one_line() {
        let t = mem_total().expect("/proc/meminfo has MemTotal");
        assert!(t > 1 << 20);
        let m = refusal(
            "a 1 PiB cache with 4 KiB lines",
            1 << 50,
            1 << 30,
            "--line-size 1MiB would fit",
        );
        assert!(!m.contains('\n'));
        assert!(
            m.contains("needs 1 PiB of metadata memory, more than the 1 GiB allowed"),
            "{m}"
        );
    }
}
