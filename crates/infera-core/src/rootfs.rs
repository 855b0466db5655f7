//! Reading an image's files under a root directory.
//!
//! Paths the launcher reasons about are *container* paths (`/usr/bin/python3`). They are
//! read at `<root>/<path>`, with symlinks resolved inside the root as the container would:
//! an absolute target restarts at the root, `..` stops at it. At root `/` (every pod) that
//! is plain `std::fs`; under `--root DIR` it is a walk of the same rules, a component at a
//! time (the kernel's `openat2(RESOLVE_IN_ROOT)` is the oracle of its tests).

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use crate::filekind::Kind;

/// The kernel's `MAXSYMLINKS`, which the fallback walk keeps too.
const MAX_SYMLINKS: usize = 40;

/// Version files, config.json and manifests are small; a larger file is not read whole.
pub const SMALL_FILE_LIMIT: u64 = 1 << 20;

/// Where an image's root is on this host, as a value: container paths map to host paths
/// by joining, with no file read. The plan holds this, never a [`Root`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    host: PathBuf,
    /// Container paths read from other host directories (a pod's volumes), longest first.
    volumes: Vec<(PathBuf, PathBuf)>,
    /// An image read from its archive (its files are on no path of this host): which.
    image: Option<std::sync::Arc<crate::image::Identity>>,
}

impl Place {
    /// The host's own `/`, with nothing mapped: plain `std::fs` reads it.
    pub fn is_host_root(&self) -> bool {
        self.image.is_none() && self.host == Path::new("/") && self.volumes.is_empty()
    }

    /// Whether the files are an image read from its archive.
    pub fn is_image(&self) -> bool {
        self.image.is_some()
    }

    /// The image read from its archive, when it is one.
    pub fn image(&self) -> Option<&crate::image::Identity> {
        self.image.as_deref()
    }

    /// Where a container path is on this host when that is another path than its own: under
    /// `--root` (None at the host's root, and for an image read from its archive).
    pub fn host_of(&self, cpath: &Path) -> Option<PathBuf> {
        (!self.is_image() && !self.is_host_root()).then(|| self.host(cpath))
    }

    /// Whether a container path is under one of the volumes.
    fn in_volume(&self, cpath: &Path) -> bool {
        let parts = normal(cpath);
        self.volumes.iter().any(|(at, _)| parts.starts_with(&normal(at)))
    }

    /// Where a container path lives on this host (no symlink resolution): under the volume
    /// that holds it, else under the root.
    pub fn host(&self, cpath: &Path) -> PathBuf {
        let parts = normal(cpath);
        let (mut p, rest) = self
            .volumes
            .iter()
            .map(|(at, dir)| (normal(at), dir))
            .find(|(at, _)| parts.starts_with(at))
            .map_or((self.host.clone(), &parts[..]), |(at, dir)| (dir.clone(), &parts[at.len()..]));
        p.extend(rest);
        p
    }
}

/// The names of a path, without `/`, `.` and `..`.
fn normal(p: &Path) -> Vec<&OsStr> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// The reader of an image's files: a directory (the host's `/`, or an unpacked or mounted
/// image with `--root`), or an image read from its archive (`--image`, an in-memory tree of
/// what its layers hold). Every fact is read through it, whichever is behind it.
#[derive(Debug, Clone)]
pub struct Root {
    place: Place,
    image: Option<std::sync::Arc<crate::image::tree::Tree>>,
}

/// What the launcher keeps of a file's `stat`: its type and its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    kind: Kind,
    mode: u32,
    size: u64,
}

impl Stat {
    /// An image tree's entry, as `lstat` would give it.
    fn of_node(n: &crate::image::tree::Node) -> Stat {
        use crate::image::tree::Node;
        let (kind, mode, size) = match n {
            Node::Dir { mode } => (Kind::Dir, nix::libc::S_IFDIR | mode, 0),
            Node::File { mode, size, .. } => (Kind::File, nix::libc::S_IFREG | mode, *size),
            Node::Symlink { .. } => (Kind::Link, nix::libc::S_IFLNK | 0o777, 0),
            Node::Special { mode } => (Kind::of_mode(*mode), *mode, 0),
        };
        Stat { kind, mode, size }
    }
    fn of(m: &fs::Metadata) -> Stat {
        use std::os::unix::fs::MetadataExt;
        Stat { kind: Kind::of_mode(m.mode()), mode: m.mode(), size: m.len() }
    }
    /// `st_size`.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// `st_mode`: the type and the permission bits.
    pub fn mode(&self) -> u32 {
        self.mode
    }
    pub fn is_dir(&self) -> bool {
        self.kind == Kind::Dir
    }
    pub fn is_file(&self) -> bool {
        self.kind == Kind::File
    }
    pub fn is_symlink(&self) -> bool {
        self.kind == Kind::Link
    }
    /// What it is, for messages: `a FIFO`, `a directory`, …
    pub fn kind(&self) -> &'static str {
        self.kind.describe()
    }
    fn regular(&self) -> io::Result<()> {
        if self.is_file() {
            return Ok(());
        }
        Err(io::Error::new(io::ErrorKind::InvalidInput, format!("is {}, not a regular file", self.kind())))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, infera_exec_derive::Refuse)]
