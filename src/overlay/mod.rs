//! The overlay: every tree with its manifest validated, and the facts about each tree the
//! planner needs (modules present, mount flags, integrity when asked), gathered here at
//! load so that planning reads no file. Safety checks that make a tree unusable (paths
//! escaping it, writable by others, two trees claiming one ABI) refuse the load.

mod check;
mod ours;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::manifest::Manifest;
use crate::payload::Problem;
use infera_exec_derive::Refuse;

pub use check::{find_module, inside};

#[derive(Debug, Clone)]
pub struct Overlay {
    pub dir: PathBuf,
    pub trees: Vec<Tree>,
}

#[derive(Debug, Clone)]
pub struct Tree {
    pub family: String,
    pub dir: PathBuf,
    pub manifest_path: PathBuf,
    pub manifest: Manifest,
    pub facts: TreeFacts,
}

/// What the tree's files say, gathered at load.
#[derive(Debug, Clone, Default)]
pub struct TreeFacts {
    pub site_dir: bool,
    pub lib_dir: bool,
    pub bin_dir: bool,
    /// Top-level importable names of its site-packages.
    pub top_modules: Vec<String>,
    /// Every module the manifest names (engines, server, capabilities) and the ones the
    /// request asked about.
    pub modules: BTreeMap<String, Presence>,
    /// Every library the manifest's capabilities name, under lib/.
    pub libraries: BTreeMap<String, Presence>,
    pub mount: Mount,
    /// Shared objects in the tree (only looked for on a `noexec` mount, where they matter).
    pub shared_objects: bool,
    /// The check against the integrity record, when asked for (INFERA_VERIFY).
    pub integrity: Option<Integrity>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mount {
    pub read_only: bool,
    pub noexec: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    Present,
    Missing,
    /// It exists but resolves outside the tree.
    Escapes(OverlayError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Integrity {
    pub digest: bool,
    /// Files checked, or what differs from the record.
    pub result: Result<usize, Vec<Problem>>,
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
    pub fn module(&self, dotted: &str) -> &Presence {
        self.facts.modules.get(dotted).unwrap_or(&Presence::Missing)
    }
    pub fn library(&self, name: &str) -> &Presence {
        self.facts.libraries.get(name).unwrap_or(&Presence::Missing)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error, Refuse)]
pub enum OverlayError {
    #[error("the overlay directory `{}` does not exist", dir.display())]
    #[refuse(
        code = "overlay-missing",
        exit = Missing,
        hint = "mount the infera overlay image at /opt/infera (image volume, `--mount type=image`, or an initContainer copy), or pass --overlay / INFERA_OVERLAY"
    )]
    Missing { dir: PathBuf },
    #[error("the overlay `{0}` has no trees (expected `{0}/trees/<family>/manifest.toml`)", dir.display())]
    #[refuse(
        code = "overlay-empty",
        exit = Invalid,
        hint = "the overlay image is incomplete; rebuild it with the staging tool (overlay-layout/README.md)"
    )]
    Empty { dir: PathBuf },
    #[error("`{}`: {reason}", path.display())]
    #[refuse(
        code = "manifest-invalid",
        exit = Invalid,
        hint = "fix the manifest in the overlay build; `infera-exec manifest verify` checks every tree"
    )]
    Manifest { path: PathBuf, reason: crate::manifest::ManifestError },
    #[error("`{}` is writable by {who} (mode {mode:o}); a payload root runs from must not be", path.display())]
    #[refuse(
        code = "overlay-writable",
        exit = Invalid,
        hint = "mount the overlay read-only (image volumes are) or `chmod -R go-w` the payload"
    )]
    Writable { path: PathBuf, who: &'static str, mode: u32 },
    #[error("`{}` is owned by uid {uid}, who could change what root runs", path.display())]
    #[refuse(code = "overlay-owner", exit = Invalid, hint = "mount the overlay read-only, or `chown -R root:` the payload")]
    Owner { path: PathBuf, uid: u32 },
    #[error("`{}` resolves to `{}`, outside its tree `{}`", path.display(), target.display(), tree.display())]
    #[refuse(
        code = "path-escapes-tree",
        exit = Invalid,
        hint = "payload files must live inside their tree; replace the symlink by the file"
    )]
    Escapes { path: PathBuf, target: PathBuf, tree: PathBuf },
    #[error("trees `{a}` and `{b}` both claim python {python} / ROCm {rocm}; the launcher cannot choose")]
    #[refuse(
        code = "trees-ambiguous",
        exit = Invalid,
        hint = "each ABI family must have exactly one tree; remove or rename one of them"
    )]
    Ambiguous { a: String, b: String, python: String, rocm: String },
}

/// What to gather while loading.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Check ownership and writability (on when the launcher runs as root).
    pub check_writable: bool,
    /// Modules to look up in every tree besides the ones its manifest names.
    pub modules: Vec<String>,
}

/// Load every tree and gather its facts.
pub fn load(dir: &Path, opts: &LoadOptions) -> Result<Overlay, OverlayError> {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    if !dir.is_dir() {
        return Err(OverlayError::Missing { dir });
    }
    let trees = ours::load(&dir, opts)?;
    Ok(Overlay { dir, trees })
}

/// Check the tree against its integrity record and keep the result in its facts.
pub fn verify(tree: &mut Tree, digest: bool) {
    let result = crate::payload::verify_tree(&tree.dir, &tree.family, digest);
    tree.facts.integrity = Some(Integrity { digest, result });
}
