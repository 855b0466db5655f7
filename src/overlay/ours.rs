//! Our own layout: `trees/<family>/{manifest.toml,site-packages,capabilities/<name>,lib,bin}`.

use std::path::{Path, PathBuf};

use super::check::{inside, not_writable};
use super::{gather, LoadOptions, OverlayError, Paths, Tree, TreeFacts};
use crate::manifest::{self, ManifestError};
use crate::rootfs::{self, read_bounded, SMALL_FILE_LIMIT};

pub fn load(dir: &Path, opts: &LoadOptions) -> Result<Vec<Tree>, OverlayError> {
    let trees_dir = dir.join("trees");
    // `trees/` itself a link elsewhere would make every tree someone else's.
    inside(dir, &trees_dir)?;
    let mut names: Vec<String> = Vec::new();
    rootfs::each_entry(&trees_dir, |n, _| {
        if trees_dir.join(n).is_dir() {
            names.push(n.to_string_lossy().into_owned());
        }
    })
    .map_err(|e| OverlayError::Unreadable { path: trees_dir.clone(), reason: rootfs::io_reason(&e) })?;
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
        let mpath = tdir.join("manifest.toml");
        // A tree, or a manifest, that is a link elsewhere describes a tree it is not part of.
        inside(&trees_dir, &tdir)?;
        inside(&tdir, &mpath)?;
        let bad = |reason: ManifestError| OverlayError::Manifest { path: mpath.clone(), reason };
        let bytes = read_bounded(&mpath, SMALL_FILE_LIMIT)
            .map_err(|e| bad(ManifestError::Unreadable(rootfs::io_reason(&e))))?;
        let text = String::from_utf8(bytes).map_err(|_| bad(ManifestError::NotUtf8))?;
        let manifest = manifest::parse(&text, &name).map_err(bad)?;
        // The paths a code-loading [env] value names are inside the tree by their spelling
        // (validated); where they resolve must be too (a link to a file elsewhere is refused).
        for (k, v) in manifest.env.iter().filter(|(k, _)| manifest::CODE_PATH_ENV.iter().any(|(n, _)| n == k)) {
            for p in manifest::code_paths(k, v) {
                inside(&tdir, &PathBuf::from(p.replace("{tree}", &tdir.to_string_lossy())))?;
            }
        }
        let mut paths = Paths { parts: vec![tdir.clone()], contain: tdir.clone(), ..Paths::default() };
        for (sub, list) in [("site-packages", &mut paths.site), ("lib", &mut paths.lib), ("bin", &mut paths.bin)] {
            let p = tdir.join(sub);
            if dir_inside(&tdir, &p)? {
                list.push(p);
            }
        }
        // A capability's own directory, when the tree keeps it apart (so that the image's
        // copy can be imported instead: `prefer = "base"`).
        if !manifest.capabilities.is_empty() {
            let caps = tdir.join("capabilities");
            for name in manifest.capabilities.keys() {
                let p = caps.join(name);
                if dir_inside(&tdir, &p)? {
                    paths.caps.insert(name.clone(), p);
                }
            }
        }
        let facts = if opts.lazy { TreeFacts::default() } else { gather::tree_facts(&tdir, &paths, &manifest, opts) };
        if opts.check_writable {
            not_writable(&tdir)?;
            not_writable(&mpath)?;
        }
        let tree = Tree {
            family: name,
            dir: tdir,
            python: manifest.python_minor(),
            hip: Some(manifest.hip_major()),
            manifest,
            paths,
            facts,
        };
        if let Some(other) = trees.iter().find(|t| t.manifest.abi == tree.manifest.abi) {
            return Err(OverlayError::Ambiguous {
                a: other.family.clone(),
                b: tree.family.clone(),
                python: tree.manifest.abi.python.clone(),
                hip: tree.manifest.abi.hip.clone(),
            });
        }
        trees.push(tree);
    }
    Ok(trees)
}

/// Is `p` a directory that resolves inside `tree`? Missing or a dangling link: no; a
/// link that leads out of the tree is refused, whatever it leads to.
fn dir_inside(tree: &Path, p: &Path) -> Result<bool, OverlayError> {
    if !p.exists() {
        return Ok(false);
    }
    inside(tree, p)?;
    Ok(p.is_dir())
}
