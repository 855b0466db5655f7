//! What a file is — a regular file, a directory, a link, a FIFO, … — from its mode or a
//! directory entry's type, and how a message says it.

use std::fs;

/// What a file is, from its mode (or a directory entry's `d_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Link,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    Other,
}

impl Kind {
    pub fn of_mode(mode: u32) -> Kind {
        match mode & nix::libc::S_IFMT {
            nix::libc::S_IFREG => Kind::File,
            nix::libc::S_IFDIR => Kind::Dir,
            nix::libc::S_IFLNK => Kind::Link,
            nix::libc::S_IFIFO => Kind::Fifo,
            nix::libc::S_IFSOCK => Kind::Socket,
            nix::libc::S_IFCHR => Kind::CharDevice,
            nix::libc::S_IFBLK => Kind::BlockDevice,
            _ => Kind::Other,
        }
    }
    pub fn of(m: &fs::Metadata) -> Kind {
        use std::os::unix::fs::MetadataExt;
        Kind::of_mode(m.mode())
    }
    /// For messages: `a FIFO`, `a directory`, …
    pub fn describe(self) -> &'static str {
        match self {
            Kind::File => "a regular file",
            Kind::Dir => "a directory",
            Kind::Link => "a symbolic link",
            Kind::Fifo => "a FIFO",
            Kind::Socket => "a socket",
            Kind::CharDevice => "a character device",
            Kind::BlockDevice => "a block device",
            Kind::Other => "not a file",
        }
    }
}
