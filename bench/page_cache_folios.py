#!/usr/bin/env python3
"""Cost of a 4 KiB pwrite into a buffered file whose page cache readahead
filled with large folios, against one kept in 4 KiB folios (POSIX_FADV_RANDOM
before the read, as `tiercache_io::keep_page_cache_small` does).

A file of --size-mib is written, dropped from the page cache, read once
sequentially (as a cache's recovery or a warm-up read makes), then
overwritten with random 4 KiB pwrites; printed: microseconds per pwrite for
each case and their ratio. Python's own per-call cost (~1 us) is in both.

usage: bench/page_cache_folios.py [--size-mib 128] [--writes 100000] [--dir /var/tmp]
"""
import argparse, os, random, tempfile, time

def run(path, size, writes, random_advice):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        page = b"x" * 4096
        for off in range(0, size, 1 << 20):
            os.pwrite(fd, page * 256, off)
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if random_advice:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for off in range(0, size, 256 << 10):
            os.pread(fd, 256 << 10, off)
        rng = random.Random(1)
        offs = [rng.randrange(size // 4096) * 4096 for _ in range(writes)]
        new = b"y" * 4096
        t = time.perf_counter()
        for o in offs:
            os.pwrite(fd, new, o)
        return (time.perf_counter() - t) / writes * 1e6
    finally:
        os.close(fd)
        os.unlink(path)

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=128)
    ap.add_argument("--writes", type=int, default=100000)
    ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/var/tmp"))
    a = ap.parse_args()
    if a.size_mib < 1:
        ap.error("--size-mib must be at least 1")
    if a.writes < 1:
        ap.error("--writes must be at least 1")
    if not os.path.isdir(a.dir):
        ap.error(f"--dir {a.dir}: not a directory")
    path = os.path.join(tempfile.mkdtemp(dir=a.dir), "f.img")
    size = a.size_mib << 20
    ra = run(path, size, a.writes, False)
    small = run(path, size, a.writes, True)
    print(f"4 KiB pwrite after readahead (large folios): {ra:6.2f} us")
    print(f"4 KiB pwrite with POSIX_FADV_RANDOM (4 KiB):  {small:6.2f} us")
    print(f"ratio: {ra / small:.2f}x  ({a.dir}, {a.size_mib} MiB, kernel {os.uname().release})")
    os.rmdir(os.path.dirname(path))

if __name__ == "__main__":
    main()
