//! `keep_page_cache_small`: after it, a sequential read of a buffered file
//! leaves its page cache in 4 KiB folios (checked page by page in
//! `/proc/kpageflags`), where plain readahead had filled it with large ones.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use tiercache_io::{BlockDev, FileDev, FileDevOptions};

const PAGE: usize = 4096;
const SIZE: usize = 16 << 20;

/// Resident pages of `path` in large folios (compound head or tail pages)
/// and in total; `None` when the kernel's page flags cannot be read.
fn large_folio_pages(path: &std::path::Path) -> Option<(usize, usize)> {
    use std::os::unix::fs::FileExt as _;
    let kflags = File::open("/proc/kpageflags").ok()?;
    let pagemap = File::open("/proc/self/pagemap").ok()?;
    let f = File::open(path).ok()?;
    let n = SIZE / PAGE;
    // SAFETY: a fresh read-only shared mapping of a file we keep open; only
    // resident pages (mincore) are touched, so nothing is read from disk.
    unsafe {
        let a = libc::mmap(
            std::ptr::null_mut(),
            SIZE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(a, libc::MAP_FAILED, "mmap");
        let mut vec = vec![0u8; n];
        assert_eq!(libc::mincore(a, SIZE, vec.as_mut_ptr()), 0, "mincore");
        let (mut large, mut resident) = (0, 0);
        for (i, v) in vec.iter().enumerate() {
            if v & 1 == 0 {
                continue;
            }
            let p = (a as *const u8).add(i * PAGE);
            std::ptr::read_volatile(p);
            let mut e = [0u8; 8];
            pagemap
                .read_exact_at(&mut e, (p as u64 / PAGE as u64) * 8)
                .ok()?;
            let e = u64::from_le_bytes(e);
            if e >> 63 == 0 {
                continue;
            }
            let pfn = e & ((1 << 55) - 1);
            if pfn == 0 {
                // Page frame numbers hidden (no CAP_SYS_ADMIN).
                libc::munmap(a, SIZE);
                return None;
            }
            let mut k = [0u8; 8];
            kflags.read_exact_at(&mut k, pfn * 8).ok()?;
            let k = u64::from_le_bytes(k);
            resident += 1;
            // KPF_COMPOUND_HEAD (15), KPF_COMPOUND_TAIL (16).
            if (k >> 15) & 3 != 0 {
                large += 1;
            }
        }
        libc::munmap(a, SIZE);
        Some((large, resident))
    }
}

fn read_all(f: &File) {
    let mut buf = vec![0u8; 1 << 20];
    for off in (0..SIZE).step_by(buf.len()) {
        f.read_exact_at(&mut buf, off as u64).unwrap();
        assert!(buf.iter().all(|&b| b == (off >> 20) as u8 + 1));
    }
}

#[test]
fn keep_page_cache_small_makes_reads_fill_4k_folios() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ssd.img");
    {
        let mut f = File::create(&path).unwrap();
        for mib in 0..SIZE >> 20 {
            f.write_all(&vec![mib as u8 + 1; 1 << 20]).unwrap();
        }
        f.sync_all().unwrap();
    }
    // Plain readahead over the dropped file: large folios (when this kernel
    // and file system make them at all).
    let f = File::open(&path).unwrap();
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    read_all(&f);
    let Some((before, resident)) = large_folio_pages(&path) else {
        eprintln!("skipped: /proc/kpageflags is not readable here (needs root)");
        return;
    };
    assert!(resident > 0, "the read left nothing in the page cache");
    if before == 0 {
        eprintln!("skipped: readahead made no large folios on this kernel and file system");
        return;
    }

    let dev = FileDev::open(&path, FileDevOptions::default()).unwrap();
    tiercache_io::keep_page_cache_small(&dev);
    let (dropped, _) = large_folio_pages(&path).unwrap();
    assert_eq!(dropped, 0, "cached pages were not dropped");
    // Reads through the device (as a cache's recovery makes), large ones.
    let mut buf = vec![0u8; 1 << 20];
    for off in (0..SIZE).step_by(buf.len()) {
        dev.read_at(&mut buf, off as u64).unwrap();
        assert!(
            buf.iter().all(|&b| b == (off >> 20) as u8 + 1),
            "read at {off}"
        );
    }
    let (after, resident) = large_folio_pages(&path).unwrap();
    assert!(resident >= SIZE / PAGE / 2, "only {resident} pages cached");
    assert_eq!(
        after, 0,
        "{after} of {resident} cached pages are in large folios (before: {before})"
    );
}
