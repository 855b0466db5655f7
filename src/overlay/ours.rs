//! Our own layout: `trees/<family>/{manifest.toml,site-packages,lib,bin}`.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::check::{self, file_presence, inside, module_presence, not_writable, payload_not_writable};
use super::{LoadOptions, OverlayError, Tree, TreeFacts};
use crate::manifest::{self, Manifest, ManifestError};
use crate::rootfs::{self, read_bounded, SMALL_FILE_LIMIT};

pub fn load(dir: &Path, opts: &LoadOptions) -> Result<Vec<Tree>, OverlayError> {
    let trees_dir = dir.join("trees");
    let mut names: Vec<String> = match fs::read_dir(&trees_dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    if names.is_empty() {
        return Err(OverlayError::Empty { dir: dir.to_path_buf() });
    }
    if opts.check_writable {
        not_writable(dir)?;
        not_writable(&trees_dir)?;
    }
    let mut trees: Vec<Tree> = Vec::new();
    for name in names {
        let tdir = trees_dir.join(&name);
        inside(&trees_dir, &tdir)?;
        let mpath = tdir.join("manifest.toml");
        let bad = |reason: ManifestError| OverlayError::Manifest { path: mpath.clone(), reason };
        let bytes = read_bounded(&mpath, SMALL_FILE_LIMIT)
            .map_err(|e| bad(ManifestError::Unreadable(rootfs::io_reason(&e))))?;
        let text = String::from_utf8(bytes).map_err(|_| bad(ManifestError::NotUtf8))?;
        let manifest = manifest::parse(&text, &name).map_err(bad)?;
        let facts = gather(&tdir, &manifest, opts)?;
        if opts.check_writable {
            not_writable(&mpath)?;
            payload_not_writable(&tdir, facts.mount)?;
        }
        let tree = Tree { family: name, dir: tdir, manifest_path: mpath, manifest, facts };
        if let Some(other) = trees.iter().find(|t| t.manifest.abi == tree.manifest.abi) {
            return Err(OverlayError::Ambiguous {
                a: other.family.clone(),
                b: tree.family.clone(),
                python: tree.manifest.abi.python.clone(),
                rocm: tree.manifest.abi.rocm.clone(),
            });
        }
        trees.push(tree);
    }
    Ok(trees)
}

/// The facts of one tree: its directories (each must resolve inside it), the modules and
/// libraries its manifest (and the request) names, its mount.
fn gather(tdir: &Path, m: &Manifest, opts: &LoadOptions) -> Result<TreeFacts, OverlayError> {
    let (site, lib, bin) = (tdir.join("site-packages"), tdir.join("lib"), tdir.join("bin"));
    let mut present = [false; 3];
    for (i, sub) in [&site, &lib, &bin].into_iter().enumerate() {
        if sub.exists() {
            inside(tdir, sub)?;
            present[i] = sub.is_dir();
        }
    }
    let mut modules = BTreeMap::new();
    let named = m.engines.values().map(|e| &e.module).chain(m.server.iter().map(|s| &s.module));
    let named = named.chain(m.capabilities.values().flat_map(|c| c.modules.iter())).chain(opts.modules.iter());
    for dotted in named {
        if !modules.contains_key(dotted) {
            modules.insert(dotted.clone(), module_presence(tdir, &site, dotted));
        }
    }
    let mut libraries = BTreeMap::new();
    for l in m.capabilities.values().flat_map(|c| c.libraries.iter()) {
        libraries.insert(l.clone(), file_presence(tdir, &lib.join(l)));
    }
    let mount = check::mount_of(tdir);
    // Only a noexec mount makes shared objects matter: then look for them (lib/, or the
    // integrity record's list when there is one).
    let shared_objects = mount.noexec
        && (fs::read_dir(&lib).map(|mut d| d.next().is_some()).unwrap_or(false)
            || crate::payload::read_record(tdir)
                .ok()
                .flatten()
                .is_some_and(|r| r.files.iter().any(|f| f.path.ends_with(".so") || f.path.contains(".so."))));
    Ok(TreeFacts {
        site_dir: present[0],
        lib_dir: present[1],
        bin_dir: present[2],
        top_modules: check::top_level_modules(&site),
        modules,
        libraries,
        mount,
        shared_objects,
        integrity: None,
    })
}
