//! Reading an image's files under a root directory.
//!
//! Paths the launcher reasons about are *container* paths (`/usr/bin/python3`). They are
//! read at `<root>/<path>`, and symlinks are resolved inside the root: an absolute target
//! restarts at the root, `..` stops at it. This is `openat2(RESOLVE_IN_ROOT)` done in
//! userspace so that an unpacked image on a host is read exactly as the container sees it.

use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// Same limit as the kernel's `MAXSYMLINKS`.
const MAX_SYMLINKS: usize = 40;

/// Version files, config.json and manifests are small; a larger file is not read whole.
pub const SMALL_FILE_LIMIT: u64 = 1 << 20;

#[derive(Debug, Clone)]
pub struct Root {
    host: PathBuf,
    /// Resolutions this run already made, by container path: the paths a start asks about
    /// share their directories (`/usr/local/lib/python3.12/dist-packages/…`, `/opt/rocm/…`
    /// through two links), so each directory is looked up once, not once per path under
    /// it. Keys are the paths as asked and the resolved paths (which resolve to
    /// themselves). The image is not expected to change during one start.
    memo: RefCell<Memo>,
    /// The host path buffer of the last resolution, reused by the next (one allocation per
    /// root instead of one per path).
    scratch: RefCell<Vec<u8>>,
    /// The same for the resolved path of a resolution whose caller only wants the metadata.
    scratch_done: RefCell<Vec<u8>>,
}

/// The resolutions of one root, kept without an allocation each: the keys' and resolved
/// paths' bytes one after another in `bytes`, the entries in `entries`, found by the hash of
/// their key. (A key kept as its own `Vec` and its resolution as a `PathBuf` were two
/// allocations per component, a fifth of a start's.)
#[derive(Debug, Clone, Default)]
struct Memo {
    bytes: Vec<u8>,
    entries: Vec<Entry>,
    /// Entry by the FxHash of its key. A key whose hash another key already has is not
    /// kept (it is walked again when asked: slower, never wrong).
    by_hash: FxHashMap<u64, u32>,
}

/// Where a path's bytes are in [`Memo::bytes`].
#[derive(Debug, Clone, Copy)]
struct Span {
    at: u32,
    len: u32,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    key: Span,
    kept: Kept,
}

#[derive(Debug, Clone, Copy)]
enum Kept {
    /// The resolved path, what its `lstat` said, and the links followed to get there (which
    /// count toward the kernel's limit again whenever the entry is used).
    Found(Span, Stat, usize),
    /// The path is missing (`ENOENT`/`ENOTDIR`, kept as the errno).
    Missing(i32),
}

impl Memo {
    fn with_room(paths: usize) -> Memo {
        Memo {
            bytes: Vec::with_capacity(paths * 64),
            entries: Vec::with_capacity(paths),
            by_hash: FxHashMap::with_capacity_and_hasher(paths, Default::default()),
        }
    }

    fn hash(key: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        rustc_hash::FxBuildHasher.hash_one(key)
    }

    fn bytes(&self, s: Span) -> &[u8] {
        &self.bytes[s.at as usize..(s.at + s.len) as usize]
    }

    fn get(&self, key: &[u8]) -> Option<(Kept, &[u8])> {
        let e = self.entries[*self.by_hash.get(&Memo::hash(key))? as usize];
        if self.bytes(e.key) != key {
            return None;
        }
        Some(match e.kept {
            Kept::Found(p, ..) => (e.kept, self.bytes(p)),
            Kept::Missing(_) => (e.kept, &[][..]),
        })
    }

    fn span(&mut self, b: &[u8]) -> Option<Span> {
        let at = u32::try_from(self.bytes.len()).ok()?;
        let len = u32::try_from(b.len()).ok()?;
        at.checked_add(len)?;
        self.bytes.extend_from_slice(b);
        Some(Span { at, len })
    }

    /// Keep `key`'s resolution (`resolved`: its path, for a found one) unless the key, or
    /// another with its hash, is already kept.
    fn insert(&mut self, key: &[u8], resolved: &[u8], kept: impl FnOnce(Span) -> Kept) {
        let h = Memo::hash(key);
        if self.by_hash.contains_key(&h) {
            return;
        }
        let Some(k) = self.span(key) else { return };
        let p = if resolved == key { Some(k) } else { self.span(resolved) };
        let (Some(p), Ok(i)) = (p, u32::try_from(self.entries.len())) else { return };
        self.entries.push(Entry { key: k, kept: kept(p) });
        self.by_hash.insert(h, i);
    }
}

/// What a resolution keeps of the last component's `lstat`: its type and permission bits
/// and its identity. (`fs::Metadata` is 176 bytes; a start remembers ~100 resolutions, and a
/// table of those was 30 KiB of fresh pages, rehashed four times on the way.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    mode: u32,
    dev: u64,
    ino: u64,
}

