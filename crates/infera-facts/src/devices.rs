//! The GPU device nodes as this process can use them: whether this uid may open `/dev/kfd`
//! and each `/dev/dri/renderD*` (and why not: mode, owner, group, our uid and groups), the
//! GPUs' architecture (gfx target) from the KFD topology, and the amdgpu driver's version.
//! A device node that exists but cannot be opened is among the most common reasons a ROCm
//! container fails ("HIP error: no ROCm-capable device"), long after start.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use infera_core::rootfs::Root;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceAccess {
    #[serde(serialize_with = "crate::ser::ser_path")]
    pub path: PathBuf,
    /// Read and write allowed for this process (the kernel's own check, effective ids).
    pub usable: bool,
    /// `crw-rw---- 0:109` (mode, owner uid, group gid).
    pub mode: String,
    /// Why not, in words; None when usable.
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Gpu {
    /// KFD topology node number.
    pub node: u32,
    /// `gfx942` from `gfx_target_version 90402`.
    pub gfx: Option<String>,
    /// Its PCI device id as lower-case hex (`74a1`), from the KFD node's `device_id`.
    #[serde(default)]
    pub device_id: Option<String>,
    pub render_minor: Option<u32>,
    /// Its memory in bytes: the KFD topology's frame-buffer banks (heap_type 1 or 2), else
    /// the driver's `mem_info_vram_total`.
    pub vram: Option<u64>,
    /// `current_compute_partition` (SPX, DPX, QPX, CPX) and `current_memory_partition` (NPS1,
    /// NPS4) of its device, where the driver has them (MI300 and later).
    pub compute_partition: Option<String>,
    pub memory_partition: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Devices {
    pub uid: u32,
    pub groups: Vec<u32>,
    pub nodes: Vec<DeviceAccess>,
}

impl Devices {
    /// The render minors this process was given (`/dev/dri/renderD*`: the device plugin
    /// mounts an allocated GPU's).
    pub fn render_minors(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(|n| n.path.to_str()?.strip_prefix("/dev/dri/renderD")?.parse().ok()).collect()
    }

    /// Device nodes present that this process cannot open.
    pub fn denied(&self) -> impl Iterator<Item = &DeviceAccess> {
        self.nodes.iter().filter(|d| !d.usable)
    }
}

/// `gfx_target_version` as the KFD writes it (major*10000 + minor*100 + stepping) → the
/// LLVM target name: 90402 → gfx942, 90010 → gfx90a, 110000 → gfx1100, 120001 → gfx1201.
pub fn gfx_name(v: u64) -> Option<String> {
    if v == 0 {
        return None;
    }
    let (major, minor, stepping) = (v / 10000, (v / 100) % 100, v % 100);
    (minor < 16 && stepping < 16).then(|| format!("gfx{major}{minor:x}{stepping:x}"))
}

/// `crw-rw----` from st_mode.
fn mode_string(mode: u32, char_dev: bool) -> String {
    let mut s = String::with_capacity(10);
    s.push(if char_dev { 'c' } else { '-' });
    for (bit, c) in [
        (0o400, 'r'),
        (0o200, 'w'),
        (0o100, 'x'),
        (0o40, 'r'),
        (0o20, 'w'),
        (0o10, 'x'),
        (0o4, 'r'),
        (0o2, 'w'),
        (0o1, 'x'),
    ] {
        s.push(if mode & bit != 0 { c } else { '-' });
    }
    s
}

/// The kernel's answer for read+write with the effective ids (`faccessat(AT_EACCESS)`).
fn can_read_write(path: &Path) -> bool {
    use nix::fcntl::AtFlags;
    use nix::unistd::AccessFlags;
    nix::unistd::faccessat(None, path, AccessFlags::R_OK | AccessFlags::W_OK, AtFlags::AT_EACCESS).is_ok()
}

fn access(path: &Path, uid: u32, groups: &[u32]) -> Option<DeviceAccess> {
    let md = std::fs::metadata(path).ok()?;
    let mode = md.mode() & 0o7777;
    let shown = format!("{} {}:{}", mode_string(mode, md.file_type().is_char_device()), md.uid(), md.gid());
    let usable = can_read_write(path);
    let reason = (!usable).then(|| {
        let rw = |shift: u32| (mode >> shift) & 0o6 == 0o6;
        let who = if md.uid() == uid {
            "its owner".to_string()
        } else if groups.contains(&md.gid()) {
            format!("in its group {}", md.gid())
        } else {
            format!("neither its owner ({}) nor in its group ({})", md.uid(), md.gid())
        };
        let grants = match (rw(6), rw(3), rw(0)) {
            (_, _, true) => "read-write to everyone".to_string(),
            (true, true, false) => format!("read-write to uid {} and group {} only", md.uid(), md.gid()),
            (true, false, false) => format!("read-write to uid {} only", md.uid()),
            (false, true, false) => format!("read-write to group {} only", md.gid()),
            (false, false, false) => "read-write to no one".to_string(),
        };
        if !md.file_type().is_char_device() {
            format!("not a character device ({shown})")
        } else {
            format!(
                "mode {shown} grants {grants}; this process (uid {uid}, groups {}) is {who}, or a security module denies it",
                if groups.is_empty() { "none".to_string() } else { groups.iter().map(u32::to_string).collect::<Vec<_>>().join(",") }
            )
        }
    });
    Some(DeviceAccess { path: path.to_path_buf(), usable, mode: shown, reason })
}

/// The GPU nodes of the KFD topology (CPU nodes, whose `simd_count` is 0, left out), by node
/// number, each with its processor, render node, memory and partition modes. sysfs is not
/// namespaced: these are the node's GPUs, allocated to this container or not. A node whose
/// properties cannot be read is said in `findings` and left out.
pub fn kfd_gpus(root: &Root, findings: &mut Vec<crate::finding::Finding>) -> Vec<Gpu> {
    let topo = Path::new("/sys/class/kfd/kfd/topology/nodes");
    let mut gpus = Vec::new();
    for n in root.list(topo) {
        let Some(node) = n.to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let props = topo.join(&n).join("properties");
        let text = match root.read_small_string(&props) {
            Ok(t) => t,
            Err(e) => {
                let skipped = "this KFD node is not counted";
                crate::finding::unreadable(findings, "gpu-topology-unreadable", &props, &e, skipped);
                continue;
            }
        };
        let prop = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok());
        if prop("simd_count ").unwrap_or(0) == 0 {
            continue; // a CPU node
        }
        let render_minor = prop("drm_render_minor ").and_then(|m| u32::try_from(m).ok());
        let device = render_minor.map(|m| PathBuf::from(format!("/sys/class/drm/renderD{m}/device")));
        let sys = |name: &str| {
            let d = device.as_ref()?;
            root.read_small_string(&d.join(name)).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
        };
        let vram = match vram(root, &topo.join(&n)) {
            Ok(v) => v.or_else(|| sys("mem_info_vram_total")?.parse().ok().filter(|b| *b <= MAX_VRAM)),
            Err(why) => {
                findings.push(crate::finding::Finding::warn(
                    "gpu-memory-unreadable",
                    format!(
                        "KFD node {node}: {why}; its memory is not known, so the weights are not judged against it"
                    ),
                ));
                None
            }
        };
        gpus.push(Gpu {
            node,
            gfx: prop("gfx_target_version ").and_then(gfx_name),
            device_id: prop("device_id ").filter(|d| *d > 0 && *d <= 0xffff).map(|d| format!("{d:04x}")),
            render_minor,
            vram,
            compute_partition: sys("current_compute_partition"),
            memory_partition: sys("current_memory_partition"),
        });
    }
    gpus.sort_by_key(|g| g.node);
    gpus
}

