//! Our own layout: `trees/<family>/{manifest.toml,site-packages,capabilities/<name>,lib,bin}`.

use std::fs;
use std::path::{Path, PathBuf};

use super::check::{inside, not_writable, not_writable_by_mode};
use super::{gather, LoadOptions, OverlayError, Paths, Tree, TreeFacts};
use crate::manifest::{self, ManifestError};
use infera_core::rootfs::{self, read_bounded, SMALL_FILE_LIMIT};

/// `stats`: the overlay's and `trees/`'s own `stat`, as the caller read them.
pub fn load(dir: &Path, opts: &LoadOptions, stats: [&std::fs::Metadata; 2]) -> Result<Vec<Tree>, OverlayError> {
    let trees_dir = dir.join("trees");
    // `trees/` itself a link elsewhere would make every tree someone else's.
    inside(dir, &trees_dir)?;
    // The directory's own record of each entry's type: a directory is one without a
    // `stat`; only a link (or a filesystem that does not record types) is looked up.
    let mut names: Vec<String> = Vec::new();
    rootfs::each_entry(&trees_dir, |n, t| {
        let dir = if t == infera_core::filekind::Kind::Link {
            trees_dir.join(n).is_dir()
        } else {
            t == infera_core::filekind::Kind::Dir
        };
        if dir {
            names.push(n.to_string_lossy().into_owned());
        }
    })
    .map_err(|e| OverlayError::Unreadable { path: trees_dir.clone(), reason: rootfs::io_reason(&e) })?;
    names.sort();
    if names.is_empty() {
        return Err(OverlayError::Empty { dir: dir.to_path_buf() });
    }
    if opts.check_writable {
        not_writable_by_mode(dir, stats[0])?;
        not_writable_by_mode(&trees_dir, stats[1])?;
    }
    let mut trees: Vec<Tree> = Vec::new();
    for name in names {
        let tree = load_tree(&trees_dir, name, opts)?;
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

/// One tree: its manifest (read and validated, the paths of its code-loading `[env]`
/// inside it), its directories, and (not lazy) its facts.
fn load_tree(trees_dir: &Path, name: String, opts: &LoadOptions) -> Result<Tree, OverlayError> {
    let tdir = trees_dir.join(&name);
    // The tree's and its manifest's own `lstat`: where neither is a link, what `inside`
    // and the mode checks need, and the manifest opened without another lookup.
    let tmeta = plain(trees_dir, &tdir)?;
    let mpath = tdir.join("manifest.toml");
    // A manifest that is a link to a file elsewhere describes a tree it is not part of.
    let mmeta = if tmeta.is_some() { plain(&tdir, &mpath)? } else { None };
    if tmeta.is_none() {
        inside(&tdir, &mpath)?;
    }
    let bad = |reason: ManifestError| OverlayError::Manifest { path: mpath.clone(), reason };
    let unreadable = |e: std::io::Error| bad(ManifestError::Unreadable(rootfs::io_reason(&e)));
    let (bytes, mmeta) = match &mmeta {
        Some(m) => rootfs::read_known(&mpath, m, SMALL_FILE_LIMIT).map(|(b, m)| (b, Some(m))),
        None => read_bounded(&mpath, SMALL_FILE_LIMIT).map(|b| (b, None)),
    }
    .map_err(unreadable)?;
    let text = String::from_utf8(bytes).map_err(|_| bad(ManifestError::NotUtf8))?;
    let manifest = manifest::parse(&text, &name).map_err(bad)?;
    // The paths a code-loading [env] value names are inside the tree by their spelling
    // (validated); where they resolve must be too (a link to a file elsewhere is refused).
    for (k, v) in manifest.env.iter().filter(|(k, _)| manifest::CODE_PATH_ENV.iter().any(|(n, _)| n == k)) {
        for p in manifest::code_paths(k, v) {
            inside(&tdir, &PathBuf::from(p.replace("{tree}", &tdir.to_string_lossy())))?;
        }
    }
    let paths = tree_paths(&tdir, &manifest)?;
    let facts = if opts.lazy { TreeFacts::default() } else { gather::tree_facts(&tdir, &paths, &manifest, opts) };
    if opts.check_writable {
        match &tmeta {
            Some(m) => not_writable_by_mode(&tdir, m)?,
            None => not_writable(&tdir)?,
        }
        match &mmeta {
            Some(m) => not_writable_by_mode(&mpath, m)?,
            None => not_writable(&mpath)?,
        }
    }
    let (python, hip) = (manifest.python_minor(), Some(manifest.hip_major()));
    Ok(Tree { family: name, dir: tdir, python, hip, manifest, paths, facts })
}

/// The tree's site-packages, lib and bin, and each capability's own directory when the tree
/// keeps it apart (so that the image's copy can be imported instead: `prefer = "base"`).
fn tree_paths(tdir: &Path, manifest: &manifest::Manifest) -> Result<Paths, OverlayError> {
    let mut paths = Paths { parts: vec![tdir.to_path_buf()], contain: tdir.to_path_buf(), ..Paths::default() };
    for (sub, list) in [("site-packages", &mut paths.site), ("lib", &mut paths.lib), ("bin", &mut paths.bin)] {
        let p = tdir.join(sub);
        if dir_inside(tdir, &p)? {
            list.push(p);
        }
    }
    if manifest.capabilities.is_empty() {
        return Ok(paths);
    }
    let caps = tdir.join("capabilities");
    // `capabilities/` a plain directory (not a link): each name is one `lstat`.
    let plain = fs::symlink_metadata(&caps).is_ok_and(|m| m.is_dir());
    for name in manifest.capabilities.keys() {
        let p = caps.join(name);
        let dir = if plain {
            dir_inside(tdir, &p)?
        } else if p.exists() {
            inside(tdir, &p)?;
            p.is_dir()
        } else {
            false
        };
        if dir {
            paths.caps.insert(name.clone(), p);
        }
    }
    Ok(paths)
}

/// Is `p` a directory that resolves inside `tree`? `p`'s parent must be `tree` or a plain
/// directory under it (no link on the way). One `lstat` for a plain directory or a missing
/// path; a link is checked where it leads, as `inside` does (a dangling one is no directory).
fn dir_inside(tree: &Path, p: &Path) -> Result<bool, OverlayError> {
    match fs::symlink_metadata(p) {
        Err(_) => Ok(false),
        Ok(m) if m.file_type().is_symlink() => {
            if !p.exists() {
                return Ok(false);
            }
            inside(tree, p)?;
            Ok(p.is_dir())
        }
        Ok(m) => Ok(m.is_dir()),
    }
}

/// `p`'s `lstat` when it is there and not a link (then it is inside `parent`, which the
/// caller has checked); for a link, `inside` checks where it leads and None is returned
/// (the caller looks it up through the link); missing: None.
fn plain(parent: &Path, p: &Path) -> Result<Option<fs::Metadata>, OverlayError> {
    match fs::symlink_metadata(p) {
        Ok(m) if !m.file_type().is_symlink() => Ok(Some(m)),
        Ok(_) => inside(parent, p).map(|()| None),
        Err(_) => Ok(None),
    }
}
