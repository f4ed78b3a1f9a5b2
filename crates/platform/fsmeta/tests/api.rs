//! The public API on freshly made (unmounted) images: report format,
//! partition offsets, the `ClassSource` contract, and error messages.

mod common;

use std::path::Path;

use common::*;
use tiercache_block::Class;
use tiercache_fsmeta::{classify_image, ClassSource, FsClassifier, FsMetaError, HintOnly, Layout};

fn ext4_image(dir: &Path) -> Option<std::path::PathBuf> {
    if let Some(why) = missing_tools(&["mkfs.ext4"]) {
        eprintln!("SKIP: {why}");
        return None;
    }
    // Populated without mounting (mkfs -d), so it has directories and files.
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    for i in 0..300 {
        std::fs::write(
            tree.join(format!("a/b/file-with-a-long-name-{i}")),
            vec![b'x'; i * 37],
        )
        .unwrap();
    }
    let img = dir.join("fs.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    run(std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-d"])
        .arg(&tree)
        .arg(&img));
    Some(img)
}

#[test]
fn json_report_has_exactly_the_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = ext4_image(dir.path()) else {
        return;
    };
    let report = classify_image(&img, 0).unwrap();
    let v: serde_json::Value = serde_json::to_value(&report).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut expected = vec!["filesystem", "block_size", "blocks", "metadata", "journal"];
    expected.sort_unstable();
    let mut got = keys.clone();
    got.sort_unstable();
    assert_eq!(got, expected);
    assert_eq!(v["filesystem"], "ext4");
    assert_eq!(v["block_size"], 4096);
    assert_eq!(v["blocks"], 16384);
    // Field order as documented (serde_json keeps struct order in strings).
    let s = serde_json::to_string(&report).unwrap();
    assert!(
        s.starts_with(r#"{"filesystem":"ext4","block_size":4096,"blocks":16384,"metadata":[["#),
        "{s}"
    );
    // Runs are sorted, disjoint, inside the fs; block 0 (superblock) is metadata.
    for runs in [&report.metadata, &report.journal] {
        for w in runs.windows(2) {
            assert!(w[0][0] + w[0][1] < w[1][0]);
        }
        assert!(runs
            .iter()
            .all(|r| r[1] > 0 && r[0] + r[1] <= report.blocks));
    }
    assert_eq!(report.class_of(0), Class::Metadata);
    // The journal has as many blocks as dumpe2fs says.
    let dump = run(std::process::Command::new("dumpe2fs").arg("-h").arg(&img));
    let line = dump
        .lines()
        .find(|l| l.starts_with("Total journal blocks:"))
        .expect("dumpe2fs journal size");
    let jblocks: u64 = line.split(':').nth(1).unwrap().trim().parse().unwrap();
    assert_eq!(report.journal_blocks(), jblocks);
    // Human output carries the same counts.
    let text = report.to_string();
    assert!(
        text.starts_with("filesystem: ext4 (16384 blocks of 4096 bytes)"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "journal:    {:>12} blocks",
            report.journal_blocks()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "metadata:   {:>12} blocks",
            report.metadata_blocks()
        )),
        "{text}"
    );
}

#[test]
fn partition_offset_gives_the_same_classification() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = ext4_image(dir.path()) else {
        return;
    };
    let mut shifted = vec![0u8; 1 << 20];
    shifted.extend(std::fs::read(&img).unwrap());
    let part = dir.path().join("disk.img");
    std::fs::write(&part, shifted).unwrap();
    assert_eq!(
        classify_image(&part, 1 << 20).unwrap(),
        classify_image(&img, 0).unwrap()
    );
    match classify_image(&part, 0) {
        Err(e @ FsMetaError::UnknownFilesystem { .. }) => {
            assert!(e.to_string().contains("partition offset"))
        }
        other => panic!("expected UnknownFilesystem, got {other:?}"),
    }
}

