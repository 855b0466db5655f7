//! The node: the GPUs (KFD: gfx target, memory, partitions, render minors), the amdgpu driver
//! and kernel, NUMA balancing, `/dev/shm`, the pod's memory and the RDMA devices. A value of
//! its own, apart from the image's facts: read at root `/` (in the pod, a DaemonSet, `kubectl
//! debug node/…`), or from a node profile (`infera-exec node -o json` writes one; `--node FILE`
//! reads it back), or made for a named AMD Instinct part (`--node mi300x:8`), so the node's
//! checks run in CI exactly as in the pod.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::devices::Gpu;
use super::finding::Finding;
use super::host::Shm;
use super::storage::PodMemory;
use infera_core::rootfs::Root;

/// The profile's schema version: a field removed or changed in meaning is a new version.
/// Version 2 keeps the pod that read the node (its /dev/shm, its memory limit) apart from
/// the node; version 1 mixed them (read back, its pod's values are the profiler's).
pub const SCHEMA_VERSION: u32 = 2;

/// A field a later launcher adds is read past (a field removed or changed in meaning is a
/// new schema version).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFacts {
    pub schema_version: u32,
    /// Where the facts come from: `this node (/)`, `mi300x:8 (AMD Instinct MI300X, …)`, a file.
    pub source: String,
    /// The node's name (Kubernetes: `spec.nodeName`, given to `infera-exec node` by the
    /// downward API as INFERA_NODE_NAME, or `--name`).
    #[serde(default)]
    pub name: Option<String>,
    /// The GPUs' product, from their PCI device id (`AMD Instinct MI300X`).
    #[serde(default)]
    pub product: Option<String>,
    /// The node's GPUs as its KFD topology lists them (every GPU of the node: sysfs is not
    /// namespaced; a pod's own are those whose render node it was given).
    pub gpus: Vec<Gpu>,
    /// `/sys/module/amdgpu` present; its `version` (AMD's packaged driver only).
    pub driver_loaded: bool,
    pub driver: Option<String>,
    pub kernel: Option<String>,
    /// `/proc/sys/kernel/numa_balancing`.
    pub numa_balancing: Option<u32>,
    /// The node's memory (`MemTotal` of /proc/meminfo).
    #[serde(default)]
    pub host_memory: Option<u64>,
    /// `/dev/infiniband/uverbs*`.
    pub rdma_devices: Vec<String>,
    /// The pod judged on this node. At root `/`, the one the launcher runs in; a profile
    /// read back holds the pod that *read* the node (a DaemonSet's, with its 64 MiB
    /// /dev/shm), which the launcher replaces with the worker's (`--shm-size`, `--memory`).
    #[serde(default)]
    pub pod: Pod,
    /// What could not be read of the node, and (in a profile) what in it would fail an
    /// engine.
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// Read from this node (root `/`), not given as a profile.
    #[serde(skip)]
    pub live: bool,
    /// What a report names it by: its name, else the part and its count (never a file path).
    #[serde(skip)]
    pub label: String,
    /// A node type of Kubernetes nodes: the labeller's labels it was formed from.
    #[serde(skip)]
    pub labelled: Option<Labelled>,
    /// A named part's name (`--node mi300x`): every variant of the part.
    #[serde(skip)]
    pub part: Option<&'static str>,
}

/// A pod's /dev/shm and memory: of the pod the launcher runs in, or of the worker's spec as
/// `--shm-size`/`--memory` give it; unknown (not judged) otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    pub shm: Option<Shm>,
    pub memory: Option<PodMemory>,
    /// Whose pod: `this pod (/)`, `the pod that ran infera-exec node`, `--shm-size 16g`.
    #[serde(default)]
    pub source: String,
}

impl NodeFacts {
    /// How messages name where the node's facts came from.
    pub fn described(&self) -> String {
        if self.live {
            "KFD topology".to_string()
        } else {
            format!("--node {}", self.label)
        }
    }
}

