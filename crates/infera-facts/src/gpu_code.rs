//! The image's GPU code: which GPU targets the libraries the engine runs carry (torch's
//! `libtorch_hip.so`, vLLM's `_C`/`_rocm_C`/`_moe_C`, sglang's `sgl_kernel`, flash-attn,
//! aiter's per-GPU kernel directories), read from the files (`fatbin`), never loaded.
//! Which of them the engine cannot run without is said here; the plan holds them against
//! the node's GPUs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::fatbin::{self, Targets};
use crate::engines::Engine;
use infera_core::rootfs::Root;

/// One library (or aiter's kernel tree) and the GPU targets it carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuLib {
    /// `torch`, `vllm`, `sglang`, `flash-attn`, `aiter`.
    pub package: &'static str,
    #[serde(serialize_with = "crate::ser::ser_path")]
    pub path: PathBuf,
    /// The engine cannot start a model without it (torch, the engine's own kernels).
    pub required: bool,
    /// The processors it has code for (`gfx942`, `gfx9-4-generic`), each bundle's target
    /// ids reduced to their processor; an error when the file could not be read.
    #[serde(serialize_with = "ser_targets")]
    pub targets: Result<Code, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Code {
    /// Processors any bundle has code for.
    pub processors: BTreeSet<String>,
    /// Processors only some bundles have code for (a partial build).
    pub partial: BTreeSet<String>,
    pub bundles: usize,
    /// More bundles followed than were read (`fatbin::MAX_BUNDLES`).
    pub sampled: bool,
}

fn ser_targets<S: serde::Serializer>(t: &Result<Code, String>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Ok(c) => c.serialize(s),
        Err(e) => serde_json::json!({ "error": e }).serialize(s),
    }
}

/// `hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-` → `gfx942` (the processor; the
/// feature modes are the node's to match, see `plan::gpu`).
pub fn processor(id: &str) -> &str {
    let target = id.rsplit_once("--").map_or(id, |(_, t)| t);
    target.split(':').next().unwrap_or(target)
}

fn code(t: &Targets) -> Code {
    let per: Vec<BTreeSet<&str>> = t.sets.iter().map(|(s, _)| s.iter().map(|i| processor(i)).collect()).collect();
    let processors: BTreeSet<String> = per.iter().flatten().map(|p| p.to_string()).collect();
    let partial = processors.iter().filter(|p| !per.iter().all(|s| s.contains(p.as_str()))).cloned().collect();
    Code { processors, partial, bundles: t.bundles, sampled: t.sampled }
}

/// The libraries read, relative to a site directory: torch's, and vLLM's own.
const TORCH: &str = "torch/lib/libtorch_hip.so";
const VLLM: [&str; 3] = ["vllm/_C.abi3.so", "vllm/_rocm_C.abi3.so", "vllm/_moe_C.abi3.so"];
/// sglang's: every `.so` of this package directory.
const SGLANG_DIR: &str = "sgl_kernel";
/// flash-attn's, named by the interpreter's ABI tag.
const FLASH_ATTN: (&str, &str) = ("flash_attn_2_cuda.cpython-", "-x86_64-linux-gnu.so");

/// Is `path` one of the libraries [`gather`] reads, in whatever site directory? (`check
/// --image` keeps their GPU code's parts as the layers stream: the site directories are not
/// known yet.)
pub fn is_gpu_library(path: &Path) -> bool {
    let s = path.to_string_lossy();
    let under = |rel: &str| s.strip_suffix(rel).is_some_and(|head| head.ends_with('/'));
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let dir = path.parent().and_then(Path::file_name).map(|n| n.to_string_lossy()).unwrap_or_default();
    under(TORCH)
        || VLLM.iter().any(|v| under(v))
        || (dir == SGLANG_DIR && name.ends_with(".so"))
        || (name.starts_with(FLASH_ATTN.0) && name.ends_with(FLASH_ATTN.1))
}