#[test]
fn class_source_layout_sniff_and_hints() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = ext4_image(dir.path()) else {
        return;
    };
    let report = classify_image(&img, 0).unwrap();
    let file = std::fs::File::open(&img).unwrap();
    let mut c = FsClassifier::attach_verified(file, 0).unwrap();
    let layout: Layout = c.layout().clone();
    let bs = layout.block_size as u64;
    let read = |b: u64| {
        let mut v = vec![0u8; bs as usize];
        std::os::unix::fs::FileExt::read_exact_at(
            &std::fs::File::open(&img).unwrap(),
            &mut v,
            b * bs,
        )
        .unwrap();
        v
    };
    let journal = layout.journal.runs()[0].0;
    let static_meta = layout.metadata.runs()[0].0;
    // A dynamic metadata block (directory) found by content, not layout.
    let dynamic = (0..report.blocks)
        .find(|&b| report.class_of(b) == Class::Metadata && layout.class_of(b).is_none())
        .expect("a directory or extent block");
    let data = (0..report.blocks)
        .find(|&b| report.class_of(b) == Class::Data && read(b).iter().any(|&x| x != 0))
        .expect("a file data block");

    // No hint: layout, then content.
    assert_eq!(c.classify(journal * bs, bs, None, None), Class::Journal);
    assert_eq!(
        c.classify(static_meta * bs, bs, None, None),
        Class::Metadata
    );
    assert_eq!(
        c.classify(dynamic * bs, bs, Some(&read(dynamic)), None),
        Class::Metadata
    );
    assert_eq!(
        c.classify(dynamic * bs, bs, None, None),
        Class::Data,
        "without content only the layout speaks"
    );
    assert_eq!(
        c.classify(data * bs, bs, Some(&read(data)), None),
        Class::Data
    );
    // Re-classified on every write: the freed directory block now holds zeros.
    assert_eq!(
        c.classify(dynamic * bs, bs, Some(&vec![0; bs as usize]), None),
        Class::Data
    );
    // A multi-block request containing metadata is metadata.
    let mut two = read(data);
    two.extend(read(dynamic));
    if dynamic == data + 1 {
        assert_eq!(
            c.classify(data * bs, 2 * bs, Some(&two), None),
            Class::Metadata
        );
    }
    // The transport's hint wins; a Metadata hint on the journal is Journal.
    assert_eq!(
        c.classify(static_meta * bs, bs, None, Some(Class::Data)),
        Class::Data
    );
    assert_eq!(
        c.classify(data * bs, bs, Some(&read(data)), Some(Class::Metadata)),
        Class::Metadata
    );
    assert_eq!(
        c.classify(journal * bs, bs, None, Some(Class::Metadata)),
        Class::Journal
    );
    assert_eq!(
        HintOnly.classify(0, 4096, None, Some(Class::Metadata)),
        Class::Metadata
    );
    assert_eq!(HintOnly.classify(0, 4096, None, None), Class::Data);
    // Requests before the partition or past the fs end are data.
    assert_eq!(c.classify(report.blocks * bs, bs, None, None), Class::Data);
    assert_eq!(c.reparse_count(), 0, "ordinary writes do not re-parse");
}

#[test]
fn bad_superblocks_are_rejected_with_reasons() {
    let zeros = vec![0u8; 1 << 16];
    assert!(matches!(
        Layout::detect(&zeros, 0),
        Err(FsMetaError::UnknownFilesystem { offset: 0 })
    ));
    // ext4 magic with an impossible block size.
    let mut sb = vec![0u8; 1 << 16];
    sb[1024 + 0x38] = 0x53;
    sb[1024 + 0x39] = 0xEF;
    sb[1024 + 0x18] = 9;
    let e = Layout::detect(&sb, 0).unwrap_err().to_string();
    assert!(
        e.contains("s_log_block_size 9") && e.contains("1 KiB to 64 KiB"),
        "{e}"
    );
    // XFS magic with a bad block size.
    let mut x = vec![0u8; 1 << 16];
    x[..4].copy_from_slice(b"XFSB");
    x[4..8].copy_from_slice(&3000u32.to_be_bytes());
    let e = Layout::detect(&x, 0).unwrap_err().to_string();
    assert!(e.contains("sb_blocksize 3000"), "{e}");
    // Too short for any superblock: unknown, not a panic.
    assert!(matches!(
        Layout::detect(&vec![0u8; 100], 0),
        Err(FsMetaError::UnknownFilesystem { .. })
    ));
    // A superblock whose filesystem is larger than the device: rejected.
    let dir = tempfile::tempdir().unwrap();
    if let Some(img) = ext4_image(dir.path()) {
        let bytes = std::fs::read(&img).unwrap();
        let e = Layout::detect(&bytes[..8 << 20].to_vec(), 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("extends past the end"), "{e}");
    }
}

#[test]
fn loop_mount_guard_cleans_up_when_a_test_panics() {
    if let Some(why) =
        missing_tools(&["mkfs.ext4", "mount", "umount", "losetup"]).or_else(missing_loop)
    {
        eprintln!("SKIP: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = make_image(dir.path(), "fs.img", 32, &["mkfs.ext4", "-q", "-F"]);
    let mnt_dir = dir.path().join("mnt");
    let result = std::panic::catch_unwind(|| {
        let Ok(m) = LoopMount::new(&img, &mnt_dir) else {
            return false;
        };
        std::fs::write(m.dir.join("f"), b"x").unwrap();
        panic!("simulated test failure while mounted");
    });
    if matches!(result, Ok(false)) {
        eprintln!("SKIP: mount failed");
        return;
    }
    assert!(result.is_err());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains(mnt_dir.to_str().unwrap()), "still mounted");
    let loops = run(std::process::Command::new("losetup").arg("-j").arg(&img));
    assert!(loops.trim().is_empty(), "loop device left: {loops}");
}
