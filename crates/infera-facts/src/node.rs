//! The node: the GPUs (KFD: gfx target, memory, partitions, render minors), the amdgpu driver
//! and kernel, NUMA balancing, `/dev/shm`, the pod's memory and the RDMA devices. A value of
//! its own, apart from the image's facts: read at root `/` (in the pod, a DaemonSet, `kubectl
//! debug node/…`), or from a node profile (`infera-exec node --json` writes one; `--node FILE`
//! reads it back), or made for a named AMD Instinct part (`--node mi300x:8`), so the node's
//! checks run in CI exactly as in the pod.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::devices::Gpu;
use super::host::Shm;
use super::storage::PodMemory;
use infera_core::rootfs::Root;

/// The profile's schema version: a field removed or changed in meaning is a new version.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFacts {
    pub schema_version: u32,
    /// Where the facts come from: `this node (/)`, `mi300x:8 (AMD Instinct MI300X, …)`, a file.
    pub source: String,
    /// The node's GPUs as its KFD topology lists them (every GPU of the node: sysfs is not
    /// namespaced; a pod's own are those whose render node it was given).
    pub gpus: Vec<Gpu>,
    /// `/sys/module/amdgpu` present; its `version` (AMD's packaged driver only).
    pub driver_loaded: bool,
    pub driver: Option<String>,
    pub kernel: Option<String>,
    /// `/proc/sys/kernel/numa_balancing`.
    pub numa_balancing: Option<u32>,
    pub shm: Option<Shm>,
    pub memory: Option<PodMemory>,
    /// `/dev/infiniband/uverbs*`.
    pub rdma_devices: Vec<String>,
    /// Read from this node (root `/`), not given as a profile.
    #[serde(skip)]
    pub live: bool,
    /// What could not be read of the node.
    #[serde(skip)]
    pub findings: Vec<crate::finding::Finding>,
}

/// Read at root `/`; None elsewhere (an image root has no node).
pub fn gather(root: &Root) -> Option<NodeFacts> {
    if !root.is_host_root() {
        return None;
    }
    let mut findings = Vec::new();
    let gpus = super::devices::kfd_gpus(root, &mut findings);
    let line =
        |p: &str| root.read_small_string(Path::new(p)).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    let mut rdma: Vec<String> = root
        .list(Path::new("/dev/infiniband"))
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n.starts_with("uverbs"))
        .map(|n| format!("/dev/infiniband/{n}"))
        .collect();
    rdma.sort();
    Some(NodeFacts {
        schema_version: SCHEMA_VERSION,
        source: "this node (/)".into(),
        gpus,
        driver_loaded: root.metadata(Path::new("/sys/module/amdgpu")).is_ok(),
        driver: line("/sys/module/amdgpu/version"),
        kernel: line("/proc/sys/kernel/osrelease"),
        numa_balancing: line("/proc/sys/kernel/numa_balancing").and_then(|v| v.parse().ok()),
        shm: super::host::shm(),
        memory: Some(super::storage::pod_memory(|p| root.read_small_string(p).ok())),
        rdma_devices: rdma,
        live: true,
        findings,
    })
}

/// An AMD Instinct part: what its node's KFD topology shows.
pub struct Part {
    pub name: &'static str,
    pub model: &'static str,
    pub gfx: &'static str,
    /// GPUs of a node as KFD lists them (an MI250X module is two GCDs, two GPUs).
    pub per_node: u32,
    /// One GPU's memory as KFD reports it (None: an APU, whose memory is the system's).
    pub vram: Option<u64>,
    /// What says so.
    pub cited: &'static str,
}

const GIB: u64 = 1 << 30;
const DATASHEET: &str = "AMD Instinct data sheet; ROCm docs, \"GPU hardware specifications\" \
                         (rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html)";

/// The parts, from AMD's data sheets and ROCm's hardware table: memory is the marketed size
/// (the KFD bank is a little under it), except the MI300X's, read on a real node.
pub const PARTS: &[Part] = &[
    Part {
        name: "mi100",
        model: "AMD Instinct MI100",
        gfx: "gfx908",
        per_node: 8,
        vram: Some(32 * GIB),
        cited: DATASHEET,
    },
    Part {
        name: "mi210",
        model: "AMD Instinct MI210",
        gfx: "gfx90a",
        per_node: 8,
        vram: Some(64 * GIB),
        cited: DATASHEET,
    },
    Part {
        name: "mi250x",
        model: "AMD Instinct MI250X (a GCD each)",
        gfx: "gfx90a",
        per_node: 8,
        vram: Some(64 * GIB),
        cited: DATASHEET,
    },
    Part {
        name: "mi300x",
        model: "AMD Instinct MI300X",
        gfx: "gfx942",
        per_node: 8,
        vram: Some(206_141_652_992),
        cited: "KFD mem_banks size_in_bytes on an MI300X node (192 GB HBM3, AMD data sheet)",
    },
    Part {
        name: "mi300a",
        model: "AMD Instinct MI300A (APU)",
        gfx: "gfx942",
        per_node: 4,
        vram: None,
        cited: DATASHEET,
    },
    Part {
        name: "mi325x",
        model: "AMD Instinct MI325X",
        gfx: "gfx942",
        per_node: 8,
        vram: Some(256 * GIB),
        cited: DATASHEET,
    },
    Part {
        name: "mi350x",
        model: "AMD Instinct MI350X",
        gfx: "gfx950",
        per_node: 8,
        vram: Some(288 * GIB),
        cited: DATASHEET,
    },
    Part {
        name: "mi355x",
        model: "AMD Instinct MI355X",
        gfx: "gfx950",
        per_node: 8,
        vram: Some(288 * GIB),
        cited: DATASHEET,
    },
];