/// Read at root `/`; None elsewhere (an image root has no node). `name`: the node's name.
pub fn gather(root: &Root, name: Option<String>) -> Option<NodeFacts> {
    if !root.is_host_root() {
        return None;
    }
    let mut findings = Vec::new();
    let gpus = super::devices::kfd_gpus(root, &mut findings);
    // One value a file: its first line (a second is no part of it, and is never printed).
    let line = |p: &str| infera_core::rootfs::first_line(&root.read_small_string(Path::new(p)).ok()?);
    let mut rdma: Vec<String> = root
        .list(Path::new("/dev/infiniband"))
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n.starts_with("uverbs"))
        .map(|n| format!("/dev/infiniband/{n}"))
        .collect();
    rdma.sort();
    let host_memory = root.read_small_string(Path::new("/proc/meminfo")).ok().and_then(|m| {
        use procfs_core::FromRead;
        procfs_core::Meminfo::from_read(m.as_bytes()).ok().map(|m| m.mem_total)
    });
    let memory = super::storage::pod_memory(|p| root.read_small_string(p).ok());
    let mut node = NodeFacts {
        schema_version: SCHEMA_VERSION,
        source: "this node (/)".into(),
        name,
        product: product_of(&gpus),
        gpus,
        driver_loaded: root.metadata(Path::new("/sys/module/amdgpu")).is_ok(),
        driver: line("/sys/module/amdgpu/version"),
        kernel: line("/proc/sys/kernel/osrelease"),
        numa_balancing: line("/proc/sys/kernel/numa_balancing").and_then(|v| v.parse().ok()),
        host_memory,
        rdma_devices: rdma,
        pod: Pod { shm: super::host::shm(), memory: Some(memory), source: "this pod (/)".into() },
        findings,
        live: true,
        label: String::new(),
        labelled: None,
        part: None,
    };
    node.label = label_of(&node);
    Some(node)
}

/// The one product the GPUs' device ids name (None: none, or several).
fn product_of(gpus: &[Gpu]) -> Option<String> {
    let mut parts = gpus.iter().map(|g| g.device_id.as_deref().and_then(part_of_device).map(|p| p.model));
    let first = parts.next()??;
    parts.all(|p| p == Some(first)).then(|| first.to_string())
}

/// A node's label: its name, else its GPUs (`MI300X ×8`, `gfx942 ×8`).
fn label_of(n: &NodeFacts) -> String {
    if let Some(name) = n.name.as_deref().filter(|s| !s.trim().is_empty()) {
        return name.to_string();
    }
    let what = n
        .product
        .as_deref()
        .map(|p| p.trim_start_matches("AMD Instinct ").to_string())
        .or_else(|| n.gpus.first().and_then(|g| g.gfx.clone()))
        .unwrap_or_else(|| "no GPU".to_string());
    format!("{what} ×{}", n.gpus.len())
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
    /// Its PCI device ids (lower-case hex, as the node labeller's `device-id` label writes
    /// them; libdrm's amdgpu.ids), virtual functions included.
    pub device_ids: &'static [&'static str],
    /// What says so.
    pub cited: &'static str,
}

const GIB: u64 = 1 << 30;
const DATASHEET: &str = "AMD Instinct data sheet; ROCm docs, \"GPU hardware specifications\" \
                         (rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html)";

/// The parts, from AMD's data sheets and ROCm's hardware table: memory is the marketed size
/// (the KFD bank is a little under it), except the MI300X's, read on a real node. Device ids
/// from libdrm's amdgpu.ids (as ROCm/k8s-device-plugin's node labeller carries it).
pub const PARTS: &[Part] = &[
    Part {
        name: "mi100",
        model: "AMD Instinct MI100",
        gfx: "gfx908",
        per_node: 8,
        vram: Some(32 * GIB),
        device_ids: &["738c"],
        cited: DATASHEET,
    },
    Part {
        name: "mi210",
        model: "AMD Instinct MI210",
        gfx: "gfx90a",
        per_node: 8,
        vram: Some(64 * GIB),
        device_ids: &["740f"],
        cited: DATASHEET,
    },
    Part {
        name: "mi250x",
        model: "AMD Instinct MI250X (a GCD each)",
        gfx: "gfx90a",
        per_node: 8,
        vram: Some(64 * GIB),
        device_ids: &["7408", "740c"],
        cited: DATASHEET,
    },
    Part {
        name: "mi300x",
        model: "AMD Instinct MI300X",
        gfx: "gfx942",
        per_node: 8,
        vram: Some(206_141_652_992),
        device_ids: &["74a1", "74a9", "74bd", "74b5"],
        cited: "KFD mem_banks size_in_bytes on an MI300X node (192 GB HBM3, AMD data sheet)",
    },
    Part {
        name: "mi300a",
        model: "AMD Instinct MI300A (APU)",
        gfx: "gfx942",
        per_node: 4,
        vram: None,
        device_ids: &["74a0"],
        cited: DATASHEET,
    },
    Part {
        name: "mi308x",
        model: "AMD Instinct MI308X",
        gfx: "gfx942",
        per_node: 8,
        vram: Some(192 * GIB),
        device_ids: &["74a2", "74b6"],
        cited: DATASHEET,
    },
    Part {
        name: "mi325x",
        model: "AMD Instinct MI325X",
        gfx: "gfx942",
        per_node: 8,
        vram: Some(256 * GIB),
        device_ids: &["74a5", "74b9"],
        cited: DATASHEET,
    },
    Part {
        name: "mi350x",
        model: "AMD Instinct MI350X",
        gfx: "gfx950",
        per_node: 8,
        vram: Some(288 * GIB),
        device_ids: &["75a0", "75b0"],
        cited: DATASHEET,
    },
    Part {
        name: "mi355x",
        model: "AMD Instinct MI355X",
        gfx: "gfx950",
        per_node: 8,
        vram: Some(288 * GIB),
        device_ids: &["75a3", "75b3"],
        cited: DATASHEET,
    },
];

