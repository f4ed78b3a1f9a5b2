//! `format` refuses a device holding a real filesystem (made by mkfs.ext4
//! and mkfs.xfs; skipped when the tool is missing) unless forced, and says
//! which filesystem it found.

mod common;

use std::fs::OpenOptions;
use std::process::Command;

use common::*;
use tiercache_store::{format, open};

fn mkfs_refusal(tool: &str, args: &[&str], size: u64, expect: &str) {
    if Command::new(tool).arg("-V").output().is_err() {
        eprintln!("SKIP: {tool} is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = temp_file(&dir, "fs.img", size, 0);
    let out = Command::new(tool).args(args).arg(&img).output().unwrap();
    assert!(
        out.status.success(),
        "{tool}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if Command::new("blkid").arg("-V").output().is_ok() {
        let t = tiercache_store::blkid_probe(&img).unwrap_or_default();
        assert!(
            expect.to_lowercase().starts_with(&t.to_lowercase()) && !t.is_empty(),
            "blkid says {t:?}"
        );
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&img)
        .unwrap();
    let e = format(&f, &params(65536, 4096, None), false)
        .unwrap_err()
        .to_string();
    assert!(e.contains(expect) && e.contains("--force"), "{e}");
    // With force it formats, and the result opens.
    format(&f, &params(65536, 4096, None), true).unwrap();
    assert!(open(&f, &backing()).is_ok());
}

#[test]
fn format_refuses_a_real_ext4_image() {
    mkfs_refusal("mkfs.ext4", &["-F", "-q"], 64 << 20, "ext4 filesystem");
}

#[test]
fn format_refuses_a_real_xfs_image() {
    mkfs_refusal("mkfs.xfs", &["-f", "-q"], 320 << 20, "XFS filesystem");
}
