//! Setup shared by the crash tests: a fresh pair in a temporary directory.

use std::path::{Path, PathBuf};

use tiercache_tica_live::{format, FormatOptions, PAGE};
use tiercache_tica_policy::Policy;

/// Format a pair in `dir` (RO-SSD, WO-SSD and a zeroed backing device of
/// `pages` pages) with `dram_pages` of DRAM and SSD files of `ssd_bytes`;
/// returns the paths of the RO-SSD, the WO-SSD and the backing device.
pub fn new_pair(
    dir: &Path,
    pages: u64,
    dram_pages: u64,
    ssd_bytes: u64,
) -> (PathBuf, PathBuf, PathBuf) {
    let p = |n: &str| dir.join(n);
    let (ro, wo, backing) = (p("ro.img"), p("wo.img"), p("backing.img"));
    std::fs::write(&backing, vec![0u8; (pages * PAGE) as usize]).unwrap();
    format(&FormatOptions {
        ro_ssd: ro.clone(),
        wo_ssd: wo.clone(),
        backing: backing.clone(),
        dram_bytes: dram_pages * PAGE,
        policy: Policy::Adaptive,
        create_size: Some(ssd_bytes),
        force: false,
        max_size: None,
    })
    .unwrap();
    (ro, wo, backing)
}
