//! How much host memory a design's metadata may take: a share of the
//! machine's RAM, so that `format` refuses a device whose map would not fit
//! (instead of an allocation failure when it is served) and `serve` refuses
//! one formatted on a larger machine with a clear line.

/// Share of the machine's RAM (`MemTotal`) one device's metadata may take.
pub const METADATA_RAM_SHARE: f64 = 0.5;

/// Environment variable that replaces the allowance (plain bytes): tests use
/// it to make a refusal independent of the machine they run on.
pub const ALLOWANCE_ENV: &str = "TIERCACHE_METADATA_MEMORY_LIMIT";

/// The machine's RAM in bytes (`MemTotal` of `/proc/meminfo`), if known.
pub fn mem_total() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_total(&s)
}

fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line
        .trim_start_matches("MemTotal:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// Bytes of metadata memory one device may take: [`METADATA_RAM_SHARE`] of
/// the RAM, or [`ALLOWANCE_ENV`] when set; `None` when neither is known
/// (no limit is enforced then).
pub fn metadata_allowance() -> Option<u64> {
    if let Some(v) = std::env::var(ALLOWANCE_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
    {
        return Some(v);
    }
    mem_total().map(|m| (m as f64 * METADATA_RAM_SHARE) as u64)
}

/// Where the allowance comes from, for a refusal.
fn allowance_source() -> String {
    if std::env::var(ALLOWANCE_ENV).is_ok() {
        format!("set by {ALLOWANCE_ENV}")
    } else {
        match mem_total() {
            Some(m) => format!(
                "{:.0} % of this machine's {} of RAM",
                METADATA_RAM_SHARE * 100.0,
                human(m)
            ),
            None => "of this machine's RAM".into(),
        }
    }
}

/// The one-line refusal: `what` needs `need` bytes of metadata memory, more
/// than `allowance`; `fix` says which parameters would fit.
pub fn refusal(what: &str, need: u64, allowance: u64, fix: &str) -> String {
    format!(
        "{what} needs {} of metadata memory, more than the {} allowed ({}); {fix}",
        human(need),
        human(allowance),
        allowance_source()
    )
}

/// `Err(refusal)` when `need` exceeds the allowance.
pub fn check_allowance(
    what: &str,
    need: u64,
    fix: impl FnOnce(u64) -> String,
) -> Result<(), String> {
    match metadata_allowance() {
        Some(a) if need > a => Err(refusal(what, need, a, &fix(a))),
        _ => Ok(()),
    }
}

/// Bytes in binary units with one decimal (`12.0 GiB`).
pub fn human(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_total_and_formats() {
        let m = "MemFree:  10 kB\nMemTotal:       24576000 kB\nSwap: 0 kB\n";
        assert_eq!(parse_mem_total(m), Some(24576000 * 1024));
        assert_eq!(parse_mem_total("nothing"), None);
        assert!(mem_total().is_some_and(|m| m > 0));
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 30), "3.0 GiB");
        let r = refusal("a cache", 40 << 30, 12 << 30, "use less");
        assert!(r.starts_with(
            "a cache needs 40.0 GiB of metadata memory, more than the 12.0 GiB allowed ("
        ));
        assert!(r.ends_with("; use less") && !r.contains('\n'), "{r}");
    }
}
