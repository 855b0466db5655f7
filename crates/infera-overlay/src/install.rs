//! `infera-exec install DEST`: copy the overlay this binary belongs to into DEST. This is
//! the initContainer fallback for clusters without image volumes: the overlay image is
//! `FROM scratch` (no `cp`), so the static launcher copies itself and the trees into an
//! emptyDir, then checks the copy against each tree's integrity record.

use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use thiserror::Error;

use infera_exec_derive::Refuse;

use infera_core::error::Refusal;
use infera_core::nofollow;

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
    #[error("`{}` is {what} where install keeps its marker (a regular file it writes)", path.display())]
    #[refuse(
        code = "install-unsafe",
        exit = Usage,
        hint = "something other than `install` put it there: remove it (install writes nothing through a link or into a FIFO), or install into a fresh emptyDir"
    )]
    Planted { path: PathBuf, what: &'static str },
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
    // The destination as named, never through a link: a DEST that is a link, or has one on
    // its way, is refused (it would send the copy to wherever the link points).
    let dst = std::path::absolute(dest).unwrap_or_else(|_| dest.to_path_buf());
    if let Some(link) = linked(&dst) {
        return Err(InstallError::Planted { path: link, what: "a symbolic link on the way to the destination" }.into());
    }
    // Run from the overlay image itself the source is `/`: only the overlay's parts count.
    let parts = parts_of(&from);
    if parts.iter().any(|p| dst.starts_with(src.join(p))) || src.starts_with(&dst) {
        return Err(InstallError::Overlap { dest: dst, from: src }.into());
    }
    // The destination the caller named is created if missing (it alone, not its parents) and
    // held open: everything inside it is reached from that descriptor, no link followed, no
    // FIFO opened blocking, no file written that was not created here (a link or FIFO planted
    // in an emptyDir another container shares must not send a write elsewhere or hang).
    match fs::create_dir(&dst) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(err(e, "cannot create", &dst).into()),
    }
    let dir = open_dest(&dst)?;
    let ours = earlier_parts(&dir, &dst)?;
    // What an earlier run of `install` wrote is named in its marker; nothing else in the
    // destination is ever removed, and anything else there refuses the install.
    let mut foreign: Vec<String> = fs::read_dir(&dst)
        .map_err(|e| err(e, "cannot list", &dst))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != MARKER && !ours.contains(n))
        .collect();
    foreign.sort();
    if !foreign.is_empty() {
        return Err(InstallError::NotEmpty { dest: dst, foreign }.into());
    }
    // The marker first: a copy cut short is still recognised (and replaced) next time.
    let mut listed: Vec<&String> = parts.iter().chain(ours.iter()).collect();
    listed.sort();
    listed.dedup();
    let listed: String = listed.iter().map(|p| format!("{p}\n")).collect();
    write_marker(&dir, &dst, listed.as_bytes())?;
    let at = dir.as_fd();
    for part in &ours {
        remove_part(at, &dst, part)?;
    }
    let mut n = 0;
    for part in &parts {
        n += copy_tree(&from.join(part), at, OsStr::new(part), &dst.join(part))?;
    }
    // An emptyDir is created world-writable; the launcher refuses such a payload.
    fchmod(&dir, 0o755).map_err(|e| err(e, "cannot chmod", &dst))?;
    verify_copy(&dst)?;
    Ok(n)
}

/// The copy read back as the launcher will read it: every tree's files held to its record.
fn verify_copy(dst: &Path) -> Result<(), Refusal> {
    let ov = crate::overlay::load(dst, &crate::overlay::LoadOptions::default())?;
    let mut dirs: Vec<&PathBuf> = ov.trees.iter().flat_map(|t| &t.paths.parts).collect();
    dirs.sort();
    dirs.dedup();
    for d in dirs {
        let name = d.file_name().map(|x| x.to_string_lossy().into_owned()).unwrap_or_default();
        if let Err(problems) = crate::payload::verify_tree(d, &name, false) {
            if problems.iter().any(|p| !p.what.starts_with("no integrity record")) {
                let shown = d.strip_prefix(&ov.dir).unwrap_or(d).display().to_string();
                let list: String = problems.iter().map(|p| format!("\n  {shown}/{p}")).collect();
                return Err(InstallError::Integrity { dest: dst.to_path_buf(), list }.into());
            }
        }
    }
    Ok(())
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

/// The destination directory, opened for the `*at` calls below.
fn open_dest(dst: &Path) -> Result<OwnedFd, InstallError> {
    nofollow::open_dir_at(rustix::fs::CWD, dst).map_err(|e| match e.raw_os_error() {
        Some(nix::libc::ELOOP) => {
            InstallError::Planted { path: dst.to_path_buf(), what: "a symbolic link on the way to the destination" }
        }
        _ => err(e, "cannot open the directory", dst),
    })
}

/// The first component of `path` that is a symbolic link, if any (`..` is taken lexically:
/// `std::path::absolute` keeps it, and a link before it would change what it means).
fn linked(path: &Path) -> Option<PathBuf> {
    let mut at = PathBuf::new();
    for c in path.components() {
        at.push(c);
        if fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(at);
        }
    }
    None
}

