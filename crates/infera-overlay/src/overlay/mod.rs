//! The overlay: every tree with its manifest validated, and the facts about each tree the
//! planner needs (modules present, mount flags, integrity when asked), gathered here at
//! load so that planning reads no file. Safety checks that make a tree unusable (paths
//! escaping it, writable by others, two trees claiming one ABI) refuse the load.

pub(crate) mod check;
mod gather;
pub mod infera;
mod ours;
pub mod walk;

use infera_core::names::Dist;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::manifest::Manifest;
use crate::overlay::walk::inspect;
use infera_exec_derive::Refuse;

#[derive(Debug, Clone)]
pub struct Overlay {
    pub dir: PathBuf,
    pub layout: Layout,
    pub trees: Vec<Tree>,
    /// The engine patches it ships (`patches/<engine>/*.py`, `patches/<engine>_*/*.py`), in
    /// the order they run.
    pub patches: Vec<Patch>,
    /// `rdma/libionic-rdmav<PABI>.so` links to the host's RoCE provider build, per PABI.
    pub rdma: BTreeMap<u32, PathBuf>,
}

/// Which of the two layouts (README, "The overlay") the overlay is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `trees/<family>/manifest.toml` with site-packages, lib, bin.
    Ours,
    /// The Infera payload: `py3XX/` and `native/rocm<N>-py3XX/` with CAPABILITIES.
    Infera,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// The engine's name (`vllm`, `sglang`).
    pub engine: &'static str,
    pub file: PathBuf,
}

