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

/// The mount holding `path` (an absolute, resolved path) in a mountinfo text: the longest
/// mount point that is `path` or a parent of it; of mounts stacked on one point, the last.
pub fn filesystem_of(mountinfo: &str, path: &Path) -> Option<Filesystem> {
    let mut best: Option<Filesystem> = None;
    for line in mountinfo.lines() {
        // `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw` (proc(5))
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let (Some(point), Some(fstype)) = (left.split(' ').nth(4), right.split(' ').next()) else { continue };
        let point = PathBuf::from(unescape(point));
        let longer = best.as_ref().is_none_or(|b| point.as_os_str().len() >= b.mount_point.as_os_str().len());
        if path.starts_with(&point) && longer {
            best = Some(Filesystem { fstype: fstype.to_string(), mount_point: point });
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
/// which gives a small file's text).
pub fn pod_memory(read: impl Fn(&Path) -> Option<String>) -> PodMemory {
    let host_available = read(Path::new("/proc/meminfo")).and_then(|m| {
        let kib = m
            .lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse::<u64>()
            .ok()?;
        Some(kib * 1024)
    });
    let cgroup = read(Path::new("/proc/self/cgroup")).unwrap_or_default();
    let number = |p: &Path| read(p).and_then(|s| s.trim().parse::<u64>().ok());
    // v2: `0::/path`; v1: `N:memory:/path` (or `memory,…`).
    let v2 = cgroup.lines().find_map(|l| l.strip_prefix("0::"));
    let v1 = cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
        ctl.split(',').any(|c| c == "memory").then_some(path)
    });
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

    #[test]
    fn cgroup_v1_and_v2_limits() {
        let files = |pairs: &'static [(&'static str, &'static str)]| {
            move |p: &Path| pairs.iter().find(|(k, _)| Path::new(k) == p).map(|(_, v)| v.to_string())
        };
        let v2 = pod_memory(files(&[
            ("/proc/self/cgroup", "0::/kubepods/pod1/c1\n"),
            ("/sys/fs/cgroup/kubepods/pod1/c1/memory.max", "549755813888\n"),
            ("/sys/fs/cgroup/kubepods/pod1/c1/memory.current", "1073741824\n"),
            ("/proc/meminfo", "MemTotal: 1 kB\nMemAvailable:   2097152 kB\n"),
        ]));
        assert_eq!((v2.limit, v2.usage, v2.host_available), (Some(512 << 30), Some(1 << 30), Some(2 << 30)));
        assert_eq!(v2.budget(), Some(511 << 30));
        let v1 = pod_memory(files(&[
            ("/proc/self/cgroup", "5:memory:/\n3:cpu,cpuacct:/\n"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"),
            ("/proc/meminfo", "MemAvailable: 1024 kB\n"),
        ]));
        assert_eq!((v1.limit, v1.budget()), (None, Some(1 << 20)), "no limit: the host's available memory");
        let none = pod_memory(files(&[]));
        assert_eq!(none.source, "no memory cgroup");
    }
}
