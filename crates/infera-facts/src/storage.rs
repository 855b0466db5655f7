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
    #[serde(serialize_with = "crate::ser::ser_path")]
    pub mount_point: PathBuf,
    /// The device number of the mount (`0:N` for one without a block device).
    #[serde(skip)]
    pub majmin: String,
    /// The block device under it, and whether it is local or reached over a network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<super::blockdev::BlockDevice>,
    /// A cap the pod's cgroup puts on reads from that device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_cap: Option<IoCap>,
    /// A short timed read of the checkpoint, where nothing else says what the storage is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<Probe>,
    /// The model is on the filesystem of the image's root (`/`): the engine's interpreter and
    /// imports are read from the same device as its weights.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shares_root: bool,
}

/// What short reads of the checkpoint's first file took, cold (its pages dropped from the
/// cache first): `reads` reads of 4 KiB one request each, the median's time; and the
/// storage's rate read the way a loader reads (one file front to back, the kernel's own
/// read-ahead in front of it) against `in_flight` reads of 1 MiB at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Probe {
    pub reads: u32,
    pub median_micros: u64,
    /// MB/s of `STREAM` bytes read in order, one read at a time, as a loader reads them.
    pub loader_mbps: u64,
    /// MB/s of the next `STREAM` bytes with `in_flight` reads at once.
    pub in_flight_mbps: u64,
    pub in_flight: u32,
}

/// Small reads spread over the file: each one request to the device, its round trip timed
/// (a disk of the machine answers in about 100 µs, storage over a network in 0.5 to 2 ms).
const PROBE_READS: u64 = 8;
const PROBE_READ: usize = 4096;
/// The bytes of one turn of each rate (read again by the loader from the cache), and the turns.
const STREAM: u64 = 8 << 20;
const TURNS: u64 = 2;
/// Reads at once for the second rate: what the read-ahead starts with, doubled twice.
const IN_FLIGHT: u64 = 8;
/// One read of each rate: a loader's read-ahead window grows to the device's own size; the
/// read-ahead reads 1 MiB at a time.
const STREAM_READ: u64 = 1 << 20;

/// Read `PROBE_READS` pieces of `file` cold and time each: the storage's own latency,
/// whatever its type says; then `STREAM` bytes in order one read at a time (the kernel's
/// read-ahead on, as a loader gets it) and another `STREAM` bytes `IN_FLIGHT` at once, in
/// two turns each: storage whose requests wait on a network or a host, rather than
/// on the device's bandwidth, answers the second far faster. None when the file is too small
/// or cannot be read. Its pages are dropped from the cache first (`POSIX_FADV_DONTNEED`: only
/// pages no process maps); 32 MiB and 32 KiB in all, read again by the loader from the cache.
pub fn probe(file: &Path) -> Option<Probe> {
    use rustix::fs::{fadvise, Advice};
    use std::os::unix::fs::OpenOptionsExt;
    let open = || std::fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_NONBLOCK).open(file).ok();
    let f = open()?;
    let size = f.metadata().ok().filter(|m| m.is_file())?.len();
    let step = size / PROBE_READS / 4096 * 4096;
    if step < 1 << 20 || size < 4 * TURNS * STREAM {
        return None;
    }
    fadvise(&f, 0, None, Advice::DontNeed).ok()?;
    // A descriptor of its own with the kernel's read-ahead off: each small read one request.
    let random = open()?;
    fadvise(&random, 0, None, Advice::Random).ok()?;
    let mut buf = [0u8; PROBE_READ];
    let mut took = Vec::with_capacity(PROBE_READS as usize);
    for i in 0..PROBE_READS {
        let started = std::time::Instant::now();
        std::os::unix::fs::FileExt::read_at(&random, &mut buf, i * step + step / 2 / 4096 * 4096).ok()?;
        took.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    took.sort_unstable();
    // In turns, so that a device whose pace drifts (a shared host's disk) meets both alike;
    // a gap after each stretch read in order, which the kernel's read-ahead may run into.
    let (mut loader, mut in_flight) = (0.0, 0.0);
    for turn in 0..TURNS {
        loader += time(&f, 4 * turn * STREAM, 1)?;
        in_flight += time(&random, (4 * turn + 2) * STREAM, IN_FLIGHT)?;
    }
    let mbps = |secs: f64| (TURNS * STREAM) as f64 / secs.max(1e-6) / 1e6;
    let (loader_mbps, in_flight_mbps) = (mbps(loader) as u64, mbps(in_flight) as u64);
    let median_micros = took[took.len() / 2];
    Some(Probe { reads: PROBE_READS as u32, median_micros, loader_mbps, in_flight_mbps, in_flight: IN_FLIGHT as u32 })
}

/// Seconds to read `STREAM` bytes of `f` from `from`, `readers` reads of `STREAM_READ` at once.
fn time(f: &std::fs::File, from: u64, readers: u64) -> Option<f64> {
    use std::os::unix::fs::FileExt;
    let next = std::sync::atomic::AtomicU64::new(from);
    let started = std::time::Instant::now();
    let ok = std::thread::scope(|s| {
        let read = || {
            let mut buf = vec![0u8; STREAM_READ as usize];
            loop {
                let at = next.fetch_add(STREAM_READ, std::sync::atomic::Ordering::Relaxed);
                if at >= from + STREAM {
                    return true;
                }
                if f.read_exact_at(&mut buf, at).is_err() {
                    return false;
                }
            }
        };
        let all: Vec<_> = (0..readers).map(|_| s.spawn(read)).collect();
        all.into_iter().all(|t| t.join().unwrap_or(false))
    });
    ok.then(|| started.elapsed().as_secs_f64())
}