impl Stat {
    fn of(m: &fs::Metadata) -> Stat {
        use std::os::unix::fs::MetadataExt;
        Stat { mode: m.mode(), dev: m.dev(), ino: m.ino() }
    }
    /// `st_mode`: the type and the permission bits.
    pub fn mode(&self) -> u32 {
        self.mode
    }
    pub fn dev(&self) -> u64 {
        self.dev
    }
    pub fn ino(&self) -> u64 {
        self.ino
    }
    fn is_type(&self, t: nix::libc::mode_t) -> bool {
        self.mode & nix::libc::S_IFMT == t
    }
    pub fn is_dir(&self) -> bool {
        self.is_type(nix::libc::S_IFDIR)
    }
    pub fn is_file(&self) -> bool {
        self.is_type(nix::libc::S_IFREG)
    }
    pub fn is_symlink(&self) -> bool {
        self.is_type(nix::libc::S_IFLNK)
    }
    /// What it is, for messages: `a FIFO`, `a directory`, … (as [`kind`]).
    pub fn kind(&self) -> &'static str {
        use nix::libc;
        match self.mode & libc::S_IFMT {
            libc::S_IFREG => "a regular file",
            libc::S_IFDIR => "a directory",
            libc::S_IFLNK => "a symbolic link",
            libc::S_IFIFO => "a FIFO",
            libc::S_IFSOCK => "a socket",
            libc::S_IFCHR => "a character device",
            libc::S_IFBLK => "a block device",
            _ => "not a file",
        }
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
}

impl Root {
    /// The image's root: a start resolves ~60-110 paths in it (keys as asked and as
    /// resolved), so the memo has room for them up front instead of four rehashes on the way.
    pub fn new(host: impl Into<PathBuf>) -> Self {
        Root::with_room(host, 112)
    }

    /// A root a few paths are resolved in.
    pub fn with_room(host: impl Into<PathBuf>, paths: usize) -> Self {
        Root {
            host: host.into(),
            memo: RefCell::new(Memo::with_room(paths)),
            scratch: RefCell::default(),
            scratch_done: RefCell::default(),
        }
    }

