//! Random access to a file's bytes, wherever they are: a file of a directory root, or the
//! parts of a file an image archive's reader kept as the layer streamed past ([`Ranges`]).
//! A reader that seeks (the offload-bundle reader) reads both the same way; a part that was
//! not kept is an error, never zeros.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

pub trait ReadAt: Send + Sync {
    /// Read at `at`: fewer bytes than asked at the end of the file or of a kept part.
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize>;

    /// Fill `buf` from `at`, or fail (a short file, a part that was not kept).
    fn read_exact_at(&self, mut buf: &mut [u8], mut at: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, at) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    buf = &mut buf[n..];
                    at += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Where the kept parts' marks are, `(offset, length)`, when what lies between them was
    /// not kept (a reader finds them here instead of searching the bytes); None: search.
    fn marks(&self) -> Option<&[(u64, u32)]> {
        None
    }
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, at)
    }
}

/// What was kept of one file: parts at their offsets, and the marks recorded on the way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ranges {
    /// The file's size.
    pub size: u64,
    /// `(offset, bytes)`; parts may overlap.
    pub parts: Vec<(u64, Arc<[u8]>)>,
    /// The marks recorded (None: the parts are the whole file, to be searched).
    pub marks: Option<Vec<(u64, u32)>>,
}

impl Ranges {
    /// The bytes kept.
    pub fn kept(&self) -> u64 {
        self.parts.iter().map(|(_, b)| b.len() as u64).sum()
    }
}

impl ReadAt for Ranges {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        if at >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let part = self
            .parts
            .iter()
            .filter(|(o, b)| *o <= at && at < o + b.len() as u64)
            .max_by_key(|(o, b)| o + b.len() as u64);
        let Some((o, b)) = part else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("byte {at} of the file was not kept from the image archive"),
            ));
        };
        let from = (at - o) as usize;
        let n = buf.len().min(b.len() - from);
        buf[..n].copy_from_slice(&b[from..from + n]);
        Ok(n)
    }

    fn marks(&self) -> Option<&[(u64, u32)]> {
        self.marks.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_parts_read_and_the_rest_is_an_error() {
        let r = Ranges {
            size: 100,
            parts: vec![(0, b"abcd"[..].into()), (2, b"CDEF"[..].into()), (50, b"xyz"[..].into())],
            marks: Some(vec![(50, 3)]),
        };
        let mut b = [0u8; 6];
        r.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"abcdEF", "across overlapping parts (an image keeps the same bytes in each)");
        assert_eq!(r.read_exact_at(&mut [0u8; 3], 5).unwrap_err().kind(), io::ErrorKind::Unsupported);
        let mut b = [0u8; 8];
        assert_eq!(r.read_at(&mut b, 51).unwrap(), 2);
        assert_eq!(r.read_at(&mut b, 100).unwrap(), 0, "the end of the file");
        assert_eq!(r.kept(), 11);
        assert_eq!(r.marks(), Some(&[(50, 3)][..]));
    }
}