/// The part a PCI device id (`74a1`, `0x74A1`) is.
pub fn part_of_device(id: &str) -> Option<&'static Part> {
    let id = id.trim().trim_start_matches("0x").to_ascii_lowercase();
    PARTS.iter().find(|p| p.device_ids.contains(&id.as_str()))
}

/// The most GPUs a node profile holds (CPX turns 8 MI300X into 64).
pub const MAX_GPUS: u32 = 64;

/// The most memory a profile's GPU may claim: above every Instinct part's (288 GiB, and the
/// MI400 series' announced 432 GB), with room; more is a profile no node wrote.
pub const MAX_GPU_MEMORY: u64 = 1 << 40;

/// A node of `count` GPUs of the named part (the part's own count by default). Its other
/// facts are a healthy node's unknowns: nothing said of the driver; no pod (the worker's is
/// given by `--shm-size`/`--memory`).
pub fn part(p: &Part, count: Option<u32>) -> NodeFacts {
    let n = count.unwrap_or(p.per_node);
    let gpus = (0..n)
        .map(|i| Gpu {
            node: i + 1,
            gfx: Some(p.gfx.to_string()),
            device_id: p.device_ids.first().map(|d| d.to_string()),
            render_minor: Some(128 + i),
            vram: p.vram,
            compute_partition: None,
            memory_partition: None,
        })
        .collect();
    let source = format!("{}:{n} ({}, {}; {})", p.name, p.model, p.gfx, p.cited);
    let label = if count.is_some() { format!("{}:{n}", p.name) } else { p.name.to_string() };
    NodeFacts { part: Some(p.name), ..NodeFacts::of_description(source, Some(p.model.to_string()), gpus, label) }
}

impl NodeFacts {
    /// A node as a description gives it (a part, Kubernetes' labels): its GPUs, with a loaded
    /// driver, and nothing of its host or of a pod.
    pub fn of_description(source: String, product: Option<String>, gpus: Vec<Gpu>, label: String) -> NodeFacts {
        NodeFacts {
            schema_version: SCHEMA_VERSION,
            source,
            name: None,
            product,
            gpus,
            driver_loaded: true,
            driver: None,
            kernel: None,
            numa_balancing: None,
            host_memory: None,
            rdma_devices: Vec::new(),
            pod: Pod::default(),
            findings: Vec::new(),
            live: false,
            label,
            labelled: None,
            part: None,
        }
    }
}

/// What `--node` was given that is neither a part nor a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpecError {
    pub spec: String,
    pub why: String,
    /// The file does not exist (66), rather than being no profile (65) or no part (2).
    pub kind: SpecProblem,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecProblem {
    /// Neither a part nor a file: a usage error.
    Unknown,
    /// A file that is not a node profile, or one no node could have written.
    Invalid,
    /// No such file.
    Missing,
}

/// A node the labels do not describe, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unjudged {
    pub node: String,
    pub why: String,
}

/// The labeller's labels a node type was formed from: what a node affinity selects it by, and
/// the names of its nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labelled {
    /// Device id → GPUs of it (the multi-value form's counts; the single form: the node's).
    pub device_ids: BTreeMap<String, u32>,
    pub vram: Option<String>,
    pub partition: Option<String>,
    pub driver: Option<String>,
    pub nodes: Vec<String>,
}

