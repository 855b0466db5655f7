//! The facts of a tree, whatever its layout: its programs, the modules and libraries its
//! manifest (and the request) names, its mount, its shared objects on a noexec mount; and
//! the overlay's engine patches.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::check::{self, file_presence, module_presence};
use super::{LoadOptions, Mount, Patch, Paths, Presence, TreeFacts};
use crate::manifest::Manifest;
use infera_core::rootfs::Root;

/// `root`: what paths of the tree must stay inside (its directory, or the whole payload).
pub fn tree_facts(root: &Path, paths: &Paths, m: &Manifest, opts: &LoadOptions) -> TreeFacts {
    tree_facts_on(root, paths, m, opts, mount(paths))
}

/// The mount flags of a tree's parts together: read-only and nosuid only if all are, noexec
/// if any is.
pub fn mount(paths: &Paths) -> Mount {
    let mounts: Vec<Mount> = paths.parts.iter().map(|p| check::mount_of(p)).collect();
    Mount {
        read_only: !mounts.is_empty() && mounts.iter().all(|m| m.read_only),
        noexec: mounts.iter().any(|m| m.noexec),
        nosuid: !mounts.is_empty() && mounts.iter().all(|m| m.nosuid),
    }
}

/// [`tree_facts`] with the mount flags already read.
pub fn tree_facts_on(root: &Path, paths: &Paths, m: &Manifest, opts: &LoadOptions, mount: Mount) -> TreeFacts {
    let mut modules = BTreeMap::new();
    // A capability's modules are looked for in its own directory first.
    for (name, c) in &m.capabilities {
        let dirs: Vec<PathBuf> = paths.caps.get(name).into_iter().chain(&paths.site).cloned().collect();
        for dotted in &c.modules {
            if !modules.contains_key(dotted) {
                modules.insert(dotted.clone(), first_present(&dirs, |site| module_presence(root, site, dotted)));
            }
        }
    }
    let named = m.engines.values().map(|e| &e.module).chain(m.server.iter().map(|s| &s.module));
    for dotted in named.chain(opts.modules.iter()) {
        if !modules.contains_key(dotted) {
            modules.insert(dotted.clone(), first_present(&paths.site, |site| module_presence(root, site, dotted)));
        }
    }
    let mut libraries = BTreeMap::new();
    for l in m.capabilities.values().flat_map(|c| c.libraries.iter()) {
        libraries.insert(l.clone(), first_present(&paths.lib, |lib| file_presence(root, &lib.join(l))));
    }
    let mut top_modules: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut dists = Vec::new();
    for site in &paths.site {
        let (ms, ds) = check::listing(site);
        for m in ms {
            top_modules.entry(m).or_insert_with(|| site.clone());
        }
        dists.extend(ds);
    }
    let mut cap_modules = BTreeMap::new();
    for (name, dir) in &paths.caps {
        let (ms, ds) = check::listing(dir);
        cap_modules.insert(name.clone(), ms);
        dists.extend(ds);
    }
    TreeFacts {
        bin: programs(&paths.bin),
        top_modules,
        cap_modules,
        dists,
        modules,
        libraries,
        mount,
        shared_objects: false,
        walked: None,
        integrity: None,
    }
}

/// The first directory where it is present (or escapes); Missing when in none.
fn first_present(dirs: &[PathBuf], look: impl Fn(&Path) -> Presence) -> Presence {
    dirs.iter().map(|d| look(d)).find(|p| *p != Presence::Missing).unwrap_or(Presence::Missing)
}

/// The programs of the bin directories (first one wins), as the host sees them.
fn programs(bins: &[PathBuf]) -> BTreeMap<String, (PathBuf, infera_core::exe::ExecFile)> {
    let host = Root::new("/");
    let mut out = BTreeMap::new();
    for bin in bins {
        // Listed without `read_dir` (its `fstat` and 32 KiB buffer per directory).
        let _ = infera_core::rootfs::each_entry(bin, |name, _| {
            let Some(name) = name.to_str() else { return };
            if !out.contains_key(name) {
                let path = bin.join(name);
                let file = infera_core::exe::inspect(&host, &path);
                out.insert(name.to_string(), (path, file));
            }
        });
    }
    out
}

/// `patches/<engine>/*.py` and `patches/<engine>_<part>/*.py` (sglang ships
/// `sglang_disagg`, `sglang_responses`, `sglang_rocm`), directories and files in name order.
pub fn patches(overlay: &Path) -> Vec<Patch> {
    let dir = overlay.join("patches");
    let mut dirs: Vec<(String, &'static str)> = fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter_map(|n| {
                    let engine = infera_facts::engines::TABLE
                        .iter()
                        .find(|e| n == e.name || n.starts_with(&format!("{}_", e.name)))?;
                    Some((n, engine.name))
                })
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    let mut out = Vec::new();
    for (name, engine) in dirs {
        let Ok(rd) = fs::read_dir(dir.join(&name)) else { continue };
        let mut files: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "py") && p.is_file())
            .collect();
        files.sort();
        out.extend(files.into_iter().map(|file| Patch { engine, file }));
    }
    out
}

/// `rdma/libionic-rdmav<N>.so -> /host-libionic/libionic.so`: the links that let libibverbs
/// load the host's build by path (RDMAV_DRIVERS) without writing into the image. They point
/// outside the overlay on purpose, at the one path the pod spec mounts; nothing else may.
pub fn rdma_providers(overlay: &Path) -> BTreeMap<u32, PathBuf> {
    let dir = overlay.join("rdma");
    let mut out = BTreeMap::new();
    let _ = infera_core::rootfs::each_entry(&dir, |name, _| {
        let Some(pabi) =
            name.to_str().and_then(|n| n.strip_prefix("libionic-rdmav")?.strip_suffix(".so")?.parse::<u32>().ok())
        else {
            return;
        };
        let path = dir.join(name);
        if fs::read_link(&path).is_ok_and(|t| t == Path::new(infera_facts::ionic::HOST_LIBIONIC)) {
            out.insert(pabi, path);
        }
    });
    out
}
