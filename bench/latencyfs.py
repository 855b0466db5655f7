"""A read-only FUSE passthrough that adds a fixed delay to every read request: the shape of
a network filesystem served through FUSE (JuiceFS, gcsfuse, blobfuse, mountpoint-s3), where
each request pays a round trip. bench/load mounts it over the throttled checkpoint.

    latencyfs.py SOURCE MOUNTPOINT [DELAY_MS]     # foreground; unmount with fusermount3 -u

Requests run in libfuse's thread pool, so parallel reads overlap their delays as a real
network filesystem's do. The kernel's page cache is dropped on every open (libfuse's
default, no `kernel_cache`), as the issue measured it.
"""

import errno
import os
import sys
import time

import mfusepy as fuse


class Latency(fuse.Operations):
    use_ns = True

    def __init__(self, root, delay):
        self.root, self.delay = root, delay

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
        time.sleep(self.delay)
        data = os.pread(fh, size, offset)
        # The bytes live behind the network: nothing stays cached on this side of it.
        os.posix_fadvise(fh, offset, size, os.POSIX_FADV_DONTNEED)
        return data

    def release(self, path, fh):
        os.close(fh)


if __name__ == "__main__":
    src, mnt = sys.argv[1], sys.argv[2]
    delay = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.002
    fuse.FUSE(Latency(src, delay), mnt, foreground=True, ro=True, fsname="latencyfs", subtype="latencyfs", allow_other=True)