/// The process's own devices (root `/`: the caller only gathers host facts there).
pub fn gather(root: &Root) -> Devices {
    let uid = nix::unistd::geteuid().as_raw();
    let mut groups: Vec<u32> = nix::unistd::getgroups().unwrap_or_default().into_iter().map(|g| g.as_raw()).collect();
    let egid = nix::unistd::getegid().as_raw();
    if !groups.contains(&egid) {
        groups.push(egid);
    }
    groups.sort_unstable();
    groups.dedup();
    let mut nodes: Vec<DeviceAccess> = access(Path::new("/dev/kfd"), uid, &groups).into_iter().collect();
    let mut renders: Vec<String> = root
        .list(Path::new("/dev/dri"))
        .into_iter()
        .filter_map(|n| n.to_str().filter(|n| n.starts_with("renderD")).map(str::to_string))
        .collect();
    renders.sort_by_key(|n| (n.len(), n.clone()));
    nodes.extend(renders.iter().filter_map(|n| access(&Path::new("/dev/dri").join(n), uid, &groups)));
    Devices { uid, groups, nodes }
}

/// The most memory one GPU has: far above any part's (an MI355X has 288 GB), so that a larger
/// figure is a topology that cannot be true, not a verdict on the weights.
pub const MAX_VRAM: u64 = 16 << 40;