pub enum RootError {
    #[error("the image root `{}` (--root / INFERA_ROOT) {reason}", dir.display())]
    #[refuse(
        code = "root-missing",
        exit = Missing,
        hint = "give the directory the image is unpacked or mounted at (`podman image mount IMAGE`), or leave --root out to read `/`"
    )]
    Missing { dir: PathBuf, reason: String },
    #[error("the image root `{}` cannot be read: {reason}", dir.display())]
    #[refuse(
        code = "fd-limit",
        exit = Missing,
        hint = "raise the container's limit of open files (`ulimit -n`, `--ulimit nofile=1024:1024`, the runtime's default): the launcher needs a few dozen"
    )]
    NoDescriptors { dir: PathBuf, reason: String },
    #[error("--volume {}={}: `{}` is not a directory of this host", at.display(), dir.display(), dir.display())]
    #[refuse(code = "volume-missing", exit = Missing, hint = "give the local directory that holds what the pod mounts at that path (the model's files)")]
    VolumeMissing { at: PathBuf, dir: PathBuf },
}

impl Root {
    pub fn new(host: impl Into<PathBuf>) -> Self {
        Root { place: Place { host: host.into(), volumes: Vec::new(), image: None }, image: None }
    }

    /// The root of an image read from its archive. Its files' contents are what the reader
    /// kept (the small files facts read); a file not kept cannot be read (`Unsupported`).
    pub fn of_image(tree: crate::image::tree::Tree, identity: crate::image::Identity) -> Self {
        // Its files are on no path of this host: a path made from this one names nothing.
        let host = PathBuf::from("/nonexistent/infera-image-archive");
        let place = Place { host, volumes: Vec::new(), image: Some(identity.into()) };
        Root { place, image: Some(tree.into()) }
    }

    /// This image with container paths read from host directories (`--volume`, the model's
    /// files for a `check --image` in CI).
    pub fn with_image_volumes(mut self, mut volumes: Vec<(PathBuf, PathBuf)>) -> Self {
        volumes.sort_by_key(|(at, _)| std::cmp::Reverse(at.components().count()));
        self.place.volumes = volumes;
        self
    }

    /// The image's tree when `cpath` (resolved) is one of its files, not a volume's.
    fn tree(&self, cpath: &Path) -> Option<&crate::image::tree::Tree> {
        self.image.as_deref().filter(|_| !self.place.in_volume(cpath))
    }

    /// Whether this root is an image read from its archive.
    pub fn is_image(&self) -> bool {
        self.image.is_some()
    }

    /// See [`Place::host_of`].
    pub fn host_of(&self, cpath: &Path) -> Option<PathBuf> {
        self.place.host_of(cpath)
    }

    /// A root with container paths read from other directories (`--volume PATH=DIR`).
    pub fn with_volumes(host: impl Into<PathBuf>, mut volumes: Vec<(PathBuf, PathBuf)>) -> Self {
        volumes.sort_by_key(|(at, _)| std::cmp::Reverse(at.components().count()));
        Root { place: Place { host: host.into(), volumes, image: None }, image: None }
    }

    pub fn place(&self) -> &Place {
        &self.place
    }