    /// The root is a directory this process can read: otherwise every fact would be
    /// "missing" for a reason that is not the image's.
    pub fn check(&self) -> Result<(), RootError> {
        use nix::fcntl::{open, OFlag};
        // Opened as a directory to list, as the facts will (and closed as the fd drops).
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let opened = open(&self.host, flags, nix::sys::stat::Mode::empty())
            // SAFETY: `open` just returned this descriptor and nothing else owns it.
            .map(|fd| drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }))
            .map_err(io::Error::from);
        match opened {
            Ok(()) => Ok(()),
            Err(e) => {
                let reason = match fs::metadata(&self.host) {
                    Ok(m) if !m.is_dir() => "is not a directory".to_string(),
                    _ if e.kind() == io::ErrorKind::NotFound => "does not exist".to_string(),
                    _ => format!("cannot be read: {}", io_reason(&e)),
                };
                Err(RootError::Missing { dir: self.host.clone(), reason })
            }
        }
    }

    pub fn is_host_root(&self) -> bool {
        self.host == Path::new("/")
    }

    pub fn host_dir(&self) -> &Path {
        &self.host
    }

    /// Where a container path lives on this host (no symlink resolution).
    pub fn host(&self, cpath: &Path) -> PathBuf {
        self.host_with_room(cpath, 0)
    }

    /// [`Root::host`] with room for `extra` more bytes (components pushed after).
    fn host_with_room(&self, cpath: &Path, extra: usize) -> PathBuf {
        self.host_into(cpath, Vec::new(), extra)
    }

    /// [`Root::host_with_room`] written into `p` (cleared first; its room reused).
    fn host_into(&self, cpath: &Path, mut p: Vec<u8>, extra: usize) -> PathBuf {
        let c = cpath.as_os_str().as_bytes();
        p.clear();
        p.reserve(self.host.as_os_str().len() + c.len() + 1 + extra);
        p.extend_from_slice(self.host.as_os_str().as_bytes());
        if normal(c) {
            // The common case, a resolved path (`/usr/lib/x`): the bytes appended as they are.
            if p.last() != Some(&b'/') && !c.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(&c[1..]);
            return PathBuf::from(OsString::from_vec(p));
        }
        let mut p = PathBuf::from(OsString::from_vec(p));
        for c in cpath.components() {
            if let Component::Normal(n) = c {
                p.push(n);
            }
        }
        p
    }

    /// Resolve every symlink of a container path inside the root. Returns the resolved
    /// container path; fails with `NotFound` when a component is missing and with
    /// the kernel's `ELOOP` message after 40 links.
    pub fn resolve(&self, cpath: &Path) -> io::Result<PathBuf> {
        self.stat(cpath).map(|(p, _)| p)
    }

    /// Resolve and return the resolved container path with its metadata (the last
    /// component's, taken from the same walk: no second lookup).
    pub fn stat(&self, cpath: &Path) -> io::Result<(PathBuf, Stat)> {
        let mut hops = 0;
        self.walk(cpath.as_os_str().as_bytes(), &mut hops, true)
    }

    /// The walk behind [`Root::stat`]: one `lstat` per component not yet known, a link's
    /// target resolved by the same walk (so its directories are shared too), `hops`
    /// counting links across the whole resolution as the kernel does.
    /// `keep`: the resolved path is wanted (else it may come back empty, not built).
    fn walk(&self, path: &[u8], hops: &mut usize, keep: bool) -> io::Result<(PathBuf, Stat)> {
        let base = *hops;
        // The longest prefix (at a `/`) already resolved; a missing one makes the path missing.
        let mut start = 0;
        let mut done = PathBuf::new();
        let mut last: Option<Stat> = None;
        {
            let memo = self.memo.borrow();
            let mut end = path.len();
            loop {
                match memo.get(&path[..end]) {
                    Some((Kept::Found(_, m, h), d)) if end == path.len() || m.is_dir() => {
                        *hops += h;
                        if *hops > MAX_SYMLINKS {
                            return Err(too_many_links(&path[..end]));
                        }
                        if end == path.len() {
                            let d = if keep { PathBuf::from(OsStr::from_bytes(d)) } else { PathBuf::new() };
                            return Ok((d, m));
                        }
                        start = end;
                        // Room for the rest of the path: a component pushed is no reallocation.
                        done = self.done_buffer(keep, d.len() + path.len() - end + 1);
                        done.push(OsStr::from_bytes(d));
                        last = Some(m);
                        break;
                    }
                    Some((Kept::Missing(errno), _)) => return Err(io::Error::from_raw_os_error(errno)),
                    _ => {}
                }
                match path[..end].iter().rposition(|&b| b == b'/') {
                    Some(i) if i > 0 => end = i,
                    _ => break,
                }
            }
        }
        if start == 0 {
            done = self.done_buffer(keep, path.len() + 1);
            done.push("/");
        }
        let scratch = std::mem::take(&mut *self.scratch.borrow_mut());
        let mut host = self.host_into(&done, scratch, path.len() - start + 1);
        let mut pos = start;
        for comp in path[start..].split(|&b| b == b'/') {
            let end = pos + comp.len();
            pos = end + 1;
            match comp {
                b"" | b"." => continue,
                b".." => {
                    if done.pop() {
                        host.pop();
                    }
                    last = None;
                    continue;
                }
                _ => {}
            }
            let name = OsStr::from_bytes(comp);
            host.push(name);
            let meta = match fs::symlink_metadata(&host) {
                Ok(m) => Stat::of(&m),
                Err(e) => {
                    *self.scratch.borrow_mut() = host.into_os_string().into_vec();
                    if !keep {
                        *self.scratch_done.borrow_mut() = done.into_os_string().into_vec();
                    }
                    return Err(self.remember_missing(path, end, e));
                }
            };
            if meta.is_symlink() {
                *hops += 1;
                if *hops > MAX_SYMLINKS {
                    return Err(too_many_links(done.join(name).as_os_str().as_bytes()));
                }
                let target = fs::read_link(&host)?;
                let full = if target.is_absolute() { target } else { done.join(target) };
                let (d, m) = self.walk(full.as_os_str().as_bytes(), hops, true)?;
                done = d;
                host = self.host_into(&done, host.into_os_string().into_vec(), path.len().saturating_sub(pos) + 1);
                last = Some(m);
            } else {
                done.push(name);
                self.remember(done.as_os_str().as_bytes(), &done, meta, 0);
                last = Some(meta);
            }
            // The path as asked up to here resolves to `done` (a link's target included).
            if let Some(m) = &last {
                let asked = &path[..end];
                if asked != done.as_os_str().as_bytes() {
                    self.remember(asked, &done, *m, *hops - base);
                }
            }
        }
        let meta = match last {
            Some(m) => m,
            None => Stat::of(&fs::metadata(&host)?),
        };
        *self.scratch.borrow_mut() = host.into_os_string().into_vec();
        Ok((done, meta))
    }

    /// An empty path buffer with `room`: the reused one when the caller will not keep it.
    fn done_buffer(&self, keep: bool, room: usize) -> PathBuf {
        let mut b = if keep { Vec::new() } else { std::mem::take(&mut *self.scratch_done.borrow_mut()) };
        b.clear();
        b.reserve(room);
        PathBuf::from(OsString::from_vec(b))
    }

    fn remember(&self, key: &[u8], done: &Path, meta: Stat, hops: usize) {
        self.memo.borrow_mut().insert(key, done.as_os_str().as_bytes(), |p| Kept::Found(p, meta, hops));
    }

    /// A missing path is remembered as missing (it is asked again: a search path's
    /// directories, `$HOME`); any other error is returned as it is, not remembered.
    /// `end` is where the component that is missing ends: everything under that prefix
    /// is missing too (`/usr/local/sbin` for each name looked up in it).
    fn remember_missing(&self, path: &[u8], end: usize, e: io::Error) -> io::Error {
        if let Some(errno @ (nix::libc::ENOENT | nix::libc::ENOTDIR)) = e.raw_os_error() {
            let mut memo = self.memo.borrow_mut();
            memo.insert(&path[..end], &[], |_| Kept::Missing(errno));
            if end < path.len() {
                memo.insert(path, &[], |_| Kept::Missing(errno));
            }
        }
        e
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
            let Ok(target) = fs::read_link(self.host(&dir).join(name)) else { break };
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

    pub fn metadata(&self, cpath: &Path) -> io::Result<Stat> {
        let mut hops = 0;
        let (done, m) = self.walk(cpath.as_os_str().as_bytes(), &mut hops, false)?;
        if done.capacity() > 0 {
            *self.scratch_done.borrow_mut() = done.into_os_string().into_vec();
        }
        Ok(m)
    }

    pub fn is_dir(&self, cpath: &Path) -> bool {
        self.metadata(cpath).map(|m| m.is_dir()).unwrap_or(false)
    }

    pub fn is_file(&self, cpath: &Path) -> bool {
        self.metadata(cpath).map(|m| m.is_file()).unwrap_or(false)
    }

    /// Read a small file (bounded, so a multi-GB "version file" cannot exhaust memory).
    pub fn read_small(&self, cpath: &Path) -> io::Result<Vec<u8>> {
        self.read_file(cpath, SMALL_FILE_LIMIT)
    }

    /// Read a file up to `limit` bytes (a larger one is an error, not a truncated read).
    pub fn read_file(&self, cpath: &Path, limit: u64) -> io::Result<Vec<u8>> {
        let (c, m) = self.stat(cpath)?;
        m.regular()?;
        let (f, size) = open_checked(&self.host(&c))?;
        read_up_to(f, size, limit)
    }

    /// Open a regular file of the root for streaming (no size bound: the reader bounds memory).
    /// The type comes from the resolution's own `lstat` (no device or FIFO is opened) and
    /// is checked again on the open descriptor.
    /// Returns the file with its size as the open descriptor's `fstat` gave it.
    pub fn open_file(&self, cpath: &Path) -> io::Result<(fs::File, u64)> {
        let (c, m) = self.stat(cpath)?;
        m.regular()?;
        open_checked(&self.host(&c))
    }

    pub fn read_small_string(&self, cpath: &Path) -> io::Result<String> {
        let bytes = self.read_small(cpath)?;
        String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file is not valid UTF-8"))
    }

    /// Call `f` with each name in a directory (resolved inside the root), without collecting
    /// them: a site-packages of thousands of entries costs one pass and no allocation per
    /// entry. Missing directory → no call.
    pub fn each_name(&self, cpath: &Path, mut f: impl FnMut(&OsStr)) {
        if let Ok((_, h)) = self.locate(cpath) {
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

/// The error after the kernel's 40 links, naming where the walk was.
fn too_many_links(at: &[u8]) -> io::Error {
    io::Error::other(format!("too many levels of symbolic links at `{}`", Path::new(OsStr::from_bytes(at)).display()))
}

/// An absolute path with no empty, `.` or `..` component and no trailing `/`: its
/// components are its bytes between slashes.
fn normal(c: &[u8]) -> bool {
    c.first() == Some(&b'/')
        && c.len() > 1
        && c[1..].split(|&b| b == b'/').all(|n| !n.is_empty() && n != b"." && n != b"..")
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
    if m.is_file() {
        return Ok(());
    }
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("is {}, not a regular file", kind(m.file_type()))))
}

/// What a file is, for messages: `a FIFO`, `a directory`, …
pub fn kind(t: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a file"
    }
}

