//! Facts of the running process and the node's devices: only meaningful when the root is
//! `/` (inside the container). With another root they are not gathered, and every check
//! that needs them says "unknown" instead of guessing.

use std::path::Path;

use serde::Serialize;

use crate::rootfs::Root;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Host {
    pub pid1: bool,
    /// RLIMIT_MEMLOCK soft limit in bytes; None = unlimited.
    pub memlock: Option<u64>,
    pub caps: CapSets,
    /// `/dev/infiniband/uverbs*`
    pub rdma_devices: Vec<String>,
    pub kfd: bool,
    pub render_nodes: usize,
    /// Whether this uid can open them, the GPUs' architecture, the driver.
    pub devices: super::devices::Devices,
    /// `/dev/shm`: the engine's shared-memory queues and RCCL's transport live there.
    pub shm: Option<Shm>,
    /// The pod's memory limit and use, and the node's available memory.
    pub memory: Option<super::storage::PodMemory>,
}

/// A filesystem's size as statvfs gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shm {
    pub size: u64,
    pub available: u64,
}

fn shm() -> Option<Shm> {
    let s = nix::sys::statvfs::statvfs("/dev/shm").ok()?;
    let block = s.fragment_size();
    Some(Shm { size: s.blocks() * block, available: s.blocks_available() * block })
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CapSets {
    pub effective: Vec<String>,
    pub permitted: Vec<String>,
    pub inheritable: Vec<String>,
    pub bounding: Vec<String>,
    pub ambient: Vec<String>,
}

impl Host {
    pub fn has_effective(&self, cap: &str) -> bool {
        self.caps.effective.iter().any(|c| c == cap)
    }
}

fn read_set(set: caps::CapSet) -> Vec<String> {
    let mut v: Vec<String> =
        caps::read(None, set).map(|s| s.into_iter().map(|c| c.to_string()).collect()).unwrap_or_default();
    v.sort();
    v
}

pub fn cap_sets() -> CapSets {
    CapSets {
        effective: read_set(caps::CapSet::Effective),
        permitted: read_set(caps::CapSet::Permitted),
        inheritable: read_set(caps::CapSet::Inheritable),
        bounding: read_set(caps::CapSet::Bounding),
        ambient: read_set(caps::CapSet::Ambient),
    }
}

pub fn gather(root: &Root, gpus: Vec<super::devices::Gpu>) -> Option<Host> {
    if !root.is_host_root() {
        return None;
    }
    let memlock = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK)
        .ok()
        .and_then(|(soft, _)| (soft != nix::sys::resource::RLIM_INFINITY).then_some(soft));
    let mut rdma: Vec<String> = root
        .list(Path::new("/dev/infiniband"))
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n.starts_with("uverbs"))
        .map(|n| format!("/dev/infiniband/{n}"))
        .collect();
    rdma.sort();
    Some(Host {
        devices: super::devices::gather(root, gpus),
        shm: shm(),
        memory: Some(super::storage::pod_memory(|p| root.read_small_string(p).ok())),
        pid1: std::process::id() == 1,
        memlock,
        caps: cap_sets(),
        rdma_devices: rdma,
        kfd: root.metadata(Path::new("/dev/kfd")).is_ok(),
        render_nodes: root
            .list(Path::new("/dev/dri"))
            .iter()
            .filter(|n| n.to_string_lossy().starts_with("renderD"))
            .count(),
    })
}