    /// The root is a directory this process can read: otherwise every fact would be
    /// "missing" for a reason that is not the image's.
    pub fn check(&self) -> Result<(), RootError> {
        for (at, dir) in &self.place.volumes {
            if !fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
                return Err(RootError::VolumeMissing { at: at.clone(), dir: dir.clone() });
            }
        }
        if self.is_image() {
            return Ok(());
        }
        let dir = &self.place.host;
        match fs::read_dir(dir) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(nix::libc::EMFILE | nix::libc::ENFILE)) => {
                Err(RootError::NoDescriptors { dir: dir.clone(), reason: io_reason(&e) })
            }
            Err(e) => {
                let reason = match fs::metadata(dir) {
                    Ok(m) if !m.is_dir() => "is not a directory".to_string(),
                    _ if e.kind() == io::ErrorKind::NotFound => "does not exist".to_string(),
                    _ => format!("cannot be read: {}", io_reason(&e)),
                };
                Err(RootError::Missing { dir: dir.clone(), reason })
            }
        }
    }

    pub fn is_host_root(&self) -> bool {
        self.image.is_none() && self.place.is_host_root()
    }

    /// Where a container path lives on this host (no symlink resolution).
    pub fn host(&self, cpath: &Path) -> PathBuf {
        self.place.host(cpath)
    }

    /// Resolve every symlink of a container path inside the root. Returns the resolved
    /// container path; fails with `NotFound` when a component is missing and with `ELOOP`
    /// after 40 links.
    pub fn resolve(&self, cpath: &Path) -> io::Result<PathBuf> {
        self.stat(cpath).map(|(p, _)| p)
    }

    /// The resolved container path with the metadata of what it names.
    pub fn stat(&self, cpath: &Path) -> io::Result<(PathBuf, Stat)> {
        self.resolve_stat(cpath).map_err(|e| loop_named(e, cpath))
    }

    fn resolve_stat(&self, cpath: &Path) -> io::Result<(PathBuf, Stat)> {
        if self.is_host_root() {
            let p = fs::canonicalize(cpath)?;
            let m = fs::metadata(&p)?;
            return Ok((p, Stat::of(&m)));
        }
        let p = self.walk(cpath, &mut 0)?;
        let m = self.lstat(&p)?;
        Ok((p, m))
    }

    /// What `cpath` (its directories already resolved) is, a last link not followed.
    fn lstat(&self, cpath: &Path) -> io::Result<Stat> {
        match self.tree(cpath) {
            Some(t) => t.get(cpath).map(Stat::of_node).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound)),
            None => fs::symlink_metadata(self.host(cpath)).map(|m| Stat::of(&m)),
        }
    }

    /// The target of `cpath` (its directories already resolved) when it is a symbolic link.
    fn link_target(&self, cpath: &Path) -> io::Result<Option<PathBuf>> {
        use crate::image::tree::Node;
        match self.tree(cpath) {
            Some(t) => match t.get(cpath) {
                Some(Node::Symlink { target }) => Ok(Some(target.clone())),
                Some(_) => Ok(None),
                None => Err(io::ErrorKind::NotFound.into()),
            },
            None => {
                let host = self.host(cpath);
                if !fs::symlink_metadata(&host)?.file_type().is_symlink() {
                    return Ok(None);
                }
                fs::read_link(&host).map(Some)
            }
        }
    }

    /// The resolution inside the root, a component at a time; `hops` counts the links
    /// followed across the whole resolution, as the kernel does.
    fn walk(&self, cpath: &Path, hops: &mut usize) -> io::Result<PathBuf> {
        let mut done = PathBuf::from("/");
        for c in cpath.components() {
            match c {
                Component::ParentDir => {
                    done.pop();
                }
                Component::Normal(name) => {
                    let next = done.join(name);
                    let Some(link) = self.link_target(&next)? else {
                        done = next;
                        continue;
                    };
                    *hops += 1;
                    if *hops > MAX_SYMLINKS {
                        return Err(io::Error::from_raw_os_error(nix::libc::ELOOP));
                    }
                    // An absolute target replaces `done`: it restarts at the root.
                    let target = done.join(link);
                    done = self.walk(&target, hops)?;
                }
                _ => {}
            }
        }
        Ok(done)
    }

    /// The links a path goes through, each target as a container path (relative targets
    /// joined to their link's directory), up to the kernel's limit: for naming a dangling
    /// or looping link in a message. Empty when `cpath` is not a link.
    pub fn link_chain(&self, cpath: &Path) -> Vec<PathBuf> {
        let mut chain: Vec<PathBuf> = Vec::new();
        let mut cur = cpath.to_path_buf();
        while chain.len() <= MAX_SYMLINKS {
            let (Some(parent), Some(name)) = (cur.parent(), cur.file_name()) else { break };
            let Ok(dir) = self.resolve(parent) else { break };
            let Ok(Some(target)) = self.link_target(&dir.join(name)) else { break };
            let next = if target.is_absolute() { target } else { dir.join(target) };
            let looped = next == cpath || chain.contains(&next);
            chain.push(next.clone());
            if looped {
                break;
            }
            cur = next;
        }
        chain
    }

    /// Resolve and return (container path, host path).
    pub fn locate(&self, cpath: &Path) -> io::Result<(PathBuf, PathBuf)> {
        let c = self.resolve(cpath)?;
        let h = self.host(&c);
        Ok((c, h))
    }

    /// What `cpath` names, links followed. At the host root the kernel follows them
    /// (the resolved path is not needed, so no `realpath`: one readlink per component).
    pub fn metadata(&self, cpath: &Path) -> io::Result<Stat> {
        if self.is_host_root() {
            return fs::metadata(cpath).map(|m| Stat::of(&m)).map_err(|e| loop_named(e, cpath));
        }
        self.stat(cpath).map(|(_, m)| m)
    }

    pub fn is_dir(&self, cpath: &Path) -> bool {
        self.metadata(cpath).is_ok_and(|m| m.is_dir())
    }

    pub fn is_file(&self, cpath: &Path) -> bool {
        self.metadata(cpath).is_ok_and(|m| m.is_file())
    }

    /// Read a small file (bounded, so a multi-GB "version file" cannot exhaust memory).
    pub fn read_small(&self, cpath: &Path) -> io::Result<Vec<u8>> {
        self.read_file(cpath, SMALL_FILE_LIMIT)
    }

    /// Read a file up to `limit` bytes (a larger one is an error, not a truncated read).
    pub fn read_file(&self, cpath: &Path, limit: u64) -> io::Result<Vec<u8>> {
        if self.is_image() {
            let (c, m) = self.stat(cpath)?;
            m.regular()?;
            let Some(t) = self.tree(&c) else { return read_up_to(open_checked(&self.host(&c))?.0, limit) };
            return match t.get(&c) {
                Some(crate::image::tree::Node::File { size, .. }) if *size > limit => Err(too_large(limit)),
                Some(crate::image::tree::Node::File { data: Some(d), size, .. })
                    if d.head().is_some_and(|h| h.len() as u64 == *size) =>
                {
                    Ok(d.head().unwrap_or_default().to_vec())
                }
                _ => Err(not_kept()),
            };
        }
        let (f, _) = self.open_file(cpath)?;
        read_up_to(f, limit)
    }

    /// Open a regular file of the root for streaming, with its size. The type comes from
    /// the resolution (no device or FIFO is opened) and is checked again on the open
    /// descriptor.
    pub fn open_file(&self, cpath: &Path) -> io::Result<(fs::File, u64)> {
        if self.is_host_root() {
            self.metadata(cpath)?.regular()?;
            return open_checked(cpath);
        }
        let (c, m) = self.stat(cpath)?;
        m.regular()?;
        if self.tree(&c).is_some() {
            return Err(not_kept());
        }
        open_checked(&self.host(&c))
    }

    /// A regular file for reading at offsets, with its size: the open file of a directory
    /// root, or what an image's reader kept of it (all of it, or the parts a
    /// [`crate::image::layer::Capture`] chose).
    pub fn open_at(&self, cpath: &Path) -> io::Result<(Box<dyn crate::at::ReadAt>, u64)> {
        if self.is_image() {
            let (c, m) = self.stat(cpath)?;
            if let Some(t) = self.tree(&c) {
                m.regular()?;
                return kept_at(t, &c);
            }
        }
        let (f, size) = self.open_file(cpath)?;
        Ok((Box::new(f), size))
    }

    /// The first `n` bytes of a regular file (fewer when it is shorter), links followed.
    pub fn head(&self, cpath: &Path, n: u64) -> io::Result<Vec<u8>> {
        let (c, m) = self.stat(cpath)?;
        m.regular()?;
        match self.tree(&c) {
            Some(t) => match t.get(&c) {
                Some(crate::image::tree::Node::File { data: Some(d), size, .. })
                    if d.head().is_some_and(|h| h.len() as u64 >= n.min(*size)) =>
                {
                    let h = d.head().unwrap_or_default();
                    Ok(h[..h.len().min(n as usize)].to_vec())
                }
                _ => Err(not_kept()),
            },
            None => {
                let mut buf = Vec::new();
                open_regular(&self.host(&c))?.take(n).read_to_end(&mut buf)?;
                Ok(buf)
            }
        }
    }

    pub fn read_small_string(&self, cpath: &Path) -> io::Result<String> {
        let bytes = self.read_small(cpath)?;
        String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file is not valid UTF-8"))
    }

    /// Call `f` with each name in a directory (resolved inside the root). Missing
    /// directory → no call.
    pub fn each_name(&self, cpath: &Path, mut f: impl FnMut(&OsStr)) {
        if self.is_image() {
            if let Ok(dir) = self.resolve(cpath) {
                match self.tree(&dir) {
                    Some(t) => t.children(&dir).for_each(f),
                    None => drop(each_entry(&self.host(&dir), |name, _| f(name))),
                }
            }
        } else if self.is_host_root() {
            let _ = each_entry(cpath, |name, _| f(name));
        } else if let Ok((_, h)) = self.locate(cpath) {
            let _ = each_entry(&h, |name, _| f(name));
        }
    }

    /// Names in a directory (resolved inside the root). Missing directory → empty.
    pub fn list(&self, cpath: &Path) -> Vec<OsString> {
        let mut names = Vec::new();
        self.each_name(cpath, |n| names.push(n.to_os_string()));
        names
    }
}

