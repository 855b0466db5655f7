//! What the block device under a filesystem is: a disk in this machine, or storage reached
//! over a network (a cloud provider's volume, Ceph RBD, NBD, iSCSI, NVMe over fabrics, a
//! loop device over a network file). Read from `/sys` at root `/` (each a small file; the
//! hardware's own names: AWS's "Amazon Elastic Block Store" against "Amazon EC2 NVMe Instance
//! Storage", GCP's "nvme_card-pd" against "nvme_card", Google's "PersistentDisk" and
//! Microsoft's "Virtual Disk" SCSI models); where they do not say (virtio-blk, which is either),
//! `Medium::Unknown`, and the load strategy measures (`storage::probe`).

use std::path::{Path, PathBuf};

use serde::Serialize;

use infera_core::rootfs::Root;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Medium {
    /// Reached over a network: every read pays a round trip; several in flight fill the link.
    Network,
    /// A disk of this machine.
    Local,
    /// The device's facts do not say.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockDevice {
    /// `nvme0n1`, `sda`, `loop3`, `dm-0`.
    pub name: String,
    pub medium: Medium,
    /// What says so: the files read and what they hold.
    pub evidence: String,
}

/// How deep loop and device-mapper stacks are followed.
const MAX_DEPTH: usize = 4;

/// The block device `MAJ:MIN` (a mount's `majmin`), when it is one (`0:N` is no device).
pub fn classify(root: &Root, majmin: &str, mountinfo: &str) -> Option<BlockDevice> {
    classify_at(root, majmin, mountinfo, 0)
}

fn classify_at(root: &Root, majmin: &str, mountinfo: &str, depth: usize) -> Option<BlockDevice> {
    if majmin.starts_with("0:") || depth > MAX_DEPTH {
        return None;
    }
    let sys = Path::new("/sys/dev/block").join(majmin);
    let Ok(link) = root.resolve(&sys) else {
        // A device without its sysfs entry (a /sys not mounted): nothing says; measure.
        let evidence = format!("no {} to say what it is", sys.display());
        return Some(BlockDevice { name: majmin.to_string(), medium: Medium::Unknown, evidence });
    };
    // A partition's directory is inside its disk's.
    let disk = if root.metadata(&link.join("partition")).is_ok() { link.parent()?.to_path_buf() } else { link };
    Some(device(root, &disk, mountinfo, depth))
}

fn device(root: &Root, dir: &Path, mountinfo: &str, depth: usize) -> BlockDevice {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let read =
        |rel: &str| root.read_small_string(&dir.join(rel)).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    let (medium, evidence) = if name.starts_with("rbd") {
        (Medium::Network, "a Ceph RBD device".to_string())
    } else if name.starts_with("nbd") {
        (Medium::Network, "a network block device (nbd)".to_string())
    } else if name.starts_with("nvme") {
        nvme(read("device/model"), read("device/transport"))
    } else if name.starts_with("sd") || name.starts_with("xvd") {
        scsi(root, dir, read("device/vendor"), read("device/model"))
    } else if name.starts_with("loop") {
        return loop_device(root, name, read("loop/backing_file"), mountinfo, depth);
    } else if name.starts_with("dm-") || name.starts_with("md") {
        return stacked(root, dir, name, mountinfo, depth);
    } else {
        (Medium::Unknown, format!("{name}: its facts do not say whether it is local (virtio and others)"))
    };
    BlockDevice { name, medium, evidence }
}

/// An NVMe namespace, by its controller's model and transport (`/sys/class/nvme/nvmeN/`).
fn nvme(model: Option<String>, transport: Option<String>) -> (Medium, String) {
    let m = model.unwrap_or_default();
    let t = transport.unwrap_or_default();
    let said = format!("NVMe, model `{m}`, transport `{t}`");
    let network_model = ["Amazon Elastic Block Store", "nvme_card-pd", "PersistentDisk"];
    if matches!(t.as_str(), "tcp" | "rdma" | "fc") || network_model.iter().any(|n| m.contains(n)) {
        (Medium::Network, said)
    } else if m.contains("Instance Storage") || m == "nvme_card" || t == "pcie" {
        (Medium::Local, said)
    } else {
        (Medium::Unknown, said)
    }
}

