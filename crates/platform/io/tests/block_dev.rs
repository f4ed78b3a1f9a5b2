//! FileDev on a block device: a loop device over a scratch file (skipped
//! when losetup cannot attach one): its size, unaligned I/O with and without
//! O_DIRECT, and discard.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_same, random_bytes, rng, scratch_dir, BUFFERED, DIRECT};
use tiercache_io::{BlockDev, FileDev};

/// A loop device over a scratch file, detached on drop.
struct Loop {
    dev: PathBuf,
}

impl Loop {
    fn attach(file: &Path) -> Option<Loop> {
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(file)
            .output();
        match out {
            Ok(o) if o.status.success() => {
                let dev = String::from_utf8_lossy(&o.stdout).trim().to_string();
                Some(Loop { dev: dev.into() })
            }
            Ok(o) => {
                eprintln!(
                    "SKIP block device test: losetup failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIP block device test: cannot run losetup: {e}");
                None
            }
        }
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

#[test]
fn block_device_size_io_and_discard() {
    let dir = scratch_dir();
    let backing = dir.path().join("loop-backing.img");
    let len: u64 = 4 << 20;
    let f = std::fs::File::create(&backing).unwrap();
    f.set_len(len).unwrap();
    drop(f);
    let Some(lo) = Loop::attach(&backing) else {
        return;
    };
    for options in [BUFFERED, DIRECT] {
        let dev = FileDev::open(&lo.dev, options).unwrap();
        assert!(dev.is_block_device());
        // BLKGETSIZE64 against the size of the backing file.
        assert_eq!(dev.len(), len);
        let mut r = rng(7);
        let data = random_bytes(&mut r, 70_000);
        dev.write_at(&data, 1234).unwrap();
        dev.flush().unwrap();
        let mut out = vec![0u8; data.len()];
        dev.read_at(&mut out, 1234).unwrap();
        assert_same(&out, &data, "loop device round trip");
        // Discard of an unaligned range: whole 512-byte sectors inside it are
        // discarded; the partial sectors at both ends keep their data.
        dev.trim(1234, 60_000).unwrap();
        dev.read_at(&mut out, 1234).unwrap();
        let first = 1536 - 1234; // the first whole sector starts at 1536
        let last = (1234 + 60_000) / 512 * 512 - 1234;
        assert_same(&out[..first], &data[..first], "partial head sector kept");
        assert_same(
            &out[last..],
            &data[last..],
            "partial tail sector and beyond kept",
        );
        let discarded = &out[first..last];
        if discarded.iter().all(|&b| b == 0) {
            // Loop devices implement discard by punching holes: zeros.
        } else {
            assert_same(
                discarded,
                &data[first..last],
                "discard is all-or-nothing per range",
            );
            eprintln!("note: this loop device ignores discards");
        }
    }
}