/// What an image's reader kept of the regular file `c`, for reading at offsets: the parts a
/// capture chose, or the whole file.
fn kept_at(t: &crate::image::tree::Tree, c: &Path) -> io::Result<(Box<dyn crate::at::ReadAt>, u64)> {
    use crate::image::tree::{Kept, Node};
    match t.get(c) {
        Some(Node::File { data: Some(Kept::Parts(r)), .. }) => Ok((Box::new(r.as_ref().clone()), r.size)),
        Some(Node::File { data: Some(Kept::Head(d)), size, .. }) if d.len() as u64 == *size => {
            let whole = crate::at::Ranges { size: *size, parts: vec![(0, d.clone())], marks: None };
            Ok((Box::new(whole), *size))
        }
        _ => Err(not_kept()),
    }
}

/// A file of an image read from its archive whose contents were not kept.
fn not_kept() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, "its contents are not read from an image archive")
}

/// ELOOP said with the path it was met at (the kernel's text names no path).
fn loop_named(e: io::Error, cpath: &Path) -> io::Error {
    match e.raw_os_error() {
        Some(nix::libc::ELOOP) => {
            io::Error::other(format!("too many levels of symbolic links at `{}`", cpath.display()))
        }
        _ => e,
    }
}

/// Open a file that must be a regular file, without ever blocking: a FIFO where a version
/// file, a manifest or config.json is expected would block `open` until a writer comes, a
/// device could be anything. The type is checked before opening (no open of a device at
/// all) and again on the open descriptor (it may have been swapped), which is opened
/// `O_NONBLOCK | O_NOCTTY`.
pub fn open_regular(path: &Path) -> io::Result<fs::File> {
    regular(&fs::metadata(path)?)?;
    open_checked(path).map(|(f, _)| f)
}

