//! A tar stream's own bounds, below the layer reader and the archive index that both read
//! tars: what reading past a bound says (`Bound`), and the bytes the tar crate may read
//! between two entries (`Between`).

use std::cell::Cell;
use std::io::Read;
use std::rc::Rc;

/// The GNU long-name and pax headers before one entry (the tar crate reads them whole).
pub(super) const MAX_HEADERS: u64 = 1 << 20;

/// A bound a layer's bytes passed, as the readers below say it.
#[derive(Debug)]
pub(super) struct Bound(pub(super) String);

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Bound {}

pub(super) fn bound(what: String) -> std::io::Error {
    std::io::Error::other(Bound(what))
}

/// The tar's stream, bounded between entries: the tar crate reads a GNU long name or link
/// or a pax header whole into memory as it looks for the next entry. It may read what is
/// left of the last entry (skipped, not kept) and then at most `MAX_HEADERS`.
pub(super) struct Between<R> {
    inner: R,
    left: Rc<Cell<u64>>,
}

impl<R: Read> Between<R> {
    /// The stream, and the budget to set after each entry ([`after`]).
    pub(super) fn new(inner: R) -> (Between<R>, Rc<Cell<u64>>) {
        let left = Rc::new(Cell::new(MAX_HEADERS));
        (Between { inner, left: left.clone() }, left)
    }
}

/// [`Between`]'s budget once an entry of `size` bytes was returned and `read` of them read.
pub(super) fn after(size: u64, read: u64) -> u64 {
    size.div_ceil(512).saturating_mul(512).saturating_sub(read).saturating_add(MAX_HEADERS)
}

/// An archive on disk is indexed by seeking past each member's data, not reading it: the
/// budget is of bytes read.
impl<R: std::io::Seek> std::io::Seek for Between<R> {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

impl<R: Read> Read for Between<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.left.get();
        if left == 0 {
            return Err(bound(format!("long-name or pax headers over {} MiB before one entry", MAX_HEADERS >> 20)));
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left.set(left - n as u64);
        Ok(n)
    }
}