/// A `--node` that is neither a part nor a readable file: a misspelt part (with the part
/// meant), a file not there (66), or one that cannot be read (65).
pub(crate) fn unreadable(spec: &str, e: &std::io::Error) -> NodeSpecError {
    let name = spec.split(':').next().unwrap_or(spec);
    let parts: Vec<&str> = PARTS.iter().map(|p| p.name).collect();
    let guess = if spec.contains('/') || spec.ends_with(".json") || spec.ends_with(".yaml") {
        String::new()
    } else {
        crate::suggest::did_you_mean(&name.to_ascii_lowercase(), parts.iter().copied())
            .map_or(String::new(), |d| format!("; {d}"))
    };
    let kind = match (e.kind(), guess.is_empty()) {
        (_, false) => SpecProblem::Unknown,
        (std::io::ErrorKind::NotFound, true) => SpecProblem::Missing,
        _ => SpecProblem::Invalid,
    };
    let why = format!(
        "not a part ({}) and not a readable profile: {}{guess}",
        parts.join(", "),
        infera_core::rootfs::io_reason(e)
    );
    NodeSpecError { spec: spec.to_string(), why, kind }
}

/// One node: a part, or a profile file.
pub(crate) fn one_of(spec: &str, read: impl Fn(&Path) -> std::io::Result<Vec<u8>>) -> Result<NodeFacts, NodeSpecError> {
    let err = |kind, why: String| NodeSpecError { spec: spec.to_string(), why, kind };
    let (name, count) = spec.split_once(':').map_or((spec, None), |(n, c)| (n, Some(c)));
    if let Some(p) = PARTS.iter().find(|p| p.name.eq_ignore_ascii_case(name)) {
        let count = match count.map(str::parse::<u32>) {
            None => None,
            Some(Ok(n)) if (1..=p.per_node).contains(&n) => Some(n),
            Some(_) => {
                return Err(err(
                    SpecProblem::Unknown,
                    format!(
                        "an {} node has 1 to {} GPUs: the count after `:` is the GPUs of one node (a partitioned \
                         node, CPX or NPS4, is described by its profile: `infera-exec node -o json`)",
                        p.model, p.per_node
                    ),
                ))
            }
        };
        return Ok(part(p, count));
    }
    let bytes = read(Path::new(spec)).map_err(|e| unreadable(spec, &e))?;
    let mut node = read_profile(&bytes).map_err(|why| err(SpecProblem::Invalid, why))?;
    node.label = label_of(&node);
    node.source = format!("{spec} ({})", node.source);
    Ok(node)
}

/// A profile's JSON (schema 1 or 2), held to what a node can be. Its pod is the one that
/// read the node, kept only as it was written.
fn read_profile(bytes: &[u8]) -> Result<NodeFacts, String> {
    let not_one = |e: serde_json::Error| format!("not a node profile (`infera-exec node -o json` writes one): {e}");
    let mut v: serde_json::Value = serde_json::from_slice(bytes).map_err(not_one)?;
    let version = v.get("schema_version").and_then(serde_json::Value::as_u64);
    match (version, v.as_object_mut()) {
        (Some(1), Some(o)) => {
            // Version 1: the profiling pod's /dev/shm and memory at the top.
            let pod = serde_json::json!({
                "shm": o.remove("shm").unwrap_or_default(),
                "memory": o.remove("memory").unwrap_or_default(),
                "source": "the pod that ran `infera-exec node` (a version 1 profile)",
            });
            o.insert("pod".into(), pod);
        }
        (Some(2), Some(o)) => {
            // What `node` said of it (its refusal) is the node's verdict, not a fact.
            o.remove("error");
        }
        (Some(n), _) => {
            return Err(format!(
                "schema_version {n} (this launcher reads 1 and {SCHEMA_VERSION}); write it again with this launcher's \
                 `node -o json`"
            ))
        }
        (None, _) => return Err(not_one(serde::de::Error::missing_field("schema_version"))),
    }
    let node: NodeFacts = serde_json::from_value(v).map_err(not_one)?;
    bounded(&node)?;
    Ok(node)
}

/// A Kubernetes node's name: a DNS subdomain (RFC 1123), at most 253 characters.
pub fn is_node_name(n: &str) -> bool {
    let ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.';
    !n.is_empty() && n.len() <= 253 && n.bytes().all(ok)
}