/// Each name in `dir` (not `.` or `..`) with its type as the directory records it
/// (`d_type`; `DT_UNKNOWN` where the filesystem does not).
pub fn each_entry(dir: &Path, mut f: impl FnMut(&OsStr, u8)) -> io::Result<()> {
    if listings::each(dir, &mut f) {
        return Ok(());
    }
    each_entry_at(dir, |_, name, t| {
        f(OsStr::from_bytes(name.to_bytes()), t);
        Ok::<(), std::convert::Infallible>(())
    })
    .map(|_| ())
}

/// [`each_entry`] with the directory's descriptor, for lookups relative to it (one path
/// component for the kernel to walk, and no path built per name); the first error `f`
/// returns stops the listing (and is the inner result). The names are read by `getdents64`
/// into one buffer for the process: no `stat` of the directory and no allocation per
/// directory, as `opendir` makes.
pub fn each_entry_at<E>(
    dir: &Path,
    f: impl FnMut(std::os::fd::BorrowedFd<'_>, &std::ffi::CStr, u8) -> Result<(), E>,
) -> io::Result<Result<(), E>> {
    use nix::fcntl::{open, OFlag};
    use std::os::fd::{FromRawFd, OwnedFd};
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let raw = open(dir, flags, nix::sys::stat::Mode::empty())?;
    // SAFETY: `open` just returned this descriptor and nothing else owns it.
    each_entry_of(unsafe { OwnedFd::from_raw_fd(raw) }, f)
}

/// The directory `name` of the open directory `fd`, opened for [`each_entry_of`]; not
/// through a link (`ELOOP`).
pub fn open_subdir(fd: std::os::fd::BorrowedFd<'_>, name: &std::ffi::CStr) -> io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{openat, OFlag};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW;
    let raw = openat(Some(fd.as_raw_fd()), name, flags, nix::sys::stat::Mode::empty())?;
    // SAFETY: `openat` just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// [`each_entry_at`] of a directory already open (closed when done).
pub fn each_entry_of<E>(
    fd: std::os::fd::OwnedFd,
    mut f: impl FnMut(std::os::fd::BorrowedFd<'_>, &std::ffi::CStr, u8) -> Result<(), E>,
) -> io::Result<Result<(), E>> {
    use nix::libc;
    use std::os::fd::{AsFd, AsRawFd};
    let raw = fd.as_raw_fd();
    let mut held = dirents::take();
    let buf = held.buf();
    loop {
        // SAFETY: the kernel writes at most `DIRENT_BYTES` bytes of `linux_dirent64` records
        // into `buf` (that long, ours alone while `held` lives) and returns how many; only
        // those bytes are read below.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, raw, buf, dirents::DIRENT_BYTES) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(Ok(()));
        }
        // SAFETY: the first `n` bytes were written by the kernel (see above).
        let bytes = unsafe { std::slice::from_raw_parts(buf.cast_const(), n as usize) };
        let mut at = 0;
        // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name NUL-terminated.
        while at + 19 < bytes.len() {
            let reclen = u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
            if reclen == 0 || at + reclen > bytes.len() {
                break;
            }
            let t = bytes[at + 18];
            let Ok(name) = std::ffi::CStr::from_bytes_until_nul(&bytes[at + 19..at + reclen]) else {
                break;
            };
            at += reclen;
            let b = name.to_bytes();
            if b != b"." && b != b".." {
                if let Err(e) = f(fd.as_fd(), name, t) {
                    return Ok(Err(e));
                }
            }
        }
    }
}

/// A per-thread store that exists while this guard lives (one start), empty when it begins.
pub struct Scoped<T: 'static>(&'static std::thread::LocalKey<RefCell<Option<T>>>);

impl<T: Default> Scoped<T> {
    pub fn start(key: &'static std::thread::LocalKey<RefCell<Option<T>>>) -> Scoped<T> {
        key.with(|k| *k.borrow_mut() = Some(T::default()));
        Scoped(key)
    }
}

impl<T> Drop for Scoped<T> {
    fn drop(&mut self) {
        self.0.with(|k| *k.borrow_mut() = None);
    }
}

/// The directories the walk of a tree listed, kept while a [`Listings`] guard lives (one
/// start): the tree's facts read the same directories right after (its modules, programs and
/// capability directories), and a kept listing answers them without reading the directory
/// again or an `lstat` per name. Only listings read whole are kept.
pub mod listings {
    use std::cell::RefCell;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    /// By the directory's path: each entry as its type byte, its name, a NUL.
    type Kept = rustc_hash::FxHashMap<Box<[u8]>, Vec<u8>>;

    thread_local! {
        static KEPT: RefCell<Option<Kept>> = const { RefCell::new(None) };
    }

    /// Keep listings until this is dropped.
    pub struct Listings {
        _kept: super::Scoped<Kept>,
    }

    impl Listings {
        pub fn start() -> Listings {
            Listings { _kept: super::Scoped::start(&KEPT) }
        }
    }

    /// Are listings being kept?
    pub fn wanted() -> bool {
        KEPT.with(|k| k.borrow().is_some())
    }

    /// Add one entry to a listing being built for [`keep`].
    pub fn record(into: &mut Vec<u8>, name: &[u8], t: u8) {
        into.push(t);
        into.extend_from_slice(name);
        into.push(0);
    }

    /// Keep `dir`'s whole listing (built with [`record`]).
    pub fn keep(dir: &Path, records: Vec<u8>) {
        KEPT.with(|k| {
            if let Some(k) = k.borrow_mut().as_mut() {
                k.insert(dir.as_os_str().as_bytes().into(), records);
            }
        });
    }

    fn entries(records: &[u8]) -> impl Iterator<Item = (&[u8], u8)> {
        records.split_inclusive(|&b| b == 0).filter_map(|r| {
            let (&t, rest) = r.split_first()?;
            Some((rest.strip_suffix(&[0]).unwrap_or(rest), t))
        })
    }

    /// `f` with each kept entry of `dir`; false when `dir`'s listing is not kept.
    pub fn each(dir: &Path, f: &mut impl FnMut(&OsStr, u8)) -> bool {
        KEPT.with(|k| {
            let k = k.borrow();
            let Some(records) = k.as_ref().and_then(|k| k.get(dir.as_os_str().as_bytes())) else { return false };
            for (name, t) in entries(records) {
                f(OsStr::from_bytes(name), t);
            }
            true
        })
    }

    /// What a kept listing of `p`'s directory says of `p`: None when that listing is not
    /// kept; Some(None) when `p` is not in it; Some(Some(d_type)) when it is.
    pub fn type_of(p: &Path) -> Option<Option<u8>> {
        let (dir, name) = (p.parent()?, p.file_name()?.as_bytes());
        KEPT.with(|k| {
            let k = k.borrow();
            let records = k.as_ref()?.get(dir.as_os_str().as_bytes())?;
            let t = entries(records).find(|(n, _)| *n == name).map(|(_, t)| t);
            Some(t)
        })
    }
}

/// The buffer directory records are read into. One for the process, outside the stack: a
/// 16 KiB buffer in the frame of every listing pushed the calls below it onto fresh stack
/// pages (a start reached 60 KiB of stack, a page fault for each 4 KiB); this one is touched
/// only as far as records are written. A listing made while another is running (a callback
/// that lists, another thread) gets one of its own on the heap.
mod dirents {
    use std::cell::UnsafeCell;
    use std::mem::MaybeUninit;
    use std::sync::atomic::{AtomicBool, Ordering};

    pub const DIRENT_BYTES: usize = 16 * 1024;
    type Buf = MaybeUninit<[u64; DIRENT_BYTES / 8]>;

    struct Shared {
        busy: AtomicBool,
        buf: UnsafeCell<Buf>,
    }
    // SAFETY: `buf` is only reached through `take`, which hands it to one holder at a time
    // (the `busy` flag, set by an atomic swap and cleared when the holder drops).
    unsafe impl Sync for Shared {}

    static SHARED: Shared = Shared { busy: AtomicBool::new(false), buf: UnsafeCell::new(MaybeUninit::uninit()) };

    pub enum Held {
        Shared,
        Own(Box<Buf>),
    }

    pub fn take() -> Held {
        if SHARED.busy.swap(true, Ordering::Acquire) {
            Held::Own(Box::new(MaybeUninit::uninit()))
        } else {
            Held::Shared
        }
    }

    impl Held {
        /// `DIRENT_BYTES` bytes, this holder's until it drops.
        pub fn buf(&mut self) -> *mut u8 {
            match self {
                Held::Shared => SHARED.buf.get().cast(),
                Held::Own(b) => b.as_mut_ptr().cast(),
            }
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            if let Held::Shared = self {
                SHARED.busy.store(false, Ordering::Release);
            }
        }
    }
}

/// Read at most `limit` bytes; a longer file is an error, not a truncated read.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    regular(&fs::metadata(path)?)?;
    let (f, size) = open_checked(path)?;
    read_up_to(f, size, limit)
}