/// The most GPUs a node profile holds (CPX turns 8 MI300X into 64).
pub const MAX_GPUS: u32 = 64;

/// A node of `count` GPUs of the named part (the part's own count by default). Its other
/// facts are a healthy node's unknowns: no limit, no shm size, nothing said of the driver.
pub fn part(p: &Part, count: Option<u32>) -> NodeFacts {
    let n = count.unwrap_or(p.per_node);
    let gpus = (0..n)
        .map(|i| Gpu {
            node: i + 1,
            gfx: Some(p.gfx.to_string()),
            render_minor: Some(128 + i),
            vram: p.vram,
            compute_partition: None,
            memory_partition: None,
        })
        .collect();
    NodeFacts {
        schema_version: SCHEMA_VERSION,
        source: format!("{}:{n} ({}, {}; {})", p.name, p.model, p.gfx, p.cited),
        gpus,
        driver_loaded: true,
        driver: None,
        kernel: None,
        numa_balancing: None,
        shm: None,
        memory: None,
        rdma_devices: Vec::new(),
        live: false,
        findings: Vec::new(),
    }
}

/// What `--node` was given that is neither a part nor a readable profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpecError {
    pub spec: String,
    pub why: String,
}

/// `--node PART[:N]` or `--node FILE` (a profile `infera-exec node --json` wrote).
pub fn from_spec(spec: &str, read: impl Fn(&Path) -> std::io::Result<Vec<u8>>) -> Result<NodeFacts, NodeSpecError> {
    let err = |why: String| NodeSpecError { spec: spec.to_string(), why };
    let (name, count) = spec.split_once(':').map_or((spec, None), |(n, c)| (n, Some(c)));
    if let Some(p) = PARTS.iter().find(|p| p.name.eq_ignore_ascii_case(name)) {
        let count = match count.map(str::parse::<u32>) {
            None => None,
            Some(Ok(n)) if (1..=MAX_GPUS).contains(&n) => Some(n),
            Some(_) => return Err(err(format!("the count after `:` is not a number of GPUs from 1 to {MAX_GPUS}"))),
        };
        return Ok(part(p, count));
    }
    let bytes = read(Path::new(spec)).map_err(|e| {
        let parts: Vec<&str> = PARTS.iter().map(|p| p.name).collect();
        err(format!(
            "not a part ({}) and not a readable profile: {}",
            parts.join(", "),
            infera_core::rootfs::io_reason(&e)
        ))
    })?;
    let mut node: NodeFacts = serde_json::from_slice(&bytes)
        .map_err(|e| err(format!("not a node profile (`infera-exec node --json` writes one): {e}")))?;
    if node.schema_version != SCHEMA_VERSION {
        return Err(err(format!(
            "schema_version {} (this launcher reads {SCHEMA_VERSION}); write it again with this launcher's `node --json`",
            node.schema_version
        )));
    }
    if node.gpus.len() > MAX_GPUS as usize {
        return Err(err(format!("{} GPUs, more than a node holds ({MAX_GPUS})", node.gpus.len())));
    }
    node.source = format!("{spec} ({})", node.source);
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &Path) -> std::io::Result<Vec<u8>> {
        Err(std::io::Error::from(std::io::ErrorKind::NotFound))
    }

    #[test]
    fn parts_by_name_with_a_count() {
        let n = from_spec("MI355X:4", none).unwrap();
        assert_eq!(n.gpus.len(), 4);
        assert!(n.gpus.iter().all(|g| g.gfx.as_deref() == Some("gfx950") && g.vram == Some(288 << 30)));
        assert!(n.source.starts_with("mi355x:4 (AMD Instinct MI355X, gfx950; "), "{}", n.source);
        assert_eq!(from_spec("mi300x", none).unwrap().gpus.len(), 8);
        assert_eq!(from_spec("mi300a", none).unwrap().gpus[0].vram, None, "an APU has no VRAM bank");
        for bad in ["mi300x:0", "mi300x:65", "mi300x:x"] {
            let e = from_spec(bad, none).unwrap_err();
            assert!(e.why.contains("number of GPUs from 1 to 64"), "{bad}: {}", e.why);
        }
        let e = from_spec("mi400x", none).unwrap_err();
        assert!(
            e.why.starts_with("not a part (mi100, mi210, mi250x, mi300x, mi300a, mi325x, mi350x, mi355x)"),
            "{}",
            e.why
        );
    }

    #[test]
    fn a_profile_read_back_is_the_same_node() {
        let n = part(&PARTS[3], Some(2));
        let json = serde_json::to_vec(&n).unwrap();
        let back = from_spec("node.json", |_| Ok(json.clone())).unwrap();
        assert_eq!(back.gpus, n.gpus);
        assert_eq!(back.source, format!("node.json ({})", n.source));
        let old = serde_json::to_vec(&NodeFacts { schema_version: 9, ..n }).unwrap();
        assert!(from_spec("old.json", |_| Ok(old.clone())).unwrap_err().why.starts_with("schema_version 9"));
        let e = from_spec("x.json", |_| Ok(b"{\"gpus\": 3}".to_vec())).unwrap_err();
        assert!(e.why.starts_with("not a node profile"), "{}", e.why);
    }
}
