//! The mounts of this process (`/proc/self/mountinfo`, read by procfs-core): which mount
//! holds a path, and whether its filesystem's reads cross a network. Below both the
//! filesystem facts (`storage`) and the block devices' (`blockdev`, a loop device's file).

use std::path::{Path, PathBuf};

/// A mount: its filesystem type, where it is mounted, its device number (`0:N`: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub fstype: String,
    pub mount_point: PathBuf,
    pub majmin: String,
}

/// Filesystems whose reads cross a network (or a FUSE daemon that may).
pub fn network_fs(fstype: &str) -> bool {
    matches!(
        fstype,
        "nfs"
            | "nfs4"
            | "lustre"
            | "ceph"
            | "virtiofs"
            | "cifs"
            | "smb3"
            | "9p"
            | "gpfs"
            | "beegfs"
            | "wekafs"
            | "fuse"
    ) || fstype.starts_with("fuse.")
}

/// The mount holding `path` (an absolute, resolved path) in a mountinfo text: the longest
/// mount point that is `path` or a parent of it; of mounts stacked on one point, the last.
pub fn mount_of(mountinfo: &str, path: &Path) -> Option<Mount> {
    use procfs_core::FromRead;
    let mounts = procfs_core::process::MountInfos::from_read(mountinfo.as_bytes()).ok()?;
    let mut best: Option<Mount> = None;
    for m in mounts {
        // procfs-core keeps the kernel's octal escapes in the mount point (`\040` for a space).
        let point = PathBuf::from(unescape(&m.mount_point.to_string_lossy()));
        let longer = best.as_ref().is_none_or(|b| point.as_os_str().len() >= b.mount_point.as_os_str().len());
        if path.starts_with(&point) && longer {
            best = Some(Mount { fstype: m.fs_type, mount_point: point, majmin: m.majmin });
        }
    }
    best
}

/// mountinfo escapes space, tab, newline and backslash as `\040`-style octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