/// `size` is the one the open's check read: one allocation for the file and one read past
/// its end, not a doubling per read.
/// [`read_bounded`] of a file whose `lstat` the caller already has (`known`: a regular
/// file, not a link, else the error `read_bounded` gives): no second lookup before the
/// open. Returns the open descriptor's metadata too, for a check of its mode.
pub fn read_known(path: &Path, known: &fs::Metadata, limit: u64) -> io::Result<(Vec<u8>, fs::Metadata)> {
    if !known.is_file() {
        return read_bounded(path, limit).map(|b| (b, known.clone()));
    }
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY).open(path)?;
    let m = f.metadata()?;
    regular(&m)?;
    Ok((read_up_to(f, m.len(), limit)?, m))
}

fn read_up_to(f: fs::File, size: u64, limit: u64) -> io::Result<Vec<u8>> {
    let buf = read_sized(&f, size, limit)?;
    if buf.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("file is larger than {limit} bytes; refusing to read it whole"),
        ));
    }
    Ok(buf)
}

/// Up to `limit + 1` bytes of an open file whose `fstat` gave `size` (more than `limit`
/// bytes back: the file is larger than that). One read asks for a byte more than `size`: a
/// regular file that gives exactly that size has ended there (a short read of a regular
/// file is its end), so no second read to find the end. Any other count (a file whose size
/// `stat` does not tell, as in /proc or /sys, or one that changed) is read on to its end.
pub fn read_sized(f: &fs::File, size: u64, limit: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(size.min(limit) as usize + 1);
    if size > 0 && size <= limit {
        let n = loop {
            let spare = buf.spare_capacity_mut();
            use std::os::fd::AsRawFd;
            // SAFETY: `read` writes at most `spare.len()` bytes into the vector's unused
            // capacity, which is allocated and ours; `n` of them are then initialized.
            let n = unsafe { nix::libc::read(f.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        // SAFETY: the first `n` bytes of the capacity were written by `read` above.
        unsafe { buf.set_len(n) };
        if n as u64 == size {
            return Ok(buf);
        }
    }
    let read = buf.len() as u64;
    f.take(limit + 1 - read).read_to_end(&mut buf)?;
    Ok(buf)
}

/// `a.join(b)` in one allocation of the joined length: `Path::join` copies `a` at its exact
/// length, then reallocates the copy to add `b` (a `malloc` and a `realloc` per path, and a
/// start builds well over a hundred).
pub fn join(a: &Path, b: impl AsRef<Path>) -> PathBuf {
    let b = b.as_ref();
    let mut p = PathBuf::with_capacity(a.as_os_str().len() + 1 + b.as_os_str().len());
    p.push(a);
    p.push(b);
    p
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

    /// A listing made inside another's callback, and listings on other threads at the same
    /// time, each get every name (the shared buffer is one holder's at a time).
    #[test]
    fn listings_inside_listings_and_on_threads() {
        let t = tempfile::tempdir().unwrap();
        let names = |d: &Path| {
            let mut v = Vec::new();
            each_entry(d, |n, _| v.push(n.to_string_lossy().into_owned())).unwrap();
            v.sort();
            v
        };
        let mut want = Vec::new();
        for i in 0..300 {
            let d = t.path().join(format!("dir-with-a-long-name-{i:04}"));
            fs::create_dir(&d).unwrap();
            fs::write(d.join(format!("f{i}")), "").unwrap();
            want.push(format!("dir-with-a-long-name-{i:04}"));
        }
        // 300 names of ~40 bytes: more than one read of the buffer.
        let mut seen = Vec::new();
        each_entry(t.path(), |n, _| {
            let inner = names(&t.path().join(n));
            let i: u32 = n.to_string_lossy()["dir-with-a-long-name-".len()..].parse().unwrap();
            assert_eq!(inner, [format!("f{i}")]);
            seen.push(n.to_string_lossy().into_owned());
        })
        .unwrap();
        seen.sort();
        assert_eq!(seen, want);
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..4).map(|_| s.spawn(|| (0..20).map(|_| names(t.path())).collect::<Vec<_>>())).collect();
            for h in hs {
                for got in h.join().unwrap() {
                    assert_eq!(got, want);
                }
            }
        });
        // And the buffer is free again afterwards.
        assert!(matches!(dirents::take(), dirents::Held::Shared));
    }

    /// Two keys with one hash: the second is never answered with the first's resolution
    /// (found or missing); it is walked.
    #[test]
    fn a_key_whose_hash_is_taken_is_walked_not_mixed_up() {
        use std::os::unix::fs::MetadataExt;
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in ["a", "b"] {
            fs::create_dir(r.join(d)).unwrap();
            fs::write(r.join(d).join("file"), d).unwrap();
        }
        let ino = |p: &str| fs::metadata(r.join(p)).unwrap().ino();
        let root = Root::new(r);
        let collide = |with: &[u8], key: &[u8]| {
            let mut m = root.memo.borrow_mut();
            let i = m.by_hash[&Memo::hash(with)];
            m.by_hash.insert(Memo::hash(key), i);
        };
        assert_eq!(root.stat(Path::new("/a/file")).unwrap().1.ino(), ino("a/file"));
        collide(b"/a/file", b"/b/file");
        for _ in 0..2 {
            let (p, s) = root.stat(Path::new("/b/file")).unwrap();
            assert_eq!((p.as_path(), s.ino()), (Path::new("/b/file"), ino("b/file")));
            assert_eq!(root.metadata(Path::new("/b/file")).unwrap().ino(), ino("b/file"));
        }
        assert!(root.stat(Path::new("/nope")).is_err());
        collide(b"/nope", b"/a/file");
        assert_eq!(root.metadata(Path::new("/a/file")).unwrap().ino(), ino("a/file"));
        assert_eq!(root.resolve(Path::new("/a/file")).unwrap(), Path::new("/a/file"));
    }

    #[test]
    fn kept_listings_answer_while_kept_and_only_for_their_directory() {
        use nix::libc::{DT_DIR, DT_LNK, DT_REG};
        let names = |d: &str| {
            let mut v = Vec::new();
            each_entry(Path::new(d), |n, t| v.push((n.to_string_lossy().into_owned(), t))).unwrap_or(());
            v
        };
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("d");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("on-disk"), "").unwrap();
        let d = dir.to_str().unwrap();
        assert_eq!(listings::type_of(&dir.join("a")), None, "nothing kept without a guard");
        {
            let _kept = listings::Listings::start();
            let mut r = Vec::new();
            for (n, ty) in [(&b"a"[..], DT_DIR), (b"b.py", DT_REG), (b"l \xff", DT_LNK)] {
                listings::record(&mut r, n, ty);
            }
            listings::keep(&dir, r);
            // The kept listing, not the directory's.
            assert_eq!(names(d), [("a".into(), DT_DIR), ("b.py".into(), DT_REG), ("l \u{fffd}".into(), DT_LNK)]);
            assert_eq!(listings::type_of(&dir.join("a")), Some(Some(DT_DIR)));
            assert_eq!(listings::type_of(&dir.join(OsStr::from_bytes(b"l \xff"))), Some(Some(DT_LNK)));
            assert_eq!(listings::type_of(&dir.join("on-disk")), Some(None));
            assert_eq!(listings::type_of(&dir.join("a/deeper")), None, "another directory");
            assert_eq!(listings::type_of(&t.path().join("d")), None);
        }
        assert_eq!(names(d), [("on-disk".into(), DT_REG)], "the guard dropped: the directory again");
        assert_eq!(listings::type_of(&dir.join("a")), None);
    }

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
            assert_eq!(kind(m.file_type()), what, "{name}");
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
        assert_eq!((s.mode(), s.dev(), s.ino()), (m.mode(), m.dev(), m.ino()));
    }
    use super::*;
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

    #[test]
    fn remembered_resolutions_give_what_a_fresh_walk_gives() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("opt/rocm-7.0.0/lib")).unwrap();
        fs::create_dir_all(r.join("opt/rocm-7.0.0/.info")).unwrap();
        fs::create_dir_all(r.join("etc/alternatives")).unwrap();
        fs::write(r.join("opt/rocm-7.0.0/.info/version"), "7.0.0").unwrap();
        symlink("/opt/rocm-7.0.0", r.join("etc/alternatives/rocm")).unwrap();
        symlink("/etc/alternatives/rocm", r.join("opt/rocm")).unwrap();
        symlink("rocm/lib", r.join("opt/rocmlib")).unwrap();
        let asked = [
            "/opt/rocm/.info/version",
            "/opt/rocm/lib",
            "/opt/rocm/lib/../.info/version",
            "/opt/rocmlib/../.info",
            "/opt/rocm/missing/deeper",
            "/opt/rocm/missing",
            "/opt/rocm/.info/version/not-a-dir",
            "/opt/rocm/",
        ];
        let shared = Root::new(r);
        for p in asked.iter().chain(asked.iter()) {
            let fresh = Root::new(r).stat(Path::new(p));
            let again = shared.stat(Path::new(p));
            match (fresh, again) {
                (Ok((a, ma)), Ok((b, mb))) => {
                    assert_eq!(a, b, "{p}");
                    assert_eq!(ma.ino(), mb.ino(), "{p}");
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{p}"),
                (a, b) => panic!("{p}: a fresh walk gave {a:?}, the remembered one {b:?}"),
            }
        }
        assert_eq!(
            shared.resolve(Path::new("/opt/rocm/lib/../.info/version")).unwrap(),
            Path::new("/opt/rocm-7.0.0/.info/version")
        );
        assert_eq!(shared.resolve(Path::new("/opt/rocmlib/../.info")).unwrap(), Path::new("/opt/rocm-7.0.0/.info"));
        assert_eq!(shared.stat(Path::new("/opt/rocm/missing/deeper")).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    /// Links already resolved count toward the kernel's 40 again: a chain of 41 is refused
    /// even when most of it was resolved before, and a chain of 40 is not.
    #[test]
    fn remembered_links_still_count_toward_the_limit() {
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
        let e = Root::new(r).resolve(Path::new("/l1")).unwrap_err();
        assert!(e.to_string().contains("too many levels"), "{e}");
        assert_eq!(Root::new(r).resolve(Path::new("/l2")).unwrap(), Path::new("/target"));
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
        assert_eq!(read_up_to(f, 5, 1 << 20).unwrap(), b"longer than it was");
        let f = fs::File::open(&p).unwrap();
        assert_eq!(read_up_to(f, 40, 1 << 20).unwrap(), b"longer than it was");
    }

    /// `join` is `Path::join` (one allocation instead of two).
    #[test]
    fn join_is_path_join() {
        for (a, b) in
            [("/usr", "lib"), ("/usr/", "lib"), ("", "lib"), ("/usr", "/etc"), ("rel", "a/b"), ("/", ""), ("/a", "")]
        {
            let j = join(Path::new(a), b);
            assert_eq!(j, Path::new(a).join(b), "{a} + {b}");
            assert!(j.capacity() >= j.as_os_str().len());
        }
    }
}
