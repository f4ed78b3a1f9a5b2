//! Recognises data that `format` must not overwrite without `--force`:
//! an existing tiercache store, filesystems, partition tables, LUKS, LVM and
//! swap. A small built-in check of well-known signatures (the same offsets
//! libblkid probes), so it works without external tools.

use crate::device::MetaDevice;
use crate::error::{Result, StoreError};
use crate::layout::{BLOCK, SUPERBLOCK_COPY};
use crate::superblock::{Superblock, MAGIC};

/// How much of the device start the probes need (btrfs's superblock is at 64 KiB).
const PROBE_BYTES: u64 = 68 << 10;

/// Describes what the device holds, or `None` if no known signature is found.
pub fn detect_foreign(dev: &impl MetaDevice) -> Result<Option<String>> {
    let len = dev
        .len()
        .map_err(|e| StoreError::io("sizing the cache device", e))?;
    let n = len.min(PROBE_BYTES) as usize;
    let mut buf = vec![0u8; n];
    dev.read_at(&mut buf, 0)
        .map_err(|e| StoreError::io("reading the cache device start", e))?;
    let at = |off: usize, sig: &[u8]| buf.get(off..off + sig.len()) == Some(sig);
    let mut found = Vec::new();
    for off in [0usize, SUPERBLOCK_COPY as usize] {
        if at(off, MAGIC) {
            let what = match buf.get(off..off + BLOCK as usize).map(Superblock::decode) {
                Some(Ok(sb)) => format!(
                    "an existing tiercache cache (uuid {}, backing {})",
                    sb.uuid, sb.backing.path
                ),
                _ => "a (damaged or other-version) tiercache superblock".to_string(),
            };
            found.push(what);
            break;
        }
    }
    if at(1024 + 56, &[0x53, 0xEF]) {
        // ext2/3/4: s_magic 0xEF53; s_feature_compat bit 2 = has_journal, incompat bit 6 = extents.
        let compat = buf.get(1024 + 92).copied().unwrap_or(0);
        let incompat = buf.get(1024 + 96).copied().unwrap_or(0);
        let kind = if incompat & 0x40 != 0 {
            "ext4"
        } else if compat & 0x04 != 0 {
            "ext3"
        } else {
            "ext2"
        };
        found.push(format!("an {kind} filesystem"));
    }
    if at(0, b"XFSB") {
        found.push("an XFS filesystem".into());
    }
    if at(0x10040, b"_BHRfS_M") {
        found.push("a btrfs filesystem".into());
    }
    if at(0, b"LUKS\xba\xbe") || at(0, b"SKUL\xba\xbe") {
        found.push("a LUKS encrypted volume".into());
    }
    if at(512, b"EFI PART") || at(4096, b"EFI PART") {
        found.push("a GPT partition table".into());
    } else if at(510, &[0x55, 0xAA]) {
        found.push("an MBR partition table or boot sector".into());
    }
    if at(512, b"LABELONE") || at(24, b"LVM2 001") {
        found.push("an LVM physical volume".into());
    }
    if at(4096 - 10, b"SWAPSPACE2") || at(4096 - 10, b"SWAP-SPACE") {
        found.push("a swap area".into());
    }
    Ok((!found.is_empty()).then(|| found.join(" and ")))
}

/// Asks `blkid -p` (low-level probe, no cache) what `path` holds, as
/// "TYPE" or "PTTYPE partition table"; `None` if blkid is missing or finds
/// nothing. A complement to [`detect_foreign`] for the many signatures
/// libblkid knows (vfat, ntfs, zfs, bcache, ...), for callers that have a path.
pub fn blkid_probe(path: &std::path::Path) -> Option<String> {
    let out = std::process::Command::new("blkid")
        .args(["-p", "-o", "export"])
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_string)
    };
    match (field("TYPE"), field("PTTYPE")) {
        (Some(t), _) => Some(t),
        (None, Some(p)) => Some(format!("{p} partition table")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crash_sim::MemDevice;

    #[test]
    fn signatures_are_recognised() {
        let cases: &[(usize, &[u8], &str)] = &[
            (0, b"XFSB", "XFS"),
            (0x10040, b"_BHRfS_M", "btrfs"),
            (0, b"LUKS\xba\xbe", "LUKS"),
            (512, b"EFI PART", "GPT"),
            (510, &[0x55, 0xAA], "MBR"),
            (1080, &[0x53, 0xEF], "ext2"),
            (4086, b"SWAPSPACE2", "swap"),
        ];
        for &(off, sig, name) in cases {
            let dev = MemDevice::new(1 << 20);
            dev.write_raw(off as u64, sig);
            let found = detect_foreign(&dev).unwrap().unwrap_or_default();
            assert!(found.contains(name), "{name}: {found}");
        }
        assert_eq!(detect_foreign(&MemDevice::new(1 << 20)).unwrap(), None);
    }
}
