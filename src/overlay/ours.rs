//! Our own layout: `trees/<family>/{manifest.toml,site-packages,capabilities/<name>,lib,bin}`.

use std::fs;
use std::path::Path;

use super::check::{inside, not_writable, payload_not_writable};
use super::{gather, LoadOptions, OverlayError, Paths, Tree};
use crate::manifest::{self, ManifestError};
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
        let mut paths = Paths { parts: vec![tdir.clone()], ..Paths::default() };
        for (sub, list) in [("site-packages", &mut paths.site), ("lib", &mut paths.lib), ("bin", &mut paths.bin)] {
            let p = tdir.join(sub);
            if p.exists() {
                inside(&tdir, &p)?;
                if p.is_dir() {
                    list.push(p);
                }
            }
        }
        // A capability's own directory, when the tree keeps it apart (so that the image's
        // copy can be imported instead: `prefer = "base"`).
        for name in manifest.capabilities.keys() {
            let p = tdir.join("capabilities").join(name);
            if p.exists() {
                inside(&tdir, &p)?;
                if p.is_dir() {
                    paths.caps.insert(name.clone(), p);
                }
            }
        }
        let facts = gather::tree_facts(&tdir, &paths, &manifest, opts);
        if opts.check_writable {
            not_writable(&mpath)?;
            payload_not_writable(&tdir, facts.mount)?;
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
