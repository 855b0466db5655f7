//! Facts of the running process and the node's devices: only meaningful when the root is
//! `/` (inside the container). With another root they are not gathered, and every check
//! that needs them says "unknown" instead of guessing.

use std::path::Path;

use serde::Serialize;

use infera_core::rootfs::Root;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Host {
    pub pid1: bool,
    /// RLIMIT_MEMLOCK soft limit in bytes; None = unlimited.
    pub memlock: Option<u64>,
    pub caps: CapSets,
    pub kfd: bool,
    pub render_nodes: usize,
    /// Whether this uid can open them.
    pub devices: super::devices::Devices,
}

/// `/dev/shm` (the engine's shared-memory queues and RCCL's transport live there): its
/// size as statvfs gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Shm {
    pub size: u64,
    pub available: u64,
}

pub(super) fn shm() -> Option<Shm> {
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

pub fn gather(root: &Root) -> Option<Host> {
    if !root.is_host_root() {
        return None;
    }
    let memlock = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK)
        .ok()
        .and_then(|(soft, _)| (soft != nix::sys::resource::RLIM_INFINITY).then_some(soft));
    Some(Host {
        devices: super::devices::gather(root),
        pid1: std::process::id() == 1,
        memlock,
        caps: cap_sets(),
        kfd: root.metadata(Path::new("/dev/kfd")).is_ok(),
        render_nodes: root
            .list(Path::new("/dev/dri"))
            .iter()
            .filter(|n| n.to_string_lossy().starts_with("renderD"))
            .count(),
    })
}
