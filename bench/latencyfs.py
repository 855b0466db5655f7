"""A read-only FUSE passthrough with a network's shape: every read request pays a round trip
(DELAY_MS) and the bytes cross one link of MBPS megabytes a second. The shape of a network
filesystem served through FUSE (JuiceFS, gcsfuse, blobfuse, mountpoint-s3).

    latencyfs.py SOURCE MOUNTPOINT [DELAY_MS [MBPS]]   # foreground; unmount with fusermount3 -u

Requests run in libfuse's thread pool, so parallel reads overlap their round trips as a real
network filesystem's do, and share the link. The kernel's page cache is dropped on every
open (libfuse's default, no `kernel_cache`).
"""

import errno
import os
import sys
import threading
import time

import mfusepy as fuse


class Latency(fuse.Operations):
    use_ns = True

    def __init__(self, root, delay, rate):
        self.root, self.delay, self.rate = root, delay, rate
        self.lock, self.link_free = threading.Lock(), 0.0

    def _p(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def getattr(self, path, fh=None):
        st = os.lstat(self._p(path))
        keys = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_atime_ns", "st_mtime_ns", "st_ctime_ns")
        d = {k: getattr(st, k) for k in keys}
        d.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return d

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._p(path))

    def open(self, path, flags):
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise fuse.FuseOSError(errno.EROFS)
        return os.open(self._p(path), os.O_RDONLY)

    def read(self, path, size, offset, fh):
        data = os.pread(fh, size, offset)
        # The round trip, then the bytes in turn on the shared link.
        now = time.monotonic()
        with self.lock:
            start = max(now + self.delay, self.link_free)
            self.link_free = start + len(data) / self.rate
            done = self.link_free
        time.sleep(max(0.0, done - time.monotonic()))
        # The bytes live behind the network: nothing stays cached on this side of it.
        os.posix_fadvise(fh, offset, size, os.POSIX_FADV_DONTNEED)
        return data

    def release(self, path, fh):
        os.close(fh)


if __name__ == "__main__":
    src, mnt = sys.argv[1], sys.argv[2]
    delay = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.002
    rate = float(sys.argv[4]) * 1e6 if len(sys.argv) > 4 else 300e6
    fuse.FUSE(Latency(src, delay, rate), mnt, foreground=True, ro=True, fsname="latencyfs", subtype="latencyfs", allow_other=True)
