//! A walk of every file of the tree the run uses, on every start, before planning: what
//! Python and the loader will open must be the tree's own. Each symbolic link resolves
//! inside the payload (a module linking to a writable file elsewhere would let anyone who
//! can write that file run code in the engine); no FIFO, socket or device (an import would
//! block on it); no set-user/group-ID file (unless the mount is `nosuid`); on a writable
//! mount, nothing writable by group or others and nothing owned by another user than root
//! or the launcher's own, whatever uid the launcher runs as (a copy in an emptyDir shared
//! with another container could be changed under it). It also notes the shared objects,
//! which a `noexec` mount cannot map.
//!
//! Names are read with their type from the directory (d_type), so a read-only `nosuid`
//! mount (an image volume) costs one directory read per directory and a `stat` per link.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::check::{inside, not_writable_mode};
use super::{Mount, OverlayError, Tree};

/// Walk the tree's parts and keep the outcome in its facts.
pub fn inspect(tree: &mut Tree) {
    let mount = tree.facts.mount;
    let mut shared_objects = false;
    let mut result = Ok(());
    for part in &tree.paths.parts {
        if let Err(e) = walk(&tree.paths.contain, part, mount, &mut shared_objects) {
            result = Err(e);
            break;
        }
    }
    tree.facts.shared_objects = shared_objects;
    tree.facts.walked = Some(result);
}

/// How many directories the walk keeps open ahead of listing them.
const OPEN_AHEAD: usize = 32;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Link,
    Other(&'static str),
}

fn walk(contain: &Path, part: &Path, mount: Mount, shared: &mut bool) -> Result<(), OverlayError> {
    use nix::fcntl::AtFlags;
    use nix::sys::stat::{fstatat, FileStat};
    use std::os::fd::AsRawFd;
    let euid = nix::unistd::geteuid().as_raw();
    // Each directory still to list, opened from its parent's descriptor as it is found (one
    // component for the kernel to look up, and never through a link) while few are
    // pending; by its path after that (a wide tree cannot run out of descriptors).
    let mut stack: Vec<(PathBuf, Option<std::os::fd::OwnedFd>)> = vec![(part.to_path_buf(), None)];
    // How many of them hold a descriptor.
    let mut pending = 0usize;
    while let Some((dir, opened)) = stack.pop() {
        pending -= usize::from(opened.is_some());
        let path_of = |name: &std::ffi::CStr| dir.join(OsStr::from_bytes(name.to_bytes()));
        let unreadable = |path: PathBuf, e: nix::Error| OverlayError::Unreadable {
            path,
            reason: std::io::Error::from(e).to_string(),
        };
        let mut subdirs: Vec<(PathBuf, Option<std::os::fd::OwnedFd>)> = Vec::new();
        let mut opened_here = 0usize;
        // The listing, kept for the tree's facts when a start asks for it.
        let keep = crate::rootfs::listings::wanted();
        let mut records = Vec::new();
        // Each name's own `lstat`, relative to the directory (one component to look up).
        let each = |fd: std::os::fd::BorrowedFd<'_>, name: &std::ffi::CStr, t: u8| {
            if keep {
                crate::rootfs::listings::record(&mut records, name.to_bytes(), t);
            }
            let lstat = || fstatat(Some(fd.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW);
            let mut known: Option<FileStat> = None;
            let kind = match Kind::of_dirent(t) {
                Some(k) => k,
                None => {
                    let st = lstat().map_err(|e| unreadable(path_of(name), e))?;
                    let k = Kind::of_mode(st.st_mode);
                    known = Some(st);
                    k
                }
            };
            match kind {
                Kind::Link => inside(contain, &path_of(name))?,
                Kind::Other(k) => return Err(OverlayError::Special { path: path_of(name), kind: k }),
                Kind::Dir | Kind::File => {
                    if kind == Kind::File {
                        let n = name.to_bytes();
                        *shared |= n.ends_with(b".so") || n.windows(4).any(|w| w == b".so.");
                    }
                    if !mount.read_only || !mount.nosuid {
                        let st = match known {
                            Some(st) => st,
                            None => lstat().map_err(|e| unreadable(path_of(name), e))?,
                        };
                        let mode = st.st_mode;
                        if !mount.nosuid && kind == Kind::File && mode & 0o6000 != 0 {
                            return Err(OverlayError::SetId { path: path_of(name), mode: mode & 0o7777 });
                        }
                        if !mount.read_only {
                            if st.st_uid != 0 && st.st_uid != euid {
                                return Err(OverlayError::Owner { path: path_of(name), uid: st.st_uid, euid });
                            }
                            not_writable_mode(mode, || path_of(name))?;
                        }
                    }
                    if kind == Kind::Dir {
                        // A directory that cannot be opened here is opened again by its path,
                        // which gives the error the message names.
                        let open = (pending + opened_here < OPEN_AHEAD)
                            .then(|| crate::rootfs::open_subdir(fd, name).ok())
                            .flatten();
                        opened_here += usize::from(open.is_some());
                        subdirs.push((path_of(name), open));
                    }
                }
            }
            Ok(())
        };
        let listed = match opened {
            Some(fd) => crate::rootfs::each_entry_of(fd, each),
            None => crate::rootfs::each_entry_at(&dir, each),
        };
        listed.map_err(|e| OverlayError::Unreadable { path: dir.clone(), reason: e.to_string() })??;
        if keep {
            crate::rootfs::listings::keep(&dir, records);
        }
        pending += opened_here;
        stack.extend(subdirs);
    }
    Ok(())
}