/// The frame-buffer memory of a KFD node: `size_in_bytes` of its banks with `heap_type` 1
/// (public) or 2 (private); None when it lists none (an APU shares system memory); Err when
/// the banks sum past what a GPU can hold.
fn vram(root: &Root, node: &Path) -> Result<Option<u64>, String> {
    let banks = node.join("mem_banks");
    let mut total: Option<u64> = None;
    for b in root.list(&banks) {
        let Ok(text) = root.read_small_string(&banks.join(&b).join("properties")) else { continue };
        let prop = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok());
        if matches!(prop("heap_type "), Some(1 | 2)) {
            let size = prop("size_in_bytes ").unwrap_or(0);
            total = total.unwrap_or(0).checked_add(size).filter(|t| *t <= MAX_VRAM).map(Some).ok_or_else(|| {
                format!("its memory banks sum past {} TiB (bank {}: {size} bytes)", MAX_VRAM >> 40, b.to_string_lossy())
            })?;
        }
    }
    Ok(total.filter(|t| *t > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfx_names() {
        assert_eq!(gfx_name(90402).as_deref(), Some("gfx942"));
        assert_eq!(gfx_name(90010).as_deref(), Some("gfx90a"));
        assert_eq!(gfx_name(90500).as_deref(), Some("gfx950"));
        assert_eq!(gfx_name(110000).as_deref(), Some("gfx1100"));
        assert_eq!(gfx_name(120001).as_deref(), Some("gfx1201"));
        assert_eq!(gfx_name(0), None);
    }

    /// A KFD node's properties that are not a regular file (a FIFO) are said, never waited on.
    #[test]
    fn a_fifo_for_a_kfd_node_is_said_and_not_counted() {
        let t = tempfile::tempdir().unwrap();
        let nodes = t.path().join("sys/class/kfd/kfd/topology/nodes");
        std::fs::create_dir_all(nodes.join("0")).unwrap();
        std::fs::create_dir_all(nodes.join("1")).unwrap();
        std::fs::write(nodes.join("0/properties"), "cpu_cores_count 96\nsimd_count 0\n").unwrap();
        nix::unistd::mkfifo(&nodes.join("1/properties"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let mut findings = Vec::new();
        assert!(kfd_gpus(&Root::new(t.path()), &mut findings).is_empty());
        assert_eq!(
            findings[0].message,
            "`/sys/class/kfd/kfd/topology/nodes/1/properties` is a FIFO, not a regular file; this KFD node is not counted"
        );
    }

    /// Banks whose sizes sum past what a GPU can hold (or past 2^64) are unreadable, said,
    /// never a figure a verdict is made on.
    #[test]
    fn memory_banks_that_cannot_be_true_are_unreadable() {
        let t = tempfile::tempdir().unwrap();
        let node = t.path().join("sys/class/kfd/kfd/topology/nodes/1");
        let bank = |i: u32, size: &str| {
            let d = node.join(format!("mem_banks/{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("properties"), format!("heap_type 1\nsize_in_bytes {size}\n")).unwrap();
        };
        bank(0, "206141652992");
        std::fs::write(node.join("properties"), "simd_count 1216\ngfx_target_version 90402\n").unwrap();
        let root = Root::new(t.path());
        let mut findings = Vec::new();
        assert_eq!(kfd_gpus(&root, &mut findings)[0].vram, Some(206_141_652_992));
        bank(1, &u64::MAX.to_string());
        let gpus = kfd_gpus(&root, &mut findings);
        assert_eq!(gpus[0].vram, None);
        assert!(findings.iter().any(|f| f.code == "gpu-memory-unreadable" && f.message.contains("sum past 16 TiB")));
    }

    #[test]
    fn modes() {
        assert_eq!(mode_string(0o660, true), "crw-rw----");
        assert_eq!(mode_string(0o666, true), "crw-rw-rw-");
    }
}
