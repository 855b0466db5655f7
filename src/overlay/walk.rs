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
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::check::{inside, not_writable_by_mode};
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Link,
    Other(&'static str),
}

fn walk(contain: &Path, part: &Path, mount: Mount, shared: &mut bool) -> Result<(), OverlayError> {
    let euid = nix::unistd::geteuid().as_raw();
    let mut stack = vec![part.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<(PathBuf, Option<Kind>)> = Vec::new();
        names(&dir, |name, kind| entries.push((dir.join(name), kind)))
            .map_err(|reason| OverlayError::Unreadable { path: dir.clone(), reason })?;
        for (path, kind) in entries {
            let kind = match kind {
                Some(k) => k,
                None => kind_of(&path)?,
            };
            match kind {
                Kind::Link => inside(contain, &path)?,
                Kind::Other(k) => return Err(OverlayError::Special { path, kind: k }),
                Kind::Dir | Kind::File => {
                    if kind == Kind::File {
                        let n = path.file_name().map(OsStr::as_bytes).unwrap_or_default();
                        *shared |= n.ends_with(b".so") || n.windows(4).any(|w| w == b".so.");
                    }
                    if !mount.read_only || !mount.nosuid {
                        let m = fs::symlink_metadata(&path)
                            .map_err(|e| OverlayError::Unreadable { path: path.clone(), reason: e.to_string() })?;
                        if !mount.nosuid && kind == Kind::File && m.mode() & 0o6000 != 0 {
                            return Err(OverlayError::SetId { path, mode: m.mode() & 0o7777 });
                        }
                        if !mount.read_only {
                            if m.uid() != 0 && m.uid() != euid {
                                return Err(OverlayError::Owner { path, uid: m.uid(), euid });
                            }
                            not_writable_by_mode(&path, &m)?;
                        }
                    }
                    if kind == Kind::Dir {
                        stack.push(path);
                    }
                }
            }
        }
    }
    Ok(())
}

fn kind_of(path: &Path) -> Result<Kind, OverlayError> {
    let t = fs::symlink_metadata(path)
        .map_err(|e| OverlayError::Unreadable { path: path.to_path_buf(), reason: e.to_string() })?
        .file_type();
    Ok(if t.is_symlink() {
        Kind::Link
    } else if t.is_dir() {
        Kind::Dir
    } else if t.is_file() {
        Kind::File
    } else {
        Kind::Other(crate::rootfs::kind(t))
    })
}

/// Each name in `dir` with its type when the directory records it (None: look it up).
fn names(dir: &Path, mut f: impl FnMut(&OsStr, Option<Kind>)) -> Result<(), String> {
    use nix::libc;
    crate::rootfs::each_entry(dir, |name, t| {
        let kind = match t {
            libc::DT_DIR => Some(Kind::Dir),
            libc::DT_REG => Some(Kind::File),
            libc::DT_LNK => Some(Kind::Link),
            libc::DT_FIFO => Some(Kind::Other("a FIFO")),
            libc::DT_SOCK => Some(Kind::Other("a socket")),
            libc::DT_CHR => Some(Kind::Other("a character device")),
            libc::DT_BLK => Some(Kind::Other("a block device")),
            _ => None,
        };
        f(name, kind);
    })
    .map_err(|e| e.to_string())
}
