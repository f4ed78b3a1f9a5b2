/*
 * What one 4 KiB page write costs through the page cache of a file: the
 * numbers behind TICA's write path (docs/results.md).
 *
 *   cc -O2 -o /tmp/pwc bench/page_write_cost.c && /tmp/pwc DIR [MIB]
 *
 * Makes a MIB-MiB file (default 64) in DIR, writes it once, syncs it and
 * sets POSIX_FADV_RANDOM (as tiercache_io::keep_page_cache_small does), then
 * times, per page:
 *   - random 4 KiB pwrite into pages that are dirty already;
 *   - pwritev of 4 adjacent pages (one call per run, as a TICA batch);
 *   - random 4 KiB pwrite into pages written back before (clean), and the
 *     fdatasync that writes them back (wall time);
 *   - the same in file order, single and as pwritev of 4.
 * Wall-clock microseconds; the file is removed at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void check(long r, long want, const char *what) {
    if (r != want) {
        fprintf(stderr, "page_write_cost: %s: %s\n", what, r < 0 ? strerror(errno) : "short");
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s DIR [MIB]\n", argv[0]);
        return 2;
    }
    long mib = argc == 3 ? strtol(argv[2], NULL, 10) : 64;
    if (mib < 1 || mib > 65536) {
        fprintf(stderr, "page_write_cost: MIB must be 1-65536, got %s\n", argv[2]);
        return 2;
    }
    const long n = mib * 256;
    char path[4096];
    snprintf(path, sizeof path, "%s/page_write_cost.%d", argv[1], (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
        fprintf(stderr, "page_write_cost: %s: %s\n", path, strerror(errno));
        return 1;
    }
    char *buf = aligned_alloc(PAGE, 4 * PAGE);
    memset(buf, 7, 4 * PAGE);
    struct iovec iov[4];
    for (int k = 0; k < 4; k++) {
        iov[k].iov_base = buf + k * PAGE;
        iov[k].iov_len = PAGE;
    }
    for (long i = 0; i < n; i++)
        check(pwrite(fd, buf, PAGE, i * PAGE), PAGE, "fill");
    check(fdatasync(fd), 0, "fdatasync");
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    unsigned x = 12345;
    const long m = 200000;

    for (long i = 0; i < n; i++) /* every page dirty */
        check(pwrite(fd, buf, PAGE, i * PAGE), PAGE, "pwrite");
    double t = now();
    for (long i = 0; i < m; i++) {
        x = x * 1103515245 + 12345;
        check(pwrite(fd, buf, PAGE, (off_t)(x % n) * PAGE), PAGE, "pwrite");
    }
    double dirty1 = (now() - t) / m * 1e6;
    t = now();
    for (long i = 0; i < m / 4; i++) {
        x = x * 1103515245 + 12345;
        check(pwritev(fd, iov, 4, (off_t)(x % (n - 4)) * PAGE), 4 * PAGE, "pwritev");
    }
    double dirty4 = (now() - t) / m * 1e6;

    double w[3] = {0}, s[3] = {0};
    for (int r = 0; r < 10; r++) {
        for (int mode = 0; mode < 3; mode++) {
            check(fdatasync(fd), 0, "fdatasync");
            t = now();
            for (long i = 0; i < n; i += mode == 2 ? 4 : 1) {
                if (mode == 0) {
                    x = x * 1103515245 + 12345;
                    check(pwrite(fd, buf, PAGE, (off_t)(x % n) * PAGE), PAGE, "pwrite");
                } else if (mode == 1) {
                    check(pwrite(fd, buf, PAGE, i * PAGE), PAGE, "pwrite");
                } else {
                    check(pwritev(fd, iov, 4, i * PAGE), 4 * PAGE, "pwritev");
                }
            }
            w[mode] += now() - t;
            t = now();
            check(fdatasync(fd), 0, "fdatasync");
            s[mode] += now() - t;
        }
    }
    unlink(path);
    double per = 10.0 * n / 1e6;
    printf("%ld MiB file in %s, microseconds per 4 KiB page:\n", mib, argv[1]);
    printf("  into dirty pages:  random pwrite %.2f, pwritev of 4 adjacent %.2f\n", dirty1, dirty4);
    printf("  into clean pages:  random pwrite %.2f (then fdatasync %.2f)\n", w[0] / per, s[0] / per);
    printf("                     in order %.2f (fdatasync %.2f), pwritev of 4 %.2f (fdatasync %.2f)\n",
           w[1] / per, s[1] / per, w[2] / per, s[2] / per);
    return 0;
}
