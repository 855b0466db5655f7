//! Opening a path the launcher writes, creates or locks without following a symbolic link in
//! any of its components, and without blocking on a FIFO: a link planted in a directory the
//! launcher does not own (`/tmp`, an emptyDir another container shares) must not send a write
//! to a file elsewhere, and a FIFO must not hang a start.
//!
//! The kernel's `openat2(RESOLVE_NO_SYMLINKS)` where it has it (Linux 5.6+, and no seccomp
//! profile refusing it), else a walk that opens each directory from its parent's descriptor
//! with `O_NOFOLLOW`.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Component, Path};

use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

/// Open `path` (relative to `dir`, or absolute) with `flags` (`O_NOFOLLOW`, `O_NONBLOCK`,
/// `O_NOCTTY` and `O_CLOEXEC` are always added), no link followed in any component.
pub fn open_at(dir: BorrowedFd<'_>, path: &Path, flags: OFlag, mode: Mode) -> io::Result<File> {
    let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let how = OpenHow::new().flags(flags).mode(mode).resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    match nix::fcntl::openat2(dir.as_raw_fd(), path, how) {
        // SAFETY: `openat2` just returned this descriptor and nothing else owns it.
        Ok(fd) => Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) })),
        Err(nix::errno::Errno::ENOSYS | nix::errno::Errno::EPERM) => walk(dir, path, flags, mode),
        Err(e) => Err(e.into()),
    }
}

/// [`open_at`] from the working directory (or an absolute path).
pub fn open(path: &Path, flags: OFlag, mode: Mode) -> io::Result<File> {
    // SAFETY: AT_FDCWD is the kernel's name for the working directory, valid for the call.
    let cwd = unsafe { BorrowedFd::borrow_raw(nix::libc::AT_FDCWD) };
    open_at(cwd, path, flags, mode)
}

/// Open `path` only when it is a regular file: the descriptor's own type is checked (a FIFO
/// or a device opened non-blocking is closed again, unread and unwritten).
pub fn open_regular(path: &Path, flags: OFlag) -> io::Result<File> {
    regular(open(path, flags, Mode::empty())?)
}

/// The file when it is a regular file; an error naming what it is otherwise.
pub fn regular(f: File) -> io::Result<File> {
    let m = f.metadata()?;
    if m.is_file() {
        return Ok(f);
    }
    let what = crate::rootfs::kind(m.file_type());
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("is {what}, not a regular file")))
}

/// The same resolution in userspace: each directory opened `O_PATH | O_NOFOLLOW` from its
/// parent's descriptor (`..` refused: a walk that may not follow links has no use for it).
fn walk(dir: BorrowedFd<'_>, path: &Path, flags: OFlag, mode: Mode) -> io::Result<File> {
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
    let step = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut held: Option<OwnedFd> = None;
    if absolute {
        held = Some(nix::fcntl::open("/", step, Mode::empty()).map(|fd| {
            // SAFETY: `open` just returned this descriptor and nothing else owns it.
            unsafe { OwnedFd::from_raw_fd(fd) }
        })?);
    }
    for part in parts {
        let at = held.as_ref().map_or(dir.as_raw_fd(), |f| f.as_raw_fd());
        let fd = nix::fcntl::openat(Some(at), part, step, Mode::empty()).map_err(|e| {
            // O_NOFOLLOW with O_DIRECTORY says ENOTDIR for a link: the kernel's ELOOP instead.
            let link = nix::sys::stat::fstatat(Some(at), part, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFLNK);
            if link {
                nix::errno::Errno::ELOOP
            } else {
                e
            }
        })?;
        // SAFETY: `openat` just returned this descriptor and nothing else owns it.
        held = Some(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    let at = held.as_ref().map_or(dir.as_raw_fd(), |f| f.as_raw_fd());
    let fd = nix::fcntl::openat(Some(at), last, flags, mode)?;
    // SAFETY: `openat` just returned this descriptor and nothing else owns it.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// A directory opened for `*at` calls (no link followed to it).
pub fn open_dir_at(dir: BorrowedFd<'_>, path: &Path) -> io::Result<OwnedFd> {
    open_at(dir, path, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).map(OwnedFd::from)
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
        nix::unistd::mkfifo(&d.join("real/fifo"), Mode::from_bits_truncate(0o600)).unwrap();
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
        cases(&|p| open(p, OFlag::O_RDONLY, Mode::empty()));
    }

    #[test]
    fn the_walk_refuses_what_the_kernel_refuses() {
        // SAFETY: AT_FDCWD names the working directory for the call.
        let cwd = unsafe { BorrowedFd::borrow_raw(nix::libc::AT_FDCWD) };
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        cases(&|p| walk(cwd, p, flags, Mode::empty()));
    }
}