impl Kind {
    /// The kind a directory entry records (None: the filesystem does not say).
    fn of_dirent(t: u8) -> Option<Kind> {
        use nix::libc;
        match t {
            libc::DT_DIR => Some(Kind::Dir),
            libc::DT_REG => Some(Kind::File),
            libc::DT_LNK => Some(Kind::Link),
            libc::DT_FIFO => Some(Kind::Other("a FIFO")),
            libc::DT_SOCK => Some(Kind::Other("a socket")),
            libc::DT_CHR => Some(Kind::Other("a character device")),
            libc::DT_BLK => Some(Kind::Other("a block device")),
            _ => None,
        }
    }

    /// The kind an `lstat`'s mode gives.
    fn of_mode(mode: nix::libc::mode_t) -> Kind {
        use nix::libc;
        match mode & libc::S_IFMT {
            libc::S_IFLNK => Kind::Link,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFREG => Kind::File,
            libc::S_IFIFO => Kind::Other("a FIFO"),
            libc::S_IFSOCK => Kind::Other("a socket"),
            libc::S_IFCHR => Kind::Other("a character device"),
            libc::S_IFBLK => Kind::Other("a block device"),
            _ => Kind::Other("not a file"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    /// A tree wider than the directories the walk opens ahead: every directory is still
    /// listed (the ones past the bound by their path), so a writable file in the last one and a
    /// shared object in the first are both seen.
    #[test]
    fn every_directory_is_walked_past_the_open_ahead_bound() {
        let t = tempfile::tempdir().unwrap();
        let tree = t.path().join("tree");
        let dirs = OPEN_AHEAD * 3;
        for i in 0..dirs {
            let d = tree.join(format!("d{i:03}")).join("sub");
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("m.py"), "").unwrap();
        }
        fs::write(tree.join("d000/sub/_c.cpython-312-x86_64-linux-gnu.so"), "").unwrap();
        fs::set_permissions(&tree, fs::Permissions::from_mode(0o755)).unwrap();
        let writable = Mount { read_only: false, noexec: false, nosuid: false };
        let mut shared = false;
        walk(&tree, &tree, writable, &mut shared).unwrap();
        assert!(shared, "the .so in the first directory");

        let last = tree.join(format!("d{:03}/sub/m.py", dirs - 1));
        fs::set_permissions(&last, fs::Permissions::from_mode(0o664)).unwrap();
        match walk(&tree, &tree, writable, &mut false) {
            Err(OverlayError::Writable { path, who, .. }) => {
                assert_eq!(path, last);
                assert_eq!(who, "its group");
            }
            other => panic!("{other:?}"),
        }
        // A directory replaced by a link is not followed out of the tree.
        fs::set_permissions(&last, fs::Permissions::from_mode(0o644)).unwrap();
        let mid = tree.join(format!("d{:03}", dirs / 2));
        fs::rename(mid.join("sub"), t.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(t.path().join("elsewhere"), mid.join("sub")).unwrap();
        match walk(&tree, &tree, writable, &mut false) {
            Err(e) => assert!(e.to_string().contains(&mid.join("sub").display().to_string()), "{e}"),
            Ok(()) => panic!("a link out of the tree passed"),
        }
    }
}