/// The GPU libraries of torch, of each engine installed, of flash-attn and aiter, in the
/// site directories.
pub fn gather(root: &Root, site_dirs: &[PathBuf], minor: (u32, u32), engines: &[Engine]) -> Vec<GpuLib> {
    let mut aiter = Vec::new();
    let mut files: Vec<(&'static str, PathBuf, bool)> = Vec::new();
    for site in site_dirs {
        let found = |rel: &str| Some(site.join(rel)).filter(|p| root.is_file(p));
        files.extend(found(TORCH).map(|p| ("torch", p, true)));
        if engines.contains(&Engine::Vllm) {
            for rel in VLLM {
                files.extend(found(rel).map(|p| ("vllm", p, true)));
            }
        }
        if engines.contains(&Engine::Sglang) {
            files.extend(so_files(root, &site.join(SGLANG_DIR)).into_iter().map(|p| ("sglang", p, true)));
        }
        // Named by the interpreter's ABI tag: looked up, never listed (a site directory can
        // hold thousands of entries).
        let (major, minor) = minor;
        files.extend(
            found(&format!("{}{major}{minor}{}", FLASH_ATTN.0, FLASH_ATTN.1)).map(|p| ("flash-attn", p, false)),
        );
        // aiter's wheel installs its prebuilt kernels beside the package, one directory per GPU:
        // `aiter_meta/hsa/gfx942/…` (its AITER_ASM_DIR). An editable checkout keeps them in
        // the checkout (`hsa/`), which is not looked for.
        let hsa = site.join("aiter_meta/hsa");
        let gpus: BTreeSet<String> = root
            .list(&hsa)
            .into_iter()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| n.starts_with("gfx") && root.is_dir(&hsa.join(n)))
            .collect();
        if !gpus.is_empty() {
            let targets = Ok(Code { processors: gpus, partial: BTreeSet::new(), bundles: 0, sampled: false });
            aiter.push(GpuLib { package: "aiter", path: hsa, required: false, targets });
        }
    }
    let mut out: Vec<GpuLib> = files
        .into_iter()
        .filter_map(|(package, path, required)| {
            read(root, &path).map(|targets| GpuLib { package, path, required, targets })
        })
        .collect();
    out.extend(aiter);
    out
}

/// A library's code; None when it carries none (a host-only library).
fn read(root: &Root, path: &Path) -> Option<Result<Code, String>> {
    let (file, size) = match root.open_at(path) {
        Ok(f) => f,
        Err(e) => return Some(Err(infera_core::rootfs::io_reason(&e))),
    };
    match fatbin::read(file.as_ref(), size) {
        Ok(Some(t)) => Some(Ok(code(&t))),
        Ok(None) => None,
        Err(e) => Some(Err(e)),
    }
}

fn so_files(root: &Root, dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        root.list(dir).into_iter().filter(|n| n.to_string_lossy().ends_with(".so")).map(|n| dir.join(n)).collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processors_of_target_ids() {
        assert_eq!(processor("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"), "gfx942");
        assert_eq!(processor("hip-amdgcn-amd-amdhsa--gfx90a"), "gfx90a");
        assert_eq!(processor("hipv4-amdgcn-amd-amdhsa--gfx9-4-generic:xnack+"), "gfx9-4-generic");
        assert_eq!(processor("gfx950"), "gfx950");
    }

    #[test]
    fn partial_sets_are_named() {
        let t = Targets {
            sets: vec![
                (["hipv4-amdgcn-amd-amdhsa--gfx942".to_string(), "hipv4-amdgcn-amd-amdhsa--gfx950".into()].into(), 3),
                (["hipv4-amdgcn-amd-amdhsa--gfx942:xnack-".to_string()].into(), 1),
            ],
            bundles: 4,
            sampled: false,
        };
        let c = code(&t);
        assert_eq!(c.processors, ["gfx942".to_string(), "gfx950".into()].into());
        assert_eq!(c.partial, ["gfx950".to_string()].into());
    }
}