/// The open of [`open_regular`] once the type is known: non-blocking, no controlling
/// terminal, and the descriptor's own type checked.
fn open_checked(path: &Path) -> io::Result<(fs::File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY).open(path)?;
    let m = f.metadata()?;
    regular(&m)?;
    Ok((f, m.len()))
}

fn regular(m: &fs::Metadata) -> io::Result<()> {
    Stat::of(m).regular()
}

/// Each name in `dir` (`.` and `..` left out) with its kind as the directory records it
/// (`d_type`), or from an `lstat` where the filesystem does not record it. Read with a
/// 32 KiB buffer: a site directory of thousands of packages in a few calls (musl's `readdir`
/// reads 2 KiB at a time).
pub fn each_entry(dir: &Path, mut f: impl FnMut(&OsStr, Kind)) -> io::Result<()> {
    use rustix::fs::{FileType, Mode, OFlags};
    use std::os::unix::ffi::OsStrExt;
    let fd = rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 32 << 10];
    let mut entries = rustix::fs::RawDir::new(&fd, &mut buf);
    while let Some(entry) = entries.next() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Unknown => rustix::fs::statat(&fd, entry.file_name(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .map_or(Kind::Other, |st| Kind::of_mode(st.st_mode)),
            t => Kind::of_mode(t.as_raw_mode()),
        };
        f(OsStr::from_bytes(name), kind);
    }
    Ok(())
}

/// What a system file (sysfs, procfs, cgroup) may hold: a value, a table of a few hundred
/// lines (meminfo, a cgroup's stat); `/proc/PID/maps` of an engine is read with [`MAPS_LIMIT`].
pub const SYSTEM_FILE_LIMIT: u64 = 64 << 10;
/// A process's memory map: an engine with torch has thousands of mappings, 100-300 bytes each.
pub const MAPS_LIMIT: u64 = 16 << 20;

/// A system file (sysfs, procfs, cgroup) as text, the one way every reader of such files
/// reads them: opened without blocking (a FIFO is said, never waited on), a regular file
/// only (a link to `/dev/zero` is refused, not read for ever), at most `limit` bytes.
pub fn read_system(path: &Path, limit: u64) -> io::Result<String> {
    let bytes = read_bounded(path, limit)?;
    String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file is not valid UTF-8"))
}

/// A system file that holds one value: its first line, trimmed; None when it cannot be read
/// as [`read_system`] reads, or is empty. (A second line is no part of a value: a file that
/// holds one is never printed as lines of its own.)
pub fn system_value(path: &Path) -> Option<String> {
    first_line(&read_system(path, SYSTEM_FILE_LIMIT).ok()?)
}

/// The first line of `text`, trimmed; None when empty.
pub fn first_line(text: &str) -> Option<String> {
    Some(text.lines().next()?.trim().to_string()).filter(|s| !s.is_empty())
}

/// Read at most `limit` bytes; a longer file is an error, not a truncated read.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    regular(&fs::metadata(path)?)?;
    let (f, _) = open_checked(path)?;
    read_up_to(f, limit)
}

/// [`read_bounded`] of a file whose `lstat` the caller already has (`known`: a regular
/// file, not a link, else the error `read_bounded` gives). Returns the open descriptor's
/// metadata too, for a check of its mode.
pub fn read_known(path: &Path, known: &fs::Metadata, limit: u64) -> io::Result<(Vec<u8>, fs::Metadata)> {
    if !known.is_file() {
        return read_bounded(path, limit).map(|b| (b, known.clone()));
    }
    let (f, _) = open_checked(path)?;
    let m = f.metadata()?;
    Ok((read_up_to(f, limit)?, m))
}

/// The whole file when it has at most `limit` bytes (read to its end whatever `stat` says:
/// /proc files say 0). The buffer is sized from `fstat` first, so a file of the size it
/// says is read in one call.
fn read_up_to(f: fs::File, limit: u64) -> io::Result<Vec<u8>> {
    let size = f.metadata().map_or(0, |m| m.len()).min(limit);
    let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    f.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(too_large(limit));
    }
    Ok(buf)
}

fn too_large(limit: u64) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("file is larger than {limit} bytes; refusing to read it whole"))
}

/// Human text for an io error without the `(os error N)` noise where we can.
pub fn io_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "not found".to_string(),
        // Whose permission: the launcher's uid is what an operator compares with the mode.
        io::ErrorKind::PermissionDenied => {
            format!("permission denied (uid {})", nix::unistd::geteuid().as_raw())
        }
        io::ErrorKind::InvalidInput => e.to_string(),
        _ if e.raw_os_error() == Some(nix::libc::ELOOP) => "too many levels of symbolic links".to_string(),
        _ if e.raw_os_error() == Some(nix::libc::EMFILE) => {
            let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
                .map_or_else(|_| "unknown".to_string(), |(soft, _)| soft.to_string());
            format!("too many open files: this process may have {limit} open at once (RLIMIT_NOFILE)")
        }
        _ if e.raw_os_error() == Some(nix::libc::ENFILE) => "too many open files on this node (ENFILE)".to_string(),
        _ => e.to_string(),
    }
}

