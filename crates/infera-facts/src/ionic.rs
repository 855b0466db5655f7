//! The RoCE userspace provider (AMD Pensando `ionic`): the host's build mounted at
//! `/host-libionic/libionic.so`, and what the image's libibverbs would load.
//!
//! A provider whose ABI does not match the host kernel driver makes libibverbs reject every
//! device ("Driver ionic does not support the kernel ABI of 1 (supports 4 to 4)"); Mooncake
//! then finds no RDMA device, falls back to HIP IPC, and cross-node PD dies on
//! hipIpcOpenMemHandle. The stock sglang image ships 54.0-149 (ABI 1) where hosts need
//! 54.0-187 (ABI 4) [AMD-AGI/Infera deploy/overlay/infera-exec].
//!
//! libibverbs loads a provider `<name>-rdmav<PABI>.so`, PABI being its private ABI (34 in
//! rdma-core 34 to 56, 65 in 65.0), and a provider only loads into a libibverbs of the same
//! PABI (its ELF needs the version `IBVERBS_PRIVATE_<PABI>`) [linux-rdma/rdma-core
//! libibverbs/dynamic_driver.c, init.c].

use std::path::{Path, PathBuf};

use infera_core::rootfs::Root;

/// Where the pods mount the host's RoCE provider build (the stack's convention); the
/// overlay's `rdma/libionic-rdmav<N>.so` links point at it.
pub const HOST_LIBIONIC: &str = "/host-libionic/libionic.so";

/// Where images keep the provider library (Debian/Ubuntu, then RHEL-likes); libibverbs'
/// `libionic-rdmav*.so` in the provider directory links to it.
pub const IMAGE_PROVIDERS: [&str; 2] = ["/usr/lib/x86_64-linux-gnu/libionic.so.1", "/usr/lib64/libionic.so.1"];

/// libibverbs' provider directories (`${libdir}/libibverbs`).
pub const PROVIDER_DIRS: [&str; 2] = ["/usr/lib/x86_64-linux-gnu/libibverbs", "/usr/lib64/libibverbs"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ionic {
    /// The PABI the host build needs (`IBVERBS_PRIVATE_<N>` in its ELF), if it says.
    pub host_pabi: Option<u32>,
    /// The image's libibverbs PABI, from the suffix of its providers (`lib*-rdmav<N>.so`).
    pub image_pabi: Option<u32>,
    /// The image's own provider file (resolved inside the root), or why there is none.
    pub target: Result<PathBuf, String>,
    /// The host build and the image's copy are the same bytes.
    pub same: bool,
    /// The image's copy is on a filesystem that can be written.
    pub writable: bool,
}

/// None when the pod mounts no host build (aggregated serving never touches RDMA).
pub fn detect(root: &Root) -> Option<Ionic> {
    // A provider is a few hundred KiB; bounded all the same.
    let host = root.read_file(Path::new(HOST_LIBIONIC), 64 << 20).ok()?;
    let target = IMAGE_PROVIDERS
        .iter()
        .find_map(|p| root.stat(Path::new(p)).ok().filter(|(_, m)| m.is_file()).map(|(r, _)| r))
        .ok_or_else(|| format!("no {} in the image", IMAGE_PROVIDERS.join(" or ")));
    let (same, writable) = match &target {
        Ok(t) => {
            let h = root.host(t);
            (infera_core::rootfs::read_bounded(&h, 64 << 20).is_ok_and(|image| image == host), writable(&h))
        }
        Err(_) => (false, false),
    };
    Some(Ionic { host_pabi: needed_pabi(&host), image_pabi: image_pabi(root), target, same, writable })
}

/// `IBVERBS_PRIVATE_<N>` among the versions the ELF needs.
pub fn needed_pabi(elf: &[u8]) -> Option<u32> {
    let e = goblin::elf::Elf::parse(elf).ok()?;
    let verneed = e.verneed.as_ref()?;
    verneed
        .iter()
        .flat_map(|file| file.iter().collect::<Vec<_>>())
        .find_map(|v| e.dynstrtab.get_at(v.vna_name)?.strip_prefix("IBVERBS_PRIVATE_")?.parse().ok())
}

/// The PABI the image's providers are built for: the `N` of `lib<name>-rdmav<N>.so`.
fn image_pabi(root: &Root) -> Option<u32> {
    PROVIDER_DIRS.iter().find_map(|d| {
        root.list(Path::new(d)).iter().find_map(|n| {
            let n = n.to_str()?;
            n.strip_suffix(".so")?.rsplit_once("-rdmav")?.1.parse().ok()
        })
    })
}

fn writable(file: &Path) -> bool {
    use nix::sys::statvfs::{statvfs, FsFlags};
    let dir = file.parent().unwrap_or(Path::new("/"));
    statvfs(dir).is_ok_and(|s| !s.flags().contains(FsFlags::ST_RDONLY))
        && nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}
