//! Where the weights come from and how much memory the pod has to cache them: the filesystem
//! under the model's directory (the longest mount point of `/proc/self/mountinfo` that holds
//! it, as vLLM finds it from `/proc/mounts`) and the pod's memory limit and use (its cgroup,
//! v2 or v1) with the host's `MemAvailable`. Read only at root `/`: elsewhere the mounts and
//! the cgroup are this shell's, not the pod's.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// The filesystem a path is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Filesystem {
    /// `ext4`, `nfs4`, `fuse.juicefs`, `virtiofs`, …
    pub fstype: String,
    #[serde(serialize_with = "crate::spec::ser_path")]
    pub mount_point: PathBuf,
}

/// The mount holding `path` (an absolute, resolved path) in a mountinfo text (read by
/// procfs-core): the longest mount point that is `path` or a parent of it; of mounts stacked
/// on one point, the last.
pub fn filesystem_of(mountinfo: &str, path: &Path) -> Option<Filesystem> {
    use procfs_core::FromRead;
    let mounts = procfs_core::process::MountInfos::from_read(mountinfo.as_bytes()).ok()?;
    let mut best: Option<Filesystem> = None;
    for m in mounts {
        // procfs-core keeps the kernel's octal escapes in the mount point (`\040` for a space).
        let point = PathBuf::from(unescape(&m.mount_point.to_string_lossy()));
        let longer = best.as_ref().is_none_or(|b| point.as_os_str().len() >= b.mount_point.as_os_str().len());
        if path.starts_with(&point) && longer {
            best = Some(Filesystem { fstype: m.fs_type, mount_point: point });
        }
    }
    best
}

/// mountinfo escapes space, tab, newline and backslash as `\040`-style octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The pod's memory: its cgroup's limit and use, and the host's available memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodMemory {
    /// None: no limit.
    pub limit: Option<u64>,
    pub usage: Option<u64>,
    /// `MemAvailable` of /proc/meminfo: the node's, whatever the pod's limit.
    pub host_available: Option<u64>,
    /// The cgroup files read.
    pub source: String,
}

impl PodMemory {
    /// What the pod can still fill with page cache: its limit less its use, or without a
    /// limit the host's available memory.
    pub fn budget(&self) -> Option<u64> {
        match (self.limit, self.usage) {
            (Some(l), u) => Some(l.saturating_sub(u.unwrap_or(0))),
            (None, _) => self.host_available,
        }
    }
}