/// A SCSI disk, by its vendor and model and by whether its host is an iSCSI session.
fn scsi(root: &Root, dir: &Path, vendor: Option<String>, model: Option<String>) -> (Medium, String) {
    let (v, m) = (vendor.unwrap_or_default(), model.unwrap_or_default());
    let said = format!("SCSI, vendor `{v}`, model `{m}`");
    let iscsi = root.resolve(&dir.join("device")).is_ok_and(|p| p.to_string_lossy().contains("/session"));
    if iscsi {
        (Medium::Network, format!("{said}, behind an iSCSI session"))
    } else if (v == "Google" && m.contains("PersistentDisk")) || (v == "Msft" && m.contains("Virtual Disk")) {
        (Medium::Network, said)
    } else {
        (Medium::Unknown, said)
    }
}

/// A loop device is what its backing file is on: a network filesystem, or a block device.
fn loop_device(root: &Root, name: String, backing: Option<String>, mountinfo: &str, depth: usize) -> BlockDevice {
    let Some(file) = backing else {
        return BlockDevice { name, medium: Medium::Unknown, evidence: "a loop device without a backing file".into() };
    };
    let under = super::mounts::mount_of(mountinfo, Path::new(&file));
    let (medium, on) = match under {
        Some(m) if super::mounts::network_fs(&m.fstype) => {
            (Medium::Network, format!("{} ({})", m.fstype, m.mount_point.display()))
        }
        Some(m) => match classify_at(root, &m.majmin, mountinfo, depth + 1) {
            Some(d) => (d.medium, format!("{}: {}", d.name, d.evidence)),
            None => (Medium::Unknown, m.fstype),
        },
        None => (Medium::Unknown, "an unknown mount".into()),
    };
    BlockDevice { name, medium, evidence: format!("a loop device over `{file}` on {on}") }
}