/// A value of a profile as a message shows it: escaped, at most 64 characters of it.
fn shown(v: &str) -> String {
    let e = v.escape_debug().to_string();
    match e.char_indices().nth(64) {
        Some((at, _)) => format!("`{}…` ({} bytes)", &e[..at], v.len()),
        None => format!("`{e}`"),
    }
}

/// What no node has: more GPUs than a node holds, a GPU without memory or with more than
/// any GPU has.
fn bounded(node: &NodeFacts) -> Result<(), String> {
    // What names the node in every cell's messages: a Kubernetes node name (a DNS subdomain,
    // RFC 1123: at most 253 characters, lower-case letters, digits, `-` and `.`), a product
    // name, a source line; no profile a node wrote holds more.
    if let Some(n) = &node.name {
        if !is_node_name(n) {
            return Err(format!(
                "`name` is not a node's name (a DNS subdomain of at most 253 characters): {}",
                shown(n)
            ));
        }
    }
    let text = [("product", node.product.as_deref().unwrap_or_default(), 128), ("source", &node.source, 1024)];
    for (what, v, max) in text {
        if v.chars().count() > max || v.chars().any(char::is_control) {
            return Err(format!("`{what}` holds more than a line of {max} characters: {}", shown(v)));
        }
    }
    if node.gpus.len() > MAX_GPUS as usize {
        return Err(format!("{} GPUs, more than a node holds ({MAX_GPUS})", node.gpus.len()));
    }
    for g in &node.gpus {
        match g.vram {
            Some(0) => return Err(format!("GPU {} has 0 bytes of memory: no GPU does", g.node)),
            Some(b) if b > MAX_GPU_MEMORY => {
                return Err(format!(
                    "GPU {} has {b} bytes of memory, more than any GPU ({} TiB is the bound; the largest Instinct \
                     part holds 288 GiB)",
                    g.node,
                    MAX_GPU_MEMORY >> 40
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one node a part or a profile gives.
    fn one(spec: &str, read: impl Fn(&Path) -> std::io::Result<Vec<u8>>) -> Result<NodeFacts, NodeSpecError> {
        one_of(spec, read)
    }

    fn none(_: &Path) -> std::io::Result<Vec<u8>> {
        Err(std::io::Error::from(std::io::ErrorKind::NotFound))
    }

    #[test]
    fn parts_by_name_with_a_count_up_to_a_nodes() {
        let n = one("MI355X:4", none).unwrap();
        assert_eq!(n.gpus.len(), 4);
        assert!(n.gpus.iter().all(|g| g.gfx.as_deref() == Some("gfx950") && g.vram == Some(288 << 30)));
        assert!(n.source.starts_with("mi355x:4 (AMD Instinct MI355X, gfx950; "), "{}", n.source);
        assert_eq!((n.label.as_str(), n.product.as_deref()), ("mi355x:4", Some("AMD Instinct MI355X")));
        assert_eq!(one("mi300x", none).unwrap().gpus.len(), 8);
        assert_eq!(one("mi300x", none).unwrap().label, "mi300x");
        assert_eq!(one("mi300a", none).unwrap().gpus[0].vram, None, "an APU has no VRAM bank");
        for bad in ["mi300x:0", "mi300x:9", "mi300x:16", "mi300x:x", "mi300a:8"] {
            let e = one(bad, none).unwrap_err();
            assert!(e.why.contains("node has 1 to"), "{bad}: {}", e.why);
            assert_eq!(e.kind, SpecProblem::Unknown, "{bad}");
        }
        let e = one("mi300", none).unwrap_err();
        assert!(e.why.ends_with("did you mean `mi300x`?"), "{}", e.why);
        assert_eq!(e.kind, SpecProblem::Unknown);
        let e = one("mi400x", none).unwrap_err();
        assert!(e.why.starts_with("not a part (mi100, mi210, mi250x, mi300x, mi300a, mi308x, mi325x"), "{}", e.why);
        let e = one("profiles/gpu-17.json", none).unwrap_err();
        assert_eq!(e.kind, SpecProblem::Missing, "{}", e.why);
    }

    #[test]
    fn device_ids_name_their_part() {
        assert_eq!(part_of_device("74a1").map(|p| p.name), Some("mi300x"));
        assert_eq!(part_of_device("0x75A3").map(|p| p.name), Some("mi355x"));
        assert_eq!(part_of_device("740f").map(|p| p.gfx), Some("gfx90a"));
        assert!(part_of_device("1234").is_none());
    }

    #[test]
    fn a_profile_read_back_is_the_same_node_named_by_its_name_or_gpus() {
        let mut n = part(&PARTS[3], Some(2));
        n.pod = Pod { shm: Some(Shm { size: 64 << 20, available: 64 << 20 }), memory: None, source: "x".into() };
        let json = serde_json::to_vec(&n).unwrap();
        let back = one("node.json", |_| Ok(json.clone())).unwrap();
        assert_eq!(back.gpus, n.gpus);
        assert_eq!(back.pod, n.pod, "the profiler's pod, kept as written");
        assert_eq!(back.source, format!("node.json ({})", n.source));
        assert_eq!(back.label, "MI300X ×2", "a profile without a name is named by its GPUs, not its file");
        let named = serde_json::to_vec(&NodeFacts { name: Some("gpu-node-17".into()), ..n.clone() }).unwrap();
        assert_eq!(one("a.json", |_| Ok(named.clone())).unwrap().label, "gpu-node-17");
        let old = serde_json::to_vec(&NodeFacts { schema_version: 9, ..n.clone() }).unwrap();
        assert!(one("old.json", |_| Ok(old.clone())).unwrap_err().why.starts_with("schema_version 9"));
        let e = one("x.json", |_| Ok(b"{\"gpus\": 3}".to_vec())).unwrap_err();
        assert!(e.why.starts_with("not a node profile"), "{}", e.why);
        assert_eq!(e.kind, SpecProblem::Invalid);
    }

    #[test]
    fn a_version_1_profile_reads_its_shm_as_the_profilers_pod() {
        let v1 = br#"{"schema_version": 1, "source": "this node (/)", "gpus": [{"node": 1, "gfx": "gfx942",
            "render_minor": 128, "vram": 206141652992, "compute_partition": null, "memory_partition": null}],
            "driver_loaded": true, "driver": null, "kernel": "6.8", "numa_balancing": 0,
            "shm": {"size": 67108864, "available": 67108864},
            "memory": {"limit": 67108864, "usage": 1, "host_available": 2, "source": "m"}, "rdma_devices": [],
            "written_by_a_later_launcher": {"a": 1}}"#;
        let n = one("v1.json", |_| Ok(v1.to_vec())).unwrap();
        assert_eq!(n.pod.shm.map(|s| s.size), Some(64 << 20));
        assert_eq!(n.pod.memory.and_then(|m| m.limit), Some(64 << 20));
        assert_eq!(n.label, "gfx942 ×1");
    }

    #[test]
    fn a_profile_is_held_to_what_a_node_can_be() {
        let with = |vram: Option<u64>, count: u32| {
            let mut n = part(&PARTS[3], Some(1));
            n.gpus = (0..count).map(|i| Gpu { node: i, vram, ..n.gpus[0].clone() }).collect();
            let json = serde_json::to_vec(&n).unwrap();
            one("p.json", |_| Ok(json.clone()))
        };
        let e = with(Some(0), 8).unwrap_err();
        assert!(e.why.contains("has 0 bytes of memory"), "{}", e.why);
        let e = with(Some(u64::MAX), 8).unwrap_err();
        assert!(e.why.contains("18446744073709551615 bytes of memory, more than any GPU"), "{}", e.why);
        assert_eq!(e.kind, SpecProblem::Invalid);
        let e = with(Some(1 << 30), 65).unwrap_err();
        assert!(e.why.contains("65 GPUs, more than a node holds"), "{}", e.why);
        assert!(with(None, 4).is_ok(), "an APU's GPUs have no VRAM bank");
        assert!(with(Some(1 << 30), 0).unwrap().gpus.is_empty(), "a node without GPUs is a node: the cell says so");
        // Its name and source name it in every cell: a node's name, a line.
        let named = |name: &str, source: &str| {
            let n = NodeFacts { name: Some(name.into()), source: source.into(), ..part(&PARTS[3], None) };
            let json = serde_json::to_vec(&n).unwrap();
            one("p.json", |_| Ok(json.clone()))
        };
        assert!(named("gpu-node-17.example", "this node (/)").is_ok());
        let e = named("node\nerror[forged]: x", "s").unwrap_err();
        assert!(e.why.starts_with("`name` is not a node's name"), "{}", e.why);
        let e = named("n", &"x".repeat(1 << 20)).unwrap_err();
        assert!(e.why.starts_with("`source` holds more than a line of 1024 characters"), "{}", e.why);
        assert!(e.why.len() < 300, "{}", e.why.len());
    }
}
