//! The checks that make a tree safe to run from: paths resolve inside it; nobody but
//! root (or the launcher's own user) can change what it holds (every file: `walk.rs`).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

use super::{Mount, OverlayError, Presence};

pub fn not_writable(p: &Path) -> Result<(), OverlayError> {
    match fs::metadata(p) {
        Ok(m) => not_writable_by_mode(p, &m),
        Err(_) => Ok(()),
    }
}

/// [`not_writable`] with the metadata already read (the walk's `lstat` of a file or
/// directory, which is its `stat`).
pub fn not_writable_by_mode(p: &Path, m: &fs::Metadata) -> Result<(), OverlayError> {
    not_writable_mode(m.mode(), || p.to_path_buf())
}

/// [`not_writable_by_mode`] from the mode bits (`st_mode`); the path is built only for
/// the error.
pub fn not_writable_mode(mode: u32, path: impl FnOnce() -> std::path::PathBuf) -> Result<(), OverlayError> {
    let mode = mode & 0o7777;
    let who = if mode & 0o002 != 0 {
        "everyone"
    } else if mode & 0o020 != 0 {
        "its group"
    } else {
        return Ok(());
    };
    Err(OverlayError::Writable { path: path(), who, mode })
}

/// `path` (inside `tree`) must resolve inside `tree`. Without a symlink below the tree on
/// the way (the common case) nothing can escape, so only then is the path canonicalised.
pub fn inside(tree: &Path, path: &Path) -> Result<(), OverlayError> {
    if let Ok(rel) = path.strip_prefix(tree) {
        let mut p = std::path::PathBuf::with_capacity(path.as_os_str().len() + 1);
        p.push(tree);
        let mut linked = false;
        for c in rel.components() {
            match c {
                Component::Normal(n) => p.push(n),
                _ => {
                    linked = true;
                    break;
                }
            }
            match fs::symlink_metadata(&p) {
                Ok(m) if m.file_type().is_symlink() => {
                    linked = true;
                    break;
                }
                Ok(_) => {}
                Err(_) => break, // missing: nothing to escape through
            }
        }
        if !linked {
            return Ok(());
        }
    }
    let t = fs::canonicalize(tree).unwrap_or_else(|_| tree.to_path_buf());
    match fs::canonicalize(path) {
        Ok(r) if r.starts_with(&t) => Ok(()),
        Ok(r) => Err(OverlayError::Escapes { path: path.to_path_buf(), target: r, tree: tree.to_path_buf() }),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            Err(OverlayError::LinkLoop { path: path.to_path_buf(), tree: tree.to_path_buf() })
        }
        // A dangling link is reported as escaping to where it points.
        Err(_) => Err(OverlayError::Escapes {
            path: path.to_path_buf(),
            target: fs::read_link(path).unwrap_or_default(),
            tree: tree.to_path_buf(),
        }),
    }
}

/// Where a dotted module lives under `site`, if it does: a package directory,
/// a `.py` file, or an extension module.
pub fn find_module(site: &Path, dotted: &str) -> Option<std::path::PathBuf> {
    let mut parts: Vec<&str> = dotted.split('.').collect();
    let last = parts.pop()?;
    let mut base = std::path::PathBuf::with_capacity(site.as_os_str().len() + dotted.len() + 5);
    base.push(site);
    base.extend(&parts);
    let found = |p: &Path| fs::symlink_metadata(p).is_ok();
    let pkg = base.join(last);
    if found(&pkg) {
        return Some(pkg);
    }
    let py = base.join(format!("{last}.py"));
    if found(&py) {
        return Some(py);
    }
    // An extension module: the first `<last>.….so` in the directory's order.
    let prefix = format!("{last}.");
    let mut ext = None;
    let _ = infera_core::rootfs::each_entry(&base, |name, _| {
        let n = name.to_string_lossy();
        if ext.is_none() && n.starts_with(&prefix) && n.ends_with(".so") {
            ext = Some(base.join(name));
        }
    });
    ext
}

/// A module of the tree: present inside it, missing, or resolving outside it.
pub fn module_presence(tree: &Path, site: &Path, dotted: &str) -> Presence {
    match find_module(site, dotted) {
        Some(path) => presence_of(tree, &path),
        None => Presence::Missing,
    }
}

/// A file of the tree (a library under lib/): present, missing or escaping.
pub fn file_presence(tree: &Path, path: &Path) -> Presence {
    if fs::symlink_metadata(path).is_err() {
        return Presence::Missing;
    }
    presence_of(tree, path)
}

fn presence_of(tree: &Path, path: &Path) -> Presence {
    match inside(tree, path) {
        Ok(()) => Presence::Present,
        Err(e) => Presence::Escapes(e),
    }
}

/// Top-level importable names a site-packages directory provides, and the distributions
/// recorded there (`name-version.dist-info`), from one read of the directory.
pub fn listing(site: &Path) -> (Vec<String>, Vec<infera_core::names::Dist>) {
    let mut modules = Vec::new();
    let mut dists = Vec::new();
    let _ = infera_core::rootfs::each_entry(site, |n, _| {
        let n = n.to_string_lossy();
        if let Some((name, version)) = infera_core::names::Dist::parse(&n) {
            dists.push(infera_core::names::Dist {
                dir: site.to_path_buf(),
                name: name.to_string(),
                version: version.to_string(),
            });
        } else if let Some(m) = infera_core::names::module_name(&n) {
            modules.push(m.to_string());
        }
    });
    modules.sort();
    modules.dedup();
    dists.sort_by(|a, b| a.name.cmp(&b.name));
    (modules, dists)
}

/// The mount flags of the filesystem holding `dir`.
pub fn mount_of(dir: &Path) -> Mount {
    use nix::sys::statvfs::{statvfs, FsFlags};
    match statvfs(dir) {
        Ok(s) => {
            let f = s.flags();
            Mount {
                read_only: f.contains(FsFlags::ST_RDONLY),
                noexec: f.contains(FsFlags::ST_NOEXEC),
                nosuid: f.contains(FsFlags::ST_NOSUID),
            }
        }
        Err(_) => Mount::default(),
    }
}
