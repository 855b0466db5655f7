//! `infera-exec install DEST`: copy the overlay this binary belongs to into DEST. This is
//! the initContainer fallback for clusters without image volumes: the overlay image is
//! `FROM scratch` (no `cp`), so the static launcher copies itself and the trees into an
//! emptyDir, then checks the copy against each tree's integrity record.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Exit, Refusal};

pub fn run(dest: &Path, from: Option<PathBuf>) -> i32 {
    match install(dest, from) {
        Ok(n) => {
            let _ = writeln!(
                std::io::stdout(),
                "installed the overlay into {} ({n} files); trees match their records",
                dest.display()
            );
            0
        }
        Err(r) => {
            let _ = std::io::stderr().write_all(r.render().as_bytes());
            r.exit.code()
        }
    }
}

fn err(e: std::io::Error, what: &str, p: &Path) -> Refusal {
    Refusal::new(Exit::Missing, "install-failed", format!("{what} `{}`: {e}", p.display()))
        .hint("the destination must be a writable directory (an emptyDir volume)")
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
        return Err(Refusal::new(
            Exit::Missing,
            "overlay-missing",
            format!("`{}` holds no trees/ to install", from.display()),
        )
        .hint("run `install` from the overlay image, or pass --from OVERLAY"));
    }
    // Never delete what is not ours: the destination must not hold the source, sit inside
    // it, or be a non-empty directory other than an earlier copy of the overlay.
    let src = fs::canonicalize(&from).unwrap_or_else(|_| from.clone());
    let dst = std::path::absolute(dest).unwrap_or_else(|_| dest.to_path_buf());
    let dst = fs::canonicalize(&dst).unwrap_or(dst);
    // (Run from the overlay image itself the source is `/`: only its bin/ and trees/ count.)
    if dst.starts_with(src.join("bin")) || dst.starts_with(src.join("trees")) || src.starts_with(&dst) {
        return Err(Refusal::new(
            Exit::Usage,
            "install-overlap",
            format!(
                "`{}` and the overlay `{}` overlap; install into a separate (empty) directory",
                dst.display(),
                src.display()
            ),
        ));
    }
    if let Ok(rd) = fs::read_dir(&dst) {
        let foreign: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !["bin", "trees", "opt"].contains(&n.as_str()))
            .collect();
        let earlier_copy = dst.join("trees").is_dir();
        if !foreign.is_empty() || (dst.join("bin").exists() && !earlier_copy) {
            return Err(Refusal::new(
                Exit::Usage,
                "install-not-empty",
                format!(
                    "`{}` is not empty and is not an earlier copy of the overlay (it holds {})",
                    dst.display(),
                    foreign.join(", ")
                ),
            )
            .hint("install into an empty directory (an emptyDir volume)"));
        }
    }
    fs::create_dir_all(dest).map_err(|e| err(e, "cannot create", dest))?;
    let mut n = 0;
    for part in ["bin", "trees"] {
        let target = dest.join(part);
        if target.exists() {
            fs::remove_dir_all(&target).map_err(|e| err(e, "cannot replace", &target))?;
        }
        n += copy_tree(&from.join(part), &target)?;
    }
    // An emptyDir is created world-writable; the launcher refuses such a payload.
    fs::set_permissions(dest, fs::Permissions::from_mode(0o755)).map_err(|e| err(e, "cannot chmod", dest))?;
    let ov = crate::overlay::load(dest, false).map_err(Refusal::from)?;
    for t in &ov.trees {
        if let Err(problems) = crate::manifest_cmd::verify_tree(&t.dir, &t.family, false) {
            if problems.iter().any(|p| !p.what.starts_with("no integrity record")) {
                let list: String = problems.iter().map(|p| format!("\n  trees/{}/{p}", t.family)).collect();
                return Err(Refusal::new(
                    Exit::Invalid,
                    "integrity",
                    format!("the copy in `{}` does not match:{list}", dest.display()),
                ));
            }
        }
    }
    Ok(n)
}

fn copy_tree(src: &Path, dst: &Path) -> Result<usize, Refusal> {
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
