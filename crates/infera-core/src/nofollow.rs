//! Opening a path the launcher writes, creates or locks without following a symbolic link in
//! any of its components, and without blocking on a FIFO: a link planted in a directory the
//! launcher does not own (`/tmp`, an emptyDir another container shares) must not send a write
//! to a file elsewhere, and a FIFO must not hang a start.
//!
//! The kernel's `openat2(RESOLVE_NO_SYMLINKS)` where it has it (Linux 5.6+, and no seccomp
//! profile refusing it), else a walk that opens each directory from its parent's descriptor
//! with `O_NOFOLLOW` (the kernels of older nodes, RHEL 8's 4.18 among them).

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Open `path` (relative to `dir`, or absolute) with `flags` (`O_NOFOLLOW`, `O_NONBLOCK`,
/// `O_NOCTTY` and `O_CLOEXEC` are always added), no link followed in any component.
pub fn open_at(dir: BorrowedFd<'_>, path: &Path, flags: OFlags, mode: Mode) -> io::Result<File> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    match rustix::fs::openat2(dir, path, flags, mode, ResolveFlags::NO_SYMLINKS) {
        Ok(fd) => Ok(File::from(fd)),
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => walk(dir, path, flags, mode).map(File::from),
        Err(e) => Err(e.into()),
    }
}

/// [`open_at`] from the working directory (or an absolute path).
pub fn open(path: &Path, flags: OFlags, mode: Mode) -> io::Result<File> {
    open_at(rustix::fs::CWD, path, flags, mode)
}

/// Open `path` only when it is a regular file: the descriptor's own type is checked (a FIFO
/// or a device opened non-blocking is closed again, unread and unwritten).
pub fn open_regular(path: &Path, flags: OFlags) -> io::Result<File> {
    regular(open(path, flags, Mode::empty())?)
}

/// The file when it is a regular file; an error naming what it is otherwise.
pub fn regular(f: File) -> io::Result<File> {
    let m = f.metadata()?;
    if m.is_file() {
        return Ok(f);
    }
    let what = crate::filekind::Kind::of(&m).describe();
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("is {what}, not a regular file")))
}

/// A directory opened for `*at` calls (no link followed to it).
pub fn open_dir_at(dir: BorrowedFd<'_>, path: &Path) -> io::Result<OwnedFd> {
    open_at(dir, path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).map(OwnedFd::from)
}

/// The same resolution in userspace: each directory opened `O_PATH | O_NOFOLLOW` from its
/// parent's descriptor (`..` refused: a walk that may not follow links has no use for it).
fn walk(dir: BorrowedFd<'_>, path: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    let mut parts: Vec<&OsStr> = Vec::new();
    let mut absolute = false;
    for c in path.components() {
        match c {
            Component::RootDir => absolute = true,
            Component::Normal(n) => parts.push(n),
            Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "`..` in a path that must not follow links"))
            }
        }
    }
    let Some(last) = parts.pop() else { return Err(io::Error::from(io::ErrorKind::InvalidInput)) };
    let step = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut held: Option<OwnedFd> = None;
    if absolute {
        held = Some(rustix::fs::open("/", step, Mode::empty())?);
    }
    for part in parts {
        let at = held.as_ref().map_or(dir, AsFd::as_fd);
        let next = rustix::fs::openat(at, part, step, Mode::empty()).map_err(|e| {
            // O_NOFOLLOW with O_DIRECTORY says ENOTDIR for a link: the kernel's ELOOP instead.
            let link = rustix::fs::statat(at, part, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| crate::filekind::Kind::of_mode(st.st_mode) == crate::filekind::Kind::Link);
            if link {
                rustix::io::Errno::LOOP
            } else {
                e
            }
        })?;
        held = Some(next);
    }
    let at = held.as_ref().map_or(dir, AsFd::as_fd);
    Ok(rustix::fs::openat(at, last, flags, mode)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn cases(open: &dyn Fn(&Path) -> io::Result<File>) {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        std::fs::create_dir(d.join("real")).unwrap();
        std::fs::write(d.join("real/file"), "x").unwrap();
        std::fs::write(d.join("victim"), "keep").unwrap();
        symlink(d.join("real"), d.join("linkdir")).unwrap();
        symlink(d.join("victim"), d.join("real/link")).unwrap();
        nix::unistd::mkfifo(&d.join("real/fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(open(&d.join("real/file")).is_ok());
        let e = open(&d.join("linkdir/file")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(nix::libc::ELOOP), "a link in a directory component: {e}");
        let e = open(&d.join("real/link")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(nix::libc::ELOOP), "a link as the last component: {e}");
        // A FIFO with no writer opens at once (non-blocking) and is refused by its type.
        let e = open(&d.join("real/fifo")).and_then(regular).unwrap_err();
        assert!(e.to_string().contains("is a FIFO"), "{e}");
        assert_eq!(std::fs::read_to_string(d.join("victim")).unwrap(), "keep");
    }

    #[test]
    fn no_link_in_any_component_is_followed() {
        cases(&|p| open(p, OFlags::RDONLY, Mode::empty()));
    }

    #[test]
    fn the_walk_refuses_what_the_kernel_refuses() {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        cases(&|p| walk(rustix::fs::CWD, p, flags, Mode::empty()).map(File::from));
    }
}
