//! The overlay: every tree under `trees/`, its manifest validated, and the checks
//! that make a tree safe to run from (no paths escaping it, not writable by others).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::error::{Exit, Refusal};
use crate::manifest::{self, Manifest};
use crate::rootfs::{self, read_bounded, SMALL_FILE_LIMIT};

#[derive(Debug, Clone)]
pub struct Tree {
    pub family: String,
    pub dir: PathBuf,
    pub manifest_path: PathBuf,
    pub manifest: Manifest,
    /// Top-level importable names of its site-packages (read once, at load).
    pub modules: Vec<String>,
}

impl Tree {
    pub fn site_packages(&self) -> PathBuf {
        self.dir.join("site-packages")
    }
    pub fn lib(&self) -> PathBuf {
        self.dir.join("lib")
    }
    pub fn bin(&self) -> PathBuf {
        self.dir.join("bin")
    }
    pub fn describe(&self) -> String {
        format!("{} (python {}, ROCm {})", self.family, self.manifest.abi.python, self.manifest.abi.rocm)
    }
}

#[derive(Debug, Clone)]
pub struct Overlay {
    pub dir: PathBuf,
    pub trees: Vec<Tree>,
}

#[derive(Debug, Error)]
pub enum OverlayError {
    #[error("the overlay directory `{dir}` does not exist")]
    Missing { dir: PathBuf },
    #[error("the overlay `{dir}` has no trees (expected `{dir}/trees/<family>/manifest.toml`)")]
    Empty { dir: PathBuf },
    #[error("`{path}`: {reason}")]
    Manifest { path: PathBuf, reason: String },
    #[error("`{path}` is writable by {who} (mode {mode:o}); a payload root runs from must not be")]
    Writable { path: PathBuf, who: &'static str, mode: u32 },
    #[error("`{path}` is owned by uid {uid}, who could change what root runs")]
    Owner { path: PathBuf, uid: u32 },
    #[error("`{path}` resolves to `{target}`, outside its tree `{tree}`")]
    Escapes { path: PathBuf, target: PathBuf, tree: PathBuf },
    #[error("trees `{a}` and `{b}` both claim python {python} / ROCm {rocm}; the launcher cannot choose")]
    Ambiguous { a: String, b: String, python: String, rocm: String },
}

impl From<OverlayError> for Refusal {
    fn from(e: OverlayError) -> Refusal {
        let msg = e.to_string();
        match e {
            OverlayError::Missing { .. } => Refusal::new(Exit::Missing, "overlay-missing", msg).hint(
                "mount the infera overlay image at /opt/infera (image volume, `--mount type=image`, or an initContainer copy), or pass --overlay / INFERA_OVERLAY",
            ),
            OverlayError::Empty { .. } => Refusal::new(Exit::Invalid, "overlay-empty", msg)
                .hint("the overlay image is incomplete; rebuild it with the staging tool (overlay-layout/README.md)"),
            OverlayError::Manifest { .. } => Refusal::new(Exit::Invalid, "manifest-invalid", msg)
                .hint("fix the manifest in the overlay build; `infera-exec manifest verify` checks every tree"),
            OverlayError::Writable { .. } => Refusal::new(Exit::Invalid, "overlay-writable", msg)
                .hint("mount the overlay read-only (image volumes are) or `chmod -R go-w` the payload"),
            OverlayError::Owner { .. } => Refusal::new(Exit::Invalid, "overlay-owner", msg)
                .hint("mount the overlay read-only, or `chown -R root:` the payload"),
            OverlayError::Escapes { .. } => Refusal::new(Exit::Invalid, "path-escapes-tree", msg)
                .hint("payload files must live inside their tree; replace the symlink by the file"),
            OverlayError::Ambiguous { .. } => Refusal::new(Exit::Invalid, "trees-ambiguous", msg)
                .hint("each ABI family must have exactly one tree; remove or rename one of them"),
        }
    }
}

/// Load and validate every tree. `check_writable` is on when running as root.
pub fn load(dir: &Path, check_writable: bool) -> Result<Overlay, OverlayError> {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    if !dir.is_dir() {
        return Err(OverlayError::Missing { dir });
    }
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
        return Err(OverlayError::Empty { dir });
    }
    if check_writable {
        not_writable(&dir)?;
        not_writable(&trees_dir)?;
    }
    let mut trees: Vec<Tree> = Vec::new();
    for name in names {
        let tdir = trees_dir.join(&name);
        inside(&trees_dir, &tdir)?;
        let mpath = tdir.join("manifest.toml");
        let bytes = read_bounded(&mpath, SMALL_FILE_LIMIT)
            .map_err(|e| OverlayError::Manifest { path: mpath.clone(), reason: rootfs::io_reason(&e) })?;
        let text = String::from_utf8(bytes)
            .map_err(|_| OverlayError::Manifest { path: mpath.clone(), reason: "not valid UTF-8".into() })?;
        let manifest =
            manifest::parse(&text, &name).map_err(|reason| OverlayError::Manifest { path: mpath.clone(), reason })?;
        let modules = top_level_modules(&tdir.join("site-packages"));
        let tree = Tree { family: name, dir: tdir, manifest_path: mpath, manifest, modules };
        if check_writable {
            not_writable(&tree.manifest_path)?;
            payload_not_writable(&tree.dir)?;
        }
        for sub in [tree.site_packages(), tree.lib(), tree.bin()] {
            if sub.exists() {
                inside(&tree.dir, &sub)?;
            }
        }
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
    Ok(Overlay { dir, trees })
}

/// Every directory and file of a tree: not writable by group or others, owned by root or
/// by the user the launcher runs as. Skipped on a read-only mount (image volumes, readOnly
/// volumeMounts), where nobody can write whatever the bits say.
fn payload_not_writable(tree: &Path) -> Result<(), OverlayError> {
    use nix::sys::statvfs::{statvfs, FsFlags};
    if statvfs(tree).is_ok_and(|s| s.flags().contains(FsFlags::ST_RDONLY)) {
        return Ok(());
    }
    let euid = nix::unistd::geteuid().as_raw();
    let mut stack = vec![tree.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = fs::symlink_metadata(&p) else { continue };
        if m.file_type().is_symlink() {
            continue;
        }
        if m.uid() != 0 && m.uid() != euid {
            return Err(OverlayError::Owner { path: p, uid: m.uid() });
        }
        not_writable(&p)?;
        if m.is_dir() {
            if let Ok(rd) = fs::read_dir(&p) {
                stack.extend(rd.filter_map(|e| e.ok()).map(|e| e.path()));
            }
        }
    }
    Ok(())
}

fn not_writable(p: &Path) -> Result<(), OverlayError> {
    let Ok(m) = fs::metadata(p) else {
        return Ok(());
    };
    let mode = m.mode() & 0o7777;
    let who = if mode & 0o002 != 0 {
        "everyone"
    } else if mode & 0o020 != 0 {
        "its group"
    } else {
        return Ok(());
    };
    Err(OverlayError::Writable { path: p.to_path_buf(), who, mode })
}

/// `path` (inside `tree`) must resolve inside `tree`. Without a symlink below the tree on
/// the way (the common case) nothing can escape, so only then is the path canonicalised.
pub fn inside(tree: &Path, path: &Path) -> Result<(), OverlayError> {
    if let Ok(rel) = path.strip_prefix(tree) {
        let mut p = tree.to_path_buf();
        let mut linked = false;
        for c in rel.components() {
            match c {
                std::path::Component::Normal(n) => p.push(n),
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
pub fn find_module(site: &Path, dotted: &str) -> Option<PathBuf> {
    let mut parts: Vec<&str> = dotted.split('.').collect();
    let last = parts.pop()?;
    let base = parts.iter().fold(site.to_path_buf(), |p, s| p.join(s));
    let pkg = base.join(last);
    if fs::symlink_metadata(&pkg).is_ok() {
        return Some(pkg);
    }
    let py = base.join(format!("{last}.py"));
    if fs::symlink_metadata(&py).is_ok() {
        return Some(py);
    }
    let prefix = format!("{last}.");
    fs::read_dir(&base).ok()?.filter_map(|e| e.ok()).find_map(|e| {
        let n = e.file_name().to_string_lossy().into_owned();
        (n.starts_with(&prefix) && n.ends_with(".so")).then(|| e.path())
    })
}

/// Top-level importable names a site-packages directory provides.
fn top_level_modules(site: &Path) -> Vec<String> {
    let Ok(rd) = fs::read_dir(site) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            crate::facts::site::module_name(&n).map(str::to_string)
        })
        .collect();
    v.sort();
    v.dedup();
    v
}
