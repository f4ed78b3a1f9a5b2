//! Re-parse on resize: replay the block writes of an offline `resize2fs`
//! through the classifier and check that its layout ends up equal to a
//! fresh parse of the grown filesystem (which the real-image tests compare
//! with dumpe2fs).

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use tiercache_fsmeta::{ClassSource, FsClassifier, Layout, ReadAt};

#[derive(Clone)]
struct Mem(Rc<RefCell<Vec<u8>>>);

impl ReadAt for Mem {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.borrow().as_slice().read_at(offset, buf)
    }
}

fn replay(ascending: bool) {
    if let Some(why) = missing_tools(&["mkfs.ext4", "resize2fs"]) {
        eprintln!("SKIP resize: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(96 << 20)
        .unwrap();
    // 1 KiB blocks: 8 MiB groups, so growing 48 -> 96 MiB adds 6 groups.
    run(std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "1024"])
        .arg(&img)
        .arg("49152"));
    let old = std::fs::read(&img).unwrap();
    run(std::process::Command::new("resize2fs")
        .arg("-f")
        .arg(&img)
        .arg("98304")
        .stderr(std::process::Stdio::null()));
    let new = std::fs::read(&img).unwrap();
    let expected = Layout::detect(&new, 0).unwrap();

    let dev = Mem(Rc::new(RefCell::new(old)));
    let mut c = FsClassifier::attach(dev.clone(), 0).unwrap();
    assert_ne!(c.layout().blocks, expected.blocks);
    let bs = 1024usize;
    let mut changed: Vec<usize> = (0..new.len() / bs)
        .filter(|&b| dev.0.borrow()[b * bs..(b + 1) * bs] != new[b * bs..(b + 1) * bs])
        .collect();
    if !ascending {
        changed.reverse();
    }
    for b in &changed {
        let data = &new[b * bs..(b + 1) * bs];
        c.classify((b * bs) as u64, bs as u64, Some(data), None);
        dev.0.borrow_mut()[b * bs..(b + 1) * bs].copy_from_slice(data);
    }
    eprintln!(
        "resize replay ({}): {} blocks written, {} re-parses",
        if ascending { "ascending" } else { "descending" },
        changed.len(),
        c.reparse_count()
    );
    assert!(c.reparse_count() >= 1);
    assert_eq!(c.layout().blocks, expected.blocks);
    assert_eq!(c.layout().metadata, expected.metadata);
    assert_eq!(c.layout().journal, expected.journal);
}

#[test]
fn resize2fs_writes_in_ascending_order_trigger_a_reparse() {
    replay(true);
}

#[test]
fn resize2fs_writes_in_descending_order_trigger_a_reparse() {
    replay(false);
}

/// xfs_growfs works only on a mounted filesystem: grow a loop-mounted XFS
/// from 128 to 192 MiB, then replay every changed block (mount, log and
/// growfs writes) through the classifier.
#[test]
fn xfs_growfs_writes_trigger_a_reparse() {
    if let Some(why) = missing_tools(&["mkfs.xfs", "xfs_growfs", "mount", "umount", "losetup"])
        .or_else(missing_loop)
    {
        eprintln!("SKIP xfs growfs: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = make_image(
        dir.path(),
        "fs.img",
        192,
        &["mkfs.xfs", "-q", "-f", "-d", "size=128m"],
    );
    let old = std::fs::read(&img).unwrap();
    let mnt = match LoopMount::new(&img, &dir.path().join("mnt")) {
        Ok(m) => m,
        Err(why) => {
            eprintln!("SKIP xfs growfs: {why}");
            return;
        }
    };
    std::fs::write(mnt.dir.join("file"), vec![7u8; 1 << 20]).unwrap();
    run(std::process::Command::new("xfs_growfs")
        .arg("-d")
        .arg(&mnt.dir));
    mnt.unmount();
    let new = std::fs::read(&img).unwrap();
    let expected = Layout::detect(&new, 0).unwrap();

    let dev = Mem(Rc::new(RefCell::new(old)));
    let mut c = FsClassifier::attach(dev.clone(), 0).unwrap();
    assert!(c.layout().blocks < expected.blocks);
    let bs = c.layout().block_size as usize;
    let changed: Vec<usize> = (0..new.len() / bs)
        .filter(|&b| dev.0.borrow()[b * bs..(b + 1) * bs] != new[b * bs..(b + 1) * bs])
        .collect();
    for b in &changed {
        let data = &new[b * bs..(b + 1) * bs];
        c.classify((b * bs) as u64, bs as u64, Some(data), None);
        dev.0.borrow_mut()[b * bs..(b + 1) * bs].copy_from_slice(data);
    }
    eprintln!(
        "xfs growfs replay: {} blocks written, {} re-parses",
        changed.len(),
        c.reparse_count()
    );
    assert_eq!(c.layout().blocks, expected.blocks);
    assert_eq!(c.layout().metadata, expected.metadata);
    assert_eq!(c.layout().journal, expected.journal);
}
