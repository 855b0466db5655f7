//! `infera-exec install DEST`: copy the overlay this binary belongs to into DEST. This is
//! the initContainer fallback for clusters without image volumes: the overlay image is
//! `FROM scratch` (no `cp`), so the static launcher copies itself and the trees into an
//! emptyDir, then checks the copy against each tree's integrity record.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

use infera_exec_derive::Refuse;

use crate::error::Refusal;

#[derive(Debug, Error, Refuse)]
pub enum InstallError {
    #[error("{what} `{}`: {cause}", path.display())]
    #[refuse(code = "install-failed", exit = Missing, hint = "the destination must be a writable directory (an emptyDir volume)")]
    Io { what: &'static str, path: PathBuf, cause: std::io::Error },
    #[error("`{}` holds no trees/ to install", from.display())]
    #[refuse(code = "overlay-missing", exit = Missing, hint = "run `install` from the overlay image, or pass --from OVERLAY")]
    NoTrees { from: PathBuf },
    #[error("`{}` and the overlay `{}` overlap; install into a separate (empty) directory", dest.display(), from.display())]
    #[refuse(code = "install-overlap", exit = Usage)]
    Overlap { dest: PathBuf, from: PathBuf },
    #[error("`{}` holds what this launcher did not install there ({}); nothing was removed", dest.display(), foreign.join(", "))]
    #[refuse(
        code = "install-not-empty",
        exit = Usage,
        hint = "install into an empty directory (an emptyDir volume); an earlier install is recognised by its `.infera-install` marker and replaced"
    )]
    NotEmpty { dest: PathBuf, foreign: Vec<String> },
    #[error("the copy in `{}` does not match:{list}", dest.display())]
    #[refuse(code = "integrity", exit = Invalid)]
    Integrity { dest: PathBuf, list: String },
}

/// Copy, check, and say what was done (the text for stdout).
pub fn run(dest: &Path, from: Option<PathBuf>) -> Result<String, Refusal> {
    let n = install(dest, from)?;
    Ok(format!("installed the overlay into {} ({n} files); trees match their records\n", dest.display()))
}

fn err(cause: std::io::Error, what: &'static str, p: &Path) -> InstallError {
    InstallError::Io { what, path: p.to_path_buf(), cause }
}

fn install(dest: &Path, from: Option<PathBuf>) -> Result<usize, Refusal> {
    let from = match from {
        Some(f) => f,
        None => {
            let exe =
                std::env::current_exe().map_err(|e| err(e, "cannot find this binary", Path::new("/proc/self/exe")))?;
            exe.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"))
        }
    };
    if !from.join("trees").is_dir() {
        return Err(InstallError::NoTrees { from }.into());
    }
    // Never delete what is not ours: the destination must not hold the source, sit inside
    // it, or be a non-empty directory other than an earlier copy of the overlay.
    let src = fs::canonicalize(&from).unwrap_or_else(|_| from.clone());
    let dst = std::path::absolute(dest).unwrap_or_else(|_| dest.to_path_buf());
    let dst = fs::canonicalize(&dst).unwrap_or(dst);
    // Run from the overlay image itself the source is `/`: only the overlay's parts count.
    let parts = parts_of(&from);
    if parts.iter().any(|p| dst.starts_with(src.join(p))) || src.starts_with(&dst) {
        return Err(InstallError::Overlap { dest: dst, from: src }.into());
    }
    // What an earlier run of `install` wrote is named in its marker; nothing else in the
    // destination is ever removed, and anything else there refuses the install.
    let marker = dst.join(MARKER);
    let ours: Vec<String> = crate::rootfs::read_bounded(&marker, 4096)
        .map(|t| String::from_utf8_lossy(&t).lines().filter(|l| is_part(l)).map(str::to_string).collect())
        .unwrap_or_default();
    if let Ok(rd) = fs::read_dir(&dst) {
        let mut foreign: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != MARKER && !ours.contains(n))
            .collect();
        foreign.sort();
        if !foreign.is_empty() {
            return Err(InstallError::NotEmpty { dest: dst, foreign }.into());
        }
    }
    fs::create_dir_all(dest).map_err(|e| err(e, "cannot create", dest))?;
    // The marker first: a copy cut short is still recognised (and replaced) next time.
    let mut listed: Vec<&String> = parts.iter().chain(ours.iter()).collect();
    listed.sort();
    listed.dedup();
    let listed: String = listed.iter().map(|p| format!("{p}\n")).collect();
    fs::write(dest.join(MARKER), listed).map_err(|e| err(e, "cannot write", &dest.join(MARKER)))?;
    let mut n = 0;
    for part in &ours {
        let target = dest.join(part);
        match fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&target).map_err(|e| err(e, "cannot replace", &target))?,
            Ok(_) => fs::remove_file(&target).map_err(|e| err(e, "cannot replace", &target))?,
            Err(_) => {}
        }
    }
    for part in &parts {
        n += copy_tree(&from.join(part), &dest.join(part))?;
    }
    // An emptyDir is created world-writable; the launcher refuses such a payload.
    fs::set_permissions(dest, fs::Permissions::from_mode(0o755)).map_err(|e| err(e, "cannot chmod", dest))?;
    let ov = crate::overlay::load(dest, &crate::overlay::LoadOptions::default())?;
    let mut dirs: Vec<&PathBuf> = ov.trees.iter().flat_map(|t| &t.paths.parts).collect();
    dirs.sort();
    dirs.dedup();
    for d in dirs {
        let name = d.file_name().map(|x| x.to_string_lossy().into_owned()).unwrap_or_default();
        if let Err(problems) = crate::payload::verify_tree(d, &name, false) {
            if problems.iter().any(|p| !p.what.starts_with("no integrity record")) {
                let shown = d.strip_prefix(&ov.dir).unwrap_or(d).display().to_string();
                let list: String = problems.iter().map(|p| format!("\n  {shown}/{p}")).collect();
                return Err(InstallError::Integrity { dest: dest.to_path_buf(), list }.into());
            }
        }
    }
    Ok(n)
}

/// What `install` writes into the destination first: the parts it copies, one per line. A
/// later run replaces exactly those and refuses anything else it finds there.
const MARKER: &str = ".infera-install";

/// The top-level entries that make an overlay (either layout): the launcher, the trees, the
/// patches, the RoCE provider links.
fn is_part(name: &str) -> bool {
    ["bin", "trees", "native", "patches", "rdma"].contains(&name) || crate::overlay::infera::py_tag(name).is_some()
}

fn parts_of(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()).filter_map(|e| e.file_name().into_string().ok()).filter(|n| is_part(n)).collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn copy_tree(src: &Path, dst: &Path) -> Result<usize, InstallError> {
    let meta = fs::symlink_metadata(src).map_err(|e| err(e, "cannot read", src))?;
    if meta.file_type().is_symlink() {
        let t = fs::read_link(src).map_err(|e| err(e, "cannot read link", src))?;
        symlink(&t, dst).map_err(|e| err(e, "cannot create link", dst))?;
        return Ok(1);
    }
    if meta.is_file() {
        fs::copy(src, dst).map_err(|e| err(e, "cannot copy to", dst))?;
        return Ok(1);
    }
    fs::create_dir_all(dst).map_err(|e| err(e, "cannot create", dst))?;
    let mut n = 0;
    let mut entries: Vec<_> =
        fs::read_dir(src).map_err(|e| err(e, "cannot list", src))?.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        n += copy_tree(&e.path(), &dst.join(e.file_name()))?;
    }
    fs::set_permissions(dst, meta.permissions()).map_err(|e| err(e, "cannot chmod", dst))?;
    Ok(n)
}