/// The parts an earlier install listed in its marker; none when there is no marker. A marker
/// that is not a regular file (a link, a FIFO) was not written by `install`: refused.
fn earlier_parts(dir: &OwnedFd, dst: &Path) -> Result<Vec<String>, InstallError> {
    let path = dst.join(MARKER);
    let f = match nofollow::open_at(dir.as_fd(), Path::new(MARKER), OFlags::RDONLY, Mode::empty()) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(InstallError::Planted { path, what: "a symbolic link" })
        }
        Err(e) => return Err(err(e, "cannot read", &path)),
    };
    let f = nofollow::regular(f).map_err(|_| planted(dir, &path))?;
    let mut text = String::new();
    f.take(4096).read_to_string(&mut text).map_err(|e| err(e, "cannot read", &path))?;
    Ok(text.lines().filter(|l| is_part(l)).map(str::to_string).collect())
}

fn planted(dir: &OwnedFd, path: &Path) -> InstallError {
    let st = rustix::fs::statat(dir, MARKER, AtFlags::SYMLINK_NOFOLLOW);
    let what = st.map_or("not a file", |st| infera_core::filekind::Kind::of_mode(st.st_mode).describe());
    InstallError::Planted { path: path.to_path_buf(), what }
}

/// Write the marker: replaced when it is a regular file, created otherwise; never through a
/// link, never into a FIFO.
fn write_marker(dir: &OwnedFd, dst: &Path, text: &[u8]) -> Result<(), InstallError> {
    let path = dst.join(MARKER);
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC;
    let f = nofollow::open_at(dir.as_fd(), Path::new(MARKER), flags, Mode::from_raw_mode(0o644))
        .map_err(|e| err(e, "cannot write", &path))?;
    let mut f = nofollow::regular(f).map_err(|_| planted(dir, &path))?;
    f.write_all(text).map_err(|e| err(e, "cannot write", &path))
}

/// Remove an earlier copy of `part` (a directory's contents are removed by std, which opens
/// each level without following links; a link is removed, not followed).
fn remove_part(at: BorrowedFd<'_>, dst: &Path, part: &str) -> Result<(), InstallError> {
    let path = dst.join(part);
    let Ok(st) = rustix::fs::statat(at, part, AtFlags::SYMLINK_NOFOLLOW) else { return Ok(()) };
    if infera_core::filekind::Kind::of_mode(st.st_mode) == infera_core::filekind::Kind::Dir {
        // Through our descriptor's /proc link: the directory held open, whatever its path.
        let held = PathBuf::from(format!("/proc/self/fd/{}/{part}", at.as_raw_fd()));
        let target = if held.exists() { held } else { path.clone() };
        fs::remove_dir_all(&target).map_err(|e| err(e, "cannot replace", &path))
    } else {
        rustix::fs::unlinkat(at, part, AtFlags::empty()).map_err(|e| err(e.into(), "cannot replace", &path))
    }
}

/// Copy `src` to `name` in the directory `at` (`shown`: its path, for messages): links as
/// links, files created exclusively (never opened if something is already there), then each
/// directory's mode once its contents are in.
fn copy_tree(src: &Path, at: BorrowedFd<'_>, name: &OsStr, shown: &Path) -> Result<usize, InstallError> {
    let meta = fs::symlink_metadata(src).map_err(|e| err(e, "cannot read", src))?;
    if meta.file_type().is_symlink() {
        let t = fs::read_link(src).map_err(|e| err(e, "cannot read link", src))?;
        rustix::fs::symlinkat(&t, at, name).map_err(|e| err(e.into(), "cannot create link", shown))?;
        return Ok(1);
    }
    if meta.is_file() {
        let mut input = infera_core::rootfs::open_regular(src).map_err(|e| err(e, "cannot read", src))?;
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
        let mut out = nofollow::open_at(at, Path::new(name), flags, Mode::from_raw_mode(0o600))
            .map_err(|e| err(e, "cannot create", shown))?;
        std::io::copy(&mut input, &mut out).map_err(|e| err(e, "cannot copy to", shown))?;
        out.set_permissions(meta.permissions()).map_err(|e| err(e, "cannot chmod", shown))?;
        return Ok(1);
    }
    match rustix::fs::mkdirat(at, name, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(err(e.into(), "cannot create", shown)),
    }
    let sub = nofollow::open_dir_at(at, Path::new(name)).map_err(|e| err(e, "cannot open the directory", shown))?;
    let mut n = 0;
    let mut entries: Vec<_> =
        fs::read_dir(src).map_err(|e| err(e, "cannot list", src))?.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        n += copy_tree(&e.path(), sub.as_fd(), &e.file_name(), &shown.join(e.file_name()))?;
    }
    fchmod(&sub, meta.permissions().mode()).map_err(|e| err(e, "cannot chmod", shown))?;
    Ok(n)
}

fn fchmod(fd: &OwnedFd, mode: u32) -> std::io::Result<()> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode & 0o7777)).map_err(Into::into)
}
