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
//! Names are read with their type from the directory, so a read-only `nosuid` mount (an
//! image volume) costs one directory read per directory and a `stat` per link.

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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Link,
    Other(&'static str),
}

fn walk(contain: &Path, part: &Path, mount: Mount, shared: &mut bool) -> Result<(), OverlayError> {
    use std::os::unix::fs::MetadataExt;
    let euid = nix::unistd::geteuid().as_raw();
    let mut stack: Vec<PathBuf> = vec![part.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let unreadable = |path: &Path, e: std::io::Error| OverlayError::Unreadable {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        let mut names: Vec<(std::ffi::OsString, infera_core::filekind::Kind)> = Vec::new();
        infera_core::rootfs::each_entry(&dir, |n, t| names.push((n.to_os_string(), t)))
            .map_err(|e| unreadable(&dir, e))?;
        for (name, t) in names {
            let path = dir.join(&name);
            match Kind::of(t) {
                Kind::Link => inside(contain, &path)?,
                Kind::Other(k) => return Err(OverlayError::Special { path, kind: k }),
                kind => {
                    if kind == Kind::File {
                        let n = name.as_bytes();
                        *shared |= n.ends_with(b".so") || n.windows(4).any(|w| w == b".so.");
                    }
                    if !mount.read_only || !mount.nosuid {
                        let st = std::fs::symlink_metadata(&path).map_err(|e| unreadable(&path, e))?;
                        let mode = st.mode();
                        if !mount.nosuid && kind == Kind::File && mode & 0o6000 != 0 {
                            return Err(OverlayError::SetId { path, mode: mode & 0o7777 });
                        }
                        if !mount.read_only {
                            if st.uid() != 0 && st.uid() != euid {
                                return Err(OverlayError::Owner { path, uid: st.uid(), euid });
                            }
                            not_writable_mode(mode, || path.clone())?;
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

impl Kind {
    fn of(t: infera_core::filekind::Kind) -> Kind {
        use infera_core::filekind::Kind as K;
        match t {
            K::Link => Kind::Link,
            K::Dir => Kind::Dir,
            K::File => Kind::File,
            other => Kind::Other(other.describe()),
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    /// Every directory is listed: a writable file in the last one and a shared object in
    /// the first are both seen, and a directory replaced by a link is not followed.
    #[test]
    fn every_directory_is_walked() {
        let t = tempfile::tempdir().unwrap();
        let tree = t.path().join("tree");
        let dirs = 96;
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
