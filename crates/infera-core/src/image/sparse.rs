//! PAX sparse members (GNU tar's formats 0.0, 0.1 and 1.0) read as the regular files they are:
//! the real name and size from the member's pax records, the map of its data blocks from the
//! records (0.0: `GNU.sparse.offset`/`numbytes` pairs; 0.1: `GNU.sparse.map`) or from the start
//! of its data (1.0: decimal numbers, one per line, padded to 512 bytes), and the holes read as
//! zeros. The old GNU format (type `S`) is expanded by the tar crate itself.
//! Formats: GNU tar's manual, "Sparse Formats" (E.0.2, E.0.3).

use std::io::{self, Read};
use std::path::PathBuf;

/// The most data blocks a sparse member may list: each is a read, and a real sparse file
/// (a core dump, a disk image) has thousands at most.
const MAX_BLOCKS: usize = 1 << 16;
/// The longest 1.0 map: that many blocks in decimal.
const MAX_MAP: u64 = (MAX_BLOCKS as u64) * 2 * 21 + 512;

/// A PAX sparse member's real name (None: the member's own), real size and data blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sparse {
    pub name: Option<PathBuf>,
    pub size: u64,
    /// `(offset, length)` of each data block, in order; None: the map is at the data's start.
    pub map: Option<Vec<(u64, u64)>>,
}

/// The member's sparse description, when its pax records make it a sparse file; Err(why)
/// when they do but cannot be read.
pub fn of_pax<'a>(records: impl Iterator<Item = (&'a str, &'a [u8])>) -> Result<Option<Sparse>, String> {
    let (mut name, mut size, mut major, mut map, mut pairs) = (None, None, None, None, Vec::new());
    let mut pending_offset = None;
    for (key, value) in records {
        let text = std::str::from_utf8(value).map_err(|_| format!("`{key}` is not UTF-8"))?;
        let num = || text.trim().parse::<u64>().map_err(|_| format!("`{key}={text}` is not a number"));
        match key {
            "GNU.sparse.name" => name = Some(PathBuf::from(text)),
            "GNU.sparse.realsize" | "GNU.sparse.size" => size = Some(num()?),
            "GNU.sparse.major" => major = Some(num()?),
            "GNU.sparse.map" => map = Some(numbers(text.split(','), key)?),
            "GNU.sparse.offset" => pending_offset = Some(num()?),
            "GNU.sparse.numbytes" => {
                let off = pending_offset.take().ok_or("`GNU.sparse.numbytes` without its offset")?;
                pairs.push(off);
                pairs.push(num()?);
            }
            _ => {}
        }
    }
    let Some(size) = size else { return Ok(None) };
    let map = match (major, map) {
        (Some(1), _) => None,
        (_, Some(m)) => Some(m),
        _ if !pairs.is_empty() => Some(pairs),
        _ => return Err("`GNU.sparse.size` without a map".into()),
    };
    let map = map.map(|m| blocks(&m)).transpose()?;
    Ok(Some(Sparse { name, size, map }))
}

fn numbers<'a>(items: impl Iterator<Item = &'a str>, what: &str) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for i in items {
        if out.len() > MAX_BLOCKS * 2 {
            return Err(format!("`{what}` lists more than {MAX_BLOCKS} blocks"));
        }
        out.push(i.trim().parse::<u64>().map_err(|_| format!("`{what}` holds `{i}`, not a number"))?);
    }
    Ok(out)
}

/// Offset/length pairs as blocks: in order, not overlapping, none past the u64 range.
fn blocks(flat: &[u64]) -> Result<Vec<(u64, u64)>, String> {
    if !flat.len().is_multiple_of(2) || flat.len() / 2 > MAX_BLOCKS {
        return Err(format!("a sparse map of {} numbers (pairs, at most {MAX_BLOCKS})", flat.len()));
    }
    let mut end = 0u64;
    let mut out = Vec::with_capacity(flat.len() / 2);
    for p in flat.chunks(2) {
        let (off, len) = (p[0], p[1]);
        if off < end {
            return Err("sparse blocks out of order or overlapping".into());
        }
        end = off.checked_add(len).ok_or("a sparse block past the end of the u64 range")?;
        out.push((off, len));
    }
    Ok(out)
}