#[derive(Debug, Clone)]
pub struct Tree {
    pub family: String,
    /// The tree's own directory (INFERA_TREE): ours `trees/<family>`, the Infera payload's `py3XX`.
    pub dir: PathBuf,
    /// What the tree offers: its manifest, or for the Infera layout what its files say.
    pub manifest: Manifest,
    /// The CPython minor its extensions were built for.
    pub python: (u32, u32),
    /// The HIP ABI major its compiled code binds (None: pure Python, any ABI).
    pub hip: Option<u32>,
    /// Its directories, in search order (only those that exist).
    pub paths: Paths,
    pub facts: TreeFacts,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Paths {
    /// Importable packages (PYTHONPATH), first wins.
    pub site: Vec<PathBuf>,
    /// Shared libraries (LD_LIBRARY_PATH).
    pub lib: Vec<PathBuf>,
    /// Programs (PATH).
    pub bin: Vec<PathBuf>,
    /// The directories whose integrity records describe the tree.
    pub parts: Vec<PathBuf>,
    /// A capability's own importable directory (`capabilities/<name>/`), put on the path
    /// only when the child imports the tree's copy of it.
    pub caps: BTreeMap<String, PathBuf>,
    /// What every path of the tree must resolve inside: its directory (ours), the whole
    /// payload (the Infera layout, whose trees are pairs of its directories).
    pub contain: PathBuf,
}

/// What the tree's files say, gathered at load.
#[derive(Debug, Clone, Default)]
pub struct TreeFacts {
    /// The programs in its bin directories (a command-form PROGRAM may be one of them).
    pub bin: BTreeMap<String, (PathBuf, infera_core::exe::ExecFile)>,
    /// Top-level importable names of its site directories (always on the path), each with
    /// the first directory that has it.
    pub top_modules: BTreeMap<String, PathBuf>,
    /// Top-level importable names of each capability's own directory.
    pub cap_modules: BTreeMap<String, Vec<String>>,
    /// The distributions recorded beside them (`*.dist-info`): (directory, name, version).
    pub dists: Vec<Dist>,
    /// Every module the manifest names (engines, server, capabilities) and the ones the
    /// request asked about.
    pub modules: BTreeMap<String, Presence>,
    /// Every library the manifest's capabilities name, in its lib directories.
    pub libraries: BTreeMap<String, Presence>,
    pub mount: Mount,
    /// Shared objects anywhere in the tree (extension modules, libraries), from the walk.
    pub shared_objects: bool,
    /// The walk of every file of the tree the run uses (links contained, no set-id files,
    /// nothing writable or foreign-owned on a writable mount); None: not walked.
    pub walked: Option<Result<(), OverlayError>>,
    /// The check against the integrity record, when asked for (INFERA_VERIFY).
    pub integrity: Option<Integrity>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mount {
    pub read_only: bool,
    pub noexec: bool,
    pub nosuid: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    Present,
    Missing,
    /// It exists but resolves outside the tree.
    Escapes(OverlayError),
}

/// One problem found in a tree, with the file it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub what: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, what: impl Into<String>) -> Problem {
        Problem { path: path.into(), what: what.into() }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.what)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Integrity {
    pub digest: bool,
    /// Files checked, or what differs from the record.
    pub result: Result<usize, Vec<Problem>>,
}

impl Tree {
    /// The first site directory (where the tree's own packages are said to be missing from).
    pub fn site(&self) -> PathBuf {
        self.paths.site.first().cloned().unwrap_or_else(|| self.dir.join("site-packages"))
    }
    pub fn lib(&self) -> PathBuf {
        self.paths.lib.first().cloned().unwrap_or_else(|| self.dir.join("lib"))
    }
    pub fn bin(&self) -> PathBuf {
        self.paths.bin.first().cloned().unwrap_or_else(|| self.dir.join("bin"))
    }
    pub fn describe(&self) -> String {
        let (ma, mi) = self.python;
        let release = self.manifest.abi.rocm_release.as_ref().map_or_else(String::new, |r| format!(", ROCm {r}"));
        match self.hip {
            Some(h) => format!("{} (python {ma}.{mi}, HIP ABI {h}{release})", self.family),
            None => format!("{} (python {ma}.{mi}, no native tree)", self.family),
        }
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
    #[error("the overlay `{0}` has no trees (expected `{0}/trees/<family>/manifest.toml`, or the Infera payload's `{0}/py3XX/`)", dir.display())]
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
    #[error("`{}` is owned by uid {uid}, who could change what the launcher (uid {euid}) runs", path.display())]
    #[refuse(code = "overlay-owner", exit = Invalid, hint = "mount the overlay read-only, or `chown -R root:` the payload")]
    Owner { path: PathBuf, uid: u32, euid: u32 },
    #[error("`{}` resolves to `{}`, outside its tree `{}`", path.display(), target.display(), tree.display())]
    #[refuse(
        code = "path-escapes-tree",
        exit = Invalid,
        hint = "payload files must live inside their tree; replace the symlink by the file"
    )]
    Escapes { path: PathBuf, target: PathBuf, tree: PathBuf },
    #[error("`{}` is a loop of symbolic links (the kernel gives up after 40) in tree `{}`", path.display(), tree.display())]
    #[refuse(code = "path-link-loop", exit = Invalid, hint = "payload files must be files; replace the looping symlink by the file it was meant to be")]
    LinkLoop { path: PathBuf, tree: PathBuf },
    #[error("`{}` is a set-user/group-ID file (mode {mode:o}); a payload may not carry one", path.display())]
    #[refuse(code = "overlay-setid", exit = Invalid, hint = "remove the set-id bit when staging (`chmod ug-s`), or mount the overlay nosuid")]
    SetId { path: PathBuf, mode: u32 },
    #[error("`{}` is {kind}, not a file or directory; a payload may not carry one", path.display())]
    #[refuse(code = "overlay-special-file", exit = Invalid, hint = "remove it from the payload; Python would block or fail reading it")]
    Special { path: PathBuf, kind: &'static str },
    #[error("`{}` cannot be read: {reason}", path.display())]
    #[refuse(code = "overlay-unreadable", exit = Invalid, hint = "the payload must be readable by the user the launcher runs as")]
    Unreadable { path: PathBuf, reason: String },
    #[error("trees `{a}` and `{b}` both claim python {python} / HIP ABI {hip}; the launcher cannot choose")]
    #[refuse(
        code = "trees-ambiguous",
        exit = Invalid,
        hint = "each ABI family must have exactly one tree; remove or rename one of them"
    )]
    Ambiguous { a: String, b: String, python: String, hip: String },
}