/// Read from `/proc/self/cgroup`, the cgroup filesystem and `/proc/meminfo` (through `read`,
/// which gives a small file's text; the two /proc files are parsed by procfs-core).
pub fn pod_memory(read: impl Fn(&Path) -> Option<String>) -> PodMemory {
    use procfs_core::FromRead;
    let host_available = read(Path::new("/proc/meminfo"))
        .and_then(|m| procfs_core::Meminfo::from_read(m.as_bytes()).ok())
        .and_then(|m| m.mem_available);
    let groups = read(Path::new("/proc/self/cgroup"))
        .and_then(|c| procfs_core::ProcessCGroups::from_read(c.as_bytes()).ok())
        .map(|g| g.0)
        .unwrap_or_default();
    let number = |p: &Path| read(p).and_then(|s| s.trim().parse::<u64>().ok());
    // v1: the hierarchy with the memory controller; v2: hierarchy 0, no controllers listed.
    let v1 = groups.iter().find(|g| g.controllers.iter().any(|c| c == "memory")).map(|g| g.pathname.as_str());
    let v2 = groups.iter().find(|g| g.hierarchy == 0).map(|g| g.pathname.as_str());
    let unlimited = |v: u64| v < 1 << 62; // v1 writes 2^63 rounded to pages for "no limit"
    for (base, path, limit_file, usage_file) in [
        ("/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes", "memory.usage_in_bytes"),
        ("/sys/fs/cgroup", v2, "memory.max", "memory.current"),
    ] {
        let Some(path) = path else { continue };
        // In a cgroup namespace the pod's own cgroup is the root of what it sees.
        for dir in [Path::new(base).join(path.trim_start_matches('/')), PathBuf::from(base)] {
            let lim = dir.join(limit_file);
            if let Some(text) = read(&lim) {
                let limit = text.trim().parse::<u64>().ok().filter(|v| unlimited(*v));
                let usage = number(&dir.join(usage_file));
                let source = lim.display().to_string();
                return PodMemory { limit, usage, host_available, source };
            }
        }
    }
    PodMemory { limit: None, usage: None, host_available, source: "no memory cgroup".into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
30 22 0:40 / /models rw,relatime - nfs4 srv:/export rw,vers=4.2
31 30 0:41 / /models/cache rw - fuse.juicefs JuiceFS:jfs rw
32 22 0:42 / /dev/shm rw - tmpfs shm rw,size=65536k
33 22 0:43 / /mnt/with\\040space rw - virtiofs tag rw
";

    #[test]
    fn the_longest_mount_holding_the_path() {
        let fs = |p: &str| filesystem_of(MOUNTINFO, Path::new(p)).map(|f| (f.fstype, f.mount_point));
        assert_eq!(fs("/models/kimi-k3"), Some(("nfs4".into(), "/models".into())));
        assert_eq!(fs("/models/cache/m"), Some(("fuse.juicefs".into(), "/models/cache".into())));
        assert_eq!(fs("/modelsx/m"), Some(("ext4".into(), "/".into())), "a prefix of a name is not a parent");
        assert_eq!(fs("/mnt/with space/m"), Some(("virtiofs".into(), "/mnt/with space".into())));
    }

    /// A real /proc/meminfo (this project's machine kind), MemAvailable set to 2 GiB.
    const MEMINFO: &str = "\
MemTotal:       24683784 kB\n\
MemFree:        16988992 kB\n\
MemAvailable:    2097152 kB\n\
Buffers:          106788 kB\n\
Cached:          6673112 kB\n\
SwapCached:            0 kB\n\
Active:          4565464 kB\n\
Inactive:        2213260 kB\n\
Active(anon):         80 kB\n\
Inactive(anon):     9048 kB\n\
Active(file):    4565384 kB\n\
Inactive(file):  2204212 kB\n\
Unevictable:       13376 kB\n\
Mlocked:           10444 kB\n\
SwapTotal:             0 kB\n\
SwapFree:              0 kB\n\
Zswap:                 0 kB\n\
Zswapped:              0 kB\n\
Dirty:            191356 kB\n\
Writeback:             0 kB\n\
AnonPages:         12200 kB\n\
Mapped:            16348 kB\n\
Shmem:             10304 kB\n\
KReclaimable:     319676 kB\n\
Slab:             365656 kB\n\
SReclaimable:     319676 kB\n\
SUnreclaim:        45980 kB\n\
KernelStack:        1744 kB\n\
PageTables:         1096 kB\n\
SecPageTables:         0 kB\n\
NFS_Unstable:          0 kB\n\
Bounce:                0 kB\n\
WritebackTmp:          0 kB\n\
CommitLimit:    12341892 kB\n\
Committed_AS:      67064 kB\n\
VmallocTotal:   34359738367 kB\n\
VmallocUsed:       14556 kB\n\
VmallocChunk:          0 kB\n\
Percpu:             1872 kB\n\
AnonHugePages:         0 kB\n\
";

    #[test]
    fn cgroup_v1_and_v2_limits() {
        let files = |pairs: &'static [(&'static str, &'static str)]| {
            move |p: &Path| pairs.iter().find(|(k, _)| Path::new(k) == p).map(|(_, v)| v.to_string())
        };
        let v2 = pod_memory(files(&[
            ("/proc/self/cgroup", "0::/kubepods/pod1/c1\n"),
            ("/sys/fs/cgroup/kubepods/pod1/c1/memory.max", "549755813888\n"),
            ("/sys/fs/cgroup/kubepods/pod1/c1/memory.current", "1073741824\n"),
            ("/proc/meminfo", MEMINFO),
        ]));
        assert_eq!((v2.limit, v2.usage, v2.host_available), (Some(512 << 30), Some(1 << 30), Some(2 << 30)));
        assert_eq!(v2.budget(), Some(511 << 30));
        let v1 = pod_memory(files(&[
            ("/proc/self/cgroup", "5:memory:/\n3:cpu,cpuacct:/\n"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"),
            ("/proc/meminfo", MEMINFO),
        ]));
        assert_eq!((v1.limit, v1.budget()), (None, Some(2 << 30)), "no limit: the host's available memory");
        let none = pod_memory(files(&[]));
        assert_eq!(none.source, "no memory cgroup");
    }
}