/// The 1.0 map at the start of a member's data: its blocks, and the bytes it took (to its
/// 512-byte padding).
pub fn read_map(data: &mut dyn Read) -> Result<(Vec<(u64, u64)>, u64), String> {
    let mut taken = 0u64;
    let mut line = Vec::new();
    let mut next = |taken: &mut u64| -> Result<u64, String> {
        line.clear();
        let mut b = [0u8; 1];
        loop {
            if *taken >= MAX_MAP {
                return Err(format!("a sparse map longer than {MAX_MAP} bytes"));
            }
            match data.read(&mut b) {
                Ok(0) => return Err("the data ends inside its sparse map".into()),
                Ok(_) => *taken += 1,
                Err(e) => return Err(e.to_string()),
            }
            if b[0] == b'\n' {
                break;
            }
            line.push(b[0]);
        }
        std::str::from_utf8(&line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| "a sparse map entry that is not a number".into())
    };
    let n = next(&mut taken)?;
    if n > MAX_BLOCKS as u64 {
        return Err(format!("a sparse map of {n} blocks (at most {MAX_BLOCKS})"));
    }
    let mut flat = Vec::with_capacity(n as usize * 2);
    for _ in 0..n * 2 {
        flat.push(next(&mut taken)?);
    }
    let pad = taken.div_ceil(512) * 512 - taken;
    io::copy(&mut data.take(pad), &mut io::sink()).map_err(|e| e.to_string())?;
    Ok((blocks(&flat)?, taken + pad))
}

/// The expanded file: the blocks' data where they are, zeros between them and after the last.
pub struct Expanded<R> {
    data: R,
    blocks: Vec<(u64, u64)>,
    size: u64,
    at: u64,
    block: usize,
}

impl<R: Read> Expanded<R> {
    /// Err when the blocks reach past the file's size.
    pub fn new(data: R, blocks: Vec<(u64, u64)>, size: u64) -> Result<Self, String> {
        if blocks.last().is_some_and(|(o, l)| o + l > size) {
            return Err(format!("a sparse block past the file's size of {size} bytes"));
        }
        Ok(Expanded { data, blocks, size, at: 0, block: 0 })
    }
}

impl<R: Read> Read for Expanded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at >= self.size || buf.is_empty() {
            return Ok(0);
        }
        while let Some((o, l)) = self.blocks.get(self.block) {
            if self.at < o + l {
                break;
            }
            self.block += 1;
        }
        let (next_data, data_end) = self.blocks.get(self.block).map_or((self.size, self.size), |(o, l)| (*o, o + l));
        let (len, at) = (buf.len(), self.at);
        let room = |until: u64| len.min(usize::try_from(until - at).unwrap_or(usize::MAX));
        let n = if self.at < next_data {
            let n = room(next_data);
            buf[..n].fill(0);
            n
        } else {
            let n = self.data.read(&mut buf[..room(data_end)])?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the sparse member's data ends early"));
            }
            n
        };
        self.at += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(data: &[u8], blocks: Vec<(u64, u64)>, size: u64) -> Vec<u8> {
        let mut out = Vec::new();
        Expanded::new(data, blocks, size).unwrap().read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn holes_are_zeros_and_data_is_in_place() {
        assert_eq!(expand(b"abcd", vec![(2, 2), (6, 2)], 10), b"\0\0ab\0\0cd\0\0");
        assert_eq!(expand(b"", vec![], 3), b"\0\0\0");
        assert!(Expanded::new(&b"ab"[..], vec![(9, 2)], 10).is_err());
    }

    #[test]
    fn the_three_pax_forms() {
        let r = |v: &[(&'static str, &'static str)]| of_pax(v.iter().map(|(k, v)| (*k, v.as_bytes())));
        let old = r(&[
            ("GNU.sparse.size", "10"),
            ("GNU.sparse.numblocks", "2"),
            ("GNU.sparse.offset", "2"),
            ("GNU.sparse.numbytes", "2"),
            ("GNU.sparse.offset", "6"),
            ("GNU.sparse.numbytes", "2"),
        ]);
        assert_eq!(old, Ok(Some(Sparse { name: None, size: 10, map: Some(vec![(2, 2), (6, 2)]) })));
        let one = r(&[("GNU.sparse.size", "10"), ("GNU.sparse.map", "2,2,6,2"), ("GNU.sparse.name", "a/b")]);
        assert_eq!(one.unwrap().unwrap().map, Some(vec![(2, 2), (6, 2)]));
        let v1 = r(&[("GNU.sparse.major", "1"), ("GNU.sparse.minor", "0"), ("GNU.sparse.realsize", "10")]);
        assert_eq!(v1.unwrap().unwrap().map, None);
        assert_eq!(r(&[("path", "x")]), Ok(None));
        assert!(r(&[("GNU.sparse.size", "10"), ("GNU.sparse.map", "6,2,2,2")]).is_err(), "out of order");
        assert!(r(&[("GNU.sparse.size", "x")]).is_err());
    }

    #[test]
    fn a_10_map_is_read_to_its_padding() {
        let mut data = b"2\n2\n2\n6\n2\n".to_vec();
        data.resize(512, 0);
        data.extend_from_slice(b"abcd");
        let mut r = &data[..];
        let (blocks, taken) = read_map(&mut r).unwrap();
        assert_eq!((blocks, taken), (vec![(2, 2), (6, 2)], 512));
        assert_eq!(r, b"abcd");
        assert!(read_map(&mut &b"99999999\n"[..]).is_err(), "too many blocks");
        assert!(read_map(&mut &b"1\n5\n"[..]).is_err(), "ends inside the map");
    }
}
