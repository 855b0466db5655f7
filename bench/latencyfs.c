/* A read-only FUSE passthrough with a network's shape: every read request pays a round trip
 * (DELAY_MS) and the bytes cross one link of MBPS megabytes a second. The shape of a network
 * filesystem served through FUSE (JuiceFS, gcsfuse, blobfuse, mountpoint-s3).
 *
 *     latencyfs SOURCE MOUNTPOINT [DELAY_MS [MBPS]]   # foreground; unmount with fusermount3 -u
 *
 * Requests run in libfuse's thread pool, so parallel reads overlap their round trips as a real
 * network filesystem's do, and share the link. The kernel's page cache is dropped on every open
 * (libfuse's default, no kernel_cache), and the source is read with O_DIRECT: the bytes live
 * behind the network, nothing is cached on this side of it. Written in C so that the emulation's own CPU time stays small next to the
 * loader's on a machine of two CPUs (real FUSE clients are Go, C or Rust).
 *
 *     cc -O2 -Wall -I/usr/include/fuse3 -o latencyfs bench/latencyfs.c -lfuse3 -lpthread
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *source;
static double delay_s = 0.002, rate = 300e6;
static pthread_mutex_t link_lock = PTHREAD_MUTEX_INITIALIZER;
static double link_free; /* when the shared link is next free, CLOCK_MONOTONIC seconds */
/* Said on unmount: how busy the link was between the first read and the last. */
static double first_read, last_read, bytes_sent;
static long requests, in_service, most_in_service;

static int real(const char *path, char *out) {
    int n = snprintf(out, PATH_MAX, "%s%s", source, path);
    return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int lfs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    char p[PATH_MAX];
    (void)fi;
    if (real(path, p)) return -ENAMETOOLONG;
    return lstat(p, st) ? -errno : 0;
}

static int lfs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                       struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
    char p[PATH_MAX];
    (void)off, (void)fi, (void)flags;
    if (real(path, p)) return -ENAMETOOLONG;
    DIR *d = opendir(p);
    if (!d) return -errno;
    for (struct dirent *e; (e = readdir(d));) fill(buf, e->d_name, NULL, 0, 0);
    closedir(d);
    return 0;
}

/* Two descriptors a file: page-aligned requests (all the kernel's page-cache reads) go
 * O_DIRECT, so the source's own page cache is neither filled nor evicted; any other request is
 * read buffered and its pages dropped after. */
static int lfs_open(const char *path, struct fuse_file_info *fi) {
    char p[PATH_MAX];
    if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
    if (real(path, p)) return -ENAMETOOLONG;
    int fd = open(p, O_RDONLY);
    if (fd < 0) return -errno;
    int direct = open(p, O_RDONLY | O_DIRECT);
    if (direct < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    fi->fh = (uint64_t)direct << 32 | (uint32_t)fd;
    return 0;
}

/* The round trip, then the bytes in turn on the shared link. */
static void pay_the_link(size_t n) {
    pthread_mutex_lock(&link_lock);
    double at = now(), start = at + delay_s;
    if (!requests) first_read = at;
    if (start < link_free) start = link_free;
    link_free = start + n / rate;
    double wait = link_free - at;
    requests++, bytes_sent += n;
    if (++in_service > most_in_service) most_in_service = in_service;
    pthread_mutex_unlock(&link_lock);
    struct timespec t = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
    while (wait > 0 && nanosleep(&t, &t) && errno == EINTR) {
    }
    pthread_mutex_lock(&link_lock);
    in_service--, last_read = now();
    pthread_mutex_unlock(&link_lock);
}

static int lfs_read_buf(const char *path, struct fuse_bufvec **bufp, size_t size, off_t off,
                        struct fuse_file_info *fi) {
    (void)path;
    int fd = (int)(uint32_t)fi->fh, direct = (int)(fi->fh >> 32);
    int aligned = ((size | (size_t)off) & 4095) == 0;
    struct fuse_bufvec *v = malloc(sizeof *v);
    void *mem = NULL;
    if (!v || posix_memalign(&mem, 4096, size ? size : 4096)) {
        free(v);
        return -ENOMEM;
    }
    ssize_t n = pread(aligned ? direct : fd, mem, size, off);
    if (n < 0) {
        int e = errno;
        free(mem), free(v);
        return -e;
    }
    if (!aligned) posix_fadvise(fd, off, size, POSIX_FADV_DONTNEED);
    pay_the_link(n);
    *v = FUSE_BUFVEC_INIT(n);
    v->buf[0].mem = mem;
    *bufp = v;
    return 0;
}

static int lfs_release(const char *path, struct fuse_file_info *fi) {
    (void)path;
    close((int)(uint32_t)fi->fh);
    close((int)(fi->fh >> 32));
    return 0;
}

static const struct fuse_operations ops = {
    .getattr = lfs_getattr,
    .readdir = lfs_readdir,
    .open = lfs_open,
    .read_buf = lfs_read_buf,
    .release = lfs_release,
};

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: latencyfs SOURCE MOUNTPOINT [DELAY_MS [MBPS]]\n");
        return 2;
    }
    if (!(source = realpath(argv[1], NULL))) {
        perror(argv[1]);
        return 1;
    }
    if (argc > 3) delay_s = atof(argv[3]) / 1000;
    if (argc > 4) rate = atof(argv[4]) * 1e6;
    /* Request buffers come from the heap, not an mmap and munmap each (page faults, zeroing and
     * TLB shootdowns that a network client's reused buffers do not pay). */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    char *fargv[] = {argv[0], argv[2], "-f", "-o", "ro,allow_other,fsname=latencyfs,subtype=latencyfs,max_threads=64", NULL};
    int rc = fuse_main(5, fargv, &ops, NULL);
    double span = last_read - first_read;
    fprintf(stderr, "latencyfs: %ld reads, %.0f MB (%.0f KiB each), the link busy %.0f %% of the %.1f s from the first read to the last, at most %ld in service\n",
            requests, bytes_sent / 1e6, requests ? bytes_sent / requests / 1024 : 0.0,
            span > 0 ? 100 * bytes_sent / rate / span : 0.0, span, most_in_service);
    return rc;
}