/// `python3.12` → Some((3, 12)); also accepts `3.12` and `3.12.3`.
pub fn parse_minor(s: &str) -> Option<(u32, u32)> {
    let s = s.strip_prefix("python").unwrap_or(s);
    let mut it = s.split('.');
    let major: u32 = it.next()?.parse().ok()?;
    let minor_part = it.next()?;
    let digits = &minor_part[..minor_part.bytes().take_while(u8::is_ascii_digit).count()];
    if digits.is_empty() {
        return None;
    }
    // `python3.12` must not match `python3.12-config` as an interpreter; callers pass
    // plain names, so trailing text after the digits (other than `t` for free-threaded)
    // means "not a version".
    let rest = &minor_part[digits.len()..];
    if !(rest.is_empty() || rest == "t") {
        return None;
    }
    Some((major, digits.parse().ok()?))
}

pub fn os_to_string(s: &OsStr) -> String {
    s.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {

    #[test]
    fn stat_says_what_a_file_is_as_its_metadata_does() {
        use std::os::unix::net::UnixListener;
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::write(r.join("file"), "x").unwrap();
        fs::create_dir(r.join("dir")).unwrap();
        std::os::unix::fs::symlink("file", r.join("link")).unwrap();
        nix::unistd::mkfifo(&r.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let _sock = UnixListener::bind(r.join("sock")).unwrap();
        for (name, what) in [
            ("file", "a regular file"),
            ("dir", "a directory"),
            ("link", "a symbolic link"),
            ("fifo", "a FIFO"),
            ("sock", "a socket"),
        ] {
            let m = fs::symlink_metadata(r.join(name)).unwrap();
            let s = Stat::of(&m);
            assert_eq!(s.kind(), what, "{name}");
            assert_eq!(Kind::of(&m).describe(), what, "{name}");
            assert_eq!(
                (s.is_file(), s.is_dir(), s.is_symlink()),
                (m.is_file(), m.is_dir(), m.file_type().is_symlink())
            );
            assert_eq!(s.regular().is_ok(), name == "file");
        }
        let s = Stat::of(&fs::metadata("/dev/null").unwrap());
        assert_eq!(s.kind(), "a character device");
        assert_eq!(s.regular().unwrap_err().to_string(), "is a character device, not a regular file");
        // Through the root: what `stat` keeps of the file a link resolves to.
        let (p, s) = Root::new(r).stat(Path::new("/link")).unwrap();
        assert_eq!(p, Path::new("/file"));
        let m = fs::metadata(r.join("file")).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((s.mode(), s.is_file()), (m.mode(), true));
    }
    use super::*;

    /// A system file is read one way: a FIFO is said (never waited on), a link to
    /// `/dev/zero` refused (never read for ever), a value is its first line.
    #[test]
    fn system_files_are_read_without_blocking_and_bounded() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("read_ahead_kb");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        assert!(read_system(&fifo, SYSTEM_FILE_LIMIT).unwrap_err().to_string().contains("FIFO"));
        assert_eq!(system_value(&fifo), None);
        let zero = d.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(read_system(&zero, SYSTEM_FILE_LIMIT).is_err());
        let value = d.path().join("version");
        std::fs::write(&value, "6.8.5\nerror[forged]: x\n").unwrap();
        assert_eq!(system_value(&value).as_deref(), Some("6.8.5"));
        std::fs::write(&value, vec![b'1'; (SYSTEM_FILE_LIMIT + 1) as usize]).unwrap();
        assert!(read_system(&value, SYSTEM_FILE_LIMIT).is_err(), "past the bound: an error, not a truncated read");
    }
    use std::os::unix::fs::symlink;

    #[test]
    fn absolute_links_stay_in_root() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("usr/bin")).unwrap();
        fs::create_dir_all(r.join("etc/alternatives")).unwrap();
        fs::write(r.join("usr/bin/python3.12"), "").unwrap();
        symlink("/usr/bin/python3.12", r.join("etc/alternatives/python3")).unwrap();
        symlink("/etc/alternatives/python3", r.join("usr/bin/python3")).unwrap();
        let root = Root::new(r);
        assert_eq!(root.resolve(Path::new("/usr/bin/python3")).unwrap(), PathBuf::from("/usr/bin/python3.12"));
    }

    #[test]
    fn dotdot_is_clamped_and_loops_fail() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("a")).unwrap();
        symlink("../../../a", r.join("up")).unwrap();
        symlink("loop", r.join("loop")).unwrap();
        let root = Root::new(r);
        assert_eq!(root.resolve(Path::new("/up")).unwrap(), PathBuf::from("/a"));
        let e = root.resolve(Path::new("/loop")).unwrap_err();
        assert!(e.to_string().contains("too many levels"), "{e}");
    }

    /// 40 links resolve, 41 do not, in the kernel's resolution and in the fallback walk.
    #[test]
    fn links_count_toward_the_kernels_limit() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::write(r.join("target"), "").unwrap();
        symlink("/target", r.join("l41")).unwrap();
        for i in (0..41).rev() {
            symlink(format!("/l{}", i + 1), r.join(format!("l{i}"))).unwrap();
        }
        // As the kernel counts (checked with os.stat on the same chain): from l2, 40 links
        // (l2 … l41) resolve; from l1, 41 do not.
        let root = Root::new(r);
        assert_eq!(root.resolve(Path::new("/l20")).unwrap(), Path::new("/target"));
        assert_eq!(root.resolve(Path::new("/l2")).unwrap(), Path::new("/target"));
        let e = root.resolve(Path::new("/l1")).unwrap_err();
        assert!(e.to_string().contains("too many levels"), "{e}");
        assert_eq!(root.walk(Path::new("/l2"), &mut 0).unwrap(), Path::new("/target"));
        let e = root.walk(Path::new("/l1"), &mut 0).unwrap_err();
        assert!(io_reason(&e).contains("too many levels"), "{e}");
    }

    /// The kernel's resolution in a root: `openat2(RESOLVE_IN_ROOT)` of an `O_PATH`
    /// descriptor, whose `/proc/self/fd` link names the file reached (the walk's oracle).
    fn kernel(root: &Path, cpath: &str) -> io::Result<PathBuf> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        let dir = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())?;
        let rel = cpath.trim_start_matches('/');
        let rel = if rel.is_empty() { "." } else { rel };
        let fd = rustix::fs::openat2(&dir, rel, OFlags::PATH, Mode::empty(), ResolveFlags::IN_ROOT)?;
        let host = fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)))?;
        let canonical = fs::canonicalize(root)?;
        Ok(Path::new("/").join(host.strip_prefix(&canonical).unwrap()))
    }

    /// The walk resolves as the kernel does in a root.
    #[test]
    fn the_walk_resolves_as_the_kernel_does() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("opt/rocm-7.0.0/lib")).unwrap();
        fs::create_dir_all(r.join("opt/rocm-7.0.0/.info")).unwrap();
        fs::create_dir_all(r.join("etc/alternatives")).unwrap();
        fs::write(r.join("opt/rocm-7.0.0/.info/version"), "7.0.0").unwrap();
        symlink("/opt/rocm-7.0.0", r.join("etc/alternatives/rocm")).unwrap();
        symlink("/etc/alternatives/rocm", r.join("opt/rocm")).unwrap();
        symlink("rocm/lib", r.join("opt/rocmlib")).unwrap();
        symlink("../../../../etc", r.join("opt/up")).unwrap();
        symlink("/nowhere", r.join("opt/dangling")).unwrap();
        let root = Root::new(r);
        for p in [
            "/opt/rocm/.info/version",
            "/opt/rocm/lib",
            "/opt/rocm/lib/../.info/version",
            "/opt/rocmlib/../.info",
            "/opt/up/alternatives",
            "/opt/up/../../..",
            "/opt/rocm/missing/deeper",
            "/opt/dangling",
            "/opt/rocm/.info/version/not-a-dir",
            "/opt/rocm/",
            "/",
        ] {
            let kernel = kernel(r, p);
            let walked = root.walk(Path::new(p), &mut 0);
            match (kernel, walked) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{p}"),
                (Err(a), Err(b)) => assert_eq!(a.kind(), b.kind(), "{p}"),
                (a, b) => panic!("{p}: the kernel gave {a:?}, the walk {b:?}"),
            }
        }
        assert_eq!(root.resolve(Path::new("/opt/rocmlib/../.info")).unwrap(), Path::new("/opt/rocm-7.0.0/.info"));
        assert_eq!(root.resolve(Path::new("/opt/up/alternatives")).unwrap(), Path::new("/etc/alternatives"));
    }

    #[test]
    fn volumes_hold_their_paths_and_nothing_beside_them() {
        let r = Root::with_volumes(
            "/srv/img",
            vec![("/models".into(), "/data/m".into()), ("/models/big".into(), "/nvme/big".into())],
        );
        assert!(!r.is_host_root());
        for (c, want) in [
            ("/models", "/data/m"),
            ("/models/kimi/config.json", "/data/m/kimi/config.json"),
            ("/models/big/x", "/nvme/big/x"),
            ("/models/./big", "/nvme/big"),
            ("/modelsx/a", "/srv/img/modelsx/a"),
            ("/usr/lib", "/srv/img/usr/lib"),
        ] {
            assert_eq!(r.host(Path::new(c)), Path::new(want), "{c}");
        }
        assert!(
            Root::with_volumes("/", vec![("/m".into(), "/tmp".into())]).place().host(Path::new("/m"))
                == Path::new("/tmp")
        );
    }

    /// An image read from its archive with a volume: paths under it are the host directory's
    /// (the model's files in CI), the rest the image's; a link in the image into the volume
    /// resolves there.
    #[test]
    fn an_image_with_a_volume_reads_each_path_from_its_own_side() {
        use crate::image::tree::{Changes, Kept, Node, Put, Tree};
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("kimi")).unwrap();
        std::fs::write(d.path().join("kimi/config.json"), b"{}").unwrap();
        let mut t = Tree::default();
        let file =
            |b: &[u8]| Put::Node(Node::File { mode: 0o644, size: b.len() as u64, data: Some(Kept::Head(b.into())) });
        let puts = vec![
            ("/etc/os-release".into(), file(b"ID=ubuntu\n")),
            ("/models/inside".into(), file(b"shadowed")),
            ("/m".into(), Put::Node(Node::Symlink { target: "/models/kimi".into() })),
        ];
        t.apply(Changes { puts, ..Changes::default() }).unwrap();
        let id = crate::image::Identity {
            reference: "x".into(),
            manifest_digest: None,
            config_digest: "sha256:0".into(),
            names: vec![],
            layers: Vec::new(),
        };
        let r = Root::of_image(t, id).with_image_volumes(vec![("/models".into(), d.path().into())]);
        r.check().unwrap();
        assert_eq!(r.read_small(Path::new("/etc/os-release")).unwrap(), b"ID=ubuntu\n");
        assert_eq!(r.read_small(Path::new("/models/kimi/config.json")).unwrap(), b"{}");
        assert_eq!(r.read_small(Path::new("/m/config.json")).unwrap(), b"{}", "a link into the volume");
        assert_eq!(r.list(Path::new("/models")), ["kimi"], "the volume hides the image's own /models");
        assert_eq!(r.head(Path::new("/models/kimi/config.json"), 1).unwrap(), b"{");
        assert_eq!(r.open_at(Path::new("/models/kimi/config.json")).unwrap().1, 2);
        let missing = Root::of_image(
            Tree::default(),
            crate::image::Identity {
                reference: "x".into(),
                manifest_digest: None,
                config_digest: "sha256:0".into(),
                names: vec![],
                layers: Vec::new(),
            },
        )
        .with_image_volumes(vec![("/models".into(), d.path().join("nope"))]);
        assert!(matches!(missing.check(), Err(RootError::VolumeMissing { .. })));
    }

    #[test]
    fn host_paths_join_the_root_and_the_normal_components() {
        for root in ["/", "/srv/img", "/srv/img/", "rel"] {
            let r = Root::new(root);
            for c in ["/usr/lib/x", "/", "", "usr/lib", "/usr//lib/./x/", "/a/../b", "/opt/rocm-7.0.0/.info", "/.x/..y"]
            {
                let mut want = PathBuf::from(root);
                for comp in Path::new(c).components() {
                    if let Component::Normal(n) = comp {
                        want.push(n);
                    }
                }
                assert_eq!(r.host(Path::new(c)), want, "root {root}, path {c}");
            }
        }
    }

    #[test]
    fn bounded_read_refuses_large_files() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("big");
        fs::write(&p, vec![b'x'; 100]).unwrap();
        assert!(read_bounded(&p, 99).is_err());
        assert_eq!(read_bounded(&p, 100).unwrap().len(), 100);
    }

    #[test]
    fn minors() {
        assert_eq!(parse_minor("python3.12"), Some((3, 12)));
        assert_eq!(parse_minor("3.10.13"), Some((3, 10)));
        assert_eq!(parse_minor("python3.13t"), Some((3, 13)));
        assert_eq!(parse_minor("python3.12-config"), None);
        assert_eq!(parse_minor("python3"), None);
    }

    /// Whole files, one read where `stat` tells the size; files whose size it does not tell
    /// (/proc) read to their end; a file over the limit refused, one at it read.
    #[test]
    fn files_are_read_whole_and_bounded() {
        let t = tempfile::tempdir().unwrap();
        for len in [0usize, 1, 4095, 4096, 4097, 100_000] {
            let p = t.path().join(format!("f{len}"));
            let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            fs::write(&p, &body).unwrap();
            assert_eq!(read_bounded(&p, 1 << 20).unwrap(), body);
            let m = fs::symlink_metadata(&p).unwrap();
            assert_eq!(read_known(&p, &m, 1 << 20).unwrap().0, body);
            assert_eq!(read_bounded(&p, len as u64).unwrap(), body, "a file exactly at the limit");
            if len > 0 {
                let e = read_bounded(&p, len as u64 - 1).unwrap_err();
                assert!(e.to_string().contains("larger than"), "{e}");
            }
        }
        // /proc reports size 0 and more bytes than that.
        let status = read_bounded(Path::new("/proc/self/status"), 1 << 20).unwrap();
        assert!(status.starts_with(b"Name:") && status.ends_with(b"\n") && status.len() > 200);
        let m = fs::symlink_metadata("/proc/self/status").unwrap();
        assert_eq!(m.len(), 0);
        // A file whose size changed since it was looked at is read to its end.
        let p = t.path().join("grows");
        fs::write(&p, "short").unwrap();
        let f = fs::File::open(&p).unwrap();
        fs::write(&p, "longer than it was").unwrap();
        assert_eq!(read_up_to(f, 1 << 20).unwrap(), b"longer than it was");
    }
}