/// A cap the pod's cgroup puts on reads from a device (cgroup v1 `blkio.throttle.read_*_device`,
/// v2 `io.max`): a volume's provisioned rate, or an IO limit an operator set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IoCap {
    /// Bytes a second.
    pub bps: Option<u64>,
    /// Reads a second.
    pub iops: Option<u64>,
    /// The file that says so.
    pub source: String,
}

/// The read caps of this process's cgroup on any of `devices` (`MAJ:MIN`), read through
/// `read` (a small file's text), v1 or v2.
pub fn io_cap(read: impl Fn(&Path) -> Option<String>, devices: &[&str]) -> Option<IoCap> {
    use procfs_core::FromRead;
    let groups = read(Path::new("/proc/self/cgroup"))
        .and_then(|c| procfs_core::ProcessCGroups::from_read(c.as_bytes()).ok())
        .map(|g| g.0)
        .unwrap_or_default();
    let v1 = groups.iter().find(|g| g.controllers.iter().any(|c| c == "blkio")).map(|g| g.pathname.as_str());
    let v2 = groups.iter().find(|g| g.hierarchy == 0).map(|g| g.pathname.as_str());
    let of = |line: &str| devices.iter().any(|d| line.split_whitespace().next() == Some(d));
    if let Some(path) = v1 {
        for dir in [Path::new("/sys/fs/cgroup/blkio").join(path.trim_start_matches('/')), "/sys/fs/cgroup/blkio".into()]
        {
            let value = |name: &str| {
                let text = read(&dir.join(name))?;
                text.lines().filter(|l| of(l)).find_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            };
            let (bps, iops) = (value("blkio.throttle.read_bps_device"), value("blkio.throttle.read_iops_device"));
            if bps.is_some() || iops.is_some() {
                return Some(IoCap {
                    bps,
                    iops,
                    source: dir.join("blkio.throttle.read_bps_device").display().to_string(),
                });
            }
        }
    }
    let path = v2?;
    for dir in [Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')), "/sys/fs/cgroup".into()] {
        let Some(text) = read(&dir.join("io.max")) else { continue };
        for line in text.lines().filter(|l| of(l)) {
            let key = |k: &str| line.split_whitespace().find_map(|kv| kv.strip_prefix(k)?.parse::<u64>().ok());
            let (bps, iops) = (key("rbps="), key("riops="));
            if bps.is_some() || iops.is_some() {
                return Some(IoCap { bps, iops, source: dir.join("io.max").display().to_string() });
            }
        }
    }
    None
}

/// The filesystem holding `path` (an absolute, resolved path) in a mountinfo text: its mount
/// (`mounts::mount_of`), the device and its facts left for the caller.
pub fn filesystem_of(mountinfo: &str, path: &Path) -> Option<Filesystem> {
    let m = super::mounts::mount_of(mountinfo, path)?;
    Some(Filesystem {
        fstype: m.fstype,
        mount_point: m.mount_point,
        majmin: m.majmin,
        device: None,
        io_cap: None,
        probe: None,
        shares_root: false,
    })
}

/// The pod's memory: its cgroup's limit and use, and the host's available memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
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

#[cfg(test)]
mod probe_tests {
    use super::*;

    /// The pod cgroup's read caps on a device, v1 and v2, and none on another device.
    #[test]
    fn io_caps_of_the_pods_cgroup() {
        let files = |v1: bool| {
            move |p: &Path| -> Option<String> {
                let p = p.to_string_lossy();
                match (v1, p.as_ref()) {
                    (true, "/proc/self/cgroup") => Some("7:blkio:/pod1\n0::/\n".into()),
                    (true, "/sys/fs/cgroup/blkio/pod1/blkio.throttle.read_bps_device") => {
                        Some("7:0 300000000\n".into())
                    }
                    (true, "/sys/fs/cgroup/blkio/pod1/blkio.throttle.read_iops_device") => Some("7:0 800\n".into()),
                    (false, "/proc/self/cgroup") => Some("0::/kubepods/pod2\n".into()),
                    (false, "/sys/fs/cgroup/kubepods/pod2/io.max") => {
                        Some("259:1 rbps=125000000 wbps=max riops=3000 wiops=max\n".into())
                    }
                    _ => None,
                }
            }
        };
        let v1 = io_cap(files(true), &["7:0"]).unwrap();
        assert_eq!((v1.bps, v1.iops), (Some(300_000_000), Some(800)));
        let v2 = io_cap(files(false), &["259:1"]).unwrap();
        assert_eq!((v2.bps, v2.iops), (Some(125_000_000), Some(3000)));
        assert!(v2.source.ends_with("kubepods/pod2/io.max"));
        assert_eq!(io_cap(files(true), &["8:0"]), None);
    }

    /// A file in memory answers in microseconds: a disk of this machine, never slow storage.
    #[test]
    fn the_probe_reads_cold_and_times_each_read() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("w.safetensors");
        std::fs::write(&f, vec![1u8; 64 << 20]).unwrap();
        let p = probe(&f).unwrap();
        assert_eq!((p.reads, p.in_flight), (8, 8));
        assert!(p.median_micros < 400, "{p:?}");
        assert!(p.loader_mbps > 0 && p.in_flight_mbps > 0, "{p:?}");
        std::fs::write(&f, vec![1u8; 4096]).unwrap();
        assert_eq!(probe(&f), None, "too small to spread reads over");
    }
}
