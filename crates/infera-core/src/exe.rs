//! The file the run would exec, as the container sees it: whether it exists, is a regular
//! file with an execute bit, sits on a `noexec` mount, and what its first bytes say (an
//! ELF image, a `#!` script, or neither). Gathered before planning so the dry run refuses
//! exactly what execve would.

use std::path::Path;

use crate::rootfs::{self, Root};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    Elf,
    /// `#!` and the interpreter it names.
    Script(String),
    /// Neither: execve fails with ENOEXEC (`an empty file`, `text without a #! line`, …).
    Unknown(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecFile {
    /// Resolution failed (missing, dangling link, loop).
    Missing {
        reason: String,
    },
    /// Not a regular file: what it is (a directory, a device, a FIFO).
    NotRegular {
        kind: &'static str,
    },
    /// A regular file without any execute bit.
    NotExecutable {
        mode: u32,
    },
    /// On a filesystem mounted `noexec`: execve fails with EACCES.
    NoexecMount,
    /// A `#!` script whose interpreter execve cannot run: what that interpreter is.
    Interpreter {
        interpreter: String,
        file: Box<ExecFile>,
    },
    Ok {
        mode: u32,
        header: Header,
    },
}

/// What is read of an executable: its format's header, or a script's `#!` line.
pub const HEADER: u64 = 256;

/// Inspect `cpath` (a container path) under `root`, and the interpreter a `#!` line names
/// (execve fails with ENOENT when it is missing, EACCES when it cannot be run: the script
/// itself then looks fine). The interpreter is looked up where the kernel will: in the image
/// of an archive (as its pod's), on this host otherwise (with `--root` the run execs the
/// root's file from here, and the kernel reads its `#!` path from this host's root).
pub fn inspect(root: &Root, cpath: &Path) -> ExecFile {
    let file = inspect_one(root, cpath);
    let ExecFile::Ok { header: Header::Script(interpreter), .. } = &file else { return file };
    // The kernel reads a relative interpreter from the working directory: not judged here.
    if !interpreter.starts_with('/') {
        return file;
    }
    let host = Root::new("/");
    match inspect_one(if root.is_image() { root } else { &host }, Path::new(interpreter)) {
        ExecFile::Ok { .. } => file,
        bad => ExecFile::Interpreter { interpreter: interpreter.clone(), file: Box::new(bad) },
    }
}

fn inspect_one(root: &Root, cpath: &Path) -> ExecFile {
    let (resolved, meta) = match root.stat(cpath) {
        Ok(x) => x,
        Err(e) => return ExecFile::Missing { reason: rootfs::io_reason(&e) },
    };
    let mode = meta.mode() & 0o7777;
    if !meta.is_file() {
        return ExecFile::NotRegular { kind: meta.kind() };
    }
    if mode & 0o111 == 0 {
        return ExecFile::NotExecutable { mode };
    }
    if !root.is_image() && noexec(&root.host(&resolved)) {
        return ExecFile::NoexecMount;
    }
    ExecFile::Ok { mode, header: header(root, &resolved) }
}

fn noexec(host: &Path) -> bool {
    use nix::sys::statvfs::{statvfs, FsFlags};
    statvfs(host).is_ok_and(|s| s.flags().contains(FsFlags::ST_NOEXEC))
}

/// The first bytes of a regular file (already known to be one). Read to 256 bytes or the
/// end: a read interrupted (EINTR, which FUSE and NFS can return) or cut short is resumed.
fn header(root: &Root, cpath: &Path) -> Header {
    let Ok(buf) = root.head(cpath, HEADER) else { return Header::Unknown("a file that cannot be read") };
    let b = &buf[..];
    if b.starts_with(b"\x7fELF") {
        return Header::Elf;
    }
    if let Some(rest) = b.strip_prefix(b"#!") {
        let line = rest.split(|c| *c == b'\n').next().unwrap_or(rest);
        let text = String::from_utf8_lossy(line);
        return Header::Script(text.split_whitespace().next().unwrap_or("").to_string());
    }
    Header::Unknown(if b.is_empty() {
        "an empty file"
    } else if b.iter().all(|c| c.is_ascii_graphic() || c.is_ascii_whitespace()) {
        "text without a `#!` line"
    } else {
        "neither an ELF binary nor a `#!` script"
    })
}