/// What to gather while loading.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Check the overlay's, the trees' and the manifests' own ownership and writability
    /// (every file of the tree the run uses is checked by its walk, `inspect`).
    pub check_writable: bool,
    /// Modules to look up in every tree besides the ones its manifest names.
    pub modules: Vec<String>,
    /// Read only the manifests and layout at load; the tree the run selects gets its facts
    /// once it is selected (the others are never read further).
    pub lazy: bool,
}

/// The tree a run uses with its facts: the walk of its files ([`inspect`]), its modules,
/// programs and libraries.
pub fn selected(tree: &Tree, opts: &LoadOptions) -> Tree {
    let mut t = tree.clone();
    gather(&mut t, opts);
    t
}

fn gather(tree: &mut Tree, opts: &LoadOptions) {
    let mount = gather::mount(&tree.paths);
    tree.facts.mount = mount;
    inspect(tree);
    let (walked, shared) = (tree.facts.walked.take(), tree.facts.shared_objects);
    tree.facts = gather::tree_facts_on(&tree.paths.contain.clone(), &tree.paths, &tree.manifest, opts, mount);
    tree.facts.walked = walked;
    tree.facts.shared_objects = shared;
}

/// Where the overlay is: the directory above the launcher's own `bin/` when it
/// is an overlay (the real deployments mount it at /overlay or /payload), else /opt/infera.
pub fn discover(exe: Option<&Path>) -> PathBuf {
    exe.and_then(Path::parent)
        .filter(|bin| bin.file_name().is_some_and(|n| n == "bin"))
        .and_then(Path::parent)
        .filter(|dir| is_overlay(dir))
        .map_or_else(|| PathBuf::from("/opt/infera"), Path::to_path_buf)
}

/// Does `dir` hold an overlay of either layout (`trees/`, or the Infera payload's
/// `py3XX/` and `native/`)?
pub fn is_overlay(dir: &Path) -> bool {
    if dir.join("trees").is_dir() || dir.join("native").is_dir() {
        return true;
    }
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.filter_map(|e| e.ok()).any(|e| {
            let n = e.file_name();
            infera_core::rootfs::parse_minor(&n.to_string_lossy().replacen("py3", "3.", 1)).is_some()
                && e.path().is_dir()
        })
    })
}

/// Load every tree and gather its facts.
pub fn load(dir: &Path, opts: &LoadOptions) -> Result<Overlay, OverlayError> {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    // Each `stat` kept for the checks of its mode below (one lookup per directory).
    let meta = match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => m,
        Ok(_) => return Err(OverlayError::Unreadable { path: dir, reason: "not a directory".into() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(OverlayError::Missing { dir }),
        // A link loop, a permission: said as what it is, not as "does not exist".
        Err(e) => return Err(OverlayError::Unreadable { path: dir, reason: infera_core::rootfs::io_reason(&e) }),
    };
    // `trees/` present but not a directory we can reach (a file, a link loop, no permission)
    // is said as such, not taken for "no trees" (the other layout).
    let trees_dir = dir.join("trees");
    let trees_meta = match std::fs::metadata(&trees_dir) {
        Ok(m) if m.is_dir() => Some(m),
        Ok(_) => return Err(OverlayError::Unreadable { path: trees_dir, reason: "not a directory".into() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && std::fs::symlink_metadata(&trees_dir).is_err() => None,
        Err(e) => return Err(OverlayError::Unreadable { path: trees_dir, reason: infera_core::rootfs::io_reason(&e) }),
    };
    let (layout, trees) = if let Some(trees_meta) = trees_meta {
        (Layout::Ours, ours::load(&dir, opts, [&meta, &trees_meta])?)
    } else {
        (Layout::Infera, infera::load(&dir, opts)?)
    };
    let patches = gather::patches(&dir);
    let rdma = gather::rdma_providers(&dir);
    Ok(Overlay { dir, layout, trees, patches, rdma })
}