/// A device-mapper or md device is what its parts are: on the network if any part is, local
/// if every part is.
fn stacked(root: &Root, dir: &Path, name: String, mountinfo: &str, depth: usize) -> BlockDevice {
    let parts: Vec<PathBuf> =
        root.list(&dir.join("slaves")).into_iter().map(|s| Path::new("/sys/class/block").join(s)).collect();
    let found: Vec<BlockDevice> = if depth < MAX_DEPTH {
        parts.iter().filter_map(|p| root.resolve(p).ok()).map(|p| device(root, &p, mountinfo, depth + 1)).collect()
    } else {
        Vec::new()
    };
    let medium = if found.iter().any(|d| d.medium == Medium::Network) {
        Medium::Network
    } else if !found.is_empty() && found.iter().all(|d| d.medium == Medium::Local) {
        Medium::Local
    } else {
        Medium::Unknown
    };
    let said: Vec<String> = found.iter().map(|d| format!("{} ({})", d.name, d.evidence)).collect();
    BlockDevice {
        name,
        medium,
        evidence: format!("over {}", if said.is_empty() { "no readable part".into() } else { said.join(", ") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/sys` of block devices in a temporary root: each `(name, files, link of `device`)`.
    struct Sys(tempfile::TempDir);

    impl Sys {
        fn new() -> Sys {
            Sys(tempfile::tempdir().unwrap())
        }
        fn p(&self, rel: &str) -> PathBuf {
            self.0.path().join(rel.trim_start_matches('/'))
        }
        /// A disk `name` at MAJ:MIN, with files relative to its directory.
        fn disk(&self, name: &str, majmin: &str, files: &[(&str, &str)]) -> &Self {
            let dir = format!("/sys/devices/virtual/block/{name}");
            std::fs::create_dir_all(self.p(&dir)).unwrap();
            for (rel, text) in files {
                std::fs::create_dir_all(self.p(&format!("{dir}/{rel}")).parent().unwrap()).unwrap();
                std::fs::write(self.p(&format!("{dir}/{rel}")), text).unwrap();
            }
            std::fs::create_dir_all(self.p("/sys/dev/block")).unwrap();
            std::os::unix::fs::symlink(
                format!("../../devices/virtual/block/{name}"),
                self.p(&format!("/sys/dev/block/{majmin}")),
            )
            .unwrap();
            std::fs::create_dir_all(self.p("/sys/class/block")).unwrap();
            std::os::unix::fs::symlink(
                format!("../../devices/virtual/block/{name}"),
                self.p(&format!("/sys/class/block/{name}")),
            )
            .unwrap();
            self
        }
        /// An EBS volume (259:1) and an instance-store drive (259:2), as AWS names them.
        fn with_aws_disks() -> Sys {
            let s = Sys::new();
            s.disk(
                "nvme1n1",
                "259:1",
                &[("device/model", "Amazon Elastic Block Store\n"), ("device/transport", "pcie\n")],
            );
            s.disk(
                "nvme2n1",
                "259:2",
                &[("device/model", "Amazon EC2 NVMe Instance Storage\n"), ("device/transport", "pcie\n")],
            );
            s
        }
        fn classify(&self, majmin: &str, mountinfo: &str) -> BlockDevice {
            classify(&Root::new(self.0.path()), majmin, mountinfo).unwrap()
        }
    }

    #[test]
    fn cloud_volumes_and_local_drives_by_their_own_names() {
        let s = Sys::with_aws_disks();
        s.disk("nvme3n1", "259:3", &[("device/model", "nvme_card-pd\n"), ("device/transport", "pcie\n")]);
        s.disk("nvme4n1", "259:4", &[("device/model", "Samsung SSD\n"), ("device/transport", "tcp\n")]);
        s.disk("sdb", "8:16", &[("device/vendor", "Google  \n"), ("device/model", "PersistentDisk  \n")]);
        s.disk("sdc", "8:32", &[("device/vendor", "Msft    \n"), ("device/model", "Virtual Disk    \n")]);
        s.disk("rbd0", "252:0", &[]);
        s.disk("vdb", "254:16", &[]);
        for (mm, want) in [
            ("259:1", Medium::Network),
            ("259:2", Medium::Local),
            ("259:3", Medium::Network),
            ("259:4", Medium::Network),
            ("8:16", Medium::Network),
            ("8:32", Medium::Network),
            ("252:0", Medium::Network),
            ("254:16", Medium::Unknown),
        ] {
            let d = s.classify(mm, "");
            assert_eq!(d.medium, want, "{mm}: {d:?}");
        }
        assert!(s.classify("259:1", "").evidence.contains("Amazon Elastic Block Store"));
        assert!(classify(&Root::new(s.0.path()), "0:52", "").is_none(), "no block device");
        let unseen = s.classify("8:48", "");
        assert_eq!(
            (unseen.medium, unseen.evidence.as_str()),
            (Medium::Unknown, "no /sys/dev/block/8:48 to say what it is")
        );
    }

    #[test]
    fn stacked_devices_are_what_their_parts_are() {
        let s = Sys::with_aws_disks();
        s.disk("dm-0", "253:0", &[("slaves/nvme1n1", ""), ("slaves/nvme2n1", "")]);
        s.disk("md0", "9:0", &[("slaves/nvme2n1", "")]);
        assert_eq!(s.classify("253:0", "").medium, Medium::Network, "any network part");
        assert_eq!(s.classify("9:0", "").medium, Medium::Local, "every part local");
        // A loop device over a file on NFS, and over a file on the EBS volume.
        let mountinfo = "30 1 0:50 / /mnt/nfs rw - nfs4 server:/x rw\n31 1 259:1 / /data rw - ext4 /dev/nvme1n1 rw\n";
        s.disk("loop0", "7:0", &[("loop/backing_file", "/mnt/nfs/disk.img\n")]);
        s.disk("loop1", "7:1", &[("loop/backing_file", "/data/disk.img\n")]);
        let l0 = s.classify("7:0", mountinfo);
        assert_eq!(l0.medium, Medium::Network, "{l0:?}");
        assert!(l0.evidence.contains("nfs4"), "{}", l0.evidence);
        assert_eq!(s.classify("7:1", mountinfo).medium, Medium::Network);
    }
}
